/* Choosing the cuda backend, with or without a GPU (this test never skips): without one,
 * backend "cuda" fails with FERRY_ENODEV naming cudaGetDeviceCount and "auto" falls back to the
 * simulator with the CUDA reason kept; with one, both pick cuda. Also the backend's pure tables:
 * CUDA error translation, PCIe link rates and resident-grid limits. */
#include <string.h>

#include "backend/cuda/cuda.h" /* the private helpers under test */
#include "testlib.h"

static void test_choice(void **state)
{
    (void)state;
    char why[256] = "";
    int n = ferry_backend_probe("cuda", why, sizeof(why));
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.profile = FERRY_TEST_PROFILE;
    ferry_runtime_t *rt = NULL;
    if (n <= 0) {
        printf("# no GPU here: %s\n", why);
        assert_int_equal(n, FERRY_ENODEV);
        assert_non_null(strstr(why, "cudaGetDeviceCount"));
        cfg.backend = "cuda";
        assert_int_equal(ferry_runtime_create(&cfg, &rt), FERRY_ENODEV);
        assert_null(rt);
        assert_non_null(strstr(ferry_last_error(), "cudaGetDeviceCount"));
        printf("# cuda: %s\n", ferry_last_error());
        cfg.backend = "auto";
        assert_int_equal(ferry_runtime_create(&cfg, &rt), 0);
        assert_string_equal(ferry_runtime_backend(rt), "sim");
        const char *reason = ferry_runtime_fallback_reason(rt);
        printf("# auto fell back: %s\n", reason);
        assert_non_null(strstr(reason, "cuda"));
        assert_non_null(strstr(reason, "cudaGetDeviceCount"));
        ferry_runtime_destroy(rt);
        return;
    }
    printf("# %d CUDA device(s)\n", n);
    cfg.backend = "cuda";
    assert_int_equal(ferry_runtime_create(&cfg, &rt), 0);
    assert_string_equal(ferry_runtime_backend(rt), "cuda");
    assert_int_equal(ferry_device_count(rt), n);
    ferry_device_t *dev = test_device(rt);
    assert_false(ferry_device_is_simulated(dev));
    assert_int_equal(ferry_device_get(rt, n, &dev), FERRY_ENODEV);
    ferry_runtime_destroy(rt);
    cfg.backend = "auto";
    assert_int_equal(ferry_runtime_create(&cfg, &rt), 0);
    assert_string_equal(ferry_runtime_backend(rt), "cuda");
    assert_string_equal(ferry_runtime_fallback_reason(rt), "");
    ferry_runtime_destroy(rt);
}

static void test_error_table(void **state)
{
    (void)state;
    static const struct {
        int cuda, ferry;
    } cases[] = {
        {0, 0},
        {2, FERRY_EDEVMEM},   /* cudaErrorMemoryAllocation */
        {700, FERRY_ESTICKY}, /* illegal address */
        {702, FERRY_ESTICKY}, /* launch timeout */
        {710, FERRY_ESTICKY}, /* device assert */
        {714, FERRY_ESTICKY},
        {715, FERRY_ESTICKY},
        {716, FERRY_ESTICKY},
        {717, FERRY_ESTICKY},
        {718, FERRY_ESTICKY},
        {719, FERRY_ESTICKY},  /* launch failure, __trap() */
        {721, FERRY_ESTICKY},  /* tensor memory leak */
        {226, FERRY_ESTICKY},  /* contained */
        {911, FERRY_ESTICKY},  /* external device */
        {35, FERRY_ENODEV},    /* insufficient driver */
        {100, FERRY_ENODEV},   /* no device */
        {101, FERRY_ENODEV},   /* invalid device */
        {712, FERRY_EINVAL},   /* host memory already registered */
        {713, FERRY_EINVAL},   /* host memory not registered */
        {1, FERRY_EBACKEND},   /* invalid value */
        {400, FERRY_EBACKEND}, /* invalid resource handle */
        {600, FERRY_EBACKEND}, /* not ready: EAGAIN only where a query expects it */
        {701, FERRY_EBACKEND}, /* launch out of resources: not sticky */
        {999, FERRY_EBACKEND}, /* unknown */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = ferry__cuda_error_code(cases[i].cuda);
        if (got != cases[i].ferry)
            fail_msg("cuda error %d -> %s, expected %s", cases[i].cuda, ferry_err_name(got),
                     ferry_err_name(cases[i].ferry));
    }
}

static void test_link_rates(void **state)
{
    (void)state;
    /* GB/s per direction, x16 */
    assert_true(ferry__cuda_link_gbps(1, 16) == 4.0);
    assert_true(ferry__cuda_link_gbps(2, 16) == 8.0);
    assert_true(ferry__cuda_link_gbps(3, 16) > 15.75 && ferry__cuda_link_gbps(3, 16) < 15.76);
    assert_true(ferry__cuda_link_gbps(4, 16) > 31.50 && ferry__cuda_link_gbps(4, 16) < 31.51);
    /* FACTS.md: Gen5 x16 = 63.0 GB/s theoretical per direction */
    assert_true(ferry__cuda_link_gbps(5, 16) > 63.00 && ferry__cuda_link_gbps(5, 16) < 63.02);
    assert_true(ferry__cuda_link_gbps(6, 16) == 121.0);
    assert_true(ferry__cuda_link_gbps(5, 8) * 2 == ferry__cuda_link_gbps(5, 16));
    assert_true(ferry__cuda_link_gbps(0, 16) == 0.0);
    assert_true(ferry__cuda_link_gbps(5, 0) == 0.0);
    assert_true(ferry__cuda_link_gbps(-1, 16) == 0.0);
    assert_true(ferry__cuda_link_gbps(7, 16) == 0.0);
}

static void test_resident_grids(void **state)
{
    (void)state;
    assert_int_equal(ferry__cuda_max_resident_grids(9, 0), 128); /* H100, H200 */
    assert_int_equal(ferry__cuda_max_resident_grids(10, 0), 128);
    assert_int_equal(ferry__cuda_max_resident_grids(8, 6), 128);
    assert_int_equal(ferry__cuda_max_resident_grids(7, 5), 128);
    assert_int_equal(ferry__cuda_max_resident_grids(7, 2), 16);
    assert_int_equal(ferry__cuda_max_resident_grids(6, 1), 32);
    assert_int_equal(ferry__cuda_max_resident_grids(5, 3), 16);
    assert_int_equal(ferry__cuda_max_resident_grids(3, 2), 4);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_choice), cmocka_unit_test(test_error_table),
          cmocka_unit_test(test_link_rates), cmocka_unit_test(test_resident_grids))
