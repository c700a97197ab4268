/* ferry: stream data through NVIDIA GPUs (or the simulated H200) with host-to-device copies,
 * kernels and device-to-host copies overlapped on streams. This header is the specification of
 * the public API; no CUDA type appears in it. Link with ferry::ferry (CMake) or `pkg-config
 * ferry`. */
#ifndef FERRY_H
#define FERRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/options.h"
#include "ferry/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Config structs. Every struct a call reads (ferry_runtime_config_t, ferry_pool_config_t,
 * ferry_stage_t, ferry_pipeline_config_t, ferry_batch_t, ferry_copy_bench_config_t,
 * ferry_workload_params_t) starts with its size, set by its FERRY_*_INIT macro, and only grows
 * at its end. A call refuses (FERRY_EINVAL, the struct named in the last-error text) a size of
 * 0, one below the struct's first version, or one above 64 KiB; it reads the fields a smaller,
 * older struct has and takes the fields it lacks as unset; it ignores what a larger, newer
 * struct holds past the fields it knows.
 *
 * Unset: a field left as the INIT macro sets it is unset, and takes the option of the same
 * name (ferry/options.h: the FERRY_<NAME> environment, ferry_options_set) where there is one,
 * else the default its comment gives. Unsigned, size, double and pointer fields are unset at 0
 * (so a zeroed struct is all unset); signed fields, where 0 is a value, at FERRY_UNSET. A set
 * value out of its range is refused with the field, the value and the range in the last-error
 * text.
 * ------------------------------------------------------------------------------------------- */

/* The unset value of a signed config field (priorities, nonblocking). */
#define FERRY_UNSET (-1000)

/* ---------------------------------------------------------------------------------------------
 * Errors and logging
 * ------------------------------------------------------------------------------------------- */

/** Detail of the last error reported by a ferry call in the calling thread (what was wrong,
 *  the native error name, the accepted range). Empty string when none. Thread-local storage,
 *  valid until the thread's next failing ferry call. */
FERRY_EXTERN const char *ferry_last_error(void);

typedef enum ferry_log_level {
    FERRY_LOG_ERROR = 0,
    FERRY_LOG_WARN = 1,
    FERRY_LOG_INFO = 2,
    FERRY_LOG_DEBUG = 3
} ferry_log_level_t;

/** Log sink: @p line is one complete message without a newline, "ferry <level> <subsystem>:
 *  <text>". Called from any ferry thread; must be thread-safe. */
typedef void (*ferry_log_fn)(ferry_log_level_t level, const char *subsystem, const char *line,
                             void *arg);

/** Replace the process-wide log sink (NULL restores the default, stderr). Thread-safe. */
FERRY_EXTERN void ferry_set_log_handler(ferry_log_fn fn, void *arg);
/** Messages above @p level are dropped before their arguments are formatted. Thread-safe (any
 *  thread may log meanwhile). The initial level is FERRY_LOG_WARN, or FERRY_LOG_LEVEL
 *  (error|warn|info|debug) when valid; each ferry_runtime_create sets it from its log_level
 *  option until the application calls this function, whose choice no runtime overrides. */
FERRY_EXTERN void ferry_set_log_level(ferry_log_level_t level);
FERRY_EXTERN ferry_log_level_t ferry_get_log_level(void);

/* ---------------------------------------------------------------------------------------------
 * Runtime and devices
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_runtime ferry_runtime_t;
typedef struct ferry_device ferry_device_t;

typedef struct ferry_runtime_config {
    size_t size;         /* sizeof(ferry_runtime_config_t), set by the INIT macro */
    const char *backend; /* "auto", "sim" or "cuda"; NULL: the `backend` option */
    const char *profile; /* simulator device profile (JSON path); NULL: the `profile` option */
    const ferry_options_t *options; /* NULL: defaults plus FERRY_* environment; copied */
} ferry_runtime_config_t;
#define FERRY_RUNTIME_CONFIG_INIT FERRY_SIZED_INIT(ferry_runtime_config_t)

/** Create a runtime on one backend. "auto" picks cuda when a GPU answers, else sim (the reason
 *  cuda was not taken is logged at info level and kept in ferry_runtime_fallback_reason()).
 *  @p cfg is read during the call only; NULL means defaults. On error *out is untouched.
 *  Returns 0, FERRY_EINVAL, FERRY_ENOMEM, FERRY_ENODEV (backend unknown or unavailable),
 *  FERRY_EPARSE (profile or environment), FERRY_EBACKEND. Thread-safe. */
FERRY_EXTERN int ferry_runtime_create(const ferry_runtime_config_t *cfg, ferry_runtime_t **out);
/** Destroy @p rt and free what it owns: its devices, and the pipelines made on it that were
 *  closed (ferry_pipeline_close returned 0) but not destroyed, whose handles become invalid.
 *  While a pipeline made on it is still open (never closed, or its close returned FERRY_EBUSY)
 *  it does nothing and returns FERRY_EBUSY, the pipelines named in the last-error text (stage
 *  and number): their threads would outlive the runtime. Pools made on its devices must be
 *  destroyed first. NULL: no-op returning 0. Returns 0 or FERRY_EBUSY. Must not race another
 *  call on @p rt or its objects; @p rt is invalid once this returns 0. */
FERRY_EXTERN int ferry_runtime_destroy(ferry_runtime_t *rt);
/** Names of the backends built into this library, in "auto" order ("cuda" first when built
 *  with CUDA, then "sim"), NULL-terminated. Static storage. */
FERRY_EXTERN const char *const *ferry_backend_names(void);
/** Whether backend @p name has a device here, without creating a runtime. Returns the device
 *  count (>= 1), or a negative code with the reason (the CUDA error, for instance) written to
 *  @p why (may be NULL). */
FERRY_EXTERN int ferry_backend_probe(const char *name, char *why, size_t why_len);
/** Name of the backend in use ("sim" or "cuda"). Static storage. */
FERRY_EXTERN const char *ferry_runtime_backend(const ferry_runtime_t *rt);
/** Why "auto" did not pick cuda (empty when it did or was not asked). Owned by @p rt. */
FERRY_EXTERN const char *ferry_runtime_fallback_reason(const ferry_runtime_t *rt);
/** The last error reported by any call on @p rt or its objects. Owned by @p rt; copy it. */
FERRY_EXTERN const char *ferry_runtime_last_error(const ferry_runtime_t *rt);
/** The options in force for @p rt (borrowed, read-only, valid for the runtime's lifetime). */
FERRY_EXTERN const ferry_options_t *ferry_runtime_options(const ferry_runtime_t *rt);

