/* The streaming pipeline: batches enter a bounded submission queue and are cut into chunks bound
 * to slots (pinned host + device buffers + events); input that is not pinned is staged, and each
 * chunk's H2D -> compute -> D2H is issued on dedicated streams linked by events, round-robin. A
 * completion thread polls the events, copies output out of pinned slots, recycles slots and runs
 * each batch's callback exactly once. Issuing is a role, the issue token, not a thread: its
 * holder issues in queue order. Small batches are issued by whoever is at hand (the submitting
 * thread when nothing is queued and slots are free, the completion thread when it frees slots),
 * everything else by the issuer thread; hand-offs between threads are lock-free pushes, and a
 * thread is woken only when it sleeps. */
#include <errno.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/sim/sim.h"
#include "core/runtime.h"
#include "pipeline/pipeline_internal.h"
#include "monitor/linkmon.h"
#include "pipeline/watchdog.h"
#include "sched/sched.h"

static const char *const note_names[] = {"bandwidth alert (H2D)", "bandwidth alert (D2H)",
                                         "deadline passed: abort flag raised", "GPU path lost"};

/* ---- helpers --------------------------------------------------------------------------- */

/* The pipeline whose thread (completion or issuer) this is, NULL on any other thread: callbacks
 * and prepare functions run there, and a call that would wait for that very thread (a drain, a
 * blocking submit on a full queue, a close that releases) is refused instead. */
static _Thread_local const ferry_pipeline_t *own_thread;

static bool on_own_thread(const ferry_pipeline_t *p)
{
    return own_thread == p;
}

static void trace_add(ferry_pipeline_t *p, const trace_rec_t *r)
{
    if (p->api.ntrace == p->api.trace_cap) {
        size_t cap = p->api.trace_cap ? p->api.trace_cap * 2 : 1024;
        trace_rec_t *n = realloc(p->api.trace, cap * sizeof(*n));
        if (n == NULL) {
            ferry_log(FERRY_LOG_WARN, "pipeline", "trace: out of memory, stopped recording");
            atomic_store_explicit(&p->sh.tracing, false,
                                  memory_order_relaxed); /* read by retire_chunk */
            return;
        }
        p->api.trace = n;
        p->api.trace_cap = cap;
    }
    p->api.trace[p->api.ntrace++] = *r;
}

/* An instant event in the trace (alerts, deadlines, the GPU path's end). Takes the lock; not
 * on a hot path. */
static void trace_note(ferry_pipeline_t *p, enum trace_note n, uint64_t batch, uint32_t chunk,
                       uint64_t now)
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
static void poke(ferry_pipeline_t *p, bool locked)
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

static void set_busy(ferry_pipeline_t *p, bool busy, bool locked)
{
    atomic_store_explicit(&p->sh.busy, busy ? 1 : 0, memory_order_seq_cst);
    if (!busy)
        poke(p, locked);
}

/* Wake the issuer thread waiting for slots (under the lock). On a virtual clock it is busy
 * from here, not from when the host gets round to running it: otherwise the completion thread
 * would run the device on meanwhile, by as much as the host's scheduling delay. */
static void wake_issuer(ferry_pipeline_t *p, bool all)
{
    if (p->plan.virtual_clock)
        atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
    if (all)
        pthread_cond_broadcast(&p->slot_cv);
    else
        pthread_cond_signal(&p->slot_cv);
}

static void push_incoming(ferry_pipeline_t *p, slot_t *s)
{
    slot_t *old = atomic_load_explicit(&p->sh.incoming, memory_order_relaxed);
    do
        s->next_inflight = old;
    while (!atomic_compare_exchange_weak_explicit(&p->sh.incoming, &old, s, memory_order_release,
                                                  memory_order_relaxed));
}

static void push_ready(ferry_pipeline_t *p, batch_rec_t *b)
{
    batch_rec_t *old = atomic_load_explicit(&p->sh.ready, memory_order_relaxed);
    do
        b->next = old;
    while (!atomic_compare_exchange_weak_explicit(&p->sh.ready, &old, b, memory_order_release,
                                                  memory_order_relaxed));
}

/* The device clock, remembered for submit_stamp(). */
static uint64_t read_clock(ferry_pipeline_t *p)
{
    uint64_t t = ferry_device_now_ns(p->dev);
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
static uint64_t submit_stamp(ferry_pipeline_t *p)
{
    if (p->plan.virtual_clock && atomic_load_explicit(&p->sh.busy, memory_order_seq_cst))
        return atomic_load_explicit(&p->sh.clock_seen, memory_order_relaxed);
    return read_clock(p);
}

/* ---- completion -------------------------------------------------------------------------- */

/* Spin up to @max_ns for *@word to differ from @seen. */
static bool spin_for_change(const _Atomic uint64_t *word, uint64_t seen, uint64_t max_ns)
{
    uint64_t t0 = ferry__mono_ns();
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != seen)
            return true;
        /* No sched_yield: on this class of VM a thread that yields before sleeping was seen
         * to wake a scheduler tick (~4 ms) late. */
        if ((i & 63) == 63 && ferry__mono_ns() - t0 > max_ns)
            return false;
        ferry__cpu_relax();
    }
}

/* Virtual clock: a pass of the completion thread reads the clock, retires, stamps and may
 * charge; no other thread issues meanwhile, or what it read would depend on how far that
 * thread had got, which only the host's scheduling decides. A pass begins only while nobody
 * issues (busy 0); a thread about to issue waits for the pass to end. Under the lock. */
static void pass_wait(ferry_pipeline_t *p)
{
    if (!p->plan.virtual_clock || pthread_equal(pthread_self(), p->completer))
        return;
    while (p->api.comp_in_pass) {
        p->api.pass_waiters++;
        pthread_cond_wait(&p->pass_cv, &p->lock);
        p->api.pass_waiters--;
    }
}

static void pass_end_locked(ferry_pipeline_t *p)
{
    p->api.comp_in_pass = false;
    if (p->api.pass_waiters > 0)
        pthread_cond_broadcast(&p->pass_cv);
}

static void pass_end(ferry_pipeline_t *p)
{
    if (!p->plan.virtual_clock)
        return;
    pthread_mutex_lock(&p->lock);
    pass_end_locked(p);
    pthread_mutex_unlock(&p->lock);
}

/* Returns false (and ends any pass) when a thread issues. */
static bool pass_begin(ferry_pipeline_t *p)
{
    pthread_mutex_lock(&p->lock);
    bool ok = atomic_load_explicit(&p->sh.busy, memory_order_seq_cst) == 0;
    if (ok)
        p->api.comp_in_pass = true;
    else
        pass_end_locked(p);
    pthread_mutex_unlock(&p->lock);
    return ok;
}

/* Completion thread: return once work_seq has moved past @seen. */
static void wait_for_work(ferry_pipeline_t *p, uint64_t seen)
{
    pass_end(p);
    if (spin_for_change(&p->sh.work_seq, seen, COMPLETION_SPIN_NS))
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->sh.comp_sleeping, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&p->sh.work_seq, memory_order_seq_cst) == seen)
        pthread_cond_wait(&p->work_cv, &p->lock);
    atomic_store_explicit(&p->sh.comp_sleeping, 0, memory_order_seq_cst);
    pthread_mutex_unlock(&p->lock);
}

/* Virtual clock: nobody issues and the device would run on, while the caller is neither
 * blocked on a full queue nor draining. The caller's own time is not modelled: a caller that
 * submits in a loop is taken to be back at once, so before the device runs on the completion
 * thread waits up to CALLER_GRACE_NS of host time for its next submit, which then lands at the
 * virtual time the last one left. Without it the device would run on by however long the host took
 * to schedule the caller (one bench configuration gave 46.35 and 45.79 GB/s in two runs). A caller
 * that waits for its callbacks costs this much host time per wait, no virtual time. */
#define CALLER_GRACE_NS 2000000u
static void wait_for_caller(ferry_pipeline_t *p, uint64_t seen)
{
    pass_end(p);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + CALLER_GRACE_NS;
    ts.tv_sec = (time_t)(at / 1000000000u);
    ts.tv_nsec = (long)(at % 1000000000u);
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->sh.comp_sleeping, 1, memory_order_seq_cst);
    /* A full queue takes no submit until the device runs on (see submitter_runs). */
    while (atomic_load_explicit(&p->sh.work_seq, memory_order_seq_cst) == seen && !p->api.closing &&
           atomic_load_explicit(&p->sh.drain_waiters, memory_order_seq_cst) == 0 &&
           ferry__bqueue_pushers_blocked(p->queue) == 0 &&
           ferry__bqueue_len(p->queue) < p->plan.queue_depth)
        if (pthread_cond_timedwait(&p->work_cv, &p->lock, &ts) == ETIMEDOUT)
            break;
    atomic_store_explicit(&p->sh.comp_sleeping, 0, memory_order_seq_cst);
    pthread_mutex_unlock(&p->lock);
}

/* Virtual clock: a submit is between its entry and the queue and not blocked on a full queue
 * (it will be back at the current virtual time). On a full queue no submit can land before
 * the device moves on: one that waits for room is blocked, one that may not wait is refused
 * (a caller that retries FERRY_EAGAIN in a loop kept the device waiting for ever). */
static bool submitter_runs(ferry_pipeline_t *p)
{
    pthread_mutex_lock(&p->lock);
    unsigned n = p->api.submitting;
    pthread_mutex_unlock(&p->lock);
    if (n == 0 || ferry__bqueue_len(p->queue) >= p->plan.queue_depth)
        return false;
    return n > ferry__bqueue_pushers_blocked(p->queue);
}

/* Sleep on work_cv for up to 50 us of host time, or until work_seq moves past @seen (a
 * pusher that goes to sleep on a full queue pokes nobody: hence the bound). */
static void wait_briefly(ferry_pipeline_t *p, uint64_t seen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 50000u;
    ts.tv_sec = (time_t)(at / 1000000000u);
    ts.tv_nsec = (long)(at % 1000000000u);
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->sh.comp_sleeping, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sh.work_seq, memory_order_seq_cst) == seen)
        (void)pthread_cond_timedwait(&p->work_cv, &p->lock, &ts);
    atomic_store_explicit(&p->sh.comp_sleeping, 0, memory_order_seq_cst);
    pthread_mutex_unlock(&p->lock);
}

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

/* One JSON line per failed attempt (option failure_log): enough to find the chunk again and to
 * see what the device was asked to do. Completion thread. */
static void write_failure_record(ferry_pipeline_t *p, const slot_t *s, int err, const char *msg,
                                 const char *action, uint64_t now)
{
    p->comp.failure_records++;
    if (p->comp.failure_log == NULL)
        return;
    const batch_rec_t *b = s->batch;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    FILE *f = p->comp.failure_log;
    fprintf(f,
            "{\"time\":\"%s.%06ldZ\",\"device_ns\":%llu,\"batch\":%llu,\"attempt\":%u,"
            "\"stage\":",
            when, ts.tv_nsec / 1000, (unsigned long long)now, (unsigned long long)b->id,
            s->attempt);
    ferry__json_str(f, p->stage_name);
    fprintf(f,
            ",\"chunk\":%u,\"chunks\":%u,\"offset\":%zu,\"bytes\":%zu,\"streams\":{\"h2d\":%u,"
            "\"compute\":%u,\"d2h\":%u},\"plan\":{\"copy_streams\":%u,\"compute_streams\":%u,"
            "\"depth\":%u,\"chunk_bytes\":%zu},\"launch\":{\"blocks\":%d},"
            "\"buffers\":{\"host_in\":\"%p\",\"out\":\"%p\",\"d_in\":\"%p\",\"d_out\":\"%p\"},"
            "\"issue_ns\":%llu,\"level\":%d,\"error\":\"%s\",\"message\":",
            s->chunk, s->nsub, s->offset, s->bytes, s->h2d, s->comp, s->d2h, p->plan.ncopy,
            p->plan.ncomp, p->plan.depth, p->plan.chunk,
            p->dev->props.sms > 0 ? p->dev->props.sms : 1, s->host_in,
            b->b.out != NULL ? (void *)((unsigned char *)b->b.out + s->offset) : NULL, s->d_in,
            s->d_out, (unsigned long long)s->issue_ns, strcmp(action, "retry") == 0 ? 1 : 2,
            ferry_err_name(err));
    ferry__json_str(f, msg);
    fprintf(f, ",\"action\":\"%s\",\"gpu_lost\":%s}\n", action,
            atomic_load_explicit(&p->sh.gpu_lost, memory_order_relaxed) ? "true" : "false");
    /* A record that cannot be written (a full disk, /dev/full) is counted in the stats and
     * said once: the caller decides whether the run failed. */
    errno = 0;
    if (fflush(f) != 0 || ferror(f)) {
        int werr = errno;
        clearerr(f);
        if (atomic_fetch_add_explicit(&p->sh.failure_log_errors, 1, memory_order_relaxed) == 0)
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "failure_log '%s': cannot write a failure record: %s (later records may "
                      "be lost too)",
                      p->failure_log_path, werr ? strerror(werr) : "write error");
    }
}

/* An abandoned chunk (a hang) whose D2H goes straight to the batch's output is still queued
 * behind the hung kernel: should that kernel ever end, the copy would overwrite the CPU's
 * output after the batch completed. Its device buffer gets the CPU's output instead, through
 * the H2D stream (which waits for no kernel), so that a late copy writes the same bytes. The
 * source is the slot's pinned buffer, which an abandoned slot keeps. Completion thread. */
static void guard_late_copy(ferry_pipeline_t *p, slot_t *s, const unsigned char *cpu_out)
{
    memcpy(s->h_out, cpu_out, s->bytes);
    if (ferry__be_memcpy_h2d(p->dev, p->streams[s->h2d], s->d_out, s->h_out, s->bytes) != 0)
        ferry_log(FERRY_LOG_DEBUG, "pipeline", "guarding batch %llu chunk %u: %s",
                  (unsigned long long)s->batch->id, s->chunk, ferry__last_error_text());
}

/* Chunk @i of the group bound to @s: its bytes, and its offset within the group. */
static size_t sub_bytes(const ferry_pipeline_t *p, const slot_t *s, uint32_t i, size_t *at)
{
    *at = (size_t)i * p->plan.chunk;
    return s->bytes - *at < p->plan.chunk ? s->bytes - *at : p->plan.chunk;
}

/* The kernel launch of chunk @i of the group bound to @s, for its attempt: device buffers,
 * the abort word and the group's sequence number, and the simulator's timing hints. */
static ferry_be_launch_t chunk_launch(const ferry_pipeline_t *p, const slot_t *s, uint32_t i)
{
    size_t at, n = sub_bytes(p, s, i, &at);
    return (ferry_be_launch_t){
        .gpu = p->stage.gpu,
        .cpu = p->stage.cpu,
        .user = p->stage.user,
        .args = {.size = sizeof(ferry_kernel_args_t),
                 .in = (unsigned char *)s->d_in + at,
                 .out = (unsigned char *)s->d_out + at,
                 .bytes = n,
                 .offset = s->offset + at,
                 .batch_id = s->batch->id,
                 .chunk = s->chunk + i,
                 .attempt = s->attempt,
                 .abort_word = ferry__watchdog_abort_word(p->wdog.wd),
                 .seq = s->seq,
                 .batch_user = s->batch->b.user},
        .blocks = (uint32_t)(p->dev->props.sms > 0 ? p->dev->props.sms : 1),
        .block_ns = (uint64_t)(p->stage.ns_per_byte * (double)n),
    };
}

/* The kernels of the group bound to @s, in chunk order, on @st. */
static int launch_group(ferry_pipeline_t *p, slot_t *s, ferry_be_stream_t *st)
{
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < s->nsub; i++) {
        ferry_be_launch_t l = chunk_launch(p, s, i);
        rc = ferry__be_launch(p->dev, st, &l);
    }
    return rc;
}

/* The ladder's level 1: a non-sticky failure takes a step down (fewer streams, fewer chunks in
 * flight, then synchronous). Completion thread. */
