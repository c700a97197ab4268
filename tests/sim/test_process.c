/* isolation=process on the simulator: every pipeline's device runs in a worker process forked
 * from the runtime's helper. Batches of random sizes come back bit-exact and are called back
 * once; a worker killed mid-run (SIGKILL), or one whose GPU path ends (an injected sticky
 * error, a hung kernel), is replaced and the batches it had not reported run again on the
 * new one, exactly once; the new worker runs on the device (not the CPU path) and the
 * recovery time is reported; the runtime's destroy leaves no process behind; misuse is
 * refused with a message. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "testlib.h"
#include "ferry/connections.h"
#include "core/runtime.h"
#include "pipeline/remote.h"

#define NB_MAX 256

typedef struct run {
    atomic_int calls[NB_MAX];
    atomic_int failed, on_gpu, done;
    ferry_pipeline_t *p;
    pid_t kill_at_done; /* signal the worker when this many are done (0: never) */
    int sig;            /* with this (0: SIGKILL) */
    atomic_int killed;
    pid_t victim;
} run_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    run_t *rn = arg;
    if (r->id < NB_MAX)
        atomic_fetch_add(&rn->calls[r->id], 1);
    atomic_fetch_add(&rn->failed, r->status != 0);
    atomic_fetch_add(&rn->on_gpu, r->where == FERRY_DONE_GPU);
    int d = atomic_fetch_add(&rn->done, 1) + 1;
    if (rn->kill_at_done > 0 && d == rn->kill_at_done && !atomic_exchange(&rn->killed, 1)) {
        pid_t pid = ferry__remote_worker_pid(rn->p);
        assert_true(pid > 0);
        rn->victim = pid;
        kill(pid, rn->sig != 0 ? rn->sig : SIGKILL);
    }
}

/* @nb batches of random sizes (up to @maxb) of scale through @p; all checked. */
static void stream(ferry_pipeline_t *p, ferry_workload_t *wl, unsigned nb, size_t maxb,
                   uint64_t seed, run_t *rn)
{
    unsigned char **in = calloc(nb, sizeof(*in)), **out = calloc(nb, sizeof(*out));
    size_t *sz = calloc(nb, sizeof(*sz));
    assert_true(in != NULL && out != NULL && sz != NULL);
    rn->p = p;
    for (unsigned i = 0; i < nb; i++) {
        sz[i] = (size_t)test_rand_range(&seed, 1, maxb);
        in[i] = malloc(sz[i]);
        out[i] = malloc(sz[i]);
        assert_true(in[i] != NULL && out[i] != NULL);
        test_fill_floats(in[i], sz[i], &seed);
        memset(out[i], 0, sz[i]);
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in[i];
        b.out = out[i];
        b.bytes = sz[i];
        uint64_t id = 0;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, rn, &id), 0);
        assert_int_equal(id, i);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    unsigned char *ref = malloc(maxb);
    for (unsigned i = 0; i < nb; i++) {
        if (atomic_load(&rn->calls[i]) != 1)
            fail_msg("batch %u called back %d times", i, atomic_load(&rn->calls[i]));
        assert_int_equal(ferry_workload_reference(wl, in[i], ref, sz[i]), 0);
        if (memcmp(out[i], ref, sz[i]) != 0) {
            size_t at = 0, last = 0;
            while (out[i][at] == ref[at])
                at++;
            for (size_t j = 0; j < sz[i]; j++)
                last = out[i][j] != ref[j] ? j : last;
            fail_msg("batch %u (%zu bytes): output differs from the reference from byte %zu to "
                     "%zu (there: %02x%02x%02x%02x, expected %02x%02x%02x%02x, input "
                     "%02x%02x%02x%02x)",
                     i, sz[i], at, last, out[i][at], out[i][at + 1], out[i][at + 2], out[i][at + 3],
                     ref[at], ref[at + 1], ref[at + 2], ref[at + 3], in[i][at], in[i][at + 1],
                     in[i][at + 2], in[i][at + 3]);
        }
        free(in[i]);
        free(out[i]);
    }
    assert_int_equal(atomic_load(&rn->failed), 0);
    free(ref);
    free(in);
    free(out);
    free(sz);
}

