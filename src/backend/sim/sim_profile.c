/* Device profiles for the simulator: strict JSON parsing (cJSON) into struct ferry_sim_profile,
 * the built-in search path, and the copy-time curve the model derives from the measured points.
 * Every rejection names the file, the key and what is accepted, because a profile written by
 * hand or by `ferry probe --calibrate` must never be half-understood. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend/sim/sim.h"
#include "base/base.h"

#define MAX_SAFE_INT 9007199254740992.0 /* 2^53: larger JSON numbers lose integer precision */

/* What is being parsed, for messages. */
struct pctx {
    const char *file;
};

static const char *type_name(const cJSON *it)
{
    static const struct {
        cJSON_bool (*is)(const cJSON *const item);
        const char *name;
    } types[] = {
        {cJSON_IsNumber, "a number"}, {cJSON_IsString, "a string"}, {cJSON_IsBool, "a boolean"},
        {cJSON_IsNull, "null"},       {cJSON_IsArray, "an array"},  {cJSON_IsObject, "an object"},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (types[i].is(it))
            return types[i].name;
    return "an invalid value";
}

/* What a value is, for "got ..." in messages: the number or string itself, else its type. */
static const char *describe(const cJSON *it, char *buf, size_t len)
{
    if (cJSON_IsNumber(it))
        snprintf(buf, len, "%.17g", it->valuedouble);
    else if (cJSON_IsString(it))
        snprintf(buf, len, "the string \"%.40s\"", it->valuestring);
    else
        snprintf(buf, len, "%s", type_name(it));
    return buf;
}

/* Reject keys outside @allowed (NULL-terminated) and duplicated keys: cJSON keeps both copies of
 * a duplicate and would silently use the first. */
static int check_keys(const struct pctx *c, const cJSON *obj, const char *where,
                      const char *const *allowed)
{
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        bool known = false;
        for (size_t i = 0; allowed[i] != NULL; i++)
            if (strcmp(it->string, allowed[i]) == 0)
                known = true;
        if (!known) {
            char list[512] = "";
            size_t used = 0;
            for (size_t i = 0; allowed[i] != NULL && used < sizeof(list); i++)
                used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                         allowed[i]);
            return ferry__error(FERRY_EPARSE, "%s: unknown key \"%s%s%s\"; accepted keys: %s",
                                c->file, where, *where ? "." : "", it->string, list);
        }
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (strcmp(prev->string, it->string) == 0)
                return ferry__error(FERRY_EPARSE, "%s: duplicate key \"%s%s%s\"", c->file, where,
                                    *where ? "." : "", it->string);
    }
    return 0;
}

/* Find @key in @obj; a missing required key is an error, a missing optional one gives NULL. */
static int get_item(const struct pctx *c, const cJSON *obj, const char *where, const char *key,
                    bool required, const cJSON **out)
{
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (*out == NULL && required)
        return ferry__error(FERRY_EPARSE, "%s: missing required key \"%s%s%s\"", c->file, where,
                            *where ? "." : "", key);
    return 0;
}

static int get_object(const struct pctx *c, const cJSON *obj, const char *where, const char *key,
                      const cJSON **out)
{
    int rc = get_item(c, obj, where, key, true, out);
    if (rc != 0)
        return rc;
    if (!cJSON_IsObject(*out))
        return ferry__error(FERRY_EPARSE, "%s: key \"%s%s%s\" must be an object (got %s)", c->file,
                            where, *where ? "." : "", key, type_name(*out));
    return 0;
}

/* An integer in [min, max]. @dflt is used when the key is optional and absent. */
static int get_int_opt(const struct pctx *c, const cJSON *obj, const char *where, const char *key,
                       bool required, int64_t dflt, int64_t min, int64_t max, int64_t *out)
{
    const cJSON *it;
    int rc = get_item(c, obj, where, key, required, &it);
    if (rc != 0)
        return rc;
    if (it == NULL) {
        *out = dflt;
        return 0;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    char got[64];
    if (!cJSON_IsNumber(it) || !isfinite(v) || v != floor(v) || fabs(v) >= MAX_SAFE_INT ||
        v < (double)min || v > (double)max)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"%s%s%s\" must be an integer in [%lld, %lld] (got %s)",
                            c->file, where, *where ? "." : "", key, (long long)min, (long long)max,
                            describe(it, got, sizeof(got)));
    *out = (int64_t)v;
    return 0;
}

