/* `ferry bench items`: small items, each its own batch, submitted by several threads into one
 * pipeline, as inference requests, KV-cache blocks or messages come: per item size, the rate
 * each way against the round-trip ceiling measured in the same run, the latency from submit to
 * completion (p50, p99, on the device's clock as the pipeline records it), and the process's CPU
 * time per item. Every pass's output is checked against the CPU reference before its figures
 * count; fresh random input; a warm-up pass on a GPU, the median pass reported. With --rate the
 * items are offered on a schedule (open loop) and an item's latency counts from its scheduled
 * time: a submitter held up by a full pipeline makes the items after it late, and their
 * lateness is theirs. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "bench.h"
#include "ferry/bench.h"
#include "thread_cpu.h"

typedef struct items_run {
    ferry_pipeline_t *p;
    unsigned char *in, *out;
    size_t item, stride;             /* stride: item i at i x stride (--scattered: 2 x item) */
    unsigned long long n;            /* items in a pass */
    _Atomic unsigned long long next; /* the next item a submitter takes */
    atomic_int failed, submit_err;
    uint64_t *lat_ns; /* each item's, written by its callback */
    /* --rate: item i is due at t0 + i x gap_ns (CLOCK_MONOTONIC); gap_ns 0: closed loop */
    double gap_ns, pace; /* pace: host ns per ns of the pipeline's clock (sim_pace; 1 on a GPU) */
    uint64_t t0;
    uint64_t *late_ns; /* each item's lateness, on the pipeline's clock */
    /* --rate: the submitters' time spinning for their items' times (CPU time of the harness,
     * not ferry's: the wait's last WAIT_SPIN_NS), summed at each thread's end */
    _Atomic unsigned long long spin_ns;
} items_run_t;

typedef struct items_row {
    unsigned long long item, items, gathered, slabs; /* option gather_bytes */
    unsigned long long waits, pieces;                /* the same: ferry_pipeline_stats' */
    double h2d, d2h, p50_us, p99_us, cpu_us, ceiling;
    double offered;        /* --rate's GB/s; 0: closed loop */
    double max_us, max_at; /* the slowest item's latency, and its place in the pass (0-1) */
    double harness_us;     /* of cpu_us: the submitters' spin for --rate's schedule */
    unsigned passes;
    bool ok;
    thread_cpu_group_t by_thread[THREAD_CPU_GROUPS]; /* cpu_us's seconds, by thread name */
    unsigned nby;
} items_row_t;

static void on_item(const ferry_batch_result_t *r, void *arg)
{
    items_run_t *ir = arg;
    size_t i = (size_t)((const unsigned char *)r->in - ir->in) / ir->stride;
    ir->lat_ns[i] = (r->done_ns > r->submit_ns ? r->done_ns - r->submit_ns : 0) +
                    (ir->gap_ns > 0 ? ir->late_ns[i] : 0);
    if (r->status != 0)
        atomic_fetch_add(&ir->failed, 1);
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* --rate: wait for item @i's time; its lateness (a submitter that comes after it, held up by
 * the pipeline) is recorded. The wait sleeps to within WAIT_SPIN_NS of the time, then spins:
 * a sleep alone woke tens of microseconds late on a busy 16-core host, later than a thread's
 * next item at 64 KiB and 75% of the ceiling, and the harness's own delay made the items late. */
#define WAIT_SPIN_NS 60000u
static uint64_t wait_due(items_run_t *ir, unsigned long long i)
{
    uint64_t due = ir->t0 + (uint64_t)((double)i * ir->gap_ns), t = mono_ns();
    ir->late_ns[i] = t > due ? (uint64_t)((double)(t - due) / ir->pace) : 0;
    if (t + WAIT_SPIN_NS < due) {
        uint64_t at = due - WAIT_SPIN_NS;
        struct timespec ts = {.tv_sec = (time_t)(at / 1000000000u),
                              .tv_nsec = (long)(at % 1000000000u)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
        }
    }
    uint64_t s0 = mono_ns(), s1 = s0; /* the spin's time: the harness's CPU, not ferry's */
    while (s1 < due)
        s1 = mono_ns();
    return s1 - s0;
}

