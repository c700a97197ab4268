/* The cuda backend's ops table: devices, registered (pinned) host memory, device memory,
 * non-blocking streams with priorities, timed events polled with a bounded backoff, async
 * copies and stage launches, each wrapped in an NVTX range for Nsight Systems. Every CUDA
 * return code is checked and translated once, in cuda_error.c; no CUDA type leaves this folder.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/ferry_k_pieces.h"
#include "backend/cuda/ferry_k_watchdog.h"

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define FERRY_HAVE_NVTX 1
#endif
#endif

/* NVTX ranges around the enqueue calls: without a tool attached each is one predictable branch
 * in the header-only nvtx3 library. */
static void range_push(const char *name)
{
#ifdef FERRY_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
}

static void range_pop(void)
{
#ifdef FERRY_HAVE_NVTX
    nvtxRangePop();
#endif
}

/* ---- devices ----------------------------------------------------------------------------- */

static int cuda_device_count(const char *profile_path, int *count, char *why, size_t why_len)
{
    (void)profile_path; /* the simulator's */
    if (count == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: device_count: NULL count");
    /* FACTS.md: without a driver, cudaGetDeviceCount returns 35 and leaves the count as it was. */
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        *count = 0;
        ferry__cuda_fail(e, "cudaGetDeviceCount");
        if (why != NULL && why_len > 0)
            snprintf(why, why_len, "%s", ferry__last_error_text());
        return FERRY_ENODEV;
    }
    *count = n;
    if (why != NULL && why_len > 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (n > 0)
            why[0] = '\0';
        else
            snprintf(why, why_len, "cudaGetDeviceCount: 0 devices%s%s%s",
                     vis ? " (CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "", vis ? "\")" : "");
    }
    return 0;
}

static int cuda_device_open(int index, const ferry_be_open_params_t *params,
                            ferry_be_device_t **out)
{
    (void)params; /* the profile and seed are the simulator's */
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: device_open: NULL out");
    int n = 0, rc;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        ferry__cuda_fail(e, "cudaGetDeviceCount");
        return FERRY_ENODEV;
    }
    if (index < 0 || index >= n)
        return ferry__error(FERRY_ENODEV, "cuda: no device %d (%d visible)", index, n);
    struct ferry_be_device *dev = calloc(1, sizeof(*dev));
    if (dev == NULL)
        return ferry__error(FERRY_ENOMEM, "cuda: out of memory opening device %d", index);
    dev->index = index;
    ferry__cuda_abort_open(dev);
    ferry__cuda_gtimer_open(dev);
    /* cudaSetDevice creates the primary context (CUDA >= 12): the first call that can find
     * the device busy (46: exclusive-process mode, or lost after a reset, FACTS.md). */
    e = cudaSetDevice(index);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaSetDevice(%d)", index);
        if (e == cudaErrorDevicesUnavailable)
            rc = FERRY_ENODEV;
        goto out_free;
    }
    ferry__cuda_forget_device();
    if ((rc = ferry__cuda_use_device(index)) != 0)
        goto out_free;
    e = cudaGetDeviceProperties(&dev->prop, index);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaGetDeviceProperties(%d)", index);
        goto out_free;
    }
    e = cudaDeviceGetStreamPriorityRange(&dev->prio_least, &dev->prio_greatest);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaDeviceGetStreamPriorityRange");
        goto out_free;
    }
    e = cudaDriverGetVersion(&dev->driver_version);
    if (e == cudaSuccess)
        e = cudaRuntimeGetVersion(&dev->runtime_version);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaDriverGetVersion");
        goto out_free;
    }
    snprintf(dev->pci_bus_id, sizeof(dev->pci_bus_id), "%04x:%02x:%02x.0",
             (unsigned)dev->prop.pciDomainID, (unsigned)dev->prop.pciBusID,
             (unsigned)dev->prop.pciDeviceID);
    dev->numa_node = ferry__cuda_numa_node(dev->pci_bus_id);
    if ((rc = ferry__cuda_clock_open(dev)) != 0)
        goto out_free;
    cudaError_t pe = (cudaError_t)ferry_k_heartbeat_preload();
    if (pe != cudaSuccess)
        ferry_log(FERRY_LOG_WARN, "cuda", "device %d: loading the heartbeat kernel: %s", index,
                  cudaGetErrorName(pe));
    ferry__cuda_nvml_open(dev);
    ferry_log(FERRY_LOG_INFO, "cuda",
              "device %d open: %s, cc %d.%d, %d SMs, %d copy engines, PCI %s, NUMA node %d, "
              "NVML %s",
              index, dev->prop.name, dev->prop.major, dev->prop.minor,
              dev->prop.multiProcessorCount, dev->prop.asyncEngineCount, dev->pci_bus_id,
              dev->numa_node, dev->nvml.lib ? "loaded" : "absent");
    *out = dev;
    return 0;
