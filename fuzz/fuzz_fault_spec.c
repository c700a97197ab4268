/* libFuzzer harness for the fault-schedule parser (`--inject SPEC`): any text parses or fails
 * cleanly; a refused spec leaves an empty schedule, an accepted one only valid entries. */
#include <stdlib.h>
#include <string.h>

#include "backend/sim/fault_spec.h"
#include "ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct ferry_fault_spec s;
    int rc = ferry__fault_spec_parse(text, &s);
    if (rc != 0 && s.n != 0)
        abort();
    for (size_t i = 0; rc == 0 && i < s.n; i++) {
        const struct ferry_fault *f = &s.f[i];
        if (f->kind > FERRY_FAULT_SHARE || f->trigger > FERRY_TRIG_P)
            abort();
        if (f->kind == FERRY_FAULT_SHARE &&
            (!(f->gbps > 0 && f->gbps <= 1000) || f->dirs < 1 || f->dirs > 3 ||
             f->trigger == FERRY_TRIG_P || f->trigger == FERRY_TRIG_BATCH))
            abort();
        if (f->trigger == FERRY_TRIG_P && !(f->p > 0 && f->p <= 1))
            abort();
        if (f->kind == FERRY_FAULT_SLOW && !(f->factor > 1 && f->factor <= 1000))
            abort();
    }
    free(text);
    return 0;
}
