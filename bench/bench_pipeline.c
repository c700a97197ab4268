/* Host CPU cost of the pipeline per batch on the simulator: submit + issue + completion +
 * callback for small batches (one chunk each), in wall-clock ns per batch, median of runs.
 * This is ferry's own overhead plus the simulator's bookkeeping: the GPU's time is virtual and
 * costs nothing here. Also the context switches per batch over the measured runs (all threads;
 * steadier than wall time on a shared machine, and what thread hand-offs cost), and the pinned
 * pool's alloc+free pair. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "benchlib.h"
#include "ferry.h"

static int cpu_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

/* Voluntary and involuntary context switches of the whole process so far. */
static long context_switches(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    (void)r;
    atomic_fetch_add((atomic_ulong *)arg, 1);
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 200000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    rc.backend = "sim";
    ferry_runtime_t *rt = NULL;
    if (ferry_runtime_create(&rc, &rt) != 0) {
        fprintf(stderr, "bench_pipeline: %s\n", ferry_last_error());
        return 1;
    }
    ferry_device_t *dev = NULL;
    ferry_device_get(rt, 0, &dev);

    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "copy";
    st.cpu = cpu_copy;
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.device = dev;
    cfg.stage = &st;
    cfg.chunk_bytes = 4096;
    cfg.depth = 8;
    cfg.queue_depth = 64;
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&cfg, &p) != 0) {
        fprintf(stderr, "bench_pipeline: %s\n", ferry_last_error());
        return 1;
    }
    static unsigned char in[64], out[64];
    double *per = calloc((size_t)runs, sizeof(double));
    atomic_ulong count = 0;
    long csw0 = 0;
    for (int r = -1; r < runs; r++) { /* run -1 warms up */
        if (r == 0)
            csw0 = context_switches();
        int n = r < 0 ? batches / 10 : batches;
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < n; i++) {
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = in;
            b.out = out;
            b.bytes = sizeof(in);
            if (ferry_pipeline_submit(p, &b, done, &count, NULL) != 0) {
                fprintf(stderr, "bench_pipeline: submit: %s\n", ferry_last_error());
                return 1;
            }
        }
        ferry_pipeline_drain(p);
        uint64_t t1 = bench_now_ns();
        if (r >= 0)
            per[r] = (double)(t1 - t0) / n;
    }
    double csw = runs > 0 && batches > 0
                     ? (double)(context_switches() - csw0) / ((double)batches * runs)
                     : 0.0;
    bench_report("pipeline", "host_ns_per_batch_sim_64B", bench_median(per, (size_t)runs),
                 "ns/batch", 2000);
    bench_report("pipeline", "context_switches_per_batch_sim_64B", csw, "switches/batch", 0);
    ferry_pipeline_close(p);

    /* pool alloc + free pair, uncontended */
    ferry_pool_config_t pc = FERRY_POOL_CONFIG_INIT;
    pc.slot_bytes = 4096;
    pc.slots = 64;
    ferry_pool_t *pool = NULL;
    if (ferry_pool_create(dev, &pc, &pool) != 0) {
        fprintf(stderr, "bench_pipeline: pool: %s\n", ferry_last_error());
        return 1;
    }
    for (int r = 0; r < runs; r++) {
        const int n = 2000000;
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < n; i++) {
            void *s;
            ferry_pool_alloc(pool, 64, false, &s);
            ferry_pool_free(pool, s);
        }
        per[r] = (double)(bench_now_ns() - t0) / n / 2; /* per operation */
    }
    bench_report("pool", "alloc_or_free_ns", bench_median(per, (size_t)runs), "ns/op", 100);
    ferry_pool_destroy(pool);
    free(per);
    ferry_runtime_destroy(rt);
    return 0;
}
