/* `ferry bench copy` and `ferry bench pipeline`: the device's copy rates by size and direction,
 * and a sweep of the round trip H2D -> kernel -> D2H over chunk size x compute streams x
 * compute intensity, each against the bidirectional copy ceiling measured in the same run.
 * `--compare` runs the sweep on the simulator too and puts prediction beside measurement;
 * `--report` charts either as an HTML page (report.c). */
#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "progress.h"
#include "ferry/bench.h"
#include "report.h"

typedef struct bench_opts {
    bool json, csv, compare, no_pageable;
    unsigned long long reps;
    unsigned long long bytes; /* pipeline: bytes per configuration */
    unsigned long long sizes[32];
    int nsizes;
    unsigned long long chunks[16];
    int nchunks;
    unsigned long long streams[8];
    int nstreams;
    unsigned long long intensities[8];
    int nint;
    const char *compare_profile;
    unsigned long long compare_bytes; /* the simulator's bytes per configuration; 0: default */
    unsigned long long passes;        /* pipeline: measured passes per configuration; 0: 3 on a
                                         GPU (after a warm-up pass), 1 on the simulator */
    unsigned long long host_offset;   /* pipeline: bytes past a page boundary of in and out */
    const char *report;               /* --report FILE */
    cli_metrics_t *metrics;           /* --metrics-addr, --metrics-file; NULL: neither */
    ferry_metric_t *cases_done;       /* ferry_bench_cases_total */
    int argc;                         /* the command line, for the report */
    char **argv;
} bench_opts_t;

/* One case of the copy benchmark, kept for the report. */
typedef struct copy_cell {
    double best_gbps, median_gbps, best_us, median_us;
} copy_cell_t;

/* Parse "4K,1M,16M" (sizes) or "1,2,4" (numbers) into @v. */
static int parse_list(const char *flag, const char *text, bool sizes, unsigned long long lo,
                      unsigned long long hi, unsigned long long *v, int max, int *n)
{
    char *copy = strdup(text);
    int k = 0, rc = 0;
    if (copy == NULL)
        return cli_fail("bench", "--%s: out of memory", flag);
    /* strtok would skip empty items ("4K,,8K"): walk the commas by hand to refuse them. */
    for (char *tok = copy, *comma = NULL; tok; tok = comma ? comma + 1 : NULL) {
        unsigned long long x = 0;
        comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        if (*tok == '\0') {
            rc = cli_usage_error("bench",
                                 "--%s '%s': item %d is empty (accepted: a comma-separated list "
                                 "with no empty item, e.g. %s)",
                                 flag, text, k + 1, sizes ? "4K,1M,16M" : "1,2,4");
            break;
        }
        if (k == max) {
            rc = cli_usage_error("bench", "--%s: at most %d values", flag, max);
            break;
        }
        if (sizes ? cli_parse_size("bench", flag, tok, &x)
                  : cli_parse_uint("bench", flag, tok, lo, hi, &x)) {
            rc = CLI_USAGE;
            break;
        }
        if (x < lo || x > hi) {
            rc = cli_usage_error("bench", "--%s: %s is out of range (%llu to %llu)", flag, tok, lo,
                                 hi);
            break;
        }
        v[k++] = x;
    }
    free(copy);
    if (rc == 0 && k == 0)
        rc = cli_usage_error("bench", "--%s: empty list", flag);
    *n = k;
    return rc;
}

