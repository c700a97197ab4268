/* The cuda backend's device on a real GPU: plausible properties (SMs, memory, priorities, link
 * known or 0, bus id, versions), event times on the CLOCK_MONOTONIC time line and consistent
 * across a re-base of the reference event, event_wait_any's timeout and completion, and the
 * NVML counters (unknown is fine, failing is not). Skips (exit 77) without a GPU. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cudatest.h"

static void test_props(void **state)
{
    (void)state;
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(ferry_device_props(dev, &p), 0);
    printf("# %s cc %d.%d, %d SMs, %d copy engines, priorities %d..%d, PCIe Gen%d x%d (max Gen%d "
           "x%d, %.1f GB/s), NUMA %d, bus %s, driver %s, runtime %s\n",
           p.name, p.cc_major, p.cc_minor, p.sms, p.copy_engines, p.priority_least,
           p.priority_greatest, p.pcie_gen, p.pcie_width, p.pcie_gen_max, p.pcie_width_max,
           p.link_gbps, p.numa_node, p.pci_bus_id, p.driver_version, p.runtime_version);
    assert_string_equal(p.backend, "cuda");
    assert_false(p.simulated);
    assert_true(p.name[0] != '\0');
    assert_true(p.cc_major >= 7);
    assert_true(p.sms > 0);
    assert_true(p.copy_engines >= 1);
    assert_true(p.memory_bytes >= (64ull << 20));
    assert_true(p.l2_bytes > 0);
    assert_true(p.priority_greatest <= p.priority_least);
    assert_int_equal(p.max_resident_grids, ferry__cuda_max_resident_grids(p.cc_major, p.cc_minor));
    assert_true(p.link_gbps == 0.0 || (p.link_gbps >= 1.0 && p.link_gbps <= 256.0));
    if (p.link_gbps > 0) {
        assert_true(p.pcie_gen_max >= 1 && p.pcie_gen_max <= 6);
        assert_true(p.pcie_width_max >= 1 && p.pcie_width_max <= 32);
        assert_true(p.pcie_gen <= p.pcie_gen_max);
    }
    assert_true(p.numa_node >= -1);
    unsigned dom = 0, bus = 0, d = 0, f = 9;
    assert_int_equal(sscanf(p.pci_bus_id, "%4x:%2x:%2x.%1u", &dom, &bus, &d, &f), 4);
    assert_int_equal(strlen(p.pci_bus_id), 12);
    assert_true(p.driver_version[0] != '\0');
    assert_true(strchr(p.runtime_version, '.') != NULL);
    assert_int_equal(p.default_chunk_bytes, 8u << 20);
    assert_string_equal(p.profile, "");

    struct ferry_cuda_pcie c;
    assert_int_equal(ferry__cuda_pcie_counters(dev->be, &c), 0);
    printf("# NVML: Gen%d x%d now, tx %lld B/s, rx %lld B/s, replays %lld\n", c.gen, c.width,
           (long long)c.tx_bytes_per_s, (long long)c.rx_bytes_per_s, (long long)c.replay_count);
    assert_true(c.tx_bytes_per_s >= -1 && c.rx_bytes_per_s >= -1 && c.replay_count >= -1);
    if (p.link_gbps == 0.0)
        assert_true(c.gen_max <= 0);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t record_and_time(ferry_be_stream_t *s, ferry_be_event_t *e, uint64_t *host)
{
    uint64_t before = ferry_device_now_ns(dev);
    assert_int_equal(ferry__be_event_record(dev, e, s), 0);
    assert_int_equal(ferry__be_stream_sync(dev, s), 0);
    *host = ferry_device_now_ns(dev);
    uint64_t t = 0;
    if (ferry__be_event_time_ns(dev, e, &t) != 0)
        fail_msg("event_time_ns: %s", ferry_last_error());
    /* The event ran between the record call and the end of the synchronise: allow the
     * reference's measured uncertainty and the timer's resolution, 1 ms in all. */
    if (t + 1000000 < before || t > *host + 1000000)
        fail_msg("event at %llu ns, outside [%llu, %llu] (host clock)", (unsigned long long)t,
                 (unsigned long long)before, (unsigned long long)*host);
    return t;
}

