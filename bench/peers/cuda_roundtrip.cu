/* The hand-written CUDA baselines that ferry is measured against, in the same device call:
 *
 *   copy       a plain cudaMemcpyAsync loop: per repetition an event, the copy, an event, a
 *              sync; H2D, D2H, and both at once on two streams; registered mmap memory (as
 *              ferry's copy bench), best and median of --reps after --warmup.
 *   roundtrip  the well-scheduled round trip (FACTS.md): one H2D stream, C compute streams, one
 *              D2H stream, a ring of --slots device buffers reused through event dependencies
 *              only, everything issued up front by one thread; registered input and output,
 *              the same scale kernel as ferry's workload, checked against the CPU first.
 *   hog        another process on the link: 64 MiB copies each way on two streams, back to
 *              back, for --seconds (what ferry's link monitor must tell apart from its own
 *              traffic); prints the rate it moved each way when done.
 *
 * One JSON line per measurement on stdout: {"peer":"cuda",...}. Build: nvcc -O2 (CMake does it
 * when FERRY_WITH_CUDA is on). */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <sys/mman.h>
#include <vector>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda_roundtrip: %s: %s (%s)\n", #call, cudaGetErrorName(e_),          \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const float kFactor = 1.0009765625f; /* ferry's scale default, exact in binary */

__global__ void scale(const float *in, float *out, unsigned long long n, float f)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        out[i] = __fmul_rn(in[i], f);
}

static size_t parse_size(const char *s)
{
    char *end = nullptr;
    double v = strtod(s, &end);
    size_t m = 1;
    if (*end == 'K' || *end == 'k')
        m = 1u << 10, end++;
    else if (*end == 'M' || *end == 'm')
        m = 1u << 20, end++;
    else if (*end == 'G' || *end == 'g')
        m = 1u << 30, end++;
    if (end == s || *end != '\0' || !(v >= 0)) {
        fprintf(stderr, "cuda_roundtrip: '%s' is not a size (accepted: a number with K, M or G)\n",
                s);
        exit(2);
    }
    return (size_t)(v * (double)m);
}

static std::vector<size_t> parse_list(const char *s)
{
    std::vector<size_t> v;
    std::string all(s);
    size_t at = 0;
    while (at <= all.size()) {
        size_t comma = all.find(',', at);
        if (comma == std::string::npos)
            comma = all.size();
        v.push_back(parse_size(all.substr(at, comma - at).c_str()));
        at = comma + 1;
    }
    return v;
}

static void *pinned(size_t n)
{
    void *m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cuda_roundtrip: mmap of %zu bytes failed\n", n);
        exit(1);
    }
    memset(m, 0, n);
    CK(cudaHostRegister(m, n, cudaHostRegisterDefault));
    return m;
}

