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
 * A poll is one read of a word in device memory, from L2, each multiprocessor reading its own
 * copy of the word. Poll from one thread of a block and share the answer, not from every
 * thread; read it before a stretch of work and act on it after, so the work hides the read;
 * poll once per 16 KiB or more of a block's work (a poll costs about one L2 read per block: on
 * the H200 1-2% of a kernel whose blocks do 16 KiB each, 2-4% at 4 KiB; docs/faults.md has the
 * measured cost of each way). A block over in microseconds need not poll: what must poll is a
 * loop that can run long. ferry writes the word with stream memory
 * operations on a stream of its own at the greatest priority, which need neither an SM nor a
 * copy engine: a grid that holds every SM sees the abort within about a millisecond (measured
 * on the H200). With fewer hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) than ferry's streams,
 * the write can queue behind the work it should stop; the chunk is then handled as one whose
 * kernel never polls. */
#ifndef FERRY_DEVICE_H
#define FERRY_DEVICE_H

#include "ferry.h"

#ifdef __CUDACC__
/* True when ferry has given up on the chunk @a belongs to: return as soon as possible. The
 * volatile read reaches L2, where ferry's copy lands; each multiprocessor reads its own copy of
 * the word (FERRY_ABORT_REPLICAS), so that polls from thousands of blocks spread over L2. */
static __device__ __forceinline__ bool ferry_should_abort(const ferry_kernel_args_t *a)
{
    if (a->abort_word == NULL)
        return false;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const volatile uint64_t *w =
        (const volatile uint64_t *)((const volatile char *)a->abort_word +
                                    (sm % FERRY_ABORT_REPLICAS) * FERRY_ABORT_STRIDE);
    return *w >= a->seq;
}
#endif

#endif
