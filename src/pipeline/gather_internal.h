/* The gather's private parts (gather.h is what the pipeline sees): its limits, a slab and its
 * reservation word, the gather itself; gather.c moves batches through slabs, gather_life.c makes,
 * closes, counts and frees a gather. */
#ifndef FERRY_PIPELINE_GATHER_INTERNAL_H
#define FERRY_PIPELINE_GATHER_INTERNAL_H

#include "pipeline/gather.h"
#include "pipeline/pipeline_internal.h"

#define GATHER_ALIGN     256u
#define GATHER_MAX_ITEMS 1024u
#define GATHER_ITEM_MAX  (256u << 10)
/* Pinned batches this large or larger move as pieces of their own (no host copy): on an H100
 * host 64 KiB pieces in one cudaMemcpyBatchAsync ran at 97.7% of one copy each way, 16 KiB ones
 * at 42-69%, 4 KiB at 9% (bench/explore/small_copies.cu, 2026-12-06). */
#define GATHER_DIRECT_MIN (64u << 10)
/* Smaller pinned batches are direct too where the device moves small pieces by a copy kernel
 * (piece_kernel_max): from this size up to that one. The kernel moved 4 KiB pieces at 88-98%
 * of one copy's rate (the same measurement); smaller ones cost their submitter less to copy in
 * than the rest of the slab's bytes cost it (none of its own). */
#define GATHER_KERNEL_MIN (4u << 10)
/* A slab's output is copied back to its batches by the host workers too, in parts of at least
 * this many bytes (whole items). */
#define GATHER_SCATTER_PIECE (128u << 10)
/* Submitters a freed slab wakes (slab_done); a build may set another (-DGATHER_WAKE=1u) to
 * measure it. */
#ifndef GATHER_WAKE
#define GATHER_WAKE 2u
#endif

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
    /* ITEM_*: its writer publishes the record here, on a line it has just written itself, or
     * the sealer claims it first (ferry__gather_claim); 0 again once the slab is free. */
    _Atomic uint32_t ready;
    uintptr_t reg_in, reg_out; /* direct: the registrations holding in and out (add_piece) */
} gather_item_t;

#define ITEM_WRITING   0u
#define ITEM_PUBLISHED 1u
#define ITEM_CLAIMED   2u

/* A slab's reservation word: the bytes used (from its start: the table's room, then the items),
 * its items, and whether it is sealed. A submit reserves its place with one compare-exchange:
 * the open slab's fast path takes no lock. Who sends a sealed slab is not counted here (each
 * submitter would write this line, the one all of them write, twice): each item's record says
 * whether it is written (gather_item_t's ready), and the slab's left counts the writers its
 * sealer found still writing. Bits 52-62 are unused. */
#define W_USED_MASK ((UINT64_C(1) << 40) - 1)
#define W_ITEM      (UINT64_C(1) << 40)
#define W_ITEMS(w)  ((uint32_t)(((w) >> 40) & 0xfffu))
#define W_SEALED    (UINT64_C(1) << 63)
/* A sealed slab's left before its sealer has looked at its items: more than it can hold. */
#define LEFT_BIAS (UINT32_C(1) << 30)

/* An item's place in lay_out's order: its input's address, its index. */
typedef struct gather_order {
    uintptr_t in;
    uint32_t i;
} gather_order_t;

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
    /* Sealed: LEFT_BIAS, less the writers the sealer claimed and each of them once done; who
     * takes it to 0 sends the slab. Not hot: only the sealer and the writers it claimed write it
     * (a line of its own would need the slabs allocated aligned). */
    _Atomic uint32_t left;
    struct gather_slab *next;
    struct ferry__gather *g;
    ferry_be_piece_t *pin, *pout; /* with direct items: the pieces each way */
    gather_order_t *order;        /* lay_out's */
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
    uint64_t kernel_max; /* pieces this size or smaller move by a copy kernel (0: none) */
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
    uint64_t waits;        /* submits that slept for a free slab (under the lock) */
    _Atomic uint64_t slabs_in, items_done[3], slabs_done[3], pieces;
    gather_item_t *scratch; /* the completion thread's copy of a slab's items */
};

static inline size_t ferry__gather_round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* gather.c's, for gather_life.c: the stage's calls wrapped over a slab's items; seal @s (under
 * the lock); claim sealed @s's items, by the thread that sealed it, once it has let go of the
 * lock (true when it sends @s); send sealed @s into the pipeline (@wait: it may block for
 * room); the flusher thread's body. */
int ferry__gather_stage_gpu(const ferry_kernel_args_t *a, void *stream, void *user);
int ferry__gather_stage_cpu(const ferry_kernel_args_t *a, void *user);
void ferry__gather_seal(ferry__gather_t *g, gather_slab_t *s);
bool ferry__gather_claim(gather_slab_t *s);
int ferry__gather_send(ferry__gather_t *g, gather_slab_t *s, bool wait);
void *ferry__gather_flusher_main(void *arg);

#endif
