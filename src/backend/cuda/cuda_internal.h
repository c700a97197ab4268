/* The CUDA backend's private objects (device, stream, event), the one CUDA-error translation
 * (cuda_error.c), the per-thread current-device cache, the device clock behind event times
 * (cuda_clock.c) and NVML loaded at run time (cuda_nvml.c). Only files in src/backend/cuda/
 * include this header: it pulls in the CUDA runtime API. */
#ifndef FERRY_BACKEND_CUDA_INTERNAL_H
#define FERRY_BACKEND_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda.h"
#include "base/base.h"

/* FACTS.md: 4-16 MiB chunks reach 97-100% of the round-trip ceiling on PCIe Gen5. */
#define FERRY_CUDA_DEFAULT_CHUNK (8u << 20)
/* Pieces this size or smaller move by the copy kernel (ferry_k_pieces.cu) in a pipeline. On an
 * H100 (2026-12-07, bench/results/2026-12-07-copy-kernel) `ferry probe --calibrate` measured
 * the kernel against one cudaMemcpyBatchAsync at 4, 16 and 64 KiB pieces: 43.4 / 47.6 / 49.2
 * against 3.3 / 14.8 / 34.1 GB/s; `ferry bench items`, 8 threads, 8 MiB slabs, with it up to
 * 16 KiB: items apart (a piece each) at 41.8% of the ceiling at 4 KiB and 52.3% at 16 KiB,
 * side by side (merged, by the engines) 77.4% and 90.2%, against 25.2% and 34.7% copied into
 * the slab before; 0.82-0.97 us of ferry's CPU an item (3.6-10.4). 16 KiB ran in a pipeline;
 * larger pieces keep the engines, which leave the SMs to the stage. A build may set it
 * (-DFERRY_CUDA_PIECE_KERNEL_MAX=0u: off). */
#ifndef FERRY_CUDA_PIECE_KERNEL_MAX
#define FERRY_CUDA_PIECE_KERNEL_MAX (16u << 10)
#endif

/* NVML, loaded with dlopen (there is no nvml.h on the build machine; these are the few
 * declarations ferry uses, with NVML's own names and signatures). */
typedef int nvml_return_t;                 /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device *nvml_device_t; /* nvmlDevice_t, opaque */
#define FERRY_NVML_PCIE_TX_BYTES 0         /* NVML_PCIE_UTIL_TX_BYTES */
#define FERRY_NVML_PCIE_RX_BYTES 1         /* NVML_PCIE_UTIL_RX_BYTES */

struct ferry_cuda_nvml {
    void *lib;         /* dlopen handle; NULL when NVML is not in use */
    nvml_device_t dev; /* this GPU in NVML's numbering; NULL when not found */
    char driver_version[80];
    nvml_return_t (*shutdown)(void);
    const char *(*error_string)(nvml_return_t);
    nvml_return_t (*curr_gen)(nvml_device_t, unsigned *);
    nvml_return_t (*max_gen)(nvml_device_t, unsigned *);
    nvml_return_t (*curr_width)(nvml_device_t, unsigned *);
    nvml_return_t (*max_width)(nvml_device_t, unsigned *);
    nvml_return_t (*throughput)(nvml_device_t, int counter, unsigned *);
    nvml_return_t (*replays)(nvml_device_t, unsigned *);
};

/* The device clock: event times are ref_ns + cudaEventElapsedTime(ref, e). See cuda_clock.c. */
struct ferry_cuda_clock {
    pthread_mutex_t mu;
    cudaStream_t stream;    /* private, idle: only reference events are recorded on it */
    cudaEvent_t ref, spare; /* the reference and the next candidate */
    uint64_t ref_ns;        /* absolute time of ref, CLOCK_MONOTONIC ns */
    uint64_t ref_host_ns;   /* host time when ref was taken (for its age) */
    uint64_t next_try_ns;   /* no re-base attempt before this host time */
    uint64_t rebases, rebase_misses;
};

