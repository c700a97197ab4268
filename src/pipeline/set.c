/* A pipeline over a set of devices. Each device gets its own pipeline (everything a pipeline
 * does on one device: streams, slots, faults, the ladder, its CPU fallback), made from the
 * set's config. A batch is cut into parts, one per device at most, contiguous and whole
 * chunks, sized so that every device is expected to finish at the same time: a device's
 * expected start is the bytes it holds over its rate, and the batch fills the devices from the
 * earliest up (water filling). A device's rate comes from the performance model
 * (sched/perfmodel.h): the service times of its recent parts (from the later of a part's
 * submit and the device's previous completion to its own, on the device's clock), trimmed so
 * that a spike neither rules nor erases it. Before a device has measured a part it is taken to
 * be as fast as the median of those that have (or all equal). Option perf_model names a file
 * the model is loaded from when the set is made and saved to when it closes.
 *
 * The parts' callbacks (on the devices' completion threads) count down their batch; the last
 * one hands it to the set's own completion thread, which calls the caller's callback, so that a
 * set's callbacks run one at a time, on one thread, as a pipeline's do. The set bounds the
 * batches in flight (queue_depth) and every device's pipeline has a queue that deep, so a part
 * is never refused for room. How a batch is cut (the rates, the CPU's probe, water filling) is
 * set_plan.c's. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "core/runtime.h"
#include "pipeline/gather.h"
#include "pipeline/set.h"
#include "pipeline/set_internal.h"

#define PSET_DEFAULT_INFLIGHT_PER_DEVICE 16
/* The CPU's chunk when the set has no GPU to take it from. */
#define PSET_CPU_CHUNK (4u << 20)

/* ---- completion ------------------------------------------------------------------------- */

static bool gpu_ended(const ferry_pipeline_t *pl)
{
    return pl == NULL || atomic_load_explicit(&pl->sh.gpu_lost, memory_order_acquire) ||
           atomic_load_explicit(&pl->sh.hang_lost, memory_order_acquire);
}

/* Device @i leaves the set when its GPU path has ended: no new parts. Under the set's lock. */
static void check_left(struct ferry__pset *s, unsigned i)
{
    pset_dev_t *d = &s->d[i];
    ferry_pipeline_t *pl = d->pl;
    if (d->left || pl == NULL || !gpu_ended(pl))
        return;
    d->left = true;
    ferry__perf_exclude(s->model, (int)i, true);
    snprintf(d->why, sizeof(d->why), "%s",
             atomic_load_explicit(&pl->sh.hang_lost, memory_order_acquire)
                 ? "a kernel hung: its GPU path ended"
                 : "a sticky error: its GPU path ended");
    ferry_log(FERRY_LOG_WARN, "pipeline", "device %d (%s) left the set: %s", d->index, d->name,
              d->why);
}

/* Part @pt ended: count it, learn from it, and hand its batch on when it was the last. */
static void part_end(struct ferry__pset *s, pset_part_t *pt, const ferry_batch_result_t *r,
                     int status)
{
    pset_batch_t *b = pt->b;
    pset_dev_t *d = &s->d[pt->dev];
    ferry_batch_where_t where = r != NULL ? r->where : FERRY_DONE_FAILED;
    bool heap = pt->heap;
    pthread_mutex_lock(&s->lock);
    ferry__pset_hold(s, pt->dev, -(int64_t)(pt->bytes - pt->stolen), r != NULL ? r->done_ns : 0);
    size_t ran = pt->bytes - pt->moved - pt->stolen; /* what this device did of it */
    if (r != NULL && status == 0) /* the span its device spent on it: from its start or the
                                   * device's previous part, whichever was later */
        ferry__guard_part(&s->guard, ran,
                          r->submit_ns > d->last_done_ns ? r->submit_ns : d->last_done_ns,
                          r->done_ns);
    if (r != NULL && status == 0 && (ran > 0 || pt->bytes == 0)) {
        d->bytes += ran;
        d->parts++;
        d->parts_cpu += where == FERRY_DONE_CPU && d->cpu == NULL; /* a GPU's fallback */
        uint64_t from = r->submit_ns > d->last_done_ns ? r->submit_ns : d->last_done_ns;
        /* a GPU's parts of less than a chunk are mostly its fixed costs; the CPU has none
         * worth the name; a part partly moved away measures nothing */
        if (where == (d->cpu != NULL ? FERRY_DONE_CPU : FERRY_DONE_GPU) && pt->moved == 0 &&
            (ran >= s->chunk || (d->cpu != NULL && ran > 0)) && r->done_ns > from) {
            ferry__perf_record(s->model, (int)pt->dev, 0, ran, r->done_ns - from);
            d->last_bytes = ran;
        }
        /* a simulated device's backlog is what it was given at the rates expected then: what
         * it took instead corrects it (a rate that changed, the CPU's modelled clock) */
        if (s->virt && r->done_ns > from)
            d->vbusy += (double)(r->done_ns - from) - pt->plan_ns;
        if (r->done_ns > d->last_done_ns)
            d->last_done_ns = r->done_ns;
    }
    check_left(s, pt->dev);
    if (status != 0 && b->status == 0)
        b->status = status;
    if (d->cpu != NULL && where == FERRY_DONE_CPU && r != NULL && s->trace)
        ferry__pset_cpu_op(s, pt, r->submit_ns, r->done_ns);
    if (d->cpu != NULL && where == FERRY_DONE_CPU)
        b->cpu_parts++; /* the CPU device's own work, not a fallback: see completion_main */
    else if (where > b->where && ran > 0) /* a part moved whole says nothing of where it ran */
        b->where = where;
    if (r != NULL) {
        b->chunks += r->chunks > pt->moved_chunks ? r->chunks - pt->moved_chunks : 0;
        if (b->submit_ns == 0 || r->submit_ns < b->submit_ns)
            b->submit_ns = r->submit_ns;
        if (r->done_ns > b->done_ns)
            b->done_ns = r->done_ns;
        if (r->done_ns > r->submit_ns && r->done_ns - r->submit_ns > b->lat_ns)
            b->lat_ns = r->done_ns - r->submit_ns;
    }
    if (--b->left == 0) {
        b->next = NULL;
        if (s->done_tail != NULL)
            s->done_tail->next = b;
        else
            s->done_head = b;
        s->done_tail = b;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->lock);
    if (heap)
        free(pt);
}

