/* The channel between a proxy and its worker (src/proc/chan.h), between this process and a
 * forked child: messages through the ring and over the socket (some with a descriptor) come
 * out in the order they were sent, whatever the interleaving and the pauses (random scripts
 * over many seeds, both sides sleeping and waking); a full ring refuses without waiting and
 * takes again once read; a receive waits no longer than asked; a peer killed mid-stream leaves
 * every message it sent readable, then the end; a ring the peer scribbles on reads as corrupt,
 * never as a wild read; misuse is refused. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "proc/chan.h"

typedef struct msg {
    uint32_t n;     /* its place in the script */
    uint32_t kind;  /* 0 ring, 1 socket, 2 socket with a descriptor */
    uint64_t check; /* n's hash: the bytes came whole */
    char pad[40];
} msg_t;

static uint64_t hash(uint32_t n)
{
    uint64_t x = n * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Fork a child that attaches to @peer and runs @fn; the parent's copies of @peer closed. */
static pid_t fork_peer(int peer[FERRY__CHAN_FDS], ferry__chan_t *mine,
                       int (*fn)(ferry__chan_t *c, uint64_t seed), uint64_t seed)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves no child behind */
        ferry__chan_close(mine);
        ferry__chan_t c;
        if (ferry__chan_attach(peer, &c) != 0)
            _exit(90);
        int rc = fn(&c, seed);
        ferry__chan_close(&c);
        _exit(rc);
    }
    for (int i = 0; i < FERRY__CHAN_FDS; i++)
        close(peer[i]);
    return pid;
}

static int child_status(pid_t pid)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define SCRIPT 3000

/* The child's script: SCRIPT messages, each through the ring or the socket at random (a tenth
 * with a descriptor), pauses now and then; a full ring is waited out. */
static int script(ferry__chan_t *c, uint64_t seed)
{
    for (uint32_t i = 0; i < SCRIPT; i++) {
        uint64_t r = test_rand_range(&seed, 0, 99);
        msg_t m = {.n = i, .kind = r < 70 ? 0 : r < 90 ? 1 : 2, .check = hash(i)};
        int rc;
        if (m.kind == 0) {
            while ((rc = ferry__chan_post(c, &m, sizeof(m))) != 0 && errno == EAGAIN)
                usleep(50);
        } else {
            int fd = m.kind == 2 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
            rc = ferry__chan_send(c, &m, sizeof(m), fd, 0);
            if (fd >= 0)
                close(fd);
        }
        if (rc != 0)
            return 10;
        if (test_rand_range(&seed, 0, 199) == 0)
            usleep((useconds_t)test_rand_range(&seed, 100, 3000));
    }
    return 0;
}

static void test_ring_and_socket_keep_the_order_sent(void **state)
{
    (void)state;
    for (unsigned k = 0; k < 12; k++) {
        uint64_t seed = test_seed(500 + k);
        ferry__chan_t c;
        int peer[FERRY__CHAN_FDS];
        /* a small ring on some seeds: the sender meets it full */
        assert_int_equal(ferry__chan_pair(sizeof(msg_t), k % 2 ? 8 : 256, &c, peer), 0);
        pid_t pid = fork_peer(peer, &c, script, seed);
        uint32_t next = 0, fds = 0;
        for (;;) {
            msg_t m;
            int fd = -1;
            ssize_t n = ferry__chan_recv(&c, &m, sizeof(m), &fd, 10000);
            if (n < 0)
                break;
            assert_int_equal(n, sizeof(m));
            if (m.n != next)
                fail_msg("seed %u: message %u came where %u was due (kind %u)", k, m.n, next,
                         m.kind);
            assert_true(m.check == hash(m.n));
            assert_int_equal(fd >= 0, m.kind == 2);
            if (fd >= 0) {
                fds++;
                close(fd);
            }
            next++;
            if (test_rand_range(&seed, 0, 299) == 0) /* the reader is slow now and then */
                usleep(2000);
        }
        assert_int_equal(errno, EPIPE);
        assert_int_equal(next, SCRIPT);
        assert_true(fds > 0);
        assert_int_equal(child_status(pid), 0);
        ferry__chan_close(&c);
    }
}

