/* The bounded submission queue: FIFO order across wrap-around, capacity and FERRY_EAGAIN
 * without losing the refused item, blocking push and *waited, timed pops, close waking both
 * sides while still delivering what was accepted, and a 4 x 4 MPMC stress: exactly once. */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define STRESS_PER_PRODUCER 100000u
#define STRESS_PRODUCERS    4
#define STRESS_CONSUMERS    4

struct item {
    uint64_t id;
    char pad[20]; /* an item size that is not a power of two */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    usleep(ms * 1000u);
}

static int push_id(ferry_bqueue_t *q, uint64_t id, bool wait, bool *waited)
{
    struct item it;
    memset(&it, 0, sizeof(it));
    it.id = id;
    memset(it.pad, (int)(id & 0x7f), sizeof(it.pad));
    return ferry__bqueue_push(q, &it, wait, waited);
}

/* Pops one item and checks its padding survived the copy; returns the id or UINT64_MAX. */
static uint64_t pop_id(ferry_bqueue_t *q, bool wait, int *rc)
{
    struct item it;
    memset(&it, 0xee, sizeof(it));
    *rc = ferry__bqueue_pop(q, &it, wait);
    if (*rc != 0)
        return UINT64_MAX;
    for (size_t i = 0; i < sizeof(it.pad); i++)
        if (it.pad[i] != (char)(it.id & 0x7f))
            return UINT64_MAX - 1;
    return it.id;
}

/* A queue of @capacity items; fails the test when it cannot be made. */
static ferry_bqueue_t *new_queue(size_t capacity)
{
    ferry_bqueue_t *q = NULL;
    assert_int_equal(ferry__bqueue_create(capacity, sizeof(struct item), &q), 0);
    return q;
}

static void test_arguments(void **state)
{
    (void)state;
    ferry_bqueue_t *q = NULL;
    assert_int_equal(ferry__bqueue_create(0, 8, &q), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_create(8, 0, &q), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_create(SIZE_MAX / 2, 16, &q), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_create(8, 8, NULL), FERRY_EINVAL);
    assert_null(q);
    assert_int_equal(ferry__bqueue_create(4, sizeof(struct item), &q), 0);
    struct item it = {0};
    assert_int_equal(ferry__bqueue_push(NULL, &it, false, NULL), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_push(q, NULL, false, NULL), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_pop(q, NULL, false), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_pop_timed(NULL, &it, 1), FERRY_EINVAL);
    assert_int_equal(ferry__bqueue_len(q), 0);
    ferry__bqueue_destroy(q);
    ferry__bqueue_destroy(NULL);
}

static void test_fifo_order(void **state)
{
    (void)state;
    ferry_bqueue_t *q = new_queue(8);
    int rc;
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(push_id(q, i, false, NULL), 0);
    assert_int_equal(ferry__bqueue_len(q), 8);
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(pop_id(q, false, &rc), i);
    assert_int_equal(ferry__bqueue_len(q), 0);
    assert_int_equal(pop_id(q, false, &rc), UINT64_MAX);
    assert_int_equal(rc, FERRY_EAGAIN);

    /* Interleaved, so head and tail wrap the ring many times at every fill level. */
    uint64_t in = 100, out = 100;
    for (int round = 0; round < 200; round++) {
        int pushes = 1 + round % 8;
        for (int k = 0; k < pushes && ferry__bqueue_len(q) < 8; k++)
            assert_int_equal(push_id(q, in++, false, NULL), 0);
        int pops = 1 + (round * 7) % 8;
        for (int k = 0; k < pops && ferry__bqueue_len(q) > 0; k++)
            assert_int_equal(pop_id(q, false, &rc), out++);
        assert_int_equal(ferry__bqueue_len(q), in - out);
    }
    while (out < in)
        assert_int_equal(pop_id(q, false, &rc), out++);
    ferry__bqueue_destroy(q);
}

