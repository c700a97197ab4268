/* `ferry run`'s files and signals (run_io.h): what --input and --output may name and how they
 * are opened without blocking, the temporary output renamed into place once verified, and the
 * thread that turns SIGINT and SIGTERM into an orderly stop. */
#include "run_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define IN_ACCEPTED                                                                                \
    "a regular file, a character device (/dev/zero), or - for stdin (a pipe: --input - < FIFO)"
#define OUT_ACCEPTED                                                                               \
    "a regular file (replaced once the run verified), a character device (/dev/null), or - for "   \
    "stdout (a pipe: --output - > FIFO)"

static const char *kind_text(mode_t m)
{
    return S_ISFIFO(m)   ? "is a FIFO (named pipe), which could block for ever"
           : S_ISDIR(m)  ? "is a directory"
           : S_ISBLK(m)  ? "is a block device"
           : S_ISSOCK(m) ? "is a socket"
                         : "is not a regular file";
}

static int refuse_kind(const char *cmd, const char *flag, const char *path, mode_t m,
                       const char *accepted)
{
    return cli_usage_error(cmd, "--%s %s: %s; accepted: %s", flag, path, kind_text(m), accepted);
}

/* Opened with O_NONBLOCK so that no open can wait (a device that waits for a carrier, a FIFO
 * swapped in after the stat), then made blocking again for reads and writes. */
