/* What the GPU fault tests share (test_sticky.c, test_hang.c): each fault is planted in a child
 * process, as a sticky error or a hang ends the GPU path of its process for good; the parent
 * runs the child (testlib's child harness bounds its time) and reads its failure log. The child
 * streams 16 batches through `scale` wrapped in a stage whose GPU function plants the fault.
 * Included by tests/gpu only. */
#ifndef FERRY_TEST_FAULTCHILD_H
#define FERRY_TEST_FAULTCHILD_H

#include <stdatomic.h>
#include <unistd.h>

#include "backend/cuda/ferry_k_fault.h"
#include "cudatest.h"

/* The stage the child runs: `scale`, except that the first chunk of batch @batch runs the
 * test's @plant (which plants fault @mode) in place of scale's GPU function. */
typedef struct faultchild_stage faultchild_stage_t;
typedef int (*faultchild_plant_fn)(const ferry_kernel_args_t *a, void *stream,
                                   const faultchild_stage_t *f);
struct faultchild_stage {
    const ferry_stage_t *inner; /* the scale workload's stage */
    faultchild_plant_fn plant;
    int mode;
    uint64_t batch;
};

static inline int faultchild_gpu(const ferry_kernel_args_t *a, void *stream, void *user)
{
    const faultchild_stage_t *f = user;
    if (a->batch_id == f->batch && a->chunk == 0)
        return f->plant(a, stream, f);
    return f->inner->gpu(a, stream, f->inner->user);
}

static inline int faultchild_cpu(const ferry_kernel_args_t *a, void *user)
{
    const faultchild_stage_t *f = user;
    return f->inner->cpu(a, f->inner->user);
}

/* What the child's stream left for its checks. */
typedef struct faultchild_result {
    test_done_t dn;
    ferry_pipeline_stats_t s;
    double close_ms; /* how long closing the pipeline took */
    int once;        /* every batch completed exactly once */
    long diff;       /* first byte of the output that differs from the reference, or -1 */
} faultchild_result_t;

/* The child's stream: a runtime on cuda writing failure records to @log, 16 batches of 8 MiB of
 * floats (seeded by @seed) through stage @name (@plant planting fault @mode in batch 3) in
 * chunks of 2 MiB, input and output registered; one copy per chunk when @copy_per_chunk (one
 * chunk retried, not its group). Fills @res; returns 0, or 10-17 naming the step that failed. */
static inline int faultchild_stream(const char *log, const char *name, faultchild_plant_fn plant,
                                    int mode, uint64_t seed, bool copy_per_chunk,
                                    faultchild_result_t *res)
{
    ferry_options_t *o = NULL;
    if (ferry_options_create(&o) != 0 || ferry_options_set(o, "failure_log", log) != 0)
        return 10;
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "cuda";
    cfg.options = o;
    ferry_runtime_t *r = NULL;
    ferry_device_t *d = NULL;
    if (ferry_runtime_create(&cfg, &r) != 0 || ferry_device_get(r, 0, &d) != 0)
        return 11;
    ferry_options_destroy(o);
    ferry_workload_t *wl = NULL;
    if (ferry_workload_create("scale", NULL, &wl) != 0)
        return 12;
    static faultchild_stage_t f;
    f = (faultchild_stage_t){
        .inner = ferry_workload_stage(wl), .plant = plant, .mode = mode, .batch = 3};
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = name;
    st.gpu = faultchild_gpu;
    st.cpu = faultchild_cpu;
    st.user = &f;
    const size_t per = 8u << 20, total = 16 * per;
    unsigned char *in = malloc(total), *out = malloc(total), *ref = malloc(total);
    if (in == NULL || out == NULL || ref == NULL)
        return 13;
    cudatest_fill_floats(in, total, &seed);
    memset(out, 0, total);
    ferry_workload_reference(wl, in, ref, total);
    /* Registered input and output: the copies go straight to them, as in most real use. */
    if (ferry_host_register(d, in, total) != 0 || ferry_host_register(d, out, total) != 0)
        return 14;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = d;
    pc.stage = &st;
    pc.chunk_bytes = 2u << 20;
    if (copy_per_chunk)
        pc.coalesce_bytes = SIZE_MAX;
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&pc, &p) != 0)
        return 15;
    for (int b = 0; b < 16; b++) {
        ferry_batch_t bt = FERRY_BATCH_INIT;
        bt.in = in + (size_t)b * per;
        bt.out = out + (size_t)b * per;
        bt.bytes = per;
        if (ferry_pipeline_submit(p, &bt, test_on_done, &res->dn, NULL) != 0)
            return 16;
    }
    if (ferry_pipeline_drain(p) != 0)
        return 17;
    res->s = (ferry_pipeline_stats_t)FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(p, &res->s);
    uint64_t t0 = test_now_ns();
    ferry_pipeline_close(p); /* must not wait for a hung kernel */
    res->close_ms = (double)(test_now_ns() - t0) / 1e6;
    res->once = 1;
    for (int b = 0; b < 16; b++)
        res->once &= atomic_load(&res->dn.calls[b]) == 1;
    res->diff = cudatest_first_diff(out, ref, total);
    /* The context may be gone and the GPU still running a hung kernel: nothing is torn down;
     * the child ends right after its checks. */
    return 0;
}

/* Run this test program again as a child (`--child KIND LOG`), which plants its fault and
 * exits 0 when its own checks held; kill it after 60 s (a hang after the fault is a failure,
 * not a stuck test). Its failure log must hold a record with error @error. */
static inline void faultchild_run(const char *kind, const char *error)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ferry-fault-XXXXXX");
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    char *args[] = {"--child", (char *)kind, log, NULL};
    int status = 0;
    if (!test_child_wait(test_child_spawn(args), 60, &status)) {
        unlink(log);
        fail_msg("the child (%s) did not finish within 60 s after the fault", kind);
    }
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[4096];
    int records = 0;
    bool named = false;
    char want[64];
    snprintf(want, sizeof(want), "\"error\":\"%s\"", error);
    while (fgets(line, sizeof(line), f) != NULL) {
        records++;
        named |= strstr(line, want) != NULL;
    }
    fclose(f);
    unlink(log);
    printf("# child (%s) exited %d; %d failure records, one with %s: %d\n", kind,
           test_child_exit_code(status), records, error, named);
    assert_true(test_child_exit_code(status) == 0);
    assert_true(records >= 1 && named);
}

/* One child scenario as a cmocka test: the child kind to run and the error its log must name. */
typedef struct faultchild_case {
    const char *kind;
    const char *error;
} faultchild_case_t;

static inline void faultchild_test(void **state)
{
    const faultchild_case_t *c = *state;
    faultchild_run(c->kind, c->error);
}

/* A cmocka test named @fn (as cmocka_unit_test(fn) would be) running child @kind. */
#define FAULTCHILD_TEST(fn, kind, error)                                                           \
    {                                                                                              \
        .name = #fn, .test_func = faultchild_test, .initial_state = &(faultchild_case_t)           \
        {                                                                                          \
            kind, error                                                                            \
        }                                                                                          \
    }

#endif