static void unpin(void *m, size_t n)
{
    CK(cudaHostUnregister(m));
    munmap(m, n);
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    unsigned char *b = (unsigned char *)p;
    for (size_t k = 0; k + 4 <= n; k += 4) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t f = ((uint32_t)x & 0x807fffffu) | 0x3f800000u; /* +-[1, 2) */
        memcpy(b + k, &f, 4);
    }
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void bench_copy(const std::vector<size_t> &sizes, int reps, int warm)
{
    for (size_t n : sizes) {
        for (int dir = 0; dir < 3; dir++) { /* 0 h2d, 1 d2h, 2 both */
            int nb = dir == 2 ? 2 : 1;
            void *h[2], *d[2];
            cudaStream_t st[2];
            cudaEvent_t ev[4];
            for (int i = 0; i < nb; i++) {
                h[i] = pinned(n);
                fill_random(h[i], n, 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
                CK(cudaMalloc(&d[i], n));
                CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
                CK(cudaEventCreate(&ev[2 * i]));
                CK(cudaEventCreate(&ev[2 * i + 1]));
            }
            std::vector<double> gbps;
            for (int r = 0; r < warm + reps; r++) {
                for (int i = 0; i < nb; i++) {
                    bool h2d = dir == 0 || (dir == 2 && i == 0);
                    CK(cudaEventRecord(ev[2 * i], st[i]));
                    CK(cudaMemcpyAsync(h2d ? d[i] : h[i], h2d ? h[i] : d[i], n,
                                       h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                       st[i]));
                    CK(cudaEventRecord(ev[2 * i + 1], st[i]));
                }
                double worst = 0;
                for (int i = 0; i < nb; i++) {
                    float ms = 0;
                    CK(cudaStreamSynchronize(st[i]));
                    /* both at once: the span from the earlier start to the later end */
                    CK(cudaEventElapsedTime(&ms, ev[0], ev[2 * i + 1]));
                    worst = std::max(worst, (double)ms);
                }
                if (r >= warm)
                    gbps.push_back((double)n * nb / (worst * 1e6));
            }
            printf("{\"peer\":\"cuda\",\"kind\":\"copy\",\"direction\":\"%s\",\"bytes\":%zu,"
                   "\"best_gbps\":%.3f,\"median_gbps\":%.3f,\"reps\":%d}\n",
                   dir == 0   ? "h2d"
                   : dir == 1 ? "d2h"
                              : "both",
                   n, *std::max_element(gbps.begin(), gbps.end()), median(gbps), reps);
            fflush(stdout);
            for (int i = 0; i < nb; i++) {
                CK(cudaEventDestroy(ev[2 * i]));
                CK(cudaEventDestroy(ev[2 * i + 1]));
                CK(cudaStreamDestroy(st[i]));
                CK(cudaFree(d[i]));
                unpin(h[i], n);
            }
        }
    }
}

struct Ring {
    int slots, ncomp, group;
    bool timing;
    size_t chunk;                   /* a kernel's share; a copy moves group x chunk */
    std::vector<float *> din, dout; /* --device-offset bytes into din_base, dout_base */
    std::vector<float *> din_base, dout_base;
    std::vector<cudaEvent_t> eh, ec, ed;
    std::vector<cudaStream_t> sh, sd, sc;
};

/* Issue @total bytes through the ring, cycling over the @pool-byte buffers; returns seconds. */
static double roundtrip_once(Ring &g, const float *in, float *out, size_t pool, size_t total,
                             int blocks)
{
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(t0, g.sh[0]));
    for (size_t k = 1; k < g.sh.size(); k++)
        CK(cudaStreamWaitEvent(g.sh[k], t0, 0));
    size_t span = g.chunk * (size_t)g.group, nchunks = total / span, per_pool = pool / span;
    size_t ncopy = g.sh.size();
    for (size_t i = 0; i < nchunks; i++) {
        int j = (int)(i % (size_t)g.slots);
        cudaStream_t sc = g.sc[i % g.sc.size()], sh = g.sh[i % ncopy], sd = g.sd[i % ncopy];
        size_t at = (i % per_pool) * (span / 4);
        if (i >= (size_t)g.slots) /* d_in is free once the previous kernel on it has read it */
            CK(cudaStreamWaitEvent(sh, g.ec[j], 0));
        CK(cudaMemcpyAsync(g.din[j], in + at, span, cudaMemcpyHostToDevice, sh));
        CK(cudaEventRecord(g.eh[j], sh));
        CK(cudaStreamWaitEvent(sc, g.eh[j], 0));
        if (i >= (size_t)g.slots) /* d_out is free once its previous D2H is done */
            CK(cudaStreamWaitEvent(sc, g.ed[j], 0));
        for (int k = 0; k < g.group; k++) {
            size_t off = (size_t)k * (g.chunk / 4);
            scale<<<blocks, 256, 0, sc>>>(g.din[j] + off, g.dout[j] + off, g.chunk / 4, kFactor);
            CK(cudaGetLastError());
        }
        CK(cudaEventRecord(g.ec[j], sc));
        CK(cudaStreamWaitEvent(sd, g.ec[j], 0));
        CK(cudaMemcpyAsync(out + at, g.dout[j], span, cudaMemcpyDeviceToHost, sd));
        CK(cudaEventRecord(g.ed[j], sd));
    }
    /* the end: every D2H stream's last copy */
    for (size_t k = 1; k < ncopy; k++) {
        CK(cudaEventRecord(g.ed[0], g.sd[k]));
        CK(cudaStreamWaitEvent(g.sd[0], g.ed[0], 0));
    }
    CK(cudaEventRecord(t1, g.sd[0]));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    return ms / 1e3;
}

static void ring_create(Ring &g, size_t chunk, size_t nc, int slots, bool timing, size_t ncopy,
                        int group, size_t dev_offset)
{
    g.slots = slots;
    g.chunk = chunk;
    g.ncomp = (int)nc;
    g.group = group;
    g.timing = timing;
    g.sh.resize(ncopy), g.sd.resize(ncopy), g.sc.resize(nc);
    for (auto *v : {&g.sh, &g.sd, &g.sc})
        for (auto &s : *v)
            CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g.din.resize(slots), g.dout.resize(slots);
    g.din_base.resize(slots), g.dout_base.resize(slots);
    g.eh.resize(slots), g.ec.resize(slots), g.ed.resize(slots);
    unsigned flags = timing ? cudaEventDefault : cudaEventDisableTiming;
    for (int j = 0; j < slots; j++) {
        CK(cudaMalloc(&g.din_base[j], chunk * (size_t)group + 4096));
        CK(cudaMalloc(&g.dout_base[j], chunk * (size_t)group + 4096));
        g.din[j] = (float *)((unsigned char *)g.din_base[j] + dev_offset);
        g.dout[j] = (float *)((unsigned char *)g.dout_base[j] + dev_offset);
        CK(cudaEventCreateWithFlags(&g.eh[j], flags));
        CK(cudaEventCreateWithFlags(&g.ec[j], flags));
        CK(cudaEventCreateWithFlags(&g.ed[j], flags));
    }
}

