/* The CPU as one device of a set (set.c): the stage's CPU function on whole chunks of the
 * parts the set gives it, on host threads of its own, from the part's input straight to its
 * output (no slots, no copies).
 *
 * Its clock: on a GPU machine, CLOCK_MONOTONIC, as the GPUs' completions are read. With
 * simulated devices, a virtual clock of its own, like each simulated device's: it serves its
 * parts one after another, each for the thread CPU time its chunks took here over @lanes (the
 * modelled host's threads, each as fast as one thread of the machine running the simulator),
 * or for its bytes moved through the host's memory at @mem_gbps at most (0: not modelled). */
#ifndef FERRY_PIPELINE_SET_CPU_H
#define FERRY_PIPELINE_SET_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

typedef struct ferry__cpudev ferry__cpudev_t;

/* Create the device: @stage copied (its cpu function required), chunks of @chunk bytes, @lanes
 * threads (the modelled host's on a virtual clock; real threads are at most the online CPUs),
 * on real clocks @nice nicer than the process (option cpu_nice; 0: as the process).
 * Returns 0, FERRY_EINVAL (no CPU function), FERRY_ENOMEM. */
int ferry__cpudev_create(const ferry_stage_t *stage, size_t chunk, unsigned lanes, bool virt,
                         double mem_gbps, int nice, ferry__cpudev_t **out);

/* Run @part (in, out or prepare as in a batch; prepare is called with offsets within the part)
 * of batch @batch_id, whose first byte is at @base_off in its batch, chunk by chunk (in pieces
 * spread over the threads when it is smaller than a chunk each); a @probe takes the device's
 * time but is left out of its figures (bytes, chunks, elapsed); @cb(@arg)
 * runs once, on one of the device's threads (on this one for an empty part), with where
 * FERRY_DONE_CPU or FERRY_DONE_FAILED and submit_ns and done_ns on the device's clock.
 * Returns 0 or FERRY_ENOMEM (@cb not called). */
int ferry__cpudev_submit(ferry__cpudev_t *c, const ferry_batch_t *part, uint64_t batch_id,
                         size_t base_off, bool probe, ferry_done_fn cb, void *arg);

/* Take back the tail of the newest part with chunks not started to spare, for another device
 * to run: its last chunks not started (a small part's pieces), up to @max_bytes (at least one,
 * when it has one to spare), never the part's last one not started (the part still ends
 * here). Returns the bytes taken (0: none), with the part's @arg (as given to submit) and the
 * offset in the part where they start, in *@off; the part calls back for what is left of it. */
size_t ferry__cpudev_steal(ferry__cpudev_t *c, size_t max_bytes, void **arg, size_t *off);

/* Wait until every part submitted has called back. */
void ferry__cpudev_drain(ferry__cpudev_t *c);

/* What it did: chunks (chunks_cpu, a GPU's fallback, stays 0), bytes in and out (the same),
 * elapsed_ns (its clock, first part to last), busy_compute_ns (chunk time over its lanes), the
 * rates over it; chunk_bytes and depth (its lanes). */
void ferry__cpudev_stats(ferry__cpudev_t *c, ferry_pipeline_stats_t *out);

/* Its threads (the lanes modelled). */
unsigned ferry__cpudev_lanes(const ferry__cpudev_t *c);

/* Drain, stop the threads and free. NULL is a no-op. */
void ferry__cpudev_destroy(ferry__cpudev_t *c);

#endif
