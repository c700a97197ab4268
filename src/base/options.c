/* The options table (options.def) turned into data: typed values, strict parsing with units
 * and ranges, FERRY_<NAME> environment overrides, and lookup by name. A bad value is always an
 * error that names the option (or variable), the value, and what is accepted. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

extern char **environ;

static const ferry_option_info_t option_table[FERRY__OPT_COUNT] = {
#define FERRY_OPTION(name, type, def, min, max, choices, doc)                                      \
    {#name, "FERRY_" #name, FERRY_OPT_##type, def, (double)(min), (double)(max), choices, doc},
#include "base/options.def"
#undef FERRY_OPTION
};

/* Upper-cased environment names, built once. */
static char env_names[FERRY__OPT_COUNT][48];
static ferry_option_info_t infos[FERRY__OPT_COUNT];
static atomic_bool infos_ready;

typedef union opt_value {
    int64_t i;
    uint64_t u;
    double d;
} opt_value_t;

struct ferry_options {
    opt_value_t v[FERRY__OPT_COUNT];
    char *s[FERRY__OPT_COUNT];    /* string and enum text */
    bool given[FERRY__OPT_COUNT]; /* set by ferry_options_set or the environment */
};

static void build_infos(void)
{
    if (atomic_load_explicit(&infos_ready, memory_order_acquire))
        return;
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++) {
        infos[i] = option_table[i];
        const char *n = option_table[i].env;
        size_t k = 0;
        for (; n[k] && k + 1 < sizeof(env_names[i]); k++)
            env_names[i][k] = (char)toupper((unsigned char)n[k]);
        env_names[i][k] = '\0';
        infos[i].env = env_names[i];
    }
    atomic_store_explicit(&infos_ready, true, memory_order_release);
}

size_t ferry_option_count(void)
{
    return FERRY__OPT_COUNT;
}

const ferry_option_info_t *ferry_option_at(size_t i)
{
    build_infos();
    return i < FERRY__OPT_COUNT ? &infos[i] : NULL;
}

static int find_index(const char *name)
{
    if (name == NULL)
        return -1;
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++)
        if (strcmp(option_table[i].name, name) == 0)
            return (int)i;
    return -1;
}

const ferry_option_info_t *ferry_option_find(const char *name)
{
    int i = find_index(name);
    return i < 0 ? NULL : ferry_option_at((size_t)i);
}

static int choice_index(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    int idx = 0;
    const char *c = choices;
    while (*c) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == vl && strncmp(c, v, len) == 0)
            return idx;
        idx++;
        if (!bar)
            break;
        c = bar + 1;
    }
    return -1;
}

/* A number for option @inf (size, uint, int or double) into @out; @as_double is its value
 * for the range check. */
static int parse_number(const ferry_option_info_t *inf, const char *text, opt_value_t *out,
                        double *as_double)
{
    int rc;
    switch (inf->type) {
    case FERRY_OPT_SIZE:
    case FERRY_OPT_UINT:
        rc = inf->type == FERRY_OPT_SIZE ? ferry_parse_size(text, &out->u)
                                         : ferry__parse_u64(text, &out->u);
        *as_double = (double)out->u;
        return rc;
    case FERRY_OPT_INT:
        rc = ferry__parse_i64(text, &out->i);
        *as_double = (double)out->i;
        return rc;
    default:
        rc = ferry__parse_double(text, &out->d);
        *as_double = out->d;
        return rc;
    }
}

/* Why a number for @inf was refused (@rc): the kind of number and its range. */
static int number_error(int rc, const ferry_option_info_t *inf, const char *src, const char *text,
                        bool no_max)
{
    char want[128];
    if (inf->type == FERRY_OPT_SIZE)
        snprintf(want, sizeof(want),
                 "a byte count from %.0f to %.0f, with an optional K, M or G suffix (e.g. 8M)",
                 inf->min, inf->max);
    else if (inf->type == FERRY_OPT_DOUBLE)
        snprintf(want, sizeof(want), "a decimal number from %g to %g (e.g. 0.5 or 1e-2)", inf->min,
                 inf->max);
    else if (no_max) /* the double 2^64-1 rounds up to 2^64: print the largest uint64_t itself */
        snprintf(want, sizeof(want), "an integer from %.0f to %llu", inf->min,
                 (unsigned long long)UINT64_MAX);
    else
        snprintf(want, sizeof(want), "an integer from %.0f to %.0f", inf->min, inf->max);
    return ferry__error(rc, "%s: '%s' is not accepted: %s", src, text, want);
}

