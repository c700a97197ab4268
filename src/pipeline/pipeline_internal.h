/* What the metrics registry reads from a pipeline beyond ferry_pipeline_stats: the batch
 * latency histogram (submit to callback, device clock) and the stage's name. */
#ifndef FERRY_PIPELINE_INTERNAL_H
#define FERRY_PIPELINE_INTERNAL_H

#include <stdint.h>

#include "ferry.h"

#define FERRY__LAT_BUCKETS 16
/* Upper bounds in seconds; a last bucket (+Inf) follows. */
extern const double ferry__lat_bounds_s[FERRY__LAT_BUCKETS];

void ferry__latency_observe(ferry_pipeline_t *p, uint64_t ns);
/* Non-cumulative counts per bucket (FERRY__LAT_BUCKETS + 1 of them), the sum and the count. */
void ferry__latency_read(ferry_pipeline_t *p, uint64_t *buckets, uint64_t *sum_ns, uint64_t *count);
const char *ferry__pipeline_stage_name(const ferry_pipeline_t *p);

#endif