/* Items a submitter takes at a time: the harness's shared counter is its own cost, not
 * ferry's; taken one at a time by 8 threads, its line moved between cores on every item (as
 * many transfers as ferry's own reservation), in the CPU time counted as ferry's. */
#define ITEMS_TAKE 16u

static void *submitter(void *arg)
{
    items_run_t *ir = arg;
#ifdef __linux__
    if (ir->gap_ns > 0) /* wake on time: Linux stretches short sleeps by 50 us by default */
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    uint64_t spin = 0;
    bool err = false;
    while (!err) {
        unsigned long long i = atomic_fetch_add(&ir->next, ITEMS_TAKE), end = i + ITEMS_TAKE;
        if (i >= ir->n)
            break;
        for (end = end < ir->n ? end : ir->n; i < end && !err; i++) {
            if (ir->gap_ns > 0)
                spin += wait_due(ir, i);
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = ir->in + i * ir->stride;
            b.out = ir->out + i * ir->stride;
            b.bytes = ir->item;
            err = ferry_pipeline_submit(ir->p, &b, on_item, ir, NULL) != 0;
        }
    }
    if (err)
        atomic_store(&ir->submit_err, 1);
    atomic_fetch_add(&ir->spin_ns, spin);
    return NULL;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One pass on a fresh pipeline: the stats, latency percentiles and CPU time into @one. */
static int one_pass(ferry_device_t *dev, ferry_workload_t *wl, items_run_t *ir, unsigned threads,
                    const unsigned char *ref, items_row_t *one)
{
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = ferry_workload_stage(wl);
    if (ferry_pipeline_create(&pc, &ir->p) != 0)
        return cli_fail("bench", "pipeline: %s", ferry_last_error());
    memset(ir->out, 0, ir->n * ir->stride);
    atomic_store(&ir->next, 0);
    atomic_store(&ir->failed, 0);
    atomic_store(&ir->submit_err, 0);
    atomic_store(&ir->spin_ns, 0);
    pthread_t th[64];
    unsigned started = 0;
    static thread_cpu_snap_t snap[2]; /* one pass at a time */
    thread_cpu_snapshot(&snap[0]);
    double c0 = cpu_s();
    ir->t0 = mono_ns() + 1000000; /* --rate: the schedule starts once the threads are up */
    for (; started < threads; started++)
        if (pthread_create(&th[started], NULL, submitter, ir) != 0)
            break;
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    int drc = ferry_pipeline_drain(ir->p);
    double c1 = cpu_s();
    thread_cpu_snapshot(&snap[1]);
    one->nby = thread_cpu_groups(&snap[0], &snap[1], one->by_thread);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(ir->p, &st);
    ferry_pipeline_destroy(ir->p);
    ir->p = NULL;
    if (started < threads || atomic_load(&ir->submit_err) || drc != 0)
        return cli_fail("bench", "items: %s",
                        started < threads ? "a submitting thread did not start"
                                          : ferry_last_error());
    size_t n = (size_t)ir->n;
    one->ok = atomic_load(&ir->failed) == 0;
    for (size_t i = 0; i < n && one->ok; i++)
        one->ok = memcmp(ir->out + i * ir->stride, ref + i * ir->stride, ir->item) == 0;
    /* The items' bytes over the time: a slab's copies (option gather_bytes) also carry its
     * table and the padding between items, which are not the items' data. */
    double data = (double)ir->n * (double)ir->item;
    one->h2d = st.bytes_h2d > 0 ? st.gbps_h2d * data / (double)st.bytes_h2d : 0;
    one->d2h = st.bytes_d2h > 0 ? st.gbps_d2h * data / (double)st.bytes_d2h : 0;
    one->cpu_us = (c1 - c0) / (double)n * 1e6;
    one->harness_us = (double)atomic_load(&ir->spin_ns) / (double)n / 1e3;
    one->gathered = st.batches_gathered;
    one->slabs = st.slabs;
    one->waits = st.gather_waits;
    one->pieces = st.gather_pieces;
    /* the slowest item and where in the pass it came (by item number: 0 the first, 1 the
     * last), so that a stall at the start tells itself from one in the stream */
    size_t worst = 0;
    for (size_t i = 1; i < n; i++)
        worst = ir->lat_ns[i] > ir->lat_ns[worst] ? i : worst;
    one->max_at = n > 1 ? (double)worst / (double)(n - 1) : 0;
    qsort(ir->lat_ns, n, sizeof(uint64_t), cmp_u64);
    one->p50_us = (double)ir->lat_ns[n / 2] / 1e3;
    one->p99_us = (double)ir->lat_ns[n - 1 - n / 100] / 1e3;
    one->max_us = (double)ir->lat_ns[n - 1] / 1e3;
    return CLI_OK;
}

/* Every pass of item size @item: the median pass by its slower direction into @row. */
static int measure_size(ferry_device_t *dev, ferry_workload_t *wl, const bench_opts_t *bo,
                        size_t item, unsigned long long total, const items_run_t *pacing,
                        items_row_t *row)
{
    bool sim = ferry_device_is_simulated(dev);
    unsigned passes = bo->passes ? (unsigned)bo->passes : sim ? 1 : 3;
    unsigned long long n = total / item ? total / item : 1;
    items_run_t ir = {.item = item,
                      .stride = bo->scattered ? 2 * item : item,
                      .n = n,
                      .gap_ns = pacing->gap_ns,
                      .pace = pacing->pace};
    ir.gap_ns = ir.gap_ns > 0 ? (double)item * ir.gap_ns : 0; /* pacing: ns per byte */
    const size_t span = n * ir.stride;
    unsigned char *ref = malloc(span);
    ir.lat_ns = malloc(n * sizeof(uint64_t));
    ir.late_ns = calloc(n, sizeof(uint64_t));
    int rc = CLI_OK;
    if (ref == NULL || ir.lat_ns == NULL || ir.late_ns == NULL ||
        ferry_host_alloc(dev, span, (void **)&ir.in) != 0 ||
        ferry_host_alloc(dev, span, (void **)&ir.out) != 0) {
        rc = cli_fail("bench", "items: %llu items of %zu bytes: %s", n, item,
                      ir.in == NULL || ir.out == NULL ? ferry_last_error() : "out of memory");
        goto out;
    }
    bench_fill_floats(ir.in, span, (uint64_t)time(NULL) ^ (uint64_t)item); /* fresh */
    ferry_workload_reference(wl, ir.in, ref, span);
    items_row_t all[101];
    unsigned k = 0;
    for (unsigned pass = 0; pass < passes + (sim ? 0 : 1) && rc == CLI_OK; pass++) {
        items_row_t one = {0};
        rc = one_pass(dev, wl, &ir, (unsigned)bo->threads, ref, &one);
        if (rc == CLI_OK && (sim || pass > 0)) /* a GPU's first pass warms up */
            all[k++] = one;
        if (rc == CLI_OK && !one.ok)
            rc = cli_fail("bench", "items of %zu bytes: output differs from the reference", item);
    }
    if (rc == CLI_OK) { /* the median by the slower direction (insertion sort: few passes) */
        for (unsigned i = 1; i < k; i++)
            for (unsigned j = i;
                 j > 0 && fmin(all[j].h2d, all[j].d2h) < fmin(all[j - 1].h2d, all[j - 1].d2h);
                 j--) {
                items_row_t t = all[j];
                all[j] = all[j - 1];
                all[j - 1] = t;
            }
        *row = all[(k - 1) / 2];
        row->item = item;
        row->items = n;
        row->passes = k;
    }
out:
    if (ir.in != NULL)
        ferry_host_free(dev, ir.in);
    if (ir.out != NULL)
        ferry_host_free(dev, ir.out);
    free(ref);
    free(ir.lat_ns);
    free(ir.late_ns);
    return rc;
}

/* Option gather_bytes' latency bound, the same for every size: 0 slab bytes when not gathering. */
typedef struct items_bound {
    size_t slab;                 /* gather_bytes */
    unsigned flush_us;           /* gather_us */
    double rt_us;                /* a slab's round trip alone, measured (0: not measured) */
    double rt_min_us, rt_max_us; /* the fastest and slowest of those measured */
} items_bound_t;

/* A gathered item's latency bound (issue 20): the flush bound plus the round trip of one slab.
 * The round trip is measured here, as a slab goes: one batch of @bd's slab bytes as one chunk
 * (a slab is one chunk), not gathered, alone on an idle pipeline, submit to completion on the
 * device's clock; the median of SLAB_RT_REPS after a warm-up into @bd's rt_us, their spread
 * beside it (on an H100 host the median ranged 368-522 us from run to run). rt_us stays 0 where
 * it cannot be measured. */
#define SLAB_RT_REPS 7
typedef struct slab_rt {
    uint64_t ns;
    int status;
} slab_rt_t;

static void on_slab(const ferry_batch_result_t *r, void *arg)
{
    slab_rt_t *t = arg;
    t->ns = r->done_ns > r->submit_ns ? r->done_ns - r->submit_ns : 0;
    t->status = r->status;
}

static void slab_round_trip(ferry_device_t *dev, ferry_workload_t *wl, items_bound_t *bd)
{
    size_t bytes = bd->slab;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = ferry_workload_stage(wl);
    pc.chunk_bytes = bytes;
    pc.gather_bytes = SIZE_MAX; /* the slab's bytes as one batch of their own */
    unsigned char *in = NULL, *out = NULL;
    ferry_pipeline_t *p = NULL;
    uint64_t ns[SLAB_RT_REPS];
    unsigned k = 0;
    if (ferry_host_alloc(dev, bytes, (void **)&in) == 0 &&
        ferry_host_alloc(dev, bytes, (void **)&out) == 0 && ferry_pipeline_create(&pc, &p) == 0) {
        bench_fill_floats(in, bytes, (uint64_t)time(NULL));
        for (unsigned i = 0; i <= SLAB_RT_REPS; i++) {
            slab_rt_t t = {0, -1};
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = in;
            b.out = out;
            b.bytes = bytes;
            if (ferry_pipeline_submit(p, &b, on_slab, &t, NULL) != 0 ||
                ferry_pipeline_drain(p) != 0 || t.status != 0)
                break;
            if (i > 0) /* the first warms up */
                ns[k++] = t.ns;
        }
    }
    if (p != NULL)
        ferry_pipeline_destroy(p);
    if (in != NULL)
        ferry_host_free(dev, in);
    if (out != NULL)
        ferry_host_free(dev, out);
    if (k < SLAB_RT_REPS) { /* said, not hidden: the run goes on without the bound */
        fprintf(stderr,
                "ferry bench: items: a %zu-byte slab's round trip could not be measured "
                "(%s); no latency bound is given\n",
                bytes, ferry_last_error());
        return;
    }
    qsort(ns, k, sizeof(ns[0]), cmp_u64);
    bd->rt_us = (double)ns[k / 2] / 1e3;
    bd->rt_min_us = (double)ns[0] / 1e3;
    bd->rt_max_us = (double)ns[k - 1] / 1e3;
}

static void print_json(ferry_runtime_t *rt, ferry_device_t *dev, const bench_opts_t *bo,
                       const items_row_t *rows, int n, double ceil_gbps, double bound_us,
                       const items_bound_t *bound)
{
    json_t j;
    json_command_begin(&j, stdout, "bench items");
    bench_device_line(rt, dev, &j);
    json_key_double(&j, "ceiling_gbps", ceil_gbps, 3);
    json_key_uint(&j, "threads", bo->threads);
    json_key_bool(&j, "scattered", bo->scattered);
    if (n > 0 && rows[0].offered > 0)
        json_key_double(&j, "offered_gbps", rows[0].offered, 3);
    else {
        json_key(&j, "offered_gbps");
        json_null(&j);
    }
    json_key_uint(&j, "gather_bytes", bound->slab);
    json_key_uint(&j, "gather_us", bound->flush_us);
    /* the bound a gathered item's p99 is held to: gather_us plus a slab's round trip */
    if (bound_us > 0) {
        json_key_double(&j, "slab_round_trip_us", bound->rt_us, 2);
        json_key_double(&j, "slab_round_trip_min_us", bound->rt_min_us, 2);
        json_key_double(&j, "slab_round_trip_max_us", bound->rt_max_us, 2);
        json_key_double(&j, "latency_bound_us", bound_us, 2);
    } else {
        const char *const keys[] = {"slab_round_trip_us", "slab_round_trip_min_us",
                                    "slab_round_trip_max_us", "latency_bound_us"};
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            json_key(&j, keys[k]);
            json_null(&j);
        }
    }
    json_key(&j, "results");
    json_array_begin(&j);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const items_row_t *r = &rows[i];
        ok &= r->ok;
        json_object_begin(&j);
        json_key_uint(&j, "item_bytes", r->item);
        json_key_uint(&j, "items", r->items);
        json_key_double(&j, "gbps_h2d", r->h2d, 3);
        json_key_double(&j, "gbps_d2h", r->d2h, 3);
        json_key_double(&j, "fraction", ceil_gbps > 0 ? fmin(r->h2d, r->d2h) / ceil_gbps : 0, 4);
        json_key_double(&j, "latency_p50_us", r->p50_us, 2);
        json_key_double(&j, "latency_p99_us", r->p99_us, 2);
        json_key_double(&j, "latency_max_us", r->max_us, 2);
        json_key_double(&j, "latency_max_at", r->max_at, 4);
        json_key_double(&j, "cpu_us_per_item", r->cpu_us, 3);
        /* of it, the submitters' spin for --rate's schedule (0 closed loop), and the rest:
         * ferry's own (its threads, and the submitters inside ferry_pipeline_submit) */
        json_key_double(&j, "cpu_us_per_item_harness", r->harness_us, 3);
        json_key_double(&j, "cpu_us_per_item_ferry", fmax(r->cpu_us - r->harness_us, 0), 3);
        json_key(&j, "cpu_us_per_item_by_thread");
        json_object_begin(&j);
        for (unsigned k = 0; k < r->nby; k++)
            json_key_double(&j, r->by_thread[k].name, r->by_thread[k].s / (double)r->items * 1e6,
                            3);
        json_object_end(&j);
        json_key_uint(&j, "passes", r->passes);
        json_key_uint(&j, "batches_gathered", r->gathered);
        json_key_uint(&j, "slabs", r->slabs);
        json_key_uint(&j, "gather_waits", r->waits);
        json_key_uint(&j, "gather_pieces", r->pieces);
        json_key(&j, "latency_p99_within_bound"); /* null: not gathered, or no bound */
        if (bound_us > 0 && r->slabs > 0)
            json_bool(&j, r->p99_us <= bound_us);
        else
            json_null(&j);
        json_key_bool(&j, "verified", r->ok);
        json_object_end(&j);
    }
    json_array_end(&j);
    json_key_bool(&j, "ok", ok);
    json_end(&j);
}