/** Number of devices the backend offers (>= 1 on a created runtime), or a negative code. */
FERRY_EXTERN int ferry_device_count(ferry_runtime_t *rt);
/** Borrow device @p index of @p rt (owned by the runtime). Returns 0, FERRY_EINVAL or
 *  FERRY_ENODEV; the first call for an index opens the device. Thread-safe.
 *  @p index FERRY_DEVICE_CPU is the host's CPU as a device: a device of pipeline sets
 *  (ferry_pipeline_config_t.devices, or .device alone), where it runs the stage's CPU function
 *  on whole chunks on threads of its own (option cpu_threads; docs/devices.md). It has no
 *  memory, streams or copies: ferry_pool_create, ferry_host_register, ferry_host_alloc,
 *  ferry_bench_copy, ferry_calibrate and ferry_connections_measure on it return
 *  FERRY_ENOTSUP. Its props: backend "cpu", index FERRY_DEVICE_CPU, simulated false; its clock
 *  CLOCK_MONOTONIC (a set on simulated GPUs keeps a virtual clock for it of its own). */
FERRY_EXTERN int ferry_device_get(ferry_runtime_t *rt, int index, ferry_device_t **out);
#define FERRY_DEVICE_CPU (-1)

typedef struct ferry_device_props {
    size_t size;              /* sizeof(ferry_device_props_t), set by the caller (INIT macro) */
    char name[128];           /* "NVIDIA H200" */
    char backend[16];         /* "sim" or "cuda" */
    int index;                /* device index within the backend */
    bool simulated;           /* true on the sim backend: times are virtual */
    int cc_major, cc_minor;   /* compute capability */
    int sms;                  /* multiprocessors */
    int copy_engines;         /* asyncEngineCount */
    bool concurrent_kernels;  /* a yes/no flag, not a count */
    int max_resident_grids;   /* 128 on Hopper */
    int priority_least;       /* numerically largest priority value (0 on the H200) */
    int priority_greatest;    /* numerically smallest, the highest priority (-5 on the H200) */
    uint64_t memory_bytes;    /* device memory */
    uint64_t l2_bytes;        /* L2 cache */
    int pcie_gen, pcie_width; /* current link; 0 when unknown */
    int pcie_gen_max, pcie_width_max; /* what the link can do; 0 when unknown */
    double link_gbps;             /* theoretical GB/s per direction of the link; 0 when unknown */
    int numa_node;                /* -1 when unknown */
    char driver_version[32];      /* "580.159.04", or "simulated" */
    char runtime_version[32];     /* "13.0" */
    char profile[256];            /* sim: profile file in use; cuda: empty */
    char pci_bus_id[32];          /* "0000:17:00.0", empty when unknown */
    uint64_t default_chunk_bytes; /* chunk size the pipeline uses when none is set */
    /* Pieces of a gathered slab's copies this size or smaller move by a copy kernel over the
     * pinned host memory rather than by the copy engines (0: never). cuda: 16 KiB, 0 where the
     * device cannot use registered memory at its host address (docs/architecture.md); sim: the
     * profile's copy.piece_kernel_max (`ferry probe --calibrate` measures it on a device). */
    uint64_t piece_kernel_max;
} ferry_device_props_t;
#define FERRY_DEVICE_PROPS_INIT FERRY_SIZED_INIT(ferry_device_props_t)

/** Fill @p out (whose size field the caller sets). Returns 0 or FERRY_EINVAL. Thread-safe. */
FERRY_EXTERN int ferry_device_props(ferry_device_t *dev, ferry_device_props_t *out);
/** True when @p dev's clock is virtual (the simulator). */
FERRY_EXTERN bool ferry_device_is_simulated(const ferry_device_t *dev);
/** The device's clock in nanoseconds: virtual on sim, CLOCK_MONOTONIC on cuda. */
FERRY_EXTERN uint64_t ferry_device_now_ns(ferry_device_t *dev);

/** The devices named by @p spec: "all" (every device of the backend), indices, and "cpu" (the
 *  CPU as a device, FERRY_DEVICE_CPU), separated by commas ("0,2", "all,cpu"); NULL reads the
 * runtime's option `devices`, and when that is empty the one device of option `device`. Opens them
 * and writes up to @p max to @p out, their count to
 *  @p n. Returns 0, FERRY_EINVAL (a bad spec, named with what is accepted; an index twice;
 *  more than @p max), FERRY_ENODEV (an index the backend does not have). Thread-safe. */
FERRY_EXTERN int ferry_devices_select(ferry_runtime_t *rt, const char *spec, ferry_device_t **out,
                                      unsigned max, unsigned *n);

/** The host a device sits in, as far as ferry knows it. On the simulator: the machine its
 *  profile describes (sections host_memory and storage, docs/simulator.md), not the machine
 *  the simulator runs on. On a GPU: this process's CPU count; the rates are not measured by
 *  ferry at run time and read 0. Every figure is 0 when unknown. */
typedef struct ferry_host_props {
    size_t size;        /* sizeof(ferry_host_props_t), set by the caller (INIT macro) */
    bool modelled;      /* true: the figures are a profile's, for a simulated device */
    int threads;        /* CPU threads */
    double memory_gbps; /* memory traffic (bytes read + written) served to DMA and CPU together */
    double thread_read_gbps;                      /* one thread reading memory */
    double read_gbps, write_gbps, copy_gbps;      /* all threads; copy counts the bytes copied */
    char storage_kind[32];                        /* the file system the storage rates are of */
    double storage_read_gbps, storage_write_gbps; /* parallel sequential read and write */
    /* The fraction of the DMA's rate lost per GB/s of CPU memory traffic beside it (0: not
     * modelled): bench/host/host_dma_contend's fit, "dma_cpu_loss" */
    double dma_cpu_loss;
} ferry_host_props_t;
#define FERRY_HOST_PROPS_INIT FERRY_SIZED_INIT(ferry_host_props_t)

