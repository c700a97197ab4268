/* The simulated device's discrete-event core: hardware queues (connections) that dispatch their
 * heads in order, FIFO copy engines per direction sharing the PCIe link as a fluid, and a pool of
 * SM slots that starts pending blocks by stream priority without preemption. Time is virtual
 * (ns); the bytes are real: copies and kernels' CPU functions run when they complete. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/sim/sim_model.h"
#include "base/base.h"

/* ---- ops -------------------------------------------------------------------------------- */

struct sim_op *ferry__sim_op_new(struct ferry_be_stream *s, enum sim_op_kind kind)
{
    struct ferry_be_device *dev = s->dev;
    struct sim_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return NULL;
    op->kind = kind;
    op->refs = 1;
    op->stream = s;
    SIM_LIST_PUSH(dev->ops, op, all_prev, all_next);
    return op;
}

void ferry__sim_op_unref(struct ferry_be_device *dev, struct sim_op *op)
{
    if (op == NULL || --op->refs > 0)
        return;
    if (op->kind == SIM_OP_WAIT && op->u.wait.target != NULL)
        ferry__sim_op_unref(dev, op->u.wait.target);
    if (op->kind == SIM_OP_COPY)
        free(op->u.copy.pieces);
    SIM_LIST_UNLINK(dev->ops, op, all_prev, all_next);
    free(op);
}

void ferry__sim_stream_free(struct ferry_be_stream *s)
{
    struct ferry_be_device *dev = s->dev;
    SIM_LIST_UNLINK(dev->streams, s, prev, next);
    free(s);
}

struct ferry_be_event *ferry__sim_event_new(struct ferry_be_device *dev, bool timing)
{
    struct ferry_be_event *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->dev = dev;
    e->timing = timing;
    SIM_LIST_PUSH(dev->events, e, prev, next);
    return e;
}

void ferry__sim_event_unlink(struct ferry_be_event *e)
{
    struct ferry_be_device *dev = e->dev;
    ferry__sim_op_unref(dev, e->last);
    e->last = NULL;
    SIM_LIST_UNLINK(dev->events, e, prev, next);
}

/* @op is complete at dev->now: the stream moves on, and the model drops its reference. */
static void complete(struct ferry_be_device *dev, struct sim_op *op)
{
    struct ferry_be_stream *s = op->stream;
    op->done = true;
    op->end_ns = dev->now;
    FERRY_ASSERT(s->completed + 1 == op->seq);
    s->completed++;
    s->last_end_ns = dev->now;
    op->stream = NULL;
    dev->stats.ops_completed++;
    if (s->destroyed && s->completed == s->submitted)
        ferry__sim_stream_free(s);
    ferry__sim_op_unref(dev, op);
}

/* ---- copy engines: the fluid model ------------------------------------------------------ */

/* Bring every transfer's remaining bytes up to dev->now at its current rate. Must run before
 * anything changes who is transferring. */
static void account(struct ferry_be_device *dev)
{
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < dev->dirs[d].n; i++) {
            struct sim_engine *e = &dev->dirs[d].eng[i];
            if (e->phase != SIM_ENG_XFER || dev->now <= e->last_ns)
                continue;
            e->remaining -= e->rate * (double)(dev->now - e->last_ns);
            if (e->remaining < 0.0)
                e->remaining = 0.0;
            e->last_ns = dev->now;
        }
    }
}

/* ---- faults (option inject; fault_spec.h) ------------------------------------------------- */

