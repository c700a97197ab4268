/* The base layer, below everything else in src/: error detail, logging, options access and
 * small utilities. It includes nothing of ferry's but the public headers (scripts/check-layers.sh
 * holds every folder to that order). Nothing here is public; names carry the ferry__ prefix. */
#ifndef FERRY_BASE_H
#define FERRY_BASE_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"

#if defined(__GNUC__)
#define FERRY_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FERRY_PRINTF(a, b)
#endif

/* Record @code with a formatted detail as the calling thread's last error and return @code,
 * so that error paths read `return ferry__error(FERRY_EINVAL, "depth %u out of range", d);`. */
int ferry__error(int code, const char *fmt, ...) FERRY_PRINTF(2, 3);
/* The calling thread's last-error text. */
const char *ferry__last_error_text(void);
void ferry__clear_error(void);

/* Logging: the level is checked before the arguments are evaluated. Atomic: any thread may
 * log while another sets the level. */
extern atomic_int ferry__log_level_now;
/* A runtime's options give @level: it applies unless the application chose a level itself
 * (ferry_set_log_level), which no runtime's creation overrides. */
void ferry__log_level_default(ferry_log_level_t level);
void ferry__log_emit(ferry_log_level_t level, const char *subsystem, const char *fmt, ...)
    FERRY_PRINTF(3, 4);
#define ferry_log(level, subsystem, ...)                                                           \
    do {                                                                                           \
        if ((int)(level) <= atomic_load_explicit(&ferry__log_level_now, memory_order_relaxed))     \
            ferry__log_emit((level), (subsystem), __VA_ARGS__);                                    \
    } while (0)

/* Assertions for invariants: compiled in unless FERRY_ASSERT_LEVEL is 0. A failed assertion
 * logs and traps in debug builds only; the library never exits the caller's process. */
#ifndef FERRY_ASSERT_LEVEL
#define FERRY_ASSERT_LEVEL 1
#endif
void ferry__assert_fail(const char *expr, const char *file, int line);
#if FERRY_ASSERT_LEVEL > 0
#define FERRY_ASSERT(e) ((e) ? (void)0 : ferry__assert_fail(#e, __FILE__, __LINE__))
#else
#define FERRY_ASSERT(e) ((void)0)
#endif

/* Options: generated ids for fast typed access. */
typedef enum ferry__opt_id {
#define FERRY_OPTION(name, type, def, min, max, choices, doc) FERRY__OPT_##name,
#include "base/options.def"
#undef FERRY_OPTION
    FERRY__OPT_COUNT
} ferry__opt_id_t;
int64_t ferry__opt_i64(const ferry_options_t *o, ferry__opt_id_t id);
/* Whether the option was set (ferry_options_set, the environment) rather than left at its
 * default. */
bool ferry__opt_given(const ferry_options_t *o, ferry__opt_id_t id);
double ferry__opt_double(const ferry_options_t *o, ferry__opt_id_t id);
const char *ferry__opt_str(const ferry_options_t *o, ferry__opt_id_t id);
/* The options set on @o (ferry__opt_given), but those named in @skip (NULL-terminated, may be
 * NULL), as "name=value\n" lines, for another process: malloc'd, its length in *@len; NULL when
 * out of memory. ferry__options_apply_text sets each line's option on @o: 0, or the first
 * refusal (ferry_options_set's code and message). */
char *ferry__options_text(const ferry_options_t *o, const char *const *skip, size_t *len);
int ferry__options_apply_text(ferry_options_t *o, const char *text, size_t len);

/* Strict number parsing shared by options, profiles and the CLI. Return 0, FERRY_EPARSE or
 * FERRY_ERANGE, without setting the last error (callers name the source). */
int ferry__parse_i64(const char *s, int64_t *out);
int ferry__parse_u64(const char *s, uint64_t *out);
int ferry__parse_double(const char *s, double *out);

/* A mutex that spins briefly before sleeping (glibc's adaptive type), for short hot locks. */
#include <pthread.h>
#include <time.h>
int ferry__mutex_init_adaptive(pthread_mutex_t *m);
/* A condition whose timed waits run on CLOCK_MONOTONIC, so that wall-clock steps cannot
 * stretch them. Returns pthread_cond_init's result. */
int ferry__cond_init_monotonic(pthread_cond_t *cv);
/* The CLOCK_MONOTONIC time @ns from now, for a timed wait on such a condition. A far-future
 * time saturates (about 68 years ahead) instead of overflowing tv_sec. */
void ferry__deadline_after(uint64_t ns, struct timespec *out);
/* With @mu held: wait on @cv (made by ferry__cond_init_monotonic) until *@stop is set or @ns
 * have passed, whichever is first. */
void ferry__cond_sleep(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, uint64_t ns);
/* A monitor thread's sleep between rounds, which do their work without @mu: take @mu, sleep on
 * @cv as ferry__cond_sleep does, release @mu and return whether to go on (*@stop still clear),
 * for `while (ferry__cond_nap(...)) round();`. */
bool ferry__cond_nap(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, uint64_t ns);
/* Under @mu: set *@flag (a stop or close flag its sleepers re-check) and wake every waiter on
 * @a and on @b (NULL: none). */
void ferry__flag_set_wake(pthread_mutex_t *mu, bool *flag, pthread_cond_t *a, pthread_cond_t *b);
/* Start a thread running @fn(@arg) into *@th, set *@started and give the thread @name (at most
 * 15 characters, as the OS shows it). Returns pthread_create's result: 0, or an errno value with
 * *@started left as it was. */
int ferry__thread_start(pthread_t *th, bool *started, void *(*fn)(void *), void *arg,
                        const char *name);

/* One step of a spin-wait: tells the core (and a hyperthread sibling) that this is a spin. */
static inline void ferry__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Monotonic wall clock in ns. */
uint64_t ferry__mono_ns(void);
/* The calling thread's id as the OS knows it (Linux: gettid), 0 where there is none. */
long ferry__thread_id(void);
/* The opening of a create call: a zeroed object of @size bytes for the caller's @out, or NULL
 * with the last error set (its text led by @who, the call's name) and *@rc FERRY_EINVAL when
 * @out is NULL, else FERRY_ENOMEM. */
void *ferry__obj_alloc(const void *out, size_t size, const char *who, int *rc);
/* Bounded string copy that always terminates (dst_len > 0). */
void ferry__strlcpy(char *dst, const char *src, size_t dst_len);
/* Copy a filled size-stamped struct @full (@full_size bytes, its size first) into the caller's
 * @dst, whose size field says how much it holds: an older, smaller struct gets the fields it has
 * and nothing past them; a newer, larger one keeps what lies past @full_size. The size field is
 * left as the caller set it, which must be at least sizeof(size_t). */
void ferry__sized_copy_out(void *dst, const void *full, size_t full_size);
/* @s as a JSON string, quotes and escapes included (NULL: null). */
void ferry__json_str(FILE *f, const char *s);
/* Size-stamped struct check: the caller's struct must be at least as large as the first
 * version of it; @min_size is that. */
#define FERRY_SIZE_OK(ptr, min_size) ((ptr) != NULL && (ptr)->size >= (min_size))

/* Append @node to the singly linked list that runs from @head to @tail through the nodes'
 * `next` fields (both NULL: empty). */
#define FERRY__LIST_APPEND(head, tail, node)                                                       \
    do {                                                                                           \
        (node)->next = NULL;                                                                       \
        if ((tail) != NULL)                                                                        \
            (tail)->next = (node);                                                                 \
        else                                                                                       \
            (head) = (node);                                                                       \
        (tail) = (node);                                                                           \
    } while (0)

#endif
