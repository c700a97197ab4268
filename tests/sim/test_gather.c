/* Gathering small batches into slabs (option gather_bytes), through the public API: many threads
 * submit batches of random sizes (some too large to gather) with per-batch parameters; every
 * callback runs exactly once with its batch's id, buffers and the right output, on the simulated
 * GPU, after kernel faults (the CPU fallback) and after the GPU is lost; a lone batch arrives
 * without a drain (the flush bound); callbacks that submit, nonblocking mode, a close from a
 * callback, drain and destroy with slabs half full; refused configurations name the option. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

/* out[i] = in[i] ^ key, the key the batch's user pointer points to (0 when NULL). Checks that a
 * call covers one batch: its bytes start where its batch_id's table says. */
static atomic_int bad_args;

static int cpu_xor(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    if (a->items != NULL || a->nitems != 0 || a->offset != 0)
        atomic_fetch_add(&bad_args, 1);
    unsigned char k = a->batch_user ? *(const unsigned char *)a->batch_user : 0;
    const unsigned char *in = a->in;
    unsigned char *out = a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = in[i] ^ k;
    return 0;
}

enum { MAXB = 4096 };

typedef struct run {
    ferry_pipeline_t *p;
    unsigned char *in, *out;
    size_t *off, *len;
    unsigned char *key;
    uint64_t *id;
    atomic_int *calls, *refused;
    atomic_int failed, cpu, resubmits;
    _Atomic unsigned next;
    unsigned n;
    bool resubmit; /* the first callback of each tenth batch submits one more batch */
} run_t;

/* @rn's per-batch arrays for its n batches (zeroed), and their release. */
static void run_arrays(run_t *rn)
{
    rn->off = calloc(rn->n, sizeof(size_t));
    rn->len = calloc(rn->n, sizeof(size_t));
    rn->key = calloc(rn->n, 1);
    rn->id = calloc(rn->n, sizeof(uint64_t));
    rn->calls = calloc(rn->n, sizeof(atomic_int));
    rn->refused = calloc(rn->n, sizeof(atomic_int));
    assert_true(rn->off && rn->len && rn->key && rn->id && rn->calls && rn->refused);
}

static void run_free(run_t *rn)
{
    free(rn->off);
    free(rn->len);
    free(rn->key);
    free(rn->id);
    free(rn->calls);
    free(rn->refused);
}

static void on_done(const ferry_batch_result_t *r, void *arg);

static void submit_one(run_t *rn, unsigned i, bool from_cb)
{
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = rn->in + rn->off[i];
    b.out = rn->out + rn->off[i];
    b.bytes = rn->len[i];
    b.user = &rn->key[i];
    int rc;
    while ((rc = ferry_pipeline_submit(rn->p, &b, on_done, rn, &rn->id[i])) != 0) {
        if (!from_cb && rc != FERRY_EAGAIN)
            fail_msg("submit %u: %s", i, ferry_last_error());
        if (from_cb) { /* a full pipeline from its own callback: refused, never blocks */
            assert_true(rc == FERRY_EBUSY || rc == FERRY_EAGAIN);
            atomic_store(&rn->refused[i], 1); /* the main thread submits it again */
            return;
        }
        usleep(50);
    }
}

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    run_t *rn = arg;
    size_t at = (size_t)((const unsigned char *)r->in - rn->in);
    unsigned i = 0;
    while (i < rn->n && rn->off[i] != at)
        i++;
    assert_true(i < rn->n);
    atomic_fetch_add(&rn->calls[i], 1);
    assert_int_equal(r->bytes, rn->len[i]);
    assert_ptr_equal(r->out, rn->out + rn->off[i]);
    if (r->status != 0)
        atomic_fetch_add(&rn->failed, 1);
    if (r->where == FERRY_DONE_CPU)
        atomic_fetch_add(&rn->cpu, 1);
    if (rn->resubmit && i % 10 == 0 && i + 1 < rn->n && atomic_load(&rn->calls[i]) == 1) {
        unsigned j = atomic_fetch_add(&rn->next, 1);
        if (j < rn->n) {
            atomic_fetch_add(&rn->resubmits, 1);
            submit_one(rn, j, true);
        }
    }
}

static void *submitter(void *arg)
{
    run_t *rn = arg;
    for (unsigned i; (i = atomic_fetch_add(&rn->next, 1)) < rn->n;)
        submit_one(rn, i, false);
    return NULL;
}

