/* Caller memory pinned with ferry_host_register: overlapping and unknown ranges are refused,
 * and a pipeline copies straight from and to registered buffers (nothing staged or copied
 * out), while unregistered buffers are staged through its pinned slots. ferry_host_alloc's
 * memory: aligned, zeroed, pinned, copied without staging, and freed by ferry_host_free
 * alone. Pinned memory is portable: registered through one device, every device of the
 * runtime (and a set of them) copies it without staging. */
#include <string.h>
#include <unistd.h>

#include "core/host_mem.h"
#include "testlib.h"

static void test_register_rules(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    static char buf[1 << 16];
    assert_int_equal(ferry_host_register(dev, buf, 4096), 0);
    assert_int_equal(ferry_host_register(dev, buf + 100, 10), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "overlaps"));
    assert_int_equal(ferry_host_register(dev, buf + 4096, 4096), 0); /* adjacent is fine */
    assert_int_equal(ferry_host_unregister(dev, buf + 1), FERRY_EINVAL);
    assert_int_equal(ferry_host_register(dev, NULL, 1), FERRY_EINVAL);
    assert_int_equal(ferry_host_register(dev, buf, 0), FERRY_EINVAL);
    assert_int_equal(ferry_host_unregister(dev, buf), 0);
    assert_int_equal(ferry_host_unregister(dev, buf), FERRY_EINVAL);
    assert_int_equal(ferry_host_unregister(dev, buf + 4096), 0);
    ferry_runtime_destroy(rt);
}

/* One batch of @n bytes from @in to @out through @p, registered memory: nothing staged in or
 * copied out (the pipeline's figures so far), the output the input (a copy stage). */
static void submit_unstaged(ferry_pipeline_t *p, const unsigned char *in, unsigned char *out,
                            size_t n, int *failed)
{
    test_submit_one(p, in, out, n, test_count_failed, failed);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.staged_bytes, 0);
    assert_int_equal(st.copied_out_bytes, 0);
    assert_memory_equal(out, in, n);
}

static void test_registered_buffers_skip_staging(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t s = test_cpu_stage(NULL, test_cpu_copy);
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &s, 1 << 20);
    ferry_pipeline_t *p = test_pipeline(&cfg);
    const size_t n = 3u << 20;
    unsigned char *in = malloc(n), *out = malloc(n), *in2 = malloc(n), *out2 = malloc(n);
    uint64_t rs = test_seed(7);
    test_fill_random(in, n, &rs);
    memcpy(in2, in, n);
    assert_int_equal(ferry_host_register(dev, in, n), 0);
    assert_int_equal(ferry_host_register(dev, out, n), 0);
    int failed = 0;
    submit_unstaged(p, in, out, n, &failed);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    /* unregistered: staged in, copied out, same bytes */
    test_submit_one(p, in2, out2, n, test_count_failed, &failed);
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.staged_bytes, n);
    assert_int_equal(st.copied_out_bytes, n);
    assert_memory_equal(out2, in, n);
    assert_int_equal(failed, 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(ferry_host_unregister(dev, in), 0);
    assert_int_equal(ferry_host_unregister(dev, out), 0);
    free(in);
    free(out);
    free(in2);
    free(out2);
    ferry_runtime_destroy(rt);
}

/* What a thread found registered is asked again cheaply (runtime.c remembers it): memory
 * taken back, or registered again smaller, or another runtime's, must be staged again. */