static void step_down(ferry_pipeline_t *p)
{
    p->comp.healthy = 0;
    int lv = atomic_load_explicit(&p->sh.level, memory_order_relaxed);
    if (lv >= LADDER_MAX)
        return;
    atomic_store_explicit(&p->sh.level, lv + 1, memory_order_relaxed);
    p->comp.steps_down++;
    ferry_log(FERRY_LOG_WARN, "pipeline", "ladder: down to level %d (%s)", lv + 1,
              lv + 1 == 1   ? "one compute stream"
              : lv + 1 == 2 ? "at most 2 chunks in flight"
                            : "synchronous: one stream, one chunk");
}

/* Whether a failed chunk gets another GPU attempt: a non-sticky error (not a hang: a kernel
 * past its deadline would likely hang again), retries left, the GPU path alive. */
static bool may_retry(const ferry_pipeline_t *p, const slot_t *s, int err)
{
    return err != FERRY_ESTICKY && err != FERRY_ETIMEDOUT && !s->gpu_skipped && !s->abandoned &&
           s->host_in != NULL && s->attempt < p->plan.gpu_retries &&
           !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire);
}

static void end_gpu_path_hung(ferry_pipeline_t *p, uint64_t batch, uint32_t chunk, uint64_t now,
                              const char *why);

/* The ladder's level 1, retry: the chunk's three ops again, on the retry stream, at the lower
 * level the failure stepped down to, waited for here. The wait is bounded by the deadline; a
 * retry past it is a hang (the slot is abandoned). Returns 0 when the output is in place.
 * Completion thread. */
static int retry_on_gpu(ferry_pipeline_t *p, slot_t *s)
{
    ferry_device_t *d = p->dev;
    int rc = 0;
    if (p->comp.retry_stream == NULL &&
        (rc = ferry__be_stream_create(d, p->plan.comp_prio, &p->comp.retry_stream)) != 0)
        return rc;
    if (p->comp.retry_ev == NULL && (rc = ferry__be_event_create(d, 0, &p->comp.retry_ev)) != 0)
        return rc;
    batch_rec_t *b = s->batch;
    void *dst =
        s->copy_out || b->b.out == NULL ? (void *)s->h_out : (unsigned char *)b->b.out + s->offset;
    if ((rc = ferry__be_memcpy_h2d(d, p->comp.retry_stream, s->d_in, s->host_in, s->bytes)) != 0 ||
        (rc = launch_group(p, s, p->comp.retry_stream)) != 0 ||
        (rc = ferry__be_memcpy_d2h(d, p->comp.retry_stream, dst, s->d_out, s->bytes)) != 0 ||
        (rc = ferry__be_event_record(d, p->comp.retry_ev, p->comp.retry_stream)) != 0) {
        ferry__be_stream_sync(d,
                              p->comp.retry_stream); /* what was queued, before the slot moves on */
        return rc;
    }
    uint64_t deadline = p->plan.deadline_floor_ns +
                        (uint64_t)(p->plan.deadline_factor * (double)p->comp.lat_ewma_ns);
    size_t which = 0;
    rc = ferry__be_event_wait_any(d, &p->comp.retry_ev, 1, deadline, &which);
    /* FERRY_ETIMEDOUT is also the error of a kernel that stopped at the abort flag: only a
     * query that says "not yet" is a wait that ran out. */
    if (rc == FERRY_ETIMEDOUT && ferry__be_event_query(d, p->comp.retry_ev) == FERRY_EAGAIN) {
        /* Past its deadline: as the watchdog does for the chunks of the main path, raise the
         * abort word to the chunk's number and give a kernel that polls it a floor to stop.
         * The retry stream is then free and the slot comes back; the GPU output is discarded
         * (the CPU redoes the chunk). A kernel that ignores the flag holds the retry stream
         * for good, and with it every later retry: the GPU is hung, and its path ends, so that
         * nothing waits for slots that never come back. */
        atomic_fetch_add_explicit(&p->wdog.deadlines_passed, 1, memory_order_relaxed);
        (void)ferry__watchdog_abort(p->wdog.wd, s->seq);
        rc = ferry__be_event_wait_any(d, &p->comp.retry_ev, 1, p->plan.deadline_floor_ns, &which);
        if (rc == FERRY_ETIMEDOUT && ferry__be_event_query(d, p->comp.retry_ev) == FERRY_EAGAIN) {
            s->abandoned = true; /* its kernel may still run and write */
            snprintf(s->errmsg, sizeof(s->errmsg),
                     "the GPU retry passed its deadline (%.1f ms) and ignored the abort flag "
                     "for %.1f ms more",
                     (double)deadline / 1e6, (double)p->plan.deadline_floor_ns / 1e6);
            end_gpu_path_hung(p, b->id, s->chunk, ferry_device_now_ns(d), s->errmsg);
            return rc;
        }
        snprintf(s->errmsg, sizeof(s->errmsg),
                 "the GPU retry passed its deadline (%.1f ms): the abort flag was raised and "
                 "its GPU output discarded",
                 (double)deadline / 1e6);
        return FERRY_ETIMEDOUT;
    }
    if (rc == 0)
        rc = ferry__be_event_query(d, p->comp.retry_ev);
    return rc;
}

/* Run the stage's CPU function on @a. A stage of granularity g reads elements of g bytes (a
 * float for 4): the user's own pointers may not be aligned for them (the CPU path hands over
 * the batch's in and out, at any address), so then the chunk goes through an aligned buffer.
 * The GPU path never needs it: device buffers are 256-byte aligned. */
static int cpu_run(ferry_pipeline_t *p, ferry_kernel_args_t *a)
{
    size_t g = p->stage.size > offsetof(ferry_stage_t, granularity) ? p->stage.granularity : 0;
    size_t align = 1;
    while (align < 16 && g % (align * 2) == 0 && g >= align * 2)
        align *= 2; /* the largest power of two dividing g, up to 16 */
    if (align == 1 || (((uintptr_t)a->in | (uintptr_t)a->out) & (align - 1)) == 0)
        return p->stage.cpu(a, p->stage.user);
    size_t span = (a->bytes + 15) & ~(size_t)15;
    unsigned char *tmp = NULL;
    if (posix_memalign((void **)&tmp, 16, 2 * span + 16) != 0)
        return ferry__error(FERRY_ENOMEM, "pipeline: no memory to align a chunk for the CPU");
    ferry_kernel_args_t b = *a;
    memcpy(tmp, a->in, a->bytes);
    b.in = tmp;
    b.out = tmp + span;
    int rc = p->stage.cpu(&b, p->stage.user);
    if (rc == 0)
        memcpy(a->out, tmp + span, a->bytes);
    free(tmp);
    return rc;
}

/* A chunk's GPU attempt failed (@err): the ladder's level 2. A sticky error ends the GPU path
 * for every later chunk. The stage's CPU function, if any, produces the output from the chunk's
 * host input; otherwise the batch fails with the reason. Completion thread. */
