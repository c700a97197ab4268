/* CUDA_DEVICE_MAX_CONNECTIONS in the library: how a value is read (every odd shape), ferry's
 * strict parser, the memory cost, the runtime options that set the variable before CUDA
 * starts, the stream plan counted against the queues, and the law measured on the model. */
#include <stdlib.h>
#include <string.h>

#include "ferry/connections.h"
#include "ferry/workloads.h"
#include "testlib.h"

static void test_read_every_shape(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        ferry_conn_status_t status;
        unsigned effective;
        bool measured;
    } cases[] = {
        {NULL, FERRY_CONN_UNSET, 8, true},
        {"", FERRY_CONN_UNSET, 8, true},
        {"1", FERRY_CONN_VALID, 1, true},
        {"32", FERRY_CONN_VALID, 32, true},
        {"0", FERRY_CONN_IGNORED, 8, true},
        {"-1", FERRY_CONN_IGNORED, 8, false},
        {"33", FERRY_CONN_UNDOCUMENTED, 33, true},
        {"64", FERRY_CONN_UNDOCUMENTED, 64, true},
        {"abc", FERRY_CONN_MALFORMED, 8, true},
        {"8x", FERRY_CONN_MALFORMED, 8, false},
        {" 8", FERRY_CONN_MALFORMED, 8, false},
        {"8 ", FERRY_CONN_MALFORMED, 8, false},
        {"+8", FERRY_CONN_MALFORMED, 8, false},
        {"99999999999999999999", FERRY_CONN_MALFORMED, 8, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_conn_reading_t r;
        assert_int_equal(ferry_connections_read(cases[i].text, &r), 0);
        printf("# '%s': %s\n", cases[i].text ? cases[i].text : "(unset)", r.note);
        assert_int_equal(r.status, cases[i].status);
        assert_int_equal(r.effective, cases[i].effective);
        assert_int_equal(r.measured, cases[i].measured);
        assert_true(strlen(r.note) > 10);
    }
    assert_int_equal(ferry_connections_read("8", NULL), FERRY_EINVAL);
}

