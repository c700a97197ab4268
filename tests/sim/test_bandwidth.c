/* The bandwidth monitor on the simulator: quiet on a healthy pipeline (8 MiB chunks, pinned),
 * also below 60% of the link's theoretical rate where that is what the link delivers at the
 * copies' sizes (judged against the profile's copy curve), an alert naming small transfers
 * with 64 KiB copies, one naming pageable memory when
 * pinning is refused, and one naming another process when an injected share takes the link
 * (the link monitor sees traffic the pipeline did not move); the callback, the log and the
 * stats agree. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry/workloads.h"
#include "testlib.h"

typedef struct seen {
    int raised, cleared;
    ferry_alert_cause_t cause;
    double ratio;
    double foreign[2];
    char text[320];
} seen_t;

static void on_alert(const ferry_alert_t *a, void *arg)
{
    seen_t *s = arg;
    if (a->raised) {
        s->raised++;
        s->cause = a->cause;
        s->ratio = a->ratio;
        s->foreign[0] = a->foreign_gbps[0];
        s->foreign[1] = a->foreign_gbps[1];
        snprintf(s->text, sizeof(s->text), "%s", a->text);
    } else {
        s->cleared++;
    }
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    (void)arg;
    assert_int_equal(r->status, 0);
}

static ferry_pipeline_stats_t stream_with(ferry_runtime_t *rt, size_t chunk, size_t total,
                                          size_t coalesce, seen_t *s)
{
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("copy");
    unsigned char *buf = calloc(1, total);
    assert_non_null(buf);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), chunk);
    pc.coalesce_bytes = coalesce;
    pc.on_alert = on_alert;
    pc.alert_arg = s;
    ferry_pipeline_t *p = test_pipeline(&pc);
    size_t per = chunk * 8 < total ? chunk * 8 : total;
    test_submit_split(p, buf, buf, total, per, done, NULL);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    free(buf);
    ferry_workload_destroy(wl);
    return st;
}

static ferry_pipeline_stats_t stream(ferry_runtime_t *rt, size_t chunk, size_t total, seen_t *s)
{
    return stream_with(rt, chunk, total, 0, s);
}

static void test_healthy_is_quiet(void **state)
{
    (void)state;
    /* A link sample every 5 ms of virtual time: several during the run. */
    const char *const kv[] = {"op_timing", "all", "link_sample_ms", "5", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    seen_t s = {0};
    ferry_pipeline_stats_t st = stream(rt, 8u << 20, 1024u << 20, &s);
    printf("# 8 MiB chunks: H2D at %.0f%%, D2H at %.0f%% of the link; %d alerts; link sample "
           "%llu: %.1f/%.1f GB/s on the link, %.1f/%.1f the pipeline's\n",
           st.bw_ratio[0] * 100, st.bw_ratio[1] * 100, s.raised,
           (unsigned long long)st.link_samples, st.link_bps[0] / 1e9, st.link_bps[1] / 1e9,
           st.link_own_bps[0] / 1e9, st.link_own_bps[1] / 1e9);
    assert_int_equal(s.raised, 0);
    assert_int_equal(st.bw_alerts, 0);
    assert_true(st.bw_ratio[0] > 0.6 && st.bw_ratio[1] > 0.6);
    /* Alone on the link, the pipeline's own bytes are the link's traffic (within the 1 ms
     * buckets and the lag of retirement behind the copies). */
    assert_true(st.link_samples >= 3);
    for (int d = 0; d < 2; d++) {
        assert_true(st.link_bps[d] > 20e9);
        assert_true(st.link_own_bps[d] > 0.9 * st.link_bps[d]);
        assert_true(st.link_own_bps[d] < 1.1 * st.link_bps[d]);
    }
    ferry_runtime_destroy(rt);
}

/* A healthy round trip of 512 KiB copies (64 KiB chunks merged by the default coalescing):
 * each direction gets what the link delivers for 512 KiB while the other direction copies too,
 * about 35 GB/s, under 60% of the link's theoretical 63 GB/s. The H200 was the same at 8 MiB
 * (37-38 GB/s H2D, bench/results/2026-12-03-h200-485b4bd-link.jsonl: 11 and 7 alerts alone on
 * the link): judged against the copy curve at the window's sizes, it raises none. */
static void test_healthy_below_theoretical_is_quiet(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    seen_t s = {0};
    ferry_pipeline_stats_t st = stream(rt, 64u << 10, 256u << 20, &s);
    printf("# 512 KiB copies: H2D at %.0f%%, D2H at %.0f%% of the link; %d alerts%s%s\n",
           st.bw_ratio[0] * 100, st.bw_ratio[1] * 100, s.raised, s.raised ? ": " : "", s.text);
    assert_true(st.bw_ratio[0] < 0.6); /* what the theoretical threshold alerted on */
    assert_int_equal(s.raised, 0);
    assert_int_equal(st.bw_alerts, 0);
    ferry_runtime_destroy(rt);
}

