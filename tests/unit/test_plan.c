/* The pipeline's plan (src/pipeline/plan.c) from a config, options and device properties alone:
 * defaults from the options and the profile, the config's values winning over both, the copy
 * group, granularity rounding, derived values (streams, queue depth, anchors, workers), the
 * backend's facts, and refusals of values out of range. */
#include <stdint.h>
#include <string.h>

#include "pipeline/plan.h"
#include "testlib.h"

static int cpu_stage(const ferry_kernel_args_t *args, void *user)
{
    (void)args;
    (void)user;
    return 0;
}

static int gpu_stage(const ferry_kernel_args_t *args, void *stream, void *user)
{
    (void)args;
    (void)stream;
    (void)user;
    return 0;
}

typedef struct fixture {
    ferry_options_t *o;
    ferry_device_props_t props;
    ferry_stage_t stage;
    ferry_pipeline_config_t cfg;
    ferry__pipe_plan_env_t env;
} fixture_t;

static void setup(fixture_t *f)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(ferry_options_create(&f->o), 0);
    f->props.priority_greatest = -5;
    f->props.priority_least = 0;
    f->props.link_gbps = 64;
    f->props.default_chunk_bytes = 4u << 20;
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "t";
    st.cpu = cpu_stage;
    f->stage = st;
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.stage = &f->stage;
    f->cfg = cfg;
    f->env = (ferry__pipe_plan_env_t){
        .opts = f->o, .props = &f->props, .simulated = true, .native_stream = false, .ncpu = 4};
}

static void teardown(fixture_t *f)
{
    ferry_options_destroy(f->o);
}

static void test_defaults(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f);
    struct ferry__pipe_plan pl;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.chunk, 4u << 20); /* the profile's, the option being 0 */
    assert_int_equal(pl.group, 2);        /* coalesce_bytes 8M over 4 MiB chunks */
    assert_int_equal(pl.depth, 8);
    assert_int_equal(pl.ncopy, 1);
    assert_int_equal(pl.ncomp, 2);
    assert_int_equal(pl.nstreams, 4);
    assert_int_equal(pl.queue_depth, (1 * 2 + 2) * 2);
    assert_int_equal(pl.anchors, 2);
    assert_int_equal(pl.nworkers, 4); /* ncpu, at most 8 */
    assert_int_equal(pl.stage_threshold, 256 * 1024);
    assert_false(pl.single);
    assert_false(pl.caller_issues); /* a virtual clock: the issuer thread alone issues */
    assert_true(pl.virtual_clock);
    assert_false(pl.time_all);
    assert_false(pl.time_none);
    assert_null(pl.failure_log);
    assert_true(pl.lat_init_ns > 0);
    teardown(&f);
}

static void test_config_wins(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f);
    assert_int_equal(ferry_options_set(f.o, "depth", "4"), 0);
    f.cfg.chunk_bytes = 1u << 20;
    f.cfg.depth = 16;
    f.cfg.copy_streams = 2;
    f.cfg.compute_streams = 3;
    f.cfg.copy_priority = -5;
    f.cfg.compute_priority = 0;
    f.cfg.queue_depth = 5;
    f.cfg.workers = 3;
    f.cfg.nonblocking = 1;
    f.cfg.coalesce_bytes = SIZE_MAX;
    f.env.native_stream = true;
    f.env.simulated = false;
    f.stage.gpu = gpu_stage;
    struct ferry__pipe_plan pl;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.chunk, 1u << 20);
    assert_int_equal(pl.group, 1);
    assert_int_equal(pl.depth, 16);
    assert_int_equal(pl.nstreams, 2 * 2 + 3);
    assert_int_equal(pl.anchors, 3);
    assert_int_equal(pl.copy_prio, -5);
    assert_int_equal(pl.comp_prio, 0);
    assert_int_equal(pl.queue_depth, 5);
    assert_int_equal(pl.nworkers, 3);
    assert_true(pl.nonblocking);
    assert_false(pl.caller_issues); /* CUDA: only ferry's threads issue */
    assert_false(pl.virtual_clock);
    /* A real clock on a backend without native streams: callers issue light batches. */
    f.env.native_stream = false;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_true(pl.caller_issues);
    teardown(&f);
}

static void test_group_and_granularity(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f);
    f.cfg.chunk_bytes = 1u << 20;
    f.cfg.coalesce_bytes = 64u << 20; /* 64 chunks: capped */
    struct ferry__pipe_plan pl;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.group, GROUP_MAX);
    /* Rounded down to the element size; up to one element when smaller. */
    f.stage.granularity = 3000;
    f.cfg.coalesce_bytes = SIZE_MAX;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.chunk, (1u << 20) - (1u << 20) % 3000);
    f.cfg.chunk_bytes = 100;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.chunk, 3000);
    /* single_stream: one stream, one anchor. */
    f.cfg.single_stream = true;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.nstreams, 1);
    assert_int_equal(pl.anchors, 1);
    teardown(&f);
}

static void test_edges(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f);
    struct ferry__pipe_plan pl;
    /* No chunk anywhere: 8 MiB. Many CPUs: 8 workers. An older config without coalesce_bytes:
     * the option's group. */
    f.props.default_chunk_bytes = 0;
    f.env.ncpu = 64;
    f.cfg.size = offsetof(ferry_pipeline_config_t, coalesce_bytes);
    f.cfg.coalesce_bytes = 1; /* past the caller's size: not read */
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.chunk, 8u << 20);
    assert_int_equal(pl.group, 1);
    assert_int_equal(pl.nworkers, 8);
    f.env.ncpu = -1;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_int_equal(pl.nworkers, 1);
    assert_int_equal(ferry_options_set(f.o, "op_timing", "all"), 0);
    assert_int_equal(ferry_options_set(f.o, "stage_threshold", "0"), 0);
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), 0);
    assert_true(pl.time_all);
    assert_int_equal(pl.stage_threshold, SIZE_MAX / 4);
    teardown(&f);
}

static void test_refused(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f);
    struct ferry__pipe_plan pl;
    f.cfg.depth = 65;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "depth=65"));
    f.cfg.depth = 0;
    f.cfg.copy_priority = 1; /* below the least priority */
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    f.cfg.copy_priority = FERRY_PRIORITY_DEFAULT;
    f.cfg.nonblocking = 2;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    f.cfg.nonblocking = -1;
    f.cfg.chunk_bytes = (size_t)2 << 30;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    f.cfg.chunk_bytes = 0;
    f.stage.granularity = (2u << 20);
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    f.stage.granularity = 0;
    f.stage.ns_per_byte = -1;
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    f.stage.ns_per_byte = 0;
    f.stage.cpu = NULL; /* the simulator runs the CPU function as the kernel */
    assert_int_equal(ferry__pipe_plan_make(&f.cfg, &f.env, &pl), FERRY_EINVAL);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_config_wins),
        cmocka_unit_test(test_group_and_granularity),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