/** Fill @p out (whose size field the caller sets) with @p dev's host. Returns 0 or
 *  FERRY_EINVAL (NULL, or size not set). Thread-safe. */
FERRY_EXTERN int ferry_device_host(ferry_device_t *dev, ferry_host_props_t *out);

/* ---------------------------------------------------------------------------------------------
 * Pinned host memory pool: pinned once at creation, sub-allocated in fixed slots, O(1).
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_pool ferry_pool_t;

typedef struct ferry_pool_config {
    size_t size;       /* sizeof(ferry_pool_config_t), set by the INIT macro */
    size_t bytes;      /* total pinned bytes; 0: slots x slot_bytes */
    size_t slot_bytes; /* bytes per slot (rounded up to align); 0: the chunk_bytes option,
                        * then the device profile's default chunk, then 8M */
    size_t slots;      /* used when bytes is 0; 0: 2 x the depth option */
    size_t align;      /* slot alignment, a power of two; 0: 4096 */
    /* When pinning is refused (a locked-memory limit, FERRY_EBACKEND), keep the memory
     * pageable, warn, and report pinned = false in the stats instead of failing: copies
     * still work, at pageable rates (FACTS.md: 6-13 GB/s). Pipelines set it. */
    bool pageable_fallback;
} ferry_pool_config_t;
#define FERRY_POOL_CONFIG_INIT FERRY_SIZED_INIT(ferry_pool_config_t)

typedef struct ferry_pool_stats {
    size_t size;        /* sizeof(ferry_pool_stats_t), set by the caller */
    size_t bytes;       /* pinned bytes held */
    size_t slot_bytes;  /* bytes per slot */
    size_t slots;       /* slots in all */
    size_t in_use;      /* slots handed out now */
    size_t peak_in_use; /* most slots ever handed out at once */
    uint64_t allocs;    /* successful allocations */
    uint64_t waits;     /* allocations that had to wait for a free slot */
    uint64_t eagain;    /* non-blocking allocations refused because the pool was empty */
    bool pinned;        /* false: pinning was refused and the pool fell back to pageable */
} ferry_pool_stats_t;
#define FERRY_POOL_STATS_INIT FERRY_SIZED_INIT(ferry_pool_stats_t)

/** Pool bytes for the sizing rule: stages x largest chunk x 2 (double buffering). Returns 0,
 *  FERRY_EINVAL (zero argument, NULL) or FERRY_ERANGE (overflow). */
FERRY_EXTERN int ferry_pool_bytes_for(size_t stages, size_t largest_chunk, size_t *out);

/** Create a pinned host pool for @p dev: host memory allocated and registered (pinned) once,
 *  here, and never again. Its slots count as registered memory: a pipeline on any device of
 *  @p dev's runtime copies batches in them directly, without staging (ferry_host_unregister refuses
 * them). @p cfg is read during the call only; NULL means defaults. On error *out is untouched.
 * Returns 0, FERRY_EINVAL, FERRY_ERANGE, FERRY_ENOMEM or FERRY_EBACKEND (pinning refused, unless
 * cfg->pageable_fallback). Thread-safe. */
FERRY_EXTERN int ferry_pool_create(ferry_device_t *dev, const ferry_pool_config_t *cfg,
                                   ferry_pool_t **out);
/** Destroy @p pool. Slots still handed out become invalid. NULL is a no-op. */
FERRY_EXTERN void ferry_pool_destroy(ferry_pool_t *pool);
/** Take one slot of at least @p bytes (<= slot_bytes). With @p wait, block until a slot is
 *  free; without, return FERRY_EAGAIN when none is. Returns 0, FERRY_EINVAL (bytes 0 or
 *  larger than a slot), FERRY_EAGAIN. The slot is owned by the caller until ferry_pool_free.
 *  Thread-safe. O(1). */
FERRY_EXTERN int ferry_pool_alloc(ferry_pool_t *pool, size_t bytes, bool wait, void **out);
/** Return slot @p p to @p pool. Returns 0 or FERRY_EINVAL (not a slot start of this pool,
 *  or already free). Thread-safe. O(1). */
FERRY_EXTERN int ferry_pool_free(ferry_pool_t *pool, void *p);
/** True when [p, p + bytes) lies inside the pool's memory (pinned unless the pool fell back
 *  to pageable memory: ferry_pool_stats_t.pinned). */
FERRY_EXTERN bool ferry_pool_owns(const ferry_pool_t *pool, const void *p, size_t bytes);
/** Fill @p out (caller sets size). Returns 0 or FERRY_EINVAL. Thread-safe. */
FERRY_EXTERN int ferry_pool_stats(ferry_pool_t *pool, ferry_pool_stats_t *out);

/** Pin caller memory [p, p + bytes) through @p dev so that copies from it skip staging, on
 *  every device of @p dev's runtime (pinned memory is portable: a pipeline over a device set
 *  copies it directly on each device). Returns 0, FERRY_EINVAL or FERRY_EBACKEND (pinning
 *  refused, e.g. the memlock limit). Thread-safe. */
FERRY_EXTERN int ferry_host_register(ferry_device_t *dev, void *p, size_t bytes);
/** Undo ferry_host_register, through the device that registered @p p. Returns 0 or
 *  FERRY_EINVAL (not registered through @p dev). */
FERRY_EXTERN int ferry_host_unregister(ferry_device_t *dev, void *p);
/** Allocate @p bytes (1 .. 1T) of host memory for the copies of @p dev and of every other device
 *  of its runtime, pinned: the memory to use for batch buffers. It is zeroed and page-aligned, from
 * 2 MiB up 2 MiB-aligned on transparent huge pages where the system allows them; on a GPU it is
 * touched by up to 8 threads on the calling thread's NUMA node, then registered as
 * ferry_host_register does (4 GiB in 0.35 s on the H200's host, 8x faster than 4 KiB pages touched
 * by one thread). On the simulator, which pins nothing, pages come as they are first used. It stays
 * valid until ferry_host_free, which must come before
 *  @p dev's runtime is destroyed; ferry_host_unregister refuses it. Allocating takes time in
 *  proportion to @p bytes (touching and pinning): do it once, up front. On error *out is
 *  untouched. Returns 0, FERRY_EINVAL (NULL, 0 or over 1T bytes), FERRY_ENOMEM or
 *  FERRY_EBACKEND (pinning refused, e.g. by the memlock limit: nothing stays allocated).
 *  Thread-safe. */
