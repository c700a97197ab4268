/* A gather's life (gather.h): its configuration checked, its slabs and flusher made, the open
 * slab sealed on a flush and a close, its counts, and its memory freed. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/gather_internal.h"

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
    g->table_bytes = ferry__gather_round_up(g->max_items * sizeof(ferry_item_t), GATHER_ALIGN);
    g->cap = bytes;
    /* A batch a quarter of the slab or less, and at most GATHER_ITEM_MAX: on an H100 host 1 MiB
     * batches ran at 40 GB/s each alone and 17 gathered into 8 MiB slabs (2026-12-06). */
    g->item_max = (bytes - g->table_bytes) / 4;
    if (g->item_max > GATHER_ITEM_MAX)
        g->item_max = GATHER_ITEM_MAX;
    g->flush_ns = (uint64_t)flush_us * 1000u;
    unsigned want = (unsigned)ferry__opt_i64(p->dev->rt->opts, FERRY__OPT_gather_slabs);
    g->nslabs = want ? want : p->plan.depth + 4;
    /* Nagle's threshold: a slab is sealed early while fewer than 2 are sealed or in flight, so a
     * busy pipeline fills its slabs and an idle one sends at once. On an H100 (2026-12-07,
     * bench/results/2026-12-07-copy-kernel, five rounds on a schedule, 8 threads, 8 MiB slabs)
     * 2 against depth / 2 (4) cost ferry 1.75 against 2.27 us an item at 64 KiB and 75% of the
     * ceiling, 4.59 against 5.15 at 256 KiB and 90%, with p99 the same (452 / 437 us, 529 / 538)
     * and p50 later (333 against 194 us at 64 KiB): slabs of 73 items instead of 20. */
    g->eager = 2;
    if (g->eager > g->nslabs - 2) /* one slab at least fills while the others are busy */
        g->eager = g->nslabs - 2;
    g->direct = ferry__be_has_copy_pieces(p->dev);
    g->kernel_max = g->direct ? p->dev->props.piece_kernel_max : 0;
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
        memset(s->items, 0, isz); /* each item's ready: 0, being written, until published */
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
    if (ferry__thread_start(&g->flusher, &g->flusher_started, ferry__gather_flusher_main, g,
                            "ferry-gather") != 0) {
        rc = ferry__error(FERRY_ENOMEM, "gather: could not start the flusher thread");
        goto fail;
    }
    if (p->stage.gpu != NULL)
        p->stage.gpu = ferry__gather_stage_gpu;
    if (p->stage.cpu != NULL)
        p->stage.cpu = ferry__gather_stage_cpu;
    p->stage.user = g;
    *out = g;
    return 0;
fail:
    ferry__gather_release(g);
    ferry__gather_free(g);
    return rc;
}

/* Seal the open slab (under lock; sets closing first when @closing) and send it when its items
 * are all written (ferry__gather_claim; otherwise its last writer does). Returns the seal number
 * it waits for. */
static uint64_t seal_open(ferry__gather_t *g, bool closing, bool wait)
{
    pthread_mutex_lock(&g->mu);
    if (closing) {
        g->closing = true;
        pthread_cond_broadcast(&g->free_cv); /* a submitter waiting for room returns */
    }
    gather_slab_t *s = g->open;
    if (s != NULL)
        ferry__gather_seal(g, s);
    uint64_t seals = g->seals;
    pthread_mutex_unlock(&g->mu);
    if (s != NULL && ferry__gather_claim(s))
        ferry__gather_send(g, s, wait);
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
    uint64_t waits = g->waits;
    pthread_mutex_unlock(&g->mu);
    uint64_t slabs = atomic_load_explicit(&g->slabs_in, memory_order_relaxed);
    st->batches_submitted = minus(st->batches_submitted, slabs) + in;
    uint64_t *done[3] = {&st->batches_done_gpu, &st->batches_done_cpu, &st->batches_failed};
    for (int w = 0; w < 3; w++)
        *done[w] = minus(*done[w], atomic_load_explicit(&g->slabs_done[w], memory_order_relaxed)) +
                   atomic_load_explicit(&g->items_done[w], memory_order_relaxed);
    st->batches_gathered = in;
    st->slabs = slabs;
    st->gather_waits = waits;
    st->gather_pieces = atomic_load_explicit(&g->pieces, memory_order_relaxed);
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
