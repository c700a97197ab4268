/* The per-device performance model (perfmodel.h): windows of chunk times per (device, stage,
 * size bucket), their trimmed estimate, prediction across buckets, the earliest-finish choice
 * with bounded exploration, verdicts and the read-out (saving and loading: perfmodel_json.c).
 * One mutex per model; keys are allocated on their first sample. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "sched/perfmodel_internal.h"

#define U64_CEIL 18446744073709549568.0 /* the largest double below 2^64 */

static bool dev_ok(int dev)
{
    return dev >= 0 && dev < FERRY_PERF_DEVICES;
}

static bool stage_ok(int stage)
{
    return stage >= 0 && stage < FERRY_PERF_STAGES;
}

unsigned ferry__perf_bucket_of(uint64_t bytes)
{
    unsigned k = 0;
    while (bytes >>= 1)
        k++;
    return k;
}

/* ns as an integer count, at least 1, saturated. */
uint64_t ferry__perf_to_ns(double ns)
{
    if (!(ns >= 1.0))
        return 1;
    if (ns >= U64_CEIL)
        return UINT64_MAX;
    return (uint64_t)llround(ns);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Recompute @b's estimate from its window: the mean of the middle half of the ns-per-byte
 * rates (1-2 samples: the fastest; perfmodel.h says why), at the window's mean size. */
static void estimate(struct ferry__perf_bucket *b, unsigned bucket)
{
    double rate[FERRY_PERF_WINDOW], bytes = 0.0;
    unsigned n = b->n;
    for (unsigned i = 0; i < n; i++) {
        double r = (double)b->ns[i] / (double)b->bytes[i];
        unsigned j = i;
        for (; j > 0 && rate[j - 1] > r; j--) /* insertion sort: n <= 24 */
            rate[j] = rate[j - 1];
        rate[j] = r;
        bytes += (double)b->bytes[i];
    }
    unsigned trim = n <= 2 ? 0 : (n + 1) / 4;
    unsigned hi = n <= 2 ? 1 : n - trim;
    double sum = 0.0;
    for (unsigned i = trim; i < hi; i++)
        sum += rate[i];
    /* The mean size stays in the bucket, whatever the rounding of a sum of large sizes. */
    double lo_b = ldexp(1.0, (int)bucket), hi_b = ldexp(1.0, (int)bucket + 1) - 1.0;
    double mean = fmin(fmax(bytes / n, lo_b), hi_b);
    b->est_bytes = mean >= U64_CEIL ? UINT64_MAX : (uint64_t)llround(mean);
    b->est_ns = sum / (double)(hi - trim) * (double)b->est_bytes;
}

int ferry__perf_create(ferry_perfmodel_t **out)
{
    int rc;
    ferry_perfmodel_t *m = ferry__obj_alloc(out, sizeof(*m), "ferry__perf_create", &rc);
    if (m == NULL)
        return rc;
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        return ferry__error(FERRY_ENOMEM, "ferry__perf_create: pthread_mutex_init failed");
    }
    *out = m;
    return 0;
}

static void free_series(struct ferry__perf_series *s)
{
    if (s == NULL)
        return;
    for (unsigned k = 0; k < FERRY_PERF_BUCKETS; k++)
        free(s->b[k]);
    free(s);
}