out_free:
    ferry__cuda_abort_close(dev);
    ferry__cuda_gtimer_close(dev);
    free(dev);
    return rc;
}

static void cuda_device_close(ferry_be_device_t *dev)
{
    if (dev == NULL)
        return;
    /* Work on the device's streams belongs to pipelines, which are closed first. */
    if (ferry__cuda_use_device(dev->index) != 0)
        ferry_log(FERRY_LOG_WARN, "cuda", "device %d close: %s", dev->index,
                  ferry__last_error_text());
    ferry__cuda_waits_log(dev);
    ferry__cuda_abort_close(dev);
    ferry__cuda_gtimer_close(dev);
    ferry__cuda_clock_close(dev);
    ferry__cuda_nvml_close(dev);
    free(dev);
}

static int cuda_device_props(ferry_be_device_t *dev, ferry_device_props_t *out)
{
    if (dev == NULL || !FERRY_SIZE_OK(out, sizeof(ferry_device_props_t)))
        return ferry__error(FERRY_EINVAL, "cuda: device_props: NULL device or props, or props "
                                          "size not set (use FERRY_DEVICE_PROPS_INIT)");
    return ferry__cuda_props(dev, out);
}

static uint64_t cuda_now_ns(ferry_be_device_t *dev)
{
    (void)dev;
    return ferry__mono_ns(); /* the clock event times are expressed in (cuda_clock.c) */
}

/* ---- host memory ------------------------------------------------------------------------- */

static int cuda_host_register(ferry_be_device_t *dev, void *p, size_t bytes)
{
    if (dev == NULL || p == NULL || bytes == 0)
        return ferry__error(FERRY_EINVAL,
                            "cuda: host_register: NULL device or pointer, or 0 bytes");
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    /* Registered malloc/mmap memory, never cudaMallocHost: FACTS.md measured that registered
     * memory stays readable after a context loss while cudaMallocHost memory is unmapped.
     * With unified addressing, Default registration is mapped and portable to every device. */
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e == cudaSuccess)
        return 0;
    rc = ferry__cuda_fail(e, "cudaHostRegister(%p, %zu bytes)", p, bytes);
    if (rc == FERRY_ESTICKY || rc == FERRY_ENODEV || rc == FERRY_EINVAL)
        return rc;
    char cause[256];
    ferry__strlcpy(cause, ferry__last_error_text(), sizeof(cause));
    char limit[64] = "unknown";
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(limit, sizeof(limit), "unlimited");
        else
            snprintf(limit, sizeof(limit), "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
    }
    return ferry__error(FERRY_EBACKEND,
                        "cuda: cannot pin %zu bytes (%.1f MiB) of host memory at %p (%s); the "
                        "locked-memory limit is %s: raise it (`ulimit -l unlimited`, or "
                        "LimitMEMLOCK=infinity for a service) or use smaller pools",
                        bytes, (double)bytes / 1048576.0, p, cause, limit);
}

