/* `ferry run`'s verifier: the generated data and its reference output, and the threads that
 * compare every finished batch with it (and write it to --output, in order for a stream). A
 * batch that does not match is counted, and a stream output ends before it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "run_files.h"

/* Deterministic data: byte o of the stream is byte (o % 8) of word(o / 8), whatever the
 * chunking. Each 32-bit half is a float in +-[1, 2): no NaN or infinity, whose payloads the
 * GPU need not preserve, so every workload can be compared bit for bit. */
static uint64_t gen_word(uint64_t seed, uint64_t idx)
{
    uint64_t z = idx * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (z & 0x807fffff807fffffull) | 0x3f8000003f800000ull;
}

static void gen_fill(uint64_t seed, uint64_t offset, unsigned char *dst, size_t n)
{
    size_t i = 0;
    while (i < n && (offset + i) % 8 != 0) {
        uint64_t w = gen_word(seed, (offset + i) / 8);
        dst[i] = (unsigned char)(w >> (8 * ((offset + i) % 8)));
        i++;
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w = gen_word(seed, (offset + i) / 8);
        memcpy(dst + i, &w, 8); /* little-endian: byte k is bits 8k.. */
    }
    for (; i < n; i++) {
        uint64_t w = gen_word(seed, (offset + i) / 8);
        dst[i] = (unsigned char)(w >> (8 * ((offset + i) % 8)));
    }
}

/* Write all of @buf: at offset @off (a file), or where the stream is (@off UINT64_MAX). */
static int write_all(int fd, const void *buf, size_t n, uint64_t off)
{
    size_t put = 0;
    while (put < n) {
        const char *from = (const char *)buf + put;
        ssize_t k = off == UINT64_MAX ? write(fd, from, n - put)
                                      : pwrite(fd, from, n - put, (off_t)(off + put));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        put += (size_t)k;
    }
    return 0;
}

void run_on_done(const ferry_batch_result_t *r, void *arg)
{
    cb_ctx_t *c = arg;
    run_state_t *st = c->st;
    pthread_mutex_lock(&st->lock);
    st->ring[c->idx].status = r->status;
    st->ring[c->idx].where = (int)r->where;
    st->doneq[(st->dhead + st->dcount) % st->nring] = c->idx;
    st->dcount++;
    st->callbacks++;
    pthread_cond_signal(&st->cv_done);
    pthread_mutex_unlock(&st->lock);
}

/* Compare one finished batch with the CPU reference (and write it out to a file); runs on
 * verifier threads, several at once, so that checking keeps up with a GPU. Returns whether
 * the batch completed and matched. */
static bool verify_entry(run_state_t *st, ring_entry_t *e, unsigned char *scratch, run_totals_t *t)
{
    if (e->status != 0) {
        t->failed++;
        return false;
    }
    if (e->where == FERRY_DONE_CPU)
        t->ok_cpu++;
    else
        t->ok_gpu++;
    const unsigned char *expect;
    if (st->ref != NULL && e->bytes == st->batch_bytes && st->batch_bytes % 4 == 0) {
        expect = st->ref + e->pool_off;
    } else {
        /* File input; a short last batch; or batches of 1-3 bytes, each a part of a float that
         * the float workloads transform on its own (workloads.h): not a slice of the pool's
         * reference, which was made over whole floats. */
        ferry_workload_reference(st->wl, e->in, scratch, e->bytes);
        expect = scratch;
    }
    bool match = memcmp(expect, e->out, e->bytes) == 0;
    if (!match) {
        size_t k = 0;
        while (expect[k] == e->out[k])
            k++;
        t->first_bad_offset = e->offset + k;
        t->mismatched++;
    } else {
        t->verified_bytes += e->bytes;
    }
    if (st->sink != NULL) /* a regular file; a stream is written in order (write_in_order) */
        t->io_error = run_sink_write(st, e); /* 0: the sink frees the entry once written */
    return match;
}

/* A stream output: write the batches that are next in order, as long as no other verifier
 * is writing. Under st->lock (dropped while writing). */
static void write_in_order(run_state_t *st)
{
    while (!st->writing) {
        ring_entry_t *e = NULL;
        size_t idx = 0;
        for (size_t i = 0; i < st->nring && e == NULL; i++)
            if (st->ring[i].ready && st->ring[i].seq == st->next_seq)
                e = &st->ring[idx = i];
        if (e == NULL)
            return;
        st->writing = true;
        bool skip = e->seq >= st->cut_seq || st->t.io_error;
        pthread_mutex_unlock(&st->lock);
        int err = 0;
        if (!skip && write_all(st->outfd, e->out, e->bytes, UINT64_MAX) != 0)
            err = errno ? errno : EIO;
        pthread_mutex_lock(&st->lock);
        if (err && !st->t.io_error)
            st->t.io_error = err;
        st->writing = false;
        e->ready = false;
        st->next_seq++;
        st->freeq[st->nfree++] = idx;
        pthread_cond_signal(&st->cv_free);
    }
}

