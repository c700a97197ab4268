/* ferry_file_t (include/ferry/io.h): reads and writes of caller buffers through io_uring. A
 * request is cut into pieces of at most request_bytes, at most depth of them in flight; the
 * rest wait in a FIFO and start as pieces finish. Pieces go O_DIRECT (a second descriptor) when
 * buffer, offset and length are 4 KiB multiples and the file system takes it, else buffered;
 * short transfers are resubmitted. Submitting threads and the one waiter share a mutex; the
 * completion queue is read only by the waiter, outside it (IORING_FEAT_EXT_ARG: waiting with a
 * timeout puts nothing in the submission queue). */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/base.h"
#include "ferry/io.h"
#include "io/file_io.h"

#define FILE_FLAGS                                                                                 \
    (FERRY_FILE_READ | FERRY_FILE_WRITE | FERRY_FILE_EXCL | FERRY_FILE_TRUNCATE |                  \
     FERRY_FILE_DIRECT_ONLY)

typedef struct file_req {
    struct file_req *next; /* in the pending FIFO, then in the done FIFO */
    unsigned char *buf;
    size_t len;
    uint64_t offset, tag;
    size_t cut;         /* bytes handed to pieces so far */
    unsigned out;       /* pieces in flight */
    bool pending;       /* in the pending FIFO */
    size_t short_at;    /* a read met the end of the file at this byte of the request */
    int sys_errno;      /* the first failure */
    uint64_t err_byte;  /* where in the file it failed */
    const char *err_op; /* the failing operation's words */
} file_req_t;

typedef struct file_piece {
    file_req_t *req; /* NULL: free */
    size_t off;      /* in the request */
    size_t len, done;
    bool direct;
} file_piece_t;

typedef struct req_fifo {
    file_req_t *head, *tail;
} req_fifo_t;

struct ferry_file {
    char *path;
    unsigned flags;
    int fd;                 /* buffered */
    int fd_direct;          /* O_DIRECT, -1: none (refused, or cfg->buffered) */
    atomic_bool all_direct; /* read without the lock by ferry_file_is_direct */
    unsigned depth;
    size_t request_bytes;
    struct io_uring ring;
    pthread_mutex_t lock;
    file_piece_t *pieces;
    unsigned *free_pieces, nfree;
    req_fifo_t pending, done;
    uint64_t outstanding; /* requests started whose completion was not yet returned */
    bool bell;            /* a no-op in flight, to wake the waiter for new requests */
    int ring_errno;       /* io_uring_submit failed: nothing more can start */
};

#define BELL UINT64_MAX /* the user data of the waiter's bell (pieces: their index) */

static bool is_write(const ferry_file_t *f)
{
    return (f->flags & FERRY_FILE_WRITE) != 0;
}

static void fifo_push(req_fifo_t *q, file_req_t *r)
{
    FERRY__LIST_APPEND(q->head, q->tail, r);
}

static file_req_t *fifo_pop(req_fifo_t *q)
{
    file_req_t *r = q->head;
    if (r) {
        q->head = r->next;
        if (q->head == NULL)
            q->tail = NULL;
    }
    return r;
}

int ferry__io_check_shape(const char *who, size_t request_bytes, unsigned depth)
{
    size_t rq = request_bytes;
    if (rq != 0 && (rq < (4u << 20) || rq > (16u << 20) || rq % FERRY__IO_ALIGN != 0))
        return ferry__error(
            FERRY_EINVAL, "%s: request bytes %zu (accepted: 4M to 16M, a multiple of 4K)", who, rq);
    if (depth != 0 && (depth < 8 || depth > 32))
        return ferry__error(FERRY_EINVAL, "%s: depth %u (accepted: 8 to 32)", who, depth);
    return 0;
}

