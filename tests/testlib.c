/* Test helpers shared by every test executable. */
#include "testlib.h"

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

ferry_runtime_t *test_sim_runtime_with(const char *const *kv)
{
    return test_sim_runtime_on(FERRY_TEST_PROFILE, kv);
}

int test_sim_runtime_create(const char *profile, const char *const *kv, ferry_runtime_t **out)
{
    /* No options object without options: NULL lets the runtime read the environment. */
    ferry_options_t *o = NULL;
    if (kv != NULL && ferry_options_create(&o) != 0)
        fail_msg("ferry_options_create: %s", ferry_last_error());
    for (size_t i = 0; kv != NULL && kv[i] != NULL; i += 2)
        if (ferry_options_set(o, kv[i], kv[i + 1]) != 0)
            fail_msg("option %s=%s: %s", kv[i], kv[i + 1], ferry_last_error());
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "sim";
    cfg.profile = profile;
    cfg.options = o;
    int rc = ferry_runtime_create(&cfg, out);
    ferry_options_destroy(o);
    return rc;
}

ferry_runtime_t *test_sim_runtime_on(const char *profile, const char *const *kv)
{
    ferry_runtime_t *rt = NULL;
    int rc = test_sim_runtime_create(profile, kv, &rt);
    if (rc != 0)
        fail_msg("ferry_runtime_create(sim): %s: %s", ferry_err_name(rc), ferry_last_error());
    return rt;
}

ferry_runtime_t *test_sim_runtime(void)
{
    return test_sim_runtime_with(NULL);
}

ferry_device_t *test_device(ferry_runtime_t *rt)
{
    ferry_device_t *dev = NULL;
    int rc = ferry_device_get(rt, 0, &dev);
    if (rc != 0)
        fail_msg("ferry_device_get(0): %s: %s", ferry_err_name(rc), ferry_last_error());
    return dev;
}

ferry_pipeline_t *test_pipeline(const ferry_pipeline_config_t *cfg)
{
    ferry_pipeline_t *p = NULL;
    int rc = ferry_pipeline_create(cfg, &p);
    if (rc != 0)
        fail_msg("ferry_pipeline_create: %s: %s", ferry_err_name(rc), ferry_last_error());
    return p;
}

ferry_workload_t *test_workload(const char *name)
{
    ferry_workload_t *wl = NULL;
    int rc = ferry_workload_create(name, NULL, &wl);
    if (rc != 0)
        fail_msg("ferry_workload_create(%s): %s: %s", name, ferry_err_name(rc), ferry_last_error());
    return wl;
}

ferry_runtime_t *test_rt;
ferry_device_t *test_dev;

int test_sim_setup(void **state)
{
    (void)state;
    test_rt = test_sim_runtime();
    return ferry_device_get(test_rt, 0, &test_dev);
}

int test_sim_teardown(void **state)
{
    (void)state;
    ferry_runtime_destroy(test_rt);
    return 0;
}

struct cJSON *test_profile_json(void)
{
    FILE *f = fopen(FERRY_TEST_PROFILE, "rb");
    assert_non_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    return root;
}

void test_write_json(const cJSON *root, const char *tmpl, char *path, size_t len)
{
    char *out = cJSON_Print(root);
    assert_non_null(out);
    snprintf(path, len, "%s", tmpl);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, out, strlen(out)), (ssize_t)strlen(out));
    close(fd);
    cJSON_free(out);
}

/* The in-tree profile with @key of object @section (NULL: the root) set to @value, written to a
 * temporary file at @path. */
static void profile_with(char *path, size_t len, const char *section, const char *key, double value)
{
    cJSON *root = test_profile_json();
    cJSON *obj = section != NULL ? cJSON_GetObjectItemCaseSensitive(root, section) : root;
    assert_non_null(obj);
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddNumberToObject(obj, key, value);
    test_write_json(root, "/tmp/ferry-profile-XXXXXX", path, len);
    cJSON_Delete(root);
}

void test_profile_with_pin_limit(char *path, size_t len, long long limit)
{
    profile_with(path, len, "host", "pin_limit_bytes", (double)limit);
}

void test_profile_with_devices(char *path, size_t len, int n)
{
    profile_with(path, len, NULL, "devices", n);
}

void test_profile_with_piece_kernel(char *path, size_t len, long long bytes)
{
    profile_with(path, len, "copy", "piece_kernel_max", (double)bytes);
}

uint64_t test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

extern char **environ;

