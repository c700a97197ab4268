/* The pipeline stats say what happened: an engine class's busy time is the union of its ops'
 * intervals (two compute streams on a compute-bound stage keep it within the elapsed time), a
 * drained pipeline has no slot in use even when the GPU hung, and every chunk a stage sees
 * carries a sequence number >= 1, also the chunks sent straight to the CPU after the GPU path
 * ended. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define MAX_SEQ 4096

typedef struct seen {
    atomic_uint zero_seq; /* chunks the stage saw with seq 0 */
    atomic_uint calls;    /* chunks the stage ran */
    atomic_int done;      /* batches completed */
} seen_t;

static int copy_cpu(const ferry_kernel_args_t *a, void *user)
{
    seen_t *s = user;
    if (a->seq == 0)
        atomic_fetch_add(&s->zero_seq, 1);
    atomic_fetch_add(&s->calls, 1);
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    (void)r;
    atomic_fetch_add(&((seen_t *)arg)->done, 1);
}

typedef struct run {
    ferry_pipeline_stats_t st;
    seen_t seen;
} run_t;

/* @nb batches of @per bytes through a copying stage costing @ns_per_byte, with options @kv. */
static void run(const char *const *kv, double ns_per_byte, unsigned ncomp, size_t chunk,
                unsigned nb, size_t per, run_t *r)
{
    memset(r, 0, sizeof(*r));
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("copy-seq", copy_cpu);
    st.user = &r->seen;
    st.ns_per_byte = ns_per_byte;
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, chunk);
    pc.compute_streams = ncomp;
    pc.coalesce_bytes = SIZE_MAX;
    ferry_pipeline_t *p = test_pipeline(&pc);
    unsigned char *in = malloc(per * nb), *out = malloc(per * nb);
    assert_true(in && out);
    uint64_t rs = 7;
    test_fill_random(in, per * nb, &rs);
    test_submit_split(p, in, out, (size_t)nb * per, per, on_done, &r->seen);
    r->st.size = sizeof(r->st);
    assert_int_equal(ferry_pipeline_stats(p, &r->st), 0);
    assert_int_equal(atomic_load(&r->seen.done), (int)nb);
    assert_memory_equal(in, out, per * nb);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    free(in);
    free(out);
}

static void test_busy_is_a_union(void **state)
{
    (void)state;
    /* Compute-bound: 1 ns a byte of kernel against ~0.02 of copy. Two compute streams run
     * their kernels at once, sharing the SMs: each takes about twice as long, and their sum
     * is about twice the elapsed time. */
    static const char *const modes[] = {"all", "sample"};
    for (int m = 0; m < 2; m++) {
        const char *kv[] = {"op_timing", modes[m], NULL};
        for (unsigned ncomp = 1; ncomp <= 2; ncomp++) {
            run_t r;
            run(kv, 1.0, ncomp, 1u << 20, 8, 8u << 20, &r);
            printf("# op_timing %s, %u compute stream(s): elapsed %llu ns, busy compute %llu, "
                   "h2d %llu, d2h %llu, overlap %.2f\n",
                   modes[m], ncomp, (unsigned long long)r.st.elapsed_ns,
                   (unsigned long long)r.st.busy_compute_ns, (unsigned long long)r.st.busy_h2d_ns,
                   (unsigned long long)r.st.busy_d2h_ns, r.st.overlap);
            assert_true(r.st.elapsed_ns > 0);
            assert_true(r.st.busy_compute_ns <= r.st.elapsed_ns);
            assert_true(r.st.busy_h2d_ns <= r.st.elapsed_ns);
            assert_true(r.st.busy_d2h_ns <= r.st.elapsed_ns);
            /* Compute-bound: the compute engine is busy nearly all the time, and the copies
             * little of it. */
            assert_true(r.st.busy_compute_ns >= r.st.elapsed_ns * 8 / 10);
            assert_true(r.st.overlap <= 1.5);
        }
    }
}

static void test_slots_free_after_a_hang(void **state)
{
    (void)state;
    /* A kernel that ignores the abort flag: the GPU path ends and the slots of the chunks in
     * flight are abandoned. Drained, none is bound to a chunk. */
    const char *kv[] = {"inject", "hang-hard@n=3", "deadline_floor_ms", "5", NULL};
    run_t r;
    run(kv, 0, 2, 256u << 10, 6, 1u << 20, &r);
    assert_true(r.st.gpu_hung);
    assert_true(r.st.gpu_lost);
    assert_int_equal(r.st.slots_in_use, 0);
}

static void test_seq_after_the_gpu_is_lost(void **state)
{
    (void)state;
    /* The GPU path ends at the 2nd kernel: most chunks go straight to the CPU function, with
     * no slot. Every chunk, wherever it ran, carries a sequence number. */
    const char *kv[] = {"inject", "sticky@n=2", NULL};
    run_t r;
    run(kv, 0, 2, 64u << 10, 16, 1u << 20, &r);
    assert_true(r.st.gpu_lost);
    assert_true(r.st.chunks_cpu > 100);
    assert_true(atomic_load(&r.seen.calls) >= 256);
    assert_int_equal(atomic_load(&r.seen.zero_seq), 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_busy_is_a_union),
          cmocka_unit_test(test_slots_free_after_a_hang),
          cmocka_unit_test(test_seq_after_the_gpu_is_lost))
