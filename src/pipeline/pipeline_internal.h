/* The pipeline's private header, shared by its files (pipeline.c the API, issue.c, complete.c,
 * plan.c): the slot, batch and trace records and the pipeline struct, its fields grouped by the
 * thread that owns them. Shared atomics are C11 atomics, each group on its own cache line; what
 * a field's comment says "under lock" is read and written with the pipeline's lock held. */
#ifndef FERRY_PIPELINE_INTERNAL_H
#define FERRY_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/runtime.h"
#include "ferry.h"
#include "monitor/linkmon.h"
#include "pipeline/watchdog.h"
#include "sched/sched.h"

#define FERRY__LAT_BUCKETS 16
/* Upper bounds in seconds; a last bucket (+Inf) follows. */
extern const double ferry__lat_bounds_s[FERRY__LAT_BUCKETS];

/* Three events per chunk, one after each op, carry the dependencies. They are untimed: on the
 * H200 a timed event cost the round trip 2% at 16 MiB chunks and 21% at 256 KiB (a timestamp
 * waits for its stream's work to drain; bench/results/2026-12-02-h200-explore-*). Times come
 * from a second set of timed events, used in one of two ways:
 *   TIME_ENDS    every chunk (the op_timing option "all"), or the chunks the trace records
 *                (every chunk, or the first trace_chunks): one timed event after each op,
 *                start times derived (retire_chunk), as six records per chunk would cost the
 *                issuing thread too much below 4 MiB chunks;
 *   sampled      one chunk in SAMPLE_EVERY otherwise, and the busy figures scaled up from the
 *                sampled chunks. The sampled chunk is TIME_ENDS too, and the chunks before it
 *                that ran last on its streams (ANCHORS_MAX at most: the copy streams' and the
 *                compute streams' count) are TIME_ANCHOR: their ends are timed (the timed
 *                events stand in for their untimed ones, so sampling adds no event record)
 *                and give the sampled chunk's starts, but they are not counted. A plan with
 *                more streams than that takes TIME_SAMPLE: timed events before and after
 *                each op of the sampled chunk.
 * The traced chunks come first, so a traced chunk never derives its start from an untimed
 * predecessor. */
enum { EV_H2D_END, EV_COMP_END, EV_D2H_END, EV_N };
enum {
    TEV_H2D_START,
    TEV_H2D_END,
    TEV_COMP_START,
    TEV_COMP_END,
    TEV_D2H_START,
    TEV_D2H_END,
    TEV_N
};
enum chunk_timing { TIME_NONE, TIME_ENDS, TIME_SAMPLE, TIME_ANCHOR };
#define LADDER_MAX 3
/* The bandwidth monitor's window: timed copies per direction. */
#define BW_WINDOW      8u
#define LADDER_HEALTHY 64u
/* Prime, so that the sampled chunks visit every stream of a round-robin plan (at most 16). */
#define SAMPLE_EVERY 31u
/* Chunks in a copy group, at most (option coalesce_bytes). */
#define GROUP_MAX 16u
/* Chunks timed ahead of a sampled chunk for its starts, at most. */
#define ANCHORS_MAX 4u

/* A batch is "light" when any thread may issue it without blocking: no prepare callback (it is
 * the caller's code and may block, and must run on a ferry thread), every chunk fits in the
 * slots at once, and its staging copy is short. Measured on the 2-core VM: handing each small
 * batch to the issuer thread cost ~0.3 context switches and ~4 us of host time per batch. */
#define LIGHT_MAX_BYTES (64u << 10)
/* Light batches a submitting thread issues from the queue, beyond its own, before it hands the
 * rest to the issuer thread: a caller is not captured by other threads' work. */
#define CALLER_QUEUE_BUDGET 16u
/* Most chunks the completion thread retires per pass (depth is at most 64). */
#define MAX_PASS 64
/* How long the completion thread watches for new work before it sleeps: a small batch is issued
 * in ~1-2 us, so this catches the next one, while a long idle period costs one futex sleep. */
#define COMPLETION_SPIN_NS 10000u

typedef struct batch_rec {
    uint64_t id;
    ferry_batch_t b;
    ferry_done_fn cb;
    void *arg;
    uint32_t nchunks;
    uint32_t nslots;              /* slots it takes: nchunks / copy group, rounded up */
    _Atomic uint32_t chunks_left; /* completion thread, and a CPU-direct holder */
    _Atomic uint32_t cpu_chunks;  /* chunks the CPU fallback produced */
    _Atomic int status;           /* first error wins (compare-exchange) */
    bool light;
    uint64_t submit_ns;
    struct batch_rec *next; /* free list, ready stack, finished list */
} batch_rec_t;

