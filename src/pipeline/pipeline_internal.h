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

#include "base/span_union.h"
#include "core/runtime.h"
#include "ferry.h"
#include "monitor/bandwidth.h"
#include "monitor/latency.h"
#include "monitor/linkmon.h"
#include "monitor/trace.h"
#include "pipeline/plan.h"
#include "fault/ladder.h"
#include "fault/watchdog.h"
#include "sched/sched.h"

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
 *                and give the sampled chunk's starts, but they are not counted (with two
 *                or more copy streams the sampled chunk's H2D start is timed too:
 *                h2d_start_timed, one record per sample). A plan with
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

/* Prime, so that the sampled chunks visit every stream of a round-robin plan (at most 16). */
#define SAMPLE_EVERY 31u
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

/* A batch of gather.c's whose bytes move as pieces (backend copy_pieces) between pinned host
 * memory, its own and its items', and the slot's device buffers: @nin pieces in, @nout out.
 * Borrowed until the batch's callback. */
typedef struct ferry__pieces {
    const ferry_be_piece_t *in, *out;
    size_t nin, nout;
} ferry__pieces_t;

typedef struct batch_rec {
    uint64_t id;
    const ferry__pieces_t *pieces; /* NULL: the batch's in and out, contiguous */
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
    bool h2d_start_timed;         /* a sampled chunk's H2D start has a timed event of its own */
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

typedef ferry__trace_rec_t trace_rec_t; /* monitor/trace.h */

/* Instant events in the trace. */

/* Who runs the queue. A borrowed thread (a submitter, the completion thread) issues light
 * batches only and never waits for slots; the issuer thread issues anything, and waits for
 * slots for the batches that are not light. */
enum issue_role { ROLE_CALLER, ROLE_COMPLETER, ROLE_ISSUER };

/* Cache line: the shared atomics of one writer sit on lines of their own, so that a thread that
 * writes one does not take the line from threads reading another. */
#define FERRY__CACHE_LINE   64
#define FERRY__ENTER_SHARDS 16

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
    ferry__trace_buf_t trace;
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
    ferry__bwmon_t bw;    /* the bandwidth monitor (the _seen copies in api) */
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
    ferry__failure_log_t flog;
    uint64_t chunks_cpu;
    uint64_t first_start, last_end;
    bool any_retired;
    uint64_t stream_end[FERRY_STATS_MAX_STREAMS];   /* last end per stream */
    ferry__span_union_t comp_busy;                  /* the union of the timed kernels so far */
    uint64_t stream_busy[FERRY_STATS_MAX_STREAMS];  /* of the timed ops */
    uint64_t stream_ops[FERRY_STATS_MAX_STREAMS];   /* ops retired, timed or not */
    uint64_t stream_timed[FERRY_STATS_MAX_STREAMS]; /* ops timed */
    uint64_t chunks_retired, chunks_timed;
    /* Where each copy direction's union of busy intervals has got to, and the sequence number
     * of the last timed chunk (the union is exact over consecutive timed chunks). */
    ferry__span_union_t eng[2];
    uint64_t eng_seq;
    /* A sampled chunk that retired before its anchor (the chunk just before it, on the other
     * copy stream): its copies' spans wait for the anchor's ends (retire_chunk). */
    struct {
        bool set;
        uint64_t seq, bytes, h2d[2], d2h[2];
    } eng_wait;
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
    _Atomic uint64_t chunks_moved;      /* a set's member: chunks handed back (handback) */
    /* Simulator only: the device clock as last read by a pipeline thread. */
    _Atomic uint64_t clock_seen;
    /* The completion thread's side. */
    alignas(FERRY__CACHE_LINE) _Atomic int comp_sleeping;
    _Atomic(batch_rec_t *) returned_recs;
    _Atomic uint64_t completed; /* callbacks returned */
    _Atomic uint64_t done_gpu, failed, done_cpu;
    /* Batch latency, submit to callback on the device clock (read by the metrics registry). */
    ferry__lat_hist_t lat;
    /* Submits inside the call, counted on the submitting thread's own line of
     * FERRY__ENTER_SHARDS (pipeline.c: enter, leave): one line for all bounced between the
     * cores of 8 submitting threads twice a batch. */
    struct {
        alignas(FERRY__CACHE_LINE) _Atomic unsigned n;
    } entering[FERRY__ENTER_SHARDS];
    /* Submitters and the API. */
    alignas(FERRY__CACHE_LINE) _Atomic unsigned drain_waiters; /* changed under lock */
    _Atomic long caller_tid; /* virtual clock: the thread that entered submit last */
    _Atomic int released;    /* close released the resources (read by the runtime) */
    _Atomic bool shut;       /* submits return FERRY_ECLOSED (written under lock) */
    /* Faults, read on every chunk, rarely written. gpu_lost: a sticky error ended the GPU path;
     * every later chunk takes the CPU fallback. hang_lost: it ended because a kernel ignored the
     * abort flag. */
    alignas(FERRY__CACHE_LINE) _Atomic int gpu_lost;
    _Atomic int hang_lost;
    _Atomic bool tracing;
};

