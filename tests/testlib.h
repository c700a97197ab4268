/* Test helpers: cmocka includes, a seeded RNG whose seed is printed on failure, random
 * buffers, and a runtime on the simulator. */
#ifndef FERRY_TESTLIB_H
#define FERRY_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry.h"

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
/* The same with options set first: @kv is NULL or name, value, name, value, ..., NULL. */
ferry_runtime_t *test_sim_runtime_with(const char *const *kv);
/* The in-tree profile with host.pin_limit_bytes set to @limit (as a locked-memory limit would),
 * written to a temporary file whose path goes to @path. The caller unlinks it. */
void test_profile_with_pin_limit(char *path, size_t len, long long limit);

#endif