/* Another process takes @gbps of the link both ways from 1 ms on. */
static seen_t with_share(const char *gbps, const char *sample_ms, ferry_pipeline_stats_t *st)
{
    char spec[64];
    snprintf(spec, sizeof(spec), "share@time=1ms:gbps=%s:dir=both", gbps);
    const char *const kv[] = {"op_timing",      "all",     "inject", spec,
                              "link_sample_ms", sample_ms, NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    seen_t s = {0};
    *st = stream(rt, 8u << 20, 1024u << 20, &s);
    printf("# share %s GB/s, sampling every %s ms: %d alert(s), %s\n", gbps, sample_ms, s.raised,
           s.text);
    ferry_runtime_destroy(rt);
    return s;
}

static void test_other_process(void **state)
{
    (void)state;
    ferry_pipeline_stats_t st;
    seen_t s = with_share("40", "200", &st);
    assert_true(s.raised >= 1);
    assert_int_equal(s.cause, FERRY_CAUSE_FOREIGN);
    assert_non_null(strstr(s.text, "another process"));
    assert_true(s.ratio < 0.6);
    /* At least the foreign ratio (10% of 63 GB/s) that the pipeline did not move. */
    assert_true(s.foreign[0] >= 6.3 && s.foreign[1] >= 6.3);
    assert_true(s.foreign[0] <= 40.5 && s.foreign[1] <= 40.5);
    assert_true(st.link_samples >= 1);
    assert_int_equal(st.bw_alerts, (uint64_t)s.raised);
}

static void test_small_share_is_quiet(void **state)
{
    (void)state;
    ferry_pipeline_stats_t st;
    seen_t s = with_share("5", "200", &st);
    assert_int_equal(s.raised, 0);
    assert_true(st.bw_ratio[0] > 0.6 && st.bw_ratio[1] > 0.6);
}

static void test_share_without_sampling(void **state)
{
    (void)state;
    /* link_sample_ms 0: no link monitor, so the alert cannot name the other process. */
    ferry_pipeline_stats_t st;
    seen_t s = with_share("40", "0", &st);
    assert_true(s.raised >= 1);
    assert_true(s.cause != FERRY_CAUSE_FOREIGN);
    assert_int_equal(st.link_samples, 0);
    assert_true(st.link_bps[0] < 0 && st.link_own_bps[1] < 0);
}

static void test_small_transfers(void **state)
{
    (void)state;
    /* Sampled timing (the default): one chunk in 31 feeds the monitor. A copy per chunk: at
     * 64 KiB the link itself delivers 11-13 GB/s, under 60% of its 55 GB/s for large copies. */
    ferry_runtime_t *rt = test_sim_runtime();
    seen_t s = {0};
    ferry_pipeline_stats_t st = stream_with(rt, 64u << 10, 256u << 20, SIZE_MAX, &s);
    printf("# 64 KiB chunks: %s\n", s.text);
    assert_true(s.raised >= 1);
    assert_int_equal(s.cause, FERRY_CAUSE_SMALL_TRANSFERS);
    assert_true(s.ratio < 0.6);
    assert_non_null(strstr(s.text, "small transfers"));
    assert_int_equal(st.bw_alerts, (uint64_t)s.raised);
    ferry_runtime_destroy(rt);
}

static void test_pageable(void **state)
{
    (void)state;
    char path[64];
    test_profile_with_pin_limit(path, sizeof(path), 4096);
    const char *kv[] = {"op_timing", "all", NULL};
    ferry_runtime_t *rt = test_sim_runtime_on(path, kv);
    unlink(path);
    seen_t s = {0};
    ferry_pipeline_stats_t st = stream(rt, 8u << 20, 256u << 20, &s);
    printf("# pageable: %s\n", s.text);
    assert_false(st.host_pinned);
    assert_true(s.raised >= 1);
    assert_int_equal(s.cause, FERRY_CAUSE_PAGEABLE);
    assert_non_null(strstr(s.text, "pageable"));
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_healthy_is_quiet),
          cmocka_unit_test(test_healthy_below_theoretical_is_quiet),
          cmocka_unit_test(test_small_transfers), cmocka_unit_test(test_pageable),
          cmocka_unit_test(test_other_process), cmocka_unit_test(test_small_share_is_quiet),
          cmocka_unit_test(test_share_without_sampling))