typedef struct slot {
    unsigned char *h_in, *h_out;  /* pinned pool slots */
    void *d_in, *d_out;           /* device buffers */
    ferry_be_event_t *ev[EV_N];   /* untimed */
    ferry_be_event_t *tev[TEV_N]; /* timed */
    ferry_be_event_t *dep[EV_N];  /* the chunk in flight's op ends: ev[], or tev[] when timed */
    unsigned char timing;         /* enum chunk_timing of the chunk in flight */
    unsigned char anchor_ends;    /* TIME_ANCHOR: the ends the next sample needs (1 H2D, 2
                                     kernel, 4 D2H) */
    bool traced;                  /* its ops go into the trace */
    struct slot *next_free;
    /* The chunk bound to the slot while it is in flight. */
    batch_rec_t *batch;
    uint64_t issue_ns;       /* device clock when its H2D was issued */
    uint32_t chunk;          /* the first chunk of the group bound to the slot */
    uint32_t nsub;           /* chunks in the group: one copy each way, a kernel each */
    size_t offset, bytes;    /* the group's, within the batch */
    unsigned h2d, comp, d2h; /* stream indices into p->streams */
    bool copy_out;           /* output lands in h_out and must be copied to the batch */
    const void *host_in;     /* the chunk's input in host memory (for the CPU fallback) */
    bool gpu_skipped;        /* the GPU path was lost before this chunk was issued */
    bool abandoned;          /* hung for good: the slot is never used again */
    uint64_t seq;            /* the chunk's sequence number (kernel args, abort word) */
    uint32_t attempt;        /* GPU attempts that failed so far (retries run at a lower level) */
    char errmsg[200];        /* an issue failure's message (the issuing thread's error text) */
    int err;
    struct slot *next_inflight;
} slot_t;

typedef struct trace_rec {
    uint64_t batch;
    uint32_t chunk;
    uint16_t stream;
    char kind; /* 'h', 'c', 'd'; 'a' an alert (instant): stream holds its trace_note */
    uint64_t start, end, bytes;
    uint32_t nsub; /* the chunks of its copy group (0 read as 1) */
} trace_rec_t;

/* Instant events in the trace. */
enum trace_note { NOTE_BW_H2D, NOTE_BW_D2H, NOTE_DEADLINE, NOTE_GPU_LOST };

/* Instant events in the trace. */

/* Who runs the queue. A borrowed thread (a submitter, the completion thread) issues light
 * batches only and never waits for slots; the issuer thread issues anything, and waits for
 * slots for the batches that are not light. */
enum issue_role { ROLE_CALLER, ROLE_COMPLETER, ROLE_ISSUER };

/* Cache line: the shared atomics of one writer sit on lines of their own, so that a thread that
 * writes one does not take the line from threads reading another. */
#define FERRY__CACHE_LINE 64

/* The plan: set by create, read-only afterwards (depth and slot_wake may shrink at create when
 * device memory runs short), read by every thread without the lock. */
struct ferry__pipe_plan {
    size_t chunk;
    unsigned group; /* chunks per copy at most (coalesce_bytes): a slot holds a group */
    unsigned depth, ncopy, ncomp, nstreams;
    bool single; /* one stream for everything */
    int copy_prio, comp_prio;
    bool nonblocking;
    bool caller_issues; /* submitters may issue light batches on their own thread */
    size_t queue_depth;
    size_t stage_threshold;
    uint64_t trace_chunks; /* tracing: chunks recorded (the first ones); 0: all */
    bool time_all;         /* every chunk timed (TIME_ENDS): op_timing "all" */
    bool time_none;        /* no chunk timed but traced ones: op_timing "off" */
    unsigned anchors;      /* how many chunks back a sampled chunk's starts lie, at most */
    bool virtual_clock;    /* simulator: the device clock is virtual */
    double deadline_factor;
    uint64_t deadline_floor_ns;
    double bw_alert_ratio;
    double bw_foreign_ratio;
    unsigned gpu_retries; /* retries on the GPU after a non-sticky failure */
};

