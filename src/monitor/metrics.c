/* The metrics registry (include/ferry/metrics.h): families of series registered by name, values
 * as atomics (doubles kept as their bits), attached pipelines read at exposition time, the
 * Prometheus text format, an atomically replaced textfile, and a loopback HTTP endpoint served
 * by libmicrohttpd. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/runtime.h"
#include "ferry/metrics.h"
#include "monitor/latency.h"

enum kind { K_COUNTER, K_GAUGE, K_HISTOGRAM };
static const char *const kind_names[] = {"counter", "gauge", "histogram"};

#define MAX_BOUNDS 32

struct ferry_metric {
    enum kind kind;
    char *labels;          /* 'k="v",k2="v2"' (escaped), or "" */
    _Atomic uint64_t bits; /* counter and gauge value: a double's bits */
    size_t nbounds;
    double bounds[MAX_BOUNDS];
    _Atomic uint64_t counts[MAX_BOUNDS + 1]; /* non-cumulative */
    _Atomic uint64_t sum_bits;               /* a double's bits */
    struct ferry_metric *next;
};

typedef struct family {
    char *name, *help;
    enum kind kind;
    ferry_metric_t *series, *last;
    struct family *next;
} family_t;

typedef struct attached {
    ferry_pipeline_t *p;
    char *label;
    struct attached *next;
} attached_t;

struct ferry_metrics {
    pthread_mutex_t lock; /* the lists; values are atomics */
    family_t *families, *last;
    attached_t *pipelines;
    struct MHD_Daemon *daemon; /* the endpoint, or NULL; set and cleared under the lock */
    char *common;              /* labels every sample carries ('k="v",...', escaped), or NULL */
};

/* While ferry_metrics_write runs on this thread (under the registry's lock): its registry's
 * common labels, which put_sample puts first on every sample. */
static __thread const char *write_common;

/* ---- values ------------------------------------------------------------------------------ */

static double load_d(const _Atomic uint64_t *bits)
{
    uint64_t b = atomic_load_explicit(bits, memory_order_relaxed);
    double d;
    memcpy(&d, &b, sizeof(d));
    return d;
}

static void add_d(_Atomic uint64_t *bits, double v)
{
    uint64_t old = atomic_load_explicit(bits, memory_order_relaxed), nw;
    do {
        double d;
        memcpy(&d, &old, sizeof(d));
        d += v;
        memcpy(&nw, &d, sizeof(nw));
    } while (!atomic_compare_exchange_weak_explicit(bits, &old, nw, memory_order_relaxed,
                                                    memory_order_relaxed));
}

void ferry_metric_add(ferry_metric_t *c, double v)
{
    if (c == NULL || c->kind == K_HISTOGRAM || !isfinite(v))
        return;
    if (c->kind == K_COUNTER && v < 0) {
        ferry_log(FERRY_LOG_WARN, "metrics", "a counter cannot go down (add %g ignored)", v);
        return;
    }
    add_d(&c->bits, v);
}

void ferry_metric_set(ferry_metric_t *g, double v)
{
    if (g == NULL || g->kind != K_GAUGE)
        return;
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    atomic_store_explicit(&g->bits, b, memory_order_relaxed);
}

void ferry_metric_observe(ferry_metric_t *h, double v)
{
    if (h == NULL || h->kind != K_HISTOGRAM || isnan(v))
        return;
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    add_d(&h->sum_bits, v);
}

/* ---- registration ------------------------------------------------------------------------ */

int ferry_metrics_create(ferry_metrics_t **out)
{
    int rc = 0;
    ferry_metrics_t *m = ferry__obj_alloc(out, sizeof(*m), "ferry_metrics_create", &rc);
    if (m == NULL)
        return rc;
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return 0;
}

static bool valid_name(const char *s, bool label)
{
    if (s == NULL || *s == '\0')
        return false;
    for (const char *p = s; *p; p++) {
        bool alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                     (!label && *p == ':');
        if (!alpha && !(p > s && *p >= '0' && *p <= '9'))
            return false;
    }
    return true;
}

/* Escape a label value: backslash, double quote and newline. */
static void append_escaped(char *dst, size_t *at, size_t cap, const char *v)
{
    for (; *v && *at + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') {
            dst[(*at)++] = '\\';
            dst[(*at)++] = *v;
        } else if (*v == '\n') {
            dst[(*at)++] = '\\';
            dst[(*at)++] = 'n';
        } else {
            dst[(*at)++] = *v;
        }
    }
    dst[*at] = '\0';
}