static void test_event_times(void **state)
{
    (void)state;
    ferry_be_stream_t *s = NULL;
    ferry_be_event_t *e1 = NULL, *e2 = NULL, *never = NULL;
    assert_int_equal(ferry__be_stream_create(dev, 0, &s), 0);
    assert_int_equal(ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &e1), 0);
    assert_int_equal(ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &e2), 0);
    assert_int_equal(ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &never), 0);
    uint64_t h1 = 0, h2 = 0, t = 1;
    /* Never recorded: complete, at time 0 (as on the simulator). */
    assert_int_equal(ferry__be_event_query(dev, never), 0);
    assert_int_equal(ferry__be_event_time_ns(dev, never, &t), 0);
    assert_int_equal(t, 0);
    uint64_t t1 = record_and_time(s, e1, &h1);
    /* Longer than the re-base period (1 s): e2's time comes from a new reference, and e1, read
     * again afterwards, lies before that reference (a negative elapsed time). */
    sleep_ms(1300);
    assert_int_equal(ferry__be_event_record(dev, e2, s), 0);
    assert_int_equal(ferry__be_stream_sync(dev, s), 0);
    h2 = ferry_device_now_ns(dev);
    uint64_t t2 = 0, t1_again = 0;
    assert_int_equal(ferry__be_event_time_ns(dev, e2, &t2), 0);
    assert_int_equal(ferry__be_event_time_ns(dev, e1, &t1_again), 0);
    printf("# e1 %llu, e2 %llu (+%.3f ms; host +%.3f ms), e1 again differs by %lld ns\n",
           (unsigned long long)t1, (unsigned long long)t2, (double)(t2 - t1) / 1e6,
           (double)(h2 - h1) / 1e6, (long long)(t1_again - t1));
    assert_true(t2 > t1);
    /* Device and host clocks agree on 1.3 s to within 1 ms; the re-base chains to within a
     * few microseconds (float ms rounding at 1.3 s is 61 ns). */
    int64_t dd = (int64_t)(t2 - t1), dh = (int64_t)(h2 - h1);
    assert_true(dd > dh - 1000000 && dd < dh + 1000000);
    int64_t again = (int64_t)t1_again - (int64_t)t1;
    assert_true(again > -5000 && again < 5000);
    /* An untimed event (cudaEventDisableTiming) completes and has no time to give. */
    ferry_be_event_t *plain = NULL;
    assert_int_equal(ferry__be_event_create(dev, 0, &plain), 0);
    assert_int_equal(ferry__be_event_record(dev, plain, s), 0);
    assert_int_equal(ferry__be_stream_sync(dev, s), 0);
    assert_int_equal(ferry__be_event_query(dev, plain), 0);
    assert_int_equal(ferry__be_event_time_ns(dev, plain, &t), FERRY_ENOTSUP);
    ferry__be_event_destroy(dev, plain);
    ferry__be_event_destroy(dev, e1);
    ferry__be_event_destroy(dev, e2);
    ferry__be_event_destroy(dev, never);
    ferry__be_stream_destroy(dev, s);
}

static void test_wait_any(void **state)
{
    (void)state;
    /* A copy long enough to wait on: 256 MiB pinned, ~5 ms at 55 GB/s (FACTS.md). */
    size_t n = 256u << 20;
    void *host = NULL, *d = NULL;
    assert_int_equal(posix_memalign(&host, 4096, n), 0);
    memset(host, 1, n);
    assert_int_equal(ferry_host_register(dev, host, n), 0);
    assert_int_equal(ferry__be_mem_alloc(dev, n, &d), 0);
    ferry_be_stream_t *s = NULL;
    ferry_be_event_t *ev[2] = {NULL, NULL};
    assert_int_equal(ferry__be_stream_create(dev, 100, &s), 0); /* clamped by CUDA */
    assert_int_equal(ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &ev[0]), 0);
    assert_int_equal(ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &ev[1]), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ferry__be_memcpy_h2d(dev, s, d, host, n), 0);
        assert_int_equal(ferry__be_event_record(dev, ev[i], s), 0);
    }
    size_t which = 99;
    uint64_t t0 = ferry_device_now_ns(dev);
    int rc = ferry__be_event_wait_any(dev, ev, 2, 20000, &which);
    uint64_t waited = ferry_device_now_ns(dev) - t0;
    printf("# wait_any(20 us) -> %s after %.1f us\n", ferry_err_name(rc), (double)waited / 1e3);
    assert_int_equal(rc, FERRY_ETIMEDOUT);
    assert_int_equal(which, 99);
    assert_true(waited >= 20000 && waited < 20000000);
    assert_int_equal(ferry__be_event_query(dev, ev[1]), FERRY_EAGAIN);
    rc = ferry__be_event_wait_any(dev, ev, 2, 10000000000ull, &which);
    assert_int_equal(rc, 0);
    assert_int_equal(which, 0); /* the first copy finishes first: same stream */
    uint64_t ta = 0, tb = 0;
    assert_int_equal(ferry__be_event_wait_any(dev, &ev[1], 1, 10000000000ull, &which), 0);
    assert_int_equal(ferry__be_event_time_ns(dev, ev[0], &ta), 0);
    assert_int_equal(ferry__be_event_time_ns(dev, ev[1], &tb), 0);
    double gbps = (double)n / (double)(tb - ta);
    printf("# second copy: %.2f ms, %.1f GB/s\n", (double)(tb - ta) / 1e6, gbps);
    assert_true(tb > ta);
    assert_true(gbps > 1.0 && gbps < 200.0);
    ferry__be_event_destroy(dev, ev[0]);
    ferry__be_event_destroy(dev, ev[1]);
    ferry__be_stream_destroy(dev, s);
    ferry__be_mem_free(dev, d);
    assert_int_equal(ferry_host_unregister(dev, host), 0);
    free(host);
}

