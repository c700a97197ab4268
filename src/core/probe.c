/* isolation=process: the application's process never starts the backend (for CUDA: never
 * initialises it, so that no context of its own is ever poisoned, and a second runtime in
 * process mode may follow). What it must know of the devices (which backend `auto` finds, how
 * many devices, each one's properties and host) a probe tells it: a child forked from the
 * runtime's helper, like a worker, that makes an isolation=thread runtime with this runtime's
 * options, opens the device asked for, answers over a socket and exits. The runtime's devices
 * are then shadows (runtime.h): their properties are the probe's, and every operation of the
 * backend is left out (FERRY_BE_CAP_SHADOW: the wrappers say that workers drive the device). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "core/runtime.h"
#include "proc/sock.h"

#define PROBE_MAGIC   0x66727062u /* "frpb" */
#define PROBE_WAIT_MS 120000      /* a probe that has not answered by then is killed */
#define PROBE_EXIT_NS 2000000000u

typedef struct probe_ask {
    uint32_t magic;
    int index;
    char backend[16];
    uint32_t options_len; /* the options as text follow */
} probe_ask_t;

typedef struct probe_answer {
    int32_t status; /* 0, or why the runtime or the device did not open (text) */
    int32_t ndev;
    char backend[16];
    char text[512];
    char fallback[256];
    uint32_t connections;
    ferry_device_props_t props;
    ferry_host_props_t host;
} probe_answer_t;

/* ---- the probe (in its own process) ------------------------------------------------------- */

static void ask_device(const probe_ask_t *a, const char *opts, probe_answer_t *out)
{
    ferry_options_t *o = NULL;
    char idx[16];
    snprintf(idx, sizeof(idx), "%d", a->index);
    int rc = ferry_options_create(&o);
    if (rc == 0)
        rc = ferry__options_apply_text(o, opts, a->options_len);
    if (rc == 0)
        rc = ferry_options_set(o, "isolation", "thread");
    if (rc == 0)
        rc = ferry_options_set(o, "device", idx);
    ferry_runtime_config_t c = FERRY_RUNTIME_CONFIG_INIT;
    c.backend = a->backend;
    c.options = o;
    ferry_runtime_t *rt = NULL;
    if (rc == 0)
        rc = ferry_runtime_create(&c, &rt); /* opens device a->index */
    ferry_options_destroy(o);
    ferry_device_t *d = NULL;
    if (rc == 0)
        rc = ferry_device_get(rt, a->index, &d);
    out->status = rc;
    if (rc != 0) {
        ferry__strlcpy(out->text, ferry_last_error(), sizeof(out->text));
    } else {
        out->ndev = rt->ndev;
        ferry__strlcpy(out->backend, rt->ops->name, sizeof(out->backend));
        ferry__strlcpy(out->fallback, rt->fallback_reason, sizeof(out->fallback));
        out->connections = d->connections;
        out->props = d->props;
        out->host = (ferry_host_props_t)FERRY_HOST_PROPS_INIT;
        ferry_device_host(d, &out->host);
    }
    /* no teardown: the process exits, and the backend's resources with it */
}

static int probe_main(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    const probe_ask_t *a = msg;
    if (nfds < 1 || len < sizeof(*a) || a->magic != PROBE_MAGIC ||
        len != sizeof(*a) + a->options_len)
        return 2;
    probe_answer_t ans;
    memset(&ans, 0, sizeof(ans));
    ask_device(a, (const char *)msg + sizeof(*a), &ans);
    return ferry__sock_send(fds[0], &ans, sizeof(ans), NULL, 0, NULL, 0, 0) == 0 ? 0 : 4;
}

/* ---- the runtime's side -------------------------------------------------------------------- */

