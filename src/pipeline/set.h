/* A pipeline over a set of devices (ferry_pipeline_config_t.devices): one pipeline per device,
 * each batch cut into parts that go where they are expected to finish first, by the rates the
 * parts measured (set.c). The public calls on a set's handle come here from pipeline.c. */
#ifndef FERRY_PIPELINE_SET_H
#define FERRY_PIPELINE_SET_H

#include "ferry.h"

struct ferry__pset;

/* Create a set pipeline from @cfg (ndevices > 0, device NULL). Same contract as
 * ferry_pipeline_create. */
int ferry__pset_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out);

int ferry__pset_submit(struct ferry__pset *s, const ferry_batch_t *batch, ferry_done_fn cb,
                       void *arg, uint64_t *id);
int ferry__pset_drain(struct ferry__pset *s);
int ferry__pset_close(struct ferry__pset *s);
int ferry__pset_destroy(struct ferry__pset *s);
/* @out's size is checked by the caller; fills sizeof(ferry_pipeline_stats_t) at most. */
void ferry__pset_stats(struct ferry__pset *s, ferry_pipeline_stats_t *out);
unsigned ferry__pset_devices(const struct ferry__pset *s);
/* ferry_pipeline_write_trace on a set: every device's records in one file. */
int ferry__pset_write_trace(struct ferry__pset *s, const char *path);
/* ferry_pipeline_ops on a set (set_ops.c). */
int ferry__pset_ops(struct ferry__pset *s, ferry_op_fn fn, void *arg);
int ferry__pset_device_stats(struct ferry__pset *s, unsigned i, ferry_pipeline_device_stats_t *out);

#endif
