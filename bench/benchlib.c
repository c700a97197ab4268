/* Benchmark helpers: clock, median, and result lines. */
#include "benchlib.h"

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

void bench_report(const char *bench, const char *case_name, double value, const char *unit,
                  double target)
{
    printf("{\"bench\":\"%s\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\"", bench, case_name,
           value, unit);
    if (target > 0)
        printf(",\"target\":%.6g,\"met\":%s", target, value <= target ? "true" : "false");
    printf("}\n");
    fflush(stdout);
}
