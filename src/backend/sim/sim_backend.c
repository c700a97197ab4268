/* The sim backend's ops table: argument checks, CUDA_DEVICE_MAX_CONNECTIONS, and the host's virtual
 * clock: each call that submits work costs the profile's host time, and calls that wait run the
 * model forward instead of sleeping. The model itself lives in sim_model.c, memory (device
 * allocations and registered host memory) in sim_memory.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim_model.h"
#include "base/base.h"
#include "ferry/connections.h"

/* The documented range of CUDA_DEVICE_MAX_CONNECTIONS, and what was seen to work above it. */
#define SIM_CONNS_MAX_DOC  32
#define SIM_CONNS_MAX_SEEN 64

/* Every call takes the device's lock here: with option sim_pace the model first runs up to
 * the real time that passed. */
static void lock(struct ferry_be_device *dev)
{
    pthread_mutex_lock(&dev->mu);
    ferry__sim_pace_follow(dev);
}
static void unlock(struct ferry_be_device *dev)
{
    pthread_mutex_unlock(&dev->mu);
}

/* CUDA reads CUDA_DEVICE_MAX_CONNECTIONS at cuInit; we read it at open, the way
 * ferry_connections_read says CUDA reads it (FACTS.md: 1..32 documented, default 8; 0 and
 * "abc" behave as unset; 33 and 64 were used unclamped). The model keeps at most 64 queues. */
static int read_connections(const char *var, int dflt)
{
    const char *v = getenv(var);
    ferry_conn_reading_t r;
    ferry_connections_read(v, &r);
    unsigned n = r.status == FERRY_CONN_VALID || r.status == FERRY_CONN_UNDOCUMENTED
                     ? r.effective
                     : (unsigned)dflt;
    if (r.status != FERRY_CONN_UNSET && r.status != FERRY_CONN_VALID)
        ferry_log(FERRY_LOG_WARN, "sim", "%s: %s", var, r.note);
    if (n > SIM_CONNS_MAX_SEEN) {
        ferry_log(FERRY_LOG_WARN, "sim", "%s=%u: the simulator models at most %d queues", var, n,
                  SIM_CONNS_MAX_SEEN);
        n = SIM_CONNS_MAX_SEEN;
    }
    return (int)n;
}

/* After a sticky fault every call fails, as CUDA's do after an illegal address (FACTS.md: no
 * recovery inside the process). Under the device lock. */
int ferry__sim_sticky_fail(const char *what)
{
    return ferry__error(FERRY_ESTICKY,
                        "sim: %s: the context was corrupted by an injected sticky fault; no call "
                        "succeeds in this process any more",
                        what);
}

/* A new op of @kind on @s for the call @what, under the device lock: NULL when the device is
 * sticky or memory ran out, with the error in *@rc. */
static struct sim_op *op_new(ferry_be_stream_t *s, enum sim_op_kind kind, const char *what, int *rc)
{
    if (s->dev->sticky) {
        *rc = ferry__sim_sticky_fail(what);
        return NULL;
    }
    struct sim_op *op = ferry__sim_op_new(s, kind);
    if (op == NULL)
        *rc = ferry__error(FERRY_ENOMEM, "sim: %s: out of memory", what);
    return op;
}

/* Locks the device and makes an op (op_new); held until op_submit(), released on failure. */
static int op_begin(ferry_be_stream_t *s, enum sim_op_kind kind, const char *what,
                    struct sim_op **out)
{
    int rc = 0;
    lock(s->dev);
    *out = op_new(s, kind, what, &rc);
    if (*out == NULL)
        unlock(s->dev);
    return rc;
}

/* Ends an op_begin(): charges the call's host cost @ns, submits @op, releases the lock. */
static void op_submit(struct ferry_be_device *dev, struct sim_op *op, uint64_t ns)
{
    ferry__sim_charge(dev, ns);
    ferry__sim_submit(dev, op);
    unlock(dev);
}

/* ---- devices ----------------------------------------------------------------------------- */

