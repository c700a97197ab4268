/* `ferry run`'s shared state, between the command (cmd_run.c), its verifier (run_verify.c:
 * the generated data, the digests of its reference, and the threads that check every finished
 * batch against them) and its report (run_report.c: the summary, text or --json, the rates and
 * what bound the run, and the --report page). */
#ifndef FERRY_CLI_RUN_H
#define FERRY_CLI_RUN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "ferry/io.h"

/* --verify: every batch checked, one in RUN_VERIFY_SAMPLE_EVERY (and the last), or none. */
typedef enum run_verify { RUN_VERIFY_FULL, RUN_VERIFY_SAMPLE, RUN_VERIFY_OFF } run_verify_t;
#define RUN_VERIFY_SAMPLE_EVERY 16

/* The reference's digests are XXH3-64 of blocks of this size (a batch's last block may be
 * shorter): a mismatch is narrowed to one block before the CPU reference of that block alone
 * is made again to find the first bad byte. A multiple of 4 (whole floats). */
#define RUN_DIGEST_BLOCK (4u << 20)
/* A file's batches are checked against their CPU reference in blocks of this size, each made
 * and compared while in cache. A multiple of 4. */
#define RUN_CHECK_BLOCK (256u << 10)
/* A batch is checked in units of this size, which the verifier threads share (a multiple of
 * both blocks above). */
#define RUN_VERIFY_UNIT RUN_DIGEST_BLOCK

typedef struct run_totals {
    uint64_t ok_gpu, ok_cpu, failed, mismatched;
    uint64_t verified_bytes; /* checked against the reference and matched */
    uint64_t done_bytes;     /* of batches that completed, checked or not */
    uint64_t checked;        /* batches checked */
    uint64_t first_bad_offset;
    uint64_t verify_ns; /* verifier threads' time checking (summed over the threads) */
    int io_error;
} run_totals_t;

typedef struct ring_entry {
    unsigned char *in;  /* input of the batch: own buffer (file) or a slice of the pool */
    unsigned char *out; /* output of the batch */
    unsigned char *own_in;
    bool out_pinned, in_pinned; /* from ferry_host_alloc (else page_alloc'd, staged) */
    size_t bytes;
    uint64_t offset; /* in the stream */
    size_t pool_off; /* generated data: where the input and its reference sit in the pool */
    int status, where;
    uint64_t seq; /* the batch's number, for a stream output written in order */
    bool ready;   /* a stream output: verified, waiting for the batches before it */
    /* its check, shared by the verifiers (run_verify.c), under the state's lock: units in all,
     * taken, not finished; the first bad byte found (bytes: none); a verifier without memory */
    size_t vunits, vnext, vleft, vbad;
    bool vnomem;
} ring_entry_t;

/* Shared by the submitting thread, the pipeline's callback and the verifier threads. */
typedef struct run_state {
    pthread_mutex_t lock;
    pthread_cond_t cv_free, cv_done;
    ring_entry_t *ring;
    size_t nring;
    size_t *freeq, nfree;
    size_t *doneq, dhead, dcount;
    bool stop;
    run_totals_t t;
    uint64_t callbacks;
    /* what verification needs */
    ferry_workload_t *wl;
    /* generated data: XXH3-64 of each RUN_DIGEST_BLOCK of each pool batch's reference output,
     * blocks_per_batch of them per batch, in pool order (NULL: a file, checked against its
     * CPU reference made batch by batch) */
    const uint64_t *digests;
    size_t blocks_per_batch;
    size_t batch_bytes;
    run_verify_t verify;
    uint64_t last_seq;  /* the last batch's number (UINT64_MAX: a stream, not known) */
    unsigned verifiers; /* verifier threads running */
    /* what held the run (run_report.c's bound): time the submitter waited for a free ring
     * entry while finished batches queued for a verifier, time it waited for one while the
     * output file's writes held the entries, and time it spent reading --input */
    uint64_t verify_wait_ns, write_wait_ns, read_ns;
    unsigned writes; /* output file writes in flight (the sink's) */
    int outfd;
    /* A stream output (stdout, a device) is written in batch order: the verifier that finds
     * the next batch ready writes it and those after it, one writer at a time. */
    bool ordered, writing;
    /* each batch's latency, submit to completion on the device's clock (the report's p50 and
     * p99), under lock */
    uint64_t *lat_ns;
    size_t nlat, cap_lat;
    uint64_t cut_seq;  /* the first batch that failed: the stream ends before it */
    uint64_t next_seq; /* the next batch to write */
    int signal;        /* SIGINT or SIGTERM taken: stop submitting */
    /* A regular output file: written at each batch's offset through this sink; the entry is
     * freed once its write completes (run_files.c) */
    ferry_file_t *sink;
    bool sink_stop, sink_started;
    char io_why[256]; /* the first output error's text ("": only t.io_error's errno) */
} run_state_t;

typedef struct cb_ctx {
    run_state_t *st;
    size_t idx;
} cb_ctx_t;

typedef struct run_opts {
    const char *workload;
    unsigned long long intensity;
    unsigned long long bytes;
    unsigned long long batch_bytes;
    const char *input, *output, *trace, *report;
    const char *verify; /* --verify full|sample|off */
    run_verify_t verify_mode;
    bool json, quiet, single_stream;
    bool bytes_set;                /* --bytes given: with --input, a limit */
    bool batch_set;                /* --batch-bytes given (under MPI: else at most a stripe) */
    bool output_stream;            /* --output is stdout or a device, written in order */
    bool output_file, output_null; /* --output is a regular file; /dev/null */
    bool input_file, input_stream; /* --input is a regular file; stdin or a device */
    int signal;                    /* the run was stopped by this signal (0: it was not) */
    bool report_done;              /* the report was written */
    unsigned long long tl_chunks;  /* --report: the chunks its timeline shows */
    /* a job over MPI ranks (run_mpi.c): --stripe-bytes, --resume, --journal */
    unsigned long long stripe_bytes;
    bool resume;
    const char *journal;
    const ferry_options_t *opts;
    int argc; /* the command line, for the report */
    char **argv;
} run_opts_t;

