/* The backend contract: one const ops table per backend (cuda, sim), reached only through the
 * ferry__be_* wrappers in backend.c, which return FERRY_ENOTSUP where an operation is NULL.
 * A backend knows nothing of pipelines; native errors are translated here, at the edge, into
 * FERRY_E* codes with the native name in the last-error text. */
#ifndef FERRY_BACKEND_H
#define FERRY_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#define FERRY_BACKEND_ABI 11

/* event_create flags. */
#define FERRY_BE_EVENT_TIMING 1u

/* Capability bits. */
#define FERRY_BE_CAP_VIRTUAL_CLOCK 0x1u /* time is modelled, not measured */
#define FERRY_BE_CAP_NATIVE_STREAM 0x2u /* launches receive a native stream handle */
#define FERRY_BE_CAP_HOST_COST     0x4u /* host call costs are charged to a virtual host clock */
/* A device of a runtime whose workers drive it (isolation=process: core/probe.c): its
 * properties only, no operation in this process */
#define FERRY_BE_CAP_SHADOW 0x8u

/* Opaque per-backend objects. Each backend defines these structs in its own folder. */
typedef struct ferry_be_device ferry_be_device_t;
typedef struct ferry_be_stream ferry_be_stream_t;
typedef struct ferry_be_event ferry_be_event_t;

/* What the backend needs to open a device. */
typedef struct ferry_be_open_params {
    const char *profile_path;       /* sim: device profile JSON; NULL: built-in search */
    const ferry_options_t *options; /* borrowed for the device's lifetime */
    uint64_t seed;                  /* sim: fault schedule and anything random */
} ferry_be_open_params_t;

/* One kernel launch. Copied by value by the backend at launch time. */
typedef struct ferry_be_launch {
    ferry_gpu_fn gpu; /* cuda: called with the native stream */
    ferry_cpu_fn cpu; /* sim: run as the kernel, at the kernel's modelled end */
    void *user;
    ferry_kernel_args_t args; /* device pointers */
    /* Timing hints for the simulator (cuda ignores them): the kernel runs @blocks blocks of
     * @block_ns each on the SM pool. When args.bytes > 0 the simulator raises block_ns so that
     * the kernel takes at least one pass over args.bytes at the device-to-device rate. */
    uint32_t blocks;
    uint64_t block_ns;
} ferry_be_launch_t;

/* What a built-in workload's GPU launcher reads from the stage's user pointer: a workload
 * (src/workloads/workloads.c) begins with this struct, so its user pointer points to one.
 * @kind is the index of the workload's name in ferry_workload_names() (copy 0, scale 1, fma 2),
 * @intensity the fma rounds (0 for the others), @factor the multiplier. */
typedef struct ferry_be_workload {
    int kind;
    unsigned intensity;
    float factor;
} ferry_be_workload_t;

/* A piece of a copy_pieces call: @bytes at @host (pinned) and at @off in the device buffer. */
typedef struct ferry_be_piece {
    void *host;
    size_t off, bytes;
} ferry_be_piece_t;

