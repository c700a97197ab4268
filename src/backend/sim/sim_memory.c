/* Memory of the simulated devices: device allocations (host memory standing in for device
 * memory, counted against the profile's), and registered host memory, which is the process's
 * as CUDA keeps it (unified addressing makes a registration mapped and portable, so every device
 * copies it as pinned memory; only the device it came through takes it back). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim_model.h"
#include "base/base.h"

/* cudaMalloc returns at least 256-byte aligned memory; kernels may rely on it. */
#define SIM_DEV_ALIGN 256

/* ---- address ranges ---------------------------------------------------------------------- */

/* Index of the last range starting at or below @p, or -1. */
static long range_floor(const struct sim_alloc *a, size_t n, uintptr_t p)
{
    long lo = 0, hi = (long)n - 1, best = -1;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        if (a[mid].p <= p) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return best;
}

static bool range_inside(const struct sim_alloc *a, size_t n, const void *p, size_t bytes)
{
    uintptr_t u = (uintptr_t)p;
    long i = range_floor(a, n, u);
    return i >= 0 && u - a[i].p <= a[i].bytes && bytes <= a[i].bytes - (u - a[i].p);
}

static int range_insert(struct sim_alloc **a, size_t *n, size_t *cap, void *p, size_t bytes,
                        const struct ferry_be_device *owner)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct sim_alloc *na = realloc(*a, ncap * sizeof(**a));
        if (na == NULL)
            return FERRY_ENOMEM;
        *a = na;
        *cap = ncap;
    }
    long i = range_floor(*a, *n, (uintptr_t)p) + 1;
    memmove(&(*a)[i + 1], &(*a)[i], (*n - (size_t)i) * sizeof(**a));
    (*a)[i].p = (uintptr_t)p;
    (*a)[i].bytes = bytes;
    (*a)[i].owner = owner;
    (*n)++;
    return 0;
}

/* Index of the range starting exactly at @p, or -1. */
static long range_find(const struct sim_alloc *a, size_t n, const void *p)
{
    long i = range_floor(a, n, (uintptr_t)p);
    return i >= 0 && a[i].p == (uintptr_t)p ? i : -1;
}

static void range_remove(struct sim_alloc *a, size_t *n, long i)
{
    memmove(&a[i], &a[i + 1], (*n - (size_t)i - 1) * sizeof(*a));
    (*n)--;
}

/* Registered host memory, as CUDA keeps it: the process's, not one device's (with unified
 * addressing a registration is mapped and portable, so every device copies it as pinned
 * memory). Each range remembers the device it was registered through: only that device takes
 * it back, and its close drops what it left. pins_lock is taken inside a device's lock, never
 * around one. */
static pthread_mutex_t pins_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_alloc *pins;
static size_t npins, cap_pins;

bool ferry__sim_pinned(const void *p, size_t bytes)
{
    pthread_mutex_lock(&pins_lock);
    bool yes = range_inside(pins, npins, p, bytes);
    pthread_mutex_unlock(&pins_lock);
    return yes;
}

/* ---- host memory ------------------------------------------------------------------------- */

static uint64_t per_gib_ns(uint64_t ns_per_gib, size_t bytes)
{
    return (uint64_t)((double)ns_per_gib * (double)bytes / 1073741824.0);
}

int ferry__sim_host_register(ferry_be_device_t *dev, void *p, size_t bytes)
{
    if (dev == NULL || p == NULL || bytes == 0)
        return ferry__error(FERRY_EINVAL, "sim: host_register: NULL device or pointer, or 0 bytes");
    int rc = 0;
    pthread_mutex_lock(&dev->mu);
    pthread_mutex_lock(&pins_lock);
    uintptr_t u = (uintptr_t)p;
    long i = range_floor(pins, npins, u + bytes - 1);
    if (i >= 0 && pins[i].p + pins[i].bytes > u) {
        rc = ferry__error(FERRY_EINVAL,
                          "sim: host_register: [%p, +%zu) overlaps a registered range at %p "
                          "(cudaErrorHostMemoryAlreadyRegistered)",
                          p, bytes, (void *)pins[i].p);
        goto out_unlock;
    }
    uint64_t lim = dev->prof.pin_limit_bytes;
    if (lim != 0 && (bytes > lim || dev->reg_bytes > lim - bytes)) {
        rc = ferry__error(FERRY_EBACKEND,
                          "sim: cannot pin %zu bytes of host memory: %llu bytes are pinned and "
                          "the profile's host.pin_limit_bytes is %llu (as a locked-memory "
                          "limit refuses it)",
                          bytes, (unsigned long long)dev->reg_bytes, (unsigned long long)lim);
        goto out_unlock;
    }
    if (range_insert(&pins, &npins, &cap_pins, p, bytes, dev) != 0) {
        rc = ferry__error(FERRY_ENOMEM, "sim: host_register: out of memory");
        goto out_unlock;
    }
    dev->reg_bytes += bytes;
    /* FACTS.md: cudaHostRegister of 1 GiB took 49 ms. */
    ferry__sim_charge(dev, per_gib_ns(dev->prof.register_ns_per_gib, bytes));
out_unlock:
    pthread_mutex_unlock(&pins_lock);
    pthread_mutex_unlock(&dev->mu);
    return rc;
}

