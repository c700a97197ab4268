/* A latency histogram (batch latency, submit to callback on the device clock) that its owner
 * records into without a lock, and a registry by owner through which the metrics registry finds
 * it: the pipeline, above monitor/, registers its histogram at create and removes it before it
 * is freed, so that monitor/ never includes a pipeline header. */
#ifndef FERRY_MONITOR_LATENCY_H
#define FERRY_MONITOR_LATENCY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__LAT_BUCKETS 16
/* Upper bounds in seconds; a last bucket (+Inf) follows. */
extern const double ferry__lat_bounds_s[FERRY__LAT_BUCKETS];

typedef struct ferry__lat_hist {
    _Atomic uint64_t count, sum_ns, buckets[FERRY__LAT_BUCKETS + 1];
    const void *owner; /* registry: the object it belongs to */
    struct ferry__lat_hist *next;
} ferry__lat_hist_t;

/* Inline: the completion thread records each batch. */
static inline void ferry__lat_hist_observe(ferry__lat_hist_t *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    size_t i = 0;
    while (i < FERRY__LAT_BUCKETS && s > ferry__lat_bounds_s[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

/* Non-cumulative counts per bucket (FERRY__LAT_BUCKETS + 1 of them), the sum and the count. */
void ferry__lat_hist_read(const ferry__lat_hist_t *h, uint64_t *buckets, uint64_t *sum_ns,
                          uint64_t *count);

/* Register @h as @owner's; remove it before @h is freed. Thread-safe. */
void ferry__lat_hist_register(ferry__lat_hist_t *h, const void *owner);
void ferry__lat_hist_unregister(ferry__lat_hist_t *h);
/* Read @owner's histogram: 0, or -1 when none is registered (all zero then). Thread-safe. */
int ferry__lat_hist_read_owner(const void *owner, uint64_t *buckets, uint64_t *sum_ns,
                               uint64_t *count);

#endif