static int sim_device_count(const char *profile_path, int *count, char *why, size_t why_len)
{
    struct ferry_sim_profile p;
    if (count == NULL)
        return ferry__error(FERRY_EINVAL, "sim: device_count: NULL count");
    /* The profile device_open will load decides the count: a profile with "devices": 2 is a
     * two-GPU machine. */
    int rc = profile_path != NULL && profile_path[0] != '\0'
                 ? ferry__sim_profile_load_device(profile_path, 0, &p)
                 : ferry__sim_profile_load_default(&p);
    if (rc == 0) {
        *count = p.devices;
        if (why != NULL && why_len > 0)
            why[0] = '\0';
        return 0;
    }
    /* A profile given at open may still work: offer one device and say why we could not tell. */
    *count = 1;
    if (why != NULL && why_len > 0)
        snprintf(why, why_len, "%s", ferry__last_error_text());
    return 0;
}

static int sim_device_open(int index, const ferry_be_open_params_t *params, ferry_be_device_t **out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "sim: device_open: NULL out");
    struct ferry_be_device *dev = calloc(1, sizeof(*dev));
    if (dev == NULL)
        return ferry__error(FERRY_ENOMEM, "sim: out of memory opening device %d", index);
    int rc;
    const char *path = params != NULL ? params->profile_path : NULL;
    if (path != NULL && path[0] != '\0')
        rc = ferry__sim_profile_load_device(path, index, &dev->prof);
    else
        rc = ferry__sim_profile_load_default(&dev->prof);
    if (rc != 0)
        goto out_free;
    if (index < 0 || index >= dev->prof.devices) {
        rc =
            ferry__error(FERRY_ENODEV, "sim: no device %d: profile %s simulates %d device%s", index,
                         dev->prof.path, dev->prof.devices, dev->prof.devices == 1 ? "" : "s");
        goto out_free;
    }
    dev->index = index;
    dev->conns = read_connections("CUDA_DEVICE_MAX_CONNECTIONS", dev->prof.connections_default);
    /* Measured on the H200 (bench/results/2026-12-02-h200-e202cac.jsonl): with only
     * CUDA_DEVICE_MAX_CONNECTIONS set, each connection took 256 KiB = 64 (compute) + 192
     * (copy): the copy queues follow it unless their own variable is set. */
    dev->copy_conns = getenv("CUDA_DEVICE_MAX_COPY_CONNECTIONS") != NULL
                          ? read_connections("CUDA_DEVICE_MAX_COPY_CONNECTIONS", dev->conns)
                          : dev->conns;
    const char *inject = params != NULL && params->options != NULL
                             ? ferry__opt_str(params->options, FERRY__OPT_inject)
                             : "";
    if ((rc = ferry__fault_spec_parse(inject, &dev->faults)) != 0)
        goto out_free;
    for (size_t i = 0; i < dev->faults.n; i++)
        if (dev->faults.f[i].dev >= dev->prof.devices) {
            rc = ferry__error(FERRY_EINVAL,
                              "option inject: item %zu names dev=%d, but profile %s simulates "
                              "%d device%s (accepted: dev=0 to %d)",
                              i + 1, dev->faults.f[i].dev, dev->prof.path, dev->prof.devices,
                              dev->prof.devices == 1 ? "" : "s", dev->prof.devices - 1);
            goto out_free;
        }
    ferry__fault_spec_for_device(&dev->faults, index);
    dev->pace = params != NULL && params->options != NULL
                    ? ferry__opt_double(params->options, FERRY__OPT_sim_pace)
                    : 0;
    dev->pace_origin_ns = (double)ferry__mono_ns();
    dev->fault_rng = (params != NULL ? params->seed : 1) ^ 0x5deece66dull;
    if (dev->faults.n > 0)
        ferry_log(FERRY_LOG_INFO, "sim", "device %d: %zu injected fault(s): %s", index,
                  dev->faults.n, inject);
    rc = ferry__sim_model_init(dev);
    if (rc != 0)
        goto out_free;
    if ((rc = ferry__sim_host_attach(dev)) != 0)
        goto out_model;
    if (ferry__mutex_init_adaptive(&dev->mu) != 0) {
        rc = ferry__error(FERRY_ENOMEM, "sim: cannot create the device mutex");
        goto out_host;
    }
    ferry_log(FERRY_LOG_INFO, "sim", "device %d open: %s, profile %s, %d hardware queues", index,
              dev->prof.name, dev->prof.path, dev->conns);
    *out = dev;
    return 0;