static ferry_pipeline_t *make(ferry_runtime_t *rt, ferry_workload_t *wl)
{
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 1u << 20);
    return test_pipeline(&pc);
}

static void test_batches_in_a_worker(void **state)
{
    (void)state;
    const char *kv[] = {"isolation", "process", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    pid_t helper = ferry__zyg_pid(rt->zyg);
    assert_true(helper > 0);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_t *p = make(rt, wl);
    pid_t w = ferry__remote_worker_pid(p);
    assert_true(w > 0 && w != getpid() && w != helper);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    stream(p, wl, 48, 3u << 20, test_seed(11), &rn);
    assert_int_equal(atomic_load(&rn.on_gpu), 48);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.batches_submitted, 48);
    assert_int_equal(s.batches_done_gpu, 48);
    assert_int_equal(s.worker_restarts, 0);
    assert_true(s.elapsed_ns > 0 && s.gbps_h2d > 1); /* the device's (virtual) clock */
    print_message("48 batches in a worker: %.1f GB/s (simulated)\n", s.gbps_h2d);
    /* misuse: a drain from its own callback is refused; so is a closed pipeline's submit */
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_batch_t b = FERRY_BATCH_INIT;
    assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &rn, NULL), FERRY_ECLOSED);
    assert_int_equal(ferry_pipeline_write_trace(p, "/tmp/x.json"), FERRY_ESTATE);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(kill(w, 0), -1); /* the worker is gone */
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    assert_int_equal(kill(helper, 0), -1); /* and the helper */
}

