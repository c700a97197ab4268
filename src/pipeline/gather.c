/* Gathering small batches into slabs (gather.h). A slab is pinned memory, in and out, of
 * gather_bytes each: its table of items first (ferry_item_t, GATHER_MAX_ITEMS at most), then
 * each item's bytes at a GATHER_ALIGN boundary. A submitter reserves its item's place with one
 * compare-exchange on the slab's word (the lock only opens, seals and waits), then copies its
 * bytes in, or, for a pinned batch of GATHER_DIRECT_MIN or more (from GATHER_KERNEL_MIN up to the
 * device's piece_kernel_max too), leaves them where they are to move as a piece of the slab's
 * copies (backend copy_pieces: small pieces by a copy kernel). The slab goes into the pipeline, as
 * a batch whose user pointer is the slab, once sealed (full; the device about to idle; its
 * first item waited gather_us: the flusher thread; drain, close) and its items all written. Its
 * callback, on the completion thread, copies each copied item's output back to its batch, frees
 * the slab and runs the items' callbacks in order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/prof.h"
#include "pipeline/gather_internal.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the stage, wrapped ---------------------------------------------------------------- */

/* The slab @user names, when it is one of @g's; NULL for a batch of the caller's own. */
static const gather_slab_t *slab_of(const ferry__gather_t *g, const void *user)
{
    uintptr_t u = (uintptr_t)user, a = (uintptr_t)g->slabs;
    if (u < a || u >= a + (uintptr_t)g->nslabs * sizeof(gather_slab_t) ||
        (u - a) % sizeof(gather_slab_t) != 0)
        return NULL;
    return user;
}

/* Item @i's own arguments within the slab chunk @a. */
static ferry_kernel_args_t item_args(const ferry_kernel_args_t *a, const gather_slab_t *s,
                                     uint32_t i)
{
    const ferry_item_t *it = &s->table[i];
    ferry_kernel_args_t x = *a;
    x.in = (const unsigned char *)a->in + it->offset;
    x.out = (unsigned char *)a->out + it->offset;
    x.bytes = it->bytes;
    x.offset = 0;
    x.batch_id = it->batch_id;
    x.chunk = 0;
    x.batch_user = it->batch_user;
    x.items = NULL;
    x.nitems = 0;
    return x;
}

/* A slab is always one chunk (gather_bytes <= chunk_bytes): anything else is a bug. */
static int whole(const ferry_kernel_args_t *a, const gather_slab_t *s)
{
    if (a->offset == 0 && a->bytes == s->used)
        return 0;
    return ferry__error(FERRY_ESTATE,
                        "gather: a slab of %zu bytes reached the stage as %zu "
                        "bytes at %zu",
                        s->used, a->bytes, a->offset);
}

int ferry__gather_stage_gpu(const ferry_kernel_args_t *a, void *stream, void *user)
{
    const ferry__gather_t *g = user;
    const gather_slab_t *s = slab_of(g, a->batch_user);
    if (s == NULL)
        return g->stage.gpu(a, stream, g->stage.user);
    int rc = whole(a, s);
    if (rc == 0 && g->stage.gpu_items != NULL) {
        ferry_kernel_args_t x = *a;
        x.items = (const ferry_item_t *)a->in; /* the table, copied with the slab */
        x.nitems = s->nitems;
        x.batch_id = 0;
        x.batch_user = NULL;
        return g->stage.gpu_items(&x, stream, g->stage.user);
    }
    for (uint32_t i = 0; rc == 0 && i < s->nitems; i++) {
        ferry_kernel_args_t x = item_args(a, s, i);
        rc = g->stage.gpu(&x, stream, g->stage.user);
    }
    return rc;
}