out_host:
    ferry__sim_host_detach(dev);
out_model:
    ferry__sim_model_fini(dev);
out_free:
    free(dev);
    return rc;
}

static void sim_device_close(ferry_be_device_t *dev)
{
    if (dev == NULL)
        return;
    lock(dev);
    ferry__sim_model_fini(dev);
    ferry__sim_memory_fini(dev);
    unlock(dev);
    pthread_mutex_destroy(&dev->mu);
    ferry__sim_host_detach(dev);
    free(dev);
}

static int sim_device_props(ferry_be_device_t *dev, ferry_device_props_t *out)
{
    if (dev == NULL || !FERRY_SIZE_OK(out, sizeof(ferry_device_props_t)))
        return ferry__error(FERRY_EINVAL, "sim: device_props: NULL device or props, or props "
                                          "size not set (use FERRY_DEVICE_PROPS_INIT)");
    const struct ferry_sim_profile *p = &dev->prof;
    ferry__be_props_begin(out, p->name, "sim", dev->index, true);
    ferry__be_props_gpu(out, p->cc_major, p->cc_minor, p->sms, p->copy_engines,
                        p->max_resident_grids, p->priority_least, p->priority_greatest,
                        p->memory_bytes, p->l2_bytes);
    out->concurrent_kernels = true;
    out->pcie_gen = out->pcie_gen_max = p->pcie_gen;
    out->pcie_width = out->pcie_width_max = p->pcie_width;
    out->link_gbps = p->pcie_gbps;
    out->default_chunk_bytes = p->default_chunk_bytes; /* the profile's defaults.chunk_bytes */
    out->piece_kernel_max = p->piece_kernel_max;
    out->numa_node = -1;
    snprintf(out->driver_version, sizeof(out->driver_version), "simulated");
    snprintf(out->runtime_version, sizeof(out->runtime_version), "simulated");
    snprintf(out->profile, sizeof(out->profile), "%s", p->path);
    return 0;
}

static uint64_t sim_now_ns(ferry_be_device_t *dev)
{
    if (dev == NULL)
        return 0;
    lock(dev);
    uint64_t t = dev->now;
    unlock(dev);
    return t;
}

/* ---- streams ----------------------------------------------------------------------------- */

static int sim_stream_create(ferry_be_device_t *dev, int priority, ferry_be_stream_t **out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim: stream_create: NULL device or out");
    struct ferry_be_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ferry__error(FERRY_ENOMEM, "sim: stream_create: out of memory");
    lock(dev);
    /* cudaStreamCreateWithPriority clamps into [greatest, least] silently; so do we. */
    if (priority < dev->prof.priority_greatest)
        priority = dev->prof.priority_greatest;
    if (priority > dev->prof.priority_least)
        priority = dev->prof.priority_least;
    s->dev = dev;
    s->priority = priority;
    s->index = dev->next_stream++;
    s->queue = s->index % dev->conns;
    SIM_LIST_PUSH(dev->streams, s, prev, next);
    unlock(dev);
    *out = s;
    return 0;
}

static void sim_stream_destroy(ferry_be_stream_t *s)
{
    if (s == NULL)
        return;
    struct ferry_be_device *dev = s->dev;
    lock(dev);
    /* Like cudaStreamDestroy: returns at once, queued work still completes. */
    if (s->completed == s->submitted)
        ferry__sim_stream_free(s);
    else
        s->destroyed = true;
    unlock(dev);
}

static void *sim_stream_native(ferry_be_stream_t *s)
{
    (void)s;
    return NULL;
}

