/* Shared CLI helpers: errors and exit codes, flag parsing, formatting, JSON strings. */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

int cli_flag_value(cli_args_t *a, const char *name, const char **value)
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

bool cli_flag(cli_args_t *a, const char *name)
{
    const char *arg = a->argv[a->i];
    if (strncmp(arg, "--", 2) == 0 && strcmp(arg + 2, name) == 0) {
        a->i++;
        return true;
    }
    return false;
}

int cli_option_flag(cli_args_t *a, ferry_options_t *o)
{
    for (size_t k = 0; k < ferry_option_count(); k++) {
        const ferry_option_info_t *inf = ferry_option_at(k);
        char flag[64];
        size_t j = 0;
        for (; inf->name[j] && j + 1 < sizeof(flag); j++)
            flag[j] = inf->name[j] == '_' ? '-' : inf->name[j];
        flag[j] = '\0';
        const char *v = NULL;
        int r = cli_flag_value(a, flag, &v);
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

void cli_json_begin(FILE *f, const char *command)
{
    char when[32] = "";
    struct timespec ts;
    struct tm tm;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0 && gmtime_r(&ts.tv_sec, &tm) != NULL)
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "{\"command\":");
    cli_json_str(f, command);
    fprintf(f, ",\"ferry_version\":");
    cli_json_str(f, ferry_version_string());
    fprintf(f, ",\"time_utc\":");
    cli_json_str(f, when);
}

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

bool cli_color(void)
{
    const char *nc = getenv("NO_COLOR");
    return isatty(STDOUT_FILENO) && (nc == NULL || nc[0] == '\0');
}