static int get_u64(const struct pctx *c, const cJSON *obj, const char *where, const char *key,
                   int64_t min, int64_t max, uint64_t *out)
{
    int64_t v;
    int rc = get_int_opt(c, obj, where, key, true, 0, min, max, &v);
    if (rc == 0)
        *out = (uint64_t)v;
    return rc;
}

/* A rate or factor: finite, > 0 and <= @max. Zero and negative rates are errors because the
 * model divides by them. */
static int get_positive(const struct pctx *c, const cJSON *obj, const char *where, const char *key,
                        double max, double *out)
{
    const cJSON *it;
    int rc = get_item(c, obj, where, key, true, &it);
    if (rc != 0)
        return rc;
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    char got[64];
    if (!cJSON_IsNumber(it) || !isfinite(v) || v <= 0.0 || v > max)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"%s%s%s\" must be a number > 0 and <= %g (got %s)", c->file,
                            where, *where ? "." : "", key, max, describe(it, got, sizeof(got)));
    *out = v;
    return 0;
}

static int get_string(const struct pctx *c, const cJSON *obj, const char *where, const char *key,
                      char *dst, size_t dst_len)
{
    const cJSON *it;
    int rc = get_item(c, obj, where, key, true, &it);
    if (rc != 0)
        return rc;
    char got[64];
    if (!cJSON_IsString(it) || it->valuestring[0] == '\0' || strlen(it->valuestring) >= dst_len)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"%s%s%s\" must be a non-empty string of at most %zu "
                            "characters (got %s)",
                            c->file, where, *where ? "." : "", key, dst_len - 1,
                            describe(it, got, sizeof(got)));
    snprintf(dst, dst_len, "%s", it->valuestring);
    return 0;
}

/* "M.m", as nvidia-smi prints compute_cap. */
static int get_cc(const struct pctx *c, const cJSON *obj, struct ferry_sim_profile *p)
{
    char text[16];
    int rc = get_string(c, obj, "device", "cc", text, sizeof(text));
    if (rc != 0)
        return rc;
    int major = 0, minor = 0, used = 0;
    if (sscanf(text, "%2d.%1d%n", &major, &minor, &used) != 2 || text[used] != '\0' ||
        text[0] < '0' || text[0] > '9' || major < 1)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"device.cc\" must be a compute capability \"M.m\" such as "
                            "\"9.0\" (got \"%s\")",
                            c->file, text);
    p->cc_major = major;
    p->cc_minor = minor;
    return 0;
}

static int parse_source(const struct pctx *c, const cJSON *root)
{
    static const char *const sections[] = {"device",   "pcie",        "copy",    "host",
                                           "defaults", "host_memory", "storage", NULL};
    const cJSON *src;
    int rc = get_object(c, root, "", "source", &src);
    if (rc == 0)
        rc = check_keys(c, src, "source", sections);
    /* The optional sections' figures come from somewhere too: present, they need a source. */
    static const char *const optional[] = {"host_memory", "storage", NULL};
    for (size_t i = 0; rc == 0 && optional[i] != NULL; i++)
        if (cJSON_GetObjectItemCaseSensitive(root, optional[i]) != NULL &&
            cJSON_GetObjectItemCaseSensitive(src, optional[i]) == NULL)
            rc = ferry__error(FERRY_EPARSE,
                              "%s: section \"%s\" needs a key \"source.%s\" saying how its "
                              "numbers were measured",
                              c->file, optional[i], optional[i]);
    for (const cJSON *it = src ? src->child : NULL; rc == 0 && it != NULL; it = it->next)
        if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
            rc = ferry__error(FERRY_EPARSE,
                              "%s: key \"source.%s\" must be a non-empty string saying where "
                              "the numbers of \"%s\" come from (got %s)",
                              c->file, it->string, it->string, type_name(it));
    return rc;
}