static int cuda_host_unregister(ferry_be_device_t *dev, void *p)
{
    if (dev == NULL || p == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: host_unregister: NULL device or pointer");
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    cudaError_t e = cudaHostUnregister(p);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaHostUnregister(%p)", p);
    return 0;
}

/* ---- device memory ----------------------------------------------------------------------- */

static int cuda_mem_alloc(ferry_be_device_t *dev, size_t bytes, void **out)
{
    if (dev == NULL || out == NULL || bytes == 0)
        return ferry__error(FERRY_EINVAL, "cuda: mem_alloc: NULL device or out, or 0 bytes");
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes); /* plain device memory: never managed memory */
    if (e == cudaSuccess) {
        *out = p;
        return 0;
    }
    rc = ferry__cuda_fail(e, "cudaMalloc(%zu bytes)", bytes);
    if (rc != FERRY_EDEVMEM)
        return rc;
    char cause[256];
    ferry__strlcpy(cause, ferry__last_error_text(), sizeof(cause));
    size_t free_b = 0, total_b = 0;
    e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ferry__error(FERRY_EDEVMEM,
                            "cuda: device %d: cannot allocate %zu bytes (%.1f MiB) "
                            "of device memory (%s)",
                            dev->index, bytes, (double)bytes / 1048576.0, cause);
    }
    return ferry__error(FERRY_EDEVMEM,
                        "cuda: device %d: cannot allocate %zu bytes (%.1f MiB) of device memory: "
                        "%zu bytes (%.1f MiB) free of %zu (%s)",
                        dev->index, bytes, (double)bytes / 1048576.0, free_b,
                        (double)free_b / 1048576.0, total_b, cause);
}

static void cuda_mem_free(ferry_be_device_t *dev, void *p)
{
    if (dev == NULL || p == NULL)
        return;
    if (ferry__cuda_use_device(dev->index) != 0)
        goto out_warn;
    /* cudaFree waits for work that may still use the memory. */
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) {
        ferry__cuda_fail(e, "cudaFree(%p)", p);
        goto out_warn;
    }
    return;
out_warn:
    ferry_log(FERRY_LOG_WARN, "cuda", "mem_free: %s", ferry__last_error_text());
}

/* ---- streams ----------------------------------------------------------------------------- */

/* A release whose caller cannot fail (a destroy): @e, what @call returned, is translated and
 * logged as a warning of @op. */
static void warn_release(cudaError_t e, const char *op, const char *call)
{
    if (e == cudaSuccess)
        return;
    ferry__cuda_fail(e, "%s", call);
    ferry_log(FERRY_LOG_WARN, "cuda", "%s: %s", op, ferry__last_error_text());
}

/* The start of a call @op on a @what (a stream, an event) of @dev, NULL when the call was given
 * none: that is an error, else @dev is made current. */
static int enter(const ferry_be_device_t *dev, const char *op, const char *what)
{
    if (dev == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: %s: NULL %s", op, what);
    return ferry__cuda_use_device(dev->index);
}

/* The zeroed record of a new stream or event of @dev, made current, for the call @op. */
static int new_record(ferry_be_device_t *dev, size_t size, const char *op, void **out)
{
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    *out = calloc(1, size);
    if (*out == NULL)
        return ferry__error(FERRY_ENOMEM, "cuda: %s: out of memory", op);
    return 0;
}

/* Ends a stream or event of @dev (one of @st, @ev is set) and frees its record @obj. A
 * destroy cannot fail: a failed release is logged. */
static void destroy_record(ferry_be_device_t *dev, cudaStream_t st, cudaEvent_t ev, void *obj)
{
    if (ferry__cuda_use_device(dev->index) == 0) {
        if (st != NULL)
            warn_release(cudaStreamDestroy(st), "stream_destroy", "cudaStreamDestroy");
        else
            warn_release(cudaEventDestroy(ev), "event_destroy", "cudaEventDestroy");
    }
    free(obj);
}

static int cuda_stream_create(ferry_be_device_t *dev, int priority, ferry_be_stream_t **out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: stream_create: NULL device or out");
    struct ferry_be_stream *s;
    int rc = new_record(dev, sizeof(*s), "stream_create", (void **)&s);
    if (rc != 0)
        return rc;
    /* Non-blocking: no implicit synchronisation with the legacy default stream, which ferry
     * never uses. CUDA clamps the priority into [greatest, least]; so does the record here. */
    cudaError_t e = cudaStreamCreateWithPriority(&s->st, cudaStreamNonBlocking, priority);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaStreamCreateWithPriority(priority %d)", priority);
        free(s);
        return rc;
    }
    s->dev = dev;
    s->priority = priority < dev->prio_greatest ? dev->prio_greatest
                  : priority > dev->prio_least  ? dev->prio_least
                                                : priority;
    *out = s;
    return 0;
}