/* Abort words in device memory (cuda_abort.c): a slab of FERRY_CUDA_ABORT_WORDS words (each
 * FERRY_ABORT_REPLICAS copies, ferry.h), handed out to pipelines; a pinned mirror holds the values
 * their raises copy from, on a stream of greatest priority kept for them. Built on the first word
 * asked for. */
#define FERRY_CUDA_ABORT_WORDS 32
struct ferry_cuda_abort {
    pthread_mutex_t mu;
    bool ready;
    unsigned char *slab;   /* device memory */
    unsigned char *mirror; /* pinned host memory, the same layout */
    cudaStream_t stream;
    /* cuStreamWriteValue64 from the driver (cudaGetDriverEntryPointByVersion): a raise is a
     * stream memory operation, no copy engine and no source buffer; NULL: an 8-byte copy
     * from the mirror. */
    int (*write_value)(cudaStream_t s, uint64_t addr, uint64_t value, unsigned flags);
    uint64_t used;   /* bitmap: words handed out */
    uint64_t raised; /* bitmap: words raised since they were last zeroed */
    bool ever_raised;
};

/* The GPU's clock against the host's (cuda_gtimer.c), under mu. */
struct ferry_cuda_gtimer {
    pthread_mutex_t mu;
    bool built, off;          /* off: could not be built, or a stamp failed */
    cudaStream_t stream;      /* greatest priority */
    volatile uint64_t *stamp; /* mapped host memory the stamp kernel writes the clock into */
    volatile uint64_t *stamp_dev;
    bool have;      /* a bound exists: */
    int64_t offset; /* (GPU clock - host clock) is at least this at host time at_ns */
    uint64_t at_ns;
    bool pending; /* a stamp queued, not seen yet */
    uint64_t sent_ns;
};

/* What the device's event waits did (cuda_wait.c), for the debug log at close. */
struct ferry_cuda_waits {
    _Atomic uint64_t calls, ended, timeouts, queries, yields, naps, nap_ns;
};

struct ferry_be_device {
    int index;
    struct cudaDeviceProp prop;
    int prio_least, prio_greatest;
    int driver_version, runtime_version; /* cudaDriverGetVersion, cudaRuntimeGetVersion */
    char pci_bus_id[32];                 /* "0000:17:00.0" */
    int numa_node;
    struct ferry_cuda_clock clock;
    struct ferry_cuda_nvml nvml;
    struct ferry_cuda_abort abort;
    struct ferry_cuda_gtimer gtimer;
    struct ferry_cuda_waits waits;
};

struct ferry_be_stream {
    struct ferry_be_device *dev;
    cudaStream_t st;
    int priority;
};

struct ferry_be_event {
    struct ferry_be_device *dev;
    cudaEvent_t ev;
    atomic_bool recorded; /* set by the first record: never-recorded events are complete */
    _Atomic uint32_t gen; /* records so far (a wait tells one recording from the next) */
    bool timing;          /* created with FERRY_BE_EVENT_TIMING */
};

static inline bool ferry__cuda_recorded(const struct ferry_be_event *e)
{
    return atomic_load_explicit(&e->recorded, memory_order_acquire);
}

/* Waiting (cuda_wait.c). ferry__cuda_query: 0 done, FERRY_EAGAIN not yet (no error text: it is
 * not a failure), or the translated error the work before event @index of @n ran into.
 * ferry__cuda_wait_any: event_wait_any's poll, the arguments checked by the caller.
 * ferry__cuda_waits_log: the device's counts, at debug level. */
int ferry__cuda_query(struct ferry_be_event *e, size_t index, size_t n);
int ferry__cuda_wait_any(ferry_be_event_t *const *evs, size_t n, uint64_t timeout_ns,
                         size_t *which);
void ferry__cuda_waits_log(const ferry_be_device_t *dev);