typedef struct run_outcome {
    const ferry_pipeline_stats_t *s;
    const run_totals_t *t;
    unsigned long long total, nbatches;
    double wall_s;
    bool ok;
    const run_state_t *st; /* the verifiers' figures (run_report.c's bound) */
    unsigned verifiers;
    unsigned long long pinned_bytes; /* the run's own buffers pinned by ferry_host_alloc */
    double pin_s;                    /* allocating, touching and pinning them */
    ferry_pipeline_t *pl;            /* for its devices' figures */
} run_outcome_t;

/* The pipeline's callback (a ferry thread, @arg a cb_ctx_t): hand the batch to the verifiers. */
void run_on_done(const ferry_batch_result_t *r, void *arg);
/* The ranks an MPI launcher (mpirun, srun) says this process is one of; 0: not launched so. */
int run_mpi_ranks(void);
/* `ferry run` as one rank of a job over MPI ranks (run_mpi.c), the flags parsed into @ro and
 * @opts; @verify_given: --verify was on the command line. Returns CLI_OK, CLI_USAGE or
 * CLI_FAIL. */
int run_mpi(const run_opts_t *ro, ferry_options_t *opts, bool verify_given);

/* Start up to @max verifier threads on @st; returns how many started. */
unsigned run_verifiers_start(run_state_t *st, pthread_t *th, unsigned max);
/* Let the verifiers finish what is queued, then join them (*n becomes 0). */
void run_verifiers_stop(run_state_t *st, pthread_t *th, unsigned *n);
/* Fill @pool (@bytes, whole batches of @batch, a multiple of 4) with the data of @seed, and
 * @digests (run_digest_count() of them) with the digests of its reference output under @wl,
 * in parallel. Returns false when out of memory. */
bool run_make_reference(uint64_t seed, const ferry_workload_t *wl, unsigned char *pool,
                        size_t bytes, size_t batch, uint64_t *digests);
/* Digest blocks per batch of @batch bytes. */
size_t run_digest_blocks(size_t batch);
/* Check one finished batch (@e) as @st says (--verify, the digests or the CPU reference) and
 * add what happened to @t. @scratch holds st->batch_bytes. Returns whether it completed and
 * matched (or was not to be checked). Used by the verifier threads; exposed for tests. */
bool run_verify_batch(const run_state_t *st, const ring_entry_t *e, unsigned char *scratch,
                      run_totals_t *t);
/* The same in parts, as the verifier threads share a batch: its units of RUN_VERIFY_UNIT (1
 * for a batch with nothing to read); unit @u checked, returning the first bad byte's offset in
 * the batch or e->bytes; and the batch counted into @t given the first bad byte @bad over all
 * its units (the return value of run_verify_batch). */
size_t run_verify_units(const run_state_t *st, const ring_entry_t *e);
size_t run_verify_unit(const run_state_t *st, const ring_entry_t *e, size_t u,
                       unsigned char *scratch);
bool run_verify_count(const run_state_t *st, const ring_entry_t *e, size_t bad, run_totals_t *t);
/* CLOCK_MONOTONIC in ns. */
uint64_t run_now_ns(void);
/* Wait on cv_free once (st->lock held), the time charged to what holds the ring's entries:
 * finished batches queued for a verifier (verify_wait_ns) or output writes (write_wait_ns). */
void run_wait_free(run_state_t *st);
/* "full", "sample" or "off". */
const char *run_verify_name(run_verify_t v);
/* Threads for helpers (data generation, verification): the CPUs but two, at most
 * RUN_MAX_HELPERS. */
#define RUN_MAX_HELPERS 16
unsigned run_helper_threads(void);

/* On the simulator, the run's end-to-end rate on the host its profile describes
 * (run_predict.c, docs/simulator.md): the least of the simulated transport rate, the host
 * memory's rate over the traffic each byte costs there, the verifiers' reading rate and the
 * storage's rates. have is false when the profile does not model the host. */
typedef struct run_predict {
    bool have;
    double gbps;       /* predicted end to end */
    double traffic;    /* bytes of host memory traffic per byte streamed */
    const char *bound; /* link, kernel, host memory, verification or storage */
    char why[200];
} run_predict_t;
void run_predict(const run_opts_t *ro, const ferry_host_props_t *h, double transport_gbps,
                 const char *device_bound, run_predict_t *p);

/* Print the run's summary, text or --json (ro->json). */
void run_print_summary(const run_opts_t *ro, ferry_runtime_t *rt, ferry_device_t *dev,
                       const run_outcome_t *o, unsigned long long chunk);
/* --report: record the op trace of the chunks the timeline shows (sets ro->tl_chunks). */
void run_report_trace_setup(run_opts_t *ro, ferry_options_t *opts);
/* --report: write the HTML page. Returns CLI_OK or CLI_FAIL (message printed). */
int run_write_report(const run_opts_t *ro, ferry_runtime_t *rt, ferry_device_t *dev,
                     ferry_pipeline_t *pl, const run_outcome_t *o);

#endif
