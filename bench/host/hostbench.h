/* What the host-side measurements of bench/host/ share: the CPU's memory kernels (read: a sum of
 * 64-bit words; write: memset; copy: memcpy), a monotonic clock and medians. Header-only, so
 * that each tool stays one source file that builds with a plain `cc -O2 -pthread`. */
#ifndef FERRY_BENCH_HOSTBENCH_H
#define FERRY_BENCH_HOSTBENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HOSTBENCH_READ, HOSTBENCH_WRITE, HOSTBENCH_COPY, HOSTBENCH_KINDS };
static const char *const hostbench_kind_name[HOSTBENCH_KINDS] = {"read", "write", "copy"};

/* Where the read kernel's sums go, so that the compiler keeps the loads. */
static volatile uint64_t hostbench_sink;

/* One pass of @p kind over @p n bytes of @p a (copy: from a to b). Returns the read's sum (0
 * for the others). */
static inline uint64_t hostbench_pass(int kind, unsigned char *a, unsigned char *b, size_t n)
{
    if (kind == HOSTBENCH_READ) {
        const uint64_t *w = (const uint64_t *)a;
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i + 4 <= n / 8; i += 4) {
            s0 += w[i];
            s1 += w[i + 1];
            s2 += w[i + 2];
            s3 += w[i + 3];
        }
        return s0 + s1 + s2 + s3;
    }
    if (kind == HOSTBENCH_WRITE)
        memset(a, (int)(n & 0x7f), n);
    else
        memcpy(b, a, n);
    return 0;
}

static inline double hostbench_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int hostbench_cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The tools' one argument, GiB: 0 < GiB <= @p most (the default @p dflt when absent). Returns
 * the bytes; exits 2 with a message naming what is accepted otherwise. */
static inline size_t hostbench_gib_arg(int argc, char **argv, const char *prog, double dflt,
                                       double most)
{
    char *end = NULL;
    double gib = argc > 1 ? strtod(argv[1], &end) : dflt;
    if (argc > 1 && (end == argv[1] || *end != '\0'))
        gib = -1;
    if (!(gib > 0 && gib <= most)) {
        fprintf(stderr, "%s: GiB %s out of range (accepted: 0 < GiB <= %g)\n", prog, argv[1], most);
        exit(2);
    }
    return (size_t)(gib * (double)(1u << 30));
}

/* Sorts @p v in place; the middle value (the mean of the two middle ones for an even @p n). */
static inline double hostbench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, hostbench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
