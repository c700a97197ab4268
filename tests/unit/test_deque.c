/* The Chase-Lev deque: LIFO pops and FIFO steals on one thread, growth that keeps every item
 * (also when top has moved, so the live range wraps the array), and an owner racing three
 * thieves over 1,000,000 items where each item must be taken exactly once. */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CONCURRENT_ITEMS 1000000u
#define THIEVES          3

static void *item(uintptr_t i)
{
    return (void *)i;
}

static void test_lifo_pop_fifo_steal(void **state)
{
    (void)state;
    ferry_deque_t *d = NULL;
    assert_int_equal(ferry__deque_create(4, &d), 0);
    assert_non_null(d);
    assert_true(ferry__deque_is_empty(d));
    assert_null(ferry__deque_pop(d));
    assert_null(ferry__deque_steal(d));

    for (uintptr_t i = 1; i <= 10; i++) /* 10 > 4: grows twice */
        assert_int_equal(ferry__deque_push(d, item(i)), 0);
    assert_false(ferry__deque_is_empty(d));
    assert_ptr_equal(ferry__deque_pop(d), item(10));
    assert_ptr_equal(ferry__deque_steal(d), item(1));
    assert_ptr_equal(ferry__deque_steal(d), item(2));
    assert_ptr_equal(ferry__deque_pop(d), item(9));
    assert_ptr_equal(ferry__deque_pop(d), item(8));
    assert_ptr_equal(ferry__deque_steal(d), item(3));
    /* 4..7 remain: LIFO from the bottom. */
    for (uintptr_t i = 7; i >= 4; i--)
        assert_ptr_equal(ferry__deque_pop(d), item(i));
    assert_null(ferry__deque_pop(d));
    assert_null(ferry__deque_steal(d));
    assert_true(ferry__deque_is_empty(d));

    /* Reusable after emptying. */
    assert_int_equal(ferry__deque_push(d, item(42)), 0);
    assert_ptr_equal(ferry__deque_steal(d), item(42));
    assert_null(ferry__deque_pop(d));
    ferry__deque_destroy(d);
}

static void test_growth_preserves_items(void **state)
{
    (void)state;
    const uintptr_t n = 100000;
    ferry_deque_t *d = NULL;
    assert_int_equal(ferry__deque_create(2, &d), 0);
    for (uintptr_t i = 1; i <= n; i++)
        assert_int_equal(ferry__deque_push(d, item(i)), 0);
    for (uintptr_t i = 1; i <= n / 2; i++)
        assert_ptr_equal(ferry__deque_steal(d), item(i));
    for (uintptr_t i = n; i > n / 2; i--)
        assert_ptr_equal(ferry__deque_pop(d), item(i));
    assert_null(ferry__deque_pop(d));
    assert_null(ferry__deque_steal(d));
    ferry__deque_destroy(d);
}

/* Growth while top is not at slot 0: the copy must follow the indices, not the array start. */
static void test_growth_with_wrapped_range(void **state)
{
    (void)state;
    ferry_deque_t *d = NULL;
    assert_int_equal(ferry__deque_create(8, &d), 0);
    uintptr_t next_push = 1, next_steal = 1;
    for (int round = 0; round < 50; round++) {
        /* Push more than we steal, so the live range slides and the array keeps growing. */
        for (int k = 0; k < 7 + round; k++)
            assert_int_equal(ferry__deque_push(d, item(next_push++)), 0);
        for (int k = 0; k < 5 + round / 2; k++)
            assert_ptr_equal(ferry__deque_steal(d), item(next_steal++));
    }
    while (next_steal < next_push)
        assert_ptr_equal(ferry__deque_steal(d), item(next_steal++));
    assert_null(ferry__deque_steal(d));
    ferry__deque_destroy(d);
}

static void test_create_arguments(void **state)
{
    (void)state;
    ferry_deque_t *d = NULL;
    assert_int_equal(ferry__deque_create(64, NULL), FERRY_EINVAL);
    assert_int_equal(ferry__deque_create(SIZE_MAX, &d), FERRY_EINVAL);
    assert_null(d);
    /* 0 means the default; a non-power of two is rounded up; both work. */
    size_t caps[] = {0, 1, 3, 100};
    for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
        assert_int_equal(ferry__deque_create(caps[c], &d), 0);
        for (uintptr_t i = 1; i <= 300; i++)
            assert_int_equal(ferry__deque_push(d, item(i)), 0);
        for (uintptr_t i = 300; i >= 1; i--)
            assert_ptr_equal(ferry__deque_pop(d), item(i));
        ferry__deque_destroy(d);
        d = NULL;
    }
    /* NULL would come back as "empty": refused, and nothing enters. */
    assert_int_equal(ferry__deque_create(4, &d), 0);
    assert_int_equal(ferry__deque_push(d, NULL), FERRY_EINVAL);
    assert_true(ferry__deque_is_empty(d));
    ferry__deque_destroy(d);
    ferry__deque_destroy(NULL);
}

/* ---- one owner, three thieves ---------------------------------------------------------------- */

/* Items are pointers into payload[]: the owner writes payload[i] with plain stores before the
 * push, takers read it with plain loads, so a missing happens-before edge is a TSan report. */
#define PAYLOAD_MAGIC 0x5eed5eed00000000ull

struct race {
    ferry_deque_t *d;
    uint64_t *payload;
    atomic_bool done; /* the owner will push no more and has emptied the deque */
    atomic_size_t stolen_total;
    unsigned char *taken[THIEVES + 1]; /* per-thread tally, index = item - 1 */
    size_t count[THIEVES + 1];
    int bad_item[THIEVES + 1]; /* an out-of-range pointer came back */
};

