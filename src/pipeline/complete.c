/* The completion thread: it adopts the chunks the issuers handed over, polls their end events,
 * retires them (times, stats, trace, the bandwidth monitor), recycles their slots and calls each
 * batch back once; between passes it feeds the watchdog and sleeps when nothing is in flight.
 * On a virtual clock a pass runs only while nobody issues (pass_begin). */
#include <errno.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/prof.h"
#include "pipeline/pipeline_internal.h"

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
void ferry__pipe_pass_wait(ferry_pipeline_t *p)
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
/* How long a caller that is still running (runnable, on Linux) may keep the device waiting:
 * a caller the host does not schedule for a while (a loaded machine) is still taken to be back
 * at once, up to this much host time. Beyond it the device runs on, as for a caller that
 * sleeps: a caller that spins on a flag for its callbacks costs this much per wait. */
#define CALLER_RUNNABLE_NS 50000000u

/* Whether thread @tid of this process is running or waiting for a CPU (not asleep). Linux
 * only (/proc/self/task/<tid>/stat); false elsewhere and on any error. */
static bool thread_runnable(long tid)
{
    if (tid <= 0)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *c = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return c != NULL && c[1] == ' ' && c[2] == 'R';
}

static void wait_for_caller(ferry_pipeline_t *p, uint64_t seen)
{
    pass_end(p);
    uint64_t t0 = ferry__mono_ns();
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
           ferry__bqueue_len(p->queue) < p->plan.queue_depth) {
        if (pthread_cond_timedwait(&p->work_cv, &p->lock, &ts) != ETIMEDOUT)
            continue;
        /* The grace is over. A caller that still runs (or waits for a CPU) is on its way
         * back, however long the host takes to run it: wait on, a grace at a time. */
        long tid = atomic_load_explicit(&p->sh.caller_tid, memory_order_relaxed);
        if (ferry__mono_ns() - t0 >= CALLER_RUNNABLE_NS || !thread_runnable(tid))
            break;
        at += CALLER_GRACE_NS;
        ts.tv_sec = (time_t)(at / 1000000000u);
        ts.tv_nsec = (long)(at % 1000000000u);
    }
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

/* The ladder's retries on the GPU for a failed chunk, while it allows them: each steps down a
 * level first. Returns the last attempt's result. */
static int retry_while_allowed(ferry_pipeline_t *p, slot_t *s, int err, uint64_t now)
{
    const batch_rec_t *b = s->batch;
    while (err != 0 && ferry__ladder_may_retry(
                           &p->ladder, err, s->attempt,
                           !s->gpu_skipped && !s->abandoned && s->host_in != NULL &&
                               !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire))) {
        char msg[256];
        ferry__strlcpy(msg, s->errmsg[0] ? s->errmsg : ferry__last_error_text(), sizeof(msg));
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "batch %llu chunk %u: %s on the GPU (%s); retried "
                  "on the GPU at a lower level",
                  (unsigned long long)b->id, s->chunk, ferry_err_name(err), msg);
        ferry__pipe_write_failure_record(p, s, err, msg, "retry", now);
        ferry__ladder_step_down(&p->ladder);
        s->attempt++;
        s->errmsg[0] = '\0';
        err = ferry__pipe_retry_on_gpu(p, s);
        if (err == 0) {
            p->comp.chunks_retried += s->nsub;
            s->timing = TIME_NONE; /* the first attempt's timed events are not this one's */
        } else if (s->errmsg[0] == '\0') {
            ferry__strlcpy(s->errmsg, ferry__last_error_text(), sizeof(s->errmsg));
        }
    }
    return err;
}

