/* The watchdog's heartbeat: one thread stores a value into mapped host memory. It is queued on
 * the lowest-priority stream and runs only when the GPU schedules new work, so a counter that
 * stops moving says the GPU does not (a kernel holding every SM, a hung or lost context). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/ferry_k_watchdog.h"

__global__ void ferry_k_heartbeat(volatile unsigned long long *word, unsigned long long value)
{
    *word = value;
    __threadfence_system();
}

/* The GPU's clock (%globaltimer, ns) into mapped host memory, for cuda_gtimer.c. */
__global__ void ferry_k_clock_stamp(volatile unsigned long long *word)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *word = t;
    __threadfence_system();
}

/* Lazy loading (CUDA 12.2+ by default) loads a kernel at its first launch, and loading may wait
 * for the device to go idle: a first beat behind a hung kernel would never return. Load it
 * when the device opens instead. */
extern "C" int ferry_k_heartbeat_preload(void)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, ferry_k_heartbeat);
    return (int)(e != cudaSuccess ? e : cudaFuncGetAttributes(&a, ferry_k_clock_stamp));
}

extern "C" int ferry_k_heartbeat_launch(volatile uint64_t *word, uint64_t value, void *stream)
{
    ferry_k_heartbeat<<<1, 1, 0, (cudaStream_t)stream>>>((volatile unsigned long long *)word,
                                                         (unsigned long long)value);
    return (int)cudaGetLastError();
}

extern "C" int ferry_k_clock_stamp_launch(volatile uint64_t *word, void *stream)
{
    ferry_k_clock_stamp<<<1, 1, 0, (cudaStream_t)stream>>>((volatile unsigned long long *)word);
    return (int)cudaGetLastError();
}
