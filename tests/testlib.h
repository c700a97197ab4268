/* Test helpers: cmocka includes, a seeded RNG whose seed is printed on failure, random
 * buffers, a runtime on the simulator, the in-tree profile as JSON, a child-process harness,
 * and the stage and batch fixtures the pipeline tests share. */
#ifndef FERRY_TESTLIB_H
#define FERRY_TESTLIB_H

#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "ferry.h"
#include "ferry/workloads.h"

/* The main of a test file that needs nothing done before its tests: runs the cmocka tests
 * listed (cmocka_unit_test(...), ...) as the group "tests" with the group's @setup and
 * @teardown (NULL: none) and returns cmocka's status. */
#define TEST_MAIN(setup, teardown, ...)                                                            \
    int main(void)                                                                                 \
    {                                                                                              \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                                           \
        return cmocka_run_group_tests(tests, setup, teardown);                                     \
    }

/* The seed: FERRY_TEST_SEED from the environment when set, else @fallback. Printed once. */
uint64_t test_seed(uint64_t fallback);
/* splitmix64 step. */
uint64_t test_rand(uint64_t *state);
/* Uniform in [lo, hi]. */
uint64_t test_rand_range(uint64_t *state, uint64_t lo, uint64_t hi);
void test_fill_random(void *p, size_t n, uint64_t *state);
/* Random floats in +-[1, 2) (no zeros, NaNs or denormals: every workload's output is exact
 * and comparable), @n bytes (a multiple of 4). */
void test_fill_floats(void *p, size_t n, uint64_t *state);
/* A runtime on the sim backend with the in-tree H200 profile; fails the test on error. */
ferry_runtime_t *test_sim_runtime(void);
/* The same with options set first: @kv is NULL (the defaults and the FERRY_* environment) or
 * name, value, name, value, ..., NULL. */
ferry_runtime_t *test_sim_runtime_with(const char *const *kv);
/* The same on the profile at @profile. */
ferry_runtime_t *test_sim_runtime_on(const char *profile, const char *const *kv);
/* The in-tree profile called @file (profiles/@file, "h200-a100.json"), into @buf (@len bytes). */
const char *test_profile_named(const char *file, char *buf, size_t len);
/* As test_sim_runtime_on, returning ferry_runtime_create's code instead of failing the test. */
int test_sim_runtime_create(const char *profile, const char *const *kv, ferry_runtime_t **out);
/* The in-tree profile with host.pin_limit_bytes set to @limit (as a locked-memory limit would),
 * written to a temporary file whose path goes to @path. The caller unlinks it. */
void test_profile_with_pin_limit(char *path, size_t len, long long limit);
/* The in-tree profile with "devices": @n (a machine of @n H200s), in a temporary file at @path
 * (the caller unlinks it). */
void test_profile_with_devices(char *path, size_t len, int n);
/* The in-tree profile with copy.piece_kernel_max @bytes (small pieces by a copy kernel), in a
 * temporary file at @path (the caller unlinks it). */
void test_profile_with_piece_kernel(char *path, size_t len, long long bytes);
/* Fixtures that fail the test when the library refuses: device 0 of @rt, a pipeline made
 * from @cfg (closed by the caller), a workload by name with its default parameters (destroyed by
 * the caller). */
ferry_device_t *test_device(ferry_runtime_t *rt);
ferry_pipeline_t *test_pipeline(const ferry_pipeline_config_t *cfg);
ferry_workload_t *test_workload(const char *name);

/* A group fixture: one runtime on the simulator (test_sim_runtime) in test_rt and its device 0
 * in test_dev for every test of the group. */
extern ferry_runtime_t *test_rt;
extern ferry_device_t *test_dev;
int test_sim_setup(void **state);
int test_sim_teardown(void **state);

/* The in-tree profile, parsed; the caller deletes it. */
struct cJSON *test_profile_json(void);
/* @root printed to a new temporary file made from the mkstemp template @tmpl; its path goes to
 * @path (@len bytes). The caller unlinks it. */
