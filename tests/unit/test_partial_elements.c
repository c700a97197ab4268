/* What a float workload does with bytes that are not a whole float: 1-3 bytes after the last
 * float (a short batch) are the low-order bytes of one more float padded with zeros, transformed
 * and written back. Before, they were copied through: a stream of 2-byte batches came back
 * untransformed and verified. Here the pipeline (the simulator runs the CPU function) and the
 * reference agree on every batch of 1 to 11 bytes, and the short tails do change. */
#include <string.h>

#include "ferry/workloads.h"
#include "testlib.h"

static void done(const ferry_batch_result_t *r, void *arg)
{
    int *n = arg;
    assert_int_equal(r->status, 0);
    (*n)++;
}

static void test_float_tails_are_transformed(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    const char *const names[] = {"scale", "fma"};
    /* Tails whose padded float is a denormal large enough for scale's factor (1 + 2^-10) to
     * change it: 0x00401000 from 0x00400000, 0x8020 from 0x8000. */
    const unsigned char in[12] = {0x00, 0x80, 0x00, 0x00, 0x00, 0x00,
                                  0xc0, 0x3f, 0x00, 0x00, 0x40, 0x00};
    for (int w = 0; w < 2; w++) {
        ferry_workload_t *wl = NULL;
        assert_int_equal(ferry_workload_create(names[w], NULL, &wl), 0);
        ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 0);
        ferry_pipeline_t *p = test_pipeline(&pc);
        for (size_t bytes = 1; bytes <= 11; bytes++) {
            /* The batch: the last @bytes bytes of in[], so that 2- and 3-byte tails are the
             * ones above. */
            const unsigned char *src = bytes == 2 ? in : in + sizeof(in) - bytes;
            unsigned char out[12], ref[12];
            memset(out, 0xee, sizeof(out));
            int n = 0;
            test_submit_one(p, src, out, bytes, done, &n);
            assert_int_equal(n, 1);
            assert_int_equal(ferry_workload_reference(wl, src, ref, bytes), 0);
            assert_memory_equal(out, ref, bytes);
            if (bytes == 2 || bytes == 3)
                if (memcmp(out + bytes / 4 * 4, src + bytes / 4 * 4, bytes % 4) == 0)
                    fail_msg("%s: the %zu-byte tail of a %zu-byte batch came back unchanged",
                             names[w], bytes % 4, bytes);
        }
        assert_int_equal(ferry_pipeline_close(p), 0);
        ferry_workload_destroy(wl);
    }
    ferry_runtime_destroy(rt);
}

static void test_reference_tail_values(void **state)
{
    (void)state;
    ferry_workload_t *wl = test_workload("scale");
    const unsigned char in[3] = {0x00, 0x00, 0x40}; /* 0x00400000: 2^22 ulp of denormal */
    unsigned char out[3];
    assert_int_equal(ferry_workload_reference(wl, in, out, 3), 0);
    const unsigned char want[3] = {0x00, 0x10, 0x40}; /* x (1 + 2^-10) = 0x00401000 */
    assert_memory_equal(out, want, 3);
    ferry_workload_destroy(wl);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_float_tails_are_transformed),
          cmocka_unit_test(test_reference_tail_values))
