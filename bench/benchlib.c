/* Benchmark helpers: clock, median, and result lines. */
#include "benchlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Quantile @q of sorted @v, interpolated between neighbours. */
static double quantile(const double *v, size_t n, double q)
{
    double x = q * (double)(n - 1);
    size_t i = (size_t)x;
    return i + 1 < n ? v[i] + (x - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

bench_spread_t bench_spread(double *v, size_t n)
{
    bench_spread_t s = {.n = n};
    if (n == 0)
        return s;
    s.median = bench_median(v, n);
    s.q1 = quantile(v, n, 0.25);
    s.q3 = quantile(v, n, 0.75);
    double h = 0.98 * sqrt((double)n);
    /* 1-based ranks n/2 - h and 1 + n/2 + h, rounded outwards (40 and 61 of 100). */
    long lo = (long)floor((double)n / 2 - h) - 1, hi = (long)ceil((double)n / 2 + h);
    s.ci_lo = v[lo < 0 ? 0 : lo];
    s.ci_hi = v[hi >= (long)n ? (long)n - 1 : hi];
    return s;
}

static void report_head(const char *bench, const char *case_name, double value, const char *unit,
                        double target)
{
    printf("{\"bench\":\"%s\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\"", bench, case_name,
           value, unit);
    if (target > 0)
        printf(",\"target\":%.6g,\"met\":%s", target, value <= target ? "true" : "false");
}

void bench_report(const char *bench, const char *case_name, double value, const char *unit,
                  double target)
{
    report_head(bench, case_name, value, unit, target);
    printf("}\n");
    fflush(stdout);
}

void bench_report_spread(const char *bench, const char *case_name, const bench_spread_t *s,
                         const char *unit, double target)
{
    report_head(bench, case_name, s->median, unit, target);
    printf(",\"q1\":%.6g,\"q3\":%.6g,\"ci95\":[%.6g,%.6g],\"n\":%zu}\n", s->q1, s->q3, s->ci_lo,
           s->ci_hi, s->n);
    fflush(stdout);
}
