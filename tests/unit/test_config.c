/* The import of the public config structs (src/base/config.c), struct by struct: a smaller
 * struct of an older caller gets the defaults of the fields it lacks (whatever lies past its
 * size), a size too small, zero or absurd is refused naming the struct, a value out of range is
 * refused naming the field, the value and the range, and unset fields take the options' values
 * (set, or from the environment). Then the same through the public calls. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "ferry/bench.h"
#include "ferry/workloads.h"
#include "testlib.h"

static ferry_options_t *opts(const char *name, const char *value)
{
    ferry_options_t *o = NULL;
    assert_int_equal(ferry_options_create(&o), 0);
    if (name != NULL)
        assert_int_equal(ferry_options_set(o, name, value), 0);
    return o;
}

/* @desc refuses @src (its size set to @size) naming the struct. */
static void refused_size(const ferry__cfg_desc_t *desc, void *dst, void *src, size_t size)
{
    memcpy(src, &size, sizeof(size));
    assert_int_equal(ferry__config_import(dst, desc->full_size, src, desc, NULL), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), desc->type));
    assert_non_null(strstr(ferry_last_error(), desc->init));
}

/* Make @s (@full bytes, as an INIT macro set it) the struct of an older caller of @size bytes:
 * garbage past its end, which the import must not read. */
static void older(void *s, size_t full, size_t size)
{
    memset((char *)s + size, 0x55, full - size);
    memcpy(s, &size, sizeof(size));
}

/* The last error names @field=@value. */
static void named(const char *field_value)
{
    if (strstr(ferry_last_error(), field_value) == NULL ||
        strstr(ferry_last_error(), "out of range (accepted: ") == NULL)
        fail_msg("expected '%s' in: %s", field_value, ferry_last_error());
}

/* @desc refuses @src naming @field_value ("depth=65") and the range. */
static void refused_field(const ferry__cfg_desc_t *desc, const void *src, const ferry_options_t *o,
                          const char *field_value)
{
    _Alignas(max_align_t) unsigned char dst[512];
    assert_true(desc->full_size <= sizeof(dst));
    assert_int_equal(ferry__config_import(dst, desc->full_size, src, desc, o), FERRY_EINVAL);
    named(field_value);
}

static void test_sizes(void **state)
{
    (void)state;
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT, c;
    refused_size(&ferry__cfg_pipeline, &c, &cfg, 0);
    refused_size(&ferry__cfg_pipeline, &c, &cfg, offsetof(ferry_pipeline_config_t, workers) - 1);
    refused_size(&ferry__cfg_pipeline, &c, &cfg, FERRY__CONFIG_SIZE_MAX + 1);
    refused_size(&ferry__cfg_pipeline, &c, &cfg, (size_t)-1);
    /* A newer, larger struct: the fields known here are read, the rest ignored. */
    struct {
        ferry_pipeline_config_t cfg;
        char newer[64];
    } big;
    memset(&big, 0x7f, sizeof(big));
    big.cfg = (ferry_pipeline_config_t)FERRY_PIPELINE_CONFIG_INIT;
    big.cfg.size = sizeof(big);
    big.cfg.depth = 3;
    assert_int_equal(ferry__config_import(&c, sizeof(c), &big, &ferry__cfg_pipeline, NULL), 0);
    assert_int_equal(c.size, sizeof(c));
    assert_int_equal(c.depth, 3);
    /* NULL: every default. */
    ferry_options_t *o = opts("depth", "7");
    assert_int_equal(ferry__config_import(&c, sizeof(c), NULL, &ferry__cfg_pipeline, o), 0);
    assert_int_equal(c.depth, 7);
    ferry_options_destroy(o);
}

