/* The simulator's objects and its discrete-event core, shared by sim_model.c (the device model:
 * hardware queues, copy engines, SMs) and sim_backend.c (the ops table: validation, the host's
 * virtual clock, memory). All state of one device is guarded by its mutex; every function here
 * expects it held. */
#ifndef FERRY_BACKEND_SIM_MODEL_H
#define FERRY_BACKEND_SIM_MODEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "backend/sim/fault_spec.h"
#include "base/rate_ring.h"

#define SIM_NEVER    UINT64_MAX
#define SIM_HUNG_MAX 64

enum sim_op_kind { SIM_OP_COPY, SIM_OP_KERNEL, SIM_OP_RECORD, SIM_OP_WAIT };

/* One unit of work submitted to a stream. Reference counted: the model holds one reference
 * until the op completes, an event holds its latest record, a wait holds the record it waits
 * for. */
struct sim_op {
    enum sim_op_kind kind;
    int refs;
    struct ferry_be_stream *stream;
    uint64_t seq;                       /* 1-based position in its stream */
    struct sim_op *next;                /* hardware queue or copy-engine FIFO link */
    struct sim_op *all_prev, *all_next; /* every live op of the device, freed at close */
    bool done;
    int err; /* record: the error its event reports */
    uint64_t start_ns, end_ns;
    union {
        struct {
            int dir;
            bool pinned;
            void *dst;
            const void *src;
            size_t bytes;
            /* copy_pieces: the pieces (owned), dst or src being the device buffer; bytes their
             * sum. NULL: one copy of bytes from src to dst. */
            ferry_be_piece_t *pieces;
            size_t npieces;
            /* Of them, those the copy engines move (each costs FERRY_SIM_PIECE_DEV_NS), and
             * whether a copy kernel moves the others (FERRY_SIM_PIECE_KERNEL_DEV_NS once). */
            size_t nengine;
            bool kernel;
        } copy;
        struct {
            ferry_be_launch_t l;
            int priority;
            uint32_t blocks, started, finished;
            uint64_t order; /* dispatch order, FIFO among equal priorities */
            bool heartbeat; /* the watchdog's: no faults, not in the stats */
        } kern;
        struct {
            struct sim_op *target; /* NULL: the event was never recorded, already satisfied */
        } wait;
    } u;
};

struct ferry_be_stream {
    struct ferry_be_device *dev;
    int index; /* creation order: stream k lands on hardware queue k % C */
    int queue;
    int priority;                  /* clamped into the profile's range */
    uint64_t submitted, completed; /* ops; stream order makes them complete in order */
    uint64_t last_end_ns;
    /* Non-sticky kernel errors, reported by every event recorded after them: own_err is the
     * stream's latest kernel error, which a later good kernel clears once an event recorded
     * after the error has reported it (so kernels run back to back before one event, a copy
     * group's, report any of theirs that failed); in_err the error that reached the stream
     * through its latest run of event waits. */
    int own_err, in_err;
    bool own_err_reported;
    enum sim_op_kind last_kind; /* of the latest op dispatched, to tell runs of waits */
    bool any_dispatched;
    bool destroyed; /* freed once its last op completes */
    struct ferry_be_stream *prev, *next;
};

struct ferry_be_event {
    struct ferry_be_device *dev;
    struct sim_op *last; /* most recent record; NULL: never recorded (complete at time 0) */
    bool timing;         /* created with FERRY_BE_EVENT_TIMING: event_time_ns answers */
    struct ferry_be_event *prev, *next;
};

/* A device's live ops, streams and events are lists linked through the element's @pf and @nf
 * fields (prev, next): push @x at @head, unlink @x from the list at @head. Under the lock. */
#define SIM_LIST_PUSH(head, x, pf, nf)                                                             \
    do {                                                                                           \
        (x)->nf = (head);                                                                          \
        if ((head) != NULL)                                                                        \
            (head)->pf = (x);                                                                      \
        (head) = (x);                                                                              \
    } while (0)
#define SIM_LIST_UNLINK(head, x, pf, nf)                                                           \
    do {                                                                                           \
        if ((x)->pf != NULL)                                                                       \
            (x)->pf->nf = (x)->nf;                                                                 \
        else                                                                                       \
            (head) = (x)->nf;                                                                      \
        if ((x)->nf != NULL)                                                                       \
            (x)->nf->pf = (x)->pf;                                                                 \
    } while (0)

