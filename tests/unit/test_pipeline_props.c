/* Pipeline properties over random configurations on the simulator: for each seeded config
 * (chunk 1 byte to 64 MiB, odd and unaligned sizes, empty batches, depth 1-8, streams 1-8,
 * blocking and non-blocking submit, staged, prepared and in-place batches) every output byte is
 * right, every callback runs exactly once, and every slot is back when drained. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* The stage: out[i] = in[i] ^ f(offset of the byte within its batch), so a chunk copied to the
 * wrong place, or a wrong offset, shows. */
static unsigned char mix(uint64_t off)
{
    return (unsigned char)((off * 0x9e3779b1u) >> 13);
}

static int stage_cpu(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const unsigned char *in = a->in;
    unsigned char *out = a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = in[i] ^ mix(a->offset + i);
    return 0;
}

typedef struct bstate {
    unsigned char *in, *out, *expect;
    size_t bytes;
    bool prepared, in_place, discard;
    uint64_t seed;
    atomic_int calls;
    atomic_int bad;
    uint64_t id;      /* from submit */
    uint64_t seen_id; /* from the callback */
} bstate_t;

static int prepare(void *slot, size_t bytes, size_t offset, void *arg)
{
    bstate_t *b = arg;
    unsigned char *s = slot;
    for (size_t i = 0; i < bytes; i++)
        s[i] = (unsigned char)((offset + i) * 131u + b->seed);
    return 0;
}

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    bstate_t *b = arg;
    atomic_fetch_add(&b->calls, 1);
    b->seen_id = r->id; /* compared after drain: submit may not have returned the id yet */
    if (r->status != 0 || r->bytes != b->bytes || r->where != FERRY_DONE_GPU)
        atomic_fetch_add(&b->bad, 1);
}

static size_t rand_size(uint64_t *rs, size_t max)
{
    /* log-uniform: many small and odd sizes, some large */
    unsigned bits = 0;
    while ((1ull << bits) < max)
        bits++;
    unsigned k = (unsigned)test_rand_range(rs, 0, bits);
    size_t hi = (size_t)1 << k;
    if (hi > max)
        hi = max;
    return (size_t)test_rand_range(rs, 1, hi);
}