int ferry__gather_stage_cpu(const ferry_kernel_args_t *a, void *user)
{
    const ferry__gather_t *g = user;
    const gather_slab_t *s = slab_of(g, a->batch_user);
    if (s == NULL)
        return g->stage.cpu(a, g->stage.user);
    int rc = whole(a, s);
    /* On the host (the CPU fallback: the slab's own memory), a direct item's bytes are in its
     * batch, not in the slab: read and write them there. On the device they were moved in. */
    bool host = a->in == s->h_in;
    for (uint32_t i = 0; rc == 0 && i < s->nitems; i++) {
        ferry_kernel_args_t x = item_args(a, s, i);
        if (host && s->items[i].direct) {
            x.in = s->items[i].in;
            x.out = s->items[i].out;
        }
        rc = g->stage.cpu(&x, g->stage.user);
    }
    return rc;
}

/* ---- sending slabs ----------------------------------------------------------------------- */

/* Seal @s (under lock): no item joins it from now on. Its sealer then claims it, once it has let
 * go of the lock (ferry__gather_claim), to learn whether it sends it. */
void ferry__gather_seal(ferry__gather_t *g, gather_slab_t *s)
{
    if (g->open == s) {
        g->open = NULL;
        atomic_store_explicit(&g->open_fast, NULL, memory_order_relaxed);
    }
    s->state = SLAB_SEALED;
    s->seal_no = ++g->seals;
    g->unsent++;
    atomic_fetch_add_explicit(&g->busy, 1, memory_order_relaxed);
    /* Before any writer can find its item claimed and take one off (the claims come after it,
     * on this thread, and release it to the writer that finds one). */
    atomic_store_explicit(&s->left, LEFT_BIAS, memory_order_relaxed);
    uint64_t w = atomic_fetch_or_explicit(&s->word, W_SEALED, memory_order_acq_rel);
    g->items_sealed += W_ITEMS(w); /* final: no item joins a sealed slab */
}

/* Claim sealed @s's items still being written, on the thread that sealed it, after the lock:
 * true when all are written and the caller sends @s; otherwise the last writer claimed does.
 * Each item is published by its writer (ready 0 -> 1) or claimed here (0 -> 2), once. Then
 * left, LEFT_BIAS since the seal, loses LEFT_BIAS - k here (k: the items claimed) and 1 for
 * each claimed writer once done; the one that takes it to 0 sends. Whoever that is sees every
 * record: a published one was read as 1 here with acquire, before this thread's release on
 * left; a claimed one was written before its writer's release on left; and every change to
 * left after the seal is an acq_rel read-modify-write, so they make one release sequence that
 * the last one, acquiring, synchronises with in full. The word it then reads is the final one,
 * seen here before this thread's release on left. A slab is sent only from 0, so no writer
 * nor this scan can find it recycled. */
bool ferry__gather_claim(gather_slab_t *s)
{
    uint32_t n =
        W_ITEMS(atomic_load_explicit(&s->word, memory_order_relaxed)); /* sealed here: final */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        _Atomic uint32_t *r = &s->items[i].ready;
        uint32_t z = ITEM_WRITING;
        /* mostly published already: a load, not a read-modify-write of the writer's line */
        if (atomic_load_explicit(r, memory_order_acquire) == ITEM_WRITING &&
            atomic_compare_exchange_strong_explicit(r, &z, ITEM_CLAIMED, memory_order_acq_rel,
                                                    memory_order_acquire))
            k++;
    }
    return atomic_fetch_sub_explicit(&s->left, LEFT_BIAS - k, memory_order_acq_rel) ==
           LEFT_BIAS - k;
}

/* Publish item @i of @s, its record written (plain stores, before the release): true when the
 * sealer claimed it first and this writer, the last of those it claimed, sends @s. Either way
 * the caller no longer touches @s unless it sends it: the slab may be sent and opened again. */
static bool publish(gather_slab_t *s, uint32_t i)
{
    uint32_t z = ITEM_WRITING;
    if (atomic_compare_exchange_strong_explicit(&s->items[i].ready, &z, ITEM_PUBLISHED,
                                                memory_order_acq_rel, memory_order_acquire))
        return false;
    return atomic_fetch_sub_explicit(&s->left, 1, memory_order_acq_rel) == 1;
}