/* A TIME_ANCHOR chunk: only where its streams got to, for the next sample. */
static void note_anchor(ferry_pipeline_t *p, const slot_t *s, const uint64_t *t)
{
    uint64_t *le = p->comp.stream_end;
    for (int i = 0; i < 3; i++) {
        unsigned st = i == 0 ? s->h2d : i == 1 ? s->comp : s->d2h;
        uint64_t e = t[2 * i + 1];
        if ((s->anchor_ends & (1u << i)) && e > le[st])
            le[st] = e;
    }
    /* Its copies' ends join the union of each direction's copies (retire_chunk), so that the next
     * sampled chunk adds only the part of its copies that no earlier copy covered. */
    if (s->anchor_ends & 1u)
        ferry__span_union_cover(&p->comp.eng[0], t[TEV_H2D_END]);
    if (s->anchor_ends & 4u)
        ferry__span_union_cover(&p->comp.eng[1], t[TEV_D2H_END]);
    if ((s->anchor_ends & 5u) == 5u && s->seq > p->comp.eng_seq)
        p->comp.eng_seq = s->seq;
}

/* A traced chunk's three ops into the pass's trace records (@start: H2D, compute, D2H). */
static void trace_ops(const slot_t *s, const uint64_t *start, const uint64_t *t, pass_acc_t *a)
{
    const batch_rec_t *b = s->batch;
    trace_rec_t r = {b->id,    s->chunk,       (uint16_t)s->h2d, 'h',
                     start[0], t[TEV_H2D_END], s->bytes,         s->nsub};
    a->trace[a->ntrace++] = r;
    r.stream = (uint16_t)s->comp, r.kind = 'c', r.start = start[1];
    r.end = t[TEV_COMP_END];
    a->trace[a->ntrace++] = r;
    r.stream = (uint16_t)s->d2h, r.kind = 'd', r.start = start[2];
    r.end = t[TEV_D2H_END];
    a->trace[a->ntrace++] = r;
}

/* One timed copy into the bandwidth monitor; a change of state goes into the trace (raised) and
 * to the caller's alert callback. */
static void feed_bw(ferry_pipeline_t *p, int d, uint64_t bytes, uint64_t busy_ns, uint64_t now)
{
    ferry_alert_t al;
    if (!ferry__bwmon_sample(&p->comp.bw, d, bytes, busy_ns, now, &al))
        return;
    if (al.raised)
        trace_note(p, d == 0 ? NOTE_BW_H2D : NOTE_BW_D2H, 0, 0, now);
    if (p->on_alert != NULL)
        p->on_alert(&al, p->alert_arg);
}

/* A timed chunk's engine time (each direction's, from the union) into the pass's busy figures
 * and the bandwidth monitor. */
static void count_engines(ferry_pipeline_t *p, uint64_t bytes, uint64_t uh, uint64_t ud,
                          uint64_t now, pass_acc_t *a)
{
    feed_bw(p, 0, bytes, uh, now);
    feed_bw(p, 1, bytes, ud, now);
    a->busy_h2d += uh;
    a->busy_d2h += ud;
}

/* The sampled chunk waiting for its anchor, once anchor @seq retired: its copies join each
 * direction's union past the anchor's ends, as if it had retired after it. @seq 0 (or not its
 * anchor's): the anchor will not come; its copies count 1/copy streams of their time. */
static void count_waiting(ferry_pipeline_t *p, uint64_t seq, uint64_t now, pass_acc_t *a)
{
    struct ferry__pipe_comp *c = &p->comp;
    if (!c->eng_wait.set || (seq != 0 && seq + 1 != c->eng_wait.seq))
        return;
    const uint64_t *h = c->eng_wait.h2d, *d = c->eng_wait.d2h;
    if (seq != 0) {
        count_engines(p, c->eng_wait.bytes, ferry__span_union_add(&c->eng[0], h[0], h[1]),
                      ferry__span_union_add(&c->eng[1], d[0], d[1]), now, a);
    } else {
        unsigned lanes = p->plan.ncopy > 0 ? p->plan.ncopy : 1u;
        count_engines(p, c->eng_wait.bytes, (h[1] - h[0]) / lanes, (d[1] - d[0]) / lanes, now, a);
        ferry__span_union_cover(&c->eng[0], h[1]);
        ferry__span_union_cover(&c->eng[1], d[1]);
    }
    if (c->eng_wait.seq > c->eng_seq)
        c->eng_seq = c->eng_wait.seq;
    c->eng_wait.set = false;
}

