/* Option sim_pace: the simulated device in real time, slowed by the pace. A copy the host waits
 * for takes its modelled time times the pace in real time, and the same modelled time as without
 * the pace; time passes on the device while the host idles; the host's own modelled costs
 * (registering memory) are not paced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static const ferry_backend_ops_t *be = &ferry__sim_backend;

#define BYTES (64u << 20)
#define PACE  "100"

static ferry_be_device_t *open_paced(const char *pace, ferry_options_t **opts)
{
    assert_int_equal(ferry_options_create(opts), 0);
    assert_int_equal(ferry_options_set(*opts, "sim_pace", pace), 0);
    ferry_be_device_t *dev = NULL;
    ferry_be_open_params_t params = {
        .profile_path = FERRY_TEST_PROFILE, .seed = 1, .options = *opts};
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    assert_int_equal(be->device_open(0, &params, &dev), 0);
    return dev;
}

/* One H2D copy of BYTES between two timing events, waited for: its modelled ns, and the real
 * ns the wait took in *real. */
static uint64_t copy_once(ferry_be_device_t *dev, void *h, uint64_t *real)
{
    ferry_be_stream_t *s;
    ferry_be_event_t *e0, *e1;
    void *d;
    uint64_t t0 = 0, t1 = 0;
    size_t which;
    assert_int_equal(be->mem_alloc(dev, BYTES, &d), 0);
    assert_int_equal(be->stream_create(dev, 0, &s), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e0), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e1), 0);
    uint64_t r0 = ferry__mono_ns();
    assert_int_equal(be->event_record(e0, s), 0);
    assert_int_equal(be->memcpy_h2d(s, d, h, BYTES), 0);
    assert_int_equal(be->event_record(e1, s), 0);
    assert_int_equal(be->event_wait_any(&e1, 1, UINT64_MAX, &which), 0);
    *real = ferry__mono_ns() - r0;
    assert_int_equal(be->event_time_ns(e0, &t0), 0);
    assert_int_equal(be->event_time_ns(e1, &t1), 0);
    be->event_destroy(e0);
    be->event_destroy(e1);
    be->stream_destroy(s);
    be->mem_free(dev, d);
    return t1 - t0;
}

static void test_a_copy_takes_its_paced_time(void **state)
{
    (void)state;
    unsigned char *h = malloc(BYTES);
    assert_non_null(h);
    memset(h, 7, BYTES);
    uint64_t virt[2], real[2];
    for (int paced = 0; paced < 2; paced++) {
        ferry_options_t *o;
        ferry_be_device_t *dev = open_paced(paced ? PACE : "0", &o);
        uint64_t r0 = ferry__mono_ns();
        assert_int_equal(be->host_register(dev, h, BYTES), 0);
        uint64_t reg = ferry__mono_ns() - r0;
        virt[paced] = copy_once(dev, h, &real[paced]);
        print_message("# sim_pace %s: the copy %.3f ms modelled, waited %.3f ms; registering "
                      "%u MiB took %.3f ms\n",
                      paced ? PACE : "0", virt[paced] / 1e6, real[paced] / 1e6, BYTES >> 20,
                      reg / 1e6);
        if (paced) /* the host's modelled cost (a few ms here) is not multiplied by the pace */
            assert_true(reg < (uint64_t)1e9);
        be->host_unregister(dev, h);
        be->device_close(dev);
        ferry_options_destroy(o);
    }
    /* the model is the same, paced or not (the event's record may come a few ns later, as
     * real time passed on the device while the host submitted) */
    assert_true(virt[1] >= virt[0] && virt[1] - virt[0] < virt[0] / 100);
    assert_true((double)real[1] >= 0.95 * 100.0 * (double)virt[1]);
    free(h);
}

static void test_time_passes_while_the_host_idles(void **state)
{
    (void)state;
    ferry_options_t *o;
    ferry_be_device_t *dev = open_paced(PACE, &o);
    uint64_t v0 = be->now_ns(dev);
    nanosleep(&(struct timespec){0, 50000000}, NULL); /* 50 ms: 0.5 ms on the device */
    uint64_t v1 = be->now_ns(dev);
    print_message("# 50 ms of real time at sim_pace %s: %.3f ms on the device\n", PACE,
                  (v1 - v0) / 1e6);
    assert_true(v1 - v0 >= 490000);
    be->device_close(dev);
    ferry_options_destroy(o);
}

static void test_out_of_range_is_refused(void **state)
{
    (void)state;
    ferry_options_t *o;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_not_equal(ferry_options_set(o, "sim_pace", "-1"), 0);
    assert_non_null(strstr(ferry_last_error(), "sim_pace"));
    assert_int_not_equal(ferry_options_set(o, "sim_pace", "fast"), 0);
    assert_non_null(strstr(ferry_last_error(), "sim_pace"));
    ferry_options_destroy(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_copy_takes_its_paced_time),
        cmocka_unit_test(test_time_passes_while_the_host_idles),
        cmocka_unit_test(test_out_of_range_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
