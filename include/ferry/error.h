/* ferry error codes: one X-macro table produces the enum, ferry_strerror() and
 * ferry_err_name(). Every action in ferry returns 0 or one of these negative codes; the
 * detail (native error name, call, bad value) goes into the last-error text. */
#ifndef FERRY_ERROR_H
#define FERRY_ERROR_H

#include "ferry/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define FERRY_ERROR_TABLE(X)                                                                       \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of host memory")                                                            \
    X(EAGAIN, -3, "resource temporarily unavailable, try again")                                   \
    X(EBUSY, -4, "work is still in flight")                                                        \
    X(ENOTSUP, -5, "operation not supported by this backend")                                      \
    X(ENODEV, -6, "no such device or backend unavailable")                                         \
    X(EBACKEND, -7, "backend (driver or runtime) error")                                           \
    X(ERANGE, -8, "value out of range")                                                            \
    X(EPARSE, -9, "malformed input")                                                               \
    X(EIO, -10, "input/output error")                                                              \
    X(ETIMEDOUT, -11, "deadline passed")                                                           \
    X(EDEVMEM, -12, "out of device memory")                                                        \
    X(ESTICKY, -13, "device context lost (sticky error); a new process is needed")                 \
    X(ECLOSED, -14, "object is closed")                                                            \
    X(ECANCELED, -15, "operation canceled")                                                        \
    X(ESTATE, -16, "operation not valid in the current state")                                     \
    X(EVERIFY, -17, "output does not match the reference")                                         \
    X(EKERNEL, -18, "stage kernel or CPU function reported failure")

#define FERRY_ERROR_ENUM_(name, value, msg) FERRY_##name = (value),
typedef enum ferry_err { FERRY_ERROR_TABLE(FERRY_ERROR_ENUM_) FERRY_ERR_MIN_ = -18 } ferry_err_t;
#undef FERRY_ERROR_ENUM_

/** Human-readable message for @p err (a FERRY_* code). Never NULL; unknown codes give
 *  "unknown error". Returns a static string. Thread-safe. */
FERRY_EXTERN const char *ferry_strerror(int err);

/** The symbolic name of @p err without the prefix ("EINVAL"); "UNKNOWN" for other values.
 *  Returns a static string. Thread-safe. */
FERRY_EXTERN const char *ferry_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif
