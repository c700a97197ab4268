/* Shared CLI helpers: errors and exit codes, the flag tables' parser, formatting. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferry %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'ferry %s --help'.\n", cmd);
    va_end(ap);
    return CLI_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferry %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_FAIL;
}

/* An argument cursor over argv. */
typedef struct cli_args {
    int argc, i;
    char **argv;
    const char *cmd;
} cli_args_t;

/* If argv[i] is --@name (or --@name=...), set *value to its value (consuming the next argument
 * when needed) and return 1; 0 when it is another flag; -1 when the value is missing (an error
 * was printed). */
static int flag_value(cli_args_t *a, const char *name, const char **value)
{
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, n) != 0)
        return 0;
    if (arg[2 + n] == '=') {
        *value = arg + 3 + n;
        a->i++;
        return 1;
    }
    if (arg[2 + n] != '\0')
        return 0;
    if (a->i + 1 >= a->argc) {
        cli_usage_error(a->cmd, "option --%s needs a value", name);
        return -1;
    }
    *value = a->argv[a->i + 1];
    a->i += 2;
    return 1;
}

/* The same for -X VALUE and -XVALUE. */
static int short_value(cli_args_t *a, const cli_flag_def_t *d, const char **value)
{
    const char *arg = a->argv[a->i];
    if (d->short_name == 0 || arg[0] != '-' || arg[1] != d->short_name)
        return 0;
    if (arg[2] != '\0') {
        *value = arg + 2;
        a->i++;
        return 1;
    }
    if (a->i + 1 >= a->argc) {
        cli_usage_error(a->cmd, "-%c needs %s", d->short_name,
                        d->value_noun ? d->value_noun : "a value");
        return -1;
    }
    *value = a->argv[a->i + 1];
    a->i += 2;
    return 1;
}

/* If argv[i] is --<option name with dashes>, apply it to @o. Returns 1 when applied, 0 when
 * not an option flag, -1 on a bad value (message printed). */
static int option_flag(cli_args_t *a, ferry_options_t *o)
{
    for (size_t k = 0; k < ferry_option_count(); k++) {
        const ferry_option_info_t *inf = ferry_option_at(k);
        char flag[64];
        size_t j = 0;
        for (; inf->name[j] && j + 1 < sizeof(flag); j++)
            flag[j] = inf->name[j] == '_' ? '-' : inf->name[j];
        flag[j] = '\0';
        const char *v = NULL;
        int r = flag_value(a, flag, &v);
        if (r < 0)
            return -1;
        if (r == 0)
            continue;
        int rc = ferry_options_set(o, inf->name, v);
        if (rc != 0) {
            cli_usage_error(a->cmd, "--%s: %s", flag, ferry_last_error());
            return -1;
        }
        return 1;
    }
    return 0;
}

/* Store @v (NULL for a switch) where @d says, then run its check. */
static int store(const char *cmd, const cli_flag_def_t *d, const char *v, void *into)
{
    char *at = (char *)into + d->offset;
    int rc = CLI_OK;
    switch (d->kind) {
    case CLI_SWITCH: *(bool *)at = true; break;
    case CLI_STRING: *(const char **)at = v; break;
    case CLI_UINT:
        rc = cli_parse_uint(cmd, d->name, v, d->lo, d->hi, (unsigned long long *)at);
        break;
    case CLI_SIZE: rc = cli_parse_size(cmd, d->name, v, (unsigned long long *)at); break;
    case CLI_CUSTOM: break;
    }
    if (rc != CLI_OK)
        return CLI_USAGE;
    return d->check ? d->check(cmd, v, into) : CLI_OK;
}

/* argv[a->i] against one table: 1 taken, 0 not this table's, -1 usage error (printed). */
static int table_flag(cli_args_t *a, const cli_flag_def_t *t, void *into)
{
    for (const cli_flag_def_t *d = t; d != NULL && d->name != NULL; d++) {
        const char *arg = a->argv[a->i], *v = NULL;
        int r;
        if (d->kind == CLI_SWITCH) {
            r = strncmp(arg, "--", 2) == 0 && strcmp(arg + 2, d->name) == 0;
            a->i += r;
        } else if ((r = flag_value(a, d->name, &v)) == 0) {
            r = short_value(a, d, &v);
        }
        if (r < 0)
            return -1;
        if (r > 0)
            return store(a->cmd, d, v, into) == CLI_OK ? 1 : -1;
    }
    return 0;
}

