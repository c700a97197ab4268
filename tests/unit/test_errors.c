/* The error table: every code has its own name and message; unknown codes are reported as
 * such; the last-error text is per thread. */
#include <pthread.h>
#include <string.h>

#include "testlib.h"

static const int codes[] = {
#define X(name, value, msg) value,
    FERRY_ERROR_TABLE(X)
#undef X
};

static void test_names_and_messages_unique(void **state)
{
    (void)state;
    size_t n = sizeof(codes) / sizeof(codes[0]);
    assert_true(n >= 18);
    for (size_t i = 0; i < n; i++) {
        assert_string_not_equal(ferry_err_name(codes[i]), "UNKNOWN");
        assert_string_not_equal(ferry_strerror(codes[i]), "unknown error");
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(codes[i], codes[j]);
            assert_string_not_equal(ferry_err_name(codes[i]), ferry_err_name(codes[j]));
            assert_string_not_equal(ferry_strerror(codes[i]), ferry_strerror(codes[j]));
        }
    }
    assert_string_equal(ferry_err_name(FERRY_EINVAL), "EINVAL");
    assert_string_equal(ferry_err_name(0), "OK");
    assert_int_equal(FERRY_EAGAIN, -3);
}

static void test_unknown_codes(void **state)
{
    (void)state;
    assert_string_equal(ferry_err_name(-9999), "UNKNOWN");
    assert_string_equal(ferry_strerror(12345), "unknown error");
    assert_string_equal(ferry_err_name(1), "UNKNOWN");
}

static void *other_thread(void *arg)
{
    (void)arg;
    uint64_t v;
    ferry_parse_size("12Q", &v); /* fails in this thread only */
    return strdup(ferry_last_error());
}

static void test_last_error_is_per_thread(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(ferry_parse_size("", &v), FERRY_EPARSE);
    char mine[512];
    snprintf(mine, sizeof(mine), "%s", ferry_last_error());
    pthread_t t;
    char *theirs = NULL;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, (void **)&theirs);
    assert_non_null(strstr(theirs, "12Q"));
    assert_string_equal(ferry_last_error(), mine);
    free(theirs);
}

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(ferry_version(), FERRY_VERSION_NUMBER);
    assert_string_equal(ferry_version_string(), FERRY_VERSION_STRING);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_names_and_messages_unique),
          cmocka_unit_test(test_unknown_codes), cmocka_unit_test(test_last_error_is_per_thread),
          cmocka_unit_test(test_version))
