/* The regions of ferry_host_alloc memory a pipeline in a worker process keeps (remote_internal.h,
 * rm_region_t): an entry for each block of the runtime's arena, made when the block is made
 * (ferry__rt_share) or when a batch first uses it, sent to the worker and its spare ahead of
 * the batches that use it, so that they pin it before the stream needs it, not in its path. */
#include <unistd.h>

#include "core/host_mem.h"
#include "pipeline/remote_internal.h"

/* Likewise region @i of ferry_host_alloc memory (-1: none). Under wmu. */
int ferry__rm_send_shared(struct ferry__remote *r, int i)
{
    if (i < 0 || r->regions[i].sent == r->generation + 1)
        return 0;
    rm_region_t *g = &r->regions[i];
    ferry__wk_msg_t m = {.kind = FERRY__WK_MAP, .seq = g->serial, .in = g->base, .bytes = g->bytes};
    if (ferry__rm_send(r->ch, &m, g->fd) != 0)
        return -1;
    g->sent = r->generation + 1;
    return 0;
}

/* The entry of ferry_host_alloc region @g, one batch more in it: found, or made in a free
 * entry or one no batch is in (its descriptor dropped). Under mu; -1 when all are in use or
 * the region has just been freed (the batch is staged instead). */
int ferry__rm_region_get(struct ferry__remote *r, const ferry__host_shared_t *g)
{
    int spare = -1;
    for (int i = 0; i < RM_REGIONS; i++) {
        rm_region_t *e = &r->regions[i];
        if (e->serial == g->serial) {
            e->refs++;
            return i;
        }
        if (e->refs == 0 && (spare < 0 || r->regions[spare].serial != 0))
            spare = i;
    }
    int fd = spare >= 0 ? ferry__host_shared_fd(g->serial) : -1;
    if (fd < 0)
        return -1;
    rm_region_t *e = &r->regions[spare];
    if (e->serial != 0)
        close(e->fd);
    *e =
        (rm_region_t){.serial = g->serial, .base = g->base, .bytes = g->bytes, .fd = fd, .refs = 1};
    return spare;
}

/* @b is done with its regions. Under mu. */
void ferry__rm_regions_put(struct ferry__remote *r, const rm_batch_t *b)
{
    if (b->rin >= 0)
        r->regions[b->rin].refs--;
    if (b->rout >= 0)
        r->regions[b->rout].refs--;
}

/* A shared block made (@bytes > 0: an entry for it, sent to the worker and the spare now, as
 * far as their channels take it; flush sends the rest) or freed (its entry dropped when no batch
 * is in it). Under the runtime's lock. */
void ferry__rm_share(struct ferry__remote *r, void *base, size_t bytes, uint64_t serial)
{
    pthread_mutex_lock(&r->wmu);
    pthread_mutex_lock(&r->mu);
    if (bytes == 0) {
        for (int i = 0; i < RM_REGIONS; i++)
            if (r->regions[i].serial == serial && r->regions[i].refs == 0) {
                close(r->regions[i].fd);
                r->regions[i] = (rm_region_t){0};
            }
    } else {
        ferry__host_shared_t g = {base, bytes, serial};
        int i = ferry__rm_region_get(r, &g);
        if (i >= 0) {
            r->regions[i].refs--; /* an entry, no batch in it yet */
            if (r->ch != NULL && !r->retired)
                (void)ferry__rm_send_shared(r, i);
            rm_region_t *e = &r->regions[i];
            ferry__wk_msg_t m = {.kind = FERRY__WK_MAP, .seq = serial, .in = base, .bytes = bytes};
            if (r->spare_ready && e->spare_sent != r->spare.gen + 1 &&
                ferry__rm_send(r->spare.ch, &m, e->fd) == 0)
                e->spare_sent = r->spare.gen + 1;
        }
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->wmu);
}

void ferry__rm_share_existing(void *arg, const ferry__host_shared_t *g)
{
    ferry__rm_share(arg, g->base, g->bytes, g->serial);
}
