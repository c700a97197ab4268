/* The streaming pipeline: batches enter a bounded submission queue and are cut into chunks bound
 * to slots (pinned host + device buffers + events); input that is not pinned is staged, and each
 * chunk's H2D -> compute -> D2H is issued on dedicated streams linked by events, round-robin. A
 * completion thread polls the events, copies output out of pinned slots, recycles slots and runs
 * each batch's callback exactly once. Issuing is a role, the issue token, not a thread: its
 * holder issues in queue order. Small batches are issued by whoever is at hand (the submitting
 * thread when nothing is queued and slots are free, the completion thread when it frees slots),
 * everything else by the issuer thread; hand-offs between threads are lock-free pushes, and a
 * thread is woken only when it sleeps. */
#include <errno.h>
#include <limits.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/sim/sim.h"
#include "base/config.h"
#include "base/prof.h"
#include "core/runtime.h"
#include "pipeline/gather.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/remote.h"
#include "pipeline/set.h"

_Thread_local const ferry_pipeline_t *ferry__pipe_own_thread;

/* ---- public API ---------------------------------------------------------------------------- */

/* Stop the threads and release the streams, events, device and pinned memory, the watchdog
 * and the queue; the stats as they stand go to final. Once per pipeline, nothing in flight. */
static void release(ferry_pipeline_t *p)
{
    ferry__gather_release(p->gather);
    if (p->counted_streams)
        atomic_fetch_sub_explicit(&p->dev->active_streams, p->plan.nstreams, memory_order_relaxed);
    ferry__failure_log_close(&p->comp.flog);
    free(p->iss.cpu_tmp);
    if (p->queue)
        ferry__bqueue_close(p->queue);
    pthread_mutex_lock(&p->lock);
    p->api.closing = true;
    pthread_cond_broadcast(&p->issue_cv);
    pthread_mutex_unlock(&p->lock);
    if (p->api.issuer_started)
        pthread_join(p->issuer, NULL);
    if (p->api.completer_started) {
        pthread_mutex_lock(&p->lock);
        p->api.comp_exit = true;
        poke(p, true);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->completer, NULL);
    }
    pthread_mutex_lock(&p->lock);
    p->api.final.size = sizeof(p->api.final);
    ferry__pipe_fill_stats(p, &p->api.final);
    p->api.final_ready = true;
    pthread_mutex_unlock(&p->lock);
    /* A hung GPU never finishes the kernel that hangs, nor what waits behind it: waiting for
     * its streams, or freeing memory (which waits for the device), would never return. Its
     * memory is left to the process's end. */
    bool hung =
        atomic_load_explicit(&p->sh.hang_lost, memory_order_acquire) && !p->plan.virtual_clock;
    if (p->comp.retry_stream != NULL && !hung)
        ferry__be_stream_sync(p->dev, p->comp.retry_stream);
    ferry__be_stream_destroy(p->dev, p->comp.retry_stream);
    ferry__be_event_destroy(p->dev, p->comp.retry_ev);
    ferry__watchdog_destroy(p->wdog.wd,
                            atomic_load_explicit(&p->sh.hang_lost, memory_order_acquire) != 0);
    ferry__linkmon_destroy(p->link);
    for (unsigned i = 0; i < p->plan.nstreams; i++)
        if (p->streams[i]) {
            if (!hung)
                ferry__be_stream_sync(p->dev, p->streams[i]);
            ferry__be_stream_destroy(p->dev, p->streams[i]);
        }
    if (hung) {
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "closed on a hung GPU: its device and pinned memory stay allocated until the "
                  "process ends");
        free(p->slots);
        p->slots = NULL;
        p->pool = NULL;
    }
    for (unsigned i = 0; p->slots && i < p->plan.depth; i++) {
        slot_t *s = &p->slots[i];
        for (int e = 0; e < EV_N; e++)
            ferry__be_event_destroy(p->dev, s->ev[e]);
        for (int e = 0; e < TEV_N; e++)
            ferry__be_event_destroy(p->dev, s->tev[e]);
        ferry__be_mem_free(p->dev, s->d_in);
        ferry__be_mem_free(p->dev, s->d_out);
        /* s->h_in and s->h_out are slots of p->pool: they go with it, below. */
    }
    free(p->slots);
    ferry_pool_destroy(p->pool);
    ferry__workers_destroy(p->workers);
    ferry__bqueue_destroy(p->queue);
    p->queue = NULL;
    p->workers = NULL;
    p->wdog.wd = NULL;
    p->link = NULL;
    for (int i = 0; i < 2; i++) {
        batch_rec_t *r = i == 0 ? p->api.free_recs
                                : atomic_load_explicit(&p->sh.returned_recs, memory_order_relaxed);
        while (r != NULL) {
            batch_rec_t *next = r->next;
            free(r);
            r = next;
        }
    }
    p->api.free_recs = NULL;
    atomic_store_explicit(&p->sh.returned_recs, NULL, memory_order_relaxed);
    atomic_store_explicit(&p->sh.released, 1, memory_order_release);
}

