/* CUDA_DEVICE_MAX_CONNECTIONS: how CUDA reads a value (include/ferry/connections.h says what
 * was measured), ferry's strict parser, the memory cost, and whether cuInit already ran. */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ferry/connections.h"

/* A plain decimal integer: optional '-', digits only, no spaces. */
static bool plain_int(const char *s, long long *out)
{
    int64_t v;
    if (*s == '+' || ferry__parse_i64(s, &v) != 0)
        return false;
    *out = v;
    return true;
}

int ferry_connections_read(const char *text, ferry_conn_reading_t *out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_connections_read: NULL out");
    memset(out, 0, sizeof(*out));
    out->effective = FERRY_CONNECTIONS_DEFAULT;
    out->measured = true;
    long long v = 0;
    if (text == NULL || text[0] == '\0') {
        out->status = FERRY_CONN_UNSET;
        snprintf(out->note, sizeof(out->note), "%s: CUDA uses its default, %u queues (without MPS)",
                 text == NULL ? "not set" : "empty", FERRY_CONNECTIONS_DEFAULT);
    } else if (!plain_int(text, &v)) {
        out->status = FERRY_CONN_MALFORMED;
        /* "abc" was measured to behave as unset; other shapes ("8x", " 8") were not. */
        bool alpha = text[0] < '0' || text[0] > '9';
        out->measured = alpha && text[0] != ' ' && text[0] != '-' && text[0] != '+';
        snprintf(out->note, sizeof(out->note), "'%.40s' is not a plain integer: %s; set 1..32",
                 text,
                 out->measured ? "CUDA ignores it and uses the default, 8 (measured with 'abc')"
                               : "CUDA's reading is not documented (taken as the default, 8; "
                                 "`ferry connections --measure` tells)");
    } else if (v <= 0) {
        out->status = FERRY_CONN_IGNORED;
        out->measured = v == 0;
        snprintf(out->note, sizeof(out->note),
                 "%lld is out of the documented range 1..32: CUDA uses the default, 8%s", v,
                 v == 0 ? " (measured)" : " (measured for 0; negative values not measured)");
    } else if (v > FERRY_CONNECTIONS_MAX) {
        out->status = FERRY_CONN_UNDOCUMENTED;
        out->effective = v > 1024 ? 1024 : (unsigned)v;
        snprintf(out->note, sizeof(out->note),
                 "%lld is above the documented 32: CUDA took 33 and 64 as given (device memory "
                 "grew) but nothing documents it; use 32 at most",
                 v);
    } else {
        out->status = FERRY_CONN_VALID;
        out->effective = (unsigned)v;
        snprintf(out->note, sizeof(out->note), "%lld hardware queues per context", v);
    }
    return 0;
}

int ferry_connections_parse(const char *what, const char *text, unsigned *out)
{
    what = what != NULL ? what : "connections";
    long long v = 0;
    if (text == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "%s: no value (accepted: an integer 1..32)", what);
    if (!plain_int(text, &v) || text[0] == '-' || (text[0] == '0' && text[1] != '\0'))
        return ferry__error(FERRY_EPARSE,
                            "%s: '%s' is not accepted: a decimal integer 1..32 (CUDA's "
                            "documented range), without sign, spaces or suffix",
                            what, text);
    if (v < 1 || v > FERRY_CONNECTIONS_MAX)
        return ferry__error(FERRY_ERANGE,
                            "%s: %lld is out of range: accepted 1..32 (0 means unset to CUDA, "
                            "above 32 is undocumented)",
                            what, v);
    *out = (unsigned)v;
    return 0;
}

/* ---- per-device rules --------------------------------------------------------------------- */

#define RULE_SYNTAX                                                                                \
    "expected MATCH=VALUE with MATCH one of index:K, name:TEXT, cc:X.Y, cc>=X.Y or * "             \
    "(items separated by commas, first match wins: 'index:1=4,*=16')"