typedef struct ferry_backend_ops {
    const char *name; /* "cuda", "sim" */
    int abi;          /* FERRY_BACKEND_ABI */
    unsigned caps;    /* FERRY_BE_CAP_* */

    /* Number of devices without opening one; on failure a negative code and the reason in
     * @why (e.g. "cudaGetDeviceCount: cudaErrorInsufficientDriver (35)"). @profile_path is
     * the profile device_open will get (sim: it says how many devices it simulates; NULL:
     * built-in search; cuda ignores it). */
    int (*device_count)(const char *profile_path, int *count, char *why, size_t why_len);

    int (*device_open)(int index, const ferry_be_open_params_t *params, ferry_be_device_t **out);
    void (*device_close)(ferry_be_device_t *dev);
    int (*device_props)(ferry_be_device_t *dev, ferry_device_props_t *out);
    /* Device clock in ns: virtual on sim. */
    uint64_t (*now_ns)(ferry_be_device_t *dev);

    /* Pin / unpin host memory the caller allocated (cudaHostRegister). */
    int (*host_register)(ferry_be_device_t *dev, void *p, size_t bytes);
    int (*host_unregister)(ferry_be_device_t *dev, void *p);

    /* Device memory. */
    int (*mem_alloc)(ferry_be_device_t *dev, size_t bytes, void **out);
    void (*mem_free)(ferry_be_device_t *dev, void *p);

    /* Streams are non-blocking (never the legacy default stream). @priority is a CUDA
     * priority within the device's range (least .. greatest). */
    int (*stream_create)(ferry_be_device_t *dev, int priority, ferry_be_stream_t **out);
    void (*stream_destroy)(ferry_be_stream_t *s);
    /* The native handle (cudaStream_t) passed to stage launchers; NULL on sim. */
    void *(*stream_native)(ferry_be_stream_t *s);
    /* Block the host until all work on @s is done. */
    int (*stream_sync)(ferry_be_stream_t *s);

    /* Events. Only events created with FERRY_BE_EVENT_TIMING answer event_time_ns: on a GPU a
     * timed event costs its stream device time (a timestamp after the work drains; measured
     * on the H200, docs/cuda.md), so dependencies use untimed ones. */
    int (*event_create)(ferry_be_device_t *dev, unsigned flags, ferry_be_event_t **out);
    void (*event_destroy)(ferry_be_event_t *e);
    int (*event_record)(ferry_be_event_t *e, ferry_be_stream_t *s);
    int (*stream_wait_event)(ferry_be_stream_t *s, ferry_be_event_t *e);
    /* 0 when complete, FERRY_EAGAIN when not yet, or the error the work ran into. Costs no
     * virtual time on sim. */
    int (*event_query)(ferry_be_event_t *e);
    /* Block until one of @evs completes or @timeout_ns passes (virtual time on sim, where the
     * clock advances to the earliest completion). Returns 0 and the index in *which, or
     * FERRY_ETIMEDOUT, or an error. */
    int (*event_wait_any)(ferry_be_event_t *const *evs, size_t n, uint64_t timeout_ns,
                          size_t *which);
    /* Device-clock time at which a completed event was reached, in ns. */
    int (*event_time_ns)(ferry_be_event_t *e, uint64_t *out);

    /* Asynchronous copies. Pinned host memory (registered) is asynchronous; pageable memory
     * is slower and the call returns only when the copy is done (as cudaMemcpyAsync does). */
    int (*memcpy_h2d)(ferry_be_stream_t *s, void *dst_dev, const void *src_host, size_t bytes);
    int (*memcpy_d2h)(ferry_be_stream_t *s, void *dst_host, const void *src_dev, size_t bytes);

    /* @s and @l are not NULL: ferry__be_launch checks them. */
    int (*launch)(ferry_be_stream_t *s, const ferry_be_launch_t *l);

    /* Device memory free and in all, as the device reports it (cudaMemGetInfo: other
     * processes' use included). */
    int (*mem_info)(ferry_be_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes);

    /* The abort word @word (ferry_kernel_args_t.abort_word, a device address) was raised to
     * @upto: kernels launched with that word and a seq <= @upto that poll it stop. cuda: a
     * word from abort_word_create is written with a copy on the backend's own stream; any
     * other word is mapped host memory the caller stored into, and kernels read it there. The
     * simulator models the polling here. Returns how many kernels stopped when the backend
     * knows (sim), else 0, or an error. */
    int (*abort_kernels)(ferry_be_device_t *dev, const volatile uint64_t *word, uint64_t upto);
    /* Optional: an abort word that kernels read at device-memory cost (8 zeroed bytes in
     * device memory: cuda), raised only through abort_kernels; released by
     * abort_word_destroy. NULL: the caller keeps its word in mapped host memory, where each
     * read by a kernel crosses the link (FACTS.md: reads from many blocks queue). */
    int (*abort_word_create)(ferry_be_device_t *dev, volatile uint64_t **out);
    void (*abort_word_destroy)(ferry_be_device_t *dev, volatile uint64_t *word);

    /* The device address of registered host memory @host (cudaHostGetDevicePointer): where a
     * kernel reads and writes it over the link. The simulator returns @host. */
    int (*host_device_ptr)(ferry_be_device_t *dev, void *host, void **out);

    /* Queue the heartbeat on @s: a one-thread kernel that stores @value into the 8-byte word
     * at device address @word (mapped host memory, see host_device_ptr). It runs only when
     * the device schedules new work, so a counter that stops moving says the device does not
     * (a kernel holding every SM, a hung or lost GPU). */
    int (*heartbeat)(ferry_be_stream_t *s, volatile uint64_t *word, uint64_t value);

    /* All traffic on the device's link in direction @dir (0 host to device, 1 device to
     * host), whoever moved it, in bytes per second averaged over a window that ends when the
     * call returns; its length in *@window_ns. cuda: NVML's PCIe throughput counter, a 20 ms
     * sample the call blocks for (keep it off the hot threads); sim: the model's copies and an
     * injected `share` fault over the last FERRY_LINK_WINDOW_NS of virtual time, at once.
     * FERRY_ENOTSUP when the backend cannot count (no NVML, or NVML without the counter). */
    int (*link_rate)(ferry_be_device_t *dev, int dir, double *bytes_per_s, uint64_t *window_ns);

    /* Optional (ABI 7): the backend's own GPU launcher called @name, or NULL when it has none:
     * "copy", "scale" and "fma" (the built-in workloads; the stage's user pointer points to a
     * ferry_be_workload_t) and "spin" (one block held for *(unsigned long long *)user ns, the
     * kernels of the connections measurement). NULL on the simulator, which runs a stage's CPU
     * function as the kernel. */
    ferry_gpu_fn (*gpu_launcher)(const char *name);

    /* Optional (ABI 8): in *@out, a time the device clock that kernels read (%globaltimer, ns)
     * had not passed yet at host time @host_ns (now_ns's clock): a lower bound, which kernels
     * may compare with their own reading of it (ferry_kernel_args_t.abort_after).
     * FERRY_ENOTSUP while the backend cannot map the two clocks. Called at each launch: it
     * blocks only on the first call, for one stamp of the clock (tens of microseconds). NULL
     * on the simulator, whose kernels are CPU functions. */
    int (*gpu_clock_at)(ferry_be_device_t *dev, uint64_t host_ns, uint64_t *out);

    /* Optional (ABI 9): what the backend knows of the device's host, written over @out, which
     * the caller has filled with this machine's CPU count and zeros (ferry_device_host).
     * sim: its profile's host_memory and storage sections. NULL on cuda. */
    void (*host_props)(ferry_be_device_t *dev, ferry_host_props_t *out);

    /* Optional (ABI 10): @n pieces between pinned host memory and the device buffer @dev in
     * one call on @s (cuda: cudaMemcpyBatchAsync): @to_dev, piece i from its host address to
     * dev + off; else from dev + off to its host address. The call is in stream order as a
     * whole; its pieces may move in any order among themselves (none may overlap). ABI 11:
     * pieces of @kernel_max bytes or fewer move by a copy kernel that reads (or writes) the
     * host memory over the link instead of by the copy engines (0: none; the device's
     * piece_kernel_max, ferry_device_props_t, says where that pays; a backend without such a
     * kernel moves them as the others). */
    int (*copy_pieces)(ferry_be_stream_t *s, bool to_dev, void *dev, const ferry_be_piece_t *pieces,
                       size_t n, size_t kernel_max);
} ferry_backend_ops_t;

