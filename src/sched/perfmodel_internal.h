/* The performance model's insides, shared by perfmodel.c (the model) and perfmodel_json.c (its
 * saving and loading); nothing else includes this. */
#ifndef FERRY_SCHED_PERFMODEL_INTERNAL_H
#define FERRY_SCHED_PERFMODEL_INTERNAL_H

#include <pthread.h>

#include "sched/perfmodel.h"

/* One key: the last FERRY_PERF_WINDOW samples (a ring) and the estimate they give. */
struct ferry__perf_bucket {
    uint64_t ns[FERRY_PERF_WINDOW], bytes[FERRY_PERF_WINDOW];
    unsigned n, head;   /* samples in the window; where the next one goes */
    uint64_t count;     /* samples ever (a loaded key: the saved count plus new ones) */
    double est_ns;      /* the estimate for a chunk of est_bytes */
    uint64_t est_bytes; /* the window's mean size */
};

/* A (device, stage): its buckets, allocated on their first sample. */
struct ferry__perf_series {
    uint64_t count; /* samples of all buckets: the calibration count */
    struct ferry__perf_bucket *b[FERRY_PERF_BUCKETS];
};

struct ferry_perfmodel {
    pthread_mutex_t mu; /* guards everything below */
    char dev_name[FERRY_PERF_DEVICES][FERRY_PERF_NAME];
    char stage_name[FERRY_PERF_STAGES][FERRY_PERF_NAME];
    bool excluded[FERRY_PERF_DEVICES];
    /* Chunks given to explore an uncalibrated (device, stage) and not yet sampled. */
    uint16_t exploring[FERRY_PERF_DEVICES][FERRY_PERF_STAGES];
    struct ferry__perf_series *s[FERRY_PERF_DEVICES][FERRY_PERF_STAGES];
    ferry_perf_verdict_t verdict[FERRY_PERF_DEVICES][FERRY_PERF_STAGES];
};

struct ferry__perf_snapshot {
    char dev_name[FERRY_PERF_DEVICES][FERRY_PERF_NAME];
    char stage_name[FERRY_PERF_STAGES][FERRY_PERF_NAME];
    ferry_perf_verdict_t verdict[FERRY_PERF_DEVICES][FERRY_PERF_STAGES];
    size_t n;
    ferry_perf_entry_t e[]; /* n */
};

/* The bucket of (@dev, @stage, @k), allocated (empty) when missing; NULL when out of memory.
 * Under m->mu. */
struct ferry__perf_bucket *ferry__perf_bucket_get(ferry_perfmodel_t *m, int dev, int stage,
                                                  unsigned k);
/* The bucket of a chunk of @bytes: floor(log2(bytes)). */
unsigned ferry__perf_bucket_of(uint64_t bytes);
/* ns as an integer count, at least 1, saturated. */
uint64_t ferry__perf_to_ns(double ns);
/* Every key with samples, the names and the verdicts, copied under the lock into *out (free()).
 * Returns 0 or FERRY_ENOMEM. */
int ferry__perf_snapshot(ferry_perfmodel_t *m, struct ferry__perf_snapshot **out);

#endif