/* @n batches of random sizes (a fifth of them over a quarter of the slab: not gathered) from
 * @threads threads into a pipeline gathering in slabs of @slab bytes; checks every output. */
static void stream(uint64_t seed, unsigned threads, unsigned n, size_t slab, const char *inject,
                   bool nonblocking, bool resubmit, bool pinned, bool kernel)
{
    char sb[32], nb[8];
    snprintf(sb, sizeof(sb), "%zu", slab);
    snprintf(nb, sizeof(nb), "%d", nonblocking);
    const char *const kv[] = {"gather_bytes",
                              sb,
                              "gather_us",
                              "300",
                              "inject",
                              inject,
                              "nonblocking",
                              nb,
                              "gpu_retries",
                              strstr(inject, "p=") ? "1" : "0",
                              NULL};
    char prof[256] = "";
    if (kernel) /* pinned batches of 4-16 KiB move by the copy kernel too */
        test_profile_with_piece_kernel(prof, sizeof(prof), 16 << 10);
    ferry_runtime_t *rt = kernel ? test_sim_runtime_on(prof, kv) : test_sim_runtime_with(kv);
    ferry_stage_t st = test_cpu_stage("xor", cpu_xor);
    ferry_pipeline_config_t pc = test_pipeline_config(test_device(rt), &st, 1u << 20);
    run_t rn = {.p = test_pipeline(&pc), .n = n, .resubmit = resubmit};
    run_arrays(&rn);
    size_t total = 0;
    uint64_t r = seed;
    for (unsigned i = 0; i < n; i++) {
        rn.off[i] = total;
        rn.len[i] = test_rand_range(&r, 0, 4) == 0 ? test_rand_range(&r, slab / 4 + 1, slab)
                                                   : test_rand_range(&r, 1, slab / 4);
        rn.key[i] = (unsigned char)test_rand_range(&r, 1, 255);
        total += rn.len[i];
    }
    ferry_device_t *dev = test_device(rt);
    if (pinned) { /* batches of 64 KiB and more move as pieces of their own (no host copy) */
        assert_int_equal(ferry_host_alloc(dev, total, (void **)&rn.in), 0);
        assert_int_equal(ferry_host_alloc(dev, total, (void **)&rn.out), 0);
    } else {
        rn.in = malloc(total);
        rn.out = malloc(total);
    }
    test_fill_random(rn.in, total, &r);
    memset(rn.out, 0, total);
    pthread_t th[16];
    for (unsigned t = 0; t < threads; t++)
        assert_int_equal(pthread_create(&th[t], NULL, submitter, &rn), 0);
    for (unsigned t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    for (bool again = true; again;) { /* what callbacks could not submit, submitted here */
        assert_int_equal(ferry_pipeline_drain(rn.p), 0);
        again = false;
        for (unsigned i = 0; i < n; i++)
            if (atomic_exchange(&rn.refused[i], 0)) {
                submit_one(&rn, i, false);
                again = true;
            }
    }
    unsigned gathered = 0;
    for (unsigned i = 0; i < n; i++) {
        if (atomic_load(&rn.calls[i]) != 1)
            fail_msg("seed %llu inject '%s': batch %u (%zu bytes) completed %d times",
                     (unsigned long long)seed, inject, i, rn.len[i], atomic_load(&rn.calls[i]));
        gathered += rn.len[i] <= slab / 4;
        for (size_t k = 0; k < rn.len[i]; k++)
            if (rn.out[rn.off[i] + k] != (rn.in[rn.off[i] + k] ^ rn.key[i]))
                fail_msg("seed %llu inject '%s': batch %u byte %zu of %zu wrong",
                         (unsigned long long)seed, inject, i, k, rn.len[i]);
        for (unsigned j = 0; j < i && j < 64; j++)
            assert_true(rn.id[j] != rn.id[i]);
    }
    assert_int_equal(atomic_load(&rn.failed), 0);
    assert_int_equal(atomic_load(&bad_args), 0);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(rn.p, &s), 0);
    assert_true(s.batches_gathered <= gathered && s.batches_gathered > 0);
    assert_true(s.slabs > 0 && s.slabs < s.batches_gathered);
    assert_int_equal(s.batches_submitted, n);
    assert_int_equal(s.batches_done_gpu + s.batches_done_cpu, n);
    if (inject[0])
        assert_true(s.chunks_cpu + s.chunks_retried > 0); /* the fault hit, and was handled */
    print_message(
        "seed %llu threads %u inject '%s'%s%s%s: %u batches, %llu gathered in %llu slabs, "
        "%d on the CPU, %d submitted from callbacks\n",
        (unsigned long long)seed, threads, inject, nonblocking ? " nonblocking" : "",
        pinned ? " pinned" : "", kernel ? " kernel" : "", n, (unsigned long long)s.batches_gathered,
        (unsigned long long)s.slabs, atomic_load(&rn.cpu), atomic_load(&rn.resubmits));
    assert_int_equal(ferry_pipeline_destroy(rn.p), 0);
    if (pinned) {
        ferry_host_free(dev, rn.in);
        ferry_host_free(dev, rn.out);
    } else {
        free(rn.in);
        free(rn.out);
    }
    ferry_runtime_destroy(rt);
    if (kernel)
        unlink(prof);
    run_free(&rn);
}

