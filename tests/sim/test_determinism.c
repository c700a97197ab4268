/* The simulator's virtual time does not depend on host scheduling: the same configuration, seed
 * and inputs run twice give the same virtual times, bit for bit (every batch's submit and done
 * time, the elapsed and busy figures), whatever the host's threads did meanwhile. A busy host
 * thread (a spinner on each core) makes the scheduling differ between the two runs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define MAX_BATCHES 4096

typedef struct run_cfg {
    const char *name;
    size_t chunk, batch, total;
    unsigned copy_streams, compute_streams, queue_depth;
    bool pinned;      /* input and output registered */
    bool use_prepare; /* the input comes from a prepare callback */
    const char *inject;
} run_cfg_t;

typedef struct run_out {
    uint64_t submit_ns[MAX_BATCHES], done_ns[MAX_BATCHES];
    int where[MAX_BATCHES];
    uint64_t nb;
    ferry_pipeline_stats_t st;
} run_out_t;

static int cpu_scale(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const unsigned char *in = a->in;
    unsigned char *out = a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = (unsigned char)(in[i] * 3u + 1u);
    return 0;
}

static int gen(void *slot, size_t bytes, size_t offset, void *arg)
{
    (void)arg;
    memset(slot, (int)(offset >> 12), bytes);
    return 0;
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    run_out_t *o = arg;
    if (r->id < MAX_BATCHES) {
        o->submit_ns[r->id] = r->submit_ns;
        o->done_ns[r->id] = r->done_ns;
        o->where[r->id] = r->status != 0 ? -1 : (int)r->where;
    }
}

static atomic_bool spin_stop;

static void *spinner(void *arg)
{
    (void)arg;
    volatile uint64_t x = 0;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
        x = x + 1;
    return NULL;
}

static void run_once(const run_cfg_t *c, run_out_t *o, bool noisy)
{
    pthread_t sp[2];
    if (noisy) {
        atomic_store(&spin_stop, false);
        for (int i = 0; i < 2; i++)
            assert_int_equal(pthread_create(&sp[i], NULL, spinner, NULL), 0);
    }
    const char *const kv[] = {"inject", c->inject ? c->inject : "", "seed", "7", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    unsigned char *in = NULL, *out = NULL;
    assert_int_equal(posix_memalign((void **)&in, 4096, c->total), 0);
    assert_int_equal(posix_memalign((void **)&out, 4096, c->total), 0);
    for (size_t i = 0; i < c->total; i++)
        in[i] = (unsigned char)(i * 7u);
    memset(out, 0, c->total);
    if (c->pinned) {
        assert_int_equal(ferry_host_register(dev, in, c->total), 0);
        assert_int_equal(ferry_host_register(dev, out, c->total), 0);
    }
    ferry_stage_t s = test_cpu_stage("scale", cpu_scale);
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &s, c->chunk);
    cfg.copy_streams = c->copy_streams;
    cfg.compute_streams = c->compute_streams;
    cfg.queue_depth = c->queue_depth;
    ferry_pipeline_t *p = test_pipeline(&cfg);
    memset(o, 0, sizeof(*o));
    for (size_t off = 0; off < c->total; off += c->batch, o->nb++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.bytes = c->total - off < c->batch ? c->total - off : c->batch;
        if (c->use_prepare)
            b.prepare = gen;
        else
            b.in = in + off;
        b.out = out + off;
        assert_int_equal(ferry_pipeline_submit(p, &b, done, o, NULL), 0);
    }
    assert_true(o->nb <= MAX_BATCHES);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    o->st = (ferry_pipeline_stats_t)FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &o->st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    if (c->pinned) {
        ferry_host_unregister(dev, in);
        ferry_host_unregister(dev, out);
    }
    free(in);
    free(out);
    ferry_runtime_destroy(rt);
    if (noisy) {
        atomic_store(&spin_stop, true);
        for (int i = 0; i < 2; i++)
            pthread_join(sp[i], NULL);
    }
}

