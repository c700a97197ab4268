/* Small pieces of a copy moved by a kernel over mapped host memory (backend op copy_pieces, for
 * pieces of piece_kernel_max bytes or fewer). On an H100 host (bench/explore/small_copies.cu,
 * 8 MiB of pieces a call): 4 KiB pieces moved at 88.5% of one copy's rate H2D and 98% D2H this
 * way, against 8.7% and 9.7% through one cudaMemcpyBatchAsync; 16 KiB at 109% and 93% against
 * 69% and 42%; from 64 KiB the copy engines win. A launch costs the host one call whatever its
 * pieces, where the batch call costs ~0.7-1 us a piece. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/ferry_k_pieces.h"

struct pieces_arg {
    unsigned char *dbuf;
    ferry_k_piece_t p[FERRY_K_PIECES_MAX];
};

/* A block a piece: 16-byte words where both sides and the size allow them, bytes otherwise. */
template <bool ToDev> __global__ void ferry_k_pieces(const __grid_constant__ pieces_arg a)
{
    const ferry_k_piece_t q = a.p[blockIdx.x];
    unsigned char *hp = (unsigned char *)(uintptr_t)q.host, *dp = a.dbuf + q.off;
    unsigned char *dst = ToDev ? dp : hp;
    const unsigned char *src = ToDev ? hp : dp;
    if ((((uintptr_t)dst | (uintptr_t)src | q.bytes) & 15u) == 0) {
        uint4 *d = (uint4 *)dst;
        const uint4 *s = (const uint4 *)src;
        for (unsigned i = threadIdx.x; i < q.bytes / 16u; i += blockDim.x)
            d[i] = s[i];
    } else {
        for (unsigned i = threadIdx.x; i < q.bytes; i += blockDim.x)
            dst[i] = src[i];
    }
}

extern "C" int ferry_k_pieces_launch(const ferry_k_piece_t *pieces, unsigned n,
                                     unsigned char *dbuf, int to_dev, void *stream)
{
    if (n == 0)
        return (int)cudaSuccess;
    if (n > FERRY_K_PIECES_MAX || pieces == NULL || dbuf == NULL)
        return (int)cudaErrorInvalidValue;
    pieces_arg a;
    a.dbuf = dbuf;
    memcpy(a.p, pieces, n * sizeof(*pieces));
    cudaStream_t st = (cudaStream_t)stream;
    if (to_dev)
        ferry_k_pieces<true><<<n, 256, 0, st>>>(a);
    else
        ferry_k_pieces<false><<<n, 256, 0, st>>>(a);
    return (int)cudaGetLastError();
}
