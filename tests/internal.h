/* The library's private headers that tests reach into (the simulator backend's operations,
 * the scheduler's queues, the watchdog, the fault-spec parser, the runtime's internals), named
 * in this one place so that a move inside src/ changes one file of the tests (the cuda
 * backend's, in gpu/cudatest.h and gpu/faultchild.h). Included by the
 * tests that exercise internals; the rest use the public API through testlib.h only. */
#ifndef FERRY_TEST_INTERNAL_H
#define FERRY_TEST_INTERNAL_H

#include "testlib.h"

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "core/runtime.h"
#include "fault/spec.h"
#include "pipeline/watchdog.h"
#include "sched/sched.h"

#endif