static double fault_uniform(struct ferry_be_device *dev)
{
    uint64_t z = (dev->fault_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* Whether fault @f fires for the event numbered @n (kernels, copies or allocations, 1-based),
 * of batch @batch (UINT64_MAX: none), at device time now. One-shot triggers fire once. */
static bool fault_fires(struct ferry_be_device *dev, struct ferry_fault *f, uint64_t n,
                        uint64_t batch)
{
    bool hit = false;
    switch (f->trigger) {
    case FERRY_TRIG_BATCH: hit = !f->fired && batch == f->value; break;
    case FERRY_TRIG_N: hit = !f->fired && n == f->value; break;
    case FERRY_TRIG_TIME: hit = !f->fired && dev->now >= f->value; break;
    case FERRY_TRIG_P: return fault_uniform(dev) < f->p;
    }
    if (hit)
        f->fired = true;
    return hit;
}

/* The fault a kernel ends with: 0, FERRY_EKERNEL, FERRY_ESTICKY, or SIM_HANG / SIM_HANG_HARD
 * (it does not end). Every item is evaluated, in spec order (each one-shot trigger that matches
 * is spent, each p= item draws once), and the most severe outcome among those that fired
 * wins: sticky > hang-hard > hang > kernel. Before, the first match shadowed the rest:
 * kernel@n=40,sticky@n=40 never went sticky, while the other order did. */
enum { SIM_HANG = 1, SIM_HANG_HARD = 2 };
static int fault_severity(enum ferry_fault_kind k)
{
    switch (k) {
    case FERRY_FAULT_STICKY: return 4;
    case FERRY_FAULT_HANG_HARD: return 3;
    case FERRY_FAULT_HANG: return 2;
    case FERRY_FAULT_KERNEL: return 1;
    default: return 0;
    }
}

static int kernel_fault(struct ferry_be_device *dev, const ferry_kernel_args_t *a)
{
    uint64_t n = ++dev->nlaunched;
    const struct ferry_fault *worst = NULL;
    unsigned fired = 0;
    for (size_t i = 0; i < dev->faults.n; i++) {
        struct ferry_fault *f = &dev->faults.f[i];
        if (fault_severity(f->kind) == 0 || !fault_fires(dev, f, n, a->batch_id))
            continue;
        fired++;
        if (worst == NULL || fault_severity(f->kind) > fault_severity(worst->kind))
            worst = f;
    }
    if (worst == NULL)
        return 0;
    ferry_log(FERRY_LOG_INFO, "sim", "injected %s fault: kernel %llu (batch %llu chunk %u)%s",
              ferry__fault_kind_name(worst->kind), (unsigned long long)n,
              (unsigned long long)a->batch_id, a->chunk,
              fired > 1 ? ": the most severe of the items that matched" : "");
    switch (worst->kind) {
    case FERRY_FAULT_STICKY: return FERRY_ESTICKY;
    case FERRY_FAULT_HANG: return SIM_HANG;
    case FERRY_FAULT_HANG_HARD: return SIM_HANG_HARD;
    default: return FERRY_EKERNEL;
    }
}

/* A share fault fires: another process moves f->gbps on the link from now. */
static void share_start(struct ferry_be_device *dev, const struct ferry_fault *f)
{
    for (int d = 0; d < 2; d++) {
        if (!(f->dirs & (1u << d)))
            continue;
        dev->share_from[d] = dev->now;
        dev->share_until[d] = f->for_ns ? dev->now + f->for_ns : SIM_NEVER;
        dev->share_gbps[d] = f->gbps;
    }
    ferry_log(FERRY_LOG_INFO, "sim",
              "injected share: another process moves %.1f GB/s %s from %llu ns", f->gbps,
              f->dirs == 3   ? "each way"
              : f->dirs == 1 ? "H2D"
                             : "D2H",
              (unsigned long long)dev->now);
}

/* The other process's rate in direction @d now, GB/s (0: none). */
static double share_now(const struct ferry_be_device *dev, int d)
{
    return dev->now >= dev->share_from[d] && dev->now < dev->share_until[d] ? dev->share_gbps[d]
                                                                            : 0;
}

/* The slow-link factor for a copy starting now (1: none); share faults start here too, as
 * they are triggered by copies. */
static double copy_slowdown(struct ferry_be_device *dev)
{
    uint64_t n = ++dev->ncopies;
    double factor = 1;
    for (size_t i = 0; i < dev->faults.n; i++) {
        struct ferry_fault *f = &dev->faults.f[i];
        if (f->kind == FERRY_FAULT_SHARE) {
            if (fault_fires(dev, f, n, UINT64_MAX))
                share_start(dev, f);
            continue;
        }
        if (f->kind != FERRY_FAULT_SLOW)
            continue;
        if (f->trigger == FERRY_TRIG_P) {
            if (fault_uniform(dev) < f->p && f->factor > factor)
                factor = f->factor;
            continue;
        }
        if (fault_fires(dev, f, n, UINT64_MAX)) {
            dev->slow_from = dev->now;
            dev->slow_until = f->for_ns ? dev->now + f->for_ns : SIM_NEVER;
            dev->slow_factor = f->factor;
            ferry_log(FERRY_LOG_INFO, "sim", "injected slow link: copies x%.1f from %llu ns",
                      f->factor, (unsigned long long)dev->now);
        }
    }
    if (dev->slow_factor > 1 && dev->now >= dev->slow_from && dev->now < dev->slow_until &&
        dev->slow_factor > factor)
        factor = dev->slow_factor;
    return factor;
}

int ferry__sim_alloc_fault(struct ferry_be_device *dev)
{
    uint64_t n = ++dev->nallocs_made;
    for (size_t i = 0; i < dev->faults.n; i++) {
        struct ferry_fault *f = &dev->faults.f[i];
        if (f->kind == FERRY_FAULT_ALLOC && fault_fires(dev, f, n, UINT64_MAX))
            return FERRY_EDEVMEM;
    }
    return 0;
}

/* Recompute rates and completion times. Transfers in one direction share its asymptotic rate
 * equally; while both directions transfer, each gets bidir_factor of it (FACTS.md: 93.5-99.7 GB/s
 * in total, 1.7-1.8x one direction). Pageable copies are further capped at their own rate.
 * The host's memory (profile section host_memory) serves every copy's bytes: when the copies
 * together would draw more than it serves, each is slowed in proportion. On a machine whose
 * profile has host_memory, the device's share of the machine's (sim_host.c) caps them too. */
static void rerate(struct ferry_be_device *dev)
{
    int active[2] = {0, 0};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < dev->dirs[d].n; i++)
            active[d] += dev->dirs[d].eng[i].phase == SIM_ENG_XFER;
    double total = 0.0;
    for (int d = 0; d < 2; d++) {
        const struct ferry_sim_curve *c = &dev->prof.curve[d];
        /* Another process on the link takes its rate off the top (ferry keeps at least 5%). */
        double link = c->gbps[c->n - 1], other = share_now(dev, d);
        link = link - other > 0.05 * link ? link - other : 0.05 * link;
        double share = link / (active[d] > 0 ? active[d] : 1);
        if (active[!d] > 0)
            share *= dev->prof.bidir_factor;
        for (int i = 0; i < dev->dirs[d].n; i++) {
            struct sim_engine *e = &dev->dirs[d].eng[i];
            if (e->phase != SIM_ENG_XFER)
                continue;
            e->rate = (share < e->cap ? share : e->cap) / (e->slow > 1 ? e->slow : 1);
            total += e->rate;
        }
    }
    double mem = ferry__sim_host_cap(dev);
    double scale = mem > 0.0 && total > mem ? mem / total : 1.0;
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < dev->dirs[d].n; i++) {
            struct sim_engine *e = &dev->dirs[d].eng[i];
            if (e->phase != SIM_ENG_XFER)
                continue;
            e->rate *= scale;
            e->end_ns = e->last_ns + (uint64_t)ceil(e->remaining / e->rate);
        }
}

