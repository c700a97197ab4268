/* The CPU device's guard: a set keeps the CPU as a device only while the set runs measurably
 * faster with it than without it. The CPU's own rate says nothing of what its threads cost the
 * others: on a memory-bound stage they draw the host memory the GPUs' copies need (and the cores
 * the caller's own threads need), and a CPU that finishes its share on time can still make the
 * whole run slower (an H100 host, `ferry run --devices 0,cpu --workload scale`: 0.80-0.99x the
 * GPU alone). So once the CPU is calibrated, the set runs a trial on real clocks: four segments
 * of consecutive batches, planned with, without, without, with the CPU (ABBA: a rate that drifts
 * over the run weighs on both sides alike).
 *
 * What is measured is the set's rate while the CPU holds work against its rate while it holds
 * none, not per segment: the devices keep queues of their own, so a segment's batches do not
 * finish in a span of their own (planned beside a GPU's backlog, the CPU takes the first batches
 * of a segment with it whole and finishes them while the GPU still runs the segment before; an
 * H100 measured per segment read 299 GB/s "with" against 29 "without"). The set tells the guard
 * when the CPU starts and stops holding work and what each batch planned may give it, which
 * splits the trial's time into the two sides (the CPU's side is busy while it holds work or the
 * batches being planned may give it some: between two parts of a segment with it, its queue can
 * run dry for a moment, and a side turning at each such moment would share the GPUs' parts out
 * at their average rate, 2% in the CPU's favour with 4 batches in flight), and every part that
 * completes on any device, with the span its device spent on it; the part's bytes go to each side
 * in proportion to the share of that span that fell in it (counted at completion, a part begun on
 * one side and ended on the other would credit it whole to the latter: 5% off with segments of 8
 * batches). Each side's rate is its bytes over its time, from the trial's start to the latest
 * completion. The trial decides once every batch of its segments has completed: the CPU stays when
 * the set ran at least FERRY__GUARD_MARGIN faster with it; else it takes no more work (it is
 * "benched"). A CPU that clearly costs the set (FERRY__GUARD_EARLY slower with it once the first
 * two segments have completed) is benched then, rather than given the last segment too: drift
 * cannot make that gap, and a wrong early decision only forgoes a gain. Batches planned after the
 * trial and before its decision go without the CPU. A failed batch during the trial starts it over,
 * and so does a trial that measured too little of either side (FERRY__GUARD_MAX_TRIALS at most,
 * then it is benched). Simulated devices each run on their own virtual clock, which do not compare:
 * the guard does not run on them (their host model prices the CPU's memory traffic).
 *
 * Not thread-safe: the set calls it under its lock. */
#ifndef FERRY_PIPELINE_SET_GUARD_H
#define FERRY_PIPELINE_SET_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__GUARD_MARGIN     0.02 /* the gain the CPU must show, a fraction of the rate without */
#define FERRY__GUARD_EARLY      0.10 /* a CPU this much slower after two segments: benched then */
#define FERRY__GUARD_SEGS       4
#define FERRY__GUARD_MIN_LEN    4u
#define FERRY__GUARD_MAX_LEN    32u
#define FERRY__GUARD_MAX_TRIALS 3  /* then benched */
#define FERRY__GUARD_TURNS      64 /* the CPU's latest changes of side kept, to share parts out */

typedef enum {
    FERRY__GUARD_IDLE,  /* no trial yet (the CPU is not calibrated): the CPU may take work */
    FERRY__GUARD_TRIAL, /* batches id0 .. id0 + 4 len + lead - 1 alternate */
    FERRY__GUARD_KEEP,  /* decided: the CPU stays */
    FERRY__GUARD_BENCH, /* decided: the CPU takes no more work */
} ferry__guard_state_t;

typedef struct ferry__cpu_guard {
    ferry__guard_state_t state;
    uint64_t id0;
    unsigned len;                     /* batches a segment */
    unsigned lead;                    /* the first segment's batches beyond len */
    unsigned done[FERRY__GUARD_SEGS]; /* batches of the segment completed */
    unsigned trials;                  /* trials started */
    const char *why_over;             /* what ended the latest trial undecided */
    /* The measurement; side 0: without the CPU, 1: with it (set_guard.c, side_update). The
     * side from start_ns on: busy0, then flipped at each turn (turn_ns, the latest
     * FERRY__GUARD_TURNS of them, ntur in all). */
    uint64_t start_ns, last_ns; /* the trial's start; its latest completion */
    bool busy0, busy;           /* the CPU's side at the start; now */
    bool held, plan_with;       /* the CPU holds work; the latest batch planned may give it some */
    uint64_t turn_ns[FERRY__GUARD_TURNS];
    unsigned nturn;
    uint64_t side_ns; /* the latest turn (or the start) */
    uint64_t ns[2];   /* each side's time up to side_ns */
    double bytes[2];
    unsigned parts[2];              /* parts that lay wholly on that side */
    double gbps_with, gbps_without; /* the decision's figures */
    char note[160];                 /* the decision in words (ferry_pipeline_device_stats_t.note) */
} ferry__cpu_guard_t;

/* Start a trial at batch @id0, at @now_ns (the devices' clock), the CPU holding work or not
 * (@busy), with segments of @inflight x 2 batches (in FERRY__GUARD_MIN_LEN ..
 * FERRY__GUARD_MAX_LEN): a segment at least twice the batches in flight, so that the CPU both
 * drains and fills within the trial; the first segment runs @inflight batches more (at most
 * len), for the last starts on the CPU as many early (planned beside the batches in flight): the
 * CPU then holds work as long at the trial's start as at its end, and a rate that drifts weighs
 * on both sides alike. After FERRY__GUARD_MAX_TRIALS trials: benched instead. */
void ferry__guard_start(ferry__cpu_guard_t *g, uint64_t id0, unsigned inflight, uint64_t now_ns,
                        bool busy);

/* Whether batch @id may give the CPU a share. */
bool ferry__guard_cpu_ok(const ferry__cpu_guard_t *g, uint64_t id);

/* The CPU started (@held) or stopped holding work at @at_ns (every change, trial or not). */
void ferry__guard_cpu(ferry__cpu_guard_t *g, bool held, uint64_t at_ns);

/* Batch @id is being planned at @at_ns (during a trial). */
void ferry__guard_plan(ferry__cpu_guard_t *g, uint64_t id, uint64_t at_ns);

/* A part of @bytes completed on any device, which spent @from_ns .. @done_ns on it. */
void ferry__guard_part(ferry__cpu_guard_t *g, uint64_t bytes, uint64_t from_ns, uint64_t done_ns);

/* Batch @id completed, @ok: without failure. Returns true when this completion decided the
 * trial (g->state is then KEEP or BENCH). */
bool ferry__guard_done(ferry__cpu_guard_t *g, uint64_t id, bool ok);

#endif
