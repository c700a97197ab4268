/* `ferry bench pipeline`: a sweep of the round trip H2D -> kernel -> D2H over chunk size x
 * compute streams x compute intensity, each against the bidirectional copy ceiling measured in
 * the same run; --compare runs the sweep on the simulator too and puts prediction beside
 * measurement; --report charts it. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "ferry/bench.h"
#include "progress.h"
#include "report.h"

/* ---- pipeline sweep ------------------------------------------------------------------------ */

typedef struct sweep_row {
    unsigned long long chunk, streams, intensity;
    unsigned long long copy_bytes; /* what one copy moved: a chunk, or a group (coalesce_bytes) */
    double h2d, d2h, overlap, ceiling; /* the median pass (by the slower direction) */
    double best;                       /* the best pass, GB/s each way (the slower direction) */
    unsigned passes;
    bool ok;
} sweep_row_t;

static void count_done(const ferry_batch_result_t *r, void *arg)
{
    atomic_int *c = arg;
    atomic_fetch_add(&c[r->status == 0 ? 0 : 1], 1);
}

/* The round trip's ceiling: one H2D and one D2H of 64 MiB at once, per direction. */
static int ceiling(ferry_device_t *dev, unsigned reps, double *out)
{
    ferry_copy_bench_config_t c = FERRY_COPY_BENCH_CONFIG_INIT;
    ferry_copy_bench_result_t r = FERRY_COPY_BENCH_RESULT_INIT;
    c.bytes = 64u << 20;
    c.dir = FERRY_COPY_BOTH;
    c.reps = reps;
    c.warmup = 3;
    int rc = ferry_bench_copy(dev, &c, &r);
    *out = r.best_gbps / 2; /* the ceiling: what the link did at its best in this run */
    return rc;
}

/* What the cases of one sweep share: the device, the pinned input and output (@pool bytes
 * each, batches cycle over them) and the bytes each configuration streams. */
typedef struct sweep_ctx {
    const bench_opts_t *bo;
    ferry_device_t *dev;
    const char *label; /* in the metrics: "measured" or "prediction" */
    float *in, *outb;
    size_t pool;
    unsigned long long total;
} sweep_ctx_t;

/* One pass of @row's configuration on a fresh pipeline, as a user's run would be: its stats
 * into @st, its copy size and whether every batch completed into @row. */
static int one_pass(const sweep_ctx_t *sc, ferry_workload_t *wl, sweep_row_t *row, size_t batch,
                    ferry_pipeline_stats_t *st)
{
    size_t per_pool = sc->pool / batch; /* batches cycle over the pinned buffers */
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = sc->dev;
    pc.stage = ferry_workload_stage(wl);
    pc.chunk_bytes = (size_t)row->chunk;
    pc.compute_streams = (unsigned)row->streams;
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&pc, &p) != 0)
        return cli_fail("bench", "pipeline: %s", ferry_last_error());
    /* each pass's pipeline is served while it runs */
    if (cli_metrics_attach(sc->bo->metrics, p, sc->label) != CLI_OK) {
        ferry_pipeline_close(p);
        return CLI_FAIL;
    }
    atomic_int counts[2] = {0, 0};
    int nb = 0, rc = CLI_OK;
    for (unsigned long long off = 0; off < sc->total; off += batch, nb++) {
        size_t at = (size_t)((unsigned long long)nb % per_pool) * batch;
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = (char *)sc->in + at;
        b.out = (char *)sc->outb + at;
        b.bytes = sc->total - off < batch ? (size_t)(sc->total - off) : batch;
        if (ferry_pipeline_submit(p, &b, count_done, counts, NULL) != 0) {
            rc = cli_fail("bench", "submit: %s", ferry_last_error());
            break;
        }
    }
    ferry_pipeline_drain(p);
    ferry_pipeline_stats(p, st);
    cli_metrics_detach(sc->bo->metrics, p);
    ferry_pipeline_destroy(p);
    /* A copy group never spans batches: a batch holds 4 chunks here. */
    unsigned grp = st->copy_group < 4 ? st->copy_group : 4;
    row->copy_bytes = (unsigned long long)(grp ? grp : 1) * row->chunk;
    if (row->copy_bytes > batch)
        row->copy_bytes = batch;
    row->ok &= atomic_load(&counts[1]) == 0 && atomic_load(&counts[0]) == nb;
    return rc;
}

