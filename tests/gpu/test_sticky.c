/* Real sticky faults on a GPU, each in a child process (a sticky error ends the GPU path of its
 * process for good): an illegal address (700) and __trap() (719) planted in the first chunk of
 * batch 3 of a stream of 16 batches through `scale`. Every batch must still complete exactly
 * once, bit-exact, the faulting chunk and everything after it through the CPU fallback, with
 * failure records written and gpu_lost reported. Skips (exit 77) without a GPU. */
#include "backend/cuda/ferry_k_fault.h"
#include "faultchild.h"

typedef struct faulty {
    const ferry_stage_t *inner; /* the scale workload's stage */
    int kind;
    uint64_t batch;
} faulty_t;

/* The stage's GPU function: scale, except the first chunk of the chosen batch faults. */
static int faulty_gpu(const ferry_kernel_args_t *a, void *stream, void *user)
{
    faulty_t *f = user;
    if (a->batch_id == f->batch && a->chunk == 0) {
        int e = ferry_k_fault_launch(f->kind, stream);
        return e == 0 ? 0 : FERRY_EBACKEND;
    }
    return f->inner->gpu(a, stream, f->inner->user);
}

static int faulty_cpu(const ferry_kernel_args_t *a, void *user)
{
    faulty_t *f = user;
    return f->inner->cpu(a, f->inner->user);
}

/* The child: prints one summary line, exits 0 when every check held. */
static int child(int kind, const char *log)
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
    faulty_t f = {.inner = ferry_workload_stage(wl), .kind = kind, .batch = 3};
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "faulty-scale";
    st.gpu = faulty_gpu;
    st.cpu = faulty_cpu;
    st.user = &f;
    const size_t per = 8u << 20, total = 16 * per;
    unsigned char *in = malloc(total), *out = malloc(total), *ref = malloc(total);
    if (in == NULL || out == NULL || ref == NULL)
        return 13;
    uint64_t seed = 31 + (uint64_t)kind;
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
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&pc, &p) != 0)
        return 15;
    static faultchild_done_t dn;
    for (int b = 0; b < 16; b++) {
        ferry_batch_t bt = FERRY_BATCH_INIT;
        bt.in = in + (size_t)b * per;
        bt.out = out + (size_t)b * per;
        bt.bytes = per;
        if (ferry_pipeline_submit(p, &bt, faultchild_on_done, &dn, NULL) != 0)
            return 16;
    }
    if (ferry_pipeline_drain(p) != 0)
        return 17;
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(p, &s);
    ferry_pipeline_close(p);
    int once = 1;
    for (int b = 0; b < 16; b++)
        once &= atomic_load(&dn.calls[b]) == 1;
    long diff = cudatest_first_diff(out, ref, total);
    printf("# %s: %d batches on the GPU, %d with the CPU, %d failed; gpu_lost %d; %llu failure "
           "records, %llu chunks on the CPU; exactly once %d; output %s\n",
           kind == FERRY_K_FAULT_ILLEGAL_ADDRESS ? "illegal address" : "__trap()",
           atomic_load(&dn.gpu), atomic_load(&dn.cpu), atomic_load(&dn.failed), s.gpu_lost,
           (unsigned long long)s.failure_records, (unsigned long long)s.chunks_cpu, once,
           diff < 0 ? "bit-exact" : "DIFFERS");
    fflush(stdout);
    /* The context is gone: unregistering and tearing down may fail; the process ends anyway. */
    bool good = once && diff < 0 && s.gpu_lost && atomic_load(&dn.failed) == 0 &&
                atomic_load(&dn.cpu) >= 1 && atomic_load(&dn.gpu) + atomic_load(&dn.cpu) == 16 &&
                s.failure_records >= 1;
    return good ? 0 : 1;
}

static void test_illegal_address(void **state)
{
    (void)state;
    faultchild_run("illegal", "ESTICKY");
}

static void test_trap(void **state)
{
    (void)state;
    faultchild_run("trap", "ESTICKY");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child(strcmp(argv[2], "trap") == 0 ? FERRY_K_FAULT_TRAP
                                                  : FERRY_K_FAULT_ILLEGAL_ADDRESS,
                     argv[3]);
    cudatest_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_illegal_address),
        cmocka_unit_test(test_trap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
