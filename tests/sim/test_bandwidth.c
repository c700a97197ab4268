/* The bandwidth monitor on the simulator: quiet on a healthy pipeline (8 MiB chunks, pinned),
 * an alert naming small transfers with 64 KiB chunks, and one naming pageable memory when
 * pinning is refused; the callback, the log and the stats agree. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry/workloads.h"
#include "testlib.h"

typedef struct seen {
    int raised, cleared;
    ferry_alert_cause_t cause;
    double ratio;
    char text[256];
} seen_t;

static void on_alert(const ferry_alert_t *a, void *arg)
{
    seen_t *s = arg;
    if (a->raised) {
        s->raised++;
        s->cause = a->cause;
        s->ratio = a->ratio;
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

static ferry_pipeline_stats_t stream(ferry_runtime_t *rt, size_t chunk, size_t total, seen_t *s)
{
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    ferry_workload_t *wl = NULL;
    assert_int_equal(ferry_workload_create("copy", NULL, &wl), 0);
    unsigned char *buf = calloc(1, total);
    assert_non_null(buf);
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = ferry_workload_stage(wl);
    pc.chunk_bytes = chunk;
    pc.on_alert = on_alert;
    pc.alert_arg = s;
    ferry_pipeline_t *p = NULL;
    assert_int_equal(ferry_pipeline_create(&pc, &p), 0);
    size_t per = chunk * 8 < total ? chunk * 8 : total;
    for (size_t off = 0; off < total; off += per) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = buf + off;
        b.out = buf + off;
        b.bytes = per;
        assert_int_equal(ferry_pipeline_submit(p, &b, done, NULL, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    free(buf);
    ferry_workload_destroy(wl);
    return st;
}

static void test_healthy_is_quiet(void **state)
{
    (void)state;
    const char *const kv[] = {"op_timing", "all", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    seen_t s = {0};
    ferry_pipeline_stats_t st = stream(rt, 8u << 20, 512u << 20, &s);
    printf("# 8 MiB chunks: H2D at %.0f%%, D2H at %.0f%% of the link; %d alerts\n",
           st.bw_ratio[0] * 100, st.bw_ratio[1] * 100, s.raised);
    assert_int_equal(s.raised, 0);
    assert_int_equal(st.bw_alerts, 0);
    assert_true(st.bw_ratio[0] > 0.6 && st.bw_ratio[1] > 0.6);
    ferry_runtime_destroy(rt);
}

static void test_small_transfers(void **state)
{
    (void)state;
    /* Sampled timing (the default): one chunk in 31 feeds the monitor. */
    ferry_runtime_t *rt = test_sim_runtime();
    seen_t s = {0};
    ferry_pipeline_stats_t st = stream(rt, 64u << 10, 256u << 20, &s);
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
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "op_timing", "all"), 0);
    ferry_runtime_config_t c = FERRY_RUNTIME_CONFIG_INIT;
    c.backend = "sim";
    c.profile = path;
    c.options = o;
    ferry_runtime_t *rt = NULL;
    assert_int_equal(ferry_runtime_create(&c, &rt), 0);
    ferry_options_destroy(o);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthy_is_quiet),
        cmocka_unit_test(test_small_transfers),
        cmocka_unit_test(test_pageable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