FERRY_EXTERN int ferry_host_alloc(ferry_device_t *dev, size_t bytes, void **out);
/** Unpin and release @p p, which ferry_host_alloc returned for @p dev. NULL @p p is a no-op.
 *  Returns 0 or FERRY_EINVAL (NULL @p dev, or @p p not from ferry_host_alloc on @p dev: left
 *  as it is). Thread-safe; no copy may still use @p p. */
FERRY_EXTERN int ferry_host_free(ferry_device_t *dev, void *p);

/* ---------------------------------------------------------------------------------------------
 * Stages: what runs on each chunk
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_kernel_args {
    size_t size;       /* sizeof(ferry_kernel_args_t) */
    const void *in;    /* input of this chunk (device memory for gpu, host memory for cpu) */
    void *out;         /* output of this chunk, same length as the input */
    size_t bytes;      /* length of this chunk */
    size_t offset;     /* byte offset of this chunk within its batch */
    uint64_t batch_id; /* the batch's id as returned by submit */
    uint32_t chunk;    /* chunk index within the batch */
    uint32_t attempt;  /* 0 for the first attempt */
    /* Long kernels poll these through ferry_should_abort() (include/ferry/device.h): ferry
     * raises the word to the sequence number of the newest chunk it gives up on (a stage past
     * its deadline); a kernel whose @seq is at or below it should return early. On a GPU the
     * word is in device memory (a poll past @abort_after is an L2 read; before it, a read of
     * the GPU's clock alone), written by ferry on a stream of its own; on the simulator it is
     * host memory. NULL when the backend has no abort word (then nothing ever aborts). */
    const volatile uint64_t *abort_word; /* a device pointer for gpu functions; the first of
                                            FERRY_ABORT_REPLICAS copies */
    uint64_t seq;                        /* this chunk's sequence number in its pipeline, >= 1 */
    /* Appended (check size > offsetof(ferry_kernel_args_t, batch_user) when built against an
     * older header): the submitted batch's ferry_batch_t.user, per-batch parameters for the
     * kernel (batch_id is only known once submit returns). NULL when the batch set none. */
    void *batch_user;
    /* Appended: when ferry_should_abort() may skip reading the word. ferry raises no word for
     * this chunk before the GPU's clock (%globaltimer, ns) reaches @abort_after (half the
     * deadline floor after the launch, less the clocks' error), so a poll earlier than that
     * reads the clock alone (a register, no memory traffic). A clock outside
     * [abort_after - abort_span, abort_after) reads the word (a clock that jumped). Both 0:
     * every poll reads the word (the simulator, a device whose clock ferry could not map). */
    uint64_t abort_after;
    uint64_t abort_span;
    /* Appended: a slab of gathered batches (option gather_bytes) given to the stage's
     * gpu_items at once: its table, @nitems entries in device memory (copied with the slab;
     * host memory for a CPU function), each item's bytes at items[i].offset from @in and from
     * @out. NULL and 0 for a chunk of one batch, and for each item's own call when the stage
     * has no gpu_items. */
    const struct ferry_item *items;
    uint32_t nitems;
} ferry_kernel_args_t;

/* One batch of a gathered slab (option gather_bytes), in ferry_kernel_args_t.items. */
typedef struct ferry_item {
    uint64_t offset;   /* where its bytes start, from args->in and from args->out */
    uint64_t bytes;    /* its length (its batch's bytes) */
    uint64_t batch_id; /* its batch's id, as submit returned it */
    void *batch_user;  /* its batch's ferry_batch_t.user */
} ferry_item_t;

/* The abort word is kept in FERRY_ABORT_REPLICAS copies, FERRY_ABORT_STRIDE bytes apart, all
 * raised together: a kernel reads the copy of its multiprocessor (ferry_should_abort()), so
 * that thousands of blocks polling do not all queue on one cache line. */
#define FERRY_ABORT_REPLICAS 128
#define FERRY_ABORT_STRIDE   128

/** Launch the stage's kernel(s) on @p stream (a cudaStream_t on the cuda backend). Must only
 *  enqueue work on that stream and return; returns 0 or a negative FERRY_* code. Called from
 *  ferry threads, one chunk at a time per pipeline (the thread that issues); several pipelines
 *  may call it concurrently. */
typedef int (*ferry_gpu_fn)(const ferry_kernel_args_t *args, void *stream, void *user);
/** The same transform on the CPU, synchronously. The simulator runs it as the kernel; the
 *  fallback path runs it when the GPU path fails. Returns 0 or a negative FERRY_* code.
 *  Threads: it may run on several ferry threads at once (the fallback on a pipeline's
 *  completion thread, chunks sent straight to the CPU on its issuing thread, the simulator's
 *  kernels on whichever thread moves the virtual clock), for one pipeline or several: it must
 *  be thread-safe. On the simulator a kernel's CPU function runs while the simulated device's
 *  lock is held (the kernel ends at a point of virtual time and its bytes are written then):
 *  it must not call ferry on the same device, and a slow one stalls every pipeline on that
 *  device for as long as it runs, in host time (virtual time does not see it). */
typedef int (*ferry_cpu_fn)(const ferry_kernel_args_t *args, void *user);

