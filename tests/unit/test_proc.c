/* Worker processes' foundations (src/proc): the fork server starts workers that run a function
 * of this program with a message and descriptors, reports how each ended (an exit status, a
 * signal), kills through a pidfd, and takes every worker down with it when stopped; shared
 * memory regions in an arena reserved before the fork are mapped at the same address in a
 * worker, which writes what the parent reads; misuse is refused with a message. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "proc/shm.h"
#include "proc/zygote.h"

#define MIB ((size_t)1 << 20)

static ferry__zyg_t *zyg;
static ferry__shm_arena_t arena;

/* The arena first, then the helper: the reservation is in every worker. */
static int setup(void **state)
{
    (void)state;
    if (ferry__shm_arena_reserve(64 * MIB, &arena) != 0)
        return -1;
    return ferry__zyg_start(&zyg);
}

static int teardown(void **state)
{
    (void)state;
    ferry__zyg_stop(zyg);
    ferry__shm_arena_release(&arena);
    return 0;
}

/* Writes its message backwards to fds[0]; exits with the message's length. */
static int echo_back(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    if (nfds != 1)
        return 99;
    char buf[256];
    for (size_t i = 0; i < len && i < sizeof(buf); i++)
        buf[i] = ((const char *)msg)[len - 1 - i];
    return write(fds[0], buf, len) == (ssize_t)len ? (int)len : 98;
}

static void test_spawn_runs_a_function_with_message_and_fds(void **state)
{
    (void)state;
    int pp[2];
    assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
    ferry__zyg_proc_t w;
    assert_int_equal(ferry__zyg_spawn(zyg, echo_back, "ferry", 5, &pp[1], 1, &w), 0);
    assert_true(w.pid > 0 && w.pid != getpid() && w.pid != ferry__zyg_pid(zyg));
    close(pp[1]);
    char got[8] = {0};
    size_t n = 0;
    while (n < 5) {
        ssize_t k = read(pp[0], got + n, sizeof(got) - n);
        assert_true(k > 0);
        n += (size_t)k;
    }
    assert_string_equal(got, "yrref");
    int st = 0;
    assert_int_equal(ferry__zyg_wait(zyg, &w, 5000000000u, &st), 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 5);
    assert_int_equal(w.pidfd, -1); /* closed once it was waited for */
    close(pp[0]);
}

static int sleep_long(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    (void)msg, (void)len, (void)fds, (void)nfds;
    for (int i = 0; i < 6000; i++) /* a minute at most: a test that failed leaves nothing */
        usleep(10000);
    return 0;
}

static int die_by_signal(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    (void)len, (void)fds, (void)nfds;
    raise(*(const int *)msg);
    return 0;
}

static void test_signals_kill_and_timeouts(void **state)
{
    (void)state;
    ferry__zyg_proc_t w;
    int sig = SIGTERM;
    assert_int_equal(ferry__zyg_spawn(zyg, die_by_signal, &sig, sizeof(sig), NULL, 0, &w), 0);
    int st = 0;
    assert_int_equal(ferry__zyg_wait(zyg, &w, 5000000000u, &st), 0);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGTERM);
    /* a worker that never ends: the wait times out; a kill ends it */
    assert_int_equal(ferry__zyg_spawn(zyg, sleep_long, NULL, 0, NULL, 0, &w), 0);
    assert_int_equal(ferry__zyg_wait(zyg, &w, 20000000u, &st), FERRY_ETIMEDOUT);
    assert_non_null(strstr(ferry_last_error(), "still runs"));
    assert_int_equal(ferry__zyg_kill(&w, SIGKILL), 0);
    assert_int_equal(ferry__zyg_wait(zyg, &w, 5000000000u, &st), 0);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* exits nobody waited for yet are kept while another worker is started */
    ferry__zyg_proc_t a, b;
    sig = SIGUSR1;
    assert_int_equal(ferry__zyg_spawn(zyg, die_by_signal, &sig, sizeof(sig), NULL, 0, &a), 0);
    usleep(50000);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(null >= 0);
    assert_int_equal(ferry__zyg_spawn(zyg, echo_back, "x", 1, &null, 1, &b), 0);
    close(null);
    assert_int_equal(ferry__zyg_wait(zyg, &b, 5000000000u, &st), 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    assert_int_equal(ferry__zyg_wait(zyg, &a, 5000000000u, &st), 0);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1);
}

