/* What the GPU fault tests share (test_sticky.c, test_hang.c): each fault is planted in a child
 * process, as a sticky error or a hang ends the GPU path of its process for good; the parent
 * runs the child, bounds its time and reads its failure log. Included by tests/gpu only. */
#ifndef FERRY_TEST_FAULTCHILD_H
#define FERRY_TEST_FAULTCHILD_H

#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudatest.h"

extern char **environ;

/* Completions of 16 batches, by how they ended. */
typedef struct faultchild_done {
    atomic_int calls[16];
    atomic_int gpu, cpu, failed;
} faultchild_done_t;

static inline void faultchild_on_done(const ferry_batch_result_t *r, void *arg)
{
    faultchild_done_t *d = arg;
    atomic_fetch_add(&d->calls[r->id % 16], 1);
    atomic_fetch_add(r->where == FERRY_DONE_GPU   ? &d->gpu
                     : r->where == FERRY_DONE_CPU ? &d->cpu
                                                  : &d->failed,
                     1);
}

/* Run this test program again as a child (`--child KIND LOG`), which plants its fault and
 * exits 0 when its own checks held; kill it after 60 s (a hang after the fault is a failure,
 * not a stuck test). Its failure log must hold a record with error @error. */
static inline void faultchild_run(const char *kind, const char *error)
{
    char exe[4096], log[64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    snprintf(log, sizeof(log), "/tmp/ferry-fault-XXXXXX");
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    char *argv[] = {exe, "--child", (char *)kind, log, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, exe, NULL, NULL, argv, environ), 0);
    /* A hang after the fault is a failure, not a stuck test: 60 s, then the child is killed. */
    int status = 0;
    pid_t got = 0;
    for (int i = 0; i < 600 && (got = waitpid(pid, &status, WNOHANG)) == 0; i++)
        usleep(100000);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        unlink(log);
        fail_msg("the child (%s) did not finish within 60 s after the fault", kind);
    }
    assert_int_equal(got, pid);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[4096];
    int records = 0;
    bool named = false;
    char want[64];
    snprintf(want, sizeof(want), "\"error\":\"%s\"", error);
    while (fgets(line, sizeof(line), f) != NULL) {
        records++;
        named |= strstr(line, want) != NULL;
    }
    fclose(f);
    unlink(log);
    printf("# child (%s) exited %d; %d failure records, one with %s: %d\n", kind,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, records, error, named);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(records >= 1 && named);
}

#endif