static unsigned scaled(unsigned n)
{
    const char *scale = getenv("FERRY_TEST_SCALE");
    return scale && strcmp(scale, "sanitizer") == 0 ? n / 4 : n;
}

static void test_threads_random_sizes(void **state)
{
    (void)state;
    uint64_t seed = test_seed(1);
    unsigned seeds = scaled(8) ? scaled(8) : 2;
    for (unsigned k = 0; k < seeds; k++)
        stream(seed + k, 1 + (unsigned)(k % 8), scaled(1600), (k % 2 ? 1024u : 64u) << 10, "",
               k % 3 == 2, k % 4 == 1, k % 2 == 1, k % 4 == 3);
}

static void test_faults(void **state)
{
    (void)state;
    const char *const specs[] = {"kernel@n=5,kernel@n=40", "sticky@n=30", "hang@n=20",
                                 "kernel@p=0.05"};
    for (unsigned k = 0; k < 4; k++)
        stream(test_seed(7) + k, 4, scaled(1200), 1024u << 10, specs[k], false, k % 2 == 1, k != 2,
               k % 2 == 1);
}

enum { PIECES_N = 64, PIECES_CUT = 24, SIDE_MAX = 64 };

/* @n batches of @item bytes side by side in @in and @out, batch i keyed 17 + i: the run's
 * arrays, and after the submits, the check that each completed once with the right output. */
typedef struct side_run {
    run_t rn;
    size_t item, off[SIDE_MAX], bytes[SIDE_MAX];
    unsigned char key[SIDE_MAX];
    uint64_t id[SIDE_MAX];
    atomic_int calls[SIDE_MAX], refused[SIDE_MAX];
} side_run_t;

static void side_begin(side_run_t *sr, ferry_pipeline_t *p, unsigned char *in, unsigned char *out,
                       unsigned n, size_t item)
{
    assert_true(n <= SIDE_MAX);
    memset(sr, 0, sizeof(*sr));
    sr->rn = (run_t){.p = p,
                     .in = in,
                     .out = out,
                     .n = n,
                     .off = sr->off,
                     .len = sr->bytes,
                     .key = sr->key,
                     .id = sr->id,
                     .calls = sr->calls,
                     .refused = sr->refused};
    sr->item = item;
    for (unsigned i = 0; i < n; i++) {
        sr->off[i] = i * item;
        sr->bytes[i] = item;
        sr->key[i] = (unsigned char)(17 + i);
    }
}

static void side_check(side_run_t *sr)
{
    run_t *rn = &sr->rn;
    assert_int_equal(ferry_pipeline_drain(rn->p), 0);
    assert_int_equal(atomic_load(&rn->failed), 0);
    for (unsigned i = 0; i < rn->n; i++) {
        assert_int_equal(atomic_load(&sr->calls[i]), 1);
        for (size_t k = 0; k < sr->item; k++)
            if (rn->out[sr->off[i] + k] != (rn->in[sr->off[i] + k] ^ sr->key[i]))
                fail_msg("batch %u byte %zu wrong", i, k);
    }
}

/* Pinned batches side by side in one registration go as one piece of the slab's copies; two
 * registrations side by side never (one copy may not span them: the simulator refuses it, and
 * the slab would fall back to the CPU). 64 batches of 64 KiB submitted in order by one thread
 * lie side by side in memory and, once two slabs are in flight, in the slabs; the first 24 in
 * one registration of each buffer, the rest in another, so that a slab holds both. */
