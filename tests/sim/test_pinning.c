/* Pinning refused: on a model whose profile limits pinned host memory (host.pin_limit_bytes,
 * as a locked-memory limit does), a plain pool fails with a message that names the limit, a
 * pipeline falls back to pageable slots, says so in its stats, and still returns every byte
 * right, only slower. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry/workloads.h"
#include "testlib.h"

static void count(const ferry_batch_result_t *r, void *arg)
{
    int *c = arg;
    c[r->status == 0 ? 0 : 1]++;
}

/* 32 MiB of random floats through `scale` in 1 MiB chunks; returns the stats. */
static ferry_pipeline_stats_t stream(ferry_runtime_t *rt, uint64_t *seed)
{
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("scale");
    const size_t total = 32u << 20;
    test_bufs_t bufs = test_bufs_alloc(total);
    float *in = (float *)bufs.in, *out = (float *)bufs.out, *ref = (float *)bufs.ref;
    for (size_t i = 0; i < total / 4; i++)
        in[i] = (float)(test_rand(seed) % 2000000) / 1000.0f - 1000.0f;
    assert_int_equal(ferry_workload_reference(wl, in, ref, total), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 1u << 20);
    pc.depth = 4;
    ferry_pipeline_t *p = test_pipeline(&pc);
    int c[2] = {0, 0};
    test_submit_split(p, in, out, total, 4u << 20, count, c);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(c[0], 8);
    assert_int_equal(c[1], 0);
    assert_memory_equal(out, ref, total);
    test_bufs_free(&bufs);
    ferry_workload_destroy(wl);
    return st;
}

static void test_pinning_refused(void **state)
{
    (void)state;
    uint64_t seed = test_seed(7);
    char path[64];
    test_profile_with_pin_limit(path, sizeof(path), 1 << 20);
    ferry_runtime_t *rt = test_sim_runtime_on(path, NULL);
    unlink(path);
    ferry_device_t *dev = test_device(rt);

    /* A plain pool (no fallback asked for) fails, naming the limit. */
    ferry_pool_config_t pc = FERRY_POOL_CONFIG_INIT;
    pc.slot_bytes = 1u << 20;
    pc.slots = 4;
    ferry_pool_t *pool = NULL;
    assert_int_equal(ferry_pool_create(dev, &pc, &pool), FERRY_EBACKEND);
    assert_null(pool);
    assert_non_null(strstr(ferry_last_error(), "pin_limit_bytes"));
    /* With the fallback: pageable, and the stats say so. */
    pc.pageable_fallback = true;
    assert_int_equal(ferry_pool_create(dev, &pc, &pool), 0);
    ferry_pool_stats_t ps = FERRY_POOL_STATS_INIT;
    assert_int_equal(ferry_pool_stats(pool, &ps), 0);
    assert_false(ps.pinned);
    ferry_pool_destroy(pool);
    /* Within the limit, pinning works. */
    pc.slots = 1;
    pc.pageable_fallback = false;
    assert_int_equal(ferry_pool_create(dev, &pc, &pool), 0);
    assert_int_equal(ferry_pool_stats(pool, &ps), 0);
    assert_true(ps.pinned);
    ferry_pool_destroy(pool);

    /* A pipeline needs 8 MiB of slots: it runs on pageable ones, every byte right. */
    ferry_pipeline_stats_t limited = stream(rt, &seed);
    ferry_runtime_destroy(rt);
    rt = test_sim_runtime();
    ferry_pipeline_stats_t normal = stream(rt, &seed);
    ferry_runtime_destroy(rt);
    printf("# pageable slots: %.2f GB/s each way; pinned: %.2f\n", limited.gbps_h2d,
           normal.gbps_h2d);
    assert_false(limited.host_pinned);
    assert_true(normal.host_pinned);
    /* FACTS.md: pageable copies run at 6-13 GB/s, pinned ones at ~55. */
    assert_true(limited.gbps_h2d < 0.5 * normal.gbps_h2d);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_pinning_refused))