static void test_capacity_and_eagain(void **state)
{
    (void)state;
    ferry_bqueue_t *q = new_queue(4);
    int rc;
    bool waited = false;
    for (uint64_t i = 1; i <= 4; i++)
        assert_int_equal(push_id(q, i, false, &waited), 0);
    assert_false(waited);
    /* Full: refused, nothing of it enters, nothing queued is disturbed. */
    assert_int_equal(push_id(q, 5, false, &waited), FERRY_EAGAIN);
    assert_int_equal(push_id(q, 5, false, NULL), FERRY_EAGAIN);
    assert_false(waited);
    assert_int_equal(ferry__bqueue_len(q), 4);
    assert_int_equal(pop_id(q, false, &rc), 1);
    /* The caller still holds item 5: the retry goes in, exactly once, behind 2..4. */
    assert_int_equal(push_id(q, 5, false, NULL), 0);
    assert_int_equal(push_id(q, 6, false, NULL), FERRY_EAGAIN);
    for (uint64_t i = 2; i <= 5; i++)
        assert_int_equal(pop_id(q, false, &rc), i);
    assert_int_equal(pop_id(q, false, &rc), UINT64_MAX);
    assert_int_equal(rc, FERRY_EAGAIN);

    /* A capacity of one. */
    ferry_bqueue_t *one = new_queue(1);
    assert_int_equal(push_id(one, 7, false, NULL), 0);
    assert_int_equal(push_id(one, 8, false, NULL), FERRY_EAGAIN);
    assert_int_equal(pop_id(one, true, &rc), 7);
    assert_int_equal(push_id(one, 8, false, NULL), 0);
    assert_int_equal(pop_id(one, false, &rc), 8);
    ferry__bqueue_destroy(one);
    ferry__bqueue_destroy(q);
}

/* ---- blocking and close ------------------------------------------------------------------ */

struct blocker {
    ferry_bqueue_t *q;
    uint64_t id;
    bool waited;
    int rc;
    uint64_t got;
    atomic_bool started, returned;
};

/* Let @n blockers reach their blocking call: each has started (a loaded 2-core machine may
 * take long to schedule a new thread), then 50 ms more for the call itself. */
static void settle(struct blocker *b, int n)
{
    for (int i = 0; i < n; i++)
        while (!atomic_load(&b[i].started))
            sleep_ms(1);
    sleep_ms(50);
}

static void *push_blocking(void *p)
{
    struct blocker *b = p;
    atomic_store(&b->started, true);
    b->rc = push_id(b->q, b->id, true, &b->waited);
    atomic_store(&b->returned, true);
    return NULL;
}

static void *pop_blocking(void *p)
{
    struct blocker *b = p;
    atomic_store(&b->started, true);
    b->got = pop_id(b->q, true, &b->rc);
    atomic_store(&b->returned, true);
    return NULL;
}

static void blocker_init(struct blocker *b, ferry_bqueue_t *q, uint64_t id)
{
    memset(b, 0, sizeof(*b));
    b->q = q;
    b->id = id;
    b->rc = 12345;
    atomic_init(&b->started, false);
    atomic_init(&b->returned, false);
}

/* @n blockers (made by blocker_init) each run @fn on its own thread until all are blocked in
 * @q; closing @q must return every one of them with FERRY_ECLOSED. */
static void close_releases(ferry_bqueue_t *q, struct blocker *b, int n, void *(*fn)(void *))
{
    pthread_t th[4];
    assert_true(n <= 4);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&th[i], NULL, fn, &b[i]), 0);
    settle(b, n);
    for (int i = 0; i < n; i++)
        assert_false(atomic_load(&b[i].returned));
    ferry__bqueue_close(q);
    for (int i = 0; i < n; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(b[i].rc, FERRY_ECLOSED);
    }
}

static void test_blocking_push_waits(void **state)
{
    (void)state;
    ferry_bqueue_t *q = new_queue(2);
    int rc;
    assert_int_equal(push_id(q, 1, false, NULL), 0);
    assert_int_equal(push_id(q, 2, false, NULL), 0);
    struct blocker b;
    blocker_init(&b, q, 3);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, push_blocking, &b), 0);
    settle(&b, 1);
    assert_false(atomic_load(&b.returned)); /* still blocked on the full queue */
    assert_int_equal(pop_id(q, false, &rc), 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(b.rc, 0);
    assert_true(b.waited);
    assert_int_equal(pop_id(q, false, &rc), 2);
    assert_int_equal(pop_id(q, false, &rc), 3);

    /* A blocking push with room does not wait and leaves *waited alone. */
    bool waited = false;
    assert_int_equal(push_id(q, 4, true, &waited), 0);
    assert_false(waited);
    assert_int_equal(push_id(q, 5, true, NULL), 0);
    assert_int_equal(pop_id(q, true, &rc), 4);
    assert_int_equal(pop_id(q, true, &rc), 5);
    ferry__bqueue_destroy(q);
}

