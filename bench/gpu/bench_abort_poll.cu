/* What polling ferry_should_abort() costs a kernel, and that the abort still arrives: a
 * byte-wise kernel (out = in ^ 0x5a, 16 bytes a thread in one vector load and store, 256
 * threads a block: 4 KiB a block, 2,048 blocks over 8 MiB) whose first thread
 * in each block polls once, against the same kernel without the poll, and against a poll of a
 * word in mapped host memory (where ferry kept the word before). The word polled is ferry's
 * own: taken from the kernel arguments of a pipeline's chunk. Each kernel is timed with events
 * on a stream of its own, 1 MiB and 8 MiB, modes interleaved, median of the timed runs after a
 * warm-up; every output is checked first. Then a pipeline whose one chunk runs a grid that
 * fills every SM and repeats the pass until the abort: how long past its deadline the chunk
 * was retired. One JSON line per figure, for scripts/gpu-check.sh. */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "ferry.h"
#include "ferry/device.h"

/* How a kernel polls: not at all; its block's first thread, the answer shared through shared
 * memory and a barrier, before the pass's work (the block waits for the read) or after it (the
 * read was issued before the work, whose time hides its latency); every thread, the read issued
 * before the work and its answer used after it (one read a warp, from L2, no barrier). */
enum {
    POLL_NONE = 0,
    POLL_BLOCK_FIRST,
    POLL_BLOCK_LATE,
    POLL_THREADS_LATE,
    POLL_ONE_COPY,
    POLL_THREADS_FIRST
};
/* POLL_THREADS_FIRST: every thread polls before the pass's work and returns at once when told
 * (no shared memory, no barrier): what include/ferry/device.h advises. */
/* POLL_ONE_COPY: as POLL_BLOCK_FIRST, but every block reads the word's first copy, as if the
 * word had one copy only (what its FERRY_ABORT_REPLICAS copies are worth). */

/* One kernel a mode, as a kernel author's own would be compiled (a mode chosen at run time
 * keeps every mode's code in each and costs the no-poll kernel too). SPIN: the pass repeats
 * until spin_ns has passed (the hang below); without it one pass a block. */
template <int poll, bool SPIN>
__global__ void xor_kernel(ferry_kernel_args_t a, unsigned long long spin_ns, int vecs)
{
    __shared__ int stop;
    unsigned long long t0 = 0, t;
    if (SPIN)
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    const unsigned char *in = (const unsigned char *)a.in;
    unsigned char *out = (unsigned char *)a.out;
    size_t base = (size_t)blockIdx.x * blockDim.x * 16 * vecs;
    for (;;) {
        bool said = false;
        if (poll == POLL_BLOCK_FIRST || poll == POLL_ONE_COPY) {
            if (threadIdx.x == 0)
                stop = poll == POLL_ONE_COPY ? *a.abort_word >= a.seq : ferry_should_abort(&a);
            __syncthreads();
            if (stop)
                return;
        } else if (poll == POLL_BLOCK_LATE && threadIdx.x == 0) {
            said = ferry_should_abort(&a);
        } else if (poll == POLL_THREADS_LATE) {
            said = ferry_should_abort(&a);
        } else if (poll == POLL_THREADS_FIRST && ferry_should_abort(&a)) {
            return;
        }
        for (int k = 0; k < vecs; k++) {
            size_t i = base + ((size_t)k * blockDim.x + threadIdx.x) * 16;
            if (i + 16 <= a.bytes) { /* 16 bytes in one load and one store */
                uint4 v = *(const uint4 *)(in + i);
                v.x ^= 0x5a5a5a5au;
                v.y ^= 0x5a5a5a5au;
                v.z ^= 0x5a5a5a5au;
                v.w ^= 0x5a5a5a5au;
                *(uint4 *)(out + i) = v;
            } else {
                for (size_t j = i; j < a.bytes && j < i + 16; j++)
                    out[j] = in[j] ^ 0x5a;
            }
        }
        if (poll == POLL_BLOCK_LATE) {
            if (threadIdx.x == 0)
                stop = said;
            __syncthreads();
            if (stop)
                return;
        } else if (poll == POLL_THREADS_LATE && said) {
            return;
        }
        if (!SPIN)
            return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > spin_ns)
            return;
        __syncthreads();
    }
}

