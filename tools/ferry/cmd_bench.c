/* `ferry bench copy`, `pipeline` and `items`: the device's copy rates by size and direction,
 * and a sweep of the round trip H2D -> kernel -> D2H over chunk size x compute streams x
 * compute intensity, each against the bidirectional copy ceiling measured in the same run;
 * `ferry bench io FILE`: the storage alone, a file read or written sequentially; `ferry bench
 * items`: small items from many threads, each its own batch (cmd_bench_items.c).
 * `--compare` runs the sweep on the simulator too and puts prediction beside measurement;
 * `--report` charts either as an HTML page (report.c). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "report.h"

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
    fputs(
        "usage: ferry bench copy [options]\n"
        "       ferry bench pipeline [options]\n"
        "       ferry bench io FILE [options]\n"
        "       ferry bench items [options]\n\n"
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
        "io: read FILE front to back with many io_uring requests in flight (like fio's\n"
        "sequential read job), O_DIRECT where the file system allows it, buffered where it\n"
        "refuses it (tmpfs); GB/s, bytes, time, request size, depth, O_DIRECT or not.\n"
        "  --write           write a new FILE of --bytes instead (refused when FILE exists)\n"
        "  --force           --write: replace FILE when it is an existing regular file\n"
        "  --bytes SIZE      --write: the size (required); a read: read at most SIZE\n"
        "  --request-bytes SIZE  bytes per request, 4M to 16M, a multiple of 4K (default 8M)\n"
        "  --depth N         requests in flight, 8 to 32 (default 16)\n"
        "  --json            one JSON object\n\n"
        "items: --threads threads (default 8) each submit items of the scale workload as\n"
        "separate batches into one pipeline: per item size, GB/s each way against the\n"
        "round-trip ceiling measured in the same run, latency from submit to completion\n"
        "(p50, p99), and the process's CPU time per item; every pass verified.\n"
        "  --item-sizes LIST item sizes (default 64K,256K)\n"
        "  --threads N       submitting threads, 1 to 64 (default 8)\n"
        "  --bytes SIZE      bytes of items per size (default 1G on a GPU, 64M on the\n"
        "                    simulator)\n"
        "  --passes N        measured passes, each on a fresh pipeline, the median reported\n"
        "                    (default 3 on a GPU, after a warm-up pass; 1 on the simulator)\n"
        "  --rate R          offer items at R GB/s in all (e.g. 30), or at R% of the ceiling\n"
        "                    (e.g. 75%), on a schedule: latency counts from each item's\n"
        "                    scheduled time, lateness included (default: as fast as the\n"
        "                    threads submit; on the simulator it needs option sim_pace)\n"
        "  --scattered       each item at twice its size from the last (blocks of a cache,\n"
        "                    not one buffer): no two items' copies merge\n"
        "  --json            one JSON object; also --backend, --profile, --isolation and any\n"
        "                    `ferry options` flag\n\n",
        stdout);
    fputs("copy and pipeline: --json, --csv, --report FILE (an HTML page with the charts, "
          "docs/report.md),\n"
          "      --backend auto|sim|cuda, --profile FILE, any `ferry options` flag;\n"
          "      --metrics-addr ADDR, --metrics-file FILE serve and write the cases done, each\n"
          "      result and the running pipeline's series (docs/metrics.md)\n",
          stdout);
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

void bench_metrics_result(const bench_opts_t *bo, const char *name, const char *help,
                          const char *const *labels, double v)
{
    ferry_metrics_t *reg = cli_metrics_registry(bo->metrics);
    ferry_metric_t *g = NULL;
    if (reg == NULL)
        return;
    if (ferry_metrics_gauge(reg, name, help, labels, &g) == 0)
        ferry_metric_set(g, v);
}

ferry_runtime_t *bench_open_runtime(ferry_options_t *o, const char *backend, const char *profile)
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

void bench_device_line(ferry_runtime_t *rt, ferry_device_t *dev, json_t *j)
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

void bench_fill_floats(void *p, size_t bytes, uint64_t seed)
{
    uint64_t x = seed ? seed : 88172645463325252ull;
    unsigned char *c = p;
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t b = ((uint32_t)x & 0x807fffffu) | 0x3f800000u;
        memcpy(c + i, &b, 4);
    }
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

/* The flags of both benchmarks, then those of each. */
static const cli_flag_def_t bench_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, bench_opts_t, json, "one JSON object")},
    {CLI_FLAG("csv", CLI_SWITCH, bench_opts_t, csv, "CSV rows")},
    {CLI_FLAG("no-pageable", CLI_SWITCH, bench_opts_t, no_pageable, "copy: skip pageable memory")},
    {CLI_FLAG("report", CLI_STRING, bench_opts_t, report, "write an HTML page"),
     .check = check_report},
    {CLI_FLAG("reps", CLI_UINT, bench_opts_t, reps, "repetitions per case"), .lo = 1, .hi = 10000},
    {NULL},
};
static const cli_flag_def_t bench_copy_flags[] = {
    {.name = "sizes",
     .kind = CLI_CUSTOM,
     .help = "copy sizes, e.g. 4K,1M,16M",
     .check = check_sizes},
    {NULL},
};
static int check_request_bytes(const char *cmd, const char *v, void *into)
{
    unsigned long long b = ((bench_opts_t *)into)->request_bytes;
    if (b < (4u << 20) || b > (16u << 20) || b % 4096 != 0)
        return cli_usage_error(cmd,
                               "--request-bytes '%s': accepted: 4M to 16M, a multiple of 4K "
                               "(e.g. 8M)",
                               v);
    return CLI_OK;
}