static void test_pieces_of_two_registrations(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "1M", "gather_us", "300000", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("xor", cpu_xor);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
    const size_t item = 64u << 10, total = PIECES_N * item, cut = PIECES_CUT * item;
    unsigned char *in = aligned_alloc(4096, total), *out = aligned_alloc(4096, total);
    assert_non_null(in);
    assert_non_null(out);
    uint64_t r = test_seed(5);
    for (int round = 0; round < 2; round++) {
        /* round 0: each buffer in two registrations; round 1: in one */
        size_t at[2] = {0, cut}, len[2] = {round == 0 ? cut : total, total - cut};
        for (int h = 0; h < (round == 0 ? 2 : 1); h++) {
            assert_int_equal(ferry_host_register(dev, in + at[h], len[h]), 0);
            assert_int_equal(ferry_host_register(dev, out + at[h], len[h]), 0);
        }
        ferry_pipeline_t *p = test_pipeline(&pc);
        test_fill_random(in, total, &r);
        memset(out, 0, total);
        static side_run_t sr;
        side_begin(&sr, p, in, out, PIECES_N, item);
        for (unsigned i = 0; i < PIECES_N; i++)
            submit_one(&sr.rn, i, false);
        side_check(&sr);
        ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &s), 0);
        assert_int_equal(s.batches_gathered, PIECES_N);
        assert_true(s.slabs < PIECES_N / 4); /* gathered many to a slab */
        assert_int_equal(s.staged_bytes, 0); /* every batch moved in place */
        /* on the GPU: a copy the simulator refused would have sent the slab to the CPU */
        assert_int_equal(atomic_load(&sr.rn.cpu), 0);
        assert_int_equal(s.batches_done_gpu, PIECES_N);
        assert_int_equal(s.chunks_cpu + s.chunks_retried, 0);
        assert_int_equal(ferry_pipeline_destroy(p), 0);
        for (int h = 0; h < (round == 0 ? 2 : 1); h++) {
            assert_int_equal(ferry_host_unregister(dev, in + at[h]), 0);
            assert_int_equal(ferry_host_unregister(dev, out + at[h]), 0);
        }
    }
    free(in);
    free(out);
    ferry_runtime_destroy(rt);
}

/* Batches carved out of one pinned buffer and submitted out of its order (here in reverse) are
 * laid out in a slab in the order of their inputs, so that they move as one piece each way: on
 * the device, the batch just below another in memory sits just below it in the slab. The
 * stage records where each batch's bytes are on the device. */
enum { ORDER_N = 48 };
static const unsigned char *order_at[ORDER_N]; /* by index, from the key its user points to */
static uint64_t order_id[ORDER_N];             /* the batch id the stage was given */

static int cpu_xor_where(const ferry_kernel_args_t *a, void *user)
{
    unsigned k = *(const unsigned char *)a->batch_user - 17u;
    if (k < ORDER_N) {
        order_at[k] = a->in;
        order_id[k] = a->batch_id;
    }
    return cpu_xor(a, user);
}

static void test_pieces_in_input_order(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "1M", "gather_us", "300000", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("xor", cpu_xor_where);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
    const size_t item = 64u << 10, total = ORDER_N * item;
    unsigned char *in = NULL, *out = NULL;
    assert_int_equal(ferry_host_alloc(dev, total, (void **)&in), 0);
    assert_int_equal(ferry_host_alloc(dev, total, (void **)&out), 0);
    uint64_t r = test_seed(6);
    test_fill_random(in, total, &r);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static side_run_t sr;
    side_begin(&sr, p, in, out, ORDER_N, item);
    for (unsigned i = ORDER_N; i-- > 0;) /* the last in memory first */
        submit_one(&sr.rn, i, false);
    side_check(&sr);
    assert_int_equal(atomic_load(&sr.rn.cpu), 0);
    for (unsigned i = 0; i < ORDER_N; i++) /* the table's id: the one submit returned */
        assert_int_equal(order_id[i], sr.id[i]);
    /* Side by side in a slab as in memory: every pair of neighbours in memory that shares a
     * slab (all but one pair a slab: 15 batches of 64 KiB to a 1 MiB slab, so 3 or 4 slabs). */
    unsigned in_order = 0, reversed = 0;
    for (unsigned i = 0; i + 1 < ORDER_N; i++) {
        in_order += order_at[i] + item == order_at[i + 1];
        reversed += order_at[i + 1] + item == order_at[i];
    }
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.staged_bytes, 0);
    assert_int_equal(reversed, 0);
    assert_true(in_order >= ORDER_N - 1 - s.slabs);
    /* each slab's copies: the table and its batches' one run in, the run out */
    assert_int_equal(s.gather_pieces, 3 * s.slabs);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_host_free(dev, in);
    ferry_host_free(dev, out);
    ferry_runtime_destroy(rt);
}

