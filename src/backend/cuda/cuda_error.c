/* CUDA errors end here: the one table from cudaError_t to FERRY_* codes, the last-error text
 * that keeps the CUDA name and number, and the per-thread current-device cache that every
 * operation goes through (CUDA's current device is per host thread; ferry's ops run on the
 * caller's threads, the issuer and the completion thread). */
#include <stdarg.h>
#include <stdio.h>

#include "backend/cuda/cuda_internal.h"

/* The device this thread last made current through ferry; -1: unknown. */
static _Thread_local int tls_device = -1;
static int sticky_logged;

/* CUDA errors that are not FERRY_EBACKEND. Numbers where older toolkits lack the name. */
static const struct {
    int cuda;
    int ferry;
} table[] = {
    {cudaErrorMemoryAllocation, FERRY_EDEVMEM},
    /* The CUDA headers (driver_types.h) say of each of these: "This leaves the process in an
     * inconsistent state and any further CUDA work will return the same error. To continue
     * using CUDA, the process must be terminated and relaunched" (710: "The device cannot be
     * used again"). FACTS.md measured 700 and 719 on the H200: every later call fails, and
     * cudaDeviceReset does not bring the device back. */
    {226, FERRY_ESTICKY},                          /* cudaErrorContained */
    {cudaErrorIllegalAddress, FERRY_ESTICKY},      /* 700 */
    {cudaErrorLaunchTimeout, FERRY_ESTICKY},       /* 702 */
    {cudaErrorAssert, FERRY_ESTICKY},              /* 710 */
    {cudaErrorHardwareStackError, FERRY_ESTICKY},  /* 714 */
    {cudaErrorIllegalInstruction, FERRY_ESTICKY},  /* 715 */
    {cudaErrorMisalignedAddress, FERRY_ESTICKY},   /* 716 */
    {cudaErrorInvalidAddressSpace, FERRY_ESTICKY}, /* 717 */
    {cudaErrorInvalidPc, FERRY_ESTICKY},           /* 718 */
    {cudaErrorLaunchFailure, FERRY_ESTICKY},       /* 719, also __trap() */
    {721, FERRY_ESTICKY},                          /* cudaErrorTensorMemoryLeak (CUDA 12.8) */
    {cudaErrorMpsClientTerminated, FERRY_ESTICKY}, /* 810 */
    {911, FERRY_ESTICKY},                          /* cudaErrorExternalDevice */
    /* Uncorrectable ECC / NVLink errors during execution: the context's memory can no longer
     * be trusted, so they end the context too. */
    {cudaErrorECCUncorrectable, FERRY_ESTICKY},    /* 214 */
    {cudaErrorNvlinkUncorrectable, FERRY_ESTICKY}, /* 220 */
    /* FACTS.md: after a sticky error and cudaDeviceReset every call returns 46 on the H200; only
     * a new process gets the GPU back. (device_open reports it as FERRY_ENODEV.) */
    {cudaErrorDevicesUnavailable, FERRY_ESTICKY}, /* 46 */
    /* No usable device. */
    {cudaErrorNoDevice, FERRY_ENODEV},                   /* 100 */
    {cudaErrorInsufficientDriver, FERRY_ENODEV},         /* 35 */
    {cudaErrorInvalidDevice, FERRY_ENODEV},              /* 101 */
    {cudaErrorStubLibrary, FERRY_ENODEV},                /* 34: linked against the stub */
    {cudaErrorInitializationError, FERRY_ENODEV},        /* 3 */
    {cudaErrorDeviceNotLicensed, FERRY_ENODEV},          /* 102 */
    {cudaErrorSystemNotReady, FERRY_ENODEV},             /* 802: fabric manager not running */
    {cudaErrorSystemDriverMismatch, FERRY_ENODEV},       /* 803 */
    {cudaErrorCompatNotSupportedOnDevice, FERRY_ENODEV}, /* 804 */
    {cudaErrorNoKernelImageForDevice, FERRY_ENODEV},     /* 209: built for other GPUs */
    /* Registering twice, unregistering what is not registered: the caller's mistake, as the
     * public API documents (and the simulator reports). */
    {cudaErrorHostMemoryAlreadyRegistered, FERRY_EINVAL}, /* 712 */
    {cudaErrorHostMemoryNotRegistered, FERRY_EINVAL},     /* 713 */
    /* cudaErrorNotReady (600) is FERRY_EAGAIN only where a query expects it: those paths
     * handle it before translating. Anywhere else it is a backend error. */
};

int ferry__cuda_error_code(int e)
{
    if (e == cudaSuccess)
        return 0;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (table[i].cuda == e)
            return table[i].ferry;
    return FERRY_EBACKEND;
}

/* What the user can do about a no-device error. */
static const char *hint(cudaError_t e)
{
    switch (e) {
    case cudaErrorInsufficientDriver:
        return "; no NVIDIA driver, or one older than this CUDA runtime";
    case cudaErrorNoDevice:
        return "; no NVIDIA GPU visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    case cudaErrorNoKernelImageForDevice:
        return "; ferry was built for other GPU architectures (CUDA_ARCHITECTURES)";
    default: return "";
    }
}

int ferry__cuda_fail(cudaError_t err, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    int code = ferry__cuda_error_code((int)err);
    if (code == 0)
        code = FERRY_EBACKEND; /* called with cudaSuccess: a bug, but never report success */
    if (code != FERRY_ESTICKY)
        (void)cudaGetLastError();
    else if (!__atomic_exchange_n(&sticky_logged, 1, __ATOMIC_RELAXED))
        /* Once per process: after a sticky error every call fails the same way. */
        ferry_log(FERRY_LOG_ERROR, "cuda",
                  "%s: %s (%d): the CUDA context is lost; a new process is needed to use the "
                  "GPU again",
                  what, cudaGetErrorName(err), (int)err);
    return ferry__error(code, "%s: %s (%d): %s%s", what, cudaGetErrorName(err), (int)err,
                        cudaGetErrorString(err), hint(err));
}

int ferry__cuda_use_device(int index)
{
    if (tls_device == index)
        return 0;
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaSetDevice(%d)", index);
    tls_device = index;
    return 0;
}

void ferry__cuda_forget_device(void)
{
    tls_device = -1;
}