static void test_blocking_pop_and_timeout(void **state)
{
    (void)state;
    ferry_bqueue_t *q = new_queue(4);
    struct item it;

    uint64_t t0 = now_ns();
    assert_int_equal(ferry__bqueue_pop_timed(q, &it, 30000000u), FERRY_ETIMEDOUT);
    uint64_t waited_ns = now_ns() - t0;
    assert_true(waited_ns >= 29000000u);
    assert_int_equal(ferry__bqueue_pop_timed(q, &it, 0), FERRY_ETIMEDOUT);

    /* A blocked popper gets an item pushed later. */
    struct blocker b;
    blocker_init(&b, q, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pop_blocking, &b), 0);
    settle(&b, 1);
    assert_false(atomic_load(&b.returned));
    assert_int_equal(push_id(q, 77, false, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.got, 77);

    /* A timed pop returns the item as soon as it exists, well before a long timeout. */
    assert_int_equal(push_id(q, 78, false, NULL), 0);
    memset(&it, 0, sizeof(it));
    assert_int_equal(ferry__bqueue_pop_timed(q, &it, 10000000000u), 0);
    assert_int_equal(it.id, 78);
    /* A huge timeout must not overflow into the past. */
    assert_int_equal(push_id(q, 79, false, NULL), 0);
    assert_int_equal(ferry__bqueue_pop_timed(q, &it, UINT64_MAX), 0);
    assert_int_equal(it.id, 79);
    ferry__bqueue_destroy(q);
}

static void test_close_wakes_poppers(void **state)
{
    (void)state;
    ferry_bqueue_t *q = new_queue(4);
    struct blocker b[3];
    for (int i = 0; i < 3; i++)
        blocker_init(&b[i], q, 0);
    close_releases(q, b, 3, pop_blocking);
    struct item it;
    assert_int_equal(ferry__bqueue_pop(q, &it, false), FERRY_ECLOSED);
    assert_int_equal(ferry__bqueue_pop_timed(q, &it, 1000000u), FERRY_ECLOSED);
    assert_int_equal(push_id(q, 1, false, NULL), FERRY_ECLOSED);
    assert_int_equal(push_id(q, 1, true, NULL), FERRY_ECLOSED);
    ferry__bqueue_close(q); /* idempotent */
    ferry__bqueue_destroy(q);
}

static void test_close_wakes_pushers_and_keeps_items(void **state)
{
    (void)state;
    ferry_bqueue_t *q = new_queue(3);
    int rc;
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(push_id(q, i, false, NULL), 0);
    struct blocker b[2];
    for (int i = 0; i < 2; i++)
        blocker_init(&b[i], q, 100 + (uint64_t)i);
    close_releases(q, b, 2, push_blocking);
    for (int i = 0; i < 2; i++)
        assert_true(b[i].waited);
    /* Accepted before the close: still delivered, in order, even to blocking and timed pops. */
    assert_int_equal(ferry__bqueue_len(q), 3);
    assert_int_equal(pop_id(q, true, &rc), 1);
    assert_int_equal(pop_id(q, false, &rc), 2);
    struct item it;
    assert_int_equal(ferry__bqueue_pop_timed(q, &it, 1000000u), 0);
    assert_int_equal(it.id, 3);
    assert_int_equal(pop_id(q, true, &rc), UINT64_MAX);
    assert_int_equal(rc, FERRY_ECLOSED);
    ferry__bqueue_destroy(q);
}

/* ---- MPMC stress ------------------------------------------------------------------------- */

struct stress {
    ferry_bqueue_t *q;
    atomic_uchar *seen; /* [producer][seq] */
    int producer_rc[STRESS_PRODUCERS];
    size_t consumed[STRESS_CONSUMERS];
    int order_errors[STRESS_CONSUMERS];
    int bad_ids[STRESS_CONSUMERS];
    int last_rc[STRESS_CONSUMERS];
    size_t eagain_retries;
};

struct stress_arg {
    struct stress *s;
    int id;
    uint64_t seed;
};

static void *producer_main(void *p)
{
    struct stress_arg *a = p;
    uint64_t rng = a->seed;
    for (uint64_t i = 0; i < STRESS_PER_PRODUCER; i++) {
        uint64_t id = ((uint64_t)a->id << 32) | i;
        /* Mix blocking pushes with non-blocking ones retried on FERRY_EAGAIN. */
        int rc;
        if (test_rand(&rng) & 1) {
            rc = push_id(a->s->q, id, true, NULL);
        } else {
            while ((rc = push_id(a->s->q, id, false, NULL)) == FERRY_EAGAIN)
                sched_yield();
        }
        if (rc != 0) {
            a->s->producer_rc[a->id] = rc;
            break;
        }
    }
    return NULL;
}

