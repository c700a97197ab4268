/* The fallback ladder (docs/faults.md) and failure records, below the pipeline: the ladder
 * decides over a small state the pipeline owns (a level read by every issuing thread, the
 * completion thread's run of healthy chunks and its counts), and the pipeline executes the step:
 * a retry on the GPU at a lower level, the CPU fallback, or a failed batch. Failure records are
 * JSON lines, one per failed attempt, appended to the failure_log option's file. */
#ifndef FERRY_FAULT_LADDER_H
#define FERRY_FAULT_LADDER_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"

/* Level 0 the plan as configured; 1 one compute stream; 2 at most 2 chunks in flight; 3
 * synchronous: one stream, one chunk in flight. */
#define LADDER_MAX 3
/* Healthy chunks in a row that climb one level back up. */
#define LADDER_HEALTHY 64u

typedef struct ferry__ladder {
    _Atomic int level;    /* read by the issuing threads, written by the completion thread */
    unsigned gpu_retries; /* GPU attempts a failed chunk may have again (option gpu_retries) */
    /* The completion thread's, on a line of their own: level is read on every chunk issued. */
    alignas(64) unsigned healthy;
    uint64_t steps_down, steps_up;
} ferry__ladder_t;

static inline int ferry__ladder_level(const ferry__ladder_t *l)
{
    return atomic_load_explicit(&l->level, memory_order_relaxed);
}

/* A non-sticky failure: one step down, unless at the bottom. Completion thread. */
void ferry__ladder_step_down(ferry__ladder_t *l);
/* A chunk retired healthy: after LADDER_HEALTHY in a row, one step back up. Completion thread. */
void ferry__ladder_healthy(ferry__ladder_t *l);
/* Whether a failed chunk gets another GPU attempt: a non-sticky error (not a hang: a kernel past
 * its deadline would likely hang again), retries left, and @eligible (the GPU path alive, the
 * chunk reached the GPU, its slot is not abandoned and its input is still at hand). */
bool ferry__ladder_may_retry(const ferry__ladder_t *l, int err, uint32_t attempt, bool eligible);

/* The failure log: the file, its name for messages, records written and records lost. */
typedef struct ferry__failure_log {
    FILE *f; /* NULL: no log (records are still counted) */
    char path[256];
    uint64_t records;              /* completion thread */
    _Atomic uint64_t write_errors; /* records not written */
} ferry__failure_log_t;

/* One failed attempt: enough to find the chunk again and to see what the device was asked. */
typedef struct ferry__failure_rec {
    uint64_t device_ns, batch, issue_ns;
    uint32_t attempt, chunk, chunks;
    const char *stage;
    size_t offset, bytes, chunk_bytes;
    unsigned h2d, comp, d2h, copy_streams, compute_streams, depth;
    int blocks;
    const void *host_in, *out, *d_in, *d_out;
    int err;
    const char *msg, *action; /* action: "retry", "cpu", "device" (another of a set's) or
                                 "failed" */
    bool gpu_lost;
} ferry__failure_rec_t;

/* A worker process that ended (isolation=process): who, how, why, what it held and what was
 * done. */
typedef struct ferry__worker_end {
    int device;
    const char *stage;
    int pid;
    uint32_t generation;
    int exit_status;       /* -1 when a signal ended it */
    int signal;            /* 0 when it exited */
    const char *cause;     /* what it said or what was seen ("a sticky error", "hung past its
                              deadline"); "" when nothing was */
    unsigned in_flight;    /* batches sent to it and not reported */
    uint64_t oldest_batch; /* UINT64_MAX: none */
    const char *action;    /* "spare", "new worker", "retired" */
} ferry__worker_end_t;

/* Open @path for appending; NULL or "" means none. Returns 0 or FERRY_EIO. */
int ferry__failure_log_open(ferry__failure_log_t *fl, const char *path);
void ferry__failure_log_close(ferry__failure_log_t *fl);
/* Count the record and append it; a record that cannot be written is counted in write_errors
 * and said once. */
void ferry__failure_log_write(ferry__failure_log_t *fl, const ferry__failure_rec_t *r);
/* Likewise a worker's end: a record of "kind":"worker". */
void ferry__failure_log_worker(ferry__failure_log_t *fl, const ferry__worker_end_t *e);

#endif