static int submit_part(struct ferry__pset *s, pset_part_t *pt);

/* Device @g (a GPU) holds no work now: it takes the chunks the CPU device has not started of
 * what the CPU holds, as much as makes both expected to finish together (the planner's
 * backlogs and rates, set_plan.c), so that a CPU slower than planned does not leave the GPUs
 * idle while it works through its queue (the CPU once held 240 ms of work where the plan
 * meant 60). The stolen chunks are a part of their batch of their own on @g; the CPU's part
 * ends without them. A GPU's queued work stays where it is: the devices' backlogs are even by
 * the plan, and a GPU that falls behind it is corrected by the next batches' shares.
 *
 * On real clocks only: simulated devices each keep a virtual clock, and the CPU device's
 * threads run its chunks in real time, ahead of or behind the simulated GPUs as this host
 * happens to run them; what a device holds in real time says nothing of what it would hold on
 * its clock (the planner's backlogs there are device time: set_plan.c). */
static void steal_for(struct ferry__pset *s, unsigned g)
{
    if (s->virt)
        return;
    pset_part_t *np =
        NULL; /* made only when there is something to take: every GPU part ends here */
    double r[FERRY_MAX_DEVICE_SET];
    pthread_mutex_lock(&s->lock);
    int cpu = -1;
    for (unsigned i = 0; i < s->n; i++)
        if (s->d[i].cpu != NULL && !s->d[i].left && s->d[i].held > 0)
            cpu = (int)i;
    size_t off = 0, bytes = 0;
    void *arg = NULL;
    if (cpu >= 0 && s->d[g].held == 0 && !s->d[g].left && !gpu_ended(s->d[g].pl)) {
        ferry__pset_plan_rates(s, s->chunk, r);
        pset_dev_t *c = &s->d[cpu];
        /* x bytes to @g: (held - x) / r[cpu] == x / r[g], both then end together */
        double x = (double)c->held / r[cpu] / (1 / r[cpu] + 1 / r[g]);
        if (x >= (double)s->chunk / 2 && (np = calloc(1, sizeof(*np))) != NULL)
            bytes = ferry__cpudev_steal(c->cpu, (size_t)x, &arg, &off);
    }
    if (bytes == 0) {
        pthread_mutex_unlock(&s->lock);
        free(np);
        return;
    }
    pset_part_t *pt = arg;
    *np = (pset_part_t){.b = pt->b,
                        .dev = g,
                        .off = pt->off + off,
                        .bytes = bytes,
                        .plan_ns = (double)bytes / r[g],
                        .heap = true};
    pt->b->left++; /* @pt still holds a chunk of the CPU's: its batch cannot end under it */
    pt->stolen += bytes;
    double back = (double)bytes / r[cpu];
    pt->plan_ns -= back < pt->plan_ns ? back : pt->plan_ns;
    s->d[g].bytes_stolen += bytes;
    ferry__pset_hold(s, (unsigned)cpu, -(int64_t)bytes, 0);
    ferry__pset_hold(s, g, (int64_t)bytes, 0);
    pthread_mutex_unlock(&s->lock);
    int rc = submit_part(s, np);
    if (rc != 0) { /* the GPU refused it (closed, failed): the CPU runs it after all */
        pthread_mutex_lock(&s->lock);
        ferry__pset_hold(s, g, -(int64_t)bytes, 0);
        s->d[g].bytes_stolen -= bytes;
        np->dev = (unsigned)cpu;
        np->plan_ns = back;
        ferry__pset_hold(s, (unsigned)cpu, (int64_t)bytes, 0);
        pthread_mutex_unlock(&s->lock);
        rc = submit_part(s, np);
    }
    if (rc != 0) /* no memory for the CPU's part record either: the batch fails, once */
        part_end(s, np, NULL, rc);
}