struct ferry_pipeline {
    /* Set at create, read-only until release. */
    ferry_device_t *dev;
    /* A set of devices (set.c): every public call goes there; nothing below is used. */
    struct ferry__pset *set;
    /* A pipeline in a worker process (remote.c, option isolation=process): likewise. */
    struct ferry__remote *remote;
    /* Option gather_bytes (gather.c): small batches go into its slabs; NULL: off. */
    struct ferry__gather *gather;
    /* A set's member (set.c sets both once it is made, before its first part): the chunks
     * its GPU path can no longer run, once it has ended, are offered back to the set that owns
     * it: [off, off + bytes) of the batch whose callback argument is @cb_arg, to run on another
     * device. True: the set took them (this pipeline neither runs nor writes them); false:
     * nowhere else to go, the CPU path takes them. Called on the issuing or completion thread,
     * without the pipeline's lock. */
    bool (*handback)(struct ferry__pset *owner, void *cb_arg, size_t off, size_t bytes);
    struct ferry__pset *owner;
    /* Called once, on the thread that saw it, when the GPU path ends (a sticky error, a hang),
     * before any chunk runs on the CPU path; NULL: nothing. A worker process's pipeline exits
     * there (worker.c): its application runs what it had not reported on a new worker. */
    void (*gpu_end)(ferry_pipeline_t *p, bool hung);
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
    /* The link's measured copy curves (core/runtime.h), the bandwidth monitor's; NULL: judged
     * against the theoretical rate alone. */
    ferry__link_curve_t *link_curve;
    void (*on_alert)(const ferry_alert_t *, void *);
    void *alert_arg;
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

    /* The ladder's level 1 (fault/ladder.h): after a non-sticky failure one step down, after
     * LADDER_HEALTHY good chunks in a row one step back up; its level is read by the issuing
     * threads, the rest is the completion thread's. */
    ferry__ladder_t ladder;
    struct ferry__pipe_api api;
    struct ferry__pipe_issue iss;
    struct ferry__pipe_comp comp;
    struct ferry__pipe_wdog wdog;
    struct ferry__pipe_shared sh;
};

/* What one completion pass adds to the stats, gathered without the lock. */
typedef struct pass_acc {
    uint64_t bytes, copied_out, busy_h2d, busy_comp, busy_d2h;
    uint64_t first_start, last_end;
    uint64_t chunks, timed, bytes_cpu;
    uint64_t stream_busy[FERRY_STATS_MAX_STREAMS];
    uint64_t stream_ops[FERRY_STATS_MAX_STREAMS];
    uint64_t stream_timed[FERRY_STATS_MAX_STREAMS];
    bool any;
    size_t ntrace;
    trace_rec_t trace[3 * MAX_PASS];
} pass_acc_t;

/* ---- helpers --------------------------------------------------------------------------- */

/* The pipeline whose thread (completion or issuer) this is, NULL on any other thread: callbacks
 * and prepare functions run there, and a call that would wait for that very thread (a drain, a
 * blocking submit on a full queue, a close that releases) is refused instead. */
extern _Thread_local const ferry_pipeline_t *ferry__pipe_own_thread;

static inline bool on_own_thread(const ferry_pipeline_t *p)
{
    return ferry__pipe_own_thread == p;
}

/* @p's trace layout and a copy of its records (freed by the caller), for a set's trace
 * (trace_out.c). FERRY_ESTATE when tracing is off. */
int ferry__pipe_trace_snapshot(ferry_pipeline_t *p, ferry__trace_part_t *out,
                               ferry__trace_rec_t **copy);

