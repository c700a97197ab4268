/* ferry connections: what this process's environment says about CUDA's hardware work queues and
 * how CUDA will read it; --measure times the connections law (FACTS.md) in one child process per
 * value, since CUDA reads the variable once, at cuInit; --recommend gives a value with reasons. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "ferry/connections.h"

extern char **environ;

#define MAX_VALUES  32
#define KERNEL_A_NS 2000000ull /* FACTS.md: kernel A 2 ms, one block */
#define KERNEL_B_NS 100000ull  /* kernel B 0.1 ms */

static int usage(void)
{
    printf(
        "usage: ferry connections [--json]\n"
        "       ferry connections --measure [--values 1,2,4,8,16,32] [--streams N] [--reps N]\n"
        "                         [--backend auto|sim|cuda] [--json]\n"
        "       ferry connections --recommend --streams N [--ordering strict] [--json]\n\n"
        "CUDA_DEVICE_MAX_CONNECTIONS sets the hardware work queues of each CUDA context (1..32,\n"
        "default 8). CUDA reads it once, at cuInit, for every GPU of the process.\n\n"
        "  (no flag)        what the environment says and how CUDA reads it\n"
        "  --measure        time N streams, each given kernel A (2 ms) then B (0.1 ms), issued\n"
        "                   stream by stream: a x ceil(N / queues). One child process per value.\n"
        "  --values LIST    values to measure (each 1..32); default 1,2,4,8,16,32\n"
        "  --streams N      streams of the pattern (1..64, default 32); with --recommend, the\n"
        "                   streams your process keeps active per GPU\n"
        "  --reps N         repetitions per value, median reported (1..100, default 5)\n"
        "  --recommend      a value for --streams N, with its reasons\n"
        "  --ordering strict  launch order must decide which stream's kernel starts first\n"
        "  --json           one JSON object\n\n"
        "Apply a value with `ferry exec --connections N -- CMD` or `ferry env`.\n"
        "docs/connections.md explains the law, the memory cost and the popular claims that are "
        "false.\n");
    return CLI_OK;
}

/* ---- report -------------------------------------------------------------------------------- */

static const char *status_word(ferry_conn_status_t s)
{
    switch (s) {
    case FERRY_CONN_UNSET: return "unset";
    case FERRY_CONN_VALID: return "valid";
    case FERRY_CONN_UNDOCUMENTED: return "undocumented";
    case FERRY_CONN_IGNORED: return "ignored";
    default: return "malformed";
    }
}

static bool mps_present(char *where, size_t len)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct stat sb;
    if (dir != NULL && dir[0]) {
        snprintf(where, len, "CUDA_MPS_PIPE_DIRECTORY=%s", dir);
        return true;
    }
    /* nvidia-cuda-mps-control's default pipe directory */
    if (stat("/tmp/nvidia-mps", &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(where, len, "/tmp/nvidia-mps exists (an MPS control daemon's default pipes)");
        return true;
    }
    snprintf(where, len, "no CUDA_MPS_PIPE_DIRECTORY, no /tmp/nvidia-mps");
    return false;
}

static void json_var(json_t *j, const char *name, const char *raw, const ferry_conn_reading_t *r)
{
    json_key(j, name);
    json_object_begin(j);
    json_key(j, "value");
    json_str_or_null(j, raw);
    json_key_str(j, "status", status_word(r->status));
    json_key_uint(j, "effective", r->effective);
    json_key_bool(j, "measured", r->measured);
    json_key_str(j, "note", r->note);
    json_object_end(j);
}

