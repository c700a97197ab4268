// CK(call): a CUDA runtime call that must succeed, or the program says which and exits (the
// stand-alone measurements in this folder).
#ifndef FERRY_BENCH_EXPLORE_CUDA_CHECK_H
#define FERRY_BENCH_EXPLORE_CUDA_CHECK_H
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