/* Kill the worker after @k batches are done, @nb in all. */
static void killed_at(unsigned nb, int k, uint64_t seed)
{
    const char *kv[] = {"isolation", "process", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_t *p = make(rt, wl);
    pid_t first = ferry__remote_worker_pid(p);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    rn.kill_at_done = k;
    stream(p, wl, nb, 2u << 20, seed, &rn);
    assert_true(atomic_load(&rn.killed));
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    print_message("killed after %d of %u: %llu restart(s), recovery %.1f ms, %d on the GPU\n", k,
                  nb, (unsigned long long)s.worker_restarts, s.worker_recovery_ns / 1e6,
                  atomic_load(&rn.on_gpu));
    /* killed with batches in flight: replaced before they were done; killed after it had
     * reported the last (k near nb) the replacement may still be starting */
    if (k <= (int)nb / 2) {
        assert_int_equal(s.worker_restarts, 1);
        assert_true(s.worker_recovery_ns > 0);
        pid_t second = ferry__remote_worker_pid(p);
        assert_true(second > 0 && second != first);
    } else {
        assert_true(s.worker_restarts <= 1);
    }
    assert_int_equal(atomic_load(&rn.on_gpu), (int)nb); /* the new worker's GPU path ran them */
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

static void test_a_killed_worker_is_replaced(void **state)
{
    (void)state;
    uint64_t seed = test_seed(21);
    killed_at(32, 1, seed);
    killed_at(32, 16, seed + 1);
    killed_at(32, 31, seed + 2);
}

/* The spare's pid once one is ready (up to 30 s), or -1. */
static pid_t spare_ready(ferry_pipeline_t *p)
{
    for (int i = 0; i < 3000; i++) {
        pid_t s = ferry__remote_spare_pid(p);
        if (s > 0)
            return s;
        usleep(10000);
    }
    return -1;
}

/* With option worker_spare (the default) a spare worker is started and made ready beside the
 * worker; when the worker is killed the spare takes over (the worker's pid is the spare's) and
 * a new spare is started; with worker_spare=0 there is none. */
static void test_the_spare_takes_over(void **state)
{
    (void)state;
    const char *kv[] = {"isolation", "process", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_t *p = make(rt, wl);
    pid_t spare = spare_ready(p), first = ferry__remote_worker_pid(p);
    assert_true(spare > 0 && spare != first);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    rn.kill_at_done = 4;
    stream(p, wl, 16, 2u << 20, test_seed(81), &rn);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    print_message("the spare (pid %d) took over from pid %d: recovery %.1f ms\n", (int)spare,
                  (int)first, s.worker_recovery_ns / 1e6);
    assert_int_equal(s.worker_restarts, 1);
    assert_int_equal(ferry__remote_worker_pid(p), spare);
    pid_t next = spare_ready(p);
    assert_true(next > 0 && next != spare && next != first);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    assert_int_equal(kill(next, 0), -1);
    const char *kv0[] = {"isolation", "process", "worker_spare", "0", NULL};
    rt = test_sim_runtime_with(kv0);
    p = make(rt, wl);
    usleep(200000);
    assert_int_equal(ferry__remote_spare_pid(p), -1);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    ferry_workload_destroy(wl);
}

/* A worker that stops (SIGSTOP: alive, sending nothing, not even its heartbeat) with batches
 * in flight is killed once option worker_deadline_ms has passed and replaced; every batch
 * once, bit-exact, on the device; the stopped one does not outlive the runtime. */
static void test_a_stopped_worker_is_killed_at_its_deadline(void **state)
{
    (void)state;
    const char *scale = getenv("FERRY_TEST_SCALE");
    const char *ms = scale != NULL && strcmp(scale, "sanitizer") == 0 ? "1500" : "300";
    const char *kv[] = {"isolation", "process", "worker_deadline_ms", ms, NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_t *p = make(rt, wl);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    rn.kill_at_done = 8;
    rn.sig = SIGSTOP;
    uint64_t t0 = test_now_ns();
    stream(p, wl, 32, 2u << 20, test_seed(61), &rn);
    double took = (double)(test_now_ns() - t0) / 1e6;
    assert_true(atomic_load(&rn.killed));
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    print_message("stopped after 8 of 32, deadline %s ms: %llu restart(s), recovery %.1f ms, "
                  "%.0f ms in all\n",
                  ms, (unsigned long long)s.worker_restarts, s.worker_recovery_ns / 1e6, took);
    assert_int_equal(s.worker_restarts, 1);
    assert_true(took >= atof(ms)); /* not before the deadline */
    assert_int_equal(atomic_load(&rn.on_gpu), 32);
    assert_int_not_equal(ferry__remote_worker_pid(p), rn.victim);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    assert_int_equal(kill(rn.victim, 0), -1);
}

/* @nb batches of @each bytes from @in to @out (both @nb * @each), the worker killed after
 * @kill_at are done (0: never); every batch once and bit-exact. */
static void slices(ferry_pipeline_t *p, ferry_workload_t *wl, unsigned char *in, unsigned char *out,
                   unsigned nb, size_t each, int kill_at, uint64_t seed)
{
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    rn.p = p;
    rn.kill_at_done = kill_at;
    test_fill_floats(in, nb * each, &seed);
    memset(out, 0, nb * each);
    for (unsigned i = 0; i < nb; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in + i * each;
        b.out = out + i * each;
        b.bytes = each;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &rn, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    unsigned char *ref = malloc(nb * each);
    assert_int_equal(ferry_workload_reference(wl, in, ref, nb * each), 0);
    assert_memory_equal(out, ref, nb * each);
    free(ref);
    assert_int_equal(atomic_load(&rn.done), (int)nb);
    assert_int_equal(atomic_load(&rn.failed), 0);
}

/* Batches in ferry_host_alloc memory, which isolation=process makes shared memory, are read
 * and written by the worker where they are: none is staged, and a killed worker's batches run
 * again in place, bit-exact. Memory freed and allocated again at the same place, with other
 * contents, is mapped anew by the worker (not its old mapping's bytes). A batch whose output
 * is its input is staged (run again, it would read its own output), and memory from malloc
 * is. A pool's buffers (ferry_pool_create) are shared memory as ferry_host_alloc's. */
static void test_host_alloc_memory_is_shared(void **state)
{
    (void)state;
    const char *kv[] = {"isolation", "process", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_t *p = make(rt, wl);
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    size_t each = 1u << 20;
    unsigned nb = 24;
    void *in = NULL, *out = NULL;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(ferry_host_alloc(dev, nb * each, &in), 0);
        assert_int_equal(ferry_host_alloc(dev, nb * each, &out), 0);
        print_message("round %d: in %p, out %p\n", round, in, out);
        slices(p, wl, in, out, nb, each, round == 0 ? 6 : 0, test_seed(71 + round));
        assert_int_equal(ferry__remote_staged(p), 0);
        if (round == 0) {
            assert_int_equal(ferry_host_free(dev, in), 0);
            assert_int_equal(ferry_host_free(dev, out), 0);
        }
    }
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.worker_restarts, 1);
    /* a pool's buffers are shared memory too */
    ferry_pool_config_t pcfg = FERRY_POOL_CONFIG_INIT;
    pcfg.slot_bytes = each;
    pcfg.slots = 4;
    ferry_pool_t *pool = NULL;
    assert_int_equal(ferry_pool_create(dev, &pcfg, &pool), 0);
    void *pa = NULL, *pb = NULL;
    assert_int_equal(ferry_pool_alloc(pool, each, false, &pa), 0);
    assert_int_equal(ferry_pool_alloc(pool, each, false, &pb), 0);
    slices(p, wl, pa, pb, 1, each, 0, test_seed(75));
    assert_int_equal(ferry__remote_staged(p), 0);
    ferry_pool_destroy(pool);
    slices(p, wl, in, in, 1, each, 0, test_seed(73)); /* in place: staged */
    assert_int_equal(ferry__remote_staged(p), 1);
    unsigned char *heap = malloc(2 * each);
    slices(p, wl, heap, heap + each, 1, each, 0, test_seed(74));
    assert_int_equal(ferry__remote_staged(p), 2);
    free(heap);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_host_free(dev, in), 0);
    assert_int_equal(ferry_host_free(dev, out), 0);
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* An injected fault in the first worker that ends its GPU path (a sticky error; a kernel that
 * ignores the abort flag): it says so and exits; the next one runs without the fault. (A
 * kernel that stops at the abort flag is the worker's own ladder's: no new worker.) */
static void test_sticky_and_hung_workers_are_replaced(void **state)
{
    (void)state;
    static const char *const specs[] = {"sticky@batch=5", "hang-hard@batch=3"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        const char *kv[] = {"isolation", "process", "inject", specs[i], NULL};
        ferry_runtime_t *rt = test_sim_runtime_with(kv);
        ferry_workload_t *wl = test_workload("scale");
        ferry_pipeline_t *p = make(rt, wl);
        run_t rn;
        memset(&rn, 0, sizeof(rn));
        stream(p, wl, 24, 2u << 20, test_seed(31 + i), &rn);
        ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &s), 0);
        print_message("%s: %llu restart(s), %d of 24 on the GPU, recovery %.1f ms\n", specs[i],
                      (unsigned long long)s.worker_restarts, atomic_load(&rn.on_gpu),
                      s.worker_recovery_ns / 1e6);
        assert_int_equal(s.worker_restarts, 1);
        assert_int_equal(ferry_pipeline_destroy(p), 0);
        ferry_workload_destroy(wl);
        assert_int_equal(ferry_runtime_destroy(rt), 0);
    }
}

/* A copy whose "kernel" (the simulator runs the CPU function) kills its worker on a batch that
 * starts with 0xAB; in this process (the CPU path) it copies. */
static pid_t test_pid;
static int poison_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const unsigned char *in = a->in;
    if (getpid() != test_pid && a->offset == 0 && a->bytes > 0 && in[0] == 0xAB)
        raise(SIGKILL);
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

static void on_poison_done(const ferry_batch_result_t *r, void *arg)
{
    run_t *rn = arg;
    on_done(r, arg);
    if (r->id == 5 && r->where != FERRY_DONE_CPU)
        atomic_fetch_add(&rn->failed, 1);
}

/* One batch ends every worker it meets: after three, it runs on the CPU in this process, once;
 * the others on the device, the device not retired. A device whose workers all end before
 * finishing a batch (a stage that kills every worker) is retired: its batches run on the CPU. */
static void test_a_batch_that_ends_every_worker(void **state)
{
    (void)state;
    test_pid = getpid();
    const char *kv[] = {"isolation", "process", NULL};
    for (int all = 0; all < 2; all++) {
        ferry_runtime_t *rt = test_sim_runtime_with(kv);
        ferry_device_t *dev = NULL;
        assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
        ferry_stage_t st = test_cpu_stage("poison", poison_copy);
        ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
        ferry_pipeline_t *p = test_pipeline(&pc);
        enum { NB = 12, SZ = 3 << 20 };
        unsigned char *in = malloc((size_t)NB * SZ), *out = calloc(NB, SZ);
        assert_true(in != NULL && out != NULL);
        uint64_t seed = test_seed(51);
        test_fill_floats(in, (size_t)NB * SZ, &seed);
        for (int i = 0; i < NB; i++)
            in[(size_t)i * SZ] = all || i == 5 ? 0xAB : 0x11;
        run_t rn;
        memset(&rn, 0, sizeof(rn));
        for (int i = 0; i < NB; i++) {
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = in + (size_t)i * SZ;
            b.out = out + (size_t)i * SZ;
            b.bytes = SZ;
            assert_int_equal(ferry_pipeline_submit(p, &b, on_poison_done, &rn, NULL), 0);
        }
        assert_int_equal(ferry_pipeline_drain(p), 0);
        for (int i = 0; i < NB; i++)
            assert_int_equal(atomic_load(&rn.calls[i]), 1);
        assert_int_equal(atomic_load(&rn.failed), 0);
        assert_memory_equal(out, in, (size_t)NB * SZ);
        ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &s), 0);
        print_message("%s: %llu restarts, %d of %d on the GPU, retired %d\n",
                      all ? "every batch poisoned" : "batch 5 poisoned",
                      (unsigned long long)s.worker_restarts, atomic_load(&rn.on_gpu), NB,
                      s.gpu_lost);
        if (all) {
            assert_true(s.gpu_lost); /* retired */
            assert_int_equal(atomic_load(&rn.on_gpu), 0);
        } else {
            assert_false(s.gpu_lost);
            assert_int_equal(atomic_load(&rn.on_gpu), NB - 1);
        }
        assert_int_equal(ferry_pipeline_destroy(p), 0);
        assert_int_equal(ferry_runtime_destroy(rt), 0);
        free(in);
        free(out);
    }
}