/* copy_pieces with kernel_max: 600 pieces of 1 byte to 20 KiB, apart in pinned memory at aligned
 * and odd addresses, into one device buffer and back to another host buffer, by the copy kernel
 * (pieces up to 16 KiB: its 16-byte and its byte paths, three launches) and the copy engines
 * (the rest) in one call each way; every byte checked, nothing written between the pieces. */
static void test_copy_pieces_kernel(void **state)
{
    (void)state;
    enum { N = 600 };
    const size_t stride = 24u << 10, n = N * stride;
    unsigned char *in = NULL, *back = NULL;
    void *d = NULL;
    assert_int_equal(ferry_host_alloc(dev, n, (void **)&in), 0);
    assert_int_equal(ferry_host_alloc(dev, n, (void **)&back), 0);
    static ferry_be_piece_t pin[N], pout[N];
    uint64_t r = test_seed(0x9C5);
    test_fill_random(in, n, &r);
    memset(back, 0xEE, n);
    size_t off = 0;
    for (unsigned i = 0; i < N; i++) {
        size_t bytes = (size_t)test_rand_range(&r, 1, 20u << 10), skew = i % 3 ? 16 * (i % 4) : 7;
        pin[i] = (ferry_be_piece_t){in + i * stride + skew, off, bytes};
        pout[i] = (ferry_be_piece_t){back + i * stride + skew, off, bytes};
        off += (bytes + 255) & ~(size_t)255;
    }
    assert_int_equal(ferry__be_mem_alloc(dev, off, &d), 0);
    ferry_be_stream_t *s = NULL;
    assert_int_equal(ferry__be_stream_create(dev, 0, &s), 0);
    assert_int_equal(ferry__be_copy_pieces(dev, s, true, d, pin, N, 16u << 10), 0);
    assert_int_equal(ferry__be_copy_pieces(dev, s, false, d, pout, N, 16u << 10), 0);
    assert_int_equal(ferry__be_stream_sync(dev, s), 0);
    for (unsigned i = 0; i < N; i++) {
        long at = cudatest_first_diff(pout[i].host, pin[i].host, pin[i].bytes);
        if (at >= 0)
            fail_msg("piece %u (%zu bytes at +%zu) differs at byte %ld", i, pin[i].bytes,
                     (size_t)((unsigned char *)pin[i].host - in) % stride, at);
        const unsigned char *end = (const unsigned char *)pout[i].host + pout[i].bytes;
        const unsigned char *next = i + 1 < N ? (const unsigned char *)pout[i + 1].host : back + n;
        for (const unsigned char *q = end; q < next; q++)
            if (*q != 0xEE)
                fail_msg("piece %u: byte %zu past its end written", i, (size_t)(q - end));
    }
    ferry__be_stream_destroy(dev, s);
    ferry__be_mem_free(dev, d);
    ferry_host_free(dev, in);
    ferry_host_free(dev, back);
}

TEST_MAIN(cudatest_setup, cudatest_teardown, cmocka_unit_test(test_props),
          cmocka_unit_test(test_event_times), cmocka_unit_test(test_wait_any),
          cmocka_unit_test(test_copy_pieces_kernel))