int ferry__sim_host_unregister(ferry_be_device_t *dev, void *p)
{
    if (dev == NULL || p == NULL)
        return ferry__error(FERRY_EINVAL, "sim: host_unregister: NULL device or pointer");
    int rc = 0;
    pthread_mutex_lock(&dev->mu);
    pthread_mutex_lock(&pins_lock);
    long i = range_find(pins, npins, p);
    size_t bytes = i >= 0 && pins[i].owner == dev ? pins[i].bytes : 0;
    pthread_mutex_unlock(&pins_lock);
    if (bytes == 0) {
        rc = ferry__error(FERRY_EINVAL,
                          "sim: host_unregister: %p is not the start of a range registered "
                          "through this device (cudaErrorHostMemoryNotRegistered)",
                          p);
        goto out_unlock;
    }
    /* Copies in flight may still read or write the range: let them finish first. */
    ferry__sim_drain(dev);
    ferry__sim_charge(dev, per_gib_ns(dev->prof.unregister_ns_per_gib, bytes));
    dev->reg_bytes -= bytes;
    pthread_mutex_lock(&pins_lock);
    if ((i = range_find(pins, npins, p)) >= 0) /* under this device's lock: still there */
        range_remove(pins, &npins, i);
    pthread_mutex_unlock(&pins_lock);
out_unlock:
    pthread_mutex_unlock(&dev->mu);
    return rc;
}

/* ---- device memory ----------------------------------------------------------------------- */

int ferry__sim_mem_alloc(ferry_be_device_t *dev, size_t bytes, void **out)
{
    if (dev == NULL || out == NULL || bytes == 0)
        return ferry__error(FERRY_EINVAL, "sim: mem_alloc: NULL device or out, or 0 bytes");
    int rc = 0;
    pthread_mutex_lock(&dev->mu);
    if (dev->sticky) {
        rc = ferry__sim_sticky_fail("mem_alloc");
        goto out_unlock;
    }
    if (ferry__sim_alloc_fault(dev) != 0) {
        rc = ferry__error(FERRY_EDEVMEM,
                          "sim: mem_alloc of %zu bytes: injected allocation failure "
                          "(cudaErrorMemoryAllocation)",
                          bytes);
        goto out_unlock;
    }
    if (bytes > dev->prof.memory_bytes - dev->mem_used) {
        rc = ferry__error(FERRY_EDEVMEM,
                          "sim: mem_alloc of %zu bytes: device memory exhausted (%llu of %llu "
                          "bytes in use, profile %s)",
                          bytes, (unsigned long long)dev->mem_used,
                          (unsigned long long)dev->prof.memory_bytes, dev->prof.path);
        goto out_unlock;
    }
    void *p = NULL;
    size_t rounded = (bytes + SIM_DEV_ALIGN - 1) / SIM_DEV_ALIGN * SIM_DEV_ALIGN;
    if (rounded < bytes || posix_memalign(&p, SIM_DEV_ALIGN, rounded) != 0) {
        rc = ferry__error(FERRY_ENOMEM,
                          "sim: mem_alloc of %zu bytes: the host memory backing the simulated "
                          "device is exhausted",
                          bytes);
        goto out_unlock;
    }
    if (range_insert(&dev->allocs, &dev->nallocs, &dev->cap_allocs, p, bytes, dev) != 0) {
        free(p);
        rc = ferry__error(FERRY_ENOMEM, "sim: mem_alloc: out of memory");
        goto out_unlock;
    }
    dev->mem_used += bytes;
    if (dev->mem_used > dev->stats.mem_peak)
        dev->stats.mem_peak = dev->mem_used;
    *out = p;
out_unlock:
    pthread_mutex_unlock(&dev->mu);
    return rc;
}

void ferry__sim_mem_free(ferry_be_device_t *dev, void *p)
{
    if (dev == NULL || p == NULL)
        return;
    pthread_mutex_lock(&dev->mu);
    long i = range_find(dev->allocs, dev->nallocs, p);
    if (i < 0) {
        ferry_log(FERRY_LOG_WARN, "sim", "mem_free(%p): not a device allocation; ignored", p);
        goto out_unlock;
    }
    /* cudaFree synchronises the device; work in flight may still use the memory. */
    ferry__sim_drain(dev);
    dev->mem_used -= dev->allocs[i].bytes;
    range_remove(dev->allocs, &dev->nallocs, i);
    free(p);
out_unlock:
    pthread_mutex_unlock(&dev->mu);
}

/* Registered host memory is its own device address here (as with unified addressing). */
int ferry__sim_host_device_ptr(ferry_be_device_t *dev, void *host, void **out)
{
    if (dev == NULL || host == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim: host_device_ptr: NULL argument");
    bool reg = ferry__sim_pinned(host, 1);
    if (!reg)
        return ferry__error(FERRY_EINVAL,
                            "sim: host_device_ptr: %p is not in registered host memory "
                            "(cudaErrorInvalidValue)",
                            host);
    *out = host;
    return 0;
}

bool ferry__sim_dev_inside(const struct ferry_be_device *dev, const void *p, size_t bytes)
{
    return range_inside(dev->allocs, dev->nallocs, p, bytes);
}

void ferry__sim_memory_fini(struct ferry_be_device *dev)
{
    for (size_t i = 0; i < dev->nallocs; i++)
        free((void *)dev->allocs[i].p);
    free(dev->allocs);
    pthread_mutex_lock(&pins_lock);
    for (size_t i = npins; i-- > 0;)
        if (pins[i].owner == dev)
            range_remove(pins, &npins, (long)i);
    pthread_mutex_unlock(&pins_lock);
}