static void ring_destroy(Ring &g)
{
    for (int j = 0; j < g.slots; j++) {
        CK(cudaFree(g.din_base[j]));
        CK(cudaFree(g.dout_base[j]));
        CK(cudaEventDestroy(g.eh[j]));
        CK(cudaEventDestroy(g.ec[j]));
        CK(cudaEventDestroy(g.ed[j]));
    }
    for (auto *v : {&g.sh, &g.sd, &g.sc})
        for (auto &s : *v)
            CK(cudaStreamDestroy(s));
}

/* Every configuration of one chunk size and compute-stream count runs on the same host buffers,
 * its repetitions interleaved with the others', so host memory placement and drift touch them
 * all alike. */
static void bench_roundtrip(const std::vector<size_t> &chunks, const std::vector<size_t> &ncomps,
                            const std::vector<size_t> &slot_list,
                            const std::vector<size_t> &timing_list,
                            const std::vector<size_t> &copy_list,
                            const std::vector<size_t> &group_list, size_t total, int reps,
                            size_t host_offset, size_t dev_offset)
{
    size_t pool = std::min(total, (size_t)1 << 30);
    /* --host-offset: input and output start that many bytes past a page boundary, as a
     * malloc'd buffer does (glibc's large blocks start 16 bytes into a page). */
    unsigned char *in_base = (unsigned char *)pinned(pool + 4096),
                  *out_base = (unsigned char *)pinned(pool + 4096);
    float *in = (float *)(in_base + host_offset), *out = (float *)(out_base + host_offset);
    fill_random(in, pool, 88172645463325252ull);
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (size_t chunk : chunks) {
        for (size_t nc : ncomps) {
            std::vector<Ring> rings;
            size_t span_max = chunk * *std::max_element(group_list.begin(), group_list.end());
            for (size_t sl : slot_list)
                for (size_t t : timing_list)
                    for (size_t nco : copy_list)
                        for (size_t gr : group_list) {
                            rings.emplace_back();
                            ring_create(rings.back(), chunk, nc, (int)sl, t != 0, nco, (int)gr,
                                        dev_offset);
                        }
            /* one length for every grouping: a multiple of the largest group's copy */
            size_t tot = total - total % span_max, use_pool = pool - pool % span_max;
            std::vector<std::vector<double>> gbps(rings.size());
            std::vector<bool> ok(rings.size(), true);
            for (int r = 0; r <= reps; r++) /* the first is a warm-up */
                for (size_t i = 0; i < rings.size(); i++) {
                    if (r == 0)
                        memset(out, 0, use_pool);
                    double sec = roundtrip_once(rings[i], in, out, use_pool, tot, sms * 8);
                    if (r == 0) /* each configuration's output is checked once */
                        for (size_t k = 0; k < use_pool / 4 && ok[i]; k++)
                            ok[i] = out[k] == in[k] * kFactor;
                    else
                        gbps[i].push_back((double)tot / sec / 1e9);
                }
            for (size_t i = 0; i < rings.size(); i++) {
                printf("{\"peer\":\"cuda\",\"kind\":\"roundtrip\",\"chunk_bytes\":%zu,"
                       "\"compute_streams\":%zu,\"copy_streams\":%zu,\"copy_group\":%d,"
                       "\"slots\":%d,\"timing_events\":%s,\"bytes\":%zu,\"host_offset\":%zu,"
                       "\"device_offset\":%zu,"
                       "\"gbps_each_way\":%.3f,\"best_gbps\":%.3f,\"reps\":%d,\"verified\":%s}\n",
                       chunk, nc, rings[i].sh.size(), rings[i].group, rings[i].slots,
                       rings[i].timing ? "true" : "false", tot, host_offset, dev_offset,
                       median(gbps[i]), *std::max_element(gbps[i].begin(), gbps[i].end()), reps,
                       ok[i] ? "true" : "false");
                ring_destroy(rings[i]);
            }
            fflush(stdout);
        }
    }
    unpin(in_base, pool + 4096);
    unpin(out_base, pool + 4096);
}