/* Parse @text for option @i into @val / @str. @src names the source for messages ("option
 * chunk_bytes" or "environment variable FERRY_CHUNK_BYTES"). */
static int parse_value(size_t i, const char *text, const char *src, opt_value_t *val, char **str)
{
    const ferry_option_info_t *inf = &option_table[i];
    *str = NULL;
    switch (inf->type) {
    case FERRY_OPT_SIZE:
    case FERRY_OPT_UINT:
    case FERRY_OPT_INT:
    case FERRY_OPT_DOUBLE: {
        opt_value_t v = {0};
        double d = 0;
        /* A uint option up to UINT64_MAX has no upper bound a double can test. */
        bool no_max = inf->type == FERRY_OPT_UINT && inf->max >= 1.8e19;
        int rc = parse_number(inf, text, &v, &d);
        if (rc == 0 && (d < inf->min || (!no_max && d > inf->max)))
            rc = FERRY_ERANGE;
        if (rc != 0)
            return number_error(rc, inf, src, text, no_max);
        *val = v;
        return 0;
    }
    case FERRY_OPT_BOOL: {
        static const char *const yes[] = {"1", "true", "yes", "on"};
        static const char *const no[] = {"0", "false", "no", "off"};
        for (int k = 0; k < 4; k++) {
            if (strcmp(text, yes[k]) == 0) {
                val->i = 1;
                return 0;
            }
            if (strcmp(text, no[k]) == 0) {
                val->i = 0;
                return 0;
            }
        }
        return ferry__error(
            FERRY_EPARSE, "%s: '%s' is not accepted: 1/0, true/false, yes/no or on/off", src, text);
    }
    case FERRY_OPT_ENUM: {
        int k = choice_index(inf->choices, text);
        if (k < 0)
            return ferry__error(FERRY_EPARSE, "%s: '%s' is not accepted: one of %s", src, text,
                                inf->choices);
        val->i = k;
        *str = strdup(text);
        return *str ? 0 : ferry__error(FERRY_ENOMEM, "%s: out of memory", src);
    }
    case FERRY_OPT_STRING:
        *str = strdup(text);
        return *str ? 0 : ferry__error(FERRY_ENOMEM, "%s: out of memory", src);
    }
    return ferry__error(FERRY_EINVAL, "%s: unknown option type", src);
}

int ferry_options_create(ferry_options_t **out)
{
    int rc = 0;
    ferry_options_t *o = ferry__obj_alloc(out, sizeof(*o), "ferry_options_create", &rc);
    if (o == NULL)
        return rc;
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++) {
        char src[80];
        snprintf(src, sizeof(src), "default of option %s", option_table[i].name);
        rc = parse_value(i, option_table[i].default_value, src, &o->v[i], &o->s[i]);
        if (rc != 0) {
            ferry_options_destroy(o);
            return rc;
        }
    }
    *out = o;
    return 0;
}

void ferry_options_destroy(ferry_options_t *o)
{
    if (o == NULL)
        return;
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++)
        free(o->s[i]);
    free(o);
}

int ferry_options_clone(const ferry_options_t *src, ferry_options_t **out)
{
    if (src == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_options_clone: NULL argument");
    ferry_options_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_options_clone: out of memory");
    *o = *src;
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++) {
        o->s[i] = NULL;
        if (src->s[i] != NULL && (o->s[i] = strdup(src->s[i])) == NULL) {
            ferry_options_destroy(o);
            return ferry__error(FERRY_ENOMEM, "ferry_options_clone: out of memory");
        }
    }
    *out = o;
    return 0;
}

static void store(ferry_options_t *o, size_t i, opt_value_t v, char *s)
{
    free(o->s[i]);
    o->s[i] = s;
    o->v[i] = v;
    o->given[i] = true;
}