static void begin_xfer(struct ferry_be_device *dev, struct sim_engine *e)
{
    e->phase = SIM_ENG_XFER;
    e->remaining = (double)e->op->u.copy.bytes;
    e->last_ns = dev->now;
    e->rate = 0.0;
}

/* Idle engines of direction @d take copies from the direction's FIFO. */
static void start_copies(struct ferry_be_device *dev, int d)
{
    struct sim_dir *dir = &dev->dirs[d];
    for (int i = 0; i < dir->n && dir->head != NULL; i++) {
        struct sim_engine *e = &dir->eng[i];
        if (e->phase != SIM_ENG_IDLE)
            continue;
        struct sim_op *op = dir->head;
        dir->head = op->next;
        if (dir->head == NULL)
            dir->tail = NULL;
        op->next = NULL;
        op->start_ns = dev->now;
        e->op = op;
        e->cap = op->u.copy.pinned ? INFINITY : dev->prof.pageable_gbps[d];
        e->slow = copy_slowdown(dev);
        uint64_t lat = ferry__sim_copy_latency_ns(&dev->prof, d, op->u.copy.bytes) +
                       op->u.copy.nengine * FERRY_SIM_PIECE_DEV_NS +
                       (op->u.copy.kernel ? FERRY_SIM_PIECE_KERNEL_DEV_NS : 0);
        if (lat > 0) {
            e->phase = SIM_ENG_LATENCY;
            e->lat_end_ns = dev->now + lat;
        } else {
            begin_xfer(dev, e);
        }
    }
}

