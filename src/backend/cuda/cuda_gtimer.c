/* The GPU's clock (%globaltimer, ns) against the host's (CLOCK_MONOTONIC, now_ns), so that
 * ferry can tell a kernel at its launch from what GPU time on its abort word may go up
 * (ferry_kernel_args_t.abort_after): a poll before then reads the clock alone, a register.
 *
 * A one-thread kernel writes the GPU's clock into mapped host memory; the host notes when it
 * sees the value. The GPU read its clock before the host saw it, so (value - seen) is a lower
 * bound of (GPU clock - host clock). A bound keeps holding, less what the two clocks can drift
 * apart since (DRIFT_PPM: Linux slews a clock by at most 500 ppm; the H200 measured 3.5 ppm
 * against both of the host's clocks, docs/faults.md), so the best bound is the greater of the
 * newest and the previous one aged. A stamp goes out every REFRESH_NS while the clock is asked
 * for. A stamp the host sees late (a busy GPU, a call that comes late) gives a low bound: the
 * kernels then read the word earlier than they need, which costs time and is never late.
 * Measured on the H200: a stamp is seen 25-33 us after its launch. */
#include <stdatomic.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/ferry_k_watchdog.h"

#define DRIFT_PPM     500u
#define SLACK_NS      20000u        /* on every bound: the clock's step and the write's latency */
#define REFRESH_NS    1000000000ull /* a new stamp when the bound is this old */
#define FIRST_WAIT_NS 5000000ull    /* the first question waits this long for its stamp */

void ferry__cuda_gtimer_open(struct ferry_be_device *dev)
{
    pthread_mutex_init(&dev->gtimer.mu, NULL);
}

void ferry__cuda_gtimer_close(struct ferry_be_device *dev)
{
    struct ferry_cuda_gtimer *g = &dev->gtimer;
    if (g->pending && *g->stamp == 0) {
        /* Queued behind a kernel that may never end: freeing would wait for it. */
        ferry_log(FERRY_LOG_DEBUG, "cuda",
                  "device %d: a clock stamp is still queued: its page stays until the process "
                  "ends",
                  dev->index);
    } else if (g->built) {
        cudaStreamDestroy(g->stream);
        cudaFreeHost((void *)g->stamp);
    }
    pthread_mutex_destroy(&g->mu);
}

/* The stream and the stamp's page. Under mu; the device is current. */
static int build(struct ferry_be_device *dev)
{
    struct ferry_cuda_gtimer *g = &dev->gtimer;
    void *host = NULL, *devp = NULL;
    cudaError_t e = cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess && (e = cudaHostGetDevicePointer(&devp, host, 0)) != cudaSuccess)
        cudaFreeHost(host);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "the GPU clock's stamp page");
    e = cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, dev->prio_greatest);
    if (e != cudaSuccess) {
        cudaFreeHost(host);
        return ferry__cuda_fail(e, "the GPU clock's stream");
    }
    memset(host, 0, 64);
    g->stamp = host;
    g->stamp_dev = devp;
    g->built = true;
    return 0;
}

/* A stamp seen at host time @seen with the GPU's clock @value: the new bound, or the old one
 * aged where that is greater. */
static void take(struct ferry_cuda_gtimer *g, uint64_t seen, uint64_t value)
{
    int64_t fresh = (int64_t)value - (int64_t)seen;
    if (g->have) {
        uint64_t age = seen > g->at_ns ? seen - g->at_ns : 0;
        int64_t aged = g->offset - (int64_t)(age / 1000000u * DRIFT_PPM);
        if (aged > fresh)
            fresh = aged;
    }
    g->offset = fresh;
    g->at_ns = seen;
    g->have = true;
    g->pending = false;
}

/* Collect a stamp that arrived; send one when the bound is old. Under mu. */
static void refresh(struct ferry_be_device *dev, uint64_t now)
{
    struct ferry_cuda_gtimer *g = &dev->gtimer;
    uint64_t v;
    if (g->pending && (v = *g->stamp) != 0)
        take(g, ferry__mono_ns(), v);
    if (g->pending || (g->have && now - g->at_ns < REFRESH_NS))
        return;
    *g->stamp = 0;
    atomic_thread_fence(memory_order_seq_cst); /* zeroed before the kernel can write */
    cudaError_t e = (cudaError_t)ferry_k_clock_stamp_launch(g->stamp_dev, (void *)g->stream);
    if (e != cudaSuccess) {
        g->off = true;
        ferry_log(FERRY_LOG_WARN, "cuda",
                  "device %d: the GPU clock's stamp failed (%s): kernels read the abort word at "
                  "every poll",
                  dev->index, cudaGetErrorName(e));
        return;
    }
    g->pending = true;
    g->sent_ns = now;
    if (!g->have) { /* the first: wait for it, briefly */
        while ((v = *g->stamp) == 0 && ferry__mono_ns() - g->sent_ns < FIRST_WAIT_NS)
            ;
        if (v != 0)
            take(g, ferry__mono_ns(), v);
    }
}

int ferry__cuda_gpu_clock_at(struct ferry_be_device *dev, uint64_t host_ns, uint64_t *out)
{
    struct ferry_cuda_gtimer *g = &dev->gtimer;
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    if (!g->off && !g->built &&
        ((rc = ferry__cuda_use_device(dev->index)) != 0 || (rc = build(dev)) != 0)) {
        g->off = true;
        ferry_log(FERRY_LOG_WARN, "cuda",
                  "device %d: %s: kernels read the abort word at every poll", dev->index,
                  ferry__last_error_text());
    }
    if (!g->off)
        refresh(dev, ferry__mono_ns());
    rc = FERRY_ENOTSUP;
    if (!g->off && g->have) {
        uint64_t age = host_ns > g->at_ns ? host_ns - g->at_ns : g->at_ns - host_ns;
        int64_t b = (int64_t)host_ns + g->offset - (int64_t)(age / 1000000u * DRIFT_PPM) -
                    (int64_t)SLACK_NS;
        if (b > 0) {
            *out = (uint64_t)b;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}
