/* Hangs on a real GPU, each in a child process: the first chunk of batch 3 of 16 runs a kernel
 * of one thread that spins on the GPU clock. One polls ferry_should_abort(): the watchdog must
 * raise the abort word once the chunk passes its deadline, the kernel stop, and the chunk be
 * retired (redone on the CPU) within deadline + 10 ms, the GPU path going on. The same again
 * with a grid that holds every SM, every thread polling: the word (in device memory) must
 * still arrive. The other never
 * polls (it ends by itself after 5 s): the GPU path must end a floor after the abort, every
 * batch still completing exactly once, bit-exact, through the CPU fallback, and closing the
 * pipeline must not wait for the hung kernel. A third child fails the launch of that chunk once
 * (a non-sticky error): the chunk must be retried on the GPU and every batch stay on the GPU.
 * Skips (exit 77) without a GPU. */
#include <time.h>

#include "backend/cuda/ferry_k_fault.h"
#include "faultchild.h"

enum { MODE_HARD, MODE_POLL, MODE_RETRY, MODE_POLL_GRID };

typedef struct hanging {
    const ferry_stage_t *inner; /* the scale workload's stage */
    int mode;
    uint64_t batch;
} hanging_t;

/* The stage's GPU function: scale, except the first chunk of the chosen batch hangs. */
static int hanging_gpu(const ferry_kernel_args_t *a, void *stream, void *user)
{
    hanging_t *f = user;
    if (a->batch_id == f->batch && a->chunk == 0 && f->mode == MODE_RETRY)
        return a->attempt == 0 ? FERRY_EKERNEL : f->inner->gpu(a, stream, f->inner->user);
    if (a->batch_id == f->batch && a->chunk == 0 && f->mode == MODE_POLL_GRID) {
        int e = ferry_k_hang_grid_launch(a, 30000000000ull, stream);
        return e == 0 ? 0 : FERRY_EBACKEND;
    }
    if (a->batch_id == f->batch && a->chunk == 0) {
        int poll = f->mode == MODE_POLL;
        int e = ferry_k_hang_launch(a, poll, poll ? 30000000000ull : 5000000000ull, stream);
        return e == 0 ? 0 : FERRY_EBACKEND;
    }
    return f->inner->gpu(a, stream, f->inner->user);
}