static void finish_copy(struct ferry_be_device *dev, struct sim_engine *e)
{
    struct sim_op *op = e->op;
    const ferry_be_piece_t *pc = op->u.copy.pieces;
    for (size_t i = 0; i < op->u.copy.npieces; i++) {
        unsigned char *dv =
            (unsigned char *)(op->u.copy.dir == FERRY_SIM_H2D ? op->u.copy.dst
                                                              : (void *)(uintptr_t)op->u.copy.src) +
            pc[i].off;
        if (op->u.copy.dir == FERRY_SIM_H2D)
            memmove(dv, pc[i].host, pc[i].bytes);
        else
            memmove(pc[i].host, dv, pc[i].bytes);
    }
    if (pc == NULL && op->u.copy.bytes > 0)
        memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
    dev->stats.copies[op->u.copy.dir]++;
    dev->stats.bytes[op->u.copy.dir] += op->u.copy.bytes;
    ferry__rate_ring_add(&dev->link_ring[op->u.copy.dir], dev->now, op->u.copy.bytes);
    e->op = NULL;
    e->phase = SIM_ENG_IDLE;
    e->remaining = 0.0;
    complete(dev, op);
}

/* ---- SMs ------------------------------------------------------------------------------ */

static bool wave_before(const struct sim_wave *a, const struct sim_wave *b)
{
    return a->end_ns < b->end_ns || (a->end_ns == b->end_ns && a->order < b->order);
}

static void wave_push(struct ferry_be_device *dev, struct sim_wave w)
{
    int i = dev->nwaves++;
    FERRY_ASSERT(dev->nwaves <= dev->cap_waves);
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!wave_before(&w, &dev->waves[parent]))
            break;
        dev->waves[i] = dev->waves[parent];
        i = parent;
    }
    dev->waves[i] = w;
}

static struct sim_wave wave_pop(struct ferry_be_device *dev)
{
    struct sim_wave top = dev->waves[0];
    struct sim_wave last = dev->waves[--dev->nwaves];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, best = i;
        const struct sim_wave *bw = &last;
        if (l < dev->nwaves && wave_before(&dev->waves[l], bw)) {
            best = l;
            bw = &dev->waves[l];
        }
        if (r < dev->nwaves && wave_before(&dev->waves[r], bw))
            best = r;
        if (best == i)
            break;
        dev->waves[i] = dev->waves[best];
        i = best;
    }
    if (dev->nwaves > 0)
        dev->waves[i] = last;
    return top;
}

/* Free SM slots take pending blocks: the highest-priority resident kernel first (numerically
 * lowest, as CUDA), FIFO among equals; running blocks are never preempted (FACTS.md). */
static void schedule_blocks(struct ferry_be_device *dev)
{
    while (dev->free_slots > 0 && dev->npending > 0) {
        struct sim_op *k = dev->pending[0];
        uint32_t left = k->u.kern.blocks - k->u.kern.started;
        uint32_t n = left < (uint32_t)dev->free_slots ? left : (uint32_t)dev->free_slots;
        if (k->u.kern.started == 0)
            k->start_ns = dev->now;
        struct sim_wave w = {
            .end_ns = dev->now + k->u.kern.l.block_ns, .order = ++dev->order, .op = k, .count = n};
        wave_push(dev, w);
        k->u.kern.started += n;
        dev->free_slots -= (int)n;
        dev->stats.blocks += n;
        if (k->u.kern.started == k->u.kern.blocks) {
            dev->npending--;
            memmove(&dev->pending[0], &dev->pending[1],
                    (size_t)dev->npending * sizeof(dev->pending[0]));
        }
    }
}

static void add_pending(struct ferry_be_device *dev, struct sim_op *k)
{
    int i = dev->npending;
    while (i > 0 && dev->pending[i - 1]->u.kern.priority > k->u.kern.priority) {
        dev->pending[i] = dev->pending[i - 1];
        i--;
    }
    dev->pending[i] = k;
    dev->npending++;
}