static void bench_hog(double seconds)
{
    const size_t n = (size_t)64 << 20;
    void *h[2] = {pinned(n), pinned(n)};
    void *d[2];
    cudaStream_t st[2];
    for (int k = 0; k < 2; k++) {
        CK(cudaMalloc(&d[k], n));
        CK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
    }
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaEventRecord(t0, st[0]));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    unsigned long long rounds = 0;
    for (;;) {
        for (int r = 0; r < 8; r++, rounds++) {
            CK(cudaMemcpyAsync(d[0], h[0], n, cudaMemcpyHostToDevice, st[0]));
            CK(cudaMemcpyAsync(h[1], d[1], n, cudaMemcpyDeviceToHost, st[1]));
        }
        CK(cudaStreamSynchronize(st[0]));
        CK(cudaStreamSynchronize(st[1]));
        clock_gettime(CLOCK_MONOTONIC, &b);
        if ((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9 >= seconds)
            break;
    }
    double el = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("{\"peer\":\"cuda\",\"kind\":\"hog\",\"seconds\":%.3f,\"gbps_each_way\":%.2f}\n", el,
           (double)rounds * (double)n / el / 1e9);
    for (int k = 0; k < 2; k++) {
        CK(cudaStreamDestroy(st[k]));
        CK(cudaFree(d[k]));
        unpin(h[k], n);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: cuda_roundtrip copy [--sizes LIST] [--reps N] [--warmup N]\n"
                    "       cuda_roundtrip roundtrip [--chunks LIST] [--compute-streams LIST] "
                    "[--slots LIST] [--timing-events 0,1] [--copy-streams LIST] [--group LIST] "
                    "[--host-offset N] [--device-offset N] "
                    "[--bytes SIZE] [--reps N]\n"
                    "       cuda_roundtrip hog [--seconds S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    std::string mode = argv[1];
    std::vector<size_t> sizes = parse_list("4K,64K,1M,4M,16M,64M,256M,1G");
    std::vector<size_t> chunks = parse_list("256K,1M,4M,16M"), ncomps = parse_list("1,2");
    std::vector<size_t> slots = parse_list("4"), timing = {0}, copies = {1}, groups = {1};
    int reps = 0, warm = 3;
    size_t total = (size_t)4 << 30, host_offset = 0, dev_offset = 0;
    double seconds = 10;
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (a == "--sizes")
            sizes = parse_list(v);
        else if (a == "--chunks")
            chunks = parse_list(v);
        else if (a == "--compute-streams")
            ncomps = parse_list(v);
        else if (a == "--slots")
            slots = parse_list(v);
        else if (a == "--timing-events") /* 1: the ring's events record times, as ferry's do */
            timing = parse_list(v);
        else if (a == "--copy-streams") /* streams per copy direction, chunks round-robin */
            copies = parse_list(v);
        else if (a == "--group") /* chunks per copy: one copy each way, a kernel per chunk */
            groups = parse_list(v);
        else if (a == "--bytes")
            total = parse_size(v);
        else if (a == "--host-offset") /* bytes past a page boundary for input and output */
            host_offset = parse_size(v);
        else if (a == "--device-offset") /* bytes past the device buffers' start */
            dev_offset = parse_size(v);
        else if (a == "--reps")
            reps = (int)parse_size(v);
        else if (a == "--warmup")
            warm = (int)parse_size(v);
        else if (a == "--seconds" && (seconds = atof(v)) > 0 && seconds <= 600)
            continue;
        else
            usage();
    }
    for (size_t c : chunks)
        if (c < 4 || c % 4 != 0) {
            fprintf(stderr, "cuda_roundtrip: chunk %zu (accepted: a positive multiple of 4)\n", c);
            return 2;
        }
    for (size_t k : copies)
        if (k < 1 || k > 8) {
            fprintf(stderr, "cuda_roundtrip: --copy-streams %zu (accepted: 1 to 8)\n", k);
            return 2;
        }
    for (size_t k : groups)
        if (k < 1 || k > 16) {
            fprintf(stderr, "cuda_roundtrip: --group %zu (accepted: 1 to 16)\n", k);
            return 2;
        }
    for (size_t sl : slots)
        if (sl < 1 || sl > 64) {
            fprintf(stderr, "cuda_roundtrip: --slots %zu (accepted: 1 to 64)\n", sl);
            return 2;
        }
    if (host_offset % 4 != 0 || host_offset >= 4096 || dev_offset % 4 != 0 || dev_offset >= 4096) {
        fprintf(stderr,
                "cuda_roundtrip: --host-offset %zu, --device-offset %zu (accepted: multiples of 4 "
                "below 4096)\n",
                host_offset, dev_offset);
        return 2;
    }
    if (mode == "copy")
        bench_copy(sizes, reps ? reps : 10, warm);
    else if (mode == "roundtrip")
        bench_roundtrip(chunks, ncomps, slots, timing, copies, groups, total, reps ? reps : 5,
                        host_offset, dev_offset);
    else if (mode == "hog")
        bench_hog(seconds);
    else
        usage();
    return 0;
}
