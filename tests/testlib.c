/* Test helpers shared by every test executable. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

uint64_t test_seed(uint64_t fallback)
{
    const char *v = getenv("FERRY_TEST_SEED");
    uint64_t s = fallback;
    if (v != NULL && *v != '\0')
        s = strtoull(v, NULL, 0);
    printf("# seed %llu (set FERRY_TEST_SEED to repeat)\n", (unsigned long long)s);
    return s;
}

uint64_t test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t test_rand_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + test_rand(state) % (hi - lo + 1);
}

void test_fill_floats(void *p, size_t n, uint64_t *state)
{
    unsigned char *b = p;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t w = ((uint32_t)test_rand(state) & 0x807fffffu) | 0x3f800000u;
        memcpy(b + i, &w, 4);
    }
}

void test_fill_random(void *p, size_t n, uint64_t *state)
{
    unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = test_rand(state);
        memcpy(b + i, &r, 8);
    }
    if (i < n) {
        uint64_t r = test_rand(state);
        memcpy(b + i, &r, n - i);
    }
}

ferry_runtime_t *test_sim_runtime(void)
{
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    ferry_runtime_t *rt = NULL;
    cfg.backend = "sim";
    cfg.profile = FERRY_TEST_PROFILE;
    int rc = ferry_runtime_create(&cfg, &rt);
    if (rc != 0)
        fail_msg("ferry_runtime_create(sim): %s: %s", ferry_err_name(rc), ferry_last_error());
    return rt;
}

ferry_runtime_t *test_sim_runtime_with(const char *const *kv)
{
    ferry_options_t *o = NULL;
    if (ferry_options_create(&o) != 0)
        fail_msg("ferry_options_create: %s", ferry_last_error());
    for (size_t i = 0; kv != NULL && kv[i] != NULL; i += 2)
        if (ferry_options_set(o, kv[i], kv[i + 1]) != 0)
            fail_msg("option %s=%s: %s", kv[i], kv[i + 1], ferry_last_error());
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "sim";
    cfg.profile = FERRY_TEST_PROFILE;
    cfg.options = o;
    ferry_runtime_t *rt = NULL;
    int rc = ferry_runtime_create(&cfg, &rt);
    ferry_options_destroy(o);
    if (rc != 0)
        fail_msg("ferry_runtime_create(sim): %s: %s", ferry_err_name(rc), ferry_last_error());
    return rt;
}

void test_profile_with_pin_limit(char *path, size_t len, long long limit)
{
    FILE *f = fopen(FERRY_TEST_PROFILE, "rb");
    assert_non_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON *host = cJSON_GetObjectItemCaseSensitive(root, "host");
    assert_non_null(host);
    cJSON_AddNumberToObject(host, "pin_limit_bytes", (double)limit);
    char *out = cJSON_Print(root);
    snprintf(path, len, "/tmp/ferry-pin-profile-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, out, strlen(out)), (ssize_t)strlen(out));
    close(fd);
    cJSON_free(out);
    cJSON_Delete(root);
}