/* Echo every ring message back through the ring, until the socket says stop. */
static int echo(ferry__chan_t *c, uint64_t seed)
{
    (void)seed;
    for (;;) {
        msg_t m;
        int fd = -1;
        ssize_t n = ferry__chan_recv(c, &m, sizeof(m), &fd, -1);
        if (n < 0)
            return 11;
        if (m.kind != 0)
            return 0;
        while (ferry__chan_post(c, &m, sizeof(m)) != 0)
            usleep(20);
    }
}

static void test_both_ways_full_ring_and_timeouts(void **state)
{
    (void)state;
    ferry__chan_t c;
    int peer[FERRY__CHAN_FDS];
    assert_int_equal(ferry__chan_pair(sizeof(msg_t), 4, &c, peer), 0);
    /* nothing sent: a receive waits as long as asked, and no longer */
    msg_t m = {0};
    int fd = -1;
    uint64_t t0 = now_ms();
    assert_int_equal(ferry__chan_recv(&c, &m, sizeof(m), &fd, 60), 0);
    uint64_t took = now_ms() - t0;
    assert_true(took >= 59 && took < 2000);
    /* four fit, the fifth is refused at once */
    for (uint32_t i = 0; i < 4; i++) {
        m = (msg_t){.n = i, .check = hash(i)};
        assert_int_equal(ferry__chan_post(&c, &m, sizeof(m)), 0);
    }
    assert_int_equal(ferry__chan_post(&c, &m, sizeof(m)), -1);
    assert_int_equal(errno, EAGAIN);
    /* the echo reads them and sends them back; the ring takes again; 2000 round trips */
    pid_t pid = fork_peer(peer, &c, echo, 0);
    uint32_t got = 0, sent = 4;
    while (got < 2000) {
        ssize_t n = ferry__chan_recv(&c, &m, sizeof(m), &fd, 10000);
        assert_int_equal(n, sizeof(m));
        assert_int_equal(m.n, got);
        assert_true(m.check == hash(got));
        got++;
        if (sent < 2000) {
            m = (msg_t){.n = sent, .check = hash(sent)};
            while (ferry__chan_post(&c, &m, sizeof(m)) != 0)
                usleep(20);
            sent++;
        }
    }
    m = (msg_t){.kind = 1};
    assert_int_equal(ferry__chan_send(&c, &m, sizeof(m), -1, 0), 0);
    assert_int_equal(child_status(pid), 0);
    /* the peer is gone: the end, at once */
    assert_int_equal(ferry__chan_recv(&c, &m, sizeof(m), &fd, 10000), -1);
    ferry__chan_close(&c);
    ferry__chan_close(&c); /* twice: a no-op */
    assert_int_equal(ferry__chan_post(&c, &m, sizeof(m)), -1);
}

/* Ten messages through the ring, one over the socket, then killed. */
static int post_and_die(ferry__chan_t *c, uint64_t seed)
{
    (void)seed;
    for (uint32_t i = 0; i < 10; i++) {
        msg_t m = {.n = i, .check = hash(i)};
        if (ferry__chan_post(c, &m, sizeof(m)) != 0)
            return 12;
    }
    msg_t last = {.n = 10, .kind = 1, .check = hash(10)};
    ferry__chan_send(c, &last, sizeof(last), -1, 0);
    raise(SIGKILL);
    return 13;
}

/* @how 0: a bogus tail, far past the head; 1: a message whose length is rewritten after it was
 * posted, past the slot (the ring's three cache lines, then the slot's socket count, then its
 * length). */
