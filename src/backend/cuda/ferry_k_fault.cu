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

/* Every thread of a grid that fills the GPU spins, each polling ferry_should_abort() every
 * 256 turns, until the abort or @limit_ns. */
__global__ void ferry_k_hang_grid(ferry_kernel_args_t a, unsigned long long limit_ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned i = 0;; i++) {
        if ((i & 255) == 0 && ferry_should_abort(&a))
            return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > limit_ns)
            return;
    }
}

extern "C" int ferry_k_hang_grid_launch(const ferry_kernel_args_t *a, unsigned long long limit_ns,
                                        void *stream)
{
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ferry_k_hang_grid, 256, 0);
    if (e != cudaSuccess)
        return (int)e;
    /* Twice what fits at once: every SM full, and blocks waiting for a place. */
    ferry_k_hang_grid<<<2 * sms * per_sm, 256, 0, (cudaStream_t)stream>>>(*a, limit_ns);
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
