/* Gathering small batches into slabs (gather.h). A slab is pinned memory, in and out, of
 * gather_bytes each: its table of items first (ferry_item_t, GATHER_MAX_ITEMS at most), then
 * each item's bytes at a GATHER_ALIGN boundary. A submitter reserves its item's place with one
 * compare-exchange on the slab's word (the lock only opens, seals and waits), then copies its
 * bytes in, or, for a pinned batch of GATHER_DIRECT_MIN or more, leaves them where they are to
 * move as a piece of the slab's copies (backend copy_pieces). The slab goes into the pipeline, as
 * a batch whose user pointer is the slab, once sealed (full; the device about to idle; its
 * first item waited gather_us: the flusher thread; drain, close) and its last writer done. Its
 * callback, on the completion thread, copies each copied item's output back to its batch, frees
 * the slab and runs the items' callbacks in order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/gather.h"
#include "pipeline/pipeline_internal.h"

#define GATHER_ALIGN     256u
#define GATHER_MAX_ITEMS 1024u
#define GATHER_ITEM_MAX  (256u << 10)
/* Pinned batches this large or larger move as pieces of their own (no host copy): on an H100
 * host 64 KiB pieces in one cudaMemcpyBatchAsync ran at 97.7% of one copy each way, 16 KiB ones
 * at 42-69%, 4 KiB at 9% (bench/explore/small_copies.cu, 2026-12-06). */
#define GATHER_DIRECT_MIN (64u << 10)
/* A slab's output is copied back to its batches by the host workers too, in parts of at least
 * this many bytes (whole items). */
#define GATHER_SCATTER_PIECE (128u << 10)
/* Submitters a freed slab wakes (slab_done). */
#define GATHER_WAKE 2u

enum slab_state { SLAB_FREE, SLAB_OPEN, SLAB_SEALED, SLAB_SENT };

/* A line of its own (two): the submitters of neighbouring items write theirs at once, and a line
 * they shared went back and forth between their cores. The slab's table (ferry_item_t, two to
 * a line) is written from these by the thread that sends it. */
typedef struct gather_item {
    alignas(FERRY__CACHE_LINE) ferry_done_fn cb;
    void *arg;
    const void *in;
    void *out;
    size_t bytes;
    uint64_t id, submit_ns;
    size_t offset; /* in the slab, on the device (lay_out may move it) */
    void *user;    /* its batch's */
    bool direct;   /* its bytes move between its own pinned memory and the device (pieces) */
    uintptr_t reg_in, reg_out; /* direct: the registrations holding in and out (add_piece) */
} gather_item_t;

/* A slab's reservation word: the bytes used (from its start: the table's room, then the items),
 * its items, the submitters still writing theirs, and whether it is sealed. A submit reserves
 * its place with one compare-exchange, and the one that drops the writers of a sealed slab to 0
 * (or seals one with none) sends it: the open slab's fast path takes no lock. */
#define W_USED_MASK  ((UINT64_C(1) << 40) - 1)
#define W_ITEM       (UINT64_C(1) << 40)
#define W_ITEMS(w)   ((uint32_t)(((w) >> 40) & 0xfffu))
#define W_WRITER     (UINT64_C(1) << 52)
#define W_WRITERS(w) ((unsigned)(((w) >> 52) & 0x7ffu))
#define W_SEALED     (UINT64_C(1) << 63)

typedef struct gather_slab {
    unsigned char *h_in, *h_out;
    ferry_item_t *table; /* at h_in */
    gather_item_t *items;
    _Atomic uint64_t word; /* the reservation word above */
    uint64_t id_base;      /* item i's batch id is id_base + i */
    uint32_t nitems;       /* from the word, once sealed and its copies in (send) */
    size_t used;
    int state; /* enum slab_state, under the gather's lock */
    uint64_t opened_ns, seal_no;
    struct gather_slab *next;
    struct ferry__gather *g;
    ferry_be_piece_t *pin, *pout; /* with direct items: the pieces each way */
    struct gather_order *order;   /* lay_out's */
    ferry__pieces_t pieces;
} gather_slab_t;