typedef struct killer {
    ferry_pipeline_t *p;
    atomic_int stop, kills;
    uint64_t seed;
    pid_t seen[64];
} killer_t;

/* Kills the worker at random moments (2 to 60 ms apart), up to 16 times. */
static void *killer_main(void *arg)
{
    killer_t *k = arg;
    while (!atomic_load(&k->stop) && atomic_load(&k->kills) < 16) {
        usleep((useconds_t)test_rand_range(&k->seed, 2000, 60000));
        pid_t pid = ferry__remote_worker_pid(k->p);
        if (pid > 0 && kill(pid, SIGKILL) == 0)
            k->seen[atomic_fetch_add(&k->kills, 1)] = pid;
    }
    return NULL;
}

/* Workers killed at random moments while small batches stream, over seeds: every batch once and
 * bit-exact; afterwards no worker, no helper and no shared memory is left. */
static void test_workers_killed_at_random(void **state)
{
    (void)state;
    const char *scale = getenv("FERRY_TEST_SCALE");
    unsigned nb = scale != NULL && strcmp(scale, "sanitizer") == 0 ? 32 : 128;
    int base = test_shared_regions();
    for (uint64_t seed = 1; seed <= 4; seed++) {
        const char *kv[] = {"isolation", "process", NULL};
        ferry_runtime_t *rt = test_sim_runtime_with(kv);
        pid_t helper = ferry__zyg_pid(rt->zyg);
        ferry_workload_t *wl = test_workload("scale");
        ferry_pipeline_t *p = make(rt, wl);
        killer_t k = {.p = p, .seed = test_seed(100 + seed)};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, killer_main, &k), 0);
        run_t rn;
        memset(&rn, 0, sizeof(rn));
        stream(p, wl, nb, 1u << 20, seed * 7919, &rn);
        atomic_store(&k.stop, 1);
        pthread_join(th, NULL);
        ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &s), 0);
        print_message("seed %llu: %d kills, %llu restarts, %u batches exactly once\n",
                      (unsigned long long)seed, atomic_load(&k.kills),
                      (unsigned long long)s.worker_restarts, nb);
        assert_true(s.worker_restarts <= (uint64_t)atomic_load(&k.kills));
        assert_int_equal(ferry_pipeline_destroy(p), 0);
        ferry_workload_destroy(wl);
        assert_int_equal(ferry_runtime_destroy(rt), 0);
        assert_int_equal(kill(helper, 0), -1);
        for (int i = 0; i < atomic_load(&k.kills); i++)
            assert_true(kill(k.seen[i], 0) == -1);
        assert_int_equal(test_shared_regions(), base);
    }
}