static int sim_stream_sync(ferry_be_stream_t *s)
{
    if (s == NULL)
        return ferry__error(FERRY_EINVAL, "sim: stream_sync: NULL stream");
    struct ferry_be_device *dev = s->dev;
    lock(dev);
    while (!dev->sticky && s->completed < s->submitted && ferry__sim_step(dev, SIM_NEVER)) {
    }
    /* What an event recorded now would report; a stream stuck behind a hung kernel reports
     * that it will never finish (CUDA would block forever). */
    int rc = dev->sticky                   ? dev->sticky
             : s->completed < s->submitted ? FERRY_ETIMEDOUT
             : s->own_err != 0             ? s->own_err
                                           : s->in_err;
    if (s->own_err != 0 && s->completed == s->submitted)
        s->own_err_reported = true; /* the host has seen it */
    double until = ferry__sim_pace_until(dev);
    unlock(dev);
    ferry__sim_pace_sleep(until);
    if (rc != 0)
        return ferry__error(rc, "sim: stream_sync: work on or before this stream failed (%s)",
                            ferry_err_name(rc));
    return 0;
}

/* ---- events ------------------------------------------------------------------------------ */

static int sim_event_create(ferry_be_device_t *dev, unsigned flags, ferry_be_event_t **out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim: event_create: NULL device or out");
    if (flags & ~FERRY_BE_EVENT_TIMING)
        return ferry__error(FERRY_EINVAL, "sim: event_create: unknown flags 0x%x", flags);
    lock(dev);
    struct ferry_be_event *e = ferry__sim_event_new(dev, (flags & FERRY_BE_EVENT_TIMING) != 0);
    unlock(dev);
    if (e == NULL)
        return ferry__error(FERRY_ENOMEM, "sim: event_create: out of memory");
    *out = e;
    return 0;
}

static void sim_event_destroy(ferry_be_event_t *e)
{
    if (e == NULL)
        return;
    lock(e->dev);
    ferry__sim_event_unlink(e);
    unlock(e->dev);
    free(e);
}

/* The two calls that put an event on a stream: a record (@kind SIM_OP_RECORD) and a wait
 * (SIM_OP_WAIT). Both want the event and the stream on one device, else @mismatch_rc with the
 * text @mismatch. */
static int event_op(ferry_be_event_t *e, ferry_be_stream_t *s, enum sim_op_kind kind,
                    const char *what, int mismatch_rc, const char *mismatch)
{
    if (e == NULL || s == NULL)
        return ferry__error(FERRY_EINVAL, "sim: %s: NULL event or stream", what);
    if (e->dev != s->dev)
        return ferry__error(mismatch_rc, "sim: %s: %s", what, mismatch);
    struct ferry_be_device *dev = s->dev;
    struct sim_op *op;
    int rc = op_begin(s, kind, what, &op);
    if (rc != 0)
        return rc;
    if (kind == SIM_OP_RECORD) {
        op->refs++; /* the event's */
        ferry__sim_op_unref(dev, e->last);
        e->last = op;
    } else {
        /* The record in force now, as cudaStreamWaitEvent: later records of @e do not matter. */
        op->u.wait.target = e->last;
        if (e->last != NULL)
            e->last->refs++;
    }
    op_submit(dev, op,
              kind == SIM_OP_RECORD ? dev->prof.event_record_ns : dev->prof.stream_wait_ns);
    return 0;
}

static int sim_event_record(ferry_be_event_t *e, ferry_be_stream_t *s)
{
    return event_op(e, s, SIM_OP_RECORD, "event_record", FERRY_EINVAL,
                    "event and stream belong to different devices");
}

static int sim_stream_wait_event(ferry_be_stream_t *s, ferry_be_event_t *e)
{
    return event_op(e, s, SIM_OP_WAIT, "stream_wait_event", FERRY_ENOTSUP,
                    "waiting on another device's event is not modelled");
}