static void test_unregistered_memory_is_staged_again(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime(), *rt2 = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t s = test_cpu_stage(NULL, test_cpu_copy);
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &s, 1 << 20);
    ferry_pipeline_t *p = test_pipeline(&cfg);
    const size_t n = 2u << 20;
    unsigned char *in = malloc(n), *out = malloc(n);
    uint64_t rs = test_seed(11);
    test_fill_random(in, n, &rs);
    assert_int_equal(ferry_host_register(dev, in, n), 0);
    assert_int_equal(ferry_host_register(dev, out, n), 0);
    int failed = 0;
    submit_unstaged(p, in, out, n, &failed);
    submit_unstaged(p, in, out, n, &failed); /* asked again: the same answer */
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    size_t want = 0;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(ferry_host_unregister(dev, in), 0);
        if (round == 1) /* the first half again: the batch is not all registered */
            assert_int_equal(ferry_host_register(dev, in, n / 2), 0);
        if (round == 2) /* registered in another runtime: not this pipeline's */
            assert_int_equal(ferry_host_register(test_device(rt2), in, n), 0);
        memset(out, 0, n);
        test_submit_one(p, in, out, n, test_count_failed, &failed);
        want += n;
        assert_int_equal(ferry_pipeline_stats(p, &st), 0);
        assert_int_equal(st.staged_bytes, want);
        assert_memory_equal(out, in, n);
        if (round == 1)
            assert_int_equal(ferry_host_unregister(dev, in), 0);
        if (round == 2)
            assert_int_equal(ferry_host_unregister(test_device(rt2), in), 0);
        assert_int_equal(ferry_host_register(dev, in, n), 0);
    }
    assert_int_equal(failed, 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_pipeline_destroy(p);
    assert_int_equal(ferry_host_unregister(dev, in), 0);
    assert_int_equal(ferry_host_unregister(dev, out), 0);
    free(in);
    free(out);
    ferry_runtime_destroy(rt);
    ferry_runtime_destroy(rt2);
}

static void test_registered_for_every_device(void **state)
{
    (void)state;
    char path[64];
    test_profile_with_devices(path, sizeof(path), 2);
    ferry_runtime_t *rt = test_sim_runtime_on(path, NULL);
    ferry_device_t *devs[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    unlink(path);
    const size_t n = 8u << 20;
    unsigned char *in = malloc(n), *out = NULL;
    uint64_t rs = test_seed(13);
    test_fill_random(in, n, &rs);
    assert_int_equal(ferry_host_register(devs[0], in, n), 0);
    assert_int_equal(ferry_host_alloc(devs[0], n, (void **)&out), 0);
    ferry_stage_t s = test_cpu_stage(NULL, test_cpu_copy);
    /* device 1's own pipeline, then a set of both: nothing staged, nothing copied out */
    for (int set = 0; set < 2; set++) {
        ferry_pipeline_config_t cfg = test_pipeline_config(set ? NULL : devs[1], &s, 1 << 20);
        if (set) {
            cfg.devices = devs;
            cfg.ndevices = 2;
        }
        ferry_pipeline_t *p = test_pipeline(&cfg);
        memset(out, 0, n);
        int failed = 0;
        submit_unstaged(p, in, out, n, &failed);
        assert_int_equal(failed, 0);
        assert_int_equal(ferry_pipeline_close(p), 0);
        ferry_pipeline_destroy(p);
    }
    /* taken back only through the device that pinned it */
    assert_int_equal(ferry_host_unregister(devs[1], in), FERRY_EINVAL);
    assert_int_equal(ferry_host_free(devs[1], out), FERRY_EINVAL);
    assert_int_equal(ferry_host_unregister(devs[0], in), 0);
    assert_int_equal(ferry_host_free(devs[0], out), 0);
    free(in);
    ferry_runtime_destroy(rt);
}

static void test_host_alloc(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    void *none = (void *)1;
    assert_int_equal(ferry_host_alloc(dev, 0, &none), FERRY_EINVAL);
    assert_int_equal(ferry_host_alloc(NULL, 1, &none), FERRY_EINVAL);
    assert_int_equal(ferry_host_alloc(dev, 1, NULL), FERRY_EINVAL);
    assert_int_equal(ferry_host_alloc(dev, ((size_t)1 << 40) + 1, &none), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "accepted: 1 to 1T"));
    assert_ptr_equal(none, (void *)1); /* untouched on error */
    /* a small block (page-aligned) and a large one (2 MiB-aligned, touched by several threads:
     * 129 MiB leaves the last thread a short share) */
    const size_t small = 10000, big = (129u << 20) + 12345;
    unsigned char *a = NULL, *b = NULL;
    assert_int_equal(ferry_host_alloc(dev, small, (void **)&a), 0);
    assert_int_equal(ferry_host_alloc(dev, big, (void **)&b), 0);
    assert_int_equal((uintptr_t)a % 4096, 0);
    assert_int_equal((uintptr_t)b % (2u << 20), 0);
    for (size_t i = 0; i < big; i += 4093)
        assert_int_equal(b[i], 0);
    assert_int_equal(b[big - 1], 0);
    /* pinned: a pipeline copies it without staging */
    ferry_stage_t s = test_cpu_stage(NULL, test_cpu_copy);
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &s, 1 << 20);
    ferry_pipeline_t *p = test_pipeline(&cfg);
    const size_t n = 3u << 20;
    uint64_t rs = test_seed(11);
    test_fill_random(b, n, &rs);
    int failed = 0;
    test_submit_one(p, b, b + (64u << 20), n, test_count_failed, &failed);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.staged_bytes, 0);
    assert_memory_equal(b + (64u << 20), b, n);
    assert_int_equal(failed, 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    /* misuse: not ferry_host_unregister's, not a block start, not twice */
    assert_int_equal(ferry_host_unregister(dev, a), FERRY_EINVAL);
    assert_int_equal(ferry_host_free(dev, b + 4096), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "did not come from ferry_host_alloc"));
    static char user[8192];
    assert_int_equal(ferry_host_register(dev, user, sizeof user), 0);
    assert_int_equal(ferry_host_free(dev, user), FERRY_EINVAL);
    assert_int_equal(ferry_host_unregister(dev, user), 0);
    assert_int_equal(ferry_host_free(NULL, a), FERRY_EINVAL);
    assert_int_equal(ferry_host_free(dev, NULL), 0);
    assert_int_equal(ferry_host_free(dev, a), 0);
    assert_int_equal(ferry_host_free(dev, a), FERRY_EINVAL);
    assert_int_equal(ferry_host_free(dev, b), 0);
    ferry_runtime_destroy(rt);
}

