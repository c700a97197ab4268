/* isolation=process on a GPU. Each scenario runs in a child process of its own, which makes its
 * runtime before anything starts CUDA (the runtime forks the helper its workers come from
 * first; a process forked after CUDA started cannot use CUDA), and this program's own process
 * never starts CUDA (it asks a forked child whether a GPU answers).
 *
 * The child streams NB batches of 16 MiB of floats through `scale` in 8 MiB chunks, input and
 * output from ferry_host_alloc (shared memory: the worker reads and writes them in place), and
 * ends its worker once, when batch FAULT_AT starts: by an illegal-address kernel in the worker
 * (the fault planted in that batch's first chunk, once: a file made with O_EXCL says so, and
 * holds the fault's time), or by SIGKILL from the application. A new worker takes over; every
 * batch must be called back once, none failed, the output bit-exact, the batches after the
 * end run on the GPU, one restart. The child prints what it measured (the rate before the end,
 * from the end to the first batch done by the new worker, and to the first window of WINDOW
 * batches at 90% of the rate before), a benchmark's figures, not a test's bounds.
 * The child's own process never starts CUDA (a probe process and the workers do): a second
 * process-mode runtime follows the first in it.
 * Then two children whose workers have CUDA_DEVICE_MAX_CONNECTIONS 4 and 16 (option
 * connections_per_device) measure, in the worker, the queues each really got.
 * Skips (exit 77) without a GPU. */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/ferry_k_fault.h"
#include "cudatest.h"
#include "ferry/connections.h"
#include "pipeline/remote.h"

#define NB       192
#define FAULT_AT 96
#define PER      ((size_t)16 << 20)
#define SLOTS    32 /* input slots, reused; every batch has its own output */
#define WINDOW   8

typedef struct plant {
    const ferry_stage_t *inner;
    char marker[64]; /* made once, by the worker that plants the fault */
} plant_t;

static plant_t plant; /* set before the runtime: the workers have it as it was then */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock for all processes of the host */
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int plant_gpu(const ferry_kernel_args_t *a, void *stream, void *user)
{
    const plant_t *f = user;
    if (a->batch_id == FAULT_AT && a->chunk == 0 && f->marker[0] != '\0') {
        int fd = open(f->marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) { /* the first time: the fault, its time in the file */
            uint64_t t = mono_ns();
            ssize_t w = write(fd, &t, sizeof(t));
            close(fd);
            (void)w;
            return ferry_k_fault_launch(FERRY_K_FAULT_ILLEGAL_ADDRESS, stream) == 0
                       ? 0
                       : FERRY_EBACKEND;
        }
    }
    return f->inner->gpu(a, stream, f->inner->user);
}

static int plant_cpu(const ferry_kernel_args_t *a, void *user)
{
    const plant_t *f = user;
    return f->inner->cpu(a, f->inner->user);
}

typedef struct child_run {
    atomic_int calls[NB];
    atomic_int failed, on_gpu;
    uint64_t done_ns[NB]; /* when each batch was called back */
    _Atomic uint64_t kill_ns;
    ferry_pipeline_t *p;
    bool kill;
} child_run_t;

static child_run_t run;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    (void)arg;
    if (r->id >= NB)
        return;
    run.done_ns[r->id] = mono_ns();
    atomic_fetch_add(&run.calls[r->id], 1);
    atomic_fetch_add(&run.failed, r->status != 0);
    atomic_fetch_add(&run.on_gpu, r->where == FERRY_DONE_GPU);
}

