/* Per-batch parameters: ferry_batch_t.user reaches the stage as ferry_kernel_args_t.batch_user
 * for every chunk of that batch, on the simulated GPU, on the CPU fallback (after a kernel
 * fault) and on the CPU path after the GPU is lost; a batch built against the older, shorter
 * ferry_batch_t (its size says so) hands NULL. */
#include <stddef.h>
#include <stdatomic.h>
#include <string.h>

#include "testlib.h"

static atomic_int wrong;

/* out = in x the batch's factor (a float behind batch_user; 1 when NULL). */
static int cpu_scale(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    if (a->size <= offsetof(ferry_kernel_args_t, batch_user))
        atomic_fetch_add(&wrong, 1);
    float f = a->batch_user != NULL ? *(const float *)a->batch_user : 1.0f;
    const float *in = a->in;
    float *out = a->out;
    for (size_t i = 0; i < a->bytes / 4; i++)
        out[i] = in[i] * f;
    return 0;
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    assert_int_equal(r->status, 0);
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void run(const char *inject)
{
    const char *const kv[] = {"inject", inject, "gpu_retries", "0", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("scale-by-batch", cpu_scale);
    st.granularity = 4;
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 64u << 10);
    ferry_pipeline_t *p = test_pipeline(&pc);
    enum { NB = 6, N = (256u << 10) / 4 };
    static float in[N], out[NB][N];
    for (size_t i = 0; i < N; i++)
        in[i] = (float)(i % 100);
    float factors[NB] = {2, 3, 4, 5, 6, 7};
    atomic_int ndone = 0;
    for (int k = 0; k < NB; k++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in;
        b.out = out[k];
        b.bytes = sizeof(in);
        b.user = &factors[k];
        if (k == NB - 1) /* as built against the header before batch user pointers */
            b.size = offsetof(ferry_batch_t, user);
        assert_int_equal(ferry_pipeline_submit(p, &b, done, &ndone, NULL), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&ndone), NB);
    for (int k = 0; k < NB; k++) {
        float f = k == NB - 1 ? 1.0f : factors[k];
        for (size_t i = 0; i < N; i++)
            if (out[k][i] != in[i] * f)
                fail_msg("%s: batch %d element %zu: %g, want %g", inject[0] ? inject : "no fault",
                         k, i, (double)out[k][i], (double)(in[i] * f));
    }
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    print_message("%-14s cpu chunks %llu\n", inject[0] ? inject : "no fault",
                  (unsigned long long)s.chunks_cpu);
    if (inject[0])
        assert_true(s.chunks_cpu > 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_runtime_destroy(rt);
    assert_int_equal(atomic_load(&wrong), 0);
}

static void test_batch_user_on_every_path(void **state)
{
    (void)state;
    run("");             /* the simulated GPU */
    run("kernel@p=0.5"); /* failed kernels redone on the CPU fallback */
    run("sticky@n=3");   /* the GPU lost: chunks go straight to the CPU */
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_batch_user_on_every_path))
