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

int ferry__cuda_error_code(int e)
{
    switch (e) {
    case cudaSuccess:
        return 0;
    case cudaErrorMemoryAllocation:
        return FERRY_EDEVMEM;
    /* The CUDA headers (driver_types.h) say of each of these: "This leaves the process in an
     * inconsistent state and any further CUDA work will return the same error. To continue
     * using CUDA, the process must be terminated and relaunched" (710: "The device cannot be
     * used again"). FACTS.md measured 700 and 719 on the H200: every later call fails, and
     * cudaDeviceReset does not bring the device back. */
    case 226:                         /* cudaErrorContained (CUDA >= 12.x headers) */
    case cudaErrorIllegalAddress:     /* 700 */
    case cudaErrorLaunchTimeout:      /* 702 */
    case cudaErrorAssert:             /* 710 */
    case cudaErrorHardwareStackError: /* 714 */
    case cudaErrorIllegalInstruction: /* 715 */
    case cudaErrorMisalignedAddress:  /* 716 */
    case cudaErrorInvalidAddressSpace:/* 717 */
    case cudaErrorInvalidPc:          /* 718 */
    case cudaErrorLaunchFailure:      /* 719 */
    case 721:                         /* cudaErrorTensorMemoryLeak (CUDA >= 12.8) */
    case cudaErrorMpsClientTerminated:/* 810 */
    case 911:                         /* cudaErrorExternalDevice (CUDA >= 12.x) */
    /* Uncorrectable ECC / NVLink errors during execution: the memory the context holds can no
     * longer be trusted; treated as the end of the context too. */
    case cudaErrorECCUncorrectable:   /* 214 */
    case cudaErrorNvlinkUncorrectable:/* 220 */
    /* FACTS.md: after a sticky error and cudaDeviceReset every call returns 46 on the H200; a
     * new process is the only way back. (At open, the backend reports it as FERRY_ENODEV.) */
    case cudaErrorDevicesUnavailable: /* 46 */
        return FERRY_ESTICKY;
    case cudaErrorNoDevice:                  /* 100 */
    case cudaErrorInsufficientDriver:        /* 35 */
    case cudaErrorInvalidDevice:             /* 101 */
    case cudaErrorStubLibrary:               /* 34 */
    case cudaErrorInitializationError:       /* 3 */
    case cudaErrorDeviceNotLicensed:         /* 102 */
    case cudaErrorSystemNotReady:            /* 802: fabric manager not running */
    case cudaErrorSystemDriverMismatch:      /* 803 */
    case cudaErrorCompatNotSupportedOnDevice:/* 804 */
    case cudaErrorNoKernelImageForDevice:    /* 209: built for other GPUs */
        return FERRY_ENODEV;
    /* Registering twice / unregistering what is not registered: the caller's mistake, as the
     * public API documents (and the simulator reports). */
    case cudaErrorHostMemoryAlreadyRegistered: /* 712 */
    case cudaErrorHostMemoryNotRegistered:     /* 713 */
        return FERRY_EINVAL;
    default:
        /* cudaErrorNotReady (600) is FERRY_EAGAIN only where a query expects it: the query
         * paths handle it before calling this. Anywhere else it is a backend error. */
        return FERRY_EBACKEND;
    }
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
    default:
        return "";
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
