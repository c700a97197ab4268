/* A channel between two processes: two rings in shared memory and a socket (chan.h).
 *
 * The shared memory: a header (magic, slot, cap), then the ring the creator sends on, then the
 * peer's. A ring: the consumer's head, the producer's tail and the consumer's sleeping flag,
 * each on a cache line of its own, then cap slots of a 16-byte header (the sender's socket
 * count, the length) and the message. Each side keeps its own copy of the index it owns; the
 * other's, and a slot's header, read from shared memory once, are checked (a peer that
 * scribbles on the rings reads as a corrupt channel, never as a wild read here).
 *
 * Sleeping and waking: the consumer sets sleeping, then looks at the tail once more, then
 * polls; the producer stores the tail, then takes the flag: both sequentially consistent, so
 * either the consumer sees the message or the producer sees it asleep and writes its eventfd. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "proc/chan.h"
#include "proc/sock.h"

#define CHAN_MAGIC 0x6672636eu /* "frcn" */
#define LINE       64

struct ferry__chan_ring {
    _Alignas(LINE) _Atomic uint64_t head;
    _Alignas(LINE) _Atomic uint64_t tail;
    _Alignas(LINE) _Atomic uint32_t sleeping;
};

typedef struct chan_head {
    uint32_t magic, slot, cap, pad;
} chan_head_t;

typedef struct chan_slot {
    uint64_t seq; /* socket messages its sender had sent before it */
    uint32_t len;
    uint32_t pad;
    unsigned char data[];
} chan_slot_t;

static size_t stride_of(size_t slot)
{
    return sizeof(chan_slot_t) + ((slot + 7) & ~(size_t)7);
}

static size_t ring_bytes(size_t slot, unsigned cap)
{
    return sizeof(struct ferry__chan_ring) + (size_t)cap * stride_of(slot);
}

static size_t mem_bytes(size_t slot, unsigned cap)
{
    return LINE + 2 * ((ring_bytes(slot, cap) + LINE - 1) & ~(size_t)(LINE - 1));
}

static struct ferry__chan_ring *ring_at(void *mem, size_t slot, unsigned cap, int i)
{
    size_t rb = (ring_bytes(slot, cap) + LINE - 1) & ~(size_t)(LINE - 1);
    return (struct ferry__chan_ring *)((char *)mem + LINE + (size_t)i * rb);
}

static chan_slot_t *slot_at(const ferry__chan_t *c, struct ferry__chan_ring *r, uint64_t i)
{
    return (chan_slot_t *)((char *)(r + 1) + (size_t)(i & (c->cap - 1)) * stride_of(c->slot));
}

/* Map the rings of @mfd (@bytes) and fill @c's view of them; @creator: which ring is whose. */
static int map_rings(ferry__chan_t *c, int mfd, size_t bytes, bool creator)
{
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (mem == MAP_FAILED)
        return ferry__error(FERRY_ENOMEM, "a channel's rings: mmap: %s", strerror(errno));
    c->mem = mem;
    c->bytes = bytes;
    c->tx = ring_at(mem, c->slot, c->cap, creator ? 0 : 1);
    c->rx = ring_at(mem, c->slot, c->cap, creator ? 1 : 0);
    return 0;
}

static void init_fields(ferry__chan_t *c)
{
    memset(c, 0, offsetof(ferry__chan_t, pend));
    c->sock = c->wake_rx = c->wake_tx = c->pend_fd = -1;
}