/* A timed chunk's copies into each direction's engine time. */
static void join_engines(ferry_pipeline_t *p, const slot_t *s, uint64_t hs, uint64_t ds,
                         const uint64_t *t, uint64_t now, pass_acc_t *a)
{
    uint64_t dh = t[TEV_H2D_END] - hs, dd = t[TEV_D2H_END] - ds;
    /* A direction's engine time is the union of its copies' intervals: with several copy
     * streams the copies of one direction run at once, and their sum counted that time twice
     * (engines H2D 196%, overlap 3.65, and the bandwidth monitor took one copy's share of the
     * link for the direction's rate). The union is exact over consecutive timed chunks (every
     * chunk with op_timing all or a trace); a sampled chunk has the chunk before it timed as an
     * anchor, and adds what its copies cover past that one's. Where that anchor retires after
     * it (another D2H stream), the sampled chunk waits for it (count_waiting): counted at 1/copy
     * streams of its time instead, the copy streams taken to run together, which the H200 does
     * not always do, H2D read 68% busy and D2H 72% on a run the union timed at 97% and 95%. */
    int lv = ferry__ladder_level(&p->ladder);
    unsigned lanes = p->plan.single || lv >= 3 ? 1u : p->plan.ncopy;
    /* Every chunk timed (op_timing all, a trace): the union takes the copies in any order, so
     * it is exact even when the copy streams' chunks retire out of order (with that counted
     * at 1/2, D2H read 48% busy at 40 GB/s each way on the H200). */
    bool fresh = lanes == 1 || s->seq == p->comp.eng_seq + 1 || p->plan.time_all || s->traced;
    if (fresh) {
        count_engines(p, s->bytes, ferry__span_union_add(&p->comp.eng[0], hs, t[TEV_H2D_END]),
                      ferry__span_union_add(&p->comp.eng[1], ds, t[TEV_D2H_END]), now, a);
        if (s->seq > p->comp.eng_seq)
            p->comp.eng_seq = s->seq;
    } else if (s->seq > p->comp.eng_seq + 1) {
        /* Its anchor has not retired: wait for its ends (count_waiting). One that waits still
         * (its anchor failed) is counted as below. */
        if (p->comp.eng_wait.set)
            count_waiting(p, 0, now, a);
        p->comp.eng_wait.set = true;
        p->comp.eng_wait.seq = s->seq;
        p->comp.eng_wait.bytes = s->bytes;
        p->comp.eng_wait.h2d[0] = hs, p->comp.eng_wait.h2d[1] = t[TEV_H2D_END];
        p->comp.eng_wait.d2h[0] = ds, p->comp.eng_wait.d2h[1] = t[TEV_D2H_END];
    } else { /* a later chunk's copies already joined the union: its share */
        count_engines(p, s->bytes, dh / lanes, dd / lanes, now, a);
        ferry__span_union_cover(&p->comp.eng[0], t[TEV_H2D_END]);
        ferry__span_union_cover(&p->comp.eng[1], t[TEV_D2H_END]);
    }
}

/* Retire one chunk whose events are complete (or which failed): copy its output out, read its
 * event times if it was timed. @now: the device clock at this pass, the end of an untimed
 * chunk as far as the stats know (late by the polling latency, a few microseconds).
 * Completion thread, no lock held. */