static void fall_back(ferry_pipeline_t *p, slot_t *s, int err, uint64_t now, pass_acc_t *a)
{
    batch_rec_t *b = s->batch;
    char msg[256];
    ferry__strlcpy(msg, s->errmsg[0] ? s->errmsg : ferry__last_error_text(), sizeof(msg));
    if (err == FERRY_ESTICKY &&
        !atomic_exchange_explicit(&p->sh.gpu_lost, 1, memory_order_acq_rel) &&
        (trace_note(p, NOTE_GPU_LOST, b->id, s->chunk, now), true))
        ferry_log(FERRY_LOG_ERROR, "pipeline",
                  "sticky error (%s): the GPU path of this process has ended; every batch in "
                  "flight and every later one runs on the %s",
                  msg, p->stage.cpu ? "stage's CPU function" : "CPU (no CPU function: they fail)");
    if (err != FERRY_ESTICKY && !s->gpu_skipped &&
        !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire))
        step_down(p);
    int rc = err;
    const char *action = "failed";
    uint32_t ok = 0;
    if (p->stage.cpu != NULL && s->host_in != NULL) {
        unsigned char *out =
            b->b.out != NULL ? (unsigned char *)b->b.out + s->offset : (unsigned char *)s->h_out;
        rc = 0;
        for (uint32_t i = 0; rc == 0 && i < s->nsub; i++) { /* every chunk of the group */
            size_t at, n = sub_bytes(p, s, i, &at);
            ferry_kernel_args_t args = {.size = sizeof(args),
                                        .in = (const unsigned char *)s->host_in + at,
                                        .out = out + at,
                                        .bytes = n,
                                        .offset = s->offset + at,
                                        .batch_id = b->id,
                                        .chunk = s->chunk + i,
                                        .attempt = s->attempt + 1,
                                        .seq = s->seq,
                                        .batch_user = b->b.user};
            rc = cpu_run(p, &args);
            ok += rc == 0;
        }
        if (rc > 0 || rc < FERRY_ERR_MIN_)
            rc = FERRY_EKERNEL;
        action = rc == 0 ? "cpu" : "failed";
    }
    /* A chunk that never reached the GPU (lost before) is not a failed attempt. */
    if (!s->gpu_skipped) {
        if (err != FERRY_ESTICKY || rc != 0)
            ferry_log(rc == 0 ? FERRY_LOG_WARN : FERRY_LOG_ERROR, "pipeline",
                      "batch %llu chunk %u: %s on the GPU (%s); %s", (unsigned long long)b->id,
                      s->chunk, ferry_err_name(err), msg,
                      rc == 0 ? "done by the CPU fallback" : "the batch fails");
        write_failure_record(p, s, err, msg, action, now);
    }
    if (rc == 0 && s->abandoned && !s->copy_out && b->b.out != NULL)
        guard_late_copy(p, s, (unsigned char *)b->b.out + s->offset);
    atomic_fetch_add_explicit(&b->cpu_chunks, ok, memory_order_relaxed);
    p->comp.chunks_cpu += ok;
    if (rc == 0) {
        a->bytes_cpu += s->bytes;
    } else {
        int zero = 0;
        atomic_compare_exchange_strong_explicit(&b->status, &zero, rc, memory_order_relaxed,
                                                memory_order_relaxed);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Whether the link carries traffic this pipeline did not move (beyond its own bytes and the
 * counter's overhead on them), at least bw_foreign_ratio of the link's rate @link_gbps in some
 * direction: that traffic per direction into @foreign (bytes per second). Inline (simulator),
 * a fresh sample first. Completion thread. */
static bool foreign_traffic(ferry_pipeline_t *p, uint64_t now, double link_gbps, double *foreign)
{
    foreign[0] = foreign[1] = 0;
    if (p->link == NULL)
        return false;
    ferry__linkmon_step(p->link, now, true);
    ferry__link_sample_t ls;
    ferry__linkmon_last(p->link, &ls);
    if (ls.count == 0)
        return false;
    bool any = false;
    for (int d = 0; d < 2; d++) {
        double own = ls.own[d] * (1 + FERRY_LINK_COUNTER_OVERHEAD);
        foreign[d] = ls.total[d] > own ? ls.total[d] - own : 0;
        any |= foreign[d] >= p->plan.bw_foreign_ratio * link_gbps * 1e9;
    }
    return any;
}

/* The bandwidth monitor: one timed copy of @bytes in @ns, direction @d (0 H2D, 1 D2H). Over a
 * full window, the rate while copying against the link's theoretical rate: below the alert
 * ratio an alert is raised (log, count, callback) naming the likely cause; 5 points above it,
 * cleared. Completion thread. */
/* Add [@start, @end) to a union of intervals that arrive in about start order, whose end so
 * far is *@upto: returns the time it adds. */
static uint64_t union_add(uint64_t *upto, uint64_t start, uint64_t end)
{
    uint64_t from = start > *upto ? start : *upto;
    if (end > *upto)
        *upto = end;
    return end > from ? end - from : 0;
}

static void bw_sample(ferry_pipeline_t *p, int d, uint64_t bytes, uint64_t ns, uint64_t now)
{
    double link = p->dev->props.link_gbps;
    if (p->plan.bw_alert_ratio <= 0 || link <= 0)
        return;
    struct bw_win *w = &p->comp.bw[d];
    /* Running sums (exact: a slot not yet filled holds 0): every sampled chunk comes here, and
     * only a change of state needs the window itself. */
    w->sum_bytes += bytes - w->bytes[w->at];
    w->sum_ns += ns - w->ns[w->at];
    w->bytes[w->at] = bytes;
    w->ns[w->at] = ns;
    w->at = (w->at + 1) % BW_WINDOW;
    if (w->n < BW_WINDOW) {
        w->n++;
        if (w->n < BW_WINDOW)
            return;
    }
    if (w->sum_ns == 0)
        return;
    double gbps = (double)w->sum_bytes / (double)w->sum_ns;
    w->ratio = gbps / link;
    /* What the link delivers at the window's sizes (the measured curve: latency + bytes at the
     * asymptotic rate), each direction sharing it with the other as a round trip does, and one
     * way alone. The H200 moved 37-38 GB/s H2D in 8 MiB copies, healthy, under 60% of the
     * theoretical 63 GB/s: judged against that, ferry alone raised 11 and 7 alerts in a run
     * (bench/results/2026-12-03-h200-485b4bd-link.jsonl). A window is low when it runs under
     * bw_alert_ratio of what its sizes deliver, or when its sizes are so small that the link
     * itself delivers under that share of its large-copy rate (the small-transfers cause). */
    double judge = w->ratio, expect = 0, one_way = 0, peak = link;
    bool small = false;
    if (p->link_prof != NULL) {
        const struct ferry_sim_profile *lp = p->link_prof;
        const struct ferry_sim_curve *c = &lp->curve[d];
        double t_both = 0, t_one = 0, wbytes = 0;
        peak = c->gbps[c->n - 1];
        for (unsigned i = 0; i < BW_WINDOW; i++) {
            double lat = (double)ferry__sim_copy_latency_ns(lp, d, w->bytes[i]);
            t_both += lat + (double)w->bytes[i] / (peak * lp->bidir_factor);
            t_one += lat + (double)w->bytes[i] / peak;
            wbytes += (double)w->bytes[i];
        }
        expect = t_both > 0 ? wbytes / t_both : 0;
        one_way = t_one > 0 ? wbytes / t_one : 0;
        if (expect > 0) {
            judge = gbps / expect;
            small = one_way < p->plan.bw_alert_ratio * peak;
        }
    }
    bool low = small || judge < p->plan.bw_alert_ratio;
    bool high = !small && judge >= p->plan.bw_alert_ratio + 0.05;
    if ((low && w->alerting) || (!low && !high) || (high && !w->alerting))
        return;
    w->alerting = low;
    uint64_t sizes[BW_WINDOW];
    memcpy(sizes, w->bytes, sizeof(sizes));
    qsort(sizes, BW_WINDOW, sizeof(sizes[0]), cmp_u64);
    uint64_t median = sizes[BW_WINDOW / 2];
    ferry_alert_cause_t cause = FERRY_CAUSE_UNKNOWN;
    char text[512];
    double foreign[2] = {0, 0};
    const char *dir = d == 0 ? "H2D" : "D2H";
    char ref[112] = "";
    if (expect > 0)
        snprintf(ref, sizeof(ref), " (%.0f%% of the %.1f GB/s it delivers for these copies)",
                 judge * 100, expect);
    if (!low) {
        snprintf(text, sizeof(text),
                 "%s copies back at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s", dir, gbps,
                 w->ratio * 100, link, ref);
    } else if (small || (p->link_prof == NULL && median < (1u << 20))) {
        cause = FERRY_CAUSE_SMALL_TRANSFERS;
        if (p->plan.group > 1) /* copies merge already: what limits them is the batches */
            snprintf(text, sizeof(text),
                     "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: small transfers "
                     "(median %llu KiB); each copy pays a fixed cost and copies merge only a "
                     "batch's chunks: submit batches of 4 MiB or more",
                     dir, gbps, w->ratio * 100, link, ref, (unsigned long long)(median >> 10));
        else
            snprintf(text, sizeof(text),
                     "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: small transfers "
                     "(median %llu KiB); each copy pays a fixed cost: use chunks of 4 MiB or "
                     "more, or coalesce_bytes=8M to merge the copies of a batch's chunks",
                     dir, gbps, w->ratio * 100, link, ref, (unsigned long long)(median >> 10));
    } else if (!p->host_pinned) {
        cause = FERRY_CAUSE_PAGEABLE;
        snprintf(text, sizeof(text),
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: pageable host memory "
                 "(pinning was refused): raise the locked-memory limit",
                 dir, gbps, w->ratio * 100, link, ref);
    } else if (foreign_traffic(p, now, link, foreign)) {
        cause = FERRY_CAUSE_FOREIGN;
        snprintf(text, sizeof(text),
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: another process moves "
                 "data on the link (the link counts %.1f GB/s H2D and %.1f GB/s D2H that this "
                 "pipeline did not move)",
                 dir, gbps, w->ratio * 100, link, ref, foreign[0] / 1e9, foreign[1] / 1e9);
    } else if (p->comp.bw[!d].n == BW_WINDOW && p->comp.bw[!d].alerting) {
        cause = FERRY_CAUSE_CONTENTION;
        snprintf(
            text, sizeof(text),
            "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s, and the other direction "
            "is low too: both directions contend for the host's side of the link",
            dir, gbps, w->ratio * 100, link, ref);
    } else {
        snprintf(text, sizeof(text),
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: not small transfers, "
                 "pageable memory or another process%s: the link may run below its rated "
                 "generation or width (`ferry probe`)",
                 dir, gbps, w->ratio * 100, link, ref,
                 p->link == NULL ? " (not told: no link counter, or link_sample_ms 0)" : "");
    }
    if (low) {
        p->comp.bw_alerts++;
        trace_note(p, d == 0 ? NOTE_BW_H2D : NOTE_BW_D2H, 0, 0, now);
    }
    ferry_log(low ? FERRY_LOG_WARN : FERRY_LOG_INFO, "bandwidth", "%s%s", low ? "alert: " : "",
              text);
    if (p->on_alert != NULL) {
        ferry_alert_t al = {.size = sizeof(al),
                            .raised = low,
                            .direction = d,
                            .gbps = gbps,
                            .link_gbps = link,
                            .ratio = w->ratio,
                            .cause = cause,
                            .text = text,
                            .device_ns = now,
                            .foreign_gbps = {foreign[0] / 1e9, foreign[1] / 1e9}};
        p->on_alert(&al, p->alert_arg);
    }
}

/* Retire one chunk whose events are complete (or which failed): copy its output out, read its
 * event times if it was timed. @now: the device clock at this pass, the end of an untimed
 * chunk as far as the stats know (late by the polling latency, a few microseconds).
 * Completion thread, no lock held. */
static void retire_chunk(ferry_pipeline_t *p, slot_t *s, int err, uint64_t now, pass_acc_t *a)
{
    batch_rec_t *b = s->batch;
    while (err != 0 && may_retry(p, s, err)) {
        char msg[256];
        ferry__strlcpy(msg, s->errmsg[0] ? s->errmsg : ferry__last_error_text(), sizeof(msg));
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "batch %llu chunk %u: %s on the GPU (%s); retried "
                  "on the GPU at a lower level",
                  (unsigned long long)b->id, s->chunk, ferry_err_name(err), msg);
        write_failure_record(p, s, err, msg, "retry", now);
        step_down(p);
        s->attempt++;
        s->errmsg[0] = '\0';
        err = retry_on_gpu(p, s);
        if (err == 0) {
            p->comp.chunks_retried += s->nsub;
            s->timing = TIME_NONE; /* the first attempt's timed events are not this one's */
        } else if (s->errmsg[0] == '\0') {
            ferry__strlcpy(s->errmsg, ferry__last_error_text(), sizeof(s->errmsg));
        }
    }
    if (err != 0) {
        fall_back(p, s, err, now, a);
        return;
    }
    if (s->copy_out && b->b.out != NULL) {
        ferry__parallel_memcpy(p->workers, (unsigned char *)b->b.out + s->offset, s->h_out,
                               s->bytes, p->plan.stage_threshold);
        a->copied_out += s->bytes;
    }
    a->bytes += s->bytes;
    a->chunks += s->nsub;
    a->stream_ops[s->h2d]++;
    a->stream_ops[s->comp]++;
    a->stream_ops[s->d2h]++;
    /* The span runs from the first chunk's issue (its H2D cannot start earlier, and does start
     * then on an idle pipeline) to the last D2H's end. */
    uint64_t end = now;
    uint64_t t[TEV_N];
    bool timed = s->timing != TIME_NONE;
    for (int i = 0; timed && i < TEV_N; i++) {
        bool used = s->timing == TIME_SAMPLE ||
                    ((i & 1) && (s->timing != TIME_ANCHOR || (s->anchor_ends & (1u << (i >> 1)))));
        t[i] = 0;
        if (used && ferry__be_event_time_ns(p->dev, s->tev[i], &t[i]) != 0)
            timed = false;
    }
    if (timed && t[TEV_D2H_END] != 0) /* an anchor may time only its other ends */
        end = t[TEV_D2H_END];
    /* Healthy chunks in a row climb the ladder back, one level per LADDER_HEALTHY. */
    if (++p->comp.healthy >= LADDER_HEALTHY &&
        atomic_load_explicit(&p->sh.level, memory_order_relaxed) > 0) {
        int lv = atomic_fetch_sub_explicit(&p->sh.level, 1, memory_order_relaxed) - 1;
        p->comp.healthy = 0;
        p->comp.steps_up++;
        ferry_log(FERRY_LOG_INFO, "pipeline", "ladder: back up to level %d", lv);
    }
    /* The running latency behind the deadlines (issue to end, queueing included). */
    uint64_t lat = end > s->issue_ns ? end - s->issue_ns : 0;
    p->comp.lat_ewma_ns = p->comp.lat_ewma_ns ? (7 * p->comp.lat_ewma_ns + lat) / 8 : lat;
    if (!a->any || s->issue_ns < a->first_start)
        a->first_start = s->issue_ns;
    if (!a->any || end > a->last_end)
        a->last_end = end;
    a->any = true;
    if (!timed)
        return;
    uint64_t *le = p->comp.stream_end;
    if (s->timing == TIME_ANCHOR) { /* only where its streams got to, for the next sample */
        for (int i = 0; i < 3; i++) {
            unsigned st = i == 0 ? s->h2d : i == 1 ? s->comp : s->d2h;
            uint64_t e = t[2 * i + 1];
            if ((s->anchor_ends & (1u << i)) && e > le[st])
                le[st] = e;
        }
        /* Its copies' ends join the union of each direction's copies (below), so that the next
         * sampled chunk adds only the part of its copies that no earlier copy covered. */
        if (s->anchor_ends & 1u)
            p->comp.eng_end[0] =
                p->comp.eng_end[0] > t[TEV_H2D_END] ? p->comp.eng_end[0] : t[TEV_H2D_END];
        if (s->anchor_ends & 4u)
            p->comp.eng_end[1] =
                p->comp.eng_end[1] > t[TEV_D2H_END] ? p->comp.eng_end[1] : t[TEV_D2H_END];
        if ((s->anchor_ends & 5u) == 5u && s->seq > p->comp.eng_seq)
            p->comp.eng_seq = s->seq;
        return;
    }
    uint64_t hs, cs, ds;
    if (s->timing == TIME_SAMPLE) {
        hs = t[TEV_H2D_START], cs = t[TEV_COMP_START], ds = t[TEV_D2H_START];
    } else {
        /* An op starts when its stream reaches it: after the previous op on that stream and
         * after what it waits for (the issue, or the previous stage of the chunk). Exact for
         * in-order streams retired in issue order; with several D2H streams, chunks may retire
         * slightly out of order and a start is then clamped into [dependency, end]. */
        hs = s->issue_ns > le[s->h2d] ? s->issue_ns : le[s->h2d];
        cs = t[TEV_H2D_END] > le[s->comp] ? t[TEV_H2D_END] : le[s->comp];
        ds = t[TEV_COMP_END] > le[s->d2h] ? t[TEV_COMP_END] : le[s->d2h];
    }
    hs = hs < t[TEV_H2D_END] ? hs : t[TEV_H2D_END];
    cs = cs < t[TEV_COMP_END] ? cs : t[TEV_COMP_END];
    ds = ds < t[TEV_D2H_END] ? ds : t[TEV_D2H_END];
    if (t[TEV_H2D_END] > le[s->h2d])
        le[s->h2d] = t[TEV_H2D_END];
    if (t[TEV_COMP_END] > le[s->comp])
        le[s->comp] = t[TEV_COMP_END];
    if (t[TEV_D2H_END] > le[s->d2h])
        le[s->d2h] = t[TEV_D2H_END];
    uint64_t dh = t[TEV_H2D_END] - hs, dc = t[TEV_COMP_END] - cs, dd = t[TEV_D2H_END] - ds;
    /* A direction's engine time is the union of its copies' intervals: with several copy
     * streams the copies of one direction run at once, and their sum counted that time twice
     * (engines H2D 196%, overlap 3.65, and the bandwidth monitor took one copy's share of the
     * link for the direction's rate). The union is exact over consecutive timed chunks (every
     * chunk with op_timing all or a trace); a sampled chunk has the chunk before it timed as an
     * anchor, and adds what its copies cover past that one's. Where that anchor retired after
     * it (another D2H stream), its copies count 1/copy streams of their time: the copy streams
     * taken to run together, which the H200 does not always do (D2H read 52% busy, an alert
     * on a run at 46 GB/s each way, before the anchor). */
    int lv = atomic_load_explicit(&p->sh.level, memory_order_relaxed);
    unsigned lanes = p->plan.single || lv >= 3 ? 1u : p->plan.ncopy;
    bool fresh = lanes == 1 || s->seq == p->comp.eng_seq + 1;
    uint64_t uh = fresh ? union_add(&p->comp.eng_end[0], hs, t[TEV_H2D_END]) : dh / lanes;
    uint64_t ud = fresh ? union_add(&p->comp.eng_end[1], ds, t[TEV_D2H_END]) : dd / lanes;
    if (!fresh) {
        p->comp.eng_end[0] =
            p->comp.eng_end[0] > t[TEV_H2D_END] ? p->comp.eng_end[0] : t[TEV_H2D_END];
        p->comp.eng_end[1] =
            p->comp.eng_end[1] > t[TEV_D2H_END] ? p->comp.eng_end[1] : t[TEV_D2H_END];
    }
    if (s->seq > p->comp.eng_seq)
        p->comp.eng_seq = s->seq;
    bw_sample(p, 0, s->bytes, uh, now);
    bw_sample(p, 1, s->bytes, ud, now);
    a->timed += s->nsub; /* as chunks_retired counts: the busy figures scale by their ratio */
    /* Compute is busy while any compute stream is: with two compute streams their kernels
     * overlap, and the sum of their times exceeded the elapsed time (a compute-bound run's
     * overlap read 1.76). */
    a->busy_h2d += uh;
    a->busy_comp += union_add(&p->comp.comp_end, cs, t[TEV_COMP_END]);
    a->busy_d2h += ud;
    a->stream_busy[s->h2d] += dh;
    a->stream_busy[s->comp] += dc;
    a->stream_busy[s->d2h] += dd;
    a->stream_timed[s->h2d]++;
    a->stream_timed[s->comp]++;
    a->stream_timed[s->d2h]++;
    if (s->traced && atomic_load_explicit(&p->sh.tracing, memory_order_relaxed)) {
        trace_rec_t r = {b->id, s->chunk,       (uint16_t)s->h2d, 'h',
                         hs,    t[TEV_H2D_END], s->bytes,         s->nsub};
        a->trace[a->ntrace++] = r;
        r.stream = (uint16_t)s->comp, r.kind = 'c', r.start = cs;
        r.end = t[TEV_COMP_END];
        a->trace[a->ntrace++] = r;
        r.stream = (uint16_t)s->d2h, r.kind = 'd', r.start = ds;
        r.end = t[TEV_D2H_END];
        a->trace[a->ntrace++] = r;
    }
}

/* Fold a pass into the stats. Under lock. */
static void add_pass(ferry_pipeline_t *p, const pass_acc_t *a)
{
    p->api.st.bytes_h2d += a->bytes;
    p->api.st.bytes_d2h += a->bytes;
    p->api.st.copied_out_bytes += a->copied_out;
    p->api.st.busy_h2d_ns += a->busy_h2d;
    p->api.st.busy_compute_ns += a->busy_comp;
    p->api.st.busy_d2h_ns += a->busy_d2h;
    p->comp.chunks_retired += a->chunks;
    p->api.chunks_cpu_seen = p->comp.chunks_cpu;
    p->api.chunks_retried_seen = p->comp.chunks_retried;
    p->api.failure_records_seen = p->comp.failure_records;
    p->comp.chunks_timed += a->timed;
    for (unsigned i = 0; i < p->plan.nstreams; i++) {
        p->comp.stream_busy[i] += a->stream_busy[i];
        p->comp.stream_ops[i] += a->stream_ops[i];
        p->comp.stream_timed[i] += a->stream_timed[i];
    }
    if (a->any) {
        if (!p->comp.any_retired || a->first_start < p->comp.first_start)
            p->comp.first_start = a->first_start;
        if (!p->comp.any_retired || a->last_end > p->comp.last_end)
            p->comp.last_end = a->last_end;
        p->comp.any_retired = true;
    }
    for (size_t i = 0; i < a->ntrace && atomic_load_explicit(&p->sh.tracing, memory_order_relaxed);
         i++)
        trace_add(p, &a->trace[i]);
}

static void run_queue(ferry_pipeline_t *p, enum issue_role role);

/* The watchdog raised the abort word past a chunk's deadline (either thread). */
static void wd_deadline(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t deadline,
                        int stopped)
{
    ferry_pipeline_t *p = ctx;
    atomic_fetch_add_explicit(&p->wdog.deadlines_passed, 1, memory_order_relaxed);
    trace_note(p, NOTE_DEADLINE, h->batch, h->chunk, now);
    ferry_log(FERRY_LOG_WARN, "pipeline",
              "batch %llu chunk %u passed its deadline (%.1f ms at the head, deadline %.1f ms): "
              "abort flag raised%s",
              (unsigned long long)h->batch, h->chunk, (double)(now - h->since_ns) / 1e6,
              (double)deadline / 1e6,
              stopped > 0    ? "; a kernel stopped"
              : stopped == 0 ? ""
                             : " (not supported here)");
}

/* A kernel ignores the abort flag (@why says how it was seen): the GPU is hung, and its path in
 * this process ends (hang_lost): every chunk in flight is redone on the CPU and its slot
 * abandoned, every later one runs on the CPU directly, and an issuer waiting for slots (which
 * may never come back) goes to the CPU. Either thread. */
static void end_gpu_path_hung(ferry_pipeline_t *p, uint64_t batch, uint32_t chunk, uint64_t now,
                              const char *why)
{
    /* gpu_lost first: whoever sees hang_lost (and abandons a slot) sees it too. */
    bool first = !atomic_exchange_explicit(&p->sh.gpu_lost, 1, memory_order_acq_rel);
    atomic_store_explicit(&p->sh.hang_lost, 1, memory_order_release);
    trace_note(p, NOTE_GPU_LOST, batch, chunk, now);
    if (first)
        ferry_log(FERRY_LOG_ERROR, "pipeline",
                  "batch %llu chunk %u: %s: the GPU is hung, its path in this process has "
                  "ended; every batch in flight and every later one runs on the %s",
                  (unsigned long long)batch, chunk, why,
                  p->stage.cpu ? "stage's CPU function" : "CPU (no CPU function: they fail)");
    pthread_mutex_lock(&p->lock);
    if (p->api.slot_waiting)
        wake_issuer(p, true);
    pthread_mutex_unlock(&p->lock);
    poke(p, false);
}

/* A chunk still not done a floor after its abort: the kernel ignores the flag. */
static void wd_hang(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t since_abort,
                    bool heartbeat_stalled)
{
    char why[160];
    snprintf(why, sizeof(why), "still not done %.1f ms after the abort flag (%s)",
             (double)since_abort / 1e6,
             heartbeat_stalled ? "the heartbeat has stopped too: the GPU runs no new work"
                               : "its kernel ignores the flag");
    end_gpu_path_hung(ctx, h->batch, h->chunk, now, why);
}

/* A chunk at or below the abort word completed: its kernel may have stopped early, so its
 * output is discarded and the chunk redone (the CPU fallback). Completion thread. */
static int aborted(ferry_pipeline_t *p, slot_t *s)
{
    snprintf(s->errmsg, sizeof(s->errmsg),
             "passed its deadline: the abort flag was raised and its GPU output discarded");
    ferry__watchdog_retired_aborted(p->wdog.wd, s->seq, ferry_device_now_ns(p->dev));
    return FERRY_ETIMEDOUT;
}

/* The oldest chunk of each D2H stream still in flight, for the watchdog: its deadline runs
 * from its issue or from when it became the oldest, whichever is later, so that chunks queued
 * behind a slow one are not blamed for it. Completion thread. */
static void publish_heads(ferry_pipeline_t *p, slot_t *head, uint64_t now)
{
    ferry__wd_head_t heads[FERRY_STATS_MAX_STREAMS];
    memset(heads, 0, p->plan.nstreams * sizeof(heads[0]));
    uint32_t seen = 0;
    unsigned found = 0, nd2h = p->plan.single ? 1 : p->plan.ncopy;
    for (slot_t *s = head; s != NULL && found < nd2h; s = s->next_inflight) {
        if (seen & (1u << s->d2h) || s->err != 0)
            continue;
        seen |= 1u << s->d2h;
        found++;
        uint64_t since =
            s->issue_ns > p->comp.head_since[s->d2h] ? s->issue_ns : p->comp.head_since[s->d2h];
        heads[s->d2h] = (ferry__wd_head_t){s->seq, since, s->batch->id, s->chunk};
    }
    p->comp.pub_any = found > 0;
    /* The same heads as last time, the latency within an eighth: a sign of life is enough (no
     * lock). The deadline is the floor plus a multiple of the latency: an eighth moves it
     * little. */
    uint64_t dl = p->comp.lat_ewma_ns > p->comp.pub_lat ? p->comp.lat_ewma_ns - p->comp.pub_lat
                                                        : p->comp.pub_lat - p->comp.lat_ewma_ns;
    if (memcmp(heads, p->comp.pub_heads, p->plan.nstreams * sizeof(heads[0])) == 0 &&
        p->comp.pub_lat != 0 && dl * 8 <= p->comp.pub_lat) {
        ferry__watchdog_alive(p->wdog.wd, now);
        return;
    }
    memcpy(p->comp.pub_heads, heads, p->plan.nstreams * sizeof(heads[0]));
    p->comp.pub_lat = p->comp.lat_ewma_ns;
    ferry__watchdog_publish(p->wdog.wd, heads, p->plan.nstreams, p->comp.lat_ewma_ns, now);
}

static void *completion_main(void *arg)
{
    ferry_pipeline_t *p = arg;
    own_thread = p;
#ifdef __linux__
    /* Linux stretches short sleeps by the thread's timer slack (50 us by default): the polls
     * of a real device sleep a few microseconds and must wake on time. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    /* Chunks in flight, oldest first; this thread's alone. */
    slot_t *head = NULL, *tail = NULL;
    pass_acc_t *acc = malloc(sizeof(*acc));
    if (acc == NULL) {
        /* Cannot happen in practice (a few KiB at start); without it nothing completes. */
        ferry_log(FERRY_LOG_ERROR, "pipeline", "completion thread: out of memory");
        return NULL;
    }
    uint64_t grace_seen = UINT64_MAX;
    for (;;) {
        uint64_t seen = atomic_load_explicit(&p->sh.work_seq, memory_order_seq_cst);
        /* A virtual clock is one host clock that every call charges: a pass run while another
         * thread issues would read it (and retire, stamp, charge) at a point of that thread's
         * work that only the host's scheduling decides. Passes run while nobody issues. */
        if (p->plan.virtual_clock && !pass_begin(p)) {
            wait_for_work(p, seen);
            continue;
        }

        /* Adopt what the issuers handed over: a stack, newest first, so reverse it. */
        slot_t *in = atomic_exchange_explicit(&p->sh.incoming, NULL, memory_order_acquire),
               *rev = NULL;
        while (in != NULL) {
            slot_t *next = in->next_inflight;
            in->next_inflight = rev;
            rev = in;
            in = next;
        }
        if (rev != NULL) {
            if (tail != NULL)
                tail->next_inflight = rev;
            else
                head = rev;
            for (tail = rev; tail->next_inflight != NULL; tail = tail->next_inflight) {
            }
        }
        batch_rec_t *ready = atomic_exchange_explicit(&p->sh.ready, NULL, memory_order_acquire);

        /* Poll. Ops on one stream complete in order, so once a chunk's D2H is not done, the
         * later chunks on the same D2H stream are not either: one query per stream suffices,
         * and the same events are what a wait needs. */
        slot_t *done[MAX_PASS];
        int errs[MAX_PASS];
        ferry_be_event_t *waitev[FERRY_STATS_MAX_STREAMS];
        size_t ndone = 0, nwait = 0;
        uint32_t blocked = 0;
        slot_t *prev = NULL, *s = head;
        while (s != NULL && ndone < MAX_PASS) {
            slot_t *next = s->next_inflight;
            int q;
            if (s->err != 0) {
                q = s->err;
            } else if (atomic_load_explicit(&p->sh.hang_lost, memory_order_acquire)) {
                q = FERRY_ETIMEDOUT; /* may never finish: redone on the CPU, slot abandoned */
                s->abandoned = true;
                snprintf(s->errmsg, sizeof(s->errmsg),
                         "in flight when a kernel ignored the abort flag and the GPU path ended "
                         "(a hang)");
            } else if (blocked & (1u << s->d2h)) {
                q = FERRY_EAGAIN;
            } else {
                q = ferry__be_event_query(p->dev, s->dep[EV_D2H_END]);
                /* Read after the query: a kernel that saw the word ended before its event. */
                if ((q == 0 || q == FERRY_ETIMEDOUT) &&
                    s->seq <= ferry__watchdog_raised(p->wdog.wd))
                    q = aborted(p, s);
            }
            if (q != FERRY_EAGAIN) {
                if (prev != NULL)
                    prev->next_inflight = next;
                else
                    head = next;
                if (tail == s)
                    tail = prev;
                errs[ndone] = q;
                done[ndone++] = s;
            } else {
                if (!(blocked & (1u << s->d2h))) {
                    blocked |= 1u << s->d2h;
                    waitev[nwait++] = s->dep[EV_D2H_END];
                }
                prev = s;
            }
            s = next;
        }

        /* Retire what is done, without the lock. */
        memset(acc, 0, offsetof(pass_acc_t, trace));
        batch_rec_t *fin = NULL, **fin_tail = &fin;
        uint64_t pass_now = ndone > 0 ? ferry_device_now_ns(p->dev) : 0;
        for (size_t i = 0; i < ndone; i++) {
            slot_t *d = done[i];
            batch_rec_t *b = d->batch;
            retire_chunk(p, d, errs[i], pass_now, acc);
            p->comp.head_since[d->d2h] = pass_now;
            if (atomic_fetch_sub_explicit(&b->chunks_left, d->nsub, memory_order_acq_rel) ==
                d->nsub) {
                b->next = NULL;
                *fin_tail = b;
                fin_tail = &b->next;
            }
        }
        if (p->link != NULL && acc->bytes > 0) /* the link monitor's count of our own bytes */
            ferry__rate_ring_add(&p->own_ring, pass_now, acc->bytes);
        /* Empty batches: oldest first, after the chunks (order among batches is not
         * promised, but it reads better in logs). */
        while (ready != NULL) {
            batch_rec_t *next = ready->next;
            ready->next = fin;
            fin = ready;
            ready = next;
        }

        /* The watchdog: the oldest chunk of each D2H stream still in flight (after this
         * pass's retirements, which start the clock of the chunks behind them). */
        if (head != NULL || p->comp.pub_any) {
            uint64_t wd_now = pass_now ? pass_now : ferry_device_now_ns(p->dev);
            publish_heads(p, head, wd_now);
            if (p->plan.virtual_clock) {
                ferry__watchdog_step(p->wdog.wd, wd_now);
                ferry__linkmon_step(p->link, wd_now, false);
            } else {
                ferry__watchdog_check_alive(p->wdog.wd, wd_now);
            }
        }

        bool take_token = false;
        if (ndone > 0) {
            pthread_mutex_lock(&p->lock);
            add_pass(p, acc);
            unsigned freed = 0;
            for (size_t i = 0; i < ndone; i++) {
                done[i]->batch = NULL;
                if (done[i]->abandoned) {
                    /* Only a hang abandons a slot, and a hang ends the GPU path: nothing waits
                     * for slots any more (acquire_slot, run_queue), or this one would be
                     * waited for in vain. */
                    FERRY_ASSERT(atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire));
                    p->api.nabandoned++; /* its kernel may still run: never reused */
                    continue;
                }
                done[i]->next_free = p->api.free_slots;
                p->api.free_slots = done[i];
                freed++;
            }
            p->api.nfree_slots += freed;
            p->api.steps_down_seen = p->comp.steps_down;
            p->api.bw_alerts_seen = p->comp.bw_alerts;
            p->api.bw_ratio_seen[0] = p->comp.bw[0].ratio;
            p->api.bw_ratio_seen[1] = p->comp.bw[1].ratio;
            p->api.steps_up_seen = p->comp.steps_up;
            /* The GPU path ended: an issuer waiting for slots goes to the CPU instead. */
            if (p->api.slot_waiting && atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire))
                wake_issuer(p, true);
            /* The issuer thread waits for a quarter of the slots (at least one): it then issues
             * several chunks per wake-up while the device still has the rest queued. */
            if (p->api.slot_waiting &&
                (p->api.nfree_slots >= p->api.slot_wake ||
                 atomic_load_explicit(&p->sh.level, memory_order_relaxed) >= 2))
                wake_issuer(p, false);
            /* Queued light batches that were short of slots: issue them here and now rather
             * than wake a thread for it. */
            if (!p->api.token && p->api.nqueued > 0) {
                p->api.token = true;
                atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
                take_token = true;
            }
            pthread_mutex_unlock(&p->lock);
        }
        if (take_token)
            run_queue(p, ROLE_COMPLETER);

        if (fin != NULL) {
            uint64_t now = read_clock(p);
            uint64_t ok = 0, on_cpu = 0, failed = 0, n = 0;
            batch_rec_t *last = NULL;
            for (batch_rec_t *b = fin; b != NULL; b = b->next) {
                int status = atomic_load_explicit(&b->status, memory_order_relaxed);
                uint32_t cpu_chunks = atomic_load_explicit(&b->cpu_chunks, memory_order_relaxed);
                ferry_batch_result_t r = {
                    .id = b->id,
                    .status = status,
                    .where = status != 0      ? FERRY_DONE_FAILED
                             : cpu_chunks > 0 ? FERRY_DONE_CPU
                                              : FERRY_DONE_GPU,
                    .in = b->b.in,
                    .out = b->b.out,
                    .bytes = b->b.bytes,
                    .chunks = b->nchunks,
                    .submit_ns = b->submit_ns,
                    .done_ns = now,
                };
                b->cb(&r, b->arg);
                ferry__latency_observe(p, now > b->submit_ns ? now - b->submit_ns : 0);
                if (status != 0)
                    failed++;
                else if (cpu_chunks > 0)
                    on_cpu++;
                else
                    ok++;
                last = b;
                n++;
            }
            /* Counted before completed, so that stats read after a drain include them. */
            atomic_fetch_add_explicit(&p->sh.done_gpu, ok, memory_order_relaxed);
            atomic_fetch_add_explicit(&p->sh.done_cpu, on_cpu, memory_order_relaxed);
            atomic_fetch_add_explicit(&p->sh.failed, failed, memory_order_relaxed);
            batch_rec_t *old = atomic_load_explicit(&p->sh.returned_recs, memory_order_relaxed);
            do
                last->next = old;
            while (!atomic_compare_exchange_weak_explicit(
                &p->sh.returned_recs, &old, fin, memory_order_release, memory_order_relaxed));
            /* As poke() with comp_sleeping: a drain registers before it reads completed. */
            atomic_fetch_add_explicit(&p->sh.completed, n, memory_order_seq_cst);
            if (atomic_load_explicit(&p->sh.drain_waiters, memory_order_seq_cst) > 0) {
                pthread_mutex_lock(&p->lock);
                pthread_cond_broadcast(&p->drain_cv);
                pthread_mutex_unlock(&p->lock);
            }
            continue;
        }
        if (ndone > 0 || take_token)
            continue;

        if (head == NULL) {
            pthread_mutex_lock(&p->lock);
            bool quit = p->api.comp_exit &&
                        atomic_load_explicit(&p->sh.incoming, memory_order_acquire) == NULL &&
                        atomic_load_explicit(&p->sh.ready, memory_order_acquire) == NULL;
            pthread_mutex_unlock(&p->lock);
            if (quit) {
                pass_end(p);
                break;
            }
            wait_for_work(p, seen);
            continue;
        }
        if (p->plan.virtual_clock && grace_seen != seen &&
            atomic_load_explicit(&p->sh.busy, memory_order_seq_cst) == 0) {
            grace_seen = seen; /* once per idle spell */
            wait_for_caller(p, seen);
            continue;
        }
        if (p->plan.virtual_clock && submitter_runs(p)) {
            /* A submit on its way to the queue: it comes before the device moves on. */
            pass_end(p);
            wait_briefly(p, seen);
            continue;
        }
        if (atomic_load_explicit(&p->sh.busy, memory_order_seq_cst) == 0) {
            /* Nothing more will be issued until something completes: wait on the device.
             * On the simulator this is what advances the virtual clock. */
            size_t which = 0;
            int rc = ferry__be_event_wait_any(p->dev, waitev, nwait, 2000000, &which);
            if (rc != 0 && rc != FERRY_ETIMEDOUT)
                ferry_log(FERRY_LOG_DEBUG, "pipeline", "event wait: %s", ferry_err_name(rc));
        } else if (p->plan.virtual_clock) {
            /* An issuer is busy in real time: let it finish before device time moves. */
            wait_for_work(p, seen);
        } else {
            /* A real device finishes work whether or not anyone issues: keep polling it, in
             * short waits, so that slots come back as soon as their chunks are done. */
            size_t which = 0;
            (void)ferry__be_event_wait_any(p->dev, waitev, nwait, 50000, &which);
        }
    }
    free(acc);
    return NULL;
}

