/* Gathering small batches across batches (option gather_bytes): batches of a quarter of a slab
 * or less (256 KiB at most), from any thread, go into the pinned slab being filled, copied in or,
 * pinned and 64 KiB or more, as pieces moved straight from and to their own memory; a slab that
 * is full, or whose device would idle, or whose first batch has waited gather_us, goes into the
 * pipeline as one batch of its own (one copy each way, one launch through the stage's gpu_items
 * or a launch per item); its callback puts each item's output in place and runs the batches'
 * callbacks, on the completion thread as any callback. The pipeline's stage is wrapped so that a
 * slab's chunk reaches the user's stage as its items. */
#ifndef FERRY_PIPELINE_GATHER_H
#define FERRY_PIPELINE_GATHER_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"

typedef struct ferry__gather ferry__gather_t;

/* Whether @cfg and the options ask for gathering. */
bool ferry__gather_wanted(const ferry_pipeline_config_t *cfg, const ferry_options_t *o);

/* The slab size (0: off) and flush bound @cfg and the options ask for, the size checked against
 * @chunk (a slab is one chunk): 0, or FERRY_EINVAL with the last-error text. */
int ferry__gather_config(const ferry_pipeline_config_t *cfg, const ferry_options_t *o, size_t chunk,
                         size_t *bytes, unsigned *flush_us);

/* Start gathering for @p (made, no batch submitted yet) in slabs of @bytes, flushed after
 * @flush_us: its slabs (pinned, allocated once), its flusher thread, and @p's stage wrapped.
 * Returns 0, FERRY_ENOMEM or what ferry_host_alloc returns. */
int ferry__gather_create(ferry_pipeline_t *p, size_t bytes, unsigned flush_us,
                         ferry__gather_t **out);

/* True when @b (imported) is gathered rather than submitted on its own. */
bool ferry__gather_takes(const ferry__gather_t *g, const ferry_batch_t *b);

/* ferry_pipeline_submit for a batch ferry__gather_takes: the same promises and returns. */
int ferry__gather_submit(ferry__gather_t *g, const ferry_batch_t *b, ferry_done_fn cb, void *arg,
                         uint64_t *id);

/* Send what is gathered now into the pipeline and wait until it is there (not from one of the
 * pipeline's threads): before a drain. */
void ferry__gather_flush(ferry__gather_t *g);

/* Refuse new batches from now on and send what is gathered. @wait: wait until every slab is in
 * the pipeline (not from one of its threads). Returns true when nothing is left to send: the
 * pipeline may be shut; false: the last slab sent shuts it (ferry__pipe_shut). */
bool ferry__gather_close(ferry__gather_t *g, bool wait);

/* True once ferry__gather_close was called. */
bool ferry__gather_closing(ferry__gather_t *g);

/* Adjust @st, the pipeline's figures, so that they count batches rather than slabs. */
void ferry__gather_stats(ferry__gather_t *g, ferry_pipeline_stats_t *st);

/* Stop the flusher and free the slabs (the pipeline released, nothing in flight). */
void ferry__gather_release(ferry__gather_t *g);

/* Free @g (after ferry__gather_release). NULL: no-op. */
void ferry__gather_free(ferry__gather_t *g);

#endif