static int scribble(ferry__chan_t *c, uint64_t how)
{
    if (how == 0) {
        *(volatile uint64_t *)((char *)c->tx + 64) = 1u << 30;
    } else {
        msg_t one = {.n = 0};
        if (ferry__chan_post(c, &one, sizeof(one)) != 0)
            return 15;
        *(volatile uint32_t *)((char *)c->tx + 3 * 64 + 8) = 1u << 20;
    }
    msg_t m = {.kind = 1};
    return ferry__chan_send(c, &m, sizeof(m), -1, 0) == 0 ? 0 : 14;
}

static void test_a_killed_peer_and_a_corrupt_ring(void **state)
{
    (void)state;
    ferry__chan_t c;
    int peer[FERRY__CHAN_FDS];
    assert_int_equal(ferry__chan_pair(sizeof(msg_t), 64, &c, peer), 0);
    pid_t pid = fork_peer(peer, &c, post_and_die, 0);
    assert_int_equal(child_status(pid), 128 + SIGKILL);
    msg_t m;
    int fd = -1;
    for (uint32_t i = 0; i <= 10; i++) {
        assert_int_equal(ferry__chan_recv(&c, &m, sizeof(m), &fd, 1000), sizeof(m));
        assert_int_equal(m.n, i);
    }
    assert_int_equal(ferry__chan_recv(&c, &m, sizeof(m), &fd, 1000), -1);
    assert_int_equal(errno, EPIPE);
    ferry__chan_close(&c);

    for (uint64_t how = 0; how < 2; how++) {
        assert_int_equal(ferry__chan_pair(sizeof(msg_t), 64, &c, peer), 0);
        pid = fork_peer(peer, &c, scribble, how);
        assert_int_equal(child_status(pid), 0);
        assert_int_equal(ferry__chan_recv(&c, &m, sizeof(m), &fd, 1000), -1);
        assert_int_equal(errno, EBADMSG);
        ferry__chan_close(&c);
    }
}

static void test_misuse(void **state)
{
    (void)state;
    ferry__chan_t c;
    int peer[FERRY__CHAN_FDS];
    assert_int_equal(ferry__chan_pair(0, 8, &c, peer), FERRY_EINVAL);
    assert_int_equal(ferry__chan_pair(FERRY__CHAN_MAX_SLOT + 1, 8, &c, peer), FERRY_EINVAL);
    assert_int_equal(ferry__chan_pair(64, FERRY__CHAN_MAX_SLOTS + 1, &c, peer), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "at most"));
    assert_int_equal(peer[0], -1);
    /* descriptors that are not a channel's: refused, and closed */
    int sv[2], p1[2], p2[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    assert_int_equal(pipe(p1), 0);
    assert_int_equal(pipe(p2), 0);
    int bogus[FERRY__CHAN_FDS] = {sv[0], p1[0], p2[0], p2[1]};
    assert_int_equal(ferry__chan_attach(bogus, &c), FERRY_EINVAL);
    assert_int_equal(fcntl(p1[0], F_GETFD), -1); /* closed */
    close(sv[1]);
    close(p1[1]);
    /* a message larger than the slot, a buffer smaller than the message */
    assert_int_equal(ferry__chan_pair(16, 8, &c, peer), 0);
    char big[64] = {0};
    assert_int_equal(ferry__chan_post(&c, big, sizeof(big)), -1);
    assert_int_equal(errno, EMSGSIZE);
    ferry__chan_t other;
    assert_int_equal(ferry__chan_attach(peer, &other), 0);
    assert_int_equal(ferry__chan_post(&other, big, 16), 0);
    int fd = -1;
    assert_int_equal(ferry__chan_recv(&c, big, 8, &fd, 100), -1);
    assert_int_equal(errno, EMSGSIZE);
    ferry__chan_close(&other);
    ferry__chan_close(&c);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_ring_and_socket_keep_the_order_sent),
          cmocka_unit_test(test_both_ways_full_ring_and_timeouts),
          cmocka_unit_test(test_a_killed_peer_and_a_corrupt_ring), cmocka_unit_test(test_misuse))
