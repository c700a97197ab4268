/* The fork server (zygote.h): a helper forked early that forks every worker on request over a
 * SOCK_SEQPACKET control socket (a message per request, descriptors as SCM_RIGHTS), answers
 * with the worker's pid and a pidfd, and reports each worker's exit as the helper reaps it
 * (SIGCHLD through a signalfd: the helper is one thread). */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "proc/sock.h"
#include "proc/zygote.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

enum { ZYG_SPAWN = 1, ZYG_REPLY = 2, ZYG_EXIT = 3 };
#define ZYG_MAX_KIDS  4096
#define ZYG_MAX_NOTES 256

typedef struct zyg_hdr {
    uint32_t kind;
    int32_t err; /* a reply: 0 or the fork's errno */
    int32_t pid;
    int32_t status; /* an exit: waitpid's status */
    uint64_t fn;    /* a spawn: the entry, as an address of this program */
    uint32_t len, nfds;
} zyg_hdr_t;

struct ferry__zyg {
    int ctl;
    pid_t pid;
    pthread_mutex_t mu; /* the control socket's reads and the notes */
    struct {
        pid_t pid;
        int status;
    } notes[ZYG_MAX_NOTES]; /* exits reported and not yet waited for, oldest first */
    unsigned nnotes;
    bool gone; /* the control socket closed under us */
};

/* ---- messages ----------------------------------------------------------------------------- */

static int send_msg(int s, const zyg_hdr_t *h, const void *body, size_t len, const int *fds,
                    unsigned nfds)
{
    return ferry__sock_send(s, h, sizeof(*h), body, len, fds, nfds, 0);
}

/* One message into @h and @body (FERRY__ZYG_MAX_MSG bytes), its descriptors into @fds: returns
 * the body's length, or -1 at the end of the stream or on an error. */
static ssize_t recv_msg(int s, zyg_hdr_t *h, void *body, int *fds, unsigned *nfds)
{
    ssize_t n = ferry__sock_recv(s, h, sizeof(*h), body, body != NULL ? FERRY__ZYG_MAX_MSG : 0, fds,
                                 FERRY__ZYG_MAX_FDS, nfds);
    if (n >= 0 && n < (ssize_t)sizeof(*h)) {
        for (unsigned i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        return -1;
    }
    return n < 0 ? -1 : n - (ssize_t)sizeof(*h);
}

/* ---- the helper ----------------------------------------------------------------------------- */

/* Close every descriptor of this process but @keep1 and @keep2 (and standard ones): the helper
 * must not hold the application's pipes and sockets open. */
static void close_others(int keep1, int keep2)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    int self = dirfd(d);
    int fds[1024];
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 1024) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd > 2 && fd != keep1 && fd != keep2 &&
            fd != self)
            fds[n++] = fd;
    }
    closedir(d);
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
}

static void default_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
}

/* In the helper: fork a worker for request @h; reply with its pid and pidfd. */
static void helper_spawn(int ctl, int sfd, const zyg_hdr_t *h, const void *body, const int *fds,
                         unsigned nfds, pid_t *kids, unsigned *nkids)
{
    pid_t helper = getpid();
    pid_t pid = *nkids < ZYG_MAX_KIDS ? fork() : (errno = EAGAIN, -1);
    if (pid == 0) {
        close(ctl);
        close(sfd);
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != helper)
            _exit(127); /* the helper died between the fork and the prctl */
        ferry__zyg_entry_fn fn = (ferry__zyg_entry_fn)(uintptr_t)h->fn;
        _exit(fn(body, h->len, fds, nfds) & 0xff);
    }
    zyg_hdr_t r = {.kind = ZYG_REPLY, .err = pid < 0 ? errno : 0, .pid = pid};
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (pid > 0)
        kids[(*nkids)++] = pid;
    send_msg(ctl, &r, NULL, 0, &pidfd, pidfd >= 0 ? 1 : 0);
    if (pidfd >= 0)
        close(pidfd);
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
}

static void helper_reap(int ctl, pid_t *kids, unsigned *nkids, bool block)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, block ? 0 : WNOHANG)) > 0) {
        for (unsigned i = 0; i < *nkids; i++)
            if (kids[i] == pid) {
                kids[i] = kids[--*nkids];
                break;
            }
        zyg_hdr_t n = {.kind = ZYG_EXIT, .pid = pid, .status = st};
        if (ctl >= 0)
            send_msg(ctl, &n, NULL, 0, NULL, 0);
    }
}

