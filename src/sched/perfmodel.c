/* The per-device performance model (perfmodel.h): windows of chunk times per (device, stage,
 * size bucket), their trimmed estimate, prediction across buckets, the earliest-finish choice
 * with bounded exploration, the read-out, saving and the strict loader. One mutex per model;
 * keys are allocated on their first sample. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "sched/perfmodel.h"

#define PERF_FORMAT "ferry-perfmodel-1"
#define U64_CEIL    18446744073709549568.0 /* the largest double below 2^64 */

/* One key: the last FERRY_PERF_WINDOW samples (a ring) and the estimate they give. */
struct bucket {
    uint64_t ns[FERRY_PERF_WINDOW], bytes[FERRY_PERF_WINDOW];
    unsigned n, head;   /* samples in the window; where the next one goes */
    uint64_t count;     /* samples ever (a loaded key: the saved count plus new ones) */
    double est_ns;      /* the estimate for a chunk of est_bytes */
    uint64_t est_bytes; /* the window's mean size */
};

/* A (device, stage): its buckets, allocated on their first sample. */
struct series {
    uint64_t count; /* samples of all buckets: the calibration count */
    struct bucket *b[FERRY_PERF_BUCKETS];
};

struct ferry_perfmodel {
    pthread_mutex_t mu; /* guards everything below */
    char dev_name[FERRY_PERF_DEVICES][FERRY_PERF_NAME];
    char stage_name[FERRY_PERF_STAGES][FERRY_PERF_NAME];
    bool excluded[FERRY_PERF_DEVICES];
    /* Chunks given to explore an uncalibrated (device, stage) and not yet sampled. */
    uint16_t exploring[FERRY_PERF_DEVICES][FERRY_PERF_STAGES];
    struct series *s[FERRY_PERF_DEVICES][FERRY_PERF_STAGES];
};

static bool dev_ok(int dev)
{
    return dev >= 0 && dev < FERRY_PERF_DEVICES;
}

static bool stage_ok(int stage)
{
    return stage >= 0 && stage < FERRY_PERF_STAGES;
}

static unsigned bucket_of(uint64_t bytes)
{
    unsigned k = 0;
    while (bytes >>= 1)
        k++;
    return k;
}

/* ns as an integer count, at least 1, saturated. */
static uint64_t to_ns(double ns)
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
static void estimate(struct bucket *b, unsigned bucket)
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

