/* Gathering small batches (option gather_bytes) on a real GPU: 8 threads submit batches of random
 * sizes (1 byte to 256 KiB, some in malloc'd memory at odd addresses, some in ferry_host_alloc
 * memory, which moves as pieces of its own from 64 KiB) of the scale workload; every batch
 * completes once, on the GPU, bit-identical to the CPU reference, through the stage's gpu_items
 * (one launch per slab) and through the one-item launcher (gpu_items NULL: a launch per item).
 * Then 4-16 KiB batches carved out of one pinned buffer, apart and at odd addresses, from 8
 * threads: where the device moves small pieces by a copy kernel (piece_kernel_max) each is a
 * piece of its own.
 * Skips (exit 77) without a GPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cudatest.h"

enum { N = 2000, THREADS = 8 };

typedef struct run {
    ferry_pipeline_t *p;
    unsigned char *in[N], *out[N], *ref[N];
    size_t len[N];
    bool pinned[N];
    atomic_int calls[N];
    atomic_int bad;
    _Atomic unsigned next;
    unsigned n; /* batches in use (N at most) */
} run_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    run_t *rn = arg;
    for (unsigned i = 0; i < N; i++)
        if (rn->out[i] == r->out) {
            atomic_fetch_add(&rn->calls[i], 1);
            if (r->status != 0 || r->where != FERRY_DONE_GPU || r->bytes != rn->len[i])
                atomic_fetch_add(&rn->bad, 1);
            return;
        }
    atomic_fetch_add(&rn->bad, 1);
}

static void *submitter(void *arg)
{
    run_t *rn = arg;
    for (unsigned i; (i = atomic_fetch_add(&rn->next, 1)) < rn->n;) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = rn->in[i];
        b.out = rn->out[i];
        b.bytes = rn->len[i];
        if (ferry_pipeline_submit(rn->p, &b, on_done, rn, NULL) != 0)
            fail_msg("submit %u: %s", i, ferry_last_error());
    }
    return NULL;
}

/* Submit @rn's batches from THREADS threads, drain, and check each: completed once, its
 * output the reference's (@what names the case in a failure). */
static void submit_and_check(run_t *rn, const char *what)
{
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, submitter, rn), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(ferry_pipeline_drain(rn->p), 0);
    for (unsigned i = 0; i < rn->n; i++) {
        if (atomic_load(&rn->calls[i]) != 1)
            fail_msg("%s: batch %u completed %d times", what, i, atomic_load(&rn->calls[i]));
        long at = cudatest_first_diff(rn->out[i], rn->ref[i], rn->len[i]);
        if (at >= 0)
            fail_msg("%s: batch %u (%zu bytes at %p) differs at byte %ld", what, i, rn->len[i],
                     (void *)rn->in[i], at);
    }
    assert_int_equal(atomic_load(&rn->bad), 0);
}

/* A run of @n batches of the scale workload (*@w, destroyed by the caller) into a pipeline that
 * gathers them into 2 MiB slabs, through its gpu_items or (@items_launcher false) a launch per
 * item. */
static run_t *start(ferry_workload_t **w, bool items_launcher, unsigned n)
{
    assert_int_equal(ferry_workload_create("scale", NULL, w), 0);
    ferry_stage_t st = *ferry_workload_stage(*w);
    if (!items_launcher)
        st.gpu_items = NULL;
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, &st, 8u << 20);
    cfg.gather_bytes = 2u << 20;
    cfg.gather_us = 200;
    run_t *rn = calloc(1, sizeof(*rn));
    assert_non_null(rn);
    rn->n = n;
    if (ferry_pipeline_create(&cfg, &rn->p) != 0)
        fail_msg("pipeline_create: %s", ferry_last_error());
    return rn;
}

