/* The fma workload's vector loop (src/workloads/fma_simd.c) is bit for bit the scalar fmaf
 * loop: every class of float (zeros, denormals, normals near overflow, infinities, quiet and
 * signalling NaNs with payloads), intensities 0 to 300, lengths around the vector block,
 * misaligned buffers, in place, with each instruction set this CPU has; a partial overlap is left
 * to the scalar loop. Through the public reference too, which the CPU device, the CPU fallback and
 * the verifier all run. And it is faster: at intensity 64 the vector loop must beat the scalar one
 * by 4x at least (both timed here on the same data; skipped where this CPU has no vector FMA or
 * under a sanitizer). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry/workloads.h"
#include "testlib.h"
#include "workloads/fma_simd.h"

static void scalar(const unsigned char *in, unsigned char *out, size_t n, unsigned it, float f)
{
    for (size_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, in + 4 * i, 4);
        for (unsigned k = 0; k < it; k++)
            x = fmaf(x, f, 0.5f);
        memcpy(out + 4 * i, &x, 4);
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* @n floats of every class, at random. */
static void fill(unsigned char *p, size_t n)
{
    static const uint32_t special[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff,
                                       0x00400000, 0x7f7fffff, 0xff7fffff, 0x7f800000,
                                       0xff800000, 0x7fc00001, 0x7f800001, 0xffbfffff,
                                       0x3f800000, 0xbf000000, 0x4b000000, 0x33800000};
    for (size_t i = 0; i < n; i++) {
        uint32_t r = next32(), v;
        switch (r % 4) {
        case 0: v = special[(r >> 8) % (sizeof(special) / sizeof(special[0]))]; break;
        case 1:
            v = next32() & 0x807fffffu; /* denormals */
            break;
        default: v = next32();
        }
        memcpy(p + 4 * i, &v, 4);
    }
}

static void test_vector_loop_is_the_scalar_loop(void **state)
{
    (void)state;
    print_message("vector FMA on this CPU: %s\n", ferry__fma_simd_isa());
    const size_t max = 1000;
    unsigned char *in = malloc(4 * max + 8), *a = malloc(4 * max + 8), *b = malloc(4 * max + 8);
    assert_non_null(in);
    assert_non_null(a);
    assert_non_null(b);
    const unsigned its[] = {0, 1, 2, 7, 64, 300};
    const float factors[] = {1.0009765625f, -1.5f, 0.0f, 3.0e38f, 1.0e-30f};
    size_t did_any = 0;
    for (size_t t = 0; t < 400; t++) {
        size_t n = t < 260 ? t : next32() % max;
        size_t mis = next32() % 4; /* bytes off the allocation's alignment */
        unsigned it = its[next32() % 6];
        float f = factors[next32() % 5];
        fill(in + mis, n);
        memset(a, 0xa5, 4 * max + 8);
        memset(b, 0x5a, 4 * max + 8);
        int level = (int)(t % 3); /* each path this CPU has; 0: the scalar loop alone */
        size_t done = ferry__fma_simd_at(level, in + mis, a + mis, n, it, f);
        assert_true(done <= n);
        did_any += done;
        scalar(in + mis + 4 * done, a + mis + 4 * done, n - done, it, f);
        scalar(in + mis, b + mis, n, it, f);
        if (memcmp(a + mis, b + mis, 4 * n) != 0) {
            for (size_t i = 0; i < n; i++)
                if (memcmp(a + mis + 4 * i, b + mis + 4 * i, 4) != 0) {
                    uint32_t x, y, z;
                    memcpy(&x, in + mis + 4 * i, 4);
                    memcpy(&y, a + mis + 4 * i, 4);
                    memcpy(&z, b + mis + 4 * i, 4);
                    fail_msg("n %zu intensity %u factor %g: element %zu (0x%08x) came out "
                             "0x%08x, the scalar loop 0x%08x",
                             n, it, (double)f, i, x, y, z);
                }
        }
        /* in place */
        memcpy(a + mis, in + mis, 4 * n);
        done = ferry__fma_simd_at(level, a + mis, a + mis, n, it, f);
        scalar(a + mis + 4 * done, a + mis + 4 * done, n - done, it, f);
        assert_memory_equal(a + mis, b + mis, 4 * n);
        /* through the public reference (factor and intensity of a workload) */
        if (f > 0 && f < 2 && it > 0) {
            ferry_workload_params_t p = FERRY_WORKLOAD_PARAMS_INIT;
            p.intensity = it;
            p.factor = f;
            ferry_workload_t *w = NULL;
            assert_int_equal(ferry_workload_create("fma", &p, &w), 0);
            assert_int_equal(ferry_workload_reference(w, in + mis, a + mis, 4 * n), 0);
            scalar(in + mis, b + mis, n, it, f);
            assert_memory_equal(a + mis, b + mis, 4 * n);
            ferry_workload_destroy(w);
        }
    }
    /* a partial overlap is not taken */
    assert_int_equal(ferry__fma_simd(in, in + 4, 512, 3, 1.5f), 0);
    if (strcmp(ferry__fma_simd_isa(), "none") != 0)
        assert_true(did_any > 0);
    free(in);
    free(a);
    free(b);
}

