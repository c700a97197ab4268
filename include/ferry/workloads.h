/* Built-in workloads: ready-made stages (a GPU kernel and the same transform on the CPU) used
 * by `ferry run` and `ferry bench`, and by anyone who wants a known stage to measure with.
 * scale and fma treat a chunk as float32 values (little-endian); 1-3 bytes after the last whole
 * float (a short batch, the end of an input) are the low-order bytes of one more float whose
 * other bytes are zero: transformed like the rest and those bytes of the result written, the
 * same on the GPU, the CPU and the simulator. copy copies any length. */
#ifndef FERRY_WORKLOADS_H
#define FERRY_WORKLOADS_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_workload ferry_workload_t;

typedef struct ferry_workload_params {
    size_t size;        /* sizeof(ferry_workload_params_t), set by the INIT macro */
    unsigned intensity; /* fma: fused multiply-adds per element, 1..100000; 0: 64 */
    float factor;       /* scale and fma: the multiplier; 0: 1.0009765625 (exact in binary) */
} ferry_workload_params_t;
#define FERRY_WORKLOAD_PARAMS_INIT FERRY_SIZED_INIT(ferry_workload_params_t)

/** Names of the built-in workloads, NULL-terminated: "copy" (out = in), "scale" (out = in x
 *  factor), "fma" (intensity rounds of x = x * factor + 0.5, fused). Static storage. */
FERRY_EXTERN const char *const *ferry_workload_names(void);

/** Create workload @p name. @p params may be NULL (defaults). On error *out is untouched.
 *  Returns 0, FERRY_EINVAL (unknown name: the last-error text lists the accepted names;
 *  intensity out of range), FERRY_ENOMEM. */
FERRY_EXTERN int ferry_workload_create(const char *name, const ferry_workload_params_t *params,
                                       ferry_workload_t **out);
/** NULL is a no-op. Destroy only after every pipeline using its stage is closed. */
FERRY_EXTERN void ferry_workload_destroy(ferry_workload_t *w);
/** The stage (owned by @p w, valid until it is destroyed): the GPU function is set when ferry
 *  was built with CUDA, the CPU function always, and a cost hint for the simulator. */
FERRY_EXTERN const ferry_stage_t *ferry_workload_stage(const ferry_workload_t *w);
/** Apply the transform on the CPU (the reference): out[i] = f(in[i]) for @p bytes bytes.
 *  @p in and @p out may be equal. Returns 0 or FERRY_EINVAL. Thread-safe. */
FERRY_EXTERN int ferry_workload_reference(const ferry_workload_t *w, const void *in, void *out,
                                          size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