int ferry_options_set(ferry_options_t *o, const char *name, const char *value)
{
    if (o == NULL || name == NULL || value == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_options_set: NULL argument");
    int i = find_index(name);
    if (i < 0)
        return ferry__error(FERRY_EINVAL, "unknown option '%s' (see `ferry options`)", name);
    char src[80];
    snprintf(src, sizeof(src), "option %s", name);
    opt_value_t v;
    char *s = NULL;
    int rc = parse_value((size_t)i, value, src, &v, &s);
    if (rc != 0)
        return rc;
    store(o, (size_t)i, v, s);
    return 0;
}

/* Variables under the FERRY_ prefix that are not options: FERRY_DEVICE_INDEX, which `ferry exec
 * --per-device` gives each child (a ferry itself, often), and those ferry's own tests and
 * scripts read. The unknown-variable warning leaves them alone. A trailing '*' matches a
 * prefix. */
static const char *const env_not_options[] = {"FERRY_DEVICE_INDEX", "FERRY_TEST_*",
                                              "FERRY_SOAK_BATCHES", "FERRY_FUZZ_SECONDS"};

static bool env_is_exempt(const char *name, size_t len)
{
    for (size_t k = 0; k < sizeof(env_not_options) / sizeof(env_not_options[0]); k++) {
        const char *x = env_not_options[k];
        size_t xl = strlen(x);
        if (x[xl - 1] == '*' ? len >= xl - 1 && strncmp(name, x, xl - 1) == 0
                             : len == xl && strncmp(name, x, len) == 0)
            return true;
    }
    return false;
}

/* Edit distance (insertions, deletions, substitutions) between a[0..al) and b, at most 47
 * characters each: enough to tell a typo from another word. */
static size_t edit_distance(const char *a, size_t al, const char *b)
{
    size_t bl = strlen(b);
    if (al > 47 || bl > 47)
        return SIZE_MAX;
    size_t row[48];
    for (size_t j = 0; j <= bl; j++)
        row[j] = j;
    for (size_t i = 1; i <= al; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= bl; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[bl];
}

/* A FERRY_* variable that names no option is most likely a misspelt one, whose value would
 * otherwise be ignored without a word: warn, with the nearest option's variable when it is
 * close (at most 2 edits, or a third of the name after FERRY_). */
static void warn_unknown_env(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "FERRY_", 6) != 0 || eq == NULL)
            continue;
        size_t len = (size_t)(eq - *e);
        bool known = false;
        for (size_t i = 0; i < FERRY__OPT_COUNT && !known; i++)
            known = strlen(env_names[i]) == len && strncmp(env_names[i], *e, len) == 0;
        if (known || env_is_exempt(*e, len))
            continue;
        size_t best = SIZE_MAX, at = 0;
        for (size_t i = 0; i < FERRY__OPT_COUNT; i++) {
            size_t d = edit_distance(*e, len, env_names[i]);
            if (d < best) {
                best = d;
                at = i;
            }
        }
        size_t limit = (len - 6) / 3 > 2 ? (len - 6) / 3 : 2;
        if (best <= limit)
            ferry_log(FERRY_LOG_WARN, "options", "unknown variable %.*s; did you mean %s?",
                      (int)len, *e, env_names[at]);
        else
            ferry_log(FERRY_LOG_WARN, "options",
                      "unknown variable %.*s: no ferry option reads it (see `ferry options`)",
                      (int)len, *e);
    }
}

int ferry_options_apply_env(ferry_options_t *o)
{
    if (o == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_options_apply_env: NULL options");
    build_infos();
    opt_value_t vals[FERRY__OPT_COUNT];
    char *strs[FERRY__OPT_COUNT] = {0};
    bool set[FERRY__OPT_COUNT] = {0};
    int rc = 0;
    /* Parse everything first so that a bad variable leaves @o unchanged. */
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++) {
        const char *e = getenv(env_names[i]);
        if (e == NULL)
            continue;
        char src[96];
        snprintf(src, sizeof(src), "environment variable %.47s", env_names[i]);
        if (*e == '\0') {
            rc = ferry__error(FERRY_EPARSE, "%s is set but empty (unset it, or give a value: %s)",
                              env_names[i], option_table[i].doc);
            goto out_free;
        }
        rc = parse_value(i, e, src, &vals[i], &strs[i]);
        if (rc != 0)
            goto out_free;
        set[i] = true;
    }
    warn_unknown_env();
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++)
        if (set[i]) {
            store(o, i, vals[i], strs[i]);
            strs[i] = NULL;
        }
