/* What the pipeline does when a chunk's GPU attempt fails: failure records, a retry on the GPU at
 * a lower ladder level, the CPU fallback, and the watchdog's callbacks (a deadline passed, a
 * hang that ends the GPU path). */
#include <errno.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/pipeline_internal.h"

/* A failure record of @s's attempt (fault/ladder.h). Completion thread. */
void ferry__pipe_write_failure_record(ferry_pipeline_t *p, const slot_t *s, int err,
                                      const char *msg, const char *action, uint64_t now)
{
    const batch_rec_t *b = s->batch;
    ferry__failure_rec_t r = {
        .device_ns = now,
        .batch = b->id,
        .issue_ns = s->issue_ns,
        .attempt = s->attempt,
        .chunk = s->chunk,
        .chunks = s->nsub,
        .stage = p->stage_name,
        .offset = s->offset,
        .bytes = s->bytes,
        .chunk_bytes = p->plan.chunk,
        .h2d = s->h2d,
        .comp = s->comp,
        .d2h = s->d2h,
        .copy_streams = p->plan.ncopy,
        .compute_streams = p->plan.ncomp,
        .depth = p->plan.depth,
        .blocks = p->dev->props.sms > 0 ? p->dev->props.sms : 1,
        .host_in = s->host_in,
        .out = b->b.out != NULL ? (void *)((unsigned char *)b->b.out + s->offset) : NULL,
        .d_in = s->d_in,
        .d_out = s->d_out,
        .err = err,
        .msg = msg,
        .action = action,
        .gpu_lost = atomic_load_explicit(&p->sh.gpu_lost, memory_order_relaxed) != 0,
    };
    ferry__failure_log_write(&p->comp.flog, &r);
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

static void end_gpu_path_hung(ferry_pipeline_t *p, uint64_t batch, uint32_t chunk, uint64_t now,
                              const char *why);

/* The ladder's level 1, retry: the chunk's three ops again, on the retry stream, at the lower
 * level the failure stepped down to, waited for here. The wait is bounded by the deadline; a
 * retry past it is a hang (the slot is abandoned). Returns 0 when the output is in place.
 * Completion thread. */
int ferry__pipe_retry_on_gpu(ferry_pipeline_t *p, slot_t *s)
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
    if ((rc = ferry__pipe_copy_in(p, s, p->comp.retry_stream, s->host_in)) != 0 ||
        (rc = ferry__pipe_launch_group(p, s, p->comp.retry_stream)) != 0 ||
        (rc = ferry__pipe_copy_out(p, s, p->comp.retry_stream, dst)) != 0 ||
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
int ferry__stage_cpu_run(const ferry_stage_t *st, ferry_kernel_args_t *a)
{
    size_t g = st->granularity; /* imported at create: 0 when the caller's stage lacks it */
    size_t align = 1;
    while (align < 16 && g % (align * 2) == 0 && g >= align * 2)
        align *= 2; /* the largest power of two dividing g, up to 16 */
    if (align == 1 || (((uintptr_t)a->in | (uintptr_t)a->out) & (align - 1)) == 0)
        return st->cpu(a, st->user);
    size_t span = (a->bytes + 15) & ~(size_t)15;
    unsigned char *tmp = NULL;
    if (posix_memalign((void **)&tmp, 16, 2 * span + 16) != 0)
        return ferry__error(FERRY_ENOMEM, "pipeline: no memory to align a chunk for the CPU");
    ferry_kernel_args_t b = *a;
    memcpy(tmp, a->in, a->bytes);
    b.in = tmp;
    b.out = tmp + span;
    int rc = st->cpu(&b, st->user);
    if (rc == 0)
        memcpy(a->out, tmp + span, a->bytes);
    free(tmp);
    return rc;
}

/* Run one chunk of @b on the CPU: @n bytes at @off within the batch, from @in to @out. The one
 * routine the fallback (a failed GPU attempt) and the CPU-direct path (the GPU path lost) share;
 * the stage's CPU function gets the arguments a kernel would. */
int ferry__pipe_cpu_chunk(ferry_pipeline_t *p, const batch_rec_t *b, const void *in, void *out,
                          size_t n, size_t off, uint32_t chunk, uint32_t attempt, uint64_t seq)
{
    ferry_kernel_args_t args = {.size = sizeof(args),
                                .in = in,
                                .out = out,
                                .bytes = n,
                                .offset = off,
                                .batch_id = b->id,
                                .chunk = chunk,
                                .attempt = attempt,
                                .seq = seq,
                                .batch_user = b->b.user};
    return ferry__stage_cpu_run(&p->stage, &args);
}

/* What the CPU did for @b: @ok more chunks done there, and @rc the first error to keep. */
void ferry__pipe_batch_cpu_result(batch_rec_t *b, uint32_t ok, int rc)
{
    atomic_fetch_add_explicit(&b->cpu_chunks, ok, memory_order_relaxed);
    if (rc != 0) {
        int zero = 0;
        atomic_compare_exchange_strong_explicit(&b->status, &zero, rc, memory_order_relaxed,
                                                memory_order_relaxed);
    }
}

/* A set's member whose GPU path ended with a sticky error: the chunk goes to another device of
 * the set, if one is left, instead of this one's CPU path (a failure record says so). Not after
 * a hang, whose abandoned chunks may still be written by their kernel (guard_late_copy), nor
 * for a batch whose input a prepare callback made (it would be asked for it again). */
static bool hand_back(ferry_pipeline_t *p, slot_t *s, int err, const char *msg, uint64_t now)
{
    batch_rec_t *b = s->batch;
    if (p->handback == NULL || s->abandoned || b->b.prepare != NULL ||
        !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire) ||
        atomic_load_explicit(&p->sh.hang_lost, memory_order_acquire) ||
        !p->handback(p->owner, b->arg, s->offset, s->bytes))
        return false;
    atomic_fetch_add_explicit(&p->sh.chunks_moved, s->nsub, memory_order_relaxed);
    if (!s->gpu_skipped)
        ferry__pipe_write_failure_record(p, s, err, msg, "device", now);
    return true;
}

/* A chunk's GPU attempt failed (@err): the ladder's level 2. A sticky error ends the GPU path
 * for every later chunk. The stage's CPU function, if any, produces the output from the chunk's
 * host input; otherwise the batch fails with the reason. Completion thread. */
void ferry__pipe_fall_back(ferry_pipeline_t *p, slot_t *s, int err, uint64_t now, pass_acc_t *a)
{
    batch_rec_t *b = s->batch;
    char msg[256];
    ferry__strlcpy(msg, s->errmsg[0] ? s->errmsg : ferry__last_error_text(), sizeof(msg));
    if (err == FERRY_ESTICKY &&
        !atomic_exchange_explicit(&p->sh.gpu_lost, 1, memory_order_acq_rel) &&
        (trace_note(p, NOTE_GPU_LOST, b->id, s->chunk, now), true)) {
        if (p->gpu_end != NULL)
            p->gpu_end(p, false); /* a worker process: does not return */
        ferry_log(FERRY_LOG_ERROR, "pipeline",
                  "sticky error (%s): the GPU path of this process has ended; every batch in "
                  "flight and every later one runs on the %s",
                  msg,
                  p->handback != NULL ? "set's other devices, or the CPU when none is left"
                  : p->stage.cpu      ? "stage's CPU function"
                                      : "CPU (no CPU function: they fail)");
    }
    if (err != FERRY_ESTICKY && !s->gpu_skipped &&
        !atomic_load_explicit(&p->sh.gpu_lost, memory_order_acquire))
        ferry__ladder_step_down(&p->ladder);
    if (hand_back(p, s, err, msg, now))
        return;
    int rc = err;
    const char *action = "failed";
    uint32_t ok = 0;
    if (p->stage.cpu != NULL && s->host_in != NULL) {
        unsigned char *out =
            b->b.out != NULL ? (unsigned char *)b->b.out + s->offset : (unsigned char *)s->h_out;
        rc = 0;
        for (uint32_t i = 0; rc == 0 && i < s->nsub; i++) { /* every chunk of the group */
            size_t at, n = ferry__pipe_sub_bytes(p, s, i, &at);
            rc = ferry__pipe_cpu_chunk(p, b, (const unsigned char *)s->host_in + at, out + at, n,
                                       s->offset + at, s->chunk + i, s->attempt + 1, s->seq);
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
        ferry__pipe_write_failure_record(p, s, err, msg, action, now);
    }
    if (rc == 0 && s->abandoned && !s->copy_out && b->b.out != NULL)
        guard_late_copy(p, s, (unsigned char *)b->b.out + s->offset);
    ferry__pipe_batch_cpu_result(b, ok, rc);
    p->comp.chunks_cpu += ok;
    if (rc == 0)
        a->bytes_cpu += s->bytes;
}

/* The watchdog raised the abort word past a chunk's deadline (either thread). */
void ferry__pipe_wd_deadline(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t deadline,
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
    if (first && p->gpu_end != NULL)
        p->gpu_end(p, true); /* a worker process: does not return */
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
void ferry__pipe_wd_hang(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t since_abort,
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
int ferry__pipe_aborted(ferry_pipeline_t *p, slot_t *s)
{
    snprintf(s->errmsg, sizeof(s->errmsg),
             "passed its deadline: the abort flag was raised and its GPU output discarded");
    ferry__watchdog_retired_aborted(p->wdog.wd, s->seq, ferry_device_now_ns(p->dev));
    return FERRY_ETIMEDOUT;
}