static void finish_kernel(struct ferry_be_device *dev, struct sim_op *k)
{
    struct ferry_be_stream *s = k->stream;
    /* An injected fault replaces the kernel: its output is never written. */
    int rc = dev->sticky           ? dev->sticky
             : k->u.kern.heartbeat ? 0
                                   : kernel_fault(dev, &k->u.kern.l.args);
    if (rc == SIM_HANG || rc == SIM_HANG_HARD) {
        /* It never ends: it keeps its grid slot and its stream, until an abort stops a kernel
         * that polls the flag. Past the table's end it is simply never found again. */
        if (dev->nhung < SIM_HUNG_MAX) {
            dev->hung[dev->nhung].op = k;
            dev->hung[dev->nhung].polls = rc == SIM_HANG;
            dev->nhung++;
        }
        return;
    }
    if (rc == FERRY_ESTICKY)
        dev->sticky = FERRY_ESTICKY;
    else if (rc == 0)
        rc = k->u.kern.l.cpu(&k->u.kern.l.args, k->u.kern.l.user);
    if (!k->u.kern.heartbeat)
        dev->stats.kernels++;
    /* Non-sticky: events recorded after this kernel on its stream report the error until a
     * later kernel of the stream succeeds; other streams see it only through event waits. */
    if (rc != 0) {
        s->own_err = rc < 0 ? rc : FERRY_EKERNEL;
        s->own_err_reported = false;
    } else if (s->own_err_reported) {
        s->own_err = 0;
    }
    if (rc != 0)
        dev->stats.kernel_errors++;
    dev->resident--;
    complete(dev, k);
}

/* ---- hardware queues ------------------------------------------------------------------- */

/* A queue's head may leave it when its stream predecessor is complete (so a blocked item also
 * blocks every other stream behind it on the same queue: the false dependency of FACTS.md), its
 * event is reached (waits), and a grid slot is free (kernels). */
static bool can_dispatch(const struct ferry_be_device *dev, const struct sim_op *op)
{
    if (op->stream->completed + 1 != op->seq)
        return false;
    switch (op->kind) {
    case SIM_OP_WAIT: return op->u.wait.target == NULL || op->u.wait.target->done;
    case SIM_OP_KERNEL: return dev->resident < dev->prof.max_resident_grids;
    default: return true;
    }
}

static void dispatch(struct ferry_be_device *dev, struct sim_op *op)
{
    struct ferry_be_stream *s = op->stream;
    bool wait_run = s->any_dispatched && s->last_kind == SIM_OP_WAIT;
    s->last_kind = op->kind;
    s->any_dispatched = true;
    switch (op->kind) {
    case SIM_OP_COPY: {
        struct sim_dir *dir = &dev->dirs[op->u.copy.dir];
        if (dir->tail != NULL)
            dir->tail->next = op;
        else
            dir->head = op;
        dir->tail = op;
        start_copies(dev, op->u.copy.dir);
        break;
    }
    case SIM_OP_KERNEL:
        dev->resident++;
        if (dev->resident > dev->stats.peak_resident_grids)
            dev->stats.peak_resident_grids = dev->resident;
        op->u.kern.order = ++dev->order;
        add_pending(dev, op);
        schedule_blocks(dev);
        break;
    case SIM_OP_RECORD:
        op->err = s->own_err != 0 ? s->own_err : s->in_err;
        s->own_err_reported = s->own_err != 0;
        op->start_ns = dev->now;
        complete(dev, op);
        break;
    case SIM_OP_WAIT: {
        /* An error flows along the dependency to the waiting stream's later events. A new run
         * of waits replaces what the previous run brought in (a good input clears it); waits
         * in one run add up, since the work after them depends on all of them. */
        int in = op->u.wait.target != NULL ? op->u.wait.target->err : 0;
        if (!wait_run || s->in_err == 0)
            s->in_err = in;
        op->start_ns = dev->now;
        complete(dev, op);
        break;
    }
    }
}