/* For a backend's event_wait_any: checks @evs (@n of them, none NULL, all of one device, as
 * @dev_of tells) and @which, naming backend @be in the error. Returns 0 or FERRY_EINVAL. */
int ferry__be_wait_any_check(const char *be, ferry_be_event_t *const *evs, size_t n,
                             const size_t *which,
                             ferry_be_device_t *(*dev_of)(const ferry_be_event_t *e));

/* The window the simulator's link_rate averages over, as NVML's counter does (20 ms). */
#define FERRY_LINK_WINDOW_NS 20000000ull

/* The registered backends, in `auto` priority order, NULL-terminated. */
extern const ferry_backend_ops_t *const ferry__backends[];
/* The backend called @name, or NULL. */
const ferry_backend_ops_t *ferry__backend_find(const char *name);

/* Built-in backends (the cuda one exists only when built with FERRY_WITH_CUDA). */
extern const ferry_backend_ops_t ferry__sim_backend;
extern const ferry_backend_ops_t ferry__cuda_backend;
/* The CPU device's table (backend/cpu/cpu_backend.c): no operations. */
extern const ferry_backend_ops_t ferry__cpu_device_ops;

/* A device (ferry_device_t): a backend's device handle and what the runtime knows of it.
 * Defined here, below the runtime, so that the wrappers in backend.c reach a device's backend
 * without including core; the runtime (core/runtime.c) opens, fills and closes it. */
struct ferry_device {
    ferry_runtime_t *rt;
    const ferry_backend_ops_t *ops;
    ferry_be_device_t *be;
    int index;
    ferry_device_props_t props;
    /* CUDA_DEVICE_MAX_CONNECTIONS as CUDA read it when this process started CUDA (or as the
     * simulator read it at open), and the streams that live pipelines keep on the device:
     * the stream plan counts them against the queues. */
    unsigned connections;
    atomic_uint active_streams;
};

