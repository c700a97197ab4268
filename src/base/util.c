/* Small utilities shared by every layer: strict number parsing, the monotonic clock and a
 * bounded string copy. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "base/base.h"

/* A decimal integer that is all of @s: digits, after a '-' or '+' when @is_signed; into
 * *(int64_t *)@out when @is_signed, else *(uint64_t *)@out, and only on success. */
static int parse_integer(const char *s, bool is_signed, void *out)
{
    if (s == NULL || *s == '\0')
        return FERRY_EPARSE;
    const char *d = is_signed && (*s == '-' || *s == '+') ? s + 1 : s;
    if (!isdigit((unsigned char)*d))
        return FERRY_EPARSE;
    errno = 0;
    char *end = NULL;
    long long sv = 0;
    unsigned long long uv = 0;
    if (is_signed)
        sv = strtoll(s, &end, 10);
    else
        uv = strtoull(s, &end, 10);
    if (*end != '\0')
        return FERRY_EPARSE;
    if (errno == ERANGE)
        return FERRY_ERANGE;
    if (is_signed)
        *(int64_t *)out = (int64_t)sv;
    else
        *(uint64_t *)out = (uint64_t)uv;
    return 0;
}

int ferry__parse_u64(const char *s, uint64_t *out)
{
    return parse_integer(s, false, out);
}

int ferry__parse_i64(const char *s, int64_t *out)
{
    return parse_integer(s, true, out);
}

int ferry__parse_double(const char *s, double *out)
{
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
        return FERRY_EPARSE;
    /* Decimal notation only: strtod would also take hex ("0x10" is 16), "inf" and "nan". */
    for (const char *c = s; *c; c++)
        if (!isdigit((unsigned char)*c) && strchr("+-.eE", *c) == NULL)
            return FERRY_EPARSE;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (*end != '\0' || end == s)
        return FERRY_EPARSE;
    if (errno == ERANGE || !isfinite(v))
        return FERRY_ERANGE;
    *out = v;
    return 0;
}

int ferry_parse_size(const char *text, uint64_t *out)
{
    if (text == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_parse_size: NULL argument");
    const char *p = text;
    if (!isdigit((unsigned char)*p))
        return ferry__error(
            FERRY_EPARSE, "size '%s': expected digits with an optional K, M, G or T suffix", text);
    uint64_t v = 0;
    while (isdigit((unsigned char)*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return ferry__error(FERRY_ERANGE, "size '%s' overflows 64 bits", text);
        v = v * 10 + d;
        p++;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'K':
    case 'k':
        shift = 10;
        p++;
        break;
    case 'M':
    case 'm':
        shift = 20;
        p++;
        break;
    case 'G':
    case 'g':
        shift = 30;
        p++;
        break;
    case 'T':
    case 't':
        shift = 40;
        p++;
        break;
    default: break;
    }
    if (shift != 0 && p[0] == 'i' && p[1] == 'B')
        p += 2;
    else if (*p == 'B')
        p++;
    if (*p != '\0')
        return ferry__error(FERRY_EPARSE,
                            "size '%s': unexpected '%s' (accepted: digits, then K, M, G or T, "
                            "optionally followed by iB or B)",
                            text, p);
    if (shift != 0 && v > (UINT64_MAX >> shift))
        return ferry__error(FERRY_ERANGE, "size '%s' overflows 64 bits", text);
    *out = v << shift;
    return 0;
}

uint64_t ferry__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *ferry__obj_alloc(const void *out, size_t size, const char *who, int *rc)
{
    void *obj = NULL;
    if (out == NULL)
        *rc = ferry__error(FERRY_EINVAL, "%s: out is NULL", who);
    else if ((obj = calloc(1, size)) == NULL)
        *rc = ferry__error(FERRY_ENOMEM, "%s: out of memory", who);
    return obj;
}

void ferry__strlcpy(char *dst, const char *src, size_t dst_len)
{
    if (dst_len == 0)
        return;
    size_t n = src ? strlen(src) : 0;
    if (n >= dst_len)
        n = dst_len - 1;
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

int ferry__cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return -1;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

void ferry__deadline_after(uint64_t ns, struct timespec *out)
{
    clock_gettime(CLOCK_MONOTONIC, out);
    uint64_t secs = ns / 1000000000u;
    if (secs > (uint64_t)INT32_MAX)
        secs = INT32_MAX;
    out->tv_sec += (time_t)secs;
    out->tv_nsec += (long)(ns % 1000000000u);
    if (out->tv_nsec >= 1000000000L) {
        out->tv_sec++;
        out->tv_nsec -= 1000000000L;
    }
}

void ferry__cond_sleep(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, uint64_t ns)
{
    struct timespec dl;
    ferry__deadline_after(ns, &dl);
    int rc = 0;
    while (!*stop && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(cv, mu, &dl);
}

bool ferry__cond_nap(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, uint64_t ns)
{
    pthread_mutex_lock(mu);
    ferry__cond_sleep(cv, mu, stop, ns);
    bool go = !*stop;
    pthread_mutex_unlock(mu);
    return go;
}

void ferry__flag_set_wake(pthread_mutex_t *mu, bool *flag, pthread_cond_t *a, pthread_cond_t *b)
{
    pthread_mutex_lock(mu);
    *flag = true;
    pthread_cond_broadcast(a);
    if (b != NULL)
        pthread_cond_broadcast(b);
    pthread_mutex_unlock(mu);
}

int ferry__thread_start(pthread_t *th, bool *started, void *(*fn)(void *), void *arg,
                        const char *name)
{
    int rc = pthread_create(th, NULL, fn, arg);
    if (rc != 0)
        return rc;
    *started = true;
    pthread_setname_np(*th, name);
    return 0;
}

int ferry__mutex_init_adaptive(pthread_mutex_t *m)
{
    /* glibc's adaptive mutex spins briefly before sleeping: locks held for a few hundred ns and
     * passed between threads (queues, the pipeline, the simulator) otherwise meet in futex
     * calls and context switches. */
#if defined(__GLIBC__) && defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
    pthread_mutexattr_t attr;
    if (pthread_mutexattr_init(&attr) != 0)
        return pthread_mutex_init(m, NULL);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    int rc = pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
    return rc;
#else
    return pthread_mutex_init(m, NULL);
#endif
}

void ferry__json_str(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    /* Runs that need no escape go out in one write: names and paths are mostly such a run. */
    const unsigned char *p = (const unsigned char *)s;
    for (;;) {
        size_t run = 0;
        while (p[run] >= 0x20 && p[run] != '"' && p[run] != '\\')
            run++;
        fwrite(p, 1, run, f);
        p += run;
        if (*p == '\0')
            break;
        if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fprintf(f, "\\%c", *p);
        p++;
    }
    fputc('"', f);
}

void ferry__sized_copy_out(void *dst, const void *full, size_t full_size)
{
    size_t n;
    memcpy(&n, dst, sizeof(n));
    if (n > full_size)
        n = full_size;
    memcpy((char *)dst + sizeof(size_t), (const char *)full + sizeof(size_t), n - sizeof(size_t));
}

long ferry__thread_id(void)
{
#ifdef __linux__
    return (long)syscall(SYS_gettid);
#else
    return 0;
#endif
}
