/* Issuing: the issue token's holder pops batches from the queue, binds their chunks to slots,
 * stages input that is not pinned and enqueues each slot's H2D -> compute -> D2H on the streams,
 * round-robin; light batches are issued by whichever thread is at hand, the rest by the issuer
 * thread. */
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

/* Chunk @i of the group bound to @s: its bytes, and its offset within the group. */
size_t ferry__pipe_sub_bytes(const ferry_pipeline_t *p, const slot_t *s, uint32_t i, size_t *at)
{
    *at = (size_t)i * p->plan.chunk;
    return s->bytes - *at < p->plan.chunk ? s->bytes - *at : p->plan.chunk;
}

/* The kernel launch of chunk @i of the group bound to @s, for its attempt: device buffers,
 * the abort word and the group's sequence number, and the simulator's timing hints. */
static ferry_be_launch_t chunk_launch(const ferry_pipeline_t *p, const slot_t *s, uint32_t i,
                                      uint64_t abort_after, uint64_t abort_span)
{
    size_t at, n = ferry__pipe_sub_bytes(p, s, i, &at);
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
                 .batch_user = s->batch->b.user,
                 .abort_after = abort_after,
                 .abort_span = abort_span},
        .blocks = (uint32_t)(p->dev->props.sms > 0 ? p->dev->props.sms : 1),
        .block_ns = (uint64_t)(p->stage.ns_per_byte * (double)n),
    };
}

/* The kernels of the group bound to @s, in chunk order, on @st. A poll of the abort word
 * before abort_after reads the GPU's clock alone (include/ferry/device.h): no word goes up for
 * the group before half a deadline floor after its issue (a deadline is at least a floor after
 * it, and a raise for a later chunk comes later still; a retry's own deadline starts after its
 * launch, past this). Polls read the word again outside [after - floor, after): a clock that
 * jumped by more than half a floor. */
int ferry__pipe_launch_group(ferry_pipeline_t *p, slot_t *s, ferry_be_stream_t *st)
{
    int rc = 0;
    uint64_t floor = p->plan.deadline_floor_ns, after = 0, span = 0;
    if (ferry__watchdog_abort_word(p->wdog.wd) != NULL &&
        ferry__be_gpu_clock_at(p->dev, s->issue_ns + floor / 2, &after) == 0)
        span = floor;
    else
        after = 0;
    for (uint32_t i = 0; rc == 0 && i < s->nsub; i++) {
        ferry_be_launch_t l = chunk_launch(p, s, i, after, span);
        rc = ferry__be_launch(p->dev, st, &l);
    }
    return rc;
}

/* ---- issue ------------------------------------------------------------------------------- */

