/* A kernel that holds one block for a given time, on the GPU's global timer: the "kernel A
 * (2 ms, one block)" of the connections law (FACTS.md), which `ferry connections --measure`
 * times stream by stream. */
#include <cuda_runtime.h>

#include "backend/cuda/ferry_k_spin.h"

static __device__ unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void ferry_k_spin(unsigned long long ns)
{
    unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns) {
    }
}

extern "C" int ferry_k_spin_launch(unsigned long long ns, void *stream)
{
    ferry_k_spin<<<1, 32, 0, (cudaStream_t)stream>>>(ns);
    return (int)cudaGetLastError();
}