/* A hardware queue (connection): FIFO, dispatches its head only. */
struct sim_queue {
    struct sim_op *head, *tail;
};

enum sim_engine_phase { SIM_ENG_IDLE, SIM_ENG_LATENCY, SIM_ENG_XFER };

/* A copy engine. During XFER the remaining bytes drain at a rate that changes when other
 * transfers start or stop (the fluid model); remaining is exact at last_ns. */
struct sim_engine {
    struct sim_op *op;
    enum sim_engine_phase phase;
    uint64_t lat_end_ns;
    double remaining, rate, cap; /* bytes, bytes per ns */
    double slow;                 /* a slow-link fault's factor on this copy (1: none) */
    uint64_t last_ns, end_ns;
};

struct sim_dir {
    int n;
    struct sim_engine *eng;
    struct sim_op *head, *tail; /* copies dispatched and waiting for a free engine */
};

/* Blocks started together on the SMs end together: one heap entry per wave. */
struct sim_wave {
    uint64_t end_ns;
    uint64_t order;
    struct sim_op *op;
    uint32_t count;
};

struct sim_alloc {
    uintptr_t p;
    size_t bytes;
    const struct ferry_be_device *owner; /* registered host memory: the device it came through */
};

struct ferry_be_device {
    pthread_mutex_t mu;
    struct ferry_sim_profile prof;
    int index;
    int conns;
    uint64_t now; /* the host's virtual clock; the model is always processed up to it */
    /* Option sim_pace: real ns a virtual ns takes (0: virtual time only), and the real time
     * (CLOCK_MONOTONIC, ns) at which the virtual clock read 0. */
    double pace, pace_origin_ns;
    struct sim_queue *queues;
    struct sim_dir dirs[2];
    /* SMs */
    int free_slots;
    int resident;
    struct sim_op **pending; /* resident kernels with blocks not started, best first */
    int npending;
    struct sim_wave *waves; /* min-heap on (end_ns, order) */
    int nwaves, cap_waves;
    uint64_t order;
    /* device memory, sorted by address (registered host memory is the process's: sim_backend.c) */
    struct sim_alloc *allocs;
    size_t nallocs, cap_allocs;
    uint64_t reg_bytes; /* host bytes registered now (host.pin_limit_bytes) */
    int copy_conns;     /* CUDA_DEVICE_MAX_COPY_CONNECTIONS as read at open (memory only) */
    /* The fault schedule (option inject) and its state. */
    struct ferry_fault_spec faults;
    uint64_t fault_rng, nallocs_made, ncopies, nlaunched;
    int sticky; /* FERRY_ESTICKY once a sticky fault fired: every call fails */
    struct {
        struct sim_op *op;
        bool polls; /* stops when the abort flag is raised (hang); else never (hang-hard) */
    } hung[SIM_HUNG_MAX];
    int nhung;
    uint64_t slow_from, slow_until; /* a time-triggered slow window */
    double slow_factor;
    /* Another process on the link (share faults), per direction: its rate in GB/s (bytes per
     * ns) from share_from until share_until. */
    uint64_t share_from[2], share_until[2];
    double share_gbps[2];
    /* The machine's host memory this device shares (sim_host.c; NULL: not a device of a
     * machine with a host_memory section) and its copy demand there, MB/s. */
    struct sim_host *host;
    uint64_t host_demand;
    /* The bytes the model's copies moved, per direction, by completion time: link_rate. */
    ferry__rate_ring_t link_ring[2];
    uint64_t mem_used;
    int next_stream;
    struct ferry_be_stream *streams;
    struct ferry_be_event *events;
    struct sim_op *ops;
    struct ferry_sim_stats stats;
};

/* Set up and tear down the model's queues, engines and SM state (after prof and conns). */
int ferry__sim_model_init(struct ferry_be_device *dev);
void ferry__sim_model_fini(struct ferry_be_device *dev);

/* A new op of @kind on @s, one reference held by the caller; NULL when out of memory. */
struct sim_op *ferry__sim_op_new(struct ferry_be_stream *s, enum sim_op_kind kind);
void ferry__sim_op_unref(struct ferry_be_device *dev, struct sim_op *op);
/* Hand @op (from ferry__sim_op_new; the caller's reference passes to the model) to its stream's
 * hardware queue at dev->now and dispatch what can run. */
void ferry__sim_submit(struct ferry_be_device *dev, struct sim_op *op);