static void part_done(const ferry_batch_result_t *r, void *arg)
{
    pset_part_t *pt = arg;
    struct ferry__pset *s = pt->b->s;
    unsigned dev = pt->dev;
    bool gpu = s->d[dev].cpu == NULL;
    part_end(s, pt, r, r->status); /* @pt may be gone after it */
    if (gpu)
        steal_for(s, dev);
}

/* The CPU's probe came back: its time is the CPU's first sample, and on a virtual clock its
 * backlog (its threads were busy with it). */
static void probe_done(const ferry_batch_result_t *r, void *arg)
{
    struct ferry__pset *s = arg;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->n; i++) {
        pset_dev_t *d = &s->d[i];
        if (d->cpu == NULL)
            continue;
        d->probing = false;
        if (r->status != 0 || r->done_ns <= r->submit_ns)
            break;
        uint64_t from = r->submit_ns > d->last_done_ns ? r->submit_ns : d->last_done_ns;
        if (r->done_ns > from &&
            ferry__perf_record(s->model, (int)i, 0, r->bytes, r->done_ns - from) == 0) {
            d->last_bytes = r->bytes;
            d->probed = r->bytes > d->probed ? r->bytes : d->probed;
        }
        if (s->virt && r->done_ns > from)
            d->vbusy += (double)(r->done_ns - from);
        if (r->done_ns > d->last_done_ns)
            d->last_done_ns = r->done_ns;
    }
    pthread_mutex_unlock(&s->lock);
    free((void *)r->in); /* the copy probe_start made, its output after it */
}

/* Give the CPU device @dev a copy of the last @bytes of @in (zeros for a batch that a
 * prepare fills: the CPU functions' time does not depend on the values), to time; nothing
 * waits for it. Not given: the CPU takes no work until a later batch probes it again. */
static void probe_start(struct ferry__pset *s, unsigned dev, const ferry_batch_t *in, size_t bytes)
{
    unsigned char *buf = calloc(2, bytes);
    int rc = FERRY_ENOMEM;
    if (buf != NULL) {
        if (in->in != NULL)
            memcpy(buf, (const unsigned char *)in->in + (in->bytes - bytes), bytes);
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = buf;
        b.out = buf + bytes;
        b.bytes = bytes;
        b.user = in->user;
        rc = ferry__cpudev_submit(s->d[dev].cpu, &b, UINT64_MAX, in->bytes - bytes, true,
                                  probe_done, s);
    }
    if (rc != 0) {
        free(buf);
        pthread_mutex_lock(&s->lock);
        s->d[dev].probing = false;
        pthread_mutex_unlock(&s->lock);
    }
}

/* A part's chunks are filled by the caller's prepare at their offsets in the whole batch. */
static int part_prepare(void *slot, size_t bytes, size_t offset, void *arg)
{
    pset_part_t *pt = arg;
    return pt->b->batch.prepare(slot, bytes, pt->off + offset, pt->b->batch.prepare_arg);
}

