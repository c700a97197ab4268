/* `ferry env`: prints the snippet that sets CUDA_DEVICE_MAX_CONNECTIONS (and optionally
 * CUDA_DEVICE_MAX_COPY_CONNECTIONS) for a shell, /etc/profile.d, a systemd unit, docker run or
 * a Kubernetes container. CUDA reads these variables once, at cuInit, so they have to be in the
 * environment before a process starts; this command only writes text, it changes nothing. */
#include <stdarg.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "ferry/connections.h"

static const char *const formats[] = {"sh", "profile.d", "systemd", "docker", "k8s"};
#define FORMAT_COUNT (sizeof(formats) / sizeof(formats[0]))
#define FORMAT_LIST  "sh, profile.d, systemd, docker, k8s"

typedef struct var {
    const char *name;
    unsigned value;
} var_t;

/* The snippet is built in memory so that --json can carry it as one string. Two variables in
 * the longest format take a few hundred bytes; the buffer leaves ample room. */
typedef struct text {
    char buf[2048];
    size_t len;
} text_t;

static void add(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < sizeof(t->buf) - t->len ? (size_t)n : sizeof(t->buf) - t->len - 1;
}

static void snippet(text_t *t, const char *format, const var_t *v, size_t nv)
{
    if (strcmp(format, "profile.d") == 0)
        add(t, "# /etc/profile.d/cuda-connections.sh: written by ferry env\n"
               "# Read by login shells. CUDA reads each variable once, at cuInit, so processes\n"
               "# already running keep their value: start them again from a new login.\n");
    if (strcmp(format, "systemd") == 0)
        add(t,
            "# /etc/systemd/system/<unit>.service.d/cuda-connections.conf: written by ferry env\n"
            "# then: systemctl daemon-reload && systemctl restart <unit>\n"
            "[Service]\n");
    if (strcmp(format, "k8s") == 0)
        add(t, "env:\n");
    for (size_t i = 0; i < nv; i++) {
        if (strcmp(format, "sh") == 0 || strcmp(format, "profile.d") == 0)
            add(t, "export %s=%u\n", v[i].name, v[i].value);
        else if (strcmp(format, "systemd") == 0)
            add(t, "Environment=%s=%u\n", v[i].name, v[i].value);
        else if (strcmp(format, "docker") == 0)
            add(t, "%s-e %s=%u%s", i ? " " : "", v[i].name, v[i].value, i + 1 < nv ? "" : "\n");
        else /* Kubernetes env values are strings: an unquoted 16 is refused as an integer. */
            add(t, "  - name: %s\n    value: \"%u\"\n", v[i].name, v[i].value);
    }
}

static int usage(void)
{
    printf("usage: ferry env --connections N [--copy-connections M]\n"
           "                 --format sh|profile.d|systemd|docker|k8s [--json]\n\n"
           "Print the snippet that sets CUDA_DEVICE_MAX_CONNECTIONS=N (and, with\n"
           "--copy-connections, CUDA_DEVICE_MAX_COPY_CONNECTIONS=M) for a shell, an\n"
           "/etc/profile.d file, a systemd drop-in, `docker run` or a Kubernetes container.\n"
           "N and M are integers 1..32, CUDA's documented range. CUDA reads the variables\n"
           "once, at cuInit: set them before the process starts. --json gives the variables\n"
           "and the snippet to scripts. Nothing is changed on this machine.\n");
    return CLI_OK;
}

typedef struct env_flags {
    const char *conn, *copy, *format;
    bool json;
} env_flags_t;

static const cli_flag_def_t env_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, env_flags_t, json, "the variables and the snippet as JSON")},
    {CLI_FLAG("connections", CLI_STRING, env_flags_t, conn, "CUDA_DEVICE_MAX_CONNECTIONS, 1..32")},
    {CLI_FLAG("copy-connections", CLI_STRING, env_flags_t, copy,
              "CUDA_DEVICE_MAX_COPY_CONNECTIONS, 1..32")},
    {CLI_FLAG("format", CLI_STRING, env_flags_t, format, FORMAT_LIST)},
    {NULL},
};

int cmd_env(int argc, char **argv)
{
    const char *cmd = "env";
    env_flags_t fl = {.json = false};
    cli_parser_t p = {.cmd = cmd, .flags = {env_flags}, .into = &fl};
    int prc = cli_parse(&p, argc, argv, 1);
    if (prc == CLI_HELP)
        return usage();
    if (prc != CLI_OK)
        return prc;
    const char *conn = fl.conn, *copy = fl.copy, *format = fl.format;
    bool json = fl.json;

    if (conn == NULL)
        return cli_usage_error(cmd, "--connections N is required (an integer 1..32)");
    var_t vars[2] = {{"CUDA_DEVICE_MAX_CONNECTIONS", 0}, {"CUDA_DEVICE_MAX_COPY_CONNECTIONS", 0}};
    size_t nv = 1;
    if (ferry_connections_parse("--connections", conn, &vars[0].value) != 0)
        return cli_usage_error(cmd, "%s", ferry_last_error());
    if (copy != NULL) {
        if (ferry_connections_parse("--copy-connections", copy, &vars[1].value) != 0)
            return cli_usage_error(cmd, "%s", ferry_last_error());
        nv = 2;
    }

    if (format == NULL)
        return cli_usage_error(cmd, "--format is required (accepted: " FORMAT_LIST ")");
    size_t f = 0;
    while (f < FORMAT_COUNT && strcmp(format, formats[f]) != 0)
        f++;
    if (f == FORMAT_COUNT)
        return cli_usage_error(cmd, "unknown format '%s' (accepted: " FORMAT_LIST ")", format);

    text_t t = {.len = 0};
    snippet(&t, formats[f], vars, nv);
    if (!json) {
        fputs(t.buf, stdout);
    } else {
        json_t j;
        json_command_begin(&j, stdout, "env");
        json_key(&j, "variables");
        json_object_begin(&j);
        for (size_t i = 0; i < nv; i++) {
            char value[16];
            snprintf(value, sizeof(value), "%u", vars[i].value);
            json_key_str(&j, vars[i].name, value);
        }
        json_object_end(&j);
        json_key_str(&j, "format", formats[f]);
        json_key_str(&j, "snippet", t.buf);
        json_end(&j);
    }
    /* The snippet is usually redirected into a file under /etc: a full disk must not pass for
     * success with half a file written. */
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail(cmd, "writing the snippet to stdout failed");
    return CLI_OK;
}