static void retire_chunk(ferry_pipeline_t *p, slot_t *s, int err, uint64_t now, pass_acc_t *a)
{
    batch_rec_t *b = s->batch;
    if (err != 0)
        err = retry_while_allowed(p, s, err, now);
    if (err != 0) {
        ferry__pipe_fall_back(p, s, err, now, a);
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
        bool used = s->timing == TIME_SAMPLE || (i == TEV_H2D_START && s->h2d_start_timed) ||
                    ((i & 1) && (s->timing != TIME_ANCHOR || (s->anchor_ends & (1u << (i >> 1)))));
        t[i] = 0;
        if (used && ferry__be_event_time_ns(p->dev, s->tev[i], &t[i]) != 0)
            timed = false;
    }
    if (timed && t[TEV_D2H_END] != 0) /* an anchor may time only its other ends */
        end = t[TEV_D2H_END];
    /* Healthy chunks in a row climb the ladder back, one level per LADDER_HEALTHY. */
    ferry__ladder_healthy(&p->ladder);
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
    if (s->timing == TIME_ANCHOR) {
        note_anchor(p, s, t);
        count_waiting(p, s->seq, now, a);
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
        hs = s->h2d_start_timed         ? t[TEV_H2D_START]
             : s->issue_ns > le[s->h2d] ? s->issue_ns
                                        : le[s->h2d];
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
    join_engines(p, s, hs, ds, t, now, a);
    a->timed += s->nsub; /* as chunks_retired counts: the busy figures scale by their ratio */
    /* Compute is busy while any compute stream is: with two compute streams their kernels
     * overlap, and the sum of their times exceeded the elapsed time (a compute-bound run's
     * overlap read 1.76). */
    a->busy_comp += ferry__span_union_add(&p->comp.comp_busy, cs, t[TEV_COMP_END]);
    a->stream_busy[s->h2d] += dh;
    a->stream_busy[s->comp] += dc;
    a->stream_busy[s->d2h] += dd;
    a->stream_timed[s->h2d]++;
    a->stream_timed[s->comp]++;
    a->stream_timed[s->d2h]++;
    if (s->traced && atomic_load_explicit(&p->sh.tracing, memory_order_relaxed)) {
        uint64_t start[3] = {hs, cs, ds};
        trace_ops(s, start, t, a);
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
    p->api.failure_records_seen = p->comp.flog.records;
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

/* One pass's chunks: those done, with their results, and for each D2H stream still busy the
 * event a wait needs. */
typedef struct pass {
    slot_t *done[MAX_PASS];
    int errs[MAX_PASS];
    ferry_be_event_t *waitev[FERRY_STATS_MAX_STREAMS];
    size_t ndone, nwait;
} pass_t;

/* Poll: take what is done off the chunks in flight. Ops on one stream complete in order, so once a
 * chunk's D2H is not done, the later chunks on the same D2H stream are not either: one query per
 * stream suffices, and the same events are what a wait needs. */
static void poll_chunks(ferry_pipeline_t *p, slot_t **head, slot_t **tail, pass_t *ps)
{
    size_t ndone = 0, nwait = 0;
    uint32_t blocked = 0;
    slot_t *prev = NULL, *s = *head;
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
            if ((q == 0 || q == FERRY_ETIMEDOUT) && s->seq <= ferry__watchdog_raised(p->wdog.wd))
                q = ferry__pipe_aborted(p, s);
        }
        if (q != FERRY_EAGAIN) {
            if (prev != NULL)
                prev->next_inflight = next;
            else
                *head = next;
            if (*tail == s)
                *tail = prev;
            ps->errs[ndone] = q;
            ps->done[ndone++] = s;
        } else {
            if (!(blocked & (1u << s->d2h))) {
                blocked |= 1u << s->d2h;
                ps->waitev[nwait++] = s->dep[EV_D2H_END];
            }
            prev = s;
        }
        s = next;
    }

    ps->ndone = ndone;
    ps->nwait = nwait;
}

/* Retire what is done, without the lock: the pass's figures into @acc, and the batches it
 * finished (then the empty ones, @ready) as a list. *@now: the device clock of the pass (0 when
 * nothing was done). */
static batch_rec_t *retire(ferry_pipeline_t *p, const pass_t *ps, batch_rec_t *ready,
                           pass_acc_t *acc, uint64_t *now)
{
    memset(acc, 0, offsetof(pass_acc_t, trace));
    batch_rec_t *fin = NULL, **fin_tail = &fin;
    uint64_t pass_now = ps->ndone > 0 ? ferry_device_now_ns(p->dev) : 0;
    for (size_t i = 0; i < ps->ndone; i++) {
        slot_t *d = ps->done[i];
        batch_rec_t *b = d->batch;
        retire_chunk(p, d, ps->errs[i], pass_now, acc);
        p->comp.head_since[d->d2h] = pass_now;
        if (atomic_fetch_sub_explicit(&b->chunks_left, d->nsub, memory_order_acq_rel) == d->nsub) {
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

    *now = pass_now;
    return fin;
}

/* Feed the watchdog: the oldest chunk of each D2H stream still in flight (after this pass's
 * retirements, which start the clock of the chunks behind them); on a virtual clock, step it
 * and the link monitor here. */
static void feed_watchdog(ferry_pipeline_t *p, slot_t *head, uint64_t pass_now)
{
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
}

/* Recycle the pass's slots under the lock, publish its figures, wake an issuer waiting for
 * slots, and take the issue token when light batches are queued (returns whether it did). */
static bool recycle(ferry_pipeline_t *p, const pass_t *ps, const pass_acc_t *acc)
{
    bool take_token = false;
    if (ps->ndone > 0) {
        pthread_mutex_lock(&p->lock);
        add_pass(p, acc);
        unsigned freed = 0;
        for (size_t i = 0; i < ps->ndone; i++) {
            slot_t *d = ps->done[i];
            d->batch = NULL;
            if (d->abandoned) {
                /* Only a hang abandons a slot, and a hang ends the GPU path: nothing waits
                 * for slots any more (acquire_slot, ferry__pipe_run_queue), or this one would
                 * be waited for in vain. */
                FERRY_ASSERT(atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire));
                p->api.nabandoned++; /* its kernel may still run: never reused */
                continue;
            }
            d->next_free = p->api.free_slots;
            p->api.free_slots = d;
            freed++;
        }
        p->api.nfree_slots += freed;
        p->api.steps_down_seen = p->ladder.steps_down;
        p->api.bw_alerts_seen = p->comp.bw.alerts;
        p->api.bw_ratio_seen[0] = p->comp.bw.win[0].ratio;
        p->api.bw_ratio_seen[1] = p->comp.bw.win[1].ratio;
        p->api.steps_up_seen = p->ladder.steps_up;
        /* The GPU path ended: an issuer waiting for slots goes to the CPU instead. */
        if (p->api.slot_waiting && atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire))
            wake_issuer(p, true);
        /* The issuer thread waits for a quarter of the slots (at least one): it then issues
         * several chunks per wake-up while the device still has the rest queued. */
        if (p->api.slot_waiting &&
            (p->api.nfree_slots >= p->api.slot_wake || ferry__ladder_level(&p->ladder) >= 2))
            wake_issuer(p, false);
        /* Queued light batches that were short of slots: issue them here and now rather
         * than wake a thread for it. */
        if (!p->api.token && p->api.nqueued > 0 && p->plan.virtual_clock) {
            hand_to_issuer(p);
        } else if (!p->api.token && p->api.nqueued > 0) {
            p->api.token = true;
            atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
            take_token = true;
        }
        pthread_mutex_unlock(&p->lock);
    }
    return take_token;
}

/* Adopt: append what the issuers handed over (a stack, newest first, so reversed) to the
 * chunks in flight, oldest first. */
static void adopt(ferry_pipeline_t *p, slot_t **head, slot_t **tail)
{
    slot_t *in = atomic_exchange_explicit(&p->sh.incoming, NULL, memory_order_acquire), *rev = NULL;
    while (in != NULL) {
        slot_t *next = in->next_inflight;
        in->next_inflight = rev;
        rev = in;
        in = next;
    }
    if (rev != NULL) {
        if ((*tail) != NULL)
            (*tail)->next_inflight = rev;
        else
            *head = rev;
        for ((*tail) = rev; (*tail)->next_inflight != NULL; (*tail) = (*tail)->next_inflight) {
        }
    }
}

/* Call back: each finished batch's callback, once, on this thread; then the counters, the
 * records back to the submitters and a drain woken. The batches are done at @pass_now, when
 * this pass found them done (0: read the clock): not after the queued batches this thread has
 * just issued (recycle), whose host time a virtual clock charges. Which thread issues those
 * (this one, or the issuer thread when it held the token) is the host's scheduling; it moved a
 * light batch's done time by a pass (120 us). */
static void call_back(ferry_pipeline_t *p, batch_rec_t *fin, uint64_t pass_now)
{
    uint64_t now = pass_now ? pass_now : read_clock(p);
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
        ferry__lat_hist_observe(&p->sh.lat, now > b->submit_ns ? now - b->submit_ns : 0);
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
    while (!atomic_compare_exchange_weak_explicit(&p->sh.returned_recs, &old, fin,
                                                  memory_order_release, memory_order_relaxed));
    /* As poke() with comp_sleeping: a drain registers before it reads completed. */
    atomic_fetch_add_explicit(&p->sh.completed, n, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sh.drain_waiters, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->drain_cv);
        pthread_mutex_unlock(&p->lock);
    }
}

