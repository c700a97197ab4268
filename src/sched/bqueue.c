/* The bounded MPMC queue behind pipeline submission: a ring of fixed-size items under one mutex
 * with a condvar per direction. It applies backpressure (block or FERRY_EAGAIN) and never drops;
 * close() refuses new items but lets poppers drain the ones already accepted. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "sched/sched.h"

/* Pauses a blocking call spends watching the count before it sleeps on its condvar (~5 us at
 * 26 ns a pause). With producer and consumer on two cores, a full (or empty) queue otherwise
 * costs a futex sleep and wake per item: measured 1p1c, ~1 us an item without the spin. */
#define BQ_SPIN_PAUSES 200

struct ferry_bqueue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty; /* poppers wait here */
    pthread_cond_t not_full;  /* pushers wait here */
    size_t capacity;
    size_t item_size;
    size_t head;         /* index of the oldest item */
    atomic_size_t count; /* items queued; written under lock, also read without it to spin */
    unsigned pop_waiters, push_waiters; /* skip the signal path when nobody waits */
    /* Pushers waiting for room that no pop has released yet (ferry__bqueue_pushers_blocked):
     * spinning ones are released by any pop, sleeping ones by the pop that wakes them. */
    unsigned push_spinning, push_sleeping;
    uint64_t pop_gen, wake_gen;
    bool closed;
    unsigned char *items; /* capacity * item_size bytes */
};

static size_t count_of(ferry_bqueue_t *q)
{
    return atomic_load_explicit(&q->count, memory_order_relaxed);
}

/* Called without the lock: watch for room (@want_room) or an item for a few microseconds. The
 * caller rechecks under the lock, so a stale read costs nothing but the spin. */
static void spin_for(ferry_bqueue_t *q, bool want_room)
{
    for (unsigned i = 0; i < BQ_SPIN_PAUSES; i++) {
        size_t n = count_of(q);
        if (want_room ? n < q->capacity : n > 0)
            return;
        ferry__cpu_relax();
    }
}

/* The lock and the two conditions of @q; on failure none of them is left. */
static int init_sync(ferry_bqueue_t *q)
{
    if (ferry__mutex_init_adaptive(&q->lock) != 0)
        return -1;
    /* pop_timed's deadline is on CLOCK_MONOTONIC (ferry__deadline_after). */
    if (ferry__cond_init_monotonic(&q->not_empty) == 0) {
        if (pthread_cond_init(&q->not_full, NULL) == 0)
            return 0;
        pthread_cond_destroy(&q->not_empty);
    }
    pthread_mutex_destroy(&q->lock);
    return -1;
}

int ferry__bqueue_create(size_t capacity, size_t item_size, ferry_bqueue_t **out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "bqueue_create: out is NULL");
    if (capacity == 0 || item_size == 0)
        return ferry__error(FERRY_EINVAL,
                            "bqueue_create: capacity %zu and item_size %zu must be > 0", capacity,
                            item_size);
    if (capacity > SIZE_MAX / item_size)
        return ferry__error(FERRY_EINVAL, "bqueue_create: %zu items of %zu bytes overflow",
                            capacity, item_size);

    ferry_bqueue_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        goto out_err;
    q->items = malloc(capacity * item_size);
    if (q->items == NULL || init_sync(q) != 0)
        goto out_free;
    q->capacity = capacity;
    q->item_size = item_size;
    atomic_init(&q->count, 0);
    *out = q;
    return 0;

out_free:
    free(q->items);
    free(q);
out_err:
    return ferry__error(FERRY_ENOMEM, "bqueue_create: out of memory for %zu items of %zu bytes",
                        capacity, item_size);
}

void ferry__bqueue_destroy(ferry_bqueue_t *q)
{
    if (q == NULL)
        return;
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->lock);
    free(q->items);
    free(q);
}

/* Both helpers run with q->lock held and the queue known to have room / an item. */
static void put_locked(ferry_bqueue_t *q, const void *item)
{
    size_t tail = q->head + count_of(q);
    if (tail >= q->capacity)
        tail -= q->capacity;
    memcpy(q->items + tail * q->item_size, item, q->item_size);
    atomic_store_explicit(&q->count, count_of(q) + 1, memory_order_relaxed);
    if (q->pop_waiters > 0)
        pthread_cond_signal(&q->not_empty);
}

static void take_locked(ferry_bqueue_t *q, void *item)
{
    memcpy(item, q->items + q->head * q->item_size, q->item_size);
    q->head = q->head + 1 == q->capacity ? 0 : q->head + 1;
    atomic_store_explicit(&q->count, count_of(q) - 1, memory_order_relaxed);
    q->pop_gen++;
    q->push_spinning = 0;
    /* Wake blocked producers only once the queue is half empty, and all of them: one wake-up
     * then refills many slots instead of a context switch per item. */
    if (count_of(q) <= q->capacity / 2) {
        q->wake_gen++;
        q->push_sleeping = 0;
    }
    if (q->push_waiters > 0 && count_of(q) <= q->capacity / 2)
        pthread_cond_broadcast(&q->not_full);
}

