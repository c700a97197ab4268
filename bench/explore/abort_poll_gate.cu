/* Can a poll of the abort word cost nothing measurable? A kernel reads %globaltimer (a special
 * register: no memory traffic) and reads the word only once the timer has passed a gate that
 * ferry would set a little before the chunk's deadline. This measures, on a short byte-wise
 * kernel (16 bytes a thread, 256 threads a block: 4 KiB a block, issue 15's shape; 1 and 8 MiB;
 * inputs rotated over 64 sets so L2 is cold), each mode against no poll:
 *   none / none_again   no poll (two series: the noise)
 *   smid_first          ferry's ferry_should_abort() by thread 0, barrier, then the work
 *   smid_late           the read issued before the work, its answer used after (a barrier)
 *   barrier_first       a barrier alone (what "first" costs without any read)
 *   timer_first         thread 0 compares %globaltimer with the gate (never passed), barrier
 *   timer_all           every thread compares %globaltimer with the gate, no barrier
 * then checks that a gated poll still delivers: gate passed and word raised -> nothing written;
 * gate passed, word low -> everything written. And it records %globaltimer against the host's
 * CLOCK_MONOTONIC and CLOCK_REALTIME (a kernel writes the timer into mapped host memory, the host
 * notes when it sees it): offset, jitter and drift over a few seconds, and the timer's step.
 * One JSON line each. Stand-alone: nvcc -O3 -arch=sm_90 this.cu */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <time.h>
#include <vector>

#include <cuda_runtime.h>

#define REPL   128
#define STRIDE 128
#define SETS   64

enum {
    M_NONE,
    M_SMID_FIRST,
    M_SMID_LATE,
    M_BAR_FIRST,
    M_TIMER_FIRST,
    M_TIMER_ALL,
    M_NONE_AGAIN,
    M_N
};
static const char *names[M_N] = {"none",        "smid_first", "smid_late", "barrier_first",
                                 "timer_first", "timer_all",  "none_again"};

