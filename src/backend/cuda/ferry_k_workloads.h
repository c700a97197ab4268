/* The C launcher of the built-in workloads' kernel (ferry_k_workloads.cu): copy, scale and fma
 * over float32 elements with the trailing bytes copied, bit-identical to the CPU reference in
 * src/workloads/workloads.c. Callable from C; no CUDA type in the signature. */
#ifndef FERRY_K_WORKLOADS_H
#define FERRY_K_WORKLOADS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds, in the order of ferry_workload_names(). */
enum { FERRY_K_COPY = 0, FERRY_K_SCALE = 1, FERRY_K_FMA = 2 };

/* Enqueue workload @kind on @stream (a cudaStream_t) of the current device: out = f(in) for
 * @bytes bytes, f applied to each 4-byte element from the start, the last bytes % 4 copied.
 * @in and @out are device pointers of any alignment that are equal or do not overlap. @sms
 * sizes the grid (0: a default). Returns a cudaError_t as int: 0 when the launch was queued. */
int ferry_k_workload_launch(int kind, unsigned intensity, float factor, const void *in, void *out,
                            size_t bytes, int sms, void *stream);

#ifdef __cplusplus
}
#endif
#endif