/* `bench io` shares none of the device benchmarks' flags but --json and --bytes. */
static const cli_flag_def_t bench_io_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, bench_opts_t, json, "one JSON object")},
    {CLI_FLAG("write", CLI_SWITCH, bench_opts_t, write, "write a new file of --bytes")},
    {CLI_FLAG("force", CLI_SWITCH, bench_opts_t, force, "--write: replace an existing file")},
    {CLI_FLAG("bytes", CLI_SIZE, bench_opts_t, bytes, "bytes to write; a read: at most"),
     .check = check_bytes},
    {CLI_FLAG("request-bytes", CLI_SIZE, bench_opts_t, request_bytes, "bytes per request"),
     .check = check_request_bytes},
    {CLI_FLAG("depth", CLI_UINT, bench_opts_t, depth, "requests in flight"), .lo = 8, .hi = 32},
    {NULL},
};

static int check_item_sizes(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    bench_opts_t *bo = into;
    int rc = parse_list("item-sizes", v, true, 4, 256ull << 20, bo->sizes, 32, &bo->nsizes);
    for (int i = 0; rc == CLI_OK && i < bo->nsizes; i++)
        if (bo->sizes[i] % 4 != 0)
            rc = cli_usage_error("bench",
                                 "--item-sizes: %llu is not a multiple of 4 (accepted: whole "
                                 "floats of the scale workload, 4 to 256M, e.g. 64K,256K)",
                                 bo->sizes[i]);
    return rc;
}

/* --rate R (GB/s) or R% (of the ceiling measured in the same run). */
static int check_rate(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    bench_opts_t *bo = into;
    char *end = NULL;
    double r = strtod(v, &end);
    bool pct = end != v && *end == '%' && end[1] == '\0';
    if (end == v || (*end != '\0' && !pct) || !(r > 0) || r > (pct ? 100.0 : 100000.0))
        return cli_usage_error("bench",
                               "--rate '%s': not a rate (accepted: GB/s above 0, up to 100000, "
                               "e.g. 30; or a share of the ceiling above 0%% up to 100%%, e.g. "
                               "75%%)",
                               v);
    bo->rate_gbps = pct ? 0 : r;
    bo->rate_pct = pct ? r : 0;
    return CLI_OK;
}

/* `bench items`: its own flags and --json (no CSV, pageable memory or report). */
static const cli_flag_def_t bench_items_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, bench_opts_t, json, "one JSON object")},
    {CLI_FLAG("threads", CLI_UINT, bench_opts_t, threads, "submitting threads"), .lo = 1, .hi = 64},
    {.name = "item-sizes",
     .kind = CLI_CUSTOM,
     .help = "item sizes, e.g. 64K,256K",
     .check = check_item_sizes},
    {CLI_FLAG("bytes", CLI_SIZE, bench_opts_t, bytes, "bytes of items per size"),
     .check = check_bytes},
    {CLI_FLAG("passes", CLI_UINT, bench_opts_t, passes, "measured passes per size"), .lo = 1,
     .hi = 100},
    {CLI_FLAG("reps", CLI_UINT, bench_opts_t, reps, "repetitions of the ceiling's copy"), .lo = 1,
     .hi = 10000},
    {.name = "rate",
     .kind = CLI_CUSTOM,
     .help = "offered GB/s, or % of the ceiling",
     .check = check_rate},
    {CLI_FLAG("scattered", CLI_SWITCH, bench_opts_t, scattered,
              "items apart in memory: none moves with its neighbour")},
    {NULL},
};