/* Reserve @need bytes and an item in @s: true with its index and offset, false when @s is
 * sealed or has no room. Its writer then fills the item's record and publishes it (publish):
 * the word is this thread's only write to a line other submitters write. */
static bool reserve(const ferry__gather_t *g, gather_slab_t *s, size_t need, uint32_t *i,
                    size_t *off)
{
    uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
    for (;;) {
        if ((w & W_SEALED) || W_ITEMS(w) >= g->max_items || (w & W_USED_MASK) + need > g->cap)
            return false;
        /* acquire: the slab as room() opened it, its items' ready 0 again included */
        if (atomic_compare_exchange_weak_explicit(&s->word, &w, w + need + W_ITEM,
                                                  memory_order_acq_rel, memory_order_relaxed)) {
            *i = W_ITEMS(w);
            *off = (size_t)(w & W_USED_MASK);
            return true;
        }
    }
}

/* Under lock: seal the open slab when the device would otherwise idle (Nagle's rule: fewer
 * than g->eager slabs sealed or in flight), so that a batch waits for others to join it only
 * while the device is busy. Returns the slab sealed, which the caller claims, or NULL. */
static gather_slab_t *seal_if_idle(ferry__gather_t *g)
{
    gather_slab_t *s = g->open;
    if (s == NULL || g->unsent + g->inflight >= g->eager)
        return NULL;
    ferry__gather_seal(g, s);
    return s;
}

static void slab_done(const ferry_batch_result_t *r, void *arg);

/* Count @s (sealed as @seal_no) as in the pipeline (@ok) or hand it to the flusher. Once the
 * pipeline took it, @s may be done, freed and even opened and sealed again before this runs
 * (a light slab is issued by the sending thread, and a GPU finishes it within microseconds): its
 * state is set only while it is still that sealing, and its counts moved first by slab_done are
 * right in sum (unsent + inflight, unsigned: inflight may wrap below 0 until this runs). */
static void sent(ferry__gather_t *g, gather_slab_t *s, uint64_t seal_no, bool ok)
{
    bool shut = false;
    pthread_mutex_lock(&g->mu);
    if (ok) {
        if (s->state == SLAB_SEALED && s->seal_no == seal_no)
            s->state = SLAB_SENT;
        g->unsent--;
        g->inflight++;
        shut = g->shut_pending && g->unsent == 0;
        if (shut)
            g->shut_pending = false;
        pthread_cond_broadcast(&g->sent_cv);
    } else {
        s->next = g->handoff;
        g->handoff = s;
        pthread_cond_signal(&g->flush_cv);
    }
    pthread_mutex_unlock(&g->mu);
    atomic_fetch_add_explicit(&g->slabs_in, ok, memory_order_relaxed);
    if (shut)
        ferry__pipe_shut(g->p);
}

/* Append [@host, +@bytes) at device offset @off to @pc (@n of them), from the registration
 * starting at @reg (*@last: the last piece's). It is merged into the last piece when both
 * sides continue it within one registration: pieces of the slab's own memory, and a batch's
 * beside another of the same registration (batches carved out of one buffer, as a pool of
 * KV-cache blocks is); two registrations' never, as one copy may not span them (the
 * simulator refuses it, CUDA said invalid argument). */
static void add_piece(ferry_be_piece_t *pc, size_t *n, uintptr_t *last, void *host, size_t off,
                      size_t bytes, uintptr_t reg)
{
    ferry_be_piece_t *l = *n > 0 ? &pc[*n - 1] : NULL;
    if (l != NULL && reg != 0 && *last == reg && (unsigned char *)l->host + l->bytes == host &&
        l->off + l->bytes == off) {
        l->bytes += bytes;
        return;
    }
    pc[(*n)++] = (ferry_be_piece_t){host, off, bytes};
    *last = reg;
}