int ferry__bqueue_push(ferry_bqueue_t *q, const void *item, bool wait, bool *waited)
{
    if (q == NULL || item == NULL)
        return ferry__error(FERRY_EINVAL, "bqueue_push: NULL %s", q == NULL ? "queue" : "item");
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    if (wait && !q->closed && count_of(q) == q->capacity) {
        if (waited != NULL)
            *waited = true;
        uint64_t gen = q->pop_gen;
        q->push_spinning++;
        pthread_mutex_unlock(&q->lock);
        spin_for(q, true);
        pthread_mutex_lock(&q->lock);
        if (gen == q->pop_gen)
            q->push_spinning--; /* still blocked: counted below as it sleeps */
    }
    while (!q->closed && count_of(q) == q->capacity) {
        if (!wait) {
            rc = FERRY_EAGAIN;
            break;
        }
        if (waited != NULL)
            *waited = true;
        uint64_t gen = q->wake_gen;
        q->push_waiters++;
        q->push_sleeping++;
        pthread_cond_wait(&q->not_full, &q->lock);
        q->push_waiters--;
        if (gen == q->wake_gen && q->push_sleeping > 0)
            q->push_sleeping--; /* not released by a pop (spurious, or the close) */
    }
    if (rc == 0 && q->closed)
        rc = FERRY_ECLOSED;
    if (rc == 0)
        put_locked(q, item);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

/* Pop with an optional absolute CLOCK_MONOTONIC deadline (NULL: none). */
static int pop_until(ferry_bqueue_t *q, void *item, bool wait, const struct timespec *deadline)
{
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    if (wait && !q->closed && count_of(q) == 0) {
        pthread_mutex_unlock(&q->lock);
        spin_for(q, false);
        pthread_mutex_lock(&q->lock);
    }
    while (rc == 0 && count_of(q) == 0) {
        if (q->closed) {
            rc = FERRY_ECLOSED;
        } else if (!wait) {
            rc = FERRY_EAGAIN;
        } else {
            q->pop_waiters++;
            int wr = deadline == NULL ? pthread_cond_wait(&q->not_empty, &q->lock)
                                      : pthread_cond_timedwait(&q->not_empty, &q->lock, deadline);
            q->pop_waiters--;
            /* A timed-out wait may have consumed a signal meant for another popper (POSIX
             * allows it), so an item that is there now is taken rather than left for a
             * sleeper. */
            if (wr == ETIMEDOUT && count_of(q) == 0 && !q->closed)
                rc = FERRY_ETIMEDOUT;
        }
    }
    if (rc == 0)
        take_locked(q, item);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int ferry__bqueue_pop(ferry_bqueue_t *q, void *item, bool wait)
{
    if (q == NULL || item == NULL)
        return ferry__error(FERRY_EINVAL, "bqueue_pop: NULL %s", q == NULL ? "queue" : "item");
    return pop_until(q, item, wait, NULL);
}

int ferry__bqueue_pop_timed(ferry_bqueue_t *q, void *item, uint64_t timeout_ns)
{
    if (q == NULL || item == NULL)
        return ferry__error(FERRY_EINVAL, "bqueue_pop_timed: NULL %s",
                            q == NULL ? "queue" : "item");
    if (timeout_ns == 0) {
        int rc = pop_until(q, item, false, NULL);
        return rc == FERRY_EAGAIN ? FERRY_ETIMEDOUT : rc;
    }
    struct timespec dl;
    ferry__deadline_after(timeout_ns, &dl);
    return pop_until(q, item, true, &dl);
}

void ferry__bqueue_close(ferry_bqueue_t *q)
{
    if (q == NULL)
        return;
    ferry__flag_set_wake(&q->lock, &q->closed, &q->not_empty, &q->not_full);
}

unsigned ferry__bqueue_pushers_blocked(ferry_bqueue_t *q)
{
    if (q == NULL)
        return 0;
    pthread_mutex_lock(&q->lock);
    unsigned n = q->push_spinning + q->push_sleeping;
    pthread_mutex_unlock(&q->lock);
    return n;
}

size_t ferry__bqueue_len(ferry_bqueue_t *q)
{
    if (q == NULL)
        return 0;
    pthread_mutex_lock(&q->lock);
    size_t n = count_of(q);
    pthread_mutex_unlock(&q->lock);
    return n;
}