/* Free what a released pipeline kept: the trace, the lock, the handle. */
static void free_husk(ferry_pipeline_t *p)
{
    ferry__gather_free(p->gather);
    ferry__lat_hist_unregister(&p->sh.lat);
    ferry__trace_free(&p->api.trace);
    ferry__link_curve_destroy(p->link_curve);
    pthread_cond_destroy(&p->issue_cv);
    pthread_cond_destroy(&p->slot_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->pass_cv);
    pthread_cond_destroy(&p->drain_cv);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static void destroy(ferry_pipeline_t *p)
{
    if (p == NULL)
        return;
    release(p);
    free_husk(p);
}

static ferry_pipeline_t *of_child(ferry__rt_child_t *c)
{
    return (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
}

static bool child_is_live(ferry__rt_child_t *c, char *name, size_t len)
{
    ferry_pipeline_t *p = of_child(c);
    snprintf(name, len, "'%s' #%u", p->stage_name, p->serial);
    return !atomic_load_explicit(&p->sh.released, memory_order_acquire);
}

static void child_destroy(ferry__rt_child_t *c)
{
    free_husk(of_child(c));
}

/* The slots: pinned buffers from the pool, device buffers and events, @span bytes each way.
 * Short of device memory after the first, the depth shrinks to the slots made. */
static int make_slots(ferry_pipeline_t *p, size_t span)
{
    int rc;
    p->slots = calloc((size_t)p->plan.depth, sizeof(*p->slots));
    if (p->slots == NULL)
        return ferry__error(FERRY_ENOMEM, "pipeline: out of memory");
    for (unsigned i = 0; i < p->plan.depth; i++) {
        slot_t *s = &p->slots[i];
        void *hi_ = NULL, *ho_ = NULL;
        if ((rc = ferry_pool_alloc(p->pool, span, false, &hi_)) != 0 ||
            (rc = ferry_pool_alloc(p->pool, span, false, &ho_)) != 0)
            return rc;
        s->h_in = hi_;
        s->h_out = ho_;
        if ((rc = ferry__be_mem_alloc(p->dev, span, &s->d_in)) != 0 ||
            (rc = ferry__be_mem_alloc(p->dev, span, &s->d_out)) != 0) {
            /* Memory pressure (the ladder's level 1): fewer chunks in flight, if one fits. */
            if (rc != FERRY_EDEVMEM || i == 0)
                return rc;
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "device memory for %u slots is not there (%s): running with depth %u",
                      p->plan.depth, ferry__last_error_text(), i);
            if (s->d_in != NULL)
                ferry__be_mem_free(p->dev, s->d_in);
            s->d_in = NULL;
            p->plan.depth = i;
            p->api.slot_wake = p->plan.depth / 4 ? p->plan.depth / 4 : 1;
            return 0;
        }
        for (int e = 0; e < EV_N; e++)
            if ((rc = ferry__be_event_create(p->dev, 0, &s->ev[e])) != 0)
                return rc;
        for (int e = 0; e < TEV_N; e++)
            if ((rc = ferry__be_event_create(p->dev, FERRY_BE_EVENT_TIMING, &s->tev[e])) != 0)
                return rc;
        /* A slot never used has nothing in flight: its (never recorded) events are done. */
        for (int e = 0; e < EV_N; e++)
            s->dep[e] = s->ev[e];
        s->next_free = p->api.free_slots;
        p->api.free_slots = s;
        p->api.nfree_slots++;
    }
    return 0;
}

static int make_streams(ferry_pipeline_t *p)
{
    int rc;
    /* Streams in creation order H2D, compute, D2H: the order decides which hardware queue
     * each lands on (stream k -> queue k mod CUDA_DEVICE_MAX_CONNECTIONS). */
    for (unsigned i = 0; i < p->plan.nstreams; i++) {
        bool copy = i < p->plan.ncopy || i >= p->plan.ncopy + p->plan.ncomp;
        p->stream_kind[i] = p->plan.single ? 'a' : i < p->plan.ncopy ? 'h' : (copy ? 'd' : 'c');
        if ((rc = ferry__be_stream_create(p->dev, copy ? p->plan.copy_prio : p->plan.comp_prio,
                                          &p->streams[i])) != 0)
            return rc;
    }
    return 0;
}

/* The watchdog, the link monitor when the bandwidth monitor is on and the link known, and the
 * bandwidth monitor. */
static int start_monitors(ferry_pipeline_t *p, bool virt)
{
    int rc;
    ferry__wd_config_t wc = {
        .own_thread = !virt,
        .period_ns = p->plan.watchdog_ns,
        .heartbeat_ns = p->plan.heartbeat_ns,
        .factor = p->plan.deadline_factor,
        .floor_ns = p->plan.deadline_floor_ns,
        .heartbeat_priority = p->dev->props.priority_least,
        .name = p->stage_name,
        .on_deadline = ferry__pipe_wd_deadline,
        .on_hang = ferry__pipe_wd_hang,
        .ctx = p,
    };
    if ((rc = ferry__watchdog_create(p->dev, &wc, &p->wdog.wd)) != 0)
        return rc;
    uint64_t link_ns = p->plan.link_sample_ns;
    if (p->plan.bw_alert_ratio > 0 && link_ns > 0 && p->dev->props.link_gbps > 0) {
        ferry__linkmon_config_t lc = {
            .own_thread = !virt, .period_ns = link_ns, .own = &p->own_ring, .name = p->stage_name};
        if ((rc = ferry__linkmon_create(p->dev, &lc, &p->link)) != 0)
            return rc;
    }
    ferry__bwmon_config_t bc = {.link_gbps = p->dev->props.link_gbps,
                                .alert_ratio = p->plan.bw_alert_ratio,
                                .foreign_ratio = p->plan.bw_foreign_ratio,
                                .curve = p->link_curve,
                                .link = p->link,
                                .host_pinned = p->host_pinned,
                                .copies_merge = p->plan.group > 1};
    ferry__bwmon_init(&p->comp.bw, &bc);
    return 0;
}

/* The pipeline's state beyond its plan: the streams counted against the device's queues, the
 * link's copy curve for the bandwidth monitor, the alert callback, the ladder, the locks.
 * Returns 0 or the failure log's error. */
static int init_state(ferry_pipeline_t *p, const ferry_pipeline_config_t *cfg)
{
    ferry_device_t *dev = p->dev;
    /* The stream plan against the hardware queues: CUDA spreads a context's streams over
     * CUDA_DEVICE_MAX_CONNECTIONS queues; more active streams than queues share them, and a
     * stream can then wait behind another's blocked work. Round-robin issue (what ferry does)
     * keeps them concurrent at any value (FACTS.md), so this is said, not refused. */
    p->context_streams =
        atomic_fetch_add_explicit(&dev->active_streams, p->plan.nstreams, memory_order_relaxed) +
        p->plan.nstreams;
    p->counted_streams = true;
    if (p->context_streams > dev->connections)
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "%u streams are active on device %d (this pipeline's %u included) and "
                  "CUDA_DEVICE_MAX_CONNECTIONS gives %u queues: streams share queues; ferry "
                  "issues round-robin, which keeps them concurrent (`ferry connections "
                  "--recommend --streams %u`)",
                  p->context_streams, dev->index, p->plan.nstreams, dev->connections,
                  p->context_streams);
    if (p->plan.bw_alert_ratio > 0 && ferry__device_link_curve(dev, &p->link_curve) != 0)
        p->link_curve = NULL; /* no curve for this link: the theoretical rate alone */
    /* An imported config: NULL when the caller's struct had none. */
    p->on_alert = cfg->on_alert;
    p->alert_arg = cfg->alert_arg;
    p->comp.lat_ewma_ns = p->plan.lat_init_ns;
    int rc = ferry__failure_log_open(&p->comp.flog, p->plan.failure_log);
    p->ladder.gpu_retries = p->plan.gpu_retries;
    atomic_store_explicit(&p->sh.tracing, p->plan.trace, memory_order_relaxed);
    ferry__mutex_init_adaptive(&p->lock);
    pthread_cond_init(&p->issue_cv, NULL);
    pthread_cond_init(&p->slot_cv, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->pass_cv, NULL);
    pthread_cond_init(&p->drain_cv, NULL);
    p->api.st.size = sizeof(p->api.st);
    return rc;
}