static int check_config(const ferry_file_config_t *cfg, unsigned flags)
{
    unsigned rw = flags & (FERRY_FILE_READ | FERRY_FILE_WRITE);
    if ((flags & ~FILE_FLAGS) != 0 || (rw != FERRY_FILE_READ && rw != FERRY_FILE_WRITE) ||
        (rw == FERRY_FILE_READ && (flags & (FERRY_FILE_EXCL | FERRY_FILE_TRUNCATE)) != 0))
        return ferry__error(FERRY_EINVAL,
                            "ferry_file_open: flags 0x%x (accepted: FERRY_FILE_READ, "
                            "or FERRY_FILE_WRITE with EXCL or TRUNCATE; "
                            "DIRECT_ONLY with either)",
                            flags);
    if (cfg == NULL)
        return 0;
    if (!FERRY_SIZE_OK(cfg, offsetof(ferry_file_config_t, buffered) + sizeof(bool)) ||
        cfg->size > 65536)
        return ferry__error(FERRY_EINVAL,
                            "ferry_file_config_t: size %zu not set (use "
                            "FERRY_FILE_CONFIG_INIT)",
                            cfg->size);
    int rc = ferry__io_check_shape("ferry_file_config_t", cfg->request_bytes, cfg->depth);
    if (rc != 0)
        return rc;
    if ((flags & FERRY_FILE_DIRECT_ONLY) && cfg->buffered)
        return ferry__error(FERRY_EINVAL, "ferry_file_open: FERRY_FILE_DIRECT_ONLY with a "
                                          "buffered config");
    return 0;
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

/* A file system whose files live in the page cache alone (tmpfs, ramfs): O_DIRECT there, where
 * the kernel takes it at all, is the buffered path under another name, so ferry reads and
 * writes such files buffered, with its requests on io_uring's workers (prep_piece). */
static bool in_page_cache(int fd)
{
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 &&
           (fs.f_type == 0x01021994 /* TMPFS_MAGIC */ || fs.f_type == 0x858458f6 /* RAMFS_MAGIC */);
}

/* The buffered descriptor (without blocking: a FIFO swapped in after the stat), then the
 * O_DIRECT one, checked to be the same file. */
static int open_fds(ferry_file_t *f, bool buffered)
{
    struct stat sb, sd;
    bool w = is_write(f);
    if (stat(f->path, &sb) == 0) {
        if (w && (f->flags & FERRY_FILE_EXCL))
            return ferry__error(FERRY_EINVAL, "'%s' exists (FERRY_FILE_EXCL)", f->path);
        if (!S_ISREG(sb.st_mode))
            return ferry__error(FERRY_EINVAL, "'%s' is %s: accepted: a regular file", f->path,
                                kind_of(sb.st_mode));
    }
    int fl = (w ? O_WRONLY | O_CREAT : O_RDONLY) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
    fl |=
        (f->flags & FERRY_FILE_EXCL ? O_EXCL : 0) | (f->flags & FERRY_FILE_TRUNCATE ? O_TRUNC : 0);
    f->fd = open(f->path, fl, 0644);
    if (f->fd < 0)
        return ferry__error(errno == EEXIST ? FERRY_EINVAL : FERRY_EIO, "open '%s' for %s: %s",
                            f->path, w ? "write" : "read", strerror(errno));
    if (fstat(f->fd, &sb) != 0)
        return ferry__error(FERRY_EIO, "stat '%s': %s", f->path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ferry__error(FERRY_EINVAL, "'%s' is %s: accepted: a regular file", f->path,
                            kind_of(sb.st_mode));
    int cur = fcntl(f->fd, F_GETFL);
    if (cur < 0 || fcntl(f->fd, F_SETFL, cur & ~O_NONBLOCK) != 0)
        return ferry__error(FERRY_EIO, "fcntl '%s': %s", f->path, strerror(errno));
    if (buffered)
        return 0;
    if (in_page_cache(f->fd)) {
        if (f->flags & FERRY_FILE_DIRECT_ONLY)
            return ferry__error(FERRY_ENOTSUP,
                                "'%s' lives in the page cache alone (tmpfs, ramfs): O_DIRECT "
                                "has nothing to bypass there",
                                f->path);
        return 0;
    }
    /* O_DIRECT through fcntl, as a file system that refuses it says so there (EINVAL) */
    f->fd_direct = open(f->path, (w ? O_WRONLY : O_RDONLY) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f->fd_direct < 0)
        return ferry__error(FERRY_EIO, "open '%s' for %s: %s", f->path, w ? "write" : "read",
                            strerror(errno));
    cur = fcntl(f->fd_direct, F_GETFL);
    if (cur < 0 || fcntl(f->fd_direct, F_SETFL, (cur & ~O_NONBLOCK) | O_DIRECT) != 0) {
        int e = errno;
        close(f->fd_direct);
        f->fd_direct = -1;
        if (e != EINVAL)
            return ferry__error(FERRY_EIO, "fcntl '%s': %s", f->path, strerror(e));
        if (f->flags & FERRY_FILE_DIRECT_ONLY)
            return ferry__error(FERRY_ENOTSUP, "'%s': the file system refuses O_DIRECT", f->path);
        return 0;
    }
    if (fstat(f->fd_direct, &sd) != 0 || sd.st_dev != sb.st_dev || sd.st_ino != sb.st_ino)
        return ferry__error(FERRY_EIO, "'%s' was replaced while it was opened", f->path);
    atomic_init(&f->all_direct, true);
    return 0;
}

/* What ferry_file_open allocated, the descriptors and the ring already closed. */
static void file_free(ferry_file_t *f)
{
    pthread_mutex_destroy(&f->lock);
    free(f->pieces);
    free(f->free_pieces);
    free(f->path);
    free(f);
}

int ferry_file_open(const char *path, unsigned flags, const ferry_file_config_t *cfg,
                    ferry_file_t **out)
{
    if (path == NULL || path[0] == '\0' || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_file_open: NULL or empty path, or NULL out");
    int rc = check_config(cfg, flags);
    if (rc != 0)
        return rc;
    ferry_file_t *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        return ferry__error(FERRY_ENOMEM, "ferry_file_open '%s': out of memory", path);
    }
    f->flags = flags;
    f->fd = f->fd_direct = -1;
    f->depth = cfg && cfg->depth ? cfg->depth : 16;
    f->request_bytes = cfg && cfg->request_bytes ? cfg->request_bytes : 8u << 20;
    pthread_mutex_init(&f->lock, NULL);
    bool ring = false;
    if ((rc = open_fds(f, cfg && cfg->buffered)) != 0)
        goto out_fail;
    f->pieces = calloc(f->depth, sizeof(*f->pieces));
    f->free_pieces = calloc(f->depth, sizeof(*f->free_pieces));
    if (f->pieces == NULL || f->free_pieces == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "ferry_file_open '%s': out of memory", path);
        goto out_fail;
    }
    for (unsigned i = 0; i < f->depth; i++)
        f->free_pieces[f->nfree++] = f->depth - 1 - i;
    int q = io_uring_queue_init(f->depth + 1, &f->ring, 0); /* the pieces and the bell */
    if (q < 0) {
        rc = ferry__error(FERRY_EIO, "io_uring set-up for '%s': %s", path, strerror(-q));
        goto out_fail;
    }
    ring = true;
    if (!(f->ring.features & IORING_FEAT_EXT_ARG)) {
        rc = ferry__error(FERRY_ENOTSUP, "io_uring for '%s': no IORING_FEAT_EXT_ARG (Linux 5.11)",
                          path);
        goto out_fail;
    }
    *out = f;
    return 0;
out_fail:
    if (is_write(f) && f->fd >= 0 && (flags & FERRY_FILE_EXCL))
        unlink(path); /* made by this call */
    if (ring)
        io_uring_queue_exit(&f->ring);
    if (f->fd >= 0)
        close(f->fd);
    if (f->fd_direct >= 0)
        close(f->fd_direct);
    file_free(f);
    return rc;
}

/* Queue the (rest of the) piece @k. Under f->lock. */
static void prep_piece(ferry_file_t *f, unsigned k)
{
    file_piece_t *p = &f->pieces[k];
    file_req_t *r = p->req;
    unsigned char *buf = r->buf + p->off + p->done;
    uint64_t off = r->offset + p->off + p->done;
    unsigned len = (unsigned)(p->len - p->done);
    if (f->fd_direct < 0) /* refused since the piece was cut */
        p->direct = false;
    int fd = p->direct ? f->fd_direct : f->fd;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
    FERRY_ASSERT(sqe != NULL); /* depth + 1 entries, at most depth pieces and the bell */
    if (is_write(f))
        io_uring_prep_write(sqe, fd, buf, len, off);
    else
        io_uring_prep_read(sqe, fd, buf, len, off);
    io_uring_sqe_set_data64(sqe, k);
    if (!p->direct) {
        /* A buffered request whose pages are cached completes inside io_uring_enter, on the
         * submitting thread, one after another: a memcpy's rate (4 GB/s from tmpfs on the
         * H100 host) however many are in flight. On io_uring's workers they run side by side. */
        io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
        atomic_store_explicit(&f->all_direct, false, memory_order_relaxed); /* read unlocked */
    }
}

/* Cut the next piece of @r into a free slot. Under f->lock. */
static void cut_piece(ferry_file_t *f, file_req_t *r)
{
    unsigned k = f->free_pieces[--f->nfree];
    size_t rest = r->len - r->cut, n = rest < f->request_bytes ? rest : f->request_bytes;
    bool direct = f->fd_direct >= 0 && (uintptr_t)(r->buf + r->cut) % FERRY__IO_ALIGN == 0 &&
                  (r->offset + r->cut) % FERRY__IO_ALIGN == 0;
    if (direct && n % FERRY__IO_ALIGN != 0) { /* the aligned body first, the tail buffered */
        if (n >= FERRY__IO_ALIGN)
            n -= n % FERRY__IO_ALIGN;
        else
            direct = false;
    }
    f->pieces[k] = (file_piece_t){.req = r, .off = r->cut, .len = n, .direct = direct};
    r->cut += n;
    r->out++;
    prep_piece(f, k);
}

static int submit_ring(ferry_file_t *f)
{
    for (;;) {
        int rc = io_uring_submit(&f->ring);
        if (rc >= 0)
            return 0;
        if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            f->ring_errno = -rc;
            return ferry__error(FERRY_EIO, "io_uring submit for '%s': %s", f->path, strerror(-rc));
        }
    }
}