/* ---- issue ------------------------------------------------------------------------------- */

/* Chunks the ladder lets be in flight now. Under lock. */
static unsigned inflight_limit(const ferry_pipeline_t *p)
{
    int level = atomic_load_explicit(&p->sh.level, memory_order_relaxed);
    return level >= 3 ? 1u : level == 2 ? (p->plan.depth < 2 ? p->plan.depth : 2u) : p->plan.depth;
}

/* Issuer thread, holding the token: take a free slot, waiting for a quarter of them when none
 * is free. While it waits it is idle (busy 0): the device may run ahead. */
static slot_t *acquire_slot(ferry_pipeline_t *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->api.free_slots == NULL) {
        p->api.slot_waiting = true;
        /* Every slot not free is in flight (the holder has none between chunks), so slots
         * come back; wait for slot_wake of them, unless the GPU path ends meanwhile (slots of
         * hung chunks never come back). Idle (busy 0) at each wait: a waker sets it. */
        while (p->api.nfree_slots < p->api.slot_wake &&
               !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire)) {
            set_busy(p, false, true);
            pthread_cond_wait(&p->slot_cv, &p->lock);
        }
        p->api.slot_waiting = false;
        set_busy(p, true, true);
        pass_wait(p);
    }
    /* The ladder may hold fewer chunks in flight than there are slots. */
    while (p->plan.depth - p->api.nfree_slots >= inflight_limit(p) &&
           !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire)) {
        p->api.slot_waiting = true;
        set_busy(p, false, true);
        pthread_cond_wait(&p->slot_cv, &p->lock);
        p->api.slot_waiting = false;
        set_busy(p, true, true);
        pass_wait(p);
    }
    slot_t *s = p->api.free_slots;
    if (s == NULL) {
        pthread_mutex_unlock(&p->lock);
        return NULL;
    }
    p->api.free_slots = s->next_free;
    p->api.nfree_slots--;
    pthread_mutex_unlock(&p->lock);
    return s;
}