pid_t test_child_spawn(char *const *args)
{
    static char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    char *argv[16] = {exe};
    size_t argc = 1;
    for (; args[argc - 1] != NULL; argc++) {
        assert_true(argc < 15);
        argv[argc] = args[argc - 1];
    }
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, exe, NULL, NULL, argv, environ), 0);
    return pid;
}

bool test_child_wait(pid_t pid, unsigned seconds, int *status)
{
    pid_t got = 0;
    for (unsigned i = 0; i < seconds * 10 && (got = waitpid(pid, status, WNOHANG)) == 0; i++)
        usleep(100000);
    if (got == 0) {
        test_child_kill(pid);
        return false;
    }
    assert_int_equal(got, pid);
    return true;
}

void test_child_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int test_child_exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int test_cpu_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

ferry_stage_t test_cpu_stage(const char *name, ferry_cpu_fn cpu)
{
    ferry_stage_t s = FERRY_STAGE_INIT;
    s.name = name;
    s.cpu = cpu;
    return s;
}

ferry_pipeline_config_t test_pipeline_config(ferry_device_t *dev, const ferry_stage_t *stage,
                                             size_t chunk)
{
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.device = dev;
    cfg.stage = stage;
    cfg.chunk_bytes = chunk;
    return cfg;
}

int test_gen_by_offset(void *slot, size_t bytes, size_t offset, void *arg)
{
    memset(slot, (int)(offset >> *(const unsigned *)arg), bytes);
    return 0;
}

void test_count_failed(const ferry_batch_result_t *r, void *arg)
{
    if (r->status != 0)
        (*(int *)arg)++;
}

void test_submit_generated(ferry_pipeline_t *p, size_t total, size_t batch, unsigned shift)
{
    int failed = 0;
    for (size_t off = 0; off < total; off += batch) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.prepare = test_gen_by_offset;
        b.prepare_arg = &shift;
        b.bytes = total - off < batch ? total - off : batch;
        assert_int_equal(ferry_pipeline_submit(p, &b, test_count_failed, &failed, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(failed, 0);
}

void test_submit_split(ferry_pipeline_t *p, const void *in, void *out, size_t total, size_t per,
                       ferry_done_fn cb, void *arg)
{
    for (size_t off = 0; off < total; off += per) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = (const char *)in + off;
        b.out = (char *)out + off;
        b.bytes = total - off < per ? total - off : per;
        assert_int_equal(ferry_pipeline_submit(p, &b, cb, arg, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
}

void test_submit_one(ferry_pipeline_t *p, const void *in, void *out, size_t bytes, ferry_done_fn cb,
                     void *arg)
{
    test_submit_split(p, in, out, bytes, bytes, cb, arg);
}

void test_on_done(const ferry_batch_result_t *r, void *arg)
{
    test_done_t *d = arg;
    if (r->id < TEST_DONE_MAX)
        atomic_fetch_add(&d->calls[r->id], 1);
    atomic_fetch_add(r->where == FERRY_DONE_GPU   ? &d->gpu
                     : r->where == FERRY_DONE_CPU ? &d->cpu
                                                  : &d->failed,
                     1);
}

test_bufs_t test_bufs_alloc(size_t bytes)
{
    test_bufs_t b = {malloc(bytes), malloc(bytes), malloc(bytes)};
    assert_true(b.in != NULL && b.out != NULL && b.ref != NULL);
    return b;
}

void test_bufs_free(test_bufs_t *b)
{
    free(b->in);
    free(b->out);
    free(b->ref);
}

char test_dir[256];

int test_dir_setup(void **state)
{
    (void)state;
    snprintf(test_dir, sizeof(test_dir), "%s/ferry-test-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(test_dir) ? 0 : -1;
}

int test_dir_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
    return system(cmd) == 0 ? 0 : -1;
}

unsigned char test_file_byte(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;
    return (unsigned char)(x >> 56);
}

void test_make_file(const char *path, uint64_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(fputc(test_file_byte(i), f), test_file_byte(i));
    assert_int_equal(fclose(f), 0);
}

int test_shared_regions(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, "memfd:ferry:") != NULL;
    fclose(f);
    return n;
}

const char *test_profile_named(const char *file, char *buf, size_t len)
{
    snprintf(buf, len, "%s", FERRY_TEST_PROFILE);
    char *slash = strrchr(buf, '/');
    assert_non_null(slash);
    snprintf(slash + 1, len - (size_t)(slash + 1 - buf), "%s", file);
    return buf;
}