/* Start the completion and issuer threads. Returns 0 or FERRY_ENOMEM (message set). */
static int start_threads(ferry_pipeline_t *p)
{
    if (ferry__thread_start(&p->completer, &p->api.completer_started, ferry__pipe_completion_main,
                            p, "ferry-complete") != 0)
        return ferry__error(FERRY_ENOMEM, "pipeline: cannot start the completion thread");
    if (ferry__thread_start(&p->issuer, &p->api.issuer_started, ferry__pipe_issuer_main, p,
                            "ferry-issue") != 0)
        return ferry__error(FERRY_ENOMEM, "pipeline: cannot start the issuer thread");
    return 0;
}

int ferry_pipeline_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out)
{
    if (cfg == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: NULL config or out");
    /* Imported (base/config.h) without the options, which come with the device; the plan
     * imports these copies again with them and fills the unset fields. */
    ferry_pipeline_config_t c;
    ferry_stage_t st;
    int rc = ferry__config_import(&c, sizeof(c), cfg, &ferry__cfg_pipeline, NULL);
    if (rc != 0)
        return rc;
    if (c.device != NULL && c.device->index == FERRY_DEVICE_CPU && c.devices == NULL) {
        /* the CPU alone: a set of one (its device runs only in sets) */
        ferry_device_t *only[1] = {c.device};
        c.devices = only;
        c.ndevices = 1;
        c.device = NULL;
        return ferry__pset_create(&c, out);
    }
    if (c.ndevices > 0 || c.devices != NULL)
        return ferry__pset_create(&c, out);
    if (c.device == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->device is NULL");
    ferry_device_t *dev = c.device;
    const ferry_options_t *o = dev->rt->opts;
    if (c.stage == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL, "ferry_pipeline_create: "
                                                                  "cfg->stage is NULL"));
    if ((rc = ferry__config_import(&st, sizeof(st), c.stage, &ferry__cfg_stage, o)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    c.stage = &st;
    cfg = &c;
    if (dev->rt->zyg != NULL) /* isolation=process */
        return ferry__rt_fail(dev->rt,
                              ferry__gather_wanted(cfg, o)
                                  ? ferry__error(FERRY_EINVAL, "gather_bytes: not available with "
                                                               "isolation=process yet (0: off)")
                                  : ferry__remote_create(cfg, out));
    bool virt = ferry_device_is_simulated(dev);
    ferry__pipe_plan_env_t env = {
        .opts = o,
        .props = &dev->props,
        .simulated = virt,
        .native_stream = (dev->ops->caps & FERRY_BE_CAP_NATIVE_STREAM) != 0,
        .ncpu = sysconf(_SC_NPROCESSORS_ONLN),
    };
    struct ferry__pipe_plan plan;
    rc = ferry__pipe_plan_make(cfg, &env, &plan);
    if (rc != 0)
        return ferry__rt_fail(dev->rt, rc);
    size_t chunk = plan.chunk, gather = 0;
    unsigned group = plan.group, gather_us = 0;
    if ((rc = ferry__gather_config(cfg, o, chunk, &gather, &gather_us)) != 0)
        return ferry__rt_fail(dev->rt, rc);

    /* Aligned: the shared atomics sit on cache lines of their own (pipeline_internal.h). */
    ferry_pipeline_t *p = aligned_alloc(FERRY__CACHE_LINE, sizeof(*p));
    if (p == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_ENOMEM, "pipeline: out of memory"));
    memset(p, 0, sizeof(*p));
    static _Atomic unsigned serials;
    p->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
    p->dev = dev;
    p->stage = st;
    ferry__strlcpy(p->stage_name, st.name ? st.name : "stage", sizeof(p->stage_name));
    p->stage.name = p->stage_name;
    p->plan = plan;
    p->api.slot_wake = p->plan.depth / 4 ? p->plan.depth / 4 : 1;
    if ((rc = init_state(p, cfg)) != 0)
        goto out_fail;

    if ((rc = ferry__bqueue_create(p->plan.queue_depth, sizeof(batch_rec_t *), &p->queue)) != 0 ||
        (rc = ferry__workers_create(p->plan.nworkers, "ferry-worker", &p->workers)) != 0)
        goto out_fail;

    /* Pool: two pinned buffers (in, out) per slot, each a copy group of chunks, depth slots in
     * flight. Allocated once, here. */
    size_t span = chunk * group;
    ferry_pool_config_t pc = FERRY_POOL_CONFIG_INIT;
    pc.slot_bytes = span;
    pc.slots = (size_t)p->plan.depth * 2;
    pc.pageable_fallback = true;
    if ((rc = ferry_pool_create(dev, &pc, &p->pool)) != 0)
        goto out_fail;
    ferry_pool_stats_t ps = FERRY_POOL_STATS_INIT;
    ferry_pool_stats(p->pool, &ps);
    p->host_pinned = ps.pinned;
    if ((rc = make_slots(p, span)) != 0 || (rc = make_streams(p)) != 0 ||
        (rc = start_monitors(p, virt)) != 0)
        goto out_fail;
    if ((rc = start_threads(p)) != 0 ||
        (gather > 0 && (rc = ferry__gather_create(p, gather, gather_us, &p->gather)) != 0))
        goto out_fail;
    ferry_log(FERRY_LOG_INFO, "pipeline",
              "created: stage %s, chunk %zu, %u per copy, depth %u, streams %u H2D + %u compute "
              "+ %u D2H, queue %lld, workers %lld",
              p->stage_name, chunk, group, p->plan.depth, p->plan.ncopy, p->plan.ncomp,
              p->plan.ncopy, (long long)p->plan.queue_depth, (long long)p->plan.nworkers);
    p->child.is_live = child_is_live;
    p->child.destroy = child_destroy;
    ferry__lat_hist_register(&p->sh.lat, p);
    ferry__rt_child_add(dev->rt, &p->child);
    *out = p;
    return 0;

out_fail:
    destroy(p);
    return ferry__rt_fail(dev->rt, rc);
}

static int submit(ferry_pipeline_t *p, const ferry_batch_t *batch, ferry_done_fn cb, void *arg,
                  uint64_t *id, int wait, const ferry__pieces_t *pieces);

/* A submit counted in, so that a close racing it waits for it (FERRY_EBUSY) instead of
 * releasing what it is about to use: on this thread's line of sh.entering, without the lock.
 * The sequentially consistent pair (count in, then read shut) against close's (set shut, then
 * read the count) means at least one side sees the other. Returns the line for leave(). */
static unsigned enter(ferry_pipeline_t *p)
{
    static _Atomic unsigned next_line;
    static _Thread_local unsigned line = UINT_MAX;
    if (line == UINT_MAX)
        line = atomic_fetch_add_explicit(&next_line, 1, memory_order_relaxed) % FERRY__ENTER_SHARDS;
    atomic_fetch_add_explicit(&p->sh.entering[line].n, 1, memory_order_seq_cst);
    return line;
}

/* Counted out; once shut, a destroy may wait for the last one out (entering()). */
static void leave(ferry_pipeline_t *p, unsigned line)
{
    atomic_fetch_sub_explicit(&p->sh.entering[line].n, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sh.shut, memory_order_seq_cst)) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->drain_cv);
        pthread_mutex_unlock(&p->lock);
    }
}

