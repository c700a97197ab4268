/* How much memory traffic the GPU host serves to DMA and CPU together (issue 17's host model):
 * the GPU copies 8 MiB chunks back to back between pinned host buffers and the device, H2D on one
 * stream and D2H on another (the round trip), while N CPU threads each stream over a buffer of
 * their own (read: a sum of 64-bit words; write: memset; copy: memcpy). For each mode and N: the
 * DMA's GB/s each way from CUDA events, the CPU's GB/s over the same window, and the total
 * traffic (H2D reads + D2H writes + the CPU's bytes, a copy's twice); the median of --reps windows
 * after a warm-up window. One JSON line per point on stdout, a table on stderr at the end.
 * Built with cudart when ferry has its CUDA backend; `--dma none` (the CPU alone) runs anywhere. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef HOST_DMA_CONTEND_CUDA
#include <cuda_runtime.h>
#endif

#include "hostbench.h"

#define PROG       "host_dma_contend"
#define MAX_POINTS 64
#define MAX_REPS   99
#define CPU_CHUNK  ((size_t)16 << 20) /* a worker counts its bytes after each chunk */
#define DMA_BATCH  8                  /* copies per stream between two batch events */
#define DMA_DEPTH  8                  /* batches in flight per stream: ~10 ms at 50 GB/s */

enum { DMA_BOTH, DMA_H2D, DMA_D2H, DMA_NONE };
static const char *const dma_name[] = {"both", "h2d", "d2h", "none"};

struct args {
    int threads[MAX_POINTS], nthreads;
    int modes[HOSTBENCH_KINDS], nmodes;
    double seconds, warmup;
    int reps, dma, device;
    size_t cpu_bytes, dma_bytes, copy_bytes;
};

/* ---- arguments ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options]\n"
            "  --threads LIST   CPU threads per point, 0 to 1024 (default 0,1,2,4,8,12,16 up to\n"
            "                   the CPUs, and the CPU count itself when above 16)\n"
            "  --modes LIST     the CPU's work: read, write, copy (default read,write,copy)\n"
            "  --seconds S      one timed window, 0 < S <= 600 (default 1)\n"
            "  --warmup S       the untimed window before them, 0 <= S <= 600 (default 0.5)\n"
            "  --reps N         timed windows per point, 1 to %d; the median is kept (default 3)\n"
            "  --cpu-bytes SIZE each thread's own buffer, 64K to 64G (default 1G; K, M, G)\n"
            "  --dma-bytes SIZE each direction's pinned host buffer, 8M to 64G (default 2G)\n"
            "  --copy-bytes SIZE one DMA copy, 64K to 1G, at most --dma-bytes (default 8M)\n"
            "  --dma WHICH      both, h2d, d2h, or none: the CPU alone, no GPU (default both)\n"
            "  --device N       the CUDA device, 0 to 63 (default 0)\n"
            "  --help           this text\n"
            "Output: one JSON line per (mode, threads) on stdout; a table on stderr.\n",
            MAX_REPS);
}

static void bad(const char *opt, const char *val, const char *accepted)
{
    fprintf(stderr, PROG ": %s '%s' is not accepted (accepted: %s)\n", opt, val, accepted);
    exit(2);
}

static double parse_seconds(const char *opt, const char *s, double lo, bool lo_open)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno || !isfinite(v) || v > 600 || v < lo ||
        (lo_open && v == lo))
        bad(opt, s, lo_open ? "seconds, 0 < S <= 600" : "seconds, 0 <= S <= 600");
    return v;
}

static long parse_int(const char *opt, const char *s, long lo, long hi, const char *accepted)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno || v < lo || v > hi)
        bad(opt, s, accepted);
    return v;
}

static size_t parse_size(const char *opt, const char *s, size_t lo, size_t hi, const char *accepted)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    double m = 1;
    if (end != s && (*end == 'K' || *end == 'k'))
        m = 1024.0, end++;
    else if (end != s && (*end == 'M' || *end == 'm'))
        m = 1024.0 * 1024, end++;
    else if (end != s && (*end == 'G' || *end == 'g'))
        m = 1024.0 * 1024 * 1024, end++;
    if (end == s || *end != '\0' || errno || !isfinite(v) || v * m < (double)lo ||
        v * m > (double)hi)
        bad(opt, s, accepted);
    return (size_t)(v * m) / 4096 * 4096;
}

static void parse_threads(struct args *a, const char *s)
{
    char buf[512];
    if (strlen(s) >= sizeof buf)
        bad("--threads", s, "a comma-separated list of at most 64 counts, 0 to 1024");
    strcpy(buf, s);
    a->nthreads = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (a->nthreads == MAX_POINTS)
            bad("--threads", s, "a comma-separated list of at most 64 counts, 0 to 1024");
        a->threads[a->nthreads++] =
            (int)parse_int("--threads", t, 0, 1024, "a comma-separated list of counts, 0 to 1024");
    }
    if (a->nthreads == 0 || s[strlen(s) - 1] == ',' || s[0] == ',' || strstr(s, ",,"))
        bad("--threads", s, "a comma-separated list of counts, 0 to 1024");
}

static void parse_modes(struct args *a, const char *s)
{
    const char *accepted = "a comma-separated list of read, write, copy, each at most once";
    char buf[64];
    if (strlen(s) >= sizeof buf || !*s || s[strlen(s) - 1] == ',' || s[0] == ',')
        bad("--modes", s, accepted);
    strcpy(buf, s);
    a->nmodes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < HOSTBENCH_KINDS && strcmp(t, hostbench_kind_name[k]) != 0)
            k++;
        for (int i = 0; i < a->nmodes; i++)
            if (a->modes[i] == k)
                k = HOSTBENCH_KINDS;
        if (k == HOSTBENCH_KINDS || strstr(s, ",,"))
            bad("--modes", s, accepted);
        a->modes[a->nmodes++] = k;
    }
}

static void default_threads(struct args *a, int cpus)
{
    static const int list[] = {0, 1, 2, 4, 8, 12, 16};
    a->nthreads = 0;
    for (size_t i = 0; i < sizeof list / sizeof *list; i++)
        if (list[i] <= cpus)
            a->threads[a->nthreads++] = list[i];
    if (cpus > 16)
        a->threads[a->nthreads++] = cpus;
}

/* The option's value: the next argument, or an error naming the option. */
static const char *value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, PROG ": %s needs a value (see --help)\n", argv[*i]);
        exit(2);
    }
    return argv[++*i];
}

