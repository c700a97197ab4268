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
 * through one with all of it off (op_timing off, no heartbeat, no alerts, no registry). Many
 * short rounds, each one run of each pipeline side by side (and one of a second bare pipeline,
 * the null comparison: its ratio to the first is 1 but for noise), the order rotating through
 * the six permutations; a ratio per round, of wall time and of the process's CPU time, and the
 * median of the rounds' ratios with their quartiles and the median's 95% interval. The
 * machine's drift (the same binary moved 0.94-1.09x between runs on the 2-core VM) cancels
 * within a round. The scraping thread's CPU time is taken out of whichever run it fell in and
 * charged to the monitored runs alone, at its mean rate per second of the whole measurement. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "benchlib.h"
#include "ferry.h"
#include "ferry/metrics.h"

/* Rounds of the monitoring comparison (20000 batches per run, ~0.2 s a round on the 2-core VM):
 * there the rounds' ratios spread +-3% (quartiles), and 100 rounds left a 95% interval of the
 * median ratio ~1% wide; 200 narrow it to ~0.7%. */
#define MON_ROUNDS 200

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
    pthread_t th;
    clockid_t clock; /* the thread's CPU clock */
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

static double clock_ns(clockid_t c)
{
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* @n batches of 64 bytes through @p; wall ns per batch, and in *@cpu the CPU ns per batch of
 * the whole process (every thread), less what the thread of @sc (NULL: none) spent meanwhile. */
static double batch_cost(ferry_pipeline_t *p, int n, atomic_ulong *count, const scraper_t *sc,
                         double *cpu)
{
    static unsigned char in[64], out[64];
    double c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID), s0 = sc ? clock_ns(sc->clock) : 0;
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
    if (cpu != NULL) {
        double c = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (sc != NULL)
            c -= clock_ns(sc->clock) - s0;
        *cpu = c / n;
    }
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

/* A sim runtime with @opts (NULL: defaults), and a pipeline on its device. */
typedef struct arm {
    ferry_runtime_t *rt;
    ferry_pipeline_t *p;
    double *wall, *cpu; /* per round, ns per batch */
} arm_t;

static void arm_open(arm_t *a, const ferry_stage_t *st, const ferry_options_t *opts, size_t rounds)
{
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    rc.backend = "sim";
    rc.options = opts;
    if (ferry_runtime_create(&rc, &a->rt) != 0) {
        fprintf(stderr, "bench_pipeline: %s\n", ferry_last_error());
        exit(1);
    }
    ferry_device_t *d = NULL;
    ferry_device_get(a->rt, 0, &d);
    a->p = small_pipeline(d, st);
    a->wall = calloc(rounds, sizeof(double));
    a->cpu = calloc(rounds, sizeof(double));
    if (a->wall == NULL || a->cpu == NULL) {
        fprintf(stderr, "bench_pipeline: out of memory\n");
        exit(1);
    }
}

static void arm_close(arm_t *a)
{
    ferry_pipeline_destroy(a->p);
    ferry_runtime_destroy(a->rt);
    free(a->wall);
    free(a->cpu);
}

/* Per-round ratios @num / @den into @out, and their spread. */
static bench_spread_t ratios(const double *num, const double *den, double *out, size_t rounds)
{
    for (size_t r = 0; r < rounds; r++)
        out[r] = num[r] / den[r];
    return bench_spread(out, rounds);
}

/* Monitoring on against off (and off against off), @rounds rounds of one run of @batches per
 * pipeline. */
static void monitoring_cost(const ferry_stage_t *st, int batches, size_t rounds)
{
    enum { ON, OFF, NUL, NARMS };
    ferry_options_t *off = NULL;
    ferry_options_create(&off);
    ferry_options_set(off, "op_timing", "off");
    ferry_options_set(off, "heartbeat_ms", "0");
    ferry_options_set(off, "bw_alert_ratio", "0");
    arm_t arm[NARMS];
    arm_open(&arm[ON], st, NULL, rounds);
    arm_open(&arm[OFF], st, off, rounds);
    arm_open(&arm[NUL], st, off, rounds);
    ferry_options_destroy(off);
    scraper_t sc = {0};
    ferry_metrics_create(&sc.m);
    ferry_metrics_add_pipeline(sc.m, arm[ON].p, "bench");
    pthread_create(&sc.th, NULL, scrape_main, &sc);
    if (pthread_getcpuclockid(sc.th, &sc.clock) != 0) {
        fprintf(stderr, "bench_pipeline: no CPU clock for the scraping thread\n");
        exit(1);
    }
    atomic_ulong count = 0;
    for (int a = 0; a < NARMS; a++) /* warm-up */
        batch_cost(arm[a].p, batches, &count, &sc, NULL);
    /* Every order of the three, so that none is always first or always after another. */
    static const int order[6][NARMS] = {{ON, OFF, NUL}, {OFF, NUL, ON}, {NUL, ON, OFF},
                                        {NUL, OFF, ON}, {OFF, ON, NUL}, {ON, NUL, OFF}};
    unsigned long scrapes0 = sc.scrapes;
    double s0 = clock_ns(sc.clock);
    uint64_t t0 = bench_now_ns();
    for (size_t r = 0; r < rounds; r++) {
        for (int i = 0; i < NARMS; i++) {
            arm_t *a = &arm[order[r % 6][i]];
            a->wall[r] = batch_cost(a->p, batches, &count, &sc, &a->cpu[r]);
        }
    }
    atomic_store(&sc.stop, true);
    double scrape_cpu = clock_ns(sc.clock) - s0; /* before the join: the clock dies with it */
    double elapsed = (double)(bench_now_ns() - t0);
    pthread_join(sc.th, NULL);
    unsigned long scrapes = sc.scrapes - scrapes0;
    /* Scraping costs a monitored pipeline so much CPU per second, whatever it runs: the
     * scraper's CPU per ns of the whole measurement, charged to each monitored run by its
     * length. */
    double scrape_rate = elapsed > 0 ? scrape_cpu / elapsed : 0;
    for (size_t r = 0; r < rounds; r++)
        arm[ON].cpu[r] += scrape_rate * arm[ON].wall[r];

    double *tmp = calloc(rounds, sizeof(double));
    bench_spread_t w = ratios(arm[ON].wall, arm[OFF].wall, tmp, rounds);
    bench_spread_t c = ratios(arm[ON].cpu, arm[OFF].cpu, tmp, rounds);
    bench_spread_t wn = ratios(arm[NUL].wall, arm[OFF].wall, tmp, rounds);
    bench_spread_t cn = ratios(arm[NUL].cpu, arm[OFF].cpu, tmp, rounds);
    double m_on = bench_median(arm[ON].wall, rounds), m_off = bench_median(arm[OFF].wall, rounds);
    double k_on = bench_median(arm[ON].cpu, rounds), k_off = bench_median(arm[OFF].cpu, rounds);
    bench_report("pipeline", "host_ns_per_batch_sim_64B_monitored", m_on, "ns/batch", 0);
    bench_report("pipeline", "host_ns_per_batch_sim_64B_unmonitored", m_off, "ns/batch", 0);
    bench_report_spread("pipeline", "monitoring_host_wall_ratio", &w, "monitored/unmonitored", 0);
    bench_report_spread("pipeline", "monitoring_host_wall_ratio_null", &wn,
                        "unmonitored/unmonitored", 0);
    bench_report("pipeline", "host_cpu_ns_per_batch_sim_64B_monitored", k_on, "ns/batch", 0);
    bench_report("pipeline", "host_cpu_ns_per_batch_sim_64B_unmonitored", k_off, "ns/batch", 0);
    bench_report_spread("pipeline", "monitoring_host_cpu_ratio", &c, "monitored/unmonitored", 1.01);
    bench_report_spread("pipeline", "monitoring_host_cpu_ratio_null", &cn,
                        "unmonitored/unmonitored", 0);
    bench_report("pipeline", "monitoring_scrape_cpu_us", scrapes ? scrape_cpu / scrapes / 1e3 : 0,
                 "us/scrape", 0);
    bench_report("pipeline", "monitoring_scrape_cpu_ns_per_batch", scrape_rate * m_on, "ns/batch",
                 0);
    fprintf(stderr, "bench_pipeline: %zu rounds of %d batches per pipeline, %lu scrapes\n", rounds,
            batches, scrapes);
    free(tmp);
    ferry_metrics_remove_pipeline(sc.m, arm[ON].p);
    ferry_metrics_destroy(sc.m);
    for (int a = 0; a < NARMS; a++)
        arm_close(&arm[a]);
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 200000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    size_t rounds = argc > 3 ? (size_t)atoi(argv[3]) : MON_ROUNDS;
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
    ferry_pipeline_t *p = small_pipeline(dev, &st);
    double *per = calloc((size_t)runs, sizeof(double));
    atomic_ulong count = 0;
    long csw0 = 0;
    for (int r = -1; r < runs; r++) { /* run -1 warms up */
        if (r == 0)
            csw0 = context_switches();
        int n = r < 0 ? batches / 10 : batches;
        double w = batch_cost(p, n, &count, NULL, NULL);
        if (r >= 0)
            per[r] = w;
    }
    double csw = runs > 0 && batches > 0
                     ? (double)(context_switches() - csw0) / ((double)batches * runs)
                     : 0.0;
    bench_report("pipeline", "host_ns_per_batch_sim_64B", bench_median(per, (size_t)runs),
                 "ns/batch", 2000);
    bench_report("pipeline", "context_switches_per_batch_sim_64B", csw, "switches/batch", 0);
    ferry_pipeline_destroy(p);

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
    monitoring_cost(&st, batches / 10, rounds);
    free(per);
    ferry_runtime_destroy(rt);
    return 0;
}
