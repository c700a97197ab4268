/* Worker processes (isolation=process): the messages between a pipeline's proxy in the
 * application (remote.c) and the worker that runs the device's pipeline (worker.c), over a
 * channel (proc/chan.h), one message a batch each way: SUBMIT, FAIL, DONE and BEAT through its
 * shared rings (their first FERRY__WK_HOT bytes), the others over its socket. A worker is forked
 * from the runtime's helper (proc/zygote.h) and starts from a hello (below) that carries everything
 * it needs: the backend, the options as text, the pipeline's config, the stage (its functions are
 * the program's, valid in the worker; its user data copied when the stage says how many bytes it
 * is, else passed as is), and where the runtime's shared memory arena is. Batches travel as
 * pointers into regions of that arena, which the worker maps at the same addresses (MAP).
 * docs/architecture.md, "Worker processes", says why and what is not done yet. */
#ifndef FERRY_PIPELINE_WORKER_H
#define FERRY_PIPELINE_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "ferry/connections.h"

#define FERRY__WK_MAGIC 0x66727779u /* "frwy" */

enum ferry__wk_kind {
    /* the proxy's */
    FERRY__WK_MAP = 1, /* fd: a region [base, base + bytes) to map and register */
    FERRY__WK_SUBMIT,  /* a batch: seq, in, out, bytes, user */
    FERRY__WK_CLOSE,   /* drain, close, send STATS, exit 0 */
    FERRY__WK_FAIL,    /* a batch that failed before it was sent (its prepare): seq, status,
                          answered with its DONE, so that its callback too runs in order */
    FERRY__WK_MEASURE, /* ferry_connections_measure on its device, nothing in flight: streams
                          in chunks, a_ns in submit_ns, b_ns in done_ns, reps in status */
    /* the worker's */
    FERRY__WK_READY,    /* the pipeline is made (status 0), or why not (status, text) */
    FERRY__WK_DONE,     /* a batch: seq, status, where, chunks, submit_ns, done_ns */
    FERRY__WK_LOST,     /* its GPU path ended (text): it finishes nothing more and exits */
    FERRY__WK_STATS,    /* its pipeline's figures (stats), before it exits on CLOSE */
    FERRY__WK_MEASURED, /* MEASURE's answer: status (text), meas */
    FERRY__WK_BEAT,     /* alive: every quarter of option worker_deadline_ms, while its pipeline
                           finishes chunks or has none in flight */
};

/* The fields before text are all that SUBMIT, FAIL, DONE and BEAT use: the ring carries
 * FERRY__WK_HOT bytes of them. */
typedef struct ferry__wk_msg {
    uint32_t kind;
    int32_t status;
    uint64_t seq;
    void *in, *out; /* SUBMIT; MAP: base in in */
    uint64_t bytes; /* SUBMIT, MAP */
    void *user;     /* SUBMIT: the batch's user pointer, passed as it is */
    int32_t where;  /* DONE */
    uint32_t chunks;
    uint64_t submit_ns, done_ns;
    /* DONE: the worker pipeline's figures so far (ferry_pipeline_stats: the device's clock) */
    uint64_t elapsed_ns, busy_ns[3], chunks_all, chunks_cpu;
    char text[256];               /* READY, LOST */
    ferry_pipeline_stats_t stats; /* STATS */
    ferry_conn_measure_t meas;    /* MEASURED */
} ferry__wk_msg_t;
#define FERRY__WK_HOT offsetof(ferry__wk_msg_t, text)
/* Whether messages of @kind go through the rings. */
#define FERRY__WK_IS_HOT(kind)                                                                     \
    ((kind) == FERRY__WK_SUBMIT || (kind) == FERRY__WK_FAIL || (kind) == FERRY__WK_DONE ||         \
     (kind) == FERRY__WK_BEAT)
/* A worker's channel: its rings hold this many messages each way (at least; the proxy keeps
 * fewer batches than this in flight, so SUBMITs always fit). */
#define FERRY__WK_RING 256

/* What a worker is started with (the zygote's message); the options follow it as
 * "name=value\n" text, then the user data's bytes. */
typedef struct ferry__wk_hello {
    uint32_t magic;
    uint32_t generation; /* 0 for the first worker of a pipeline; a replacement's is higher */
    char backend[16];
    int device;
    ferry_pipeline_config_t cfg; /* device, devices and stage are not used */
    ferry_gpu_fn gpu;
    ferry_cpu_fn cpu;
    void *user;          /* passed as is when user_bytes is 0 */
    uint64_t user_bytes; /* else copied: this many bytes after the options */
    double ns_per_byte;
    uint64_t granularity;
    char stage_name[64];
    void *arena;
    uint64_t arena_bytes;
    uint32_t options_len;
} ferry__wk_hello_t;

/* A worker's exit status: 0 after a CLOSE; 2 when it cannot start (READY says why); after a
 * LOST, 3 (a sticky error) or 5 (a hung kernel), which say why even if its LOST is lost; 4
 * when the socket fails. */
#define FERRY__WK_EXIT_STICKY 3
#define FERRY__WK_EXIT_HUNG   5

/* The worker's main: the zygote's entry (proc/zygote.h). fds are its channel's
 * (ferry__chan_attach). */
int ferry__worker_main(const void *msg, size_t len, const int *fds, unsigned nfds);

#endif