/* The API and the submitters' state: under lock. */
struct ferry__pipe_api {
    bool releasing;   /* a close is releasing the resources */
    bool final_ready; /* the stats are those of final */
    ferry_pipeline_stats_t final;
    bool issuer_started, completer_started;
    /* The issue token: its holder alone pops the queue, binds slots and issues, so batches are
     * issued in queue order and one thread at a time drives the streams. */
    bool token;
    bool issuer_turn;      /* the token was handed to the issuer thread */
    size_t nqueued;        /* accepted into the queue, not yet taken for issue (incl. pending) */
    unsigned submitting;   /* submits on their way to the queue, not yet counted in nqueued */
    bool comp_in_pass;     /* virtual clock: the completion thread runs a pass (see pass_begin) */
    unsigned pass_waiters; /* threads waiting on pass_cv for it to end */
    slot_t *free_slots;
    unsigned nfree_slots;
    unsigned nabandoned; /* slots of hung chunks, retired but never reused */
    unsigned slot_wake;  /* free slots that wake the issuer thread waiting for one */
    bool slot_waiting;   /* the issuer thread waits on slot_cv */
    bool comp_exit;
    /* Batch records for reuse: submitters pop free_recs and refill it from sh.returned_recs,
     * which the completion thread pushes to without the lock. Records live as long as the
     * pipeline; their number is the most batches ever alive at once. */
    batch_rec_t *free_recs;
    bool closing;
    uint64_t next_id;
    uint64_t submitted;
    ferry_pipeline_stats_t st; /* except the counters in sh */
    /* The completion thread's figures as of its last pass. */
    uint64_t bw_alerts_seen;
    double bw_ratio_seen[2];
    uint64_t chunks_retried_seen, steps_down_seen, steps_up_seen;
    uint64_t chunks_cpu_seen, failure_records_seen;
    trace_rec_t *trace;
    size_t ntrace, trace_cap;
};

/* The issue token's holder (whichever thread holds it). */
struct ferry__pipe_issue {
    batch_rec_t *pending;   /* popped by a holder that could not issue it yet */
    uint64_t chunk_counter; /* round-robin position */
    unsigned sample_in;     /* chunks to go before the next sampled one */
    unsigned char *cpu_tmp; /* input and output of CPU-direct chunks (2 x chunk) */
};

/* The completion thread's own state. */
struct ferry__pipe_comp {
    /* The ladder's level 1 (sh.level is the level): after a non-sticky failure one step down,
     * after LADDER_HEALTHY good chunks in a row one step back up. */
    unsigned healthy;
    /* The bandwidth monitor (the _seen copies in api). */
    struct bw_win {
        uint64_t bytes[BW_WINDOW], ns[BW_WINDOW];
        uint64_t sum_bytes, sum_ns; /* of the window, kept as samples come and go */
        unsigned n, at;
        bool alerting;
        double ratio;
    } bw[2];
    uint64_t bw_alerts;
    uint64_t steps_down, steps_up;
    uint64_t lat_ewma_ns; /* running mean of issue-to-end latency */
    /* When the oldest chunk of each D2H stream became the oldest (the previous one retired): a
     * chunk's deadline runs from then or from its issue, whichever is later, so that chunks
     * queued behind a slow one are not blamed for it. */
    uint64_t head_since[FERRY_STATS_MAX_STREAMS];
    /* The heads last published to the watchdog, and the latency with them. */
    ferry__wd_head_t pub_heads[FERRY_STATS_MAX_STREAMS];
    uint64_t pub_lat;
    bool pub_any;
    /* Retries on the GPU after a non-sticky failure: on a stream and an event of their own,
     * made at the first retry. */
    ferry_be_stream_t *retry_stream;
    ferry_be_event_t *retry_ev;
    uint64_t chunks_retried;
    FILE *failure_log;
    uint64_t chunks_cpu, failure_records;
    uint64_t first_start, last_end;
    bool any_retired;
    uint64_t stream_end[FERRY_STATS_MAX_STREAMS]; /* last end per stream */
    uint64_t comp_end;                            /* end of the union of the timed kernels so far */
    uint64_t stream_busy[FERRY_STATS_MAX_STREAMS];  /* of the timed ops */
    uint64_t stream_ops[FERRY_STATS_MAX_STREAMS];   /* ops retired, timed or not */
    uint64_t stream_timed[FERRY_STATS_MAX_STREAMS]; /* ops timed */
    uint64_t chunks_retired, chunks_timed;
    /* Where each copy direction's union of busy intervals has got to, and the sequence number
     * of the last timed chunk (the union is exact over consecutive timed chunks). */
    uint64_t eng_end[2], eng_seq;
};

/* The watchdog's side: its handle (made and destroyed by the API) and what its thread counts. */
struct ferry__pipe_wdog {
    ferry__watchdog_t *wd;
    alignas(FERRY__CACHE_LINE) _Atomic uint64_t deadlines_passed;
};

