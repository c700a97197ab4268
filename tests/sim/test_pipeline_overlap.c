/* Overlap on the model: a balanced round trip (copy-bound, light compute) through the pipeline
 * with dedicated copy streams reaches at least 90% of the modelled bidirectional ceiling each
 * way; the same work on one stream is measurably slower (no overlap), and more chunks in
 * flight never make it slower. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static ferry_pipeline_stats_t run(ferry_device_t *dev, size_t chunk, unsigned depth, bool single,
                                  unsigned ncomp, size_t total)
{
    ferry_stage_t s = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &s, chunk);
    cfg.depth = depth;
    cfg.compute_streams = ncomp;
    cfg.single_stream = single;
    cfg.coalesce_bytes = SIZE_MAX; /* a copy per chunk: the chunk size is what is measured */
    /* Every batch fits in the queue: the submitting thread, when this machine is busy, cannot
     * leave the simulated device idle (the model charges host time only to ferry's threads). */
    cfg.queue_depth = 64;
    ferry_pipeline_t *p = test_pipeline(&cfg);
    test_submit_generated(p, total, 4 * chunk, 20);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    return st;
}

static void test_overlap_reaches_ceiling(void **state)
{
    (void)state;
    /* Every chunk timed: the overlap asserted here is measured, not estimated. */
    const char *const kv[] = {"op_timing", "all", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    struct ferry_sim_profile prof;
    assert_int_equal(ferry__sim_profile_load(FERRY_TEST_PROFILE, &prof), 0);

    const size_t chunk = 8u << 20, total = 512u << 20;
    /* The modelled ceiling of a round trip: each direction's copy of one chunk, with the link
     * shared by the other direction for the transfer part. */
    double ceil_gbps[2];
    for (int d = 0; d < 2; d++) {
        double lat = (double)ferry__sim_copy_latency_ns(&prof, d, chunk);
        double xfer = (double)ferry__sim_copy_ns(&prof, d, chunk, true) - lat;
        ceil_gbps[d] = (double)chunk / (lat + xfer / prof.bidir_factor);
    }
    ferry_pipeline_stats_t two = run(dev, chunk, 4, false, 2, total);
    ferry_pipeline_stats_t one = run(dev, chunk, 4, true, 1, total);
    ferry_pipeline_stats_t deep = run(dev, chunk, 8, false, 2, total);
    printf("# ceiling H2D %.2f D2H %.2f GB/s; streams: H2D %.2f D2H %.2f (overlap %.2f); one "
           "stream: H2D %.2f D2H %.2f (overlap %.2f); depth 8: %.2f\n",
           ceil_gbps[0], ceil_gbps[1], two.gbps_h2d, two.gbps_d2h, two.overlap, one.gbps_h2d,
           one.gbps_d2h, one.overlap, deep.gbps_h2d);
    assert_true(two.gbps_h2d >= 0.90 * ceil_gbps[0]);
    assert_true(two.gbps_d2h >= 0.90 * ceil_gbps[1]);
    assert_true(two.gbps_h2d <= 1.02 * ceil_gbps[0]); /* and not faster than the model allows */
    /* one stream serialises H2D, compute and D2H: well under the overlapped rate */
    assert_true(one.gbps_h2d < 0.70 * two.gbps_h2d);
    assert_true(one.overlap < 1.1);
    assert_true(two.overlap > 1.8);
    assert_true(deep.gbps_h2d >= 0.98 * two.gbps_h2d);
    assert_int_equal(two.bytes_h2d, total);
    assert_int_equal(two.bytes_d2h, total);
    ferry_runtime_destroy(rt);
}

static ferry_runtime_t *runtime_with_timing(const char *mode)
{
    const char *const kv[] = {"op_timing", mode, NULL};
    return test_sim_runtime_with(kv);
}

/* Sampled timing (one chunk in 31, the default) reports what timing every chunk reports: each
 * engine class's busy time within 5%, every stream's busy time seen, exactly which chunks were
 * timed. (The rate itself may differ by a few percent between two runs of the model: when the
 * submitting thread falls behind in real time, the device idles in virtual time.) A bad value
 * is refused by name. */
/* One plan (@ncomp compute streams, or @single stream) timed both ways. */
static void sampled_agrees(unsigned ncomp, bool single)
{
    const size_t chunk = 1u << 20, total = 256u << 20; /* 256 chunks */
    ferry_pipeline_stats_t st[2];
    const char *modes[2] = {"all", "sample"};
    for (int m = 0; m < 2; m++) {
        ferry_runtime_t *rt = runtime_with_timing(modes[m]);
        ferry_device_t *dev = test_device(rt);
        st[m] = run(dev, chunk, 8, single, ncomp, total);
        ferry_runtime_destroy(rt);
    }
    printf("# %u compute stream(s)%s: all: %.2f GB/s overlap %.3f busy %llu/%llu/%llu ns; sample "
           "(%llu timed): %.2f GB/s overlap %.3f busy %llu/%llu/%llu ns\n",
           ncomp, single ? ", one stream" : "", st[0].gbps_h2d, st[0].overlap,
           (unsigned long long)st[0].busy_h2d_ns, (unsigned long long)st[0].busy_compute_ns,
           (unsigned long long)st[0].busy_d2h_ns, (unsigned long long)st[1].chunks_timed,
           st[1].gbps_h2d, st[1].overlap, (unsigned long long)st[1].busy_h2d_ns,
           (unsigned long long)st[1].busy_compute_ns, (unsigned long long)st[1].busy_d2h_ns);
    assert_int_equal(st[0].chunks_timed, 256);
    assert_int_equal(st[1].chunks_timed, (256 + 30) / 31); /* chunks 0, 31, ..., 248 */
    assert_true(st[1].gbps_h2d > 0.9 * st[0].gbps_h2d && st[1].gbps_h2d < 1.1 * st[0].gbps_h2d);
    const uint64_t *b0[3] = {&st[0].busy_h2d_ns, &st[0].busy_compute_ns, &st[0].busy_d2h_ns};
    const uint64_t *b1[3] = {&st[1].busy_h2d_ns, &st[1].busy_compute_ns, &st[1].busy_d2h_ns};
    for (int k = 0; k < 3; k++)
        assert_true((double)*b1[k] > 0.95 * (double)*b0[k] &&
                    (double)*b1[k] < 1.05 * (double)*b0[k]);
    double sum = (double)(st[1].busy_h2d_ns + st[1].busy_compute_ns + st[1].busy_d2h_ns);
    assert_true(st[1].overlap > 0.999 * sum / (double)st[1].elapsed_ns &&
                st[1].overlap < 1.001 * sum / (double)st[1].elapsed_ns);
    for (unsigned i = 0; i < st[1].streams; i++)
        assert_true(st[1].stream_busy_ns[i] > 0);
}

/* Sampled chunks take their starts from the chunks before them on their streams (anchors) with
 * up to 4 streams of a kind, and record timed events before their ops beyond that (6). */
static void test_sampled_timing_agrees(void **state)
{
    (void)state;
    sampled_agrees(2, false);
    sampled_agrees(3, false);
    sampled_agrees(6, false);
    sampled_agrees(1, true);

    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "op_timing", "some"), FERRY_EPARSE);
    assert_non_null(strstr(ferry_last_error(), "sample|all"));
    ferry_options_destroy(o);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_overlap_reaches_ceiling),
          cmocka_unit_test(test_sampled_timing_agrees))
