/* Built-in workloads: copy, scale and fma (tunable compute). The CPU functions here are the
 * reference and what the simulator runs as the kernel; they use fmaf() explicitly (and the
 * library is built with -ffp-contract=off) so that CPU and GPU results are bit-identical. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/config.h"
#include "ferry/workloads.h"
#include "workloads/fma_simd.h"

/* The index of the name in names[], as ferry_be_workload_t.kind. */
enum wl_kind { WL_COPY, WL_SCALE, WL_FMA };

/* The stage's user pointer is the workload, and a GPU launcher reads its parameters from the
 * ferry_be_workload_t it begins with (backend.h). */
struct ferry_workload {
    ferry_be_workload_t p;
    ferry_stage_t stage;
};

static const char *const names[] = {"copy", "scale", "fma", NULL};

const char *const *ferry_workload_names(void)
{
    return names;
}

static float apply(const struct ferry_workload *w, float x)
{
    if (w->p.kind == WL_SCALE)
        return x * w->p.factor;
    for (unsigned k = 0; k < w->p.intensity; k++)
        x = fmaf(x, w->p.factor, 0.5f);
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
    switch (w->p.kind) {
    case WL_COPY:
        if (in != out)
            memmove(out, in, bytes);
        return;
    case WL_SCALE:
        for (size_t i = 0; i < n; i++) {
            float x;
            memcpy(&x, ib + i * 4, 4);
            x = x * w->p.factor;
            memcpy(ob + i * 4, &x, 4);
        }
        break;
    case WL_FMA:
        for (size_t i = ferry__fma_simd(ib, ob, n, w->p.intensity, w->p.factor); i < n; i++) {
            float x;
            memcpy(&x, ib + i * 4, 4);
            for (unsigned k = 0; k < w->p.intensity; k++)
                x = fmaf(x, w->p.factor, 0.5f);
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

static double fma_ns_per_byte(unsigned intensity)
{
    /* FP32 FMA throughput of an H100/H200 SXM by NVIDIA's datasheet: 67 TFLOP/s = 33.5e12
     * FMA/s; one element (4 bytes) needs @intensity FMAs. The memory-bound pass the
     * simulator adds by itself is a floor under this. `ferry probe --calibrate` measures it. */
    return (double)intensity / 4.0 / 33.5e3;
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
    ferry_workload_params_t c; /* intensity 64 and factor 1.0009765625 when unset */
    int rc = ferry__config_import(&c, sizeof(c), params, &ferry__cfg_workload, NULL);
    if (rc != 0)
        return rc;
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
    unsigned intensity = c.intensity;
    float factor = c.factor;
    struct ferry_workload *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_workload_create: out of memory");
    w->p.kind = (int)kind;
    w->p.intensity = kind == WL_FMA ? intensity : 0;
    w->p.factor = factor;
    w->stage.size = sizeof(w->stage);
    w->stage.name = names[kind];
    w->stage.cpu = cpu_fn;
    w->stage.gpu = ferry__backend_gpu_launcher(names[kind]);
    /* Elementwise: a slab of gathered batches is one span for the same kernel. */
    w->stage.gpu_items = w->stage.gpu;
    w->stage.user = w;
    w->stage.user_bytes = sizeof(w->p); /* all the functions read of it (backend.h) */
    w->stage.granularity = sizeof(float);
    /* Cost hint for the simulator: 0 means a memory-bound pass at the profile's
     * device-to-device rate. fma adds its arithmetic: intensity FMAs per 4 bytes. */
    w->stage.ns_per_byte = 0;
    if (kind == WL_FMA)
        w->stage.ns_per_byte = fma_ns_per_byte(intensity);
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
