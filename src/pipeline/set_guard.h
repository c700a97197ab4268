/* The CPU device's guard: a set keeps the CPU as a device only while the set runs measurably
 * faster with it than without it. The CPU's own rate says nothing of what its threads cost the
 * others: on a memory-bound stage they draw the host memory the GPUs' copies need (and the cores
 * the caller's own threads need), and a CPU that finishes its share on time can still make the
 * whole run slower (an H100 host, `ferry run --devices 0,cpu --workload scale`: 0.80-0.99x the
 * GPU alone, the GPU at 17 GB/s beside the CPU's 15 where it made 40 alone). So once the CPU is
 * calibrated, the set runs a trial on real clocks, in four phases (ABBA: a rate that drifts over
 * the run weighs on both sides alike): batches planned with the CPU, then without it, then with
 * it, then without it until the CPU has finished what it holds.
 *
 * Two sides of time are compared, not batches: *with* the CPU (it holds work, or the batches
 * being planned may give it some) and *without* it. Each device keeps a queue of its own, so a
 * run of batches does not finish in a span of its own (planned beside a GPU's backlog, the CPU
 * takes a run's first batches whole and finishes them while the GPU still runs the batches
 * before; measured per run of batches, an H100 read 299 GB/s with the CPU against 29 without),
 * and the CPU may hold far more than the planner meant (an H100 host: 240 ms of work where its
 * model said 60). So the phases are timed: the first plans 2 x the batches in flight (4 to 32)
 * with the CPU; the second plans without it until the CPU has finished its work and the set
 * has then run without it twice as long as the first side with it lasted; the third plans with
 * it until that side has lasted as long again; the last plans without it until the CPU is done.
 * Every part that completes on any device gives its bytes to each side in proportion to the
 * share of its span on its device that fell in it (counted at completion, a part begun on one
 * side and ended on the other would credit it whole to the latter: 5% off with 8 batches a
 * side), and each side's rate is its bytes over its time, from the trial's start to the latest
 * completion. The CPU stays when the set ran at least FERRY__GUARD_MARGIN faster with it in both
 * sides with it (a rate that changes its regime halfway is not averaged into a gain: an H100 host
 * ran its GPU at 43 GB/s beside the CPU in the first side and at 19 in the second); else it
 * takes no more work (it is "benched"). A CPU that clearly costs the set (FERRY__GUARD_EARLY
 * slower with it once the second phase has run as long as the first side with it) is benched
 * then: drift cannot make that gap, and a wrong early decision only forgoes a gain. A failed
 * batch during the trial starts it over, and so does a trial that measured fewer than
 * FERRY__GUARD_MIN_PARTS parts on a side (FERRY__GUARD_MAX_TRIALS at most, then it is benched).
 * Simulated devices each run on their own virtual clock, which do not compare: the guard does
 * not run on them (their host model prices the CPU's memory traffic).
 *
 * Not thread-safe: the set calls it under its lock. */
#ifndef FERRY_PIPELINE_SET_GUARD_H
#define FERRY_PIPELINE_SET_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__GUARD_MARGIN     0.02 /* the gain the CPU must show, of the rate without it */
#define FERRY__GUARD_EARLY      0.10 /* a CPU this much slower halfway: benched then */
#define FERRY__GUARD_MIN_LEN    4u   /* the first phase's batches, at least */
#define FERRY__GUARD_MAX_LEN    16u  /* and at most */
#define FERRY__GUARD_MIN_PARTS  4u   /* parts wholly on a side, at least, for a decision */
#define FERRY__GUARD_MAX_TRIALS 3    /* then benched */
#define FERRY__GUARD_TURNS      64   /* the latest changes of side kept, to share parts out */

typedef enum {
    FERRY__GUARD_IDLE,  /* no trial yet (the CPU is not calibrated): the CPU may take work */
    FERRY__GUARD_TRIAL, /* phases 0 .. 3 */
    FERRY__GUARD_KEEP,  /* decided: the CPU stays */
    FERRY__GUARD_BENCH, /* decided: the CPU takes no more work */
} ferry__guard_state_t;

typedef struct ferry__cpu_guard {
    ferry__guard_state_t state;
    unsigned phase;       /* in a trial: 0 and 2 plan with the CPU, 1 and 3 without */
    uint64_t id0;         /* the trial's first batch */
    unsigned len;         /* the first phase's batches */
    unsigned planned[2];  /* batches planned without, with the CPU */
    unsigned trials;      /* trials started */
    const char *why_over; /* what ended the latest trial undecided */
    /* The measurement; side 0: without the CPU, 1: with it. The side from start_ns on: busy0,
     * then flipped at each turn (turn_ns: the latest FERRY__GUARD_TURNS of them, nturn in
     * all). */
    uint64_t start_ns, last_ns; /* the trial's start; its latest completion */
    bool busy0, busy;           /* the side at the start; now */
    bool held, plan_with;       /* the CPU holds work; the latest batch planned may give it some */
    uint64_t turn_ns[FERRY__GUARD_TURNS];
    unsigned nturn;
    uint64_t side_ns;      /* the latest turn (or the start) */
    uint64_t ns[2];        /* each side's time up to side_ns */
    uint64_t first_ns;     /* the first side with the CPU's time (0: not over yet) */
    uint64_t first_end_ns; /* when it ended */
    /* periods: 0 without the CPU, 1 with it in its first side, 2 with it after */
    double bytes[3];
    unsigned parts[3];              /* parts that lay wholly in that period */
    double gbps_with, gbps_without; /* the decision's figures (with: the lower side's) */
    char note[160];                 /* the decision in words (ferry_pipeline_device_stats_t.note) */
} ferry__cpu_guard_t;

/* Start a trial at batch @id0, at @now_ns (the devices' clock), the CPU holding work or not
 * (@busy), its first phase @inflight x 2 batches (in FERRY__GUARD_MIN_LEN ..
 * FERRY__GUARD_MAX_LEN). After FERRY__GUARD_MAX_TRIALS trials: benched instead. */
void ferry__guard_start(ferry__cpu_guard_t *g, uint64_t id0, unsigned inflight, uint64_t now_ns,
                        bool busy);

/* Whether the batch being planned may give the CPU a share. */
bool ferry__guard_cpu_ok(const ferry__cpu_guard_t *g);

/* The CPU started (@held) or stopped holding work at @at_ns (every change, trial or not). */
void ferry__guard_cpu(ferry__cpu_guard_t *g, bool held, uint64_t at_ns);

/* Batch @id is being planned at @at_ns (during a trial: the phases advance here). */
void ferry__guard_plan(ferry__cpu_guard_t *g, uint64_t id, uint64_t at_ns);

/* A part of @bytes completed on any device, which spent @from_ns .. @done_ns on it. */
void ferry__guard_part(ferry__cpu_guard_t *g, uint64_t bytes, uint64_t from_ns, uint64_t done_ns);

/* A batch completed, @ok: without failure. Returns true when this completion decided the trial
 * (g->state is then KEEP or BENCH). */
bool ferry__guard_done(ferry__cpu_guard_t *g, bool ok);

/* Start decided, by an earlier run's trial kept in the perf model file @from (its name, for the
 * note): no trial runs (trials stays 0). */
void ferry__guard_saved(ferry__cpu_guard_t *g, bool keep, double with_gbps, double without_gbps,
                        const char *from);

#endif