/* Two simulated H200s in one set, each in its own worker with its own
 * CUDA_DEVICE_MAX_CONNECTIONS (option connections_per_device), read back from each worker's
 * context; the set's batches bit-exact. A rule that matches no device, and the rules without
 * isolation=process, are refused, saying why. */
static void test_connections_per_worker(void **state)
{
    (void)state;
    cJSON *root = test_profile_json();
    cJSON_DeleteItemFromObjectCaseSensitive(root, "devices");
    cJSON_AddNumberToObject(root, "devices", 2);
    char path[64];
    test_write_json(root, "/tmp/ferry-proc-XXXXXX", path, sizeof(path));
    cJSON_Delete(root);
    const char *kv[] = {"isolation", "process", "connections_per_device", "index:0=4,*=16", NULL};
    ferry_runtime_t *rt = test_sim_runtime_on(path, kv);
    ferry_device_t *devs[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, ferry_workload_stage(wl), 1u << 20);
    pc.devices = devs;
    pc.ndevices = 2;
    ferry_pipeline_t *p = test_pipeline(&pc);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    stream(p, wl, 32, 4u << 20, test_seed(41), &rn);
    static const unsigned want[2] = {4, 16};
    for (unsigned i = 0; i < 2; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, i, &d), 0);
        print_message("device %u: %u connections in its worker, %llu bytes\n", i,
                      d.stats.connections, (unsigned long long)d.bytes);
        assert_int_equal(d.stats.connections, want[i]);
        assert_true(d.bytes > 0);
    }
    ferry_conn_measure_t cm = FERRY_CONN_MEASURE_INIT;
    assert_int_equal(ferry_pipeline_connections_measure(p, 16, 1000000, 10000, 3, &cm),
                     FERRY_EINVAL); /* a set: measure its devices */
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    /* the queues each worker really got, measured in it (the pattern of ferry connections
     * --measure): 16 streams see 4 queues in device 0's worker, at least 16 in device 1's */
    for (unsigned i = 0; i < 2; i++) {
        pc = test_pipeline_config(devs[i], ferry_workload_stage(wl), 1u << 20);
        p = test_pipeline(&pc);
        cm = (ferry_conn_measure_t)FERRY_CONN_MEASURE_INIT;
        assert_int_equal(ferry_pipeline_connections_measure(p, 16, 1000000, 10000, 3, &cm), 0);
        print_message("device %u's worker: 16 streams took %.2f waves: %.1f queues%s\n", i,
                      cm.waves, cm.effective_queues, cm.at_least ? " (at least)" : "");
        if (i == 0)
            assert_true(cm.effective_queues == 4 && !cm.at_least);
        else
            assert_true(cm.effective_queues >= 16 && cm.at_least);
        /* not with batches in flight */
        unsigned char buf[64];
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = buf;
        b.bytes = sizeof(buf);
        test_done_t dn;
        memset(&dn, 0, sizeof(dn));
        assert_int_equal(ferry_pipeline_submit(p, &b, test_on_done, &dn, NULL), 0);
        int mrc = ferry_pipeline_connections_measure(p, 16, 1000000, 10000, 3, &cm);
        assert_true(mrc == 0 || mrc == FERRY_EBUSY); /* 0: the batch was done already */
        assert_int_equal(ferry_pipeline_drain(p), 0);
        assert_int_equal(ferry_pipeline_destroy(p), 0);
    }
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    /* no rule for device 1 */
    const char *kv2[] = {"isolation", "process", "connections_per_device", "index:0=4", NULL};
    rt = test_sim_runtime_on(path, kv2);
    assert_int_equal(ferry_device_get(rt, 1, &devs[1]), 0);
    pc = test_pipeline_config(devs[1], ferry_workload_stage(wl), 1u << 20);
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "no rule matches device 1"));
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    /* rules need worker processes; a malformed rule is named */
    const char *kv3[] = {"connections_per_device", "*=8", NULL};
    assert_int_equal(test_sim_runtime_create(path, kv3, &rt), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "needs isolation=process"));
    const char *kv4[] = {"isolation", "process", "connections_per_device", "gpu:1=8", NULL};
    assert_int_equal(test_sim_runtime_create(path, kv4, &rt), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "'gpu:1=8' is not a rule"));
    const char *kv5[] = {"isolation", "process", "connections_per_device", "*=33", NULL};
    assert_int_equal(test_sim_runtime_create(path, kv5, &rt), FERRY_ERANGE);
    unlink(path);
    ferry_workload_destroy(wl);
}