void ferry__perf_destroy(ferry_perfmodel_t *m)
{
    if (m == NULL)
        return;
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        for (int s = 0; s < FERRY_PERF_STAGES; s++)
            free_series(m->s[d][s]);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int set_name(ferry_perfmodel_t *m, char *dst, const char *name)
{
    pthread_mutex_lock(&m->mu);
    ferry__strlcpy(dst, name != NULL ? name : "", FERRY_PERF_NAME);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int ferry__perf_name_device(ferry_perfmodel_t *m, int dev, const char *name)
{
    if (m == NULL || !dev_ok(dev))
        return ferry__error(FERRY_EINVAL, "perf model: device slot %d out of range (0 to %d)", dev,
                            FERRY_PERF_DEVICES - 1);
    return set_name(m, m->dev_name[dev], name);
}

int ferry__perf_name_stage(ferry_perfmodel_t *m, int stage, const char *name)
{
    if (m == NULL || !stage_ok(stage))
        return ferry__error(FERRY_EINVAL, "perf model: stage id %d out of range (0 to %d)", stage,
                            FERRY_PERF_STAGES - 1);
    return set_name(m, m->stage_name[stage], name);
}

/* The bucket of (@dev, @stage, @k), allocated (empty) when missing; NULL when out of memory. */
struct ferry__perf_bucket *ferry__perf_bucket_get(ferry_perfmodel_t *m, int dev, int stage,
                                                  unsigned k)
{
    struct ferry__perf_series **sp = &m->s[dev][stage];
    if (*sp == NULL && (*sp = calloc(1, sizeof(**sp))) == NULL)
        return NULL;
    struct ferry__perf_bucket **bp = &(*sp)->b[k];
    if (*bp == NULL)
        *bp = calloc(1, sizeof(**bp));
    return *bp;
}

int ferry__perf_record(ferry_perfmodel_t *m, int dev, int stage, size_t bytes, uint64_t ns)
{
    if (m == NULL || !dev_ok(dev) || !stage_ok(stage) || bytes == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry__perf_record: bad key (device %d, stage %d, "
                            "%zu bytes)",
                            dev, stage, bytes);
    unsigned k = ferry__perf_bucket_of(bytes);
    pthread_mutex_lock(&m->mu);
    struct ferry__perf_bucket *b = ferry__perf_bucket_get(m, dev, stage, k);
    if (b == NULL) {
        pthread_mutex_unlock(&m->mu);
        return ferry__error(FERRY_ENOMEM, "ferry__perf_record: no memory for a new key");
    }
    b->ns[b->head] = ns > 0 ? ns : 1;
    b->bytes[b->head] = bytes;
    b->head = (b->head + 1) % FERRY_PERF_WINDOW;
    if (b->n < FERRY_PERF_WINDOW)
        b->n++;
    b->count++;
    m->s[dev][stage]->count++;
    if (m->exploring[dev][stage] > 0)
        m->exploring[dev][stage]--;
    estimate(b, k);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* The bucket's estimate scaled to @bytes: time scales with bytes within a bucket. */
static double scaled(const struct ferry__perf_bucket *b, double bytes)
{
    return b->est_ns * bytes / (double)b->est_bytes;
}

/* Under the lock. */
static int predict_locked(ferry_perfmodel_t *m, int dev, int stage, size_t bytes, uint64_t *ns)
{
    const struct ferry__perf_series *s = m->s[dev][stage];
    if (s == NULL || s->count == 0)
        return FERRY_EAGAIN;
    unsigned k = ferry__perf_bucket_of(bytes);
    const struct ferry__perf_bucket *own = s->b[k], *lo = NULL, *hi = NULL;
    double x = (double)bytes;
    if (own != NULL && own->n > 0) {
        *ns = ferry__perf_to_ns(scaled(own, x));
        return 0;
    }
    for (unsigned j = k; j-- > 0 && lo == NULL;)
        if (s->b[j] != NULL && s->b[j]->n > 0)
            lo = s->b[j];
    for (unsigned j = k + 1; j < FERRY_PERF_BUCKETS && hi == NULL; j++)
        if (s->b[j] != NULL && s->b[j]->n > 0)
            hi = s->b[j];
    if (lo != NULL && hi != NULL) { /* a line through the two neighbours' points */
        double bl = (double)lo->est_bytes, bh = (double)hi->est_bytes;
        *ns = ferry__perf_to_ns(lo->est_ns + (hi->est_ns - lo->est_ns) * (x - bl) / (bh - bl));
    } else {
        *ns = ferry__perf_to_ns(scaled(lo != NULL ? lo : hi, x));
    }
    return 0;
}

int ferry__perf_predict(ferry_perfmodel_t *m, int dev, int stage, size_t bytes, uint64_t *ns)
{
    if (m == NULL || !dev_ok(dev) || !stage_ok(stage) || bytes == 0 || ns == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry__perf_predict: bad key (device %d, stage %d, "
                            "%zu bytes)",
                            dev, stage, bytes);
    pthread_mutex_lock(&m->mu);
    int rc = predict_locked(m, dev, stage, bytes, ns);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int ferry__perf_exclude(ferry_perfmodel_t *m, int dev, bool excluded)
{
    if (m == NULL || !dev_ok(dev))
        return ferry__error(FERRY_EINVAL, "ferry__perf_exclude: device slot %d out of range", dev);
    pthread_mutex_lock(&m->mu);
    m->excluded[dev] = excluded;
    memset(m->exploring[dev], 0, sizeof(m->exploring[dev]));
    pthread_mutex_unlock(&m->mu);
    return 0;
}

bool ferry__perf_is_excluded(ferry_perfmodel_t *m, int dev)
{
    if (m == NULL || !dev_ok(dev))
        return false;
    pthread_mutex_lock(&m->mu);
    bool x = m->excluded[dev];
    pthread_mutex_unlock(&m->mu);
    return x;
}

/* The candidates of one choice, as the walk over the device set finds them (-1: none). */
struct pick {
    int explore; /* uncalibrated, below the explore limit, least queued */
    int blind;   /* uncalibrated, fewest explore chunks out */
    int best;    /* calibrated, earliest finish */
    uint64_t best_ns, best_finish, slowest_ns;
};

static void consider(ferry_perfmodel_t *m, int d, int stage, size_t bytes, const uint64_t *queued,
                     struct pick *p)
{
    const struct ferry__perf_series *s = m->s[d][stage];
    uint16_t out = m->exploring[d][stage];
    uint64_t ns;
    if (s == NULL || s->count < FERRY_PERF_CALIBRATED ||
        predict_locked(m, d, stage, bytes, &ns) != 0) {
        if (out < FERRY_PERF_EXPLORE_MAX && (p->explore < 0 || queued[d] < queued[p->explore]))
            p->explore = d;
        if (p->blind < 0 || out < m->exploring[p->blind][stage])
            p->blind = d;
        return;
    }
    uint64_t fin = add_sat(queued[d], ns);
    if (ns > p->slowest_ns)
        p->slowest_ns = ns;
    if (p->best < 0 || fin < p->best_finish ||
        (fin == p->best_finish && queued[d] < queued[p->best])) {
        p->best = d;
        p->best_ns = ns;
        p->best_finish = fin;
    }
}

int ferry__perf_choose(ferry_perfmodel_t *m, int stage, size_t bytes, uint64_t devices,
                       const uint64_t *queued_ns, ferry_perf_choice_t *out)
{
    if (m == NULL || !stage_ok(stage) || bytes == 0 || queued_ns == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry__perf_choose: bad arguments (stage %d, %zu "
                            "bytes)",
                            stage, bytes);
    struct pick p = {.explore = -1, .blind = -1, .best = -1};
    pthread_mutex_lock(&m->mu);
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        if ((devices >> d & 1) && !m->excluded[d])
            consider(m, d, stage, bytes, queued_ns, &p);
    int d = p.explore >= 0 ? p.explore : p.best >= 0 ? p.best : p.blind;
    if (d >= 0) {
        out->dev = d;
        out->explore = d != p.best;
        out->ns = out->explore ? p.slowest_ns : p.best_ns;
        out->finish_ns = add_sat(queued_ns[d], out->ns);
        if (out->explore && m->exploring[d][stage] < UINT16_MAX)
            m->exploring[d][stage]++;
    }
    pthread_mutex_unlock(&m->mu);
    if (d < 0)
        return ferry__error(FERRY_ENODEV, "ferry__perf_choose: no device left in the set");
    return 0;
}

/* A copy of the model's keys and names, taken under the lock. */
int ferry__perf_set_verdict(ferry_perfmodel_t *m, int dev, int stage, bool keep, double with_gbps,
                            double without_gbps)
{
    if (m == NULL || !dev_ok(dev) || !stage_ok(stage) || !(with_gbps >= 0) || !(without_gbps >= 0))
        return ferry__error(FERRY_EINVAL,
                            "ferry__perf_set_verdict: NULL model, slot %d or "
                            "stage %d out of range, or a rate below 0",
                            dev, stage);
    pthread_mutex_lock(&m->mu);
    m->verdict[dev][stage] = (ferry_perf_verdict_t){
        .set = true, .keep = keep, .with_gbps = with_gbps, .without_gbps = without_gbps};
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int ferry__perf_verdict(ferry_perfmodel_t *m, int dev, int stage, ferry_perf_verdict_t *out)
{
    if (m == NULL || !dev_ok(dev) || !stage_ok(stage) || out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry__perf_verdict: NULL model or output, or slot "
                            "%d or stage %d out of range",
                            dev, stage);
    pthread_mutex_lock(&m->mu);
    *out = m->verdict[dev][stage];
    pthread_mutex_unlock(&m->mu);
    return out->set ? 1 : 0;
}

int ferry__perf_snapshot(ferry_perfmodel_t *m, struct ferry__perf_snapshot **out)
{
    size_t n = 0;
    pthread_mutex_lock(&m->mu);
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        for (int s = 0; s < FERRY_PERF_STAGES; s++)
            for (unsigned k = 0; m->s[d][s] != NULL && k < FERRY_PERF_BUCKETS; k++)
                n += m->s[d][s]->b[k] != NULL && m->s[d][s]->b[k]->n > 0;
    struct ferry__perf_snapshot *snap = malloc(sizeof(*snap) + n * sizeof(snap->e[0]));
    if (snap == NULL) {
        pthread_mutex_unlock(&m->mu);
        return ferry__error(FERRY_ENOMEM, "perf model: no memory for a snapshot of %zu keys", n);
    }
    memcpy(snap->dev_name, m->dev_name, sizeof(snap->dev_name));
    memcpy(snap->stage_name, m->stage_name, sizeof(snap->stage_name));
    memcpy(snap->verdict, m->verdict, sizeof(snap->verdict));
    snap->n = 0;
    for (int d = 0; d < FERRY_PERF_DEVICES; d++) {
        for (int s = 0; s < FERRY_PERF_STAGES; s++) {
            for (unsigned k = 0; m->s[d][s] != NULL && k < FERRY_PERF_BUCKETS; k++) {
                const struct ferry__perf_bucket *b = m->s[d][s]->b[k];
                if (b == NULL || b->n == 0)
                    continue;
                snap->e[snap->n++] = (ferry_perf_entry_t){
                    .dev = d,
                    .stage = s,
                    .bucket = k,
                    .dev_name = snap->dev_name[d],
                    .stage_name = snap->stage_name[s],
                    .bytes = b->est_bytes,
                    .ns = b->est_ns,
                    .gbps = (double)b->est_bytes / b->est_ns,
                    .count = b->count,
                };
            }
        }
    }
    pthread_mutex_unlock(&m->mu);
    *out = snap;
    return 0;
}

int ferry__perf_foreach(ferry_perfmodel_t *m, int (*cb)(const ferry_perf_entry_t *e, void *arg),
                        void *arg)
{
    if (m == NULL || cb == NULL)
        return ferry__error(FERRY_EINVAL, "ferry__perf_foreach: NULL model or callback");
    struct ferry__perf_snapshot *snap = NULL;
    int rc = ferry__perf_snapshot(m, &snap);
    for (size_t i = 0; rc == 0 && i < snap->n; i++)
        rc = cb(&snap->e[i], arg);
    free(snap);
    return rc;
}
