/* What remote.c and remote_start.c share: the application's side of a pipeline in a worker
 * process (remote.h). remote_start.c makes a worker's start message and starts it; remote.c has
 * the batches, the reader thread and the worker's replacement. */
#ifndef FERRY_PIPELINE_REMOTE_INTERNAL_H
#define FERRY_PIPELINE_REMOTE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "fault/ladder.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/worker.h"
#include "proc/chan.h"
#include "proc/shm.h"
#include "proc/zygote.h"

#define RM_RESPAWNS 3 /* tries: of a worker to start, of a batch that ends its workers */
/* workers in a row that end before they finish a batch: retired (three batches in a row
 * found to end every worker, RM_RESPAWNS each) */
#define RM_BARREN    9
#define RM_STAGE_MIN ((size_t)2 << 20)
#define RM_EXIT_WAIT 2000000000u /* ns a worker that said LOST, or closed, has to exit */
#define RM_CPU_CHUNK ((size_t)8 << 20)
#define RM_REGIONS   64 /* regions of ferry_host_alloc memory a proxy keeps track of */
#define RM_NO_STAGE  UINT32_MAX

typedef struct rm_batch {
    uint64_t seq;
    ferry_batch_t b; /* the caller's */
    ferry_done_fn cb;
    void *arg;
    unsigned stg;                /* its staging region; RM_NO_STAGE: its own memory is shared */
    unsigned char *in_p, *out_p; /* where the worker reads and writes it */
    int rin, rout;               /* RM_NO_STAGE: its regions (r->regions), -1 for none */
    bool ready;                  /* its input is staged: it may be sent (under wmu and mu) */
    unsigned tries;              /* workers that ended while it was the oldest in flight in them */
    uint32_t sent;               /* the generation of the worker it was sent to, plus one */
    int fail;                    /* its prepare failed: sent as FAIL */
    uint64_t submit_ns;
    struct rm_batch *next;
} rm_batch_t;

/* A region of ferry_host_alloc memory (shared: isolation=process) that batches were in. */
typedef struct rm_region {
    uint64_t serial; /* proc/shm.h; 0: a free entry */
    void *base;
    size_t bytes;
    int fd;              /* a descriptor of it, this entry's */
    uint32_t sent;       /* the generation of the worker it was last mapped in, plus one */
    uint32_t spare_sent; /* likewise of the spare */
    unsigned refs;       /* batches in flight in it */
} rm_region_t;

/* A worker started and ready (its READY read). */
typedef struct rm_worker {
    ferry__chan_t *ch; /* its channel (proc/chan.h) */
    ferry__zyg_proc_t proc;
    uint32_t gen;
    ferry_pipeline_stats_t stats; /* its READY's */
} rm_worker_t;

typedef struct rm_stage {
    ferry__shm_t r;
    bool busy;
    uint32_t sent;       /* the generation of the worker it was last mapped in, plus one */
    uint32_t spare_sent; /* likewise of the spare */
} rm_stage_t;

struct ferry__remote {
    ferry_pipeline_t *h;
    ferry_runtime_t *rt;
    ferry_device_t *dev;
    ferry_stage_t stage;
    ferry__wk_hello_t hello;
    char *opts, *inj; /* the options as text; option inject's line (the first worker's) */
    size_t olen, ilen;
    size_t chunk;
    unsigned limit;
    bool nonblocking;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rm_batch_t *head, *tail;
    unsigned nfl, entering;
    rm_stage_t **stg; /* capstg of them; a region's record never moves */
    unsigned nstg, capstg;
    rm_region_t regions[RM_REGIONS];
    uint64_t staged; /* batches copied through staging (not in shared memory) */
    uint64_t next_seq;
    bool shut, released, closing, retired, reader_done;
    /* the worker, replaced by the reader; written under both locks, read under either */
    pthread_mutex_t wmu;
    ferry__chan_t *ch; /* NULL: none */
    ferry__zyg_proc_t proc;
    uint32_t generation;
    pthread_t reader;
    unsigned deadline_ms; /* option worker_deadline_ms */
    const char *killed;   /* why the reader killed the worker (its deadline); the reader's */
    bool reader_started;
    /* figures, under mu */
    uint64_t submitted, done_gpu, done_cpu, failed, bytes, first_ns, last_ns;
    uint64_t restarts, recovery_ns, recover_t0;
    unsigned barren; /* workers in a row that ended without finishing a batch */
    bool solo;       /* the worker runs the oldest batch alone (replace); under wmu and mu */
    /* the device's figures (its clock) as the workers reported them: the ended ones' summed,
     * the one running now's latest */
    ferry__wk_msg_t ended, now;
    /* the warm spare (remote_spare.c), under mu; its thread's own fields besides */
    bool want_spare, spare_ready, spare_busy, spare_thread;
    rm_worker_t spare;
    uint32_t next_gen; /* generations given out, under mu */
    /* ferry_pipeline_connections_measure: asked, answered (by the reader), the answer */
    bool measuring, measured;
    int meas_status;
    ferry_conn_measure_t meas;
    char meas_text[256];
    ferry_pipeline_stats_t wstats;
    /* option failure_log: a record of each worker that ended (the workers append their own
     * chunks' records to the same file); written by the reader under mu */
    ferry__failure_log_t flog;
};