/* A decimal number of at most 6 digits, all of [s, s + len), nothing else. */
static bool parse_small(const char *s, size_t len, int *out)
{
    if (len == 0 || len > 6)
        return false;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* "X.Y" in [s, s + len), both parts decimal. */
static bool parse_cc(const char *s, size_t len, int *major, int *minor)
{
    const char *dot = memchr(s, '.', len);
    return dot != NULL && parse_small(s, (size_t)(dot - s), major) &&
           parse_small(dot + 1, len - (size_t)(dot + 1 - s), minor);
}

static bool contains_nocase(const char *hay, const char *needle, size_t n)
{
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

/* The item [it, it + len): whether it matches the device (*@hit), its value in *@v; 0 or the
 * error. */
static int one_rule(const char *it, size_t len, const char *what, int index, const char *name,
                    int maj, int min, bool *hit, unsigned *v)
{
    const char *eq = NULL; /* the last '=': "cc>=X.Y" has one of its own */
    for (size_t i = 0; i < len; i++)
        eq = it[i] == '=' ? it + i : eq;
    size_t m = eq != NULL ? (size_t)(eq - it) : 0;
    int k = 0, a = 0, b = 0;
    bool ok = eq != NULL && m > 0;
    if (ok && m == 1 && it[0] == '*')
        *hit = true;
    else if (ok && m > 6 && strncmp(it, "index:", 6) == 0 && (ok = parse_small(it + 6, m - 6, &k)))
        *hit = k == index;
    else if (ok && m > 5 && strncmp(it, "name:", 5) == 0)
        *hit = index >= 0 && contains_nocase(name != NULL ? name : "", it + 5, m - 5);
    else if (ok && m > 3 && strncmp(it, "cc:", 3) == 0 && (ok = parse_cc(it + 3, m - 3, &a, &b)))
        *hit = maj == a && min == b;
    else if (ok && m > 4 && strncmp(it, "cc>=", 4) == 0 && (ok = parse_cc(it + 4, m - 4, &a, &b)))
        *hit = maj > a || (maj == a && min >= b);
    else
        ok = false;
    if (!ok)
        return ferry__error(FERRY_EINVAL, "%s: '%.*s' is not a rule: " RULE_SYNTAX, what, (int)len,
                            it);
    char val[32];
    size_t vl = len - m - 1;
    snprintf(val, sizeof(val), "%.*s", (int)(vl < sizeof(val) - 1 ? vl : sizeof(val) - 1), eq + 1);
    if (vl >= sizeof(val))
        val[sizeof(val) - 2] = '?';
    return ferry_connections_parse(what, val, v);
}

int ferry_connections_rule(const char *rules, const char *what, int index, const char *name,
                           int cc_major, int cc_minor, unsigned *value)
{
    what = what != NULL ? what : "rules";
    if (rules == NULL || value == NULL)
        return ferry__error(FERRY_EINVAL, "%s: no rules", what);
    int found = 0;
    for (const char *it = rules;;) {
        size_t len = strcspn(it, ",");
        bool hit = false;
        unsigned v = 0;
        int rc = one_rule(it, len, what, index, name, cc_major, cc_minor, &hit, &v);
        if (rc != 0)
            return rc;
        if (hit && index >= 0 && !found) {
            *value = v;
            found = 1;
        }
        if (it[len] == '\0')
            return found;
        it += len + 1;
    }
}

size_t ferry_connections_memory_bytes(unsigned compute, unsigned copy)
{
    return (size_t)compute * FERRY_CONNECTIONS_COMPUTE_BYTES +
           (size_t)copy * FERRY_CONNECTIONS_COPY_BYTES;
}

bool ferry_cuda_initialized(void)
{
    /* Only look: RTLD_NOLOAD never loads the driver. Before cuInit every driver call but a
     * few answers CUDA_ERROR_NOT_INITIALIZED (3). */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return false;
    int (*count)(int *) = NULL;
    *(void **)&count = dlsym(h, "cuDeviceGetCount");
    bool init = true;
    if (count != NULL) {
        int n = 0;
        init = count(&n) != 3;
    }
    dlclose(h);
    return init;
}
