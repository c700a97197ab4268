// Small pieces between scattered pinned host memory and one contiguous device buffer (a slab of
// gathered batches), each way, four ways: one contiguous copy of the same bytes (the baseline),
// a cudaMemcpyAsync per piece, one cudaMemcpyBatchAsync for all pieces, and a copy kernel that
// reads or writes the mapped host memory itself. Per piece size: GB/s on the device's clock
// (events, warm-up, median of REPS runs of SLABS slabs) and the host time of the calls per slab.
// Every method's bytes are checked before its time counts. Stand-alone (no ferry):
//   nvcc -O2 -o small_copies bench/explore/small_copies.cu && ./small_copies
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "cuda_check.h"

static const size_t SLAB = 8u << 20;
static const int SLABS = 32, REPS = 7;

struct piece {
    unsigned long long host, dev, bytes; // host: a device pointer to the mapped host memory
};

// One block per piece, H2D (to_dev) or D2H, 16-byte words.
__global__ void copy_pieces(const piece *p, bool to_dev, unsigned char *dbase)
{
    const piece q = p[blockIdx.x];
    uint4 *dst = (uint4 *)(to_dev ? dbase + q.dev : (unsigned char *)q.host);
    const uint4 *src = (const uint4 *)(to_dev ? (unsigned char *)q.host : dbase + q.dev);
    for (unsigned long long i = threadIdx.x; i < q.bytes / 16; i += blockDim.x)
        dst[i] = src[i];
}