/* The probe's answer into @ans, or the error (the probe's own, or why none came). */
static int ask(ferry_runtime_t *rt, const char *backend, int index, probe_answer_t *ans)
{
    static const char *const skip[] = {
        "isolation", "inject", "device", "profile", "connections_per_device", NULL};
    size_t olen = 0;
    char *opts = ferry__options_text(rt->opts, skip, &olen);
    size_t plen = strlen(rt->profile);
    size_t len = sizeof(probe_ask_t) + olen + (plen ? plen + 9 : 0);
    char *msg = opts != NULL ? malloc(len + 1) : NULL; /* snprintf's NUL at the end */
    if (msg == NULL || len > FERRY__ZYG_MAX_MSG) {
        free(opts);
        free(msg);
        return ferry__error(FERRY_ENOMEM, "isolation=process: the device probe's message");
    }
    probe_ask_t a = {
        .magic = PROBE_MAGIC, .index = index, .options_len = (uint32_t)(len - sizeof(a))};
    ferry__strlcpy(a.backend, backend, sizeof(a.backend));
    memcpy(msg, &a, sizeof(a));
    memcpy(msg + sizeof(a), opts, olen);
    if (plen > 0) /* the profile as the runtime resolved it */
        snprintf(msg + sizeof(a) + olen, plen + 10, "profile=%s\n", rt->profile);
    free(opts);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        free(msg);
        return ferry__error(FERRY_ENOMEM, "isolation=process: the device probe's socket: %s",
                            strerror(errno));
    }
    ferry__zyg_proc_t p;
    int rc = ferry__zyg_spawn(rt->zyg, probe_main, msg, len, &sv[1], 1, &p);
    free(msg);
    close(sv[1]);
    if (rc == 0) {
        struct pollfd pf = {.fd = sv[0], .events = POLLIN};
        int n;
        do
            n = poll(&pf, 1, PROBE_WAIT_MS);
        while (n < 0 && errno == EINTR);
        unsigned nfds = 0;
        if (n == 0)
            ferry__zyg_kill(&p, SIGKILL);
        if (n <= 0 || ferry__sock_recv(sv[0], ans, sizeof(*ans), NULL, 0, NULL, 0, &nfds) !=
                          (ssize_t)sizeof(*ans)) {
            int st = 0;
            ferry__zyg_reap(rt->zyg, &p, PROBE_EXIT_NS, &st);
            rc = ferry__error(FERRY_EBACKEND,
                              "isolation=process: the device probe (pid %d) %s (%s %d)", (int)p.pid,
                              n == 0 ? "did not answer in 120 s" : "ended unanswered",
                              WIFSIGNALED(st) ? "signal" : "exit status",
                              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        } else {
            int st = 0;
            ferry__zyg_reap(rt->zyg, &p, PROBE_EXIT_NS, &st);
        }
    }
    close(sv[0]);
    if (rc == 0 && ans->status != 0)
        rc = ferry__error(ans->status < 0 ? ans->status : FERRY_EBACKEND, "%s", ans->text);
    return rc;
}

/* A shadow device's backend handle: what the probe said. */
struct ferry_be_device {
    ferry_device_props_t props;
    ferry_host_props_t host;
};

static void shadow_close(ferry_be_device_t *d)
{
    free(d);
}

static int shadow_props(ferry_be_device_t *d, ferry_device_props_t *out)
{
    *out = d->props;
    return 0;
}

static void shadow_host(ferry_be_device_t *d, ferry_host_props_t *out)
{
    *out = d->host;
}

int ferry__rt_probe_backend(ferry_runtime_t *rt, const char *backend, int index)
{
    probe_answer_t ans;
    int rc = ask(rt, backend, index, &ans);
    if (rc != 0)
        return rc;
    const ferry_backend_ops_t *real = ferry__backend_find(ans.backend);
    if (real == NULL)
        return ferry__error(FERRY_EBACKEND,
                            "isolation=process: the probe's backend '%s' is not "
                            "in this ferry",
                            ans.backend);
    rt->shadow = (ferry_backend_ops_t){.name = real->name,
                                       .abi = real->abi,
                                       .caps = real->caps | FERRY_BE_CAP_SHADOW,
                                       .device_close = shadow_close,
                                       .device_props = shadow_props,
                                       .host_props = shadow_host,
                                       .gpu_launcher = real->gpu_launcher};
    ferry_be_device_t *be = malloc(sizeof(*be));
    if (be == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_runtime_create: out of memory");
    *be = (ferry_be_device_t){.props = ans.props, .host = ans.host};
    rt->probed = be; /* the device opened first: ferry_device_get takes it, no second probe */
    rt->probed_index = index;
    rt->probed_connections = ans.connections;
    rt->ops = &rt->shadow;
    rt->ndev = ans.ndev;
    ferry__strlcpy(rt->fallback_reason, ans.fallback, sizeof(rt->fallback_reason));
    if (ans.fallback[0] != '\0')
        ferry_log(FERRY_LOG_INFO, "runtime", "backend auto: using %s (%s)", real->name,
                  ans.fallback);
    return 0;
}

int ferry__rt_probe_device(ferry_runtime_t *rt, int index, ferry_device_t *d)
{
    if (rt->probed != NULL && rt->probed_index == index) {
        d->be = rt->probed;
        d->connections = rt->probed_connections;
        rt->probed = NULL;
        return 0;
    }
    probe_answer_t ans;
    int rc = ask(rt, rt->ops->name, index, &ans);
    ferry_be_device_t *be = rc == 0 ? malloc(sizeof(*be)) : NULL;
    if (rc == 0 && be == NULL)
        rc = ferry__error(FERRY_ENOMEM, "ferry_device_get: out of memory");
    if (rc != 0)
        return rc;
    *be = (ferry_be_device_t){.props = ans.props, .host = ans.host};
    d->be = be;
    d->connections = ans.connections;
    return 0;
}