/* A large output apart from its input, aligned to the vector and not (the first goes through
 * non-temporal stores), at each level: the scalar loop's bytes, and nothing past the end. */
static void test_large_outputs(void **state)
{
    (void)state;
    const size_t n = (1u << 18) + 37;                 /* 1 MiB and a tail the vector loop leaves */
    const size_t size = (4 * n + 128 + 63) / 64 * 64; /* aligned_alloc: a multiple of 64 */
    unsigned char *in = aligned_alloc(64, size), *a = aligned_alloc(64, size);
    unsigned char *b = malloc(4 * n);
    assert_non_null(in);
    assert_non_null(a);
    assert_non_null(b);
    fill(in, n);
    const char *isa = ferry__fma_simd_isa();
    int have = strcmp(isa, "avx512f") == 0 ? 2 : strcmp(isa, "avx2+fma") == 0 ? 1 : 0;
    for (int level = 1; level <= 2; level++)
        for (size_t mis = 0; mis <= 64; mis += 32) { /* 0: aligned for either level */
            memset(a, 0xa5, size);
            size_t done = ferry__fma_simd_at(level, in, a + mis, n, 64, 1.0009765625f);
            if (level <= have) /* whole blocks of 16 x 8 floats, or 8 x 8 */
                assert_int_equal(done, n / (level == 2 ? 128 : 64) * (level == 2 ? 128 : 64));
            scalar(in + 4 * done, a + mis + 4 * done, n - done, 64, 1.0009765625f);
            scalar(in, b, n, 64, 1.0009765625f);
            assert_memory_equal(a + mis, b, 4 * n);
            for (size_t k = 4 * n + mis; k < size; k++)
                assert_int_equal(a[k], 0xa5);
        }
    free(in);
    free(a);
    free(b);
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_vector_loop_is_faster(void **state)
{
    (void)state;
    if (strcmp(ferry__fma_simd_isa(), "none") == 0)
        skip();
    const char *scale = getenv("FERRY_TEST_SCALE");
    if (scale != NULL && strcmp(scale, "sanitizer") == 0)
        skip();          /* instrumented loops time nothing of use */
    size_t n = 1u << 18; /* 1 MiB */
    unsigned char *in = malloc(4 * n), *out = malloc(4 * n);
    assert_non_null(in);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        float x = (float)(next32() % 1000) / 1000.0f;
        memcpy(in + 4 * i, &x, 4);
    }
    memset(out, 0, 4 * n);
    double best_v = 1e9, best_s = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = seconds();
        size_t done = ferry__fma_simd(in, out, n, 64, 1.0009765625f);
        double t1 = seconds();
        assert_int_equal(done, n);
        scalar(in, out, n / 8, 64, 1.0009765625f); /* an eighth: the scalar loop is slow */
        double t2 = seconds();
        best_v = t1 - t0 < best_v ? t1 - t0 : best_v;
        best_s = 8 * (t2 - t1) < best_s ? 8 * (t2 - t1) : best_s;
    }
    print_message("intensity 64, 1 MiB: vector %.3f GB/s, scalar %.3f GB/s (%.1fx)\n",
                  4.0 * (double)n / best_v / 1e9, 4.0 * (double)n / best_s / 1e9, best_s / best_v);
    assert_true(best_s >= 4 * best_v);
    free(in);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_loop_is_the_scalar_loop),
        cmocka_unit_test(test_large_outputs),
        cmocka_unit_test(test_vector_loop_is_faster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
