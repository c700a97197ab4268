/* The C launcher of ferry_k_fault.cu: kernels that fault on purpose (tests only). */
#ifndef FERRY_K_FAULT_H
#define FERRY_K_FAULT_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { FERRY_K_FAULT_ILLEGAL_ADDRESS = 0, FERRY_K_FAULT_TRAP = 1 };

/* Queue the faulting kernel @kind on @stream (a cudaStream_t). Returns a cudaError_t as int. */
int ferry_k_fault_launch(int kind, void *stream);

/* Queue a kernel of one thread that spins until @limit_ns of the GPU's clock have passed, or,
 * when @poll, until ferry_should_abort(@a) says so. Returns a cudaError_t as int. */
int ferry_k_hang_launch(const ferry_kernel_args_t *a, int poll, unsigned long long limit_ns,
                        void *stream);

/* Queue a grid that fills every SM (twice the blocks that fit at once, 256 threads each), every
 * thread spinning and polling ferry_should_abort(@a) until it says so or @limit_ns pass.
 * Returns a cudaError_t as int. */
int ferry_k_hang_grid_launch(const ferry_kernel_args_t *a, unsigned long long limit_ns,
                             void *stream);

#ifdef __cplusplus
}
#endif
#endif
