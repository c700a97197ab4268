/* Device-side helpers for CUDA stage kernels (include from .cu files).
 *
 * A long kernel can let ferry stop it: when a chunk passes its deadline, ferry raises an abort
 * word in device memory (ferry_kernel_args_t.abort_word) to that chunk's sequence number.
 * A kernel that polls ferry_should_abort() and returns early when it says so frees its stream
 * within microseconds; ferry then discards the chunk's output and redoes it on the stage's CPU
 * function (or fails the batch with the reason). A kernel that never polls keeps running: ferry
 * then gives up on the GPU for the rest of the process, as for a sticky error.
 *
 * Pass the arguments by value to the kernel:
 *
 *     __global__ void my_kernel(ferry_kernel_args_t a) {
 *         for (long i = ...; ...; ...) {
 *             if ((i & 4095) == 0 && ferry_should_abort(&a))
 *                 return;
 *             ...
 *         }
 *     }
 *     static int my_gpu(const ferry_kernel_args_t *a, void *stream, void *user) {
 *         my_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(*a);
 *         return cudaGetLastError() == cudaSuccess ? 0 : FERRY_EKERNEL;
 *     }
 *
 * A poll is one read of a word in device memory (from L2): once per block, or every few
 * thousand iterations of a loop, costs nothing measurable (docs/faults.md has the figures).
 * ferry writes the word with an 8-byte copy on a stream of its own at the greatest priority, so
 * a grid that holds every SM still sees it within microseconds; with fewer hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS) than ferry's streams, that copy can queue behind the work it
 * should stop, and the chunk is then handled as one whose kernel never polls. */
#ifndef FERRY_DEVICE_H
#define FERRY_DEVICE_H

#include "ferry.h"

#ifdef __CUDACC__
/* True when ferry has given up on the chunk @a belongs to: return as soon as possible. The
 * volatile read reaches L2, where ferry's copy lands. */
static __device__ __forceinline__ bool ferry_should_abort(const ferry_kernel_args_t *a)
{
    return a->abort_word != NULL && *a->abort_word >= a->seq;
}
#endif

#endif
