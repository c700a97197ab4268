/* `ferry bench copy`: the device's copy rates by size, direction (H2D, D2H, both at once) and
 * host memory (pinned, pageable), best and median of the reps; --report charts them against
 * the link's rate. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "ferry/bench.h"
#include "report.h"

/* One case of the copy benchmark, kept for the report. */
typedef struct copy_cell {
    double best_gbps, median_gbps, best_us, median_us;
} copy_cell_t;

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

int bench_copy(ferry_options_t *o, const bench_opts_t *bo)
{
    ferry_runtime_t *rt = bench_open_runtime(o, NULL, NULL);
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
        bench_device_line(rt, dev, &j);
        json_key(&j, "results");
        json_array_begin(&j);
    } else if (bo->csv) {
        printf("bytes,direction,memory,best_gbps,median_gbps,best_us,median_us,reps,"
               "sum_of_directions\n");
    } else {
        bench_device_line(rt, dev, NULL);
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
                bench_metrics_result(bo, "ferry_bench_copy_bytes_per_second", help, lb,
                                     r.best_gbps * 1e9);
                bench_metrics_result(bo, "ferry_bench_copy_bytes_per_second", help, lm,
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
