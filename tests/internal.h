/* The library's private headers that tests reach into (the simulator backend's operations,
 * the scheduler's queues, the watchdog, the bandwidth monitor, the fault-spec parser, the
 * runtime's internals), named in this one place so that a move inside src/ changes one file of
 * the tests (the cuda backend's, in gpu/cudatest.h and gpu/faultchild.h). Included by the
 * tests that exercise internals; the rest use the public API through testlib.h only. */
#ifndef FERRY_TEST_INTERNAL_H
#define FERRY_TEST_INTERNAL_H

#include "testlib.h"

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "core/runtime.h"
#include "backend/sim/fault_spec.h"
#include "base/span_union.h"
#include "fault/watchdog.h"
#include "monitor/bandwidth.h"
#include "sched/sched.h"

/* Device 0 of the simulator backend on @profile, seed 1, or NULL when it does not open. The
 * model reads CUDA_DEVICE_MAX_CONNECTIONS: it is unset first, so the caller's environment does
 * not change what is measured. */
static inline ferry_be_device_t *simtest_open(const char *profile)
{
    ferry_be_device_t *dev = NULL;
    ferry_be_open_params_t params = {.profile_path = profile, .seed = 1};
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (ferry__sim_backend.device_open(0, &params, &dev) != 0)
        return NULL;
    return dev;
}

#endif
