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
#include "faultchild.h"

enum { MODE_HARD, MODE_POLL, MODE_RETRY, MODE_POLL_GRID };

/* The first chunk of the chosen batch: hangs (polling or not, one thread or a grid holding every
 * SM), or fails its first launch. */
static int plant_hang(const ferry_kernel_args_t *a, void *stream, const faultchild_stage_t *f)
{
    if (f->mode == MODE_RETRY)
        return a->attempt == 0 ? FERRY_EKERNEL : f->inner->gpu(a, stream, f->inner->user);
    int poll = f->mode == MODE_POLL;
    int e = f->mode == MODE_POLL_GRID
                ? ferry_k_hang_grid_launch(a, 30000000000ull, stream)
                : ferry_k_hang_launch(a, poll, poll ? 30000000000ull : 5000000000ull, stream);
    return e == 0 ? 0 : FERRY_EBACKEND;
}

/* The child: prints one summary line, exits 0 when every check held. */
static int child(int mode, const char *log)
{
    static faultchild_result_t res;
    int rc =
        faultchild_stream(log, "hanging-scale", plant_hang, mode, 41 + (uint64_t)mode, true, &res);
    if (rc != 0)
        return rc;
    const ferry_pipeline_stats_t s = res.s;
    test_done_t *dn = &res.dn;
    printf("# %s: %d batches on the GPU, %d with the CPU, %d failed; deadlines passed %llu, "
           "retired %.3f ms past the deadline; gpu_lost %d, gpu_hung %d; heartbeats %llu sent, "
           "%llu seen, %llu stalls; %llu failure records, %llu chunks retried on the GPU; close "
           "%.1f ms; exactly once %d; output %s\n",
           mode == MODE_POLL        ? "hang polling the abort flag"
           : mode == MODE_POLL_GRID ? "hang of a grid holding every SM, polling"
           : mode == MODE_HARD      ? "hang ignoring it"
                                    : "launch failing once",
           atomic_load(&dn->gpu), atomic_load(&dn->cpu), atomic_load(&dn->failed),
           (unsigned long long)s.deadlines_passed, (double)s.deadline_overrun_ns / 1e6, s.gpu_lost,
           s.gpu_hung, (unsigned long long)s.heartbeats_sent, (unsigned long long)s.heartbeats_seen,
           (unsigned long long)s.heartbeat_stalls, (unsigned long long)s.failure_records,
           (unsigned long long)s.chunks_retried, res.close_ms, res.once,
           res.diff < 0 ? "bit-exact" : "DIFFERS");
    fflush(stdout);
    bool good = res.once && res.diff < 0 && atomic_load(&dn->failed) == 0 &&
                atomic_load(&dn->gpu) + atomic_load(&dn->cpu) == 16 && s.failure_records >= 1 &&
                res.close_ms < 1000;
    if (mode == MODE_RETRY)
        good = good && atomic_load(&dn->gpu) == 16 && s.chunks_retried == 1 &&
               s.failure_records == 1 && s.deadlines_passed == 0 && !s.gpu_lost;
    else if (mode == MODE_POLL || mode == MODE_POLL_GRID)
        good = good && !s.gpu_lost && atomic_load(&dn->cpu) == 1 && s.deadlines_passed >= 1 &&
               s.deadline_overrun_ns <= 10000000u && s.deadline_overrun_ns > 0;
    else
        good = good && s.gpu_lost && s.gpu_hung && s.deadlines_passed >= 1;
    /* The GPU may still run the hung kernel: end without tearing CUDA down. */
    _exit(good ? 0 : 1);
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
        FAULTCHILD_TEST(test_hang_polling, "poll", "ETIMEDOUT"),
        FAULTCHILD_TEST(test_hang_polling_grid, "poll-grid", "ETIMEDOUT"),
        FAULTCHILD_TEST(test_hang_ignoring, "hard", "ETIMEDOUT"),
        FAULTCHILD_TEST(test_launch_fails_once, "retry", "EKERNEL")};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