void *ferry__pipe_completion_main(void *arg)
{
    ferry_pipeline_t *p = arg;
    ferry__pipe_own_thread = p;
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
        /* A virtual clock: the caller is taken to be back at once (wait_for_caller), so the
         * submits it makes at this virtual instant come before this pass, not only before the
         * device moves on. Otherwise a pass retired (and its callbacks read the clock, and it
         * issued queued batches) after however many submits the caller had got through, which
         * the host's scheduling decides: light batches, issued as they come, finished at times
         * 30-220 us apart in two runs. */
        if (p->plan.virtual_clock && grace_seen != seen &&
            atomic_load_explicit(&p->sh.busy, memory_order_seq_cst) == 0) {
            grace_seen = seen; /* once per change of the work */
            wait_for_caller(p, seen);
            continue;
        }
        /* A virtual clock is one host clock that every call charges: a pass run while another
         * thread issues would read it (and retire, stamp, charge) at a point of that thread's
         * work that only the host's scheduling decides. Passes run while nobody issues. */
        if (p->plan.virtual_clock && !pass_begin(p)) {
            wait_for_work(p, seen);
            continue;
        }

        FERRY_PROF_BEGIN(t0);
        adopt(p, &head, &tail);
        batch_rec_t *ready = atomic_exchange_explicit(&p->sh.ready, NULL, memory_order_acquire);

        pass_t ps;
        poll_chunks(p, &head, &tail, &ps);
        FERRY_PROF_END(FERRY__PROF_COMP_POLL, t0);
        FERRY_PROF_BEGIN(t1);
        uint64_t pass_now;
        batch_rec_t *fin = retire(p, &ps, ready, acc, &pass_now);
        feed_watchdog(p, head, pass_now);
        bool take_token = recycle(p, &ps, acc);
        FERRY_PROF_END(FERRY__PROF_COMP_RETIRE, t1);
        if (take_token) {
            FERRY_PROF_BEGIN(t2);
            ferry__pipe_run_queue(p, ROLE_COMPLETER);
            FERRY_PROF_END(FERRY__PROF_COMP_QUEUE, t2);
        }

        if (fin != NULL) {
            FERRY_PROF_BEGIN(t3);
            call_back(p, fin, pass_now);
            FERRY_PROF_END(FERRY__PROF_COMP_CB, t3);
            continue;
        }
        if (ps.ndone > 0 || take_token)
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
            FERRY_PROF_BEGIN(t4);
            wait_for_work(p, seen);
            FERRY_PROF_END(FERRY__PROF_COMP_IDLE, t4);
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
        FERRY_PROF_BEGIN(t5);
        if (atomic_load_explicit(&p->sh.busy, memory_order_seq_cst) == 0) {
            /* Nothing more will be issued until something completes: wait on the device.
             * On the simulator this is what advances the virtual clock. */
            size_t which = 0;
            int rc = ferry__be_event_wait_any(p->dev, ps.waitev, ps.nwait, 2000000, &which);
            if (rc != 0 && rc != FERRY_ETIMEDOUT)
                ferry_log(FERRY_LOG_DEBUG, "pipeline", "event wait: %s", ferry_err_name(rc));
        } else if (p->plan.virtual_clock) {
            /* An issuer is busy in real time: let it finish before device time moves. */
            wait_for_work(p, seen);
        } else {
            /* A real device finishes work whether or not anyone issues: keep polling it, in
             * short waits, so that slots come back as soon as their chunks are done. */
            size_t which = 0;
            (void)ferry__be_event_wait_any(p->dev, ps.waitev, ps.nwait, 50000, &which);
        }
        FERRY_PROF_END(FERRY__PROF_COMP_WAIT, t5);
    }
    free(acc);
    return NULL;
}