static void cuda_stream_destroy(ferry_be_stream_t *s)
{
    if (s == NULL)
        return;
    /* Returns at once; work already queued on the stream still completes. */
    destroy_record(s->dev, s->st, NULL, s);
}

static void *cuda_stream_native(ferry_be_stream_t *s)
{
    return s != NULL ? (void *)s->st : NULL;
}

static int cuda_stream_sync(ferry_be_stream_t *s)
{
    int rc = enter(s != NULL ? s->dev : NULL, "stream_sync", "stream");
    if (rc != 0)
        return rc;
    cudaError_t e = cudaStreamSynchronize(s->st);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaStreamSynchronize");
    return 0;
}

/* ---- events ------------------------------------------------------------------------------ */

static int cuda_event_create(ferry_be_device_t *dev, unsigned flags, ferry_be_event_t **out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: event_create: NULL device or out");
    if (flags & ~FERRY_BE_EVENT_TIMING)
        return ferry__error(FERRY_EINVAL, "cuda: event_create: unknown flags 0x%x", flags);
    struct ferry_be_event *ev;
    int rc = new_record(dev, sizeof(*ev), "event_create", (void **)&ev);
    if (rc != 0)
        return rc;
    /* Timing only when asked for: a timed event costs its stream a few microseconds of device
     * time (docs/cuda.md). No blocking sync: ferry polls, never waits. */
    ev->timing = (flags & FERRY_BE_EVENT_TIMING) != 0;
    cudaError_t e =
        cudaEventCreateWithFlags(&ev->ev, ev->timing ? cudaEventDefault : cudaEventDisableTiming);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaEventCreateWithFlags");
        free(ev);
        return rc;
    }
    ev->dev = dev;
    *out = ev;
    return 0;
}

static void cuda_event_destroy(ferry_be_event_t *e)
{
    if (e == NULL)
        return;
    destroy_record(e->dev, NULL, e->ev, e);
}