/* The application's process opens no device under isolation=process: a probe process does,
 * and the runtime's devices are shadows with the probe's properties, the same as an
 * isolation=thread runtime sees, per device on a mixed rig; an operation that would drive the
 * device here is refused with a message that says where the device is; a bad device index or
 * profile is reported by ferry_runtime_create as in thread mode. */
static void test_the_application_opens_no_device(void **state)
{
    (void)state;
    char path[512];
    test_profile_named("h200-a100.json", path, sizeof(path));
    const char *kv[] = {"isolation", "process", NULL};
    ferry_runtime_t *rp = test_sim_runtime_on(path, kv);
    ferry_runtime_t *rth = test_sim_runtime_on(path, NULL);
    assert_string_equal(ferry_runtime_backend(rp), "sim");
    assert_int_equal(ferry_device_count(rp), ferry_device_count(rth));
    assert_int_equal(ferry_device_count(rp), 2);
    assert_true((rp->ops->caps & FERRY_BE_CAP_SHADOW) != 0);
    assert_true((rth->ops->caps & FERRY_BE_CAP_SHADOW) == 0);
    for (int i = 0; i < 2; i++) {
        ferry_device_t *dp = NULL, *dt = NULL;
        assert_int_equal(ferry_device_get(rp, i, &dp), 0);
        assert_int_equal(ferry_device_get(rth, i, &dt), 0);
        ferry_device_props_t a = FERRY_DEVICE_PROPS_INIT, b = FERRY_DEVICE_PROPS_INIT;
        assert_int_equal(ferry_device_props(dp, &a), 0);
        assert_int_equal(ferry_device_props(dt, &b), 0);
        print_message("device %d: %s (probe) / %s (in-process), %llu / %llu bytes\n", i, a.name,
                      b.name, (unsigned long long)a.memory_bytes,
                      (unsigned long long)b.memory_bytes);
        assert_string_equal(a.name, b.name);
        assert_int_equal(a.index, i);
        assert_int_equal(a.memory_bytes, b.memory_bytes);
        assert_int_equal(a.pcie_gen, b.pcie_gen);
        assert_int_equal(a.pcie_width, b.pcie_width);
        assert_int_equal(a.sms, b.sms);
        ferry_host_props_t ha = FERRY_HOST_PROPS_INIT, hb = FERRY_HOST_PROPS_INIT;
        assert_int_equal(ferry_device_host(dp, &ha), 0);
        assert_int_equal(ferry_device_host(dt, &hb), 0);
        assert_int_equal(memcmp(&ha, &hb, sizeof(ha)), 0);
        assert_true(ferry_device_is_simulated(dp));
        /* driving the device here is refused, naming where it is driven */
        ferry_conn_measure_t m = FERRY_CONN_MEASURE_INIT;
        assert_int_equal(ferry_connections_measure(dp, 4, 100000, 100000, 1, &m), FERRY_ENOTSUP);
        assert_non_null(strstr(ferry_last_error(), "worker processes"));
        /* registering memory is bookkeeping alone: nothing here to pin it for */
        static unsigned char buf[1u << 16];
        assert_int_equal(ferry_host_register(dp, buf, sizeof(buf)), 0);
        assert_int_equal(ferry_host_unregister(dp, buf), 0);
    }
    ferry_device_t *none = NULL;
    assert_int_equal(ferry_device_get(rp, 2, &none), FERRY_ENODEV);
    /* the A100 (device 1) runs in a worker of its own, as the probe described it */
    ferry_workload_t *wl = test_workload("scale");
    ferry_device_t *d1 = NULL;
    assert_int_equal(ferry_device_get(rp, 1, &d1), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(d1, ferry_workload_stage(wl), 1u << 20);
    ferry_pipeline_t *p = test_pipeline(&pc);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    stream(p, wl, 8, 1u << 20, test_seed(31), &rn);
    assert_int_equal(atomic_load(&rn.on_gpu), 8);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rp), 0);
    assert_int_equal(ferry_runtime_destroy(rth), 0);
    /* errors the probe met come back from ferry_runtime_create, its text with them */
    ferry_runtime_t *bad = NULL;
    const char *kv2[] = {"isolation", "process", "device", "5", NULL};
    assert_int_equal(test_sim_runtime_create(path, kv2, &bad), FERRY_ENODEV);
    assert_non_null(strstr(ferry_last_error(), "device=5"));
    const char *nowhere = "/nonexistent/ferry-profile.json";
    int want = test_sim_runtime_create(nowhere, NULL, &bad);
    assert_int_not_equal(want, 0);
    assert_int_equal(test_sim_runtime_create(nowhere, kv, &bad), want);
    assert_non_null(strstr(ferry_last_error(), "ferry-profile.json"));
}