static int hanging_cpu(const ferry_kernel_args_t *a, void *user)
{
    hanging_t *f = user;
    return f->inner->cpu(a, f->inner->user);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The child: prints one summary line, exits 0 when every check held. */
static int child(int mode, const char *log)
{
    ferry_options_t *o = NULL;
    if (ferry_options_create(&o) != 0 || ferry_options_set(o, "failure_log", log) != 0)
        return 10;
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "cuda";
    cfg.options = o;
    ferry_runtime_t *r = NULL;
    ferry_device_t *d = NULL;
    if (ferry_runtime_create(&cfg, &r) != 0 || ferry_device_get(r, 0, &d) != 0)
        return 11;
    ferry_options_destroy(o);
    ferry_workload_t *wl = NULL;
    if (ferry_workload_create("scale", NULL, &wl) != 0)
        return 12;
    hanging_t f = {.inner = ferry_workload_stage(wl), .mode = mode, .batch = 3};
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "hanging-scale";
    st.gpu = hanging_gpu;
    st.cpu = hanging_cpu;
    st.user = &f;
    const size_t per = 8u << 20, total = 16 * per;
    unsigned char *in = malloc(total), *out = malloc(total), *ref = malloc(total);
    if (in == NULL || out == NULL || ref == NULL)
        return 13;
    uint64_t seed = 41 + (uint64_t)mode;
    cudatest_fill_floats(in, total, &seed);
    memset(out, 0, total);
    ferry_workload_reference(wl, in, ref, total);
    /* Registered input and output: the copies go straight to them, as in most real use. */
    if (ferry_host_register(d, in, total) != 0 || ferry_host_register(d, out, total) != 0)
        return 14;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = d;
    pc.stage = &st;
    pc.chunk_bytes = 2u << 20;
    pc.coalesce_bytes = SIZE_MAX; /* a copy per chunk: one chunk retried, not its group */
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&pc, &p) != 0)
        return 15;
    static faultchild_done_t dn;
    for (int b = 0; b < 16; b++) {
        ferry_batch_t bt = FERRY_BATCH_INIT;
        bt.in = in + (size_t)b * per;
        bt.out = out + (size_t)b * per;
        bt.bytes = per;
        if (ferry_pipeline_submit(p, &bt, faultchild_on_done, &dn, NULL) != 0)
            return 16;
    }
    if (ferry_pipeline_drain(p) != 0)
        return 17;
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(p, &s);
    uint64_t t0 = mono_ns();
    ferry_pipeline_close(p); /* must not wait for a hung kernel */
    double close_ms = (double)(mono_ns() - t0) / 1e6;
    int once = 1;
    for (int b = 0; b < 16; b++)
        once &= atomic_load(&dn.calls[b]) == 1;
    long diff = cudatest_first_diff(out, ref, total);
    printf("# %s: %d batches on the GPU, %d with the CPU, %d failed; deadlines passed %llu, "
           "retired %.3f ms past the deadline; gpu_lost %d, gpu_hung %d; heartbeats %llu sent, "
           "%llu seen, %llu stalls; %llu failure records, %llu chunks retried on the GPU; close "
           "%.1f ms; exactly once %d; output %s\n",
           mode == MODE_POLL        ? "hang polling the abort flag"
           : mode == MODE_POLL_GRID ? "hang of a grid holding every SM, polling"
           : mode == MODE_HARD      ? "hang ignoring it"
                                    : "launch failing once",
           atomic_load(&dn.gpu), atomic_load(&dn.cpu), atomic_load(&dn.failed),
           (unsigned long long)s.deadlines_passed, (double)s.deadline_overrun_ns / 1e6, s.gpu_lost,
           s.gpu_hung, (unsigned long long)s.heartbeats_sent, (unsigned long long)s.heartbeats_seen,
           (unsigned long long)s.heartbeat_stalls, (unsigned long long)s.failure_records,
           (unsigned long long)s.chunks_retried, close_ms, once,
           diff < 0 ? "bit-exact" : "DIFFERS");
    fflush(stdout);
    bool good = once && diff < 0 && atomic_load(&dn.failed) == 0 &&
                atomic_load(&dn.gpu) + atomic_load(&dn.cpu) == 16 && s.failure_records >= 1 &&
                close_ms < 1000;
    if (mode == MODE_RETRY)
        good = good && atomic_load(&dn.gpu) == 16 && s.chunks_retried == 1 &&
               s.failure_records == 1 && s.deadlines_passed == 0 && !s.gpu_lost;
    else if (mode == MODE_POLL || mode == MODE_POLL_GRID)
        good = good && !s.gpu_lost && atomic_load(&dn.cpu) == 1 && s.deadlines_passed >= 1 &&
               s.deadline_overrun_ns <= 10000000u && s.deadline_overrun_ns > 0;
    else
        good = good && s.gpu_lost && s.gpu_hung && s.deadlines_passed >= 1;
    /* The GPU may still run the hung kernel: end without tearing CUDA down. */
    _exit(good ? 0 : 1);
}

static void test_hang_polling(void **state)
{
    (void)state;
    faultchild_run("poll", "ETIMEDOUT");
}

static void test_hang_polling_grid(void **state)
{
    (void)state;
    faultchild_run("poll-grid", "ETIMEDOUT");
}

static void test_hang_ignoring(void **state)
{
    (void)state;
    faultchild_run("hard", "ETIMEDOUT");
}

static void test_launch_fails_once(void **state)
{
    (void)state;
    faultchild_run("retry", "EKERNEL");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child(strcmp(argv[2], "poll") == 0        ? MODE_POLL
                     : strcmp(argv[2], "poll-grid") == 0 ? MODE_POLL_GRID
                     : strcmp(argv[2], "retry") == 0     ? MODE_RETRY
                                                         : MODE_HARD,
                     argv[3]);
    cudatest_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hang_polling),
        cmocka_unit_test(test_hang_polling_grid),
        cmocka_unit_test(test_hang_ignoring),
        cmocka_unit_test(test_launch_fails_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
