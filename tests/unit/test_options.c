/* Options: defaults, strict parsing with units and ranges, environment overrides that name the
 * variable and the accepted range, and an object left unchanged by a bad value. */
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static int64_t get(const ferry_options_t *o, const char *name)
{
    int64_t v = -12345;
    assert_int_equal(ferry_options_get_i64(o, name, &v), 0);
    return v;
}

static void test_defaults(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(get(o, "depth"), 8);
    assert_int_equal(get(o, "chunk_bytes"), 0);
    assert_int_equal(get(o, "copy_streams"), 1);
    assert_int_equal(get(o, "compute_streams"), 2);
    assert_int_equal(get(o, "stage_threshold"), 256 * 1024);
    assert_string_equal(ferry_options_get_str(o, "backend"), "auto");
    assert_int_equal(get(o, "backend"), 0); /* enum index */
    assert_string_equal(ferry_options_get_str(o, "profile"), "");
    assert_null(ferry_options_get_str(o, "depth"));
    ferry_options_destroy(o);
    ferry_options_destroy(NULL);
}

static void test_table(void **state)
{
    (void)state;
    size_t n = ferry_option_count();
    assert_true(n >= 10);
    for (size_t i = 0; i < n; i++) {
        const ferry_option_info_t *inf = ferry_option_at(i);
        assert_non_null(inf);
        assert_true(strncmp(inf->env, "FERRY_", 6) == 0);
        for (const char *c = inf->env; *c; c++)
            assert_false(*c >= 'a' && *c <= 'z');
        assert_ptr_equal(ferry_option_find(inf->name), inf);
        assert_true(strlen(inf->doc) > 10);
    }
    assert_null(ferry_option_at(n));
    assert_null(ferry_option_find("no_such_option"));
    assert_string_equal(ferry_option_find("chunk_bytes")->env, "FERRY_CHUNK_BYTES");
}

static void test_set_sizes(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "chunk_bytes", "8M"), 0);
    assert_int_equal(get(o, "chunk_bytes"), 8 << 20);
    assert_int_equal(ferry_options_set(o, "chunk_bytes", "4MiB"), 0);
    assert_int_equal(get(o, "chunk_bytes"), 4 << 20);
    assert_int_equal(ferry_options_set(o, "chunk_bytes", "4096"), 0);
    assert_int_equal(get(o, "chunk_bytes"), 4096);
    assert_int_equal(ferry_options_set(o, "chunk_bytes", "1G"), 0);
    assert_int_equal(get(o, "chunk_bytes"), 1 << 30);
    /* bad values leave the last good one */
    const char *bad[] = {"8x", "", " 8M", "8M ", "-1", "8.5M", "M", "0x10", "2G", "99999999999T"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = ferry_options_set(o, "chunk_bytes", bad[i]);
        assert_true(rc == FERRY_EPARSE || rc == FERRY_ERANGE);
        assert_non_null(strstr(ferry_last_error(), "chunk_bytes"));
        assert_int_equal(get(o, "chunk_bytes"), 1 << 30);
    }
    assert_int_equal(ferry_options_set(o, "chunk_bytes", "2G"), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "1073741824"));
    ferry_options_destroy(o);
}

