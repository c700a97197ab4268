/* The pinned pool: the sizing rule, O(1) slots handed out and returned, exhaustion that waits
 * or says FERRY_EAGAIN (never hands out a slot twice), bad frees refused, and thread safety. */
#include <pthread.h>
#include <string.h>

#include "testlib.h"

static void test_sizing_rule(void **state)
{
    (void)state;
    size_t b = 0;
    assert_int_equal(ferry_pool_bytes_for(3, 8 << 20, &b), 0);
    assert_int_equal(b, 3ull * (8 << 20) * 2);
    assert_int_equal(ferry_pool_bytes_for(0, 1, &b), FERRY_EINVAL);
    assert_int_equal(ferry_pool_bytes_for(1, 0, &b), FERRY_EINVAL);
    assert_int_equal(ferry_pool_bytes_for(1, 1, NULL), FERRY_EINVAL);
    assert_int_equal(ferry_pool_bytes_for(SIZE_MAX / 2 + 1, 1, &b), FERRY_ERANGE);
    assert_int_equal(ferry_pool_bytes_for(1ull << 32, 1ull << 32, &b), FERRY_ERANGE);
}

static void test_alloc_free_exhaust(void **state)
{
    (void)state;
    ferry_pool_config_t cfg = FERRY_POOL_CONFIG_INIT;
    cfg.slot_bytes = 5000; /* rounded up to the alignment */
    cfg.slots = 4;
    ferry_pool_t *p = NULL;
    assert_int_equal(ferry_pool_create(test_dev, &cfg, &p), 0);
    ferry_pool_stats_t st = FERRY_POOL_STATS_INIT;
    assert_int_equal(ferry_pool_stats(p, &st), 0);
    assert_int_equal(st.slot_bytes, 8192);
    assert_int_equal(st.slots, 4);
    assert_int_equal(st.bytes, 4 * 8192);
    void *s[5] = {0};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ferry_pool_alloc(p, 8192, false, &s[i]), 0);
        assert_int_equal((uintptr_t)s[i] % 4096, 0);
        assert_true(ferry_pool_owns(p, s[i], 8192));
        memset(s[i], i + 1, 8192);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(s[i], s[j]);
    }
    assert_int_equal(ferry_pool_alloc(p, 1, false, &s[4]), FERRY_EAGAIN);
    assert_null(s[4]);
    /* every slot kept its own bytes: no overlap */
    for (int i = 0; i < 4; i++)
        assert_int_equal(((unsigned char *)s[i])[8191], i + 1);
    assert_int_equal(ferry_pool_stats(p, &st), 0);
    assert_int_equal(st.in_use, 4);
    assert_int_equal(st.eagain, 1);
    assert_int_equal(ferry_pool_free(p, s[2]), 0);
    assert_int_equal(ferry_pool_free(p, s[2]), FERRY_EINVAL); /* double free */
    assert_int_equal(ferry_pool_free(p, (char *)s[1] + 1), FERRY_EINVAL);
    int x;
    assert_int_equal(ferry_pool_free(p, &x), FERRY_EINVAL);
    assert_int_equal(ferry_pool_alloc(p, 8193, false, &s[4]), FERRY_EINVAL);
    assert_int_equal(ferry_pool_alloc(p, 0, false, &s[4]), FERRY_EINVAL);
    assert_int_equal(ferry_pool_alloc(p, 100, false, &s[4]), 0);
    assert_ptr_equal(s[4], s[2]);
    assert_false(ferry_pool_owns(p, &x, 1));
    assert_false(ferry_pool_owns(p, s[0], 4 * 8192 + 1));
    for (int i = 0; i < 5; i++)
        if (i != 2)
            assert_int_equal(ferry_pool_free(p, s[i]), 0);
    assert_int_equal(ferry_pool_stats(p, &st), 0);
    assert_int_equal(st.in_use, 0);
    assert_int_equal(st.peak_in_use, 4);
    assert_int_equal(st.allocs, 5);
    ferry_pool_destroy(p);
    ferry_pool_destroy(NULL);
}

static void test_bad_config(void **state)
{
    (void)state;
    ferry_pool_t *p = (ferry_pool_t *)0x1;
    ferry_pool_config_t cfg = FERRY_POOL_CONFIG_INIT;
    cfg.align = 3000;
    assert_int_equal(ferry_pool_create(test_dev, &cfg, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "power of two"));
    cfg.align = 0;
    cfg.bytes = 100;
    cfg.slot_bytes = 4096;
    assert_int_equal(ferry_pool_create(test_dev, &cfg, &p), FERRY_EINVAL);
    cfg.bytes = 0;
    cfg.slots = SIZE_MAX / 2;
    assert_int_equal(ferry_pool_create(test_dev, &cfg, &p), FERRY_ERANGE);
    ferry_pool_config_t unsized = {0};
    assert_int_equal(ferry_pool_create(test_dev, &unsized, &p), FERRY_EINVAL);
    assert_int_equal(ferry_pool_create(NULL, NULL, &p), FERRY_EINVAL);
    assert_int_equal(ferry_pool_create(test_dev, NULL, NULL), FERRY_EINVAL);
    assert_ptr_equal(p, (ferry_pool_t *)0x1);
    ferry_pool_stats_t st = {0};
    assert_int_equal(ferry_pool_stats(NULL, &st), FERRY_EINVAL);
}

typedef struct {
    ferry_pool_t *p;
    int iters;
    int errors;
} worker_arg_t;

static void *hammer(void *arg)
{
    worker_arg_t *w = arg;
    for (int i = 0; i < w->iters; i++) {
        void *s = NULL;
        if (ferry_pool_alloc(w->p, 64, true, &s) != 0) {
            w->errors++;
            continue;
        }
        /* a slot is ours alone: write a tag and check it survives */
        uintptr_t tag = (uintptr_t)w ^ (uintptr_t)i;
        memcpy(s, &tag, sizeof(tag));
        sched_yield();
        uintptr_t back;
        memcpy(&back, s, sizeof(back));
        if (back != tag)
            w->errors++;
        if (ferry_pool_free(w->p, s) != 0)
            w->errors++;
    }
    return NULL;
}

static void test_threads_wait_for_slots(void **state)
{
    (void)state;
    ferry_pool_config_t cfg = FERRY_POOL_CONFIG_INIT;
    cfg.slot_bytes = 4096;
    cfg.slots = 3; /* fewer slots than threads: allocations must wait */
    ferry_pool_t *p = NULL;
    assert_int_equal(ferry_pool_create(test_dev, &cfg, &p), 0);
    enum { T = 6 };
    pthread_t th[T];
    worker_arg_t args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (worker_arg_t){.p = p, .iters = 3000};
        pthread_create(&th[i], NULL, hammer, &args[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].errors, 0);
    }
    ferry_pool_stats_t st = FERRY_POOL_STATS_INIT;
    assert_int_equal(ferry_pool_stats(p, &st), 0);
    assert_int_equal(st.in_use, 0);
    assert_int_equal(st.allocs, T * 3000);
    assert_true(st.peak_in_use <= 3);
    ferry_pool_destroy(p);
}

TEST_MAIN(test_sim_setup, test_sim_teardown, cmocka_unit_test(test_sizing_rule),
          cmocka_unit_test(test_alloc_free_exhaust), cmocka_unit_test(test_bad_config),
          cmocka_unit_test(test_threads_wait_for_slots))