static int parse_curve(const struct pctx *c, const cJSON *copy, const char *key,
                       struct ferry_sim_curve *out)
{
    static const char *const point_keys[] = {"bytes", "gbps", NULL};
    const cJSON *arr;
    int rc = get_item(c, copy, "copy", key, true, &arr);
    if (rc != 0)
        return rc;
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    if (!cJSON_IsArray(arr) || n < 1 || n > FERRY_SIM_CURVE_MAX)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"copy.%s\" must be an array of 1 to %d points "
                            "{\"bytes\": N, \"gbps\": R} (got %s%s)",
                            c->file, key, FERRY_SIM_CURVE_MAX, type_name(arr),
                            cJSON_IsArray(arr) ? " of another length" : "");
    int i = 0;
    for (const cJSON *pt = arr->child; pt != NULL; pt = pt->next, i++) {
        char where[48];
        snprintf(where, sizeof(where), "copy.%s[%d]", key, i);
        if (!cJSON_IsObject(pt))
            return ferry__error(FERRY_EPARSE,
                                "%s: \"%s\" must be an object {\"bytes\": N, \"gbps\": R} (got %s)",
                                c->file, where, type_name(pt));
        rc = check_keys(c, pt, where, point_keys);
        if (rc == 0)
            rc = get_u64(c, pt, where, "bytes", 1, INT64_MAX, &out->bytes[i]);
        if (rc == 0)
            rc = get_positive(c, pt, where, "gbps", 1e5, &out->gbps[i]);
        if (rc != 0)
            return rc;
        /* A curve must be monotonic: a larger copy can neither be smaller nor take less time. */
        if (i > 0 && out->bytes[i] <= out->bytes[i - 1])
            return ferry__error(FERRY_EPARSE,
                                "%s: \"%s.bytes\" (%llu) must be larger than the previous "
                                "point's (%llu): points are sorted by size",
                                c->file, where, (unsigned long long)out->bytes[i],
                                (unsigned long long)out->bytes[i - 1]);
        if (i > 0 &&
            (double)out->bytes[i] / out->gbps[i] <= (double)out->bytes[i - 1] / out->gbps[i - 1])
            return ferry__error(FERRY_EPARSE,
                                "%s: \"%s\" is not monotonic: %llu bytes at %g GB/s would take "
                                "no longer than the previous point's %llu bytes at %g GB/s",
                                c->file, where, (unsigned long long)out->bytes[i], out->gbps[i],
                                (unsigned long long)out->bytes[i - 1], out->gbps[i - 1]);
    }
    out->n = n;
    return 0;
}

/* The device's priorities, read just before: CUDA's range runs from least to greatest. */
static int check_priorities(const struct pctx *c, const cJSON *o, struct ferry_sim_profile *p)
{
    (void)o;
    if (p->priority_greatest > p->priority_least)
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"device.priority_greatest\" (%d) must be <= "
                            "\"device.priority_least\" (%d): numerically lower is higher priority",
                            c->file, p->priority_greatest, p->priority_least);
    return 0;
}

/* One key of a section: how it is read and where in the profile it goes. The rows of a section
 * stand in the order the keys are read and listed in messages. */
enum field_kind {
    F_INT,          /* an int in [min, max] */
    F_U64,          /* a uint64_t in [min, max] */
    F_U64_OPT,      /* the same, optional, 0 when absent */
    F_POSITIVE,     /* a double in (0, top] */
    F_POSITIVE_OPT, /* the same, optional, 0 when absent */
    F_CURVE,        /* a copy curve (parse_curve) */
    F_CALL,         /* call(); a row without a key is a check of the keys read before it */
};
struct field {
    const char *key;
    enum field_kind kind;
    size_t off;
    int64_t min, max;
    double top;
    int (*call)(const struct pctx *c, const cJSON *o, struct ferry_sim_profile *p);
};
#define FIELD_AT(member) .off = offsetof(struct ferry_sim_profile, member)
#define FIELD_INT(k, member, lo, hi)                                                               \
    {                                                                                              \
        k, F_INT, FIELD_AT(member), .min = lo, .max = hi                                           \
    }