/* A request with nothing more to cut and no piece in flight is done. Under f->lock. */
static void maybe_done(ferry_file_t *f, file_req_t *r)
{
    if (r->out == 0 && r->cut == r->len && !r->pending)
        fifo_push(&f->done, r);
}

/* Start pieces of the pending requests while slots are free. Under f->lock. */
static int pump(ferry_file_t *f)
{
    bool any = false;
    while (f->pending.head != NULL) {
        file_req_t *r = f->pending.head;
        if (r->cut == r->len) {
            fifo_pop(&f->pending);
            r->pending = false;
            maybe_done(f, r);
            continue;
        }
        if (f->nfree == 0)
            break;
        cut_piece(f, r);
        any = true;
    }
    return any ? submit_ring(f) : 0;
}

static int start(ferry_file_t *f, void *buf, size_t len, uint64_t offset, uint64_t tag, bool w)
{
    const char *name = w ? "ferry_file_write_async" : "ferry_file_read_async";
    if (f == NULL || buf == NULL || len == 0)
        return ferry__error(FERRY_EINVAL, "%s: NULL file or buffer, or length 0", name);
    if (w != is_write(f))
        return ferry__error(FERRY_EINVAL, "%s: '%s' was opened for %s", name, f->path,
                            w ? "reading" : "writing");
    if ((f->flags & FERRY_FILE_DIRECT_ONLY) &&
        ((uintptr_t)buf % FERRY__IO_ALIGN || len % FERRY__IO_ALIGN || offset % FERRY__IO_ALIGN))
        return ferry__error(FERRY_EINVAL,
                            "%s '%s': buffer %p, length %zu or offset %llu not a multiple of "
                            "4096 (FERRY_FILE_DIRECT_ONLY)",
                            name, f->path, buf, len, (unsigned long long)offset);
    if (offset > (uint64_t)INT64_MAX - len)
        return ferry__error(FERRY_EINVAL, "%s '%s': offset %llu + length %zu past 2^63", name,
                            f->path, (unsigned long long)offset, len);
    file_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ferry__error(FERRY_ENOMEM, "%s '%s': out of memory", name, f->path);
    *r = (file_req_t){.buf = buf, .len = len, .offset = offset, .tag = tag, .short_at = SIZE_MAX};
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    if (f->ring_errno != 0) {
        rc = ferry__error(FERRY_EIO, "%s '%s': io_uring failed before: %s", name, f->path,
                          strerror(f->ring_errno));
        free(r);
    } else {
        r->pending = true;
        fifo_push(&f->pending, r);
        f->outstanding++;
        /* The waiting thread starts the pieces (reap): the kernel cancels the I/O a thread
         * started when that thread exits, and a caller may exit as soon as this returns (a
         * verifier thread at the end of a run did, and its last writes failed ECANCELED). A
         * no-op, which completes at once without a kernel worker, wakes the waiter. */
        if (!f->bell) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
            FERRY_ASSERT(sqe != NULL);
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data64(sqe, BELL);
            f->bell = true;
            /* a failed submit leaves the request queued; ferry_file_wait reports the failure */
            (void)submit_ring(f);
        }
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int ferry_file_read_async(ferry_file_t *f, void *buf, size_t len, uint64_t offset, uint64_t tag)
{
    return start(f, buf, len, offset, tag, false);
}

int ferry_file_write_async(ferry_file_t *f, const void *buf, size_t len, uint64_t offset,
                           uint64_t tag)
{
    return start(f, (void *)buf, len, offset, tag, true);
}

static void fail_req(file_req_t *r, int err, uint64_t at, const char *op)
{
    if (r->sys_errno == 0) {
        r->sys_errno = err;
        r->err_byte = at;
        r->err_op = op;
    }
    r->cut = r->len; /* nothing more starts */
}

/* One piece's completion: resubmit a short transfer's rest, or go buffered where O_DIRECT was
 * refused, or finish it. Under f->lock. */
static void complete_piece(ferry_file_t *f, unsigned k, int res)
{
    file_piece_t *p = &f->pieces[k];
    file_req_t *r = p->req;
    uint64_t at = r->offset + p->off + p->done;
    if (res == -EINVAL && p->direct && !(f->flags & FERRY_FILE_DIRECT_ONLY)) {
        ferry_log(FERRY_LOG_DEBUG, "io", "'%s': O_DIRECT refused, buffered from here", f->path);
        if (f->fd_direct >= 0) /* pieces in flight hold their own reference to the file */
            close(f->fd_direct);
        f->fd_direct = -1;
        p->direct = false;
        prep_piece(f, k);
        return;
    }
    bool finished = true;
    if (res == -EINTR || res == -EAGAIN) {
        prep_piece(f, k);
        return;
    }
    if (res < 0) {
        fail_req(r, -res, at, is_write(f) ? "write" : "read");
    } else if (res == 0 && is_write(f)) {
        fail_req(r, EIO, at, "write (no progress: device full?)");
    } else if (res == 0) { /* the end of the file */
        size_t end = p->off + p->done;
        r->short_at = end < r->short_at ? end : r->short_at;
        r->cut = r->len;
    } else {
        p->done += (size_t)res;
        if (p->done < p->len && p->direct && !is_write(f) && p->done % FERRY__IO_ALIGN != 0) {
            /* an O_DIRECT read ends mid-block only at the end of the file */
            r->short_at = p->off + p->done < r->short_at ? p->off + p->done : r->short_at;
            r->cut = r->len;
        } else if (p->done < p->len) {
            /* an O_DIRECT write cut short mid-block: the rest goes buffered */
            if (p->done % FERRY__IO_ALIGN != 0)
                p->direct = false;
            prep_piece(f, k);
            finished = false;
        }
    }
    if (!finished)
        return;
    p->req = NULL;
    f->free_pieces[f->nfree++] = k;
    r->out--;
    maybe_done(f, r);
}

/* Take every completion there is. Under f->lock. */
static int reap(ferry_file_t *f)
{
    struct io_uring_cqe *cqe = NULL;
    bool resubmit = false;
    while (io_uring_peek_cqe(&f->ring, &cqe) == 0 && cqe != NULL) {
        uint64_t data = io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&f->ring, cqe);
        cqe = NULL;
        if (data == BELL) {
            f->bell = false;
            continue;
        }
        unsigned k = (unsigned)data;
        unsigned nfree = f->nfree;
        complete_piece(f, k, res);
        resubmit |= f->nfree == nfree; /* the piece went in again */
    }
    int rc = resubmit ? submit_ring(f) : 0;
    int pr = pump(f);
    return rc ? rc : pr;
}

