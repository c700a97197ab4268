/* Sequential file streams through io_uring (file_io.h). A ring of @depth slots, slot k holding
 * request k mod depth: requests complete in any order and are handed on in file order, a slot
 * being refilled only after its request was handed on. */
#include "io/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

typedef struct io_slot {
    uint64_t seq;  /* the request's number: its offset is seq * request_bytes */
    size_t want;   /* bytes the stream needs from this request */
    size_t done;   /* bytes transferred so far */
    bool busy;     /* submitted, not yet handed on */
    bool complete; /* done >= want */
    bool direct;   /* the request in flight went with O_DIRECT */
} io_slot_t;

typedef struct io_stream {
    const ferry__io_spec_t *s;
    int fd;
    bool direct;
    uint64_t total; /* bytes to move */
    uint64_t nreq;  /* requests */
    unsigned nslots;
    unsigned char *bufs;
    io_slot_t *slots;
    struct io_uring ring;
    unsigned inflight;
} io_stream_t;

static const char *what(const ferry__io_spec_t *s)
{
    return s->write ? "write" : "read";
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* Open @s->path for its direction, refusing what is not a regular file (a FIFO is opened
 * without blocking), then ask for O_DIRECT: a file system that refuses it (EINVAL) is read
 * and written buffered. */
static int open_file(io_stream_t *st)
{
    const ferry__io_spec_t *s = st->s;
    struct stat sb;
    if (s->write) {
        if (stat(s->path, &sb) == 0) {
            if (!s->force)
                return ferry__error(FERRY_EINVAL,
                                    "'%s' exists: a write makes a new file (force to replace "
                                    "a regular file)",
                                    s->path);
            if (!S_ISREG(sb.st_mode))
                return ferry__error(FERRY_EINVAL, "'%s' is %s: only a regular file is replaced",
                                    s->path, kind_of(sb.st_mode));
        }
        int fl = O_WRONLY | O_CREAT | O_CLOEXEC | (s->force ? O_TRUNC : O_EXCL);
        st->fd = open(s->path, fl, 0644);
    } else {
        st->fd = open(s->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    }
    if (st->fd < 0)
        return ferry__error(errno == EEXIST ? FERRY_EINVAL : FERRY_EIO, "open '%s' for %s: %s",
                            s->path, what(s), strerror(errno));
    if (fstat(st->fd, &sb) != 0)
        return ferry__error(FERRY_EIO, "stat '%s': %s", s->path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ferry__error(FERRY_EINVAL, "'%s' is %s: accepted: a regular file", s->path,
                            kind_of(sb.st_mode));
    int fl = fcntl(st->fd, F_GETFL);
    if (fl < 0 || fcntl(st->fd, F_SETFL, (fl & ~O_NONBLOCK) | O_DIRECT) != 0) {
        if (errno != EINVAL)
            return ferry__error(FERRY_EIO, "fcntl '%s': %s", s->path, strerror(errno));
        if (fl < 0 || fcntl(st->fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            return ferry__error(FERRY_EIO, "fcntl '%s': %s", s->path, strerror(errno));
    } else {
        st->direct = true;
    }
    if (s->write)
        st->total = s->bytes;
    else
        st->total = s->bytes && s->bytes < (uint64_t)sb.st_size ? s->bytes : (uint64_t)sb.st_size;
    return 0;
}

/* The file system took O_DIRECT on open and refused a request, or a short transfer left an
 * unaligned rest: go on buffered. */
static int go_buffered(io_stream_t *st)
{
    int fl = fcntl(st->fd, F_GETFL);
    if (fl < 0 || fcntl(st->fd, F_SETFL, fl & ~O_DIRECT) != 0)
        return ferry__error(FERRY_EIO, "fcntl '%s': %s", st->s->path, strerror(errno));
    st->direct = false;
    ferry_log(FERRY_LOG_DEBUG, "io", "'%s': O_DIRECT refused, buffered from here", st->s->path);
    return 0;
}

static unsigned char *slot_buf(const io_stream_t *st, unsigned k)
{
    return st->bufs + (size_t)k * st->s->request_bytes;
}

/* Submit (the rest of) slot @k's request. */
static int submit(io_stream_t *st, unsigned k)
{
    io_slot_t *sl = &st->slots[k];
    size_t len = sl->want - sl->done;
    if (st->direct) /* whole blocks: a read stops at the end of the file, a write is cut back */
        len = (len + FERRY__IO_ALIGN - 1) / FERRY__IO_ALIGN * FERRY__IO_ALIGN;
    uint64_t off = sl->seq * st->s->request_bytes + sl->done;
    unsigned char *buf = slot_buf(st, k) + sl->done;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (sqe == NULL)
        return ferry__error(FERRY_EIO, "io_uring: no free submission entry");
    if (st->s->write)
        io_uring_prep_write(sqe, st->fd, buf, (unsigned)len, off);
    else
        io_uring_prep_read(sqe, st->fd, buf, (unsigned)len, off);
    io_uring_sqe_set_data64(sqe, k);
    sl->direct = st->direct;
    int rc = io_uring_submit(&st->ring);
    if (rc < 0)
        return ferry__error(FERRY_EIO, "io_uring submit for '%s': %s", st->s->path, strerror(-rc));
    st->inflight++;
    return 0;
}

/* Start request @seq in slot @k (writes: its buffer filled first). */
static int start(io_stream_t *st, unsigned k, uint64_t seq)
{
    io_slot_t *sl = &st->slots[k];
    uint64_t off = seq * st->s->request_bytes;
    uint64_t left = st->total - off;
    *sl = (io_slot_t){.seq = seq,
                      .want = left < st->s->request_bytes ? (size_t)left : st->s->request_bytes,
                      .busy = true};
    if (st->s->write) {
        unsigned char *buf = slot_buf(st, k);
        int rc = st->s->data(st->s->ctx, off, buf, sl->want);
        if (rc != 0)
            return rc;
        memset(buf + sl->want, 0, st->s->request_bytes - sl->want);
    }
    return submit(st, k);
}

/* One completion: account it, resubmit a short transfer's rest or fall back to buffered. */
static int complete(io_stream_t *st, unsigned k, int res)
{
    io_slot_t *sl = &st->slots[k];
    st->inflight--;
    if (res == -EINVAL && sl->direct) { /* the others in flight with O_DIRECT come here too */
        int rc = st->direct ? go_buffered(st) : 0;
        return rc ? rc : submit(st, k);
    }
    if (res < 0)
        return ferry__error(FERRY_EIO, "%s '%s' at byte %llu: %s", what(st->s), st->s->path,
                            (unsigned long long)(sl->seq * st->s->request_bytes + sl->done),
                            strerror(-res));
    if (res == 0)
        return ferry__error(FERRY_EIO, "%s '%s': no progress at byte %llu of %llu (%s)",
                            what(st->s), st->s->path,
                            (unsigned long long)(sl->seq * st->s->request_bytes + sl->done),
                            (unsigned long long)st->total,
                            st->s->write ? "device full?" : "the file shrank while read");
    sl->done += (size_t)res;
    if (sl->done >= sl->want) {
        sl->done = sl->want;
        sl->complete = true;
        return 0;
    }
    if (st->direct && sl->done % FERRY__IO_ALIGN != 0) {
        int rc = go_buffered(st);
        if (rc != 0)
            return rc;
    }
    return submit(st, k);
}

/* Hand on the finished requests at the head, in order, and refill their slots. */
static int advance(io_stream_t *st, uint64_t *head, uint64_t *next)
{
    for (;;) {
        unsigned k = (unsigned)(*head % st->nslots);
        io_slot_t *sl = &st->slots[k];
        if (*head >= st->nreq || !sl->busy || !sl->complete)
            return 0;
        if (!st->s->write && st->s->data != NULL) {
            int rc =
                st->s->data(st->s->ctx, sl->seq * st->s->request_bytes, slot_buf(st, k), sl->want);
            if (rc != 0)
                return rc;
        }
        sl->busy = false;
        (*head)++;
        if (*next < st->nreq) {
            int rc = start(st, k, (*next)++);
            if (rc != 0)
                return rc;
        }
    }
}

/* The ring: fill every slot, then complete, hand on and refill until the last request. On an
 * error the requests in flight are waited for before the buffers go. */
static int run_ring(io_stream_t *st)
{
    uint64_t head = 0, next = 0;
    int rc = 0;
    for (unsigned k = 0; rc == 0 && k < st->nslots; k++)
        rc = start(st, k, next++);
    while (st->inflight > 0) {
        struct io_uring_cqe *cqe = NULL;
        int w = io_uring_wait_cqe(&st->ring, &cqe);
        if (w == -EINTR)
            continue;
        if (w < 0) {
            /* nothing more can be waited for: leave the buffers to the process */
            st->bufs = NULL;
            return rc ? rc : ferry__error(FERRY_EIO, "io_uring wait: %s", strerror(-w));
        }
        unsigned k = (unsigned)io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&st->ring, cqe);
        if (rc != 0) { /* draining after an error */
            st->inflight--;
            continue;
        }
        rc = complete(st, k, res);
        if (rc == 0)
            rc = advance(st, &head, &next);
    }
    return rc;
}

int ferry__io_stream(const ferry__io_spec_t *s, ferry__io_stats_t *out)
{
    io_stream_t st = {.s = s, .fd = -1};
    int rc = open_file(&st);
    bool ring = false;
    if (rc != 0)
        goto out;
    st.nreq = (st.total + s->request_bytes - 1) / s->request_bytes;
    st.nslots = st.nreq < s->depth ? (unsigned)st.nreq : s->depth;
    uint64_t t0 = ferry__mono_ns();
    if (st.nslots > 0) {
        void *m = NULL;
        st.slots = calloc(st.nslots, sizeof(*st.slots));
        if (st.slots == NULL ||
            posix_memalign(&m, FERRY__IO_ALIGN, (size_t)st.nslots * s->request_bytes) != 0) {
            rc = ferry__error(FERRY_ENOMEM, "%s '%s': no memory for %u buffers of %zu bytes",
                              what(s), s->path, st.nslots, s->request_bytes);
            goto out;
        }
        st.bufs = m;
        memset(st.bufs, 0, (size_t)st.nslots * s->request_bytes); /* touched before timing */
        int q = io_uring_queue_init(st.nslots, &st.ring, 0);
        if (q < 0) {
            rc = ferry__error(FERRY_EIO, "io_uring set-up for '%s': %s", s->path, strerror(-q));
            goto out;
        }
        ring = true;
        t0 = ferry__mono_ns();
        rc = run_ring(&st);
    }
    if (rc == 0 && s->write && st.total % FERRY__IO_ALIGN != 0 &&
        ftruncate(st.fd, (off_t)st.total) != 0)
        rc = ferry__error(FERRY_EIO, "truncate '%s': %s", s->path, strerror(errno));
    if (rc == 0 && s->write && fdatasync(st.fd) != 0)
        rc = ferry__error(FERRY_EIO, "sync '%s': %s", s->path, strerror(errno));
    if (rc == 0 && out != NULL)
        *out = (ferry__io_stats_t){.bytes = st.total,
                                   .ns = ferry__mono_ns() - t0,
                                   .direct = st.direct,
                                   .depth = st.nslots};
out:
    if (ring)
        io_uring_queue_exit(&st.ring);
    free(st.bufs);
    free(st.slots);
    if (st.fd >= 0 && close(st.fd) != 0 && rc == 0)
        rc = ferry__error(FERRY_EIO, "close '%s': %s", s->path, strerror(errno));
    if (rc != 0 && s->write && st.fd >= 0)
        unlink(s->path); /* no half-written file left behind */
    return rc;
}