static void run(bool items_launcher)
{
    ferry_workload_t *w = NULL;
    run_t *rn = start(&w, items_launcher, N);
    uint64_t rs = test_seed(0x6A7);
    for (unsigned i = 0; i < N; i++) {
        /* whole floats mostly: with gpu_items a batch of part of an element is not gathered */
        size_t n = (size_t)test_rand_range(&rs, 1, 256u << 10);
        if (i % 4 != 0 && n >= 4)
            n &= ~(size_t)3;
        rn->len[i] = n;
        rn->pinned[i] = i % 3 == 0;
        if (rn->pinned[i]) {
            assert_int_equal(ferry_host_alloc(dev, n, (void **)&rn->in[i]), 0);
            assert_int_equal(ferry_host_alloc(dev, n, (void **)&rn->out[i]), 0);
        } else { /* odd addresses: staged into the slab like any other */
            rn->in[i] = (unsigned char *)malloc(n + 1) + 1;
            rn->out[i] = (unsigned char *)malloc(n + 3) + 3;
        }
        rn->ref[i] = malloc(n);
        cudatest_fill_floats(rn->in[i], n, &rs);
        memset(rn->out[i], 0xA5, n);
        assert_int_equal(ferry_workload_reference(w, rn->in[i], rn->ref[i], n), 0);
    }
    submit_and_check(rn, items_launcher ? "gpu_items" : "per item");
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(rn->p, &s), 0);
    assert_true(s.batches_gathered > N / 2 && s.slabs < s.batches_gathered);
    print_message("%s: %d batches, %llu gathered in %llu slabs, all on the GPU, bit-exact\n",
                  items_launcher ? "gpu_items (a launch per slab)" : "a launch per item", N,
                  (unsigned long long)s.batches_gathered, (unsigned long long)s.slabs);
    assert_int_equal(ferry_pipeline_destroy(rn->p), 0);
    for (unsigned i = 0; i < N; i++) {
        if (rn->pinned[i]) {
            ferry_host_free(dev, rn->in[i]);
            ferry_host_free(dev, rn->out[i]);
        } else {
            free(rn->in[i] - 1);
            free(rn->out[i] - 3);
        }
        free(rn->ref[i]);
    }
    free(rn);
    ferry_workload_destroy(w);
}

static void test_gathered_items_launcher(void **state)
{
    (void)state;
    run(true);
}

static void test_gathered_one_item_launcher(void **state)
{
    (void)state;
    run(false);
}

/* Small pinned batches, none beside another, at addresses 4-byte aligned or odd by a byte: the
 * copy kernel's word and byte paths, each way. */
static void test_small_pinned_pieces(void **state)
{
    (void)state;
    enum { M = 1500 };
    const size_t stride = 20u << 10;
    ferry_device_props_t pr = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(ferry_device_props(dev, &pr), 0);
    ferry_workload_t *w = NULL;
    run_t *rn = start(&w, false, M); /* a launch per item: batches at any size */
    unsigned char *in = NULL, *out = NULL;
    assert_int_equal(ferry_host_alloc(dev, M * stride, (void **)&in), 0);
    assert_int_equal(ferry_host_alloc(dev, M * stride, (void **)&out), 0);
    uint64_t rs = test_seed(0x5A1);
    for (unsigned i = 0; i < M; i++) {
        size_t n = (size_t)test_rand_range(&rs, 4u << 10, 16u << 10) & ~(size_t)3;
        size_t skew = i % 2 ? 1 : 4 * (i % 4);
        rn->len[i] = n;
        rn->in[i] = in + i * stride + skew;
        rn->out[i] = out + i * stride + (i % 3 ? skew : 3);
        rn->ref[i] = malloc(n);
        cudatest_fill_floats(rn->in[i], n, &rs);
        memset(rn->out[i], 0xA5, n);
        assert_int_equal(ferry_workload_reference(w, rn->in[i], rn->ref[i], n), 0);
    }
    submit_and_check(rn, "small pinned");
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(rn->p, &s), 0);
    assert_int_equal(s.batches_gathered, M);
    if (pr.piece_kernel_max >= (16u << 10)) /* the table in, each batch a piece each way */
        assert_int_equal(s.gather_pieces, s.slabs + 2 * M);
    else
        assert_int_equal(s.gather_pieces, 2 * s.slabs);
    print_message("%d small pinned batches in %llu slabs, %llu pieces (piece_kernel_max %llu), "
                  "bit-exact\n",
                  M, (unsigned long long)s.slabs, (unsigned long long)s.gather_pieces,
                  (unsigned long long)pr.piece_kernel_max);
    assert_int_equal(ferry_pipeline_destroy(rn->p), 0);
    ferry_host_free(dev, in);
    ferry_host_free(dev, out);
    for (unsigned i = 0; i < M; i++)
        free(rn->ref[i]);
    free(rn);
    ferry_workload_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gathered_items_launcher),
        cmocka_unit_test(test_gathered_one_item_launcher),
        cmocka_unit_test(test_small_pinned_pieces),
    };
    return cmocka_run_group_tests(tests, cudatest_setup, cudatest_teardown);
}