static int format_labels(const char *const *labels, char **out)
{
    char buf[1024] = "";
    size_t at = 0;
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        if (!valid_name(labels[i], true) || labels[i + 1] == NULL ||
            strncmp(labels[i], "__", 2) == 0)
            return ferry__error(
                FERRY_EINVAL,
                "metrics: label '%s' is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                "not starting with __) or has no value",
                labels[i]);
        int n = snprintf(buf + at, sizeof(buf) - at, "%s%s=\"", i ? "," : "", labels[i]);
        if (n < 0 || (size_t)n >= sizeof(buf) - at)
            return ferry__error(FERRY_EINVAL, "metrics: labels longer than %zu bytes", sizeof(buf));
        at += (size_t)n;
        append_escaped(buf, &at, sizeof(buf) - 2, labels[i + 1]);
        buf[at++] = '"';
        buf[at] = '\0';
    }
    *out = strdup(buf);
    return *out ? 0 : ferry__error(FERRY_ENOMEM, "metrics: out of memory");
}

static int add_series(ferry_metrics_t *m, enum kind kind, const char *name, const char *help,
                      const char *const *labels, const double *bounds, size_t nb,
                      ferry_metric_t **out)
{
    if (m == NULL || out == NULL || help == NULL)
        return ferry__error(FERRY_EINVAL, "metrics: NULL registry, help or out");
    if (!valid_name(name, false))
        return ferry__error(FERRY_EINVAL,
                            "metrics: '%s' is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
                            name ? name : "(null)");
    size_t len = strlen(name);
    if (kind == K_COUNTER && (len < 6 || strcmp(name + len - 6, "_total") != 0))
        return ferry__error(FERRY_EINVAL, "metrics: counter '%s' must end in _total", name);
    if (kind == K_HISTOGRAM) {
        if (nb == 0 || nb > MAX_BOUNDS || bounds == NULL)
            return ferry__error(FERRY_EINVAL, "metrics: histogram '%s' needs 1 to %d bounds", name,
                                MAX_BOUNDS);
        for (size_t i = 0; i < nb; i++)
            if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
                return ferry__error(FERRY_EINVAL,
                                    "metrics: histogram '%s': bounds must be finite and increasing",
                                    name);
    }
    ferry_metric_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ferry__error(FERRY_ENOMEM, "metrics: out of memory");
    int rc = format_labels(labels, &s->labels);
    if (rc != 0) {
        free(s);
        return rc;
    }
    s->kind = kind;
    s->nbounds = nb;
    if (nb)
        memcpy(s->bounds, bounds, nb * sizeof(double));
    pthread_mutex_lock(&m->lock);
    family_t *f = m->families;
    while (f != NULL && strcmp(f->name, name) != 0)
        f = f->next;
    if (f != NULL && f->kind != kind) {
        pthread_mutex_unlock(&m->lock);
        free(s->labels);
        free(s);
        return ferry__error(FERRY_EINVAL, "metrics: '%s' is already a %s", name,
                            kind_names[f->kind]);
    }
    for (ferry_metric_t *o = f ? f->series : NULL; o != NULL; o = o->next)
        if (strcmp(o->labels, s->labels) == 0) {
            pthread_mutex_unlock(&m->lock);
            free(s->labels);
            free(s);
            return ferry__error(FERRY_EINVAL, "metrics: '%s{%s}' is registered already", name,
                                o->labels);
        }
    if (f == NULL) {
        f = calloc(1, sizeof(*f));
        if (f == NULL || (f->name = strdup(name)) == NULL || (f->help = strdup(help)) == NULL) {
            pthread_mutex_unlock(&m->lock);
            if (f != NULL) {
                free(f->name);
                free(f);
            }
            free(s->labels);
            free(s);
            return ferry__error(FERRY_ENOMEM, "metrics: out of memory");
        }
        f->kind = kind;
        FERRY__LIST_APPEND(m->families, m->last, f);
    }
    FERRY__LIST_APPEND(f->series, f->last, s);
    pthread_mutex_unlock(&m->lock);
    *out = s;
    return 0;
}

