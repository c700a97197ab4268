/* Sequential file streams (file_io.h) on ferry_file_t (file.c): a ring of @depth aligned
 * buffers, slot k holding request k mod depth; requests complete in any order and are handed on
 * in file order, a slot being refilled only after its request was handed on. Reads and writes
 * are rounded up to whole 4 KiB blocks inside the slot, so that every request can go O_DIRECT
 * (a read stops at the end of the file; a write is cut back to its size afterwards). */
#include "io/file_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "ferry/io.h"

typedef struct io_stream {
    const ferry__io_spec_t *s;
    ferry_file_t *f;
    uint64_t total; /* bytes to move */
    uint64_t nreq;  /* requests */
    unsigned nslots;
    unsigned char *bufs;
    bool *complete; /* per slot: its request finished */
    bool stuck;     /* io_uring failed with requests in flight: the buffers stay the kernel's */
} io_stream_t;

static unsigned char *slot_buf(const io_stream_t *st, unsigned k)
{
    return st->bufs + (size_t)k * st->s->request_bytes;
}

static size_t want_of(const io_stream_t *st, uint64_t seq)
{
    uint64_t left = st->total - seq * st->s->request_bytes;
    return left < st->s->request_bytes ? (size_t)left : st->s->request_bytes;
}

/* Start request @seq in slot @k (a write: its buffer filled first). */
static int start(io_stream_t *st, unsigned k, uint64_t seq)
{
    const ferry__io_spec_t *s = st->s;
    size_t want = want_of(st, seq), len = (want + FERRY__IO_ALIGN - 1) & ~(FERRY__IO_ALIGN - 1);
    unsigned char *buf = slot_buf(st, k);
    uint64_t off = seq * s->request_bytes;
    st->complete[k] = false;
    if (!s->write)
        return ferry_file_read_async(st->f, buf, len, off, seq);
    int rc = s->data(s->ctx, off, buf, want);
    if (rc != 0)
        return rc;
    memset(buf + want, 0, len - want);
    return ferry_file_write_async(st->f, buf, len, off, seq);
}

/* One completion: checked, then the finished requests at the head handed on in order and
 * their slots refilled. */
static int on_complete(io_stream_t *st, const ferry_file_completion_t *c, uint64_t *head,
                       uint64_t *next)
{
    const ferry__io_spec_t *s = st->s;
    if (c->error != 0)
        return c->error;
    if (c->bytes < want_of(st, c->tag))
        return ferry__error(FERRY_EIO,
                            "read '%s': no progress at byte %llu of %llu (the file "
                            "shrank while read)",
                            s->path, (unsigned long long)(c->tag * s->request_bytes + c->bytes),
                            (unsigned long long)st->total);
    st->complete[c->tag % st->nslots] = true;
    while (*head < st->nreq && st->complete[*head % st->nslots]) {
        unsigned k = (unsigned)(*head % st->nslots);
        if (!s->write && s->data != NULL) {
            int rc = s->data(s->ctx, *head * s->request_bytes, slot_buf(st, k), want_of(st, *head));
            if (rc != 0)
                return rc;
        }
        st->complete[k] = false;
        (*head)++;
        if (*next < st->nreq) {
            int rc = start(st, k, (*next)++);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* Fill every slot, then complete, hand on and refill until the last request. On an error the
 * requests in flight are waited for before the buffers go. */
static int run_ring(io_stream_t *st)
{
    uint64_t head = 0, next = 0;
    int rc = 0;
    for (unsigned k = 0; rc == 0 && k < st->nslots; k++)
        rc = start(st, k, next++);
    for (;;) {
        ferry_file_completion_t c;
        int w = ferry_file_wait(st->f, &c, -1);
        if (w == FERRY_ESTATE)
            return rc; /* nothing more in flight */
        if (w != 0) {
            st->stuck = true;
            return rc ? rc : w;
        }
        if (rc == 0) /* else draining after an error */
            rc = on_complete(st, &c, &head, &next);
    }
}

static int open_stream(io_stream_t *st)
{
    const ferry__io_spec_t *s = st->s;
    ferry_file_config_t fc = FERRY_FILE_CONFIG_INIT;
    fc.depth = s->depth;
    fc.request_bytes = s->request_bytes;
    unsigned fl = s->write ? FERRY_FILE_WRITE | (s->force ? FERRY_FILE_TRUNCATE : FERRY_FILE_EXCL)
                           : FERRY_FILE_READ;
    int rc = ferry_file_open(s->path, fl, &fc, &st->f);
    if (rc != 0 || s->write) {
        st->total = s->bytes;
        return rc;
    }
    struct stat sb;
    if (stat(s->path, &sb) != 0)
        return ferry__error(FERRY_EIO, "stat '%s': %s", s->path, strerror(errno));
    st->total = s->bytes && s->bytes < (uint64_t)sb.st_size ? s->bytes : (uint64_t)sb.st_size;
    return 0;
}

int ferry__io_stream(const ferry__io_spec_t *s, ferry__io_stats_t *out)
{
    io_stream_t st = {.s = s};
    int rc = open_stream(&st);
    if (rc != 0)
        return rc;
    st.nreq = (st.total + s->request_bytes - 1) / s->request_bytes;
    st.nslots = st.nreq < s->depth ? (unsigned)st.nreq : s->depth;
    uint64_t t0 = ferry__mono_ns();
    if (st.nslots > 0) {
        void *m = NULL;
        st.complete = calloc(st.nslots, sizeof(*st.complete));
        if (st.complete == NULL ||
            posix_memalign(&m, FERRY__IO_ALIGN, (size_t)st.nslots * s->request_bytes) != 0) {
            rc = ferry__error(FERRY_ENOMEM, "%s '%s': no memory for %u buffers of %zu bytes",
                              s->write ? "write" : "read", s->path, st.nslots, s->request_bytes);
            goto out;
        }
        st.bufs = m;
        memset(st.bufs, 0, (size_t)st.nslots * s->request_bytes); /* touched before timing */
        t0 = ferry__mono_ns();
        rc = run_ring(&st);
    }
    if (rc == 0 && s->write && st.total % FERRY__IO_ALIGN != 0 &&
        truncate(s->path, (off_t)st.total) != 0)
        rc = ferry__error(FERRY_EIO, "truncate '%s': %s", s->path, strerror(errno));
    if (rc == 0 && s->write)
        rc = ferry_file_sync(st.f);
    if (rc == 0 && out != NULL)
        *out = (ferry__io_stats_t){.bytes = st.total,
                                   .ns = ferry__mono_ns() - t0,
                                   .direct = ferry_file_is_direct(st.f),
                                   .depth = st.nslots};
out:
    if (!st.stuck) {
        int crc = ferry_file_close(st.f);
        rc = rc ? rc : crc;
        free(st.bufs);
    }
    free(st.complete);
    if (rc != 0 && s->write)
        unlink(s->path); /* no half-written file left behind */
    return rc;
}