static int sim_event_query(ferry_be_event_t *e)
{
    if (e == NULL)
        return ferry__error(FERRY_EINVAL, "sim: event_query: NULL event");
    struct ferry_be_device *dev = e->dev;
    lock(dev);
    /* Never recorded counts as complete, as cudaEventQuery says. */
    int rc = dev->sticky       ? dev->sticky
             : e->last == NULL ? 0
             : !e->last->done  ? FERRY_EAGAIN
                               : e->last->err;
    unlock(dev);
    if (rc != 0 && rc != FERRY_EAGAIN)
        return ferry__error(rc, "sim: event_query: work before the event failed (%s)",
                            ferry_err_name(rc));
    return rc;
}

static ferry_be_device_t *event_dev(const ferry_be_event_t *e)
{
    return e->dev;
}

static int sim_event_wait_any(ferry_be_event_t *const *evs, size_t n, uint64_t timeout_ns,
                              size_t *which)
{
    int rc = ferry__be_wait_any_check("sim", evs, n, which, event_dev);
    if (rc != 0)
        return rc;
    struct ferry_be_device *dev = evs[0]->dev;
    rc = FERRY_ETIMEDOUT;
    lock(dev);
    uint64_t deadline = timeout_ns > SIM_NEVER - dev->now ? SIM_NEVER : dev->now + timeout_ns;
    for (;;) {
        if (dev->sticky) {
            *which = 0;
            rc = dev->sticky;
            goto out_unlock;
        }
        for (size_t i = 0; i < n; i++) {
            const struct sim_op *last = evs[i]->last;
            if (last == NULL || last->done) {
                *which = i;
                rc = last != NULL ? last->err : 0;
                goto out_unlock;
            }
        }
        /* Nothing more happens before the deadline: the host slept through the timeout. */
        if (!ferry__sim_step(dev, deadline)) {
            ferry__sim_advance_to(dev, deadline);
            break;
        }
    }
out_unlock:;
    double until = ferry__sim_pace_until(dev);
    unlock(dev);
    ferry__sim_pace_sleep(until);
    if (rc == FERRY_ETIMEDOUT)
        return ferry__error(rc,
                            "sim: event_wait_any: none of %zu events completed within "
                            "%llu ns of virtual time",
                            n, (unsigned long long)timeout_ns);
    if (rc != 0)
        return ferry__error(rc, "sim: event_wait_any: work before event %zu failed (%s)", *which,
                            ferry_err_name(rc));
    return 0;
}