int ferry_metrics_counter(ferry_metrics_t *m, const char *name, const char *help,
                          const char *const *labels, ferry_metric_t **out)
{
    return add_series(m, K_COUNTER, name, help, labels, NULL, 0, out);
}

int ferry_metrics_gauge(ferry_metrics_t *m, const char *name, const char *help,
                        const char *const *labels, ferry_metric_t **out)
{
    return add_series(m, K_GAUGE, name, help, labels, NULL, 0, out);
}

int ferry_metrics_histogram(ferry_metrics_t *m, const char *name, const char *help,
                            const char *const *labels, const double *bounds, size_t n,
                            ferry_metric_t **out)
{
    return add_series(m, K_HISTOGRAM, name, help, labels, bounds, n, out);
}

int ferry_metrics_label_all(ferry_metrics_t *m, const char *name, const char *value)
{
    if (m == NULL || name == NULL || value == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_metrics_label_all: NULL argument");
    const char *const one[] = {name, value, NULL};
    char *lab = NULL;
    int rc = format_labels(one, &lab);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&m->lock);
    size_t have = m->common != NULL ? strlen(m->common) : 0;
    char *c = realloc(m->common, have + strlen(lab) + 2);
    if (c != NULL) {
        snprintf(c + have, strlen(lab) + 2, "%s%s", have ? "," : "", lab);
        m->common = c;
    }
    pthread_mutex_unlock(&m->lock);
    free(lab);
    return c != NULL ? 0 : ferry__error(FERRY_ENOMEM, "ferry_metrics_label_all: out of memory");
}

