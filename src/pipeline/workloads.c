/* Built-in workloads: copy, scale and fma (tunable compute). The CPU functions here are the
 * reference and what the simulator runs as the kernel; they use fmaf() explicitly (and the
 * library is built with -ffp-contract=off) so that CPU and GPU results are bit-identical. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ferry/workloads.h"
#include "pipeline/workloads_gpu.h"

enum wl_kind { WL_COPY, WL_SCALE, WL_FMA };

struct ferry_workload {
    enum wl_kind kind;
    unsigned intensity;
    float factor;
    ferry_stage_t stage;
};

static const char *const names[] = {"copy", "scale", "fma", NULL};

const char *const *ferry_workload_names(void)
{
    return names;
}

static float apply(const struct ferry_workload *w, float x)
{
    if (w->kind == WL_SCALE)
        return x * w->factor;
    for (unsigned k = 0; k < w->intensity; k++)
        x = fmaf(x, w->factor, 0.5f);
    return x;
}

/* Bytes that are not a whole float (1-3 after the last one: a short batch, or the end of an
 * input) are the low-order bytes of one more float whose other bytes are zero (little-endian,
 * as the data's floats are read): it is transformed like the others and those bytes of the
 * result are written. Before, they were copied through: a stream of 2-byte batches came back
 * untransformed and verified. The GPU kernel (src/backend/cuda/ferry_k_workloads.cu) does the
 * same, bit for bit. */
static void transform(const struct ferry_workload *w, const void *in, void *out, size_t bytes)
{
    size_t n = bytes / sizeof(float);
    size_t tail = bytes - n * sizeof(float);
    const unsigned char *ib = in;
    unsigned char *ob = out;
    switch (w->kind) {
    case WL_COPY:
        if (in != out)
            memmove(out, in, bytes);
        return;
    case WL_SCALE:
        for (size_t i = 0; i < n; i++) {
            float x;
            memcpy(&x, ib + i * 4, 4);
            x = x * w->factor;
            memcpy(ob + i * 4, &x, 4);
        }
        break;
    case WL_FMA:
        for (size_t i = 0; i < n; i++) {
            float x;
            memcpy(&x, ib + i * 4, 4);
            for (unsigned k = 0; k < w->intensity; k++)
                x = fmaf(x, w->factor, 0.5f);
            memcpy(ob + i * 4, &x, 4);
        }
        break;
    }
    if (tail) {
        unsigned char b[4] = {0, 0, 0, 0};
        memcpy(b, ib + n * 4, tail);
        uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
        float x;
        memcpy(&x, &bits, 4); /* exponent 0 or 1: never a NaN */
        x = apply(w, x);
        memcpy(&bits, &x, 4);
        for (size_t k = 0; k < tail; k++)
            ob[n * 4 + k] = (unsigned char)(bits >> (8 * k));
    }
}

static int cpu_fn(const ferry_kernel_args_t *a, void *user)
{
    transform(user, a->in, a->out, a->bytes);
    return 0;
}

int ferry_workload_create(const char *name, const ferry_workload_params_t *params,
                          ferry_workload_t **out)
{
    if (name == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_workload_create: NULL argument");
    if (params != NULL && params->size < sizeof(*params))
        return ferry__error(FERRY_EINVAL, "ferry_workload_create: params->size not set "
                                          "(use FERRY_WORKLOAD_PARAMS_INIT)");
    enum wl_kind kind;
    if (strcmp(name, "copy") == 0)
        kind = WL_COPY;
    else if (strcmp(name, "scale") == 0)
        kind = WL_SCALE;
    else if (strcmp(name, "fma") == 0)
        kind = WL_FMA;
    else
        return ferry__error(FERRY_EINVAL, "unknown workload '%s' (accepted: copy, scale, fma)",
                            name);
    unsigned intensity = params && params->intensity ? params->intensity : 64;
    if (intensity > 100000)
        return ferry__error(FERRY_EINVAL,
                            "workload intensity %u out of range (accepted: 1 to "
                            "100000)",
                            intensity);
    float factor = params && params->factor != 0.0f ? params->factor : 1.0009765625f;
    if (!isfinite(factor))
        return ferry__error(FERRY_EINVAL, "workload factor must be finite");
    struct ferry_workload *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_workload_create: out of memory");
    w->kind = kind;
    w->intensity = kind == WL_FMA ? intensity : 0;
    w->factor = factor;
    w->stage.size = sizeof(w->stage);
    w->stage.name = names[kind];
    w->stage.cpu = cpu_fn;
    w->stage.gpu = ferry__workload_gpu_fn(names[kind]);
    w->stage.user = w;
    w->stage.granularity = sizeof(float);
    /* Cost hint for the simulator: 0 means a memory-bound pass at the profile's
     * device-to-device rate. fma adds its arithmetic: intensity FMAs per 4 bytes. */
    w->stage.ns_per_byte = 0;
    if (kind == WL_FMA)
        w->stage.ns_per_byte = ferry__workload_fma_ns_per_byte(intensity);
    *out = w;
    return 0;
}

void ferry_workload_destroy(ferry_workload_t *w)
{
    free(w);
}

const ferry_stage_t *ferry_workload_stage(const ferry_workload_t *w)
{
    return w ? &w->stage : NULL;
}

int ferry_workload_reference(const ferry_workload_t *w, const void *in, void *out, size_t bytes)
{
    if (w == NULL || (bytes > 0 && (in == NULL || out == NULL)))
        return ferry__error(FERRY_EINVAL, "ferry_workload_reference: NULL argument");
    transform(w, in, out, bytes);
    return 0;
}

/* For the CUDA backend's launchers (src/backend/cuda/cuda_workloads.c): a stage's user pointer
 * is its workload; hand out what the kernel needs. @kind is the index of the name in names[]. */
void ferry__workload_params(const void *user, int *kind, unsigned *intensity, float *factor)
{
    const struct ferry_workload *w = user;
    *kind = (int)w->kind;
    *intensity = w->intensity;
    *factor = w->factor;
}
