/* Importing a caller's size-stamped config struct (NCCL's parseCommConfig, made a table): one
 * routine checks its size, copies what the caller's version holds over the struct as its INIT
 * macro makes it (so the fields an older caller lacks are unset), fills unset fields from the
 * options table and checks each against its range. One descriptor per public config struct
 * (config.c). Values that depend on the device (priorities, the profile's chunk) or on where a
 * value came from stay with their importer, which works on the imported copy. */
#ifndef FERRY_BASE_CONFIG_H
#define FERRY_BASE_CONFIG_H

#include "base/base.h"

/* A struct larger than this is not one of ferry's (an unset size field, most likely). */
#define FERRY__CONFIG_SIZE_MAX ((size_t)1 << 16)

typedef enum ferry__cf_type {
    FERRY__CF_SIZE,   /* size_t; unset: 0 */
    FERRY__CF_UINT,   /* unsigned; unset: 0 */
    FERRY__CF_INT,    /* int; unset: FERRY_UNSET */
    FERRY__CF_DOUBLE, /* double; unset: 0 */
    FERRY__CF_FLOAT,  /* float; unset: 0 */
    FERRY__CF_STR     /* const char *; unset: NULL */
} ferry__cf_type_t;

/* Field flags. */
#define FERRY__CF_CHECK_UNSET 1u /* the unset value is checked against the range too (required) */
#define FERRY__CF_MINUS_ONE   2u /* -1 also means unset (what an older INIT macro wrote) */

typedef struct ferry__cfg_field {
    const char *name;
    size_t offset;
    ferry__cf_type_t type;
    int opt;         /* the option (ferry__opt_id_t) that fills it when unset; -1: none */
    double def;      /* the value when still unset after the option; 0: leave it unset */
    double min, max; /* accepted range of a set value; min > max: not checked here */
    unsigned flags;
} ferry__cfg_field_t;

typedef struct ferry__cfg_desc {
    const char *what;     /* the argument in errors: "ferry_pool_create: cfg" */
    const char *type;     /* "ferry_pool_config_t" */
    const char *init;     /* "FERRY_POOL_CONFIG_INIT" */
    const char *prefix;   /* range errors read "<prefix> <field>=<value> is out of range ..." */
    size_t min_size;      /* the first version's size */
    size_t full_size;     /* sizeof the struct in this build */
    const void *defaults; /* the struct as its INIT macro makes it */
    const ferry__cfg_field_t *fields;
    size_t nfields;
} ferry__cfg_desc_t;

/* The public config structs. */
extern const ferry__cfg_desc_t ferry__cfg_runtime, ferry__cfg_pool, ferry__cfg_stage,
    ferry__cfg_pipeline, ferry__cfg_batch, ferry__cfg_copy_bench, ferry__cfg_workload;

/* Import @src (a caller's struct of @desc's type, whose first field is its size; NULL: all
 * defaults) into @dst (@dst_size bytes, desc->full_size): refuse a size of 0, below the first
 * version's or above FERRY__CONFIG_SIZE_MAX, naming the struct; copy min(size, dst_size) over
 * the defaults and set dst's size to dst_size; fill unset fields from @o (NULL: not yet, see
 * ferry__config_fill) and the table's defaults; check set fields against their ranges, the
 * error naming the field, the value and the range. Returns 0 or FERRY_EINVAL (last error
 * set); @dst is then unspecified. */
int ferry__config_import(void *dst, size_t dst_size, const void *src, const ferry__cfg_desc_t *desc,
                         const ferry_options_t *o);
/* Fill the unset fields of an imported @dst from @o and check them (when the options are
 * known only after the import: the runtime's own). Returns 0 or FERRY_EINVAL. */
int ferry__config_fill(void *dst, const ferry__cfg_desc_t *desc, const ferry_options_t *o);

#endif