/* The submits inside the call. */
static unsigned entering(ferry_pipeline_t *p)
{
    unsigned n = 0;
    for (unsigned i = 0; i < FERRY__ENTER_SHARDS; i++)
        n += atomic_load_explicit(&p->sh.entering[i].n, memory_order_seq_cst);
    return n;
}

int ferry_pipeline_submit(ferry_pipeline_t *p, const ferry_batch_t *batch, ferry_done_fn cb,
                          void *arg, uint64_t *id)
{
    if (p == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL pipeline");
    if (p->set != NULL)
        return ferry__pset_submit(p->set, batch, cb, arg, id);
    if (p->remote != NULL)
        return ferry__remote_submit(p->remote, batch, cb, arg, id);
    unsigned line = enter(p);
    if (p->plan.virtual_clock) /* the caller whose return wait_for_caller waits for */
        atomic_store_explicit(&p->sh.caller_tid, ferry__thread_id(), memory_order_relaxed);
    int rc;
    if (atomic_load_explicit(&p->sh.shut, memory_order_seq_cst))
        rc = ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                          p->stage_name, p->serial);
    else
        rc = submit(p, batch, cb, arg, id, -1, NULL);
    leave(p, line);
    return rc;
}

/* The caller's @in imported into @batch (base/config.h: size checked, the fields an older
 * caller lacks zero) and as the header promises it (exactly one input, no partial overlap,
 * fewer than 2^32 chunks): 0 with its chunks in *@nchunks, or FERRY_EINVAL / FERRY_ERANGE. */
