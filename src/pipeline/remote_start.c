/* A worker's start (remote_internal.h): the options as text, the hello, the fork from the
 * runtime's helper and the wait for its READY; and the messages to and from it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "core/runtime.h"
#include "ferry/connections.h"
#include "pipeline/remote_internal.h"

/* ---- the worker ------------------------------------------------------------------------- */

/* Never waits: a worker's socket holds few messages (net.unix.max_dgram_qlen, 10 here), and a
 * sender waiting for room while holding wmu would hold up the reader (flush). */
int ferry__rm_send(ferry__chan_t *ch, const ferry__wk_msg_t *m, int fd)
{
    if (ch == NULL) {
        errno = EPIPE;
        return -1;
    }
    if (FERRY__WK_IS_HOT(m->kind))
        return ferry__chan_post(ch, m, FERRY__WK_HOT);
    return ferry__chan_send(ch, m, sizeof(*m), fd, MSG_DONTWAIT);
}

int ferry__rm_recv(ferry__chan_t *ch, ferry__wk_msg_t *m, int timeout_ms)
{
    int fd = -1;
    ssize_t n = ferry__chan_recv(ch, m, sizeof(*m), &fd, timeout_ms);
    if (fd >= 0)
        close(fd); /* a worker sends none */
    return n > 0 ? 1 : n == 0 ? 0 : -1;
}

void ferry__rm_hangup(ferry__chan_t *ch)
{
    ferry__chan_close(ch);
    free(ch);
}

/* The options this runtime was given, as "name=value\n" lines (isolation and inject left
 * out: the worker runs its device in-process; inject is added for the first worker alone). */
static char *options_text(const ferry_options_t *o, const char *profile, unsigned conns,
                          size_t *len)
{
    static const char *const skip[] = {"isolation", "inject", "profile", "connections_per_device",
                                       NULL};
    size_t n = 0;
    char *t = ferry__options_text(o, skip, &n);
    if (t != NULL) { /* the profile, and this worker's connections, last: they win */
        size_t cap = n + strlen(profile) + 48;
        char *g = realloc(t, cap);
        if (g == NULL) {
            free(t);
            return NULL;
        }
        t = g;
        if (profile[0] != '\0')
            n += (size_t)snprintf(t + n, cap - n, "profile=%s\n", profile);
        if (conns > 0)
            n += (size_t)snprintf(t + n, cap - n, "connections=%u\n", conns);
    }
    *len = n;
    return t;
}

/* The hello every worker of @r starts from (spawn adds the options and the user data). */
int ferry__rm_make_hello(struct ferry__remote *r, const ferry_pipeline_config_t *cfg)
{
    /* option connections_per_device: this device's value (the runtime checked the rules) */
    const char *rules = ferry__opt_str(r->rt->opts, FERRY__OPT_connections_per_device);
    unsigned conns = 0;
    if (rules[0] != '\0') {
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        ferry_device_props(r->dev, &p);
        int hit = ferry_connections_rule(rules, "option connections_per_device", p.index, p.name,
                                         p.cc_major, p.cc_minor, &conns);
        if (hit == 0)
            return ferry__error(FERRY_EINVAL,
                                "option connections_per_device: no rule matches device %d (%s, cc "
                                "%d.%d); add a rule or '*=V'",
                                p.index, p.name, p.cc_major, p.cc_minor);
        if (hit < 0)
            return hit;
    }
    r->opts = options_text(r->rt->opts, r->rt->profile, conns, &r->olen);
    if (r->opts == NULL)
        return ferry__error(FERRY_ENOMEM, "isolation=process: out of memory");
    const char *inj = ferry__opt_str(r->rt->opts, FERRY__OPT_inject);
    if (inj[0] != '\0' && (r->inj = malloc(strlen(inj) + 9)) != NULL)
        r->ilen = (size_t)sprintf(r->inj, "inject=%s\n", inj);
    size_t len = sizeof(ferry__wk_hello_t) + r->olen + r->ilen + r->stage.user_bytes;
    if (len > FERRY__ZYG_MAX_MSG)
        return ferry__error(FERRY_EINVAL,
                            "isolation=process: the worker's start message would be %zu bytes "
                            "(at most %d: the stage's user_bytes %zu, the options %zu)",
                            len, FERRY__ZYG_MAX_MSG, r->stage.user_bytes, r->olen);
    ferry__wk_hello_t *h = &r->hello;
    *h = (ferry__wk_hello_t){.magic = FERRY__WK_MAGIC, .device = r->dev->index, .cfg = *cfg};
    snprintf(h->backend, sizeof(h->backend), "%s", ferry_runtime_backend(r->rt));
    h->gpu = r->stage.gpu;
    h->cpu = r->stage.cpu;
    h->user = r->stage.user;
    h->user_bytes = r->stage.user_bytes;
    h->ns_per_byte = r->stage.ns_per_byte;
    h->granularity = r->stage.granularity;
    snprintf(h->stage_name, sizeof(h->stage_name), "%s", r->h->stage_name);
    h->arena = r->rt->arena.base;
    h->arena_bytes = r->rt->arena.bytes;
    return 0;
}