static void print_rows(ferry_runtime_t *rt, ferry_device_t *dev, const bench_opts_t *bo,
                       const items_row_t *rows, int n, double ceil_gbps, const items_bound_t *bound)
{
    double bound_us = bound->rt_us > 0 ? bound->flush_us + bound->rt_us : 0;
    bool sim = ferry_device_is_simulated(dev);
    if (bo->json) {
        print_json(rt, dev, bo, rows, n, ceil_gbps, bound_us, bound);
        return;
    }
    bench_device_line(rt, dev, NULL);
    printf("# %llu threads submit items of the scale workload, each its own batch, into one "
           "pipeline%s\n",
           bo->threads, bo->scattered ? " (items apart in memory: --scattered)" : "");
    if (ceil_gbps > 0)
        printf("# round-trip ceiling (H2D and D2H of 64 MiB at once, per direction): %.2f GB/s\n",
               ceil_gbps);
    else
        printf("# no ceiling: this process drives no device (isolation=process)\n");
    if (n > 0 && rows[0].offered > 0)
        printf("# offered on a schedule: %.2f GB/s in all (open loop); latency counts from each "
               "item's scheduled time\n",
               rows[0].offered);
    printf("# latency: submit to completion on the device's clock; cpu: this process's CPU time "
           "per item%s\n",
           sim && ceil_gbps > 0 ? " (the simulator's kernels, run on this CPU, included)"
           : ceil_gbps > 0      ? ""
                                : " (the worker's not included)");
    printf("%8s %9s %9s %9s %9s %9s %9s %9s %3s\n", "item", "items", "H2D GB/s", "D2H GB/s",
           "ceiling%", "p50 us", "p99 us", "cpu us", "ok");
    for (int i = 0; i < n; i++) {
        const items_row_t *r = &rows[i];
        char b[32];
        char frac[16] = "-";
        if (ceil_gbps > 0)
            snprintf(frac, sizeof(frac), "%.1f%%", fmin(r->h2d, r->d2h) / ceil_gbps * 100);
        printf("%8s %9llu %9.2f %9.2f %9s %9.1f %9.1f %9.2f %3s\n",
               cli_bytes(r->item, b, sizeof(b)), r->items, r->h2d, r->d2h, frac, r->p50_us,
               r->p99_us, r->cpu_us, r->ok ? "yes" : "NO");
    }
    for (int i = 0; i < n; i++) { /* where the CPU went: the submitters are "(ended)" */
        char b[32];
        printf("# cpu us per %s item by thread ((ended): the submitters):",
               cli_bytes(rows[i].item, b, sizeof(b)));
        for (unsigned k = 0; k < rows[i].nby && rows[i].by_thread[k].s > 0; k++)
            printf(" %s %.2f", rows[i].by_thread[k].name,
                   rows[i].by_thread[k].s / (double)rows[i].items * 1e6);
        printf("\n");
        if (rows[i].harness_us > 0) /* --rate: the schedule's spin is the harness's */
            printf("# of it, the submitters' spin for the schedule %.2f us, ferry's own %.2f us\n",
                   rows[i].harness_us, fmax(rows[i].cpu_us - rows[i].harness_us, 0));
        if (rows[i].slabs > 0) /* what the host paid per slab: its pieces, the waits for one */
            printf("# gathered %s items: %llu in %llu slabs, %.1f pieces a slab (both ways), "
                   "%.3f waits for a free slab an item\n",
                   cli_bytes(rows[i].item, b, sizeof(b)), rows[i].gathered, rows[i].slabs,
                   (double)rows[i].pieces / (double)rows[i].slabs,
                   (double)rows[i].waits / (double)rows[i].items);
    }
    int ngathered = 0;
    for (int i = 0; i < n; i++)
        ngathered += rows[i].slabs > 0;
    if (bound_us > 0 && ngathered > 0) { /* sizes over a quarter slab go as batches of their own */
        char b[32];
        printf("# latency bound of a gathered item: gather_us %u + one %s slab's round trip alone "
               "%.1f us (%d runs: %.1f-%.1f) = %.1f us;",
               bound->flush_us, cli_bytes(bound->slab, b, sizeof(b)), bound->rt_us, SLAB_RT_REPS,
               bound->rt_min_us, bound->rt_max_us, bound_us);
        for (int i = 0; i < n; i++)
            if (rows[i].slabs > 0)
                printf(" %s p99 %s", cli_bytes(rows[i].item, b, sizeof(b)),
                       rows[i].p99_us <= bound_us ? "within" : "over");
        printf("\n");
    }
}