static int open_nonblocking(const char *path, int flags)
{
    int fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int run_input_open(const char *cmd, const char *path, run_file_t *in)
{
    in->name = path;
    if (strcmp(path, "-") == 0) {
        in->fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
        if (in->fd < 0 || fstat(in->fd, &in->sb) != 0)
            return cli_fail(cmd, "cannot read --input - (stdin): %s", strerror(errno));
        in->stream = true;
        return CLI_OK;
    }
    struct stat sb;
    if (stat(path, &sb) != 0)
        return cli_fail(cmd, "cannot read --input %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode))
        return refuse_kind(cmd, "input", path, sb.st_mode, IN_ACCEPTED);
    in->fd = open_nonblocking(path, O_RDONLY);
    if (in->fd < 0 || fstat(in->fd, &in->sb) != 0)
        return cli_fail(cmd, "cannot read --input %s: %s", path, strerror(errno));
    if (!S_ISREG(in->sb.st_mode) && !S_ISCHR(in->sb.st_mode))
        return refuse_kind(cmd, "input", path, in->sb.st_mode, IN_ACCEPTED);
    in->stream = S_ISCHR(in->sb.st_mode);
    return CLI_OK;
}

/* Whether @sb is the regular file @in reads: writing it would destroy the input. */
static bool is_input(const run_file_t *in, const struct stat *sb)
{
    return in != NULL && in->fd >= 0 && S_ISREG(in->sb.st_mode) && S_ISREG(sb->st_mode) &&
           in->sb.st_dev == sb->st_dev && in->sb.st_ino == sb->st_ino;
}

static int refuse_same(const char *cmd, const char *path, const run_file_t *in)
{
    return cli_usage_error(cmd,
                           "--output %s is the same file as --input %s (device %llu, inode %llu): "
                           "writing it would destroy the input; accepted: an output that is "
                           "another file",
                           path, in->name, (unsigned long long)in->sb.st_dev,
                           (unsigned long long)in->sb.st_ino);
}

static int refuse_tty(const char *cmd, const char *path)
{
    return cli_usage_error(cmd,
                           "--output %s is a terminal: ferry writes binary data; accepted: %s, "
                           "redirected (--output - > FILE, --output - | PROGRAM)",
                           path, OUT_ACCEPTED);
}

static int open_stdout(const char *cmd, const run_file_t *in, run_file_t *out)
{
    if (isatty(STDOUT_FILENO))
        return refuse_tty(cmd, "-");
    if (fstat(STDOUT_FILENO, &out->sb) != 0)
        return cli_fail(cmd, "cannot write --output - (stdout): %s", strerror(errno));
    if (is_input(in, &out->sb))
        return refuse_same(cmd, "- (stdout)", in);
    fflush(stdout);
    out->fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (out->fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
        return cli_fail(cmd, "--output - (stdout): %s", strerror(errno));
    out->stream = true;
    return CLI_OK;
}

int run_output_open(const char *cmd, const char *path, const run_file_t *in, run_file_t *out)
{
    out->name = path;
    if (strcmp(path, "-") == 0)
        return open_stdout(cmd, in, out);
    out->exists = stat(path, &out->sb) == 0;
    if (!out->exists && errno != ENOENT)
        return cli_fail(cmd, "cannot write --output %s: %s", path, strerror(errno));
    if (out->exists && is_input(in, &out->sb))
        return refuse_same(cmd, path, in);
    if (out->exists && S_ISCHR(out->sb.st_mode)) {
        out->fd = open_nonblocking(path, O_WRONLY);
        if (out->fd < 0)
            return cli_fail(cmd, "cannot write --output %s: %s", path, strerror(errno));
        if (isatty(out->fd))
            return refuse_tty(cmd, path);
        out->stream = true;
        return CLI_OK;
    }
    if (out->exists && !S_ISREG(out->sb.st_mode))
        return refuse_kind(cmd, "output", path, out->sb.st_mode, OUT_ACCEPTED);
    if (out->exists && access(path, W_OK) != 0)
        return cli_fail(cmd, "cannot write --output %s: %s", path, strerror(errno));

    /* The target: through a symlink to the file it names, so that the link stays a link. */
    char real[PATH_MAX];
    out->target = strdup(out->exists && realpath(path, real) != NULL ? real : path);
    size_t n = out->target ? strlen(out->target) + 32 : 0;
    out->tmp = n ? malloc(n) : NULL;
    if (out->tmp == NULL)
        return cli_fail(cmd, "out of memory");
    const char *slash = strrchr(out->target, '/');
    int dirlen = slash ? (int)(slash - out->target + 1) : 0;
    snprintf(out->tmp, n, "%.*s.%s.ferry-XXXXXX", dirlen, out->target, out->target + dirlen);
    out->fd = mkostemp(out->tmp, O_CLOEXEC);
    if (out->fd < 0) {
        int e = errno;
        free(out->tmp);
        out->tmp = NULL;
        return cli_fail(cmd, "cannot write --output %s (a temporary file beside it): %s", path,
                        strerror(e));
    }
    /* mkstemp makes it 0600: give it the mode the file would have had, created (0644 less the
     * umask, as before) or replaced (its own). No thread that makes files runs yet to race on
     * umask. */
    mode_t um = umask(0);
    umask(um);
    mode_t mode = out->exists ? out->sb.st_mode & 07777 : 0644 & ~um;
    if (fchmod(out->fd, mode) != 0)
        return cli_fail(cmd, "--output %s: setting the mode of %s: %s", path, out->tmp,
                        strerror(errno));
    return CLI_OK;
}

int run_output_commit(const char *cmd, run_file_t *out)
{
    if (out->fd < 0)
        return CLI_OK;
    int fd = out->fd;
    out->fd = -1;
    if (out->tmp == NULL) {
        if (close(fd) != 0)
            return cli_fail(cmd, "closing --output %s: %s", out->name, strerror(errno));
        return CLI_OK;
    }
    /* On disk before the rename: a crash leaves the old file or the whole new one. */
    const char *what = "flushing";
    int bad = fsync(fd);
    if (close(fd) != 0 && bad == 0) {
        bad = -1;
        what = "closing";
    }
    if (bad == 0 && rename(out->tmp, out->target) != 0) {
        bad = -1;
        what = "renaming into place";
    }
    if (bad != 0) {
        int e = errno;
        unlink(out->tmp);
        free(out->tmp);
        out->tmp = NULL;
        return cli_fail(cmd, "--output %s: %s: %s (nothing written)", out->name, what, strerror(e));
    }
    free(out->tmp);
    out->tmp = NULL;
    return CLI_OK;
}

void run_file_close(run_file_t *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp != NULL)
        unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
    free(f->target);
    f->target = NULL;
}

/* ---- signals ------------------------------------------------------------------------------- */

struct run_signals {
    const char *cmd;
    run_file_t *out;
    uint64_t grace_ns;
    void (*on_signal)(int sig, void *arg);
    void *arg;
    sigset_t set, old;
    pthread_t thread;
    bool listening; /* the thread runs (run_signals_listen) */
    pthread_mutex_t lock;
    bool finished; /* under lock */
    int caught;    /* under lock */
};

const char *run_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A second signal (@sig), or the work in flight outlived the grace period (@sig 0): remove
 * the partial output and end the process now. Under sg->lock, so the run cannot rename the
 * output meanwhile. */
static void give_up(run_signals_t *sg, int sig)
{
    bool removed = sg->out != NULL && sg->out->tmp != NULL && unlink(sg->out->tmp) == 0;
    char msg[512], why[128];
    if (sig != 0)
        snprintf(why, sizeof(why), "%s after %s: stopped at once", run_signal_name(sig),
                 run_signal_name(sg->caught));
    else
        snprintf(why, sizeof(why), "%s: the work in flight took over %llu s: stopped",
                 run_signal_name(sg->caught), (unsigned long long)(sg->grace_ns / 1000000000u));
    int n =
        snprintf(msg, sizeof(msg), "%sferry %s: %s%s\n", isatty(STDERR_FILENO) ? "\r\033[K" : "",
                 sg->cmd, why, removed ? "; the partial output was removed" : "");
    if (n > 0)
        (void)!write(STDERR_FILENO, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    _exit(128 + (sig != 0 ? sig : sg->caught));
}

static void *signal_main(void *arg)
{
    run_signals_t *sg = arg;
    uint64_t first_ns = 0;
    for (;;) {
        /* 50 ms: how late the thread sees the run finish */
        struct timespec to = {0, 50 * 1000 * 1000};
        int sig = sigtimedwait(&sg->set, NULL, &to);
        pthread_mutex_lock(&sg->lock);
        if (sg->finished) {
            /* too late to stop anything: pending again, for the default action once the
             * mask is restored */
            if (sig > 0)
                kill(getpid(), sig);
            pthread_mutex_unlock(&sg->lock);
            return NULL;
        }
        if (sig > 0 && sg->caught == 0) {
            sg->caught = sig;
            first_ns = mono_ns();
            pthread_mutex_unlock(&sg->lock);
            sg->on_signal(sig, sg->arg);
            continue;
        }
        if (sig > 0)
            give_up(sg, sig);
        if (first_ns != 0 && mono_ns() - first_ns > sg->grace_ns)
            give_up(sg, 0);
        pthread_mutex_unlock(&sg->lock);
    }
}

void run_signals_watch(run_signals_t *sg, run_file_t *out)
{
    pthread_mutex_lock(&sg->lock);
    sg->out = out;
    pthread_mutex_unlock(&sg->lock);
}

int run_signals_start(const char *cmd, unsigned grace_s, void (*on_signal)(int sig, void *arg),
                      void *arg, run_signals_t **out_sg)
{
    run_signals_t *sg = calloc(1, sizeof(*sg));
    if (sg == NULL)
        return cli_fail(cmd, "out of memory");
    sg->cmd = cmd;
    sg->grace_ns = (uint64_t)grace_s * 1000000000u;
    sg->on_signal = on_signal;
    sg->arg = arg;
    pthread_mutex_init(&sg->lock, NULL);
    /* A signal the process was started ignoring (nohup, a shell's background job) stays
     * ignored. */
    sigemptyset(&sg->set);
    const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa;
        if (sigaction(sigs[i], NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
            sigaddset(&sg->set, sigs[i]);
    }
    int e = pthread_sigmask(SIG_BLOCK, &sg->set, &sg->old);
    if (e != 0) {
        pthread_mutex_destroy(&sg->lock);
        free(sg);
        return cli_fail(cmd, "cannot watch for signals: %s", strerror(e));
    }
    *out_sg = sg;
    return CLI_OK;
}

int run_signals_listen(run_signals_t *sg)
{
    int e = pthread_create(&sg->thread, NULL, signal_main, sg);
    if (e != 0)
        return cli_fail(sg->cmd, "cannot watch for signals: %s", strerror(e));
    sg->listening = true;
    return CLI_OK;
}

void run_signals_finish(run_signals_t *sg)
{
    if (sg == NULL)
        return;
    pthread_mutex_lock(&sg->lock);
    sg->finished = true;
    pthread_mutex_unlock(&sg->lock);
}

int run_signals_caught(run_signals_t *sg)
{
    if (sg == NULL)
        return 0;
    pthread_mutex_lock(&sg->lock);
    int sig = sg->caught;
    pthread_mutex_unlock(&sg->lock);
    return sig;
}

void run_signals_stop(run_signals_t *sg)
{
    if (sg == NULL)
        return;
    run_signals_finish(sg);
    if (sg->listening)
        pthread_join(sg->thread, NULL);
    /* a signal left pending ends the process when unblocked: what was printed goes first */
    fflush(stdout);
    fflush(stderr);
    pthread_sigmask(SIG_SETMASK, &sg->old, NULL);
    pthread_mutex_destroy(&sg->lock);
    free(sg);
}