typedef struct ferry_stage {
    size_t size;        /* sizeof(ferry_stage_t), set by the INIT macro */
    const char *name;   /* for logs, traces and failure records; copied */
    ferry_gpu_fn gpu;   /* required on the cuda backend */
    ferry_cpu_fn cpu;   /* required on the sim backend; optional fallback on cuda */
    void *user;         /* passed to both; borrowed for the pipeline's lifetime */
    double ns_per_byte; /* cost hint: kernel time per byte with the whole GPU; 0: the
                           profile's device-to-device rate (a memory-bound pass) */
    size_t granularity; /* chunks are cut at multiples of this many bytes from the batch's
                           start (the element size of the stage's data); 0 or 1: anywhere */
    /* Option isolation=process runs the stage in worker processes, forked from a helper made
     * with the runtime: its functions are the program's and valid there, its user data is not
     * unless it existed when the runtime was made. user_bytes > 0: the user_bytes bytes at
     * user are copied to each worker (the data must hold no pointers); 0: user is passed as it
     * is (NULL, or data made before the runtime). Not used in isolation=thread. */
    size_t user_bytes;
    /* Appended, optional: the kernel(s) over a whole slab of gathered batches (option
     * gather_bytes) in one launch: args->in, out and bytes span the slab (its table and the
     * padding between items included: a stage that transforms each byte or element alone may
     * run over the whole span), args->items and nitems its table; batch_id, offset and
     * batch_user are 0. NULL: ferry calls gpu once per item of a slab, with that item's
     * arguments (its bytes, batch id and batch_user; offset 0), so every stage works. */
    ferry_gpu_fn gpu_items;
} ferry_stage_t;
#define FERRY_STAGE_INIT FERRY_SIZED_INIT(ferry_stage_t)

/* ---------------------------------------------------------------------------------------------
 * Pipelines
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_pipeline ferry_pipeline_t;

/* The bandwidth monitor's alert: the copies of one direction ran below the alert ratio of what
 * the link delivers at their sizes (the device profile's copy curve, both directions copying;
 * the theoretical rate when no profile describes the link) over a whole window of timed copies,
 * or their sizes are so small that the link itself delivers below that ratio of its large-copy
 * rate (docs/metrics.md). */
typedef enum ferry_alert_cause {
    FERRY_CAUSE_SMALL_TRANSFERS = 0, /* copies too small for the link to deliver (without a
                                        copy curve: the window's median copy under 1 MiB) */
    FERRY_CAUSE_PAGEABLE = 1,        /* host memory is not pinned */
    FERRY_CAUSE_CONTENTION = 2,      /* both directions were copying at once */
    FERRY_CAUSE_UNKNOWN = 3,         /* none of these: the link itself (or another process,
                                        when the link's counter cannot be read) */
    FERRY_CAUSE_FOREIGN = 4 /* the link's counter (NVML) shows traffic this pipeline did not
                               move: another process, or another pipeline, on the link */
} ferry_alert_cause_t;

typedef struct ferry_alert {
    size_t size;      /* sizeof(ferry_alert_t) */
    bool raised;      /* true: raised now; false: cleared (back above the ratio) */
    int direction;    /* 0 H2D, 1 D2H */
    double gbps;      /* the window's rate while copying, GB/s */
    double link_gbps; /* the link's theoretical rate per direction */
    double ratio;     /* gbps / link_gbps */
    ferry_alert_cause_t cause;
    const char *text; /* one sentence naming the likely cause and what to do */
    uint64_t device_ns;
    /* The traffic on the link this pipeline did not move, GB/s, H2D and D2H, as of the link
     * monitor's latest sample (0 without one). */
    double foreign_gbps[2];
} ferry_alert_t;

typedef struct ferry_pipeline_config {
    size_t size;                /* sizeof(ferry_pipeline_config_t), set by the INIT macro */
    ferry_device_t *device;     /* required; borrowed for the pipeline's lifetime */
    const ferry_stage_t *stage; /* required; copied */
    size_t chunk_bytes;         /* 0: the chunk_bytes option (profile default when that is 0) */
    unsigned depth;             /* chunks in flight (pinned and device slots); 0: option */
    unsigned copy_streams;      /* streams per copy direction (H2D and D2H each); 0: option */
    unsigned compute_streams;   /* 0: option */
    int copy_priority;          /* stream priority of copy streams, in the device's range (-5 to 0
                                   on the H200); FERRY_UNSET: the copy_priority option */
    int compute_priority;       /* likewise for compute streams (compute_priority option) */
    unsigned queue_depth;       /* bounded submission queue; 0: the queue_depth option, and when
                                   that is 0 too, (2 x copy + compute) x 2 */
    int nonblocking;            /* 1: submit returns FERRY_EAGAIN when full; 0: it blocks;
                                   FERRY_UNSET, or -1 (what the INIT macro writes, understood by
                                   every ferry version): the nonblocking option */
    unsigned workers;           /* host worker threads; 0: option */
    bool single_stream;         /* every op of every chunk on one stream: no overlap (the
                                   baseline, and the last step before giving up on the GPU) */
    /* Called (on the completion thread) when the bandwidth monitor raises or clears an alert;
     * NULL: alerts are logged and counted only. */
    void (*on_alert)(const struct ferry_alert *alert, void *arg);
    void *alert_arg;
    /* Copies of adjacent chunks of one batch merged up to this many bytes (kernels stay one
     * per chunk); 0: the coalesce_bytes option. SIZE_MAX: none (a copy per chunk). */
    size_t coalesce_bytes;
    /* Appended: a set of devices (borrowed, all of one runtime, none twice), with device NULL.
     * The pipeline makes one pipeline per device from this config and cuts each batch into
     * parts, one per device at most, sized so that every device is expected to finish its
     * part at the same time, by the rates its recent parts measured (docs/devices.md). A
     * device whose GPU path ended (a sticky fault, a hang) leaves the set: its own pipeline
     * finishes what it holds on the CPU, new parts go to the others. queue_depth bounds the
     * batches in flight in the whole set. 0: the one device above. */
    ferry_device_t *const *devices;
    unsigned ndevices;
    /* Appended: gather small batches into pinned slabs of this many bytes (at most
     * chunk_bytes): a batch of a quarter of it (256 KiB at most) or less, without prepare, is
     * copied into the slab being filled, and each slab moves with one copy each way and one
     * launch (stage.gpu_items) or a launch per item; its output is copied back to each batch's
     * out and each batch's callback runs as usual. A slab goes when full, when the device would
     * otherwise idle, or after gather_us. 0: the gather_bytes option (0: off); SIZE_MAX: off.
     * One device, isolation=thread only (refused otherwise). */
    size_t gather_bytes;
    /* Appended: the longest a gathered batch waits for its slab to fill before the slab goes
     * as it is, in microseconds. 0: the gather_us option. */
    unsigned gather_us;
} ferry_pipeline_config_t;
/* The most devices in one set. */
#define FERRY_MAX_DEVICE_SET 64
/* The older spelling of FERRY_UNSET for the priorities, kept for existing code. */
#define FERRY_PRIORITY_DEFAULT FERRY_UNSET
#define FERRY_PIPELINE_CONFIG_INIT                                                                 \
    {                                                                                              \
        .size = sizeof(ferry_pipeline_config_t), .copy_priority = FERRY_UNSET,                     \
        .compute_priority = FERRY_UNSET, .nonblocking = -1                                         \
    }

