/* Kernels that fault on purpose, for the GPU fault tests (tests/gpu/test_sticky.c,
 * test_hang.c): a store to an address no allocation covers (cudaErrorIllegalAddress, 700) and
 * __trap() (cudaErrorLaunchFailure, 719), both of which corrupt the context (FACTS.md: every
 * later call of the process fails); and hangs: one thread spinning on the GPU's global timer,
 * polling ferry_should_abort() or not, until a time limit. Not used by ferry itself. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/ferry_k_fault.h"
#include "ferry/device.h"

__global__ void ferry_k_illegal_store(int *where)
{
    *(volatile int *)where = 1;
}

__global__ void ferry_k_trap(void)
{
    __trap();
}

__global__ void ferry_k_hang(ferry_kernel_args_t a, int poll, unsigned long long limit_ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned i = 0;; i++) {
        if (poll && (i & 255) == 0 && ferry_should_abort(&a))
            return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > limit_ns)
            return;
    }
}

extern "C" int ferry_k_hang_launch(const ferry_kernel_args_t *a, int poll,
                                   unsigned long long limit_ns, void *stream)
{
    ferry_k_hang<<<1, 1, 0, (cudaStream_t)stream>>>(*a, poll, limit_ns);
    return (int)cudaGetLastError();
}

extern "C" int ferry_k_fault_launch(int kind, void *stream)
{
    if (kind == FERRY_K_FAULT_ILLEGAL_ADDRESS)
        ferry_k_illegal_store<<<1, 1, 0, (cudaStream_t)stream>>>((int *)(uintptr_t)8);
    else
        ferry_k_trap<<<1, 1, 0, (cudaStream_t)stream>>>();
    return (int)cudaGetLastError();
}
