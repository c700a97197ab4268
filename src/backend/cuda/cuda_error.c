/* CUDA errors end here: the one table from cudaError_t to FERRY_* codes, the last-error text
 * that keeps the CUDA name and number, and the per-thread current-device cache that every
 * operation goes through (CUDA's current device is per host thread; ferry's ops run on the
 * caller's threads, the issuer and the completion thread). */
#include <stdarg.h>
#include <stdio.h>

#include "backend/cuda/cuda_internal.h"

/* The device this thread last made current through ferry; -1: unknown. */
static _Thread_local int tls_device = -1;
static atomic_bool sticky_logged;

/* CUDA errors that are not FERRY_EBACKEND, one list per FERRY code. Numbers where older
 * toolkits lack the name. */
static const int devmem_errors[] = {cudaErrorMemoryAllocation};

/* The CUDA headers (driver_types.h) say of each of the first ones: "This leaves the process in
 * an inconsistent state and any further CUDA work will return the same error. To continue
 * using CUDA, the process must be terminated and relaunched" (710: "The device cannot be used
 * again"). FACTS.md measured 700 and 719 on the H200: every later call fails, and
 * cudaDeviceReset does not bring the device back. 719 is also __trap(). Then uncorrectable ECC
 * / NVLink errors during execution (214, 220): the context's memory can no longer be trusted,
 * so they end the context too. Last 46: FACTS.md: after a sticky error and cudaDeviceReset
 * every call returns it on the H200; only a new process gets the GPU back (device_open reports
 * it as FERRY_ENODEV). */
static const int sticky_errors[] = {
    226 /* cudaErrorContained */,
    cudaErrorIllegalAddress /* 700 */,
    cudaErrorLaunchTimeout /* 702 */,
    cudaErrorAssert /* 710 */,
    cudaErrorHardwareStackError /* 714 */,
    cudaErrorIllegalInstruction /* 715 */,
    cudaErrorMisalignedAddress /* 716 */,
    cudaErrorInvalidAddressSpace /* 717 */,
    cudaErrorInvalidPc /* 718 */,
    cudaErrorLaunchFailure /* 719 */,
    721 /* cudaErrorTensorMemoryLeak (CUDA 12.8) */,
    cudaErrorMpsClientTerminated /* 810 */,
    911 /* cudaErrorExternalDevice */,
    cudaErrorECCUncorrectable /* 214 */,
    cudaErrorNvlinkUncorrectable /* 220 */,
    cudaErrorDevicesUnavailable /* 46 */,
};

/* No usable device: no driver or one too old (35), no GPU (100, 101), linked against the stub
 * (34), the fabric manager not running (802), built for other GPUs (209). */
static const int nodev_errors[] = {
    cudaErrorNoDevice /* 100 */,
    cudaErrorInsufficientDriver /* 35 */,
    cudaErrorInvalidDevice /* 101 */,
    cudaErrorStubLibrary /* 34 */,
    cudaErrorInitializationError /* 3 */,
    cudaErrorDeviceNotLicensed /* 102 */,
    cudaErrorSystemNotReady /* 802 */,
    cudaErrorSystemDriverMismatch /* 803 */,
    cudaErrorCompatNotSupportedOnDevice /* 804 */,
    cudaErrorNoKernelImageForDevice /* 209 */,
};

/* Registering twice, unregistering what is not registered: the caller's mistake, as the public
 * API documents (and the simulator reports). */
static const int inval_errors[] = {
    cudaErrorHostMemoryAlreadyRegistered /* 712 */,
    cudaErrorHostMemoryNotRegistered /* 713 */,
};

/* cudaErrorNotReady (600) is FERRY_EAGAIN only where a query expects it: those paths handle it
 * before translating. Anywhere else it is a backend error. */
static const struct {
    int ferry;
    const int *cuda;
    size_t n;
} table[] = {
#define CODE(ferry, list)                                                                          \
    {                                                                                              \
        ferry, list, sizeof(list) / sizeof(list[0])                                                \
    }
    CODE(FERRY_EDEVMEM, devmem_errors),
    CODE(FERRY_ESTICKY, sticky_errors),
    CODE(FERRY_ENODEV, nodev_errors),
    CODE(FERRY_EINVAL, inval_errors),
#undef CODE
};

int ferry__cuda_error_code(int e)
{
    if (e == cudaSuccess)
        return 0;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        for (size_t k = 0; k < table[i].n; k++)
            if (table[i].cuda[k] == e)
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
    else if (!atomic_exchange_explicit(&sticky_logged, true, memory_order_relaxed))
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
