/* Host CPU cost of the pipeline per batch on the simulator: submit + issue + completion +
 * callback for small batches (one chunk each), in wall-clock ns per batch, median of runs.
 * This is ferry's own overhead plus the simulator's bookkeeping: the GPU's time is virtual and
 * costs nothing here. Also the context switches per batch over the measured runs (all threads;
 * steadier than wall time on a shared machine, and what thread hand-offs cost), and the pinned
 * pool's alloc+free pair.
 *
 * What monitoring costs the host: the same batches through a pipeline with every monitor on
 * (one chunk in 31 timed, the bandwidth monitor, the watchdog and its heartbeat, and a metrics
 * registry scraped every 100 ms by another thread, ten times `--metrics-file`'s rate) and
 * through one with all of it off (op_timing off, no heartbeat, no alerts, no registry), in
 * interleaved runs (ABBA); the ratio of the medians, of wall time and of the process's CPU
 * time per batch (the steadier of the two on a shared machine). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "benchlib.h"
#include "ferry.h"
#include "ferry/metrics.h"

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

typedef struct scraper {
    ferry_metrics_t *m;
    atomic_bool stop;
    unsigned long scrapes;
} scraper_t;

static void *scrape_main(void *arg)
{
    scraper_t *sc = arg;
    FILE *f = fopen("/dev/null", "w");
    while (f != NULL && !atomic_load(&sc->stop)) {
        ferry_metrics_write(sc->m, f);
        sc->scrapes++;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    if (f != NULL)
        fclose(f);
    return NULL;
}

/* CPU time of the whole process so far (every thread), ns. */
static double cpu_ns(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) * 1e9 +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e3;
}

/* @n batches of 64 bytes through @p; wall ns per batch, and the process's CPU ns per batch in
 * *@cpu. */
static double batch_cost(ferry_pipeline_t *p, int n, atomic_ulong *count, double *cpu)
{
    static unsigned char in[64], out[64];
    double c0 = cpu_ns();
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < n; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in;
        b.out = out;
        b.bytes = sizeof(in);
        if (ferry_pipeline_submit(p, &b, done, count, NULL) != 0) {
            fprintf(stderr, "bench_pipeline: submit: %s\n", ferry_last_error());
            exit(1);
        }
    }
    ferry_pipeline_drain(p);
    double wall = (double)(bench_now_ns() - t0) / n;
    if (cpu != NULL)
        *cpu = (cpu_ns() - c0) / n;
    return wall;
}

static ferry_pipeline_t *small_pipeline(ferry_device_t *dev, const ferry_stage_t *st)
{
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.device = dev;
    cfg.stage = st;
    cfg.chunk_bytes = 4096;
    cfg.depth = 8;
    cfg.queue_depth = 64;
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&cfg, &p) != 0) {
        fprintf(stderr, "bench_pipeline: %s\n", ferry_last_error());
        exit(1);
    }
    return p;
}

/* Monitoring on against off, interleaved runs of @batches each. */
static void monitoring_cost(const ferry_stage_t *st, int batches, int runs)
{
    ferry_options_t *off = NULL;
    ferry_options_create(&off);
    ferry_options_set(off, "op_timing", "off");
    ferry_options_set(off, "heartbeat_ms", "0");
    ferry_options_set(off, "bw_alert_ratio", "0");
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    rc.backend = "sim";
    ferry_runtime_t *rt_on = NULL, *rt_off = NULL;
    if (ferry_runtime_create(&rc, &rt_on) != 0) {
        fprintf(stderr, "bench_pipeline: %s\n", ferry_last_error());
        exit(1);
    }
    rc.options = off;
    if (ferry_runtime_create(&rc, &rt_off) != 0) {
        fprintf(stderr, "bench_pipeline: %s\n", ferry_last_error());
        exit(1);
    }
    ferry_options_destroy(off);
    ferry_device_t *d_on = NULL, *d_off = NULL;
    ferry_device_get(rt_on, 0, &d_on);
    ferry_device_get(rt_off, 0, &d_off);
    ferry_pipeline_t *on = small_pipeline(d_on, st), *bare = small_pipeline(d_off, st);
    scraper_t sc = {0};
    ferry_metrics_create(&sc.m);
    ferry_metrics_add_pipeline(sc.m, on, "bench");
    pthread_t th;
    pthread_create(&th, NULL, scrape_main, &sc);
    size_t nr = (size_t)runs * 2;
    double *w_on = calloc(nr, sizeof(double)), *w_off = calloc(nr, sizeof(double));
    double *c_on = calloc(nr, sizeof(double)), *c_off = calloc(nr, sizeof(double));
    atomic_ulong count = 0;
    batch_cost(on, batches / 10, &count, NULL); /* warm-up */
    batch_cost(bare, batches / 10, &count, NULL);
    for (size_t r = 0; r < nr; r++) { /* ABBA */
        if (r % 2 == 0) {
            w_on[r] = batch_cost(on, batches, &count, &c_on[r]);
            w_off[r] = batch_cost(bare, batches, &count, &c_off[r]);
        } else {
            w_off[r] = batch_cost(bare, batches, &count, &c_off[r]);
            w_on[r] = batch_cost(on, batches, &count, &c_on[r]);
        }
    }
    atomic_store(&sc.stop, true);
    pthread_join(th, NULL);
    double m_on = bench_median(w_on, nr), m_off = bench_median(w_off, nr);
    double k_on = bench_median(c_on, nr), k_off = bench_median(c_off, nr);
    bench_report("pipeline", "host_ns_per_batch_sim_64B_monitored", m_on, "ns/batch", 0);
    bench_report("pipeline", "host_ns_per_batch_sim_64B_unmonitored", m_off, "ns/batch", 0);
    bench_report("pipeline", "monitoring_host_wall_ratio", m_on / m_off, "monitored/unmonitored",
                 0);
    bench_report("pipeline", "host_cpu_ns_per_batch_sim_64B_monitored", k_on, "ns/batch", 0);
    bench_report("pipeline", "host_cpu_ns_per_batch_sim_64B_unmonitored", k_off, "ns/batch", 0);
    bench_report("pipeline", "monitoring_host_cpu_ratio", k_on / k_off, "monitored/unmonitored",
                 1.01);
    fprintf(stderr, "bench_pipeline: %lu scrapes during the monitored runs\n", sc.scrapes);
    ferry_metrics_remove_pipeline(sc.m, on);
    ferry_metrics_destroy(sc.m);
    ferry_pipeline_close(on);
    ferry_pipeline_close(bare);
    ferry_runtime_destroy(rt_on);
    ferry_runtime_destroy(rt_off);
    free(w_on);
    free(w_off);
    free(c_on);
    free(c_off);
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
    double *per = calloc((size_t)runs, sizeof(double));
    atomic_ulong count = 0;
    long csw0 = 0;
    for (int r = -1; r < runs; r++) { /* run -1 warms up */
        if (r == 0)
            csw0 = context_switches();
        int n = r < 0 ? batches / 10 : batches;
        double w = batch_cost(p, n, &count, NULL);
        if (r >= 0)
            per[r] = w;
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
    monitoring_cost(&st, batches, runs > 3 ? runs : 3);
    free(per);
    ferry_runtime_destroy(rt);
    return 0;
}
