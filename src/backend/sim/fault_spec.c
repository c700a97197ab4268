/* The fault schedule parser (fault_spec.h has the grammar). */
#include "backend/sim/fault_spec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define ACCEPTED                                                                                   \
    "KIND@TRIGGER[:PARAM...] with KIND kernel|sticky|alloc|slow|share|hang|hang-hard, TRIGGER "    \
    "batch=N|n=K|time=DUR|p=X, PARAM dev=I (any kind), x=F|for=DUR (slow), "                       \
    "gbps=R|dir=h2d|d2h|both|for=DUR (share), items separated by ','"

static const char *const kinds[] = {"kernel", "sticky",    "alloc", "slow",
                                    "hang",   "hang-hard", "share"};

const char *ferry__fault_kind_name(enum ferry_fault_kind k)
{
    return (unsigned)k < sizeof(kinds) / sizeof(kinds[0]) ? kinds[k] : "?";
}

static int fail(int code, const char *item, const char *why)
{
    return ferry__error(code, "fault spec item '%s': %s (accepted: " ACCEPTED ")", item, why);
}

/* A number (digits, one optional '.') followed by ns, us, ms or s. */
static bool parse_dur(const char *s, uint64_t *out)
{
    const char *p = s;
    int digits = 0, dots = 0;
    while ((*p >= '0' && *p <= '9') || *p == '.') {
        digits += *p != '.';
        dots += *p == '.';
        p++;
    }
    if (digits == 0 || dots > 1)
        return false;
    double scale;
    if (strcmp(p, "ns") == 0)
        scale = 1;
    else if (strcmp(p, "us") == 0)
        scale = 1e3;
    else if (strcmp(p, "ms") == 0)
        scale = 1e6;
    else if (strcmp(p, "s") == 0)
        scale = 1e9;
    else
        return false;
    double v = strtod(s, NULL) * scale;
    if (!(v >= 0) || v > 1e18)
        return false;
    *out = (uint64_t)llround(v);
    return true;
}

/* A plain decimal number (digits, one optional '.'). */
static bool parse_real(const char *s, double *out)
{
    int digits = 0, dots = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '.')
            dots++;
        else if (*p >= '0' && *p <= '9')
            digits++;
        else
            return false;
    }
    if (digits == 0 || dots > 1)
        return false;
    *out = strtod(s, NULL);
    return isfinite(*out);
}

