/* Ways to poll an abort word per block, and what each costs a short byte-wise kernel: 16 bytes a
 * thread, 256 threads a block (4 KiB a block, the shape of issue 15's kernel), 1 MiB and 8 MiB.
 * Each way is its own kernel (a template: no run-time branch on the mode), modes interleaved,
 * events on one stream, median of 500 runs after a warm-up, outputs checked first. The word is
 * a device-memory array of 128 copies 128 B apart, as ferry's (FERRY_ABORT_REPLICAS), never
 * raised here. One JSON line per size. Stand-alone: nvcc -O3 -arch=sm_90 this.cu. */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define REPL   128
#define STRIDE 128

enum {
    M_NONE,       /* no poll */
    M_SMID_FIRST, /* ferry today: thread 0 reads its SM's copy (volatile), barrier, then work */
    M_BID_FIRST,  /* the copy chosen by blockIdx (no %smid read before the load) */
    M_RELAXED,    /* %smid copy, ld.relaxed.gpu instead of volatile */
    M_CG_FIRST,   /* blockIdx copy, ld.global.cg (L2, no L1) */
    M_SMID_LATE,  /* read issued before the work, answer shared by a barrier after it */
    M_BID_LATE,   /* as SMID_LATE with the blockIdx copy */
    M_WARP_FIRST, /* lane 0 of each warp reads (blockIdx copy), shuffled to the warp: no barrier */
    M_WARP_LATE,  /* each warp: read before, act after, no barrier */
    M_NONE_AGAIN, /* no poll, a second series: the noise */
    M_N
};
static const char *names[M_N] = {"none",      "smid_first", "bid_first", "relaxed_first",
                                 "cg_first",  "smid_late",  "bid_late",  "warp_first",
                                 "warp_late", "none_again"};

__device__ __forceinline__ unsigned smid()
{
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

template <int M>
__global__ void k(const unsigned char *in, unsigned char *out, size_t bytes,
                  const unsigned long long *word, unsigned long long seq)
{
    __shared__ int stop;
    const char *w0 = (const char *)word;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 16;
    bool said = false;
    if (M == M_SMID_FIRST || M == M_BID_FIRST || M == M_RELAXED || M == M_CG_FIRST) {
        if (threadIdx.x == 0) {
            unsigned long long v;
            if (M == M_SMID_FIRST)
                v = *(const volatile unsigned long long *)(w0 + (smid() % REPL) * STRIDE);
            else if (M == M_BID_FIRST)
                v = *(const volatile unsigned long long *)(w0 + (blockIdx.x % REPL) * STRIDE);
            else if (M == M_RELAXED)
                v = ld_relaxed((const unsigned long long *)(w0 + (smid() % REPL) * STRIDE));
            else
                v = __ldcg((const unsigned long long *)(w0 + (blockIdx.x % REPL) * STRIDE));
            stop = v >= seq;
        }
        __syncthreads();
        if (stop)
            return;
    } else if ((M == M_SMID_LATE || M == M_BID_LATE) && threadIdx.x == 0) {
        unsigned r = M == M_SMID_LATE ? smid() : blockIdx.x;
        said = *(const volatile unsigned long long *)(w0 + (r % REPL) * STRIDE) >= seq;
    } else if (M == M_WARP_FIRST || M == M_WARP_LATE) {
        unsigned long long v = 0;
        if ((threadIdx.x & 31) == 0)
            v = *(const volatile unsigned long long *)(w0 + (blockIdx.x % REPL) * STRIDE);
        said = __shfl_sync(0xffffffffu, v, 0) >= seq;
        if (M == M_WARP_FIRST && said)
            return;
    }
    if (i + 16 <= bytes) {
        uint4 v = *(const uint4 *)(in + i);
        v.x ^= 0x5a5a5a5au;
        v.y ^= 0x5a5a5a5au;
        v.z ^= 0x5a5a5a5au;
        v.w ^= 0x5a5a5a5au;
        *(uint4 *)(out + i) = v;
    }
    if (M == M_SMID_LATE || M == M_BID_LATE) {
        if (threadIdx.x == 0)
            stop = said;
        __syncthreads();
        if (stop)
            return;
    } else if (M == M_WARP_LATE && said) {
        return;
    }
}

#define CK(c)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (c);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #c, cudaGetErrorString(e_));                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef void (*kfn)(const unsigned char *, unsigned char *, size_t, const unsigned long long *,
                    unsigned long long);
static const kfn fns[M_N] = {k<0>, k<1>, k<2>, k<3>, k<4>, k<5>, k<6>, k<7>, k<8>, k<0>};

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 500;
    unsigned long long *word;
    CK(cudaMalloc(&word, REPL * STRIDE));
    CK(cudaMemset(word, 0, REPL * STRIDE));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    size_t sizes[] = {1u << 20, 8u << 20};
    for (size_t bytes : sizes) {
        unsigned char *in, *out;
        CK(cudaMalloc(&in, bytes));
        CK(cudaMalloc(&out, bytes));
        std::vector<unsigned char> h(bytes), back(bytes);
        srand(12345 + (unsigned)bytes);
        for (auto &c : h)
            c = (unsigned char)rand();
        CK(cudaMemcpy(in, h.data(), bytes, cudaMemcpyHostToDevice));
        unsigned blocks = (unsigned)((bytes + 4095) / 4096);
        for (int m = 0; m < M_N; m++) { /* correctness first */
            CK(cudaMemset(out, 0, bytes));
            fns[m]<<<blocks, 256, 0, s>>>(in, out, bytes, word, 1);
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost));
            for (size_t j = 0; j < bytes; j++)
                if (back[j] != (unsigned char)(h[j] ^ 0x5a)) {
                    fprintf(stderr, "%s: wrong byte at %zu\n", names[m], j);
                    return 1;
                }
        }
        std::vector<std::vector<float>> t(M_N);
        for (int r = 0; r < reps + 50; r++)
            for (int m = 0; m < M_N; m++) {
                CK(cudaEventRecord(e0, s));
                fns[m]<<<blocks, 256, 0, s>>>(in, out, bytes, word, 1);
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 50)
                    t[m].push_back(ms * 1000.f);
            }
        printf("{\"bench\":\"abort_poll_variants\",\"bytes\":%zu,\"blocks\":%u,\"reps\":%d", bytes,
               blocks, reps);
        std::sort(t[0].begin(), t[0].end());
        double none = t[0][t[0].size() / 2];
        for (int m = 0; m < M_N; m++) {
            std::sort(t[m].begin(), t[m].end());
            double med = t[m][t[m].size() / 2];
            printf(",\"%s_us\":%.3f,\"%s_over_none\":%.4f", names[m], med, names[m], med / none);
        }
        printf("}\n");
        CK(cudaFree(in));
        CK(cudaFree(out));
    }
    return 0;
}