/* The start of a backend's device_props: @out zeroed but for its size (at least
 * sizeof(ferry_device_props_t), checked by the caller), and the fields every backend fills
 * alike. */
void ferry__be_props_begin(ferry_device_props_t *out, const char *name, const char *backend,
                           int index, bool simulated);
/* The device's make-up, which every backend reports from its own source (cudaDeviceProp, the
 * simulator's profile): compute capability, SMs, copy engines, resident grids, the stream
 * priority range (least: numerically largest) and the memory and L2 sizes. */
void ferry__be_props_gpu(ferry_device_props_t *out, int cc_major, int cc_minor, int sms,
                         int copy_engines, int max_resident_grids, int priority_least,
                         int priority_greatest, uint64_t memory_bytes, uint64_t l2_bytes);

/* Backend wrappers: FERRY_ENOTSUP in one place when an operation is NULL. */
int ferry__be_host_register(ferry_device_t *d, void *p, size_t n);
int ferry__be_host_unregister(ferry_device_t *d, void *p);
int ferry__be_mem_alloc(ferry_device_t *d, size_t n, void **out);
void ferry__be_mem_free(ferry_device_t *d, void *p);
int ferry__be_stream_create(ferry_device_t *d, int priority, ferry_be_stream_t **out);
void ferry__be_stream_destroy(ferry_device_t *d, ferry_be_stream_t *s);
void *ferry__be_stream_native(ferry_device_t *d, ferry_be_stream_t *s);
int ferry__be_stream_sync(ferry_device_t *d, ferry_be_stream_t *s);
int ferry__be_event_create(ferry_device_t *d, unsigned flags, ferry_be_event_t **out);
int ferry__be_mem_info(ferry_device_t *d, uint64_t *free_bytes, uint64_t *total_bytes);
int ferry__be_abort_kernels(ferry_device_t *d, const volatile uint64_t *word, uint64_t upto);
int ferry__be_abort_word_create(ferry_device_t *d, volatile uint64_t **out);
void ferry__be_abort_word_destroy(ferry_device_t *d, volatile uint64_t *word); /* NULL: no-op */
int ferry__be_host_device_ptr(ferry_device_t *d, void *host, void **out);
int ferry__be_heartbeat(ferry_device_t *d, ferry_be_stream_t *s, volatile uint64_t *word,
                        uint64_t value);
int ferry__be_link_rate(ferry_device_t *d, int dir, double *bytes_per_s, uint64_t *window_ns);
int ferry__be_gpu_clock_at(ferry_device_t *d, uint64_t host_ns, uint64_t *out);
void ferry__be_event_destroy(ferry_device_t *d, ferry_be_event_t *e);
int ferry__be_event_record(ferry_device_t *d, ferry_be_event_t *e, ferry_be_stream_t *s);
int ferry__be_stream_wait_event(ferry_device_t *d, ferry_be_stream_t *s, ferry_be_event_t *e);
int ferry__be_event_query(ferry_device_t *d, ferry_be_event_t *e);
int ferry__be_event_wait_any(ferry_device_t *d, ferry_be_event_t *const *evs, size_t n,
                             uint64_t timeout_ns, size_t *which);
int ferry__be_event_time_ns(ferry_device_t *d, ferry_be_event_t *e, uint64_t *out);
int ferry__be_memcpy_h2d(ferry_device_t *d, ferry_be_stream_t *s, void *dst, const void *src,
                         size_t n);
int ferry__be_memcpy_d2h(ferry_device_t *d, ferry_be_stream_t *s, void *dst, const void *src,
                         size_t n);
int ferry__be_launch(ferry_device_t *d, ferry_be_stream_t *s, const ferry_be_launch_t *l);
/* copy_pieces above; FERRY_ENOTSUP when the backend has none (ferry__be_has_copy_pieces). */
int ferry__be_copy_pieces(ferry_device_t *d, ferry_be_stream_t *s, bool to_dev, void *dev,
                          const ferry_be_piece_t *pieces, size_t n, size_t kernel_max);
bool ferry__be_has_copy_pieces(const ferry_device_t *d);
/* @ops's GPU launcher called @name (gpu_launcher above); NULL when @ops has none (a NULL
 * operation, as on the simulator), which is no error: the stage keeps its CPU function. */
ferry_gpu_fn ferry__be_gpu_launcher(const ferry_backend_ops_t *ops, const char *name);
/* The first registered backend's GPU launcher called @name (NULL when none has one): for
 * stages made before a device is chosen, as ferry_workload_create's are. */
ferry_gpu_fn ferry__backend_gpu_launcher(const char *name);

#endif
