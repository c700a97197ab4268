/* `ferry run`'s verifier: the generated data and the digests of its reference output, and the
 * threads that check every finished batch (or a sample, or none: --verify) and write it to
 * --output, in order for a stream. A batch that does not match is counted with its first bad
 * byte, and a stream output ends before it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

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
    if (st->nlat == st->cap_lat) { /* out of memory: the latency of the rest goes unrecorded */
        size_t cap = st->cap_lat ? 2 * st->cap_lat : 1024;
        uint64_t *g = realloc(st->lat_ns, cap * sizeof(*g));
        if (g != NULL) {
            st->lat_ns = g;
            st->cap_lat = cap;
        }
    }
    if (st->nlat < st->cap_lat)
        st->lat_ns[st->nlat++] = r->done_ns > r->submit_ns ? r->done_ns - r->submit_ns : 0;
    ring_entry_t *e = &st->ring[c->idx];
    e->vunits = e->vleft = run_verify_units(st, e); /* shared by the verifiers (take_unit) */
    e->vnext = 0;
    e->vbad = e->bytes;
    e->vnomem = false;
    st->doneq[(st->dhead + st->dcount) % st->nring] = c->idx;
    st->dcount++;
    st->callbacks++;
    pthread_cond_signal(&st->cv_done);
    pthread_mutex_unlock(&st->lock);
}

const char *run_verify_name(run_verify_t v)
{
    return v == RUN_VERIFY_OFF ? "off" : v == RUN_VERIFY_SAMPLE ? "sample" : "full";
}

size_t run_digest_blocks(size_t batch)
{
    return (batch + RUN_DIGEST_BLOCK - 1) / RUN_DIGEST_BLOCK;
}

uint64_t run_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void run_wait_free(run_state_t *st)
{
    uint64_t *to = st->dcount > 0   ? &st->verify_wait_ns
                   : st->writes > 0 ? &st->write_wait_ns
                                    : NULL;
    uint64_t w0 = to != NULL ? run_now_ns() : 0;
    pthread_cond_wait(&st->cv_free, &st->lock);
    if (to != NULL)
        *to += run_now_ns() - w0;
}

/* Whether --verify checks batch @e: all, one in RUN_VERIFY_SAMPLE_EVERY and the last (a
 * stream's last is the short one, where it ends short), or none. */
static bool to_check(const run_state_t *st, const ring_entry_t *e)
{
    if (st->verify == RUN_VERIFY_OFF)
        return false;
    return st->verify == RUN_VERIFY_FULL || e->seq % RUN_VERIFY_SAMPLE_EVERY == 0 ||
           e->seq == st->last_seq || e->bytes < st->batch_bytes;
}

/* Where @a and @b first differ, @n when they do not. */
static size_t first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    size_t k = 0;
    while (k + 4096 <= n && memcmp(a + k, b + k, 4096) == 0)
        k += 4096;
    while (k < n && a[k] == b[k])
        k++;
    return k;
}

/* [@from, @to) of a batch against its CPU reference, made block by block into @scratch so that
 * each block is compared while it is still in cache: the input and the output are each read
 * once. Blocks are whole floats from the batch's start (@from is a multiple of
 * RUN_CHECK_BLOCK), which the workloads transform one by one. Returns where the first byte
 * differs, e->bytes when none does. */
static size_t check_reference(const run_state_t *st, const ring_entry_t *e, size_t from, size_t to,
                              unsigned char *scratch)
{
    for (size_t off = from; off < to; off += RUN_CHECK_BLOCK) {
        size_t n = to - off < RUN_CHECK_BLOCK ? to - off : RUN_CHECK_BLOCK;
        ferry_workload_reference(st->wl, e->in + off, scratch, n);
        size_t k = first_diff(scratch, e->out + off, n);
        if (k < n)
            return off + k;
    }
    return e->bytes;
}

/* [@from, @to) of a batch of the pool (@from a multiple of RUN_DIGEST_BLOCK) against its
 * digests: the output is read once, at XXH3's speed. A block whose digest differs has its
 * reference made again on the CPU from its input, to say where the first bad byte is. Returns
 * that byte's offset in the batch, or e->bytes. */
