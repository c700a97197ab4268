/* The simulator's single-copy times against FACTS.md's measured H200 copy table: each size and
 * direction, timed as it was measured (events recorded around one copy on an idle device), must
 * be within 5% of bytes / GB/s; sizes between the points must stay monotonic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const ferry_backend_ops_t *be = &ferry__sim_backend;

/* FACTS.md, "Copies (best of 10, cudaMemcpyAsync on one stream)", pinned, GB/s. */
static const struct {
    uint64_t bytes;
    double gbps[2]; /* H2D, D2H */
} facts[] = {
    {4096, {0.86, 0.90}},      {65536, {11.1, 13.0}},    {1048576, {43.2, 46.9}},
    {4194304, {52.0, 52.9}},   {16777216, {54.6, 54.8}}, {67108864, {55.4, 55.3}},
    {134217728, {55.4, 55.3}}, /* "64 MiB+": the asymptote holds beyond the last point */
};
#define MAX_BYTES 134217728u

struct fixture {
    ferry_be_device_t *dev;
    ferry_be_stream_t *s;
    ferry_be_event_t *e0, *e1;
    void *dbuf;
    unsigned char *hbuf;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->dev = simtest_open(FERRY_TEST_PROFILE)) == NULL)
        return -1;
    f->hbuf = malloc(MAX_BYTES);
    if (f->hbuf == NULL || be->host_register(f->dev, f->hbuf, MAX_BYTES) != 0 ||
        be->mem_alloc(f->dev, MAX_BYTES, &f->dbuf) != 0 ||
        be->stream_create(f->dev, 0, &f->s) != 0 ||
        be->event_create(f->dev, FERRY_BE_EVENT_TIMING, &f->e0) != 0 ||
        be->event_create(f->dev, FERRY_BE_EVENT_TIMING, &f->e1) != 0)
        return -1;
    memset(f->hbuf, 0x3c, MAX_BYTES);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    be->event_destroy(f->e0);
    be->event_destroy(f->e1);
    be->stream_destroy(f->s);
    be->mem_free(f->dev, f->dbuf);
    be->host_unregister(f->dev, f->hbuf);
    be->device_close(f->dev);
    free(f->hbuf);
    free(f);
    return 0;
}

/* One copy between two events on an idle device, as FACTS.md measured it; returns ns. */
static uint64_t timed_copy(struct fixture *f, int dir, uint64_t bytes)
{
    uint64_t t0 = 0, t1 = 0;
    size_t which = 99;
    assert_int_equal(be->stream_sync(f->s), 0);
    assert_int_equal(be->event_record(f->e0, f->s), 0);
    if (dir == FERRY_SIM_H2D)
        assert_int_equal(be->memcpy_h2d(f->s, f->dbuf, f->hbuf, bytes), 0);
    else
        assert_int_equal(be->memcpy_d2h(f->s, f->hbuf, f->dbuf, bytes), 0);
    assert_int_equal(be->event_record(f->e1, f->s), 0);
    assert_int_equal(be->event_wait_any(&f->e1, 1, UINT64_MAX, &which), 0);
    assert_int_equal(which, 0);
    assert_int_equal(be->event_time_ns(f->e0, &t0), 0);
    assert_int_equal(be->event_time_ns(f->e1, &t1), 0);
    assert_true(t1 > t0);
    return t1 - t0;
}

static void test_table_within_5_percent(void **state)
{
    struct fixture *f = *state;
    static const char *const names[2] = {"H2D", "D2H"};
    double worst = 0.0;
    for (int dir = 0; dir < 2; dir++) {
        for (size_t i = 0; i < sizeof(facts) / sizeof(facts[0]); i++) {
            uint64_t bytes = facts[i].bytes;
            double measured_ns = (double)bytes / facts[i].gbps[dir];
            uint64_t model_ns = timed_copy(f, dir, bytes);
            double err = ((double)model_ns - measured_ns) / measured_ns;
            printf("copy %s %10llu B: model %10.3f us (%6.2f GB/s), FACTS %10.3f us (%6.2f "
                   "GB/s), error %+6.2f%%\n",
                   names[dir], (unsigned long long)bytes, model_ns / 1e3,
                   (double)bytes / (double)model_ns, measured_ns / 1e3, facts[i].gbps[dir],
                   err * 100.0);
            if (fabs(err) > worst)
                worst = fabs(err);
            assert_true(fabs(err) <= 0.05);
        }
    }
    printf("worst copy-curve error: %.2f%%\n", worst * 100.0);
}

/* The model's device-side time is the measured curve minus the host's submit cost, which the
 * model charges to the host instead: check the split directly. */
static void test_device_time_is_curve_minus_submit(void **state)
{
    struct fixture *f = *state;
    const struct ferry_sim_profile *p = ferry__sim_device_profile(f->dev);
    assert_non_null(p);
    assert_int_equal(p->copy_submit_ns, 2500);
    uint64_t t = ferry__sim_copy_ns(p, FERRY_SIM_H2D, 1048576, true);
    double expect = 1048576 / 43.2 - 2500.0;
    assert_true(fabs((double)t - expect) <= 2.0);
    /* The latency part is what does not scale with bytes: about 2-3 us on the H200. */
    uint64_t lat = ferry__sim_copy_latency_ns(p, FERRY_SIM_D2H, 4096);
    assert_true(lat > 1500 && lat < 3500);
}

static void test_between_points_monotonic(void **state)
{
    struct fixture *f = *state;
    static const uint64_t sizes[] = {4096,     8192,     16384,    65536,    262144,
                                     524288,   1048576,  2097152,  4194304,  8388608,
                                     16777216, 33554432, 67108864, 100663296};
    for (int dir = 0; dir < 2; dir++) {
        uint64_t prev_ns = 0;
        double prev_gbps = 0.0;
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            uint64_t ns = timed_copy(f, dir, sizes[i]);
            double gbps = (double)sizes[i] / (double)ns;
            assert_true(ns > prev_ns);
            /* Larger copies amortise the fixed cost: throughput never drops. */
            assert_true(gbps >= prev_gbps * 0.999);
            prev_ns = ns;
            prev_gbps = gbps;
        }
        /* A fine sweep of the model function itself, 1 B to 256 MiB. */
        const struct ferry_sim_profile *p = ferry__sim_device_profile(f->dev);
        uint64_t last = 0;
        for (double b = 1; b <= 268435456.0; b *= 1.07) {
            uint64_t t = ferry__sim_copy_ns(p, dir, (uint64_t)b, true);
            assert_true(t >= last);
            last = t;
        }
    }
}

static void test_bytes_arrive(void **state)
{
    struct fixture *f = *state;
    size_t n = 1 << 20;
    for (size_t i = 0; i < n; i++)
        f->hbuf[i] = (unsigned char)(i * 131u + 7u);
    assert_int_equal(be->memcpy_h2d(f->s, f->dbuf, f->hbuf, n), 0);
    assert_int_equal(be->stream_sync(f->s), 0);
    assert_memory_equal(f->dbuf, f->hbuf, n);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test_setup_teardown(test_table_within_5_percent, setup, teardown),
          cmocka_unit_test_setup_teardown(test_device_time_is_curve_minus_submit, setup, teardown),
          cmocka_unit_test_setup_teardown(test_between_points_monotonic, setup, teardown),
          cmocka_unit_test_setup_teardown(test_bytes_arrive, setup, teardown))
