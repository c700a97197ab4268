/* The link between the built-in workloads and the CUDA backend's kernels: the launcher for a
 * workload by name (NULL when ferry was built without CUDA), the parameters a launcher reads
 * from its workload, and the fma cost hint. */
#ifndef FERRY_PIPELINE_WORKLOADS_GPU_H
#define FERRY_PIPELINE_WORKLOADS_GPU_H

#include "ferry.h"

ferry_gpu_fn ferry__workload_gpu_fn(const char *name);
/* What a GPU launcher needs from the workload its stage's user pointer points to (the struct is
 * private to workloads.c, which defines this): @kind is the index of the workload's name in
 * ferry_workload_names() (copy 0, scale 1, fma 2), @intensity the fma rounds (0 for others),
 * @factor the multiplier. */
void ferry__workload_params(const void *user, int *kind, unsigned *intensity, float *factor);
double ferry__workload_fma_ns_per_byte(unsigned intensity);
/* A launcher that holds one block of the GPU for *(unsigned long long *)user nanoseconds (NULL
 * without CUDA): the kernels of the connections measurement. */
ferry_gpu_fn ferry__spin_gpu_fn(void);

#endif
