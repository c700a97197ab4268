/* Liveness under faults, as a property: over many seeds and random fault mixes (kernel errors,
 * hangs that poll the abort flag and hangs that ignore it, sticky errors, a slow link), GPU
 * retries 0 to 3, small and large chunks, every run ends within a bound of real time and every
 * batch completes exactly once, its output bit-exact unless it failed. A run that does not end
 * (a slot waited for that never comes back) fails the test by the alarm, naming its case. */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry/workloads.h"
#include "testlib.h"

#define MAX_BATCHES 32

static bool sanitizer_scale(void)
{
    const char *s = getenv("FERRY_TEST_SCALE");
    return s != NULL && strcmp(s, "sanitizer") == 0;
}

/* The case being run, for the alarm's message. */
static char current[512];

static void on_alarm(int sig)
{
    (void)sig;
    static const char head[] = "FAIL: a run did not end within its bound: ";
    ssize_t w = write(STDOUT_FILENO, head, sizeof(head) - 1);
    w = write(STDOUT_FILENO, current, strlen(current));
    w = write(STDOUT_FILENO, "\n", 1);
    (void)w;
    _exit(1);
}

typedef struct liveness_case {
    char spec[200];
    unsigned retries;
    size_t chunk;
    unsigned depth;
    unsigned nbatches;
    uint64_t seed;
} liveness_case_t;

static void run_case(const liveness_case_t *c, unsigned bound_s)
{
    snprintf(current, sizeof(current),
             "inject '%s' gpu_retries %u chunk %zu depth %u batches %u seed %llu", c->spec,
             c->retries, c->chunk, c->depth, c->nbatches, (unsigned long long)c->seed);
    char retries[8], seed[24];
    snprintf(retries, sizeof(retries), "%u", c->retries);
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)c->seed);
    const char *kv[] = {"inject", c->spec, "gpu_retries", retries, "seed", seed, NULL};
    alarm(bound_s);
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("scale");
    ferry_stage_t st = *ferry_workload_stage(wl);
    uint64_t rs = c->seed * 7919 + 1;
    /* Batches of 1 to 3 chunks, the last one short. */
    size_t sizes[MAX_BATCHES], offs[MAX_BATCHES], total = 0;
    for (unsigned b = 0; b < c->nbatches; b++) {
        size_t n =
            c->chunk * test_rand_range(&rs, 0, 2) + 4 * test_rand_range(&rs, 1, c->chunk / 4);
        offs[b] = total;
        sizes[b] = n;
        total += n;
    }
    test_bufs_t bufs = test_bufs_alloc(total);
    unsigned char *in = bufs.in, *out = bufs.out, *ref = bufs.ref;
    test_fill_floats(in, total, &rs);
    memset(out, 0xAB, total);
    assert_int_equal(ferry_workload_reference(wl, in, ref, total), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, c->chunk);
    pc.depth = c->depth;
    ferry_pipeline_t *p = test_pipeline(&pc);
    static test_done_t d;
    memset(&d, 0, sizeof(d));
    for (unsigned b = 0; b < c->nbatches; b++) {
        ferry_batch_t bt = FERRY_BATCH_INIT;
        bt.in = in + offs[b];
        bt.out = out + offs[b];
        bt.bytes = sizes[b];
        uint64_t id = 0;
        assert_int_equal(ferry_pipeline_submit(p, &bt, test_on_done, &d, &id), 0);
        assert_int_equal(id, b);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    ferry_pipeline_stats_t ps = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &ps), 0);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    alarm(0);
    for (unsigned b = 0; b < c->nbatches; b++)
        if (atomic_load(&d.calls[b]) != 1)
            fail_msg("%s: batch %u completed %d times", current, b, atomic_load(&d.calls[b]));
    int gpu = atomic_load(&d.gpu), cpu = atomic_load(&d.cpu), failed = atomic_load(&d.failed);
    assert_int_equal(gpu + cpu + failed, (int)c->nbatches);
    assert_int_equal(failed, 0); /* scale has a CPU function: nothing fails for good */
    assert_int_equal(ps.batches_done_gpu + ps.batches_done_cpu, c->nbatches);
    /* Drained: nothing is bound to a chunk in flight, hung GPU or not. */
    assert_int_equal(ps.slots_in_use, 0);
    if (memcmp(out, ref, total) != 0)
        fail_msg("%s: output differs from the CPU reference", current);
    test_bufs_free(&bufs);
    ferry_workload_destroy(wl);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* The mix that never ended on 512 MiB (seeds 1, 2 and 5, 8 MiB chunks), scaled down: random
 * kernel errors and polling hangs with a GPU retry, where a retry hangs. */
