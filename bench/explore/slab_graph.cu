// A gathered slab's chain of operations (issue 20: "a CUDA graph for the slab's chain"), issued
// two ways over the same buffers: as ferry issues it today (one cudaMemcpyBatchAsync of the
// slab's pieces in, an event, a wait, the kernel, an event, a wait, one batch copy out, the end
// event: 8 calls on 3 streams), and as a CUDA graph (the pieces' copy nodes, the kernel node and
// the copy-out nodes of one graph; an instance per slot of the pipeline's depth, its nodes' host
// addresses and kernel arguments set for each slab with cudaGraphExec*SetParams, then
// cudaGraphLaunch and the end event; each graph kept while its instance lives: an update names
// its nodes, which must remain in the graph the instance was made from: on an H100 on 2026-12-07
// the first update after the graph was destroyed was refused, "invalid argument"). Per PIECES
// count: the host time of issuing a slab (CLOCK_THREAD_CPUTIME_ID around the calls, median and p90
// over SLABS slabs) and GB/s each way over the whole run (events), DEPTH slabs in flight; every
// slab's output checked before any time counts. Stand-alone (no ferry):
//   nvcc -O2 -arch=sm_90 -o slab_graph bench/explore/slab_graph.cu && ./slab_graph
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "cuda_check.h"

static const size_t SLAB = 8u << 20;      // a slab, as FERRY_GATHER_BYTES=8M
static const size_t HOST = 512u << 20;    // host buffers the slabs' pieces come from and go to
static const int DEPTH = 8, SLABS = 1200; // slabs in flight; slabs a run

__global__ void scale(const float *in, float *out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i] * 2.0f + 1.0f;
}

static double cpu_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

struct graph_slot {
    cudaGraph_t graph; // kept while exec lives: its nodes are what the updates name
    cudaGraphExec_t exec;
    std::vector<cudaGraphNode_t> in, out;
    cudaGraphNode_t k;
};

// Slab @i's pieces: @np pieces of SLAB / np bytes, each from its own place in the host buffer
// (pieces of one slab are not adjacent: their copies cannot merge), the same place out.
static size_t piece_at(int i, size_t j, size_t np)
{
    size_t pz = SLAB / np, slots = HOST / pz;
    return ((size_t)i * np + j * 7 + 3) % slots * pz;
}

