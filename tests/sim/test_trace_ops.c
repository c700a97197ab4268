/* The trace's op records read back through ferry_pipeline_ops: three ops per chunk on streams
 * of their kind, in stage order, never overlapping on one stream, with every byte accounted
 * for; the trace_chunks option keeps the first N chunks only and the rest of the run sampled;
 * without tracing the call says so. */
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define MAX_OPS 4096

typedef struct ops {
    ferry_op_record_t op[MAX_OPS];
    size_t n;
} ops_t;

static void collect(const ferry_op_record_t *op, void *arg)
{
    ops_t *o = arg;
    assert_true(op->size >= sizeof(*op));
    if (o->n < MAX_OPS)
        o->op[o->n] = *op;
    o->n++;
}

/* The op records of @p, read back (freed by the caller). */
static ops_t *ops_of(ferry_pipeline_t *p)
{
    ops_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    assert_int_equal(ferry_pipeline_ops(p, collect, o), 0);
    return o;
}

/* @total bytes in batches of 4 chunks of @chunk; returns the drained pipeline. */
static ferry_pipeline_t *run(ferry_runtime_t *rt, size_t chunk, size_t total)
{
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t s = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &s, chunk);
    cfg.queue_depth = 64;
    cfg.coalesce_bytes = SIZE_MAX; /* a copy per chunk: three ops each (sim.coalesce: groups) */
    ferry_pipeline_t *p = test_pipeline(&cfg);
    test_submit_generated(p, total, 4 * chunk, 16);
    return p;
}

static const ferry_op_record_t *find(const ops_t *o, uint64_t batch, uint32_t chunk,
                                     ferry_op_kind_t kind)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->op[i].batch == batch && o->op[i].chunk == chunk && o->op[i].kind == kind)
            return &o->op[i];
    return NULL;
}

/* Ops on one stream run one after another. */
static void check_streams(const ops_t *o, const ferry_pipeline_stats_t *st)
{
    static const char kind_char[3] = {'h', 'c', 'd'};
    for (size_t i = 0; i < o->n; i++) {
        const ferry_op_record_t *a = &o->op[i];
        assert_true(a->stream < st->streams);
        assert_int_equal(st->stream_kind[a->stream], kind_char[a->kind]);
        assert_true(a->end_ns > a->start_ns);
        assert_true(a->end_ns <= st->elapsed_ns);
        for (size_t j = i + 1; j < o->n; j++) {
            const ferry_op_record_t *b = &o->op[j];
            if (b->stream == a->stream)
                assert_true(b->start_ns >= a->end_ns || a->start_ns >= b->end_ns);
        }
    }
}

/* A traced run: its runtime, pipeline, stats and op records. */
typedef struct traced {
    ferry_runtime_t *rt;
    ferry_pipeline_t *p;
    ferry_pipeline_stats_t st;
    ops_t *o;
} traced_t;

/* run() on a runtime with the options @kv, its stats and ops read back. */
static traced_t traced_run(const char *const *kv, size_t chunk, size_t total)
{
    traced_t t = {.rt = test_sim_runtime_with(kv), .st = FERRY_PIPELINE_STATS_INIT};
    t.p = run(t.rt, chunk, total);
    assert_int_equal(ferry_pipeline_stats(t.p, &t.st), 0);
    t.o = ops_of(t.p);
    return t;
}

/* What holds for every traced run (check_streams), then all of it freed. */
static void traced_end(traced_t *t)
{
    check_streams(t->o, &t->st);
    free(t->o);
    assert_int_equal(ferry_pipeline_close(t->p), 0);
    ferry_runtime_destroy(t->rt);
}

static void test_every_chunk(void **state)
{
    (void)state;
    const char *const kv[] = {"trace", "1", NULL};
    const size_t chunk = 1u << 20, total = 40u << 20; /* 40 chunks in 10 batches */
    traced_t t = traced_run(kv, chunk, total);
    const ops_t *o = t.o;
    assert_int_equal(o->n, 3 * 40);
    assert_int_equal(t.st.chunks_timed, 40);
    uint64_t bytes[3] = {0, 0, 0};
    for (size_t i = 0; i < o->n; i++)
        bytes[o->op[i].kind] += o->op[i].bytes;
    for (int k = 0; k < 3; k++)
        assert_int_equal(bytes[k], total);
    for (uint64_t b = 0; b < 10; b++)
        for (uint32_t c = 0; c < 4; c++) {
            const ferry_op_record_t *h = find(o, b, c, FERRY_OP_H2D),
                                    *k = find(o, b, c, FERRY_OP_COMPUTE),
                                    *d = find(o, b, c, FERRY_OP_D2H);
            assert_non_null(h);
            assert_non_null(k);
            assert_non_null(d);
            assert_true(h->end_ns <= k->start_ns);
            assert_true(k->end_ns <= d->start_ns);
        }
    traced_end(&t);
}

static void test_first_chunks_only(void **state)
{
    (void)state;
    const char *const kv[] = {"trace", "1", "trace_chunks", "6", NULL};
    traced_t t = traced_run(kv, 1u << 20, 128u << 20); /* 128 chunks */
    const ops_t *o = t.o;
    assert_int_equal(o->n, 3 * 6);
    /* the first six chunks issued: batch 0's four, batch 1's first two */
    for (uint32_t c = 0; c < 6; c++)
        assert_non_null(find(o, c / 4, c % 4, FERRY_OP_D2H));
    /* after them, one chunk in 31 is timed, as without a trace */
    assert_true(t.st.chunks_timed > 6 && t.st.chunks_timed < 6 + 128 / 31 + 2);
    traced_end(&t);
}

static void test_off_and_bad_arguments(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_pipeline_t *p = run(rt, 1u << 20, 4u << 20);
    ops_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    assert_int_equal(ferry_pipeline_ops(p, collect, o), FERRY_ESTATE);
    assert_non_null(strstr(ferry_last_error(), "tracing is off"));
    assert_int_equal(o->n, 0);
    assert_int_equal(ferry_pipeline_ops(p, NULL, o), FERRY_EINVAL);
    assert_int_equal(ferry_pipeline_ops(NULL, collect, o), FERRY_EINVAL);
    free(o);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_every_chunk), cmocka_unit_test(test_first_chunks_only),
          cmocka_unit_test(test_off_and_bad_arguments))