/* Process every model event up to @t and set the clock to @t (t >= now). */
void ferry__sim_advance_to(struct ferry_be_device *dev, uint64_t t);
/* Option sim_pace. Under the lock: the virtual clock catches up with real time (time passes on
 * the device while the host works or idles in real time); and the real time (CLOCK_MONOTONIC
 * ns) the virtual clock's present corresponds to, 0 when dev->pace is 0. Outside it: sleep
 * until that real time, so that work the host waited for took its paced time. */
void ferry__sim_pace_follow(struct ferry_be_device *dev);
double ferry__sim_pace_until(const struct ferry_be_device *dev);
void ferry__sim_pace_sleep(double at);
/* The host spends @ns of modelled time in a call (under the lock): the model runs alongside up
 * to the new host time. With sim_pace that time is not paced: the call's real cost is what it
 * took in real time, and the device's work goes on in virtual time meanwhile. */
void ferry__sim_charge(struct ferry_be_device *dev, uint64_t ns);
/* Process the next batch of simultaneous events, if one is due at or before @limit: returns
 * false (and changes nothing) when none is, so callers can wait for a condition. */
bool ferry__sim_step(struct ferry_be_device *dev, uint64_t limit);
/* Run until every submitted op has completed (the clock goes to the last completion). */
void ferry__sim_drain(struct ferry_be_device *dev);
/* An injected allocation failure for the allocation being made: 0 or FERRY_EDEVMEM. */
int ferry__sim_alloc_fault(struct ferry_be_device *dev);
/* Raise the abort flag: hung kernels that poll it end now with FERRY_ETIMEDOUT. Returns how
 * many stopped. Under the device lock. */
/* The abort word @word was raised to @upto: hung kernels launched with it, a seq <= @upto,
 * that poll, stop with an error. Returns how many. */
int ferry__sim_abort(struct ferry_be_device *dev, const volatile uint64_t *word, uint64_t upto);

void ferry__sim_stream_free(struct ferry_be_stream *s);
/* A new event on @dev's list (@timing: created with FERRY_BE_EVENT_TIMING), NULL when out of
 * memory; and its end: the reference on its latest record dropped and off the list, for the
 * caller to free. Both under the device lock. */
struct ferry_be_event *ferry__sim_event_new(struct ferry_be_device *dev, bool timing);
void ferry__sim_event_unlink(struct ferry_be_event *e);

/* The host memory of a machine profile, shared by its open devices (sim_host.c): join it at
 * open (0, or FERRY_ENOMEM) and leave it at close, without the device lock; the cap on the sum
 * of the device's copy rates now, GB/s (0: none), min(the profile's own host_memory.gbps, the
 * device's share); what ferry_device_host reports. */
/* sim_memory.c: the ops of memory (sim_backend.c's table), and what the other ops ask of it.
 * dev_inside: [p, p + bytes) lies in one of @dev's allocations (under its lock); pinned: in one
 * registered host range, whichever device registered it; memory_fini: @dev's close frees its
 * allocations and drops the host ranges registered through it. */
int ferry__sim_host_register(ferry_be_device_t *dev, void *p, size_t bytes);
int ferry__sim_host_unregister(ferry_be_device_t *dev, void *p);
int ferry__sim_mem_alloc(ferry_be_device_t *dev, size_t bytes, void **out);
void ferry__sim_mem_free(ferry_be_device_t *dev, void *p);
int ferry__sim_host_device_ptr(ferry_be_device_t *dev, void *host, void **out);
bool ferry__sim_dev_inside(const struct ferry_be_device *dev, const void *p, size_t bytes);
bool ferry__sim_pinned(const void *p, size_t bytes);
void ferry__sim_memory_fini(struct ferry_be_device *dev);
/* The error of every call after a sticky fault (sim_backend.c). */
int ferry__sim_sticky_fail(const char *what);

int ferry__sim_host_attach(struct ferry_be_device *dev);
void ferry__sim_host_detach(struct ferry_be_device *dev);
double ferry__sim_host_cap(const struct ferry_be_device *dev);
void ferry__sim_host_props(ferry_be_device_t *dev, ferry_host_props_t *out);

/* The link's traffic in direction @dir over the last FERRY_LINK_WINDOW_NS (less early on):
 * the model's copies and an injected share fault, bytes per second. 0 with the window, or
 * FERRY_EAGAIN at time 0. */
int ferry__sim_link_rate(struct ferry_be_device *dev, int dir, double *bytes_per_s,
                         uint64_t *window_ns);

#endif