typedef struct region_msg {
    void *base, *a_base;
    size_t bytes, a_bytes;
} region_msg_t;

/* Maps the region it is given where the parent has it and turns every byte over. */
static int flip_region(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    const region_msg_t *m = msg;
    if (len != sizeof(*m) || nfds != 1)
        return 90;
    if (ferry__shm_map_at(fds[0], m->base, m->bytes, m->a_base, m->a_bytes) != 0)
        return 91;
    unsigned char *p = m->base;
    for (size_t i = 0; i < m->bytes; i++)
        p[i] ^= 0xff;
    return 0;
}

static void test_shared_memory_at_the_same_address(void **state)
{
    (void)state;
    ferry__shm_t r[3] = {FERRY__SHM_INIT, FERRY__SHM_INIT, FERRY__SHM_INIT};
    assert_int_equal(ferry__shm_create(&arena, 3 * MIB, "test", &r[0]), 0);
    assert_int_equal(r[0].bytes, 4 * MIB); /* whole huge pages */
    assert_ptr_equal(r[0].base, arena.base);
    assert_int_equal(ferry__shm_create(&arena, 1, "test", &r[1]), 0);
    assert_ptr_equal(r[1].base, (char *)arena.base + 4 * MIB);
    /* made after the helper was forked, and still where the worker can map it */
    for (int k = 0; k < 2; k++) {
        unsigned char *p = r[k].base;
        for (size_t i = 0; i < r[k].bytes; i++)
            p[i] = (unsigned char)(i * 7 + k);
        region_msg_t m = {r[k].base, arena.base, r[k].bytes, arena.bytes};
        ferry__zyg_proc_t w;
        assert_int_equal(ferry__zyg_spawn(zyg, flip_region, &m, sizeof(m), &r[k].fd, 1, &w), 0);
        int st = 0;
        assert_int_equal(ferry__zyg_wait(zyg, &w, 10000000000u, &st), 0);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        for (size_t i = 0; i < r[k].bytes; i++)
            if (p[i] != (unsigned char)~(unsigned char)(i * 7 + k))
                fail_msg("region %d byte %zu: %u", k, i, p[i]);
    }
    assert_true(ferry__shm_holds(&r[0], r[0].base, r[0].bytes));
    assert_false(ferry__shm_holds(&r[0], (char *)r[0].base + 1, r[0].bytes));
    assert_false(ferry__shm_holds(&r[0], r[1].base, 1));
    /* freed places are taken again, lowest first; a full arena says so */
    ferry__shm_destroy(&r[0]);
    assert_int_equal(r[0].fd, -1);
    assert_int_equal(ferry__shm_create(&arena, 2 * MIB, "again", &r[0]), 0);
    assert_ptr_equal(r[0].base, arena.base);
    assert_int_equal(ferry__shm_create(&arena, 64 * MIB, "big", &r[2]), FERRY_ENOMEM);
    assert_non_null(strstr(ferry_last_error(), "no room"));
    assert_int_equal(r[2].fd, -1);
    assert_int_equal(ferry__shm_create(&arena, 58 * MIB, "rest", &r[2]), 0);
    for (int k = 0; k < 3; k++)
        ferry__shm_destroy(&r[k]);
    assert_int_equal(arena.nfree, 1); /* all merged back */
    assert_int_equal(arena.free[0].bytes, arena.bytes);
    /* a worker asked to map outside the arena refuses */
    ferry__shm_t out = FERRY__SHM_INIT;
    assert_int_equal(ferry__shm_create(&arena, MIB, "x", &out), 0);
    region_msg_t m = {(char *)arena.base + arena.bytes, arena.base, MIB, arena.bytes};
    ferry__zyg_proc_t w;
    assert_int_equal(ferry__zyg_spawn(zyg, flip_region, &m, sizeof(m), &out.fd, 1, &w), 0);
    int st = 0;
    assert_int_equal(ferry__zyg_wait(zyg, &w, 10000000000u, &st), 0);
    assert_int_equal(WEXITSTATUS(st), 91);
    ferry__shm_destroy(&out);
}