/* The GPU's clock when a kernel starts, for how far ahead of it abort_after lies. */
__global__ void clock_probe(unsigned long long *out)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *out = t;
}

static unsigned blocks_for(size_t bytes, int vecs = 1)
{
    size_t per = (size_t)256 * 16 * vecs;
    return (unsigned)((bytes + per - 1) / per);
}

/* Launch the kernel of mode @poll, one pass a block. */
static void launch_xor(int poll, const ferry_kernel_args_t &a, int vecs, cudaStream_t s)
{
    unsigned g = blocks_for(a.bytes, vecs);
    switch (poll) {
    case POLL_NONE: xor_kernel<POLL_NONE, false><<<g, 256, 0, s>>>(a, 0, vecs); break;
    case POLL_BLOCK_FIRST: xor_kernel<POLL_BLOCK_FIRST, false><<<g, 256, 0, s>>>(a, 0, vecs); break;
    case POLL_BLOCK_LATE: xor_kernel<POLL_BLOCK_LATE, false><<<g, 256, 0, s>>>(a, 0, vecs); break;
    case POLL_THREADS_LATE:
        xor_kernel<POLL_THREADS_LATE, false><<<g, 256, 0, s>>>(a, 0, vecs);
        break;
    case POLL_THREADS_FIRST:
        xor_kernel<POLL_THREADS_FIRST, false><<<g, 256, 0, s>>>(a, 0, vecs);
        break;
    default: xor_kernel<POLL_ONE_COPY, false><<<g, 256, 0, s>>>(a, 0, vecs); break;
    }
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_abort_poll: %s: %s\n", #call, cudaGetErrorString(e_));          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* The stage: the kernel, polling; the chunk chosen to hang repeats its pass until the abort. */
typedef struct stage_ctx {
    ferry_kernel_args_t seen; /* the last chunk's arguments, for the timing below */
    int have;
    int hang_armed;     /* the next first chunk launched hangs (atomic) */
    unsigned grid_fill; /* blocks that fill the GPU */
} stage_ctx_t;

static int gpu_fn(const ferry_kernel_args_t *a, void *stream, void *user)
{
    stage_ctx_t *c = (stage_ctx_t *)user;
    c->seen = *a; /* one chunk at a time when it is read (after a drain) */
    c->have = 1;
    bool hang = a->chunk == 0 && a->attempt == 0 &&
                __atomic_exchange_n(&c->hang_armed, 0, __ATOMIC_ACQ_REL) != 0;
    unsigned blocks = blocks_for(a->bytes);
    if (hang && blocks < c->grid_fill)
        blocks = c->grid_fill;
    if (hang)
        xor_kernel<POLL_BLOCK_LATE, true>
            <<<blocks, 256, 0, (cudaStream_t)stream>>>(*a, 20000000000ull, 1);
    else
        launch_xor(POLL_BLOCK_LATE, *a, 1, (cudaStream_t)stream);
    return cudaGetLastError() == cudaSuccess ? 0 : FERRY_EKERNEL;
}

static int cpu_fn(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const unsigned char *in = (const unsigned char *)a->in;
    unsigned char *out = (unsigned char *)a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = in[i] ^ 0x5a;
    return 0;
}

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    int *bad = (int *)arg;
    if (r->status != 0)
        __atomic_add_fetch(bad, 1, __ATOMIC_RELAXED);
}

static void fill(unsigned char *p, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (unsigned char)(*s >> 56);
    }
}

/* A chunk's arguments as ferry makes them now: one small batch through the pipeline (its
 * kernel polls too), drained. */
