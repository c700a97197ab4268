/* The device clock behind event_time_ns. CUDA only measures between two events
 * (cudaEventElapsedTime: float milliseconds, "resolution of around 0.5 microseconds" by the
 * runtime API docs), so an event's absolute time is ref_ns + elapsed(ref, e) x 1e6, where ref is
 * a reference event recorded on a private idle stream whose CLOCK_MONOTONIC time was measured.
 * A float's rounding grows with the distance from ref (ulp of 1 s is 61 ns, of 1 h 0.25 ms), so
 * ref is re-based once it is older than a second (docs/cuda.md, "Event times"). */
#include <math.h>
#include <sched.h>

#include "backend/cuda/cuda_internal.h"

#define REBASE_AFTER_NS 1000000000ull /* re-base a reference older than this */
#define REBASE_RETRY_NS 100000000ull  /* after a failed re-base, wait this long to try again */
#define REBASE_SPIN_NS  1000000ull    /* a re-base waits at most this for its event */
#define OPEN_SPIN_NS    5000000000ull /* the first reference may wait for context start-up */
#define OPEN_SAMPLES    5             /* keep the tightest of this many at open */
#define SPIN_YIELD_NS   20000ull      /* spin this long, then yield the CPU between queries */

static void swap_events(struct ferry_cuda_clock *c)
{
    cudaEvent_t t = c->ref;
    c->ref = c->spare;
    c->spare = t;
}

/* @base + @ms milliseconds, in ns, never below 0. */
static uint64_t add_ms(uint64_t base, float ms)
{
    double d = (double)ms * 1e6;
    if (d >= 0)
        return base + (uint64_t)llround(d);
    uint64_t back = (uint64_t)llround(-d);
    return back > base ? 0 : base - back;
}

/* Record @ev on the clock stream and poll until it completes; *t0 is the host time before the
 * record and *t1 the time the completion was seen, so the event's device time lies in
 * [t0, t1]. Returns 0, FERRY_ETIMEDOUT (no error text: callers decide) or a translated error. */
static int sample(struct ferry_cuda_clock *c, cudaEvent_t ev, uint64_t limit_ns, uint64_t *t0,
                  uint64_t *t1)
{
    *t0 = ferry__mono_ns();
    cudaError_t e = cudaEventRecord(ev, c->stream);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaEventRecord(clock reference)");
    for (;;) {
        e = cudaEventQuery(ev);
        uint64_t now = ferry__mono_ns();
        if (e == cudaSuccess) {
            *t1 = now;
            return 0;
        }
        if (e != cudaErrorNotReady)
            return ferry__cuda_fail(e, "cudaEventQuery(clock reference)");
        if (now - *t0 > limit_ns)
            return FERRY_ETIMEDOUT;
        /* An idle stream reaches the event in microseconds (FACTS.md: record + query 1.5 us):
         * spin for a tight window, and only yield if the GPU front end is busy. */
        if (now - *t0 > SPIN_YIELD_NS)
            sched_yield();
    }
}

/* Ends what ferry__cuda_clock_open() made, in reverse; a handle not made is NULL. */
static void release(struct ferry_cuda_clock *c)
{
    if (c->spare != NULL)
        cudaEventDestroy(c->spare);
    if (c->ref != NULL)
        cudaEventDestroy(c->ref);
    if (c->stream != NULL)
        cudaStreamDestroy(c->stream);
    pthread_mutex_destroy(&c->mu);
}