static void test_retry_that_hangs(void **state)
{
    (void)state;
    signal(SIGALRM, on_alarm);
    unsigned bound = sanitizer_scale() ? 300 : 60;
    for (uint64_t seed = 1; seed <= (sanitizer_scale() ? 2u : 6u); seed++) {
        liveness_case_t c = {
            .retries = 1, .chunk = 1u << 20, .depth = 8, .nbatches = 24, .seed = seed};
        snprintf(c.spec, sizeof(c.spec), "kernel@p=0.3,hang@p=0.05");
        run_case(&c, bound);
    }
}

static void test_random_fault_mixes(void **state)
{
    (void)state;
    signal(SIGALRM, on_alarm);
    uint64_t rs = test_seed(1515);
    unsigned cases = sanitizer_scale() ? 6 : 60, bound = sanitizer_scale() ? 300 : 60;
    static const size_t chunks[] = {4u << 10, 64u << 10, 1u << 20, 4u << 20};
    for (unsigned i = 0; i < cases; i++) {
        liveness_case_t c = {0};
        c.retries = (unsigned)test_rand_range(&rs, 0, 3);
        c.chunk = chunks[test_rand_range(&rs, 0, 3)];
        c.depth = (unsigned)test_rand_range(&rs, 1, 8);
        c.nbatches = (unsigned)test_rand_range(&rs, 1, c.chunk >= (1u << 20) ? 12 : MAX_BATCHES);
        c.seed = test_rand(&rs) % 1000000;
        size_t at = 0;
        /* Each kind at most once, in a random subset: hangs in most cases. */
        if (test_rand_range(&rs, 0, 3) > 0)
            at += (size_t)snprintf(c.spec + at, sizeof(c.spec) - at, "kernel@p=0.%02u,",
                                   (unsigned)test_rand_range(&rs, 5, 40));
        if (test_rand_range(&rs, 0, 3) > 0)
            at += (size_t)snprintf(c.spec + at, sizeof(c.spec) - at, "hang@p=0.%02u,",
                                   (unsigned)test_rand_range(&rs, 1, 10));
        if (test_rand_range(&rs, 0, 3) == 0)
            at += (size_t)snprintf(c.spec + at, sizeof(c.spec) - at, "hang-hard@p=0.%02u,",
                                   (unsigned)test_rand_range(&rs, 1, 5));
        if (test_rand_range(&rs, 0, 4) == 0)
            at += (size_t)snprintf(c.spec + at, sizeof(c.spec) - at, "sticky@n=%u,",
                                   (unsigned)test_rand_range(&rs, 1, 40));
        if (test_rand_range(&rs, 0, 4) == 0)
            at += (size_t)snprintf(c.spec + at, sizeof(c.spec) - at, "slow@n=%u:x=%u,",
                                   (unsigned)test_rand_range(&rs, 1, 20),
                                   (unsigned)test_rand_range(&rs, 2, 20));
        if (at > 0)
            c.spec[at - 1] = '\0'; /* the last comma */
        run_case(&c, bound);
    }
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_retry_that_hangs),
          cmocka_unit_test(test_random_fault_mixes))