static int cuda_event_record(ferry_be_event_t *e, ferry_be_stream_t *s)
{
    if (e == NULL || s == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: event_record: NULL event or stream");
    if (e->dev != s->dev)
        return ferry__error(FERRY_EINVAL, "cuda: event_record: event and stream belong to "
                                          "different devices");
    int rc = ferry__cuda_use_device(s->dev->index);
    if (rc != 0)
        return rc;
    cudaError_t r = cudaEventRecord(e->ev, s->st);
    if (r != cudaSuccess)
        return ferry__cuda_fail(r, "cudaEventRecord");
    atomic_fetch_add_explicit(&e->gen, 1, memory_order_relaxed);
    atomic_store_explicit(&e->recorded, true, memory_order_release);
    return 0;
}

static int cuda_stream_wait_event(ferry_be_stream_t *s, ferry_be_event_t *e)
{
    if (e == NULL || s == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: stream_wait_event: NULL event or stream");
    int rc = ferry__cuda_use_device(s->dev->index);
    if (rc != 0)
        return rc;
    /* The record in force now; later records of @e do not matter (CUDA semantics). */
    cudaError_t r = cudaStreamWaitEvent(s->st, e->ev, cudaEventWaitDefault);
    if (r != cudaSuccess)
        return ferry__cuda_fail(r, "cudaStreamWaitEvent");
    return 0;
}

static int cuda_event_query(ferry_be_event_t *e)
{
    int rc = enter(e != NULL ? e->dev : NULL, "event_query", "event");
    if (rc != 0)
        return rc;
    return ferry__cuda_query(e, 0, 1);
}

static ferry_be_device_t *event_dev(const ferry_be_event_t *e)
{
    return e->dev;
}

static int cuda_event_wait_any(ferry_be_event_t *const *evs, size_t n, uint64_t timeout_ns,
                               size_t *which)
{
    int rc = ferry__be_wait_any_check("cuda", evs, n, which, event_dev);
    if (rc == 0)
        rc = ferry__cuda_use_device(evs[0]->dev->index);
    if (rc != 0)
        return rc;
    return ferry__cuda_wait_any(evs, n, timeout_ns, which);
}

static int cuda_event_time_ns(ferry_be_event_t *e, uint64_t *out)
{
    if (e == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: event_time_ns: NULL event or out");
    if (!e->timing)
        return ferry__error(FERRY_ENOTSUP, "cuda: event_time_ns: the event was created without "
                                           "timing");
    if (!ferry__cuda_recorded(e)) {
        *out = 0; /* never recorded: complete since time 0, as on the simulator */
        return 0;
    }
    int rc = ferry__cuda_use_device(e->dev->index);
    if (rc != 0)
        return rc;
    return ferry__cuda_clock_event_ns(e->dev, e->ev, out);
}

/* ---- work -------------------------------------------------------------------------------- */

/* One copy on @s, host to device (@dir 0) or device to host (1). */
static int cuda_memcpy(ferry_be_stream_t *s, int dir, void *dst, const void *src, size_t bytes)
{
    static const struct {
        const char *op, *range, *call;
        enum cudaMemcpyKind kind;
    } dirs[2] = {
        {"memcpy_h2d", "ferry H2D", "H2D", cudaMemcpyHostToDevice},
        {"memcpy_d2h", "ferry D2H", "D2H", cudaMemcpyDeviceToHost},
    };
    if (s == NULL || dst == NULL || src == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: %s: NULL stream or pointer", dirs[dir].op);
    int rc = ferry__cuda_use_device(s->dev->index);
    if (rc != 0)
        return rc;
    range_push(dirs[dir].range);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, dirs[dir].kind, s->st);
    range_pop();
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaMemcpyAsync(%s, %zu bytes)", dirs[dir].call, bytes);
    return 0;
}

static int cuda_memcpy_h2d(ferry_be_stream_t *s, void *dst_dev, const void *src_host, size_t bytes)
{
    return cuda_memcpy(s, 0, dst_dev, src_host, bytes);
}

static int cuda_memcpy_d2h(ferry_be_stream_t *s, void *dst_host, const void *src_dev, size_t bytes)
{
    return cuda_memcpy(s, 1, dst_host, src_dev, bytes);
}

/* The pieces of @pieces that a copy kernel moves (kernel_max bytes or fewer, their offsets in
 * 32 bits), FERRY_K_PIECES_MAX a launch; the rest are left in @rest (*@nrest). */
static int kernel_pieces(ferry_be_stream_t *s, bool to_dev, void *dbuf,
                         const ferry_be_piece_t *pieces, size_t n, size_t kernel_max,
                         ferry_be_piece_t *rest, size_t *nrest)
{
    ferry_k_piece_t kp[FERRY_K_PIECES_MAX];
    unsigned nk = 0;
    *nrest = 0;
    for (size_t i = 0; i < n; i++) {
        const ferry_be_piece_t *pc = &pieces[i];
        if (pc->bytes > kernel_max || pc->off > UINT32_MAX) {
            rest[(*nrest)++] = *pc;
            continue;
        }
        kp[nk++] = (ferry_k_piece_t){(unsigned long long)(uintptr_t)pc->host, (unsigned)pc->off,
                                     (unsigned)pc->bytes};
        if (nk == FERRY_K_PIECES_MAX) {
            cudaError_t e = (cudaError_t)ferry_k_pieces_launch(kp, nk, dbuf, to_dev, (void *)s->st);
            if (e != cudaSuccess)
                return ferry__cuda_fail(e, "copy kernel (%s, %u pieces)", to_dev ? "H2D" : "D2H",
                                        nk);
            nk = 0;
        }
    }
    if (nk > 0) {
        cudaError_t e = (cudaError_t)ferry_k_pieces_launch(kp, nk, dbuf, to_dev, (void *)s->st);
        if (e != cudaSuccess)
            return ferry__cuda_fail(e, "copy kernel (%s, %u pieces)", to_dev ? "H2D" : "D2H", nk);
    }
    return 0;
}

/* Pieces in one cudaMemcpyBatchAsync (CUDA 12.8 and later): on an H100 host 128 pieces of
 * 64 KiB moved at 97.7-97.8% of one copy's rate each way, against 32-34% for a cudaMemcpyAsync
 * each (bench/explore/small_copies.cu). A driver that refuses the call gets a copy each. Pieces
 * of @kernel_max bytes or fewer go by a copy kernel first (ferry_k_pieces.cu), where the device
 * can use registered memory at its host address (pinned memory here is registered). */
static int cuda_copy_pieces(ferry_be_stream_t *s, bool to_dev, void *dbuf,
                            const ferry_be_piece_t *pieces, size_t n, size_t kernel_max)
{
    if (s == NULL || dbuf == NULL || (n > 0 && pieces == NULL))
        return ferry__error(FERRY_EINVAL, "cuda: copy_pieces: NULL stream or pointer");
    int rc = ferry__cuda_use_device(s->dev->index);
    if (rc != 0 || n == 0)
        return rc;
    if (!s->dev->prop.canUseHostPointerForRegisteredMem)
        kernel_max = 0;
    ferry_be_piece_t *rest = NULL;
    void **ptrs = malloc(n * 2 * sizeof(void *));
    size_t *sizes = malloc(n * sizeof(size_t));
    if (kernel_max > 0)
        rest = malloc(n * sizeof(*rest));
    if (ptrs == NULL || sizes == NULL || (kernel_max > 0 && rest == NULL)) {
        free(ptrs);
        free(sizes);
        free(rest);
        return ferry__error(FERRY_ENOMEM, "cuda: copy_pieces: out of memory");
    }
    range_push(to_dev ? "ferry H2D pieces" : "ferry D2H pieces");
    if (kernel_max > 0) {
        size_t nrest = 0;
        rc = kernel_pieces(s, to_dev, dbuf, pieces, n, kernel_max, rest, &nrest);
        pieces = rest;
        n = nrest;
    }
    void **dsts = ptrs, **srcs = ptrs + n;
    for (size_t i = 0; i < n; i++) {
        void *d = (unsigned char *)dbuf + pieces[i].off;
        dsts[i] = to_dev ? d : pieces[i].host;
        srcs[i] = to_dev ? pieces[i].host : d;
        sizes[i] = pieces[i].bytes;
    }
    cudaError_t e = cudaSuccess;
    if (rc == 0 && n > 0) {
        e = cudaErrorNotSupported;
#if CUDART_VERSION >= 12080
        struct cudaMemcpyAttributes a;
        memset(&a, 0, sizeof(a));
        a.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t idx = 0;
        e = cudaMemcpyBatchAsync(dsts, (const void *const *)srcs, sizes, n, &a, &idx, 1, s->st);
#endif
        if (e == cudaErrorNotSupported || e == cudaErrorInvalidValue) {
            (void)cudaGetLastError();
            e = cudaSuccess;
            for (size_t i = 0; i < n && e == cudaSuccess; i++)
                e = cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault, s->st);
        }
    }
    range_pop();
    free(ptrs);
    free(sizes);
    free(rest);
    if (rc != 0)
        return rc;
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaMemcpyBatchAsync(%s, %zu pieces)", to_dev ? "H2D" : "D2H",
                                n);
    return 0;
}

static int cuda_launch(ferry_be_stream_t *s, const ferry_be_launch_t *l)
{
    if (l->gpu == NULL)
        return ferry__error(FERRY_ENOTSUP, "cuda: launch: the stage has no GPU function; the "
                                           "cuda backend runs a stage only through its launcher "
                                           "(set ferry_stage_t.gpu)");
    int rc = ferry__cuda_use_device(s->dev->index);
    if (rc != 0)
        return rc;
    /* cudaGetLastError after the launcher must see only what the launcher caused: clear an
     * older non-sticky error of this thread (every ferry call already reported its own). A
     * sticky one cannot be cleared and fails the launch now. */
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && ferry__cuda_error_code((int)e) == FERRY_ESTICKY)
        return ferry__cuda_fail(e, "before stage launch");
    ferry__clear_error();
    range_push("ferry compute");
    int urc = l->gpu(&l->args, (void *)s->st, l->user);
    range_pop();
    /* The launcher may have made another device current. */
    ferry__cuda_forget_device();
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "stage launch (chunk %u of batch %llu)", l->args.chunk,
                                (unsigned long long)l->args.batch_id);
    if (urc == 0)
        return 0;
    if (urc > 0 || urc < FERRY_ERR_MIN_)
        urc = FERRY_EKERNEL;
    char inner[256];
    ferry__strlcpy(inner, ferry__last_error_text(), sizeof(inner));
    return ferry__error(urc,
                        "cuda: launch: the stage's GPU function returned %s (chunk %u of "
                        "batch %llu)%s%s",
                        ferry_err_name(urc), l->args.chunk, (unsigned long long)l->args.batch_id,
                        inner[0] ? ": " : "", inner);
}