static int parse_item(char *item, struct ferry_fault *f)
{
    char shown[96];
    snprintf(shown, sizeof(shown), "%s", item);
    memset(f, 0, sizeof(*f));
    f->factor = 1;
    f->dev = -1;
    char *at = strchr(item, '@');
    if (at == NULL)
        return fail(FERRY_EPARSE, shown, "no '@TRIGGER'");
    *at = '\0';
    size_t k = 0;
    while (k < sizeof(kinds) / sizeof(kinds[0]) && strcmp(item, kinds[k]) != 0)
        k++;
    if (k == sizeof(kinds) / sizeof(kinds[0]))
        return fail(FERRY_EPARSE, shown, "unknown kind");
    f->kind = (enum ferry_fault_kind)k;
    char *trig = at + 1, *params = strchr(trig, ':');
    if (params != NULL)
        *params++ = '\0';
    char *eq = strchr(trig, '=');
    if (eq == NULL)
        return fail(FERRY_EPARSE, shown, "the trigger needs NAME=VALUE");
    *eq = '\0';
    const char *tv = eq + 1;
    if (strcmp(trig, "batch") == 0) {
        f->trigger = FERRY_TRIG_BATCH;
        if (ferry__parse_u64(tv, &f->value) != 0)
            return fail(FERRY_EPARSE, shown, "batch= takes a batch id (a decimal integer)");
        if (f->kind == FERRY_FAULT_ALLOC || f->kind == FERRY_FAULT_SLOW ||
            f->kind == FERRY_FAULT_SHARE)
            return fail(FERRY_EPARSE, shown, "batch= applies to kernel, sticky and hang faults");
    } else if (strcmp(trig, "n") == 0) {
        f->trigger = FERRY_TRIG_N;
        if (ferry__parse_u64(tv, &f->value) != 0 || f->value == 0)
            return fail(FERRY_EPARSE, shown, "n= takes a count from 1");
    } else if (strcmp(trig, "time") == 0) {
        f->trigger = FERRY_TRIG_TIME;
        if (!parse_dur(tv, &f->value))
            return fail(FERRY_EPARSE, shown,
                        "time= takes a duration: a number with ns, us, ms or s");
        if (f->kind == FERRY_FAULT_ALLOC)
            return fail(FERRY_EPARSE, shown, "alloc faults take n= or p=");
    } else if (strcmp(trig, "p") == 0) {
        f->trigger = FERRY_TRIG_P;
        if (!parse_real(tv, &f->p) || !(f->p > 0) || f->p > 1)
            return fail(FERRY_ERANGE, shown, "p= takes a probability in (0, 1]");
        if (f->kind == FERRY_FAULT_SHARE)
            return fail(FERRY_EPARSE, shown, "share faults take n= or time=");
    } else {
        return fail(FERRY_EPARSE, shown, "unknown trigger");
    }
    while (params != NULL && *params) {
        char *next = strchr(params, ':');
        if (next != NULL)
            *next++ = '\0';
        char *peq = strchr(params, '=');
        if (peq == NULL)
            return fail(FERRY_EPARSE, shown, "a parameter needs NAME=VALUE");
        *peq = '\0';
        bool share = f->kind == FERRY_FAULT_SHARE;
        uint64_t dev = 0;
        if (strcmp(params, "dev") == 0) {
            if (ferry__parse_u64(peq + 1, &dev) != 0 || dev > 1023)
                return fail(FERRY_ERANGE, shown, "dev= takes a device index, 0 to 1023");
            f->dev = (int)dev;
        } else if (f->kind != FERRY_FAULT_SLOW && !share) {
            return fail(FERRY_EPARSE, shown,
                        "kernel, sticky, alloc and hang faults take dev= alone; slow and share "
                        "faults their own parameters too");
        } else if (share && strcmp(params, "gbps") == 0) {
            if (!parse_real(peq + 1, &f->gbps) || !(f->gbps > 0) || f->gbps > 1000)
                return fail(FERRY_ERANGE, shown, "gbps= takes a rate above 0, at most 1000 GB/s");
        } else if (share && strcmp(params, "dir") == 0) {
            const char *v = peq + 1;
            if (strcmp(v, "h2d") == 0)
                f->dirs = 1;
            else if (strcmp(v, "d2h") == 0)
                f->dirs = 2;
            else if (strcmp(v, "both") == 0)
                f->dirs = 3;
            else
                return fail(FERRY_EPARSE, shown, "dir= takes h2d, d2h or both");
        } else if (!share && strcmp(params, "x") == 0) {
            if (!parse_real(peq + 1, &f->factor) || !(f->factor > 1) || f->factor > 1000)
                return fail(FERRY_ERANGE, shown, "x= takes a factor above 1, at most 1000");
        } else if (strcmp(params, "for") == 0) {
            if (!parse_dur(peq + 1, &f->for_ns) || f->for_ns == 0)
                return fail(FERRY_EPARSE, shown, "for= takes a duration above 0");
        } else {
            return fail(FERRY_EPARSE, shown, "unknown parameter");
        }
        params = next;
    }
    if (f->kind == FERRY_FAULT_SLOW && f->factor <= 1)
        return fail(FERRY_EPARSE, shown, "slow needs x=F");
    if (f->kind == FERRY_FAULT_SHARE && !(f->gbps > 0))
        return fail(FERRY_EPARSE, shown, "share needs gbps=R");
    if (f->kind == FERRY_FAULT_SHARE && f->dirs == 0)
        f->dirs = 1;
    return 0;
}

void ferry__fault_spec_for_device(struct ferry_fault_spec *spec, int index)
{
    size_t k = 0;
    for (size_t i = 0; i < spec->n; i++)
        if (spec->f[i].dev < 0 || spec->f[i].dev == index)
            spec->f[k++] = spec->f[i];
    spec->n = k;
}

int ferry__fault_spec_parse(const char *text, struct ferry_fault_spec *out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "fault spec: NULL out");
    memset(out, 0, sizeof(*out));
    if (text == NULL || *text == '\0')
        return 0;
    size_t len = strlen(text);
    if (len > 4096)
        return ferry__error(FERRY_ERANGE, "fault spec: %zu characters (at most 4096)", len);
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return ferry__error(FERRY_ENOMEM, "fault spec: out of memory");
    memcpy(copy, text, len + 1);
    int rc = 0;
    for (char *item = copy, *comma;; item = comma + 1) {
        comma = strchr(item, ',');
        if (comma != NULL)
            *comma = '\0';
        if (*item == '\0') {
            rc = fail(FERRY_EPARSE, item, "empty item");
            break;
        }
        if (out->n == FERRY_FAULT_MAX) {
            rc = ferry__error(FERRY_ERANGE, "fault spec: more than %d items", FERRY_FAULT_MAX);
            break;
        }
        if ((rc = parse_item(item, &out->f[out->n])) != 0)
            break;
        out->n++;
        if (comma == NULL)
            break;
    }
    free(copy);
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    return rc;
}