/* Hand part @pt to its device's pipeline. */
static int submit_part(struct ferry__pset *s, pset_part_t *pt)
{
    const ferry_batch_t *in = &pt->b->batch;
    ferry_batch_t sub = FERRY_BATCH_INIT;
    sub.bytes = pt->bytes;
    sub.user = in->user;
    if (in->in != NULL)
        sub.in = (const unsigned char *)in->in + pt->off;
    if (in->out != NULL)
        sub.out = (unsigned char *)in->out + pt->off;
    if (in->prepare != NULL) {
        sub.prepare = part_prepare;
        sub.prepare_arg = pt;
    }
    if (s->d[pt->dev].cpu != NULL)
        return ferry__cpudev_submit(s->d[pt->dev].cpu, &sub, pt->b->id, pt->off, false, part_done,
                                    pt);
    uint64_t sub_id = 0;
    int rc = ferry_pipeline_submit(s->d[pt->dev].pl, &sub, part_done, pt, &sub_id);
    if (rc == 0 && s->trace) {
        pthread_mutex_lock(&s->lock);
        ferry__pset_map_part(s, pt, sub_id);
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

/* A device's GPU path ended (its pipeline's handback, pipeline_internal.h): [off, off + bytes)
 * of part @arg goes, as a part of its own, to the device expected to finish it first among
 * those still in the set, so that a device lost mid-run costs the set that device alone and
 * not the CPU's rate for what it held. False when no device is left (or the part was
 * refused): the lost device's CPU path runs it. On the lost device's issuing or completion
 * thread; the submit may wait for room in the other device's queue, which drains on its own. */
static bool part_handback(struct ferry__pset *s, void *arg, size_t off, size_t bytes)
{
    pset_part_t *pt = arg;
    pset_batch_t *b = pt->b;
    pset_part_t *np = calloc(1, sizeof(*np));
    if (np == NULL)
        return false;
    double r[FERRY_MAX_DEVICE_SET];
    pthread_mutex_lock(&s->lock);
    check_left(s, pt->dev);
    ferry__pset_plan_rates(s, bytes > s->chunk ? bytes : s->chunk, r);
    unsigned best = s->n;
    double tbest = 0;
    for (unsigned i = 0; i < s->n; i++) {
        if (s->d[i].left || gpu_ended(s->d[i].pl))
            continue;
        double t = (s->virt ? s->d[i].vbusy : (double)s->d[i].held / r[i]) + (double)bytes / r[i];
        if (best == s->n || t < tbest) {
            best = i;
            tbest = t;
        }
    }
    if (best == s->n || s->released) {
        pthread_mutex_unlock(&s->lock);
        free(np);
        return false;
    }
    *np = (pset_part_t){.b = b, .dev = best, .off = pt->off + off, .bytes = bytes, .heap = true};
    uint32_t chunks = (uint32_t)((bytes + s->chunk - 1) / s->chunk);
    b->left++; /* @pt has not ended: the batch cannot complete under it */
    pt->moved += bytes;
    pt->moved_chunks += chunks;
    s->d[pt->dev].bytes_moved += bytes;
    ferry__pset_hold(s, best, (int64_t)bytes, 0);
    s->d[best].vbusy += (double)bytes / r[best];
    pthread_mutex_unlock(&s->lock);
    int rc = submit_part(s, np);
    if (rc == 0)
        return true;
    pthread_mutex_lock(&s->lock);
    b->left--;
    pt->moved -= bytes;
    pt->moved_chunks -= chunks;
    s->d[pt->dev].bytes_moved -= bytes;
    ferry__pset_hold(s, best, -(int64_t)bytes, 0);
    s->d[best].vbusy -= (double)bytes / r[best];
    pthread_mutex_unlock(&s->lock);
    free(np);
    return false;
}

/* The set's completion thread: the callers' callbacks, one at a time. */
static void *completion_main(void *arg)
{
    struct ferry__pset *s = arg;
    ferry__pipe_own_thread = s->h;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->done_head == NULL && !s->stop)
            pthread_cond_wait(&s->cv, &s->lock);
        if (s->done_head == NULL)
            break;
        pset_batch_t *b = s->done_head;
        s->done_head = b->next;
        if (s->done_head == NULL)
            s->done_tail = NULL;
        pthread_mutex_unlock(&s->lock);
        ferry_batch_result_t res = {.id = b->id,
                                    .status = b->status,
                                    .where = b->status != 0              ? FERRY_DONE_FAILED
                                             : b->cpu_parts == b->nparts ? FERRY_DONE_CPU
                                                                         : b->where,
                                    .in = b->batch.in,
                                    .out = b->batch.out,
                                    .bytes = b->batch.bytes,
                                    .chunks = b->chunks,
                                    .submit_ns = b->submit_ns,
                                    .done_ns = b->done_ns};
        b->cb(&res, b->arg);
        ferry__lat_hist_observe(&s->lat, b->lat_ns);
        pthread_mutex_lock(&s->lock);
        if (ferry__guard_done(&s->guard, b->status == 0))
            ferry_log(FERRY_LOG_INFO, "pipeline", "the CPU device %s", s->guard.note);
        s->done_gpu += res.where == FERRY_DONE_GPU;
        s->done_cpu += res.where == FERRY_DONE_CPU;
        s->failed += res.where == FERRY_DONE_FAILED;
        s->inflight--;
        s->completed++;
        pthread_cond_broadcast(&s->cv);
        free(b);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- the calls -------------------------------------------------------------------------- */

static void set_free(struct ferry__pset *s)
{
    for (unsigned i = 0; s->d != NULL && i < s->n; i++)
        ferry__cpudev_destroy(s->d[i].cpu);
    ferry__lat_hist_unregister(&s->lat);
    ferry__perf_destroy(s->model);
    for (unsigned i = 0; s->d != NULL && i < s->n; i++)
        free(s->d[i].map);
    free(s->d);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->lock);
    free(s->h);
    free(s);
}

static bool child_is_live(ferry__rt_child_t *c, char *name, size_t len)
{
    ferry_pipeline_t *h = (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
    snprintf(name, len, "'%s' #%u (a set of %u devices)", h->stage_name, h->serial, h->set->n);
    pthread_mutex_lock(&h->set->lock);
    bool live = !h->set->released;
    pthread_mutex_unlock(&h->set->lock);
    return live;
}

static void child_destroy(ferry__rt_child_t *c)
{
    ferry_pipeline_t *h = (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
    set_free(h->set); /* its devices' pipelines are children of the runtime too */
}

/* The devices of @cfg, checked: all of one runtime, none twice, at most FERRY_MAX_DEVICE_SET. */
static int check_devices(const ferry_pipeline_config_t *cfg)
{
    if (cfg->device != NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->device and cfg->devices "
                                          "are both set; a set pipeline takes devices only");
    if (cfg->devices == NULL || cfg->ndevices > FERRY_MAX_DEVICE_SET)
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_create: cfg->devices must hold 1 to %d devices "
                            "(got %s, ndevices %u)",
                            FERRY_MAX_DEVICE_SET, cfg->devices ? "a list" : "NULL", cfg->ndevices);
    for (unsigned i = 0; i < cfg->ndevices; i++) {
        ferry_device_t *d = cfg->devices[i];
        if (d == NULL)
            return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->devices[%u] is NULL", i);
        if (d->rt != cfg->devices[0]->rt)
            return ferry__error(FERRY_EINVAL,
                                "ferry_pipeline_create: cfg->devices[%u] is of "
                                "another runtime than cfg->devices[0]",
                                i);
        for (unsigned j = 0; j < i; j++)
            if (cfg->devices[j] == d)
                return ferry__error(FERRY_EINVAL,
                                    "ferry_pipeline_create: cfg->devices[%u] and [%u] are the "
                                    "same device",
                                    j, i);
    }
    return 0;
}

/* The performance model: a slot per device, named by the device (its PCI address, or its
 * index on the simulator) so that a saved model is applied to the same GPUs only; loaded from
 * option perf_model's file when it exists. */
static int model_open(struct ferry__pset *s, ferry_runtime_t *rt)
{
    int rc = ferry__perf_create(&s->model);
    for (unsigned i = 0; rc == 0 && i < s->n; i++) {
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        ferry_device_props(s->d[i].dev, &p);
        char name[FERRY_PERF_NAME + 64]; /* truncated to FERRY_PERF_NAME by the model */
        if (p.index == FERRY_DEVICE_CPU) /* its rate depends on its threads */
            snprintf(name, sizeof(name), "cpu %u threads", ferry__cpudev_lanes(s->d[i].cpu));
        else if (p.pci_bus_id[0])
            snprintf(name, sizeof(name), "%.46s %.16s", p.name, p.pci_bus_id);
        else
            snprintf(name, sizeof(name), "%.56s #%d", p.name, p.index);
        rc = ferry__perf_name_device(s->model, (int)i, name);
    }
    if (rc == 0)
        rc = ferry__perf_name_stage(s->model, 0, s->h->stage_name);
    const char *path = rt->opts != NULL ? ferry__opt_str(rt->opts, FERRY__OPT_perf_model) : "";
    if (rc == 0 && path != NULL && path[0] != '\0') {
        snprintf(s->model_path, sizeof(s->model_path), "%s", path);
        unsigned skipped = 0;
        if (access(path, F_OK) == 0)
            rc = ferry__perf_load_file(s->model, path, &skipped);
        if (rc == 0 && skipped > 0)
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "perf_model %s: %u entries of other devices or stages not applied", path,
                      skipped);
    }
    /* a CPU decided on by an earlier run's trial (set_guard.h) starts decided */
    ferry_perf_verdict_t v;
    for (unsigned i = 0; rc == 0 && i < s->n; i++)
        if (s->d[i].cpu != NULL && ferry__perf_verdict(s->model, (int)i, 0, &v) == 1) {
            const char *base = strrchr(path, '/');
            ferry__guard_saved(&s->guard, v.keep, v.with_gbps, v.without_gbps,
                               base != NULL ? base + 1 : path);
            ferry_log(FERRY_LOG_INFO, "pipeline", "the CPU device %s", s->guard.note);
        }
    return rc;
}

/* The CPU device's threads (option cpu_threads; 0: half the host's threads, at least 1, the
 * others being for staging, verification and completions) and, with simulated GPUs, the rate
 * it may move bytes through the modelled host's memory: the host's copy rate, and at most half
 * of what the host's memory has left beyond the GPUs' copies at their links' rates both ways (a
 * CPU stage reads and writes each byte). The simulated GPUs and the CPU keep clocks of their
 * own, so this is a static share, not a contention model (docs/devices.md). */
static void set_cpu_model(struct ferry__pset *s, int first_gpu, unsigned *lanes, double *mem)
{
    unsigned want = (unsigned)ferry__opt_i64(s->rt->opts, FERRY__OPT_cpu_threads);
    ferry_device_t *g = first_gpu >= 0 ? s->d[first_gpu].dev : NULL;
    if (g == NULL && s->virt && ferry_device_get(s->rt, 0, &g) != 0)
        g = NULL; /* the modelled host is the first simulated device's */
    ferry_host_props_t h = FERRY_HOST_PROPS_INIT;
    if (g != NULL)
        ferry_device_host(g, &h);
    else
        h.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    *lanes = want ? want : h.threads > 1 ? (unsigned)h.threads / 2 : 1;
    *mem = 0;
    if (!s->virt || !h.modelled)
        return;
    double cap = h.copy_gbps;
    if (h.memory_gbps > 0) {
        double left = h.memory_gbps;
        for (unsigned i = 0; i < s->n; i++)
            if (s->d[i].index != FERRY_DEVICE_CPU)
                left -= 2 * s->d[i].link_gbps;
        left = left > 0.1 * h.memory_gbps ? left : 0.1 * h.memory_gbps;
        cap = cap > 0 && cap < left / 2 ? cap : left / 2;
    }
    *mem = cap;
}

/* The chunk size, the stage's name and the handle's serial from the first GPU's pipeline
 * (@first_gpu; -1: the CPU alone, whose chunk is the config's, the option's or
 * PSET_CPU_CHUNK, at the stage's granularity); then the CPU device, when the set has it. */
static int set_cpu_open(struct ferry__pset *s, const ferry_pipeline_config_t *cfg, int first_gpu)
{
    const ferry_options_t *o = s->rt->opts;
    ferry_stage_t st;
    int rc = cfg->stage != NULL
                 ? ferry__config_import(&st, sizeof(st), cfg->stage, &ferry__cfg_stage, o)
                 : ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->stage is NULL");
    if (rc != 0)
        return rc;
    s->gran = st.granularity > 1 ? st.granularity : 1;
    if (first_gpu >= 0) {
        ferry_pipeline_t *pl = s->d[first_gpu].pl;
        ferry_pipeline_stats_t ps = FERRY_PIPELINE_STATS_INIT;
        ferry_pipeline_stats(pl, &ps);
        s->chunk = ps.chunk_bytes > 0 ? ps.chunk_bytes : 1;
        snprintf(s->h->stage_name, sizeof(s->h->stage_name), "%s", pl->stage_name);
        s->h->serial = pl->serial;
    } else {
        size_t c =
            cfg->chunk_bytes ? cfg->chunk_bytes : (size_t)ferry__opt_i64(o, FERRY__OPT_chunk_bytes);
        c = c ? c : PSET_CPU_CHUNK;
        size_t g = st.granularity > 1 ? st.granularity : 1;
        s->chunk = c >= g ? c - c % g : g;

        snprintf(s->h->stage_name, sizeof(s->h->stage_name), "%s", st.name ? st.name : "stage");
    }
    for (unsigned i = 0; rc == 0 && i < s->n; i++) {
        if (s->d[i].index != FERRY_DEVICE_CPU)
            continue;
        unsigned lanes = 0;
        double mem = 0;
        set_cpu_model(s, first_gpu, &lanes, &mem);
        int nice = (int)ferry__opt_i64(s->rt->opts, FERRY__OPT_cpu_nice);
        rc = ferry__cpudev_create(&st, s->chunk, lanes, s->virt, mem, nice, &s->d[i].cpu);
        if (rc == 0)
            snprintf(s->d[i].name, sizeof(s->d[i].name), "CPU (%u threads)", lanes);
    }
    return rc;
}

int ferry__pset_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out)
{
    int rc = check_devices(cfg);
    if (rc != 0)
        return rc;
    ferry_runtime_t *rt = cfg->devices[0]->rt;
    if (ferry__gather_wanted(cfg, rt->opts)) /* refused, not ignored */
        return ferry__error(FERRY_EINVAL, "gather_bytes: not available for a set of devices yet "
                                          "(0: off)");
    struct ferry__pset *s = calloc(1, sizeof(*s));
    ferry_pipeline_t *h = calloc(1, sizeof(*h));
    pset_dev_t *d = calloc(cfg->ndevices, sizeof(*d));
    if (s == NULL || h == NULL || d == NULL) {
        free(s);
        free(h);
        free(d);
        return ferry__rt_fail(rt, ferry__error(FERRY_ENOMEM,
                                               "ferry_pipeline_create: a set of "
                                               "%u devices",
                                               cfg->ndevices));
    }
    s->h = h;
    s->rt = rt;
    s->d = d;
    s->n = cfg->ndevices;
    h->set = s;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->max_inflight =
        cfg->queue_depth > 0 ? cfg->queue_depth : PSET_DEFAULT_INFLIGHT_PER_DEVICE * cfg->ndevices;
    ferry_pipeline_config_t one = *cfg;
    one.devices = NULL;
    one.ndevices = 0;
    one.queue_depth = s->max_inflight; /* a part is never refused for room */
    one.nonblocking = 0;
    s->virt = (rt->ops->caps & FERRY_BE_CAP_VIRTUAL_CLOCK) != 0;
    s->trace = ferry__opt_i64(rt->opts, FERRY__OPT_trace) != 0;
    s->trace_chunks = (uint64_t)ferry__opt_i64(rt->opts, FERRY__OPT_trace_chunks);
    int first_gpu = -1;
    for (unsigned i = 0; i < s->n && rc == 0; i++) {
        one.device = cfg->devices[i];
        d[i].dev = cfg->devices[i];
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        ferry_device_props(d[i].dev, &p);
        d[i].index = p.index;
        d[i].link_gbps = p.link_gbps;
        snprintf(d[i].name, sizeof(d[i].name), "%s", p.name);
        if (p.index == FERRY_DEVICE_CPU)
            continue; /* made below, once the chunk size is known */
        first_gpu = first_gpu < 0 ? (int)i : first_gpu;
        rc = ferry_pipeline_create(&one, &d[i].pl);
        if (rc == 0) {
            d[i].pl->owner = s;
            d[i].pl->handback = part_handback;
        }
    }
    if (rc == 0)
        rc = set_cpu_open(s, cfg, first_gpu);
    if (rc == 0)
        rc = model_open(s, rt);
    if (rc == 0) {
        h->dev = cfg->devices[first_gpu >= 0 ? first_gpu : 0];
        /* the caller's nonblocking, or the option's (the devices' pipelines always block) */
        ferry_pipeline_config_t full;
        if (ferry__config_import(&full, sizeof(full), cfg, &ferry__cfg_pipeline, rt->opts) == 0)
            s->nonblocking = full.nonblocking == 1;
        rc = ferry__thread_start(&s->thread, &s->thread_started, completion_main, s, "ferry-set");
        if (rc != 0)
            rc = ferry__error(FERRY_ENOMEM, "ferry_pipeline_create: cannot start the set's "
                                            "completion thread");
    }
    if (rc != 0) {
        for (unsigned i = 0; i < s->n; i++)
            if (d[i].pl != NULL)
                ferry_pipeline_destroy(d[i].pl);
        set_free(s);
        return ferry__rt_fail(rt, rc);
    }
    ferry__lat_hist_register(&s->lat, h);
    h->child.is_live = child_is_live;
    h->child.destroy = child_destroy;
    ferry__rt_child_add(rt, &h->child);
    *out = h;
    return 0;
}

