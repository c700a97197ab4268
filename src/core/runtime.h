/* The runtime object shared by the core, pipeline and monitor layers. The device object and the
 * ferry__be_* wrappers through which everything above the backend reaches it are backend.h's. */
#ifndef FERRY_CORE_RUNTIME_H
#define FERRY_CORE_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend/backend.h"
#include "base/base.h"
#include "proc/shm.h"
#include "proc/zygote.h"

/* An object made on a runtime that the runtime must outlive (a pipeline): linked into the
 * runtime's list while it exists. Core knows objects above it only through these functions. */
typedef struct ferry__rt_child {
    struct ferry__rt_child *prev, *next; /* under the runtime's lock */
    /* Whether it still holds threads or device resources (not shut and released), and its
     * name for the runtime's refusal; under the runtime's lock, must not take it. */
    bool (*is_live)(struct ferry__rt_child *c, char *name, size_t len);
    /* Free a child that is not live (the runtime's destroy). */
    void (*destroy)(struct ferry__rt_child *c);
    /* isolation=process, optional: a block of memory shared with workers was made (@bytes > 0)
     * or freed (@bytes 0) in the runtime's arena, so that the child maps it in its workers
     * before batches use it. Under the runtime's lock. */
    void (*on_share)(struct ferry__rt_child *c, void *base, size_t bytes, uint64_t serial);
} ferry__rt_child_t;

struct ferry_runtime {
    const ferry_backend_ops_t *ops;
    ferry_options_t *opts;
    char fallback_reason[256];
    char profile[512];
    pthread_mutex_t lock;
    char last_error[512];
    int ndev;
    ferry_device_t **devs;   /* opened lazily */
    ferry_device_t *cpu_dev; /* FERRY_DEVICE_CPU, made at its first ferry_device_get */
    /* Host ranges pinned with ferry_host_register, sorted by start, under reg_lock: the
     * pipeline copies from and to them directly instead of staging. */
    pthread_rwlock_t reg_lock;
    struct ferry_reg_range {
        uintptr_t start, end;
        int device;
        uint8_t kind; /* FERRY__REG_*: only FERRY__REG_USER is ferry_host_unregister's */
    } * regs;
    size_t nregs, regs_cap;
    /* Moves (under reg_lock's write side) whenever a range comes or goes; unique to this
     * runtime. A thread remembers the last ranges it found with the generation it found them in
     * (ferry__rt_registration_of), so that asking again about the same memory reads this line,
     * which nobody writes while the ranges stay, instead of taking the read lock: from 8
     * submitting threads, two read locks an item bounced the lock's line between the cores. */
    char reg_gen_before[64]; /* the line to itself, however the runtime is aligned */
    _Atomic uint64_t reg_gen;
    char reg_gen_after[64];
    ferry__rt_child_t *children; /* under lock */
    /* isolation=process: the arena of memory shared with workers and the helper that forks
     * them, both made before anything else of the runtime (proc/shm.h, proc/zygote.h) */
    ferry__shm_arena_t arena;
    ferry__zyg_t *zyg;
    /* isolation=process: ops points here, a shadow of the backend the probe found (probe.c):
     * its devices' properties are the probe's, its operations none; the first device's answer
     * kept for ferry_device_get until it takes it */
    ferry_backend_ops_t shadow;
    ferry_be_device_t *probed;
    int probed_index;
    unsigned probed_connections;
};

/* isolation=process (probe.c): ask a probe process which backend @backend ("auto", "sim",
 * "cuda") is, how many devices it has and device @index's properties, and make rt->ops its
 * shadow. Returns 0, or the probe's error (the backend's, with its text), FERRY_EBACKEND (the
 * probe ended or did not answer in 120 s), FERRY_ENOMEM. */
int ferry__rt_probe_backend(ferry_runtime_t *rt, const char *backend, int index);
/* Fill shadow device @d (index @index) from a probe: its be and connections. */
int ferry__rt_probe_device(ferry_runtime_t *rt, int index, ferry_device_t *d);