static size_t check_digests(const run_state_t *st, const ring_entry_t *e, size_t from, size_t to,
                            unsigned char *scratch)
{
    const uint64_t *d = st->digests + e->pool_off / st->batch_bytes * st->blocks_per_batch +
                        from / RUN_DIGEST_BLOCK;
    for (size_t off = from; off < to; off += RUN_DIGEST_BLOCK, d++) {
        size_t n = to - off < RUN_DIGEST_BLOCK ? to - off : RUN_DIGEST_BLOCK;
        if (XXH3_64bits(e->out + off, n) == *d)
            continue;
        ferry_workload_reference(st->wl, e->in + off, scratch, n);
        size_t k = first_diff(scratch, e->out + off, n);
        if (k < n)
            return off + k;
    }
    return e->bytes;
}

size_t run_verify_units(const run_state_t *st, const ring_entry_t *e)
{
    if (e->status != 0 || !to_check(st, e) || e->bytes == 0)
        return 1; /* nothing to read: one unit that only counts the batch */
    return (e->bytes + RUN_VERIFY_UNIT - 1) / RUN_VERIFY_UNIT;
}

size_t run_verify_unit(const run_state_t *st, const ring_entry_t *e, size_t u,
                       unsigned char *scratch)
{
    if (e->status != 0 || !to_check(st, e))
        return e->bytes;
    size_t from = u * RUN_VERIFY_UNIT;
    size_t to = e->bytes - from < RUN_VERIFY_UNIT ? e->bytes : from + RUN_VERIFY_UNIT;
    if (from >= e->bytes)
        return e->bytes;
    if (st->digests != NULL && e->bytes == st->batch_bytes && st->batch_bytes % 4 == 0)
        return check_digests(st, e, from, to, scratch);
    /* File input; a short last batch; or batches of 1-3 bytes, each a part of a float that the
     * float workloads transform on its own (workloads.h): not a slice of the pool, whose
     * digests were made over whole floats. */
    return check_reference(st, e, from, to, scratch);
}

bool run_verify_count(const run_state_t *st, const ring_entry_t *e, size_t bad, run_totals_t *t)
{
    if (e->status != 0) {
        t->failed++;
        return false;
    }
    if (e->where == FERRY_DONE_CPU)
        t->ok_cpu++;
    else
        t->ok_gpu++;
    t->done_bytes += e->bytes;
    if (!to_check(st, e))
        return true;
    t->checked++;
    if (bad < e->bytes) {
        t->first_bad_offset = e->offset + bad;
        t->mismatched++;
        return false;
    }
    t->verified_bytes += e->bytes;
    return true;
}

