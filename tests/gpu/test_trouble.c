/* Trouble on a real GPU, handled: a locked-memory limit that may refuse pinning (the pipeline
 * then runs on pageable slots and says so), and a GPU kept busy by another process (ferry
 * shares it: slower, every byte right, no hang). Skips (exit 77) without a GPU.
 *
 * The other process is this executable run again with --hog FD SECONDS: it streams a heavy
 * fma workload until SECONDS have passed, and writes a byte to FD once its work is running. */
#include <poll.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cudatest.h"
#include "ferry/connections.h"

typedef struct done {
    atomic_int ok, bad;
} done_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    done_t *d = arg;
    atomic_fetch_add(r->status == 0 ? &d->ok : &d->bad, 1);
}

static double now_s(void)
{
    return (double)test_now_ns() / 1e9;
}

/* @total bytes of random floats through `scale` in 4 MiB chunks on @d, checked bit for bit;
 * returns the stats. */
static ferry_pipeline_stats_t stream_scale(ferry_device_t *d, size_t total, uint64_t *seed)
{
    ferry_workload_t *wl = test_workload("scale");
    test_bufs_t bufs = test_bufs_alloc(total);
    unsigned char *in = bufs.in, *out = bufs.out, *ref = bufs.ref;
    cudatest_fill_floats(in, total, seed);
    assert_int_equal(ferry_workload_reference(wl, in, ref, total), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(d, ferry_workload_stage(wl), 4u << 20);
    pc.depth = 4;
    ferry_pipeline_t *p = test_pipeline(&pc);
    done_t dn = {0};
    size_t batch = 16u << 20;
    int n = 0;
    for (size_t off = 0; off < total; off += batch, n++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in + off;
        b.out = out + off;
        b.bytes = total - off < batch ? total - off : batch;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &dn, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(atomic_load(&dn.ok), n);
    assert_int_equal(atomic_load(&dn.bad), 0);
    long diff = cudatest_first_diff(out, ref, total);
    if (diff >= 0)
        fail_msg("output differs from the CPU reference at byte %ld", diff);
    test_bufs_free(&bufs);
    ferry_workload_destroy(wl);
    return st;
}

static void test_memlock_limit(void **state)
{
    (void)state;
    uint64_t seed = test_seed(11);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &old), 0);
    struct rlimit low = old;
    low.rlim_cur = 64 << 10; /* lowering the soft limit needs no privilege */
    assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &low), 0);
    /* Whether the driver honours the limit is its business: ask it with a plain pool. */
    ferry_pool_config_t pc = FERRY_POOL_CONFIG_INIT;
    pc.slot_bytes = 4u << 20;
    pc.slots = 8;
    ferry_pool_t *pool = NULL;
    int rc = ferry_pool_create(dev, &pc, &pool);
    bool refused = rc != 0;
    if (refused) {
        assert_int_equal(rc, FERRY_EBACKEND);
        /* the message names the limit and how to raise it */
        assert_non_null(strstr(ferry_last_error(), "ulimit -l"));
    }
    ferry_pool_destroy(pool);
    ferry_pipeline_stats_t st = stream_scale(dev, 64u << 20, &seed);
    assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &old), 0);
    printf("# memlock 64 KiB: pinning %s; pipeline on %s slots: %.1f GB/s each way\n",
           refused ? "refused" : "still allowed by the driver",
           st.host_pinned ? "pinned" : "pageable", st.gbps_h2d);
    assert_true(st.host_pinned == !refused);
}