/* Pinned batches of 4-16 KiB, scattered (none beside another): on a device whose small pieces
 * move by a copy kernel (piece_kernel_max) each moves as a piece of its own, no host copy; on
 * one without, each is copied into its slab (a slab's bytes one piece each way). Every byte
 * checked both ways, from 4 threads. */
static void small_pinned(bool kernel, uint64_t seed)
{
    enum { N = 600 };
    char prof[256] = "";
    const char *const kv[] = {"gather_bytes", "1M", "gather_us", "300", NULL};
    if (kernel)
        test_profile_with_piece_kernel(prof, sizeof(prof), 16 << 10);
    ferry_runtime_t *rt = kernel ? test_sim_runtime_on(prof, kv) : test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("xor", cpu_xor);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
    run_t rn = {.p = test_pipeline(&pc), .n = N};
    run_arrays(&rn);
    const size_t stride = 20u << 10, total = N * stride;
    uint64_t r = seed;
    for (unsigned i = 0; i < N; i++) {
        rn.off[i] = i * stride;
        rn.len[i] = test_rand_range(&r, 4u << 10, 16u << 10);
        rn.key[i] = (unsigned char)test_rand_range(&r, 1, 255);
    }
    assert_int_equal(ferry_host_alloc(dev, total, (void **)&rn.in), 0);
    assert_int_equal(ferry_host_alloc(dev, total, (void **)&rn.out), 0);
    test_fill_random(rn.in, total, &r);
    pthread_t th[4];
    for (unsigned t = 0; t < 4; t++)
        assert_int_equal(pthread_create(&th[t], NULL, submitter, &rn), 0);
    for (unsigned t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(ferry_pipeline_drain(rn.p), 0);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&rn.calls[i]), 1);
        for (size_t k = 0; k < rn.len[i]; k++)
            if (rn.out[rn.off[i] + k] != (rn.in[rn.off[i] + k] ^ rn.key[i]))
                fail_msg("kernel %d: batch %u byte %zu of %zu wrong", kernel, i, k, rn.len[i]);
    }
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(rn.p, &s), 0);
    assert_int_equal(s.batches_gathered, N);
    assert_int_equal(atomic_load(&rn.failed), 0);
    assert_int_equal(s.batches_done_gpu, N);
    if (kernel) /* the table in, and each batch a piece each way */
        assert_int_equal(s.gather_pieces, s.slabs + 2 * N);
    else
        assert_int_equal(s.gather_pieces, 2 * s.slabs);
    assert_int_equal(ferry_pipeline_destroy(rn.p), 0);
    ferry_host_free(dev, rn.in);
    ferry_host_free(dev, rn.out);
    ferry_runtime_destroy(rt);
    if (kernel)
        unlink(prof);
    run_free(&rn);
}

static void test_small_pinned_pieces(void **state)
{
    (void)state;
    small_pinned(true, test_seed(11));
    small_pinned(false, test_seed(11));
}

/* One batch, no drain: the flusher sends its slab after gather_us. */
static atomic_int lone_done;
static void on_lone(const ferry_batch_result_t *r, void *arg)
{
    (void)arg;
    assert_int_equal(r->status, 0);
    atomic_fetch_add(&lone_done, 1);
}

