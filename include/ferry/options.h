/* ferry options: every knob lives in one table (src/base/options.def) with a type, a default, a
 * range and a one-line doc. Values come from the defaults, then FERRY_<NAME> environment
 * variables, then explicit ferry_options_set() calls; each is parsed strictly. */
#ifndef FERRY_OPTIONS_H
#define FERRY_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_options ferry_options_t;

typedef enum ferry_option_type {
    FERRY_OPT_SIZE,   /* bytes, with optional K, M, G, T suffix (powers of 1024) */
    FERRY_OPT_UINT,   /* unsigned integer in [min, max] */
    FERRY_OPT_INT,    /* signed integer in [min, max] */
    FERRY_OPT_BOOL,   /* 1/0, true/false, yes/no, on/off */
    FERRY_OPT_ENUM,   /* one of a '|'-separated list of choices */
    FERRY_OPT_STRING, /* free text (a path, an address) */
    FERRY_OPT_DOUBLE  /* decimal number in [min, max] */
} ferry_option_type_t;

typedef struct ferry_option_info {
    const char *name;          /* "chunk_bytes" */
    const char *env;           /* "FERRY_CHUNK_BYTES" */
    ferry_option_type_t type;  /* how the value is parsed */
    const char *default_value; /* as text, parsed like any other value */
    double min, max;           /* accepted range for numeric types */
    const char *choices;       /* "auto|sim|cuda" for FERRY_OPT_ENUM, else NULL */
    const char *doc;           /* one line */
} ferry_option_info_t;

/** Number of options in the table. Thread-safe. */
FERRY_EXTERN size_t ferry_option_count(void);
/** Description of option @p i (0 <= i < count), or NULL. Static storage. Thread-safe. */
FERRY_EXTERN const ferry_option_info_t *ferry_option_at(size_t i);
/** Description of the option called @p name, or NULL when there is none. Thread-safe. */
FERRY_EXTERN const ferry_option_info_t *ferry_option_find(const char *name);

/** Create an options object holding every default. Returns 0 or FERRY_EINVAL (out NULL),
 *  FERRY_ENOMEM. On error *out is untouched. */
FERRY_EXTERN int ferry_options_create(ferry_options_t **out);
/** Free @p o. NULL is a no-op. */
FERRY_EXTERN void ferry_options_destroy(ferry_options_t *o);
/** Copy @p src into a new object. Returns 0, FERRY_EINVAL or FERRY_ENOMEM. */
FERRY_EXTERN int ferry_options_clone(const ferry_options_t *src, ferry_options_t **out);

/** Read every FERRY_<NAME> variable that is set. A set but malformed or out-of-range value is
 *  an error (FERRY_EPARSE or FERRY_ERANGE) whose last-error text names the variable, the
 *  value and what is accepted; @p o is then unchanged. An empty value counts as malformed.
 *  A set FERRY_* variable that names no option (FERRY_DEPT=4) is logged as a warning
 *  ("unknown variable FERRY_DEPT; did you mean FERRY_DEPTH?") and otherwise ignored;
 *  FERRY_DEVICE_INDEX (set by `ferry exec --per-device`), FERRY_TEST_*, FERRY_SOAK_BATCHES and
 *  FERRY_FUZZ_SECONDS (read by ferry's tests and scripts) are not.
 *  Not thread-safe on the same object. */
FERRY_EXTERN int ferry_options_apply_env(ferry_options_t *o);

/** Set option @p name from text @p value, parsed strictly. Returns 0, FERRY_EINVAL (NULL
 *  argument or unknown name), FERRY_EPARSE or FERRY_ERANGE; on error @p o is unchanged. */
FERRY_EXTERN int ferry_options_set(ferry_options_t *o, const char *name, const char *value);

/** Numeric value of @p name (size, uint, int, bool as 0/1, enum as the choice index).
 *  Returns 0, FERRY_EINVAL (unknown name, NULL, or a string/double option). */
FERRY_EXTERN int ferry_options_get_i64(const ferry_options_t *o, const char *name, int64_t *out);
/** Value of a FERRY_OPT_DOUBLE option. Returns 0 or FERRY_EINVAL. */
FERRY_EXTERN int ferry_options_get_double(const ferry_options_t *o, const char *name, double *out);
/** Text of a string or enum option, owned by @p o and valid until it changes; NULL for an
 *  unknown name or a numeric option. */
FERRY_EXTERN const char *ferry_options_get_str(const ferry_options_t *o, const char *name);

/** Parse a byte count: decimal digits with an optional K, M, G or T suffix (1024-based, an
 *  optional trailing "iB" or "B" accepted: "8M", "8MiB", "4096"). No sign, no spaces, no
 *  fraction. Returns 0, FERRY_EINVAL (NULL), FERRY_EPARSE or FERRY_ERANGE (overflow). */
FERRY_EXTERN int ferry_parse_size(const char *text, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
