/* `ferry exec`: run a command with CUDA_DEVICE_MAX_CONNECTIONS (and the copy variant) set.
 * CUDA reads the variable once, at cuInit, and one value applies to every GPU of a process, so
 * different values for different GPUs need different processes: --per-device starts one child
 * per device, each seeing only its GPU, passes signals on to them, has them die with it, and
 * exits with the worst status. With a single --connections value ferry simply execs the command. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "ferry/connections.h"

extern char **environ;

static const char *const cmd = "exec";

typedef struct child {
    int device; /* ferry's device index */
    char name[128];
    int cc_major, cc_minor;
    unsigned value; /* CUDA_DEVICE_MAX_CONNECTIONS for this device */
    pid_t pid;      /* > 0 while the child may be signalled: started and not yet reaped */
    bool started;
} child_t;

/* The signals a user or a job scheduler sends to stop or poke a job; each goes on to every
 * child, since the children, not ferry, do the work. */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

/* Read by the signal handler. Written only while the forwarded signals are blocked, so the
 * handler never sees a half-made change. */
static child_t *volatile g_children;
static volatile int g_nchildren;

static int usage(void)
{
    printf("usage: ferry exec --connections N [--copy-connections M] -- CMD [ARGS...]\n"
           "       ferry exec --per-device RULES [--copy-connections M] [--backend auto|sim|cuda]\n"
           "                  -- CMD [ARGS...]\n\n"
           "Run CMD with CUDA_DEVICE_MAX_CONNECTIONS set: the hardware work queues CUDA opens per\n"
           "context (1..32, default 8). CUDA reads the variable once, when it starts in a\n"
           "process, and one value applies to every GPU of that process; so --per-device starts\n"
           "one CMD per device, each seeing only its GPU (CUDA_VISIBLE_DEVICES) and told its\n"
           "index (FERRY_DEVICE_INDEX).\n\n"
           "  --connections N         CUDA_DEVICE_MAX_CONNECTIONS=N, 1..32; CMD replaces ferry\n"
           "  --copy-connections M    also CUDA_DEVICE_MAX_COPY_CONNECTIONS=M, 1..32\n"
           "  --per-device RULES      one CMD per device, N from the first rule that matches it:\n"
           "                            index:K=N    device K, as `ferry probe` lists it\n"
           "                            name:TEXT=N  the device name contains TEXT (any case)\n"
           "                            cc:X.Y=N     compute capability X.Y exactly\n"
           "                            cc>=X.Y=N    compute capability X.Y or later\n"
           "                            *=N          any device\n"
           "                          for example 'name:H200=16,cc>=9.0=8,*=4'\n"
           "  --backend auto|sim|cuda where --per-device finds the devices (default: the\n"
           "                          backend option, FERRY_BACKEND)\n\n"
           "Exit status: with --connections, CMD's own (ferry becomes CMD). With --per-device,\n"
           "the worst child's, a child killed by signal S counting as 128+S; SIGINT, SIGTERM,\n"
           "SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to ferry are passed on to every child;\n"
           "if ferry dies otherwise (SIGKILL), the children are killed with it.\n"
           "127 when CMD is not found, 126 when it cannot be run, 2 on a usage error.\n");
    return CLI_OK;
}

/* Shell conventions for a command that cannot be run: 127 not found, 126 found but not
 * runnable. */
static int exec_failure_status(int err)
{
    return err == ENOENT ? 127 : 126;
}