static inline void trace_add(ferry_pipeline_t *p, const trace_rec_t *r)
{
    if (!ferry__trace_push(&p->api.trace, r)) {
        ferry_log(FERRY_LOG_WARN, "pipeline", "trace: out of memory, stopped recording");
        atomic_store_explicit(&p->sh.tracing, false,
                              memory_order_relaxed); /* read by retire_chunk */
    }
}

/* An instant event in the trace (alerts, deadlines, the GPU path's end). Takes the lock; not
 * on a hot path. */
static inline void trace_note(ferry_pipeline_t *p, enum trace_note n, uint64_t batch,
                              uint32_t chunk, uint64_t now)
{
    if (!atomic_load_explicit(&p->sh.tracing, memory_order_relaxed))
        return;
    trace_rec_t r = {batch, chunk, (uint16_t)n, 'a', now, now, 0, 1};
    pthread_mutex_lock(&p->lock);
    trace_add(p, &r);
    pthread_mutex_unlock(&p->lock);
}

/* Tell the completion thread that something changed. The sequentially consistent pair (bump
 * work_seq, then read comp_sleeping) against its (set comp_sleeping, then read work_seq) means
 * at least one side sees the other: either it has not gone to sleep yet and sees the new
 * work_seq, or we see it asleep and signal under the lock it sleeps with. */
static inline void poke(ferry_pipeline_t *p, bool locked)
{
    atomic_fetch_add_explicit(&p->sh.work_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sh.comp_sleeping, memory_order_seq_cst)) {
        if (!locked)
            pthread_mutex_lock(&p->lock);
        pthread_cond_signal(&p->work_cv);
        if (!locked)
            pthread_mutex_unlock(&p->lock);
    }
}

static inline void set_busy(ferry_pipeline_t *p, bool busy, bool locked)
{
    atomic_store_explicit(&p->sh.busy, busy ? 1 : 0, memory_order_seq_cst);
    if (!busy)
        poke(p, locked);
}

/* Wake the issuer thread waiting for slots (under the lock). On a virtual clock it is busy
 * from here, not from when the host gets round to running it: otherwise the completion thread
 * would run the device on meanwhile, by as much as the host's scheduling delay. */
static inline void wake_issuer(ferry_pipeline_t *p, bool all)
{
    if (p->plan.virtual_clock)
        atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
    if (all)
        pthread_cond_broadcast(&p->slot_cv);
    else
        pthread_cond_signal(&p->slot_cv);
}

/* Virtual clock: give the token to the issuer thread, busy from here (as wake_issuer). Only
 * that thread issues on a virtual clock: when a submitting thread or the completion thread
 * issued what was queued, which one did, and how far it had got when the other came by, was
 * the host's scheduling, and it moved light batches' virtual times (a borrowed thread issues at
 * most CALLER_QUEUE_BUDGET, then hands over; a pass that issues stamps after its issuing).
 * The hand-off costs host time (a wake-up a batch at worst), not virtual time. Under lock. */
static inline void hand_to_issuer(ferry_pipeline_t *p)
{
    p->api.token = true;
    atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
    p->api.issuer_turn = true;
    pthread_cond_signal(&p->issue_cv);
}

static inline void push_incoming(ferry_pipeline_t *p, slot_t *s)
{
    slot_t *old = atomic_load_explicit(&p->sh.incoming, memory_order_relaxed);
    do
        s->next_inflight = old;
    while (!atomic_compare_exchange_weak_explicit(&p->sh.incoming, &old, s, memory_order_release,
                                                  memory_order_relaxed));
}

static inline void push_ready(ferry_pipeline_t *p, batch_rec_t *b)
{
    batch_rec_t *old = atomic_load_explicit(&p->sh.ready, memory_order_relaxed);
    do
        b->next = old;
    while (!atomic_compare_exchange_weak_explicit(&p->sh.ready, &old, b, memory_order_release,
                                                  memory_order_relaxed));
}

/* The device clock, remembered for submit_stamp() where it is virtual (a real clock is read
 * as it is: remembering it was a compare-exchange on a line every submitting thread wrote, on
 * every batch). */