static bool is_pinned(ferry_pipeline_t *p, const void *ptr, size_t n)
{
    return ferry_pool_owns(p->pool, ptr, n) || ferry__rt_is_registered(p->dev, ptr, n);
}

/* Issue the ops of the group bound to @s: one H2D, a kernel per chunk, one D2H. Returns 0 or
 * the error of the first call that failed. */
static int issue_chunk(ferry_pipeline_t *p, slot_t *s)
{
    batch_rec_t *b = s->batch;
    ferry_device_t *d = p->dev;
    const void *src = s->h_in;
    int rc = 0;

    if (b->b.prepare != NULL) {
        for (uint32_t i = 0; i < s->nsub; i++) { /* chunk by chunk, as the callback is told */
            size_t at, n = sub_bytes(p, s, i, &at);
            rc = b->b.prepare(s->h_in + at, n, s->offset + at, b->b.prepare_arg);
            if (rc != 0)
                return rc < 0 ? rc : FERRY_EKERNEL;
        }
    } else {
        const unsigned char *in = (const unsigned char *)b->b.in + s->offset;
        if (is_pinned(p, in, s->bytes)) {
            src = in;
        } else {
            ferry__parallel_memcpy(p->workers, s->h_in, in, s->bytes, p->plan.stage_threshold);
            atomic_fetch_add_explicit(&p->sh.staged_bytes, s->bytes, memory_order_relaxed);
        }
    }
    s->host_in = src;
    if (atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire)) {
        s->gpu_skipped = true;
        return FERRY_ESTICKY; /* the input is staged: the CPU fallback takes it from here */
    }
    void *dst = s->h_out;
    s->copy_out = true;
    if (b->b.out != NULL && is_pinned(p, (unsigned char *)b->b.out + s->offset, s->bytes)) {
        dst = (unsigned char *)b->b.out + s->offset;
        s->copy_out = false;
    }
    ferry_be_stream_t *sh = p->streams[s->h2d], *sc = p->streams[s->comp], *sd = p->streams[s->d2h];
    bool sample = s->timing == TIME_SAMPLE;
    ferry_be_event_t **dep = s->dep;
    s->issue_ns = ferry_device_now_ns(d);
    if ((sample && (rc = ferry__be_event_record(d, s->tev[TEV_H2D_START], sh)) != 0) ||
        (rc = ferry__be_memcpy_h2d(d, sh, s->d_in, src, s->bytes)) != 0 ||
        (rc = ferry__be_event_record(d, dep[EV_H2D_END], sh)) != 0)
        return rc;
    /* On one stream, stream order already is the dependency. */
    if ((sc != sh && (rc = ferry__be_stream_wait_event(d, sc, dep[EV_H2D_END])) != 0) ||
        (sample && (rc = ferry__be_event_record(d, s->tev[TEV_COMP_START], sc)) != 0) ||
        (rc = launch_group(p, s, sc)) != 0 ||
        (rc = ferry__be_event_record(d, dep[EV_COMP_END], sc)) != 0)
        return rc;
    if ((sd != sc && (rc = ferry__be_stream_wait_event(d, sd, dep[EV_COMP_END])) != 0) ||
        (sample && (rc = ferry__be_event_record(d, s->tev[TEV_D2H_START], sd)) != 0) ||
        (rc = ferry__be_memcpy_d2h(d, sd, dst, s->d_out, s->bytes)) != 0 ||
        (rc = ferry__be_event_record(d, dep[EV_D2H_END], sd)) != 0)
        return rc;
    return 0;
}

/* Bind the group of chunks of @b from @c on (the copy group's size, or what is left of the
 * batch) to slot @s, issue it and hand it to the completion thread (the caller pokes it).
 * Returns the chunks bound. Token holder only. */
static uint32_t issue_one(ferry_pipeline_t *p, batch_rec_t *b, uint32_t c, slot_t *s)
{
    uint64_t k = p->iss.chunk_counter++;
    s->batch = b;
    s->chunk = c;
    s->nsub = b->nchunks - c < p->plan.group ? b->nchunks - c : p->plan.group;
    s->offset = (size_t)c * p->plan.chunk;
    size_t span = (size_t)s->nsub * p->plan.chunk;
    s->bytes = b->b.bytes - s->offset < span ? b->b.bytes - s->offset : span;
    int level = atomic_load_explicit(&p->sh.level, memory_order_relaxed);
    if (p->plan.single || level >= 3) {
        s->h2d = s->comp = s->d2h = 0;
    } else {
        s->h2d = (unsigned)(k % p->plan.ncopy);
        s->comp = p->plan.ncopy + (level >= 1 ? 0u : (unsigned)(k % p->plan.ncomp));
        s->d2h = p->plan.ncopy + p->plan.ncomp + (unsigned)(k % p->plan.ncopy);
    }
    s->err = 0;
    s->gpu_skipped = false;
    s->seq = k + 1;
    s->attempt = 0;
    s->host_in = NULL;
    s->errmsg[0] = '\0';
    s->traced = atomic_load_explicit(&p->sh.tracing, memory_order_relaxed) &&
                (p->plan.trace_chunks == 0 || k < p->plan.trace_chunks);
    /* Sampling: p->iss.sample_in counts down to the next sampled chunk. The op before each of that
     * chunk's ops on its stream is the copy streams' count back for the copies, the compute
     * streams' for the kernel (1 for all at the ladder's level 1 and up, and on one stream). */
    unsigned ahead = p->iss.sample_in;
    p->iss.sample_in = ahead ? ahead - 1 : SAMPLE_EVERY - 1;
    s->timing = TIME_NONE;
    if (p->plan.time_all || s->traced) {
        s->timing = TIME_ENDS;
    } else if (!p->plan.time_none && ahead == 0) {
        s->timing = p->plan.anchors <= ANCHORS_MAX ? TIME_ENDS : TIME_SAMPLE;
    } else if (!p->plan.time_none && ahead <= p->plan.anchors && p->plan.anchors <= ANCHORS_MAX) {
        bool one = p->plan.single || level >= 3; /* everything on stream 0 */
        unsigned copies = one ? 1u : p->plan.ncopy,
                 kernels = one || level >= 1 ? 1u : p->plan.ncomp;
        /* Bits: 1 the H2D's end, 2 the kernel's, 4 the D2H's (on one stream, all three). */
        s->anchor_ends = (ahead == copies ? 5u : 0u) | (ahead == kernels ? 2u : 0u);
        /* With several copy streams, the chunk just before: where the copies of each direction
         * had got to when the sampled chunk's began, for the union of a direction's copies
         * (retire_chunk). */
        if (copies > 1 && ahead == 1)
            s->anchor_ends |= 5u;
        if (s->anchor_ends != 0)
            s->timing = TIME_ANCHOR;
    }
    unsigned ends = s->timing == TIME_NONE ? 0u : s->timing == TIME_ANCHOR ? s->anchor_ends : 7u;
    s->dep[EV_H2D_END] = ends & 1u ? s->tev[TEV_H2D_END] : s->ev[EV_H2D_END];
    s->dep[EV_COMP_END] = ends & 2u ? s->tev[TEV_COMP_END] : s->ev[EV_COMP_END];
    s->dep[EV_D2H_END] = ends & 4u ? s->tev[TEV_D2H_END] : s->ev[EV_D2H_END];
    int rc = issue_chunk(p, s);
    if (rc != 0 && s->gpu_skipped) {
        s->err = rc; /* nothing was queued on the device */
    } else if (rc != 0) {
        ferry__strlcpy(s->errmsg, ferry__last_error_text(), sizeof(s->errmsg));
        ferry_log(FERRY_LOG_ERROR, "pipeline", "batch %llu chunk %u: issue failed: %s (%s)",
                  (unsigned long long)b->id, c, ferry_err_name(rc), s->errmsg);
        /* Part of the chunk may be queued: let it finish before the slot is reused. */
        ferry__be_stream_sync(p->dev, p->streams[s->h2d]);
        ferry__be_stream_sync(p->dev, p->streams[s->comp]);
        ferry__be_stream_sync(p->dev, p->streams[s->d2h]);
        s->err = rc;
    }
    atomic_fetch_add_explicit(&p->sh.chunks_issued, s->nsub, memory_order_relaxed);
    if (p->plan.virtual_clock)
        read_clock(p); /* for submit_stamp() */
    /* A failed chunk still goes through the completion thread, which counts the error once
     * for its batch and frees the slot. */
    uint32_t n = s->nsub;
    push_incoming(p, s); /* the completion thread's from here on */
    return n;
}

/* Issue a light batch whose slots (@sl, b->nslots of them) are already taken. Once its last
 * chunk is handed over, @b may be completed and reused: it is not read again. */
static void issue_light(ferry_pipeline_t *p, batch_rec_t *b, slot_t *const *sl)
{
    uint32_t n = b->nchunks;
    if (n == 0)
        push_ready(p, b);
    for (uint32_t c = 0, j = 0; c < n; j++)
        c += issue_one(p, b, c, sl[j]);
    poke(p, false);
}

/* The GPU path has ended: chunks [@c0, @c1) of @b run on the stage's CPU function here, on the
 * token holder's thread, with no slot (slots of hung chunks may never come back). The batch is
 * handed to the completion thread once its last chunk is accounted. */
static void cpu_direct(ferry_pipeline_t *p, batch_rec_t *b, uint32_t c0, uint32_t c1)
{
    int rc = 0;
    if (p->stage.cpu == NULL) {
        rc = ferry__error(FERRY_ESTICKY,
                          "pipeline: the GPU path has ended and stage '%s' has no "
                          "CPU function",
                          p->stage_name);
    } else if (p->iss.cpu_tmp == NULL && (p->iss.cpu_tmp = malloc(2 * p->plan.chunk)) == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: no memory for the CPU path");
    }
    uint32_t ok = 0;
    for (uint32_t c = c0; rc == 0 && c < c1; c++) {
        size_t off = (size_t)c * p->plan.chunk;
        size_t n = b->b.bytes - off < p->plan.chunk ? b->b.bytes - off : p->plan.chunk;
        const void *in = (const unsigned char *)b->b.in + off;
        if (b->b.prepare != NULL) {
            rc = b->b.prepare(p->iss.cpu_tmp, n, off, b->b.prepare_arg);
            if (rc != 0)
                break;
            in = p->iss.cpu_tmp;
        }
        void *out =
            b->b.out != NULL ? (unsigned char *)b->b.out + off : p->iss.cpu_tmp + p->plan.chunk;
        /* A sequence number as on the GPU path (>= 1, in issue order): the chunk counter is
         * the token holder's, as is this call. */
        uint64_t seq = ++p->iss.chunk_counter;
        ferry_kernel_args_t args = {.size = sizeof(args),
                                    .in = in,
                                    .out = out,
                                    .bytes = n,
                                    .offset = off,
                                    .batch_id = b->id,
                                    .chunk = c,
                                    .attempt = 1,
                                    .seq = seq,
                                    .batch_user = b->b.user};
        rc = cpu_run(p, &args);
        ok += rc == 0;
    }
    if (rc > 0 || rc < FERRY_ERR_MIN_)
        rc = FERRY_EKERNEL;
    atomic_fetch_add_explicit(&b->cpu_chunks, ok, memory_order_relaxed);
    int zero = 0;
    if (rc != 0)
        atomic_compare_exchange_strong_explicit(&b->status, &zero, rc, memory_order_relaxed,
                                                memory_order_relaxed);
    atomic_fetch_add_explicit(&p->sh.chunks_cpu_direct, ok, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->sh.chunks_issued, c1 - c0, memory_order_relaxed);
    if (atomic_fetch_sub_explicit(&b->chunks_left, c1 - c0, memory_order_acq_rel) == c1 - c0)
        push_ready(p, b);
    poke(p, false);
}

/* Issuer thread: any batch, waiting for slots chunk by chunk (@b as in issue_light). */
static void issue_heavy(ferry_pipeline_t *p, batch_rec_t *b)
{
    uint32_t n = b->nchunks;
    if (n == 0) {
        push_ready(p, b);
        poke(p, false);
        return;
    }
    for (uint32_t c = 0; c < n;) {
        slot_t *s =
            atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire) ? NULL : acquire_slot(p);
        if (s == NULL) {
            cpu_direct(p, b, c, n);
            return;
        }
        c += issue_one(p, b, c, s);
        poke(p, false);
    }
}

/* Take @n free slots into @sl. Under lock, with at least @n free. */
static void take_slots(ferry_pipeline_t *p, uint32_t n, slot_t **sl)
{
    for (uint32_t i = 0; i < n; i++) {
        sl[i] = p->api.free_slots;
        p->api.free_slots = sl[i]->next_free;
    }
    p->api.nfree_slots -= n;
}

/* With the token held and the lock not: issue queued batches in order until the queue is
 * empty, then release the token. A borrowed thread (@role caller or completer) issues light
 * batches that have their slots free now, and otherwise stops: short of slots it releases
 * the token (the completion thread takes it again when it frees slots, as something is in
 * flight); for anything else it hands the token to the issuer thread. */
static void run_queue(ferry_pipeline_t *p, enum issue_role role)
{
    unsigned budget = role == ROLE_CALLER ? CALLER_QUEUE_BUDGET : UINT32_MAX;
    slot_t *sl[64];
    for (;;) {
        if (p->iss.pending == NULL) {
            pthread_mutex_lock(&p->lock);
            if (p->api.nqueued == 0) {
                p->api.token = false;
                /* A submit on its way to the queue takes the token when it gets there: on a
                 * virtual clock the device waits for it rather than for the host to run it. */
                if (!p->plan.virtual_clock || p->api.submitting == 0)
                    set_busy(p, false, true);
                pthread_mutex_unlock(&p->lock);
                return;
            }
            pthread_mutex_unlock(&p->lock);
            /* Counted items are in the queue, and only the token holder pops. */
            int rc = ferry__bqueue_pop(p->queue, &p->iss.pending, false);
            FERRY_ASSERT(rc == 0);
            (void)rc;
            /* A virtual clock does not model the caller's own time: when a submit ran against
             * this thread's issuing is the host's scheduling. The batch's submit time is when
             * it leaves the queue, which the model decides. */
            if (p->plan.virtual_clock)
                p->iss.pending->submit_ns = read_clock(p);
        }
        batch_rec_t *b = p->iss.pending;
        if (atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire) && b->nchunks > 0 &&
            (role == ROLE_ISSUER || b->light)) {
            /* No GPU any more: the batch goes straight to the CPU function. */
            pthread_mutex_lock(&p->lock);
            p->api.nqueued--;
            p->iss.pending = NULL;
            pthread_mutex_unlock(&p->lock);
            cpu_direct(p, b, 0, b->nchunks);
            continue;
        }
        pthread_mutex_lock(&p->lock);
        if (b->light && p->api.nfree_slots >= b->nslots &&
            p->plan.depth - p->api.nfree_slots + b->nslots <= inflight_limit(p) &&
            (role == ROLE_ISSUER || budget > 0)) {
            take_slots(p, b->nslots, sl);
            p->api.nqueued--;
            p->iss.pending = NULL;
            pthread_mutex_unlock(&p->lock);
            budget -= budget > 0;
            issue_light(p, b, sl);
            continue;
        }
        if (role == ROLE_ISSUER) { /* anything the light path did not take, slots awaited */
            p->api.nqueued--;
            p->iss.pending = NULL;
            pthread_mutex_unlock(&p->lock);
            issue_heavy(p, b);
            continue;
        }
        if (b->light && p->api.nfree_slots < b->nslots) {
            p->api.token = false;
            set_busy(p, false, true);
        } else {
            p->api.issuer_turn = true;
            pthread_cond_signal(&p->issue_cv);
        }
        pthread_mutex_unlock(&p->lock);
        return;
    }
}