/* The mapping under ferry_host_alloc and the pool: aligned as asked, rounded to its page, and
 * touched in full by several threads (shares of 2 MiB, the last one short). */
static void test_host_map_and_touch(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 4097, (2u << 20) - 1, (129u << 20) + 12345, (200u << 20) + 7};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t mapped = 0;
        unsigned char *p = ferry__host_map(sizes[i], 64 << 10, &mapped);
        assert_non_null(p);
        size_t unit = sizes[i] >= (2u << 20) ? (2u << 20) : 4096;
        assert_int_equal((uintptr_t)p % (sizes[i] >= (2u << 20) ? (2u << 20) : (64u << 10)), 0);
        assert_true(mapped >= sizes[i] && mapped - sizes[i] < unit && mapped % unit == 0);
        memset(p, 0xab, mapped); /* the whole mapping is ours */
        ferry__host_touch(p, sizes[i]);
        for (size_t k = 0; k < sizes[i]; k += 4093)
            assert_int_equal(p[k], 0);
        assert_int_equal(p[sizes[i] - 1], 0);
        if (mapped > sizes[i])
            assert_int_equal(p[sizes[i]], 0xab); /* nothing past what was asked */
        ferry__host_unmap(p, mapped);
    }
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_host_map_and_touch),
          cmocka_unit_test(test_register_rules),
          cmocka_unit_test(test_registered_buffers_skip_staging),
          cmocka_unit_test(test_unregistered_memory_is_staged_again),
          cmocka_unit_test(test_registered_for_every_device), cmocka_unit_test(test_host_alloc))