static const char *signal_name(int sig, char *buf, size_t len)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
                 {SIGILL, "SIGILL"},   {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},
                 {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
                 {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
                 {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
                 {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, len, "%d", sig);
    return buf;
}

/* ---- devices ---------------------------------------------------------------------------- */

/* Enumerate the devices through ferry and give each its value. The runtime is destroyed before
 * returning: the children must be started from a process that holds no device. Returns 0,
 * CLI_FAIL or CLI_USAGE (message printed). */
static int plan_children(const char *backend, const char *rules, child_t **out, int *count)
{
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    cfg.backend = backend; /* NULL: the backend option (FERRY_BACKEND, else auto) */
    ferry_runtime_t *rt = NULL;
    child_t *children = NULL;
    int rc = CLI_FAIL;
    if (ferry_runtime_create(&cfg, &rt) != 0) {
        fprintf(stderr, "ferry %s: cannot list the devices: %s\n", cmd, ferry_last_error());
        return CLI_FAIL;
    }
    int n = ferry_device_count(rt);
    if (n < 1) {
        fprintf(stderr, "ferry %s: cannot list the devices: %s\n", cmd, ferry_last_error());
        goto out;
    }
    children = calloc((size_t)n, sizeof(*children));
    if (children == NULL) {
        fprintf(stderr, "ferry %s: out of memory\n", cmd);
        goto out;
    }
    for (int k = 0; k < n; k++) {
        ferry_device_t *dev = NULL;
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        if (ferry_device_get(rt, k, &dev) != 0 || ferry_device_props(dev, &p) != 0) {
            fprintf(stderr, "ferry %s: device %d: %s\n", cmd, k, ferry_last_error());
            goto out;
        }
        child_t *c = &children[k];
        c->device = k;
        snprintf(c->name, sizeof(c->name), "%s", p.name);
        c->cc_major = p.cc_major;
        c->cc_minor = p.cc_minor;
        int hit = ferry_connections_rule(rules, "--per-device", k, c->name, c->cc_major,
                                         c->cc_minor, &c->value);
        if (hit < 0) {
            rc = cli_usage_error(cmd, "%s", ferry_last_error());
            goto out;
        }
        if (hit == 0) {
            fprintf(stderr,
                    "ferry %s: no --per-device rule matches device %d (%s, cc %d.%d); add a rule "
                    "or '*=V'\n",
                    cmd, k, c->name, c->cc_major, c->cc_minor);
            rc = CLI_USAGE;
            goto out;
        }
    }
    *out = children;
    *count = n;
    children = NULL;
    rc = 0;
out:
    free(children);
    ferry_runtime_destroy(rt);
    return rc;
}

/* What each child's CUDA_VISIBLE_DEVICES should hold for ferry's device @p k. ferry numbers the
 * devices CUDA lets it see; when the parent already restricts them (a job scheduler's
 * CUDA_VISIBLE_DEVICES=2,3), device k is the k-th entry of that list, not physical GPU k.
 * Returns false when the list has no k-th entry. */
static bool visible_id(const char *parent, int k, char *buf, size_t len)
{
    if (parent == NULL) {
        snprintf(buf, len, "%d", k);
        return true;
    }
    const char *s = parent;
    for (int i = 0; i < k; i++) {
        s = strchr(s, ',');
        if (s == NULL)
            return false;
        s++;
    }
    size_t n = strcspn(s, ",");
    if (n == 0 || n >= len)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

/* ---- children and signals --------------------------------------------------------------- */

static void forward_signal(int sig)
{
    int saved = errno;
    child_t *children = g_children;
    for (int k = 0; k < g_nchildren; k++)
        if (children[k].pid > 0)
            kill(children[k].pid, sig); /* a child that has just exited: nothing to do */
    errno = saved;
}

/* Install the forwarding handler for each signal not ignored at start. A signal ignored on
 * entry stays ignored, as a shell does it: `nohup ferry exec ...` must not pass a hangup on to
 * the children (which inherit the ignoring). */
static int install_forwarding(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward_signal;
    /* No SA_RESTART: waitid returns EINTR and the wait loop retries it explicitly. */
    if (sigemptyset(&sa.sa_mask) != 0)
        return -1;
    for (size_t i = 0; i < NFORWARDED; i++)
        if (sigaddset(&sa.sa_mask, forwarded[i]) != 0)
            return -1;
    for (size_t i = 0; i < NFORWARDED; i++) {
        struct sigaction old;
        if (sigaction(forwarded[i], NULL, &old) != 0)
            return -1;
        if (old.sa_handler == SIG_IGN)
            continue;
        if (sigaction(forwarded[i], &sa, NULL) != 0)
            return -1;
    }
    return 0;
}

static int set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        fprintf(stderr, "ferry %s: cannot set %s: %s\n", cmd, name, strerror(errno));
        return -1;
    }
    return 0;
}

/* True when the environment entry @p entry ("NAME=value") sets @p name. */
static bool sets(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* In the child, between fork and exec. ferry may have threads (the CUDA backend leaves some
 * after listing the devices), so only async-signal-safe calls: no allocation, no stdio. Returns
 * only when the command could not be started, with the errno. */
static int child_exec(char **argv, char **envp, const sigset_t *child_mask, pid_t parent)
{
    /* The handlers ferry installed must not run here, where a forwarded signal would reach the
     * other children; as posix_spawn does, a signal caught in ferry starts out default. */
    for (size_t i = 0; i < NFORWARDED; i++) {
        struct sigaction old;
        if (sigaction(forwarded[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN &&
            old.sa_handler != SIG_DFL) {
            struct sigaction dfl;
            memset(&dfl, 0, sizeof(dfl));
            dfl.sa_handler = SIG_DFL;
            if (sigaction(forwarded[i], &dfl, NULL) != 0)
                return errno;
        }
    }
    /* The children die with ferry, also when ferry cannot pass a signal on (SIGKILL, a crash):
     * the kernel sends SIGKILL when the thread that forked them, ferry's main thread, ends. It
     * is not inherited by the command's own children, and a set-user-ID command clears it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        return errno;
    /* ferry may have died before the prctl: the child then has another parent already, and
     * would never get the signal. */
    if (getppid() != parent)
        _exit(128 + SIGKILL);
    if (sigprocmask(SIG_SETMASK, child_mask, NULL) != 0)
        return errno;
    execvpe(argv[0], argv, envp);
    return errno;
}

/* Start @p argv with @p envp in a child process that dies with ferry. Returns 0 with *pid set,
 * or the errno of what failed: fork, or the command's exec (reported back over a pipe closed on
 * exec, so a successful exec reads as end of file). */
static int spawn_child(char **argv, char **envp, const sigset_t *child_mask, pid_t *pid_out)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return e;
    }
    if (pid == 0) {
        close(fds[0]);
        int e = child_exec(argv, envp, child_mask, parent);
        ssize_t w;
        do
            w = write(fds[1], &e, sizeof(e));
        while (w < 0 && errno == EINTR);
        _exit(exec_failure_status(e));
    }
    close(fds[1]);
    int e = 0;
    ssize_t r;
    do
        r = read(fds[0], &e, sizeof(e));
    while (r < 0 && errno == EINTR);
    close(fds[0]);
    if (r == (ssize_t)sizeof(e)) {
        /* Not started: reap it here, it is no child of the plan. */
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        return e != 0 ? e : ENOEXEC;
    }
    *pid_out = pid;
    return 0;
}

/* Start one child per device. Runs with the forwarded signals blocked, so that a signal that
 * arrives while children are being started is delivered once they all run, and reaches each of
 * them. Returns 0 or the exit status to give when a child could not be started (message
 * printed; the children already started keep running and are stopped by the caller). */
static int start_children(child_t *children, int n, const char *copy, char **argv,
                          const sigset_t *child_mask)
{
    /* Each child's environment is built here rather than with setenv: the CUDA backend, once
     * initialised to list the devices, leaves threads behind, and setenv is not safe beside
     * them. It is ferry's environment less the variables set per child, then those. */
    const char *parent_visible = getenv("CUDA_VISIBLE_DEVICES");
    size_t nenv = 0;
    while (environ[nenv] != NULL)
        nenv++;
    char **envp = calloc(nenv + 5, sizeof(*envp));
    char(*visible)[96] = calloc((size_t)n, sizeof(*visible));
    int rc = CLI_FAIL, e;
    if (envp == NULL || visible == NULL) {
        fprintf(stderr, "ferry %s: out of memory\n", cmd);
        goto out_free;
    }
    size_t kept = 0;
    for (size_t i = 0; i < nenv; i++)
        if (!sets(environ[i], "CUDA_VISIBLE_DEVICES") &&
            !sets(environ[i], "CUDA_DEVICE_MAX_CONNECTIONS") &&
            !(copy != NULL && sets(environ[i], "CUDA_DEVICE_MAX_COPY_CONNECTIONS")) &&
            !sets(environ[i], "FERRY_DEVICE_INDEX"))
            envp[kept++] = environ[i];
    /* Every device must have its GPU before any child starts. */
    for (int k = 0; k < n; k++) {
        char id[64];
        if (!visible_id(parent_visible, k, id, sizeof(id))) {
            fprintf(stderr,
                    "ferry %s: CUDA_VISIBLE_DEVICES='%s' has no entry for device %d of %d: the "
                    "devices ferry lists do not match it\n",
                    cmd, parent_visible, k, n);
            goto out_free;
        }
        snprintf(visible[k], sizeof(visible[k]), "CUDA_VISIBLE_DEVICES=%s", id);
    }
    char copy_entry[64] = "";
    if (copy != NULL)
        snprintf(copy_entry, sizeof(copy_entry), "CUDA_DEVICE_MAX_COPY_CONNECTIONS=%s", copy);
    for (int k = 0; k < n; k++) {
        child_t *c = &children[k];
        char value[64], index[64];
        snprintf(value, sizeof(value), "CUDA_DEVICE_MAX_CONNECTIONS=%u", c->value);
        snprintf(index, sizeof(index), "FERRY_DEVICE_INDEX=%d", k);
        size_t m = kept;
        envp[m++] = visible[k];
        envp[m++] = value;
        if (copy != NULL)
            envp[m++] = copy_entry;
        envp[m++] = index;
        envp[m] = NULL;
        /* The children start with ferry's signal mask from before the blocking. */
        pid_t pid = 0;
        e = spawn_child(argv, envp, child_mask, &pid);
        if (e != 0) {
            fprintf(stderr, "ferry %s: cannot run '%s': %s\n", cmd, argv[0], strerror(e));
            rc = exec_failure_status(e);
            goto out_free;
        }
        c->pid = pid;
        c->started = true;
        fprintf(stderr, "ferry %s: device %d (%s): CUDA_DEVICE_MAX_CONNECTIONS=%u, pid %ld\n", cmd,
                k, c->name, c->value, (long)pid);
    }
    rc = 0;
out_free:
    free(visible);
    free(envp);
    return rc;
}

/* Reap every started child; returns the worst status (exit code, or 128 + signal). */
static int wait_children(child_t *children, int n, const sigset_t *block)
{
    int live = 0, worst = 0;
    for (int k = 0; k < n; k++)
        live += children[k].started;
    while (live > 0) {
        /* WNOWAIT leaves the child a zombie, so its pid cannot be reused while the handler may
         * still signal it; the slot is cleared with the signals blocked, and only then reaped. */
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOWAIT) != 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "ferry %s: waitid: %s\n", cmd, strerror(errno));
            return worst > CLI_FAIL ? worst : CLI_FAIL;
        }
        child_t *c = NULL;
        for (int k = 0; k < n; k++)
            if (children[k].pid == si.si_pid)
                c = &children[k];
        if (sigprocmask(SIG_BLOCK, block, NULL) != 0)
            fprintf(stderr, "ferry %s: sigprocmask: %s\n", cmd, strerror(errno));
        if (c != NULL)
            c->pid = 0;
        int st = 0;
        pid_t r;
        do
            r = waitpid(si.si_pid, &st, 0);
        while (r < 0 && errno == EINTR);
        if (sigprocmask(SIG_UNBLOCK, block, NULL) != 0)
            fprintf(stderr, "ferry %s: sigprocmask: %s\n", cmd, strerror(errno));
        if (r < 0) {
            fprintf(stderr, "ferry %s: waitpid: %s\n", cmd, strerror(errno));
            return worst > CLI_FAIL ? worst : CLI_FAIL;
        }
        if (c == NULL)
            continue; /* not one of ours (none is expected) */
        live--;
        int status = 0;
        char buf[16];
        if (WIFEXITED(st)) {
            status = WEXITSTATUS(st);
            if (status != 0)
                fprintf(stderr, "ferry %s: device %d exited %d\n", cmd, c->device, status);
        } else if (WIFSIGNALED(st)) {
            status = 128 + WTERMSIG(st);
            fprintf(stderr, "ferry %s: device %d killed by signal %s\n", cmd, c->device,
                    signal_name(WTERMSIG(st), buf, sizeof(buf)));
        }
        if (status > worst)
            worst = status;
    }
    return worst;
}

