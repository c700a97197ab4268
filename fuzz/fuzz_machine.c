/* libFuzzer harness for the machine-profile parser: any bytes must give 0 or a clean error,
 * never a crash, a leak or undefined behaviour. */
#include <stddef.h>
#include <stdint.h>

#include "backend/sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ferry_sim_machine m;
    if (ferry__sim_is_machine((const char *)data, size))
        (void)ferry__sim_machine_parse((const char *)data, size, "dir/fuzz.json", 1, &m);
    return 0;
}