/* The median pass by its slower direction (the lower middle of an even count), and the best. */
static void median_pass(sweep_row_t *row, const double *ph, const double *pd, const double *po,
                        unsigned passes)
{
    unsigned order[100];
    for (unsigned i = 0; i < passes; i++)
        order[i] = i;
    for (unsigned i = 1; i < passes; i++)
        for (unsigned j = i;
             j > 0 && fmin(ph[order[j]], pd[order[j]]) < fmin(ph[order[j - 1]], pd[order[j - 1]]);
             j--) {
            unsigned t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    unsigned med = order[(passes - 1) / 2], top = order[passes - 1];
    row->h2d = ph[med];
    row->d2h = pd[med];
    row->overlap = po[med];
    row->best = fmin(ph[top], pd[top]);
}

/* @row's result in the metrics, each way. */
static void row_metrics(const sweep_ctx_t *sc, const sweep_row_t *row)
{
    char cb[32], cs[32], ci[32];
    snprintf(cb, sizeof(cb), "%llu", row->chunk);
    snprintf(cs, sizeof(cs), "%llu", row->streams);
    snprintf(ci, sizeof(ci), "%llu", row->intensity);
    const char *help = "Round-trip rate of one configuration each way, the median pass.";
    const char *const lh[] = {"sweep",           sc->label, "chunk_bytes", cb,
                              "compute_streams", cs,        "intensity",   ci,
                              "direction",       "h2d",     NULL};
    const char *const ld[] = {"sweep",           sc->label, "chunk_bytes", cb,
                              "compute_streams", cs,        "intensity",   ci,
                              "direction",       "d2h",     NULL};
    bench_metrics_result(sc->bo, "ferry_bench_pipeline_bytes_per_second", help, lh, row->h2d * 1e9);
    bench_metrics_result(sc->bo, "ferry_bench_pipeline_bytes_per_second", help, ld, row->d2h * 1e9);
    ferry_metric_add(sc->bo->cases_done, 1);
}

/* Measure one configuration (@row's chunk, streams and intensity filled in). */
static int measure_case(const sweep_ctx_t *sc, sweep_row_t *row)
{
    ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
    wp.intensity = (unsigned)row->intensity;
    ferry_workload_t *wl = NULL;
    if (ferry_workload_create(row->intensity ? "fma" : "scale", &wp, &wl) != 0)
        return cli_fail("bench", "%s", ferry_last_error());
    size_t batch = (size_t)row->chunk * 4;
    if (batch > sc->pool)
        batch = sc->pool;
    batch -= batch % 4;
    /* Passes: on a GPU a warm-up pass first (the process's first launch of a kernel loads its
     * module; clocks ramp up), then the median of the measured ones, each on a fresh pipeline
     * as a user's run would be. The simulator: one pass by default (its kernels run on this
     * CPU), no warm-up (nothing to warm). */
    bool sim = ferry_device_is_simulated(sc->dev);
    unsigned warm = sim ? 0 : 1;
    unsigned passes = sc->bo->passes ? (unsigned)sc->bo->passes : sim ? 1u : 3u;
    double ph[100], pd[100], po[100];
    row->ok = true;
    row->passes = passes;
    int rc = CLI_OK;
    for (unsigned pass = 0; pass < warm + passes && rc == CLI_OK; pass++) {
        ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
        rc = one_pass(sc, wl, row, batch, &st);
        if (pass >= warm) {
            ph[pass - warm] = st.gbps_h2d;
            pd[pass - warm] = st.gbps_d2h;
            po[pass - warm] = st.overlap;
        }
    }
    if (rc != CLI_OK) {
        ferry_workload_destroy(wl);
        return rc;
    }
    median_pass(row, ph, pd, po, passes);
    /* spot check: the last batch's output against the CPU reference */
    if (row->ok) {
        size_t chk = batch < (4u << 20) ? batch : (4u << 20);
        float *ref = malloc(chk);
        if (ref != NULL) {
            ferry_workload_reference(wl, sc->in, ref, chk);
            row->ok = memcmp(ref, sc->outb, chk) == 0;
            free(ref);
        }
    }
    ferry_workload_destroy(wl);
    row_metrics(sc, row);
    return CLI_OK;
}

/* Every configuration, the ceiling first. */
static int sweep_cases(const sweep_ctx_t *sc, sweep_row_t *rows, int *nrows)
{
    const bench_opts_t *bo = sc->bo;
    cli_progress_t bar;
    cli_progress_begin(&bar, "configurations",
                       (uint64_t)bo->nchunks * (uint64_t)bo->nstreams * (uint64_t)bo->nint, false,
                       false);
    double ceil_gbps = 0;
    int rc = CLI_OK;
    if (ceiling(sc->dev, (unsigned)(bo->reps ? bo->reps : 10), &ceil_gbps) != 0)
        rc = cli_fail("bench", "ceiling: %s", ferry_last_error());
    int n = 0;
    for (int c = 0; c < bo->nchunks && rc == CLI_OK; c++)
        for (int s = 0; s < bo->nstreams && rc == CLI_OK; s++)
            for (int k = 0; k < bo->nint && rc == CLI_OK; k++) {
                sweep_row_t *row = &rows[n++];
                *row = (sweep_row_t){.chunk = bo->chunks[c],
                                     .streams = bo->streams[s],
                                     .intensity = bo->intensities[k],
                                     .ceiling = ceil_gbps};
                rc = measure_case(sc, row);
                if (rc == CLI_OK)
                    cli_progress_update(&bar, (uint64_t)n);
            }
    if (rc == CLI_OK)
        *nrows = n;
    cli_progress_end(&bar);
    return rc;
}

/* The sweep on @backend (NULL: the options' choice), @label in the metrics ("measured",
 * "prediction"). @total_io: bytes per configuration; 0 in: the default for the device (4G on
 * a GPU, 256M on the simulator), set to what was used. */
static int sweep(ferry_options_t *o, const bench_opts_t *bo, const char *backend,
                 const char *profile, const char *label, unsigned long long *total_io,
                 sweep_row_t *rows, int *nrows, ferry_runtime_t **rt_out)
{
    ferry_runtime_t *rt = bench_open_runtime(o, backend, profile);
    if (rt == NULL)
        return CLI_FAIL;
    *rt_out = rt;
    int64_t idx = 0;
    ferry_options_get_i64(o, "device", &idx);
    ferry_device_t *dev = NULL;
    if (ferry_device_get(rt, (int)idx, &dev) != 0)
        return cli_fail("bench", "%s", ferry_last_error());
    unsigned long long total = *total_io;
    if (total == 0)
        total = ferry_device_is_simulated(dev) ? (256ull << 20) : (4ull << 30);
    *total_io = total;
    /* Input and output live in registered (pinned) host memory, so the copies go straight
     * from and to them: the sweep measures the device path, not host staging. They start on a
     * page boundary, as cudaHostAlloc's and a pinned PyTorch tensor's do, or --host-offset
     * bytes past one. The input is random floats in +-[1, 2); batches cycle over it. */
    size_t pool = total < (1ull << 30) ? (size_t)total : (1u << 30);
    size_t map_bytes = pool + 4096;
    unsigned char *in_map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  *out_map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int rc = CLI_OK;
    if (in_map == MAP_FAILED || out_map == MAP_FAILED) {
        rc = cli_fail("bench", "out of host memory for 2 x %zu bytes", pool);
        goto out;
    }
    sweep_ctx_t sc = {.bo = bo,
                      .dev = dev,
                      .label = label,
                      .in = (float *)(in_map + bo->host_offset),
                      .outb = (float *)(out_map + bo->host_offset),
                      .pool = pool,
                      .total = total};
    bench_fill_floats(sc.in, pool, 88172645463325252ull);
    if (ferry_host_register(dev, sc.in, pool) != 0 ||
        ferry_host_register(dev, sc.outb, pool) != 0) {
        rc = cli_fail("bench", "cannot pin the buffers: %s", ferry_last_error());
        goto out;
    }
    rc = sweep_cases(&sc, rows, nrows);
    ferry_host_unregister(dev, sc.in);
    ferry_host_unregister(dev, sc.outb);
out:
    if (in_map != MAP_FAILED)
        munmap(in_map, map_bytes);
    if (out_map != MAP_FAILED)
        munmap(out_map, map_bytes);
    return rc;
}

/* The name of the series of compute-stream count @s and intensity @k. */
static void series_name(const bench_opts_t *bo, int s, int k, bool sim, char *buf, size_t len)
{
    char wl[48] = "";
    if (bo->nint > 1 || bo->intensities[k] != 0) {
        if (bo->intensities[k] == 0)
            snprintf(wl, sizeof(wl), ", scale");
        else
            snprintf(wl, sizeof(wl), ", fma x%llu", bo->intensities[k]);
    }
    snprintf(buf, len, "%llu compute stream%s%s%s", bo->streams[s], bo->streams[s] == 1 ? "" : "s",
             wl, sim ? " (simulator)" : "");
}

/* One series per compute-stream count x intensity over the chunk sizes (measured, and the
 * simulator's prediction dashed in the same colour with --compare), the ceiling a line. */
static void pipeline_chart(report_t *r, const bench_opts_t *bo, const sweep_row_t *meas,
                           const sweep_row_t *pred, int n, int np)
{
    int nser = bo->nstreams * bo->nint, nc = bo->nchunks;
    double *x = calloc((size_t)nc, sizeof(double)),
           *y = calloc((size_t)2 * (size_t)nser * (size_t)nc, sizeof(double));
    report_series_t *se = calloc((size_t)2 * (size_t)nser, sizeof(*se));
    char(*names)[80] = calloc((size_t)2 * (size_t)nser, 80);
    if (x == NULL || y == NULL || se == NULL || names == NULL)
        goto out;
    int m = 0;
    for (int c = 0; c < nc; c++)
        x[c] = (double)bo->chunks[c];
    for (int sim = 0; sim < (bo->compare && np == n ? 2 : 1); sim++)
        for (int s = 0; s < bo->nstreams; s++)
            for (int k = 0; k < bo->nint; k++, m++) {
                double *ys = y + (size_t)m * (size_t)nc;
                for (int c = 0; c < nc; c++)
                    ys[c] = (sim ? pred : meas)[(c * bo->nstreams + s) * bo->nint + k].h2d;
                series_name(bo, s, k, sim, names[m], sizeof(names[m]));
                se[m] = (report_series_t){names[m], x, ys, nc, s * bo->nint + k, sim == 1};
            }
    char ceil_name[128];
    snprintf(ceil_name, sizeof(ceil_name),
             "copy ceiling in this run: %.1f GB/s per direction (H2D + D2H of 64 MiB at once)",
             n ? meas[0].ceiling : 0.0);
    report_line_t line = {ceil_name, n ? meas[0].ceiling : 0};
    report_xy_t ch = {.chart = "pipeline-throughput",
                      .title = "Round-trip throughput by chunk size",
                      .x_label = "chunk size (log scale)",
                      .y_label = "GB/s each way (1e9 bytes/s)",
                      .y_unit = "GB/s each way",
                      .series = se,
                      .nseries = m,
                      .lines = &line,
                      .nlines = 1,
                      .note = bo->compare ? "Solid: measured; dashed, hollow markers: the "
                                            "simulator's prediction of the same sweep."
                                          : NULL};
    report_xy_chart(r, &ch);
out:
    free(x);
    free(y);
    free(se);
    free(names);
}

static void pipeline_table(report_t *r, const bench_opts_t *bo, const sweep_row_t *meas,
                           const sweep_row_t *pred, int n, int np)
{
    bool cmp = bo->compare && np == n;
    /* without --compare, a NULL in place of the simulator's column ends the list there */
    report_table(r, "chunk", "copy", "compute streams", "intensity", "H2D GB/s", "D2H GB/s",
                 "overlap", "of ceiling", "verified", cmp ? "simulator H2D GB/s" : NULL, "error",
                 NULL);
    for (int i = 0; i < n; i++) {
        const sweep_row_t *w = &meas[i];
        char v[10][40], cb[40];
        cli_bytes(w->chunk, v[0], sizeof(v[0]));
        cli_bytes(w->copy_bytes, cb, sizeof(cb));
        snprintf(v[1], sizeof(v[1]), "%llu", w->streams);
        snprintf(v[2], sizeof(v[2]), "%llu", w->intensity);
        snprintf(v[3], sizeof(v[3]), "%.2f", w->h2d);
        snprintf(v[4], sizeof(v[4]), "%.2f", w->d2h);
        snprintf(v[5], sizeof(v[5]), "%.2f", w->overlap);
        snprintf(v[6], sizeof(v[6]), "%.1f%%",
                 w->ceiling > 0 ? fmin(w->h2d, w->d2h) / w->ceiling * 100 : 0);
        snprintf(v[7], sizeof(v[7]), "%s", w->ok ? "yes" : "NO");
        if (cmp) {
            snprintf(v[8], sizeof(v[8]), "%.2f", pred[i].h2d);
            snprintf(v[9], sizeof(v[9]), "%+.1f%%",
                     w->h2d > 0 ? (pred[i].h2d - w->h2d) / w->h2d * 100 : 0);
        }
        report_row(r, v[0], cb, v[1], v[2], v[3], v[4], v[5], v[6], v[7], cmp ? v[8] : NULL, v[9],
                   NULL);
    }
    report_table_end(r);
}

static int pipeline_report(ferry_runtime_t *rt, ferry_device_t *dev, const bench_opts_t *bo,
                           const sweep_row_t *meas, const sweep_row_t *pred, int n, int np)
{
    report_t *r =
        report_open("bench", bo->report, "ferry bench pipeline", bo->argc, bo->argv, rt, dev);
    if (r == NULL)
        return CLI_FAIL;
    char b[32];
    unsigned long long total = bo->bytes;
    if (total == 0)
        total = ferry_device_is_simulated(dev) ? (256ull << 20) : (4ull << 30);
    report_heading(r, "Pipeline throughput");
    report_text(r,
                "Each configuration streams %s from pinned host memory through H2D, the kernel "
                "and D2H (intensity 0: the scale workload; N: fma with N multiply-adds per "
                "float) and reports bytes over the elapsed device time%s, the median of %u "
                "pass(es) on fresh pipelines (on a GPU after a warm-up pass); H2D and D2H move the "
                "same bytes. The ceiling is what the link did in this run with one H2D and one "
                "D2H of 64 MiB at once (best of %llu), per direction.",
                cli_bytes(total, b, sizeof(b)),
                ferry_device_is_simulated(dev) ? " (virtual time: the simulator)" : "",
                n ? meas[0].passes : 1u, bo->reps ? bo->reps : 10);
    if (bo->compare)
        report_text(r, "The simulator's prediction: the same sweep on the sim backend with %s%s.",
                    bo->compare_profile ? "the profile " : "the installed profile",
                    bo->compare_profile ? bo->compare_profile : " (profiles/h200.json)");
    pipeline_chart(r, bo, meas, pred, n, np);
    report_heading(r, "Results");
    pipeline_table(r, bo, meas, pred, n, np);
    return report_close(r);
}

int bench_pipeline(ferry_options_t *o, const bench_opts_t *bo)
{
    int max = bo->nchunks * bo->nstreams * bo->nint;
    sweep_row_t *meas = calloc((size_t)max, sizeof(*meas));
    sweep_row_t *pred = calloc((size_t)max, sizeof(*pred));
    ferry_runtime_t *rt = NULL, *rt_sim = NULL;
    int n = 0, np = 0, rc;
    /* The prediction streams --compare-bytes (default: the simulator's 256M, as its kernels run
     * on the CPU): filling and draining the pipeline weigh more in a shorter run than the
     * GPU's 4G (16 MiB chunks: the prediction ~5% lower at 256M than at 4G). */
    unsigned long long total = bo->bytes, sim_total = bo->compare_bytes;
    rc = sweep(o, bo, NULL, NULL, "measured", &total, meas, &n, &rt);
    if (rc == CLI_OK && bo->compare)
        rc = sweep(o, bo, "sim", bo->compare_profile, "prediction", &sim_total, pred, &np, &rt_sim);
    if (rc != CLI_OK)
        goto out;
    ferry_device_t *dev = NULL;
    int64_t idx = 0;
    ferry_options_get_i64(o, "device", &idx);
    ferry_device_get(rt, (int)idx, &dev);
    bool all_ok = true;
    json_t j;
    if (bo->json) {
        json_command_begin(&j, stdout, "bench pipeline");
        bench_device_line(rt, dev, &j);
        json_key_double(&j, "ceiling_gbps", n ? meas[0].ceiling : 0.0, 3);
        json_key_uint(&j, "host_offset", bo->host_offset);
        json_key(&j, "results");
        json_array_begin(&j);
    } else if (bo->csv) {
        printf("chunk_bytes,compute_streams,intensity,gbps_h2d,gbps_d2h,overlap,ceiling_gbps,"
               "fraction,verified,copy_bytes%s\n",
               bo->compare ? ",sim_gbps_h2d,sim_error" : "");
    } else {
        bench_device_line(rt, dev, NULL);
        printf("# round-trip ceiling (H2D and D2H of 64 MiB at once, per direction): %.2f GB/s\n",
               n ? meas[0].ceiling : 0.0);
        if (bo->host_offset != 0)
            printf("# input and output start %llu bytes past a page boundary\n", bo->host_offset);
        if (n && meas[0].passes > 1)
            printf("# each configuration: the median of %u passes%s\n", meas[0].passes,
                   ferry_device_is_simulated(dev) ? "" : ", after a warm-up pass");
        printf("%10s %10s %7s %9s %9s %9s %8s %9s %3s", "chunk", "copy", "streams", "intensity",
               "H2D GB/s", "D2H GB/s", "overlap", "ceiling%", "ok");
        if (bo->compare)
            printf(" %9s %7s", "sim GB/s", "error");
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        sweep_row_t *r = &meas[i];
        double frac = r->ceiling > 0 ? fmin(r->h2d, r->d2h) / r->ceiling : 0;
        double err = bo->compare && i < np && r->h2d > 0 ? (pred[i].h2d - r->h2d) / r->h2d : 0;
        all_ok &= r->ok;
        if (bo->json) {
            json_object_begin(&j);
            json_key_uint(&j, "chunk_bytes", r->chunk);
            json_key_uint(&j, "copy_bytes", r->copy_bytes);
            json_key_uint(&j, "compute_streams", r->streams);
            json_key_uint(&j, "intensity", r->intensity);
            json_key_double(&j, "gbps_h2d", r->h2d, 3);
            json_key_double(&j, "gbps_d2h", r->d2h, 3);
            json_key_double(&j, "overlap", r->overlap, 3);
            json_key_double(&j, "fraction", frac, 4);
            json_key_bool(&j, "verified", r->ok);
            json_key_uint(&j, "passes", r->passes);
            json_key_double(&j, "best_gbps", r->best, 3);
            if (bo->compare) {
                json_key_double(&j, "sim_gbps_h2d", pred[i].h2d, 3);
                json_key_double(&j, "sim_gbps_d2h", pred[i].d2h, 3);
                json_key_double(&j, "sim_error", err, 4);
            }
            json_object_end(&j);
        } else if (bo->csv) {
            printf("%llu,%llu,%llu,%.3f,%.3f,%.3f,%.3f,%.4f,%d,%llu", r->chunk, r->streams,
                   r->intensity, r->h2d, r->d2h, r->overlap, r->ceiling, frac, r->ok,
                   r->copy_bytes);
            if (bo->compare)
                printf(",%.3f,%.4f", pred[i].h2d, err);
            printf("\n");
        } else {
            char b[32], cb[32];
            printf("%10s %10s %7llu %9llu %9.2f %9.2f %8.2f %8.1f%% %3s",
                   cli_bytes(r->chunk, b, sizeof(b)), cli_bytes(r->copy_bytes, cb, sizeof(cb)),
                   r->streams, r->intensity, r->h2d, r->d2h, r->overlap, frac * 100,
                   r->ok ? "yes" : "NO");
            if (bo->compare)
                printf(" %9.2f %+6.1f%%", pred[i].h2d, err * 100);
            printf("\n");
        }
    }
    if (bo->json) {
        json_array_end(&j);
        json_key_bool(&j, "ok", all_ok);
        json_end(&j);
    }
    rc = all_ok ? CLI_OK : CLI_FAIL;
    if (bo->report) {
        int rrc = pipeline_report(rt, dev, bo, meas, pred, n, np);
        if (rrc == CLI_OK && !bo->json && !bo->csv)
            printf("# report: %s\n", bo->report);
        rc = rrc != CLI_OK ? rrc : rc;
    }
out:
    ferry_runtime_destroy(rt);
    ferry_runtime_destroy(rt_sim);
    free(meas);
    free(pred);
    return rc;
}