static int sim_event_time_ns(ferry_be_event_t *e, uint64_t *out)
{
    if (e == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim: event_time_ns: NULL event or out");
    if (!e->timing) /* as CUDA answers for an event created without timing */
        return ferry__error(FERRY_ENOTSUP, "sim: event_time_ns: the event was created without "
                                           "timing");
    struct ferry_be_device *dev = e->dev;
    int rc = 0;
    lock(dev);
    if (dev->sticky)
        rc = dev->sticky;
    else if (e->last == NULL)
        *out = 0; /* never recorded: complete since time 0 */
    else if (!e->last->done)
        rc = FERRY_EAGAIN;
    else
        *out = e->last->end_ns;
    unlock(dev);
    if (rc == FERRY_ESTICKY)
        return ferry__sim_sticky_fail("event_time_ns");
    if (rc != 0)
        return ferry__error(rc, "sim: event_time_ns: the event has not completed yet");
    return 0;
}

/* ---- work -------------------------------------------------------------------------------- */

static int sim_memcpy(ferry_be_stream_t *s, int dir, void *dst, const void *src, size_t bytes)
{
    static const char *const names[2] = {"memcpy_h2d", "memcpy_d2h"};
    if (s == NULL || dst == NULL || src == NULL)
        return ferry__error(FERRY_EINVAL, "sim: %s: NULL stream or pointer", names[dir]);
    struct ferry_be_device *dev = s->dev;
    const void *dev_ptr = dir == FERRY_SIM_H2D ? dst : src;
    const void *host_ptr = dir == FERRY_SIM_H2D ? src : dst;
    int rc = 0;
    lock(dev);
    if (dev->sticky) {
        rc = ferry__sim_sticky_fail(names[dir]);
        goto out_unlock;
    }
    if (bytes > 0 && !ferry__sim_dev_inside(dev, dev_ptr, bytes)) {
        rc = ferry__error(FERRY_EINVAL,
                          "sim: %s: device range [%p, +%zu) is not inside one "
                          "device allocation",
                          names[dir], dev_ptr, bytes);
        goto out_unlock;
    }
    if (bytes == 0) {
        ferry__sim_charge(dev, dev->prof.copy_submit_ns);
        goto out_unlock;
    }
    struct sim_op *op = op_new(s, SIM_OP_COPY, names[dir], &rc);
    if (op == NULL)
        goto out_unlock;
    op->u.copy.dir = dir;
    op->u.copy.pinned = ferry__sim_pinned(host_ptr, bytes);
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.bytes = bytes;
    ferry__sim_charge(dev, dev->prof.copy_submit_ns);
    if (op->u.copy.pinned) {
        ferry__sim_submit(dev, op);
        goto out_unlock;
    }
    /* Pageable memory: the driver stages it through its own buffers and the call returns
     * only when the copy is done (FACTS.md: H2D 6-7.4 GB/s, D2H 9.6-13 GB/s). */
    dev->stats.pageable_copies++;
    op->refs++;
    ferry__sim_submit(dev, op);
    while (!op->done && ferry__sim_step(dev, SIM_NEVER)) {
    }
    ferry__sim_op_unref(dev, op);
    double until = ferry__sim_pace_until(dev);
    unlock(dev);
    ferry__sim_pace_sleep(until);
    return rc;
out_unlock:
    unlock(dev);
    return rc;
}

static int sim_memcpy_h2d(ferry_be_stream_t *s, void *dst_dev, const void *src_host, size_t bytes)
{
    return sim_memcpy(s, FERRY_SIM_H2D, dst_dev, src_host, bytes);
}

static int sim_memcpy_d2h(ferry_be_stream_t *s, void *dst_host, const void *src_dev, size_t bytes)
{
    return sim_memcpy(s, FERRY_SIM_D2H, dst_host, src_dev, bytes);
}

static int sim_copy_pieces(ferry_be_stream_t *s, bool to_dev, void *dbuf,
                           const ferry_be_piece_t *pieces, size_t n, size_t kernel_max)
{
    if (s == NULL || dbuf == NULL || (n > 0 && pieces == NULL))
        return ferry__error(FERRY_EINVAL, "sim: copy_pieces: NULL stream or pointer");
    struct ferry_be_device *dev = s->dev;
    int rc = 0;
    size_t total = 0;
    lock(dev);
    if (dev->sticky) {
        rc = ferry__sim_sticky_fail("copy_pieces");
        goto out_unlock;
    }
    for (size_t i = 0; i < n; i++) {
        const ferry_be_piece_t *pc = &pieces[i];
        if (pc->host == NULL ||
            !ferry__sim_dev_inside(dev, (unsigned char *)dbuf + pc->off, pc->bytes) ||
            !ferry__sim_pinned(pc->host, pc->bytes)) {
            rc = ferry__error(FERRY_EINVAL,
                              "sim: copy_pieces: piece %zu (%zu bytes at %zu) is not in one "
                              "device allocation, or its host memory is not pinned",
                              i, pc->bytes, pc->off);
            goto out_unlock;
        }
        total += pc->bytes;
    }
    /* The profile says up to where the device's copy kernel beats its engines: beyond it the
     * model has no figure for the kernel, and moves the pieces as the engines do. */
    if (kernel_max > dev->prof.piece_kernel_max)
        kernel_max = (size_t)dev->prof.piece_kernel_max;
    size_t nkernel = 0;
    for (size_t i = 0; i < n; i++)
        nkernel += pieces[i].bytes <= kernel_max;
    size_t launches = (nkernel + FERRY_SIM_PIECE_KERNEL_MAX - 1) / FERRY_SIM_PIECE_KERNEL_MAX;
    ferry__sim_charge(
        dev,
        launches * dev->prof.launch_ns +
            (n > nkernel ? dev->prof.copy_submit_ns + (n - nkernel) * FERRY_SIM_PIECE_HOST_NS : 0));
    if (total == 0)
        goto out_unlock;
    struct sim_op *op = op_new(s, SIM_OP_COPY, to_dev ? "memcpy_h2d" : "memcpy_d2h", &rc);
    if (op == NULL)
        goto out_unlock;
    if ((op->u.copy.pieces = malloc(n * sizeof(*pieces))) == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "sim: copy_pieces: out of memory");
        ferry__sim_op_unref(dev, op); /* never submitted */
        goto out_unlock;
    }
    memcpy(op->u.copy.pieces, pieces, n * sizeof(*pieces));
    op->u.copy.npieces = n;
    op->u.copy.nengine = n - nkernel;
    op->u.copy.kernel = nkernel > 0;
    op->u.copy.dir = to_dev ? FERRY_SIM_H2D : FERRY_SIM_D2H;
    op->u.copy.pinned = true;
    op->u.copy.dst = to_dev ? dbuf : NULL;
    op->u.copy.src = to_dev ? NULL : dbuf;
    op->u.copy.bytes = total;
    ferry__sim_submit(dev, op);
out_unlock:
    unlock(dev);
    return rc;
}