static void test_set_ints_bools_enums(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "depth", "64"), 0);
    assert_int_equal(ferry_options_set(o, "depth", "65"), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "1 to 64"));
    assert_int_equal(ferry_options_set(o, "depth", "0"), FERRY_ERANGE);
    assert_int_equal(ferry_options_set(o, "depth", "+3"), FERRY_EPARSE);
    assert_int_equal(ferry_options_set(o, "depth", "3 "), FERRY_EPARSE);
    assert_int_equal(get(o, "depth"), 64);
    assert_int_equal(ferry_options_set(o, "compute_priority", "-5"), 0);
    assert_int_equal(get(o, "compute_priority"), -5);
    assert_int_equal(ferry_options_set(o, "compute_priority", "-65"), FERRY_ERANGE);
    assert_int_equal(ferry_options_set(o, "nonblocking", "yes"), 0);
    assert_int_equal(get(o, "nonblocking"), 1);
    assert_int_equal(ferry_options_set(o, "nonblocking", "off"), 0);
    assert_int_equal(get(o, "nonblocking"), 0);
    assert_int_equal(ferry_options_set(o, "nonblocking", "2"), FERRY_EPARSE);
    assert_int_equal(ferry_options_set(o, "backend", "sim"), 0);
    assert_string_equal(ferry_options_get_str(o, "backend"), "sim");
    assert_int_equal(get(o, "backend"), 1);
    assert_int_equal(ferry_options_set(o, "backend", "gpu"), FERRY_EPARSE);
    assert_non_null(strstr(ferry_last_error(), "auto|sim|cuda"));
    assert_string_equal(ferry_options_get_str(o, "backend"), "sim");
    assert_int_equal(ferry_options_set(o, "seed", "18446744073709551615"), 0);
    assert_int_equal(ferry_options_set(o, "seed", "18446744073709551616"), FERRY_ERANGE);
    assert_int_equal(ferry_options_set(o, "nope", "1"), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "nope"));
    assert_int_equal(ferry_options_set(NULL, "depth", "1"), FERRY_EINVAL);
    assert_int_equal(ferry_options_set(o, NULL, "1"), FERRY_EINVAL);
    assert_int_equal(ferry_options_set(o, "depth", NULL), FERRY_EINVAL);
    int64_t v;
    assert_int_equal(ferry_options_get_i64(o, "profile", &v), FERRY_EINVAL);
    assert_int_equal(ferry_options_create(NULL), FERRY_EINVAL);
    ferry_options_destroy(o);
}

static void test_env(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    setenv("FERRY_DEPTH", "7", 1);
    setenv("FERRY_CHUNK_BYTES", "2M", 1);
    assert_int_equal(ferry_options_apply_env(o), 0);
    assert_int_equal(get(o, "depth"), 7);
    assert_int_equal(get(o, "chunk_bytes"), 2 << 20);

    /* one bad variable: an error naming it and the range, and nothing applied */
    setenv("FERRY_DEPTH", "9", 1);
    setenv("FERRY_COPY_STREAMS", "abc", 1);
    assert_int_equal(ferry_options_apply_env(o), FERRY_EPARSE);
    assert_non_null(strstr(ferry_last_error(), "FERRY_COPY_STREAMS"));
    assert_non_null(strstr(ferry_last_error(), "abc"));
    assert_non_null(strstr(ferry_last_error(), "1 to 8"));
    assert_int_equal(get(o, "depth"), 7);

    setenv("FERRY_COPY_STREAMS", "", 1);
    assert_int_equal(ferry_options_apply_env(o), FERRY_EPARSE);
    assert_non_null(strstr(ferry_last_error(), "empty"));
    unsetenv("FERRY_COPY_STREAMS");

    setenv("FERRY_COMPUTE_STREAMS", "17", 1);
    assert_int_equal(ferry_options_apply_env(o), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "FERRY_COMPUTE_STREAMS"));
    unsetenv("FERRY_COMPUTE_STREAMS");

    setenv("FERRY_BACKEND", "gpu", 1);
    assert_int_equal(ferry_options_apply_env(o), FERRY_EPARSE);
    assert_non_null(strstr(ferry_last_error(), "FERRY_BACKEND"));
    unsetenv("FERRY_BACKEND");

    assert_int_equal(ferry_options_apply_env(o), 0);
    assert_int_equal(get(o, "depth"), 9);
    unsetenv("FERRY_DEPTH");
    unsetenv("FERRY_CHUNK_BYTES");

    ferry_options_t *c = NULL;
    assert_int_equal(ferry_options_clone(o, &c), 0);
    assert_int_equal(get(c, "depth"), 9);
    assert_int_equal(ferry_options_set(c, "depth", "3"), 0);
    assert_int_equal(get(o, "depth"), 9);
    ferry_options_destroy(c);
    ferry_options_destroy(o);
}