static int usage(void)
{
    printf(
        "usage: ferry bench copy [options]\n"
        "       ferry bench pipeline [options]\n\n"
        "copy: time single copies of each size, H2D, D2H and both at once, from pinned and\n"
        "pageable host memory, with device events; best and median of --reps.\n"
        "  --sizes LIST      sizes (default 4K,64K,1M,4M,16M,64M,256M,1G)\n"
        "  --reps N          timed repetitions per case (default 10), after 2 warm-ups\n"
        "  --no-pageable     pinned memory only\n"
        "  'both' rows give the sum of the two directions (H2D+D2H bytes over the time)\n\n"
        "pipeline: stream --bytes through H2D -> kernel -> D2H for every chunk size x compute\n"
        "streams x intensity, and report GB/s each way, overlap and the fraction of the\n"
        "bidirectional copy ceiling measured in the same run.\n"
        "  --bytes SIZE      bytes per configuration (default 4G on a GPU, 256M on the simulator,\n"
        "                    whose kernels run on the CPU)\n"
        "  --chunks LIST     chunk sizes (default 256K,1M,4M,16M)\n"
        "  --streams LIST    compute streams (default 1,2)\n"
        "  --intensity LIST  FMAs per float; 0 is the scale workload (default 0,64)\n"
        "  --passes N        measured passes per configuration, each on a fresh pipeline,\n"
        "                    the median reported (default 3 on a GPU, after a warm-up pass;\n"
        "                    1 on the simulator, whose kernels run on this CPU)\n"
        "  --host-offset N   start the input and output N bytes past a page boundary\n"
        "                    (default 0; malloc'd blocks start 16 bytes in)\n"
        "  --coalesce-bytes SIZE  merge the copies of a batch's adjacent chunks up to SIZE\n"
        "                    (batches hold 4 chunks; the copy column shows what one copy\n"
        "                    moved); default 8M, the option's; 0: a copy per chunk\n"
        "  --compare         also run the sweep on the simulator (--compare-profile FILE,\n"
        "                    --compare-bytes SIZE: default 256M, as its kernels run on the\n"
        "                    CPU; a shorter run than the GPU's weighs filling and draining\n"
        "                    the pipeline more)\n\n"
        "both: --json, --csv, --report FILE (an HTML page with the charts, docs/report.md),\n"
        "      --backend auto|sim|cuda, --profile FILE, any `ferry options` flag;\n"
        "      --metrics-addr ADDR, --metrics-file FILE serve and write the cases done, each\n"
        "      result and the running pipeline's series (docs/metrics.md)\n");
    return CLI_OK;
}

/* ---- metrics: the cases done and each case's result, as they come ------------------------ */

static int metrics_start(bench_opts_t *bo, const ferry_options_t *o, const char *what,
                         unsigned long long planned)
{
    if (cli_metrics_start("bench", o, NULL, NULL, false, &bo->metrics) != CLI_OK)
        return CLI_FAIL;
    ferry_metrics_t *reg = cli_metrics_registry(bo->metrics);
    if (reg == NULL)
        return CLI_OK;
    const char *const lab[] = {"bench", what, NULL};
    ferry_metric_t *g = NULL;
    if (ferry_metrics_counter(reg, "ferry_bench_cases_total", "Benchmark cases done.", lab,
                              &bo->cases_done) != 0 ||
        ferry_metrics_gauge(reg, "ferry_bench_cases_planned", "Benchmark cases planned.", lab,
                            &g) != 0)
        return cli_fail("bench", "metrics: %s", ferry_last_error());
    ferry_metric_set(g, (double)planned);
    return CLI_OK;
}

/* One gauge per result, registered when the case is done; a case measured twice (a size
 * given twice) keeps its first value: the registry refuses the same series twice. */
static void metrics_result(const bench_opts_t *bo, const char *name, const char *help,
                           const char *const *labels, double v)
{
    ferry_metrics_t *reg = cli_metrics_registry(bo->metrics);
    ferry_metric_t *g = NULL;
    if (reg == NULL)
        return;
    if (ferry_metrics_gauge(reg, name, help, labels, &g) == 0)
        ferry_metric_set(g, v);
}

static ferry_runtime_t *open_runtime(ferry_options_t *o, const char *backend, const char *profile)
{
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    rc.options = o;
    rc.backend = backend;
    rc.profile = profile;
    ferry_runtime_t *rt = NULL;
    if (ferry_runtime_create(&rc, &rt) != 0) {
        cli_fail("bench", "%s", ferry_last_error());
        return NULL;
    }
    return rt;
}

/* The device a benchmark ran on: a comment line, or the members of the JSON object. */
static void device_line(ferry_runtime_t *rt, ferry_device_t *dev, json_t *j)
{
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    if (j != NULL) {
        json_key_str(j, "backend", ferry_runtime_backend(rt));
        json_key_str(j, "device", p.name);
        json_key_bool(j, "simulated", p.simulated);
        json_key_str(j, "driver", p.driver_version);
        json_key_double(j, "link_gbps", p.link_gbps, 2);
    } else {
        printf("# %s: %s, driver %s, link %.1f GB/s per direction%s\n", ferry_runtime_backend(rt),
               p.name, p.driver_version, p.link_gbps, p.simulated ? " (times simulated)" : "");
    }
}