/* Link @c into @rt's children, and out again (its own destroy does, before it frees). */
void ferry__rt_child_add(ferry_runtime_t *rt, ferry__rt_child_t *c);
void ferry__rt_child_remove(ferry_runtime_t *rt, ferry__rt_child_t *c);
/* Tell @rt's children of a shared block made (@bytes > 0) or freed (0): their on_share. */
void ferry__rt_share(ferry_runtime_t *rt, void *base, size_t bytes, uint64_t serial);

/* What @dev's link delivers for one copy at a given size, for the bandwidth monitor: the measured
 * copy curves of the simulated device's own profile; for a GPU, of the profile the runtime was
 * given (a calibration, `ferry probe --calibrate`) or else the built-in one, when its PCIe
 * generation and width are the device's. Immutable once made: any thread may read it. */
typedef struct ferry__link_curve ferry__link_curve_t;
/* Make @d's link curve into *@out (owned by the caller). FERRY_ENOTSUP when no profile describes
 * the link, FERRY_ENOMEM; on error *@out is untouched. */
int ferry__device_link_curve(ferry_device_t *d, ferry__link_curve_t **out);
void ferry__link_curve_destroy(ferry__link_curve_t *c); /* NULL is a no-op */
/* The rate of large copies in direction @dir (0 H2D, 1 D2H), GB/s: the curve's last point. */
double ferry__link_curve_peak_gbps(const ferry__link_curve_t *c, int dir);
/* The device-side time of one copy of @bytes in direction @dir, ns: its latency plus the bytes
 * at the large-copy rate alone (*@one_way), and at that rate's share while the other direction
 * transfers too (*@both_ways: the profile's bidirectional factor). */
void ferry__link_curve_copy_ns(const ferry__link_curve_t *c, int dir, uint64_t bytes,
                               double *one_way, double *both_ways);

/* Who registered a pinned range, and so who may take it back. */
enum {
    FERRY__REG_USER,  /* ferry_host_register: pinned here, ferry_host_unregister undoes it */
    FERRY__REG_POOL,  /* a ferry_pool's slab: the pool pinned it and unpins it */
    FERRY__REG_ALLOC, /* ferry_host_alloc: pinned here, ferry_host_free undoes it */
};
/* Count [p, p + n) on @dev as registered, so that pipelines copy from and to it directly
 * instead of staging it as pageable: pinned here first unless @kind is FERRY__REG_POOL.
 * Returns 0, FERRY_ENOMEM, FERRY_EINVAL (overlap) or the backend's pinning error (message
 * prefixed by @who). */
int ferry__rt_track(ferry_device_t *dev, void *p, size_t n, int kind, const char *who);
/* Take back the range starting at @p that @kind tracked (unpinned unless FERRY__REG_POOL).
 * Returns 0 or FERRY_EINVAL (no such range of that kind on @dev; message prefixed by @who). */
int ferry__rt_untrack(ferry_device_t *dev, void *p, int kind, const char *who);

/* True when [p, p + n) lies inside one range registered with ferry_host_register or
 * ferry_host_alloc, or inside a ferry_pool's slab, on any device of @dev's runtime: pinned
 * memory is portable (the CUDA backend registers with unified addressing, mapped and portable
 * to every device), so each device of a set copies it directly. */
bool ferry__rt_is_registered(ferry_device_t *dev, const void *p, size_t n);
/* The start of that range, 0 when there is none: two pieces of one range that lie side by side
 * may go as one copy, two ranges' never (one copy may not span two registrations). */
uintptr_t ferry__rt_registration_of(ferry_device_t *dev, const void *p, size_t n);

/* Copy the calling thread's last error into @rt's last-error text and return @code. */
int ferry__rt_fail(ferry_runtime_t *rt, int code);

#endif