int ferry__rm_start(struct ferry__remote *r, uint32_t gen, rm_worker_t *out)
{
    size_t ilen = gen == 0 ? r->ilen : 0, ub = r->stage.user_bytes;
    size_t len = sizeof(ferry__wk_hello_t) + r->olen + ilen + ub;
    unsigned char *msg = malloc(len);
    ferry__chan_t *ch = malloc(sizeof(*ch));
    int peer[FERRY__CHAN_FDS];
    /* the rings hold every batch the proxy keeps in flight, and their reports */
    unsigned cap =
        r->limit < FERRY__CHAN_MAX_SLOTS / 2 - 16 ? 2 * r->limit + 16 : FERRY__CHAN_MAX_SLOTS;
    int crc = msg == NULL || ch == NULL
                  ? ferry__error(FERRY_ENOMEM, "isolation=process: out of memory")
                  : ferry__chan_pair(FERRY__WK_HOT, cap < FERRY__WK_RING ? FERRY__WK_RING : cap, ch,
                                     peer);
    if (crc != 0) {
        free(msg);
        free(ch);
        return crc;
    }
    ferry__wk_hello_t h = r->hello;
    h.generation = gen;
    h.options_len = (uint32_t)(r->olen + ilen);
    memcpy(msg, &h, sizeof(h));
    memcpy(msg + sizeof(h), r->opts, r->olen);
    if (ilen > 0)
        memcpy(msg + sizeof(h) + r->olen, r->inj, ilen);
    if (ub > 0)
        memcpy(msg + sizeof(h) + r->olen + ilen, r->stage.user, ub);
    ferry__zyg_proc_t p;
    int rc = ferry__zyg_spawn(r->rt->zyg, ferry__worker_main, msg, len, peer, FERRY__CHAN_FDS, &p);
    free(msg);
    for (int i = 0; i < FERRY__CHAN_FDS; i++)
        close(peer[i]);
    ferry__wk_msg_t m;
    if (rc == 0 && ferry__rm_recv(ch, &m, -1) != 1) {
        int st = 0;
        ferry__zyg_reap(r->rt->zyg, &p, RM_EXIT_WAIT, &st);
        rc = ferry__error(FERRY_EBACKEND,
                          "isolation=process: the worker (pid %d) ended before it was ready "
                          "(%s %d)",
                          (int)p.pid, WIFSIGNALED(st) ? "signal" : "exit status",
                          WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    } else if (rc == 0 && (m.kind != FERRY__WK_READY || m.status != 0)) {
        int st = 0;
        ferry__zyg_reap(r->rt->zyg, &p, RM_EXIT_WAIT, &st);
        rc = ferry__error(m.status < 0 ? m.status : FERRY_EBACKEND,
                          "isolation=process: the worker could not start: %s", m.text);
    }
    if (rc != 0) {
        ferry__rm_hangup(ch);
        return rc;
    }
    *out = (rm_worker_t){.ch = ch, .proc = p, .gen = gen, .stats = m.stats};
    return 0;
}

void ferry__rm_install(struct ferry__remote *r, const rm_worker_t *w)
{
    pthread_mutex_lock(&r->mu);
    r->ch = w->ch;
    r->proc = w->proc;
    r->generation = w->gen;
    r->wstats = w->stats; /* its plan (chunk, depth, streams) and connections, as it started */
    pthread_mutex_unlock(&r->mu);
}

int ferry__rm_spawn(struct ferry__remote *r, uint32_t gen)
{
    rm_worker_t w;
    int rc = ferry__rm_start(r, gen, &w);
    if (rc == 0)
        ferry__rm_install(r, &w);
    return rc;
}
