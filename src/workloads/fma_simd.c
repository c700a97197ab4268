/* The fma workload's CPU loop, many elements at a time: x = fma(x, factor, 0.5) @intensity times
 * per element. One element's rounds are a chain of dependent FMAs (4 cycles each), and without
 * -mfma the compiler calls glibc's fmaf for every one (about 25 MB/s a core at intensity 64), so
 * the CPU device and the CPU fallback ran compute-heavy stages 40-100 times below the core's
 * rate. Here 8 vectors of independent elements go through the rounds together with the ISA's
 * fused multiply-add, chosen when the process starts (AVX-512F, else AVX2 with FMA, else none):
 * 0.66-0.88 GB/s a core at intensity 64-256 where the scalar loop made 0.006-0.024.
 *
 * Bit for bit what the scalar loop computes: a vector FMA rounds each lane once, as fmaf does,
 * with the same MXCSR (no flush to zero, no denormals-are-zero), and since factor is finite and
 * 0.5 is not a NaN, a NaN lane can only be x, which comes out quieted with its payload as from
 * fmaf (tests/unit/test_workloads_simd.c compares the two on every class of float). */
#include "workloads/fma_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define FMA_VECS 8 /* independent chains: covers the FMA's latency on two ports */
/* An output of this many bytes or more, apart from its input and aligned to the vector, is
 * written with non-temporal stores: an ordinary store first reads each line it writes (a third
 * more of the host's memory traffic, which the DMA of a GPU beside this CPU shares), and a chunk
 * this large leaves the cache before anyone reads it again. */
#define FMA_NT_MIN (256u << 10)

__attribute__((target("avx512f"))) static size_t fma_avx512(const unsigned char *in,
                                                            unsigned char *out, size_t n,
                                                            unsigned intensity, float factor,
                                                            bool nt)
{
    const size_t step = 16 * FMA_VECS;
    const __m512 f = _mm512_set1_ps(factor), h = _mm512_set1_ps(0.5f);
    size_t i = 0;
    for (; i + step <= n; i += step) {
        __m512 x[FMA_VECS];
        for (int j = 0; j < FMA_VECS; j++)
            x[j] = _mm512_loadu_ps(in + 4 * (i + 16 * (size_t)j));
        for (unsigned k = 0; k < intensity; k++)
            for (int j = 0; j < FMA_VECS; j++)
                x[j] = _mm512_fmadd_ps(x[j], f, h);
        if (nt)
            for (int j = 0; j < FMA_VECS; j++)
                _mm512_stream_ps((float *)(void *)(out + 4 * (i + 16 * (size_t)j)), x[j]);
        else
            for (int j = 0; j < FMA_VECS; j++)
                _mm512_storeu_ps(out + 4 * (i + 16 * (size_t)j), x[j]);
    }
    if (nt)
        _mm_sfence(); /* ordered before whatever tells another thread the output is there */
    return i;
}

__attribute__((target("avx2,fma"))) static size_t fma_avx2(const unsigned char *in,
                                                           unsigned char *out, size_t n,
                                                           unsigned intensity, float factor,
                                                           bool nt)
{
    const size_t step = 8 * FMA_VECS;
    const __m256 f = _mm256_set1_ps(factor), h = _mm256_set1_ps(0.5f);
    size_t i = 0;
    for (; i + step <= n; i += step) {
        __m256 x[FMA_VECS];
        for (int j = 0; j < FMA_VECS; j++)
            x[j] = _mm256_loadu_ps((const float *)(const void *)(in + 4 * (i + 8 * (size_t)j)));
        for (unsigned k = 0; k < intensity; k++)
            for (int j = 0; j < FMA_VECS; j++)
                x[j] = _mm256_fmadd_ps(x[j], f, h);
        if (nt)
            for (int j = 0; j < FMA_VECS; j++)
                _mm256_stream_ps((float *)(void *)(out + 4 * (i + 8 * (size_t)j)), x[j]);
        else
            for (int j = 0; j < FMA_VECS; j++)
                _mm256_storeu_ps((float *)(void *)(out + 4 * (i + 8 * (size_t)j)), x[j]);
    }
    if (nt)
        _mm_sfence();
    return i;
}

/* The best this CPU has: 2 AVX-512F, 1 AVX2 with FMA, 0 none. */
static int isa_level(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return 2;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
}

const char *ferry__fma_simd_isa(void)
{
    static const char *const names[] = {"none", "avx2+fma", "avx512f"};
    return names[isa_level()];
}

size_t ferry__fma_simd_at(int level, const void *in, void *out, size_t n, unsigned intensity,
                          float factor)
{
    const unsigned char *ib = in;
    unsigned char *ob = out;
    /* whole blocks are loaded before they are stored: exact in place, not for a partial
     * overlap, which the element-by-element loop handles */
    if (level > isa_level() || (ib != ob && ib < ob + 4 * n && ob < ib + 4 * n))
        return 0;
    /* in place, each line was read already: an ordinary store costs nothing more */
    bool nt = ib != ob && n >= FMA_NT_MIN / 4 && (uintptr_t)ob % 64 == 0;
    if (level == 2)
        return fma_avx512(ib, ob, n, intensity, factor, nt);
    if (level == 1)
        return fma_avx2(ib, ob, n, intensity, factor, nt);
    return 0;
}

size_t ferry__fma_simd(const void *in, void *out, size_t n, unsigned intensity, float factor)
{
    return ferry__fma_simd_at(isa_level(), in, out, n, intensity, factor);
}

#else

const char *ferry__fma_simd_isa(void)
{
    return "none";
}

size_t ferry__fma_simd_at(int level, const void *in, void *out, size_t n, unsigned intensity,
                          float factor)
{
    (void)level;
    return ferry__fma_simd(in, out, n, intensity, factor);
}

size_t ferry__fma_simd(const void *in, void *out, size_t n, unsigned intensity, float factor)
{
    (void)in;
    (void)out;
    (void)n;
    (void)intensity;
    (void)factor;
    return 0;
}

#endif
