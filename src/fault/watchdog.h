/* The watchdog of a pipeline: deadlines, the abort word, the heartbeat and the liveness of the
 * threads that run them.
 *
 * The completion thread publishes, after each pass, the oldest chunk in flight on each D2H
 * stream (its head) and when its deadline clock started. A step of the watchdog compares each
 * head against its deadline (running mean latency x factor + floor): past it, the abort word
 * (in device memory where the backend has one, else in the mapped page; passed to kernels in
 * ferry_kernel_args_t, in FERRY_ABORT_REPLICAS copies) is raised to the
 * head's sequence number, so that kernels polling ferry_should_abort() stop; a head still not
 * done a floor after its abort is a hang, and the pipeline ends its GPU path. The step also
 * queues the heartbeat, a one-thread kernel on a lowest-priority stream that stores a counter
 * into the mapped page, and reports a stall when a beat is not seen within the floor.
 *
 * Steps run on the device clock: on a GPU in the watchdog's own thread, every period; on the
 * simulator, whose clock is virtual and moves only when the completion thread waits, inline
 * after each completion pass. The two threads watch each other: the watchdog reports a
 * completion thread that stopped polling while chunks are in flight, and the completion thread
 * reports a watchdog that stopped stepping. */
#ifndef FERRY_FAULT_WATCHDOG_H
#define FERRY_FAULT_WATCHDOG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/runtime.h"

typedef struct ferry__wd_head {
    uint64_t seq;      /* the chunk's sequence number; 0: none in flight on this stream */
    uint64_t since_ns; /* its deadline clock started: issue, or when it became the head */
    uint64_t batch;
    uint32_t chunk;
} ferry__wd_head_t;

typedef struct ferry__wd_config {
    bool own_thread;       /* step in a thread of its own (GPU), else inline (simulator) */
    uint64_t period_ns;    /* the thread's step period */
    uint64_t heartbeat_ns; /* 0: no heartbeat */
    double factor;
    uint64_t floor_ns;
    int heartbeat_priority; /* the device's least priority */
    const char *name;       /* for the thread's name and the logs */
    /* Called from the step (either thread) without the watchdog's lock. */
    void (*on_deadline)(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t deadline_ns,
                        int stopped);
    void (*on_hang)(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t since_abort_ns,
                    bool heartbeat_stalled);
    void *ctx;
} ferry__wd_config_t;

typedef struct ferry__watchdog ferry__watchdog_t;

/* Never fails for want of the mapped page (pinning refused, a backend without it): the
 * watchdog then has no abort word and no heartbeat, and says so at info level. */
int ferry__watchdog_create(ferry_device_t *dev, const ferry__wd_config_t *cfg,
                           ferry__watchdog_t **out);
/* Stops the thread and waits for the last heartbeat, unless the GPU is @hung: then a beat
 * still queued keeps the mapped page alive (leaked), as it may be written later. */
void ferry__watchdog_destroy(ferry__watchdog_t *w, bool hung);

/* The abort word as kernels see it (a device address), or NULL. */
const volatile uint64_t *ferry__watchdog_abort_word(const ferry__watchdog_t *w);
/* The highest sequence number given up on (0: none). Chunks at or below it that complete
 * afterwards are discarded: their kernel may have stopped early. */
uint64_t ferry__watchdog_raised(const ferry__watchdog_t *w);

/* Completion thread, after each pass: the heads (one per D2H stream, seq 0 for none) and the
 * running mean latency. Also its sign of life. */
void ferry__watchdog_publish(ferry__watchdog_t *w, const ferry__wd_head_t *heads, unsigned n,
                             uint64_t lat_ewma_ns, uint64_t now);
/* Completion thread: its sign of life when the heads are unchanged (no lock). */
void ferry__watchdog_alive(ferry__watchdog_t *w, uint64_t now);
/* Inline mode: one step now (the completion thread, after publishing). */
void ferry__watchdog_step(ferry__watchdog_t *w, uint64_t now);
/* Completion thread, own-thread mode: report a watchdog that stopped stepping. */
void ferry__watchdog_check_alive(ferry__watchdog_t *w, uint64_t now);
/* Completion thread: give up on chunk @seq outside the heads' deadlines (a GPU retry past its
 * own): the abort word is raised to @seq, at least, so that kernels that poll it stop. Returns
 * how many kernels stopped (as ferry__be_abort_kernels), or FERRY_ENOTSUP without a word. */
int ferry__watchdog_abort(ferry__watchdog_t *w, uint64_t seq);
/* An aborted chunk @seq retired at @now: how late past its deadline, for the stats. */
void ferry__watchdog_retired_aborted(ferry__watchdog_t *w, uint64_t seq, uint64_t now);

/* The watchdog's figures into @out (deadline_overrun_ns, heartbeats_*, *_stalls). */
void ferry__watchdog_stats(const ferry__watchdog_t *w, ferry_pipeline_stats_t *out);

#endif