static _Noreturn void helper_main(int ctl)
{
    default_signals();
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    close_others(ctl, sfd);
    pid_t *kids = malloc(sizeof(pid_t) * ZYG_MAX_KIDS);
    unsigned char *body = malloc(FERRY__ZYG_MAX_MSG);
    if (kids == NULL || body == NULL)
        _exit(1);
    unsigned nkids = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = ctl, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(pf, sfd >= 0 ? 2 : 1, sfd >= 0 ? -1 : 50) < 0 && errno != EINTR)
            break;
        if (sfd >= 0 && (pf[1].revents & POLLIN)) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                ;
        }
        helper_reap(ctl, kids, &nkids, false);
        if (pf[0].revents == 0)
            continue;
        zyg_hdr_t h;
        int fds[FERRY__ZYG_MAX_FDS];
        unsigned nfds = 0;
        ssize_t len = recv_msg(ctl, &h, body, fds, &nfds);
        if (len < 0)
            break; /* the application closed us, or died */
        if (h.kind == ZYG_SPAWN && (size_t)len == h.len && h.fn != 0)
            helper_spawn(ctl, sfd, &h, body, fds, nfds, kids, &nkids);
        else
            for (unsigned i = 0; i < nfds; i++)
                close(fds[i]);
    }
    for (unsigned i = 0; i < nkids; i++)
        kill(kids[i], SIGKILL);
    helper_reap(-1, kids, &nkids, true);
    _exit(0);
}

/* ---- the application's side ------------------------------------------------------------- */

int ferry__zyg_start(ferry__zyg_t **out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "worker processes: NULL out");
    *out = NULL;
    ferry__zyg_t *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return ferry__error(FERRY_ENOMEM, "worker processes: out of memory");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        int e = errno;
        free(z);
        return ferry__error(FERRY_ENOMEM, "worker processes: socketpair: %s", strerror(e));
    }
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        free(z);
        return ferry__error(FERRY_ENOMEM, "worker processes: fork of the helper: %s", strerror(e));
    }
    if (pid == 0) {
        close(sv[0]);
        helper_main(sv[1]);
    }
    close(sv[1]);
    z->ctl = sv[0];
    z->pid = pid;
    pthread_mutex_init(&z->mu, NULL);
    *out = z;
    return 0;
}

/* Read one message from the helper (under z->mu), waiting up to @timeout_ms (-1: for ever); an
 * exit goes to the notes, a reply to *@reply (with its pidfd in *@fd). Returns 1 when a message
 * came, 0 on a timeout, -1 when the helper is gone. */
static int read_one(ferry__zyg_t *z, int timeout_ms, zyg_hdr_t *reply, int *fd)
{
    if (z->gone)
        return -1;
    struct pollfd pf = {.fd = z->ctl, .events = POLLIN};
    int n = poll(&pf, 1, timeout_ms);
    if (n == 0 || (n < 0 && errno == EINTR))
        return 0;
    zyg_hdr_t h;
    int fds[FERRY__ZYG_MAX_FDS];
    unsigned nfds = 0;
    if (n < 0 || recv_msg(z->ctl, &h, NULL, fds, &nfds) < 0) {
        z->gone = true;
        return -1;
    }
    if (h.kind == ZYG_EXIT) {
        if (z->nnotes == ZYG_MAX_NOTES) { /* nobody waited for the oldest: drop it */
            memmove(&z->notes[0], &z->notes[1], sizeof(z->notes[0]) * (ZYG_MAX_NOTES - 1));
            z->nnotes--;
        }
        z->notes[z->nnotes].pid = h.pid;
        z->notes[z->nnotes++].status = h.status;
    } else if (h.kind == ZYG_REPLY && reply != NULL) {
        *reply = h;
        *fd = nfds > 0 ? fds[0] : -1;
        for (unsigned i = 1; i < nfds; i++)
            close(fds[i]);
        return 1;
    }
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
    return 1;
}