static void test_busy_gpu(void **state)
{
    (void)state;
    uint64_t seed = test_seed(12);
    /* The quiet figure first, then the same with the other process running. */
    ferry_pipeline_stats_t quiet = stream_scale(dev, 512u << 20, &seed);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char fd_arg[16];
    snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
    char *args[] = {"--hog", fd_arg, "6", NULL};
    pid_t pid = test_child_spawn(args);
    close(fds[1]);
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    char c = 0;
    int ready = poll(&pf, 1, 60000);
    if (ready != 1 || read(fds[0], &c, 1) != 1) {
        test_child_kill(pid);
        fail_msg("the other process did not start its GPU work within 60 s");
    }
    close(fds[0]);
    double t0 = now_s();
    ferry_pipeline_stats_t busy = stream_scale(dev, 512u << 20, &seed);
    double t1 = now_s();
    int status = 0;
    assert_true(test_child_wait(pid, 120, &status)); /* it stops itself after 6 s */
    printf("# alone %.1f GB/s each way; beside a process running fma x2048 kernels %.1f GB/s "
           "(%.2f s); that process exited %d\n",
           quiet.gbps_h2d, busy.gbps_h2d, t1 - t0, test_child_exit_code(status));
    assert_true(test_child_exit_code(status) == 0);
}

/* CUDA read CUDA_DEVICE_MAX_CONNECTIONS when the fixture's runtime started it: a runtime asking
 * for another value now fails, saying a new process is needed; the value already in force is
 * accepted. */
static void test_connections_after_cuda_started(void **state)
{
    (void)state;
    assert_true(ferry_cuda_initialized());
    const char *cur = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    const char *other = cur != NULL && strcmp(cur, "3") == 0 ? "5" : "3";
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, "connections", other), 0);
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "cuda";
    cfg.options = o;
    ferry_runtime_t *r = NULL;
    assert_int_equal(ferry_runtime_create(&cfg, &r), FERRY_ESTATE);
    assert_null(r);
    printf("# %s\n", ferry_last_error());
    assert_non_null(strstr(ferry_last_error(), "new process"));
    if (cur != NULL && atoi(cur) >= 1 && atoi(cur) <= 32) {
        assert_int_equal(ferry_options_set(o, "connections", cur), 0);
        assert_int_equal(ferry_runtime_create(&cfg, &r), 0);
        ferry_runtime_destroy(r);
    }
    ferry_options_destroy(o);
}

/* The other process: heavy fma batches on its own runtime until @secs have passed. */
static int hog(int fd, double secs)
{
    ferry_runtime_t *r = cudatest_runtime();
    ferry_device_t *d = NULL;
    ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
    wp.intensity = 2048;
    ferry_workload_t *wl = NULL;
    ferry_pipeline_t *p = NULL;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    size_t bytes = 64u << 20;
    unsigned char *buf = calloc(1, bytes);
    if (buf == NULL || ferry_device_get(r, 0, &d) != 0 ||
        ferry_workload_create("fma", &wp, &wl) != 0)
        return 1;
    pc.device = d;
    pc.stage = ferry_workload_stage(wl);
    pc.chunk_bytes = 8u << 20;
    if (ferry_pipeline_create(&pc, &p) != 0)
        return 1;
    done_t dn = {0};
    double end = now_s() + secs;
    int n = 0;
    bool told = false;
    while (now_s() < end) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = buf;
        b.out = buf;
        b.bytes = bytes;
        if (ferry_pipeline_submit(p, &b, on_done, &dn, NULL) != 0)
            return 1;
        n++;
        if (!told && atomic_load(&dn.ok) > 0) {
            told = write(fd, "r", 1) == 1;
        }
    }
    if (ferry_pipeline_drain(p) != 0 || ferry_pipeline_close(p) != 0)
        return 1;
    if (!told && write(fd, "r", 1) != 1)
        return 1;
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(r);
    free(buf);
    return atomic_load(&dn.ok) == n && atomic_load(&dn.bad) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--hog") == 0)
        return hog(atoi(argv[2]), atof(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memlock_limit),
        cmocka_unit_test(test_busy_gpu),
        cmocka_unit_test(test_connections_after_cuda_started),
    };
    return cmocka_run_group_tests(tests, cudatest_setup, cudatest_teardown);
}