static const cli_flag_def_t bench_pipeline_flags[] = {
    {CLI_FLAG("compare", CLI_SWITCH, bench_opts_t, compare,
              "the simulator's prediction beside each case")},
    {CLI_FLAG("compare-profile", CLI_STRING, bench_opts_t, compare_profile,
              "the simulator's profile"),
     .check = check_compare},
    {CLI_FLAG("bytes", CLI_SIZE, bench_opts_t, bytes, "bytes per configuration"),
     .check = check_bytes},
    {CLI_FLAG("compare-bytes", CLI_SIZE, bench_opts_t, compare_bytes,
              "the simulator's bytes per case"),
     .check = check_compare_bytes},
    {CLI_FLAG("passes", CLI_UINT, bench_opts_t, passes, "measured passes per configuration"),
     .lo = 1, .hi = 100},
    {CLI_FLAG("host-offset", CLI_UINT, bench_opts_t, host_offset, "bytes past a page boundary"),
     .lo = 0, .hi = 4092, .check = check_host_offset},
    {.name = "chunks", .kind = CLI_CUSTOM, .help = "chunk sizes", .check = check_chunks},
    {.name = "streams", .kind = CLI_CUSTOM, .help = "compute streams", .check = check_streams},
    {.name = "intensity", .kind = CLI_CUSTOM, .help = "fma intensities", .check = check_intensity},
    {NULL},
};

/* The io benchmark's flags together: a FILE, --bytes for --write, --force with --write only. */
static int check_io(const bench_opts_t *bo)
{
    if (bo->file == NULL)
        return cli_usage_error("bench", "io needs a FILE: ferry bench io FILE [options]");
    if (bo->write && bo->bytes == 0)
        return cli_usage_error("bench", "io --write needs --bytes SIZE (the size of the new file)");
    if (bo->force && !bo->write)
        return cli_usage_error("bench", "io --force goes with --write only (a read never writes)");
    return CLI_OK;
}

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
    bool io = strcmp(what, "io") == 0, items = strcmp(what, "items") == 0;
    if (!copy && !pipe && !io && !items)
        return cli_usage_error(cmd, "unknown benchmark '%s' (accepted: copy, pipeline, io, items)",
                               what);
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
    char context[32];
    snprintf(context, sizeof(context), "for bench %s", what);
    cli_parser_t p = {.cmd = cmd,
                      .flags = {bench_flags, copy ? bench_copy_flags : bench_pipeline_flags},
                      .into = &bo,
                      .context = context};
    int first = 2;
    if (items) { /* 8 threads, 64K and 256K items (issue 20's sizes) by default */
        p.flags[0] = bench_items_flags;
        p.flags[1] = NULL;
        bo.threads = 8;
        bo.sizes[0] = 64 << 10;
        bo.sizes[1] = 256 << 10;
        bo.nsizes = 2;
        bo.reps = 0;
    }
    if (io) { /* ferry bench io FILE [options], FILE anywhere among them */
        p.flags[0] = bench_io_flags;
        p.flags[1] = NULL;
        p.operand = &bo.file;
    }
    ferry_options_t *o = NULL;
    int rc = cli_parse_options(&p, argc, argv, first, &o);
    if (rc != CLI_OK)
        return rc == CLI_HELP ? usage() : rc;
    if (io && (rc = check_io(&bo)) != CLI_OK)
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
        io      ? 1
        : items ? (unsigned long long)bo.nsizes
        : copy  ? (unsigned long long)(bo.no_pageable ? 1 : 2) * 3 * (unsigned long long)bo.nsizes
                : (unsigned long long)bo.nchunks * (unsigned long long)bo.nstreams *
                     (unsigned long long)bo.nint * (bo.compare ? 2u : 1u);
    if (metrics_start(&bo, o, what, planned) != CLI_OK) {
        cli_metrics_stop(cmd, bo.metrics);
        ferry_options_destroy(o);
        return CLI_FAIL;
    }
    rc = copy    ? bench_copy(o, &bo)
         : pipe  ? bench_pipeline(o, &bo)
         : items ? bench_items(o, &bo)
                 : bench_io(&bo);
    if (cli_metrics_stop(cmd, bo.metrics) != CLI_OK && rc == CLI_OK)
        rc = CLI_FAIL;
    ferry_options_destroy(o);
    return rc;
usage_out:
    ferry_options_destroy(o);
    return CLI_USAGE;
}