static int check_batch(const ferry_pipeline_t *p, const ferry_batch_t *in, ferry_done_fn cb,
                       ferry_batch_t *batch, uint64_t *nchunks)
{
    if (in == NULL || cb == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL pipeline, batch or "
                                          "callback");
    int rc = ferry__config_import(batch, sizeof(*batch), in, &ferry__cfg_batch, NULL);
    if (rc != 0)
        return rc;
    if (batch->bytes > 0 && (batch->in == NULL) == (batch->prepare == NULL))
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_submit: a batch of %zu bytes needs "
                            "exactly one of in and prepare",
                            batch->bytes);
    uint64_t n = batch->bytes / p->plan.chunk + (batch->bytes % p->plan.chunk != 0);
    if (n > UINT32_MAX)
        return ferry__error(FERRY_ERANGE,
                            "ferry_pipeline_submit: %zu bytes make more than 2^32 "
                            "chunks of %zu",
                            batch->bytes, p->plan.chunk);
    if (batch->out != NULL && batch->in != NULL && batch->out != batch->in) {
        uintptr_t a = (uintptr_t)batch->in, b = (uintptr_t)batch->out;
        if (a < b + batch->bytes && b < a + batch->bytes)
            return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: in and out overlap "
                                              "partially");
    }
    *nchunks = n;
    return 0;
}