static const char *const copy_dirs[] = {"h2d", "d2h", "both"};

/* The copy report: bandwidth by size per direction and memory against the link's rate, and
 * every result in a table. */
static void copy_chart(report_t *r, ferry_device_t *dev, const bench_opts_t *bo,
                       copy_cell_t cells[2][3][32])
{
    static const char *const names[3] = {"H2D", "D2H", "both at once, (H2D+D2H sum) / 2"};
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    double x[32], y[2][3][32];
    char sname[2][3][64], link[256];
    report_series_t se[6];
    int ns = 0;
    for (int i = 0; i < bo->nsizes; i++)
        x[i] = (double)bo->sizes[i];
    for (int pg = 0; pg < (bo->no_pageable ? 1 : 2); pg++)
        for (int d = 0; d < 3; d++) {
            /* both: bytes of both directions over the time, halved to compare with the link */
            for (int i = 0; i < bo->nsizes; i++)
                y[pg][d][i] = cells[pg][d][i].best_gbps / (d == 2 ? 2 : 1);
            snprintf(sname[pg][d], sizeof(sname[pg][d]), "%s, %s", names[d],
                     pg ? "pageable" : "pinned");
            se[ns++] = (report_series_t){sname[pg][d], x, y[pg][d], bo->nsizes, d, pg == 1};
        }
    report_line_t line;
    const char *warning = NULL;
    int nlines = report_link_line(&p, &line, link, sizeof(link), &warning);
    char title[96];
    snprintf(title, sizeof(title), "Copy bandwidth by transfer size (best of %llu)", bo->reps);
    report_xy_t c = {.chart = "copy-bandwidth",
                     .title = title,
                     .x_label = "bytes per copy (log scale)",
                     .y_label = "GB/s per direction (1e9 bytes/s)",
                     .y_unit = "GB/s",
                     .series = se,
                     .nseries = ns,
                     .lines = &line,
                     .nlines = nlines,
                     .warning = warning,
                     .note = bo->no_pageable ? "Pinned host memory. The dotted line is the "
                                               "link's theoretical rate per direction."
                                             : "Solid: pinned host memory; dashed, hollow "
                                               "markers: pageable. The dotted line is the "
                                               "link's theoretical rate per direction."};
    report_xy_chart(r, &c);
}

static void copy_table(report_t *r, const bench_opts_t *bo, copy_cell_t cells[2][3][32])
{
    report_table(r, "bytes", "direction", "memory", "best GB/s", "median GB/s", "best us",
                 "median us", NULL);
    for (int pg = 0; pg < (bo->no_pageable ? 1 : 2); pg++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < bo->nsizes; i++) {
                const copy_cell_t *c = &cells[pg][d][i];
                char b[32], v[4][32];
                snprintf(v[0], sizeof(v[0]), "%.2f", c->best_gbps);
                snprintf(v[1], sizeof(v[1]), "%.2f", c->median_gbps);
                snprintf(v[2], sizeof(v[2]), "%.1f", c->best_us);
                snprintf(v[3], sizeof(v[3]), "%.1f", c->median_us);
                report_row(r, cli_bytes(bo->sizes[i], b, sizeof(b)),
                           d == 2 ? "both (H2D+D2H sum)" : copy_dirs[d], pg ? "pageable" : "pinned",
                           v[0], v[1], v[2], v[3], NULL);
            }
    report_table_end(r);
}

static int copy_report(ferry_runtime_t *rt, ferry_device_t *dev, const bench_opts_t *bo,
                       copy_cell_t cells[2][3][32])
{
    report_t *r = report_open("bench", bo->report, "ferry bench copy", bo->argc, bo->argv, rt, dev);
    if (r == NULL)
        return CLI_FAIL;
    report_heading(r, "Copy bandwidth");
    report_text(r,
                "Each point is the best of %llu timed copies of one size (after 2 warm-ups), "
                "timed with device events%s. 'both' runs an H2D and a D2H of the same size at "
                "once on two streams; it is drawn per direction (half the bytes it moved over "
                "its time), so that every series compares with the link's rate per direction. "
                "The table gives the sum of both directions for it (the bytes of both over the "
                "time), as the text, --json and --csv do.",
                bo->reps, ferry_device_is_simulated(dev) ? " (virtual time: the simulator)" : "");
    copy_chart(r, dev, bo, cells);
    report_heading(r, "Results");
    copy_table(r, bo, cells);
    return report_close(r);
}

