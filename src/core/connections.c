/* CUDA_DEVICE_MAX_CONNECTIONS: how CUDA reads a value (include/ferry/connections.h says what
 * was measured), ferry's strict parser, the memory cost, and whether cuInit already ran. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ferry/connections.h"

/* A plain decimal integer: optional '-', digits only, no spaces. */
static bool plain_int(const char *s, long long *out)
{
    int64_t v;
    if (*s == '+' || ferry__parse_i64(s, &v) != 0)
        return false;
    *out = v;
    return true;
}

int ferry_connections_read(const char *text, ferry_conn_reading_t *out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_connections_read: NULL out");
    memset(out, 0, sizeof(*out));
    out->effective = FERRY_CONNECTIONS_DEFAULT;
    out->measured = true;
    long long v = 0;
    if (text == NULL || text[0] == '\0') {
        out->status = FERRY_CONN_UNSET;
        snprintf(out->note, sizeof(out->note), "%s: CUDA uses its default, %u queues (without MPS)",
                 text == NULL ? "not set" : "empty", FERRY_CONNECTIONS_DEFAULT);
    } else if (!plain_int(text, &v)) {
        out->status = FERRY_CONN_MALFORMED;
        /* "abc" was measured to behave as unset; other shapes ("8x", " 8") were not. */
        bool alpha = text[0] < '0' || text[0] > '9';
        out->measured = alpha && text[0] != ' ' && text[0] != '-' && text[0] != '+';
        snprintf(out->note, sizeof(out->note), "'%.40s' is not a plain integer: %s; set 1..32",
                 text,
                 out->measured ? "CUDA ignores it and uses the default, 8 (measured with 'abc')"
                               : "CUDA's reading is not documented (taken as the default, 8; "
                                 "`ferry connections --measure` tells)");
    } else if (v <= 0) {
        out->status = FERRY_CONN_IGNORED;
        out->measured = v == 0;
        snprintf(out->note, sizeof(out->note),
                 "%lld is out of the documented range 1..32: CUDA uses the default, 8%s", v,
                 v == 0 ? " (measured)" : " (measured for 0; negative values not measured)");
    } else if (v > FERRY_CONNECTIONS_MAX) {
        out->status = FERRY_CONN_UNDOCUMENTED;
        out->effective = v > 1024 ? 1024 : (unsigned)v;
        snprintf(out->note, sizeof(out->note),
                 "%lld is above the documented 32: CUDA took 33 and 64 as given (device memory "
                 "grew) but nothing documents it; use 32 at most",
                 v);
    } else {
        out->status = FERRY_CONN_VALID;
        out->effective = (unsigned)v;
        snprintf(out->note, sizeof(out->note), "%lld hardware queues per context", v);
    }
    return 0;
}

int ferry_connections_parse(const char *what, const char *text, unsigned *out)
{
    what = what != NULL ? what : "connections";
    long long v = 0;
    if (text == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "%s: no value (accepted: an integer 1..32)", what);
    if (!plain_int(text, &v) || text[0] == '-' || (text[0] == '0' && text[1] != '\0'))
        return ferry__error(FERRY_EPARSE,
                            "%s: '%s' is not accepted: a decimal integer 1..32 (CUDA's "
                            "documented range), without sign, spaces or suffix",
                            what, text);
    if (v < 1 || v > FERRY_CONNECTIONS_MAX)
        return ferry__error(FERRY_ERANGE,
                            "%s: %lld is out of range: accepted 1..32 (0 means unset to CUDA, "
                            "above 32 is undocumented)",
                            what, v);
    *out = (unsigned)v;
    return 0;
}

size_t ferry_connections_memory_bytes(unsigned compute, unsigned copy)
{
    return (size_t)compute * FERRY_CONNECTIONS_COMPUTE_BYTES +
           (size_t)copy * FERRY_CONNECTIONS_COPY_BYTES;
}

bool ferry_cuda_initialized(void)
{
    /* Only look: RTLD_NOLOAD never loads the driver. Before cuInit every driver call but a
     * few answers CUDA_ERROR_NOT_INITIALIZED (3). */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return false;
    int (*count)(int *) = NULL;
    *(void **)&count = dlsym(h, "cuDeviceGetCount");
    bool init = true;
    if (count != NULL) {
        int n = 0;
        init = count(&n) != 3;
    }
    dlclose(h);
    return init;
}
