/* Kernels that fault on purpose, for the GPU fault tests (tests/gpu/test_sticky.c): a store to
 * an address no allocation covers (cudaErrorIllegalAddress, 700) and __trap()
 * (cudaErrorLaunchFailure, 719). Both corrupt the context: FACTS.md measured that every later
 * call of the process fails. Not used by ferry itself. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/ferry_k_fault.h"

__global__ void ferry_k_illegal_store(int *where)
{
    *(volatile int *)where = 1;
}

__global__ void ferry_k_trap(void)
{
    __trap();
}

extern "C" int ferry_k_fault_launch(int kind, void *stream)
{
    if (kind == FERRY_K_FAULT_ILLEGAL_ADDRESS)
        ferry_k_illegal_store<<<1, 1, 0, (cudaStream_t)stream>>>((int *)(uintptr_t)8);
    else
        ferry_k_trap<<<1, 1, 0, (cudaStream_t)stream>>>();
    return (int)cudaGetLastError();
}
