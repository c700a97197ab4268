/* The import of the public config structs (config.h): one routine for the size check, the copy
 * of what the caller's version holds, the options that fill unset fields and the range checks,
 * and below it one table per struct. The wording of the range errors is the pipeline's ("pipeline
 * depth=65 is out of range (accepted: 1 to 64)"), which tests and scripts read. */
#include <float.h>
#include <string.h>

#include "base/config.h"
#include "ferry/bench.h"
#include "ferry/workloads.h"

static bool field_unset(const ferry__cfg_field_t *f, const void *p)
{
    switch (f->type) {
    case FERRY__CF_SIZE: return *(const size_t *)p == 0;
    case FERRY__CF_UINT: return *(const unsigned *)p == 0;
    case FERRY__CF_INT: {
        int v = *(const int *)p;
        return v == FERRY_UNSET || ((f->flags & FERRY__CF_MINUS_ONE) && v == -1);
    }
    case FERRY__CF_DOUBLE: return *(const double *)p == 0.0;
    case FERRY__CF_FLOAT: return *(const float *)p == 0.0f;
    case FERRY__CF_STR: return *(const char *const *)p == NULL;
    }
    return false;
}

/* Give the unset field at @p the option's value, else the table's default. */
static void field_fill(const ferry__cfg_field_t *f, void *p, const ferry_options_t *o)
{
    bool opt = o != NULL && f->opt >= 0;
    ferry__opt_id_t id = (ferry__opt_id_t)f->opt;
    switch (f->type) {
    case FERRY__CF_SIZE: *(size_t *)p = opt ? (size_t)ferry__opt_i64(o, id) : (size_t)f->def; break;
    case FERRY__CF_UINT:
        *(unsigned *)p = opt ? (unsigned)ferry__opt_i64(o, id) : (unsigned)f->def;
        break;
    case FERRY__CF_INT:
        if (opt)
            *(int *)p = (int)ferry__opt_i64(o, id);
        else if (f->def != 0)
            *(int *)p = (int)f->def;
        break;
    case FERRY__CF_DOUBLE: *(double *)p = opt ? ferry__opt_double(o, id) : f->def; break;
    case FERRY__CF_FLOAT: *(float *)p = (float)(opt ? ferry__opt_double(o, id) : f->def); break;
    case FERRY__CF_STR:
        if (opt)
            *(const char **)p = ferry__opt_str(o, id);
        break;
    }
}

/* The field's value against its range (NaN is out of every range). */
static int field_check(const ferry__cfg_desc_t *d, const ferry__cfg_field_t *f, const void *p)
{
    double v;
    char text[40];
    switch (f->type) {
    case FERRY__CF_SIZE:
        v = (double)*(const size_t *)p;
        snprintf(text, sizeof(text), "%zu", *(const size_t *)p);
        break;
    case FERRY__CF_UINT:
        v = *(const unsigned *)p;
        snprintf(text, sizeof(text), "%u", *(const unsigned *)p);
        break;
    case FERRY__CF_INT:
        v = *(const int *)p;
        snprintf(text, sizeof(text), "%d", *(const int *)p);
        break;
    case FERRY__CF_DOUBLE:
        v = *(const double *)p;
        snprintf(text, sizeof(text), "%g", v);
        break;
    case FERRY__CF_FLOAT:
        v = *(const float *)p;
        snprintf(text, sizeof(text), "%g", v);
        break;
    default: return 0;
    }
    if (v >= f->min && v <= f->max)
        return 0;
    if (f->type == FERRY__CF_DOUBLE || f->type == FERRY__CF_FLOAT)
        return ferry__error(FERRY_EINVAL, "%s %s=%s is out of range (accepted: %g to %g)",
                            d->prefix, f->name, text, f->min, f->max);
    return ferry__error(FERRY_EINVAL, "%s %s=%s is out of range (accepted: %lld to %lld)",
                        d->prefix, f->name, text, (long long)f->min, (long long)f->max);
}