/** Fill one chunk's pinned input directly (decode, generate) instead of copying from
 *  batch->in. @p slot holds @p bytes; @p offset is the chunk's offset within the batch.
 *  Called on one of the pipeline's own threads, under the same rules as ferry_done_fn (no
 *  drain, no waiting submit); returns 0 or a negative code (the batch then fails). */
typedef int (*ferry_prepare_fn)(void *slot, size_t bytes, size_t offset, void *arg);

typedef struct ferry_batch {
    size_t size;              /* sizeof(ferry_batch_t), set by the INIT macro */
    const void *in;           /* input bytes; borrowed until the callback. NULL iff prepare */
    void *out;                /* output bytes (same length); borrowed until the callback.
                                 NULL: output is discarded after the stage ran */
    size_t bytes;             /* 0 is a valid, empty batch */
    ferry_prepare_fn prepare; /* optional: fill each chunk's input in place of in */
    void *prepare_arg;
    void *user; /* appended: handed to the stage as ferry_kernel_args_t.batch_user, for
                   per-batch parameters; borrowed until the callback */
} ferry_batch_t;
#define FERRY_BATCH_INIT FERRY_SIZED_INIT(ferry_batch_t)

typedef enum ferry_batch_where {
    FERRY_DONE_GPU = 0,   /* the stage ran on the device (or the simulated device) */
    FERRY_DONE_CPU = 1,   /* the stage's CPU function produced the output */
    FERRY_DONE_FAILED = 2 /* no output; status says why */
} ferry_batch_where_t;

typedef struct ferry_batch_result {
    uint64_t id; /* as returned by submit */
    int status;  /* 0, or the FERRY_* code that failed the batch */
    ferry_batch_where_t where;
    const void *in; /* the batch's buffers, handed back */
    void *out;
    size_t bytes;
    uint32_t chunks;    /* chunks the batch was cut into */
    uint64_t submit_ns; /* device clock at submit and at completion */
    uint64_t done_ns;
} ferry_batch_result_t;

/** Called exactly once per accepted batch, from the pipeline's completion thread, after its
 *  output is complete (or it failed). @p r is valid during the call only. Callbacks of one
 *  pipeline run one at a time; while one runs, no other batch of that pipeline completes;
 *  callbacks of different pipelines may run concurrently, each on its own pipeline's thread.
 *  From a callback, on its own pipeline: ferry_pipeline_submit never blocks (a full queue
 *  returns FERRY_EBUSY in blocking mode, FERRY_EAGAIN in non-blocking mode: retrying inside
 *  the callback cannot succeed, as room is made by the thread running it);
 *  ferry_pipeline_drain and ferry_pipeline_destroy return FERRY_EBUSY; ferry_pipeline_close
 *  shuts the pipeline and returns FERRY_EBUSY. Calls on other pipelines are not restricted. */
typedef void (*ferry_done_fn)(const ferry_batch_result_t *r, void *arg);

/** Create a pipeline: streams, events, device buffers, pinned slots and threads, all once,
 *  here. @p cfg is read during the call; the stage is copied. On error *out is untouched.
 *  Returns 0, FERRY_EINVAL (NULL, missing stage function, value out of range with the
 *  option named in the last-error text), FERRY_ENOMEM, FERRY_EDEVMEM, FERRY_EBACKEND.
 *
 *  Lifetime: open from here; ferry_pipeline_close shuts it (submits refused) and, once nothing
 *  is in flight, releases its threads and memory; the handle stays valid, and every call on
 *  it answers (submit FERRY_ECLOSED, drain 0, stats the final figures), until
 *  ferry_pipeline_destroy frees it, or the runtime's destroy does. A handle used after it was
 *  freed is undefined behaviour, as with any freed pointer. Thread-safe. */
FERRY_EXTERN int ferry_pipeline_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out);

/** Queue @p batch (copied; its buffers are borrowed until the callback). The bounded
 *  submission queue applies backpressure: a full queue blocks, or returns FERRY_EAGAIN in
 *  non-blocking mode. Never drops. If this returns an error, @p cb is never called. @p id may
 *  be NULL. Returns 0, FERRY_EINVAL (NULL p, batch or cb, in and prepare both or neither for
 *  bytes > 0), FERRY_EAGAIN, FERRY_ECLOSED (the pipeline was closed: also a submit waiting for
 *  room when a close comes), FERRY_EBUSY (from one of the pipeline's callbacks, a full queue:
 *  see ferry_done_fn), FERRY_ENOMEM. Thread-safe, also against a close on another thread:
 *  each submit is either accepted (its callback will run) or refused with FERRY_ECLOSED. */
FERRY_EXTERN int ferry_pipeline_submit(ferry_pipeline_t *p, const ferry_batch_t *batch,
                                       ferry_done_fn cb, void *arg, uint64_t *id);

/** Block until every batch submitted before the call has completed and its callback has
 *  returned (on a closed pipeline: returns at once). Returns 0, FERRY_EINVAL (NULL), or
 *  FERRY_EBUSY when called from one of @p p's callbacks (it would wait for itself).
 *  Thread-safe; several threads may drain at once. */
FERRY_EXTERN int ferry_pipeline_drain(ferry_pipeline_t *p);

/** Shut @p p, then release it if nothing is in flight. Shutting is immediate and permanent:
 *  from the call on, every submit that was not accepted returns FERRY_ECLOSED (a submit
 *  waiting for room included). If batches are still queued or running (or a submit is inside
 *  its call), returns FERRY_EBUSY: they complete and their callbacks run as usual; drain and
 *  close again. Otherwise the pipeline's threads stop and its streams, device and pinned
 *  memory are released, and it returns 0. The handle is not freed: closing again returns 0,
 *  stats give the figures as of the close, traces can still be written, submit returns
 *  FERRY_ECLOSED; free it with ferry_pipeline_destroy (or the runtime's destroy). From one of
 *  @p p's callbacks it shuts @p p and returns FERRY_EBUSY. NULL is a no-op returning 0.
 *  Returns 0 or FERRY_EBUSY (with the count in the last-error text). Thread-safe: may race
 *  submits, drains and other closes on other threads. */
