/* Bytes moved over the recent past, in buckets of a millisecond: what the link monitor compares
 * against NVML's counter (the pipeline's own bytes) and what the simulator's link counter
 * reports (its copies' bytes). One thread adds, any thread sums: each word is read and written
 * atomically (relaxed), so a sum taken while a bucket turns over may miss that bucket's newest
 * bytes; over a 20 ms window that is a few per cent at most, in one sample. */
#ifndef FERRY_RATE_RING_H
#define FERRY_RATE_RING_H

#include <stdatomic.h>
#include <stdint.h>

#define FERRY_RATE_BUCKETS   64u        /* 64 ms of history */
#define FERRY_RATE_BUCKET_NS 1000000ull /* 1 ms */

typedef struct ferry__rate_ring {
    _Atomic uint64_t
        epoch[FERRY_RATE_BUCKETS]; /* the millisecond a bucket holds, plus one (0: empty) */
    _Atomic uint64_t bytes[FERRY_RATE_BUCKETS];
} ferry__rate_ring_t;

/* @bytes moved at time @t_ns (a clock that only moves forward). */
static inline void ferry__rate_ring_add(ferry__rate_ring_t *r, uint64_t t_ns, uint64_t bytes)
{
    uint64_t ms = t_ns / FERRY_RATE_BUCKET_NS;
    unsigned i = (unsigned)(ms % FERRY_RATE_BUCKETS);
    if (atomic_load_explicit(&r->epoch[i], memory_order_relaxed) != ms + 1) {
        atomic_store_explicit(&r->bytes[i], 0, memory_order_relaxed);
        atomic_store_explicit(&r->epoch[i], ms + 1, memory_order_relaxed);
    }
    /* One thread adds: a load and a store, not a read-modify-write. */
    atomic_store_explicit(&r->bytes[i],
                          atomic_load_explicit(&r->bytes[i], memory_order_relaxed) + bytes,
                          memory_order_relaxed);
}

/* The bytes moved from @t0 to now, @t1 (t1 - t0 under the ring's 64 ms): the first bucket
 * gives the share of its millisecond after t0 (its bytes taken as spread evenly); the bucket
 * holding t1 counts whole, as what it holds so far all came before now. */
static inline double ferry__rate_ring_sum(const ferry__rate_ring_t *r, uint64_t t0, uint64_t t1)
{
    if (t1 <= t0)
        return 0;
    double sum = 0;
    for (uint64_t ms = t0 / FERRY_RATE_BUCKET_NS; ms * FERRY_RATE_BUCKET_NS < t1; ms++) {
        unsigned i = (unsigned)(ms % FERRY_RATE_BUCKETS);
        if (atomic_load_explicit(&r->epoch[i], memory_order_relaxed) != ms + 1)
            continue;
        uint64_t b0 = ms * FERRY_RATE_BUCKET_NS, b1 = b0 + FERRY_RATE_BUCKET_NS;
        double share = t0 > b0 && t1 >= b1 ? (double)(b1 - t0) / (double)FERRY_RATE_BUCKET_NS : 1;
        sum += (double)atomic_load_explicit(&r->bytes[i], memory_order_relaxed) * share;
    }
    return sum;
}

#endif