static double now_s()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main()
{
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("# %s, %d SMs; slab %zu MiB, %d slabs a run, median of %d runs\n", prop.name,
           prop.multiProcessorCount, SLAB >> 20, SLABS, REPS);
    const size_t sizes[] = {4096, 16384, 65536, 262144, 1048576};
    // Host: pieces at twice their size apart (scattered); registered, mapped.
    size_t hbytes = 2 * SLAB * SLABS;
    unsigned char *h = (unsigned char *)aligned_alloc(4096, hbytes);
    memset(h, 0, hbytes);
    CK(cudaHostRegister(h, hbytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    unsigned char *hd = nullptr;
    CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
    unsigned char *d = nullptr, *check = (unsigned char *)malloc(SLAB * SLABS);
    CK(cudaMalloc(&d, SLAB * SLABS));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    piece *dpieces = nullptr;
    size_t maxp = SLAB / 4096 * SLABS;
    CK(cudaMalloc(&dpieces, maxp * sizeof(piece)));
    printf("%-4s %8s %-6s %9s %9s %10s\n", "dir", "piece", "method", "GB/s", "of one",
           "host us/slab");
    const char *names[] = {"one", "each", "batch", "kernel"};
    for (int dir = 0; dir < 2; dir++) { // 0 H2D, 1 D2H
        for (size_t pz : sizes) {
            size_t np = SLAB / pz;
            std::vector<void *> dsts(np * SLABS), srcs(np * SLABS);
            std::vector<size_t> lens(np * SLABS, pz);
            std::vector<piece> hp(np * SLABS);
            for (size_t s = 0; s < (size_t)SLABS; s++)
                for (size_t i = 0; i < np; i++) {
                    size_t k = s * np + i;
                    unsigned char *hp_ = h + s * 2 * SLAB + i * 2 * pz;
                    unsigned char *dp_ = d + s * SLAB + i * pz;
                    dsts[k] = dir == 0 ? (void *)dp_ : (void *)hp_;
                    srcs[k] = dir == 0 ? (void *)hp_ : (void *)dp_;
                    hp[k] = {(unsigned long long)(hd + (hp_ - h)), (unsigned long long)(dp_ - d),
                             pz};
                }
            CK(cudaMemcpy(dpieces, hp.data(), hp.size() * sizeof(piece), cudaMemcpyHostToDevice));
            double one_gbps = 0;
            for (int m = 0; m < 4; m++) {
                std::vector<double> gb, hus;
                for (int r = 0; r < REPS + 1; r++) {
                    // fresh bytes at the source, the destination cleared
                    unsigned seed = 1469598103u + r * 7919u + m * 104729u + (unsigned)pz;
                    if (dir == 0) {
                        for (size_t k = 0; k < np * SLABS; k++)
                            memset(srcs[k], (int)((seed + k) & 0xff), pz);
                        CK(cudaMemset(d, 0, SLAB * SLABS));
                    } else {
                        for (size_t k = 0; k < np * SLABS; k++)
                            memset(dsts[k], 0, pz);
                        std::vector<unsigned char> fill(SLAB * SLABS);
                        for (size_t k = 0; k < np * SLABS; k++)
                            memset(fill.data() + k * pz, (int)((seed + k) & 0xff), pz);
                        CK(cudaMemcpy(d, fill.data(), fill.size(), cudaMemcpyHostToDevice));
                    }
                    CK(cudaDeviceSynchronize());
                    double t0 = now_s();
                    CK(cudaEventRecord(e0, st));
                    for (int s = 0; s < SLABS; s++) {
                        size_t k0 = (size_t)s * np;
                        if (m == 0) { // the same bytes, contiguous on both sides: the baseline
                            unsigned char *hs = h + s * 2 * SLAB, *ds = d + s * SLAB;
                            CK(cudaMemcpyAsync(dir == 0 ? (void *)ds : (void *)hs,
                                               dir == 0 ? (void *)hs : (void *)ds, SLAB,
                                               cudaMemcpyDefault, st));
                        } else if (m == 1) {
                            for (size_t i = 0; i < np; i++)
                                CK(cudaMemcpyAsync(dsts[k0 + i], srcs[k0 + i], pz,
                                                   cudaMemcpyDefault, st));
                        } else if (m == 2) {
                            cudaMemcpyAttributes a;
                            memset(&a, 0, sizeof(a));
                            a.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
                            size_t idx = 0;
                            CK(cudaMemcpyBatchAsync(&dsts[k0], &srcs[k0], &lens[k0], np, &a, &idx,
                                                    1, st));
                        } else {
                            copy_pieces<<<(unsigned)np, 512, 0, st>>>(dpieces + k0, dir == 0, d);
                            CK(cudaGetLastError());
                        }
                    }
                    double t1 = now_s();
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    float ms = 0;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    if (m != 0) { // check every byte where it landed
                        bool ok = true;
                        if (dir == 0) {
                            CK(cudaMemcpy(check, d, SLAB * SLABS, cudaMemcpyDeviceToHost));
                            for (size_t k = 0; ok && k < np * SLABS; k++)
                                ok = check[k * pz] == (unsigned char)((seed + k) & 0xff) &&
                                     check[k * pz + pz - 1] == (unsigned char)((seed + k) & 0xff);
                        } else {
                            for (size_t k = 0; ok && k < np * SLABS; k++)
                                ok = ((unsigned char *)dsts[k])[0] ==
                                         (unsigned char)((seed + k) & 0xff) &&
                                     ((unsigned char *)dsts[k])[pz - 1] ==
                                         (unsigned char)((seed + k) & 0xff);
                        }
                        if (!ok) {
                            printf("%s %zu %s: WRONG BYTES\n", dir ? "D2H" : "H2D", pz, names[m]);
                            return 1;
                        }
                    }
                    if (r == 0)
                        continue; // warm-up
                    gb.push_back(SLAB * (double)SLABS / (ms * 1e-3) / 1e9);
                    hus.push_back((t1 - t0) / SLABS * 1e6);
                }
                std::sort(gb.begin(), gb.end());
                std::sort(hus.begin(), hus.end());
                double med = gb[gb.size() / 2];
                if (m == 0)
                    one_gbps = med;
                printf("%-4s %8zu %-6s %9.2f %8.1f%% %10.1f\n", dir ? "D2H" : "H2D", pz, names[m],
                       med, 100 * med / one_gbps, hus[hus.size() / 2]);
                fflush(stdout);
            }
        }
    }
    return 0;
}
