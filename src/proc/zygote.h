/* The fork server of worker processes (isolation=process: docs/architecture.md, "Worker
 * processes"). ferry__zyg_start forks a helper while this process is still what it was when
 * the runtime was made (before it starts threads and long before any CUDA call); every worker
 * is then forked from that helper, one thread, with this process's memory as it was then, so
 * that a function pointer of the program (a stage's launcher, the worker's main) names the same
 * code in the worker. Heap memory made later is not there: what a worker needs it gets as a
 * message, shared memory regions (shm.h) and descriptors.
 *
 * The helper reaps its workers and reports each exit; it kills them all and exits when its
 * control socket closes (this process called ferry__zyg_stop, or died). A worker dies with the
 * helper (PR_SET_PDEATHSIG). */
#ifndef FERRY_PROC_ZYGOTE_H
#define FERRY_PROC_ZYGOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FERRY__ZYG_MAX_MSG 65536 /* bytes of a worker's message */
#define FERRY__ZYG_MAX_FDS 16    /* descriptors given to a worker */

typedef struct ferry__zyg ferry__zyg_t;

/* What a worker runs: @msg (@len bytes, a copy of what spawn was given) and @fds (the
 * descriptors given, now this process's). Its return, 0 to 255, is the worker's exit status. */
typedef int (*ferry__zyg_entry_fn)(const void *msg, size_t len, const int *fds, unsigned nfds);

typedef struct ferry__zyg_proc {
    pid_t pid;
    int pidfd; /* readable once it has exited; -1 where the kernel has no pidfd_open */
} ferry__zyg_proc_t;

/* Fork the helper. Call it before this process starts threads of its own: the helper and its
 * workers inherit the memory of now, locks included. Returns 0, FERRY_ENOMEM (socketpair or
 * fork refused, errno named). */
int ferry__zyg_start(ferry__zyg_t **out);

/* Start a worker running @fn(@msg, @len, @fds, @nfds); @fds stay this process's too. Returns 0
 * with *@out filled, FERRY_EINVAL (NULL @z, @fn or @out; @len or @nfds over the limits),
 * FERRY_ECLOSED (the helper is gone), FERRY_ENOMEM (the helper's fork refused, errno named).
 * Thread-safe. */
int ferry__zyg_spawn(ferry__zyg_t *z, ferry__zyg_entry_fn fn, const void *msg, size_t len,
                     const int *fds, unsigned nfds, ferry__zyg_proc_t *out);

/* Send @sig to worker @p (through its pidfd where there is one: never to a recycled pid).
 * Returns 0, FERRY_EINVAL, FERRY_ECLOSED (it has exited). */
int ferry__zyg_kill(const ferry__zyg_proc_t *p, int sig);

/* Wait up to @timeout_ns for worker @p to exit; its wait status (waitpid's: WIFEXITED,
 * WIFSIGNALED) in *@status. Closes its pidfd once it has exited. Returns 0, FERRY_ETIMEDOUT,
 * FERRY_EINVAL, FERRY_ECLOSED (the helper is gone: the status is unknown). Thread-safe. */
int ferry__zyg_wait(ferry__zyg_t *z, ferry__zyg_proc_t *p, uint64_t timeout_ns, int *status);

/* End worker @p for good: wait up to @timeout_ns for it to exit, then SIGKILL it and wait as
 * long again. Its pidfd is closed however that ends (a worker that still runs, or whose exit
 * the helper never reported, is left to the helper, which kills and reaps every worker when it
 * stops): no descriptor outlives the call. Returns what the last wait returned, its status in
 * *@status. Thread-safe. */
int ferry__zyg_reap(ferry__zyg_t *z, ferry__zyg_proc_t *p, uint64_t timeout_ns, int *status);

/* Close the helper's control socket: it kills every worker still running, reaps them and exits;
 * wait for it and free. NULL is a no-op. */
void ferry__zyg_stop(ferry__zyg_t *z);

/* The helper's pid (for tests and logs). */
pid_t ferry__zyg_pid(const ferry__zyg_t *z);

#endif