static int bench_copy(ferry_options_t *o, const bench_opts_t *bo)
{
    ferry_runtime_t *rt = open_runtime(o, NULL, NULL);
    if (rt == NULL)
        return CLI_FAIL;
    int64_t idx = 0;
    ferry_options_get_i64(o, "device", &idx);
    ferry_device_t *dev = NULL;
    int rc = CLI_OK;
    if (ferry_device_get(rt, (int)idx, &dev) != 0) {
        rc = cli_fail("bench", "%s", ferry_last_error());
        goto out;
    }
    const char *const *dirs = copy_dirs;
    copy_cell_t cells[2][3][32];
    json_t j;
    if (bo->json) {
        json_command_begin(&j, stdout, "bench copy");
        device_line(rt, dev, &j);
        json_key(&j, "results");
        json_array_begin(&j);
    } else if (bo->csv) {
        printf("bytes,direction,memory,best_gbps,median_gbps,best_us,median_us,reps,"
               "sum_of_directions\n");
    } else {
        device_line(rt, dev, NULL);
        printf("%10s  %-5s %-8s %10s %10s %11s\n", "bytes", "dir", "memory", "best GB/s", "median",
               "median us");
    }
    for (int pg = 0; pg < (bo->no_pageable ? 1 : 2); pg++)
        for (int d = 0; d < 3; d++)
            for (int s = 0; s < bo->nsizes; s++) {
                ferry_copy_bench_config_t c = FERRY_COPY_BENCH_CONFIG_INIT;
                ferry_copy_bench_result_t r = FERRY_COPY_BENCH_RESULT_INIT;
                c.bytes = bo->sizes[s];
                c.dir = (ferry_copy_dir_t)d;
                c.pageable = pg == 1;
                c.reps = (unsigned)bo->reps;
                if (ferry_bench_copy(dev, &c, &r) != 0) {
                    rc = cli_fail("bench", "copy %llu %s: %s", bo->sizes[s], dirs[d],
                                  ferry_last_error());
                    goto out_close;
                }
                const char *mem = pg ? "pageable" : "pinned";
                cells[pg][d][s] = (copy_cell_t){r.best_gbps, r.median_gbps, r.best_us, r.median_us};
                char bytes[32];
                snprintf(bytes, sizeof(bytes), "%llu", bo->sizes[s]);
                const char *const lb[] = {"bytes", bytes,  "direction", dirs[d], "memory",
                                          mem,     "stat", "best",      NULL};
                const char *const lm[] = {"bytes", bytes,  "direction", dirs[d], "memory",
                                          mem,     "stat", "median",    NULL};
                const char *help = "Copy rate of one size ('both': the bytes of both "
                                   "directions over the time), best and median of the reps.";
                metrics_result(bo, "ferry_bench_copy_bytes_per_second", help, lb,
                               r.best_gbps * 1e9);
                metrics_result(bo, "ferry_bench_copy_bytes_per_second", help, lm,
                               r.median_gbps * 1e9);
                ferry_metric_add(bo->cases_done, 1);
                if (bo->json) {
                    json_object_begin(&j);
                    json_key_uint(&j, "bytes", bo->sizes[s]);
                    json_key_str(&j, "direction", dirs[d]);
                    json_key_str(&j, "memory", mem);
                    json_key_double(&j, "best_gbps", r.best_gbps, 3);
                    json_key_double(&j, "median_gbps", r.median_gbps, 3);
                    json_key_double(&j, "best_us", r.best_us, 3);
                    json_key_double(&j, "median_us", r.median_us, 3);
                    json_key_uint(&j, "reps", r.reps);
                    json_key_bool(&j, "sum_of_directions", d == 2);
                    json_object_end(&j);
                } else if (bo->csv)
                    printf("%llu,%s,%s,%.3f,%.3f,%.3f,%.3f,%u,%d\n", bo->sizes[s], dirs[d], mem,
                           r.best_gbps, r.median_gbps, r.best_us, r.median_us, r.reps, d == 2);
                else {
                    char b[32];
                    printf("%10s  %-5s %-8s %10.2f %10.2f %11.1f%s\n",
                           cli_bytes(bo->sizes[s], b, sizeof(b)), dirs[d], mem, r.best_gbps,
                           r.median_gbps, r.median_us, d == 2 ? "  (sum of H2D and D2H)" : "");
                }
                fflush(stdout);
            }
out_close:
    if (bo->json) {
        json_array_end(&j);
        json_key_bool(&j, "ok", rc == CLI_OK);
        json_end(&j);
    }
    if (rc == CLI_OK && bo->report) {
        rc = copy_report(rt, dev, bo, cells);
        if (rc == CLI_OK && !bo->json && !bo->csv)
            printf("# report: %s\n", bo->report);
    }
out:
    ferry_runtime_destroy(rt);
    return rc;
}

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