static void test_misuse(void **state)
{
    (void)state;
    const char *kv[] = {"isolation", "process", "trace", "1", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_workload_t *wl = test_workload("scale");
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 1u << 20);
    ferry_pipeline_t *p = NULL;
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_ENOTSUP);
    assert_non_null(strstr(ferry_last_error(), "trace"));
    /* user data too large to send */
    ferry_stage_t big = *ferry_workload_stage(wl);
    big.user_bytes = 1u << 20;
    static unsigned char blob[1u << 20];
    big.user = blob;
    const char *kv2[] = {"isolation", "process", NULL};
    ferry_runtime_t *rt2 = test_sim_runtime_with(kv2);
    assert_int_equal(ferry_device_get(rt2, 0, &dev), 0);
    pc = test_pipeline_config(dev, &big, 1u << 20);
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "user_bytes"));
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    assert_int_equal(ferry_runtime_destroy(rt2), 0);
    /* a bad isolation value names what is accepted */
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_not_equal(ferry_options_set(o, "isolation", "fork"), 0);
    assert_non_null(strstr(ferry_last_error(), "thread"));
    ferry_options_destroy(o);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_batches_in_a_worker),
          cmocka_unit_test(test_a_killed_worker_is_replaced),
          cmocka_unit_test(test_sticky_and_hung_workers_are_replaced),
          cmocka_unit_test(test_a_stopped_worker_is_killed_at_its_deadline),
          cmocka_unit_test(test_the_spare_takes_over),
          cmocka_unit_test(test_host_alloc_memory_is_shared),
          cmocka_unit_test(test_workers_killed_at_random),
          cmocka_unit_test(test_a_batch_that_ends_every_worker),
          cmocka_unit_test(test_connections_per_worker),
          cmocka_unit_test(test_the_application_opens_no_device), cmocka_unit_test(test_misuse))