int ferry__config_fill(void *dst, const ferry__cfg_desc_t *desc, const ferry_options_t *o)
{
    for (size_t i = 0; i < desc->nfields; i++) {
        const ferry__cfg_field_t *f = &desc->fields[i];
        void *p = (char *)dst + f->offset;
        bool unset = field_unset(f, p);
        if (unset) {
            field_fill(f, p, o);
            unset = field_unset(f, p);
        }
        if (f->min > f->max || (unset && !(f->flags & FERRY__CF_CHECK_UNSET)))
            continue;
        int rc = field_check(desc, f, p);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int ferry__config_import(void *dst, size_t dst_size, const void *src, const ferry__cfg_desc_t *desc,
                         const ferry_options_t *o)
{
    FERRY_ASSERT(dst_size == desc->full_size);
    memcpy(dst, desc->defaults, dst_size);
    if (src != NULL) {
        size_t size;
        memcpy(&size, src, sizeof(size));
        if (size < desc->min_size || size > FERRY__CONFIG_SIZE_MAX)
            return ferry__error(FERRY_EINVAL,
                                "%s->size is %zu: not the size of a %s (accepted: %zu to %zu; "
                                "use %s)",
                                desc->what, size, desc->type, desc->min_size,
                                (size_t)FERRY__CONFIG_SIZE_MAX, desc->init);
        memcpy(dst, src, size < dst_size ? size : dst_size);
        memcpy(dst, &dst_size, sizeof(dst_size));
    }
    return ferry__config_fill(dst, desc, o);
}

/* ---------------------------------------------------------------------------------------------
 * One table per struct: the fields the import fills or checks (the others are copied only).
 * ------------------------------------------------------------------------------------------- */

/* A field: its option (NONE: none), its default past the option, its range (min > max, here
 * `1, 0`: none) and flags. */
#define NONE (-1)
#define FIELD(type, field, kind, opt, def, min, max, flags)                                        \
    {                                                                                              \
#field, offsetof(type, field), FERRY__CF_##kind, opt, def, min, max, flags                 \
    }
#define DESC(var, what, type, init_macro, prefix, min_size, fields)                                \
    static const type var##_init = init_macro;                                                     \
    const ferry__cfg_desc_t var = {what,        #type,    #init_macro,                             \
                                   prefix,      min_size, sizeof(type),                            \
                                   &var##_init, fields,   sizeof(fields) / sizeof(fields[0])}

/* The runtime's options are made from the config, so its strings are filled afterwards
 * (ferry__config_fill). */
static const ferry__cfg_field_t runtime_fields[] = {
    FIELD(ferry_runtime_config_t, backend, STR, FERRY__OPT_backend, 0, 1, 0, 0),
    FIELD(ferry_runtime_config_t, profile, STR, FERRY__OPT_profile, 0, 1, 0, 0),
};
DESC(ferry__cfg_runtime, "ferry_runtime_create: cfg", ferry_runtime_config_t,
     FERRY_RUNTIME_CONFIG_INIT, "runtime", offsetof(ferry_runtime_config_t, profile),
     runtime_fields);

/* slots (2 x depth) and the slot's fallbacks past the option (the profile's chunk, 8M) are
 * ferry_pool_create's; align must also be a power of two. */
static const ferry__cfg_field_t pool_fields[] = {
    FIELD(ferry_pool_config_t, slot_bytes, SIZE, FERRY__OPT_chunk_bytes, 0, 1, 0, 0),
    FIELD(ferry_pool_config_t, align, SIZE, NONE, 4096, 1, 1 << 30, 0),
};
DESC(ferry__cfg_pool, "ferry_pool_create: cfg", ferry_pool_config_t, FERRY_POOL_CONFIG_INIT, "pool",
     offsetof(ferry_pool_config_t, align), pool_fields);

static const ferry__cfg_field_t stage_fields[] = {
    FIELD(ferry_stage_t, ns_per_byte, DOUBLE, NONE, 0, 0, 1e6, 0),
    FIELD(ferry_stage_t, granularity, SIZE, NONE, 0, 0, 1 << 20, 0),
};
DESC(ferry__cfg_stage, "ferry_pipeline_create: cfg->stage", ferry_stage_t, FERRY_STAGE_INIT,
     "stage", offsetof(ferry_stage_t, ns_per_byte), stage_fields);

/* Priorities are checked against the device's range, coalesce_bytes filled (whether the caller
 * chose it decides a warning) and the chunk, queue and workers derived, by the plan. */
static const ferry__cfg_field_t pipeline_fields[] = {
    FIELD(ferry_pipeline_config_t, chunk_bytes, SIZE, FERRY__OPT_chunk_bytes, 0, 1, 1 << 30, 0),
    FIELD(ferry_pipeline_config_t, depth, UINT, FERRY__OPT_depth, 0, 1, 64, 0),
    FIELD(ferry_pipeline_config_t, copy_streams, UINT, FERRY__OPT_copy_streams, 0, 1, 8, 0),
    FIELD(ferry_pipeline_config_t, compute_streams, UINT, FERRY__OPT_compute_streams, 0, 1, 16, 0),
    FIELD(ferry_pipeline_config_t, copy_priority, INT, FERRY__OPT_copy_priority, 0, 1, 0, 0),
    FIELD(ferry_pipeline_config_t, compute_priority, INT, FERRY__OPT_compute_priority, 0, 1, 0, 0),
    FIELD(ferry_pipeline_config_t, queue_depth, UINT, FERRY__OPT_queue_depth, 0, 1, 1 << 20, 0),
    FIELD(ferry_pipeline_config_t, nonblocking, INT, FERRY__OPT_nonblocking, 0, 0, 1,
          FERRY__CF_MINUS_ONE),
    FIELD(ferry_pipeline_config_t, workers, UINT, FERRY__OPT_workers, 0, 1, 256, 0),
    FIELD(ferry_pipeline_config_t, gather_us, UINT, FERRY__OPT_gather_us, 0, 1, 1000000, 0),
};
DESC(ferry__cfg_pipeline, "ferry_pipeline_create: cfg", ferry_pipeline_config_t,
     FERRY_PIPELINE_CONFIG_INIT, "pipeline", offsetof(ferry_pipeline_config_t, workers),
     pipeline_fields);

/* A batch has nothing to fill or check here: its import is the size check and the copy. */
static const ferry__cfg_field_t batch_fields[1] = {{.min = 1, .max = 0}};
static const ferry_batch_t batch_init = FERRY_BATCH_INIT;
const ferry__cfg_desc_t ferry__cfg_batch = {"ferry_pipeline_submit: batch",
                                            "ferry_batch_t",
                                            "FERRY_BATCH_INIT",
                                            "batch",
                                            offsetof(ferry_batch_t, prepare_arg),
                                            sizeof(ferry_batch_t),
                                            &batch_init,
                                            batch_fields,
                                            0};

static const ferry__cfg_field_t copy_bench_fields[] = {
    FIELD(ferry_copy_bench_config_t, bytes, SIZE, NONE, 0, 1, 16ull << 30, FERRY__CF_CHECK_UNSET),
    FIELD(ferry_copy_bench_config_t, warmup, UINT, NONE, 2, 1, 10000, 0),
    FIELD(ferry_copy_bench_config_t, reps, UINT, NONE, 10, 1, 10000, 0),
};
DESC(ferry__cfg_copy_bench, "ferry_bench_copy: cfg", ferry_copy_bench_config_t,
     FERRY_COPY_BENCH_CONFIG_INIT, "bench copy", sizeof(ferry_copy_bench_config_t),
     copy_bench_fields);

static const ferry__cfg_field_t workload_fields[] = {
    FIELD(ferry_workload_params_t, intensity, UINT, NONE, 64, 1, 100000, 0),
    FIELD(ferry_workload_params_t, factor, FLOAT, NONE, 1.0009765625, -FLT_MAX, FLT_MAX, 0),
};
DESC(ferry__cfg_workload, "ferry_workload_create: params", ferry_workload_params_t,
     FERRY_WORKLOAD_PARAMS_INIT, "workload", sizeof(ferry_workload_params_t), workload_fields);
