/* The pinned host pool: one mmap'd region registered with the backend once, at creation
 * (FACTS.md: cudaHostAlloc costs ~0.6 ms per MiB, registration of 1 GiB 49 ms; pin once and
 * sub-allocate), cut into fixed slots handed out in O(1) from a free stack. Registered malloc/
 * mmap memory (not cudaMallocHost) stays readable after a context loss. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "core/host_mem.h"
#include "core/runtime.h"

struct ferry_pool {
    ferry_device_t *dev;
    unsigned char *base;
    size_t bytes;  /* registered */
    size_t mapped; /* mapped: bytes rounded up to the page */
    size_t slot_bytes;
    size_t slots;
    pthread_mutex_t lock;
    pthread_cond_t freed;
    size_t *free_stack; /* indices of free slots */
    size_t nfree;
    unsigned char *used; /* per slot: 1 when handed out */
    size_t peak;
    uint64_t allocs, waits, eagain;
    bool registered;
    bool shared;  /* isolation=process: its slab is memory shared with the workers */
    bool tracked; /* in the runtime's pinned ranges (ferry__rt_track) */
};

int ferry_pool_bytes_for(size_t stages, size_t largest_chunk, size_t *out)
{
    if (out == NULL || stages == 0 || largest_chunk == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_pool_bytes_for: stages and largest_chunk must be > 0");
    size_t v;
    if (__builtin_mul_overflow(stages, largest_chunk, &v) || __builtin_mul_overflow(v, 2, &v))
        return ferry__error(FERRY_ERANGE, "ferry_pool_bytes_for: %zu x %zu x 2 overflows", stages,
                            largest_chunk);
    *out = v;
    return 0;
}

int ferry_pool_create(ferry_device_t *dev, const ferry_pool_config_t *cfg, ferry_pool_t **out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pool_create: NULL device or out");
    const ferry_options_t *o = dev->rt->opts;
    ferry_pool_config_t c; /* slot_bytes from the chunk_bytes option, align 4096 when unset */
    int rc = ferry__config_import(&c, sizeof(c), cfg, &ferry__cfg_pool, o);
    if (rc != 0)
        return ferry__rt_fail(dev->rt, rc);
    size_t align = c.align;
    if ((align & (align - 1)) != 0)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "pool align %zu is not a power of two "
                                                    "up to 1G",
                                                    align));
    size_t slot = c.slot_bytes;
    if (slot == 0)
        slot = (size_t)dev->props.default_chunk_bytes; /* the device profile's default */
    if (slot == 0)
        slot = 8u << 20;
    if (slot > ((size_t)1 << 40))
        return ferry__rt_fail(
            dev->rt, ferry__error(FERRY_ERANGE, "pool slot_bytes %zu is larger than 1T", slot));
    slot = (slot + align - 1) & ~(align - 1);
    size_t nslots;
    if (c.bytes) {
        nslots = c.bytes / slot;
        if (nslots == 0)
            return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                        "pool bytes %zu hold no slot of %zu bytes",
                                                        c.bytes, slot));
    } else {
        nslots = c.slots ? c.slots : 2 * (size_t)ferry__opt_i64(o, FERRY__OPT_depth);
    }
    size_t total;
    if (__builtin_mul_overflow(nslots, slot, &total) || total > ((size_t)1 << 44))
        return ferry__rt_fail(
            dev->rt,
            ferry__error(FERRY_ERANGE, "pool of %zu slots x %zu bytes is too large", nslots, slot));
    ferry_pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_ENOMEM, "pool: out of memory"));
    p->dev = dev;
    p->slot_bytes = slot;
    p->slots = nslots;
    p->bytes = total;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    p->free_stack = malloc(nslots * sizeof(*p->free_stack));
    p->used = calloc(nslots, 1);
    if (p->free_stack == NULL || p->used == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "pool: out of memory for %zu slots", nslots);
        goto out_free;
    }
    size_t mapped;
    if (dev->rt->zyg != NULL && align <= ((size_t)2 << 20)) {
        /* isolation=process: shared with the workers, which read and write its buffers where
         * they are and pin them themselves; this process drives no device */
        p->shared = true;
        if ((p->base = ferry__host_shared_map(dev->rt, total, &mapped)) == NULL) {
            rc = ferry__error(FERRY_ENOMEM, "pool: %s", ferry_last_error());
            goto out_free;
        }
        p->mapped = mapped;
    } else if ((p->base = ferry__host_map(total, align, &mapped)) == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "pool: mapping %zu bytes failed", total);
        goto out_free;
    } else {
        p->mapped = mapped;
        /* First touch before registering, so the pages exist on this (the caller's) NUMA
         * node. */
        ferry__host_touch(p->base, total);
        rc = ferry__be_host_register(dev, p->base, total);
    }
    if (p->shared) {
        /* pinned by each worker it is sent to */
    } else if (rc == FERRY_EBACKEND && c.pageable_fallback) {
        ferry_log(FERRY_LOG_WARN, "pool",
                  "%s; continuing with %zu bytes of pageable memory: copies run at pageable "
                  "rates",
                  ferry__last_error_text(), total);
        rc = 0;
    } else if (rc != 0) {
        goto out_free;
    } else {
        p->registered = true;
        /* The user's pool buffers are pinned: pipelines copy them directly (not staged). */
        if ((rc = ferry__rt_track(dev, p->base, total, FERRY__REG_POOL, "pool")) != 0)
            goto out_free;
        p->tracked = true;
    }
    for (size_t i = 0; i < nslots; i++)
        p->free_stack[i] = nslots - 1 - i; /* slot 0 is handed out first */
    p->nfree = nslots;
    *out = p;
    return 0;