static ferry_kernel_args_t fresh_args(ferry_pipeline_t *p, stage_ctx_t *c, unsigned char *in,
                                      unsigned char *out, int *bad)
{
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = 4096;
    if (ferry_pipeline_submit(p, &b, on_done, bad, NULL) != 0 || ferry_pipeline_drain(p) != 0 ||
        *bad) {
        fprintf(stderr, "bench_abort_poll: a small batch failed: %s\n", ferry_last_error());
        exit(1);
    }
    return c->seen;
}

static bool check(const unsigned char *in, const unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (out[i] != (unsigned char)(in[i] ^ 0x5a))
            return false;
    return true;
}

int main(void)
{
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    rc.backend = "cuda";
    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    if (ferry_runtime_create(&rc, &rt) != 0 || ferry_device_get(rt, 0, &dev) != 0) {
        fprintf(stderr, "bench_abort_poll: no GPU (%s)\n", ferry_last_error());
        return 77;
    }
    ferry_device_props_t props = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &props);
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, xor_kernel<POLL_BLOCK_LATE, true>,
                                                     256, 0));

    stage_ctx_t ctx = {};
    ctx.grid_fill = 2u * (unsigned)props.sms * (unsigned)per_sm;
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "xor-poll";
    st.gpu = gpu_fn;
    st.cpu = cpu_fn;
    st.user = &ctx;

    const size_t big = 8u << 20, per = 8u << 20, nb = 12;
    unsigned char *in = NULL, *out = NULL;
    CK(cudaMallocHost((void **)&in, nb * per));
    CK(cudaMallocHost((void **)&out, nb * per));
    uint64_t seed = 0x5eed;
    fill(in, nb * per, &seed);

    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = &st;
    pc.chunk_bytes = 2u << 20;
    pc.coalesce_bytes = SIZE_MAX; /* a copy per chunk */
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&pc, &p) != 0) {
        fprintf(stderr, "bench_abort_poll: pipeline: %s\n", ferry_last_error());
        return 1;
    }
    int bad = 0;
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = per;
    if (ferry_pipeline_submit(p, &b, on_done, &bad, NULL) != 0 || ferry_pipeline_drain(p) != 0 ||
        bad || !check(in, out, per) || !ctx.have) {
        fprintf(stderr, "bench_abort_poll: the first batch failed or differs\n");
        return 1;
    }

    /* Kernel timing, outside the pipeline, with ferry's word (not raised: 0 < seq). */
    /* Inputs and outputs rotate over SETS buffers (2 x 512 MiB at 8 MiB, ten times the L2), so
     * that a kernel reads memory, not what the previous run left in the L2 (METHOD.md). */
    enum { SETS = 64 };
    unsigned char *d_in, *d_out, *h_word;
    CK(cudaMalloc((void **)&d_in, big * SETS));
    CK(cudaMalloc((void **)&d_out, big * SETS));
    CK(cudaHostAlloc((void **)&h_word, 4096, cudaHostAllocMapped));
    memset(h_word, 0, 4096);
    void *d_word = NULL;
    CK(cudaHostGetDevicePointer(&d_word, h_word, 0));
    std::vector<unsigned char> hin(big), hout(big);
    for (int k = 0; k < SETS; k++) { /* fresh random data in every set */
        fill(hin.data(), big, &seed);
        CK(cudaMemcpy(d_in + (size_t)k * big, hin.data(), big, cudaMemcpyHostToDevice));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* How far ahead of a kernel's start its abort_after lies: half the deadline floor, less
     * the clocks' error (0 where ferry could not map the GPU's clock: every poll reads). */
    unsigned long long *d_t;
    CK(cudaMalloc((void **)&d_t, sizeof(*d_t)));
    std::vector<double> ahead;
    double span_ms = 0;
    for (int k = 0; k < 21; k++) {
        ferry_kernel_args_t f = fresh_args(p, &ctx, in, out, &bad);
        clock_probe<<<1, 1, 0, s>>>(d_t);
        unsigned long long t = 0;
        CK(cudaMemcpyAsync(&t, d_t, sizeof(t), cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        ahead.push_back(f.abort_after == 0 ? 0.0 : ((double)f.abort_after - (double)t) / 1e6);
        span_ms = (double)f.abort_span / 1e6;
    }
    std::sort(ahead.begin(), ahead.end());
    printf("{\"bench\":\"abort_poll\",\"case\":\"gate\",\"gated\":%s,\"abort_span_ms\":%.3f,"
           "\"gate_ahead_ms_min\":%.3f,\"gate_ahead_ms_median\":%.3f}\n",
           ahead[0] > 0 ? "true" : "false", span_ms, ahead[0], ahead[ahead.size() / 2]);
    CK(cudaFree(d_t));
    /* The modes: no poll; ferry's word polled by each block's first thread (before the work,
     * after it), by every thread (after, before); a mapped host word polled by each block's
     * first thread (where the word was before); every block reading the word's first copy.
     * none_again: the same kernel as none, for the spread between two series of one kernel.
     * threads_ungated: threads_first with abort_after 0, so that every poll reads the word (as
     * before ferry mapped the GPU's clock); host_block reads at every poll too.
     * Each round takes fresh arguments from ferry (a small batch), as a stage's kernel gets
     * them at its launch: abort_after then lies ahead, as it does for a chunk on time. */
    enum { M = 10 };
    const char *names[M] = {
        "none",       "block_first", "block_late",    "threads_late",    "host_block",
        "none_again", "one_copy",    "threads_first", "threads_ungated", "block_ungated"};
    const int polls[M] = {POLL_NONE,          POLL_BLOCK_FIRST, POLL_BLOCK_LATE, POLL_THREADS_LATE,
                          POLL_BLOCK_FIRST,   POLL_NONE,        POLL_ONE_COPY,   POLL_THREADS_FIRST,
                          POLL_THREADS_FIRST, POLL_BLOCK_FIRST};
    static_assert(sizeof(polls) / sizeof(polls[0]) == M && sizeof(names) / sizeof(names[0]) == M,
                  "a name and a poll for every mode");
    /* 16 bytes a thread (4 KiB a block) at 1 and 8 MiB; 64 bytes a thread (16 KiB a block). */
    const size_t sizes[3] = {1u << 20, 8u << 20, 8u << 20};
    const int vecs_of[3] = {1, 1, 4};
    const int warm = 50, reps = 1000;
    for (int si = 0; si < 3; si++) {
        size_t n = sizes[si];
        int vecs = vecs_of[si];
        ferry_kernel_args_t a[M];
        ferry_kernel_args_t f = fresh_args(p, &ctx, in, out, &bad);
        for (int m = 0; m < M; m++) {
            a[m] = f;
            a[m].bytes = n;
        }
        a[4].abort_word = (const volatile uint64_t *)d_word;
        for (int m : {4, 8, 9})
            a[m].abort_after = a[m].abort_span = 0;
        /* Correctness first, each mode (on the last set, whose input is in hin). */
        for (int m = 0; m < M; m++) {
            a[m].in = d_in + (size_t)(SETS - 1) * big;
            a[m].out = d_out + (size_t)(SETS - 1) * big;
            CK(cudaMemsetAsync(a[m].out, 0, n, s));
            launch_xor(polls[m], a[m], vecs, s);
            CK(cudaMemcpyAsync(hout.data(), a[m].out, n, cudaMemcpyDeviceToHost, s));
            CK(cudaStreamSynchronize(s));
            if (!check(hin.data(), hout.data(), n)) {
                fprintf(stderr, "bench_abort_poll: %s at %zu bytes: wrong output\n", names[m], n);
                return 1;
            }
        }
        std::vector<double> t[M], pr[M];
        float round[M] = {0};
        for (int r = 0; r < warm + reps; r++) {
            f = fresh_args(p, &ctx, in, out, &bad);
            /* An untimed kernel first (the first after the pipeline's work runs slower), and
             * the modes in an order that turns each round, so that no mode keeps one place. */
            launch_xor(POLL_NONE, a[0], vecs, s);
            for (int k = 0; k < M; k++) {
                int m = (k + r) % M;
                if (m == 4 && r % 10 != 0)
                    continue; /* 2 ms a run: every tenth is enough */
                const volatile uint64_t *word = a[m].abort_word;
                a[m] = f;
                a[m].abort_word = word;
                a[m].bytes = n;
                if (m == 4 || m >= 8)
                    a[m].abort_after = a[m].abort_span = 0;
                size_t set = (size_t)(r * M + m) % SETS;
                a[m].in = d_in + set * big;
                a[m].out = d_out + set * big;
                CK(cudaEventRecord(e0, s));
                launch_xor(polls[m], a[m], vecs, s);
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= warm)
                    t[m].push_back(ms * 1000.0);
                round[m] = ms;
            }
            if (r >= warm) /* each mode against none in the same round */
                for (int m = 1; m < M; m++)
                    if (m != 4)
                        pr[m].push_back((double)round[m] / round[0]);
        }
        double med[M];
        for (int m = 0; m < M; m++) {
            std::sort(t[m].begin(), t[m].end());
            med[m] = t[m][t[m].size() / 2];
        }
        printf("{\"bench\":\"abort_poll\",\"case\":\"kernel_us\",\"bytes\":%zu,\"blocks\":%u,"
               "\"bytes_per_thread\":%d,\"reps\":%d,\"sets\":%d,\"gated\":%s",
               n, blocks_for(n, vecs), 16 * vecs, reps, (int)SETS,
               f.abort_after != 0 ? "true" : "false");
        for (int m = 0; m < M; m++)
            printf(",\"%s_us\":%.2f,\"%s_over_none\":%.4f", names[m], med[m], names[m],
                   med[m] / med[0]);
        for (int m = 1; m < M; m++) /* the median of the per-round ratios to none */
            if (m != 4) {
                std::sort(pr[m].begin(), pr[m].end());
                printf(",\"%s_paired\":%.4f", names[m], pr[m][pr[m].size() / 2]);
            }
        printf("}\n");
    }

    /* The abort, while a grid fills every SM: batch 3's first chunk repeats until stopped. */
    for (size_t i = 0; i < nb; i++) {
        ferry_batch_t bb = FERRY_BATCH_INIT;
        bb.in = in + i * per;
        bb.out = out + i * per;
        bb.bytes = per;
        if (i == 3) {
            ferry_pipeline_drain(p); /* batch 3's first chunk is the next one launched */
            __atomic_store_n(&ctx.hang_armed, 1, __ATOMIC_RELEASE);
        }
        if (ferry_pipeline_submit(p, &bb, on_done, &bad, NULL) != 0) {
            fprintf(stderr, "bench_abort_poll: submit: %s\n", ferry_last_error());
            return 1;
        }
    }
    ferry_pipeline_drain(p);
    ferry_pipeline_stats_t ps = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(p, &ps);
    bool ok = !bad && check(in, out, nb * per);
    printf("{\"bench\":\"abort_poll\",\"case\":\"abort_full_grid\",\"grid_blocks\":%u,"
           "\"deadlines_passed\":%llu,\"overrun_ms\":%.3f,\"gpu_lost\":%d,\"output_ok\":%s}\n",
           ctx.grid_fill, (unsigned long long)ps.deadlines_passed,
           (double)ps.deadline_overrun_ns / 1e6, ps.gpu_lost, ok ? "true" : "false");
    ferry_pipeline_destroy(p);
    ferry_runtime_destroy(rt);
    return ok ? 0 : 1;
}