static void parse_args(struct args *a, int argc, char **argv, int cpus)
{
    *a = (struct args){.seconds = 1.0,
                       .warmup = 0.5,
                       .reps = 3,
                       .cpu_bytes = (size_t)1 << 30,
                       .dma_bytes = (size_t)2 << 30,
                       .copy_bytes = (size_t)8 << 20,
                       .nmodes = HOSTBENCH_KINDS,
                       .modes = {0, 1, 2}};
    default_threads(a, cpus);
    const size_t K = 1024, G = K * K * K;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--threads")) {
            parse_threads(a, value(argc, argv, &i));
        } else if (!strcmp(o, "--modes")) {
            parse_modes(a, value(argc, argv, &i));
        } else if (!strcmp(o, "--seconds")) {
            a->seconds = parse_seconds(o, value(argc, argv, &i), 0, true);
        } else if (!strcmp(o, "--warmup")) {
            a->warmup = parse_seconds(o, value(argc, argv, &i), 0, false);
        } else if (!strcmp(o, "--reps")) {
            a->reps = (int)parse_int(o, value(argc, argv, &i), 1, MAX_REPS, "1 to 99");
        } else if (!strcmp(o, "--cpu-bytes")) {
            a->cpu_bytes = parse_size(o, value(argc, argv, &i), 64 * K, 64 * G,
                                      "a size from 64K to 64G (K, M, G)");
        } else if (!strcmp(o, "--dma-bytes")) {
            a->dma_bytes = parse_size(o, value(argc, argv, &i), 8 * K * K, 64 * G,
                                      "a size from 8M to 64G (K, M, G)");
        } else if (!strcmp(o, "--copy-bytes")) {
            a->copy_bytes =
                parse_size(o, value(argc, argv, &i), 64 * K, G, "a size from 64K to 1G (K, M, G)");
        } else if (!strcmp(o, "--dma")) {
            const char *v = value(argc, argv, &i);
            a->dma = 0;
            while (a->dma <= DMA_NONE && strcmp(v, dma_name[a->dma]) != 0)
                a->dma++;
            if (a->dma > DMA_NONE)
                bad(o, v, "both, h2d, d2h or none");
        } else if (!strcmp(o, "--device")) {
            a->device = (int)parse_int(o, value(argc, argv, &i), 0, 63, "0 to 63");
        } else {
            fprintf(stderr, PROG ": unknown argument '%s' (see --help)\n", o);
            exit(2);
        }
    }
    if (a->copy_bytes > a->dma_bytes) {
        fprintf(stderr,
                PROG ": --copy-bytes %zu is larger than --dma-bytes %zu (accepted: at most "
                     "--dma-bytes)\n",
                a->copy_bytes, a->dma_bytes);
        exit(2);
    }
    a->dma_bytes = a->dma_bytes / a->copy_bytes * a->copy_bytes;
}