static int by_input(const void *a, const void *b)
{
    uintptr_t x = ((const gather_order_t *)a)->in, y = ((const gather_order_t *)b)->in;
    return x < y ? -1 : x > y;
}

/* The order of @s's items on the device, into s->order. A slab of direct items only (nothing
 * in its host memory yet: send writes the table after) is laid out anew in the order of their
 * inputs, so that batches carved out of one buffer go as one piece however their submitters'
 * reservations interleaved: 8 threads submitting 64 KiB batches of one buffer left ~60 pieces a
 * slab each way, at ~0.7 us of host time a piece (bench/explore/small_copies.cu). Otherwise the
 * order of their reservations. */
static void lay_out(const ferry__gather_t *g, gather_slab_t *s, bool all_direct)
{
    gather_order_t *o = s->order;
    bool sorted = true;
    for (uint32_t i = 0; i < s->nitems; i++) {
        o[i] = (gather_order_t){(uintptr_t)s->items[i].in, i};
        sorted &= i == 0 || o[i].in >= o[i - 1].in;
    }
    if (sorted || !all_direct)
        return;
    qsort(o, s->nitems, sizeof(*o), by_input);
    size_t off = g->table_bytes; /* the same sizes packed again: the same bytes in all */
    for (uint32_t k = 0; k < s->nitems; k++) {
        s->items[o[k].i].offset = off;
        off += ferry__gather_round_up(s->items[o[k].i].bytes, GATHER_ALIGN);
    }
}

/* The pieces of a slab with direct items: the table and each copied item from the slab (merged
 * where they lie side by side), each direct item from its batch; back, each item's output to
 * where its callback reads it. */
static const ferry__pieces_t *pieces_of(const ferry__gather_t *g, gather_slab_t *s)
{
    uint32_t ndirect = 0;
    for (uint32_t i = 0; i < s->nitems; i++)
        ndirect += s->items[i].direct;
    if (ndirect == 0)
        return NULL;
    lay_out(g, s, ndirect == s->nitems);
    size_t nin = 0, nout = 0;
    uintptr_t own = (uintptr_t)g->mem, lin = 0, lout = 0; /* the slabs: one ferry_host_alloc */
    add_piece(s->pin, &nin, &lin, s->h_in, 0, g->table_bytes, own);
    for (uint32_t k = 0; k < s->nitems; k++) {
        uint32_t i = s->order[k].i;
        const gather_item_t *it = &s->items[i];
        size_t off = it->offset;
        if (it->direct) {
            add_piece(s->pin, &nin, &lin, (void *)(uintptr_t)it->in, off, it->bytes, it->reg_in);
            add_piece(s->pout, &nout, &lout, it->out, off, it->bytes, it->reg_out);
        } else {
            add_piece(s->pin, &nin, &lin, s->h_in + off, off,
                      ferry__gather_round_up(it->bytes, GATHER_ALIGN), own);
            if (it->out != NULL)
                add_piece(s->pout, &nout, &lout, s->h_out + off, off, it->bytes, own);
        }
    }
    s->pieces = (ferry__pieces_t){.in = s->pin, .out = s->pout, .nin = nin, .nout = nout};
    return &s->pieces;
}

/* Submit sealed @s, whose copies are in, into the pipeline. @wait: the caller may block for
 * room; otherwise a full queue hands it to the flusher, which may. */
