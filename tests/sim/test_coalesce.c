/* Coalesced copies (option coalesce_bytes) on the model: adjacent chunks of a batch share one
 * H2D and one D2H, each chunk keeps its kernel and its prepare call. Every batch shape (several
 * groups, a short last group, a short last chunk, one chunk, an empty batch, a light batch,
 * prepared input) comes out bit-exact; the trace shows one copy per group; small chunks gain
 * what the model's per-copy cost predicts; the group follows the option's bounds. */
#include <stdatomic.h>
#include <string.h>

#include "ferry/options.h"
#include "ferry/workloads.h"
#include "testlib.h"

typedef struct calls {
    size_t chunk, n;
    size_t bytes[256], offset[256];
    const unsigned char *src;
} calls_t;

/* Input made in place: the source bytes at the chunk's offset; each call recorded. */
static int gen(void *slot, size_t bytes, size_t offset, void *arg)
{
    calls_t *c = arg;
    if (c->n < 256) {
        c->bytes[c->n] = bytes;
        c->offset[c->n] = offset;
    }
    c->n++;
    memcpy(slot, c->src + offset, bytes);
    return 0;
}

static void count(const ferry_batch_result_t *r, void *arg)
{
    int *n = arg;
    n[r->status == 0 ? 0 : 1]++;
}

typedef struct ops {
    size_t h2d, d2h, kernels, h2d_bytes, max_h2d;
} ops_t;

static void on_op(const ferry_op_record_t *o, void *arg)
{
    ops_t *t = arg;
    /* A group's ops cover its chunks: 4, or the batch's rest. */
    assert_true(o->chunks >= 1 && o->chunks <= 4);
    assert_int_equal(o->chunk % 4, 0);
    assert_true(o->bytes <= (uint64_t)o->chunks * (64u << 10));
    assert_true(o->bytes > (uint64_t)(o->chunks - 1) * (64u << 10));
    if (o->kind == FERRY_OP_H2D) {
        t->h2d++;
        t->h2d_bytes += o->bytes;
        t->max_h2d = o->bytes > t->max_h2d ? o->bytes : t->max_h2d;
    } else if (o->kind == FERRY_OP_D2H) {
        t->d2h++;
    } else {
        t->kernels++;
    }
}

static void test_every_batch_shape(void **state)
{
    (void)state;
    const char *const kv[] = {"trace", "1", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("scale");
    const size_t chunk = 64u << 10;
    /* Bytes per batch: 2.5 groups; 3 chunks and a short one; one group; one chunk; a light
     * batch (under one chunk); empty; a group and a bit; prepared input (last). */
    const size_t sizes[] = {10 * chunk, 3 * chunk + 400, 4 * chunk,     chunk, 4096,
                            0,          4 * chunk + 8,   9 * chunk + 12};
    const size_t nb = sizeof(sizes) / sizeof(sizes[0]);
    size_t total = 0, chunks = 0, groups = 0;
    for (size_t i = 0; i < nb; i++) {
        size_t c = (sizes[i] + chunk - 1) / chunk;
        total += sizes[i];
        chunks += c;
        groups += (c + 3) / 4;
    }
    test_bufs_t bufs = test_bufs_alloc(total);
    unsigned char *in = bufs.in, *out = bufs.out, *ref = bufs.ref;
    uint64_t rs = test_seed(31);
    test_fill_floats(in, total, &rs);
    memset(out, 0xAB, total);
    assert_int_equal(ferry_workload_reference(wl, in, ref, total), 0);

    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), chunk);
    pc.coalesce_bytes = 4 * chunk;
    pc.depth = 3; /* fewer slots than groups in a batch: the issuer waits for them */
    ferry_pipeline_t *p = test_pipeline(&pc);
    int done[2] = {0, 0};
    calls_t calls = {.chunk = chunk};
    size_t at = 0;
    for (size_t i = 0; i < nb; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.out = out + at;
        b.bytes = sizes[i];
        if (i == nb - 1) {
            calls.src = in + at;
            b.prepare = gen;
            b.prepare_arg = &calls;
        } else {
            b.in = in + at;
        }
        assert_int_equal(ferry_pipeline_submit(p, &b, count, done, NULL), 0);
        at += sizes[i];
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(done[0], (int)nb);
    assert_int_equal(done[1], 0);
    assert_memory_equal(out, ref, total);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.copy_group, 4);
    assert_int_equal(st.chunks, chunks);
    assert_int_equal(st.bytes_h2d, total);
    assert_int_equal(st.bytes_d2h, total);
    /* The prepared batch: one call per chunk, chunk-sized (the last short), in order. */
    size_t last = sizes[nb - 1];
    assert_int_equal(calls.n, (last + chunk - 1) / chunk);
    for (size_t i = 0; i < calls.n; i++) {
        assert_int_equal(calls.offset[i], i * chunk);
        assert_int_equal(calls.bytes[i], last - i * chunk < chunk ? last - i * chunk : chunk);
    }
    /* One copy each way per group, a compute op per group (its kernels, one slice). */
    ops_t t = {0};
    assert_int_equal(ferry_pipeline_ops(p, on_op, &t), 0);
    assert_int_equal(t.h2d, groups);
    assert_int_equal(t.d2h, groups);
    assert_int_equal(t.kernels, groups);
    assert_int_equal(t.h2d_bytes, total);
    assert_int_equal(t.max_h2d, 4 * chunk);
    assert_int_equal(ferry_pipeline_close(p), 0);
    test_bufs_free(&bufs);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
}