FERRY_EXTERN int ferry_pipeline_close(ferry_pipeline_t *p);

/** Close @p p, waiting for the batches in flight to complete (as drain, then close), and free
 *  it. @p p is invalid afterwards. Returns 0; FERRY_EBUSY, having only shut @p p, when called
 *  from one of its callbacks. NULL is a no-op returning 0. Must be the last call on @p p: no
 *  other thread may be inside, or enter, a call on it (close first, from any thread, to stop
 *  submitters: they get FERRY_ECLOSED; then destroy once they are done with the handle). */
FERRY_EXTERN int ferry_pipeline_destroy(ferry_pipeline_t *p);

#define FERRY_STATS_MAX_STREAMS 32

typedef struct ferry_pipeline_stats {
    size_t size; /* sizeof(ferry_pipeline_stats_t), set by the caller */
    uint64_t batches_submitted, batches_done_gpu, batches_done_cpu, batches_failed;
    uint64_t chunks;
    uint64_t bytes_h2d, bytes_d2h;
    uint64_t elapsed_ns; /* device clock from the first copy's start to the last's end */
    /* Time each engine class was busy: the union of the intervals of its ops (several
     * streams of a class overlap), so never more than elapsed_ns. */
    uint64_t busy_h2d_ns, busy_compute_ns, busy_d2h_ns;
    double gbps_h2d, gbps_d2h; /* bytes / elapsed, GB/s (1e9 bytes per second) */
    double overlap;            /* (busy_h2d + busy_compute + busy_d2h) / elapsed: 1 means
                                  serial, up to 3 when every engine is always busy */
    unsigned streams;          /* streams in the plan (all kinds), <= FERRY_STATS_MAX_STREAMS */
    char stream_kind[FERRY_STATS_MAX_STREAMS]; /* 'h' H2D, 'c' compute, 'd' D2H, 'a' all */
    uint64_t stream_busy_ns[FERRY_STATS_MAX_STREAMS];
    uint64_t queue_full_waits;  /* submits that waited (blocking) on a full queue */
    uint64_t queue_full_eagain; /* submits refused with FERRY_EAGAIN (or, from a callback,
                                   FERRY_EBUSY) on a full queue */
    uint64_t staged_bytes;      /* input bytes copied into pinned slots by host workers */
    uint64_t copied_out_bytes;  /* output bytes copied out of pinned slots */
    uint64_t chunk_bytes;       /* the plan in force: chunk size, slots, streams */
    unsigned depth, copy_streams, compute_streams, queue_depth;
    unsigned slots_in_use; /* slots bound to chunks in flight now (0 once drained; a slot
                              abandoned to a hung kernel is bound to none) */
    /* Chunks whose ops were timed. Every chunk with op_timing "all" or tracing (with the
     * trace_chunks option, the first N, then one in 31); otherwise one in 31, and the busy
     * figures above (and overlap) are scaled up from those. */
    uint64_t chunks_timed;
    bool host_pinned; /* false: pinning was refused; slots are pageable (slower, still correct) */
    /* The hardware queues of the device's context (CUDA_DEVICE_MAX_CONNECTIONS as read at
     * start) and the streams live pipelines had on it when this one was made, this one's
     * included: above the queues, streams share them (logged as a warning). */
    unsigned connections, context_streams;
    /* Faults: chunks the CPU fallback produced, failed GPU attempts recorded (one failure
     * record each), and whether a sticky error ended the GPU path of this pipeline. */
    uint64_t chunks_cpu, failure_records;
    bool gpu_lost;
    /* Deadlines: chunks that passed theirs (the abort flag was raised), and whether a kernel
     * that ignored the flag ended the GPU path (a hang). */
    uint64_t deadlines_passed;
    bool gpu_hung;
    /* The ladder's level 1: the level now (0 the plan as configured, 1 one compute stream, 2 at
     * most 2 chunks in flight, 3 synchronous) and the steps taken down and back up. */
    unsigned ladder_level;
    uint64_t ladder_steps_down, ladder_steps_up;
    /* The bandwidth monitor: alerts raised, and the last window's rate while copying over the
     * link's theoretical rate, per direction (0 before a window is full). */
    uint64_t bw_alerts;
    double bw_ratio[2];
    /* The watchdog: the most time an aborted chunk took past its deadline until it was retired
     * (detection + stop + completion), heartbeats sent and seen (the heartbeat kernel's counter
     * in mapped host memory), and the stalls it reported: the GPU not running the heartbeat,
     * the completion thread not polling, and the watchdog itself not running (seen by the
     * completion thread). */
    uint64_t deadline_overrun_ns;
    uint64_t heartbeats_sent, heartbeats_seen;
    uint64_t heartbeat_stalls, completion_stalls, watchdog_stalls;
    /* Chunks that failed on the GPU and succeeded on a GPU retry (option gpu_retries). */
    uint64_t chunks_retried;
    /* The link monitor (option link_sample_ms): samples taken, and the latest one's traffic
     * on the link per direction (H2D, D2H), all of it (NVML's counter on a GPU) and this
     * pipeline's own share, in bytes per second (-1 before a sample, or with no counter). */
    uint64_t link_samples;
    double link_bps[2], link_own_bps[2];
    /* Chunks per copy at most (option coalesce_bytes): 1 is a copy per chunk. */
    unsigned copy_group;
    /* Failure records (option failure_log) that could not be written (the file's write
     * failed: a full disk, /dev/full); a warning names the file once. */
    uint64_t failure_log_errors;
    /* A device of a set whose GPU path ended: its chunks that went to the set's other devices
     * instead of its CPU path (on a set: summed over the devices). */
    uint64_t chunks_moved;
    /* isolation=process: workers started in place of one that ended (a crash, a kill, its GPU
     * path ended), and the time from seeing the last one end to the first batch its
     * replacement ran on the device (0: none yet). */
    uint64_t worker_restarts;
    uint64_t worker_recovery_ns;
    /* Option gather_bytes: the batches moved in slabs and the slabs they made (the batch
     * counters above count each gathered batch, not its slab). */
    uint64_t batches_gathered, slabs;
    /* Option gather_bytes: submits that slept until a slab was free (every slab sealed or in
     * flight), and the host pieces the slabs' copies moved, both ways together: a slab of
     * copied batches moves one piece each way, a slab of pinned batches one per run of
     * batches that lie side by side in one registration (so pieces over slabs is the copies'
     * cost per slab). */
    uint64_t gather_waits, gather_pieces;
} ferry_pipeline_stats_t;
#define FERRY_PIPELINE_STATS_INIT FERRY_SIZED_INIT(ferry_pipeline_stats_t)