/* Queue @b (not issued directly) with @nchunks counted in submitting; hand the issue token
 * on when nobody holds it. Returns what ferry_pipeline_submit returns; on an error @b goes back
 * to the free records and the callback is never called. */
static int submit_queued(ferry_pipeline_t *p, batch_rec_t *b, uint64_t my_id, uint64_t *id,
                         int wait)
{
    /* A callback (or prepare function) of this pipeline must not wait for room in its queue:
     * the queue empties as slots come back, and slots come back through the thread that runs
     * the callback. Such a submit never blocks; on a full queue it is refused. */
    bool own = on_own_thread(p);
    bool waited = false;
    bool may_wait = (wait < 0 ? !p->plan.nonblocking : wait > 0) && !own;
    int rc = ferry__bqueue_push(p->queue, &b, may_wait, &waited);
    bool run = false;
    pthread_mutex_lock(&p->lock);
    ferry__pipe_pass_wait(p);
    p->api.submitting--;
    if (rc != 0) {
        if (rc == FERRY_EAGAIN)
            p->api.st.queue_full_eagain++;
        b->next = p->api.free_recs; /* not queued, so still ours */
        p->api.free_recs = b;
    } else {
        p->api.submitted++;
        p->api.st.batches_submitted++;
        if (waited)
            p->api.st.queue_full_waits++;
        p->api.nqueued++;
        /* Nobody holds the token, so nobody would issue it: take the token and run the
         * queue (handing it to the issuer thread if the batch at its head is not light). On a
         * virtual clock the issuer thread issues everything (hand_to_issuer). */
        if (!p->api.token && p->plan.virtual_clock) {
            hand_to_issuer(p);
        } else if (!p->api.token) {
            p->api.token = true;
            atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
            run = true;
        }
    }
    /* Refused, with nobody issuing: the device may move on (see ferry__pipe_run_queue). */
    if (!run && !p->api.token && p->api.submitting == 0 && p->plan.virtual_clock)
        set_busy(p, false, true);
    else if (p->plan.virtual_clock)
        poke(p, true); /* submitter_runs() changed */
    pthread_mutex_unlock(&p->lock);
    if (rc == FERRY_EAGAIN && !p->plan.nonblocking)
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_submit: the queue of pipeline '%s' #%u is full and "
                            "this is one of its callbacks: waiting for room would deadlock (room "
                            "is made by the thread running the callback)",
                            p->stage_name, p->serial);
    if (rc == FERRY_ECLOSED)
        return ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                            p->stage_name, p->serial);
    if (rc != 0)
        return rc == FERRY_EAGAIN
                   ? FERRY_EAGAIN
                   : ferry__error(rc, "ferry_pipeline_submit: %s", ferry_strerror(rc));
    if (run)
        ferry__pipe_run_queue(p, ROLE_CALLER);
    if (id != NULL)
        *id = my_id;
    return 0;
}

/* @wait: -1 as the pipeline says (a caller's batch, which a gather may take); 0 or 1 for
 * gather.c's slabs: whether it may block for room. */