/* A message to a worker over its channel's socket, @fd (-1: none) with it; or a hot one
 * (worker.h: SUBMIT, FAIL) through its ring. Never waits: a full socket or ring is -1 (EAGAIN),
 * and so is a closed channel (NULL). */
int ferry__rm_send(ferry__chan_t *ch, const ferry__wk_msg_t *m, int fd);
/* One message from a worker, waiting up to @timeout_ms (-1: for ever): 1, 0 when the time
 * passed, -1 at the end (the worker ended and everything it sent was read). */
int ferry__rm_recv(ferry__chan_t *ch, ferry__wk_msg_t *m, int timeout_ms);
/* Close and free a worker's channel (NULL: a no-op): the worker reads the end and exits. */
void ferry__rm_hangup(ferry__chan_t *ch);
/* @r's hello (the worker's start message but its options and user data), from @cfg; its
 * device's connections by option connections_per_device. Returns 0 or the error. */
int ferry__rm_make_hello(struct ferry__remote *r, const ferry_pipeline_config_t *cfg);
/* Start a worker of generation @gen and wait for its READY, into @out. The first worker
 * (generation 0) gets option inject's faults, the others none. Returns 0 or the worker's
 * error, with its text. */
int ferry__rm_start(struct ferry__remote *r, uint32_t gen, rm_worker_t *out);
/* Make @w r's worker (r->ch, r->proc, r->generation and r->wstats, under r->mu). */
void ferry__rm_install(struct ferry__remote *r, const rm_worker_t *w);
/* Both. */
int ferry__rm_spawn(struct ferry__remote *r, uint32_t gen);

/* The region table (remote_regions.c). Send region @i (-1: none) to the worker if it has not
 * got it (under wmu); 0, or -1 (a full socket, an ended worker). */
int ferry__rm_send_shared(struct ferry__remote *r, int i);
/* The entry of block @g, one batch more in it (under mu); -1 when none is free. */
struct ferry__host_shared;
int ferry__rm_region_get(struct ferry__remote *r, const struct ferry__host_shared *g);
/* @b is done with its regions (under mu). */
void ferry__rm_regions_put(struct ferry__remote *r, const rm_batch_t *b);
/* A block made (@bytes > 0) or freed (0): the runtime's on_share (takes wmu and mu). */
void ferry__rm_share(struct ferry__remote *r, void *base, size_t bytes, uint64_t serial);
/* ferry__host_shared_each's callback for the blocks made before the pipeline (@arg: r). */
void ferry__rm_share_existing(void *arg, const struct ferry__host_shared *g);

/* The warm spare (remote_spare.c, option worker_spare): a worker started in the background,
 * ready, its regions mapped, that replace() makes the worker at once. Start one (when the
 * option asks and none is there or starting); take it (false when none is ready: a new worker
 * must be started); stop it (close: it exits). On the reader's thread, or the creator's. */
void ferry__rm_spare_start(struct ferry__remote *r);
bool ferry__rm_spare_take(struct ferry__remote *r);
void ferry__rm_spare_stop(struct ferry__remote *r);

#endif