int cli_parse(cli_parser_t *p, int argc, char **argv, int first)
{
    cli_args_t a = {.argc = argc, .argv = argv, .i = first, .cmd = p->cmd};
    p->rest = -1;
    while (a.i < argc) {
        const char *arg = argv[a.i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return CLI_HELP;
        if (p->command_after_dashdash && strcmp(arg, "--") == 0) {
            p->rest = a.i + 1;
            return CLI_OK;
        }
        int r = 0;
        for (size_t t = 0; r == 0 && t < 2; t++)
            r = table_flag(&a, p->flags[t], p->into);
        if (r == 0 && p->options != NULL)
            r = option_flag(&a, p->options);
        if (r < 0)
            return CLI_USAGE;
        if (r > 0)
            continue;
        if (p->operand != NULL && *p->operand == NULL && (arg[0] != '-' || arg[1] == '\0')) {
            *p->operand = arg;
            a.i++;
            continue;
        }
        if (p->command_after_dashdash && arg[0] != '-')
            return cli_usage_error(p->cmd, "'%s': put '--' before the command to run", arg);
        return cli_usage_error(p->cmd, "unknown argument '%s'%s%s", arg, p->context ? " " : "",
                               p->context ? p->context : "");
    }
    return CLI_OK;
}

int cli_parse_options(cli_parser_t *p, int argc, char **argv, int first, ferry_options_t **out)
{
    *out = NULL;
    int rc = cli_options(p->cmd, &p->options);
    if (rc != CLI_OK)
        return rc;
    rc = cli_parse(p, argc, argv, first);
    if (rc != CLI_OK) {
        ferry_options_destroy(p->options);
        return rc;
    }
    *out = p->options;
    return CLI_OK;
}

int cli_parse_uint(const char *cmd, const char *flag, const char *v, unsigned long long lo,
                   unsigned long long hi, unsigned long long *out)
{
    char *end = NULL;
    if (v[0] < '0' || v[0] > '9')
        return cli_usage_error(cmd, "--%s '%s': expected an integer from %llu to %llu", flag, v, lo,
                               hi);
    unsigned long long x = strtoull(v, &end, 10);
    if (*end != '\0' || x < lo || x > hi)
        return cli_usage_error(cmd, "--%s '%s': expected an integer from %llu to %llu", flag, v, lo,
                               hi);
    *out = x;
    return 0;
}

int cli_parse_size(const char *cmd, const char *flag, const char *v, unsigned long long *out)
{
    uint64_t x = 0;
    if (ferry_parse_size(v, &x) != 0)
        return cli_usage_error(cmd, "--%s: %s", flag, ferry_last_error());
    *out = x;
    return 0;
}

int cli_options(const char *cmd, ferry_options_t **out)
{
    ferry_options_t *o = NULL;
    if (ferry_options_create(&o) != 0)
        return cli_fail(cmd, "%s", ferry_last_error());
    /* A bad variable is the same mistake as the same bad flag: a usage error, exit 2. */
    if (ferry_options_apply_env(o) != 0) {
        ferry_options_destroy(o);
        return cli_usage_error(cmd, "%s", ferry_last_error());
    }
    *out = o;
    return CLI_OK;
}

static void quiet_sink(ferry_log_level_t level, const char *subsystem, const char *line, void *arg)
{
    (void)subsystem;
    (void)arg;
    if (level == FERRY_LOG_ERROR)
        fprintf(stderr, "%s\n", line);
}

void cli_quiet_logs(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return;
        if (strcmp(argv[i], "--quiet") == 0) {
            ferry_set_log_handler(quiet_sink, NULL);
            return;
        }
    }
}

const char *cli_bytes(unsigned long long b, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", b);
    else
        snprintf(buf, len, "%.*f %s", v < 10 ? 2 : 1, v, units[u]);
    return buf;
}

bool cli_color(void)
{
    const char *nc = getenv("NO_COLOR");
    return isatty(STDOUT_FILENO) && (nc == NULL || nc[0] == '\0');
}

static int path_error(const char *cmd, const char *flag, const char *path, const char *why,
                      const char *example)
{
    return cli_usage_error(cmd,
                           "--%s '%s': %s; accepted: a file path (e.g. %s) in an existing, "
                           "writable directory",
                           flag, path, why, example);
}

int cli_check_out_path(const char *cmd, const char *flag, const char *path, const char *example)
{
    size_t n = strlen(path);
    if (n == 0)
        return path_error(cmd, flag, path, "empty path", example);
    struct stat sb;
    if (path[n - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return path_error(cmd, flag, path, "is a directory, not a file", example);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return path_error(cmd, flag, path, "exists and is not a regular file", example);
    char *dir = strdup(path);
    if (dir == NULL)
        return cli_fail(cmd, "out of memory");
    char *slash = strrchr(dir, '/');
    const char *d = slash == NULL ? "." : slash == dir ? "/" : (*slash = '\0', dir);
    char why[4200];
    why[0] = '\0';
    if (stat(d, &sb) != 0)
        snprintf(why, sizeof(why), "directory '%s' %s", d,
                 errno == ENOENT ? "does not exist" : strerror(errno));
    else if (!S_ISDIR(sb.st_mode))
        snprintf(why, sizeof(why), "'%s' is not a directory", d);
    else if (access(d, W_OK | X_OK) != 0)
        snprintf(why, sizeof(why), "directory '%s' is not writable (%s)", d, strerror(errno));
    free(dir);
    return why[0] ? path_error(cmd, flag, path, why, example) : CLI_OK;
}