/* Refuses a run whose buffers would take more than 80% of the host's memory. */
static void check_memory(const struct args *a)
{
    int most = 0;
    for (int i = 0; i < a->nthreads; i++)
        most = a->threads[i] > most ? a->threads[i] : most;
    double need = (double)a->cpu_bytes * most + (a->dma == DMA_NONE ? 0 : 2.0 * a->dma_bytes);
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > 0.8 * have) {
        fprintf(stderr,
                PROG ": --cpu-bytes x %d threads%s need %.1f GiB, more than 80%% of this host's "
                     "%.1f GiB (accepted: less)\n",
                most, a->dma == DMA_NONE ? "" : " + 2 x --dma-bytes", need / (1 << 30),
                have / (1 << 30));
        exit(2);
    }
}

/* ---- host buffers --------------------------------------------------------------------------- */

static unsigned char *map_buffer(size_t n)
{
    unsigned char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, PROG ": mmap of %zu bytes failed: %s\n", n, strerror(errno));
        exit(1);
    }
    madvise(m, n, MADV_HUGEPAGE);
    return m;
}

/* Not zeros: every 8-byte word its own offset mixed with a seed. */
static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w = (i ^ seed) * 0x9e3779b97f4a7c15ull;
        memcpy(p + i, &w, 8);
    }
}

/* ---- the CPU side: N workers, each on its own buffer ----------------------------------------- */

struct worker {
    pthread_t th;
    unsigned char *buf;
    size_t bytes;
    int kind;
    atomic_uint_least64_t done; /* bytes read, written or copied so far */
    const atomic_int *stop;
    uint64_t sum; /* the read's sum, for hostbench_sink after the join */
};

/* Maps and touches a worker's buffer from its own thread (first touch places its pages). */
static void *worker_touch(void *arg)
{
    struct worker *w = arg;
    w->buf = map_buffer(w->bytes);
    fill(w->buf, w->bytes, (uint64_t)(uintptr_t)w);
    return NULL;
}

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    /* a copy goes from the buffer's first half to its second */
    size_t span = w->kind == HOSTBENCH_COPY ? w->bytes / 2 : w->bytes, at = 0;
    uint64_t sum = 0;
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        size_t n = span - at < CPU_CHUNK ? span - at : CPU_CHUNK;
        unsigned char *to = w->kind == HOSTBENCH_COPY ? w->buf + span + at : NULL;
        sum += hostbench_pass(w->kind, w->buf + at, to, n);
        atomic_fetch_add_explicit(&w->done, n, memory_order_relaxed);
        at = at + n == span ? 0 : at + n;
    }
    w->sum = sum;
    return NULL;
}

static void start_threads(struct worker *w, int n, void *(*fn)(void *))
{
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&w[i].th, NULL, fn, &w[i]);
        if (rc) {
            fprintf(stderr, PROG ": pthread_create: %s\n", strerror(rc));
            exit(1);
        }
    }
}

static void join_threads(struct worker *w, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        hostbench_sink += w[i].sum;
    }
}

static uint64_t cpu_done(struct worker *w, int n)
{
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += atomic_load_explicit(&w[i].done, memory_order_relaxed);
    return s;
}

/* ---- the DMA side: copies back to back, timed by events -------------------------------------- */

struct dma {
    int which;
    size_t bytes, copy;
    char device[256];
#ifdef HOST_DMA_CONTEND_CUDA
    unsigned char *host[2];
    void *dev[2];
    cudaStream_t st[2];
    cudaEvent_t start[2], end[2], batch[2][DMA_DEPTH];
#endif
};

#ifdef HOST_DMA_CONTEND_CUDA
static void ck(cudaError_t e, const char *call)
{
    if (e != cudaSuccess) {
        fprintf(stderr, PROG ": %s: %s (%s)\n", call, cudaGetErrorName(e), cudaGetErrorString(e));
        exit(1);
    }
}
#define CK(call) ck((call), #call)

static bool dma_runs(const struct dma *d, int s)
{
    return d->which == DMA_BOTH || d->which == (s == 0 ? DMA_H2D : DMA_D2H);
}