int ferry__cuda_clock_open(struct ferry_be_device *dev)
{
    struct ferry_cuda_clock *c = &dev->clock;
    int rc = 0;
    cudaError_t e;
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        return ferry__error(FERRY_ENOMEM, "cuda: device %d: cannot create the clock mutex",
                            dev->index);
    c->stream = NULL;
    c->ref = c->spare = NULL;
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaStreamCreateWithFlags(clock stream)");
        goto out_release;
    }
    e = cudaEventCreateWithFlags(&c->ref, cudaEventDefault);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaEventCreateWithFlags(clock reference)");
        goto out_release;
    }
    e = cudaEventCreateWithFlags(&c->spare, cudaEventDefault);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaEventCreateWithFlags(clock reference)");
        goto out_release;
    }
    /* The reference's host time is the middle of [t0, t1], off by at most half the window:
     * keep the tightest of a few samples (the first one also pays for lazy start-up). */
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < OPEN_SAMPLES; i++) {
        uint64_t t0 = 0, t1 = 0;
        rc = sample(c, c->spare, OPEN_SPIN_NS, &t0, &t1);
        if (rc == FERRY_ETIMEDOUT)
            rc = ferry__error(FERRY_EBACKEND,
                              "cuda: device %d did not complete an event on an idle stream "
                              "within %llu ms",
                              dev->index, (unsigned long long)(OPEN_SPIN_NS / 1000000));
        if (rc != 0)
            goto out_release;
        if (t1 - t0 < best) {
            best = t1 - t0;
            swap_events(c);
            c->ref_ns = t0 + (t1 - t0) / 2;
            c->ref_host_ns = t1;
        }
    }
    c->next_try_ns = 0;
    ferry_log(FERRY_LOG_DEBUG, "cuda",
              "device %d: clock reference within +-%llu ns of "
              "CLOCK_MONOTONIC",
              dev->index, (unsigned long long)(best / 2));
    return 0;
out_release:
    release(c);
    return rc;
}

void ferry__cuda_clock_close(struct ferry_be_device *dev)
{
    struct ferry_cuda_clock *c = &dev->clock;
    release(c);
    ferry_log(FERRY_LOG_DEBUG, "cuda", "device %d: clock re-based %llu times (%llu misses)",
              dev->index, (unsigned long long)c->rebases, (unsigned long long)c->rebase_misses);
}

/* Take a new reference. Its time can be had two ways: chained, old ref + elapsed(old, new),
 * off by the float rounding of that elapsed time; or from the host, the middle of its sample
 * window. Chained keeps consecutive references consistent to a few ns (events of one chunk
 * that straddle a re-base stay comparable), so it wins unless a long idle gap made its
 * rounding worse than the host window. Locked by c->mu. */
static void rebase(struct ferry_be_device *dev, uint64_t now)
{
    struct ferry_cuda_clock *c = &dev->clock;
    uint64_t t0 = 0, t1 = 0;
    float ms = 0;
    if (sample(c, c->spare, REBASE_SPIN_NS, &t0, &t1) != 0 ||
        cudaEventElapsedTime(&ms, c->ref, c->spare) != cudaSuccess) {
        /* The clock stream shares a hardware queue with busy streams, or the context is
         * gone: keep the old reference (precision degrades slowly) and try again later. A
         * sticky error is reported by the caller's own elapsed-time call. */
        (void)cudaGetLastError();
        c->rebase_misses++;
        c->next_try_ns = now + REBASE_RETRY_NS;
        return;
    }
    double rounding_ns = (double)(nextafterf(fabsf(ms), INFINITY) - fabsf(ms)) * 0.5e6;
    double host_ns = (double)(t1 - t0) / 2.0;
    c->ref_ns = rounding_ns <= host_ns ? add_ms(c->ref_ns, ms) : t0 + (t1 - t0) / 2;
    c->ref_host_ns = t1;
    c->rebases++;
    swap_events(c);
}

int ferry__cuda_clock_event_ns(struct ferry_be_device *dev, cudaEvent_t ev, uint64_t *out)
{
    struct ferry_cuda_clock *c = &dev->clock;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    uint64_t now = ferry__mono_ns();
    if (now - c->ref_host_ns > REBASE_AFTER_NS && now >= c->next_try_ns)
        rebase(dev, now);
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, c->ref, ev);
    if (e == cudaSuccess)
        *out = add_ms(c->ref_ns, ms);
    else if (e == cudaErrorNotReady)
        rc = ferry__error(FERRY_EAGAIN, "cuda: event_time_ns: the event has not completed yet");
    else
        rc = ferry__cuda_fail(e, "cudaEventElapsedTime");
    pthread_mutex_unlock(&c->mu);
    return rc;
}