static int report(bool json)
{
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    const char *copy = getenv("CUDA_DEVICE_MAX_COPY_CONNECTIONS");
    const char *scale = getenv("CUDA_SCALE_LAUNCH_QUEUES");
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    const char *fconn = getenv("FERRY_CONNECTIONS");
    const char *fcopy = getenv("FERRY_COPY_CONNECTIONS");
    ferry_conn_reading_t rc, rk;
    ferry_connections_read(conn, &rc);
    ferry_connections_read(copy, &rk);
    char mps[160];
    bool has_mps = mps_present(mps, sizeof(mps));
    bool blocks = blocking != NULL && strcmp(blocking, "1") == 0;
    /* Measured: without its own variable, the copy queues follow CUDA_DEVICE_MAX_CONNECTIONS
     * (each connection cost 256 KiB = 64 + 192 on the H200). */
    unsigned copy_q = copy != NULL ? rk.effective : rc.effective;
    size_t mem = ferry_connections_memory_bytes(rc.effective, copy_q);
    size_t mem_def =
        ferry_connections_memory_bytes(FERRY_CONNECTIONS_DEFAULT, FERRY_CONNECTIONS_DEFAULT);
    if (json) {
        json_t j;
        json_command_begin(&j, stdout, "connections");
        json_var(&j, "CUDA_DEVICE_MAX_CONNECTIONS", conn, &rc);
        json_var(&j, "CUDA_DEVICE_MAX_COPY_CONNECTIONS", copy, &rk);
        json_key(&j, "CUDA_SCALE_LAUNCH_QUEUES");
        json_str_or_null(&j, scale);
        json_key(&j, "CUDA_LAUNCH_BLOCKING");
        json_str_or_null(&j, blocking);
        json_key_bool(&j, "launch_blocking", blocks);
        json_key_bool(&j, "mps", has_mps);
        json_key_str(&j, "mps_evidence", mps);
        json_key(&j, "ferry_connections");
        json_str_or_null(&j, fconn);
        json_key(&j, "ferry_copy_connections");
        json_str_or_null(&j, fcopy);
        json_key_uint(&j, "connection_memory_bytes", mem);
        json_key_uint(&j, "default_connection_memory_bytes", mem_def);
        json_end(&j);
        return CLI_OK;
    }
    printf("CUDA_DEVICE_MAX_CONNECTIONS       %s -> %u queues per context\n",
           conn ? conn : "(not set)", rc.effective);
    printf("    %s\n", rc.note);
    printf("CUDA_DEVICE_MAX_COPY_CONNECTIONS  %s -> %u copy queues (compute capability 8.0 and "
           "later)\n",
           copy ? copy : "(not set)", rk.effective);
    printf("    %s\n", rk.note);
    printf("CUDA_SCALE_LAUNCH_QUEUES          %s\n",
           scale ? scale
                 : "(not set): scales the size of CUDA's launch queues (command buffers), not "
                   "their number");
    printf("CUDA_LAUNCH_BLOCKING              %s\n",
           blocks     ? "1: every launch waits for the GPU: nothing overlaps (debugging only)"
           : blocking ? blocking
                      : "(not set)");
    printf("MPS                               %s: %s\n", has_mps ? "likely" : "not detected", mps);
    if (has_mps)
        printf("    under MPS the default number of connections may differ from 8 (not measured "
               "here): --measure tells\n");
    if (fconn || fcopy)
        printf("ferry                             FERRY_CONNECTIONS=%s FERRY_COPY_CONNECTIONS=%s: "
               "ferry sets these before its first CUDA call\n",
               fconn ? fconn : "-", fcopy ? fcopy : "-");
    printf("device memory for these queues    ~%zu KiB per context (default 8+8: %zu KiB)\n",
           mem >> 10, mem_def >> 10);
    printf("\nCUDA reads these at cuInit, once per process, for every GPU it uses; nothing "
           "reports\nthe value in effect (no nvidia-smi field, no NVML call): `ferry connections "
           "--measure`\nmeasures it.\n");
    return CLI_OK;
}

/* ---- measure ------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The child: the pattern in this process, whose queues CUDA (or the model) read at start. One
 * JSON line on stdout. */
