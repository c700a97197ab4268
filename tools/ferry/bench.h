/* What `ferry bench` (cmd_bench.c: the command line, metrics, the device line) shares with its
 * benchmarks: copy (cmd_bench_copy.c), pipeline (cmd_bench_pipeline.c) and io (cmd_bench_io.c). */
#ifndef FERRY_CLI_BENCH_H
#define FERRY_CLI_BENCH_H

#include "cli.h"
#include "json.h"

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
    const char *file;                 /* io: the file read or written */
    bool write, force;                /* io: --write a new file, --force to replace one */
    unsigned long long request_bytes; /* io: bytes per request; 0: 8M */
    unsigned long long depth;         /* io: requests in flight; 0: 16 */
    unsigned long long threads;       /* items: submitting threads */
    bool scattered;                   /* items: each at twice its size from the last */
    double rate_gbps, rate_pct;       /* items: --rate, offered GB/s or % of the ceiling; 0: as
                                         fast as the submitters go (closed loop) */
    cli_metrics_t *metrics;           /* --metrics-addr, --metrics-file; NULL: neither */
    ferry_metric_t *cases_done;       /* ferry_bench_cases_total */
    int argc;                         /* the command line, for the report */
    char **argv;
} bench_opts_t;

/* One gauge per result, registered when the case is done; a case measured twice (a size
 * given twice) keeps its first value: the registry refuses the same series twice. */
void bench_metrics_result(const bench_opts_t *bo, const char *name, const char *help,
                          const char *const *labels, double v);
/* A runtime on @backend (NULL: the options' choice) with @profile (NULL: the options'); NULL on
 * an error (printed). */
ferry_runtime_t *bench_open_runtime(ferry_options_t *o, const char *backend, const char *profile);
/* The device a benchmark ran on: a comment line (@j NULL), or the members of the JSON object. */
void bench_device_line(ferry_runtime_t *rt, ferry_device_t *dev, json_t *j);

/* Random floats in +-[1, 2) over @bytes of @p (a multiple of 4), from @seed (0: a fixed one). */
void bench_fill_floats(void *p, size_t bytes, uint64_t seed);

/* The benchmarks. Return the exit status (messages printed). */
int bench_copy(ferry_options_t *o, const bench_opts_t *bo);
int bench_pipeline(ferry_options_t *o, const bench_opts_t *bo);
int bench_io(const bench_opts_t *bo);
int bench_items(ferry_options_t *o, const bench_opts_t *bo);

#endif