int ferry__zyg_spawn(ferry__zyg_t *z, ferry__zyg_entry_fn fn, const void *msg, size_t len,
                     const int *fds, unsigned nfds, ferry__zyg_proc_t *out)
{
    if (z == NULL || fn == NULL || out == NULL || (len > 0 && msg == NULL) ||
        len > FERRY__ZYG_MAX_MSG || nfds > FERRY__ZYG_MAX_FDS || (nfds > 0 && fds == NULL))
        return ferry__error(FERRY_EINVAL,
                            "worker processes: spawn needs the helper, an entry and out, a "
                            "message of at most %d bytes and at most %d descriptors (got %zu "
                            "bytes, %u descriptors)",
                            FERRY__ZYG_MAX_MSG, FERRY__ZYG_MAX_FDS, len, nfds);
    out->pid = -1;
    out->pidfd = -1;
    zyg_hdr_t h = {
        .kind = ZYG_SPAWN, .fn = (uint64_t)(uintptr_t)fn, .len = (uint32_t)len, .nfds = nfds};
    pthread_mutex_lock(&z->mu);
    int rc = z->gone ? -1 : send_msg(z->ctl, &h, msg, len, fds, nfds);
    zyg_hdr_t r = {0};
    int pidfd = -1;
    int got = 0;
    while (rc == 0 && got == 0) {
        r.kind = 0;
        got = read_one(z, -1, &r, &pidfd);
        if (got == 1 && r.kind != ZYG_REPLY)
            got = 0; /* an exit: noted; the reply is still to come */
    }
    if (rc != 0 || got < 0) {
        z->gone = true;
        pthread_mutex_unlock(&z->mu);
        return ferry__error(FERRY_ECLOSED, "worker processes: the helper (pid %d) is gone",
                            (int)z->pid);
    }
    pthread_mutex_unlock(&z->mu);
    if (r.err != 0 || r.pid <= 0) {
        if (pidfd >= 0)
            close(pidfd);
        return ferry__error(FERRY_ENOMEM, "worker processes: the helper's fork: %s",
                            strerror(r.err != 0 ? r.err : EAGAIN));
    }
    out->pid = r.pid;
    out->pidfd = pidfd;
    return 0;
}

int ferry__zyg_kill(const ferry__zyg_proc_t *p, int sig)
{
    if (p == NULL || p->pid <= 0)
        return ferry__error(FERRY_EINVAL, "worker processes: kill of no worker");
    int rc = p->pidfd >= 0 ? (int)syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0)
                           : kill(p->pid, sig);
    if (rc != 0 && errno == ESRCH)
        return ferry__error(FERRY_ECLOSED, "worker processes: worker %d has exited", (int)p->pid);
    if (rc != 0)
        return ferry__error(FERRY_EINVAL, "worker processes: signal %d to worker %d: %s", sig,
                            (int)p->pid, strerror(errno));
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ferry__zyg_wait(ferry__zyg_t *z, ferry__zyg_proc_t *p, uint64_t timeout_ns, int *status)
{
    if (z == NULL || p == NULL || p->pid <= 0 || status == NULL)
        return ferry__error(FERRY_EINVAL, "worker processes: wait for no worker");
    uint64_t end = now_ns() + timeout_ns;
    if (end < timeout_ns)
        end = UINT64_MAX;
    for (;;) {
        pthread_mutex_lock(&z->mu);
        for (unsigned i = 0; i < z->nnotes; i++)
            if (z->notes[i].pid == p->pid) {
                *status = z->notes[i].status;
                memmove(&z->notes[i], &z->notes[i + 1], sizeof(z->notes[0]) * (z->nnotes - i - 1));
                z->nnotes--;
                pthread_mutex_unlock(&z->mu);
                if (p->pidfd >= 0)
                    close(p->pidfd);
                p->pidfd = -1;
                return 0;
            }
        uint64_t t = now_ns();
        int ms = t >= end                     ? 0
                 : (end - t) / 1000000u >= 10 ? 10
                                              : (int)((end - t + 999999) / 1000000u);
        int got = read_one(z, ms, NULL, NULL);
        pthread_mutex_unlock(&z->mu);
        if (got < 0)
            return ferry__error(FERRY_ECLOSED,
                                "worker processes: the helper is gone; worker %d's "
                                "exit is not known",
                                (int)p->pid);
        if (got == 0 && t >= end)
            return ferry__error(FERRY_ETIMEDOUT, "worker processes: worker %d still runs",
                                (int)p->pid);
    }
}

int ferry__zyg_reap(ferry__zyg_t *z, ferry__zyg_proc_t *p, uint64_t timeout_ns, int *status)
{
    int rc = ferry__zyg_wait(z, p, timeout_ns, status);
    if (rc == FERRY_ETIMEDOUT) {
        ferry__zyg_kill(p, SIGKILL);
        rc = ferry__zyg_wait(z, p, timeout_ns, status);
    }
    if (p != NULL && p->pidfd >= 0) {
        close(p->pidfd);
        p->pidfd = -1;
    }
    return rc;
}

void ferry__zyg_stop(ferry__zyg_t *z)
{
    if (z == NULL)
        return;
    close(z->ctl);
    int st;
    while (waitpid(z->pid, &st, 0) < 0 && errno == EINTR)
        ;
    pthread_mutex_destroy(&z->mu);
    free(z);
}

pid_t ferry__zyg_pid(const ferry__zyg_t *z)
{
    return z != NULL ? z->pid : -1;
}
