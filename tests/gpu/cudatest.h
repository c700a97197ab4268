/* Helpers for the tests of the cuda backend: skip (exit 77) when no GPU answers, a runtime on the
 * cuda backend, and float data in +-[1, 2) (no NaN, infinity or denormal), as `ferry run`
 * generates. Included by tests/gpu/test_*.c only. */
#ifndef FERRY_TEST_CUDATEST_H
#define FERRY_TEST_CUDATEST_H

#include <string.h>

#include "backend/cuda/cuda.h"
#include "ferry/workloads.h"
#include "internal.h"

/* Exit 77 (CTest: skipped) when the cuda backend finds no device. Never a failure. */
static inline void cudatest_require_gpu(void)
{
    char why[256] = "";
    int n = ferry_backend_probe("cuda", why, sizeof(why));
    if (n <= 0) {
        printf("# skip: no CUDA device: %s\n", why);
        exit(77);
    }
}

static inline ferry_runtime_t *cudatest_runtime(void)
{
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    ferry_runtime_t *rt = NULL;
    cfg.backend = "cuda";
    int rc = ferry_runtime_create(&cfg, &rt);
    if (rc != 0)
        fail_msg("ferry_runtime_create(cuda): %s: %s", ferry_err_name(rc), ferry_last_error());
    return rt;
}

/* The fixture every GPU test file uses: one runtime on the cuda backend and its device 0, in
 * the file's globals rt and dev; skips the whole file without a GPU. */
static ferry_runtime_t *rt;
static ferry_device_t *dev;

static inline int cudatest_setup(void **state)
{
    (void)state;
    cudatest_require_gpu();
    rt = cudatest_runtime();
    return ferry_device_get(rt, 0, &dev);
}

static inline int cudatest_teardown(void **state)
{
    (void)state;
    ferry_runtime_destroy(rt);
    return 0;
}

/* @bytes bytes of floats with random sign and mantissa and exponent 0: +-[1, 2). A last partial
 * float gets random bytes. */
static inline void cudatest_fill_floats(void *p, size_t bytes, uint64_t *state)
{
    unsigned char *b = p;
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) {
        uint32_t w = (uint32_t)test_rand(state);
        w = (w & 0x807fffffu) | 0x3f800000u;
        memcpy(b + i, &w, 4);
    }
    test_fill_random(b + i, bytes - i, state);
}

/* Index of the first differing byte, or -1. */
static inline long cudatest_first_diff(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return (long)i;
    return -1;
}

#endif