int ferry_metrics_add_pipeline(ferry_metrics_t *m, ferry_pipeline_t *p, const char *label)
{
    if (m == NULL || p == NULL || label == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_metrics_add_pipeline: NULL argument");
    attached_t *a = calloc(1, sizeof(*a));
    if (a == NULL || (a->label = strdup(label)) == NULL) {
        free(a);
        return ferry__error(FERRY_ENOMEM, "metrics: out of memory");
    }
    a->p = p;
    pthread_mutex_lock(&m->lock);
    a->next = m->pipelines;
    m->pipelines = a;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

void ferry_metrics_remove_pipeline(ferry_metrics_t *m, ferry_pipeline_t *p)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    for (attached_t **pp = &m->pipelines; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->p == p) {
            attached_t *a = *pp;
            *pp = a->next;
            free(a->label);
            free(a);
            break;
        }
    pthread_mutex_unlock(&m->lock);
}

/* ---- exposition -------------------------------------------------------------------------- */

/* The shortest text that reads back as @v: 0.00025, not %.17g's 0.00025000000000000001.
 * Whole numbers print whole (400000, not the 4e+05 that reads back just as well). */
static void shortest(char *buf, size_t len, double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(buf, len, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void put_value(FILE *f, double v)
{
    char num[32];
    if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", f);
    else if (isnan(v))
        fputs("NaN", f);
    else {
        shortest(num, sizeof(num), v);
        fputs(num, f);
    }
}

static void put_sample(FILE *f, const char *name, const char *suffix, const char *labels,
                       const char *extra, double v)
{
    const char *c = write_common != NULL ? write_common : "";
    bool any = c[0] || labels[0] || (extra && extra[0]);
    fprintf(f, "%s%s%s%s%s%s%s%s%s ", name, suffix, any ? "{" : "", c,
            c[0] && (labels[0] || (extra && extra[0])) ? "," : "", labels,
            labels[0] && extra && extra[0] ? "," : "", extra ? extra : "", any ? "}" : "");
    put_value(f, v);
    fputc('\n', f);
}

static void put_histogram(FILE *f, const char *name, const char *labels, const double *bounds,
                          size_t nb, const uint64_t *counts, double sum)
{
    uint64_t cum = 0;
    char le[64], num[32];
    for (size_t i = 0; i <= nb; i++) {
        cum += counts[i];
        if (i < nb) {
            shortest(num, sizeof(num), bounds[i]);
            snprintf(le, sizeof(le), "le=\"%s\"", num);
        } else
            snprintf(le, sizeof(le), "le=\"+Inf\"");
        put_sample(f, name, "_bucket", labels, le, (double)cum);
    }
    put_sample(f, name, "_sum", labels, NULL, sum);
    put_sample(f, name, "_count", labels, NULL, (double)cum);
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- the attached pipelines' families, from a table ---------------------------------------- */

/* How a series reads its field of ferry_pipeline_stats_t. */
enum pl_field { PL_NONE, PL_U64, PL_NS, PL_UINT, PL_BOOL, PL_DOUBLE }; /* PL_NS: ns as seconds */

typedef struct pl_series {
    const char *label; /* the series' own label ('where="gpu"'); NULL: only the pipeline's */
    size_t field;      /* offsetof(ferry_pipeline_stats_t, ...) */
    enum pl_field type;
} pl_series_t;

/* A family of every attached pipeline: its series read from the stats (PL_FIELDS; PL_LINKED:
 * only pipelines whose link monitor has sampled), one series per stream (PL_STREAMS), or the
 * batch latency histogram (PL_LATENCY). */
enum pl_how { PL_FIELDS, PL_LINKED, PL_STREAMS, PL_LATENCY };

typedef struct pl_family {
    const char *name, *type, *help;
    enum pl_how how;
    pl_series_t series[3];
} pl_family_t;

#define S(label, field, type)                                                                      \
    {                                                                                              \
        label, offsetof(ferry_pipeline_stats_t, field), type                                       \
    }
#define NONE                                                                                       \
    {                                                                                              \
        NULL, 0, PL_NONE                                                                           \
    }
#define FAMILY(name, type, how, help, ...) {name, type, help, how, {__VA_ARGS__}},
static const pl_family_t pl_families[] = {
#include "monitor/metrics_pipeline.def"
};
#undef FAMILY
#undef NONE
#undef S

static double field_value(const ferry_pipeline_stats_t *st, const pl_series_t *s)
{
    const char *at = (const char *)st + s->field;
    uint64_t u = 0;
    unsigned w = 0;
    bool b = false;
    double d = 0;
    switch (s->type) {
    case PL_U64:
    case PL_NS: memcpy(&u, at, sizeof(u)); return s->type == PL_NS ? (double)u / 1e9 : (double)u;
    case PL_UINT: memcpy(&w, at, sizeof(w)); return (double)w;
    case PL_BOOL: memcpy(&b, at, sizeof(b)); return b ? 1 : 0;
    case PL_DOUBLE: memcpy(&d, at, sizeof(d)); return d;
    case PL_NONE: break;
    }
    return 0;
}

static const char *stream_kind(char k)
{
    return k == 'h' ? "h2d" : k == 'c' ? "compute" : k == 'd' ? "d2h" : "all";
}

/* One row of the pipeline series: a pipeline of one device, or one device of a set (its own
 * pipeline's figures, device="N"); @owner: whose batch-latency histogram the row carries (a
 * set's is the whole set's, on its first row, device="all"; NULL: none). */
typedef struct pl_row {
    ferry_pipeline_stats_t st;
    char lab[256];
    const void *owner;
    bool latency_only; /* a set's device="all" row: its latency histogram, nothing else */
} pl_row_t;

/* One family's samples for the @n rows. */
static void write_family(FILE *f, const pl_family_t *fam, const pl_row_t *rows, size_t n)
{
    head(f, fam->name, fam->type, fam->help);
    for (size_t k = 0; k < n; k++) {
        const ferry_pipeline_stats_t *st = &rows[k].st;
        if (fam->how == PL_LATENCY) {
            if (rows[k].owner == NULL)
                continue;
            uint64_t counts[FERRY__LAT_BUCKETS + 1], sum_ns = 0, count = 0;
            (void)ferry__lat_hist_read_owner(rows[k].owner, counts, &sum_ns, &count);
            put_histogram(f, fam->name, rows[k].lab, ferry__lat_bounds_s, FERRY__LAT_BUCKETS,
                          counts, (double)sum_ns / 1e9);
            continue;
        }
        if (rows[k].latency_only)
            continue;
        if (fam->how == PL_STREAMS) {
            for (unsigned s = 0; s < st->streams; s++) {
                char extra[64];
                snprintf(extra, sizeof(extra), "stream=\"%u\",kind=\"%s\"", s,
                         stream_kind(st->stream_kind[s]));
                put_sample(f, fam->name, "", rows[k].lab, extra,
                           (double)st->stream_busy_ns[s] / 1e9);
            }
            continue;
        }
        if (fam->how == PL_LINKED && st->link_samples == 0)
            continue;
        for (size_t j = 0; j < 3 && fam->series[j].type != PL_NONE; j++)
            put_sample(f, fam->name, "", rows[k].lab, fam->series[j].label,
                       field_value(st, &fam->series[j]));
    }
}

/* pipeline="NAME",device="DEV" into @lab. */
static void row_label(char *lab, size_t len, const char *name, const char *dev)
{
    size_t at = 0;
    snprintf(lab, len, "pipeline=\"");
    at = strlen(lab);
    append_escaped(lab, &at, len - 32, name);
    snprintf(lab + at, len - at, "\",device=\"%s\"", dev);
}

/* The rows of attached pipeline @p into @rows (room for @cap); returns how many. A set's rows
 * are its devices'; its latency histogram (batches span devices) goes on a row of its own that
 * carries nothing else, device="all". */
static size_t pipeline_rows(const attached_t *a, pl_row_t *rows, size_t cap)
{
    unsigned n = ferry_pipeline_devices(a->p);
    size_t k = 0;
    char dev[16];
    if (n <= 1 && cap > 0) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        ferry_pipeline_device_stats(a->p, 0, &d);
        rows[0].st = d.stats;
        snprintf(dev, sizeof(dev), "%d", d.index);
        row_label(rows[0].lab, sizeof(rows[0].lab), a->label, dev);
        rows[0].owner = a->p;
        return 1;
    }
    for (unsigned i = 0; i < n && k < cap; i++, k++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        ferry_pipeline_device_stats(a->p, i, &d);
        rows[k].st = d.stats;
        snprintf(dev, sizeof(dev), "%d", d.index);
        row_label(rows[k].lab, sizeof(rows[k].lab), a->label, dev);
        rows[k].owner = NULL;
    }
    return k;
}

/* The attached pipelines' series, family by family (pl_families). */
static void write_pipelines(ferry_metrics_t *m, FILE *f)
{
    size_t n = 0;
    for (attached_t *a = m->pipelines; a != NULL; a = a->next)
        n += ferry_pipeline_devices(a->p) + 1;
    if (n == 0)
        return;
    pl_row_t *rows = calloc(n, sizeof(*rows));
    if (rows == NULL)
        return;
    size_t k = 0;
    for (attached_t *a = m->pipelines; a != NULL; a = a->next) {
        k += pipeline_rows(a, rows + k, n - k);
        if (ferry_pipeline_devices(a->p) > 1 && k < n) { /* the set's latency row */
            memset(&rows[k].st, 0, sizeof(rows[k].st));
            row_label(rows[k].lab, sizeof(rows[k].lab), a->label, "all");
            rows[k].latency_only = true;
            rows[k++].owner = a->p;
        }
    }
    for (size_t i = 0; i < sizeof(pl_families) / sizeof(pl_families[0]); i++)
        write_family(f, &pl_families[i], rows, k);
    free(rows);
}

int ferry_metrics_write(ferry_metrics_t *m, FILE *f)
{
    if (m == NULL || f == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_metrics_write: NULL argument");
    pthread_mutex_lock(&m->lock);
    /* Prometheus' convention for what is running: a gauge of 1 whose labels say it. */
    write_common = m->common;
    head(f, "ferry_build_info", "gauge", "ferry's version, in the label; always 1.");
    char version[64];
    snprintf(version, sizeof(version), "version=\"%s\"", ferry_version_string());
    put_sample(f, "ferry_build_info", "", version, NULL, 1);
    for (family_t *fa = m->families; fa != NULL; fa = fa->next) {
        head(f, fa->name, kind_names[fa->kind], fa->help);
        for (ferry_metric_t *s = fa->series; s != NULL; s = s->next) {
            if (s->kind == K_HISTOGRAM) {
                uint64_t counts[MAX_BOUNDS + 1];
                for (size_t i = 0; i <= s->nbounds; i++)
                    counts[i] = atomic_load_explicit(&s->counts[i], memory_order_relaxed);
                put_histogram(f, fa->name, s->labels, s->bounds, s->nbounds, counts,
                              load_d(&s->sum_bits));
            } else {
                put_sample(f, fa->name, "", s->labels, NULL, load_d(&s->bits));
            }
        }
    }
    write_pipelines(m, f);
    write_common = NULL;
    pthread_mutex_unlock(&m->lock);
    return ferror(f) ? ferry__error(FERRY_EIO, "ferry_metrics_write: write error") : 0;
}

int ferry_metrics_write_file(ferry_metrics_t *m, const char *path)
{
    if (m == NULL || path == NULL || path[0] == '\0')
        return ferry__error(FERRY_EINVAL, "ferry_metrics_write_file: NULL registry or path");
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
        return ferry__error(FERRY_EINVAL, "metrics file path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return ferry__error(FERRY_EIO, "metrics file '%s': cannot create '%s': %s", path, tmp,
                            strerror(errno));
    int rc = ferry_metrics_write(m, f);
    if (fclose(f) != 0 && rc == 0)
        rc = ferry__error(FERRY_EIO, "metrics file '%s': %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = ferry__error(FERRY_EIO, "metrics file '%s': rename from '%s': %s", path, tmp,
                          strerror(errno));
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* ---- the endpoint ------------------------------------------------------------------------ */

/* libmicrohttpd serves every connection from one thread of its own (poll(2), not a thread per
 * connection), so the only data a request touches is ferry's, read under m->lock as any
 * caller of ferry_metrics_write does. Its guarantees are what a scrape needs from a process
 * that other local programs can connect to: a connection that sends one byte now and then, or
 * none, costs a slot and nothing else; idle connections close after
 * FERRY_METRICS_IDLE_TIMEOUT_S; past FERRY_METRICS_CONNECTION_LIMIT, new connections wait in
 * the kernel's queue until one closes; MHD_stop_daemon closes them all whatever their state
 * (issue 15: a serial server held one scrape 30 s behind a client sending a byte every 0.9 s,
 * and a run's exit 38 s). */

static const char only_metrics[] = "ferry serves GET /metrics only\n";

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    ferry_metrics_t *m = cls;
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0,
         head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    unsigned status = MHD_HTTP_OK;
    const char *type = "text/plain; version=0.0.4; charset=utf-8";
    char *body = NULL;
    size_t len = 0;
    if (!get && !head) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") != 0) {
        status = MHD_HTTP_NOT_FOUND;
    } else {
        FILE *f = open_memstream(&body, &len);
        if (f == NULL)
            return MHD_NO;
        int rc = ferry_metrics_write(m, f);
        if (fclose(f) != 0 || rc != 0) {
            free(body);
            return MHD_NO; /* closes the connection: the scraper sees a failed scrape */
        }
    }
    if (status != MHD_HTTP_OK) {
        type = "text/plain; charset=utf-8";
        body = strdup(only_metrics);
        if (body == NULL)
            return MHD_NO;
        len = strlen(body);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, free);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    enum MHD_Result ret = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (ret == MHD_YES && status == MHD_HTTP_METHOD_NOT_ALLOWED)
        ret = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (ret == MHD_YES)
        ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

/* "127.0.0.1:9100", "[::1]:9100" from a bound address. */
static void format_addr(const struct sockaddr *sa, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(out, len, "[%s]:%u", host, port);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
        snprintf(out, len, "%s:%u", host, port);
    }
}

#define ACCEPTED_ADDR                                                                              \
    "accepted HOST:PORT with HOST a loopback address or name (127.0.0.1, [::1] in brackets, "      \
    "localhost) and PORT 0 to 65535 (0 picks a free one), e.g. 127.0.0.1:PORT"

/* Split @p addr into host (brackets removed) and port. */
static int split_addr(const char *addr, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr)
        return ferry__error(FERRY_EINVAL, "metrics address '%s': no port; " ACCEPTED_ADDR, addr);
    const char *h = addr, *he = colon;
    if (addr[0] == '[') {
        if (colon[-1] != ']' || colon - addr < 3)
            return ferry__error(FERRY_EINVAL, "metrics address '%s': " ACCEPTED_ADDR, addr);
        h = addr + 1;
        he = colon - 1;
    } else if (memchr(addr, ':', (size_t)(colon - addr)) != NULL) {
        return ferry__error(FERRY_EINVAL,
                            "metrics address '%s': an IPv6 address goes in brackets, as in "
                            "[::1]:PORT; " ACCEPTED_ADDR,
                            addr);
    }
    size_t hl = (size_t)(he - h);
    char *end = NULL;
    errno = 0;
    long pn = strtol(colon + 1, &end, 10);
    if (hl == 0 || hl >= host_len || colon[1] < '0' || colon[1] > '9' || *end != '\0' ||
        errno != 0 || pn < 0 || pn > 65535)
        return ferry__error(FERRY_EINVAL, "metrics address '%s': " ACCEPTED_ADDR, addr);
    memcpy(host, h, hl);
    host[hl] = '\0';
    snprintf(port, port_len, "%ld", pn);
    return 0;
}

/* A socket bound and listening on the first loopback address @p addr resolves to. */
static int open_listener(const char *addr, int *fd_out, char *bound, size_t bound_len)
{
    char host[256], port[8];
    int rc = split_addr(addr, host, sizeof(host), port, sizeof(port));
    if (rc != 0)
        return rc;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g != 0)
        return ferry__error(FERRY_EINVAL,
                            "metrics address '%s': cannot resolve '%s': %s; " ACCEPTED_ADDR, addr,
                            host, g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    char first[64] = "", why[128] = "";
    rc = FERRY_EINVAL;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (!is_loopback(ai->ai_addr)) {
            if (!first[0])
                format_addr(ai->ai_addr, first, sizeof(first));
            continue;
        }
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(why, sizeof(why), "socket: %s", strerror(errno));
            rc = FERRY_EIO;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ai->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        /* The backlog holds connections that arrive faster than the server accepts them. */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0 ||
            getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
            format_addr(ai->ai_addr, bound, bound_len);
            snprintf(why, sizeof(why), "%s: %s", bound, strerror(errno));
            close(fd);
            rc = FERRY_EIO;
            continue;
        }
        format_addr((struct sockaddr *)&ss, bound, bound_len);
        *fd_out = fd;
        freeaddrinfo(res);
        return 0;
    }
    freeaddrinfo(res);
    if (rc == FERRY_EIO)
        return ferry__error(FERRY_EIO, "metrics endpoint '%s': %s", addr, why);
    return ferry__error(FERRY_EINVAL,
                        "metrics address '%s': '%s' %s%s is not loopback: only loopback "
                        "(127.x.x.x, ::1, or a name resolving to them such as localhost) is "
                        "served, as metrics are not for the network without a proxy in front",
                        addr, host, first[0] ? "resolves to " : "", first);
}