static void *issuer_main(void *arg)
{
    ferry_pipeline_t *p = arg;
    own_thread = p;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->api.issuer_turn && !p->api.closing)
            pthread_cond_wait(&p->issue_cv, &p->lock);
        if (!p->api.issuer_turn)
            break; /* closing, and the token is not ours: nothing is queued */
        p->api.issuer_turn = false;
        pthread_mutex_unlock(&p->lock);
        run_queue(p, ROLE_ISSUER);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- public API ---------------------------------------------------------------------------- */

static int check_range(const char *what, long long v, long long lo, long long hi)
{
    if (v < lo || v > hi)
        return ferry__error(FERRY_EINVAL,
                            "pipeline %s=%lld is out of range (accepted: %lld to %lld)", what, v,
                            lo, hi);
    return 0;
}

static void fill_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out);

/* Stop the threads and release the streams, events, device and pinned memory, the watchdog
 * and the queue; the stats as they stand go to final. Once per pipeline, nothing in flight. */
static void release(ferry_pipeline_t *p)
{
    if (p->counted_streams)
        __atomic_sub_fetch(&p->dev->active_streams, p->plan.nstreams, __ATOMIC_RELAXED);
    if (p->comp.failure_log != NULL)
        fclose(p->comp.failure_log);
    free(p->iss.cpu_tmp);
    if (p->queue)
        ferry__bqueue_close(p->queue);
    pthread_mutex_lock(&p->lock);
    p->api.closing = true;
    pthread_cond_broadcast(&p->issue_cv);
    pthread_mutex_unlock(&p->lock);
    if (p->api.issuer_started)
        pthread_join(p->issuer, NULL);
    if (p->api.completer_started) {
        pthread_mutex_lock(&p->lock);
        p->api.comp_exit = true;
        poke(p, true);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->completer, NULL);
    }
    pthread_mutex_lock(&p->lock);
    p->api.final.size = sizeof(p->api.final);
    fill_stats(p, &p->api.final);
    p->api.final_ready = true;
    pthread_mutex_unlock(&p->lock);
    /* A hung GPU never finishes the kernel that hangs, nor what waits behind it: waiting for
     * its streams, or freeing memory (which waits for the device), would never return. Its
     * memory is left to the process's end. */
    bool hung =
        atomic_load_explicit(&p->sh.hang_lost, memory_order_acquire) && !p->plan.virtual_clock;
    if (p->comp.retry_stream != NULL && !hung)
        ferry__be_stream_sync(p->dev, p->comp.retry_stream);
    ferry__be_stream_destroy(p->dev, p->comp.retry_stream);
    ferry__be_event_destroy(p->dev, p->comp.retry_ev);
    ferry__watchdog_destroy(p->wdog.wd,
                            atomic_load_explicit(&p->sh.hang_lost, memory_order_acquire) != 0);
    ferry__linkmon_destroy(p->link);
    for (unsigned i = 0; i < p->plan.nstreams; i++)
        if (p->streams[i]) {
            if (!hung)
                ferry__be_stream_sync(p->dev, p->streams[i]);
            ferry__be_stream_destroy(p->dev, p->streams[i]);
        }
    if (hung) {
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "closed on a hung GPU: its device and pinned memory stay allocated until the "
                  "process ends");
        free(p->slots);
        p->slots = NULL;
        p->pool = NULL;
    }
    for (unsigned i = 0; p->slots && i < p->plan.depth; i++) {
        slot_t *s = &p->slots[i];
        for (int e = 0; e < EV_N; e++)
            ferry__be_event_destroy(p->dev, s->ev[e]);
        for (int e = 0; e < TEV_N; e++)
            ferry__be_event_destroy(p->dev, s->tev[e]);
        ferry__be_mem_free(p->dev, s->d_in);
        ferry__be_mem_free(p->dev, s->d_out);
        if (s->h_in)
            ferry_pool_free(p->pool, s->h_in);
        if (s->h_out)
            ferry_pool_free(p->pool, s->h_out);
    }
    free(p->slots);
    ferry_pool_destroy(p->pool);
    ferry__workers_destroy(p->workers);
    ferry__bqueue_destroy(p->queue);
    p->queue = NULL;
    p->workers = NULL;
    p->wdog.wd = NULL;
    p->link = NULL;
    for (int i = 0; i < 2; i++) {
        batch_rec_t *r = i == 0 ? p->api.free_recs
                                : atomic_load_explicit(&p->sh.returned_recs, memory_order_relaxed);
        while (r != NULL) {
            batch_rec_t *next = r->next;
            free(r);
            r = next;
        }
    }
    p->api.free_recs = NULL;
    atomic_store_explicit(&p->sh.returned_recs, NULL, memory_order_relaxed);
    atomic_store_explicit(&p->sh.released, 1, memory_order_release);
}

/* Free what a released pipeline kept: the trace, the lock, the handle. */
static void free_husk(ferry_pipeline_t *p)
{
    free(p->api.trace);
    free(p->link_prof);
    pthread_cond_destroy(&p->issue_cv);
    pthread_cond_destroy(&p->slot_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->pass_cv);
    pthread_cond_destroy(&p->drain_cv);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static void destroy(ferry_pipeline_t *p)
{
    if (p == NULL)
        return;
    release(p);
    free_husk(p);
}

static ferry_pipeline_t *of_child(ferry__rt_child_t *c)
{
    return (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
}

static bool child_is_live(ferry__rt_child_t *c, char *name, size_t len)
{
    ferry_pipeline_t *p = of_child(c);
    snprintf(name, len, "'%s' #%u", p->stage_name, p->serial);
    return !atomic_load_explicit(&p->sh.released, memory_order_acquire);
}

static void child_destroy(ferry__rt_child_t *c)
{
    free_husk(of_child(c));
}

int ferry_pipeline_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out)
{
    if (cfg == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: NULL config or out");
    if (cfg->size < offsetof(ferry_pipeline_config_t, workers))
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_create: cfg->size is %zu; use "
                            "FERRY_PIPELINE_CONFIG_INIT",
                            cfg->size);
    if (cfg->device == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->device is NULL");
    ferry_device_t *dev = cfg->device;
    const ferry_options_t *o = dev->rt->opts;
    const ferry_stage_t *st = cfg->stage;
    if (st == NULL || st->size < offsetof(ferry_stage_t, ns_per_byte))
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->stage is "
                                                         "NULL or its size is not set "
                                                         "(FERRY_STAGE_INIT)"));
    bool virt = ferry_device_is_simulated(dev);
    if (virt && st->cpu == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "stage '%s' has no CPU function: the "
                                                    "simulator runs it as the kernel",
                                                    st->name ? st->name : "?"));
    if (!virt && st->gpu == NULL)
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EINVAL, "stage '%s' has no GPU launch function",
                                           st->name ? st->name : "?"));
    if (!(st->ns_per_byte >= 0.0) || st->ns_per_byte > 1e6)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "stage ns_per_byte %g out of range (0 to 1e6)",
                                                    st->ns_per_byte));

    size_t chunk =
        cfg->chunk_bytes ? cfg->chunk_bytes : (size_t)ferry__opt_i64(o, FERRY__OPT_chunk_bytes);
    if (chunk == 0)
        chunk = dev->props.default_chunk_bytes;
    if (chunk == 0)
        chunk = 8u << 20; /* FACTS.md: 4-16 MiB chunks reach 97-100% of the round-trip ceiling */
    size_t gran = st->size > offsetof(ferry_stage_t, granularity) ? st->granularity : 0;
    if (gran > (1u << 20))
        return ferry__rt_fail(
            dev->rt,
            ferry__error(FERRY_EINVAL, "stage granularity %zu out of range (0 to 1M)", gran));
    if (gran > 1 && chunk % gran != 0)
        chunk = chunk < gran ? gran : chunk - chunk % gran; /* elements never straddle chunks */
    long long depth = cfg->depth ? cfg->depth : ferry__opt_i64(o, FERRY__OPT_depth);
    long long ncopy =
        cfg->copy_streams ? cfg->copy_streams : ferry__opt_i64(o, FERRY__OPT_copy_streams);
    long long ncomp =
        cfg->compute_streams ? cfg->compute_streams : ferry__opt_i64(o, FERRY__OPT_compute_streams);
    int rc;
    size_t coalesce =
        cfg->size > offsetof(ferry_pipeline_config_t, coalesce_bytes) ? cfg->coalesce_bytes : 0;
    /* The default merges what it can quietly; a value someone chose is told when it merges
     * nothing or more than a copy takes. */
    bool chosen = coalesce != 0 || ferry__opt_given(o, FERRY__OPT_coalesce_bytes);
    if (coalesce == 0)
        coalesce = (size_t)ferry__opt_i64(o, FERRY__OPT_coalesce_bytes);
    /* A copy group: adjacent chunks of a batch share one copy each way (FACTS.md: a copy costs
     * ~5 us plus its bytes at the link's rate, so 1 MiB copies lose ~20%). */
    unsigned group = coalesce == SIZE_MAX || coalesce <= chunk ? 1u
                     : coalesce / chunk > GROUP_MAX            ? GROUP_MAX
                                                               : (unsigned)(coalesce / chunk);
    /* Said, not refused: the option stays meaningful for other chunk sizes. */
    if (chosen && coalesce != 0 && coalesce != SIZE_MAX && coalesce < 2 * chunk)
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "coalesce_bytes %zu holds fewer than two chunks of %zu: a copy per chunk "
                  "(set it to at least twice chunk_bytes to merge copies)",
                  coalesce, chunk);
    else if (chosen && coalesce != 0 && coalesce != SIZE_MAX && coalesce / chunk > GROUP_MAX)
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "coalesce_bytes %zu holds %zu chunks of %zu: copies merge %u chunks at most",
                  coalesce, coalesce / chunk, chunk, GROUP_MAX);
    if ((rc = check_range("chunk_bytes", (long long)chunk, 1, 1LL << 30)) != 0 ||
        (rc = check_range("depth", depth, 1, 64)) != 0 ||
        (rc = check_range("copy_streams", ncopy, 1, 8)) != 0 ||
        (rc = check_range("compute_streams", ncomp, 1, 16)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    int cprio = cfg->copy_priority != FERRY_PRIORITY_DEFAULT
                    ? cfg->copy_priority
                    : (int)ferry__opt_i64(o, FERRY__OPT_copy_priority);
    int kprio = cfg->compute_priority != FERRY_PRIORITY_DEFAULT
                    ? cfg->compute_priority
                    : (int)ferry__opt_i64(o, FERRY__OPT_compute_priority);
    /* CUDA priorities: greatest is numerically smallest (-5 on the H200), least is 0. */
    int lo = dev->props.priority_greatest, hi = dev->props.priority_least;
    if ((rc = check_range("copy_priority", cprio, lo, hi)) != 0 ||
        (rc = check_range("compute_priority", kprio, lo, hi)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    long long qd = cfg->queue_depth ? cfg->queue_depth : ferry__opt_i64(o, FERRY__OPT_queue_depth);
    if (qd == 0)
        qd = (ncopy * 2 + ncomp) * 2;
    if ((rc = check_range("queue_depth", qd, 1, 1 << 20)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    if (cfg->nonblocking < -1 || cfg->nonblocking > 1)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "pipeline nonblocking=%d (accepted: -1, 0, 1)",
                                                    cfg->nonblocking));
    long long nworkers = cfg->workers ? cfg->workers : ferry__opt_i64(o, FERRY__OPT_workers);
    if (nworkers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nworkers = n < 1 ? 1 : (n > 8 ? 8 : n);
    }
    if ((rc = check_range("workers", nworkers, 1, 256)) != 0)
        return ferry__rt_fail(dev->rt, rc);

    /* Aligned: the shared atomics sit on cache lines of their own (pipeline_internal.h). */
    ferry_pipeline_t *p = aligned_alloc(FERRY__CACHE_LINE, sizeof(*p));
    if (p == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_ENOMEM, "pipeline: out of memory"));
    memset(p, 0, sizeof(*p));
    static _Atomic unsigned serials;
    p->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
    p->dev = dev;
    p->stage = *st;
    ferry__strlcpy(p->stage_name, st->name ? st->name : "stage", sizeof(p->stage_name));
    p->stage.name = p->stage_name;
    p->plan.chunk = chunk;
    p->plan.group = group;
    p->plan.depth = (unsigned)depth;
    p->plan.ncopy = (unsigned)ncopy;
    p->plan.ncomp = (unsigned)ncomp;
    p->plan.single =
        cfg->size > offsetof(ferry_pipeline_config_t, single_stream) && cfg->single_stream;
    p->plan.nstreams = p->plan.single ? 1 : p->plan.ncopy * 2 + p->plan.ncomp;
    p->plan.queue_depth = (size_t)qd;
    p->api.slot_wake = p->plan.depth / 4 ? p->plan.depth / 4 : 1;
    p->plan.copy_prio = cprio;
    p->plan.comp_prio = kprio;
    /* CUDA binds a device to the calling thread (cudaSetDevice): ferry must not change the
     * caller's current device behind its back, so on such backends only ferry's threads issue. */
    p->plan.caller_issues = (dev->ops->caps & FERRY_BE_CAP_NATIVE_STREAM) == 0;
    p->plan.nonblocking = cfg->nonblocking == -1 ? ferry__opt_i64(o, FERRY__OPT_nonblocking) != 0
                                                 : cfg->nonblocking == 1;
    p->plan.stage_threshold = (size_t)ferry__opt_i64(o, FERRY__OPT_stage_threshold);
    if (p->plan.stage_threshold == 0)
        p->plan.stage_threshold = SIZE_MAX / 4;
    /* The stream plan against the hardware queues: CUDA spreads a context's streams over
     * CUDA_DEVICE_MAX_CONNECTIONS queues; more active streams than queues share them, and a
     * stream can then wait behind another's blocked work. Round-robin issue (what ferry does)
     * keeps them concurrent at any value (FACTS.md), so this is said, not refused. */
    p->context_streams =
        __atomic_add_fetch(&dev->active_streams, p->plan.nstreams, __ATOMIC_RELAXED);
    p->counted_streams = true;
    if (p->context_streams > dev->connections)
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "%u streams are active on device %d (this pipeline's %u included) and "
                  "CUDA_DEVICE_MAX_CONNECTIONS gives %u queues: streams share queues; ferry "
                  "issues round-robin, which keeps them concurrent (`ferry connections "
                  "--recommend --streams %u`)",
                  p->context_streams, dev->index, p->plan.nstreams, dev->connections,
                  p->context_streams);
    p->plan.deadline_factor = ferry__opt_double(o, FERRY__OPT_deadline_factor);
    p->plan.bw_alert_ratio = ferry__opt_double(o, FERRY__OPT_bw_alert_ratio);
    if (p->plan.bw_alert_ratio > 0 && (p->link_prof = malloc(sizeof(*p->link_prof))) != NULL &&
        ferry__device_link_profile(dev, p->link_prof) != 0) {
        free(p->link_prof); /* no curve for this link: the theoretical rate alone */
        p->link_prof = NULL;
    }
    p->plan.bw_foreign_ratio = ferry__opt_double(o, FERRY__OPT_bw_foreign_ratio);
    if (cfg->size > offsetof(ferry_pipeline_config_t, alert_arg)) {
        p->on_alert = cfg->on_alert;
        p->alert_arg = cfg->alert_arg;
    }
    p->plan.deadline_floor_ns =
        (uint64_t)ferry__opt_i64(o, FERRY__OPT_deadline_floor_ms) * 1000000u;
    p->plan.gpu_retries = (unsigned)ferry__opt_i64(o, FERRY__OPT_gpu_retries);
    /* Before any chunk has completed, the latency behind the deadlines is estimated from the
     * stage's cost hint and a pessimistic link (a quarter of its rate, 1 GB/s when unknown) for
     * a full ring of chunks: a slow first kernel is not taken for a hang. */
    double link = p->dev->props.link_gbps > 4 ? p->dev->props.link_gbps / 4 : 1;
    p->comp.lat_ewma_ns =
        (uint64_t)((double)p->plan.depth * (p->stage.ns_per_byte * (double)chunk * group +
                                            2.0 * (double)chunk * group / link));
    const char *flog = ferry__opt_str(o, FERRY__OPT_failure_log);
    if (flog != NULL && flog[0] != '\0') {
        ferry__strlcpy(p->failure_log_path, flog, sizeof(p->failure_log_path));
        p->comp.failure_log = fopen(flog, "a");
        if (p->comp.failure_log == NULL) {
            rc = ferry__error(FERRY_EIO, "option failure_log: cannot open '%s' for appending: %s",
                              flog, strerror(errno));
            goto out_fail;
        }
    }
    atomic_store_explicit(&p->sh.tracing, ferry__opt_i64(o, FERRY__OPT_trace) != 0,
                          memory_order_relaxed);
    p->plan.trace_chunks = (uint64_t)ferry__opt_i64(o, FERRY__OPT_trace_chunks);
    p->plan.time_all = strcmp(ferry__opt_str(o, FERRY__OPT_op_timing), "all") == 0;
    p->plan.time_none = strcmp(ferry__opt_str(o, FERRY__OPT_op_timing), "off") == 0;
    p->plan.anchors = p->plan.single                  ? 1u
                      : p->plan.ncopy > p->plan.ncomp ? p->plan.ncopy
                                                      : p->plan.ncomp;
    p->plan.virtual_clock = virt;
    ferry__mutex_init_adaptive(&p->lock);
    pthread_cond_init(&p->issue_cv, NULL);
    pthread_cond_init(&p->slot_cv, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->pass_cv, NULL);
    pthread_cond_init(&p->drain_cv, NULL);
    p->api.st.size = sizeof(p->api.st);

    if ((rc = ferry__bqueue_create((size_t)qd, sizeof(batch_rec_t *), &p->queue)) != 0 ||
        (rc = ferry__workers_create((unsigned)nworkers, "ferry-worker", &p->workers)) != 0)
        goto out_fail;

    /* Pool: two pinned buffers (in, out) per slot, each a copy group of chunks, depth slots in
     * flight. Allocated once, here. */
    size_t span = chunk * group;
    ferry_pool_config_t pc = FERRY_POOL_CONFIG_INIT;
    pc.slot_bytes = span;
    pc.slots = (size_t)depth * 2;
    pc.pageable_fallback = true;
    if ((rc = ferry_pool_create(dev, &pc, &p->pool)) != 0)
        goto out_fail;
    ferry_pool_stats_t ps = FERRY_POOL_STATS_INIT;
    ferry_pool_stats(p->pool, &ps);
    p->host_pinned = ps.pinned;
    p->slots = calloc((size_t)depth, sizeof(*p->slots));
    if (p->slots == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: out of memory");
        goto out_fail;
    }
    for (unsigned i = 0; i < p->plan.depth; i++) {
        slot_t *s = &p->slots[i];
        void *hi_ = NULL, *ho_ = NULL;
        if ((rc = ferry_pool_alloc(p->pool, span, false, &hi_)) != 0 ||
            (rc = ferry_pool_alloc(p->pool, span, false, &ho_)) != 0)
            goto out_fail;
        s->h_in = hi_;
        s->h_out = ho_;
        if ((rc = ferry__be_mem_alloc(dev, span, &s->d_in)) != 0 ||
            (rc = ferry__be_mem_alloc(dev, span, &s->d_out)) != 0) {
            /* Memory pressure (the ladder's level 1): fewer chunks in flight, if one fits. */
            if (rc != FERRY_EDEVMEM || i == 0)
                goto out_fail;
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "device memory for %u slots is not there (%s): running with depth %u",
                      p->plan.depth, ferry__last_error_text(), i);
            if (s->d_in != NULL)
                ferry__be_mem_free(dev, s->d_in);
            s->d_in = NULL;
            p->plan.depth = i;
            p->api.slot_wake = p->plan.depth / 4 ? p->plan.depth / 4 : 1;
            rc = 0;
            break;
        }
        for (int e = 0; e < EV_N; e++)
            if ((rc = ferry__be_event_create(dev, 0, &s->ev[e])) != 0)
                goto out_fail;
        for (int e = 0; e < TEV_N; e++)
            if ((rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &s->tev[e])) != 0)
                goto out_fail;
        /* A slot never used has nothing in flight: its (never recorded) events are done. */
        for (int e = 0; e < EV_N; e++)
            s->dep[e] = s->ev[e];
        s->next_free = p->api.free_slots;
        p->api.free_slots = s;
        p->api.nfree_slots++;
    }
    /* Streams in creation order H2D, compute, D2H: the order decides which hardware queue
     * each lands on (stream k -> queue k mod CUDA_DEVICE_MAX_CONNECTIONS). */
    for (unsigned i = 0; i < p->plan.nstreams; i++) {
        bool copy = i < p->plan.ncopy || i >= p->plan.ncopy + p->plan.ncomp;
        p->stream_kind[i] = p->plan.single ? 'a' : i < p->plan.ncopy ? 'h' : (copy ? 'd' : 'c');
        if ((rc = ferry__be_stream_create(dev, copy ? cprio : kprio, &p->streams[i])) != 0)
            goto out_fail;
    }
    ferry__wd_config_t wc = {
        .own_thread = !virt,
        .period_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_watchdog_ms) * 1000000u,
        .heartbeat_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_heartbeat_ms) * 1000000u,
        .factor = p->plan.deadline_factor,
        .floor_ns = p->plan.deadline_floor_ns,
        .heartbeat_priority = dev->props.priority_least,
        .name = p->stage_name,
        .on_deadline = wd_deadline,
        .on_hang = wd_hang,
        .ctx = p,
    };
    if ((rc = ferry__watchdog_create(dev, &wc, &p->wdog.wd)) != 0)
        goto out_fail;
    uint64_t link_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_link_sample_ms) * 1000000u;
    if (p->plan.bw_alert_ratio > 0 && link_ns > 0 && dev->props.link_gbps > 0) {
        ferry__linkmon_config_t lc = {
            .own_thread = !virt, .period_ns = link_ns, .own = &p->own_ring, .name = p->stage_name};
        if ((rc = ferry__linkmon_create(dev, &lc, &p->link)) != 0)
            goto out_fail;
    }
    if (pthread_create(&p->completer, NULL, completion_main, p) != 0) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: cannot start the completion thread");
        goto out_fail;
    }
    p->api.completer_started = true;
    pthread_setname_np(p->completer, "ferry-complete");
    if (pthread_create(&p->issuer, NULL, issuer_main, p) != 0) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: cannot start the issuer thread");
        goto out_fail;
    }
    p->api.issuer_started = true;
    pthread_setname_np(p->issuer, "ferry-issue");
    ferry_log(FERRY_LOG_INFO, "pipeline",
              "created: stage %s, chunk %zu, %u per copy, depth %u, streams %u H2D + %u compute "
              "+ %u D2H, queue %lld, workers %lld",
              p->stage_name, chunk, group, p->plan.depth, p->plan.ncopy, p->plan.ncomp,
              p->plan.ncopy, qd, nworkers);
    p->child.is_live = child_is_live;
    p->child.destroy = child_destroy;
    ferry__rt_child_add(dev->rt, &p->child);
    *out = p;
    return 0;

