/* A channel between two processes (isolation=process: a pipeline's proxy and its worker):
 * small messages that flow all the time (a batch, its completion, a heartbeat) go through two
 * rings in shared memory, one each way, with no system call while the reader is awake; the
 * others (those with a descriptor, the rare and the large) go over a SOCK_SEQPACKET socket,
 * whose end also tells each side that the other has gone. A reader gets both in the order they
 * were sent: a ring message carries how many socket messages its sender had sent before it.
 * A reader that finds nothing sleeps in poll() on the socket and an eventfd; a sender that
 * finds it asleep writes the eventfd, once (the only system call of the ring's path).
 *
 * Each side's sends must be serialised by its user (one lock a side); one thread receives.
 * The process layer includes base alone (scripts/check-layers.sh). */
#ifndef FERRY_PROC_CHAN_H
#define FERRY_PROC_CHAN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FERRY__CHAN_FDS       4    /* the descriptors the other side is given */
#define FERRY__CHAN_MAX_SLOT  512  /* bytes of a ring message, at most */
#define FERRY__CHAN_MAX_SOCK  4096 /* bytes of a socket message, at most */
#define FERRY__CHAN_MAX_SLOTS 4096 /* messages a ring holds, at most */

struct ferry__chan_ring;

typedef struct ferry__chan {
    int sock;     /* -1 once closed */
    int wake_rx;  /* this side's eventfd: the peer writes it to wake this side */
    int wake_tx;  /* the peer's */
    void *mem;    /* the rings' shared memory, mapped here */
    size_t bytes; /* its size */
    struct ferry__chan_ring *tx, *rx;
    size_t slot;      /* bytes of a ring message */
    unsigned cap;     /* messages a ring holds */
    uint64_t tx_tail; /* this side's own copies of the indexes it owns (the peer's, in shared */
    uint64_t rx_head; /* memory, are read and checked, never trusted) */
    uint64_t sent;    /* socket messages sent (the sender's, under its lock) */
    uint64_t got;     /* socket messages received (the receiver's) */
    bool pending;     /* a socket message received, held until the ring messages before it are */
    bool ended;       /* the socket's end was read */
    ssize_t pend_n;   /* its bytes */
    int pend_fd;      /* its descriptor, -1 for none */
    unsigned char pend[FERRY__CHAN_MAX_SOCK];
} ferry__chan_t;

/* Make a channel: this side's into *@mine, and the descriptors for the other side (to hand it,
 * then close here) into @peer, for ferry__chan_attach. Rings of @cap messages (rounded up to a
 * power of two, at most FERRY__CHAN_MAX_SLOTS) of @slot bytes (at most FERRY__CHAN_MAX_SLOT).
 * Returns 0, FERRY_EINVAL (bad sizes), FERRY_ENOMEM (a socket, memfd, eventfd or mapping
 * refused: errno named). Descriptors are close-on-exec. */
int ferry__chan_pair(size_t slot, unsigned cap, ferry__chan_t *mine, int peer[FERRY__CHAN_FDS]);

/* The other side: attach to the descriptors ferry__chan_pair gave for it (the channel owns
 * them from now, even on an error). Returns 0, FERRY_EINVAL (not a channel's), FERRY_ENOMEM. */
int ferry__chan_attach(const int fds[FERRY__CHAN_FDS], ferry__chan_t *out);

/* Close this side: the peer reads the end of the socket. NULL, or closed, is a no-op. */
void ferry__chan_close(ferry__chan_t *c);

/* A message of @n bytes (at most the slot) through the ring; never waits. Returns 0, or -1:
 * the ring is full (errno EAGAIN) or the channel is closed (EPIPE). */
int ferry__chan_post(ferry__chan_t *c, const void *m, size_t n);

/* A message of @n bytes (at most FERRY__CHAN_MAX_SOCK) over the socket with descriptor @fd
 * (-1: none); @flags 0, or MSG_DONTWAIT not to wait for room. Returns 0, or -1 (errno: EAGAIN
 * when the socket was full; others when the peer has gone). */
int ferry__chan_send(ferry__chan_t *c, const void *m, size_t n, int fd, int flags);

/* The next message, in the order the peer sent them, into @m (@cap bytes), its descriptor into
 * *@fd (-1 when none; the caller owns it). Waits up to @timeout_ms (-1: for ever). Returns its
 * bytes; 0 when the time passed with none; -1 when the peer has gone and every message it sent
 * was read, or a message did not fit (EMSGSIZE), or the ring is corrupt (EBADMSG). */
ssize_t ferry__chan_recv(ferry__chan_t *c, void *m, size_t cap, int *fd, int timeout_ms);

#endif