int ferry__chan_pair(size_t slot, unsigned cap, ferry__chan_t *mine, int peer[FERRY__CHAN_FDS])
{
    init_fields(mine);
    for (int i = 0; i < FERRY__CHAN_FDS; i++)
        peer[i] = -1;
    if (slot == 0 || slot > FERRY__CHAN_MAX_SLOT || cap == 0 || cap > FERRY__CHAN_MAX_SLOTS)
        return ferry__error(FERRY_EINVAL,
                            "a channel of %u messages of %zu bytes (at most %d of "
                            "%d)",
                            cap, slot, FERRY__CHAN_MAX_SLOTS, FERRY__CHAN_MAX_SLOT);
    unsigned c2 = 1;
    while (c2 < cap)
        c2 <<= 1;
    mine->slot = slot;
    mine->cap = c2;
    size_t bytes = mem_bytes(slot, c2);
    int sv[2] = {-1, -1}, mfd = -1, ec = -1, ep = -1;
    const char *what = "socketpair";
    int rc = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
    if (rc == 0 && (what = "memfd_create", mfd = memfd_create("ferry:chan", MFD_CLOEXEC)) < 0)
        rc = -1;
    if (rc == 0 && (what = "ftruncate", ftruncate(mfd, (off_t)bytes)) != 0)
        rc = -1;
    if (rc == 0 && (what = "eventfd", ec = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        rc = -1;
    if (rc == 0 && (ep = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        rc = -1;
    if (rc == 0 && (what = "dup", (peer[2] = fcntl(ep, F_DUPFD_CLOEXEC, 0)) < 0 ||
                                      (peer[3] = fcntl(ec, F_DUPFD_CLOEXEC, 0)) < 0))
        rc = -1;
    if (rc != 0) {
        rc = ferry__error(FERRY_ENOMEM, "a channel: %s: %s", what, strerror(errno));
    } else if ((rc = map_rings(mine, mfd, bytes, true)) == 0) {
        *(chan_head_t *)mine->mem = (chan_head_t){CHAN_MAGIC, (uint32_t)slot, c2, 0};
        mine->sock = sv[0];
        mine->wake_rx = ec;
        mine->wake_tx = ep;
        peer[0] = sv[1];
        peer[1] = mfd;
        return 0;
    }
    int all[] = {sv[0], sv[1], mfd, ec, ep, peer[2], peer[3]};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i] >= 0)
            close(all[i]);
    peer[2] = peer[3] = -1;
    init_fields(mine);
    return rc;
}

int ferry__chan_attach(const int fds[FERRY__CHAN_FDS], ferry__chan_t *out)
{
    init_fields(out);
    struct stat sb;
    chan_head_t h = {0};
    int rc = 0;
    if (fstat(fds[1], &sb) != 0 || (size_t)sb.st_size < sizeof(h) ||
        pread(fds[1], &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != CHAN_MAGIC ||
        h.slot == 0 || h.slot > FERRY__CHAN_MAX_SLOT || h.cap == 0 ||
        h.cap > FERRY__CHAN_MAX_SLOTS || (h.cap & (h.cap - 1)) != 0 ||
        (size_t)sb.st_size != mem_bytes(h.slot, h.cap))
        rc = ferry__error(FERRY_EINVAL, "a channel's descriptors: not a channel's rings");
    if (rc == 0) {
        out->slot = h.slot;
        out->cap = h.cap;
        rc = map_rings(out, fds[1], (size_t)sb.st_size, false);
    }
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        close(fds[2]);
        close(fds[3]);
        init_fields(out);
        return rc;
    }
    out->sock = fds[0];
    out->wake_rx = fds[2];
    out->wake_tx = fds[3];
    return 0;
}

void ferry__chan_close(ferry__chan_t *c)
{
    if (c == NULL || c->sock < 0)
        return;
    close(c->sock);
    close(c->wake_rx);
    close(c->wake_tx);
    if (c->pending && c->pend_fd >= 0)
        close(c->pend_fd);
    munmap(c->mem, c->bytes);
    init_fields(c);
}

int ferry__chan_post(ferry__chan_t *c, const void *m, size_t n)
{
    if (c->sock < 0) {
        errno = EPIPE;
        return -1;
    }
    if (n > c->slot) {
        errno = EMSGSIZE;
        return -1;
    }
    uint64_t t = c->tx_tail;
    uint64_t h = atomic_load_explicit(&c->tx->head, memory_order_acquire);
    if (t - h >= c->cap) { /* full (or a head the peer wrote out of range: never freed) */
        errno = EAGAIN;
        return -1;
    }
    chan_slot_t *s = slot_at(c, c->tx, t);
    s->seq = c->sent;
    s->len = (uint32_t)n;
    memcpy(s->data, m, n);
    c->tx_tail = t + 1;
    atomic_store_explicit(&c->tx->tail, t + 1, memory_order_seq_cst);
    if (atomic_exchange_explicit(&c->tx->sleeping, 0, memory_order_seq_cst) != 0) {
        uint64_t one = 1;
        ssize_t w = write(c->wake_tx, &one, sizeof(one));
        (void)w; /* EAGAIN: the counter is full, so it is readable already */
    }
    return 0;
}

int ferry__chan_send(ferry__chan_t *c, const void *m, size_t n, int fd, int flags)
{
    if (c->sock < 0 || n > FERRY__CHAN_MAX_SOCK) {
        errno = c->sock < 0 ? EPIPE : EMSGSIZE;
        return -1;
    }
    if (ferry__sock_send(c->sock, m, n, NULL, 0, &fd, fd >= 0 ? 1 : 0, flags) != 0)
        return -1;
    c->sent++;
    return 0;
}

/* The ring's next message, or NULL when there is none; *@bad when the tail is out of range.
 * Its socket count and length are read once, into @seq and @len (the peer may write the slot
 * again: what was checked is what is used). */
static chan_slot_t *peek(ferry__chan_t *c, bool *bad, uint64_t *seq, uint32_t *len)
{
    uint64_t h = c->rx_head;
    uint64_t t = atomic_load_explicit(&c->rx->tail, memory_order_seq_cst);
    if (t == h)
        return NULL;
    chan_slot_t *s = slot_at(c, c->rx, h);
    *seq = ((volatile chan_slot_t *)s)->seq;
    *len = ((volatile chan_slot_t *)s)->len;
    if (t - h > c->cap || *len > c->slot) {
        *bad = true;
        return NULL;
    }
    return s;
}

/* One socket message into the pending buffer: 0, or -1 at the end of the stream. */
static int read_sock(ferry__chan_t *c)
{
    unsigned nfds = 0;
    int fd = -1;
    ssize_t n = ferry__sock_recv(c->sock, c->pend, sizeof(c->pend), NULL, 0, &fd, 1, &nfds);
    if (n <= 0) {
        c->ended = true;
        return -1;
    }
    c->got++;
    c->pending = true;
    c->pend_n = n;
    c->pend_fd = nfds > 0 ? fd : -1;
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Sleep until the ring or the socket has something, or @ms pass (-1: for ever); a socket
 * message that came is read (pending), or its end (ended). */
static void sleep_for(ferry__chan_t *c, int ms)
{
    atomic_store_explicit(&c->rx->sleeping, 1, memory_order_seq_cst);
    bool bad = false;
    uint64_t seq;
    uint32_t len;
    if (peek(c, &bad, &seq, &len) != NULL || bad) {
        atomic_store_explicit(&c->rx->sleeping, 0, memory_order_relaxed);
        return;
    }
    struct pollfd pf[2] = {{.fd = c->sock, .events = POLLIN}, {.fd = c->wake_rx, .events = POLLIN}};
    int n = poll(pf, 2, ms);
    atomic_store_explicit(&c->rx->sleeping, 0, memory_order_relaxed);
    if (n > 0 && (pf[1].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(c->wake_rx, &v, sizeof(v));
        (void)r;
    }
    if (n > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
        read_sock(c);
}

static ssize_t deliver_pending(ferry__chan_t *c, void *m, size_t cap, int *fd)
{
    c->pending = false;
    if ((size_t)c->pend_n > cap) {
        if (c->pend_fd >= 0)
            close(c->pend_fd);
        errno = EMSGSIZE;
        return -1;
    }
    memcpy(m, c->pend, (size_t)c->pend_n);
    *fd = c->pend_fd;
    c->pend_fd = -1;
    return c->pend_n;
}

ssize_t ferry__chan_recv(ferry__chan_t *c, void *m, size_t cap, int *fd, int timeout_ms)
{
    *fd = -1;
    if (c->sock < 0) {
        errno = EPIPE;
        return -1;
    }
    uint64_t until = timeout_ms >= 0 ? mono_ms() + (uint64_t)timeout_ms : 0;
    for (;;) {
        bool bad = false;
        uint64_t seq = 0;
        uint32_t len = 0;
        chan_slot_t *s = peek(c, &bad, &seq, &len);
        if (bad) {
            errno = EBADMSG;
            return -1;
        }
        /* a ring message sent before the pending socket message goes first; one sent after
         * socket messages not read yet waits for them (they were sent: the read is quick) */
        if (s != NULL && seq <= c->got && !(c->pending && seq >= c->got)) {
            if (len > cap) {
                errno = EMSGSIZE;
                return -1;
            }
            memcpy(m, s->data, len);
            c->rx_head++;
            atomic_store_explicit(&c->rx->head, c->rx_head, memory_order_release);
            return (ssize_t)len;
        }
        if (c->pending)
            return deliver_pending(c, m, cap, fd);
        if (s != NULL) {
            if (read_sock(c) != 0) {
                errno = EBADMSG; /* a ring message after socket messages that never came */
                return -1;
            }
            continue;
        }
        if (c->ended) {
            errno = EPIPE;
            return -1;
        }
        int ms = -1;
        if (timeout_ms >= 0) {
            uint64_t now = mono_ms();
            if (now >= until)
                return 0;
            ms = (int)(until - now);
        }
        sleep_for(c, ms); /* then look again: the time is checked above */
    }
}
