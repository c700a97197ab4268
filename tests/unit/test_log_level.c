/* The process-wide log level: a level the application set with ferry_set_log_level survives
 * the creation of runtimes (each used to reset it from its options, undoing the call), a runtime
 * still sets it from its options until then, and ferry threads log while another thread creates
 * runtimes without a data race (the level is read atomically: the TSan build checks this). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "ferry/workloads.h"
#include "testlib.h"

static void test_runtime_follows_options_until_app_chooses(void **state)
{
    (void)state;
    /* No explicit choice yet: a runtime's option sets the level. */
    const char *const info[] = {"log_level", "info", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(info);
    assert_int_equal(ferry_get_log_level(), FERRY_LOG_INFO);
    ferry_runtime_destroy(rt);
    ferry_set_log_level(FERRY_LOG_ERROR);
    assert_int_equal(ferry_get_log_level(), FERRY_LOG_ERROR);
    /* Neither the default options ("warn") nor explicit ones undo the application's choice. */
    rt = test_sim_runtime();
    assert_int_equal(ferry_get_log_level(), FERRY_LOG_ERROR);
    ferry_runtime_destroy(rt);
    rt = test_sim_runtime_with(info);
    assert_int_equal(ferry_get_log_level(), FERRY_LOG_ERROR);
    ferry_runtime_destroy(rt);
    ferry_set_log_level(FERRY_LOG_DEBUG);
    assert_int_equal(ferry_get_log_level(), FERRY_LOG_DEBUG);
    ferry_set_log_level((ferry_log_level_t)99); /* clamped */
    assert_int_equal(ferry_get_log_level(), FERRY_LOG_DEBUG);
    ferry_set_log_level(FERRY_LOG_WARN);
}

static atomic_bool stop;

static void *creator(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        ferry_runtime_t *rt = test_sim_runtime();
        ferry_runtime_destroy(rt);
    }
    return NULL;
}

static void quiet(ferry_log_level_t level, const char *subsystem, const char *line, void *arg)
{
    (void)level, (void)subsystem, (void)line;
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    (void)arg;
    assert_int_equal(r->status, 0);
}

static void test_logging_while_runtimes_are_created(void **state)
{
    (void)state;
    atomic_int lines = 0;
    ferry_set_log_handler(quiet, &lines);
    ferry_set_log_level(FERRY_LOG_DEBUG); /* the simulator logs at info and debug */
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    atomic_store(&stop, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, creator, NULL), 0);
    ferry_workload_t *wl = test_workload("copy");
    static unsigned char buf[1u << 20];
    for (int round = 0; round < 4; round++) {
        ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 64u << 10);
        ferry_pipeline_t *p = test_pipeline(&pc);
        test_submit_one(p, buf, buf, sizeof(buf), done, NULL);
        assert_int_equal(ferry_pipeline_close(p), 0);
        /* The creator's runtimes left the application's level alone. */
        assert_int_equal(ferry_get_log_level(), FERRY_LOG_DEBUG);
    }
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    ferry_set_log_handler(NULL, NULL);
    ferry_set_log_level(FERRY_LOG_WARN);
    assert_true(atomic_load(&lines) > 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_runtime_follows_options_until_app_chooses),
          cmocka_unit_test(test_logging_while_runtimes_are_created))
