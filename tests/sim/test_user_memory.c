/* The user's own memory on the CPU and pinned paths: buffers from the user's ferry_pool are
 * pinned and go over the link directly (not staged as if pageable), and a stage of granularity 4
 * never sees a pointer that is not 4-byte aligned, even when the batch's own buffers are not and
 * the chunks run on the CPU (after a sticky fault). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static atomic_int misaligned;

/* Like examples/stream_scale.c: reads and writes floats through typed pointers. */
static int cpu_scale(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    if (((uintptr_t)a->in | (uintptr_t)a->out) & 3u)
        atomic_fetch_add(&misaligned, 1);
    size_t n = a->bytes / 4;
    unsigned char *o = a->out;
    const unsigned char *in = a->in;
    for (size_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, in + 4 * i, 4); /* byte-wise, so the test itself stays defined */
        x *= 2.0f;
        memcpy(o + 4 * i, &x, 4);
    }
    return 0;
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    assert_int_equal(r->status, 0);
    atomic_fetch_add((atomic_int *)arg, 1);
}

static ferry_pipeline_t *make(ferry_device_t *dev, const ferry_stage_t *st)
{
    ferry_pipeline_config_t pc = test_pipeline_config(dev, st, 256u << 10);
    ferry_pipeline_t *p = test_pipeline(&pc);
    return p;
}

static void test_user_pool_is_pinned(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    ferry_pool_config_t pcfg = FERRY_POOL_CONFIG_INIT;
    pcfg.slot_bytes = 2u << 20;
    pcfg.slots = 4;
    ferry_pool_t *pool = NULL;
    assert_int_equal(ferry_pool_create(dev, &pcfg, &pool), 0);
    void *in = NULL, *out = NULL;
    const size_t n = 2u << 20;
    assert_int_equal(ferry_pool_alloc(pool, n, false, &in), 0);
    assert_int_equal(ferry_pool_alloc(pool, n, false, &out), 0);
    for (size_t i = 0; i < n / 4; i++)
        ((float *)in)[i] = (float)(i % 1000);
    ferry_stage_t st = test_cpu_stage("scale2", cpu_scale);
    st.granularity = 4;
    ferry_pipeline_t *p = make(dev, &st);
    atomic_int ndone = 0;
    test_submit_one(p, in, out, n, done, &ndone);
    assert_int_equal(atomic_load(&ndone), 1);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    print_message("pool buffers: staged %llu, copied out %llu bytes\n",
                  (unsigned long long)s.staged_bytes, (unsigned long long)s.copied_out_bytes);
    assert_int_equal(s.staged_bytes, 0);
    assert_int_equal(s.copied_out_bytes, 0);
    for (size_t i = 0; i < n / 4; i++)
        assert_true(((float *)out)[i] == 2.0f * (float)(i % 1000));
    assert_int_equal(ferry_pipeline_close(p), 0);
    /* The pool's slab is not the application's to unregister. */
    assert_int_equal(ferry_host_unregister(dev, in), FERRY_EINVAL);
    ferry_pool_free(pool, in);
    ferry_pool_free(pool, out);
    ferry_pool_destroy(pool);
    ferry_runtime_destroy(rt);
}

static void test_cpu_path_aligns_for_the_stage(void **state)
{
    (void)state;
    const char *const kv[] = {"inject", "sticky@n=1", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("scale2", cpu_scale);
    st.granularity = 4;
    ferry_pipeline_t *p = make(dev, &st);
    const size_t n = 1u << 20;
    unsigned char *ibuf = malloc(n + 8), *obuf = malloc(n + 8);
    assert_non_null(ibuf);
    assert_non_null(obuf);
    for (size_t i = 0; i < n / 4; i++) {
        float x = (float)(i % 777);
        memcpy(ibuf + 1 + 4 * i, &x, 4);
    }
    atomic_store(&misaligned, 0);
    atomic_int ndone = 0;
    for (int k = 0; k < 4; k++) { /* the first loses the GPU; the rest go straight to the CPU */
        /* odd addresses, as a user's buffers may be */
        test_submit_one(p, ibuf + 1, obuf + 3, n, done, &ndone);
    }
    assert_int_equal(atomic_load(&ndone), 4);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_true(s.gpu_lost);
    assert_true(s.chunks_cpu > 0);
    print_message("cpu chunks %llu, misaligned calls %d\n", (unsigned long long)s.chunks_cpu,
                  atomic_load(&misaligned));
    assert_int_equal(atomic_load(&misaligned), 0);
    for (size_t i = 0; i < n / 4; i++) {
        float y;
        memcpy(&y, obuf + 3 + 4 * i, 4);
        assert_true(y == 2.0f * (float)(i % 777));
    }
    assert_int_equal(ferry_pipeline_close(p), 0);
    free(ibuf);
    free(obuf);
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_user_pool_is_pinned),
          cmocka_unit_test(test_cpu_path_aligns_for_the_stage))