#define FIELD_U64(k, member, lo, hi)                                                               \
    {                                                                                              \
        k, F_U64, FIELD_AT(member), .min = lo, .max = hi                                           \
    }
#define FIELD_POSITIVE(k, member, hi)                                                              \
    {                                                                                              \
        k, F_POSITIVE, FIELD_AT(member), .top = hi                                                 \
    }

#define MAX_CALL_NS 1000000000LL   /* 1 s per call is already absurd */
#define MAX_GIB_NS  100000000000LL /* 100 s per GiB */

static const struct field device_fields[] = {
    FIELD_INT("sms", sms, 1, 100000),
    {"cc", F_CALL, .call = get_cc},
    FIELD_U64("memory_bytes", memory_bytes, 1, INT64_MAX),
    FIELD_U64("l2_bytes", l2_bytes, 0, INT64_MAX),
    FIELD_INT("copy_engines", copy_engines, 1, 64),
    FIELD_INT("max_resident_grids", max_resident_grids, 1, 4096),
    FIELD_INT("priority_least", priority_least, -64, 64),
    FIELD_INT("priority_greatest", priority_greatest, -64, 64),
    {NULL, F_CALL, .call = check_priorities},
    FIELD_POSITIVE("d2d_gbps", d2d_gbps, 1e6),
    FIELD_INT("connections_default", connections_default, 1, 32),
};
static const struct field pcie_fields[] = {
    FIELD_INT("gen", pcie_gen, 1, 16),
    FIELD_INT("width", pcie_width, 1, 64),
    FIELD_POSITIVE("theoretical_gbps", pcie_gbps, 1e5),
};
static const struct field copy_fields[] = {
    FIELD_INT("h2d_engines", engines[FERRY_SIM_H2D], 1, 64),
    FIELD_INT("d2h_engines", engines[FERRY_SIM_D2H], 1, 64),
    {"h2d", F_CURVE, FIELD_AT(curve[FERRY_SIM_H2D])},
    {"d2h", F_CURVE, FIELD_AT(curve[FERRY_SIM_D2H])},
    FIELD_POSITIVE("bidirectional_factor", bidir_factor, 1.0),
    FIELD_POSITIVE("pageable_h2d_gbps", pageable_gbps[FERRY_SIM_H2D], 1e5),
    FIELD_POSITIVE("pageable_d2h_gbps", pageable_gbps[FERRY_SIM_D2H], 1e5),
    {"piece_kernel_max", F_U64_OPT, FIELD_AT(piece_kernel_max), .min = 0, .max = 1LL << 30},
};
static const struct field host_fields[] = {
    FIELD_U64("copy_submit_ns", copy_submit_ns, 0, MAX_CALL_NS),
    FIELD_U64("launch_ns", launch_ns, 0, MAX_CALL_NS),
    FIELD_U64("event_record_ns", event_record_ns, 0, MAX_CALL_NS),
    FIELD_U64("stream_wait_ns", stream_wait_ns, 0, MAX_CALL_NS),
    FIELD_U64("register_ns_per_gib", register_ns_per_gib, 0, MAX_GIB_NS),
    FIELD_U64("unregister_ns_per_gib", unregister_ns_per_gib, 0, MAX_GIB_NS),
    {"pin_limit_bytes", F_U64_OPT, FIELD_AT(pin_limit_bytes), .min = 0, .max = 1LL << 50},
};
static const struct field defaults_fields[] = {
    FIELD_U64("chunk_bytes", default_chunk_bytes, 1, 1073741824),
};
static int get_storage_kind(const struct pctx *c, const cJSON *o, struct ferry_sim_profile *p)
{
    return get_string(c, o, "storage", "kind", p->storage_kind, sizeof(p->storage_kind));
}
static const struct field host_memory_fields[] = {
    FIELD_POSITIVE("gbps", host_memory_gbps, 1e5),
    FIELD_POSITIVE("thread_read_gbps", host_thread_read_gbps, 1e5),
    FIELD_POSITIVE("read_gbps", host_read_gbps, 1e5),
    FIELD_POSITIVE("write_gbps", host_write_gbps, 1e5),
    FIELD_POSITIVE("copy_gbps", host_copy_gbps, 1e5),
    FIELD_INT("threads", host_threads, 1, 65536),
    {"dma_cpu_loss", F_POSITIVE_OPT, FIELD_AT(host_dma_cpu_loss), .top = 0.1},
};
static const struct field storage_fields[] = {
    {"kind", F_CALL, .call = get_storage_kind},
    FIELD_POSITIVE("read_gbps", storage_read_gbps, 1e5),
    {"write_gbps", F_POSITIVE_OPT, FIELD_AT(storage_write_gbps), .top = 1e5},
};