static void free_series(struct series *s)
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
static struct bucket *bucket_get(ferry_perfmodel_t *m, int dev, int stage, unsigned k)
{
    struct series **sp = &m->s[dev][stage];
    if (*sp == NULL && (*sp = calloc(1, sizeof(**sp))) == NULL)
        return NULL;
    struct bucket **bp = &(*sp)->b[k];
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
    unsigned k = bucket_of(bytes);
    pthread_mutex_lock(&m->mu);
    struct bucket *b = bucket_get(m, dev, stage, k);
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
static double scaled(const struct bucket *b, double bytes)
{
    return b->est_ns * bytes / (double)b->est_bytes;
}

/* Under the lock. */
static int predict_locked(ferry_perfmodel_t *m, int dev, int stage, size_t bytes, uint64_t *ns)
{
    const struct series *s = m->s[dev][stage];
    if (s == NULL || s->count == 0)
        return FERRY_EAGAIN;
    unsigned k = bucket_of(bytes);
    const struct bucket *own = s->b[k], *lo = NULL, *hi = NULL;
    double x = (double)bytes;
    if (own != NULL && own->n > 0) {
        *ns = to_ns(scaled(own, x));
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
        *ns = to_ns(lo->est_ns + (hi->est_ns - lo->est_ns) * (x - bl) / (bh - bl));
    } else {
        *ns = to_ns(scaled(lo != NULL ? lo : hi, x));
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
    const struct series *s = m->s[d][stage];
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
struct snapshot {
    char dev_name[FERRY_PERF_DEVICES][FERRY_PERF_NAME];
    char stage_name[FERRY_PERF_STAGES][FERRY_PERF_NAME];
    size_t n;
    ferry_perf_entry_t e[]; /* n */
};

static int snapshot_take(ferry_perfmodel_t *m, struct snapshot **out)
{
    size_t n = 0;
    pthread_mutex_lock(&m->mu);
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        for (int s = 0; s < FERRY_PERF_STAGES; s++)
            for (unsigned k = 0; m->s[d][s] != NULL && k < FERRY_PERF_BUCKETS; k++)
                n += m->s[d][s]->b[k] != NULL && m->s[d][s]->b[k]->n > 0;
    struct snapshot *snap = malloc(sizeof(*snap) + n * sizeof(snap->e[0]));
    if (snap == NULL) {
        pthread_mutex_unlock(&m->mu);
        return ferry__error(FERRY_ENOMEM, "perf model: no memory for a snapshot of %zu keys", n);
    }
    memcpy(snap->dev_name, m->dev_name, sizeof(snap->dev_name));
    memcpy(snap->stage_name, m->stage_name, sizeof(snap->stage_name));
    snap->n = 0;
    for (int d = 0; d < FERRY_PERF_DEVICES; d++) {
        for (int s = 0; s < FERRY_PERF_STAGES; s++) {
            for (unsigned k = 0; m->s[d][s] != NULL && k < FERRY_PERF_BUCKETS; k++) {
                const struct bucket *b = m->s[d][s]->b[k];
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
    struct snapshot *snap = NULL;
    int rc = snapshot_take(m, &snap);
    for (size_t i = 0; rc == 0 && i < snap->n; i++)
        rc = cb(&snap->e[i], arg);
    free(snap);
    return rc;
}

/* {"<idkey>": i, "name": names[i]} for every i that has a name or is marked in @used. */
static bool add_names(cJSON *root, const char *list, const char *idkey,
                      const char (*names)[FERRY_PERF_NAME], const bool *used, int count)
{
    cJSON *arr = cJSON_AddArrayToObject(root, list);
    for (int i = 0; arr != NULL && i < count; i++) {
        if (names[i][0] == '\0' && !used[i])
            continue;
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(arr, o) || !cJSON_AddNumberToObject(o, idkey, i) ||
            !cJSON_AddStringToObject(o, "name", names[i]))
            return false;
    }
    return arr != NULL;
}

static char *save_text(const struct snapshot *snap)
{
    bool dev_used[FERRY_PERF_DEVICES] = {0}, stage_used[FERRY_PERF_STAGES] = {0};
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = NULL;
    for (size_t i = 0; i < snap->n; i++)
        dev_used[snap->e[i].dev] = stage_used[snap->e[i].stage] = true;
    if (root == NULL || !cJSON_AddStringToObject(root, "format", PERF_FORMAT) ||
        !add_names(root, "devices", "slot", snap->dev_name, dev_used, FERRY_PERF_DEVICES) ||
        !add_names(root, "stages", "id", snap->stage_name, stage_used, FERRY_PERF_STAGES) ||
        (arr = cJSON_AddArrayToObject(root, "entries")) == NULL)
        goto out;
    for (size_t i = 0; i < snap->n; i++) {
        const ferry_perf_entry_t *e = &snap->e[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(arr, o) ||
            !cJSON_AddNumberToObject(o, "device", e->dev) ||
            !cJSON_AddNumberToObject(o, "stage", e->stage) ||
            !cJSON_AddNumberToObject(o, "bucket", e->bucket) ||
            !cJSON_AddNumberToObject(o, "bytes", (double)e->bytes) ||
            !cJSON_AddNumberToObject(o, "ns", e->ns) ||
            !cJSON_AddNumberToObject(o, "count", (double)e->count))
            goto out;
    }
    text = cJSON_Print(root);
out:
    cJSON_Delete(root);
    return text;
}

int ferry__perf_save(ferry_perfmodel_t *m, char **json)
{
    if (m == NULL || json == NULL)
        return ferry__error(FERRY_EINVAL, "ferry__perf_save: NULL model or output");
    struct snapshot *snap;
    int rc = snapshot_take(m, &snap);
    if (rc != 0)
        return rc;
    char *text = save_text(snap);
    free(snap);
    if (text == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry__perf_save: no memory for the JSON text");
    *json = text;
    return 0;
}

int ferry__perf_save_file(ferry_perfmodel_t *m, const char *path)
{
    if (path == NULL)
        return ferry__error(FERRY_EINVAL, "ferry__perf_save_file: NULL path");
    char *text = NULL, tmp[4096];
    int rc = ferry__perf_save(m, &text);
    if (rc != 0)
        return rc;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
        free(text);
        return ferry__error(FERRY_EINVAL, "perf model: path too long: %s", path);
    }
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = (f != NULL && fclose(f) == 0) && ok;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return ferry__error(FERRY_EIO, "perf model: cannot write %s", path);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Loading: the whole text is parsed and checked into struct loaded before any of it applies.
 * ------------------------------------------------------------------------------------------- */

#define SAFE_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact integers */
#define MAX_NS   1e18               /* 31 years: anything longer is not a chunk's time */

struct loaded_entry {
    int dev, stage;
    unsigned bucket;
    uint64_t bytes, count;
    double ns;
};

struct loaded {
    bool dev_listed[FERRY_PERF_DEVICES], stage_listed[FERRY_PERF_STAGES];
    char dev_name[FERRY_PERF_DEVICES][FERRY_PERF_NAME];
    char stage_name[FERRY_PERF_STAGES][FERRY_PERF_NAME];
    uint64_t seen[FERRY_PERF_DEVICES][FERRY_PERF_STAGES]; /* a bit per bucket with an entry */
    size_t n;
    struct loaded_entry *e;
};

/* The kinds of value a key takes; every key of an object is required. */
enum vkind { V_STRING, V_INT, V_TIME, V_ARRAY };
struct field {
    const char *key;
    enum vkind kind;
    double min, max; /* V_INT */
};

static const struct field top_fields[] = {
    {"format", V_STRING, 0, 0},
    {"devices", V_ARRAY, 0, 0},
    {"stages", V_ARRAY, 0, 0},
    {"entries", V_ARRAY, 0, 0},
};
static const struct field device_fields[] = {
    {"slot", V_INT, 0, FERRY_PERF_DEVICES - 1},
    {"name", V_STRING, 0, 0},
};
static const struct field stage_fields[] = {
    {"id", V_INT, 0, FERRY_PERF_STAGES - 1},
    {"name", V_STRING, 0, 0},
};
static const struct field entry_fields[] = {
    {"device", V_INT, 0, FERRY_PERF_DEVICES - 1},
    {"stage", V_INT, 0, FERRY_PERF_STAGES - 1},
    {"bucket", V_INT, 0, FERRY_PERF_BUCKETS - 1},
    {"bytes", V_INT, 1, SAFE_INT},
    {"ns", V_TIME, 0, 0},
    {"count", V_INT, 1, SAFE_INT},
};
#define NFIELDS(f) (sizeof(f) / sizeof((f)[0]))

/* What @v is, for "(got ...)": a number or string itself, else its kind. */
static const char *got_text(const cJSON *v, char *buf, size_t len)
{
    switch (v->type & 0xff) {
    case cJSON_Number: snprintf(buf, len, "%.17g", v->valuedouble); return buf;
    case cJSON_String: snprintf(buf, len, "\"%.40s\"", v->valuestring); return buf;
    case cJSON_Array: return "an array";
    case cJSON_Object: return "an object";
    case cJSON_NULL: return "null";
    case cJSON_True:
    case cJSON_False: return "a boolean";
    }
    return "an invalid value";
}

static const char *accepted(const struct field *f, char *buf, size_t len)
{
    switch (f->kind) {
    case V_STRING: snprintf(buf, len, "a string of at most %d bytes", FERRY_PERF_NAME - 1); break;
    case V_INT: snprintf(buf, len, "an integer in [%.0f, %.0f]", f->min, f->max); break;
    case V_TIME: snprintf(buf, len, "a number of ns > 0 and <= %g", MAX_NS); break;
    case V_ARRAY: snprintf(buf, len, "an array"); break;
    }
    return buf;
}

static bool fits(const struct field *f, const cJSON *v)
{
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    switch (f->kind) {
    case V_STRING: return cJSON_IsString(v) && strlen(v->valuestring) < FERRY_PERF_NAME;
    case V_INT: return x == floor(x) && x >= f->min && x <= f->max; /* NaN fails each */
    case V_TIME: return x > 0.0 && x <= MAX_NS;
    case V_ARRAY: return cJSON_IsArray(v);
    }
    return false;
}

/* Check @obj, found at @where ("" for the top, "entries[3]"), against the @nf fields of @f: an
 * object with each key once, no other key, each value of its kind and range. vals[i] gets
 * field i's value. Errors name @what, the key's path and what it accepts. */
static int check_object(const char *what, const char *where, const cJSON *obj,
                        const struct field *f, size_t nf, const cJSON **vals)
{
    const char *dot = *where != '\0' ? "." : "";
    char keys[128] = "", got[64], acc[64];
    for (size_t i = 0, used = 0; i < nf && used < sizeof(keys); i++)
        used += (size_t)snprintf(keys + used, sizeof(keys) - used, "%s%s", i ? ", " : "", f[i].key);
    if (!cJSON_IsObject(obj))
        return ferry__error(FERRY_EPARSE, "%s: %s%s%s must be an object with the keys %s (got %s)",
                            what, *where ? "\"" : "the top level", where, *where ? "\"" : "", keys,
                            got_text(obj, got, sizeof(got)));
    for (size_t i = 0; i < nf; i++)
        vals[i] = NULL;
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        size_t i = 0;
        while (i < nf && strcmp(f[i].key, it->string) != 0)
            i++;
        if (i == nf)
            return ferry__error(FERRY_EPARSE, "%s: unknown key \"%s%s%s\"; accepted keys: %s", what,
                                where, dot, it->string, keys);
        if (vals[i] != NULL)
            return ferry__error(FERRY_EPARSE, "%s: duplicate key \"%s%s%s\"", what, where, dot,
                                it->string);
        vals[i] = it;
    }
    for (size_t i = 0; i < nf; i++) {
        if (vals[i] == NULL)
            return ferry__error(FERRY_EPARSE, "%s: missing key \"%s%s%s\" (%s)", what, where, dot,
                                f[i].key, accepted(&f[i], acc, sizeof(acc)));
        if (!fits(&f[i], vals[i]))
            return ferry__error(FERRY_EPARSE, "%s: key \"%s%s%s\" must be %s (got %s)", what, where,
                                dot, f[i].key, accepted(&f[i], acc, sizeof(acc)),
                                got_text(vals[i], got, sizeof(got)));
    }
    return 0;
}

/* "devices" or "stages": objects of an id (the first field) and a name, each id once. */
static int parse_names(const char *what, const cJSON *arr, const char *list, const struct field *f,
                       bool *listed, char (*names)[FERRY_PERF_NAME])
{
    size_t i = 0;
    for (const cJSON *it = arr->child; it != NULL; it = it->next, i++) {
        char where[32];
        const cJSON *v[2];
        snprintf(where, sizeof(where), "%s[%zu]", list, i);
        int rc = check_object(what, where, it, f, 2, v);
        if (rc != 0)
            return rc;
        int id = (int)v[0]->valuedouble;
        if (listed[id])
            return ferry__error(FERRY_EPARSE, "%s: key \"%s.%s\" repeats %s %d", what, where,
                                f[0].key, f[0].key, id);
        listed[id] = true;
        ferry__strlcpy(names[id], v[1]->valuestring, FERRY_PERF_NAME);
    }
    return 0;
}

static int parse_entry(const char *what, const cJSON *it, size_t i, struct loaded *ld)
{
    char where[32];
    const cJSON *v[NFIELDS(entry_fields)];
    snprintf(where, sizeof(where), "entries[%zu]", i);
    int rc = check_object(what, where, it, entry_fields, NFIELDS(entry_fields), v);
    if (rc != 0)
        return rc;
    struct loaded_entry *e = &ld->e[i];
    *e = (struct loaded_entry){
        .dev = (int)v[0]->valuedouble,
        .stage = (int)v[1]->valuedouble,
        .bucket = (unsigned)v[2]->valuedouble,
        .bytes = (uint64_t)v[3]->valuedouble,
        .ns = v[4]->valuedouble,
        .count = (uint64_t)v[5]->valuedouble,
    };
    if (!ld->dev_listed[e->dev] || !ld->stage_listed[e->stage])
        return ferry__error(FERRY_EPARSE, "%s: key \"%s.%s\" is %d, which \"%s\" does not list",
                            what, where, ld->dev_listed[e->dev] ? "stage" : "device",
                            ld->dev_listed[e->dev] ? e->stage : e->dev,
                            ld->dev_listed[e->dev] ? "stages" : "devices");
    if (bucket_of(e->bytes) != e->bucket)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"%s.bytes\" must be an integer in [%.0f, %.0f] for bucket %u "
                            "(got %llu)",
                            what, where, ldexp(1.0, (int)e->bucket),
                            ldexp(1.0, (int)e->bucket + 1) - 1.0, e->bucket,
                            (unsigned long long)e->bytes);
    uint64_t bit = UINT64_C(1) << e->bucket;
    if (ld->seen[e->dev][e->stage] & bit)
        return ferry__error(FERRY_EPARSE,
                            "%s: %s repeats the key (device %d, stage %d, bucket %u) of an "
                            "earlier entry",
                            what, where, e->dev, e->stage, e->bucket);
    ld->seen[e->dev][e->stage] |= bit;
    return 0;
}

static int parse(const char *what, const cJSON *root, struct loaded *ld)
{
    const cJSON *v[NFIELDS(top_fields)];
    int rc = check_object(what, "", root, top_fields, NFIELDS(top_fields), v);
    if (rc != 0)
        return rc;
    if (strcmp(v[0]->valuestring, PERF_FORMAT) != 0)
        return ferry__error(FERRY_EPARSE, "%s: key \"format\" must be \"%s\" (got \"%.40s\")", what,
                            PERF_FORMAT, v[0]->valuestring);
    rc = parse_names(what, v[1], "devices", device_fields, ld->dev_listed, ld->dev_name);
    if (rc == 0)
        rc = parse_names(what, v[2], "stages", stage_fields, ld->stage_listed, ld->stage_name);
    if (rc != 0)
        return rc;
    size_t n = (size_t)cJSON_GetArraySize(v[3]), i = 0;
    if (n > 0 && (ld->e = calloc(n, sizeof(ld->e[0]))) == NULL)
        return ferry__error(FERRY_ENOMEM, "%s: no memory for %zu entries", what, n);
    for (const cJSON *it = v[3]->child; rc == 0 && it != NULL; it = it->next, i++)
        rc = parse_entry(what, it, i, ld);
    ld->n = i;
    return rc;
}

/* Which listed ids apply to the model (its name is the same, or it has none). */
static void matches(const bool *listed, const char (*file)[FERRY_PERF_NAME],
                    char (*model)[FERRY_PERF_NAME], int count, bool *on)
{
    for (int i = 0; i < count; i++)
        on[i] = listed[i] && (model[i][0] == '\0' || strcmp(model[i], file[i]) == 0);
}

static int apply(ferry_perfmodel_t *m, const struct loaded *ld, unsigned *skipped)
{
    bool dev_on[FERRY_PERF_DEVICES], stage_on[FERRY_PERF_STAGES];
    unsigned skip = 0;
    pthread_mutex_lock(&m->mu);
    matches(ld->dev_listed, ld->dev_name, m->dev_name, FERRY_PERF_DEVICES, dev_on);
    matches(ld->stage_listed, ld->stage_name, m->stage_name, FERRY_PERF_STAGES, stage_on);
    /* Every key first, so that running out of memory changes nothing (an empty key is no data). */
    for (size_t i = 0; i < ld->n; i++) {
        const struct loaded_entry *e = &ld->e[i];
        if (dev_on[e->dev] && stage_on[e->stage] &&
            bucket_get(m, e->dev, e->stage, e->bucket) == NULL) {
            pthread_mutex_unlock(&m->mu);
            return ferry__error(FERRY_ENOMEM, "perf model: no memory for %zu keys", ld->n);
        }
    }
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        if (dev_on[d] && m->dev_name[d][0] == '\0')
            memcpy(m->dev_name[d], ld->dev_name[d], FERRY_PERF_NAME);
    for (int s = 0; s < FERRY_PERF_STAGES; s++)
        if (stage_on[s] && m->stage_name[s][0] == '\0')
            memcpy(m->stage_name[s], ld->stage_name[s], FERRY_PERF_NAME);
    for (size_t i = 0; i < ld->n; i++) {
        const struct loaded_entry *e = &ld->e[i];
        if (!dev_on[e->dev] || !stage_on[e->stage]) {
            skip++;
            continue;
        }
        struct series *s = m->s[e->dev][e->stage];
        struct bucket *b = s->b[e->bucket];
        s->count = s->count - b->count + e->count;
        b->count = e->count;
        b->n = e->count < FERRY_PERF_WINDOW ? (unsigned)e->count : FERRY_PERF_WINDOW;
        b->head = b->n % FERRY_PERF_WINDOW;
        for (unsigned j = 0; j < b->n; j++) {
            b->ns[j] = to_ns(e->ns);
            b->bytes[j] = e->bytes;
        }
        b->est_ns = e->ns; /* as saved, not recomputed: a round trip is exact */
        b->est_bytes = e->bytes;
    }
    pthread_mutex_unlock(&m->mu);
    if (skipped != NULL)
        *skipped = skip;
    return 0;
}

int ferry__perf_load(ferry_perfmodel_t *m, const char *json, const char *what, unsigned *skipped)
{
    if (m == NULL || json == NULL)
        return ferry__error(FERRY_EINVAL, "ferry__perf_load: NULL model or text");
    what = what != NULL ? what : "perf model";
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, true);
    if (root == NULL) {
        size_t at = end != NULL && end >= json ? (size_t)(end - json) : 0;
        return ferry__error(FERRY_EPARSE, "%s: not valid JSON (at byte %zu: \"%.20s\")", what, at,
                            json + at);
    }
    struct loaded *ld = calloc(1, sizeof(*ld));
    int rc = ld == NULL ? ferry__error(FERRY_ENOMEM, "%s: no memory to parse", what)
                        : parse(what, root, ld);
    if (rc == 0)
        rc = apply(m, ld, skipped);
    cJSON_Delete(root);
    if (ld != NULL)
        free(ld->e);
    free(ld);
    return rc;
}

int ferry__perf_load_file(ferry_perfmodel_t *m, const char *path, unsigned *skipped)
{
    if (path == NULL)
        return ferry__error(FERRY_EINVAL, "ferry__perf_load_file: NULL path");
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ferry__error(FERRY_EIO, "perf model: cannot open %s", path);
    char *text = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    bool ok = len >= 0 && len < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 &&
              (text = malloc((size_t)len + 1)) != NULL &&
              fread(text, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    int rc = ok ? 0 : ferry__error(FERRY_EIO, "perf model: cannot read %s (at most 64 MiB)", path);
    if (ok) {
        text[len] = '\0';
        rc = ferry__perf_load(m, text, path, skipped);
    }
    free(text);
    return rc;
}