static inline uint64_t read_clock(ferry_pipeline_t *p)
{
    uint64_t t = ferry_device_now_ns(p->dev);
    if (!p->plan.virtual_clock)
        return t;
    uint64_t seen = atomic_load_explicit(&p->sh.clock_seen, memory_order_relaxed);
    while (seen < t &&
           !atomic_compare_exchange_weak_explicit(&p->sh.clock_seen, &seen, t, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    return t;
}

/* A batch's submit time. A virtual clock is read under the simulated device's lock, which the
 * issuing thread takes for each of a chunk's eleven calls: a submitter reading it meanwhile
 * waited and was woken through the futex, ~0.9 syscalls a batch (measured, 64-byte batches).
 * While a thread issues, a virtual clock reads what that thread read last, at most one chunk's
 * host charges earlier: the value a read an instant before would have returned. */
static inline uint64_t submit_stamp(ferry_pipeline_t *p)
{
    if (p->plan.virtual_clock && atomic_load_explicit(&p->sh.busy, memory_order_seq_cst))
        return atomic_load_explicit(&p->sh.clock_seen, memory_order_relaxed);
    return read_clock(p);
}

void ferry__pipe_fall_back(ferry_pipeline_t *p, slot_t *s, int err, uint64_t now, pass_acc_t *a);
void ferry__pipe_write_failure_record(ferry_pipeline_t *p, const slot_t *s, int err,
                                      const char *msg, const char *action, uint64_t now);
void ferry__pipe_wd_hang(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t since_abort,
                         bool heartbeat_stalled);
size_t ferry__pipe_sub_bytes(const ferry_pipeline_t *p, const slot_t *s, uint32_t i, size_t *at);
/* The stage's CPU function on @a (through an aligned buffer when the pointers are not aligned
 * for the stage's granularity). The one place every CPU path runs it: recover.c. */
int ferry__stage_cpu_run(const ferry_stage_t *st, ferry_kernel_args_t *a);
int ferry__pipe_cpu_chunk(ferry_pipeline_t *p, const batch_rec_t *b, const void *in, void *out,
                          size_t n, size_t off, uint32_t chunk, uint32_t attempt, uint64_t seq);
void ferry__pipe_batch_cpu_result(batch_rec_t *b, uint32_t ok, int rc);
void ferry__pipe_issue_light(ferry_pipeline_t *p, batch_rec_t *b, slot_t *const *sl);
void ferry__pipe_wd_deadline(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t deadline,
                             int stopped);
int ferry__pipe_aborted(ferry_pipeline_t *p, slot_t *s);
void ferry__pipe_run_queue(ferry_pipeline_t *p, enum issue_role role);
void ferry__pipe_take_slots(ferry_pipeline_t *p, uint32_t n, slot_t **sl);
unsigned ferry__pipe_inflight_limit(const ferry_pipeline_t *p); /* under lock */
void *ferry__pipe_issuer_main(void *arg);
int ferry__pipe_launch_group(ferry_pipeline_t *p, slot_t *s, ferry_be_stream_t *st);
void *ferry__pipe_completion_main(void *arg);
void ferry__pipe_pass_wait(ferry_pipeline_t *p);
int ferry__pipe_retry_on_gpu(ferry_pipeline_t *p, slot_t *s);
/* For gather.c: submit @b as ferry_pipeline_submit does, neither gathered nor refused by a
 * gather's close; @wait: may block for room (not on one of @p's threads). */
int ferry__pipe_submit_internal(ferry_pipeline_t *p, const ferry_batch_t *b, ferry_done_fn cb,
                                void *arg, bool wait, const ferry__pieces_t *pieces);
/* The H2D of the group bound to @s on @st: from @src, or its batch's pieces. */
int ferry__pipe_copy_in(ferry_pipeline_t *p, const slot_t *s, ferry_be_stream_t *st,
                        const void *src);
/* The D2H of the group bound to @s on @st: to @dst, or its batch's pieces. */
int ferry__pipe_copy_out(ferry_pipeline_t *p, const slot_t *s, ferry_be_stream_t *st, void *dst);
/* @n bytes at @ptr are in pinned memory the device can copy from directly. */
bool ferry__pipe_is_pinned(ferry_pipeline_t *p, const void *ptr, size_t n);
/* Refuse submits from now on (the close's first step). */
void ferry__pipe_shut(ferry_pipeline_t *p);
/* The stats now (stats.c), under lock. */
void ferry__pipe_fill_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out);

#endif