static void compare(const run_cfg_t *c, const run_out_t *a, const run_out_t *b)
{
    assert_int_equal(a->nb, b->nb);
    for (uint64_t i = 0; i < a->nb; i++) {
        if (a->submit_ns[i] != b->submit_ns[i] || a->done_ns[i] != b->done_ns[i] ||
            a->where[i] != b->where[i])
            fail_msg("%s: batch %llu: submitted at %llu / %llu ns, done at %llu / %llu ns "
                     "(where %d / %d) in two runs",
                     c->name, (unsigned long long)i, (unsigned long long)a->submit_ns[i],
                     (unsigned long long)b->submit_ns[i], (unsigned long long)a->done_ns[i],
                     (unsigned long long)b->done_ns[i], a->where[i], b->where[i]);
    }
    if (a->st.elapsed_ns != b->st.elapsed_ns || a->st.busy_h2d_ns != b->st.busy_h2d_ns ||
        a->st.busy_compute_ns != b->st.busy_compute_ns || a->st.busy_d2h_ns != b->st.busy_d2h_ns ||
        a->st.chunks_cpu != b->st.chunks_cpu || a->st.failure_records != b->st.failure_records)
        fail_msg("%s: elapsed %llu / %llu ns, busy h2d %llu / %llu, compute %llu / %llu, d2h "
                 "%llu / %llu, cpu chunks %llu / %llu in two runs",
                 c->name, (unsigned long long)a->st.elapsed_ns,
                 (unsigned long long)b->st.elapsed_ns, (unsigned long long)a->st.busy_h2d_ns,
                 (unsigned long long)b->st.busy_h2d_ns, (unsigned long long)a->st.busy_compute_ns,
                 (unsigned long long)b->st.busy_compute_ns, (unsigned long long)a->st.busy_d2h_ns,
                 (unsigned long long)b->st.busy_d2h_ns, (unsigned long long)a->st.chunks_cpu,
                 (unsigned long long)b->st.chunks_cpu);
    /* Bit for bit: the rates derive from the times. */
    assert_memory_equal(&a->st.gbps_h2d, &b->st.gbps_h2d, sizeof(double));
    assert_memory_equal(&a->st.gbps_d2h, &b->st.gbps_d2h, sizeof(double));
}

static const run_cfg_t configs[] = {
    /* ferry bench pipeline's shape: 4 chunks a batch, the default queue. */
    {"bench 256K", 256u << 10, 1u << 20, 32u << 20, 0, 2, 0, true, false, NULL},
    {"bench 1M", 1u << 20, 4u << 20, 64u << 20, 0, 1, 0, true, false, NULL},
    /* Light batches (64 KiB and less, pinned, no prepare): the caller's own thread issues
     * them, while the completion thread retires at the same virtual instants. */
    {"light 16K", 16u << 10, 16u << 10, 4u << 20, 0, 2, 0, true, false, NULL},
    {"light 64K", 64u << 10, 64u << 10, 8u << 20, 1, 2, 0, true, false, NULL},
    /* Pageable input staged by the host workers, two copy streams. */
    {"staged", 512u << 10, 2u << 20, 32u << 20, 2, 2, 0, false, false, NULL},
    {"prepare", 1u << 20, 4u << 20, 32u << 20, 1, 1, 4, true, true, NULL},
    /* Faults on a schedule: retries and fallbacks happen at the same virtual times. */
    {"faults", 256u << 10, 1u << 20, 16u << 20, 0, 2, 0, true, false, "kernel@p=0.05"},
};

static void test_same_virtual_times(void **state)
{
    (void)state;
    static run_out_t a, b;
    /* Sanitizer builds (FERRY_TEST_SCALE=sanitizer) run a quarter of the bytes: the same code,
     * run slower. */
    const char *scale = getenv("FERRY_TEST_SCALE");
    size_t div = scale != NULL && strcmp(scale, "sanitizer") == 0 ? 4 : 1;
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
        run_cfg_t cc = configs[i];
        cc.total /= div;
        const run_cfg_t *c = &cc;
        run_once(c, &a, false);
        assert_true(a.st.elapsed_ns > 0);
        /* Twice more, once on a loaded host: each must match the first exactly. */
        for (int k = 0; k < 2; k++) {
            run_once(c, &b, k == 1);
            compare(c, &a, &b);
        }
        print_message("%-10s elapsed %llu ns, %.4f / %.4f GB/s: the same in 3 runs\n", c->name,
                      (unsigned long long)a.st.elapsed_ns, a.st.gbps_h2d, a.st.gbps_d2h);
    }
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_same_virtual_times))