static void dma_open(struct dma *d, const struct args *a)
{
    *d = (struct dma){.which = a->dma, .bytes = a->dma_bytes, .copy = a->copy_bytes};
    if (a->dma == DMA_NONE) {
        strcpy(d->device, "none");
        return;
    }
    /* the thread feeding the copies sleeps in its waits: it must not take a CPU from the workers
     * (the flags apply to the current device, hence after cudaSetDevice) */
    CK(cudaSetDevice(a->device));
    CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, a->device));
    snprintf(d->device, sizeof d->device, "%s", p.name);
    for (int s = 0; s < 2; s++) {
        if (!dma_runs(d, s))
            continue;
        d->host[s] = map_buffer(d->bytes);
        fill(d->host[s], d->bytes, 0x5eedull + (uint64_t)s);
        CK(cudaHostRegister(d->host[s], d->bytes, cudaHostRegisterDefault));
        CK(cudaMalloc(&d->dev[s], d->bytes));
        CK(cudaMemset(d->dev[s], 0x5a, d->bytes));
        CK(cudaStreamCreateWithFlags(&d->st[s], cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&d->start[s], cudaEventBlockingSync));
        CK(cudaEventCreateWithFlags(&d->end[s], cudaEventBlockingSync));
        for (int k = 0; k < DMA_DEPTH; k++)
            CK(cudaEventCreateWithFlags(&d->batch[s][k],
                                        cudaEventBlockingSync | cudaEventDisableTiming));
    }
    CK(cudaDeviceSynchronize());
}

static void dma_close(struct dma *d)
{
    for (int s = 0; s < 2 && d->which != DMA_NONE; s++) {
        if (!dma_runs(d, s))
            continue;
        for (int k = 0; k < DMA_DEPTH; k++)
            CK(cudaEventDestroy(d->batch[s][k]));
        CK(cudaEventDestroy(d->start[s]));
        CK(cudaEventDestroy(d->end[s]));
        CK(cudaStreamDestroy(d->st[s]));
        CK(cudaFree(d->dev[s]));
        CK(cudaHostUnregister(d->host[s]));
        munmap(d->host[s], d->bytes);
    }
}

/* Copies back to back on each running stream until @p seconds have passed, at most
 * DMA_DEPTH batches of DMA_BATCH copies in flight per stream; GB/s each way from the events
 * around all of them. */