static void test_strict_parse(void **state)
{
    (void)state;
    unsigned v = 0;
    assert_int_equal(ferry_connections_parse("--connections", "1", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(ferry_connections_parse("--connections", "32", &v), 0);
    assert_int_equal(v, 32);
    static const char *const bad_shape[] = {"abc", "8x", "",   " 8",  "8 ",
                                            "+8",  "-1", "08", "1e1", "0x8"};
    for (size_t i = 0; i < sizeof(bad_shape) / sizeof(bad_shape[0]); i++) {
        assert_int_equal(ferry_connections_parse("--connections", bad_shape[i], &v), FERRY_EPARSE);
        assert_non_null(strstr(ferry_last_error(), "--connections"));
        assert_non_null(strstr(ferry_last_error(), "1..32"));
    }
    static const char *const bad_range[] = {"0", "33", "64", "99999999999"};
    for (size_t i = 0; i < sizeof(bad_range) / sizeof(bad_range[0]); i++) {
        assert_int_equal(ferry_connections_parse("X", bad_range[i], &v), FERRY_ERANGE);
        assert_non_null(strstr(ferry_last_error(), "1..32"));
    }
    assert_int_equal(ferry_connections_parse("X", NULL, &v), FERRY_EINVAL);
    /* FACTS.md: ~64 KiB per compute and ~192 KiB per copy connection; 32+32 over 8+8 is ~6 MiB */
    size_t extra = ferry_connections_memory_bytes(32, 32) - ferry_connections_memory_bytes(8, 8);
    assert_int_equal(extra, 24 * (64 << 10) + 24 * (192 << 10));
}

static ferry_runtime_t *runtime_with(const char *name, const char *value)
{
    const char *const kv[] = {name, value, NULL};
    return test_sim_runtime_with(kv);
}

static ferry_pipeline_t *pipeline(ferry_device_t *dev, const ferry_stage_t *st, unsigned ncomp)
{
    ferry_pipeline_config_t pc = test_pipeline_config(dev, st, 1u << 20);
    pc.depth = 2;
    pc.compute_streams = ncomp;
    ferry_pipeline_t *p = test_pipeline(&pc);
    return p;
}

/* The per-device rules: each kind of match, first match wins, every rule checked whatever
 * matches, malformed ones named with the syntax. */
static void test_per_device_rules(void **state)
{
    (void)state;
    const char *r = "index:1=4,name:h200=16,cc:8.0=6,cc>=9.0=12,*=8";
    unsigned v = 0;
    assert_int_equal(ferry_connections_rule(r, "rules", 1, "NVIDIA H200", 9, 0, &v), 1);
    assert_int_equal(v, 4); /* index:1 comes first */
    assert_int_equal(ferry_connections_rule(r, "rules", 0, "NVIDIA H200", 9, 0, &v), 1);
    assert_int_equal(v, 16); /* name, case-insensitive */
    assert_int_equal(ferry_connections_rule(r, "rules", 2, "NVIDIA A100", 8, 0, &v), 1);
    assert_int_equal(v, 6);
    assert_int_equal(ferry_connections_rule(r, "rules", 2, "NVIDIA B200", 10, 0, &v), 1);
    assert_int_equal(v, 12);
    assert_int_equal(ferry_connections_rule(r, "rules", 2, "Tesla T4", 7, 5, &v), 1);
    assert_int_equal(v, 8);
    v = 99;
    assert_int_equal(ferry_connections_rule("index:0=4", "rules", 1, "x", 9, 0, &v), 0);
    assert_int_equal(v, 99); /* no match: untouched */
    /* index -1: the text alone, no match */
    assert_int_equal(ferry_connections_rule(r, "rules", -1, "", 0, 0, &v), 0);
    static const char *const bad[] = {"",         "*",         "=4",       "gpu:1=4",
                                      "index:=4", "index:a=4", "cc:9=4",   "cc>=9=4",
                                      "name:=4",  "*=4,",      "*=4,,*=5", "index:1=4,bogus"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = ferry_connections_rule(bad[i], "--per-device", 0, "x", 9, 0, &v);
        if (rc != FERRY_EINVAL)
            fail_msg("rules '%s': %d, expected FERRY_EINVAL", bad[i], rc);
        assert_non_null(strstr(ferry_last_error(), "--per-device: '"));
        assert_non_null(strstr(ferry_last_error(), "expected MATCH=VALUE"));
    }
    /* a bad rule after the one that matches is still refused; a bad value is the value's */
    assert_int_equal(ferry_connections_rule("*=4,gpu:1=4", "r", 0, "x", 9, 0, &v), FERRY_EINVAL);
    assert_int_equal(ferry_connections_rule("*=33", "r", 0, "x", 9, 0, &v), FERRY_ERANGE);
    assert_int_equal(ferry_connections_rule("*=4x", "r", 0, "x", 9, 0, &v), FERRY_EPARSE);
    assert_int_equal(ferry_connections_rule(NULL, "r", 0, "x", 9, 0, &v), FERRY_EINVAL);
}

static void test_option_sets_the_variable_and_plan_counts_streams(void **state)
{
    (void)state;
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    unsetenv("CUDA_DEVICE_MAX_COPY_CONNECTIONS");
    ferry_runtime_t *rt = runtime_with("connections", "2");
    assert_string_equal(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "2");
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("copy");
    /* 1 H2D + 2 compute + 1 D2H = 4 streams on 2 queues: said, and counted. */
    ferry_pipeline_t *p1 = pipeline(dev, ferry_workload_stage(wl), 2);
    ferry_pipeline_t *p2 = pipeline(dev, ferry_workload_stage(wl), 1);
    ferry_pipeline_stats_t s1 = FERRY_PIPELINE_STATS_INIT, s2 = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p1, &s1), 0);
    assert_int_equal(ferry_pipeline_stats(p2, &s2), 0);
    assert_int_equal(s1.connections, 2);
    assert_int_equal(s1.context_streams, 4);
    assert_int_equal(s2.context_streams, 7);
    assert_int_equal(ferry_pipeline_close(p1), 0);
    ferry_pipeline_t *p3 = pipeline(dev, ferry_workload_stage(wl), 1);
    ferry_pipeline_stats_t s3 = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p3, &s3), 0);
    assert_int_equal(s3.context_streams, 6); /* p1's streams were given back */
    assert_int_equal(ferry_pipeline_close(p2), 0);
    assert_int_equal(ferry_pipeline_close(p3), 0);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);

    /* The copy queues too; 0 leaves the environment alone. */
    rt = runtime_with("copy_connections", "16");
    assert_string_equal(getenv("CUDA_DEVICE_MAX_COPY_CONNECTIONS"), "16");
    assert_string_equal(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "2");
    ferry_runtime_destroy(rt);
    /* Bad values are refused by the option parser, naming the range. */
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "connections", "33"), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "32"));
    assert_int_equal(ferry_options_set(o, "connections", "8x"), FERRY_EPARSE);
    ferry_options_destroy(o);
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    unsetenv("CUDA_DEVICE_MAX_COPY_CONNECTIONS");
}

/* The law on the model, in this process: 32 streams, A (2 ms) then B (0.1 ms) stream by stream,
 * take 2 ms x ceil(32 / C); round-robin they take one A whatever C is. */
static void test_measure_on_the_model(void **state)
{
    (void)state;
    static const char *const values[] = {"1", "4", "32"};
    static const unsigned waves[] = {32, 8, 1};
    for (int i = 0; i < 3; i++) {
        ferry_runtime_t *rt = runtime_with("connections", values[i]);
        ferry_device_t *dev = test_device(rt);
        ferry_conn_measure_t m = FERRY_CONN_MEASURE_INIT;
        assert_int_equal(ferry_connections_measure(dev, 32, 2000000, 100000, 3, &m), 0);
        printf("# C=%s: %.2f ms (%.2f waves, queues %.1f), round-robin %.2f ms, used %llu\n",
               values[i], m.total_ms, m.waves, m.effective_queues, m.roundrobin_ms,
               (unsigned long long)m.device_used_bytes);
        double law = 2.0 * waves[i] + 0.1;
        assert_true(m.total_ms > 0.97 * law && m.total_ms < 1.2 * law);
        assert_true(m.roundrobin_ms < 2.5);
        assert_int_equal(m.at_least, waves[i] == 1);
        if (waves[i] > 1)
            assert_true(m.effective_queues > 0.9 * atoi(values[i]) &&
                        m.effective_queues < 1.1 * atoi(values[i]));
        ferry_conn_measure_t bad = FERRY_CONN_MEASURE_INIT;
        assert_int_equal(ferry_connections_measure(dev, 65, 2000000, 100000, 3, &bad),
                         FERRY_EINVAL);
        ferry_runtime_destroy(rt);
    }
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_read_every_shape), cmocka_unit_test(test_strict_parse),
          cmocka_unit_test(test_per_device_rules),
          cmocka_unit_test(test_option_sets_the_variable_and_plan_counts_streams),
          cmocka_unit_test(test_measure_on_the_model))