static void run_config(ferry_device_t *dev, uint64_t seed, int idx)
{
    uint64_t rs = seed;
    bool big = test_rand_range(&rs, 0, 9) == 0;
    size_t chunk =
        big ? (size_t)test_rand_range(&rs, 1 << 20, 64 << 20) : rand_size(&rs, 256 << 10);
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.device = dev;
    cfg.chunk_bytes = chunk;
    cfg.depth = (unsigned)test_rand_range(&rs, 1, big ? 2 : 8);
    cfg.copy_streams = (unsigned)test_rand_range(&rs, 1, 8);
    cfg.compute_streams = (unsigned)test_rand_range(&rs, 1, 8);
    cfg.queue_depth = test_rand_range(&rs, 0, 1) ? 0 : (unsigned)test_rand_range(&rs, 1, 16);
    cfg.nonblocking = (int)test_rand_range(&rs, 0, 1);
    cfg.workers = (unsigned)test_rand_range(&rs, 1, 3);
    cfg.single_stream = test_rand_range(&rs, 0, 7) == 0;
    ferry_stage_t stage = test_cpu_stage("xor", stage_cpu);
    stage.ns_per_byte = (double)test_rand_range(&rs, 0, 3) * 0.01;
    cfg.stage = &stage;

    ferry_pipeline_t *p = NULL;
    int rc = ferry_pipeline_create(&cfg, &p);
    if (rc != 0)
        fail_msg("config %d seed %llu: create: %s", idx, (unsigned long long)seed,
                 ferry_last_error());

    size_t nb = big ? (size_t)test_rand_range(&rs, 1, 3) : (size_t)test_rand_range(&rs, 1, 40);
    size_t budget = big ? 3 * chunk : (size_t)4 << 20;
    bstate_t *bs = calloc(nb, sizeof(*bs));
    size_t used = 0;
    for (size_t i = 0; i < nb; i++) {
        bstate_t *b = &bs[i];
        size_t max = big ? 2 * chunk + 1 : 8 * chunk + 3;
        if (max > budget - used)
            max = budget - used;
        b->bytes = (test_rand_range(&rs, 0, 9) == 0 || max == 0) ? 0 : rand_size(&rs, max);
        used += b->bytes;
        b->seed = test_rand(&rs);
        unsigned mode = (unsigned)test_rand_range(&rs, 0, 9);
        b->prepared = mode == 0;
        b->in_place = mode == 1;
        b->discard = mode == 2;
        /* +1 and an odd offset: unaligned buffers */
        b->in = malloc(b->bytes + 2);
        b->expect = malloc(b->bytes + 1);
        unsigned char *in = b->in + 1;
        uint64_t ds = b->seed;
        if (b->prepared)
            prepare(in, b->bytes, 0, b);
        else
            test_fill_random(in, b->bytes, &ds);
        for (size_t k = 0; k < b->bytes; k++)
            b->expect[k] = in[k] ^ mix(k);
        b->out = b->in_place ? b->in : malloc(b->bytes + 2);
        if (!b->in_place)
            memset(b->out, 0xA5, b->bytes + 2);
    }
    uint64_t eagain = 0;
    for (size_t i = 0; i < nb; i++) {
        bstate_t *b = &bs[i];
        ferry_batch_t batch = FERRY_BATCH_INIT;
        batch.bytes = b->bytes;
        if (b->prepared && b->bytes) {
            batch.prepare = prepare;
            batch.prepare_arg = b;
        } else {
            batch.in = b->in + 1;
        }
        batch.out = b->discard ? NULL : b->out + 1;
        for (;;) {
            rc = ferry_pipeline_submit(p, &batch, on_done, b, &b->id);
            if (rc != FERRY_EAGAIN)
                break;
            eagain++;
            if (!cfg.nonblocking)
                fail_msg("config %d seed %llu: EAGAIN in blocking mode", idx,
                         (unsigned long long)seed);
            sched_yield();
        }
        if (rc != 0)
            fail_msg("config %d seed %llu: submit %zu: %s", idx, (unsigned long long)seed, i,
                     ferry_last_error());
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    bool ok = st.slots_in_use == 0 && st.batches_done_gpu == nb && st.batches_failed == 0 &&
              st.batches_submitted == nb && st.queue_full_eagain == eagain;
    if (!ok)
        fail_msg("config %d seed %llu: stats: slots_in_use %u, done %llu/%zu, failed %llu, "
                 "eagain %llu/%llu",
                 idx, (unsigned long long)seed, st.slots_in_use,
                 (unsigned long long)st.batches_done_gpu, nb, (unsigned long long)st.batches_failed,
                 (unsigned long long)st.queue_full_eagain, (unsigned long long)eagain);
    for (size_t i = 0; i < nb; i++) {
        bstate_t *b = &bs[i];
        if (atomic_load(&b->calls) != 1 || atomic_load(&b->bad) != 0 || b->seen_id != b->id)
            fail_msg("config %d seed %llu: batch %zu: %d callbacks, %d bad", idx,
                     (unsigned long long)seed, i, atomic_load(&b->calls), atomic_load(&b->bad));
        if (!b->discard) {
            if (memcmp(b->out + 1, b->expect, b->bytes) != 0)
                fail_msg("config %d seed %llu: batch %zu (%zu bytes, chunk %zu, %s): output "
                         "differs",
                         idx, (unsigned long long)seed, i, b->bytes, chunk,
                         b->prepared   ? "prepared"
                         : b->in_place ? "in place"
                                       : "staged");
            if (!b->in_place && (b->out[0] != 0xA5 || b->out[b->bytes + 1] != 0xA5))
                fail_msg("config %d seed %llu: batch %zu: wrote outside its buffer", idx,
                         (unsigned long long)seed, i);
        }
    }
    assert_int_equal(ferry_pipeline_close(p), 0);
    for (size_t i = 0; i < nb; i++) {
        if (!bs[i].in_place)
            free(bs[i].out);
        free(bs[i].in);
        free(bs[i].expect);
    }
    free(bs);
}

static void test_random_configs(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    uint64_t base = test_seed(20261202);
    const char *n_env = getenv("FERRY_TEST_CONFIGS");
    int n = n_env ? atoi(n_env) : 200;
    for (int i = 0; i < n; i++) {
        uint64_t s = base + (uint64_t)i * 7919;
        run_config(dev, s, i);
    }
    printf("# %d configurations passed\n", n);
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_random_configs))