static void test_runtime_rejects_bad_env(void **state)
{
    (void)state;
    setenv("FERRY_QUEUE_DEPTH", "-4", 1);
    ferry_runtime_t *rt = (ferry_runtime_t *)0x1;
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "sim";
    cfg.profile = FERRY_TEST_PROFILE;
    assert_int_equal(ferry_runtime_create(&cfg, &rt), FERRY_EPARSE);
    assert_ptr_equal(rt, (ferry_runtime_t *)0x1); /* untouched on error */
    assert_non_null(strstr(ferry_last_error(), "FERRY_QUEUE_DEPTH"));
    unsetenv("FERRY_QUEUE_DEPTH");
}

/* Float options take decimal notation only: strtod alone takes hex, inf and nan. */
static void test_double_decimal_only(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    double d = 0;
    assert_int_equal(ferry_options_set(o, "deadline_factor", "16"), 0);
    assert_int_equal(ferry_options_set(o, "deadline_factor", "1.5e1"), 0);
    assert_int_equal(ferry_options_get_double(o, "deadline_factor", &d), 0);
    assert_true(d == 15.0);
    const char *bad[] = {"0x10", "0X1p4", "inf", "nan", "infinity", "1e", ".", "", " 8", "8 "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = ferry_options_set(o, "deadline_factor", bad[i]);
        assert_true(rc == FERRY_EPARSE || rc == FERRY_ERANGE);
        assert_non_null(strstr(ferry_last_error(), "deadline_factor"));
        assert_non_null(strstr(ferry_last_error(), "decimal number from 1 to 1000"));
        assert_int_equal(ferry_options_get_double(o, "deadline_factor", &d), 0);
        assert_true(d == 15.0);
    }
    ferry_options_destroy(o);
}

/* The largest seed is 2^64-1, not the 2^64 that printing the double bound gives. */
static void test_seed_message_max(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "seed", "18446744073709551615"), 0);
    assert_int_equal(ferry_options_set(o, "seed", "18446744073709551616"), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "from 0 to 18446744073709551615"));
    assert_null(strstr(ferry_last_error(), "18446744073709551616 "));
    assert_int_equal(ferry_options_set(o, "seed", "x"), FERRY_EPARSE);
    assert_non_null(strstr(ferry_last_error(), "to 18446744073709551615"));
    ferry_options_destroy(o);
}

/* The option table's range for a number is what its parser accepts, at both ends. */
static void test_double_bounds_accepted(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    for (size_t i = 0; i < ferry_option_count(); i++) {
        const ferry_option_info_t *inf = ferry_option_at(i);
        if (inf->type != FERRY_OPT_DOUBLE)
            continue;
        char lo[64], hi[64];
        snprintf(lo, sizeof(lo), "%g", inf->min);
        snprintf(hi, sizeof(hi), "%g", inf->max);
        assert_int_equal(ferry_options_set(o, inf->name, lo), 0);
        assert_int_equal(ferry_options_set(o, inf->name, hi), 0);
    }
    assert_int_equal(ferry_options_set(o, "bw_foreign_ratio", "0.01"), 0);
    assert_int_equal(ferry_options_set(o, "bw_foreign_ratio", "0"), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "from 0.01 to 1"));
    ferry_options_destroy(o);
}

static char log_lines[8][512];
static int log_count;

static void capture_log(ferry_log_level_t level, const char *subsystem, const char *line, void *arg)
{
    (void)level;
    (void)subsystem;
    (void)arg;
    if (log_count < 8)
        snprintf(log_lines[log_count++], sizeof(log_lines[0]), "%s", line);
}