static void test_cfg_pipeline(void **state)
{
    (void)state;
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT, c;
    /* An older caller: the struct ends before single_stream; what lies past it is not read. */
    older(&cfg, sizeof(cfg), offsetof(ferry_pipeline_config_t, single_stream));
    ferry_options_t *o = opts("workers", "3");
    assert_int_equal(ferry_options_set(o, "copy_priority", "-2"), 0);
    assert_int_equal(ferry_options_set(o, "nonblocking", "1"), 0);
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_pipeline, o), 0);
    assert_false(c.single_stream);
    assert_null(c.on_alert);
    assert_null(c.alert_arg);
    assert_int_equal(c.coalesce_bytes, 0);
    /* Unset fields from the options: 0, FERRY_UNSET and the older -1 alike. */
    assert_int_equal(c.workers, 3);
    assert_int_equal(c.copy_priority, -2);
    assert_int_equal(c.compute_priority, 0);
    assert_int_equal(c.nonblocking, 1);
    assert_int_equal(c.depth, 8);
    cfg = (ferry_pipeline_config_t)FERRY_PIPELINE_CONFIG_INIT;
    cfg.nonblocking = FERRY_UNSET;
    assert_int_equal(FERRY_PRIORITY_DEFAULT, FERRY_UNSET);
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_pipeline, o), 0);
    assert_int_equal(c.nonblocking, 1);
    /* Set values win, 0 included where 0 is a value. */
    cfg.nonblocking = 0;
    cfg.copy_priority = 0;
    cfg.depth = 2;
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_pipeline, o), 0);
    assert_int_equal(c.nonblocking, 0);
    assert_int_equal(c.copy_priority, 0);
    assert_int_equal(c.depth, 2);
    /* Out of range, by name. */
    cfg.depth = 65;
    refused_field(&ferry__cfg_pipeline, &cfg, o, "pipeline depth=65");
    assert_non_null(strstr(ferry_last_error(), "1 to 64"));
    cfg.depth = 0;
    cfg.nonblocking = 2;
    refused_field(&ferry__cfg_pipeline, &cfg, o, "nonblocking=2");
    cfg.nonblocking = -1;
    cfg.chunk_bytes = (size_t)2 << 30;
    refused_field(&ferry__cfg_pipeline, &cfg, o, "chunk_bytes=2147483648");
    ferry_options_destroy(o);
}

static void test_pipeline_env(void **state)
{
    (void)state;
    setenv("FERRY_COMPUTE_STREAMS", "5", 1);
    setenv("FERRY_COMPUTE_PRIORITY", "-3", 1);
    ferry_options_t *o = opts(NULL, NULL);
    int rc = ferry_options_apply_env(o);
    unsetenv("FERRY_COMPUTE_STREAMS");
    unsetenv("FERRY_COMPUTE_PRIORITY");
    assert_int_equal(rc, 0);
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT, c;
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_pipeline, o), 0);
    assert_int_equal(c.compute_streams, 5);
    assert_int_equal(c.compute_priority, -3);
    ferry_options_destroy(o);
}

static void test_stage(void **state)
{
    (void)state;
    ferry_stage_t st = FERRY_STAGE_INIT, c;
    refused_size(&ferry__cfg_stage, &c, &st, offsetof(ferry_stage_t, ns_per_byte) - 1);
    st.name = "old";
    older(&st, sizeof(st), offsetof(ferry_stage_t, ns_per_byte)); /* the first version */
    assert_int_equal(ferry__config_import(&c, sizeof(c), &st, &ferry__cfg_stage, NULL), 0);
    assert_true(c.ns_per_byte == 0.0);
    assert_int_equal(c.granularity, 0);
    assert_string_equal(c.name, "old");
    st = (ferry_stage_t)FERRY_STAGE_INIT;
    st.ns_per_byte = -1;
    refused_field(&ferry__cfg_stage, &st, NULL, "stage ns_per_byte=-1");
    st.ns_per_byte = NAN;
    assert_int_equal(ferry__config_import(&c, sizeof(c), &st, &ferry__cfg_stage, NULL),
                     FERRY_EINVAL);
    st.ns_per_byte = 0;
    st.granularity = 2u << 20;
    refused_field(&ferry__cfg_stage, &st, NULL, "granularity=2097152");
    /* A stage has no option: its unset fields stay unset for the plan (tests/unit/test_plan.c). */
}

static void test_pool(void **state)
{
    (void)state;
    ferry_pool_config_t cfg = FERRY_POOL_CONFIG_INIT, c;
    refused_size(&ferry__cfg_pool, &c, &cfg, offsetof(ferry_pool_config_t, align) - 1);
    cfg.slots = 4;
    older(&cfg, sizeof(cfg), offsetof(ferry_pool_config_t, align)); /* the first version */
    ferry_options_t *o = opts("chunk_bytes", "1M");
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_pool, o), 0);
    assert_int_equal(c.align, 4096);          /* lacked: the default */
    assert_false(c.pageable_fallback);        /* lacked */
    assert_int_equal(c.slot_bytes, 1u << 20); /* unset: the chunk_bytes option */
    assert_int_equal(c.slots, 4);
    cfg = (ferry_pool_config_t)FERRY_POOL_CONFIG_INIT;
    cfg.align = (size_t)2 << 30;
    refused_field(&ferry__cfg_pool, &cfg, o, "pool align=2147483648");
    ferry_options_destroy(o);
}