static int submit(ferry_pipeline_t *p, const ferry_batch_t *caller, ferry_done_fn cb, void *arg,
                  uint64_t *id, int wait, const ferry__pieces_t *pieces)
{
    uint64_t nchunks = 0;
    ferry_batch_t bt;
    const ferry_batch_t *batch = &bt;
    int vrc = check_batch(p, caller, cb, &bt, &nchunks);
    if (vrc != 0)
        return vrc;
    if (p->gather != NULL && wait < 0) {
        if (ferry__gather_takes(p->gather, &bt))
            return ferry__gather_submit(p->gather, &bt, cb, arg, id);
        if (ferry__gather_closing(p->gather))
            return ferry__error(FERRY_ECLOSED,
                                "ferry_pipeline_submit: pipeline '%s' #%u is "
                                "closed",
                                p->stage_name, p->serial);
    }
    uint64_t nslots = nchunks / p->plan.group + (nchunks % p->plan.group != 0);
    /* Cheap enough to issue on whichever thread holds the token, without waiting. A gathered
     * slab (@wait >= 0) is, whatever its size: its bytes are in pinned memory (the slab's own,
     * or its items' pieces), so issuing it is its calls alone, and on the thread that sealed it
     * no issuer thread is woken a slab. */
    bool light = batch->bytes == 0 ||
                 (batch->prepare == NULL && (batch->bytes <= LIGHT_MAX_BYTES || wait >= 0) &&
                  nslots <= p->plan.depth);
    uint64_t now = submit_stamp(p);
    slot_t *sl[64];
    pthread_mutex_lock(&p->lock);
    if (atomic_load_explicit(&p->sh.shut, memory_order_relaxed)) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                            p->stage_name, p->serial);
    }
    if (p->api.free_recs == NULL)
        p->api.free_recs =
            atomic_exchange_explicit(&p->sh.returned_recs, NULL, memory_order_acquire);
    ferry__pipe_pass_wait(p);
    batch_rec_t *b = p->api.free_recs;
    if (b != NULL) {
        p->api.free_recs = b->next;
    } else if ((b = malloc(sizeof(*b))) == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_submit: out of memory");
    }
    uint64_t my_id = b->id = p->api.next_id++;
    /* Nothing queued ahead of it and nobody issuing: issue it here, skipping the queue and
     * the hand-off to the issuer thread. */
    bool direct = p->plan.caller_issues && light && !p->api.token && p->api.nqueued == 0 &&
                  p->api.nfree_slots >= nslots &&
                  p->plan.depth - p->api.nfree_slots + nslots <= ferry__pipe_inflight_limit(p);
    if (direct) {
        p->api.token = true;
        atomic_store_explicit(&p->sh.busy, 1, memory_order_seq_cst);
        ferry__pipe_take_slots(p, (uint32_t)nslots, sl);
        p->api.submitted++;
        p->api.st.batches_submitted++;
    } else {
        p->api.submitting++;
    }
    if (p->plan.virtual_clock)
        pthread_cond_signal(&p->work_cv); /* wait_for_caller: the caller is back */
    pthread_mutex_unlock(&p->lock);
    b->b = bt; /* imported by check_batch */
    b->pieces = pieces;
    b->cb = cb;
    b->arg = arg;
    b->nchunks = (uint32_t)nchunks;
    b->nslots = (uint32_t)nslots;
    atomic_store_explicit(&b->chunks_left, (uint32_t)nchunks, memory_order_relaxed);
    atomic_store_explicit(&b->status, 0, memory_order_relaxed);
    atomic_store_explicit(&b->cpu_chunks, 0, memory_order_relaxed);
    b->light = light;
    b->submit_ns = now;
    b->next = NULL;
    if (direct) {
        /* From here b may already be completed and recycled. */
        ferry__pipe_issue_light(p, b, sl);
        ferry__pipe_run_queue(p, ROLE_CALLER);
        if (id != NULL)
            *id = my_id;
        return 0;
    }

    return submit_queued(p, b, my_id, id, wait);
}

int ferry__pipe_submit_internal(ferry_pipeline_t *p, const ferry_batch_t *b, ferry_done_fn cb,
                                void *arg, bool wait, const ferry__pieces_t *pieces)
{
    unsigned line = enter(p);
    int rc = submit(p, b, cb, arg, NULL, wait ? 1 : 0, pieces);
    leave(p, line);
    return rc;
}

/* FERRY_EBUSY for @fn called on one of @p's own threads (a batch callback, a prepare
 * function), where it would wait for that very thread; @why says what happened instead. */
static int refuse_own_thread(const ferry_pipeline_t *p, const char *fn, const char *why)
{
    return ferry__error(FERRY_EBUSY, "%s: called from a callback of pipeline '%s' #%u: %s", fn,
                        p->stage_name, p->serial, why);
}