__device__ __forceinline__ unsigned smid()
{
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ unsigned long long gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ bool word_says(const unsigned long long *word, unsigned long long seq)
{
    return *(const volatile unsigned long long *)((const char *)word + (smid() % REPL) * STRIDE) >=
           seq;
}

template <int M>
__global__ void k(const unsigned char *in, unsigned char *out, size_t bytes,
                  const unsigned long long *word, unsigned long long seq, unsigned long long gate)
{
    __shared__ int stop;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 16;
    bool said = false;
    if (M == M_SMID_FIRST || M == M_TIMER_FIRST || M == M_BAR_FIRST) {
        if (threadIdx.x == 0) {
            if (M == M_SMID_FIRST)
                stop = word_says(word, seq);
            else if (M == M_TIMER_FIRST)
                stop = gtimer() >= gate && word_says(word, seq);
            else
                stop = 0;
        }
        __syncthreads();
        if (stop)
            return;
    } else if (M == M_SMID_LATE && threadIdx.x == 0) {
        said = word_says(word, seq);
    } else if (M == M_TIMER_ALL) {
        if (gtimer() >= gate && word_says(word, seq))
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
    if (M == M_SMID_LATE) {
        if (threadIdx.x == 0)
            stop = said;
        __syncthreads();
        if (stop)
            return;
    }
}

__global__ void stamp(volatile unsigned long long *host)
{
    *host = gtimer();
    __threadfence_system();
}
__global__ void steps(unsigned long long *out)
{
    unsigned long long prev = gtimer(), minstep = ~0ull;
    int seen = 0;
    while (seen < 64) {
        unsigned long long t = gtimer();
        if (t != prev) {
            if (t - prev < minstep)
                minstep = t - prev;
            prev = t;
            seen++;
        }
    }
    *out = minstep;
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
                    unsigned long long, unsigned long long);
static const kfn fns[M_N] = {k<0>, k<1>, k<2>, k<3>, k<4>, k<5>, k<0>};

static long long now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void clocks(void)
{
    volatile unsigned long long *h;
    CK(cudaHostAlloc((void **)&h, 64, cudaHostAllocMapped));
    unsigned long long *dstep;
    CK(cudaMalloc(&dstep, 8));
    steps<<<1, 1>>>(dstep);
    unsigned long long step;
    CK(cudaMemcpy(&step, dstep, 8, cudaMemcpyDeviceToHost));
    std::vector<double> off_mono, off_real, lat;
    long long first_mono = 0;
    for (int r = 0; r < 400; r++) { /* about 4 s */
        *h = 0;
        long long t0 = now_ns(CLOCK_MONOTONIC);
        stamp<<<1, 1>>>(h);
        unsigned long long g;
        while ((g = *h) == 0) {
        }
        long long t1 = now_ns(CLOCK_MONOTONIC), rt = now_ns(CLOCK_REALTIME);
        CK(cudaDeviceSynchronize());
        if (r == 0)
            first_mono = t1;
        off_mono.push_back((double)((long long)g - t1));
        off_real.push_back((double)((long long)g - rt));
        lat.push_back((double)(t1 - t0));
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        (void)first_mono;
    }
    size_t n = off_mono.size();
    double d_mono = off_mono[n - 1] - off_mono[0], d_real = off_real[n - 1] - off_real[0];
    std::vector<double> s = off_mono;
    std::sort(s.begin(), s.end());
    std::vector<double> l = lat;
    std::sort(l.begin(), l.end());
    printf("{\"bench\":\"globaltimer_clock\",\"samples\":%zu,\"timer_step_ns\":%llu,"
           "\"offset_vs_realtime_first_ns\":%.0f,\"offset_vs_monotonic_spread_ns\":%.0f,"
           "\"drift_vs_monotonic_ns\":%.0f,\"drift_vs_realtime_ns\":%.0f,"
           "\"launch_to_seen_median_ns\":%.0f,\"span_s\":%.2f}\n",
           n, step, off_real[0], s[n - 1] - s[0], d_mono, d_real, l[n / 2],
           (double)(now_ns(CLOCK_MONOTONIC) - first_mono) / 1e9);
    CK(cudaFreeHost((void *)h));
    CK(cudaFree(dstep));
}

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
    const unsigned long long never = ~0ull;
    size_t sizes[] = {1u << 20, 8u << 20};
    for (size_t bytes : sizes) {
        unsigned char *in, *out;
        CK(cudaMalloc(&in, bytes * SETS));
        CK(cudaMalloc(&out, bytes * SETS));
        std::vector<unsigned char> h(bytes * SETS), back(bytes);
        srand(12345 + (unsigned)bytes);
        for (auto &c : h)
            c = (unsigned char)rand();
        CK(cudaMemcpy(in, h.data(), bytes * SETS, cudaMemcpyHostToDevice));
        unsigned blocks = (unsigned)((bytes + 4095) / 4096);
        for (int m = 0; m < M_N; m++) { /* correctness first */
            CK(cudaMemset(out, 0, bytes));
            fns[m]<<<blocks, 256, 0, s>>>(in, out, bytes, word, 1, never);
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost));
            for (size_t j = 0; j < bytes; j++)
                if (back[j] != (unsigned char)(h[j] ^ 0x5a)) {
                    fprintf(stderr, "%s: wrong byte at %zu\n", names[m], j);
                    return 1;
                }
        }
        /* The gate passed (0): a low word lets everything through, a raised one stops every
         * block before it writes. */
        int delivered = 1;
        for (int m : {M_TIMER_FIRST, M_TIMER_ALL}) {
            for (int raised = 0; raised < 2; raised++) {
                CK(cudaMemset(word, raised ? 0xff : 0, REPL * STRIDE));
                CK(cudaMemset(out, 0, bytes));
                fns[m]<<<blocks, 256, 0, s>>>(in, out, bytes, word, 1, 0);
                CK(cudaStreamSynchronize(s));
                CK(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost));
                size_t written = 0;
                for (size_t j = 0; j < bytes; j++)
                    written += back[j] == (unsigned char)(h[j] ^ 0x5a);
                if ((raised && written > bytes / 256) || (!raised && written != bytes))
                    delivered = 0;
            }
        }
        CK(cudaMemset(word, 0, REPL * STRIDE));
        std::vector<std::vector<float>> t(M_N);
        for (int r = 0; r < reps + 50; r++)
            for (int m = 0; m < M_N; m++) {
                size_t set = (size_t)((r * M_N + m) % SETS) * bytes;
                CK(cudaEventRecord(e0, s));
                fns[m]<<<blocks, 256, 0, s>>>(in + set, out + set, bytes, word, 1, never);
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 50)
                    t[m].push_back(ms * 1000.f);
            }
        printf("{\"bench\":\"abort_poll_gate\",\"bytes\":%zu,\"blocks\":%u,\"reps\":%d,"
               "\"sets\":%d,\"gate_delivers\":%s",
               bytes, blocks, reps, SETS, delivered ? "true" : "false");
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
    clocks();
    return 0;
}