static void settle(struct ferry_be_device *dev)
{
    bool progress;
    do {
        progress = false;
        for (int q = 0; q < dev->conns; q++) {
            struct sim_queue *queue = &dev->queues[q];
            while (queue->head != NULL && can_dispatch(dev, queue->head)) {
                struct sim_op *op = queue->head;
                queue->head = op->next;
                if (queue->head == NULL)
                    queue->tail = NULL;
                op->next = NULL;
                dispatch(dev, op);
                progress = true;
            }
        }
    } while (progress);
}

void ferry__sim_submit(struct ferry_be_device *dev, struct sim_op *op)
{
    struct ferry_be_stream *s = op->stream;
    struct sim_queue *queue = &dev->queues[s->queue];
    op->seq = ++s->submitted;
    if (queue->tail != NULL)
        queue->tail->next = op;
    else
        queue->head = op;
    queue->tail = op;
    dev->stats.ops_submitted++;
    account(dev);
    settle(dev);
    rerate(dev);
}

/* ---- time ------------------------------------------------------------------------------ */

static uint64_t next_time(const struct ferry_be_device *dev)
{
    uint64_t t = SIM_NEVER;
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < dev->dirs[d].n; i++) {
            const struct sim_engine *e = &dev->dirs[d].eng[i];
            if (e->phase == SIM_ENG_LATENCY && e->lat_end_ns < t)
                t = e->lat_end_ns;
            else if (e->phase == SIM_ENG_XFER && e->end_ns < t)
                t = e->end_ns;
        }
    }
    if (dev->nwaves > 0 && dev->waves[0].end_ns < t)
        t = dev->waves[0].end_ns;
    return t;
}

/* Everything due at @t happens, in a fixed order (copies by direction and engine, then SM waves
 * by start order, then the queues in index order), so that runs are deterministic. */
static void process_at(struct ferry_be_device *dev, uint64_t t)
{
    if (t > dev->now)
        dev->now = t;
    account(dev);
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < dev->dirs[d].n; i++) {
            struct sim_engine *e = &dev->dirs[d].eng[i];
            if (e->phase == SIM_ENG_XFER && e->end_ns <= dev->now)
                finish_copy(dev, e);
            else if (e->phase == SIM_ENG_LATENCY && e->lat_end_ns <= dev->now)
                begin_xfer(dev, e);
        }
    }
    while (dev->nwaves > 0 && dev->waves[0].end_ns <= dev->now) {
        struct sim_wave w = wave_pop(dev);
        dev->free_slots += (int)w.count;
        w.op->u.kern.finished += w.count;
        if (w.op->u.kern.finished == w.op->u.kern.blocks)
            finish_kernel(dev, w.op);
    }
    schedule_blocks(dev);
    for (int d = 0; d < 2; d++)
        start_copies(dev, d);
    settle(dev);
    rerate(dev);
}

bool ferry__sim_step(struct ferry_be_device *dev, uint64_t limit)
{
    uint64_t t = next_time(dev);
    if (t == SIM_NEVER || t > limit)
        return false;
    process_at(dev, t);
    return true;
}

void ferry__sim_advance_to(struct ferry_be_device *dev, uint64_t t)
{
    while (ferry__sim_step(dev, t)) {
    }
    if (t > dev->now)
        dev->now = t;
}

void ferry__sim_pace_follow(struct ferry_be_device *dev)
{
    if (!(dev->pace > 0))
        return;
    double t = ((double)ferry__mono_ns() - dev->pace_origin_ns) / dev->pace;
    if (t > (double)dev->now)
        ferry__sim_advance_to(dev, (uint64_t)t);
}

void ferry__sim_charge(struct ferry_be_device *dev, uint64_t ns)
{
    ferry__sim_advance_to(dev, dev->now + ns);
    dev->pace_origin_ns -= (double)ns * dev->pace;
}

double ferry__sim_pace_until(const struct ferry_be_device *dev)
{
    return dev->pace > 0 ? dev->pace_origin_ns + (double)dev->now * dev->pace : 0;
}

void ferry__sim_pace_sleep(double at)
{
    for (;;) {
        uint64_t now = ferry__mono_ns();
        if (!(at > (double)now))
            return;
        double left = at - (double)now;
        struct timespec ts = {(time_t)(left / 1e9), (long)fmod(left, 1e9)};
        nanosleep(&ts, NULL);
    }
}

void ferry__sim_drain(struct ferry_be_device *dev)
{
    while (ferry__sim_step(dev, SIM_NEVER)) {
    }
}

