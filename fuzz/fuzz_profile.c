/* libFuzzer harness for the device-profile parser: any bytes must give 0 or a clean error,
 * never a crash, a leak or undefined behaviour. */
#include <stddef.h>
#include <stdint.h>

#include "backend/sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ferry_sim_profile p;
    (void)ferry__sim_profile_parse((const char *)data, size, "fuzz", &p);
    return 0;
}