static int cuda_mem_info(ferry_be_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (dev == NULL || free_bytes == NULL || total_bytes == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: mem_info: NULL argument");
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaMemGetInfo");
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}

/* Abort words live in device memory, raised by a copy (cuda_abort.c). */
static int cuda_abort_word_create(ferry_be_device_t *dev, volatile uint64_t **out)
{
    return ferry__cuda_abort_word_create(dev, out);
}

static void cuda_abort_word_destroy(ferry_be_device_t *dev, volatile uint64_t *word)
{
    ferry__cuda_abort_word_destroy(dev, word);
}

static int cuda_abort_kernels(ferry_be_device_t *dev, const volatile uint64_t *word, uint64_t upto)
{
    return ferry__cuda_abort_raise(dev, word, upto);
}

static int cuda_host_device_ptr(ferry_be_device_t *dev, void *host, void **out)
{
    if (dev == NULL || host == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: host_device_ptr: NULL argument");
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    cudaError_t e = cudaHostGetDevicePointer(out, host, 0);
    return e == cudaSuccess ? 0 : ferry__cuda_fail(e, "cudaHostGetDevicePointer(%p)", host);
}

static int cuda_heartbeat(ferry_be_stream_t *s, volatile uint64_t *word, uint64_t value)
{
    if (s == NULL || word == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: heartbeat: NULL stream or word");
    int rc = ferry__cuda_use_device(s->dev->index);
    if (rc != 0)
        return rc;
    cudaError_t e = (cudaError_t)ferry_k_heartbeat_launch(word, value, (void *)s->st);
    return e == cudaSuccess ? 0 : ferry__cuda_fail(e, "heartbeat kernel launch");
}

static int cuda_link_rate(ferry_be_device_t *dev, int dir, double *bytes_per_s, uint64_t *window_ns)
{
    if (dev == NULL || bytes_per_s == NULL || window_ns == NULL || (dir != 0 && dir != 1))
        return ferry__error(FERRY_EINVAL, "cuda: link_rate: NULL argument or direction not 0/1");
    int rc = ferry__cuda_nvml_rate(dev, dir, bytes_per_s);
    if (rc == 0)
        *window_ns = FERRY_LINK_WINDOW_NS;
    return rc;
}

const ferry_backend_ops_t ferry__cuda_backend = {
    .name = "cuda",
    .abi = FERRY_BACKEND_ABI,
    .caps = FERRY_BE_CAP_NATIVE_STREAM,
    .device_count = cuda_device_count,
    .device_open = cuda_device_open,
    .device_close = cuda_device_close,
    .device_props = cuda_device_props,
    .now_ns = cuda_now_ns,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_native = cuda_stream_native,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_query = cuda_event_query,
    .event_wait_any = cuda_event_wait_any,
    .event_time_ns = cuda_event_time_ns,
    .memcpy_h2d = cuda_memcpy_h2d,
    .memcpy_d2h = cuda_memcpy_d2h,
    .copy_pieces = cuda_copy_pieces,
    .launch = cuda_launch,
    .mem_info = cuda_mem_info,
    .abort_kernels = cuda_abort_kernels,
    .abort_word_create = cuda_abort_word_create,
    .abort_word_destroy = cuda_abort_word_destroy,
    .host_device_ptr = cuda_host_device_ptr,
    .heartbeat = cuda_heartbeat,
    .link_rate = cuda_link_rate,
    .gpu_launcher = ferry__cuda_gpu_launcher,
    .gpu_clock_at = ferry__cuda_gpu_clock_at,
};