/** Fill @p out (caller sets size). A struct from an older ferry.h, smaller than this one, gets
 *  the fields it has and nothing is written past its size. Consistent once drained; after a
 *  close that returned 0, the figures as of that close. Returns 0 or FERRY_EINVAL. Thread-safe. */
FERRY_EXTERN int ferry_pipeline_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out);

/** The devices a pipeline drives: 1, or the size of its device set. 0 for NULL. */
FERRY_EXTERN unsigned ferry_pipeline_devices(ferry_pipeline_t *p);

/* One device of a pipeline: what it did and what the set's scheduler thinks of it. */
typedef struct ferry_pipeline_device_stats {
    size_t size;        /* sizeof(ferry_pipeline_device_stats_t), set by the caller */
    int index;          /* the device's index in its backend */
    char name[128];     /* the device's name */
    uint64_t bytes;     /* bytes of the batch parts it completed */
    uint64_t parts;     /* batch parts it completed (a pipeline of one device: batches) */
    uint64_t parts_cpu; /* of those, parts its pipeline finished on the CPU */
    double share;       /* bytes over the bytes of every device */
    double model_gbps;  /* its rate as the scheduler estimates it; 0 before a measured part */
    bool left;          /* it left the set: no new parts */
    char why[128];      /* why it left */
    ferry_pipeline_stats_t stats; /* the device's own pipeline */
    uint64_t bytes_moved;         /* bytes of its parts that other devices ran after it left */
    /* The scheduler's word on it, "" when none. For the CPU device of a set: on real clocks,
     * whether it was kept or benched after running the set with and without it, with the rates
     * ("benched: the set ran at 37.25 then 34.55 GB/s with it, 41.23 without (40 batches
     * planned with it, 98 without)"; a benched CPU takes no more work); else, when it took no
     * work, why ("took no work: its first probe (256 KiB) ran at 0.19 GB/s; ..."). */
    char note[160];
    /* bytes it took from another device's queue (chunks not started yet) when it ran out of
     * work: a GPU of a set takes the CPU device's when the CPU is behind its plan */
    uint64_t bytes_stolen;
} ferry_pipeline_device_stats_t;
#define FERRY_PIPELINE_DEVICE_STATS_INIT                                                           \
    {                                                                                              \
        .size = sizeof(ferry_pipeline_device_stats_t), .stats = {                                  \
            .size = sizeof(ferry_pipeline_stats_t)                                                 \
        }                                                                                          \
    }

/** Fill @p out (caller sets size) with device @p i (0 .. ferry_pipeline_devices - 1) of @p p.
 *  Returns 0 or FERRY_EINVAL (NULL, size not set, @p i out of range). Thread-safe. */
FERRY_EXTERN int ferry_pipeline_device_stats(ferry_pipeline_t *p, unsigned i,
                                             ferry_pipeline_device_stats_t *out);

/** Write a Chrome trace (JSON, opens in ui.perfetto.dev) of every op the pipeline ran so far,
 *  one track per stream and per engine class. Pipelines record their ops only when created
 *  with the `trace` option on. Returns 0, FERRY_EINVAL, FERRY_ESTATE (tracing off), FERRY_EIO.
 */
FERRY_EXTERN int ferry_pipeline_write_trace(ferry_pipeline_t *p, const char *path);

typedef enum ferry_op_kind {
    FERRY_OP_H2D = 0,     /* host-to-device copy */
    FERRY_OP_COMPUTE = 1, /* the stage's kernel */
    FERRY_OP_D2H = 2      /* device-to-host copy */
} ferry_op_kind_t;

/* One op of the trace: the records ferry_pipeline_write_trace writes as slices. */
typedef struct ferry_op_record {
    size_t size;     /* sizeof(ferry_op_record_t) of the library that filled it */
    uint64_t batch;  /* the batch's id (ferry_pipeline_submit's @p id) */
    uint32_t chunk;  /* chunk index within the batch */
    unsigned stream; /* index into the stats' stream_kind[] */
    ferry_op_kind_t kind;
    uint64_t start_ns, end_ns; /* device clock (virtual on the simulator), ns since the first
                                  chunk's issue: the trace's time origin */
    uint64_t bytes;
    uint32_t chunks; /* chunks from @chunk on that the op covers: more than 1 for a copy
                        group (option coalesce_bytes), whose kernels form one compute op */
    unsigned device; /* the device that ran it: @i of ferry_pipeline_device_stats (0 for a
                        pipeline of one device) */
} ferry_op_record_t;

/** Call @p fn once per op recorded for the trace so far, in the order the ops were retired
 *  (chunk by chunk, H2D then compute then D2H), with a record valid during the call only.
 *  A set's ops come device by device (op->device), each device's on its own clock from its
 *  own first chunk, with the set's batch ids and chunk indexes within the set's batch; a
 *  GPU's @stream indexes its own stats' stream_kind (ferry_pipeline_device_stats); the CPU
 *  device's parts are one compute op each (stream 0, @chunks the set's chunks it covers),
 *  from its submission to its end, on its clock from its first part.
 *  The records are copied first, so @p fn runs without the pipeline's lock and may call
 *  ferry_pipeline_stats(). Pipelines record ops only with the `trace` option on (the first
 *  `trace_chunks` chunks when that is set). Returns 0, FERRY_EINVAL, FERRY_ESTATE (tracing
 *  off) or FERRY_ENOMEM. Thread-safe. */
typedef void (*ferry_op_fn)(const ferry_op_record_t *op, void *arg);
FERRY_EXTERN int ferry_pipeline_ops(ferry_pipeline_t *p, ferry_op_fn fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif
