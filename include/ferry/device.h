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
 * Poll from every thread, at the start of each stretch of work: a poll first reads the GPU's
 * clock (%globaltimer, a register); until the chunk is near its deadline (before
 * ferry_kernel_args_t.abort_after, half the deadline floor after the issue) that is all it
 * does, and ferry raises no word before then. Past it a poll reads the word from L2, each
 * multiprocessor its own copy. Measured on the H200 (docs/faults.md), a byte-wise kernel over
 * 8 MiB, 4 KiB a block, every thread polling once before its work: 1.2-1.9% over the same
 * kernel without the poll (0.3-1.4% at 16 KiB a block), where reading the word at every poll
 * cost 5-6%. One thread polling and a barrier to share its answer costs the barrier (2-4%):
 * let each thread poll, at most once per few KiB of its block's work.
 * A block over in microseconds need not poll: what must poll is a loop that can run long.
 * ferry writes the word with stream memory operations on a stream of its own at the greatest
 * priority, which need neither an SM nor a copy engine: a grid that holds every SM sees the abort
 * within about a millisecond (measured on the H200). With fewer hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS) than ferry's streams, the write can queue behind the work it should
 * stop; the chunk is then handled as one whose kernel never polls. */
#ifndef FERRY_DEVICE_H
#define FERRY_DEVICE_H

#include "ferry.h"

#ifdef __CUDACC__
/* True when ferry has given up on the chunk @a belongs to: return as soon as possible. Before
 * @a->abort_after it reads the clock alone (above); then the volatile read reaches L2, where
 * ferry's copy lands; each multiprocessor reads its own copy of the word
 * (FERRY_ABORT_REPLICAS), so that polls from thousands of blocks spread over L2. A clock
 * outside [abort_after - abort_span, abort_after) reads the word too: a clock that jumped. */
static __device__ __forceinline__ bool ferry_should_abort(const ferry_kernel_args_t *a)
{
    if (a->abort_word == NULL)
        return false;
    if (a->size >= offsetof(ferry_kernel_args_t, abort_span) + sizeof(a->abort_span)) {
        uint64_t now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (a->abort_after - now - 1 < a->abort_span) /* now in [after - span, after) */
            return false;
    }
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const volatile uint64_t *w =
        (const volatile uint64_t *)((const volatile char *)a->abort_word +
                                    (sm % FERRY_ABORT_REPLICAS) * FERRY_ABORT_STRIDE);
    return *w >= a->seq;
}
#endif

#endif
