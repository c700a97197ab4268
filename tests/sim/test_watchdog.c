/* The watchdog on the simulated H200: every kernel gets the pipeline's abort word and a
 * sequence number of its own; the heartbeat runs while the device has room, stalls while a
 * long kernel holds every SM (and is reported, once), and comes back after it; a long kernel
 * within its deadline is not taken for a hang. */
#include <stdatomic.h>
#include <string.h>

#include "ferry/workloads.h"
#include "testlib.h"

typedef struct probe {
    const ferry_stage_t *inner;
    const volatile uint64_t *word;
    atomic_int nullword;
    atomic_uchar seen[256]; /* by seq */
    atomic_int dup;
} probe_t;

static int probe_cpu(const ferry_kernel_args_t *a, void *user)
{
    probe_t *p = user;
    if (a->abort_word == NULL)
        atomic_fetch_add(&p->nullword, 1);
    p->word = a->abort_word;
    if (a->seq < 256 && atomic_fetch_add(&p->seen[a->seq], 1) != 0)
        atomic_fetch_add(&p->dup, 1);
    return p->inner->cpu(a, p->inner->user);
}

static void count(const ferry_batch_result_t *r, void *arg)
{
    atomic_fetch_add((atomic_int *)arg, r->where == FERRY_DONE_GPU ? 1 : 1000);
}

/* @nb batches of 2 chunks of 1 MiB through `scale` whose kernels take @kernel_ms each. */
static ferry_pipeline_stats_t run(unsigned nb, double kernel_ms, probe_t *pr)
{
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("scale");
    const size_t chunk = 1u << 20, per = 2 * chunk, total = nb * per;
    pr->inner = ferry_workload_stage(wl);
    ferry_stage_t st = *pr->inner;
    st.cpu = probe_cpu;
    st.user = pr;
    if (kernel_ms > 0)
        st.ns_per_byte = kernel_ms * 1e6 / (double)chunk;
    test_bufs_t bufs = test_bufs_alloc(total);
    unsigned char *in = bufs.in, *out = bufs.out, *ref = bufs.ref;
    uint64_t rs = test_seed(61);
    test_fill_floats(in, total, &rs);
    assert_int_equal(ferry_workload_reference(wl, in, ref, total), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, chunk);
    pc.coalesce_bytes = SIZE_MAX; /* a copy per chunk: a sequence number each */
    ferry_pipeline_t *p = test_pipeline(&pc);
    atomic_int done = 0;
    test_submit_split(p, in, out, (size_t)nb * per, per, count, &done);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(atomic_load(&done), (int)nb); /* every batch once, on the device */
    assert_memory_equal(out, ref, total);
    test_bufs_free(&bufs);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    return s;
}

static void test_kernel_args(void **state)
{
    (void)state;
    static probe_t pr;
    memset(&pr, 0, sizeof(pr));
    ferry_pipeline_stats_t s = run(40, 0, &pr);
    assert_int_equal(atomic_load(&pr.nullword), 0);
    assert_int_equal(atomic_load(&pr.dup), 0);
    for (unsigned q = 1; q <= 80; q++) /* 80 chunks: seq 1..80, each once */
        assert_int_equal(atomic_load(&pr.seen[q]), 1);
    assert_int_equal(atomic_load(&pr.seen[0]), 0);
    assert_int_equal(s.deadlines_passed, 0);
    assert_true(s.heartbeats_sent >= 1);
}

static void test_heartbeat_stalls_behind_long_kernel(void **state)
{
    (void)state;
    static probe_t pr;
    memset(&pr, 0, sizeof(pr));
    /* 4 kernels of 500 ms, each holding every SM: a beat queued meanwhile waits (the default
     * period 100 ms, stall after the 200 ms floor), then runs when the kernel ends. */
    ferry_pipeline_stats_t s = run(2, 500, &pr);
    printf("# heartbeats sent %llu seen %llu, stalls %llu, deadlines %llu\n",
           (unsigned long long)s.heartbeats_sent, (unsigned long long)s.heartbeats_seen,
           (unsigned long long)s.heartbeat_stalls, (unsigned long long)s.deadlines_passed);
    assert_true(s.heartbeat_stalls >= 1);
    assert_true(s.heartbeats_sent >= 4);
    assert_true(s.heartbeats_seen + 1 >= s.heartbeats_sent);
    assert_int_equal(s.deadlines_passed, 0); /* long, not late: the deadline follows the hint */
    assert_false(s.gpu_lost);
}

static void test_no_heartbeat_option(void **state)
{
    (void)state;
    const char *const kv[] = {"heartbeat_ms", "0", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("copy");
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 0);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static char buf[1 << 20];
    ferry_batch_t bt = FERRY_BATCH_INIT;
    bt.in = bt.out = buf;
    bt.bytes = sizeof(buf);
    atomic_int done = 0;
    assert_int_equal(ferry_pipeline_submit(p, &bt, count, &done, NULL), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.heartbeats_sent, 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    /* Out of range: refused by name. */
    const char *const bad[] = {"heartbeat_ms", "70000", NULL};
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_equal(ferry_options_set(o, bad[0], bad[1]), FERRY_ERANGE);
    assert_non_null(strstr(ferry_last_error(), "heartbeat_ms"));
    ferry_options_destroy(o);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_kernel_args),
          cmocka_unit_test(test_heartbeat_stalls_behind_long_kernel),
          cmocka_unit_test(test_no_heartbeat_option))
