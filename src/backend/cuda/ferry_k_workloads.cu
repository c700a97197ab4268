/* The built-in workloads on the GPU: copy, scale (x * factor) and fma (intensity rounds of
 * x = fma(x, factor, 0.5)) over float32 elements, trailing bytes (1-3) as the low-order bytes
 * of one more element padded with zeros, bit for bit what the
 * CPU reference (src/workloads/workloads.c) computes. __fmul_rn / __fmaf_rn (and -fmad=false,
 * -ftz=false in CMake) keep nvcc from contracting, reordering or flushing denormals; NaNs keep
 * their payload as x86 does. Grid-stride loops with 16-byte accesses when in and out allow. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "ferry_k_workloads.h"

namespace
{

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 2048 / kThreads; /* a full SM on cc 8.0/9.0 (2048 threads) */

/* One element. Copy never looks at the value. A NaN input comes out as itself, quieted: x86
 * (SSE mulss, FMA vfmadd, glibc fmaf) returns the NaN operand with its payload, where the GPU
 * would return its canonical NaN; factor is finite (checked at creation) and 0.5 is not a NaN,
 * so x is the only NaN operand and no other input can produce one. */
template <int Kind>
__device__ __forceinline__ uint32_t apply(uint32_t bits, float factor, unsigned intensity)
{
    if constexpr (Kind == FERRY_K_COPY) {
        return bits;
    } else {
        float x = __uint_as_float(bits);
        if (x != x)
            return Kind == FERRY_K_FMA && intensity == 0 ? bits : bits | 0x00400000u;
        if constexpr (Kind == FERRY_K_SCALE) {
            return __float_as_uint(__fmul_rn(x, factor));
        } else {
            for (unsigned k = 0; k < intensity; k++)
                x = __fmaf_rn(x, factor, 0.5f);
            return __float_as_uint(x);
        }
    }
}

/* The bytes % 4 after the last element, by one thread: the low-order bytes of one more element
 * whose other bytes are zero (little-endian), transformed, and those bytes of the result
 * written; as the CPU reference (src/workloads/workloads.c) does. Copy copies them. */
template <int Kind>
__device__ __forceinline__ void copy_tail(const unsigned char *in, unsigned char *out,
                                          unsigned tail, size_t gid, float factor,
                                          unsigned intensity)
{
    if (gid != 0 || tail == 0)
        return;
    uint32_t w = 0;
    for (unsigned k = 0; k < tail; k++)
        w |= (uint32_t)in[k] << (8 * k);
    w = apply<Kind>(w, factor, intensity);
    for (unsigned k = 0; k < tail; k++)
        out[k] = (unsigned char)(w >> (8 * k));
}

/* in and out 4-byte aligned. With Vec (in and out equally misaligned against 16 bytes), the
 * first @head words bring both to a 16-byte boundary and the body moves as uint4. */
template <int Kind, bool Vec>
__global__ void __launch_bounds__(kThreads)
    k_words(const uint32_t *in, uint32_t *out, size_t n, size_t head, unsigned tail, float factor,
            unsigned intensity)
{
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t start = 0;
    if (Vec) {
        size_t nvec = (n - head) / 4;
        const uint4 *vin = reinterpret_cast<const uint4 *>(in + head);
        uint4 *vout = reinterpret_cast<uint4 *>(out + head);
        for (size_t i = gid; i < nvec; i += stride) {
            uint4 v = vin[i];
            v.x = apply<Kind>(v.x, factor, intensity);
            v.y = apply<Kind>(v.y, factor, intensity);
            v.z = apply<Kind>(v.z, factor, intensity);
            v.w = apply<Kind>(v.w, factor, intensity);
            vout[i] = v;
        }
        if (gid < head)
            out[gid] = apply<Kind>(in[gid], factor, intensity);
        start = head + nvec * 4;
    }
    for (size_t i = start + gid; i < n; i += stride)
        out[i] = apply<Kind>(in[i], factor, intensity);
    copy_tail<Kind>(reinterpret_cast<const unsigned char *>(in + n),
                    reinterpret_cast<unsigned char *>(out + n), tail, gid, factor, intensity);
}

/* in or out not 4-byte aligned: assemble each element from bytes (little-endian, as the CPU's
 * memcpy into a float reads them). */
template <int Kind>
__global__ void __launch_bounds__(kThreads)
    k_bytes(const unsigned char *in, unsigned char *out, size_t n, unsigned tail, float factor,
            unsigned intensity)
{
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = gid; i < n; i += stride) {
        const unsigned char *p = in + 4 * i;
        uint32_t w =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        w = apply<Kind>(w, factor, intensity);
        unsigned char *q = out + 4 * i;
        q[0] = (unsigned char)w;
        q[1] = (unsigned char)(w >> 8);
        q[2] = (unsigned char)(w >> 16);
        q[3] = (unsigned char)(w >> 24);
    }
    copy_tail<Kind>(in + 4 * n, out + 4 * n, tail, gid, factor, intensity);
}

unsigned grid_for(size_t work, int sms)
{
    size_t cap = (size_t)(sms > 0 ? sms : 132) * kBlocksPerSm;
    size_t blocks = (work + kThreads - 1) / kThreads;
    if (blocks > cap)
        blocks = cap;
    return blocks > 0 ? (unsigned)blocks : 1u;
}

template <int Kind>
cudaError_t launch(unsigned intensity, float factor, const void *in, void *out, size_t bytes,
                   int sms, cudaStream_t st)
{
    size_t n = bytes / 4;
    unsigned tail = (unsigned)(bytes - n * 4);
    uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
    if (((a | b) & 3u) != 0) {
        k_bytes<Kind><<<grid_for(n, sms), kThreads, 0, st>>>(static_cast<const unsigned char *>(in),
                                                             static_cast<unsigned char *>(out), n,
                                                             tail, factor, intensity);
    } else if ((a & 15u) == (b & 15u)) {
        size_t head = ((16 - (a & 15u)) & 15u) / 4;
        if (head > n)
            head = n;
        k_words<Kind, true><<<grid_for((n - head) / 4 + 4, sms), kThreads, 0, st>>>(
            static_cast<const uint32_t *>(in), static_cast<uint32_t *>(out), n, head, tail, factor,
            intensity);
    } else {
        k_words<Kind, false><<<grid_for(n, sms), kThreads, 0, st>>>(
            static_cast<const uint32_t *>(in), static_cast<uint32_t *>(out), n, 0, tail, factor,
            intensity);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" int ferry_k_workload_launch(int kind, unsigned intensity, float factor, const void *in,
                                       void *out, size_t bytes, int sms, void *stream)
{
    if (bytes == 0)
        return (int)cudaSuccess;
    if (in == nullptr || out == nullptr)
        return (int)cudaErrorInvalidValue;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (kind) {
    case FERRY_K_COPY: return (int)launch<FERRY_K_COPY>(intensity, factor, in, out, bytes, sms, st);
    case FERRY_K_SCALE:
        return (int)launch<FERRY_K_SCALE>(intensity, factor, in, out, bytes, sms, st);
    case FERRY_K_FMA: return (int)launch<FERRY_K_FMA>(intensity, factor, in, out, bytes, sms, st);
    default: return (int)cudaErrorInvalidValue;
    }
}