out_free:
    for (size_t i = 0; i < FERRY__OPT_COUNT; i++)
        free(strs[i]);
    return rc;
}

static bool is_numeric(ferry_option_type_t t)
{
    return t != FERRY_OPT_STRING && t != FERRY_OPT_DOUBLE;
}

int ferry_options_get_i64(const ferry_options_t *o, const char *name, int64_t *out)
{
    int i = find_index(name);
    if (o == NULL || out == NULL || i < 0 || !is_numeric(option_table[i].type))
        return ferry__error(FERRY_EINVAL, "ferry_options_get_i64: no integer option '%s'",
                            name ? name : "(null)");
    *out = o->v[i].i;
    return 0;
}

int ferry_options_get_double(const ferry_options_t *o, const char *name, double *out)
{
    int i = find_index(name);
    if (o == NULL || out == NULL || i < 0 || option_table[i].type != FERRY_OPT_DOUBLE)
        return ferry__error(FERRY_EINVAL, "ferry_options_get_double: no number option '%s'",
                            name ? name : "(null)");
    *out = o->v[i].d;
    return 0;
}

const char *ferry_options_get_str(const ferry_options_t *o, const char *name)
{
    int i = find_index(name);
    if (o == NULL || i < 0)
        return NULL;
    if (option_table[i].type != FERRY_OPT_STRING && option_table[i].type != FERRY_OPT_ENUM)
        return NULL;
    return o->s[i] ? o->s[i] : "";
}

bool ferry__opt_given(const ferry_options_t *o, ferry__opt_id_t id)
{
    return o->given[id];
}

int64_t ferry__opt_i64(const ferry_options_t *o, ferry__opt_id_t id)
{
    return o->v[id].i;
}
double ferry__opt_double(const ferry_options_t *o, ferry__opt_id_t id)
{
    return o->v[id].d;
}
const char *ferry__opt_str(const ferry_options_t *o, ferry__opt_id_t id)
{
    return o->s[id] ? o->s[id] : "";
}

char *ferry__options_text(const ferry_options_t *o, const char *const *skip, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *t = malloc(cap);
    for (int i = 0; t != NULL && i < FERRY__OPT_COUNT; i++) {
        const ferry_option_info_t *oi = &option_table[i];
        bool left_out = !o->given[i];
        for (const char *const *k = skip; !left_out && k != NULL && *k != NULL; k++)
            left_out = strcmp(*k, oi->name) == 0;
        if (left_out)
            continue;
        char v[1024];
        if (oi->type == FERRY_OPT_STRING || oi->type == FERRY_OPT_ENUM)
            snprintf(v, sizeof(v), "%s", o->s[i] ? o->s[i] : "");
        else if (oi->type == FERRY_OPT_DOUBLE)
            snprintf(v, sizeof(v), "%.17g", o->v[i].d);
        else
            snprintf(v, sizeof(v), "%lld", (long long)o->v[i].i);
        if (v[0] == '\0')
            continue;
        size_t need = strlen(oi->name) + strlen(v) + 2;
        while (n + need + 1 > cap) {
            char *g = realloc(t, cap *= 2);
            if (g == NULL) {
                free(t);
                return NULL;
            }
            t = g;
        }
        n += (size_t)snprintf(t + n, cap - n, "%s=%s\n", oi->name, v);
    }
    if (t != NULL)
        *len = n;
    return t;
}

int ferry__options_apply_text(ferry_options_t *o, const char *text, size_t len)
{
    char line[1100];
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        size_t n = j - i < sizeof(line) - 1 ? j - i : sizeof(line) - 1;
        memcpy(line, text + i, n);
        line[n] = '\0';
        char *eq = strchr(line, '=');
        if (eq != NULL) {
            *eq = '\0';
            int rc = ferry_options_set(o, line, eq + 1);
            if (rc != 0)
                return rc;
        }
        i = j + 1;
    }
    return 0;
}
