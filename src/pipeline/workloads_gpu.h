/* The link between the built-in workloads and the CUDA backend's kernels: the launcher for a
 * workload by name (NULL when ferry was built without CUDA), and the fma cost hint. */
#ifndef FERRY_PIPELINE_WORKLOADS_GPU_H
#define FERRY_PIPELINE_WORKLOADS_GPU_H

#include "ferry.h"

ferry_gpu_fn ferry__workload_gpu_fn(const char *name);
double ferry__workload_fma_ns_per_byte(unsigned intensity);

#endif