struct ferry__gather {
    ferry_pipeline_t *p;
    ferry_stage_t stage; /* the user's */
    size_t cap, table_bytes, item_max;
    uint32_t max_items;
    uint64_t flush_ns;
    unsigned nslabs;
    bool direct; /* the backend moves pieces (copy_pieces): pinned batches skip the host copy */
    gather_slab_t *slabs;
    unsigned char *mem;
    pthread_mutex_t mu;
    pthread_cond_t free_cv, flush_cv, sent_cv;
    gather_slab_t *free, *open, *handoff; /* handoff: sealed slabs the flusher sends */
    _Atomic(gather_slab_t *) open_fast;   /* open, for the fast path (may be stale: see word) */
    _Atomic unsigned busy;                /* unsent + inflight, for a look without the lock */
    unsigned unsent;                      /* sealed, not yet in the pipeline */
    unsigned inflight;                    /* in the pipeline, not yet done */
    unsigned eager;                       /* fewer slabs than this sealed or in flight: the
                                             open one goes at once (the device would idle) */
    unsigned waiters;
    bool closing, shut_pending, stop, flusher_idle, flusher_started;
    uint64_t seals;
    pthread_t flusher;
    uint64_t items_sealed; /* the items of the slabs sealed so far (under the lock) */
    _Atomic uint64_t slabs_in, items_done[3], slabs_done[3];
    gather_item_t *scratch; /* the completion thread's copy of a slab's items */
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
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

static int gather_gpu(const ferry_kernel_args_t *a, void *stream, void *user)
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

static int gather_cpu(const ferry_kernel_args_t *a, void *user)
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

/* Seal @s (under lock): no item joins it from now on. True when its copies are all in and the
 * caller sends it (ferry__gather's send); otherwise its last writer does. */
static bool seal(ferry__gather_t *g, gather_slab_t *s)
{
    if (g->open == s) {
        g->open = NULL;
        atomic_store_explicit(&g->open_fast, NULL, memory_order_relaxed);
    }
    s->state = SLAB_SEALED;
    s->seal_no = ++g->seals;
    g->unsent++;
    atomic_fetch_add_explicit(&g->busy, 1, memory_order_relaxed);
    uint64_t w = atomic_fetch_or_explicit(&s->word, W_SEALED, memory_order_acq_rel);
    g->items_sealed += W_ITEMS(w); /* final: no item joins a sealed slab */
    return W_WRITERS(w) == 0;
}

/* Reserve @need bytes and an item in @s: true with its index and offset, false when @s is
 * sealed or has no room. A writer is counted in until done_writing. */
static bool reserve(const ferry__gather_t *g, gather_slab_t *s, size_t need, uint32_t *i,
                    size_t *off)
{
    uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
    for (;;) {
        if ((w & W_SEALED) || W_ITEMS(w) >= g->max_items || (w & W_USED_MASK) + need > g->cap)
            return false;
        if (atomic_compare_exchange_weak_explicit(&s->word, &w, w + need + W_ITEM + W_WRITER,
                                                  memory_order_acq_rel, memory_order_relaxed)) {
            *i = W_ITEMS(w);
            *off = (size_t)(w & W_USED_MASK);
            return true;
        }
    }
}

/* Under lock: seal the open slab when the device would otherwise idle (Nagle's rule: fewer
 * than g->eager slabs sealed or in flight), so that a batch waits for others to join it only
 * while the device is busy. Returns the slab the caller sends, or NULL. */
static gather_slab_t *seal_if_idle(ferry__gather_t *g)
{
    gather_slab_t *s = g->open;
    if (s == NULL || g->unsent + g->inflight >= g->eager)
        return NULL;
    return seal(g, s) ? s : NULL;
}

static void slab_done(const ferry_batch_result_t *r, void *arg);

/* Mark @s as in the pipeline (@sent) or hand it to the flusher. */
static void sent(ferry__gather_t *g, gather_slab_t *s, bool ok)
{
    bool shut = false;
    pthread_mutex_lock(&g->mu);
    if (ok) {
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

typedef struct gather_order {
    uintptr_t in;
    uint32_t i;
} gather_order_t;

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
        off += round_up(s->items[o[k].i].bytes, GATHER_ALIGN);
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
            add_piece(s->pin, &nin, &lin, s->h_in + off, off, round_up(it->bytes, GATHER_ALIGN),
                      own);
            if (it->out != NULL)
                add_piece(s->pout, &nout, &lout, s->h_out + off, off, it->bytes, own);
        }
    }
    s->pieces = (ferry__pieces_t){.in = s->pin, .out = s->pout, .nin = nin, .nout = nout};
    return &s->pieces;
}

