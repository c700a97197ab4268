/* The CPU as a device (FERRY_DEVICE_CPU): a device of sets only (src/pipeline/set_cpu.c runs
 * the stages' CPU functions). It has no streams, memory or copies: every backend operation is
 * absent, so that each call on it that needs one returns FERRY_ENOTSUP from the ferry__be_*
 * wrappers (backend.c). Not a backend a runtime can choose. */
#include "backend/backend.h"

const ferry_backend_ops_t ferry__cpu_device_ops = {
    .name = "cpu",
    .abi = FERRY_BACKEND_ABI,
};