static int fill(void *slot, size_t bytes, size_t offset, void *arg)
{
    (void)arg;
    memset(slot, (int)(offset >> 16), bytes);
    return 0;
}

/* Simulated GB/s each way of @total bytes in batches of 4 chunks; the copy group out. */
static double rate(ferry_device_t *dev, size_t chunk, size_t coalesce, size_t total,
                   unsigned *group)
{
    ferry_workload_t *wl = test_workload("copy");
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), chunk);
    pc.coalesce_bytes = coalesce;
    pc.queue_depth = 64;
    ferry_pipeline_t *p = test_pipeline(&pc);
    int done[2] = {0, 0};
    for (size_t off = 0; off < total; off += 4 * chunk) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.prepare = fill;
        b.bytes = 4 * chunk;
        assert_int_equal(ferry_pipeline_submit(p, &b, count, done, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(done[1], 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_workload_destroy(wl);
    *group = st.copy_group;
    return st.gbps_h2d < st.gbps_d2h ? st.gbps_h2d : st.gbps_d2h;
}

static void test_small_chunks_gain(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    unsigned g = 0;
    /* 256 KiB chunks: the ~5 us per copy halves the rate; copies of 1 MiB win most of it back
     * (FACTS.md: 1 MiB copies run at ~80% of the link's best). */
    double one = rate(dev, 256u << 10, SIZE_MAX, 128u << 20, &g);
    assert_int_equal(g, 1);
    double four = rate(dev, 256u << 10, 1u << 20, 128u << 20, &g);
    assert_int_equal(g, 4);
    printf("# 256 KiB chunks: %.2f GB/s a copy each, %.2f GB/s four per copy\n", one, four);
    assert_true(four > 1.3 * one);
    /* A bound at or under the chunk leaves a copy per chunk; the group is capped at 16. */
    rate(dev, 1u << 20, 1u << 20, 16u << 20, &g);
    assert_int_equal(g, 1);
    rate(dev, 1u << 20, (1u << 20) + 1, 16u << 20, &g);
    assert_int_equal(g, 1);
    rate(dev, 64u << 10, 1u << 30, 8u << 20, &g);
    assert_int_equal(g, 16);
    ferry_runtime_destroy(rt);
}

/* The option (and its environment variable) sets the group when the config leaves it 0. */
static void test_option(void **state)
{
    (void)state;
    const char *const kv[] = {"coalesce_bytes", "2M", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    unsigned g = 0;
    rate(dev, 512u << 10, 0, 8u << 20, &g);
    assert_int_equal(g, 4);
    rate(dev, 512u << 10, SIZE_MAX, 8u << 20, &g); /* the config's "none" wins */
    assert_int_equal(g, 1);
    ferry_runtime_destroy(rt);
    const char *const bad[] = {"coalesce_bytes", "2X", NULL};
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    assert_int_not_equal(ferry_options_set(o, bad[0], bad[1]), 0);
    assert_non_null(strstr(ferry_last_error(), "coalesce_bytes"));
    ferry_options_destroy(o);
}

static atomic_int coalesce_warnings;

static void count_warnings(ferry_log_level_t level, const char *subsystem, const char *line,
                           void *arg)
{
    (void)subsystem, (void)arg;
    if (level == FERRY_LOG_WARN && strstr(line, "coalesce_bytes") != NULL)
        atomic_fetch_add(&coalesce_warnings, 1);
}

/* The default (8M) merges what it can without a word: a group of eight 1 MiB chunks (the
 * batches here hold 4, so their copies move 4), two of 4 MiB, 8 MiB and more alone. A value someone
 * chose is told when it merges nothing or more than 16 chunks; 0 is a copy per chunk. */
static void test_default(void **state)
{
    (void)state;
    ferry_set_log_handler(count_warnings, NULL);
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    unsigned g = 0;
    rate(dev, 1u << 20, 0, 16u << 20, &g);
    assert_int_equal(g, 8);
    rate(dev, 4u << 20, 0, 32u << 20, &g);
    assert_int_equal(g, 2);
    rate(dev, 8u << 20, 0, 32u << 20, &g);
    assert_int_equal(g, 1);
    rate(dev, 256u << 10, 0, 8u << 20, &g); /* 32 chunks' worth: capped, quietly */
    assert_int_equal(g, 16);
    assert_int_equal(atomic_load(&coalesce_warnings), 0);
    ferry_runtime_destroy(rt);

    const char *const same[] = {"coalesce_bytes", "8M", NULL};
    rt = test_sim_runtime_with(same);
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    rate(dev, 8u << 20, 0, 32u << 20, &g); /* chosen, and it merges nothing: said */
    assert_int_equal(g, 1);
    assert_int_equal(atomic_load(&coalesce_warnings), 1);
    rate(dev, 256u << 10, 0, 8u << 20, &g); /* chosen, more than 16 chunks: said */
    assert_int_equal(atomic_load(&coalesce_warnings), 2);
    ferry_runtime_destroy(rt);

    const char *const off[] = {"coalesce_bytes", "0", NULL};
    rt = test_sim_runtime_with(off);
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    rate(dev, 1u << 20, 0, 16u << 20, &g);
    assert_int_equal(g, 1);
    assert_int_equal(atomic_load(&coalesce_warnings), 2);
    ferry_runtime_destroy(rt);
    ferry_set_log_handler(NULL, NULL);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_every_batch_shape),
          cmocka_unit_test(test_small_chunks_gain), cmocka_unit_test(test_option),
          cmocka_unit_test(test_default))
