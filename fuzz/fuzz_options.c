/* libFuzzer harness for the option parsers: sizes, integers, booleans and enums from any text
 * must parse or fail cleanly, and a failed set leaves the options unchanged. */
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t n = ferry_option_count();
    const ferry_option_info_t *inf = ferry_option_at(data[0] % n);
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    ferry_options_t *o = NULL;
    if (ferry_options_create(&o) == 0) {
        int64_t before = 0, after = 0;
        bool numeric = inf->type != FERRY_OPT_STRING && inf->type != FERRY_OPT_DOUBLE;
        if (numeric)
            ferry_options_get_i64(o, inf->name, &before);
        if (ferry_options_set(o, inf->name, text) != 0 && numeric) {
            ferry_options_get_i64(o, inf->name, &after);
            if (before != after)
                abort(); /* a refused value must not change the option */
        }
        ferry_options_destroy(o);
    }
    uint64_t v;
    (void)ferry_parse_size(text, &v);
    free(text);
    return 0;
}
