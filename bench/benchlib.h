/* Shared helpers for ferry's benchmarks: a monotonic clock, medians, and one JSON line per
 * result so that scripts/bench.sh can collect them into bench/results/. */
#ifndef FERRY_BENCHLIB_H
#define FERRY_BENCHLIB_H

#include <stddef.h>
#include <stdint.h>

uint64_t bench_now_ns(void);
/* Sorts @v in place and returns its median. */
double bench_median(double *v, size_t n);
/* Prints {"bench":..., "case":..., "value":..., "unit":..., "target":...} on one line;
 * target <= 0 means none. */
void bench_report(const char *bench, const char *case_name, double value, const char *unit,
                  double target);

/* The spread of @n samples (sorted in place): the quartiles, and the ranks that bound the
 * median with 95% confidence (order statistics, n/2 -+ 0.98 sqrt(n)), as in a sign test. */
typedef struct bench_spread {
    double median, q1, q3, ci_lo, ci_hi;
    size_t n;
} bench_spread_t;
bench_spread_t bench_spread(double *v, size_t n);
/* As bench_report, with the median of @s as the value and its spread on the same line:
 * "q1", "q3", "ci95": [lo, hi] and "n". */
void bench_report_spread(const char *bench, const char *case_name, const bench_spread_t *s,
                         const char *unit, double target);

#endif