out_fail:
    destroy(p);
    return ferry__rt_fail(dev->rt, rc);
}

static int submit(ferry_pipeline_t *p, const ferry_batch_t *batch, ferry_done_fn cb, void *arg,
                  uint64_t *id);

int ferry_pipeline_submit(ferry_pipeline_t *p, const ferry_batch_t *batch, ferry_done_fn cb,
                          void *arg, uint64_t *id)
{
    if (p == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL pipeline");
    /* Counted in, so that a close racing this call waits for it (FERRY_EBUSY) instead of
     * releasing what it is about to use. Without the lock (two atomics on the hot path): the
     * sequentially consistent pair (count in, then read shut) against close's (set shut, then
     * read the count) means at least one side sees the other. */
    atomic_fetch_add_explicit(&p->sh.entering, 1, memory_order_seq_cst);
    int rc;
    if (atomic_load_explicit(&p->sh.shut, memory_order_seq_cst))
        rc = ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                          p->stage_name, p->serial);
    else
        rc = submit(p, batch, cb, arg, id);
    if (atomic_fetch_sub_explicit(&p->sh.entering, 1, memory_order_seq_cst) == 1 &&
        atomic_load_explicit(&p->sh.shut, memory_order_seq_cst)) {
        pthread_mutex_lock(&p->lock); /* a destroy may wait for the last one out */
        pthread_cond_broadcast(&p->drain_cv);
        pthread_mutex_unlock(&p->lock);
    }
    return rc;
}

static int submit(ferry_pipeline_t *p, const ferry_batch_t *batch, ferry_done_fn cb, void *arg,
                  uint64_t *id)
{
    if (batch == NULL || cb == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL pipeline, batch or "
                                          "callback");
    if (batch->size < offsetof(ferry_batch_t, prepare_arg))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: batch->size not set "
                                          "(use FERRY_BATCH_INIT)");
    if (batch->bytes > 0 && (batch->in == NULL) == (batch->prepare == NULL))
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_submit: a batch of %zu bytes needs "
                            "exactly one of in and prepare",
                            batch->bytes);
    uint64_t nchunks = batch->bytes / p->plan.chunk + (batch->bytes % p->plan.chunk != 0);
    if (nchunks > UINT32_MAX)
        return ferry__error(FERRY_ERANGE,
                            "ferry_pipeline_submit: %zu bytes make more than 2^32 "
                            "chunks of %zu",
                            batch->bytes, p->plan.chunk);
    if (batch->out != NULL && batch->in != NULL && batch->out != batch->in) {
        uintptr_t a = (uintptr_t)batch->in, b = (uintptr_t)batch->out;
        if (a < b + batch->bytes && b < a + batch->bytes)
            return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: in and out overlap "
                                              "partially");
    }
    uint64_t nslots = nchunks / p->plan.group + (nchunks % p->plan.group != 0);
    /* Cheap enough to issue on whichever thread holds the token, without waiting. */
    bool light = batch->bytes == 0 || (batch->prepare == NULL && batch->bytes <= LIGHT_MAX_BYTES &&
                                       nslots <= p->plan.depth);
    uint64_t now = submit_stamp(p);
    slot_t *sl[64];
    pthread_mutex_lock(&p->lock);
    if (atomic_load_explicit(&p->sh.shut, memory_order_relaxed)) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                            p->stage_name, p->serial);
    }
    if (p->api.free_recs == NULL)
        p->api.free_recs =
            atomic_exchange_explicit(&p->sh.returned_recs, NULL, memory_order_acquire);
    pass_wait(p);
    batch_rec_t *b = p->api.free_recs;
    if (b != NULL) {
        p->api.free_recs = b->next;
    } else if ((b = malloc(sizeof(*b))) == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_submit: out of memory");
    }
    uint64_t my_id = b->id = p->api.next_id++;
    /* Nothing queued ahead of it and nobody issuing: issue it here, skipping the queue and
     * the hand-off to the issuer thread. */
    bool direct = p->plan.caller_issues && light && !p->api.token && p->api.nqueued == 0 &&
                  p->api.nfree_slots >= nslots;
    if (direct) {
        p->api.token = true;
        atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
        take_slots(p, (uint32_t)nslots, sl);
        p->api.submitted++;
        p->api.st.batches_submitted++;
    } else {
        p->api.submitting++;
    }
    if (p->plan.virtual_clock)
        pthread_cond_signal(&p->work_cv); /* wait_for_caller: the caller is back */
    pthread_mutex_unlock(&p->lock);
    /* Size-stamped: a caller built against an older ferry_batch_t has fewer fields. */
    memset(&b->b, 0, sizeof(b->b));
    memcpy(&b->b, batch, batch->size < sizeof(b->b) ? batch->size : sizeof(b->b));
    b->b.size = sizeof(b->b);
    b->cb = cb;
    b->arg = arg;
    b->nchunks = (uint32_t)nchunks;
    b->nslots = (uint32_t)nslots;
    atomic_store_explicit(&b->chunks_left, (uint32_t)nchunks, memory_order_relaxed);
    atomic_store_explicit(&b->status, 0, memory_order_relaxed);
    atomic_store_explicit(&b->cpu_chunks, 0, memory_order_relaxed);
    b->light = light;
    b->submit_ns = now;
    b->next = NULL;
    if (direct) {
        /* From here b may already be completed and recycled. */
        issue_light(p, b, sl);
        run_queue(p, ROLE_CALLER);
        if (id != NULL)
            *id = my_id;
        return 0;
    }

    /* A callback (or prepare function) of this pipeline must not wait for room in its queue:
     * the queue empties as slots come back, and slots come back through the thread that runs
     * the callback. Such a submit never blocks; on a full queue it is refused. */
    bool own = on_own_thread(p);
    bool waited = false;
    int rc = ferry__bqueue_push(p->queue, &b, !p->plan.nonblocking && !own, &waited);
    bool run = false;
    pthread_mutex_lock(&p->lock);
    pass_wait(p);
    p->api.submitting--;
    if (rc != 0) {
        if (rc == FERRY_EAGAIN)
            p->api.st.queue_full_eagain++;
        b->next = p->api.free_recs; /* not queued, so still ours */
        p->api.free_recs = b;
    } else {
        p->api.submitted++;
        p->api.st.batches_submitted++;
        if (waited)
            p->api.st.queue_full_waits++;
        p->api.nqueued++;
        /* Nobody holds the token, so nobody would issue it: take the token and run the
         * queue (handing it to the issuer thread if the batch at its head is not light). */
        if (!p->api.token) {
            p->api.token = true;
            atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
            run = true;
        }
    }
    /* Refused, with nobody issuing: the device may move on (see run_queue). */
    if (!run && !p->api.token && p->api.submitting == 0 && p->plan.virtual_clock)
        set_busy(p, false, true);
    else if (p->plan.virtual_clock)
        poke(p, true); /* submitter_runs() changed */
    pthread_mutex_unlock(&p->lock);
    if (rc == FERRY_EAGAIN && !p->plan.nonblocking)
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_submit: the queue of pipeline '%s' #%u is full and "
                            "this is one of its callbacks: waiting for room would deadlock (room "
                            "is made by the thread running the callback)",
                            p->stage_name, p->serial);
    if (rc == FERRY_ECLOSED)
        return ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                            p->stage_name, p->serial);
    if (rc != 0)
        return rc == FERRY_EAGAIN
                   ? FERRY_EAGAIN
                   : ferry__error(rc, "ferry_pipeline_submit: %s", ferry_strerror(rc));
    if (run)
        run_queue(p, ROLE_CALLER);
    if (id != NULL)
        *id = my_id;
    return 0;
}

int ferry_pipeline_drain(ferry_pipeline_t *p)
{
    if (p == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_drain: NULL pipeline");
    if (on_own_thread(p))
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_drain: called from a callback of pipeline '%s' #%u: "
                            "it would wait for itself (batches complete on the thread running "
                            "it)",
                            p->stage_name, p->serial);
    pthread_mutex_lock(&p->lock);
    uint64_t target = p->api.submitted;
    atomic_fetch_add_explicit(&p->sh.drain_waiters, 1, memory_order_seq_cst);
    if (p->plan.virtual_clock)
        pthread_cond_signal(&p->work_cv); /* wait_for_caller: the caller waits now */
    while (atomic_load_explicit(&p->sh.completed, memory_order_seq_cst) < target)
        pthread_cond_wait(&p->drain_cv, &p->lock);
    atomic_fetch_sub_explicit(&p->sh.drain_waiters, 1, memory_order_seq_cst);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Refuse submits from now on: the flag, and the queue (a submit waiting for room returns
 * FERRY_ECLOSED). Under lock. */
static void shut(ferry_pipeline_t *p)
{
    if (atomic_load_explicit(&p->sh.shut, memory_order_relaxed))
        return;
    atomic_store_explicit(&p->sh.shut, true, memory_order_seq_cst);
    if (p->queue != NULL)
        ferry__bqueue_close(p->queue); /* what is queued is still issued */
}

int ferry_pipeline_close(ferry_pipeline_t *p)
{
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    shut(p);
    if (atomic_load_explicit(&p->sh.released, memory_order_acquire)) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (on_own_thread(p)) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_close: called from a callback of pipeline '%s' #%u: "
                            "it is shut to new batches, but its threads can be stopped only "
                            "from another thread (close it again there)",
                            p->stage_name, p->serial);
    }
    uint64_t completed = atomic_load_explicit(&p->sh.completed, memory_order_seq_cst);
    unsigned entering = atomic_load_explicit(&p->sh.entering, memory_order_seq_cst);
    if (completed != p->api.submitted || entering > 0) {
        uint64_t n = p->api.submitted - completed;
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_close: pipeline '%s' #%u is shut to new batches, but "
                            "%llu batch(es) are still in flight and %u submit(s) in progress; "
                            "drain, then close again",
                            p->stage_name, p->serial, (unsigned long long)n, entering);
    }
    /* Another close is releasing: return once it has, so that either caller may destroy. */
    while (p->api.releasing && !atomic_load_explicit(&p->sh.released, memory_order_acquire))
        pthread_cond_wait(&p->drain_cv, &p->lock);
    bool mine = !p->api.releasing;
    p->api.releasing = true;
    pthread_mutex_unlock(&p->lock);
    if (mine) {
        release(p);
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->drain_cv);
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
}