/* --rate: the offered GB/s into *@gbps (0: none) and the host ns per ns of the pipeline's
 * clock into *@pace; CLI_USAGE where the rate cannot be kept: a share of no ceiling, or a
 * simulator on virtual time (its clock is not the host's). */
static int offered_rate(ferry_options_t *o, const bench_opts_t *bo, bool sim, double ceil_gbps,
                        double *gbps, double *pace)
{
    *gbps = bo->rate_gbps;
    *pace = 1;
    if (bo->rate_gbps <= 0 && bo->rate_pct <= 0)
        return CLI_OK;
    if (bo->rate_pct > 0) {
        if (ceil_gbps <= 0)
            return cli_usage_error("bench",
                                   "items --rate %g%%: there is no ceiling to take a "
                                   "share of (isolation=process); give GB/s instead",
                                   bo->rate_pct);
        *gbps = ceil_gbps * bo->rate_pct / 100;
    }
    if (sim) {
        double p = 0;
        ferry_options_get_double(o, "sim_pace", &p);
        if (p <= 0)
            return cli_usage_error("bench", "items --rate: the simulator runs on virtual time "
                                            "(option sim_pace 0), which a schedule on this "
                                            "host's clock cannot follow; set sim_pace (e.g. "
                                            "--sim-pace 1: the simulated device in real time)");
        *pace = p;
    }
    return CLI_OK;
}