static void test_flush_bound_and_lifetimes(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "1M", "gather_us", "2000", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(test_device(rt), &st, 1u << 20);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static unsigned char in[4096], out[4096];
    memset(in, 7, sizeof(in));
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = 100;
    assert_int_equal(ferry_pipeline_submit(p, &b, on_lone, NULL, NULL), 0);
    uint64_t t0 = test_now_ns();
    while (atomic_load(&lone_done) == 0 && test_now_ns() - t0 < 5000000000ull)
        usleep(100);
    assert_int_equal(atomic_load(&lone_done), 1);
    assert_int_equal(out[99], 7);
    /* A half-full slab at destroy: its batches complete first. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(ferry_pipeline_submit(p, &b, on_lone, NULL, NULL), 0);
    /* Counted as submitted once the call returns, their slab sealed or still open. */
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.batches_submitted, 6);
    assert_true(s.batches_done_gpu + s.batches_done_cpu + s.batches_failed >= 1);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(atomic_load(&lone_done), 6);
    /* Close, then submit: refused, gathered or not. */
    p = test_pipeline(&pc);
    assert_int_equal(ferry_pipeline_submit(p, &b, on_lone, NULL, NULL), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&lone_done), 7);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(ferry_pipeline_submit(p, &b, on_lone, NULL, NULL), FERRY_ECLOSED);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_runtime_destroy(rt);
}

/* The flusher sleeps until an open slab is due: two slabs in flight (the eager bound) behind a
 * stage that takes 400 ms, a third slab open with gather_us 300 ms; over 200 ms of that wait the
 * flusher thread ("ferry-gather") takes almost no CPU. (On a condition of the wrong clock its
 * deadline was always past, and it spun on the gather lock the whole time.) */
static int slow_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    usleep(400000);
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

/* CPU ticks (utime + stime) of this process's threads named @name. */
static long thread_ticks(const char *name)
{
    long sum = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[300], comm[64] = "", stat[1024];
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof(comm), f) == NULL)
            comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
        if (strcmp(comm, name) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        size_t n = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *c = strrchr(stat, ')'); /* then: state, fields 4.. ; utime, stime: 14, 15 */
        long ut = 0, st = 0;
        if (c != NULL &&
            sscanf(c + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) == 2)
            sum += ut + st;
    }
    if (d != NULL)
        closedir(d);
    return sum;
}