int ferry_metrics_serve(ferry_metrics_t *m, const char *addr, char *bound, size_t bound_len)
{
    if (m == NULL || addr == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_metrics_serve: NULL registry or address");
    char where[INET6_ADDRSTRLEN + 16] = "";
    int fd = -1;
    int rc = open_listener(addr, &fd, where, sizeof(where));
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&m->lock);
    if (m->daemon != NULL) {
        pthread_mutex_unlock(&m->lock);
        close(fd);
        return ferry__error(FERRY_EBUSY, "ferry_metrics_serve: already serving");
    }
    /* MHD_USE_ITC: stopping wakes the server thread at once, whatever its poll timeout. */
    m->daemon =
        MHD_start_daemon(MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC, 0, NULL, NULL, on_request, m,
                         MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)FERRY_METRICS_CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)FERRY_METRICS_IDLE_TIMEOUT_S, MHD_OPTION_END);
    bool started = m->daemon != NULL;
    pthread_mutex_unlock(&m->lock);
    if (!started) {
        close(fd);
        return ferry__error(FERRY_EIO, "metrics endpoint %s: the HTTP server did not start", where);
    }
    if (bound != NULL && bound_len > 0)
        snprintf(bound, bound_len, "%s", where);
    return 0;
}

void ferry_metrics_destroy(ferry_metrics_t *m)
{
    if (m == NULL)
        return;
    /* Not under the lock: a request being answered waits for it, and stopping waits for the
     * request. Stopping closes the listening socket and every connection. */
    pthread_mutex_lock(&m->lock);
    struct MHD_Daemon *d = m->daemon;
    m->daemon = NULL;
    pthread_mutex_unlock(&m->lock);
    if (d != NULL)
        MHD_stop_daemon(d);
    while (m->families != NULL) {
        family_t *f = m->families;
        m->families = f->next;
        while (f->series != NULL) {
            ferry_metric_t *s = f->series;
            f->series = s->next;
            free(s->labels);
            free(s);
        }
        free(f->name);
        free(f->help);
        free(f);
    }
    while (m->pipelines != NULL) {
        attached_t *a = m->pipelines;
        m->pipelines = a->next;
        free(a->label);
        free(a);
    }
    free(m->common);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