static void dma_window(struct dma *d, double seconds, double gbps[2])
{
    uint64_t copies[2] = {0, 0};
    size_t off[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        if (dma_runs(d, s))
            CK(cudaEventRecord(d->start[s], d->st[s]));
    double until = hostbench_now_s() + seconds;
    for (uint64_t k = 0;; k++) {
        for (int s = 0; s < 2; s++) {
            if (!dma_runs(d, s))
                continue;
            cudaEvent_t ev = d->batch[s][k % DMA_DEPTH];
            if (k >= DMA_DEPTH)
                CK(cudaEventSynchronize(ev));
            for (int j = 0; j < DMA_BATCH; j++, copies[s]++) {
                unsigned char *h = d->host[s] + off[s], *g = (unsigned char *)d->dev[s] + off[s];
                if (s == 0)
                    CK(cudaMemcpyAsync(g, h, d->copy, cudaMemcpyHostToDevice, d->st[s]));
                else
                    CK(cudaMemcpyAsync(h, g, d->copy, cudaMemcpyDeviceToHost, d->st[s]));
                off[s] = off[s] + d->copy == d->bytes ? 0 : off[s] + d->copy;
            }
            CK(cudaEventRecord(ev, d->st[s]));
        }
        if (hostbench_now_s() >= until)
            break;
    }
    for (int s = 0; s < 2; s++) {
        gbps[s] = 0;
        if (!dma_runs(d, s))
            continue;
        float ms = 0;
        CK(cudaEventRecord(d->end[s], d->st[s]));
        CK(cudaEventSynchronize(d->end[s]));
        CK(cudaEventElapsedTime(&ms, d->start[s], d->end[s]));
        gbps[s] = (double)copies[s] * (double)d->copy / ((double)ms * 1e6);
    }
}
#else
static void dma_open(struct dma *d, const struct args *a)
{
    *d = (struct dma){.which = a->dma, .bytes = a->dma_bytes, .copy = a->copy_bytes};
    strcpy(d->device, "none");
    if (a->dma != DMA_NONE) {
        fprintf(stderr,
                PROG ": built without CUDA: --dma %s needs ferry's CUDA backend "
                     "(accepted here: --dma none)\n",
                dma_name[a->dma]);
        exit(2);
    }
}

static void dma_close(struct dma *d) {}

static void dma_window(struct dma *d, double seconds, double gbps[2]) {}
#endif

/* Waits @p seconds while the workers run (the CPU alone). */
static void idle_window(double seconds)
{
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

/* ---- points --------------------------------------------------------------------------------- */

struct point {
    int mode, threads;
    double h2d, d2h, cpu, traffic, total, total_min, total_max;
};

/* One window: the DMA's GB/s each way and the CPU's over the same span of host time. */
static void window(struct dma *d, struct worker *w, int n, double seconds, double out[3])
{
    uint64_t c0 = cpu_done(w, n);
    double t0 = hostbench_now_s();
    out[0] = out[1] = 0;
    if (d->which == DMA_NONE)
        idle_window(seconds);
    else
        dma_window(d, seconds, out);
    double t1 = hostbench_now_s();
    out[2] = (double)(cpu_done(w, n) - c0) / (t1 - t0) / 1e9;
}

static struct point measure(const struct args *a, struct dma *d, struct worker *w, int mode, int n)
{
    atomic_int stop = 0;
    for (int i = 0; i < n; i++) {
        w[i].kind = mode;
        w[i].stop = &stop;
        atomic_store(&w[i].done, 0);
    }
    start_threads(w, n, worker_run);
    double r[3], h2d[MAX_REPS], d2h[MAX_REPS], cpu[MAX_REPS], total[MAX_REPS];
    if (a->warmup > 0)
        window(d, w, n, a->warmup, r);
    int twice = mode == HOSTBENCH_COPY ? 2 : 1;
    for (int k = 0; k < a->reps; k++) {
        window(d, w, n, a->seconds, r);
        h2d[k] = r[0], d2h[k] = r[1], cpu[k] = r[2];
        total[k] = r[0] + r[1] + twice * r[2];
    }
    atomic_store(&stop, 1);
    join_threads(w, n);
    struct point p = {.mode = mode, .threads = n};
    size_t m = (size_t)a->reps;
    p.h2d = hostbench_median(h2d, m);
    p.d2h = hostbench_median(d2h, m);
    p.cpu = hostbench_median(cpu, m);
    p.traffic = twice * p.cpu;
    p.total = hostbench_median(total, m);
    p.total_min = total[0], p.total_max = total[m - 1];
    return p;
}

static void print_point(const struct args *a, const struct dma *d, const struct point *p, int cpus)
{
    printf("{\"bench\":\"host_dma_contend\",\"mode\":\"%s\",\"threads\":%d,\"dma\":\"%s\","
           "\"device\":\"%s\",\"cpus\":%d,\"copy_bytes\":%zu,\"dma_bytes\":%zu,\"cpu_bytes\":%zu,"
           "\"seconds\":%.3f,\"warmup\":%.3f,\"reps\":%d,\"h2d_gbps\":%.2f,\"d2h_gbps\":%.2f,"
           "\"cpu_gbps\":%.2f,\"cpu_traffic_gbps\":%.2f,\"total_gbps\":%.2f,\"total_min\":%.2f,"
           "\"total_max\":%.2f}\n",
           hostbench_kind_name[p->mode], p->threads, dma_name[a->dma], d->device, cpus,
           a->copy_bytes, a->dma_bytes, a->cpu_bytes, a->seconds, a->warmup, a->reps, p->h2d,
           p->d2h, p->cpu, p->traffic, p->total, p->total_min, p->total_max);
    fflush(stdout);
}

/* Per mode, a least-squares line through the DMA's rate (the mean of both ways) against the
 * CPU's memory traffic over every point of the mode: the fraction of the DMA's rate alone
 * (the line at 0) lost per GB/s of CPU traffic, a profile's host_memory.dma_cpu_loss
 * (docs/simulator.md). Negative (the DMA gained) prints as measured. */
static void loss_fit(int mode, const struct point *pt, int np)
{
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < np; i++) {
        if (pt[i].mode != mode)
            continue;
        double x = pt[i].traffic, y = (pt[i].h2d + pt[i].d2h) / 2;
        n++;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double den = n * sxx - sx * sx;
    if (n < 2 || den <= 0)
        return;
    double b = (n * sxy - sx * sy) / den, a = (sy - b * sx) / n;
    if (a <= 0)
        return;
    fprintf(stderr,
            "%s: the DMA loses %.2f%% of its rate alone (%.1f GB/s each way, fitted) per 10 GB/s "
            "of CPU traffic: dma_cpu_loss %.5f (least squares over %d points)\n",
            hostbench_kind_name[mode], -1000 * b / a, a, -b / a, (int)n);
}

/* The table, the largest total, and per mode the first N whose DMA fell below 95% of N=0's,
 * and the DMA's loss per GB/s of CPU traffic (loss_fit). */
static void summary(const struct args *a, const struct dma *d, const struct point *pt, int np)
{
    if (a->dma == DMA_NONE)
        fprintf(stderr, "\n" PROG ": the CPU alone (--dma none)");
    else
        fprintf(stderr, "\n" PROG ": DMA %s on %s, %zu MiB copies, %.2f GiB pinned each way",
                dma_name[a->dma], d->device, a->copy_bytes >> 20, (double)a->dma_bytes / (1 << 30));
    fprintf(stderr, "; CPU %.0f MiB per thread; median of %d x %.2f s after %.2f s\n",
            (double)a->cpu_bytes / (1 << 20), a->reps, a->seconds, a->warmup);
    fprintf(stderr, "mode  threads   H2D GB/s   D2H GB/s   CPU GB/s   CPU traffic   total GB/s\n");
    const struct point *best = NULL;
    for (int i = 0; i < np; i++) {
        const struct point *p = &pt[i];
        fprintf(stderr, "%-5s %7d %10.2f %10.2f %10.2f %13.2f %12.2f\n",
                hostbench_kind_name[p->mode], p->threads, p->h2d, p->d2h, p->cpu, p->traffic,
                p->total);
        if (!best || p->total > best->total)
            best = p;
    }
    if (best)
        fprintf(stderr,
                "largest total: %.2f GB/s (%s, %d threads: H2D %.2f + D2H %.2f + CPU %.2f)\n",
                best->total, hostbench_kind_name[best->mode], best->threads, best->h2d, best->d2h,
                best->traffic);
    for (int m = 0; m < a->nmodes && a->dma != DMA_NONE; m++) {
        const struct point *base = NULL, *drop = NULL;
        for (int i = 0; i < np; i++)
            if (pt[i].mode == a->modes[m] && pt[i].threads == 0)
                base = &pt[i];
        for (int i = 0; i < np && base && !drop; i++)
            if (pt[i].mode == a->modes[m] && pt[i].threads > 0 &&
                (pt[i].h2d < 0.95 * base->h2d || pt[i].d2h < 0.95 * base->d2h))
                drop = &pt[i];
        if (!base)
            fprintf(stderr, "%s: no point with 0 threads to compare the DMA with\n",
                    hostbench_kind_name[a->modes[m]]);
        else if (!drop)
            fprintf(stderr, "%s: the DMA stayed at 95%% or more of its 0-thread rate\n",
                    hostbench_kind_name[a->modes[m]]);
        else
            fprintf(stderr,
                    "%s: the DMA first below 95%% of its 0-thread rate at %d threads "
                    "(H2D %.1f%%, D2H %.1f%%)\n",
                    hostbench_kind_name[a->modes[m]], drop->threads,
                    base->h2d > 0 ? 100 * drop->h2d / base->h2d : 0,
                    base->d2h > 0 ? 100 * drop->d2h / base->d2h : 0);
        loss_fit(a->modes[m], pt, np);
    }
}

int main(int argc, char **argv)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cpus = online > 0 ? (int)online : 1;
    struct args a;
    parse_args(&a, argc, argv, cpus);
    check_memory(&a);
    struct dma d;
    dma_open(&d, &a);
    int most = 0;
    for (int i = 0; i < a.nthreads; i++)
        most = a.threads[i] > most ? a.threads[i] : most;
    struct worker *w = calloc((size_t)most + 1, sizeof *w);
    struct point *pt = calloc((size_t)(a.nmodes * a.nthreads), sizeof *pt);
    if (!w || !pt) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    for (int i = 0; i < most; i++)
        w[i].bytes = a.cpu_bytes;
    start_threads(w, most, worker_touch);
    join_threads(w, most);
    int np = 0;
    for (int m = 0; m < a.nmodes; m++)
        for (int t = 0; t < a.nthreads; t++) {
            pt[np] = measure(&a, &d, w, a.modes[m], a.threads[t]);
            print_point(&a, &d, &pt[np++], cpus);
        }
    summary(&a, &d, pt, np);
    for (int i = 0; i < most; i++)
        munmap(w[i].buf, w[i].bytes);
    dma_close(&d);
    free(w);
    free(pt);
    return 0;
}