/* The sections below the root that hold numbers, in the order they are read. */
static const struct section {
    const char *name;
    const struct field *fields;
    size_t n;
    bool optional; /* absent: its fields stay 0 */
} sections[] = {
#define SECTION(name, opt)                                                                         \
    {                                                                                              \
#name, name##_fields, sizeof(name##_fields) / sizeof(name##_fields[0]), opt                \
    }
    SECTION(device, false), SECTION(pcie, false),     SECTION(copy, false),
    SECTION(host, false),   SECTION(defaults, false), SECTION(host_memory, true),
    SECTION(storage, true),
#undef SECTION
};

static int read_field(const struct pctx *c, const cJSON *o, const char *where,
                      const struct field *f, struct ferry_sim_profile *p)
{
    void *dst = (char *)p + f->off;
    int64_t v = 0;
    int rc;
    switch (f->kind) {
    case F_INT:
    case F_U64:
    case F_U64_OPT:
        rc = get_int_opt(c, o, where, f->key, f->kind != F_U64_OPT, 0, f->min, f->max, &v);
        if (rc == 0 && f->kind == F_INT)
            *(int *)dst = (int)v;
        else if (rc == 0)
            *(uint64_t *)dst = (uint64_t)v;
        return rc;
    case F_POSITIVE: return get_positive(c, o, where, f->key, f->top, dst);
    case F_POSITIVE_OPT:
        if (cJSON_GetObjectItemCaseSensitive(o, f->key) == NULL)
            return 0;
        return get_positive(c, o, where, f->key, f->top, dst);
    case F_CURVE: return parse_curve(c, o, f->key, dst);
    case F_CALL: return f->call(c, o, p);
    }
    return ferry__error(FERRY_EINVAL, "sim profile: bad field kind %d", (int)f->kind);
}

/* The object @sec->name of @root: only its keys, each read into @p. */
static int parse_section(const struct pctx *c, const cJSON *root, const struct section *sec,
                         struct ferry_sim_profile *p)
{
    const char *keys[16]; /* a section has at most 15 keys (device, the largest, has 10) */
    size_t nkeys = 0;
    for (size_t i = 0; i < sec->n; i++)
        if (sec->fields[i].key != NULL)
            keys[nkeys++] = sec->fields[i].key;
    keys[nkeys] = NULL;
    const cJSON *o;
    if (sec->optional && cJSON_GetObjectItemCaseSensitive(root, sec->name) == NULL)
        return 0;
    int rc = get_object(c, root, "", sec->name, &o);
    if (rc == 0)
        rc = check_keys(c, o, sec->name, keys);
    for (size_t i = 0; rc == 0 && i < sec->n; i++)
        rc = read_field(c, o, sec->name, &sec->fields[i], p);
    return rc;
}

