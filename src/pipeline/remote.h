/* A pipeline whose device is driven by a worker process (option isolation=process; worker.h
 * has the messages, docs/architecture.md "Worker processes" the design). The handle callers
 * hold is a ferry_pipeline_t with remote set: every public call on it comes here. */
#ifndef FERRY_PIPELINE_REMOTE_H
#define FERRY_PIPELINE_REMOTE_H

#include <stdint.h>
#include <sys/types.h>

#include "ferry.h"

struct ferry__remote;

/* Make the pipeline (@cfg imported, @cfg->stage imported, @cfg->device set): start its worker
 * and wait until its pipeline is made. Returns what ferry_pipeline_create returns; a worker
 * that cannot start says why (the worker's own error text). */
int ferry__remote_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out);
int ferry__remote_submit(struct ferry__remote *r, const ferry_batch_t *batch, ferry_done_fn cb,
                         void *arg, uint64_t *id);
int ferry__remote_drain(struct ferry__remote *r);
int ferry__remote_close(struct ferry__remote *r);
int ferry__remote_destroy(struct ferry__remote *r);
void ferry__remote_stats(struct ferry__remote *r, ferry_pipeline_stats_t *out);

/* The worker's pid now (-1 while none runs), for tests that kill it. */
pid_t ferry__remote_worker_pid(const ferry_pipeline_t *p);
/* The warm spare's pid while one is ready (-1 otherwise), for tests. */
pid_t ferry__remote_spare_pid(const ferry_pipeline_t *p);
/* Batches copied through a staging region so far: their memory was not ferry_host_alloc's
 * (shared with the worker). For tests of the zero-copy path. */
uint64_t ferry__remote_staged(const ferry_pipeline_t *p);

#endif
