/* libFuzzer harness for the performance model's loader (a device set's perf_model file): any
 * bytes must give 0 or a clean error, never a crash, a leak or undefined behaviour; a model
 * that loaded saves again. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sched/perfmodel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    ferry_perfmodel_t *m = NULL;
    if (text == NULL || ferry__perf_create(&m) != 0) {
        free(text);
        return 0;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    ferry__perf_name_device(m, 0, "NVIDIA H200 #0");
    if (ferry__perf_load(m, text, "fuzz", NULL) == 0) {
        char *out = NULL;
        if (ferry__perf_save(m, &out) == 0)
            free(out);
        uint64_t ns = 0;
        (void)ferry__perf_predict(m, 0, 0, 8u << 20, &ns);
    }
    ferry__perf_destroy(m);
    free(text);
    return 0;
}
