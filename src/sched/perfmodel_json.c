/* Saving and loading a performance model (perfmodel.h, ferry__perf_save and ferry__perf_load):
 * the JSON text of a snapshot, and the strict loader that checks the whole text before any of
 * it applies. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "sched/perfmodel_internal.h"

#define PERF_FORMAT "ferry-perfmodel-1"

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

static char *save_text(const struct ferry__perf_snapshot *snap)
{
    bool dev_used[FERRY_PERF_DEVICES] = {0}, stage_used[FERRY_PERF_STAGES] = {0};
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = NULL;
    for (size_t i = 0; i < snap->n; i++)
        dev_used[snap->e[i].dev] = stage_used[snap->e[i].stage] = true;
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        for (int st = 0; st < FERRY_PERF_STAGES; st++)
            if (snap->verdict[d][st].set)
                dev_used[d] = stage_used[st] = true;
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
    if ((arr = cJSON_AddArrayToObject(root, "verdicts")) == NULL)
        goto out;
    for (int d = 0; d < FERRY_PERF_DEVICES; d++)
        for (int st = 0; st < FERRY_PERF_STAGES; st++) {
            const ferry_perf_verdict_t *v = &snap->verdict[d][st];
            cJSON *o = v->set ? cJSON_CreateObject() : NULL;
            if (v->set && (o == NULL || !cJSON_AddItemToArray(arr, o) ||
                           !cJSON_AddNumberToObject(o, "device", d) ||
                           !cJSON_AddNumberToObject(o, "stage", st) ||
                           !cJSON_AddNumberToObject(o, "keep", v->keep) ||
                           !cJSON_AddNumberToObject(o, "with_gbps", v->with_gbps) ||
                           !cJSON_AddNumberToObject(o, "without_gbps", v->without_gbps)))
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
    struct ferry__perf_snapshot *snap;
    int rc = ferry__perf_snapshot(m, &snap);
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
    size_t nv;
    struct loaded_verdict {
        int dev, stage;
        ferry_perf_verdict_t v;
    } * v;
};

/* The kinds of value a key takes; every key of an object is required but the optional ones. */
enum vkind { V_STRING, V_INT, V_TIME, V_ARRAY, V_GBPS };
struct field {
    const char *key;
    enum vkind kind;
    double min, max; /* V_INT */
    bool optional;
};

/* "verdicts" came with the CPU guard: files before it have none */
static const struct field top_fields[] = {
    {"format", V_STRING, 0, 0, false}, {"devices", V_ARRAY, 0, 0, false},
    {"stages", V_ARRAY, 0, 0, false},  {"entries", V_ARRAY, 0, 0, false},
    {"verdicts", V_ARRAY, 0, 0, true},
};
static const struct field device_fields[] = {
    {"slot", V_INT, 0, FERRY_PERF_DEVICES - 1, false},
    {"name", V_STRING, 0, 0, false},
};
static const struct field stage_fields[] = {
    {"id", V_INT, 0, FERRY_PERF_STAGES - 1, false},
    {"name", V_STRING, 0, 0, false},
};
static const struct field entry_fields[] = {
    {"device", V_INT, 0, FERRY_PERF_DEVICES - 1, false},
    {"stage", V_INT, 0, FERRY_PERF_STAGES - 1, false},
    {"bucket", V_INT, 0, FERRY_PERF_BUCKETS - 1, false},
    {"bytes", V_INT, 1, SAFE_INT, false},
    {"ns", V_TIME, 0, 0, false},
    {"count", V_INT, 1, SAFE_INT, false},
};
static const struct field verdict_fields[] = {
    {"device", V_INT, 0, FERRY_PERF_DEVICES - 1, false},
    {"stage", V_INT, 0, FERRY_PERF_STAGES - 1, false},
    {"keep", V_INT, 0, 1, false},
    {"with_gbps", V_GBPS, 0, 0, false},
    {"without_gbps", V_GBPS, 0, 0, false},
};
#define NFIELDS(f) (sizeof(f) / sizeof((f)[0]))
#define MAX_GBPS   1e6 /* a set's rate, GB/s: a petabyte a second is not one */

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
    case V_GBPS: snprintf(buf, len, "a number of GB/s >= 0 and <= %g", MAX_GBPS); break;
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
    case V_GBPS: return x >= 0.0 && x <= MAX_GBPS;
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
        if (vals[i] == NULL && f[i].optional)
            continue;
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