struct thief_arg {
    struct race *r;
    int id;
};

/* Index of the item @p points at, or SIZE_MAX when it is not one of ours or its payload is
 * wrong. */
static size_t item_index(struct race *r, void *p)
{
    uint64_t *x = p;
    if (x < r->payload || x >= r->payload + CONCURRENT_ITEMS)
        return SIZE_MAX;
    size_t i = (size_t)(x - r->payload);
    return *x == (PAYLOAD_MAGIC | i) ? i : SIZE_MAX;
}

static void *thief_main(void *p)
{
    struct thief_arg *a = p;
    struct race *r = a->r;
    unsigned char *taken = r->taken[a->id];
    for (;;) {
        bool done = atomic_load_explicit(&r->done, memory_order_acquire);
        void *x = ferry__deque_steal(r->d);
        if (x != NULL) {
            size_t i = item_index(r, x);
            if (i == SIZE_MAX) {
                r->bad_item[a->id] = 1;
                continue;
            }
            taken[i]++;
            r->count[a->id]++;
            atomic_fetch_add_explicit(&r->stolen_total, 1, memory_order_relaxed);
        } else if (done) {
            break;
        }
    }
    return NULL;
}

static void owner_take(struct race *r, void *x)
{
    size_t i = item_index(r, x);
    if (i == SIZE_MAX) {
        r->bad_item[0] = 1;
        return;
    }
    r->taken[0][i]++;
    r->count[0]++;
}

static void test_owner_and_three_thieves(void **state)
{
    (void)state;
    uint64_t rng = test_seed(0xdec0de);
    struct race r;
    memset(&r, 0, sizeof(r));
    atomic_init(&r.done, false);
    atomic_init(&r.stolen_total, 0);
    assert_int_equal(ferry__deque_create(16, &r.d), 0);
    r.payload = malloc(CONCURRENT_ITEMS * sizeof(*r.payload));
    assert_non_null(r.payload);
    for (int i = 0; i <= THIEVES; i++) {
        r.taken[i] = calloc(CONCURRENT_ITEMS, 1);
        assert_non_null(r.taken[i]);
    }
    pthread_t th[THIEVES];
    struct thief_arg args[THIEVES];
    for (int i = 0; i < THIEVES; i++) {
        args[i].r = &r;
        args[i].id = i + 1;
        assert_int_equal(pthread_create(&th[i], NULL, thief_main, &args[i]), 0);
    }

    size_t next = 0;
    bool waited_for_thieves = false;
    while (next < CONCURRENT_ITEMS) {
        /* Bursts of pushes then pops, often down to empty: the race for the last item. Short
         * bursts keep the deque near empty, where owner and thieves meet. */
        bool short_burst = test_rand(&rng) & 1;
        uint64_t burst = test_rand_range(&rng, 1, short_burst ? 3 : 64);
        for (uint64_t k = 0; k < burst && next < CONCURRENT_ITEMS; k++, next++) {
            r.payload[next] = PAYLOAD_MAGIC | next;
            assert_int_equal(ferry__deque_push(r.d, &r.payload[next]), 0);
        }
        uint64_t pops = test_rand_range(&rng, 0, short_burst ? 3 : 64);
        for (uint64_t k = 0; k < pops; k++) {
            void *x = ferry__deque_pop(r.d);
            if (x == NULL)
                break;
            owner_take(&r, x);
        }
        /* Halfway, make sure the thieves have run at all (two cores, four threads). */
        if (!waited_for_thieves && next > CONCURRENT_ITEMS / 2) {
            waited_for_thieves = true;
            for (int spin = 0; spin < 5000000; spin++) {
                if (atomic_load_explicit(&r.stolen_total, memory_order_relaxed) > 0)
                    break;
                sched_yield();
            }
        }
    }
    for (;;) {
        void *x = ferry__deque_pop(r.d);
        if (x == NULL)
            break;
        owner_take(&r, x);
    }
    atomic_store_explicit(&r.done, true, memory_order_release);
    for (int i = 0; i < THIEVES; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);

    size_t total = 0;
    for (int i = 0; i <= THIEVES; i++) {
        assert_int_equal(r.bad_item[i], 0);
        total += r.count[i];
    }
    size_t lost = 0, dup = 0, first_bad = 0;
    for (size_t x = 0; x < CONCURRENT_ITEMS; x++) {
        unsigned n = 0;
        for (int i = 0; i <= THIEVES; i++)
            n += r.taken[i][x];
        if (n != 1 && first_bad == 0)
            first_bad = x + 1;
        lost += n == 0;
        dup += n > 1;
    }
    printf("# owner %zu, thieves %zu %zu %zu, lost %zu, duplicated %zu\n", r.count[0], r.count[1],
           r.count[2], r.count[3], lost, dup);
    assert_int_equal(lost, 0);
    assert_int_equal(dup, 0);
    assert_int_equal(first_bad, 0);
    assert_int_equal(total, CONCURRENT_ITEMS);
    assert_true(r.count[1] + r.count[2] + r.count[3] > 0);
    assert_true(ferry__deque_is_empty(r.d));
    for (int i = 0; i <= THIEVES; i++)
        free(r.taken[i]);
    free(r.payload);
    ferry__deque_destroy(r.d);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_lifo_pop_fifo_steal),
          cmocka_unit_test(test_growth_preserves_items),
          cmocka_unit_test(test_growth_with_wrapped_range), cmocka_unit_test(test_create_arguments),
          cmocka_unit_test(test_owner_and_three_thieves))