int bench_items(ferry_options_t *o, const bench_opts_t *bo)
{
    ferry_runtime_t *rt = bench_open_runtime(o, NULL, NULL);
    if (rt == NULL)
        return CLI_FAIL;
    ferry_device_t *dev = NULL;
    int64_t idx = 0;
    ferry_options_get_i64(o, "device", &idx);
    ferry_workload_t *wl = NULL;
    items_row_t rows[32];
    int n = 0, rc = CLI_OK;
    if (ferry_device_get(rt, (int)idx, &dev) != 0 ||
        ferry_workload_create("scale", NULL, &wl) != 0) {
        rc = cli_fail("bench", "%s", ferry_last_error());
        goto out;
    }
    bool sim = ferry_device_is_simulated(dev);
    unsigned long long total = bo->bytes ? bo->bytes : sim ? 64ull << 20 : 1ull << 30;
    /* the ceiling: one H2D and one D2H of 64 MiB at once (in this process: under
     * isolation=process there is no device here, and no ceiling) */
    double ceil_gbps = 0;
    ferry_copy_bench_config_t c = FERRY_COPY_BENCH_CONFIG_INIT;
    ferry_copy_bench_result_t cr = FERRY_COPY_BENCH_RESULT_INIT;
    c.bytes = 64u << 20;
    c.dir = FERRY_COPY_BOTH;
    c.reps = bo->reps ? (unsigned)bo->reps : 10;
    c.warmup = 3;
    if (ferry_bench_copy(dev, &c, &cr) == 0)
        ceil_gbps = cr.best_gbps / 2;
    items_run_t pacing = {.pace = 1};
    double offered = 0;
    if ((rc = offered_rate(o, bo, sim, ceil_gbps, &offered, &pacing.pace)) != CLI_OK)
        goto out;
    pacing.gap_ns = offered > 0 ? pacing.pace / offered : 0; /* host ns per byte */
    items_bound_t bound = {0};
    int64_t gb = 0, gus = 0;
    ferry_options_get_i64(o, "gather_bytes", &gb);
    ferry_options_get_i64(o, "gather_us", &gus);
    bound.slab = (size_t)gb;
    bound.flush_us = (unsigned)gus;
    if (bound.slab > 0)
        slab_round_trip(dev, wl, &bound);
    for (int i = 0; i < bo->nsizes && rc == CLI_OK; i++, n++) {
        rc = measure_size(dev, wl, bo, (size_t)bo->sizes[i], total, &pacing, &rows[i]);
        rows[i].offered = offered;
    }
    if (rc == CLI_OK) {
        print_rows(rt, dev, bo, rows, n, ceil_gbps, &bound);
        for (int i = 0; i < n; i++) {
            char sz[32];
            snprintf(sz, sizeof(sz), "%llu", rows[i].item);
            const char *const lab[] = {"item_bytes", sz, NULL};
            bench_metrics_result(bo, "ferry_bench_items_latency_p99_seconds",
                                 "p99 latency of an item, submit to completion.", lab,
                                 rows[i].p99_us / 1e6);
            bench_metrics_result(bo, "ferry_bench_items_bytes_per_second",
                                 "Items' bytes each way per second (the slower direction).", lab,
                                 fmin(rows[i].h2d, rows[i].d2h) * 1e9);
        }
    }
out:
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    return rc;
}
