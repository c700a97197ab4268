/* Workload launchers when ferry is built without CUDA (the cuda backend supplies its own in
 * src/backend/cuda/), and the fma cost hint for the simulator. */
#include "pipeline/workloads_gpu.h"

#ifndef FERRY_WITH_CUDA
/* No kernels without CUDA: stages keep a NULL gpu function, which only the cuda backend (not
 * built) would need; the simulator runs the CPU function. */
ferry_gpu_fn ferry__workload_gpu_fn(const char *name)
{
    (void)name;
    return NULL;
}

ferry_gpu_fn ferry__spin_gpu_fn(void)
{
    return NULL;
}
#endif

double ferry__workload_fma_ns_per_byte(unsigned intensity)
{
    /* FP32 FMA throughput of an H100/H200 SXM by NVIDIA's datasheet: 67 TFLOP/s = 33.5e12
     * FMA/s; one element (4 bytes) needs @intensity FMAs. The memory-bound pass the
     * simulator adds by itself is a floor under this. `ferry probe --calibrate` measures it. */
    return (double)intensity / 4.0 / 33.5e3;
}