int ferry_pipeline_destroy(ferry_pipeline_t *p)
{
    if (p == NULL)
        return 0;
    if (on_own_thread(p)) {
        pthread_mutex_lock(&p->lock);
        shut(p);
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_destroy: called from a callback of pipeline '%s' "
                            "#%u: it is shut to new batches, but it can be freed only from "
                            "another thread",
                            p->stage_name, p->serial);
    }
    for (;;) {
        int rc = ferry_pipeline_close(p); /* shuts it first: the batches in flight are all */
        if (rc != FERRY_EBUSY)
            break;
        pthread_mutex_lock(&p->lock); /* submits still inside their call */
        while (atomic_load_explicit(&p->sh.entering, memory_order_seq_cst) > 0)
            pthread_cond_wait(&p->drain_cv, &p->lock);
        pthread_mutex_unlock(&p->lock);
        ferry_pipeline_drain(p);
    }
    ferry__rt_child_remove(p->dev->rt, &p->child);
    free_husk(p);
    return 0;
}

int ferry_pipeline_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out)
{
    if (p == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_stats: NULL argument or size not set "
                                          "(use FERRY_PIPELINE_STATS_INIT)");
    pthread_mutex_lock(&p->lock);
    if (p->api.final_ready)
        *out = p->api.final; /* closed: the figures as of its close */
    else
        fill_stats(p, out);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* The stats now. Under lock. */
static void fill_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out)
{
    *out = p->api.st;
    out->chunks = atomic_load_explicit(&p->sh.chunks_issued, memory_order_relaxed);
    out->staged_bytes = atomic_load_explicit(&p->sh.staged_bytes, memory_order_relaxed);
    out->batches_done_gpu = atomic_load_explicit(&p->sh.done_gpu, memory_order_relaxed);
    out->batches_done_cpu = atomic_load_explicit(&p->sh.done_cpu, memory_order_relaxed);
    out->chunks_cpu = p->api.chunks_cpu_seen +
                      atomic_load_explicit(&p->sh.chunks_cpu_direct, memory_order_relaxed);
    out->deadlines_passed = atomic_load_explicit(&p->wdog.deadlines_passed, memory_order_relaxed);
    ferry__watchdog_stats(p->wdog.wd, out);
    out->ladder_level = (unsigned)atomic_load_explicit(&p->sh.level, memory_order_relaxed);
    out->bw_alerts = p->api.bw_alerts_seen;
    out->bw_ratio[0] = p->api.bw_ratio_seen[0];
    out->bw_ratio[1] = p->api.bw_ratio_seen[1];
    ferry__link_sample_t ls;
    ferry__linkmon_last(p->link, &ls);
    out->link_samples = ls.count;
    for (int d = 0; d < 2; d++) {
        out->link_bps[d] = ls.count ? ls.total[d] : -1;
        out->link_own_bps[d] = ls.count ? ls.own[d] : -1;
    }
    out->ladder_steps_down = p->api.steps_down_seen;
    out->ladder_steps_up = p->api.steps_up_seen;
    out->gpu_hung = atomic_load_explicit(&p->sh.hang_lost, memory_order_relaxed) != 0;
    out->failure_records = p->api.failure_records_seen;
    if (out->size > offsetof(ferry_pipeline_stats_t, chunks_retried))
        out->chunks_retried = p->api.chunks_retried_seen;
    out->failure_log_errors = atomic_load_explicit(&p->sh.failure_log_errors, memory_order_relaxed);
    out->gpu_lost = atomic_load_explicit(&p->sh.gpu_lost, memory_order_relaxed) != 0;
    out->batches_failed = atomic_load_explicit(&p->sh.failed, memory_order_relaxed);
    out->elapsed_ns =
        p->comp.last_end > p->comp.first_start ? p->comp.last_end - p->comp.first_start : 0;
    /* Sampled timing: the busy figures of the timed ops, scaled to all of them. */
    out->chunks_timed = p->comp.chunks_timed;
    out->host_pinned = p->host_pinned;
    out->connections = p->dev->connections;
    out->context_streams = p->context_streams;
    double scale =
        p->comp.chunks_timed ? (double)p->comp.chunks_retired / (double)p->comp.chunks_timed : 0;
    out->busy_h2d_ns = (uint64_t)((double)p->api.st.busy_h2d_ns * scale);
    out->busy_compute_ns = (uint64_t)((double)p->api.st.busy_compute_ns * scale);
    out->busy_d2h_ns = (uint64_t)((double)p->api.st.busy_d2h_ns * scale);
    /* Sampled, a union is of the sampled ops only, scaled up: an estimate, which cannot
     * exceed the time there was. */
    uint64_t *busy[3] = {&out->busy_h2d_ns, &out->busy_compute_ns, &out->busy_d2h_ns};
    for (int i = 0; i < 3; i++)
        if (*busy[i] > out->elapsed_ns)
            *busy[i] = out->elapsed_ns;
    double secs = (double)out->elapsed_ns / 1e9;
    out->gbps_h2d = secs > 0 ? (double)out->bytes_h2d / secs / 1e9 : 0;
    out->gbps_d2h = secs > 0 ? (double)out->bytes_d2h / secs / 1e9 : 0;
    out->overlap = out->elapsed_ns
                       ? (double)(out->busy_h2d_ns + out->busy_compute_ns + out->busy_d2h_ns) /
                             (double)out->elapsed_ns
                       : 0;
    out->streams = p->plan.nstreams;
    out->chunk_bytes = p->plan.chunk;
    out->copy_group = p->plan.group;
    out->depth = p->plan.depth;
    out->copy_streams = p->plan.ncopy;
    out->compute_streams = p->plan.ncomp;
    out->queue_depth = (unsigned)p->plan.queue_depth;
    /* A slot abandoned to a hung kernel is bound to no chunk any more. */
    out->slots_in_use = p->plan.depth - p->api.nfree_slots - p->api.nabandoned;
    for (unsigned i = 0; i < p->plan.nstreams; i++) {
        out->stream_kind[i] = p->stream_kind[i];
        out->stream_busy_ns[i] =
            p->comp.stream_timed[i]
                ? (uint64_t)((double)p->comp.stream_busy[i] * (double)p->comp.stream_ops[i] /
                             (double)p->comp.stream_timed[i])
                : 0;
    }
}

static const char *kind_name(char k)
{
    return k == 'h' ? "H2D" : k == 'c' ? "compute" : k == 'd' ? "D2H" : "all";
}

/* The trace's engine tracks: one per stream of each class (H2D, compute, D2H), as ops of one
 * class on several streams run at once and Perfetto nests the slices of one track by time.
 * The first stream of class @k and how many there are. */
static void engine_lanes(const ferry_pipeline_t *p, int k, unsigned *first, unsigned *n)
{
    if (p->plan.single) {
        *first = 0, *n = 1;
        return;
    }
    *first = k == 0 ? 0 : k == 1 ? p->plan.ncopy : p->plan.ncopy + p->plan.ncomp;
    *n = k == 1 ? p->plan.ncomp : p->plan.ncopy;
}

/* The engine track (pid 2) of an op of class @k on @stream. */
static int engine_tid(const ferry_pipeline_t *p, int k, unsigned stream)
{
    unsigned first, n;
    engine_lanes(p, k, &first, &n);
    unsigned lane = stream >= first && stream - first < n ? stream - first : 0;
    return k * FERRY_STATS_MAX_STREAMS + (int)lane;
}

int ferry_pipeline_write_trace(ferry_pipeline_t *p, const char *path)
{
    if (p == NULL || path == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_write_trace: NULL argument");
    pthread_mutex_lock(&p->lock);
    if (!atomic_load_explicit(&p->sh.tracing, memory_order_relaxed) && p->api.ntrace == 0) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ESTATE, "ferry_pipeline_write_trace: tracing is off (set the "
                                          "trace option, FERRY_TRACE=1)");
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EIO, "cannot write trace %s: %s", path, strerror(errno));
    }
    /* Chrome trace format: pid 1 holds one track (tid) per stream, pid 2 one per engine class.
     * Times in microseconds. */
    fprintf(f,
            "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"backend\":\"%s\",\"device\":\"%s\","
            "\"simulated\":%s},\"traceEvents\":[\n",
            p->dev->ops->name, p->dev->props.name, p->dev->props.simulated ? "true" : "false");
    fprintf(
        f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"streams\"}},\n");
    fprintf(
        f, "{\"ph\":\"M\",\"pid\":2,\"name\":\"process_name\",\"args\":{\"name\":\"engines\"}},\n");
    for (unsigned i = 0; i < p->plan.nstreams; i++)
        fprintf(f,
                "{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":"
                "{\"name\":\"stream %u (%s)\"}},\n",
                i, i, kind_name(p->stream_kind[i]));
    const char kinds[3] = {'h', 'c', 'd'};
    for (int k = 0; k < 3; k++) {
        unsigned first, n;
        engine_lanes(p, k, &first, &n);
        for (unsigned l = 0; l < n; l++) {
            char lane[48] = "";
            if (n > 1)
                snprintf(lane, sizeof(lane), " %u (stream %u)", l, first + l);
            fprintf(f,
                    "{\"ph\":\"M\",\"pid\":2,\"tid\":%d,\"name\":\"thread_name\",\"args\":"
                    "{\"name\":\"%s engine%s\"}},\n",
                    engine_tid(p, k, first + l), kind_name(kinds[k]), lane);
        }
    }
    uint64_t t0 = p->comp.first_start;
    for (size_t i = 0; i < p->api.ntrace; i++) {
        const trace_rec_t *r = &p->api.trace[i];
        double ts = (double)((r->start > t0 ? r->start : t0) - t0) / 1e3,
               dur = (double)(r->end - r->start) / 1e3;
        if (r->kind == 'a') {
            fprintf(f,
                    "{\"ph\":\"i\",\"s\":\"g\",\"pid\":2,\"tid\":0,\"ts\":%.3f,\"name\":\"%s\","
                    "\"cat\":\"alert\",\"args\":{\"batch\":%llu,\"chunk\":%u}},\n",
                    ts, r->stream < 4 ? note_names[r->stream] : "note",
                    (unsigned long long)r->batch, r->chunk);
            continue;
        }
        int eng = r->kind == 'h' ? 0 : (r->kind == 'c' ? 1 : 2);
        /* A flow per chunk, H2D -> compute -> D2H, on the stream tracks: Perfetto draws the
         * arrows from the copy in to the kernel to the copy out. */
        fprintf(f,
                "{\"ph\":\"%s\",\"id\":%llu,\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"name\":\"chunk\","
                "\"cat\":\"flow\"%s},\n",
                r->kind == 'h'   ? "s"
                : r->kind == 'c' ? "t"
                                 : "f",
                (unsigned long long)(r->batch << 20 | (r->chunk & 0xFFFFFu)), (unsigned)r->stream,
                ts + dur / 2, r->kind == 'd' ? ",\"bp\":\"e\"" : "");
        /* A copy group's ops name its chunks: "h2d b3 c4-7", a compute slice its kernels. */
        unsigned nsub = r->nsub > 1 ? r->nsub : 1;
        char chunks[32];
        if (nsub > 1)
            snprintf(chunks, sizeof(chunks), "%u-%u", r->chunk, r->chunk + nsub - 1);
        else
            snprintf(chunks, sizeof(chunks), "%u", r->chunk);
        for (int pid = 1; pid <= 2; pid++)
            fprintf(f,
                    "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"name\":\"%s b%llu c%s\",\"cat\":\"%s\",\"args\":{\"batch\":%llu,"
                    "\"chunk\":%u,\"chunks\":%u,\"bytes\":%llu}},\n",
                    pid, pid == 1 ? (int)r->stream : engine_tid(p, eng, r->stream), ts, dur,
                    kind_name(r->kind), (unsigned long long)r->batch, chunks, kind_name(r->kind),
                    (unsigned long long)r->batch, r->chunk, nsub, (unsigned long long)r->bytes);
    }
    fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":1}"
               "}\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EIO, "error writing trace %s", path);
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}

static ferry_op_record_t op_record(const trace_rec_t *r, uint64_t t0)
{
    ferry_op_record_t o = {.size = sizeof(o), .batch = r->batch, .chunk = r->chunk};
    o.stream = r->stream;
    o.kind = r->kind == 'h' ? FERRY_OP_H2D : r->kind == 'c' ? FERRY_OP_COMPUTE : FERRY_OP_D2H;
    o.start_ns = r->start > t0 ? r->start - t0 : 0;
    o.end_ns = r->end > t0 ? r->end - t0 : 0;
    o.bytes = r->bytes;
    o.chunks = r->nsub > 1 ? r->nsub : 1;
    return o;
}

int ferry_pipeline_ops(ferry_pipeline_t *p, ferry_op_fn fn, void *arg)
{
    if (p == NULL || fn == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_ops: NULL argument");
    pthread_mutex_lock(&p->lock);
    if (!atomic_load_explicit(&p->sh.tracing, memory_order_relaxed) && p->api.ntrace == 0) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ESTATE, "ferry_pipeline_ops: tracing is off (set the trace "
                                          "option, FERRY_TRACE=1)");
    }
    /* A snapshot, so that @fn runs without the lock the completion thread needs. */
    size_t n = p->api.ntrace;
    trace_rec_t *copy = malloc(n ? n * sizeof(*copy) : 1);
    if (copy == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_ops: out of memory for %zu records", n);
    }
    if (n)
        memcpy(copy, p->api.trace, n * sizeof(*copy));
    uint64_t t0 = p->comp.first_start;
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++) {
        if (copy[i].kind == 'a')
            continue; /* instant events are not ops */
        ferry_op_record_t o = op_record(&copy[i], t0);
        fn(&o, arg);
    }
    free(copy);
    return 0;
}

/* ---- for the metrics registry (pipeline_internal.h) ----------------------------------------- */

const double ferry__lat_bounds_s[FERRY__LAT_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

void ferry__latency_observe(ferry_pipeline_t *p, uint64_t ns)
{
    double s = (double)ns / 1e9;
    size_t i = 0;
    while (i < FERRY__LAT_BUCKETS && s > ferry__lat_bounds_s[i])
        i++;
    atomic_fetch_add_explicit(&p->sh.lat_buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->sh.lat_sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->sh.lat_count, 1, memory_order_relaxed);
}

void ferry__latency_read(ferry_pipeline_t *p, uint64_t *buckets, uint64_t *sum_ns, uint64_t *count)
{
    for (size_t i = 0; i <= FERRY__LAT_BUCKETS; i++)
        buckets[i] = atomic_load_explicit(&p->sh.lat_buckets[i], memory_order_relaxed);
    *sum_ns = atomic_load_explicit(&p->sh.lat_sum_ns, memory_order_relaxed);
    *count = atomic_load_explicit(&p->sh.lat_count, memory_order_relaxed);
}

const char *ferry__pipeline_stage_name(const ferry_pipeline_t *p)
{
    return p->stage_name;
}