/* Submit sealed @s, whose copies are in, into the pipeline. @wait: the caller may block for
 * room; otherwise a full queue hands it to the flusher, which may. */
static int send(ferry__gather_t *g, gather_slab_t *s, bool wait)
{
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire); /* sealed: final */
    s->nitems = W_ITEMS(w);
    s->used = (size_t)(w & W_USED_MASK);
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = s->h_in;
    b.out = s->h_out;
    b.bytes = s->used;
    b.user = s;
    const ferry__pieces_t *pieces = pieces_of(g, s); /* lays the slab out: before the table */
    for (uint32_t i = 0; i < s->nitems; i++) {
        const gather_item_t *it = &s->items[i];
        s->table[i] = (ferry_item_t){
            .offset = it->offset, .bytes = it->bytes, .batch_id = it->id, .batch_user = it->user};
    }
    int rc = ferry__pipe_submit_internal(g->p, &b, slab_done, s, wait, pieces);
    sent(g, s, rc == 0);
    return rc;
}

static void *flusher_main(void *arg)
{
    ferry__gather_t *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        gather_slab_t *s = g->handoff;
        if (s != NULL) {
            g->handoff = s->next;
            pthread_mutex_unlock(&g->mu);
            if (send(g, s, true) != 0) {
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
                if (seal(g, s)) {
                    pthread_mutex_unlock(&g->mu);
                    send(g, s, true);
                    pthread_mutex_lock(&g->mu);
                }
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
 * full one into *@to_send; NULL (the lock held) when none is free: the caller waits or refuses. */
static gather_slab_t *room(ferry__gather_t *g, size_t need, gather_slab_t **to_send, uint32_t *i,
                           size_t *off)
{
    gather_slab_t *s = g->open;
    if (s != NULL && reserve(g, s, need, i, off))
        return s;
    if (s != NULL && seal(g, s))
        *to_send = s;
    if ((s = g->free) == NULL)
        return NULL;
    g->free = s->next;
    s->state = SLAB_OPEN;
    s->id_base = take_ids(g, g->max_items);
    s->opened_ns = mono_ns();
    /* Ours is in the word the slab opens with (it fits: need <= item_max, a quarter of what
     * the table leaves): a submit that still holds this slab from before, or the fast path
     * once it is published, can only come after it. */
    *i = 0;
    *off = g->table_bytes;
    atomic_store_explicit(&s->word, (uint64_t)(g->table_bytes + need) + W_ITEM + W_WRITER,
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
    ferry_pipeline_t *p = g->p;
    size_t need = round_up(b->bytes, GATHER_ALIGN);
    bool own = on_own_thread(p), may_wait = !own && !p->plan.nonblocking;
    uint64_t now = submit_stamp(p);
    gather_slab_t *to_send = NULL;
    uint32_t i = 0;
    size_t off = 0;
    uintptr_t reg_in = 0, reg_out = 0;
    bool direct = g->direct && b->bytes >= GATHER_DIRECT_MIN && b->out != NULL &&
                  (reg_in = pinned_in(p, b->in, b->bytes)) != 0 &&
                  (reg_out = pinned_in(p, b->out, b->bytes)) != 0;
    /* The fast path: the open slab, with room. A stale pointer is harmless: a slab that was
     * sealed refuses (its word says so) until it is opened again, and then it is the open one. */
    gather_slab_t *s = atomic_load_explicit(&g->open_fast, memory_order_acquire);
    if (s == NULL || !reserve(g, s, need, &i, &off)) {
        pthread_mutex_lock(&g->mu);
        for (;;) {
            if (g->closing) {
                pthread_mutex_unlock(&g->mu);
                if (to_send != NULL)
                    send(g, to_send, !own);
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
                send(g, to_send, !own);
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
            pthread_cond_wait(&g->free_cv, &g->mu);
            g->waiters--;
        }
        pthread_mutex_unlock(&g->mu);
        if (to_send != NULL)
            send(g, to_send, !own);
    }
    uint64_t my_id = s->id_base + i;
    if (!direct)
        memcpy(s->h_in + off, b->in, b->bytes);
    s->items[i] = (gather_item_t){.cb = cb,
                                  .arg = arg,
                                  .in = b->in,
                                  .out = b->out,
                                  .bytes = b->bytes,
                                  .id = my_id,
                                  .submit_ns = now,
                                  .offset = off,
                                  .user = b->user,
                                  .direct = direct,
                                  .reg_in = reg_in,
                                  .reg_out = reg_out};
    /* Done writing: the last writer of a sealed slab sends it (the release publishes the item
     * to whoever sends). */
    uint64_t w = atomic_fetch_sub_explicit(&s->word, W_WRITER, memory_order_acq_rel);
    bool last = (w & W_SEALED) && W_WRITERS(w) == 1;
    gather_slab_t *idle = NULL;
    if (!last && atomic_load_explicit(&g->busy, memory_order_relaxed) < g->eager) {
        pthread_mutex_lock(&g->mu); /* the device may idle: look again, under the lock */
        idle = seal_if_idle(g);
        pthread_mutex_unlock(&g->mu);
    }
    if (last)
        send(g, s, !own);
    if (idle != NULL)
        send(g, idle, !own);
    else if (!last && p->plan.virtual_clock)
        poke(p, false); /* the caller is back: a virtual clock need not wait for it */
    if (id != NULL)
        *id = my_id;
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
    if (r->status == 0)
        scatter(g, s);
    uint32_t n = s->nitems;
    memcpy(g->scratch, s->items, n * sizeof(*s->items));
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
    if (idle != NULL)
        send(g, idle, false);
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
}

/* ---- lifetime ----------------------------------------------------------------------------- */

bool ferry__gather_wanted(const ferry_pipeline_config_t *cfg, const ferry_options_t *o)
{
    return cfg->gather_bytes != SIZE_MAX &&
           (cfg->gather_bytes != 0 || ferry__opt_i64(o, FERRY__OPT_gather_bytes) != 0);
}

int ferry__gather_config(const ferry_pipeline_config_t *cfg, const ferry_options_t *o, size_t chunk,
                         size_t *bytes, unsigned *flush_us)
{
    size_t n = 0;
    if (ferry__gather_wanted(cfg, o))
        n = cfg->gather_bytes ? cfg->gather_bytes
                              : (size_t)ferry__opt_i64(o, FERRY__OPT_gather_bytes);
    if (n != 0 && (n < 8 * GATHER_ALIGN || n > chunk))
        return ferry__error(FERRY_EINVAL,
                            "gather_bytes %zu is out of range: a slab is one chunk, so %u to "
                            "chunk_bytes (%zu) bytes, or 0 (off)",
                            n, 8 * GATHER_ALIGN, chunk);
    unsigned slabs = (unsigned)ferry__opt_i64(o, FERRY__OPT_gather_slabs);
    if (n != 0 && slabs != 0 && slabs < 3)
        return ferry__error(FERRY_EINVAL,
                            "gather_slabs %u is out of range: 3 to 256 (one filling, two in "
                            "flight at least), or 0 (depth + 4)",
                            slabs);
    *bytes = n;
    *flush_us = cfg->gather_us ? cfg->gather_us : (unsigned)ferry__opt_i64(o, FERRY__OPT_gather_us);
    return 0;
}

int ferry__gather_create(ferry_pipeline_t *p, size_t bytes, unsigned flush_us,
                         ferry__gather_t **out)
{
    ferry__gather_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return ferry__error(FERRY_ENOMEM, "gather: out of memory");
    g->p = p;
    g->stage = p->stage;
    /* The table's room: one entry per GATHER_ALIGN of the rest, GATHER_MAX_ITEMS at most. */
    g->max_items = (uint32_t)(bytes / GATHER_ALIGN / 2);
    if (g->max_items > GATHER_MAX_ITEMS)
        g->max_items = GATHER_MAX_ITEMS;
    g->table_bytes = round_up(g->max_items * sizeof(ferry_item_t), GATHER_ALIGN);
    g->cap = bytes;
    /* A batch a quarter of the slab or less, and at most GATHER_ITEM_MAX: on an H100 host 1 MiB
     * batches ran at 40 GB/s each alone and 17 gathered into 8 MiB slabs (2026-12-06). */
    g->item_max = (bytes - g->table_bytes) / 4;
    if (g->item_max > GATHER_ITEM_MAX)
        g->item_max = GATHER_ITEM_MAX;
    g->flush_ns = (uint64_t)flush_us * 1000u;
    unsigned want = (unsigned)ferry__opt_i64(p->dev->rt->opts, FERRY__OPT_gather_slabs);
    g->nslabs = want ? want : p->plan.depth + 4;
    g->eager = p->plan.depth / 2 > 2 ? p->plan.depth / 2 : 2;
    if (g->eager > g->nslabs - 2) /* one slab at least fills while the others are busy */
        g->eager = g->nslabs - 2;
    g->direct = ferry__be_has_copy_pieces(p->dev);
    ferry__mutex_init_adaptive(&g->mu);
    pthread_cond_init(&g->free_cv, NULL);
    /* the flusher waits for a slab's due time on CLOCK_MONOTONIC (mono_ns): on the default
     * clock (CLOCK_REALTIME) that deadline lies in the past, and the flusher spun on the lock
     * while a slab was open */
    ferry__cond_init_monotonic(&g->flush_cv);
    pthread_cond_init(&g->sent_cv, NULL);
    int rc = FERRY_ENOMEM;
    size_t isz = GATHER_MAX_ITEMS * sizeof(gather_item_t);
    g->slabs = calloc(g->nslabs, sizeof(*g->slabs));
    g->scratch = aligned_alloc(FERRY__CACHE_LINE, isz);
    if (g->slabs == NULL || g->scratch == NULL)
        goto fail;
    for (unsigned i = 0; i < g->nslabs; i++) {
        gather_slab_t *s = &g->slabs[i];
        if ((s->items = aligned_alloc(FERRY__CACHE_LINE, isz)) == NULL ||
            (s->pin = malloc((GATHER_MAX_ITEMS + 1) * sizeof(*s->pin))) == NULL ||
            (s->pout = malloc(GATHER_MAX_ITEMS * sizeof(*s->pout))) == NULL ||
            (s->order = malloc(GATHER_MAX_ITEMS * sizeof(*s->order))) == NULL)
            goto fail;
        g->slabs[i].g = g;
    }
    if ((rc = ferry_host_alloc(p->dev, (size_t)g->nslabs * 2 * bytes, (void **)&g->mem)) != 0)
        goto fail;
    for (unsigned i = 0; i < g->nslabs; i++) {
        gather_slab_t *s = &g->slabs[i];
        s->h_in = g->mem + (size_t)i * 2 * bytes;
        s->h_out = s->h_in + bytes;
        s->table = (ferry_item_t *)(void *)s->h_in;
        s->next = g->free;
        g->free = s;
    }
    if (ferry__thread_start(&g->flusher, &g->flusher_started, flusher_main, g, "ferry-gather") !=
        0) {
        rc = ferry__error(FERRY_ENOMEM, "gather: could not start the flusher thread");
        goto fail;
    }
    if (p->stage.gpu != NULL)
        p->stage.gpu = gather_gpu;
    if (p->stage.cpu != NULL)
        p->stage.cpu = gather_cpu;
    p->stage.user = g;
    *out = g;
    return 0;
fail:
    ferry__gather_release(g);
    ferry__gather_free(g);
    return rc;
}

/* Seal the open slab (under lock; sets closing first when @closing) and send it when its copies
 * are in. Returns the seal number it waits for. */
static uint64_t seal_open(ferry__gather_t *g, bool closing, bool wait)
{
    pthread_mutex_lock(&g->mu);
    if (closing) {
        g->closing = true;
        pthread_cond_broadcast(&g->free_cv); /* a submitter waiting for room returns */
    }
    gather_slab_t *s = g->open;
    bool mine = s != NULL && seal(g, s);
    uint64_t seals = g->seals;
    pthread_mutex_unlock(&g->mu);
    if (mine)
        send(g, s, wait);
    return seals;
}

void ferry__gather_flush(ferry__gather_t *g)
{
    uint64_t mine = seal_open(g, false, true);
    pthread_mutex_lock(&g->mu);
    for (;;) {
        bool pending = false;
        for (unsigned i = 0; i < g->nslabs && !pending; i++) {
            const gather_slab_t *s = &g->slabs[i];
            pending = s->state == SLAB_SEALED && s->seal_no <= mine;
        }
        if (!pending)
            break;
        pthread_cond_wait(&g->sent_cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

bool ferry__gather_close(ferry__gather_t *g, bool wait)
{
    seal_open(g, true, wait);
    pthread_mutex_lock(&g->mu);
    while (wait && g->unsent > 0)
        pthread_cond_wait(&g->sent_cv, &g->mu);
    bool done = g->unsent == 0;
    if (!done)
        g->shut_pending = true;
    pthread_mutex_unlock(&g->mu);
    return done;
}

bool ferry__gather_closing(ferry__gather_t *g)
{
    pthread_mutex_lock(&g->mu);
    bool c = g->closing;
    pthread_mutex_unlock(&g->mu);
    return c;
}

static uint64_t minus(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

void ferry__gather_stats(ferry__gather_t *g, ferry_pipeline_stats_t *st)
{
    pthread_mutex_lock(&g->mu); /* the items sealed, and those the open slab holds so far */
    uint64_t in = g->items_sealed;
    if (g->open != NULL)
        in += W_ITEMS(atomic_load_explicit(&g->open->word, memory_order_relaxed));
    pthread_mutex_unlock(&g->mu);
    uint64_t slabs = atomic_load_explicit(&g->slabs_in, memory_order_relaxed);
    st->batches_submitted = minus(st->batches_submitted, slabs) + in;
    uint64_t *done[3] = {&st->batches_done_gpu, &st->batches_done_cpu, &st->batches_failed};
    for (int w = 0; w < 3; w++)
        *done[w] = minus(*done[w], atomic_load_explicit(&g->slabs_done[w], memory_order_relaxed)) +
                   atomic_load_explicit(&g->items_done[w], memory_order_relaxed);
    st->batches_gathered = in;
    st->slabs = slabs;
}

void ferry__gather_release(ferry__gather_t *g)
{
    if (g == NULL)
        return;
    if (g->flusher_started) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_signal(&g->flush_cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->flusher, NULL);
        g->flusher_started = false;
    }
    if (g->mem != NULL)
        ferry_host_free(g->p->dev, g->mem);
    g->mem = NULL;
}

void ferry__gather_free(ferry__gather_t *g)
{
    if (g == NULL)
        return;
    for (unsigned i = 0; g->slabs != NULL && i < g->nslabs; i++) {
        free(g->slabs[i].items);
        free(g->slabs[i].pin);
        free(g->slabs[i].pout);
        free(g->slabs[i].order);
    }
    free(g->slabs);
    free(g->scratch);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->free_cv);
    pthread_cond_destroy(&g->flush_cv);
    pthread_cond_destroy(&g->sent_cv);
    free(g);
}
