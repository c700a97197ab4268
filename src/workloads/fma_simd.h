/* The fma workload's CPU loop in vector registers (fma_simd.c). */
#ifndef FERRY_WORKLOADS_FMA_SIMD_H
#define FERRY_WORKLOADS_FMA_SIMD_H

#include <stddef.h>

/* The first elements of @n floats of @in, @intensity rounds of x = fma(x, @factor, 0.5) each,
 * into @out (which may be @in); returns how many it did, a multiple of its block (0 on a CPU
 * without a vector FMA, for a partial overlap of @in and @out, or under @n's block). The
 * caller does the rest element by element. Bit for bit the scalar fmaf loop. */
size_t ferry__fma_simd(const void *in, void *out, size_t n, unsigned intensity, float factor);

/* The same with the instruction set of @level (2: AVX-512F, 1: AVX2 with FMA, 0: none); 0 when
 * this CPU lacks it. For tests that check each path the CPU can run. */
size_t ferry__fma_simd_at(int level, const void *in, void *out, size_t n, unsigned intensity,
                          float factor);

/* The instruction set ferry__fma_simd uses on this CPU: "avx512f", "avx2+fma" or "none". */
const char *ferry__fma_simd_isa(void);

#endif