static int measure_one(ferry_options_t *o, unsigned streams, unsigned reps)
{
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.options = o;
    ferry_runtime_t *rt = NULL;
    if (ferry_runtime_create(&cfg, &rt) != 0)
        return cli_fail("connections", "%s", ferry_last_error());
    ferry_device_t *dev = NULL;
    ferry_conn_measure_t m = FERRY_CONN_MEASURE_INIT;
    int rc = CLI_OK;
    if (ferry_device_get(rt, 0, &dev) != 0 ||
        ferry_connections_measure(dev, streams, KERNEL_A_NS, KERNEL_B_NS, reps, &m) != 0) {
        rc = cli_fail("connections", "%s", ferry_last_error());
    } else {
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        ferry_device_props(dev, &p);
        /* One line the parent parses (child_run): keep its keys. */
        json_t j;
        json_init(&j, stdout);
        json_object_begin(&j);
        json_key_str(&j, "backend", ferry_runtime_backend(rt));
        json_key_str(&j, "device", p.name);
        json_key_uint(&j, "streams", m.streams);
        json_key_double(&j, "a_ms", m.a_ms, 3);
        json_key_double(&j, "b_ms", m.b_ms, 3);
        json_key_double(&j, "total_ms", m.total_ms, 4);
        json_key_double(&j, "roundrobin_ms", m.roundrobin_ms, 4);
        json_key_double(&j, "waves", m.waves, 3);
        json_key_double(&j, "effective_queues", m.effective_queues, 2);
        json_key_bool(&j, "at_least", m.at_least);
        json_key_double(&j, "serialization", m.serialization, 3);
        json_key_uint(&j, "device_used_bytes", m.device_used_bytes);
        json_end(&j);
    }
    ferry_runtime_destroy(rt);
    return rc;
}

typedef struct child_result {
    unsigned value;
    bool ok;
    char json[1024];
    double total_ms, roundrobin_ms, eff, ser;
    bool at_least;
    unsigned long long used;
    char backend[16], device[128];
} child_result_t;

static double num_after(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    return p ? strtod(p + strlen(key), NULL) : 0;
}

