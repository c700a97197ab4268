/* The error table's strings, and the thread-local last-error text every failing call fills. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"

static _Thread_local char last_error[512];

const char *ferry_strerror(int err)
{
    switch (err) {
#define FERRY_ERROR_MSG_(name, value, msg)                                                         \
    case value: return msg;
        FERRY_ERROR_TABLE(FERRY_ERROR_MSG_)
#undef FERRY_ERROR_MSG_
    }
    return "unknown error";
}

const char *ferry_err_name(int err)
{
    switch (err) {
#define FERRY_ERROR_NAME_(name, value, msg)                                                        \
    case value: return #name;
        FERRY_ERROR_TABLE(FERRY_ERROR_NAME_)
#undef FERRY_ERROR_NAME_
    }
    return "UNKNOWN";
}

int ferry__error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return code;
}

const char *ferry__last_error_text(void)
{
    return last_error;
}

void ferry__clear_error(void)
{
    last_error[0] = '\0';
}

const char *ferry_last_error(void)
{
    return last_error;
}

unsigned ferry_version(void)
{
    return FERRY_VERSION_NUMBER;
}

const char *ferry_version_string(void)
{
    return FERRY_VERSION_STRING;
}
