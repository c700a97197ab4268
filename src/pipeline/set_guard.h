/* The CPU device's guard: a set keeps the CPU as a device only while the set runs measurably
 * faster with it than without it. The CPU's own rate says nothing of what its threads cost the
 * others: on a memory-bound stage they draw the host memory the GPUs' copies need (and the cores
 * the caller's own threads need), and a CPU that finishes its share on time can still make the
 * whole run slower (an H100 host, `ferry run --devices 0,cpu --workload scale`: 0.80-0.99x the
 * GPU alone). So once the CPU is calibrated, the set runs a trial on real clocks: four segments
 * of consecutive batches, with, without, without, with the CPU (ABBA: a rate that drifts over
 * the run weighs on both sides alike), each segment's rate its bytes over the time from the
 * previous segment's last completion to its own. The CPU stays when the segments with it ran
 * at least FERRY__GUARD_MARGIN faster; else it takes no more work (it is "benched"). Batches
 * planned after the trial and before its decision go without the CPU. A failed batch during the
 * trial starts it over (FERRY__GUARD_MAX_TRIALS at most, then it is benched). Simulated devices
 * each run on their own virtual clock, which do not compare: the guard does not run on them (their
 * host model prices the CPU's memory traffic).
 *
 * Not thread-safe: the set calls it under its lock. */
#ifndef FERRY_PIPELINE_SET_GUARD_H
#define FERRY_PIPELINE_SET_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__GUARD_MARGIN     0.02 /* the gain the CPU must show, a fraction of the rate without */
#define FERRY__GUARD_SEGS       4
#define FERRY__GUARD_MIN_LEN    4u
#define FERRY__GUARD_MAX_LEN    32u
#define FERRY__GUARD_MAX_TRIALS 3 /* then benched */

typedef enum {
    FERRY__GUARD_IDLE,  /* no trial yet (the CPU is not calibrated): the CPU may take work */
    FERRY__GUARD_TRIAL, /* batches id0 .. id0 + 4 len - 1 alternate */
    FERRY__GUARD_KEEP,  /* decided: the CPU stays */
    FERRY__GUARD_BENCH, /* decided: the CPU takes no more work */
} ferry__guard_state_t;

typedef struct ferry__cpu_guard {
    ferry__guard_state_t state;
    uint64_t id0;
    unsigned len;       /* batches a segment */
    uint64_t before_ns; /* the latest completion of a batch before the trial */
    uint64_t end_ns[FERRY__GUARD_SEGS], bytes[FERRY__GUARD_SEGS];
    unsigned done[FERRY__GUARD_SEGS]; /* batches of the segment completed */
    unsigned trials;                  /* trials started (a failed batch starts one over) */
    double gbps_with, gbps_without;   /* the decision's figures */
    char note[160]; /* the decision in words (ferry_pipeline_device_stats_t.note) */
} ferry__cpu_guard_t;

/* Start a trial at batch @id0 with segments of @inflight x 2 batches (in FERRY__GUARD_MIN_LEN ..
 * FERRY__GUARD_MAX_LEN): a segment at least twice the batches in flight, so that most of its
 * time is its own. After FERRY__GUARD_MAX_TRIALS trials: benched instead. */
void ferry__guard_start(ferry__cpu_guard_t *g, uint64_t id0, unsigned inflight);

/* Whether batch @id may give the CPU a share. */
bool ferry__guard_cpu_ok(const ferry__cpu_guard_t *g, uint64_t id);

/* Batch @id of @bytes completed at @done_ns (the devices' clock), @ok: without failure.
 * Returns true when this completion decided the trial (g->state is then KEEP or BENCH). */
bool ferry__guard_done(ferry__cpu_guard_t *g, uint64_t id, uint64_t bytes, uint64_t done_ns,
                       bool ok);

#endif