static void *verifier_main(void *arg)
{
    run_state_t *st = arg;
    unsigned char *scratch = malloc(st->batch_bytes ? st->batch_bytes : 1);
    pthread_mutex_lock(&st->lock);
    for (;;) {
        while (st->dcount == 0 && !st->stop)
            pthread_cond_wait(&st->cv_done, &st->lock);
        if (st->dcount == 0)
            break;
        size_t idx = st->doneq[st->dhead];
        st->dhead = (st->dhead + 1) % st->nring;
        st->dcount--;
        pthread_mutex_unlock(&st->lock);
        run_totals_t t = {0};
        bool good = false;
        if (scratch == NULL)
            t.io_error = ENOMEM;
        else
            good = verify_entry(st, &st->ring[idx], scratch, &t);
        pthread_mutex_lock(&st->lock);
        st->t.ok_gpu += t.ok_gpu;
        st->t.ok_cpu += t.ok_cpu;
        st->t.failed += t.failed;
        st->t.verified_bytes += t.verified_bytes;
        if (t.mismatched) {
            if (st->t.mismatched == 0 || t.first_bad_offset < st->t.first_bad_offset)
                st->t.first_bad_offset = t.first_bad_offset;
            st->t.mismatched += t.mismatched;
        }
        if (t.io_error && !st->t.io_error)
            st->t.io_error = t.io_error;
        if (st->ordered) {
            /* a stream cannot have a hole: it ends before the first batch that is wrong */
            if (!good && st->ring[idx].seq < st->cut_seq)
                st->cut_seq = st->ring[idx].seq;
            st->ring[idx].ready = true;
            write_in_order(st);
            continue;
        }
        if (st->sink != NULL && scratch != NULL && st->ring[idx].status == 0 && !t.io_error)
            continue; /* being written (verify_entry): freed by run_files.c */
        st->freeq[st->nfree++] = idx;
        pthread_cond_signal(&st->cv_free);
    }
    pthread_mutex_unlock(&st->lock);
    free(scratch);
    return NULL;
}

void run_verifiers_stop(run_state_t *st, pthread_t *th, unsigned *n)
{
    if (*n == 0)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = true;
    pthread_cond_broadcast(&st->cv_done);
    pthread_mutex_unlock(&st->lock);
    for (unsigned i = 0; i < *n; i++)
        pthread_join(th[i], NULL);
    *n = 0;
}

unsigned run_verifiers_start(run_state_t *st, pthread_t *th, unsigned max)
{
    unsigned n = run_helper_threads();
    n = n < max ? n : max;
    for (unsigned i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, verifier_main, st) != 0)
            return i;
    return n;
}

typedef struct prep_job {
    uint64_t seed;
    unsigned char *pool, *ref;
    size_t begin, end; /* multiples of 4 */
    const ferry_workload_t *wl;
} prep_job_t;

static void *prep_main(void *arg)
{
    prep_job_t *j = arg;
    gen_fill(j->seed, j->begin, j->pool + j->begin, j->end - j->begin);
    ferry_workload_reference(j->wl, j->pool + j->begin, j->ref + j->begin, j->end - j->begin);
    return NULL;
}

void run_make_reference(uint64_t seed, const ferry_workload_t *wl, unsigned char *pool,
                        unsigned char *ref, size_t bytes)
{
    unsigned nt = run_helper_threads();
    pthread_t th[8];
    prep_job_t jobs[8];
    size_t step = (bytes / nt + 3) & ~(size_t)3;
    for (unsigned i = 0; i < nt; i++) {
        size_t b0 = i * step < bytes ? i * step : bytes;
        size_t b1 = b0 + step < bytes ? b0 + step : bytes;
        jobs[i] = (prep_job_t){seed, pool, ref, b0, b1, wl};
        pthread_create(&th[i], NULL, prep_main, &jobs[i]);
    }
    for (unsigned i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
}

unsigned run_helper_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* leave two CPUs to the pipeline's issuer and completion threads */
    n = n > 3 ? n - 2 : 1;
    return (unsigned)(n > 8 ? 8 : n);
}