/* The rate of the WINDOW batches from @i on, GB/s by their callbacks' times. */
static double window_gbps(unsigned i)
{
    uint64_t t = run.done_ns[i + WINDOW] - run.done_ns[i];
    return t > 0 ? (double)(WINDOW * PER) / (double)t : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* What the stream measured, printed; the end's time @t_end. */
static void report(const char *how, uint64_t t_end, const ferry_pipeline_stats_t *s)
{
    double before[NB];
    unsigned nbf = 0;
    for (unsigned i = WINDOW; i + WINDOW < FAULT_AT - 2 * WINDOW; i++)
        before[nbf++] = window_gbps(i);
    qsort(before, nbf, sizeof(before[0]), cmp_double);
    double rate = nbf > 0 ? before[nbf / 2] : 0;
    double first_ms = -1, steady_ms = -1;
    for (unsigned i = 0; i < NB; i++)
        if (run.done_ns[i] > t_end && (first_ms < 0 || run.done_ns[i] - t_end < first_ms * 1e6))
            first_ms = (double)(run.done_ns[i] - t_end) / 1e6;
    /* batches are called back in order: the first window after the end at 90% of the rate */
    for (unsigned i = FAULT_AT; i + WINDOW < NB && steady_ms < 0; i++)
        if (run.done_ns[i] > t_end && window_gbps(i) >= 0.9 * rate)
            steady_ms = (double)(run.done_ns[i] - t_end) / 1e6;
    double after = window_gbps(NB - 1 - WINDOW);
    printf("# %s: rate before %.2f GB/s; first batch done %.1f ms after the end; steady (>= 90%%) "
           "%.1f ms after; last window %.2f GB/s; restarts %llu, recovery (stats) %.1f ms\n",
           how, rate, first_ms, steady_ms, after, (unsigned long long)s->worker_restarts,
           (double)s->worker_recovery_ns / 1e6);
    printf("RESULT {\"how\":\"%s\",\"gbps_before\":%.3f,\"first_ms\":%.2f,\"steady_ms\":%.2f,"
           "\"gbps_last_window\":%.3f,\"restarts\":%llu,\"recovery_ms\":%.2f}\n",
           how, rate, first_ms, steady_ms, after, (unsigned long long)s->worker_restarts,
           (double)s->worker_recovery_ns / 1e6);
}

/* A runtime on cuda with isolation=process and connections_per_device @rule (NULL: none),
 * and its device 0. Returns 0, or 11 (options) or 12 (runtime), said. */
static int process_runtime(const char *rule, ferry_runtime_t **r, ferry_device_t **d)
{
    ferry_options_t *o = NULL;
    if (ferry_options_create(&o) != 0 || ferry_options_set(o, "isolation", "process") != 0 ||
        (rule != NULL && ferry_options_set(o, "connections_per_device", rule) != 0))
        return 11;
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "cuda";
    cfg.options = o;
    int rc = ferry_runtime_create(&cfg, r) != 0 || ferry_device_get(*r, 0, d) != 0 ? 12 : 0;
    if (rc != 0)
        printf("# runtime: %s\n", ferry_last_error());
    ferry_options_destroy(o);
    return rc;
}

/* The child: @how "fault" or "kill"; returns 0 when every check held, else the step. */
static int child(const char *how, const char *marker)
{
    ferry_workload_t *wl = NULL;
    if (ferry_workload_create("scale", NULL, &wl) != 0)
        return 10;
    plant.inner = ferry_workload_stage(wl);
    bool kill_it = strcmp(how, "kill") == 0;
    snprintf(plant.marker, sizeof(plant.marker), "%s", kill_it ? "" : marker);
    ferry_runtime_t *r = NULL;
    ferry_device_t *d = NULL;
    int rrc = process_runtime(NULL, &r, &d);
    if (rrc != 0)
        return rrc;
    unsigned char *in = NULL, *out = NULL, *ref = malloc(SLOTS * PER);
    if (ferry_host_alloc(d, SLOTS * PER, (void **)&in) != 0 ||
        ferry_host_alloc(d, NB * PER, (void **)&out) != 0 || ref == NULL)
        return 13;
    uint64_t seed = 0x5eed + (kill_it ? 1 : 0);
    cudatest_fill_floats(in, SLOTS * PER, &seed);
    memset(out, 0, NB * PER);
    ferry_workload_reference(wl, in, ref, SLOTS * PER);
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "scale-or-fault";
    st.gpu = plant_gpu;
    st.cpu = plant_cpu;
    st.user = &plant;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = d;
    pc.stage = &st;
    pc.chunk_bytes = 8u << 20;
    if (ferry_pipeline_create(&pc, &run.p) != 0) {
        printf("# pipeline: %s\n", ferry_last_error());
        return 14;
    }
    uint64_t t_kill = 0;
    for (unsigned b = 0; b < NB; b++) {
        if (kill_it && b == FAULT_AT) {
            pid_t w = ferry__remote_worker_pid(run.p);
            t_kill = mono_ns();
            if (w <= 0 || kill(w, SIGKILL) != 0)
                return 15;
        }
        ferry_batch_t bt = FERRY_BATCH_INIT;
        bt.in = in + (size_t)(b % SLOTS) * PER;
        bt.out = out + (size_t)b * PER;
        bt.bytes = PER;
        if (ferry_pipeline_submit(run.p, &bt, on_done, NULL, NULL) != 0)
            return 16;
    }
    if (ferry_pipeline_drain(run.p) != 0)
        return 17;
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(run.p, &s);
    uint64_t t_end = t_kill;
    if (!kill_it) {
        int fd = open(marker, O_RDONLY);
        if (fd < 0 || read(fd, &t_end, sizeof(t_end)) != (ssize_t)sizeof(t_end))
            return 18; /* the fault was never planted */
        close(fd);
    }
    report(how, t_end, &s);
    int once = 1;
    for (unsigned b = 0; b < NB; b++)
        once &= atomic_load(&run.calls[b]) == 1;
    long diff = -1;
    for (unsigned b = 0; b < NB && diff < 0; b++)
        if ((diff = cudatest_first_diff(out + (size_t)b * PER, ref + (size_t)(b % SLOTS) * PER,
                                        PER)) >= 0)
            printf("# batch %u differs from byte %ld\n", b, diff);
    printf("# %s: exactly once %d, %d failed, %d on the GPU of %d, staged %llu, output %s\n", how,
           once, atomic_load(&run.failed), atomic_load(&run.on_gpu), NB,
           (unsigned long long)ferry__remote_staged(run.p), diff < 0 ? "bit-exact" : "DIFFERS");
    fflush(stdout);
    bool good = once && diff < 0 && atomic_load(&run.failed) == 0 &&
                atomic_load(&run.on_gpu) == NB && s.worker_restarts == 1 &&
                ferry__remote_staged(run.p) == 0;
    ferry_pipeline_destroy(run.p);
    ferry_host_free(d, in);
    ferry_host_free(d, out);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(r);
    free(ref);
    /* this process never started CUDA (a probe and the workers did), so another runtime in
     * process mode may follow */
    bool clean = !ferry_cuda_initialized();
    ferry_runtime_t *again = NULL;
    int arc = clean ? process_runtime(NULL, &again, &d) : -1;
    printf("# %s: CUDA %s in the application's process; a second process-mode runtime: %s\n", how,
           clean ? "never started" : "STARTED", arc == 0 ? "made" : "refused");
    ferry_runtime_destroy(again);
    return good && clean && arc == 0 ? 0 : 1;
}

/* The child of a connections check: a worker with CUDA_DEVICE_MAX_CONNECTIONS @n (option
 * connections_per_device "*=@n") measures the queues it got: 16 streams of a 2 ms kernel then
 * a 20 us one, stream by stream, take ceil(16 / queues) times 2 ms (FACTS.md's law). */
static int conns_child(unsigned n)
{
    char rule[16];
    snprintf(rule, sizeof(rule), "*=%u", n);
    ferry_workload_t *wl = NULL;
    if (ferry_workload_create("scale", NULL, &wl) != 0)
        return 10;
    ferry_runtime_t *r = NULL;
    ferry_device_t *d = NULL;
    int rrc = process_runtime(rule, &r, &d);
    if (rrc != 0)
        return rrc;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = d;
    pc.stage = ferry_workload_stage(wl);
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&pc, &p) != 0)
        return 14;
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(p, &s);
    ferry_conn_measure_t m = FERRY_CONN_MEASURE_INIT;
    int rc = ferry_pipeline_connections_measure(p, 16, 2000000, 20000, 5, &m);
    if (rc != 0) {
        printf("# measure: %s\n", ferry_last_error());
        return 15;
    }
    printf("# connections %u: the worker read %u; 16 streams took %.2f waves: %.1f queues%s\n", n,
           s.connections, m.waves, m.effective_queues, m.at_least ? " (at least)" : "");
    printf("RESULT {\"how\":\"connections\",\"set\":%u,\"read\":%u,\"waves\":%.3f,"
           "\"effective_queues\":%.1f,\"at_least\":%s}\n",
           n, s.connections, m.waves, m.effective_queues, m.at_least ? "true" : "false");
    fflush(stdout);
    bool good = s.connections == n &&
                (n >= 16 ? m.at_least : !m.at_least && m.effective_queues == (double)n);
    ferry_pipeline_destroy(p);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(r);
    return good ? 0 : 1;
}

