/* The CUDA backend's GPU launchers (the gpu_launcher op, backend.h): the built-in workloads',
 * each reading its parameters from the ferry_be_workload_t the stage's user pointer points to
 * and queueing ferry_k_workloads.cu's kernel on the pipeline's stream, and the spin kernel's. */
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/ferry_k_spin.h"
#include "backend/cuda/ferry_k_workloads.h"

#define SM_CACHE 64

/* Multiprocessors of each device by ordinal, 0 until asked: the grid is sized from it. */
static atomic_int sm_cache[SM_CACHE];

static int current_sms(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0; /* the kernel launcher's default */
    }
    if (dev >= 0 && dev < SM_CACHE &&
        (sms = atomic_load_explicit(&sm_cache[dev], memory_order_relaxed)))
        return sms;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev >= 0 && dev < SM_CACHE)
        atomic_store_explicit(&sm_cache[dev], sms, memory_order_relaxed);
    return sms;
}

static const char *const kind_names[] = {"copy", "scale", "fma"};

static int launch(int want, const ferry_kernel_args_t *a, void *stream, void *user)
{
    if (a == NULL || user == NULL)
        return ferry__error(FERRY_EINVAL, "workload %s: NULL kernel arguments or workload",
                            kind_names[want]);
    const ferry_be_workload_t *w = user;
    if (w->kind != want)
        return ferry__error(FERRY_EINVAL,
                            "workload %s: launcher called with a workload of kind %d (the stage's "
                            "user pointer must be its ferry_workload_t)",
                            kind_names[want], w->kind);
    if (a->bytes == 0)
        return 0;
    if (a->in == NULL || a->out == NULL)
        return ferry__error(FERRY_EINVAL, "workload %s: NULL device pointer", kind_names[want]);
    int e = ferry_k_workload_launch(w->kind, w->intensity, w->factor, a->in, a->out, a->bytes,
                                    current_sms(), stream);
    if (e != 0)
        return ferry__cuda_fail((cudaError_t)e, "workload %s kernel launch (%zu bytes)",
                                kind_names[want], a->bytes);
    return 0;
}

static int gpu_copy(const ferry_kernel_args_t *a, void *stream, void *user)
{
    return launch(FERRY_K_COPY, a, stream, user);
}

static int gpu_scale(const ferry_kernel_args_t *a, void *stream, void *user)
{
    return launch(FERRY_K_SCALE, a, stream, user);
}

static int gpu_fma(const ferry_kernel_args_t *a, void *stream, void *user)
{
    return launch(FERRY_K_FMA, a, stream, user);
}

/* The spin stage: @user points to the nanoseconds to hold one block. */
static int gpu_spin(const ferry_kernel_args_t *a, void *stream, void *user)
{
    (void)a;
    int e = ferry_k_spin_launch(*(const unsigned long long *)user, stream);
    return e == 0 ? 0 : ferry__cuda_fail((cudaError_t)e, "spin kernel launch");
}

ferry_gpu_fn ferry__cuda_gpu_launcher(const char *name)
{
    static const struct {
        const char *name;
        ferry_gpu_fn fn;
    } launchers[] = {
        {"copy", gpu_copy}, {"scale", gpu_scale}, {"fma", gpu_fma}, {"spin", gpu_spin}};
    for (size_t i = 0; name != NULL && i < sizeof(launchers) / sizeof(launchers[0]); i++)
        if (strcmp(name, launchers[i].name) == 0)
            return launchers[i].fn;
    return NULL;
}
