/* Several fault items on one kernel: every item is evaluated and the most severe that fired
 * wins (sticky > hang-hard > hang > kernel), whatever the order they are written in. Before,
 * the first item that matched shadowed the rest: kernel@n=40,sticky@n=40 never went sticky. */
#include <string.h>

#include "ferry/workloads.h"
#include "testlib.h"

static void done(const ferry_batch_result_t *r, void *arg)
{
    int *n = arg;
    if (r->status == 0)
        n[0]++;
    else
        n[1]++;
}

/* 64 batches of one 64 KiB chunk each through the copy workload with @inject. */
static ferry_pipeline_stats_t run(const char *inject)
{
    const char *const kv[] = {"inject", inject, "seed", "3", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("copy");
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 64u << 10);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static unsigned char in[64u << 10], out[64u << 10];
    int n[2] = {0, 0};
    for (int i = 0; i < 64; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in;
        b.out = out;
        b.bytes = sizeof(in);
        assert_int_equal(ferry_pipeline_submit(p, &b, done, n, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(n[0] + n[1], 64);
    assert_int_equal(n[1], 0); /* the copy stage has a CPU fallback: nothing fails */
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    print_message("%-28s gpu_lost %d, cpu chunks %llu, failure records %llu\n", inject,
                  (int)st.gpu_lost, (unsigned long long)st.chunks_cpu,
                  (unsigned long long)st.failure_records);
    return st;
}

static void test_sticky_wins_in_either_order(void **state)
{
    (void)state;
    ferry_pipeline_stats_t a = run("kernel@n=40,sticky@n=40");
    ferry_pipeline_stats_t b = run("sticky@n=40,kernel@n=40");
    assert_true(a.gpu_lost);
    assert_true(b.gpu_lost);
    /* The kernel item alone: a retry, no loss. */
    ferry_pipeline_stats_t c = run("kernel@n=40");
    assert_false(c.gpu_lost);
    assert_true(c.failure_records >= 1);
}

static void test_random_kernel_faults_do_not_shadow_sticky(void **state)
{
    (void)state;
    /* Whatever the p= item draws at the 40th kernel, the sticky item fires there. */
    for (int i = 0; i < 3; i++) {
        const char *const specs[] = {"kernel@p=0.3,sticky@n=40", "kernel@p=1,sticky@n=40",
                                     "kernel@p=0.9,sticky@n=40"};
        ferry_pipeline_stats_t st = run(specs[i]);
        assert_true(st.gpu_lost);
    }
}

static void test_hang_beats_kernel(void **state)
{
    (void)state;
    ferry_pipeline_stats_t st = run("kernel@n=10,hang@n=10");
    assert_true(st.deadlines_passed >= 1); /* it hung (and was stopped), not a plain error */
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_sticky_wins_in_either_order),
          cmocka_unit_test(test_random_kernel_faults_do_not_shadow_sticky),
          cmocka_unit_test(test_hang_beats_kernel))