int ferry__gather_send(ferry__gather_t *g, gather_slab_t *s, bool wait)
{
    FERRY_PROF_BEGIN(t0);
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire); /* sealed: final */
    s->nitems = W_ITEMS(w);
    s->used = (size_t)(w & W_USED_MASK);
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = s->h_in;
    b.out = s->h_out;
    b.bytes = s->used;
    b.user = s;
    FERRY_PROF_BEGIN(tl);
    const ferry__pieces_t *pieces = pieces_of(g, s); /* lays the slab out: before the table */
    for (uint32_t i = 0; i < s->nitems; i++) {
        const gather_item_t *it = &s->items[i];
        s->table[i] = (ferry_item_t){
            .offset = it->offset, .bytes = it->bytes, .batch_id = it->id, .batch_user = it->user};
    }
    FERRY_PROF_END(FERRY__PROF_SEND_LAYOUT, tl);
    /* Read before the pipeline has it: then it is no longer this thread's (sent()). A slab of
     * copies moves the slab's own bytes, once each way. */
    size_t npieces = pieces != NULL ? pieces->nin + pieces->nout : 2;
    uint64_t seal_no = s->seal_no;
    FERRY_PROF_BEGIN(t1);
    int rc = ferry__pipe_submit_internal(g->p, &b, slab_done, s, wait, pieces);
    FERRY_PROF_END(FERRY__PROF_SEND_ISSUE, t1);
    if (rc == 0)
        atomic_fetch_add_explicit(&g->pieces, npieces, memory_order_relaxed);
    sent(g, s, seal_no, rc == 0);
    FERRY_PROF_END(FERRY__PROF_SEND, t0);
    return rc;
}