static void str_after(const char *json, const char *key, char *out, size_t len)
{
    const char *p = strstr(json, key);
    out[0] = '\0';
    if (p == NULL)
        return;
    p += strlen(key);
    size_t n = 0;
    while (p[n] && p[n] != '"' && n + 1 < len)
        n++;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* Run this executable again as the child for @value; parse its line. */
static int run_child(const char *backend, unsigned value, unsigned streams, unsigned reps,
                     child_result_t *r)
{
    char exe[4096], vbuf[16], sbuf[16], rbuf[16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return cli_fail("connections", "cannot find this executable: %s", strerror(errno));
    exe[n] = '\0';
    snprintf(vbuf, sizeof(vbuf), "%u", value);
    snprintf(sbuf, sizeof(sbuf), "%u", streams);
    snprintf(rbuf, sizeof(rbuf), "%u", reps);
    int fds[2];
    if (pipe(fds) != 0)
        return cli_fail("connections", "pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    /* The variable is the child's alone; ferry's own option would override it there. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", vbuf, 1);
    unsetenv("FERRY_CONNECTIONS");
    char *argv[] = {exe,      "connections", "--measure-one", "--streams",     sbuf,
                    "--reps", rbuf,          "--backend",     (char *)backend, NULL};
    pid_t pid;
    int e = posix_spawn(&pid, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (e != 0) {
        close(fds[0]);
        return cli_fail("connections", "cannot start a child: %s", strerror(e));
    }
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof(r->json) &&
           (k = read(fds[0], r->json + got, sizeof(r->json) - 1 - got)) != 0) {
        if (k < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t)k;
    }
    r->json[got] = '\0';
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    r->value = value;
    r->ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(r->json, "\"total_ms\":") != NULL;
    if (!r->ok)
        return cli_fail("connections",
                        "the child for CUDA_DEVICE_MAX_CONNECTIONS=%u failed "
                        "(exit %d; its message is above)",
                        value, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    char *nl = strchr(r->json, '\n');
    if (nl)
        *nl = '\0';
    r->total_ms = num_after(r->json, "\"total_ms\":");
    r->roundrobin_ms = num_after(r->json, "\"roundrobin_ms\":");
    r->eff = num_after(r->json, "\"effective_queues\":");
    r->ser = num_after(r->json, "\"serialization\":");
    r->at_least = strstr(r->json, "\"at_least\":true") != NULL;
    r->used = (unsigned long long)num_after(r->json, "\"device_used_bytes\":");
    str_after(r->json, "\"backend\":\"", r->backend, sizeof(r->backend));
    str_after(r->json, "\"device\":\"", r->device, sizeof(r->device));
    return CLI_OK;
}

static int measure(const char *backend, const unsigned *values, int nv, unsigned streams,
                   unsigned reps, bool json)
{
    child_result_t *res = calloc((size_t)nv, sizeof(*res));
    if (res == NULL)
        return cli_fail("connections", "out of memory");
    /* The parent touches no GPU: each child starts CUDA with its own value. */
    const char *saved = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    char *keep = saved ? strdup(saved) : NULL;
    double t0 = now_s();
    int rc = CLI_OK;
    for (int i = 0; i < nv && rc == CLI_OK; i++) {
        rc = run_child(backend, values[i], streams, reps, &res[i]);
        if (rc == CLI_OK && !json && isatty(STDERR_FILENO))
            fprintf(stderr, "\rmeasured %d/%d", i + 1, nv);
    }
    if (!json && isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[K");
    double sweep = now_s() - t0;
    if (keep) {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", keep, 1);
        free(keep);
    } else {
        unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    }
    if (rc != CLI_OK) {
        free(res);
        return rc;
    }
    unsigned long long base = res[0].used;
    unsigned base_v = res[0].value;
    for (int i = 1; i < nv; i++)
        if (res[i].value < base_v)
            base = res[i].used, base_v = res[i].value;
    double a = (double)KERNEL_A_NS / 1e6;
    double worst = 0;
    json_t j;
    if (json) {
        json_command_begin(&j, stdout, "connections");
        json_key_str(&j, "mode", "measure");
        json_key_str(&j, "backend", res[0].backend);
        json_key_str(&j, "device", res[0].device);
        json_key_uint(&j, "streams", streams);
        json_key_double(&j, "a_ms", a, 3);
        json_key_double(&j, "b_ms", (double)KERNEL_B_NS / 1e6, 3);
        json_key_uint(&j, "reps", reps);
        json_key_double(&j, "sweep_s", sweep, 3);
        json_key(&j, "results");
        json_array_begin(&j);
    } else {
        printf("# %s: %s; %u streams, each kernel A (%.1f ms, one block) then B (%.1f ms), "
               "issued stream by stream\n",
               res[0].backend, res[0].device, streams, a, (double)KERNEL_B_NS / 1e6);
        printf("# law (FACTS.md): a x ceil(streams / C) + b, at least the time to issue the "
               "pattern; memory relative to C=%u\n",
               base_v);
        printf("%6s %10s %10s %7s %8s %8s %13s %12s\n", "C", "law ms", "measured", "err%", "queues",
               "serial", "round-robin", "memory");
    }
    for (int i = 0; i < nv; i++) {
        child_result_t *r = &res[i];
        /* The law, a x ceil(streams / C) + b, with the host's time to issue the pattern as a
         * floor: the last stream's A is issued after 2 x streams - 1 launches. The launch cost
         * comes from the same child's round-robin run (streams launches, then a and b). */
        double b = (double)KERNEL_B_NS / 1e6;
        unsigned waves = (streams + r->value - 1) / r->value;
        double launch = (r->roundrobin_ms - a - b) / streams;
        launch = launch > 0 ? launch : 0;
        double law = a * waves + b, issue = (2.0 * streams - 1) * launch + a + b;
        law = law > issue ? law : issue;
        double err = law > 0 ? (r->total_ms - law) / law : 0;
        if (err < 0 ? -err > worst : err > worst)
            worst = err < 0 ? -err : err;
        long long dmem = (long long)r->used - (long long)base;
        if (json) {
            json_object_begin(&j);
            json_key_uint(&j, "connections", r->value);
            json_key_double(&j, "law_ms", law, 4);
            json_key_double(&j, "error", err, 4);
            json_key(&j, "child");
            json_raw(&j, r->json);
            json_key_int(&j, "memory_vs_base_bytes", dmem);
            json_object_end(&j);
        } else {
            char q[16];
            snprintf(q, sizeof(q), "%s%.1f", r->at_least ? ">=" : "", r->eff);
            printf("%6u %10.2f %10.2f %+7.1f %8s %8.2f %10.2f ms %+9.0f KiB\n", r->value, law,
                   r->total_ms, err * 100, q, r->ser, r->roundrobin_ms, (double)dmem / 1024.0);
        }
    }
    if (json) {
        json_array_end(&j);
        json_key_double(&j, "worst_error", worst, 4);
        json_end(&j);
    } else
        printf("# sweep took %.2f s (one child process per value); worst difference from the "
               "law %.1f%%\n",
               sweep, worst * 100);
    free(res);
    return CLI_OK;
}

/* ---- recommend ----------------------------------------------------------------------------- */

static int recommend(unsigned streams, bool strict, bool json)
{
    unsigned v;
    char why[3][400];
    if (strict) {
        v = 1;
        snprintf(why[0], sizeof(why[0]),
                 "--ordering strict: with one queue, kernels start in the order they were "
                 "launched across all streams (Megatron-LM, TransformerEngine and NeMo set 1 on "
                 "Hopper so that a collective launched before a GEMM gets the SMs first)");
        snprintf(why[1], sizeof(why[1]),
                 "the cost: every stream shares that queue, so work queued behind an item that "
                 "waits in another stream cannot start; %u streams each doing A then B issued "
                 "stream by stream take %u x A instead of 1 x A",
                 streams, streams);
        /* docs/connections.md, measured on the H200: device memory moved by 256 KiB (64
         * compute + 192 copy) per step of CUDA_DEVICE_MAX_CONNECTIONS set alone. */
        snprintf(why[2], sizeof(why[2]),
                 "copies share it too: set alone, the variable also sets the copy queues (on the "
                 "H200 each step moved 64 KiB compute + 192 KiB copy queue memory, measured); "
                 "to keep copies on queues of their own, also set "
                 "CUDA_DEVICE_MAX_COPY_CONNECTIONS (compute capability 8.0 and later)");
    } else if (streams <= FERRY_CONNECTIONS_DEFAULT) {
        v = FERRY_CONNECTIONS_DEFAULT;
        snprintf(why[0], sizeof(why[0]),
                 "%u active stream%s per context fit in the default 8 queues: no false "
                 "dependencies; leaving the variable unset does the same",
                 streams, streams == 1 ? "" : "s");
        snprintf(why[1], sizeof(why[1]),
                 "fewer queues would save only ~256 KiB of device memory each");
        snprintf(why[2], sizeof(why[2]), "NVIDIA advises queues >= active streams per context");
    } else {
        v = streams > FERRY_CONNECTIONS_MAX ? FERRY_CONNECTIONS_MAX : streams;
        snprintf(why[0], sizeof(why[0]),
                 "NVIDIA advises queues >= active streams per context: %u stream%s -> %u%s",
                 streams, streams == 1 ? "" : "s", v,
                 streams > FERRY_CONNECTIONS_MAX
                     ? " (32 is the documented maximum: streams beyond it share queues; issue "
                       "round-robin across streams, as ferry does, and they still run "
                       "concurrently)"
                     : "");
        snprintf(why[1], sizeof(why[1]),
                 "memory: ~256 KiB of device memory per queue per context (64 KiB compute + 192 "
                 "KiB for the copy queues, which follow unless CUDA_DEVICE_MAX_COPY_CONNECTIONS "
                 "is set; measured on the H200), %+lld KiB against the default 8",
                 ((long long)v - 8) * 256);
        snprintf(why[2], sizeof(why[2]),
                 "copy-bound pipelines did not care about this value when measured (FACTS.md); it "
                 "matters when kernels wait on other streams");
    }
    if (json) {
        json_t j;
        json_command_begin(&j, stdout, "connections");
        json_key_str(&j, "mode", "recommend");
        json_key_uint(&j, "streams", streams);
        json_key_str(&j, "ordering", strict ? "strict" : "any");
        json_key_uint(&j, "value", v);
        json_key_uint(&j, "memory_bytes", ferry_connections_memory_bytes(v, v));
        json_key(&j, "reasons");
        json_array_begin(&j);
        for (int i = 0; i < 3; i++)
            json_str(&j, why[i]);
        json_end(&j);
        return CLI_OK;
    }
    printf("CUDA_DEVICE_MAX_CONNECTIONS=%u\n", v);
    for (int i = 0; i < 3; i++)
        printf("  - %s\n", why[i]);
    printf("apply: ferry exec --connections %u -- CMD   (or: ferry env --connections %u --format "
           "sh)\n",
           v, v);
    return CLI_OK;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* ---- the command line ----------------------------------------------------------------- */

typedef struct conn_flags {
    bool json, measure, recommend, one, strict;
    const char *ordering;
    unsigned values[MAX_VALUES];
    int nv;
    unsigned long long streams, reps;
} conn_flags_t;

static int check_ordering(const char *cmd, const char *v, void *into)
{
    if (strcmp(v, "strict") != 0)
        return cli_usage_error(cmd, "--ordering '%s' is not accepted (accepted: strict)", v);
    ((conn_flags_t *)into)->strict = true;
    return CLI_OK;
}

static int check_values(const char *cmd, const char *v, void *into)
{
    conn_flags_t *f = into;
    f->nv = 0;
    char buf[256];
    if (strlen(v) >= sizeof(buf))
        return cli_usage_error(cmd, "--values: list too long");
    strcpy(buf, v);
    /* strtok would skip empty items: walk the commas by hand to refuse them. */
    for (char *s = buf, *comma;; s = comma + 1) {
        comma = strchr(s, ',');
        if (comma)
            *comma = '\0';
        if (f->nv == MAX_VALUES)
            return cli_usage_error(cmd, "--values: at most %d values", MAX_VALUES);
        if (ferry_connections_parse("--values", s, &f->values[f->nv]) != 0)
            return cli_usage_error(cmd, "%s", ferry_last_error());
        f->nv++;
        if (comma == NULL)
            return CLI_OK;
    }
}

static const cli_flag_def_t conn_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, conn_flags_t, json, "one JSON object")},
    {CLI_FLAG("measure", CLI_SWITCH, conn_flags_t, measure,
              "measure each value in a child process")},
    {CLI_FLAG("measure-one", CLI_SWITCH, conn_flags_t, one, "the child of --measure")},
    {CLI_FLAG("recommend", CLI_SWITCH, conn_flags_t, recommend, "the value for --streams N")},
    {CLI_FLAG("ordering", CLI_STRING, conn_flags_t, ordering, "strict"), .check = check_ordering},
    {CLI_FLAG("streams", CLI_UINT, conn_flags_t, streams, "streams kept active per GPU"), .lo = 1,
     .hi = 1024},
    {CLI_FLAG("reps", CLI_UINT, conn_flags_t, reps, "repetitions per value"), .lo = 1, .hi = 100},
    {.name = "values",
     .kind = CLI_CUSTOM,
     .help = "the values to measure, e.g. 1,2,4",
     .check = check_values},
    {NULL},
};

int cmd_connections(int argc, char **argv)
{
    const char *cmd = "connections";
    conn_flags_t f = {.values = {1, 2, 4, 8, 16, 32}, .nv = 6, .reps = 5};
    ferry_options_t *o = NULL;
    cli_parser_t p = {.cmd = cmd, .flags = {conn_flags}, .into = &f};
    int rc = cli_parse_options(&p, argc, argv, 1, &o);
    if (rc != CLI_OK)
        return rc == CLI_HELP ? usage() : rc;
    bool json = f.json, do_measure = f.measure, do_recommend = f.recommend, one = f.one,
         strict = f.strict;
    unsigned long long streams = f.streams, reps = f.reps;
    if (do_measure + do_recommend + one > 1) {
        rc = cli_usage_error(cmd, "--measure and --recommend exclude each other");
        goto out;
    }
    if (strict && !do_recommend) {
        rc = cli_usage_error(cmd, "--ordering goes with --recommend");
        goto out;
    }
    if (do_recommend) {
        if (streams == 0) {
            rc = cli_usage_error(cmd, "--recommend needs --streams N (the streams your process "
                                      "keeps active per GPU)");
            goto out;
        }
        rc = recommend((unsigned)streams, strict, json);
    } else if (do_measure || one) {
        if (streams == 0)
            streams = 32;
        if (streams > 64) {
            rc = cli_usage_error(cmd, "--streams %llu: the measurement runs 1 to 64 streams",
                                 streams);
            goto out;
        }
        if (one) {
            rc = measure_one(o, (unsigned)streams, (unsigned)reps);
        } else {
            char backend[16] = "auto";
            const char *b = ferry_options_get_str(o, "backend");
            if (b != NULL)
                snprintf(backend, sizeof(backend), "%s", b);
            rc = measure(backend, f.values, f.nv, (unsigned)streams, (unsigned)reps, json);
        }
    } else {
        if (streams != 0) {
            rc = cli_usage_error(cmd, "--streams goes with --measure or --recommend");
            goto out;
        }
        rc = report(json);
    }
out:
    ferry_options_destroy(o);
    return rc;
}
