/* Real sticky faults on a GPU, each in a child process (a sticky error ends the GPU path of its
 * process for good): an illegal address (700) and __trap() (719) planted in the first chunk of
 * batch 3 of a stream of 16 batches through `scale`. Every batch must still complete exactly
 * once, bit-exact, the faulting chunk and everything after it through the CPU fallback, with
 * failure records written and gpu_lost reported. Skips (exit 77) without a GPU. */
#include "faultchild.h"

/* The first chunk of the chosen batch: the sticky fault @f->mode. */
static int plant_fault(const ferry_kernel_args_t *a, void *stream, const faultchild_stage_t *f)
{
    (void)a;
    int e = ferry_k_fault_launch(f->mode, stream);
    return e == 0 ? 0 : FERRY_EBACKEND;
}

/* The child: prints one summary line, exits 0 when every check held. */
static int child(int kind, const char *log)
{
    static faultchild_result_t res;
    int rc =
        faultchild_stream(log, "faulty-scale", plant_fault, kind, 31 + (uint64_t)kind, false, &res);
    if (rc != 0)
        return rc;
    test_done_t *dn = &res.dn;
    printf("# %s: %d batches on the GPU, %d with the CPU, %d failed; gpu_lost %d; %llu failure "
           "records, %llu chunks on the CPU; exactly once %d; output %s\n",
           kind == FERRY_K_FAULT_ILLEGAL_ADDRESS ? "illegal address" : "__trap()",
           atomic_load(&dn->gpu), atomic_load(&dn->cpu), atomic_load(&dn->failed), res.s.gpu_lost,
           (unsigned long long)res.s.failure_records, (unsigned long long)res.s.chunks_cpu,
           res.once, res.diff < 0 ? "bit-exact" : "DIFFERS");
    fflush(stdout);
    /* The context is gone: unregistering and tearing down may fail; the process ends anyway. */
    bool good = res.once && res.diff < 0 && res.s.gpu_lost && atomic_load(&dn->failed) == 0 &&
                atomic_load(&dn->cpu) >= 1 && atomic_load(&dn->gpu) + atomic_load(&dn->cpu) == 16 &&
                res.s.failure_records >= 1;
    return good ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child(strcmp(argv[2], "trap") == 0 ? FERRY_K_FAULT_TRAP
                                                  : FERRY_K_FAULT_ILLEGAL_ADDRESS,
                     argv[3]);
    cudatest_require_gpu();
    const struct CMUnitTest tests[] = {FAULTCHILD_TEST(test_illegal_address, "illegal", "ESTICKY"),
                                       FAULTCHILD_TEST(test_trap, "trap", "ESTICKY")};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
