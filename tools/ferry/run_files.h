/* `ferry run`'s regular files at storage speed (run_files.c): --input read through a ferry_file_t
 * source with the reads of the next batches in flight while earlier ones are on the GPU, each
 * into its ring entry's own buffer; --output written through a ferry_file_t sink at each batch's
 * offset once verified, the entry freed when its write completes. Streams (stdin, stdout,
 * devices) are not for these: cmd_run.c and run_verify.c read and write them in order. */
#ifndef FERRY_CLI_RUN_FILES_H
#define FERRY_CLI_RUN_FILES_H

#include "progress.h"
#include "run.h"

/* The batches of a regular --input file, read and submitted. */
typedef struct run_feed {
    run_state_t *st;
    ferry_file_t *src;
    ferry_pipeline_t *pl;
    cb_ctx_t *cbs;
    const char *cmd, *name; /* the command, --input as given */
    unsigned long long total, nbatches;
    size_t bb;                       /* bytes per batch */
    unsigned long long nsub, nbytes; /* out: batches and bytes submitted */
} run_feed_t;

/* Ring entries a file's reads (or writes) in flight may hold beyond the pipeline's own: as
 * many batches as fill the file's requests in flight (ferry_file_config_t defaults), plus one. */
size_t run_files_ring_extra(size_t batch_bytes);

/* Read every batch of @fd->src into free ring entries, reads ahead in flight, and submit each
 * when its read completes. Stops early on a signal. Returns false when a read or a submit
 * failed (printed); no read is in flight on return. */
bool run_feed_file(run_feed_t *fd, cli_progress_t *bar);

/* A verified batch (a verifier thread): start writing ring entry @e to st->sink at its offset.
 * Returns 0 (the entry is freed once written) or an errno value (not started: the caller frees
 * the entry). */
int run_sink_write(run_state_t *st, ring_entry_t *e);

/* The thread that collects the sink's completions and frees their entries. Returns CLI_OK or
 * CLI_FAIL (printed). */
int run_sink_start(const char *cmd, run_state_t *st, pthread_t *th);
/* After the verifiers stopped: wait for every write, join the thread and close st->sink
 * (st->sink becomes NULL; a close error becomes st->t.io_error). */
void run_sink_stop(run_state_t *st, pthread_t *th);

#endif
