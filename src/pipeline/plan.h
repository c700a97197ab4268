/* A pipeline's plan: its config, the runtime's options and the device's properties turned into
 * the numbers the pipeline runs by (chunk, copy group, depth, streams, priorities, queue, the
 * fault and monitor knobs). Pure: no allocation, no device call, no thread; unit-tested alone
 * (tests/unit/test_plan.c). */
#ifndef FERRY_PIPELINE_PLAN_H
#define FERRY_PIPELINE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* Chunks in a copy group, at most (option coalesce_bytes). */
#define GROUP_MAX 16u

/* The plan: set by create, read-only afterwards (depth and slot_wake may shrink at create when
 * device memory runs short), read by every thread without the lock. */
struct ferry__pipe_plan {
    size_t chunk;
    unsigned group; /* chunks per copy at most (coalesce_bytes): a slot holds a group */
    unsigned depth, ncopy, ncomp, nstreams;
    bool single; /* one stream for everything */
    int copy_prio, comp_prio;
    bool nonblocking;
    bool caller_issues; /* submitters may issue light batches on their own thread */
    size_t queue_depth;
    size_t stage_threshold;
    uint64_t trace_chunks; /* tracing: chunks recorded (the first ones); 0: all */
    bool time_all;         /* every chunk timed (TIME_ENDS): op_timing "all" */
    bool time_none;        /* no chunk timed but traced ones: op_timing "off" */
    unsigned anchors;      /* how many chunks back a sampled chunk's starts lie, at most */
    bool virtual_clock;    /* simulator: the device clock is virtual */
    double deadline_factor;
    uint64_t deadline_floor_ns;
    double bw_alert_ratio;
    double bw_foreign_ratio;
    unsigned gpu_retries;    /* retries on the GPU after a non-sticky failure */
    unsigned nworkers;       /* host workers */
    bool trace;              /* option trace: record ops from the start */
    const char *failure_log; /* option failure_log (the options' string); NULL: none */
    uint64_t watchdog_ns, heartbeat_ns, link_sample_ns;
    /* Before any chunk has completed, the latency behind the deadlines is estimated from the
     * stage's cost hint and a pessimistic link (a quarter of its rate, 1 GB/s when unknown) for
     * a full ring of chunks: a slow first kernel is not taken for a hang. */
    uint64_t lat_init_ns;
};

/* What the plan reads besides the config: the options, the device's properties and the two
 * facts of its backend that matter here. */
typedef struct ferry__pipe_plan_env {
    const ferry_options_t *opts;
    const ferry_device_props_t *props;
    bool simulated;     /* the device's clock is virtual (the stage's CPU function is the kernel) */
    bool native_stream; /* the backend binds a device to the calling thread (CUDA) */
    long ncpu;          /* online processors, for the default number of workers */
} ferry__pipe_plan_env_t;

/* Fill *@out from @cfg (the caller's config and stage, or copies already imported: both are
 * imported here, base/config.h, their unset fields filled from @env's options) and @env.
 * Returns 0, or FERRY_EINVAL with the last-error text naming the value and its accepted range;
 * *@out is then unspecified. */
int ferry__pipe_plan_make(const ferry_pipeline_config_t *cfg, const ferry__pipe_plan_env_t *env,
                          struct ferry__pipe_plan *out);

#endif