void test_write_json(const struct cJSON *root, const char *tmpl, char *path, size_t len);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t test_now_ns(void);

/* Regions of this process's memory that are worker processes' shared memory ("memfd:ferry:"
 * in /proc/self/maps). */
int test_shared_regions(void);

/* The child-process harness: this test program run again with @args (after argv[0], NULL
 * ended), its environment inherited. Fails the test when it cannot start. */
pid_t test_child_spawn(char *const *args);
/* Wait for @pid at most @seconds; its wait status goes to @status. Past the bound the child is
 * killed and reaped and the result is false (a hang is a failure, not a stuck test). */
bool test_child_wait(pid_t pid, unsigned seconds, int *status);
/* Kill @pid and reap it. */
void test_child_kill(pid_t pid);
/* The exit code in a wait status, or -1 when the child did not exit (a signal). */
int test_child_exit_code(int status);

/* Stage and batch fixtures. The CPU function of a stage that copies its input. */
int test_cpu_copy(const ferry_kernel_args_t *a, void *user);
/* A stage named @name with @cpu as its CPU function and no GPU function (for the simulator). */
ferry_stage_t test_cpu_stage(const char *name, ferry_cpu_fn cpu);
/* A pipeline config for @dev running @stage (borrowed) in chunks of @chunk bytes (0: the
 * option's default), every other field at its default. */
ferry_pipeline_config_t test_pipeline_config(ferry_device_t *dev, const ferry_stage_t *stage,
                                             size_t chunk);
/* A batch's prepare function: fills the slot with the byte (offset >> shift), shift being
 * *(const unsigned *)arg (the batch's prepare_arg). */
int test_gen_by_offset(void *slot, size_t bytes, size_t offset, void *arg);
/* A completion callback counting the batches that failed in *(int *)arg. */
void test_count_failed(const ferry_batch_result_t *r, void *arg);
/* Submit @total bytes as generated batches (test_gen_by_offset with @shift) of at most @batch
 * bytes each, drain, and check that none failed. */
void test_submit_generated(ferry_pipeline_t *p, size_t total, size_t batch, unsigned shift);
/* Input, output and reference buffers of one size, for a stream checked against a reference. */
typedef struct test_bufs {
    unsigned char *in, *out, *ref;
} test_bufs_t;
/* Three buffers of @bytes each (contents undefined); fails the test when out of memory. */
test_bufs_t test_bufs_alloc(size_t bytes);
void test_bufs_free(test_bufs_t *b);

/* Completions counted by where they ended, and per batch id (the first TEST_DONE_MAX ids). */
#define TEST_DONE_MAX 64
typedef struct test_done {
    atomic_int calls[TEST_DONE_MAX];
    atomic_int gpu, cpu, failed;
} test_done_t;
/* A completion callback counting into the test_done_t at @arg. */
void test_on_done(const ferry_batch_result_t *r, void *arg);

/* Submit @total bytes from @in to @out (they may be the same) as batches of @per bytes (the
 * last one what is left), each completing through (@cb, @arg); then drain. */
void test_submit_split(ferry_pipeline_t *p, const void *in, void *out, size_t total, size_t per,
                       ferry_done_fn cb, void *arg);
/* The same for one batch of @bytes. */
void test_submit_one(ferry_pipeline_t *p, const void *in, void *out, size_t bytes, ferry_done_fn cb,
                     void *arg);

/* Files for the I/O tests: test_dir is a fresh directory under $TMPDIR (or /tmp) made by
 * test_dir_setup and removed with what it holds by test_dir_teardown (cmocka group fixtures);
 * test_file_byte(i) is byte i of the files test_make_file writes (@n bytes at @path). */
extern char test_dir[256];
int test_dir_setup(void **state);
int test_dir_teardown(void **state);
unsigned char test_file_byte(uint64_t i);
void test_make_file(const char *path, uint64_t n);

#endif
