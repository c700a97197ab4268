/* Logging: one line per message, level checked before formatting (the ferry_log macro), a
 * replaceable process-wide sink. The default sink writes to stderr. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

atomic_int ferry__log_level_now = FERRY_LOG_WARN;

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_log_fn sink_fn;
static void *sink_arg;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void level_from_env(void)
{
    const char *v = getenv("FERRY_LOG_LEVEL");
    if (v == NULL)
        return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, level_names[i]) == 0)
            atomic_store_explicit(&ferry__log_level_now, i, memory_order_relaxed);
    /* A bad value is reported when options are parsed (ferry_options_apply_env). */
}

__attribute__((constructor)) static void log_init(void)
{
    pthread_once(&level_once, level_from_env);
}

void ferry_set_log_handler(ferry_log_fn fn, void *arg)
{
    pthread_mutex_lock(&sink_lock);
    sink_fn = fn;
    sink_arg = arg;
    pthread_mutex_unlock(&sink_lock);
}

/* Set by ferry_set_log_level: the application's choice, which runtimes leave alone. */
static atomic_bool level_chosen;

static int clamp_level(ferry_log_level_t level)
{
    if ((int)level < FERRY_LOG_ERROR)
        return FERRY_LOG_ERROR;
    if ((int)level > FERRY_LOG_DEBUG)
        return FERRY_LOG_DEBUG;
    return (int)level;
}

void ferry_set_log_level(ferry_log_level_t level)
{
    atomic_store_explicit(&level_chosen, true, memory_order_relaxed);
    atomic_store_explicit(&ferry__log_level_now, clamp_level(level), memory_order_relaxed);
}

void ferry__log_level_default(ferry_log_level_t level)
{
    if (!atomic_load_explicit(&level_chosen, memory_order_relaxed))
        atomic_store_explicit(&ferry__log_level_now, clamp_level(level), memory_order_relaxed);
}

ferry_log_level_t ferry_get_log_level(void)
{
    return (ferry_log_level_t)atomic_load_explicit(&ferry__log_level_now, memory_order_relaxed);
}

void ferry__log_emit(ferry_log_level_t level, const char *subsystem, const char *fmt, ...)
{
    char text[1024];
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    /* One grep-able line: no embedded newlines. */
    for (char *c = text; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    snprintf(line, sizeof(line), "ferry %s %s: %s", level_names[level & 3], subsystem, text);
    pthread_mutex_lock(&sink_lock);
    if (sink_fn != NULL)
        sink_fn(level, subsystem, line, sink_arg);
    else
        fprintf(stderr, "%s\n", line);
    pthread_mutex_unlock(&sink_lock);
}

void ferry__assert_fail(const char *expr, const char *file, int line)
{
    ferry__log_emit(FERRY_LOG_ERROR, "assert", "%s:%d: assertion failed: %s", file, line, expr);
#ifndef NDEBUG
    __builtin_trap();
#endif
}