out_free:
    ferry_pool_destroy(p);
    return ferry__rt_fail(dev->rt, rc);
}

void ferry_pool_destroy(ferry_pool_t *p)
{
    if (p == NULL)
        return;
    if (p->tracked)
        ferry__rt_untrack(p->dev, p->base, FERRY__REG_POOL, "pool");
    if (p->registered)
        ferry__be_host_unregister(p->dev, p->base);
    if (p->shared)
        ferry__host_shared_unmap(p->dev->rt, p->base);
    else
        ferry__host_unmap(p->base, p->mapped);
    free(p->free_stack);
    free(p->used);
    pthread_cond_destroy(&p->freed);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int ferry_pool_alloc(ferry_pool_t *p, size_t bytes, bool wait, void **out)
{
    if (p == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pool_alloc: NULL argument");
    if (bytes == 0 || bytes > p->slot_bytes)
        return ferry__error(FERRY_EINVAL, "ferry_pool_alloc: %zu bytes (accepted: 1 to %zu)", bytes,
                            p->slot_bytes);
    pthread_mutex_lock(&p->lock);
    if (p->nfree == 0) {
        if (!wait) {
            p->eagain++;
            pthread_mutex_unlock(&p->lock);
            return FERRY_EAGAIN;
        }
        p->waits++;
        while (p->nfree == 0)
            pthread_cond_wait(&p->freed, &p->lock);
    }
    size_t i = p->free_stack[--p->nfree];
    p->used[i] = 1;
    p->allocs++;
    size_t in_use = p->slots - p->nfree;
    if (in_use > p->peak)
        p->peak = in_use;
    pthread_mutex_unlock(&p->lock);
    *out = p->base + i * p->slot_bytes;
    return 0;
}

int ferry_pool_free(ferry_pool_t *p, void *ptr)
{
    if (p == NULL || ptr == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pool_free: NULL argument");
    uintptr_t off = (uintptr_t)ptr - (uintptr_t)p->base;
    if ((uintptr_t)ptr < (uintptr_t)p->base || off >= p->bytes || off % p->slot_bytes != 0)
        return ferry__error(FERRY_EINVAL, "ferry_pool_free: %p is not a slot of this pool", ptr);
    size_t i = off / p->slot_bytes;
    pthread_mutex_lock(&p->lock);
    if (!p->used[i]) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EINVAL, "ferry_pool_free: slot %p is already free", ptr);
    }
    p->used[i] = 0;
    p->free_stack[p->nfree++] = i;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

bool ferry_pool_owns(const ferry_pool_t *p, const void *ptr, size_t bytes)
{
    if (p == NULL || ptr == NULL)
        return false;
    uintptr_t a = (uintptr_t)ptr, b = (uintptr_t)p->base;
    return a >= b && a - b <= p->bytes && bytes <= p->bytes - (a - b);
}

int ferry_pool_stats(ferry_pool_t *p, ferry_pool_stats_t *out)
{
    if (p == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL, "ferry_pool_stats: NULL argument or size not set "
                                          "(use FERRY_POOL_STATS_INIT)");
    pthread_mutex_lock(&p->lock);
    out->bytes = p->bytes;
    out->slot_bytes = p->slot_bytes;
    out->slots = p->slots;
    out->in_use = p->slots - p->nfree;
    out->peak_in_use = p->peak;
    out->allocs = p->allocs;
    out->waits = p->waits;
    out->eagain = p->eagain;
    out->pinned = p->registered;
    pthread_mutex_unlock(&p->lock);
    return 0;
}