/* Atomics read and written by several threads, on cache lines by writer. */
struct ferry__pipe_shared {
    /* Hand-over to the completion thread, lock-free: chunks issued (a stack, reversed by the
     * completion thread) and empty batches; work_seq moves on every hand-over and whenever
     * busy drops, and only a sleeping completion thread (comp_sleeping) is signalled. busy: 1
     * while a holder is issuing; 0 when nobody is, or the issuer thread waits for a slot. On
     * the simulator the completion thread advances virtual time only while it is 0, so host
     * work in real time never overlaps with device time that has not been charged. */
    alignas(FERRY__CACHE_LINE) _Atomic(slot_t *) incoming;
    _Atomic(batch_rec_t *) ready;
    _Atomic uint64_t work_seq;
    _Atomic int busy;
    _Atomic uint64_t chunks_issued;
    _Atomic uint64_t staged_bytes;
    _Atomic uint64_t chunks_cpu_direct; /* CPU chunks that needed no slot */
    /* Simulator only: the device clock as last read by a pipeline thread. */
    _Atomic uint64_t clock_seen;
    /* The completion thread's side. */
    alignas(FERRY__CACHE_LINE) _Atomic int comp_sleeping;
    _Atomic(batch_rec_t *) returned_recs;
    _Atomic uint64_t completed; /* callbacks returned */
    _Atomic uint64_t done_gpu, failed, done_cpu;
    _Atomic uint64_t failure_log_errors; /* records not written */
    /* Batch latency, submit to callback on the device clock (pipeline_internal.h). */
    _Atomic uint64_t lat_count, lat_sum_ns, lat_buckets[FERRY__LAT_BUCKETS + 1];
    /* Submitters and the API. */
    alignas(FERRY__CACHE_LINE) _Atomic unsigned entering; /* submits inside the call */
    _Atomic unsigned drain_waiters;                       /* changed under lock */
    _Atomic int released; /* close released the resources (read by the runtime) */
    _Atomic bool shut;    /* submits return FERRY_ECLOSED (written under lock) */
    /* Faults, read on every chunk, rarely written. gpu_lost: a sticky error ended the GPU path;
     * every later chunk takes the CPU fallback. hang_lost: it ended because a kernel ignored the
     * abort flag. level: the ladder's level 1, 0 the plan as configured; 1 one compute stream;
     * 2 at most 2 chunks in flight; 3 synchronous: one stream, one chunk in flight. */
    alignas(FERRY__CACHE_LINE) _Atomic int gpu_lost;
    _Atomic int hang_lost;
    _Atomic int level;
    _Atomic bool tracing;
};

struct ferry_pipeline {
    /* Set at create, read-only until release. */
    ferry_device_t *dev;
    /* Lifetime. close shuts the pipeline (submits refused from then on) and, once nothing is
     * in flight, releases its threads, streams and memory; the handle itself lives until
     * ferry_pipeline_destroy or the runtime's destroy, so that every call on a closed
     * pipeline still finds it. */
    ferry__rt_child_t child;
    unsigned serial; /* for names in messages: the pipelines made in this process */
    ferry_stage_t stage;
    char stage_name[64];
    struct ferry__pipe_plan plan;
    bool host_pinned;         /* the pool's slots are pinned (else pinning was refused) */
    unsigned context_streams; /* streams active on the device when this pipeline was made */
    bool counted_streams;     /* this pipeline's streams are in dev->active_streams */
    ferry_pool_t *pool;
    slot_t *slots;
    ferry_be_stream_t *streams[FERRY_STATS_MAX_STREAMS];
    char stream_kind[FERRY_STATS_MAX_STREAMS];
    ferry_bqueue_t *queue;
    ferry_workers_t *workers;
    pthread_t issuer, completer;
    /* The link's measured copy curves (core/runtime.h); NULL: judged against the theoretical
     * rate alone. */
    struct ferry_sim_profile *link_prof;
    void (*on_alert)(const ferry_alert_t *, void *);
    void *alert_arg;
    char failure_log_path[256];
    /* The link monitor (NULL: off, or no counter): the pipeline's own bytes by retirement time
     * (completion thread) against all the link's traffic; above bw_foreign_ratio of the link's
     * rate, the rest is another process's. */
    ferry__linkmon_t *link;
    ferry__rate_ring_t own_ring;

    pthread_mutex_t lock;
    pthread_cond_t issue_cv; /* the token was handed to the issuer thread, or closing */
    pthread_cond_t slot_cv;  /* slots were freed for the issuer thread */
    pthread_cond_t work_cv;  /* the completion thread sleeps here (work_seq moved) */
    pthread_cond_t drain_cv; /* batches completed while a drain waits */
    pthread_cond_t pass_cv;  /* a completion pass ended (virtual clock) */

    struct ferry__pipe_api api;
    struct ferry__pipe_issue iss;
    struct ferry__pipe_comp comp;
    struct ferry__pipe_wdog wdog;
    struct ferry__pipe_shared sh;
};

void ferry__latency_observe(ferry_pipeline_t *p, uint64_t ns);
/* Non-cumulative counts per bucket (FERRY__LAT_BUCKETS + 1 of them), the sum and the count. */
void ferry__latency_read(ferry_pipeline_t *p, uint64_t *buckets, uint64_t *sum_ns, uint64_t *count);
const char *ferry__pipeline_stage_name(const ferry_pipeline_t *p);

#endif