static void *consumer_main(void *p)
{
    struct stress_arg *a = p;
    struct stress *s = a->s;
    uint64_t last_seq[STRESS_PRODUCERS];
    bool any[STRESS_PRODUCERS] = {false};
    uint64_t rng = a->seed;
    for (;;) {
        int rc;
        uint64_t id;
        if (test_rand(&rng) % 4 == 0) {
            struct item it;
            memset(&it, 0, sizeof(it));
            rc = ferry__bqueue_pop_timed(s->q, &it, 1000000u);
            if (rc == FERRY_ETIMEDOUT)
                continue;
            id = it.id;
        } else {
            id = pop_id(s->q, true, &rc);
        }
        if (rc != 0) {
            s->last_rc[a->id] = rc;
            break;
        }
        uint64_t prod = id >> 32, seq = id & 0xffffffffu;
        if (prod >= STRESS_PRODUCERS || seq >= STRESS_PER_PRODUCER) {
            s->bad_ids[a->id]++;
            continue;
        }
        /* One consumer sees each producer's items in the order they were pushed. */
        if (any[prod] && seq <= last_seq[prod])
            s->order_errors[a->id]++;
        any[prod] = true;
        last_seq[prod] = seq;
        atomic_fetch_add_explicit(&s->seen[prod * STRESS_PER_PRODUCER + seq], 1,
                                  memory_order_relaxed);
        s->consumed[a->id]++;
    }
    return NULL;
}

static void test_mpmc_stress(void **state)
{
    (void)state;
    uint64_t seed = test_seed(0xb0b0);
    struct stress s;
    memset(&s, 0, sizeof(s));
    const size_t total = (size_t)STRESS_PRODUCERS * STRESS_PER_PRODUCER;
    s.seen = calloc(total, sizeof(*s.seen));
    assert_non_null(s.seen);
    assert_int_equal(ferry__bqueue_create(64, sizeof(struct item), &s.q), 0);
    pthread_t prod[STRESS_PRODUCERS], cons[STRESS_CONSUMERS];
    struct stress_arg pa[STRESS_PRODUCERS], ca[STRESS_CONSUMERS];
    for (int i = 0; i < STRESS_CONSUMERS; i++) {
        ca[i] = (struct stress_arg){.s = &s, .id = i, .seed = seed + 100 + (uint64_t)i};
        assert_int_equal(pthread_create(&cons[i], NULL, consumer_main, &ca[i]), 0);
    }
    for (int i = 0; i < STRESS_PRODUCERS; i++) {
        pa[i] = (struct stress_arg){.s = &s, .id = i, .seed = seed + (uint64_t)i};
        assert_int_equal(pthread_create(&prod[i], NULL, producer_main, &pa[i]), 0);
    }
    for (int i = 0; i < STRESS_PRODUCERS; i++)
        assert_int_equal(pthread_join(prod[i], NULL), 0);
    ferry__bqueue_close(s.q);
    for (int i = 0; i < STRESS_CONSUMERS; i++)
        assert_int_equal(pthread_join(cons[i], NULL), 0);

    size_t consumed = 0;
    for (int i = 0; i < STRESS_PRODUCERS; i++)
        assert_int_equal(s.producer_rc[i], 0);
    for (int i = 0; i < STRESS_CONSUMERS; i++) {
        assert_int_equal(s.last_rc[i], FERRY_ECLOSED);
        assert_int_equal(s.order_errors[i], 0);
        assert_int_equal(s.bad_ids[i], 0);
        consumed += s.consumed[i];
    }
    size_t lost = 0, dup = 0;
    for (size_t i = 0; i < total; i++) {
        unsigned char n = atomic_load(&s.seen[i]);
        lost += n == 0;
        dup += n > 1;
    }
    printf("# consumed %zu %zu %zu %zu, lost %zu, duplicated %zu\n", s.consumed[0], s.consumed[1],
           s.consumed[2], s.consumed[3], lost, dup);
    assert_int_equal(lost, 0);
    assert_int_equal(dup, 0);
    assert_int_equal(consumed, total);
    assert_int_equal(ferry__bqueue_len(s.q), 0);
    ferry__bqueue_destroy(s.q);
    free(s.seen);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_arguments), cmocka_unit_test(test_fifo_order),
          cmocka_unit_test(test_capacity_and_eagain), cmocka_unit_test(test_blocking_push_waits),
          cmocka_unit_test(test_blocking_pop_and_timeout),
          cmocka_unit_test(test_close_wakes_poppers),
          cmocka_unit_test(test_close_wakes_pushers_and_keeps_items),
          cmocka_unit_test(test_mpmc_stress))