static int parse_root(const struct pctx *c, const cJSON *root, struct ferry_sim_profile *p)
{
    static const char *const keys[] = {"format",   "name",        "source",  "devices",
                                       "device",   "pcie",        "copy",    "host",
                                       "defaults", "host_memory", "storage", NULL};
    if (!cJSON_IsObject(root))
        return ferry__error(FERRY_EPARSE, "%s: a profile must be a JSON object (got %s)", c->file,
                            type_name(root));
    int rc = check_keys(c, root, "", keys);
    if (rc == 0)
        rc = get_string(c, root, "", "format", p->format, sizeof(p->format));
    if (rc == 0 && strcmp(p->format, FERRY_SIM_PROFILE_FORMAT) != 0)
        rc = ferry__error(FERRY_EPARSE, "%s: key \"format\" must be \"%s\" (got \"%s\")", c->file,
                          FERRY_SIM_PROFILE_FORMAT, p->format);
    if (rc == 0)
        rc = get_string(c, root, "", "name", p->name, sizeof(p->name));
    if (rc == 0)
        rc = parse_source(c, root);
    int64_t devices = 1;
    if (rc == 0)
        rc = get_int_opt(c, root, "", "devices", false, 1, 1, 64, &devices);
    p->devices = (int)devices;
    for (size_t i = 0; rc == 0 && i < sizeof(sections) / sizeof(sections[0]); i++)
        rc = parse_section(c, root, &sections[i], p);
    return rc;
}