static int sim_launch(ferry_be_stream_t *s, const ferry_be_launch_t *l)
{
    if (l->cpu == NULL)
        return ferry__error(FERRY_ENOTSUP, "sim: launch: the stage has no CPU function; the "
                                           "simulator runs a kernel by calling it (set "
                                           "ferry_stage_t.cpu)");
    struct ferry_be_device *dev = s->dev;
    struct sim_op *op;
    int rc = op_begin(s, SIM_OP_KERNEL, "launch", &op);
    if (rc != 0)
        return rc;
    op->u.kern.l = *l;
    op->u.kern.blocks = l->blocks > 0 ? l->blocks : 1; /* a grid has at least one block */
    /* No kernel that reads and writes args.bytes beats one pass at the device-to-device rate
     * (FACTS.md: ~2.1 TB/s): a block's time is at least the share of that pass its wave has. */
    if (l->args.bytes > 0) {
        uint32_t waves_of = op->u.kern.blocks < (uint32_t)dev->prof.sms ? op->u.kern.blocks
                                                                        : (uint32_t)dev->prof.sms;
        double pass_ns = (double)l->args.bytes / dev->prof.d2d_gbps;
        uint64_t floor_ns =
            (uint64_t)(pass_ns * (double)waves_of / (double)op->u.kern.blocks + 0.5);
        if (op->u.kern.l.block_ns < floor_ns)
            op->u.kern.l.block_ns = floor_ns;
    }
    op->u.kern.priority = s->priority;
    op_submit(dev, op, dev->prof.launch_ns);
    return 0;
}

/* ---- hooks for tests and tools ---------------------------------------------------------- */

const struct ferry_sim_profile *ferry__sim_device_profile(ferry_be_device_t *dev)
{
    return dev != NULL ? &dev->prof : NULL;
}

int ferry__sim_connections(ferry_be_device_t *dev)
{
    return dev != NULL ? dev->conns : 0;
}

int ferry__sim_stats(ferry_be_device_t *dev, struct ferry_sim_stats *out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "sim: stats: NULL device or out");
    lock(dev);
    *out = dev->stats;
    out->mem_used = dev->mem_used;
    unlock(dev);
    return 0;
}

/* Device memory: the allocations plus what the connections cost a context (FACTS.md: ~64 KiB
 * per compute connection, ~192 KiB per copy connection); the rest of a context's memory is
 * not modelled. */
