/* What set.c and set_stats.c share of a set pipeline: its batches, parts and devices. */
#ifndef FERRY_PIPELINE_SET_INTERNAL_H
#define FERRY_PIPELINE_SET_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "monitor/latency.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/set_cpu.h"
#include "pipeline/set_guard.h"
#include "sched/perfmodel.h"

typedef struct pset_batch pset_batch_t;

/* A GPU's part (its pipeline's batch) in the set's batch, or one of the CPU device's parts. */
typedef struct pset_map {
    uint64_t id; /* the set's batch; UINT64_MAX: not known (yet) */
    size_t off;  /* the part's offset in it */
    size_t bytes;
    uint32_t chunks;
    uint64_t start_ns, end_ns; /* the CPU's part: on its clock */
} pset_map_t;

typedef struct pset_part {
    pset_batch_t *b;
    unsigned dev;
    size_t off, bytes;
    double plan_ns; /* the device time it was expected to take (plan_parts) */
    /* under the set's lock: what of it went to other devices after this one left (handback),
     * bytes and chunks; stolen: its tail that an idle device took before this one started it
     * (the CPU device's, steal_for in set.c); heap: a part made by handback or a steal, freed
     * when it ends */
    size_t moved;
    uint32_t moved_chunks;
    size_t stolen;
    bool heap;
} pset_part_t;

struct pset_batch {
    struct ferry__pset *s;
    uint64_t id;
    ferry_batch_t batch; /* the caller's */
    ferry_done_fn cb;
    void *arg;
    unsigned nparts, left; /* left: under the set's lock */
    unsigned cpu_parts;    /* parts the CPU device ran (not a fallback) */
    int status;
    ferry_batch_where_t where;
    uint32_t chunks;
    uint64_t submit_ns, done_ns;
    uint64_t lat_ns;    /* the longest part's, submit to done on its device's clock */
    pset_batch_t *next; /* the done list */
    pset_part_t parts[];
};

typedef struct pset_dev {
    ferry_device_t *dev;
    ferry_pipeline_t *pl; /* a GPU's pipeline; NULL for the CPU */
    ferry__cpudev_t *cpu; /* the CPU as a device (FERRY_DEVICE_CPU); NULL for a GPU */
    char name[128];
    int index;
    /* under the set's lock */
    uint64_t held;     /* bytes of parts submitted and not completed */
    size_t last_bytes; /* its latest measured part's size (the rate read out); 0: none yet */
    double link_gbps;  /* the link's theoretical rate per direction (0: unknown), the prior */
    double vbusy;      /* a simulated device: the device time of every part given it, ns */
    uint64_t last_done_ns;
    uint64_t bytes, parts, parts_cpu;
    uint64_t bytes_moved;  /* of its parts, run by other devices after it left */
    uint64_t bytes_stolen; /* it took from another device's queue when it ran out of work */
    bool left;
    bool probing;  /* the CPU device: its probe is out (set.c, probe_start) */
    size_t probed; /* the CPU device: its largest probe measured */
    char why[128];
    /* while tracing: its pipeline's batch id i is part map[i] of the set's batch map[i].id
     * (set_ops.c); the CPU device: its parts, as ops */
    struct pset_map *map;
    size_t nmap, capmap;
} pset_dev_t;

struct ferry__pset {
    ferry_pipeline_t *h; /* the handle callers hold: h->set == this */
    ferry_runtime_t *rt;
    size_t chunk;
    size_t gran; /* the stage's granularity (1: bytes) */
    unsigned n;
    pset_dev_t *d;
    pthread_mutex_t lock;
    pthread_cond_t cv; /* room, completions, the thread's work */
    unsigned max_inflight, inflight, entering;
    bool virt; /* simulated devices: each on its own virtual clock */
    bool nonblocking, shut, released, stop;
    uint64_t next_id, submitted, completed;
    uint64_t done_gpu, done_cpu, failed, full_waits, full_eagain;
    pset_batch_t *done_head, *done_tail;
    pthread_t thread;
    bool thread_started;
    ferry_pipeline_stats_t final;
    bool final_ready;
    ferry_perfmodel_t *model; /* slot i: device i; stage 0: the set's stage */
    ferry__lat_hist_t lat;    /* batch latency (metrics, device="all"), owner h */
    char model_path[512];     /* option perf_model: loaded at create, saved at close */
    ferry__cpu_guard_t guard; /* the CPU device's trial (set_guard.h); under the lock */
    bool trace;               /* option trace: the devices' maps are kept (set_ops.c) */
    uint64_t trace_chunks;    /* option trace_chunks: the CPU's ops kept for so many chunks */
};

/* Device @dev's held bytes change by @delta at @at_ns (0: now): the CPU's guard learns when the
 * CPU starts or stops holding work (set_guard.h). Under the set's lock (set_plan.c). */
void ferry__pset_hold(struct ferry__pset *s, unsigned dev, int64_t delta, uint64_t at_ns);
/* Device @i's rate for parts of @bytes, bytes per ns, from the performance model; 0 before it
 * has measured one (set.c). */
double ferry__pset_dev_rate(const struct ferry__pset *s, unsigned i, size_t bytes);
/* Each device's rate for parts of @bytes into @r (bytes per ns; a prior for a device not yet
 * measured), and the parts of a batch of @bytes into @parts: how many; *@probe_bytes > 0 when
 * the CPU device (*@probe_dev) is to time a copy of the batch's tail first. Under the set's
 * lock; plan_parts adds the parts to the devices' held bytes (set_plan.c). */
void ferry__pset_plan_rates(const struct ferry__pset *s, size_t bytes, double *r);
unsigned ferry__pset_plan_parts(struct ferry__pset *s, size_t bytes, pset_part_t *parts,
                                unsigned *probe_dev, size_t *probe_bytes);
/* While tracing (under the set's lock): part @pt went to its GPU as batch @sub_id, or the
 * CPU device ran it from @start_ns to @end_ns (set_ops.c). */
void ferry__pset_map_part(struct ferry__pset *s, const pset_part_t *pt, uint64_t sub_id);
void ferry__pset_cpu_op(struct ferry__pset *s, const pset_part_t *pt, uint64_t start_ns,
                        uint64_t end_ns);
/* The set's figures now (set_stats.c). */
void ferry__pset_fill_stats(struct ferry__pset *s, ferry_pipeline_stats_t *out);

#endif