/* Chunks the ladder lets be in flight now. Under lock. */
unsigned ferry__pipe_inflight_limit(const ferry_pipeline_t *p)
{
    int level = ferry__ladder_level(&p->ladder);
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
        ferry__pipe_pass_wait(p);
    }
    /* The ladder may hold fewer chunks in flight than there are slots. */
    while (p->plan.depth - p->api.nfree_slots >= ferry__pipe_inflight_limit(p) &&
           !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire)) {
        p->api.slot_waiting = true;
        set_busy(p, false, true);
        pthread_cond_wait(&p->slot_cv, &p->lock);
        p->api.slot_waiting = false;
        set_busy(p, true, true);
        ferry__pipe_pass_wait(p);
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

bool ferry__pipe_is_pinned(ferry_pipeline_t *p, const void *ptr, size_t n)
{
    return ferry_pool_owns(p->pool, ptr, n) || ferry__rt_is_registered(p->dev, ptr, n);
}
#define is_pinned ferry__pipe_is_pinned

int ferry__pipe_copy_in(ferry_pipeline_t *p, const slot_t *s, ferry_be_stream_t *st,
                        const void *src)
{
    const ferry__pieces_t *pc = s->batch->pieces;
    if (pc != NULL)
        return ferry__be_copy_pieces(p->dev, st, true, s->d_in, pc->in, pc->nin,
                                     p->dev->props.piece_kernel_max);
    return ferry__be_memcpy_h2d(p->dev, st, s->d_in, src, s->bytes);
}

int ferry__pipe_copy_out(ferry_pipeline_t *p, const slot_t *s, ferry_be_stream_t *st, void *dst)
{
    const ferry__pieces_t *pc = s->batch->pieces;
    if (pc != NULL)
        return ferry__be_copy_pieces(p->dev, st, false, s->d_out, pc->out, pc->nout,
                                     p->dev->props.piece_kernel_max);
    return ferry__be_memcpy_d2h(p->dev, st, dst, s->d_out, s->bytes);
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
            size_t at, n = ferry__pipe_sub_bytes(p, s, i, &at);
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
    if ((sample || s->h2d_start_timed) &&
        (rc = ferry__be_event_record(d, s->tev[TEV_H2D_START], sh)) != 0)
        return rc;
    FERRY_PROF_BEGIN(t0);
    rc = ferry__pipe_copy_in(p, s, sh, src);
    FERRY_PROF_END(FERRY__PROF_ISSUE_IN, t0);
    if (rc != 0 || (rc = ferry__be_event_record(d, dep[EV_H2D_END], sh)) != 0)
        return rc;
    /* On one stream, stream order already is the dependency. */
    if ((sc != sh && (rc = ferry__be_stream_wait_event(d, sc, dep[EV_H2D_END])) != 0) ||
        (sample && (rc = ferry__be_event_record(d, s->tev[TEV_COMP_START], sc)) != 0))
        return rc;
    FERRY_PROF_BEGIN(t1);
    rc = ferry__pipe_launch_group(p, s, sc);
    FERRY_PROF_END(FERRY__PROF_ISSUE_RUN, t1);
    if (rc != 0 || (rc = ferry__be_event_record(d, dep[EV_COMP_END], sc)) != 0)
        return rc;
    if ((sd != sc && (rc = ferry__be_stream_wait_event(d, sd, dep[EV_COMP_END])) != 0) ||
        (sample && (rc = ferry__be_event_record(d, s->tev[TEV_D2H_START], sd)) != 0))
        return rc;
    FERRY_PROF_BEGIN(t2);
    rc = ferry__pipe_copy_out(p, s, sd, dst);
    FERRY_PROF_END(FERRY__PROF_ISSUE_OUT, t2);
    if (rc != 0 || (rc = ferry__be_event_record(d, dep[EV_D2H_END], sd)) != 0)
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
    int level = ferry__ladder_level(&p->ladder);
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
    s->h2d_start_timed = false;
    if (p->plan.time_all || s->traced) {
        s->timing = TIME_ENDS;
    } else if (!p->plan.time_none && ahead == 0) {
        s->timing = p->plan.anchors <= ANCHORS_MAX ? TIME_ENDS : TIME_SAMPLE;
        /* With several copy streams the H2D's start is not where its stream's anchor ended:
         * the other stream's copies run between, and the engine may idle before this one
         * starts. Derived from the anchor it read 100% busy and raised a false H2D alert on
         * the H200 (4 GiB, --copy-streams 2), so the sampled chunk times its H2D's start:
         * one more event record per SAMPLE_EVERY chunks. */
        s->h2d_start_timed =
            s->timing == TIME_ENDS && !p->plan.single && level < 3 && p->plan.ncopy > 1;
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
    FERRY_PROF_BEGIN(t0);
    int rc = issue_chunk(p, s);
    FERRY_PROF_END(FERRY__PROF_ISSUE, t0);
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
void ferry__pipe_issue_light(ferry_pipeline_t *p, batch_rec_t *b, slot_t *const *sl)
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
    if (p->handback != NULL && c1 > c0) { /* a set's member: to another device, if any */
        size_t off = (size_t)c0 * p->plan.chunk, end = (size_t)c1 * p->plan.chunk;
        if (end > b->b.bytes)
            end = b->b.bytes;
        if (p->handback(p->owner, b->arg, off, end - off)) {
            atomic_fetch_add_explicit(&p->sh.chunks_moved, c1 - c0, memory_order_relaxed);
            if (atomic_fetch_sub_explicit(&b->chunks_left, c1 - c0, memory_order_acq_rel) ==
                c1 - c0)
                push_ready(p, b);
            poke(p, false);
            return;
        }
    }
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
        rc = ferry__pipe_cpu_chunk(p, b, in, out, n, off, c, 1, seq);
        ok += rc == 0;
    }
    if (rc > 0 || rc < FERRY_ERR_MIN_)
        rc = FERRY_EKERNEL;
    ferry__pipe_batch_cpu_result(b, ok, rc);
    atomic_fetch_add_explicit(&p->sh.chunks_cpu_direct, ok, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->sh.chunks_issued, c1 - c0, memory_order_relaxed);
    if (atomic_fetch_sub_explicit(&b->chunks_left, c1 - c0, memory_order_acq_rel) == c1 - c0)
        push_ready(p, b);
    poke(p, false);
}

/* Issuer thread: any batch, waiting for slots chunk by chunk (@b as in ferry__pipe_issue_light). */
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
void ferry__pipe_take_slots(ferry_pipeline_t *p, uint32_t n, slot_t **sl)
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
void ferry__pipe_run_queue(ferry_pipeline_t *p, enum issue_role role)
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
            p->plan.depth - p->api.nfree_slots + b->nslots <= ferry__pipe_inflight_limit(p) &&
            (role == ROLE_ISSUER || budget > 0)) {
            ferry__pipe_take_slots(p, b->nslots, sl);
            p->api.nqueued--;
            p->iss.pending = NULL;
            pthread_mutex_unlock(&p->lock);
            budget -= budget > 0;
            ferry__pipe_issue_light(p, b, sl);
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

void *ferry__pipe_issuer_main(void *arg)
{
    ferry_pipeline_t *p = arg;
    ferry__pipe_own_thread = p;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->api.issuer_turn && !p->api.closing)
            pthread_cond_wait(&p->issue_cv, &p->lock);
        if (!p->api.issuer_turn)
            break; /* closing, and the token is not ours: nothing is queued */
        p->api.issuer_turn = false;
        pthread_mutex_unlock(&p->lock);
        ferry__pipe_run_queue(p, ROLE_ISSUER);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}