int ferry_pipeline_drain(ferry_pipeline_t *p)
{
    if (p == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_drain: NULL pipeline");
    if (p->set != NULL)
        return ferry__pset_drain(p->set);
    if (p->remote != NULL)
        return ferry__remote_drain(p->remote);
    if (on_own_thread(p))
        return refuse_own_thread(p, "ferry_pipeline_drain",
                                 "it would wait for itself (batches complete on the thread "
                                 "running it)");
    if (p->gather != NULL) /* what it holds goes into the queue first */
        ferry__gather_flush(p->gather);
    pthread_mutex_lock(&p->lock);
    uint64_t target = p->api.submitted;
    atomic_fetch_add_explicit(&p->sh.drain_waiters, 1, memory_order_seq_cst);
    if (p->plan.virtual_clock)
        pthread_cond_signal(&p->work_cv); /* wait_for_caller: the caller waits now */
    while (atomic_load_explicit(&p->sh.completed, memory_order_seq_cst) < target)
        pthread_cond_wait(&p->drain_cv, &p->lock);
    atomic_fetch_sub_explicit(&p->sh.drain_waiters, 1, memory_order_seq_cst);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Refuse submits from now on: the flag, and the queue (a submit waiting for room returns
 * FERRY_ECLOSED). Under lock. */
static void shut(ferry_pipeline_t *p)
{
    if (atomic_load_explicit(&p->sh.shut, memory_order_relaxed))
        return;
    atomic_store_explicit(&p->sh.shut, true, memory_order_seq_cst);
    if (p->queue != NULL)
        ferry__bqueue_close(p->queue); /* what is queued is still issued */
}

void ferry__pipe_shut(ferry_pipeline_t *p)
{
    pthread_mutex_lock(&p->lock);
    shut(p);
    pthread_mutex_unlock(&p->lock);
}

int ferry_pipeline_close(ferry_pipeline_t *p)
{
    if (p == NULL)
        return 0;
    if (p->set != NULL)
        return ferry__pset_close(p->set);
    if (p->remote != NULL)
        return ferry__remote_close(p->remote);
    /* A gather sends what it holds first; from a callback the last slab it sends shuts. */
    if (p->gather != NULL && !ferry__gather_close(p->gather, !on_own_thread(p)))
        return refuse_own_thread(p, "ferry_pipeline_close",
                                 "it is shut to new batches, but its threads can be stopped "
                                 "only from another thread (close it again there)");
    pthread_mutex_lock(&p->lock);
    shut(p);
    if (atomic_load_explicit(&p->sh.released, memory_order_acquire)) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (on_own_thread(p)) {
        pthread_mutex_unlock(&p->lock);
        return refuse_own_thread(p, "ferry_pipeline_close",
                                 "it is shut to new batches, but its threads can be stopped "
                                 "only from another thread (close it again there)");
    }
    uint64_t completed = atomic_load_explicit(&p->sh.completed, memory_order_seq_cst);
    unsigned inside = entering(p);
    if (completed != p->api.submitted || inside > 0) {
        uint64_t n = p->api.submitted - completed;
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_close: pipeline '%s' #%u is shut to new batches, but "
                            "%llu batch(es) are still in flight and %u submit(s) in progress; "
                            "drain, then close again",
                            p->stage_name, p->serial, (unsigned long long)n, inside);
    }
    /* Another close is releasing: return once it has, so that either caller may destroy. */
    while (p->api.releasing && !atomic_load_explicit(&p->sh.released, memory_order_acquire))
        pthread_cond_wait(&p->drain_cv, &p->lock);
    bool mine = !p->api.releasing;
    p->api.releasing = true;
    pthread_mutex_unlock(&p->lock);
    if (mine) {
        release(p);
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->drain_cv);
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
}

int ferry_pipeline_destroy(ferry_pipeline_t *p)
{
    if (p == NULL)
        return 0;
    if (p->set != NULL)
        return ferry__pset_destroy(p->set);
    if (p->remote != NULL)
        return ferry__remote_destroy(p->remote);
    if (on_own_thread(p)) {
        pthread_mutex_lock(&p->lock);
        shut(p);
        pthread_mutex_unlock(&p->lock);
        return refuse_own_thread(p, "ferry_pipeline_destroy",
                                 "it is shut to new batches, but it can be freed only from "
                                 "another thread");
    }
    for (;;) {
        int rc = ferry_pipeline_close(p); /* shuts it first: the batches in flight are all */
        if (rc != FERRY_EBUSY)
            break;
        pthread_mutex_lock(&p->lock); /* submits still inside their call */
        while (entering(p) > 0)
            pthread_cond_wait(&p->drain_cv, &p->lock);
        pthread_mutex_unlock(&p->lock);
        ferry_pipeline_drain(p);
    }
    ferry__rt_child_remove(p->dev->rt, &p->child);
    free_husk(p);
    FERRY_PROF_LOG("pipeline destroyed, the process so far");
    return 0;
}

/* ---- trace export (monitor/trace.c writes it) ------------------------------------------------ */