int ferry__pset_submit(struct ferry__pset *s, const ferry_batch_t *batch, ferry_done_fn cb,
                       void *arg, uint64_t *id)
{
    if (batch == NULL || cb == NULL || batch->size < offsetof(ferry_batch_t, prepare_arg))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL batch or callback, or "
                                          "the batch's size not set (use FERRY_BATCH_INIT)");
    ferry_batch_t in = FERRY_BATCH_INIT;
    memcpy(&in, batch, batch->size < sizeof(in) ? batch->size : sizeof(in));
    in.size = sizeof(in);
    if (in.bytes > 0 && (in.in == NULL) == (in.prepare == NULL))
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_submit: a batch of %zu bytes needs "
                            "exactly one of in and prepare",
                            in.bytes);
    bool own = on_own_thread(s->h);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->shut) {
            pthread_mutex_unlock(&s->lock);
            return ferry__error(FERRY_ECLOSED,
                                "ferry_pipeline_submit: pipeline '%s' #%u is "
                                "closed",
                                s->h->stage_name, s->h->serial);
        }
        if (s->inflight < s->max_inflight)
            break;
        if (s->nonblocking || own) {
            s->full_eagain++;
            unsigned n = s->inflight; /* read under the lock, for the message */
            pthread_mutex_unlock(&s->lock);
            return ferry__error(own && !s->nonblocking ? FERRY_EBUSY : FERRY_EAGAIN,
                                "ferry_pipeline_submit: the set's %u batches in flight are at "
                                "its queue depth%s",
                                n, own ? " (from its own callback: cannot wait)" : "");
        }
        s->full_waits++;
        pthread_cond_wait(&s->cv, &s->lock);
    }
    pset_part_t parts[FERRY_MAX_DEVICE_SET];
    unsigned probe_dev = 0;
    size_t probe_bytes = 0;
    unsigned np = ferry__pset_plan_parts(s, in.bytes, parts, &probe_dev, &probe_bytes);
    pset_batch_t *b = calloc(1, sizeof(*b) + np * sizeof(pset_part_t));
    if (b == NULL) {
        for (unsigned i = 0; i < np; i++)
            ferry__pset_hold(s, parts[i].dev, -(int64_t)parts[i].bytes, 0);
        s->d[probe_dev].probing &= probe_bytes == 0;
        pthread_mutex_unlock(&s->lock);
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_submit: a batch record");
    }
    s->inflight++;
    s->submitted++;
    s->entering++;
    b->s = s;
    b->id = s->next_id++; /* from 0, as a pipeline's */
    b->batch = in;
    b->cb = cb;
    b->arg = arg;
    b->nparts = b->left = np;
    b->where = FERRY_DONE_GPU;
    for (unsigned i = 0; i < np; i++) {
        b->parts[i] = parts[i];
        b->parts[i].b = b;
    }
    pthread_mutex_unlock(&s->lock);
    if (id != NULL)
        *id = b->id;
    if (probe_bytes > 0) /* first: the CPU holds no part while it probes */
        probe_start(s, probe_dev, &in, probe_bytes);
    for (unsigned i = 0; i < np; i++) {
        int rc = submit_part(s, &b->parts[i]);
        if (rc != 0) /* not taken: the part fails, the batch with it, its callback still runs */
            part_end(s, &b->parts[i], NULL, rc);
    }

    pthread_mutex_lock(&s->lock);
    if (--s->entering == 0)
        pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* A call that would wait for the set's own thread, made on it: refused with @why. */
