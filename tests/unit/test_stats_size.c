/* ferry_pipeline_stats with a struct from an older ferry.h: cut at an older size, it gets the
 * fields it has and nothing past them is written; a size too small for any field is refused. */
#include <stddef.h>
#include <string.h>

#include "testlib.h"

static int cpu_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

static void done_cb(const ferry_batch_result_t *r, void *arg)
{
    (void)r;
    (void)arg;
}

static void test_older_struct(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    ferry_stage_t s = FERRY_STAGE_INIT;
    s.name = "copy";
    s.cpu = cpu_copy;
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.device = dev;
    cfg.stage = &s;
    cfg.chunk_bytes = 1024;
    ferry_pipeline_t *p = NULL;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), 0);
    static char in[4096], out[4096];
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = sizeof(in);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ferry_pipeline_submit(p, &b, done_cb, NULL, NULL), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);

    ferry_pipeline_stats_t full = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &full), 0);
    assert_int_equal(full.batches_submitted, 3);
    assert_int_equal(full.chunks, 12);

    /* An older struct: cut after bytes_d2h. The bytes past its size keep their pattern. */
    size_t cut = offsetof(ferry_pipeline_stats_t, elapsed_ns);
    union {
        ferry_pipeline_stats_t st;
        unsigned char raw[sizeof(ferry_pipeline_stats_t)];
    } old;
    memset(old.raw, 0xA5, sizeof(old.raw));
    old.st.size = cut;
    assert_int_equal(ferry_pipeline_stats(p, &old.st), 0);
    assert_int_equal(old.st.size, cut);
    assert_int_equal(old.st.batches_submitted, 3);
    assert_int_equal(old.st.batches_done_gpu, 3);
    assert_int_equal(old.st.chunks, 12);
    assert_int_equal(old.st.bytes_h2d, 3 * sizeof(in));
    assert_int_equal(old.st.bytes_d2h, 3 * sizeof(in));
    for (size_t i = cut; i < sizeof(old.raw); i++)
        assert_int_equal(old.raw[i], 0xA5);

    /* Too small to hold a field: refused, untouched. */
    memset(old.raw, 0xA5, sizeof(old.raw));
    old.st.size = sizeof(size_t);
    assert_int_equal(ferry_pipeline_stats(p, &old.st), FERRY_EINVAL);
    for (size_t i = sizeof(size_t); i < sizeof(old.raw); i++)
        assert_int_equal(old.raw[i], 0xA5);

    assert_int_equal(ferry_pipeline_close(p), 0);
    /* After close: the final figures, still cut at the caller's size. */
    memset(old.raw, 0xA5, sizeof(old.raw));
    old.st.size = cut;
    assert_int_equal(ferry_pipeline_stats(p, &old.st), 0);
    assert_int_equal(old.st.batches_submitted, 3);
    for (size_t i = cut; i < sizeof(old.raw); i++)
        assert_int_equal(old.raw[i], 0xA5);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_runtime_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_older_struct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