void *ferry__gather_flusher_main(void *arg)
{
    ferry__gather_t *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        gather_slab_t *s = g->handoff;
        if (s != NULL) {
            g->handoff = s->next;
            pthread_mutex_unlock(&g->mu);
            if (ferry__gather_send(g, s, true) != 0) {
                struct timespec ts = {0, 1000000}; /* refused for now (memory): again soon */
                nanosleep(&ts, NULL);
            }
            pthread_mutex_lock(&g->mu);
            continue;
        }
        s = g->open;
        if (s != NULL) {
            uint64_t due = s->opened_ns + g->flush_ns, now = mono_ns();
            if (now >= due) {
                ferry__gather_seal(g, s);
                pthread_mutex_unlock(&g->mu);
                if (ferry__gather_claim(s))
                    ferry__gather_send(g, s, true);
                pthread_mutex_lock(&g->mu);
                continue;
            }
            struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
            pthread_cond_timedwait(&g->flush_cv, &g->mu, &ts);
            continue;
        }
        g->flusher_idle = true;
        pthread_cond_wait(&g->flush_cv, &g->mu);
        g->flusher_idle = false;
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- the batches' side -------------------------------------------------------------------- */

bool ferry__gather_takes(const ferry__gather_t *g, const ferry_batch_t *b)
{
    /* gpu_items runs over the whole slab: an item that ends inside an element would have its
     * last element made of its tail and the padding after it. */
    return g != NULL && b->bytes > 0 && b->bytes <= g->item_max && b->prepare == NULL &&
           b->in != NULL &&
           (g->stage.gpu_items == NULL || g->stage.granularity <= 1 ||
            b->bytes % g->stage.granularity == 0);
}

/* A block of @n batch ids of the pipeline's own sequence (g's lock, then p's). */
static uint64_t take_ids(ferry__gather_t *g, uint64_t n)
{
    pthread_mutex_lock(&g->p->lock);
    uint64_t first = g->p->api.next_id;
    g->p->api.next_id += n;
    pthread_mutex_unlock(&g->p->lock);
    return first;
}

/* Under lock: reserve @need bytes in the open slab (*@i, *@off), opening a free one and sealing a
 * full one into *@to_send (the caller claims it after the lock); NULL (the lock held) when none is
 * free: the caller waits or refuses. */
static gather_slab_t *room(ferry__gather_t *g, size_t need, gather_slab_t **to_send, uint32_t *i,
                           size_t *off)
{
    gather_slab_t *s = g->open;
    if (s != NULL && reserve(g, s, need, i, off))
        return s;
    if (s != NULL) {
        ferry__gather_seal(g, s);
        *to_send = s;
    }
    if ((s = g->free) == NULL)
        return NULL;
    g->free = s->next;
    s->state = SLAB_OPEN;
    s->id_base = take_ids(g, g->max_items);
    s->opened_ns = mono_ns();
    /* Ours is in the word the slab opens with (it fits: need <= item_max, a quarter of what
     * the table leaves): a submit that still holds this slab from before, or the fast path
     * once it is published, can only come after it. We publish it as any other writer. */
    *i = 0;
    *off = g->table_bytes;
    atomic_store_explicit(&s->word, (uint64_t)(g->table_bytes + need) + W_ITEM,
                          memory_order_release);
    g->open = s;
    atomic_store_explicit(&g->open_fast, s, memory_order_release);
    if (g->flusher_idle)
        pthread_cond_signal(&g->flush_cv); /* a slab to watch: only when the pipeline idled */
    return s;
}

/* The registration holding [@ptr, +@n), 0 when it is not pinned: a pool's memory counts as
 * its own (never merged with its neighbours: the pool's slabs may be pinned apart). */
static uintptr_t pinned_in(ferry_pipeline_t *p, const void *ptr, size_t n)
{
    if (ferry_pool_owns(p->pool, ptr, n))
        return (uintptr_t)ptr;
    return ferry__rt_registration_of(p->dev, ptr, n);
}

int ferry__gather_submit(ferry__gather_t *g, const ferry_batch_t *b, ferry_done_fn cb, void *arg,
                         uint64_t *id)
{
    FERRY_PROF_BEGIN(t0);
    ferry_pipeline_t *p = g->p;
    size_t need = ferry__gather_round_up(b->bytes, GATHER_ALIGN);
    bool own = on_own_thread(p), may_wait = !own && !p->plan.nonblocking;
    uint64_t now = submit_stamp(p);
    gather_slab_t *to_send = NULL;
    uint32_t i = 0;
    size_t off = 0;
    uintptr_t reg_in = 0, reg_out = 0;
    bool direct = g->direct &&
                  (b->bytes >= GATHER_DIRECT_MIN ||
                   (b->bytes >= GATHER_KERNEL_MIN && b->bytes <= g->kernel_max)) &&
                  b->out != NULL && (reg_in = pinned_in(p, b->in, b->bytes)) != 0 &&
                  (reg_out = pinned_in(p, b->out, b->bytes)) != 0;
    /* The fast path: the open slab, with room. A stale pointer is harmless: a slab that was
     * sealed refuses (its word says so) until it is opened again, and then it is the open one. */
    gather_slab_t *s = atomic_load_explicit(&g->open_fast, memory_order_acquire);
    if (s == NULL || !reserve(g, s, need, &i, &off)) {
        FERRY_PROF_BEGIN(t1);
        pthread_mutex_lock(&g->mu);
        for (;;) {
            if (g->closing) {
                pthread_mutex_unlock(&g->mu);
                if (to_send != NULL && ferry__gather_claim(to_send))
                    ferry__gather_send(g, to_send, !own);
                return ferry__error(FERRY_ECLOSED,
                                    "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                                    p->stage_name, p->serial);
            }
            if ((s = room(g, need, &to_send, &i, &off)) != NULL) {
                if (!direct && g->waiters > 0) /* copies: more hands fill the slab sooner */
                    pthread_cond_signal(&g->free_cv);
                break;
            }
            if (to_send != NULL) { /* send it first: it frees a slab in time */
                pthread_mutex_unlock(&g->mu);
                if (ferry__gather_claim(to_send))
                    ferry__gather_send(g, to_send, !own);
                to_send = NULL;
                pthread_mutex_lock(&g->mu);
                continue;
            }
            if (!may_wait) {
                pthread_mutex_unlock(&g->mu);
                if (p->plan.nonblocking)
                    return FERRY_EAGAIN;
                return ferry__error(FERRY_EBUSY,
                                    "ferry_pipeline_submit: every slab of pipeline '%s' #%u is in "
                                    "flight and this is one of its callbacks: waiting for one "
                                    "would deadlock",
                                    p->stage_name, p->serial);
            }
            g->waiters++;
            g->waits++;
            pthread_cond_wait(&g->free_cv, &g->mu);
            g->waiters--;
        }
        pthread_mutex_unlock(&g->mu);
        FERRY_PROF_END(FERRY__PROF_SUBMIT_ROOM, t1);
        if (to_send != NULL && ferry__gather_claim(to_send))
            ferry__gather_send(g, to_send, !own);
    }
    uint64_t my_id = s->id_base + i;
    if (!direct)
        memcpy(s->h_in + off, b->in, b->bytes);
    /* Field by field: ready is the sealer's to claim meanwhile (publish). */
    gather_item_t *it = &s->items[i];
    it->cb = cb;
    it->arg = arg;
    it->in = b->in;
    it->out = b->out;
    it->bytes = b->bytes;
    it->id = my_id;
    it->submit_ns = now;
    it->offset = off;
    it->user = b->user;
    it->direct = direct;
    it->reg_in = reg_in;
    it->reg_out = reg_out;
    bool last = publish(s, i); /* s is not ours from here unless last */
    gather_slab_t *idle = NULL;
    if (!last && atomic_load_explicit(&g->busy, memory_order_relaxed) < g->eager) {
        pthread_mutex_lock(&g->mu); /* the device may idle: look again, under the lock */
        idle = seal_if_idle(g);
        pthread_mutex_unlock(&g->mu);
    }
    if (last)
        ferry__gather_send(g, s, !own);
    else if (idle != NULL && ferry__gather_claim(idle))
        ferry__gather_send(g, idle, !own);
    else if (p->plan.virtual_clock)
        poke(p, false); /* the caller is back: a virtual clock need not wait for it */
    if (id != NULL)
        *id = my_id;
    FERRY_PROF_END(FERRY__PROF_SUBMIT, t0);
    return 0;
}

/* Copy each item's output of @s back to its batch. */
typedef struct scatter_part {
    const gather_slab_t *s;
    uint32_t from, to;
} scatter_part_t;

static void scatter_run(void *arg)
{
    const scatter_part_t *sp = arg;
    for (uint32_t i = sp->from; i < sp->to; i++) {
        const gather_item_t *it = &sp->s->items[i];
        if (it->out != NULL && !it->direct) /* a direct item's output is in place */
            memcpy(it->out, sp->s->h_out + it->offset, it->bytes);
    }
}

static void scatter(ferry__gather_t *g, const gather_slab_t *s)
{
    /* One thread copies 4-6 GB/s on an H100 host: copying a 2 MiB slab in two parts held the
     * completion thread ~360 us a slab (5.8 GB/s in all), so a part per worker, down to
     * GATHER_SCATTER_PIECE. */
    /* Only the items copied into the slab come back through it: a direct item's output is in
     * place. A slab of direct items wakes no worker: waking them for nothing (every slab of
     * 64 KiB items) kept them spinning, 2.5 us of CPU an item on an H100 host. */
    size_t copied = 0;
    for (uint32_t i = 0; i < s->nitems; i++)
        copied += s->items[i].out != NULL && !s->items[i].direct ? s->items[i].bytes : 0;
    if (copied == 0)
        return;
    ferry_workers_t *w = g->p->workers;
    unsigned parts = (unsigned)(copied / GATHER_SCATTER_PIECE);
    unsigned nw = w != NULL ? ferry__workers_count(w) + 1 : 1;
    parts = parts < nw ? parts : nw;
    parts = parts < s->nitems ? parts : s->nitems;
    if (parts < 2) {
        scatter_run(&(scatter_part_t){s, 0, s->nitems});
        return;
    }
    scatter_part_t sp[64];
    parts = parts < 64 ? parts : 64;
    ferry_taskgroup_t tg;
    ferry__taskgroup_init(&tg);
    for (unsigned k = 0; k < parts; k++) {
        sp[k] = (scatter_part_t){s, (uint32_t)((uint64_t)s->nitems * k / parts),
                                 (uint32_t)((uint64_t)s->nitems * (k + 1) / parts)};
        if (k > 0 && ferry__taskgroup_run(w, &tg, scatter_run, &sp[k]) != 0)
            scatter_run(&sp[k]);
    }
    scatter_run(&sp[0]);
    ferry__taskgroup_wait(w, &tg);
    ferry__taskgroup_fini(&tg);
}

static void slab_done(const ferry_batch_result_t *r, void *arg)
{
    gather_slab_t *s = arg;
    ferry__gather_t *g = s->g;
    FERRY_PROF_BEGIN(t0);
    if (r->status == 0)
        scatter(g, s);
    FERRY_PROF_END(FERRY__PROF_SLAB_SCATTER, t0);
    FERRY_PROF_BEGIN(t1);
    uint32_t n = s->nitems;
    memcpy(g->scratch, s->items, n * sizeof(*s->items));
    /* Its writers are all done (it was sent): ready 0 again for its next opening, which the
     * lock below and room()'s release of the word publish to the next writers. */
    for (uint32_t i = 0; i < n; i++)
        atomic_store_explicit(&s->items[i].ready, ITEM_WRITING, memory_order_relaxed);
    int where = r->status != 0 ? FERRY_DONE_FAILED : (int)r->where;
    atomic_fetch_add_explicit(&g->slabs_done[where], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->items_done[where], n, memory_order_relaxed);
    pthread_mutex_lock(&g->mu);
    s->state = SLAB_FREE;
    s->next = g->free;
    g->free = s;
    g->inflight--;
    atomic_fetch_sub_explicit(&g->busy, 1, memory_order_relaxed);
    /* GATHER_WAKE of the submitters waiting for room (all of them once closing: they return):
     * each goes on submitting its next batches into the slab; one that copies its bytes in
     * wakes one more (ferry__gather_submit: a slab of copies fills at the copiers' rate, one
     * alone too slow for the link), while direct batches cost a reservation each, and two
     * threads fill a slab of them well within its turn on the link. Waking the eight of a
     * closed loop cost each a wake-up and a turn on this lock, and sent the eight at one
     * reservation word at once. A woken one that finds no room waits again. */
    if (g->closing)
        pthread_cond_broadcast(&g->free_cv);
    else
        for (unsigned k = 0; k < GATHER_WAKE && k < g->waiters; k++)
            pthread_cond_signal(&g->free_cv);
    gather_slab_t *idle = seal_if_idle(g);
    pthread_mutex_unlock(&g->mu);
    FERRY_PROF_END(FERRY__PROF_SLAB_FREE, t1);
    if (idle != NULL) {
        FERRY_PROF_BEGIN(t2);
        if (ferry__gather_claim(idle))
            ferry__gather_send(g, idle, false);
        FERRY_PROF_END(FERRY__PROF_SLAB_SEND, t2);
    }
    FERRY_PROF_BEGIN(t3);
    for (uint32_t i = 0; i < n; i++) {
        const gather_item_t *it = &g->scratch[i];
        ferry_batch_result_t ir = {.id = it->id,
                                   .status = r->status,
                                   .where = (ferry_batch_where_t)where,
                                   .in = it->in,
                                   .out = it->out,
                                   .bytes = it->bytes,
                                   .chunks = 1,
                                   .submit_ns = it->submit_ns,
                                   .done_ns = r->done_ns};
        it->cb(&ir, it->arg);
    }
    FERRY_PROF_END(FERRY__PROF_SLAB_ITEMS, t3);
}