static bool logged(const char *text)
{
    for (int i = 0; i < log_count; i++)
        if (strstr(log_lines[i], text) != NULL)
            return true;
    return false;
}

/* A misspelt variable is named with the nearest option's; ferry's own test variables and the
 * options' variables are not flagged. */
static void test_env_unknown_variable(void **state)
{
    (void)state;
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    ferry_log_level_t lv = ferry_get_log_level();
    ferry_set_log_level(FERRY_LOG_WARN);
    ferry_set_log_handler(capture_log, NULL);
    log_count = 0;
    setenv("FERRY_DEPT", "4", 1);
    setenv("FERRY_CHUNKBYTES", "1M", 1);
    setenv("FERRY_QWERTYUIOP", "1", 1);
    setenv("FERRY_DEPTH", "5", 1);
    setenv("FERRY_TEST_SOMETHING", "1", 1);
    setenv("FERRY_SOAK_BATCHES", "10", 1);
    setenv("FERRY_DEVICE_INDEX", "1", 1); /* what ferry exec --per-device gives a child */
    assert_int_equal(ferry_options_apply_env(o), 0);
    ferry_set_log_handler(NULL, NULL);
    ferry_set_log_level(lv);
    assert_true(logged("unknown variable FERRY_DEPT; did you mean FERRY_DEPTH?"));
    assert_true(logged("unknown variable FERRY_CHUNKBYTES; did you mean FERRY_CHUNK_BYTES?"));
    assert_true(logged("unknown variable FERRY_QWERTYUIOP: no ferry option reads it"));
    assert_false(logged("FERRY_DEPTH "));
    assert_false(logged("FERRY_TEST_SOMETHING"));
    assert_false(logged("FERRY_SOAK_BATCHES"));
    assert_false(logged("FERRY_DEVICE_INDEX"));
    assert_int_equal(log_count, 3);
    assert_int_equal(get(o, "depth"), 5);
    unsetenv("FERRY_DEPT");
    unsetenv("FERRY_CHUNKBYTES");
    unsetenv("FERRY_QWERTYUIOP");
    unsetenv("FERRY_DEPTH");
    unsetenv("FERRY_TEST_SOMETHING");
    unsetenv("FERRY_SOAK_BATCHES");
    unsetenv("FERRY_DEVICE_INDEX");
    ferry_options_destroy(o);
}

static void test_parse_size(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(ferry_parse_size("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(ferry_parse_size("1k", &v), 0);
    assert_int_equal(v, 1024);
    assert_int_equal(ferry_parse_size("3T", &v), 0);
    assert_int_equal(v, 3ull << 40);
    assert_int_equal(ferry_parse_size("5B", &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(ferry_parse_size("16777216T", &v), FERRY_ERANGE);
    assert_int_equal(ferry_parse_size("18446744073709551615", &v), 0);
    assert_int_equal(v, UINT64_MAX);
    assert_int_equal(ferry_parse_size("18446744073709551616", &v), FERRY_ERANGE);
    assert_int_equal(ferry_parse_size("1KB2", &v), FERRY_EPARSE);
    assert_int_equal(ferry_parse_size("1iB", &v), FERRY_EPARSE);
    assert_int_equal(ferry_parse_size(NULL, &v), FERRY_EINVAL);
    assert_int_equal(ferry_parse_size("1", NULL), FERRY_EINVAL);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_defaults), cmocka_unit_test(test_table),
          cmocka_unit_test(test_set_sizes), cmocka_unit_test(test_set_ints_bools_enums),
          cmocka_unit_test(test_env), cmocka_unit_test(test_runtime_rejects_bad_env),
          cmocka_unit_test(test_parse_size), cmocka_unit_test(test_double_decimal_only),
          cmocka_unit_test(test_seed_message_max), cmocka_unit_test(test_double_bounds_accepted),
          cmocka_unit_test(test_env_unknown_variable))