/* The child of the late check: CUDA started by a runtime in one process (isolation=thread),
 * then an isolation=process runtime asked for: refused, saying why. */
static int late_child(void)
{
    ferry_runtime_t *first = cudatest_runtime(), *r = NULL;
    ferry_device_t *d = NULL;
    int rc = process_runtime(NULL, &r, &d);
    const char *why = ferry_last_error();
    printf("# a process-mode runtime after CUDA started: %d (%s)\n", rc, why);
    ferry_runtime_destroy(first);
    return rc == 12 && strstr(why, "CUDA has already started") != NULL ? 0 : 1;
}

/* Whether a GPU answers, asked in a forked child (CUDA must not start in this process). */
static void require_gpu_in_child(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        char why[256] = "";
        int n = ferry_backend_probe("cuda", why, sizeof(why));
        if (n <= 0)
            printf("# skip: no CUDA device: %s\n", why);
        fflush(stdout);
        _exit(n > 0 ? 0 : 77);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        exit(77);
}

static void run_child(const char *how)
{
    char marker[64];
    snprintf(marker, sizeof(marker), "/tmp/ferry-plant-%d-%s", (int)getpid(), how);
    unlink(marker);
    char *args[] = {"--child", (char *)how, marker, NULL};
    int status = 0;
    bool ended = test_child_wait(test_child_spawn(args), 120, &status);
    unlink(marker);
    if (!ended)
        fail_msg("the child (%s) did not finish within 120 s", how);
    printf("# child (%s) exited %d\n", how, test_child_exit_code(status));
    assert_int_equal(test_child_exit_code(status), 0);
}

/* Two applications' workers, one with 4 connections and one with 16, each measuring what its
 * context got (one GPU here: one value per device, so one value per application). */
static void test_connections_per_worker(void **state)
{
    (void)state;
    run_child("conns4");
    run_child("conns16");
}

static void test_refused_after_cuda_started(void **state)
{
    (void)state;
    run_child("late");
}

static void test_illegal_address_in_a_worker(void **state)
{
    (void)state;
    run_child("fault");
}

static void test_worker_killed(void **state)
{
    (void)state;
    run_child("kill");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return strncmp(argv[2], "conns", 5) == 0 ? conns_child((unsigned)atoi(argv[2] + 5))
               : strcmp(argv[2], "late") == 0    ? late_child()
                                                 : child(argv[2], argv[3]);
    require_gpu_in_child();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_illegal_address_in_a_worker),
                                       cmocka_unit_test(test_worker_killed),
                                       cmocka_unit_test(test_connections_per_worker),
                                       cmocka_unit_test(test_refused_after_cuda_started)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