static int refuse_own(const struct ferry__pset *s, const char *fn, const char *why)
{
    return ferry__error(FERRY_EBUSY, "%s: called from a callback of pipeline '%s' #%u: %s", fn,
                        s->h->stage_name, s->h->serial, why);
}

int ferry__pset_drain(struct ferry__pset *s)
{
    if (on_own_thread(s->h))
        return refuse_own(s, "ferry_pipeline_drain", "it would wait for itself");
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->submitted;
    pthread_mutex_unlock(&s->lock);
    /* the devices' own drains first: a simulated device's clock runs on freely while its
     * caller waits in one */
    for (unsigned i = 0; i < s->n; i++)
        if (s->d[i].pl != NULL)
            ferry_pipeline_drain(s->d[i].pl);
        else if (s->d[i].cpu != NULL)
            ferry__cpudev_drain(s->d[i].cpu);
    pthread_mutex_lock(&s->lock);
    while (s->completed < target)
        pthread_cond_wait(&s->cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int ferry__pset_close(struct ferry__pset *s)
{
    pthread_mutex_lock(&s->lock);
    s->shut = true;
    pthread_cond_broadcast(&s->cv); /* submits waiting for room: closed */
    if (s->released) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    if (on_own_thread(s->h)) {
        pthread_mutex_unlock(&s->lock);
        return refuse_own(s, "ferry_pipeline_close",
                          "it is shut to new batches; close it again from another thread");
    }
    if (s->inflight > 0 || s->entering > 0) {
        unsigned n = s->inflight, e = s->entering;
        pthread_mutex_unlock(&s->lock);
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_close: pipeline '%s' #%u is shut to new batches, but "
                            "%u batch(es) are still in flight and %u submit(s) in progress; "
                            "drain, then close again",
                            s->h->stage_name, s->h->serial, n, e);
    }
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    bool join = s->thread_started;
    s->thread_started = false;
    pthread_mutex_unlock(&s->lock);
    if (join)
        pthread_join(s->thread, NULL);
    /* every part's callback has returned once its pipeline drains */
    for (unsigned i = 0; i < s->n; i++) {
        if (s->d[i].cpu != NULL)
            ferry__cpudev_drain(s->d[i].cpu);
        if (s->d[i].pl == NULL)
            continue;
        ferry_pipeline_drain(s->d[i].pl);
        ferry_pipeline_close(s->d[i].pl);
    }
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    ferry__pset_fill_stats(s, &st);
    for (unsigned i = 0; i < s->n; i++) /* the guard's own decision goes with the model */
        if (s->d[i].cpu != NULL && s->guard.trials > 0 && s->guard.gbps_without > 0 &&
            (s->guard.state == FERRY__GUARD_KEEP || s->guard.state == FERRY__GUARD_BENCH))
            ferry__perf_set_verdict(s->model, (int)i, 0, s->guard.state == FERRY__GUARD_KEEP,
                                    s->guard.gbps_with, s->guard.gbps_without);
    if (s->model_path[0] != '\0' && ferry__perf_save_file(s->model, s->model_path) != 0)
        ferry_log(FERRY_LOG_WARN, "pipeline", "perf_model: %s", ferry_last_error());
    pthread_mutex_lock(&s->lock);
    s->final = st;
    s->final_ready = true;
    s->released = true;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int ferry__pset_destroy(struct ferry__pset *s)
{
    if (on_own_thread(s->h)) {
        pthread_mutex_lock(&s->lock);
        s->shut = true;
        pthread_mutex_unlock(&s->lock);
        return refuse_own(s, "ferry_pipeline_destroy",
                          "it is shut to new batches, but it can be freed only from another "
                          "thread");
    }
    while (ferry__pset_close(s) == FERRY_EBUSY) {
        pthread_mutex_lock(&s->lock);
        while (s->entering > 0)
            pthread_cond_wait(&s->cv, &s->lock);
        pthread_mutex_unlock(&s->lock);
        ferry__pset_drain(s);
    }
    for (unsigned i = 0; i < s->n; i++)
        if (s->d[i].pl != NULL)
            ferry_pipeline_destroy(s->d[i].pl);
    ferry__rt_child_remove(s->rt, &s->h->child);
    set_free(s);
    return 0;
}