static int run_per_device(const char *rules_text, const char *backend, const char *copy,
                          char **argv)
{
    child_t *children = NULL;
    int n = 0, rc;
    unsigned v;
    /* the rules alone first: a malformed one is a usage error before any device is opened */
    if (ferry_connections_rule(rules_text, "--per-device", -1, "", 0, 0, &v) < 0)
        return cli_usage_error(cmd, "%s", ferry_last_error());
    rc = plan_children(backend, rules_text, &children, &n);
    if (rc != 0)
        goto out;

    sigset_t block, old;
    if (sigemptyset(&block) != 0) {
        rc = cli_fail(cmd, "sigemptyset: %s", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < NFORWARDED; i++)
        if (sigaddset(&block, forwarded[i]) != 0) {
            rc = cli_fail(cmd, "sigaddset: %s", strerror(errno));
            goto out;
        }
    if (sigprocmask(SIG_BLOCK, &block, &old) != 0) {
        rc = cli_fail(cmd, "sigprocmask: %s", strerror(errno));
        goto out;
    }
    g_children = children;
    g_nchildren = n;
    if (install_forwarding() != 0) {
        rc = cli_fail(cmd, "sigaction: %s", strerror(errno));
        if (sigprocmask(SIG_SETMASK, &old, NULL) != 0)
            fprintf(stderr, "ferry %s: sigprocmask: %s\n", cmd, strerror(errno));
        goto out;
    }
    int start_rc = start_children(children, n, copy, argv, &old);
    if (start_rc != 0) {
        /* All devices or none: stop the children already running, then report why. */
        for (int k = 0; k < n; k++)
            if (children[k].pid > 0 && kill(children[k].pid, SIGTERM) != 0)
                fprintf(stderr, "ferry %s: kill %ld: %s\n", cmd, (long)children[k].pid,
                        strerror(errno));
    }
    if (sigprocmask(SIG_SETMASK, &old, NULL) != 0)
        fprintf(stderr, "ferry %s: sigprocmask: %s\n", cmd, strerror(errno));
    int worst = wait_children(children, n, &block);
    rc = start_rc != 0 ? start_rc : worst;
out:
    free(children);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

typedef struct exec_flags {
    const char *conn, *copy, *rules, *backend;
} exec_flags_t;

static int check_backend(const char *cmd_name, const char *v, void *into)
{
    (void)into;
    if (strcmp(v, "auto") != 0 && strcmp(v, "sim") != 0 && strcmp(v, "cuda") != 0)
        return cli_usage_error(cmd_name, "--backend '%s': accepted: auto|sim|cuda", v);
    return CLI_OK;
}

static const cli_flag_def_t exec_flags[] = {
    {CLI_FLAG("connections", CLI_STRING, exec_flags_t, conn,
              "CUDA_DEVICE_MAX_CONNECTIONS for the command")},
    {CLI_FLAG("copy-connections", CLI_STRING, exec_flags_t, copy,
              "CUDA_DEVICE_MAX_COPY_CONNECTIONS")},
    {CLI_FLAG("per-device", CLI_STRING, exec_flags_t, rules, "one value per GPU: RULES")},
    {CLI_FLAG("backend", CLI_STRING, exec_flags_t, backend, "auto|sim|cuda"),
     .check = check_backend},
    {NULL},
};

int cmd_exec(int argc, char **argv)
{
    exec_flags_t fl = {.conn = NULL};
    cli_parser_t p = {
        .cmd = cmd, .flags = {exec_flags}, .into = &fl, .command_after_dashdash = true};
    int prc = cli_parse(&p, argc, argv, 1);
    if (prc == CLI_HELP)
        return usage();
    if (prc != CLI_OK)
        return prc;
    const char *conn = fl.conn, *copy = fl.copy, *rules = fl.rules, *backend = fl.backend;
    int first = p.rest; /* index of CMD in argv */
    if ((conn == NULL) == (rules == NULL))
        return cli_usage_error(cmd, "give exactly one of --connections N and --per-device RULES");
    if (backend != NULL && rules == NULL)
        return cli_usage_error(cmd, "--backend applies to --per-device only");
    if (first < 0 || first >= argc)
        return cli_usage_error(cmd, "no command: ferry exec ... -- CMD [ARGS...]");

    unsigned n = 0, m = 0;
    if ((conn != NULL && ferry_connections_parse("--connections", conn, &n) != 0) ||
        (copy != NULL && ferry_connections_parse("--copy-connections", copy, &m) != 0))
        return cli_usage_error(cmd, "%s", ferry_last_error());
    char copy_text[16];
    if (copy != NULL)
        snprintf(copy_text, sizeof(copy_text), "%u", m);

    if (rules != NULL)
        return run_per_device(rules, backend, copy != NULL ? copy_text : NULL, argv + first);

    /* One value for the whole process: become the command, so that its exit status and the
     * signals sent to it are its own. */
    char value[16];
    snprintf(value, sizeof(value), "%u", n);
    if (set_env("CUDA_DEVICE_MAX_CONNECTIONS", value) != 0 ||
        (copy != NULL && set_env("CUDA_DEVICE_MAX_COPY_CONNECTIONS", copy_text) != 0))
        return CLI_FAIL;
    execvp(argv[first], argv + first);
    int e = errno;
    fprintf(stderr, "ferry %s: cannot run '%s': %s\n", cmd, argv[first], strerror(e));
    return exec_failure_status(e);
}