static void test_misuse(void **state)
{
    (void)state;
    ferry__zyg_proc_t w;
    static char big[FERRY__ZYG_MAX_MSG + 1];
    assert_int_equal(ferry__zyg_spawn(NULL, echo_back, NULL, 0, NULL, 0, &w), FERRY_EINVAL);
    assert_int_equal(ferry__zyg_spawn(zyg, NULL, NULL, 0, NULL, 0, &w), FERRY_EINVAL);
    assert_int_equal(ferry__zyg_spawn(zyg, echo_back, big, sizeof(big), NULL, 0, &w), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "at most"));
    assert_int_equal(ferry__zyg_spawn(zyg, echo_back, NULL, 3, NULL, 0, &w), FERRY_EINVAL);
    assert_int_equal(ferry__zyg_kill(NULL, SIGKILL), FERRY_EINVAL);
    int st;
    assert_int_equal(ferry__zyg_wait(zyg, NULL, 0, &st), FERRY_EINVAL);
    ferry__shm_t r = FERRY__SHM_INIT;
    assert_int_equal(ferry__shm_create(&arena, 0, "zero", &r), FERRY_EINVAL);
    assert_int_equal(ferry__shm_create(NULL, MIB, "none", &r), FERRY_EINVAL);
    ferry__shm_destroy(NULL);
    ferry__shm_destroy(&r); /* never made: a no-op */
    ferry__zyg_stop(NULL);
    ferry__shm_arena_release(NULL);
}

/* Stopping the helper takes its workers down: none is left running. */
static void test_stop_ends_every_worker(void **state)
{
    (void)state;
    ferry__zyg_t *z = NULL;
    assert_int_equal(ferry__zyg_start(&z), 0);
    ferry__zyg_proc_t w[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(ferry__zyg_spawn(z, sleep_long, NULL, 0, NULL, 0, &w[i]), 0);
    pid_t helper = ferry__zyg_pid(z);
    ferry__zyg_stop(z);
    assert_int_equal(kill(helper, 0), -1); /* reaped */
    for (int i = 0; i < 3; i++) {
        /* gone (the helper reaped them) or at most a zombie for a moment */
        int gone = 0;
        for (int t = 0; t < 500 && !gone; t++) {
            struct pollfd pf = {.fd = w[i].pidfd, .events = POLLIN};
            gone = w[i].pidfd < 0 ? kill(w[i].pid, 0) != 0 : poll(&pf, 1, 10) == 1;
        }
        assert_true(gone);
        if (w[i].pidfd >= 0)
            close(w[i].pidfd);
    }
    /* a stopped helper's workers cannot be started */
    assert_int_equal(ferry__zyg_start(&z), 0);
    ferry__zyg_t *dead = z;
    kill(ferry__zyg_pid(dead), SIGKILL);
    usleep(20000);
    assert_int_equal(ferry__zyg_spawn(dead, sleep_long, NULL, 0, NULL, 0, &w[0]), FERRY_ECLOSED);
    assert_non_null(strstr(ferry_last_error(), "gone"));
    ferry__zyg_stop(dead);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_spawn_runs_a_function_with_message_and_fds),
          cmocka_unit_test(test_signals_kill_and_timeouts),
          cmocka_unit_test(test_shared_memory_at_the_same_address), cmocka_unit_test(test_misuse),
          cmocka_unit_test(test_stop_ends_every_worker))