bool run_verify_batch(const run_state_t *st, const ring_entry_t *e, unsigned char *scratch,
                      run_totals_t *t)
{
    size_t bad = e->bytes;
    for (size_t u = 0, n = run_verify_units(st, e); u < n && bad == e->bytes; u++)
        bad = run_verify_unit(st, e, u, scratch);
    return run_verify_count(st, e, bad, t);
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

/* Take the next unit of the batch at the head of the done queue (st->lock held): the batch
 * leaves the queue when its last unit is taken, and until then another verifier is woken to
 * share it, so that a batch is checked by as many threads as are free (the last batch of a run
 * by all of them: checked by one, 64 MiB held the end of a 16 GiB run on the H200 for 14 ms,
 * 3.4% of it). */
static size_t take_unit(run_state_t *st, size_t *u)
{
    size_t idx = st->doneq[st->dhead];
    ring_entry_t *e = &st->ring[idx];
    *u = e->vnext++;
    if (e->vnext >= e->vunits) {
        st->dhead = (st->dhead + 1) % st->nring;
        st->dcount--;
    } else {
        pthread_cond_signal(&st->cv_done);
    }
    return idx;
}

/* Batch @idx is checked (st->lock held, dropped to write it to a regular file): its totals,
 * and its entry on to the output or back to the free list. */
static void batch_checked(run_state_t *st, size_t idx, bool nomem)
{
    ring_entry_t *e = &st->ring[idx];
    run_totals_t t = {0};
    bool good = !nomem && run_verify_count(st, e, e->vbad, &t);
    t.io_error = nomem ? ENOMEM : 0;
    if (!nomem && st->sink != NULL && e->status == 0) {
        /* a regular file, even a wrong batch (the run fails and the temporary output goes);
         * 0: the sink frees the entry once written (run_files.c) */
        pthread_mutex_unlock(&st->lock);
        t.io_error = run_sink_write(st, e);
        pthread_mutex_lock(&st->lock);
    }
    st->t.ok_gpu += t.ok_gpu;
    st->t.ok_cpu += t.ok_cpu;
    st->t.failed += t.failed;
    st->t.verified_bytes += t.verified_bytes;
    st->t.done_bytes += t.done_bytes;
    st->t.checked += t.checked;
    if (t.mismatched) {
        if (st->t.mismatched == 0 || t.first_bad_offset < st->t.first_bad_offset)
            st->t.first_bad_offset = t.first_bad_offset;
        st->t.mismatched += t.mismatched;
    }
    if (t.io_error && !st->t.io_error)
        st->t.io_error = t.io_error;
    if (st->ordered) {
        /* a stream cannot have a hole: it ends before the first batch that is wrong */
        if (!good && e->seq < st->cut_seq)
            st->cut_seq = e->seq;
        e->ready = true;
        write_in_order(st);
        return;
    }
    if (st->sink != NULL && !nomem && e->status == 0 && !t.io_error)
        return; /* being written: freed by run_files.c */
    st->freeq[st->nfree++] = idx;
    pthread_cond_signal(&st->cv_free);
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
        size_t u;
        size_t idx = take_unit(st, &u);
        ring_entry_t *e = &st->ring[idx];
        pthread_mutex_unlock(&st->lock);
        uint64_t t0 = run_now_ns();
        size_t bad = scratch != NULL ? run_verify_unit(st, e, u, scratch) : e->bytes;
        uint64_t dt = run_now_ns() - t0;
        pthread_mutex_lock(&st->lock);
        st->t.verify_ns += dt;
        e->vnomem |= scratch == NULL;
        e->vbad = bad < e->vbad ? bad : e->vbad;
        if (--e->vleft == 0)
            batch_checked(st, idx, e->vnomem);
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
    unsigned char *pool;
    size_t batch, bpb;  /* bytes per batch (a multiple of 4), digest blocks per batch */
    size_t units, next; /* the pool's digest blocks, and the next one to make (shared) */
    const ferry_workload_t *wl;
    uint64_t *digests;
    bool nomem;
} prep_job_t;

/* A helper: take the pool's digest blocks one at a time, fill each with its data, and keep
 * the digest of its reference (made in a block-sized buffer that stays in cache). */
static void *prep_main(void *arg)
{
    prep_job_t *j = arg;
    unsigned char *scratch = malloc(RUN_DIGEST_BLOCK);
    if (scratch == NULL) {
        __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED);
        return NULL;
    }
    for (;;) {
        size_t u = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (u >= j->units)
            break;
        size_t in_batch = u % j->bpb * RUN_DIGEST_BLOCK;
        size_t off = u / j->bpb * j->batch + in_batch;
        size_t n = j->batch - in_batch < RUN_DIGEST_BLOCK ? j->batch - in_batch : RUN_DIGEST_BLOCK;
        gen_fill(j->seed, off, j->pool + off, n);
        ferry_workload_reference(j->wl, j->pool + off, scratch, n);
        j->digests[u] = XXH3_64bits(scratch, n);
    }
    free(scratch);
    return NULL;
}

bool run_make_reference(uint64_t seed, const ferry_workload_t *wl, unsigned char *pool,
                        size_t bytes, size_t batch, uint64_t *digests)
{
    size_t bpb = run_digest_blocks(batch);
    prep_job_t job = {seed, pool, batch, bpb, bytes / batch * bpb, 0, wl, digests, false};
    unsigned nt = run_helper_threads(), started = 0;
    pthread_t th[RUN_MAX_HELPERS];
    while (started < nt && pthread_create(&th[started], NULL, prep_main, &job) == 0)
        started++;
    if (started == 0)
        prep_main(&job);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return !job.nomem && job.next >= job.units;
}

unsigned run_helper_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* Leave two CPUs to the pipeline's issuer and completion threads. A verifier reads a
     * batch's output once, at the rate one thread reads memory: on the H200's 16-CPU host 6.5
     * GB/s, 37.2 with 8 threads and 57.6 with 16 (bench/results/2026-12-04-h200-2953628-host),
     * so checking ~48 GB/s takes more than 8. */
    n = n > 3 ? n - 2 : 1;
    return (unsigned)(n > RUN_MAX_HELPERS ? RUN_MAX_HELPERS : n);
}