int main(void)
{
    unsigned char *h_in, *h_out, *d_in, *d_out;
    CK(cudaHostAlloc((void **)&h_in, HOST, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&h_out, HOST, cudaHostAllocDefault));
    CK(cudaMalloc((void **)&d_in, DEPTH * SLAB));
    CK(cudaMalloc((void **)&d_out, DEPTH * SLAB));
    srand((unsigned)time(NULL));
    for (size_t i = 0; i < HOST / sizeof(float); i++)
        ((float *)h_in)[i] = (float)(rand() % 1000);
    cudaStream_t sh, sc, sd, sg[DEPTH];
    CK(cudaStreamCreateWithFlags(&sh, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&sd, cudaStreamNonBlocking));
    for (int s = 0; s < DEPTH; s++)
        CK(cudaStreamCreateWithFlags(&sg[s], cudaStreamNonBlocking));
    cudaEvent_t e_h[DEPTH], e_c[DEPTH], e_end[DEPTH], t0, t1;
    for (int s = 0; s < DEPTH; s++) {
        CK(cudaEventCreateWithFlags(&e_h[s], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&e_c[s], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&e_end[s], cudaEventDisableTiming));
    }
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    size_t n = SLAB / sizeof(float);
    int grid = 132 * 4, block = 512;
    printf("%-6s %6s %9s %9s %9s %8s %s\n", "method", "pieces", "host us", "p90 us", "GB/s",
           "calls", "ok");
    for (size_t np : {1, 8, 32, 128}) {
        size_t pz = SLAB / np;
        for (int m = 0; m < 2; m++) {
            std::vector<graph_slot> g(m == 1 ? DEPTH : 0);
            for (int s = 0; m == 1 && s < DEPTH; s++) {
                cudaGraph_t gr;
                CK(cudaGraphCreate(&gr, 0));
                g[s].in.resize(np);
                g[s].out.resize(np);
                for (size_t j = 0; j < np; j++)
                    CK(cudaGraphAddMemcpyNode1D(&g[s].in[j], gr, NULL, 0, d_in + s * SLAB + j * pz,
                                                h_in + piece_at(0, j, np), pz, cudaMemcpyDefault));
                unsigned char *a = d_in + s * SLAB, *b = d_out + s * SLAB;
                void *args[] = {&a, &b, &n};
                cudaKernelNodeParams kp = {};
                kp.func = (void *)scale;
                kp.gridDim = dim3(grid);
                kp.blockDim = dim3(block);
                kp.kernelParams = args;
                CK(cudaGraphAddKernelNode(&g[s].k, gr, g[s].in.data(), np, &kp));
                for (size_t j = 0; j < np; j++)
                    CK(cudaGraphAddMemcpyNode1D(&g[s].out[j], gr, &g[s].k, 1,
                                                h_out + piece_at(0, j, np),
                                                d_out + s * SLAB + j * pz, pz, cudaMemcpyDefault));
                CK(cudaGraphInstantiate(&g[s].exec, gr, 0));
                g[s].graph = gr;
            }
            if (m == 1) { // an update the driver refuses ends the graph's row, not the program
                cudaError_t e = cudaGraphExecMemcpyNodeSetParams1D(
                    g[0].exec, g[0].in[0], d_in, h_in + piece_at(0, 0, np), pz, cudaMemcpyDefault);
                if (e != cudaSuccess) {
                    printf("%-6s %6zu cudaGraphExecMemcpyNodeSetParams1D: %s\n", "graph", np,
                           cudaGetErrorString(e));
                    for (int s = 0; s < DEPTH; s++) {
                        CK(cudaGraphExecDestroy(g[s].exec));
                        CK(cudaGraphDestroy(g[s].graph));
                    }
                    continue;
                }
            }
            std::vector<void *> src(np), dst(np);
            std::vector<size_t> len(np, pz);
            cudaMemcpyAttributes at;
            memset(&at, 0, sizeof(at));
            at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
            std::vector<double> us;
            int calls = 0;
            for (int pass = 0; pass < 2; pass++) { // a warm-up pass, then the measured one
                us.clear();
                memset(h_out, 0, HOST);
                CK(cudaDeviceSynchronize());
                CK(cudaEventRecord(t0, sh));
                for (int i = 0; i < SLABS; i++) {
                    int s = i % DEPTH;
                    if (i >= DEPTH)
                        CK(cudaEventSynchronize(e_end[s]));
                    unsigned char *a = d_in + s * SLAB, *b = d_out + s * SLAB;
                    double c0 = cpu_us();
                    if (m == 0) {
                        if (i == 0)
                            CK(cudaStreamWaitEvent(sh, t0, 0));
                        for (size_t j = 0; j < np; j++)
                            src[j] = h_in + piece_at(i, j, np), dst[j] = a + j * pz;
                        size_t idx = 0;
                        CK(cudaMemcpyBatchAsync(dst.data(), src.data(), len.data(), np, &at, &idx,
                                                1, sh));
                        CK(cudaEventRecord(e_h[s], sh));
                        CK(cudaStreamWaitEvent(sc, e_h[s], 0));
                        scale<<<grid, block, 0, sc>>>((const float *)a, (float *)b, n);
                        CK(cudaGetLastError());
                        CK(cudaEventRecord(e_c[s], sc));
                        CK(cudaStreamWaitEvent(sd, e_c[s], 0));
                        for (size_t j = 0; j < np; j++)
                            src[j] = b + j * pz, dst[j] = h_out + piece_at(i, j, np);
                        CK(cudaMemcpyBatchAsync(dst.data(), src.data(), len.data(), np, &at, &idx,
                                                1, sd));
                        CK(cudaEventRecord(e_end[s], sd));
                        calls = 8;
                    } else {
                        for (size_t j = 0; j < np; j++) {
                            CK(cudaGraphExecMemcpyNodeSetParams1D(g[s].exec, g[s].in[j], a + j * pz,
                                                                  h_in + piece_at(i, j, np), pz,
                                                                  cudaMemcpyDefault));
                            CK(cudaGraphExecMemcpyNodeSetParams1D(
                                g[s].exec, g[s].out[j], h_out + piece_at(i, j, np), b + j * pz, pz,
                                cudaMemcpyDefault));
                        }
                        void *args[] = {&a, &b, &n}; // as a stage's table would change
                        cudaKernelNodeParams kp = {};
                        kp.func = (void *)scale;
                        kp.gridDim = dim3(grid);
                        kp.blockDim = dim3(block);
                        kp.kernelParams = args;
                        CK(cudaGraphExecKernelNodeSetParams(g[s].exec, g[s].k, &kp));
                        if (i == 0)
                            CK(cudaStreamWaitEvent(sg[s], t0, 0));
                        CK(cudaGraphLaunch(g[s].exec, sg[s]));
                        CK(cudaEventRecord(e_end[s], sg[s]));
                        calls = (int)(2 * np + 3);
                    }
                    us.push_back(cpu_us() - c0);
                }
                for (int s = 0; s < DEPTH; s++)
                    CK(cudaStreamWaitEvent(sd, e_end[s], 0));
                CK(cudaEventRecord(t1, sd));
                CK(cudaEventSynchronize(t1));
            }
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, t0, t1));
            // the last slab written at each piece's place holds f(input): check every place
            // the last SLABS slabs wrote (each place's input never changes)
            bool ok = true;
            for (int i = 0; i < SLABS && ok; i++)
                for (size_t j = 0; j < np && ok; j++) {
                    const float *x = (const float *)(h_in + piece_at(i, j, np)),
                                *y = (const float *)(h_out + piece_at(i, j, np));
                    for (size_t q = 0; q < pz / sizeof(float); q += 97)
                        ok = ok && y[q] == x[q] * 2.0f + 1.0f;
                }
            std::sort(us.begin(), us.end());
            printf("%-6s %6zu %9.2f %9.2f %9.2f %8d %s\n", m ? "graph" : "direct", np,
                   us[us.size() / 2], us[us.size() * 9 / 10],
                   (double)SLAB * SLABS / (ms / 1e3) / 1e9, calls, ok ? "yes" : "NO");
            fflush(stdout);
            for (int s = 0; m == 1 && s < DEPTH; s++) {
                CK(cudaGraphExecDestroy(g[s].exec));
                CK(cudaGraphDestroy(g[s].graph));
            }
        }
    }
    return 0;
}