static void test_flusher_sleeps(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "64K", "gather_us", "300000", "depth", "4", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_stage_t st = test_cpu_stage("slow", slow_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(test_device(rt), &st, 64u << 10);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static unsigned char in[3][4096], out[3][4096];
    for (int i = 0; i < 3; i++) {
        memset(in[i], i + 1, sizeof(in[i]));
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in[i];
        b.out = out[i];
        b.bytes = sizeof(in[i]);
        assert_int_equal(ferry_pipeline_submit(p, &b, on_lone, NULL, NULL), 0);
        usleep(20000); /* the first two go at once, each its own slab; the third waits */
    }
    long t0 = thread_ticks("ferry-gather");
    usleep(200000);
    long used = thread_ticks("ferry-gather") - t0;
    long hz = sysconf(_SC_CLK_TCK);
    print_message("# the flusher used %ld of %ld ticks in 200 ms with a slab open\n", used, hz / 5);
    assert_true(used <= hz / 50); /* at most 10% of the wait */
    assert_int_equal(ferry_pipeline_drain(p), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(out[i][4095], i + 1);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_runtime_destroy(rt);
}

/* A close while every slab is busy and eight threads wait for room: each waiting submit returns
 * FERRY_ECLOSED (a freed slab wakes two waiters only, but all of them once closing), and every
 * batch accepted completes once. */
static int slowish_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    usleep(20000);
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

typedef struct waiter_run {
    ferry_pipeline_t *p;
    atomic_int accepted, called, last_rc[8];
    unsigned char in[8][4096], out[8][4096];
} waiter_run_t;

static void on_counted(const ferry_batch_result_t *r, void *arg)
{
    assert_int_equal(r->status, 0);
    atomic_fetch_add(&((waiter_run_t *)arg)->called, 1);
}

static waiter_run_t *waiters_run;
static void *waiting_submitter(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    waiter_run_t *w = waiters_run;
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = w->in[t];
    b.out = w->out[t];
    b.bytes = sizeof(w->in[t]);
    int rc;
    while ((rc = ferry_pipeline_submit(w->p, &b, on_counted, w, NULL)) == 0)
        atomic_fetch_add(&w->accepted, 1);
    atomic_store(&w->last_rc[t], rc);
    return NULL;
}

static void test_close_with_waiting_submitters(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "64K", "gather_slabs", "3", "gather_us",
                              "1000",         NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_stage_t st = test_cpu_stage("slowish", slowish_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(test_device(rt), &st, 64u << 10);
    static waiter_run_t w;
    memset(&w, 0, sizeof(w));
    waiters_run = &w;
    w.p = test_pipeline(&pc);
    pthread_t th[8];
    for (uintptr_t t = 0; t < 8; t++)
        assert_int_equal(pthread_create(&th[t], NULL, waiting_submitter, (void *)t), 0);
    usleep(150000); /* the slabs fill at once; each item then takes 20 ms */
    int rc = ferry_pipeline_close(w.p);
    assert_true(rc == 0 || rc == FERRY_EBUSY);
    for (int t = 0; t < 8; t++) {
        assert_int_equal(pthread_join(th[t], NULL), 0);
        assert_int_equal(atomic_load(&w.last_rc[t]), FERRY_ECLOSED);
    }
    assert_int_equal(ferry_pipeline_drain(w.p), 0);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(w.p, &s), 0);
    assert_true(s.gather_waits >= 1);               /* the eight slept for room */
    assert_int_equal(s.gather_pieces, 2 * s.slabs); /* copied batches: a slab's bytes each way */
    assert_int_equal(ferry_pipeline_destroy(w.p), 0);
    print_message("# %d batches accepted before the close, %llu waits for room\n",
                  atomic_load(&w.accepted), (unsigned long long)s.gather_waits);
    assert_true(atomic_load(&w.accepted) > 0);
    assert_int_equal(atomic_load(&w.called), atomic_load(&w.accepted));
    ferry_runtime_destroy(rt);
}

/* A callback that closes its own pipeline while a slab is being filled. */
typedef struct closer {
    ferry_pipeline_t *p;
    atomic_int done, close_rc;
} closer_t;

static void on_close(const ferry_batch_result_t *r, void *arg)
{
    closer_t *c = arg;
    (void)r;
    if (atomic_fetch_add(&c->done, 1) == 3)
        atomic_store(&c->close_rc, ferry_pipeline_close(c->p));
}

static void test_close_from_callback(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "64K", "gather_us", "100", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(test_device(rt), &st, 1u << 20);
    closer_t c = {.p = test_pipeline(&pc), .close_rc = 1};
    static unsigned char in[8192], out[8192];
    unsigned accepted = 0;
    for (int i = 0; i < 400; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in;
        b.out = out;
        b.bytes = 1 + (size_t)i % 8000;
        int rc = ferry_pipeline_submit(c.p, &b, on_close, &c, NULL);
        if (rc == FERRY_ECLOSED)
            break;
        assert_int_equal(rc, 0);
        accepted++;
    }
    assert_int_equal(ferry_pipeline_destroy(c.p), 0);
    assert_int_equal(atomic_load(&c.done), (int)accepted);
    assert_int_equal(atomic_load(&c.close_rc), FERRY_EBUSY);
    ferry_runtime_destroy(rt);
}

static void test_refusals(void **state)
{
    (void)state;
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    const char *const big[] = {"gather_bytes", "2M", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(big);
    ferry_pipeline_config_t pc = test_pipeline_config(test_device(rt), &st, 1u << 20);
    ferry_pipeline_t *p = NULL;
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "gather_bytes"));
    assert_non_null(strstr(ferry_last_error(), "chunk_bytes"));
    pc.gather_bytes = SIZE_MAX; /* off, whatever the option says */
    assert_int_equal(ferry_pipeline_create(&pc, &p), 0);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    test_submit_generated(p, 1u << 20, 4096, 4);
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.batches_gathered, 0);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_runtime_destroy(rt);

    const char *const kv[] = {"gather_bytes", "1M", NULL};
    char prof[512];
    test_profile_with_devices(prof, sizeof(prof), 2);
    rt = test_sim_runtime_on(prof, kv);
    ferry_device_t *devs[2];
    assert_int_equal(ferry_device_get(rt, 0, &devs[0]), 0);
    assert_int_equal(ferry_device_get(rt, 1, &devs[1]), 0);
    pc = test_pipeline_config(NULL, &st, 1u << 20);
    pc.devices = devs;
    pc.ndevices = 2;
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "gather_bytes"));
    ferry_runtime_destroy(rt);
    unlink(prof);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_random_sizes),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_flush_bound_and_lifetimes),
        cmocka_unit_test(test_flusher_sleeps),
        cmocka_unit_test(test_close_from_callback),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pieces_of_two_registrations),
        cmocka_unit_test(test_pieces_in_input_order),
        cmocka_unit_test(test_small_pinned_pieces),
        cmocka_unit_test(test_close_with_waiting_submitters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