static int sim_mem_info(ferry_be_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (dev == NULL || free_bytes == NULL || total_bytes == NULL)
        return ferry__error(FERRY_EINVAL, "sim: mem_info: NULL argument");
    lock(dev);
    uint64_t used = dev->mem_used +
                    ferry_connections_memory_bytes((unsigned)dev->conns, (unsigned)dev->copy_conns);
    *total_bytes = dev->prof.memory_bytes;
    *free_bytes = used < *total_bytes ? *total_bytes - used : 0;
    unlock(dev);
    return 0;
}

static int sim_abort_kernels(ferry_be_device_t *dev, const volatile uint64_t *word, uint64_t upto)
{
    if (dev == NULL)
        return ferry__error(FERRY_EINVAL, "sim: abort_kernels: NULL device");
    lock(dev);
    int n = ferry__sim_abort(dev, word, upto);
    unlock(dev);
    return n;
}

static int heartbeat_store(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    /* The watchdog's mapped heartbeat word, shared with kernels: not _Atomic, so a builtin. */
    __atomic_store_n((uint64_t *)a->out, a->batch_id, __ATOMIC_RELEASE);
    return 0;
}

static int sim_link_rate(ferry_be_device_t *dev, int dir, double *bytes_per_s, uint64_t *window_ns)
{
    if (dev == NULL || bytes_per_s == NULL || window_ns == NULL || (dir != 0 && dir != 1))
        return ferry__error(FERRY_EINVAL, "sim: link_rate: NULL argument or direction not 0/1");
    lock(dev);
    int rc = ferry__sim_link_rate(dev, dir, bytes_per_s, window_ns);
    unlock(dev);
    return rc;
}

/* The heartbeat: a one-block kernel of a microsecond, which stores its value when it ends. It
 * waits for a free SM like any kernel, never takes part in the fault schedule and is not
 * counted in the stats' kernels. */
static int sim_heartbeat(ferry_be_stream_t *s, volatile uint64_t *word, uint64_t value)
{
    if (s == NULL || word == NULL)
        return ferry__error(FERRY_EINVAL, "sim: heartbeat: NULL stream or word");
    struct sim_op *op;
    int rc = op_begin(s, SIM_OP_KERNEL, "heartbeat", &op);
    if (rc != 0)
        return rc;
    op->u.kern.l = (ferry_be_launch_t){
        .cpu = heartbeat_store,
        .args = {.size = sizeof(ferry_kernel_args_t), .out = (void *)word, .batch_id = value},
        .blocks = 1,
        .block_ns = 1000,
    };
    op->u.kern.blocks = 1;
    op->u.kern.heartbeat = true;
    op->u.kern.priority = s->priority;
    op_submit(s->dev, op, s->dev->prof.launch_ns);
    return 0;
}

const ferry_backend_ops_t ferry__sim_backend = {
    .name = "sim",
    .abi = FERRY_BACKEND_ABI,
    .caps = FERRY_BE_CAP_VIRTUAL_CLOCK | FERRY_BE_CAP_HOST_COST,
    .device_count = sim_device_count,
    .device_open = sim_device_open,
    .device_close = sim_device_close,
    .device_props = sim_device_props,
    .now_ns = sim_now_ns,
    .host_register = ferry__sim_host_register,
    .host_unregister = ferry__sim_host_unregister,
    .mem_alloc = ferry__sim_mem_alloc,
    .mem_free = ferry__sim_mem_free,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_native = sim_stream_native,
    .stream_sync = sim_stream_sync,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .stream_wait_event = sim_stream_wait_event,
    .event_query = sim_event_query,
    .event_wait_any = sim_event_wait_any,
    .event_time_ns = sim_event_time_ns,
    .memcpy_h2d = sim_memcpy_h2d,
    .memcpy_d2h = sim_memcpy_d2h,
    .copy_pieces = sim_copy_pieces,
    .launch = sim_launch,
    .mem_info = sim_mem_info,
    .abort_kernels = sim_abort_kernels,
    .host_device_ptr = ferry__sim_host_device_ptr,
    .heartbeat = sim_heartbeat,
    .link_rate = sim_link_rate,
    .host_props = ferry__sim_host_props,
};