static void test_runtime(void **state)
{
    (void)state;
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT, c;
    refused_size(&ferry__cfg_runtime, &c, &cfg, sizeof(size_t));
    /* The first version: backend only. */
    older(&cfg, sizeof(cfg), offsetof(ferry_runtime_config_t, profile));
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_runtime, NULL), 0);
    assert_null(c.profile);
    assert_null(c.options);
    /* The runtime's options exist only after the import: filled then. */
    ferry_options_t *o = opts("backend", "sim");
    assert_int_equal(ferry_options_set(o, "profile", "x.json"), 0);
    assert_int_equal(ferry__config_fill(&c, &ferry__cfg_runtime, o), 0);
    assert_string_equal(c.backend, "sim");
    assert_string_equal(c.profile, "x.json");
    cfg = (ferry_runtime_config_t)FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = "cuda";
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_runtime, o), 0);
    assert_string_equal(c.backend, "cuda");
    /* No field has a range: a bad backend name is ferry_runtime_create's error (ENODEV). */
    ferry_options_destroy(o);
}

static void test_batch(void **state)
{
    (void)state;
    ferry_batch_t b = FERRY_BATCH_INIT, c;
    refused_size(&ferry__cfg_batch, &c, &b, offsetof(ferry_batch_t, prepare_arg) - 1);
    b.in = &b;
    b.bytes = 16;
    older(&b, sizeof(b), offsetof(ferry_batch_t, user)); /* before user was appended */
    assert_int_equal(ferry__config_import(&c, sizeof(c), &b, &ferry__cfg_batch, NULL), 0);
    assert_null(c.user);
    assert_int_equal(c.size, sizeof(c));
    assert_int_equal(c.bytes, 16);
    /* A batch has no option and no range here: submit checks in, out and bytes. */
}

static void test_copy_bench(void **state)
{
    (void)state;
    ferry_copy_bench_config_t cfg = FERRY_COPY_BENCH_CONFIG_INIT, c;
    refused_size(&ferry__cfg_copy_bench, &c, &cfg, sizeof(cfg) - 1);
    cfg = (ferry_copy_bench_config_t)FERRY_COPY_BENCH_CONFIG_INIT;
    refused_field(&ferry__cfg_copy_bench, &cfg, NULL, "bench copy bytes=0"); /* required */
    cfg.bytes = 4096;
    assert_int_equal(ferry__config_import(&c, sizeof(c), &cfg, &ferry__cfg_copy_bench, NULL), 0);
    assert_int_equal(c.reps, 10);
    assert_int_equal(c.warmup, 2);
    cfg.reps = 10001;
    refused_field(&ferry__cfg_copy_bench, &cfg, NULL, "reps=10001");
    /* Its fields have no option: the first version is the whole struct. */
}

static void test_cfg_workload(void **state)
{
    (void)state;
    ferry_workload_params_t p = FERRY_WORKLOAD_PARAMS_INIT, c;
    refused_size(&ferry__cfg_workload, &c, &p, sizeof(p) - 1);
    p = (ferry_workload_params_t)FERRY_WORKLOAD_PARAMS_INIT;
    assert_int_equal(ferry__config_import(&c, sizeof(c), &p, &ferry__cfg_workload, NULL), 0);
    assert_int_equal(c.intensity, 64);
    assert_true(c.factor == 1.0009765625f);
    p.intensity = 100001;
    refused_field(&ferry__cfg_workload, &p, NULL, "workload intensity=100001");
    p.intensity = 1;
    p.factor = INFINITY;
    refused_field(&ferry__cfg_workload, &p, NULL, "workload factor=inf");
}

/* The public calls go through the import: their refusals name the struct or the field. */
static void test_public_calls(void **state)
{
    (void)state;
    ferry_workload_t *w = NULL;
    ferry_workload_params_t p = {.size = 4};
    assert_int_equal(ferry_workload_create("fma", &p, &w), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "ferry_workload_params_t"));
    p = (ferry_workload_params_t)FERRY_WORKLOAD_PARAMS_INIT;
    p.intensity = 200000;
    assert_int_equal(ferry_workload_create("fma", &p, &w), FERRY_EINVAL);
    named("intensity=200000");
    ferry_runtime_t *rt = NULL;
    ferry_runtime_config_t rc = {.size = 1};
    assert_int_equal(ferry_runtime_create(&rc, &rt), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "ferry_runtime_config_t"));
    ferry_pipeline_t *pl = NULL;
    ferry_pipeline_config_t pc = {.size = 8};
    assert_int_equal(ferry_pipeline_create(&pc, &pl), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "ferry_pipeline_config_t"));
    assert_null(w);
    assert_null(rt);
    assert_null(pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),        cmocka_unit_test(test_cfg_pipeline),
        cmocka_unit_test(test_pipeline_env), cmocka_unit_test(test_stage),
        cmocka_unit_test(test_pool),         cmocka_unit_test(test_runtime),
        cmocka_unit_test(test_batch),        cmocka_unit_test(test_copy_bench),
        cmocka_unit_test(test_cfg_workload), cmocka_unit_test(test_public_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