/* The one translation of a CUDA runtime error: sets the calling thread's last-error text to
 * "<what>: <cudaGetErrorName> (<num>): <cudaGetErrorString>" (@fmt describes the call, e.g.
 * "cudaMalloc(%zu bytes)") and returns the FERRY_* code (ferry__cuda_error_code). A
 * non-sticky error is also cleared from the runtime's per-thread last error, so that a later
 * cudaGetLastError after a launch does not report it again. */
int ferry__cuda_fail(cudaError_t err, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Make device @index current on the calling thread (cudaSetDevice only when this thread's
 * cached current device differs). Returns 0 or a translated error. */
int ferry__cuda_use_device(int index);
/* Forget the calling thread's cached current device: code outside ferry (a stage launcher)
 * may have called cudaSetDevice. */
void ferry__cuda_forget_device(void);

/* Clock (cuda_clock.c): open takes the first reference, synchronised against CLOCK_MONOTONIC;
 * close releases it. The device must be current. */
int ferry__cuda_clock_open(struct ferry_be_device *dev);
void ferry__cuda_clock_close(struct ferry_be_device *dev);
/* Absolute time of completed event @ev in ns. FERRY_EAGAIN when it has not completed. */
int ferry__cuda_clock_event_ns(struct ferry_be_device *dev, cudaEvent_t ev, uint64_t *out);

/* NVML (cuda_nvml.c): open never fails (NVML is optional); close releases it. */
void ferry__cuda_nvml_open(struct ferry_be_device *dev);
void ferry__cuda_nvml_close(struct ferry_be_device *dev);
/* The PCIe link now and at most (the fast part of ferry__cuda_pcie_counters: no 20 ms sample;
 * the counters read -1). */
void ferry__cuda_nvml_link(struct ferry_be_device *dev, struct ferry_cuda_pcie *out);
/* All PCIe traffic in direction @dir (0 host to device: NVML's RX; 1 device to host: TX) over
 * NVML's 20 ms sample, which the call blocks for. FERRY_ENOTSUP without NVML or its counter. */
int ferry__cuda_nvml_rate(struct ferry_be_device *dev, int dir, double *bytes_per_s);

/* Abort words (cuda_abort.c): open prepares the lock (nothing is allocated before the first
 * word); close frees what the first word built, unless a word was ever raised: a kernel that
 * ignored it may still run, and freeing would wait for it. The ops are backend.h's. */
void ferry__cuda_abort_open(struct ferry_be_device *dev);
void ferry__cuda_abort_close(struct ferry_be_device *dev);
int ferry__cuda_abort_word_create(struct ferry_be_device *dev, volatile uint64_t **out);
void ferry__cuda_abort_word_destroy(struct ferry_be_device *dev, volatile uint64_t *word);
int ferry__cuda_abort_raise(struct ferry_be_device *dev, const volatile uint64_t *word,
                            uint64_t upto);

/* The GPU's clock (cuda_gtimer.c): open prepares the lock (the stream and the stamp's page
 * come with the first question); close frees them unless a stamp is still queued. The op is
 * backend.h's gpu_clock_at. */
void ferry__cuda_gtimer_open(struct ferry_be_device *dev);
void ferry__cuda_gtimer_close(struct ferry_be_device *dev);
int ferry__cuda_gpu_clock_at(struct ferry_be_device *dev, uint64_t host_ns, uint64_t *out);

/* The gpu_launcher op (cuda_workloads.c): the built-in workloads' launchers and the spin
 * kernel's, by name; NULL for any other name. */
ferry_gpu_fn ferry__cuda_gpu_launcher(const char *name);

/* Properties (cuda_props.c). */
int ferry__cuda_props(struct ferry_be_device *dev, ferry_device_props_t *out);
/* NUMA node of PCI device @bus_id from sysfs, -1 when unknown. */
int ferry__cuda_numa_node(const char *bus_id);

#endif