/* ---- setup ----------------------------------------------------------------------------- */

int ferry__sim_model_init(struct ferry_be_device *dev)
{
    const struct ferry_sim_profile *p = &dev->prof;
    dev->queues = calloc((size_t)dev->conns, sizeof(*dev->queues));
    dev->pending = calloc((size_t)p->max_resident_grids, sizeof(*dev->pending));
    /* Each wave holds at least one SM slot, so there are never more waves than SMs. */
    dev->cap_waves = p->sms;
    dev->waves = calloc((size_t)dev->cap_waves, sizeof(*dev->waves));
    for (int d = 0; d < 2; d++) {
        dev->dirs[d].n = p->engines[d];
        dev->dirs[d].eng = calloc((size_t)p->engines[d], sizeof(struct sim_engine));
    }
    if (dev->queues == NULL || dev->pending == NULL || dev->waves == NULL ||
        dev->dirs[0].eng == NULL || dev->dirs[1].eng == NULL) {
        ferry__sim_model_fini(dev);
        return ferry__error(FERRY_ENOMEM, "sim: out of memory for the device model");
    }
    dev->free_slots = p->sms;
    return 0;
}

void ferry__sim_model_fini(struct ferry_be_device *dev)
{
    /* Work still queued at close is dropped, as a destroyed CUDA context drops it: no copy or
     * CPU function runs into buffers the caller may already have freed. */
    while (dev->ops != NULL) {
        struct sim_op *op = dev->ops;
        dev->ops = op->all_next;
        free(op);
    }
    while (dev->streams != NULL) {
        struct ferry_be_stream *s = dev->streams;
        dev->streams = s->next;
        free(s);
    }
    while (dev->events != NULL) {
        struct ferry_be_event *e = dev->events;
        dev->events = e->next;
        free(e);
    }
    free(dev->queues);
    free(dev->pending);
    free(dev->waves);
    free(dev->dirs[0].eng);
    free(dev->dirs[1].eng);
    dev->queues = NULL;
    dev->pending = NULL;
    dev->waves = NULL;
    dev->dirs[0].eng = dev->dirs[1].eng = NULL;
}

int ferry__sim_abort(struct ferry_be_device *dev, const volatile uint64_t *word, uint64_t upto)
{
    int stopped = 0;
    for (int i = 0; i < dev->nhung;) {
        const ferry_kernel_args_t *a = &dev->hung[i].op->u.kern.l.args;
        if (!dev->hung[i].polls || a->abort_word != word || a->seq > upto) {
            i++;
            continue;
        }
        struct sim_op *k = dev->hung[i].op;
        dev->hung[i] = dev->hung[--dev->nhung];
        /* The kernel saw the flag and returned early: an error, not a sticky one. */
        k->stream->own_err = FERRY_ETIMEDOUT;
        k->stream->own_err_reported = false;
        dev->stats.kernels++;
        dev->stats.kernel_errors++;
        dev->resident--;
        complete(dev, k);
        stopped++;
    }
    if (stopped > 0) { /* what waited on them goes on, as after any kernel's end */
        account(dev);
        schedule_blocks(dev);
        for (int d = 0; d < 2; d++)
            start_copies(dev, d);
        settle(dev);
        rerate(dev);
    }
    return stopped;
}

int ferry__sim_link_rate(struct ferry_be_device *dev, int dir, double *bytes_per_s,
                         uint64_t *window_ns)
{
    uint64_t now = dev->now, w = now < FERRY_LINK_WINDOW_NS ? now : FERRY_LINK_WINDOW_NS;
    if (w == 0)
        return FERRY_EAGAIN;
    double bytes = ferry__rate_ring_sum(&dev->link_ring[dir], now - w, now);
    /* The other process's bytes over the part of the window it ran. */
    uint64_t lo = dev->share_from[dir] > now - w ? dev->share_from[dir] : now - w;
    uint64_t hi = dev->share_until[dir] < now ? dev->share_until[dir] : now;
    if (dev->share_gbps[dir] > 0 && hi > lo)
        bytes += dev->share_gbps[dir] * (double)(hi - lo);
    *bytes_per_s = bytes * 1e9 / (double)w;
    *window_ns = w;
    return 0;
}
