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

#endif
