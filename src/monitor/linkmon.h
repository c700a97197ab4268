/* The link monitor of a pipeline: all traffic on the device's link each way (the backend's
 * link_rate: NVML's PCIe counters on a GPU) against the bytes the pipeline itself moved over the
 * same window. What is left is somebody else's: another process, or another pipeline, on the
 * same link. The bandwidth monitor names that as an alert's cause.
 *
 * On a GPU a thread of its own samples every period, as an NVML sample blocks for 20 ms each
 * way; on the simulator, whose clock is virtual, the completion thread samples inline, every
 * period of virtual time and whenever an alert needs a fresh sample. */
#ifndef FERRY_LINKMON_H
#define FERRY_LINKMON_H

#include <stdbool.h>
#include <stdint.h>

#include "core/runtime.h"
#include "base/rate_ring.h"

/* What the link's counter counts beyond the payload: NVML counts the PCIe protocol's bytes too
 * (packet headers, and the read requests of host-to-device copies on the other direction).
 * Measured on the H200 with ferry alone on the link (bench/results/2026-12-03-h200-1444588):
 * 12% above ferry's bytes H2D, 22% D2H. Traffic is another process's only beyond the
 * pipeline's own bytes plus this share of them. */
#define FERRY_LINK_COUNTER_OVERHEAD 0.25

typedef struct ferry__link_sample {
    double total[2]; /* all traffic on the link, bytes per second: H2D, D2H */
    double own[2];   /* the pipeline's own bytes over the same windows (by retirement time),
                        at most total */
    uint64_t at_ns;  /* device clock when the sample ended */
    uint64_t count;  /* samples taken so far (0: none yet, the rest unset) */
} ferry__link_sample_t;

typedef struct ferry__linkmon_config {
    bool own_thread;    /* sample in a thread of its own (GPU), else inline (simulator) */
    uint64_t period_ns; /* between samples */
    /* The pipeline's bytes by the time its chunks retired (a round trip moves the same bytes
     * each way, so one ring serves both directions); written by the completion thread. */
    const ferry__rate_ring_t *own;
    const char *name; /* for the logs */
} ferry__linkmon_config_t;

typedef struct ferry__linkmon ferry__linkmon_t;

/* Never fails for want of a counter: without one (no NVML) *out is NULL and the reason is
 * logged at info level; FERRY_ENOMEM when the monitor cannot be made. */
int ferry__linkmon_create(ferry_device_t *dev, const ferry__linkmon_config_t *cfg,
                          ferry__linkmon_t **out);
void ferry__linkmon_destroy(ferry__linkmon_t *m);
/* Inline mode: a sample now if a period has passed since the last, or if @force. */
void ferry__linkmon_step(ferry__linkmon_t *m, uint64_t now, bool force);
/* The latest sample (count 0 when none yet). Any thread. */
void ferry__linkmon_last(ferry__linkmon_t *m, ferry__link_sample_t *out);

#endif