/* Hand @r out as *@out (its error text into the calling thread's last error) and free it. */
static void hand_out(ferry_file_t *f, file_req_t *r, ferry_file_completion_t *out)
{
    *out = (ferry_file_completion_t){.tag = r->tag};
    size_t bytes = r->short_at < r->len ? r->short_at : r->len;
    if (r->sys_errno != 0) {
        out->error = ferry__error(FERRY_EIO, "%s '%s' at byte %llu: %s", r->err_op, f->path,
                                  (unsigned long long)r->err_byte, strerror(r->sys_errno));
        out->sys_errno = r->sys_errno;
        bytes =
            (size_t)(r->err_byte - r->offset) < bytes ? (size_t)(r->err_byte - r->offset) : bytes;
    }
    out->bytes = bytes;
    free(r);
}

int ferry_file_wait(ferry_file_t *f, ferry_file_completion_t *out, int timeout_ms)
{
    if (f == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_file_wait: NULL file or completion");
    uint64_t deadline = ferry__mono_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
    pthread_mutex_lock(&f->lock);
    for (;;) {
        file_req_t *r = fifo_pop(&f->done);
        if (r != NULL) {
            f->outstanding--;
            pthread_mutex_unlock(&f->lock);
            hand_out(f, r, out);
            return 0;
        }
        if (f->outstanding == 0) {
            pthread_mutex_unlock(&f->lock);
            return ferry__error(FERRY_ESTATE, "ferry_file_wait '%s': nothing in flight", f->path);
        }
        if (f->ring_errno != 0) { /* what is queued can no longer start */
            int e = f->ring_errno;
            pthread_mutex_unlock(&f->lock);
            return ferry__error(FERRY_EIO, "io_uring submit for '%s' failed: %s", f->path,
                                strerror(e));
        }
        pthread_mutex_unlock(&f->lock);
        struct io_uring_cqe *cqe = NULL;
        int w;
        if (timeout_ms < 0) {
            w = io_uring_wait_cqe(&f->ring, &cqe);
        } else {
            uint64_t now = ferry__mono_ns(), left = deadline > now ? deadline - now : 0;
            struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000u),
                                           .tv_nsec = (long long)(left % 1000000000u)};
            w = left ? io_uring_wait_cqe_timeout(&f->ring, &cqe, &ts)
                     : io_uring_peek_cqe(&f->ring, &cqe);
            if (w == -ETIME || w == -EAGAIN)
                return ferry__error(FERRY_ETIMEDOUT, "ferry_file_wait '%s': none in %d ms", f->path,
                                    timeout_ms);
        }
        if (w < 0 && w != -EINTR)
            return ferry__error(FERRY_EIO, "io_uring wait for '%s': %s", f->path, strerror(-w));
        pthread_mutex_lock(&f->lock);
        int rc = reap(f);
        if (rc != 0) {
            pthread_mutex_unlock(&f->lock);
            return rc;
        }
    }
}

int ferry_file_sync(ferry_file_t *f)
{
    if (f == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_file_sync: NULL file");
    if (fdatasync(f->fd) != 0)
        return ferry__error(FERRY_EIO, "sync '%s': %s", f->path, strerror(errno));
    return 0;
}

bool ferry_file_is_direct(const ferry_file_t *f)
{
    return f != NULL && atomic_load_explicit(&f->all_direct, memory_order_relaxed);
}

int ferry_file_close(ferry_file_t *f)
{
    if (f == NULL)
        return 0;
    pthread_mutex_lock(&f->lock);
    uint64_t n = f->outstanding;
    pthread_mutex_unlock(&f->lock);
    if (n != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_file_close '%s': %llu request(s) not yet returned by "
                            "ferry_file_wait",
                            f->path, (unsigned long long)n);
    int rc = 0;
    io_uring_queue_exit(&f->ring);
    if (f->fd_direct >= 0)
        close(f->fd_direct);
    if (close(f->fd) != 0)
        rc = ferry__error(FERRY_EIO, "close '%s': %s", f->path, strerror(errno));
    file_free(f);
    return rc;
}