int ferry__sim_profile_parse(const char *text, size_t len, const char *name,
                             struct ferry_sim_profile *out)
{
    if (text == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim profile: NULL argument");
    struct pctx c = {.file = name != NULL ? name : "<profile>"};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (root == NULL) {
        size_t off = end != NULL && end >= text ? (size_t)(end - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off && i < len; i++)
            line += text[i] == '\n';
        return ferry__error(FERRY_EPARSE, "%s:%d: malformed JSON near byte %zu", c.file, line, off);
    }
    /* Trailing garbage after the object is as malformed as a syntax error. */
    while (end != NULL && (size_t)(end - text) < len &&
           (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    int rc = 0;
    if (end != NULL && (size_t)(end - text) < len && *end != '\0')
        rc = ferry__error(FERRY_EPARSE, "%s: unexpected text after the JSON object at byte %zu",
                          c.file, (size_t)(end - text));
    struct ferry_sim_profile p;
    memset(&p, 0, sizeof(p));
    if (rc == 0)
        rc = parse_root(&c, root, &p);
    cJSON_Delete(root);
    if (rc != 0)
        return rc;
    snprintf(p.path, sizeof(p.path), "%s", name != NULL ? name : "");
    *out = p;
    return 0;
}

/* The file at @path into *@text (NUL-ended, the caller frees) and *@len. */
static int read_text(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ferry__error(FERRY_EIO, "sim profile %s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    char *t = malloc(FERRY_SIM_PROFILE_MAX_BYTES + 1);
    size_t n = t != NULL ? fread(t, 1, FERRY_SIM_PROFILE_MAX_BYTES + 1, f) : 0;
    if (t == NULL)
        rc = ferry__error(FERRY_ENOMEM, "sim profile %s: out of memory", path);
    else if (ferror(f))
        rc = ferry__error(FERRY_EIO, "sim profile %s: read error", path);
    else if (n > FERRY_SIM_PROFILE_MAX_BYTES)
        rc = ferry__error(FERRY_EPARSE, "sim profile %s: larger than %u bytes", path,
                          FERRY_SIM_PROFILE_MAX_BYTES);
    fclose(f);
    if (rc != 0) {
        free(t);
        return rc;
    }
    t[n] = '\0';
    *text = t;
    *len = n;
    return 0;
}

static int check_path(const char *path, const struct ferry_sim_profile *out)
{
    if (path == NULL || path[0] == '\0' || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim profile: no path given");
    if (strlen(path) >= sizeof(out->path))
        return ferry__error(FERRY_EINVAL, "sim profile: path longer than %zu characters: %s",
                            sizeof(out->path) - 1, path);
    return 0;
}

int ferry__sim_profile_load(const char *path, struct ferry_sim_profile *out)
{
    char *text = NULL;
    size_t len = 0;
    int rc = check_path(path, out);
    if (rc == 0)
        rc = read_text(path, &text, &len);
    if (rc == 0)
        rc = ferry__sim_profile_parse(text, len, path, out);
    free(text);
    return rc;
}

int ferry__sim_profile_load_device(const char *path, int index, struct ferry_sim_profile *out)
{
    char *text = NULL;
    size_t len = 0;
    int rc = check_path(path, out);
    if (rc == 0)
        rc = read_text(path, &text, &len);
    if (rc != 0 || !ferry__sim_is_machine(text, len)) {
        if (rc == 0)
            rc = ferry__sim_profile_parse(text, len, path, out);
        free(text);
        return rc;
    }
    struct ferry_sim_machine m;
    rc = ferry__sim_machine_parse(text, len, path, index, &m);
    free(text);
    struct ferry_sim_profile p;
    if (rc == 0)
        rc = ferry__sim_profile_load(m.dev_path, &p);
    if (rc == 0 && p.devices != 1)
        rc = ferry__error(FERRY_EPARSE,
                          "%s: device profile %s of a machine has \"devices\": %d; a machine "
                          "counts its devices with \"count\"",
                          path, m.dev_path, p.devices);
    if (rc != 0)
        return rc;
    p.devices = m.total;
    p.machine_memory_gbps = m.host_memory_gbps;
    if (m.host_memory_gbps > 0.0) {
        /* The devices of one machine file share its host: one name for it, however reached. */
        char real[PATH_MAX];
        const char *name = realpath(path, real) != NULL ? real : path;
        if (strlen(name) >= sizeof(p.machine_path))
            return ferry__error(FERRY_EINVAL, "%s: the machine's path is too long", path);
        memcpy(p.machine_path, name, strlen(name) + 1);
    }
    *out = p;
    return 0;
}

/* Where an installed tree keeps its profiles, found from a directory of that tree: @p dir less
 * its trailing @p sub (the install's "bin" or "lib") is the prefix, and the profiles are under
 * its data directory. False when @p dir does not end in @p sub: not an installed layout (a build
 * tree), where nothing is looked for. */
static bool installed_profile_dir(const char *dir, const char *sub, char *out, size_t len)
{
#ifdef FERRY_INSTALL_DATADIR
    size_t n = strlen(dir), m = strlen(sub);
    if (m == 0 || n <= m || strcmp(dir + n - m, sub) != 0 || dir[n - m - 1] != '/')
        return false;
    int w =
        snprintf(out, len, "%.*s/%s/ferry/profiles", (int)(n - m - 1), dir, FERRY_INSTALL_DATADIR);
    return w > 0 && (size_t)w < len;
#else
    (void)dir, (void)sub, (void)out, (void)len;
    return false;
#endif
}

/* The directory of the file at @p path (canonical), into @p out. */
static bool directory_of(const char *path, char *out, size_t len)
{
    char real[PATH_MAX];
    if (path == NULL || path[0] == '\0' || realpath(path, real) == NULL)
        return false;
    char *slash = strrchr(real, '/');
    if (slash == NULL || (size_t)(slash - real) >= len)
        return false;
    memcpy(out, real, (size_t)(slash - real));
    out[slash - real] = '\0';
    return true;
}

/* Any object of the library: dladdr() names the file it was loaded from (libferry.so, or the
 * program that linked ferry statically). */
static const char library_anchor;

/* The directories searched for h200.json, in order, into @p dirs (each PATH_MAX long); returns
 * how many. An installed ferry moved to another prefix must find its own profiles, and a newer
 * ferry must not read an older one's: first the tree the running program was installed in
 * (beside /proc/self/exe), then the one the library was installed in (dladdr), and only then the
 * compiled-in paths (the source tree, the configured prefix). */
static int profile_dirs(char (*dirs)[PATH_MAX], int max)
{
    int n = 0;
    char dir[PATH_MAX];
    (void)dir;
#if defined(FERRY_INSTALL_BINDIR) && defined(FERRY_INSTALL_DATADIR)
    if (n < max && directory_of("/proc/self/exe", dir, sizeof(dir)) &&
        installed_profile_dir(dir, FERRY_INSTALL_BINDIR, dirs[n], PATH_MAX))
        n++;
#endif
#if defined(FERRY_INSTALL_LIBDIR) && defined(FERRY_INSTALL_DATADIR)
    Dl_info info;
    if (n < max && dladdr(&library_anchor, &info) != 0 &&
        directory_of(info.dli_fname, dir, sizeof(dir)) &&
        installed_profile_dir(dir, FERRY_INSTALL_LIBDIR, dirs[n], PATH_MAX) &&
        (n == 0 || strcmp(dirs[n], dirs[0]) != 0))
        n++;
#endif
    static const char *const built_in[] = {
#ifdef FERRY_SOURCE_PROFILE_DIR
        FERRY_SOURCE_PROFILE_DIR,
#endif
#ifdef FERRY_PROFILE_DIR
        FERRY_PROFILE_DIR,
#endif
        NULL};
    for (size_t i = 0; built_in[i] != NULL && n < max; i++)
        snprintf(dirs[n++], PATH_MAX, "%s", built_in[i]);
    return n;
}

int ferry__sim_profile_load_default(struct ferry_sim_profile *out)
{
    char dirs[4][PATH_MAX];
    int ndirs = profile_dirs(dirs, 4);
    char tried[1200] = "";
    size_t used = 0;
    for (int i = 0; i < ndirs; i++) {
        char path[PATH_MAX + 16];
        int w = snprintf(path, sizeof(path), "%s/h200.json", dirs[i]);
        if (w < 0 || (size_t)w >= sizeof(path))
            continue;
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            if (used < sizeof(tried))
                used += (size_t)snprintf(tried + used, sizeof(tried) - used, "%s%s",
                                         used ? ", " : "", path);
            continue;
        }
        fclose(f);
        /* It exists: its verdict stands, so that a broken installed profile is never masked. */
        return ferry__sim_profile_load(path, out);
    }
    return ferry__error(FERRY_ENODEV,
                        "sim: no device profile found (tried %s); give one with the `profile` "
                        "option (FERRY_PROFILE=path/to/h200.json)",
                        used ? tried : "no built-in directory");
}

/* The measured elapsed time of one copy (ns) at @bytes, piecewise linear in bytes between the
 * curve's points; below the first point the first point's time (the fixed cost); beyond the
 * last, the last point's time plus the extra bytes at the last (asymptotic) rate. */
static double curve_time_ns(const struct ferry_sim_curve *c, double bytes)
{
    double t0 = (double)c->bytes[0] / c->gbps[0];
    if (bytes <= (double)c->bytes[0])
        return t0;
    for (int i = 1; i < c->n; i++) {
        if (bytes <= (double)c->bytes[i]) {
            double b0 = (double)c->bytes[i - 1], b1 = (double)c->bytes[i];
            double ta = b0 / c->gbps[i - 1], tb = b1 / c->gbps[i];
            return ta + (tb - ta) * (bytes - b0) / (b1 - b0);
        }
    }
    double bl = (double)c->bytes[c->n - 1];
    return bl / c->gbps[c->n - 1] + (bytes - bl) / c->gbps[c->n - 1];
}

/* The curve is the elapsed time between events recorded around one cudaMemcpyAsync on an idle
 * GPU (FACTS.md, best of 10). That includes the host's submit cost of the copy, which the model
 * charges separately, so the device-side time is the curve minus copy_submit_ns; of that, the
 * bytes at the asymptotic rate use the link and the rest is latency. */
static double latency_ns(const struct ferry_sim_profile *p, int dir, uint64_t bytes)
{
    const struct ferry_sim_curve *c = &p->curve[dir != 0];
    double rate = c->gbps[c->n - 1];
    double lat = curve_time_ns(c, (double)bytes) - (double)p->copy_submit_ns - (double)bytes / rate;
    return lat > 0.0 ? lat : 0.0;
}

uint64_t ferry__sim_copy_latency_ns(const struct ferry_sim_profile *p, int dir, uint64_t bytes)
{
    return (uint64_t)llround(latency_ns(p, dir, bytes));
}

uint64_t ferry__sim_copy_ns(const struct ferry_sim_profile *p, int dir, uint64_t bytes, bool pinned)
{
    const struct ferry_sim_curve *c = &p->curve[dir != 0];
    double rate = pinned ? c->gbps[c->n - 1] : p->pageable_gbps[dir != 0];
    return (uint64_t)ceil(latency_ns(p, dir, bytes) + (double)bytes / rate);
}