/* 0 when @dev and @stage, of the object at @where, are listed; else FERRY_EPARSE, saying so. */
static int listed(const char *what, const char *where, const struct loaded *ld, int dev, int stage)
{
    bool d = ld->dev_listed[dev];
    if (d && ld->stage_listed[stage])
        return 0;
    return ferry__error(FERRY_EPARSE, "%s: key \"%s.%s\" is %d, which \"%s\" does not list", what,
                        where, d ? "stage" : "device", d ? stage : dev, d ? "stages" : "devices");
}

/* Item @i of array @list ("entries"): @where gets its path, and check_object its fields. */
static int check_item(const char *what, const char *list, size_t i, const cJSON *it,
                      const struct field *f, size_t nf, const cJSON **v, char where[32])
{
    snprintf(where, 32, "%s[%zu]", list, i);
    return check_object(what, where, it, f, nf, v);
}

static int parse_entry(const char *what, const cJSON *it, size_t i, struct loaded *ld)
{
    char where[32];
    const cJSON *v[NFIELDS(entry_fields)];
    int rc = check_item(what, "entries", i, it, entry_fields, NFIELDS(entry_fields), v, where);
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
    if ((rc = listed(what, where, ld, e->dev, e->stage)) != 0)
        return rc;
    if (ferry__perf_bucket_of(e->bytes) != e->bucket)
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

static int parse_verdict(const char *what, const cJSON *it, size_t i, struct loaded *ld)
{
    char where[32];
    const cJSON *v[NFIELDS(verdict_fields)];
    int rc = check_item(what, "verdicts", i, it, verdict_fields, NFIELDS(verdict_fields), v, where);
    if (rc != 0)
        return rc;
    struct loaded_verdict *lv = &ld->v[i];
    *lv = (struct loaded_verdict){.dev = (int)v[0]->valuedouble,
                                  .stage = (int)v[1]->valuedouble,
                                  .v = {.set = true,
                                        .keep = v[2]->valuedouble != 0,
                                        .with_gbps = v[3]->valuedouble,
                                        .without_gbps = v[4]->valuedouble}};
    if ((rc = listed(what, where, ld, lv->dev, lv->stage)) != 0)
        return rc;
    for (size_t j = 0; j < i; j++)
        if (ld->v[j].dev == lv->dev && ld->v[j].stage == lv->stage)
            return ferry__error(FERRY_EPARSE,
                                "%s: %s repeats the device %d and stage %d of verdicts[%zu]", what,
                                where, lv->dev, lv->stage, j);
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
    size_t nv = v[4] != NULL ? (size_t)cJSON_GetArraySize(v[4]) : 0;
    if (rc == 0 && nv > 0 && (ld->v = calloc(nv, sizeof(ld->v[0]))) == NULL)
        return ferry__error(FERRY_ENOMEM, "%s: no memory for %zu verdicts", what, nv);
    i = 0;
    for (const cJSON *it = v[4] != NULL ? v[4]->child : NULL; rc == 0 && it != NULL;
         it = it->next, i++)
        rc = parse_verdict(what, it, i, ld);
    ld->nv = i;
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
            ferry__perf_bucket_get(m, e->dev, e->stage, e->bucket) == NULL) {
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
        struct ferry__perf_series *s = m->s[e->dev][e->stage];
        struct ferry__perf_bucket *b = s->b[e->bucket];
        s->count = s->count - b->count + e->count;
        b->count = e->count;
        b->n = e->count < FERRY_PERF_WINDOW ? (unsigned)e->count : FERRY_PERF_WINDOW;
        b->head = b->n % FERRY_PERF_WINDOW;
        for (unsigned j = 0; j < b->n; j++) {
            b->ns[j] = ferry__perf_to_ns(e->ns);
            b->bytes[j] = e->bytes;
        }
        b->est_ns = e->ns; /* as saved, not recomputed: a round trip is exact */
        b->est_bytes = e->bytes;
    }
    for (size_t i = 0; i < ld->nv; i++) {
        const struct loaded_verdict *lv = &ld->v[i];
        if (dev_on[lv->dev] && stage_on[lv->stage])
            m->verdict[lv->dev][lv->stage] = lv->v;
        else
            skip++;
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
    if (ld != NULL)
        free(ld->v);
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