/* The sweep on @backend (NULL: the options' choice), @label in the metrics ("measured",
 * "prediction"). @total_io: bytes per configuration; 0 in: the default for the device (4G on
 * a GPU, 256M on the simulator), set to what was used. */
static int sweep(ferry_options_t *o, const bench_opts_t *bo, const char *backend,
                 const char *profile, const char *label, unsigned long long *total_io,
                 sweep_row_t *rows, int *nrows, ferry_runtime_t **rt_out)
{
    ferry_runtime_t *rt = open_runtime(o, backend, profile);
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
    float *in = NULL, *outb = NULL;
    int rc = CLI_OK;
    if (in_map == MAP_FAILED || out_map == MAP_FAILED) {
        rc = cli_fail("bench", "out of host memory for 2 x %zu bytes", pool);
        goto out;
    }
    in = (float *)(in_map + bo->host_offset);
    outb = (float *)(out_map + bo->host_offset);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < pool / 4; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t b = ((uint32_t)x & 0x807fffffu) | 0x3f800000u;
        memcpy(&in[i], &b, 4);
    }
    if (ferry_host_register(dev, in, pool) != 0 || ferry_host_register(dev, outb, pool) != 0) {
        rc = cli_fail("bench", "cannot pin the buffers: %s", ferry_last_error());
        goto out;
    }
    cli_progress_t bar;
    cli_progress_begin(&bar, "configurations",
                       (uint64_t)bo->nchunks * (uint64_t)bo->nstreams * (uint64_t)bo->nint, false,
                       false);
    double ceil_gbps = 0;
    if (ceiling(dev, (unsigned)(bo->reps ? bo->reps : 10), &ceil_gbps) != 0) {
        rc = cli_fail("bench", "ceiling: %s", ferry_last_error());
        goto out_unreg;
    }
    int n = 0;
    for (int c = 0; c < bo->nchunks; c++)
        for (int s = 0; s < bo->nstreams; s++)
            for (int k = 0; k < bo->nint; k++) {
                sweep_row_t *row = &rows[n++];
                *row = (sweep_row_t){.chunk = bo->chunks[c],
                                     .streams = bo->streams[s],
                                     .intensity = bo->intensities[k],
                                     .ceiling = ceil_gbps};
                ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
                wp.intensity = (unsigned)row->intensity;
                ferry_workload_t *wl = NULL;
                if (ferry_workload_create(row->intensity ? "fma" : "scale", &wp, &wl) != 0) {
                    rc = cli_fail("bench", "%s", ferry_last_error());
                    goto out_unreg;
                }
                size_t batch = (size_t)row->chunk * 4;
                if (batch > pool)
                    batch = pool;
                batch -= batch % 4;
                size_t per_pool = pool / batch; /* batches cycle over the pinned buffers */
                /* Passes: on a GPU a warm-up pass first (the process's first launch of a kernel
                 * loads its module; clocks ramp up), then the median of the measured ones, each
                 * on a fresh pipeline as a user's run would be. The simulator: one pass by
                 * default (its kernels run on this CPU), no warm-up (nothing to warm). */
                bool sim = ferry_device_is_simulated(dev);
                unsigned warm = sim ? 0 : 1;
                unsigned passes = bo->passes ? (unsigned)bo->passes : sim ? 1u : 3u;
                double ph[100], pd[100], po[100];
                row->ok = true;
                row->passes = passes;
                for (unsigned pass = 0; pass < warm + passes && rc == CLI_OK; pass++) {
                    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
                    pc.device = dev;
                    pc.stage = ferry_workload_stage(wl);
                    pc.chunk_bytes = (size_t)row->chunk;
                    pc.compute_streams = (unsigned)row->streams;
                    ferry_pipeline_t *p = NULL;
                    if (ferry_pipeline_create(&pc, &p) != 0) {
                        rc = cli_fail("bench", "pipeline: %s", ferry_last_error());
                        break;
                    }
                    /* each pass's pipeline is served while it runs */
                    if (cli_metrics_attach(bo->metrics, p, label) != CLI_OK) {
                        ferry_pipeline_close(p);
                        rc = CLI_FAIL;
                        break;
                    }
                    atomic_int counts[2] = {0, 0};
                    int nb = 0;
                    for (unsigned long long off = 0; off < total; off += batch, nb++) {
                        size_t at = (size_t)((unsigned long long)nb % per_pool) * batch;
                        ferry_batch_t b = FERRY_BATCH_INIT;
                        b.in = (char *)in + at;
                        b.out = (char *)outb + at;
                        b.bytes = total - off < batch ? (size_t)(total - off) : batch;
                        if (ferry_pipeline_submit(p, &b, count_done, counts, NULL) != 0) {
                            rc = cli_fail("bench", "submit: %s", ferry_last_error());
                            break;
                        }
                    }
                    ferry_pipeline_drain(p);
                    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
                    ferry_pipeline_stats(p, &st);
                    cli_metrics_detach(bo->metrics, p);
                    ferry_pipeline_destroy(p);
                    /* A copy group never spans batches: a batch holds 4 chunks here. */
                    unsigned grp = st.copy_group < 4 ? st.copy_group : 4;
                    row->copy_bytes = (unsigned long long)(grp ? grp : 1) * row->chunk;
                    if (row->copy_bytes > batch)
                        row->copy_bytes = batch;
                    row->ok &= atomic_load(&counts[1]) == 0 && atomic_load(&counts[0]) == nb;
                    if (pass >= warm) {
                        ph[pass - warm] = st.gbps_h2d;
                        pd[pass - warm] = st.gbps_d2h;
                        po[pass - warm] = st.overlap;
                    }
                }
                if (rc != CLI_OK) {
                    ferry_workload_destroy(wl);
                    goto out_unreg;
                }
                /* The median pass by its slower direction (the lower middle of an even count). */
                unsigned order[100];
                for (unsigned i = 0; i < passes; i++)
                    order[i] = i;
                for (unsigned i = 1; i < passes; i++)
                    for (unsigned j = i; j > 0 && fmin(ph[order[j]], pd[order[j]]) <
                                                      fmin(ph[order[j - 1]], pd[order[j - 1]]);
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
                /* spot check: the last batch's output against the CPU reference */
                if (row->ok) {
                    size_t chk = batch < (4u << 20) ? batch : (4u << 20);
                    float *ref = malloc(chk);
                    if (ref != NULL) {
                        ferry_workload_reference(wl, in, ref, chk);
                        row->ok = memcmp(ref, outb, chk) == 0;
                        free(ref);
                    }
                }
                ferry_workload_destroy(wl);
                char cb[32], cs[32], ci[32];
                snprintf(cb, sizeof(cb), "%llu", row->chunk);
                snprintf(cs, sizeof(cs), "%llu", row->streams);
                snprintf(ci, sizeof(ci), "%llu", row->intensity);
                const char *help = "Round-trip rate of one configuration each way, the median "
                                   "pass.";
                const char *const lh[] = {"sweep",           label, "chunk_bytes", cb,
                                          "compute_streams", cs,    "intensity",   ci,
                                          "direction",       "h2d", NULL};
                const char *const ld[] = {"sweep",           label, "chunk_bytes", cb,
                                          "compute_streams", cs,    "intensity",   ci,
                                          "direction",       "d2h", NULL};
                metrics_result(bo, "ferry_bench_pipeline_bytes_per_second", help, lh,
                               row->h2d * 1e9);
                metrics_result(bo, "ferry_bench_pipeline_bytes_per_second", help, ld,
                               row->d2h * 1e9);
                ferry_metric_add(bo->cases_done, 1);
                cli_progress_update(&bar, (uint64_t)n);
            }
    *nrows = n;
out_unreg:
    cli_progress_end(&bar);
    ferry_host_unregister(dev, in);
    ferry_host_unregister(dev, outb);
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

static int bench_pipeline(ferry_options_t *o, const bench_opts_t *bo)
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
        device_line(rt, dev, &j);
        json_key_double(&j, "ceiling_gbps", n ? meas[0].ceiling : 0.0, 3);
        json_key_uint(&j, "host_offset", bo->host_offset);
        json_key(&j, "results");
        json_array_begin(&j);
    } else if (bo->csv) {
        printf("chunk_bytes,compute_streams,intensity,gbps_h2d,gbps_d2h,overlap,ceiling_gbps,"
               "fraction,verified,copy_bytes%s\n",
               bo->compare ? ",sim_gbps_h2d,sim_error" : "");
    } else {
        device_line(rt, dev, NULL);
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

/* ---- the command line ----------------------------------------------------------------- */

static int check_sizes(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    bench_opts_t *bo = into;
    return parse_list("sizes", v, true, 1, 16ull << 30, bo->sizes, 32, &bo->nsizes);
}

static int check_chunks(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    bench_opts_t *bo = into;
    return parse_list("chunks", v, true, 4, 1ull << 30, bo->chunks, 16, &bo->nchunks);
}

static int check_streams(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    bench_opts_t *bo = into;
    return parse_list("streams", v, false, 1, 16, bo->streams, 8, &bo->nstreams);
}

static int check_intensity(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    bench_opts_t *bo = into;
    return parse_list("intensity", v, false, 0, 100000, bo->intensities, 8, &bo->nint);
}

static int check_report(const char *cmd, const char *v, void *into)
{
    (void)into;
    return report_check_path(cmd, v);
}

static int check_bytes(const char *cmd, const char *v, void *into)
{
    (void)v;
    if (((bench_opts_t *)into)->bytes == 0)
        return cli_usage_error(cmd, "--bytes must be at least 1");
    return CLI_OK;
}

static int check_compare(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    (void)v;
    ((bench_opts_t *)into)->compare = true;
    return CLI_OK;
}

static int check_compare_bytes(const char *cmd, const char *v, void *into)
{
    bench_opts_t *bo = into;
    if (bo->compare_bytes == 0)
        return cli_usage_error(cmd, "--compare-bytes must be at least 1");
    return check_compare(cmd, v, into);
}

static int check_host_offset(const char *cmd, const char *v, void *into)
{
    (void)v;
    const bench_opts_t *bo = into;
    if (bo->host_offset % 4 != 0)
        return cli_usage_error(cmd,
                               "--host-offset %llu: accepted: a multiple of 4 (a float) from 0 "
                               "to 4092",
                               bo->host_offset);
    return CLI_OK;
}

#define BENCH_FLAG(field) offsetof(bench_opts_t, field)
/* The flags of both benchmarks, then those of each. */
static const cli_flag_def_t bench_flags[] = {
    {.name = "json", .kind = CLI_SWITCH, .offset = BENCH_FLAG(json), .help = "one JSON object"},
    {.name = "csv", .kind = CLI_SWITCH, .offset = BENCH_FLAG(csv), .help = "CSV rows"},
    {.name = "no-pageable",
     .kind = CLI_SWITCH,
     .offset = BENCH_FLAG(no_pageable),
     .help = "copy: skip pageable memory"},
    {.name = "report",
     .kind = CLI_STRING,
     .offset = BENCH_FLAG(report),
     .help = "write an HTML page",
     .check = check_report},
    {.name = "reps",
     .kind = CLI_UINT,
     .offset = BENCH_FLAG(reps),
     .help = "repetitions per case",
     .lo = 1,
     .hi = 10000},
    {NULL},
};
static const cli_flag_def_t bench_copy_flags[] = {
    {.name = "sizes",
     .kind = CLI_CUSTOM,
     .offset = 0,
     .help = "copy sizes, e.g. 4K,1M,16M",
     .check = check_sizes},
    {NULL},
};
static const cli_flag_def_t bench_pipeline_flags[] = {
    {.name = "compare",
     .kind = CLI_SWITCH,
     .offset = BENCH_FLAG(compare),
     .help = "the simulator's prediction beside each case"},
    {.name = "compare-profile",
     .kind = CLI_STRING,
     .offset = BENCH_FLAG(compare_profile),
     .help = "the simulator's profile",
     .check = check_compare},
    {.name = "bytes",
     .kind = CLI_SIZE,
     .offset = BENCH_FLAG(bytes),
     .help = "bytes per configuration",
     .check = check_bytes},
    {.name = "compare-bytes",
     .kind = CLI_SIZE,
     .offset = BENCH_FLAG(compare_bytes),
     .help = "the simulator's bytes per case",
     .check = check_compare_bytes},
    {.name = "passes",
     .kind = CLI_UINT,
     .offset = BENCH_FLAG(passes),
     .help = "measured passes per configuration",
     .lo = 1,
     .hi = 100},
    {.name = "host-offset",
     .kind = CLI_UINT,
     .offset = BENCH_FLAG(host_offset),
     .help = "bytes past a page boundary",
     .lo = 0,
     .hi = 4092,
     .check = check_host_offset},
    {.name = "chunks",
     .kind = CLI_CUSTOM,
     .offset = 0,
     .help = "chunk sizes",
     .check = check_chunks},
    {.name = "streams",
     .kind = CLI_CUSTOM,
     .offset = 0,
     .help = "compute streams",
     .check = check_streams},
    {.name = "intensity",
     .kind = CLI_CUSTOM,
     .offset = 0,
     .help = "fma intensities",
     .check = check_intensity},
    {NULL},
};
#undef BENCH_FLAG

int cmd_bench(int argc, char **argv)
{
    const char *cmd = "bench";
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        if (argc < 2) {
            usage();
            return CLI_USAGE;
        }
        return usage();
    }
    const char *what = argv[1];
    bool copy = strcmp(what, "copy") == 0, pipe = strcmp(what, "pipeline") == 0;
    if (!copy && !pipe)
        return cli_usage_error(cmd, "unknown benchmark '%s' (accepted: copy, pipeline)", what);
    bench_opts_t bo = {
        .reps = 10,
        .sizes = {4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30},
        .nsizes = 8,
        .chunks = {256 << 10, 1 << 20, 4 << 20, 16 << 20},
        .nchunks = 4,
        .streams = {1, 2},
        .nstreams = 2,
        .intensities = {0, 64},
        .nint = 2};
    ferry_options_t *o = NULL;
    int orc = cli_options(cmd, &o);
    if (orc != CLI_OK)
        return orc;
    cli_parser_t p = {.cmd = cmd,
                      .flags = {bench_flags, copy ? bench_copy_flags : bench_pipeline_flags},
                      .into = &bo,
                      .options = o};
    char context[32];
    snprintf(context, sizeof(context), "for bench %s", what);
    p.context = context;
    int rc = cli_parse(&p, argc, argv, 2);
    if (rc == CLI_HELP) {
        ferry_options_destroy(o);
        return usage();
    }
    if (rc != CLI_OK)
        goto usage_out;
    if (bo.json && bo.csv) {
        cli_usage_error(cmd, "--json and --csv exclude each other");
        goto usage_out;
    }
    bo.argc = argc;
    bo.argv = argv;
    /* The metrics start before the first case, so that a bad address or path is refused up
     * front, and stop after the last, when the file is written a last time. */
    unsigned long long planned =
        copy ? (unsigned long long)(bo.no_pageable ? 1 : 2) * 3 * (unsigned long long)bo.nsizes
             : (unsigned long long)bo.nchunks * (unsigned long long)bo.nstreams *
                   (unsigned long long)bo.nint * (bo.compare ? 2u : 1u);
    if (metrics_start(&bo, o, what, planned) != CLI_OK) {
        cli_metrics_stop(cmd, bo.metrics);
        ferry_options_destroy(o);
        return CLI_FAIL;
    }
    rc = copy ? bench_copy(o, &bo) : bench_pipeline(o, &bo);
    if (cli_metrics_stop(cmd, bo.metrics) != CLI_OK && rc == CLI_OK)
        rc = CLI_FAIL;
    ferry_options_destroy(o);
    return rc;
usage_out:
    ferry_options_destroy(o);
    return CLI_USAGE;
}
