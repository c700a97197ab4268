/* The streaming pipeline: batches enter a bounded submission queue, an issuer thread cuts them
 * into chunks bound to slots (pinned host + device buffers + events), stages input that is not
 * pinned, and issues H2D -> compute -> D2H on dedicated streams linked by events, round-robin;
 * a completion thread polls the events, copies output out of pinned slots, recycles slots and
 * runs each batch's callback exactly once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime.h"
#include "sched/sched.h"

enum { EV_H2D_START, EV_H2D_END, EV_COMP_START, EV_COMP_END, EV_D2H_START, EV_D2H_END, EV_N };

typedef struct batch_rec {
    uint64_t id;
    ferry_batch_t b;
    ferry_done_fn cb;
    void *arg;
    uint32_t nchunks;
    uint32_t chunks_left; /* guarded by the pipeline's lock */
    int status;
    uint64_t submit_ns;
} batch_rec_t;

typedef struct slot {
    unsigned char *h_in, *h_out; /* pinned pool slots */
    void *d_in, *d_out;          /* device buffers */
    ferry_be_event_t *ev[EV_N];
    struct slot *next_free;
    /* The chunk bound to the slot while it is in flight. */
    batch_rec_t *batch;
    uint32_t chunk;
    size_t offset, bytes;
    unsigned h2d, comp, d2h; /* stream indices into p->streams */
    bool copy_out;           /* output lands in h_out and must be copied to the batch */
    int err;
    struct slot *next_inflight;
} slot_t;

typedef struct trace_rec {
    uint64_t batch;
    uint32_t chunk;
    uint16_t stream;
    char kind; /* 'h', 'c', 'd' */
    uint64_t start, end, bytes;
} trace_rec_t;

struct ferry_pipeline {
    ferry_device_t *dev;
    ferry_stage_t stage;
    char stage_name[64];
    size_t chunk;
    unsigned depth, ncopy, ncomp, nstreams;
    bool single; /* one stream for everything */
    int copy_prio, comp_prio;
    bool nonblocking;
    size_t queue_depth;
    size_t stage_threshold;
    bool tracing;

    ferry_pool_t *pool;
    slot_t *slots;
    ferry_be_stream_t *streams[FERRY_STATS_MAX_STREAMS];
    char stream_kind[FERRY_STATS_MAX_STREAMS];

    ferry_bqueue_t *queue;
    ferry_workers_t *workers;
    pthread_t issuer, completer;
    bool issuer_started, completer_started;

    pthread_mutex_t lock;
    pthread_cond_t slot_cv;  /* a slot was freed */
    pthread_cond_t work_cv;  /* in-flight work appeared, or the issuer went idle, or closing */
    pthread_cond_t drain_cv; /* a batch completed */
    slot_t *free_slots;
    unsigned nfree_slots;
    unsigned slot_wake; /* free slots that wake a waiting issuer */
    slot_t *inflight_head, *inflight_tail;
    size_t ninflight;
    uint64_t inflight_seq; /* atomic: bumped by every push_inflight */
    batch_rec_t **ready; /* empty batches waiting for their callback */
    size_t nready, ready_cap;
    bool closing;
    bool issuer_done;
    int issuer_idle; /* atomic: the issuer is blocked on the queue or on a slot */
    uint64_t next_id;
    uint64_t submitted, completed;
    uint64_t chunk_counter;

    ferry_pipeline_stats_t st;
    uint64_t first_start, last_end;
    uint64_t stream_busy[FERRY_STATS_MAX_STREAMS];

    trace_rec_t *trace;
    size_t ntrace, trace_cap;
};

/* ---- helpers --------------------------------------------------------------------------- */

static void set_idle(ferry_pipeline_t *p, int idle)
{
    __atomic_store_n(&p->issuer_idle, idle, __ATOMIC_RELEASE);
    if (idle) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->lock);
    }
}

static void trace_add(ferry_pipeline_t *p, const trace_rec_t *r)
{
    if (p->ntrace == p->trace_cap) {
        size_t cap = p->trace_cap ? p->trace_cap * 2 : 1024;
        trace_rec_t *n = realloc(p->trace, cap * sizeof(*n));
        if (n == NULL) {
            ferry_log(FERRY_LOG_WARN, "pipeline", "trace: out of memory, stopped recording");
            p->tracing = false;
            return;
        }
        p->trace = n;
        p->trace_cap = cap;
    }
    p->trace[p->ntrace++] = *r;
}

/* ---- completion -------------------------------------------------------------------------- */

static void finish_batch(ferry_pipeline_t *p, batch_rec_t *b)
{
    ferry_batch_result_t r = {
        .id = b->id,
        .status = b->status,
        .where = b->status == 0 ? FERRY_DONE_GPU : FERRY_DONE_FAILED,
        .in = b->b.in,
        .out = b->b.out,
        .bytes = b->b.bytes,
        .chunks = b->nchunks,
        .submit_ns = b->submit_ns,
        .done_ns = ferry_device_now_ns(p->dev),
    };
    b->cb(&r, b->arg);
    pthread_mutex_lock(&p->lock);
    if (b->status == 0)
        p->st.batches_done_gpu++;
    else
        p->st.batches_failed++;
    p->completed++;
    pthread_cond_broadcast(&p->drain_cv);
    pthread_mutex_unlock(&p->lock);
    free(b);
}

/* Account one finished chunk (its events are complete, or it failed). Completion thread. */
static void complete_chunk(ferry_pipeline_t *p, slot_t *s, int err)
{
    batch_rec_t *b = s->batch;
    if (err == 0 && s->copy_out && b->b.out != NULL) {
        ferry__parallel_memcpy(p->workers, (unsigned char *)b->b.out + s->offset, s->h_out,
                               s->bytes, p->stage_threshold);
    }
    uint64_t t[EV_N] = {0};
    bool timed = err == 0;
    for (int i = 0; timed && i < EV_N; i++)
        if (ferry__be_event_time_ns(p->dev, s->ev[i], &t[i]) != 0)
            timed = false;

    pthread_mutex_lock(&p->lock);
    if (err != 0 && b->status == 0)
        b->status = err;
    if (err == 0) {
        p->st.bytes_h2d += s->bytes;
        p->st.bytes_d2h += s->bytes;
        if (s->copy_out && b->b.out != NULL)
            p->st.copied_out_bytes += s->bytes;
    }
    if (timed) {
        uint64_t dh = t[EV_H2D_END] - t[EV_H2D_START], dc = t[EV_COMP_END] - t[EV_COMP_START],
                 dd = t[EV_D2H_END] - t[EV_D2H_START];
        p->st.busy_h2d_ns += dh;
        p->st.busy_compute_ns += dc;
        p->st.busy_d2h_ns += dd;
        p->stream_busy[s->h2d] += dh;
        p->stream_busy[s->comp] += dc;
        p->stream_busy[s->d2h] += dd;
        if (p->first_start == 0 || t[EV_H2D_START] < p->first_start)
            p->first_start = t[EV_H2D_START];
        if (t[EV_D2H_END] > p->last_end)
            p->last_end = t[EV_D2H_END];
        if (p->tracing) {
            trace_rec_t r = {b->id, s->chunk, (uint16_t)s->h2d, 'h', t[EV_H2D_START],
                             t[EV_H2D_END], s->bytes};
            trace_add(p, &r);
            r.stream = (uint16_t)s->comp, r.kind = 'c', r.start = t[EV_COMP_START];
            r.end = t[EV_COMP_END];
            trace_add(p, &r);
            r.stream = (uint16_t)s->d2h, r.kind = 'd', r.start = t[EV_D2H_START];
            r.end = t[EV_D2H_END];
            trace_add(p, &r);
        }
    }
    bool last = --b->chunks_left == 0;
    s->batch = NULL;
    s->next_free = p->free_slots;
    p->free_slots = s;
    p->nfree_slots++;
    /* The issuer is woken once per completion pass (completion_main), not per slot. */
    pthread_mutex_unlock(&p->lock);
    if (last)
        finish_batch(p, b);
}

/* Spin up to @max_ns for *@word to differ from @seen. */
static bool spin_for_change(const uint64_t *word, uint64_t seen, uint64_t max_ns)
{
    uint64_t t0 = ferry__mono_ns();
    for (unsigned i = 0;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seen)
            return true;
        /* No sched_yield: on this class of VM a thread that yields before sleeping was seen
         * to wake a scheduler tick (~4 ms) late. */
        if ((i & 63) == 63 && ferry__mono_ns() - t0 > max_ns)
            return false;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static bool take_ready(ferry_pipeline_t *p, batch_rec_t **out)
{
    if (p->nready == 0)
        return false;
    *out = p->ready[--p->nready];
    return true;
}

static void *completion_main(void *arg)
{
    ferry_pipeline_t *p = arg;
    enum { MAXW = 64 };
    ferry_be_event_t *waitev[MAXW];
    slot_t *done[MAXW];
    int errs[MAXW];
    pthread_mutex_lock(&p->lock);
    for (;;) {
        batch_rec_t *rb;
        if (take_ready(p, &rb)) {
            pthread_mutex_unlock(&p->lock);
            finish_batch(p, rb);
            pthread_mutex_lock(&p->lock);
            continue;
        }
        if (p->ninflight == 0) {
            if (p->issuer_done)
                break;
            /* Spin a little before sleeping: with a steady stream of small batches the next
             * chunk is usually microseconds away, and a futex sleep + wake costs more. */
            uint64_t seq = __atomic_load_n(&p->inflight_seq, __ATOMIC_ACQUIRE);
            pthread_mutex_unlock(&p->lock);
            bool came = spin_for_change(&p->inflight_seq, seq, 20000);
            pthread_mutex_lock(&p->lock);
            if (!came && p->ninflight == 0 && !p->issuer_done && p->nready == 0)
                pthread_cond_wait(&p->work_cv, &p->lock);
            continue;
        }
        /* Poll every chunk in flight; streams finish out of order across streams. */
        size_t ndone = 0, nwait = 0;
        slot_t *prev = NULL, *s = p->inflight_head;
        while (s != NULL) {
            slot_t *next = s->next_inflight;
            int q = s->err ? s->err : ferry__be_event_query(p->dev, s->ev[EV_D2H_END]);
            if (q != FERRY_EAGAIN && ndone < MAXW) {
                /* unlink */
                if (prev)
                    prev->next_inflight = next;
                else
                    p->inflight_head = next;
                if (p->inflight_tail == s)
                    p->inflight_tail = prev;
                p->ninflight--;
                errs[ndone] = q;
                done[ndone++] = s;
            } else {
                if (q == FERRY_EAGAIN && nwait < MAXW)
                    waitev[nwait++] = s->ev[EV_D2H_END];
                prev = s;
            }
            s = next;
        }
        if (ndone > 0) {
            pthread_mutex_unlock(&p->lock);
            for (size_t i = 0; i < ndone; i++) {
                if (errs[i] != 0)
                    ferry_log(FERRY_LOG_ERROR, "pipeline",
                              "batch %llu chunk %u failed: %s (%s)",
                              (unsigned long long)done[i]->batch->id, done[i]->chunk,
                              ferry_err_name(errs[i]), ferry__last_error_text());
                complete_chunk(p, done[i], errs[i]);
            }
            pthread_mutex_lock(&p->lock);
            /* Wake the issuer when a quarter of the slots are free (at least one): it then
             * issues several chunks per wake-up, while the device still has the rest queued. */
            if (p->nfree_slots >= p->slot_wake)
                pthread_cond_signal(&p->slot_cv);
            continue;
        }
        if (__atomic_load_n(&p->issuer_idle, __ATOMIC_ACQUIRE)) {
            /* Nothing more will be issued until something completes: wait on the device.
             * On the simulator this is what advances the virtual clock. */
            pthread_mutex_unlock(&p->lock);
            size_t which = 0;
            int rc = ferry__be_event_wait_any(p->dev, waitev, nwait, 2000000, &which);
            if (rc != 0 && rc != FERRY_ETIMEDOUT)
                ferry_log(FERRY_LOG_DEBUG, "pipeline", "event wait: %s", ferry_err_name(rc));
            pthread_mutex_lock(&p->lock);
        } else {
            /* The issuer is busy in real time: let it finish issuing before time moves. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&p->work_cv, &p->lock, &ts);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- issue ------------------------------------------------------------------------------- */

static slot_t *acquire_slot(ferry_pipeline_t *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->free_slots == NULL) {
        __atomic_store_n(&p->issuer_idle, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&p->work_cv);
        while (p->free_slots == NULL ||
               (p->nfree_slots < p->slot_wake && p->ninflight > 0 && !p->issuer_done))
            pthread_cond_wait(&p->slot_cv, &p->lock);
        __atomic_store_n(&p->issuer_idle, 0, __ATOMIC_RELEASE);
    }
    slot_t *s = p->free_slots;
    p->free_slots = s->next_free;
    p->nfree_slots--;
    pthread_mutex_unlock(&p->lock);
    return s;
}

static void push_inflight(ferry_pipeline_t *p, slot_t *s)
{
    pthread_mutex_lock(&p->lock);
    s->next_inflight = NULL;
    if (p->inflight_tail)
        p->inflight_tail->next_inflight = s;
    else
        p->inflight_head = s;
    p->inflight_tail = s;
    /* The completion thread sleeps untimed only when nothing is in flight; otherwise it polls
     * on its own, and waking it for every chunk would cost a context switch each. */
    __atomic_add_fetch(&p->inflight_seq, 1, __ATOMIC_RELEASE);
    if (p->ninflight++ == 0)
        pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->lock);
}

static bool is_pinned(ferry_pipeline_t *p, const void *ptr, size_t n)
{
    /* Only ferry's own pool is known to be pinned here; memory registered by the caller is
     * staged too (correct, one extra host copy). */
    return ferry_pool_owns(p->pool, ptr, n);
}

/* Issue the three ops of one chunk. Returns 0 or the error of the first call that failed. */
static int issue_chunk(ferry_pipeline_t *p, slot_t *s)
{
    batch_rec_t *b = s->batch;
    ferry_device_t *d = p->dev;
    const void *src = s->h_in;
    int rc = 0;

    if (b->b.prepare != NULL) {
        rc = b->b.prepare(s->h_in, s->bytes, s->offset, b->b.prepare_arg);
        if (rc != 0)
            return rc < 0 ? rc : FERRY_EKERNEL;
    } else {
        const unsigned char *in = (const unsigned char *)b->b.in + s->offset;
        if (is_pinned(p, in, s->bytes)) {
            src = in;
        } else {
            ferry__parallel_memcpy(p->workers, s->h_in, in, s->bytes, p->stage_threshold);
            pthread_mutex_lock(&p->lock);
            p->st.staged_bytes += s->bytes;
            pthread_mutex_unlock(&p->lock);
        }
    }
    void *dst = s->h_out;
    s->copy_out = true;
    if (b->b.out != NULL && is_pinned(p, (unsigned char *)b->b.out + s->offset, s->bytes)) {
        dst = (unsigned char *)b->b.out + s->offset;
        s->copy_out = false;
    }
    ferry_be_stream_t *sh = p->streams[s->h2d], *sc = p->streams[s->comp],
                      *sd = p->streams[s->d2h];
    ferry_be_launch_t l = {
        .gpu = p->stage.gpu,
        .cpu = p->stage.cpu,
        .user = p->stage.user,
        .args = {.size = sizeof(ferry_kernel_args_t),
                 .in = s->d_in,
                 .out = s->d_out,
                 .bytes = s->bytes,
                 .offset = s->offset,
                 .batch_id = b->id,
                 .chunk = s->chunk,
                 .attempt = 0},
        .blocks = (uint32_t)(p->dev->props.sms > 0 ? p->dev->props.sms : 1),
        .block_ns = (uint64_t)(p->stage.ns_per_byte * (double)s->bytes),
    };
    if ((rc = ferry__be_event_record(d, s->ev[EV_H2D_START], sh)) != 0 ||
        (rc = ferry__be_memcpy_h2d(d, sh, s->d_in, src, s->bytes)) != 0 ||
        (rc = ferry__be_event_record(d, s->ev[EV_H2D_END], sh)) != 0)
        return rc;
    /* On one stream, stream order already is the dependency. */
    if ((sc != sh && (rc = ferry__be_stream_wait_event(d, sc, s->ev[EV_H2D_END])) != 0) ||
        (rc = ferry__be_event_record(d, s->ev[EV_COMP_START], sc)) != 0 ||
        (rc = ferry__be_launch(d, sc, &l)) != 0 ||
        (rc = ferry__be_event_record(d, s->ev[EV_COMP_END], sc)) != 0)
        return rc;
    if ((sd != sc && (rc = ferry__be_stream_wait_event(d, sd, s->ev[EV_COMP_END])) != 0) ||
        (rc = ferry__be_event_record(d, s->ev[EV_D2H_START], sd)) != 0 ||
        (rc = ferry__be_memcpy_d2h(d, sd, dst, s->d_out, s->bytes)) != 0 ||
        (rc = ferry__be_event_record(d, s->ev[EV_D2H_END], sd)) != 0)
        return rc;
    return 0;
}

static void issue_batch(ferry_pipeline_t *p, batch_rec_t *b)
{
    if (b->b.bytes == 0) {
        pthread_mutex_lock(&p->lock);
        if (p->nready == p->ready_cap) {
            size_t cap = p->ready_cap ? p->ready_cap * 2 : 16;
            batch_rec_t **n = realloc(p->ready, cap * sizeof(*n));
            if (n == NULL) {
                /* Cannot queue it for the completion thread: complete it here, still once. */
                pthread_mutex_unlock(&p->lock);
                finish_batch(p, b);
                return;
            }
            p->ready = n;
            p->ready_cap = cap;
        }
        p->ready[p->nready++] = b;
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->lock);
        return;
    }
    for (uint32_t c = 0; c < b->nchunks; c++) {
        slot_t *s = acquire_slot(p);
        uint64_t k = p->chunk_counter++;
        s->batch = b;
        s->chunk = c;
        s->offset = (size_t)c * p->chunk;
        s->bytes = b->b.bytes - s->offset < p->chunk ? b->b.bytes - s->offset : p->chunk;
        if (p->single) {
            s->h2d = s->comp = s->d2h = 0;
        } else {
            s->h2d = (unsigned)(k % p->ncopy);
            s->comp = p->ncopy + (unsigned)(k % p->ncomp);
            s->d2h = p->ncopy + p->ncomp + (unsigned)(k % p->ncopy);
        }
        s->err = 0;
        int rc = issue_chunk(p, s);
        if (rc != 0) {
            ferry_log(FERRY_LOG_ERROR, "pipeline", "batch %llu chunk %u: issue failed: %s (%s)",
                      (unsigned long long)b->id, c, ferry_err_name(rc), ferry__last_error_text());
            /* Part of the chunk may be queued: let it finish before the slot is reused. */
            ferry__be_stream_sync(p->dev, p->streams[s->h2d]);
            ferry__be_stream_sync(p->dev, p->streams[s->comp]);
            ferry__be_stream_sync(p->dev, p->streams[s->d2h]);
            s->err = rc;
        }
        pthread_mutex_lock(&p->lock);
        p->st.chunks++;
        pthread_mutex_unlock(&p->lock);
        /* A failed chunk still goes through the completion thread, which waits for the ops
         * that were issued (their events) before it frees the slot: see completion_main. */
        push_inflight(p, s);
    }
}

static void *issuer_main(void *arg)
{
    ferry_pipeline_t *p = arg;
    for (;;) {
        batch_rec_t *b = NULL;
        int rc = ferry__bqueue_pop(p->queue, &b, false);
        if (rc == FERRY_EAGAIN) {
            set_idle(p, 1);
            rc = ferry__bqueue_pop(p->queue, &b, true);
            __atomic_store_n(&p->issuer_idle, 0, __ATOMIC_RELEASE);
        }
        if (rc != 0)
            break; /* closed and empty */
        issue_batch(p, b);
    }
    pthread_mutex_lock(&p->lock);
    p->issuer_done = true;
    p->issuer_idle = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- public API ---------------------------------------------------------------------------- */

static int check_range(const char *what, long long v, long long lo, long long hi)
{
    if (v < lo || v > hi)
        return ferry__error(FERRY_EINVAL, "pipeline %s=%lld is out of range (accepted: %lld to %lld)",
                            what, v, lo, hi);
    return 0;
}

static void destroy(ferry_pipeline_t *p)
{
    if (p == NULL)
        return;
    if (p->queue)
        ferry__bqueue_close(p->queue);
    if (p->issuer_started)
        pthread_join(p->issuer, NULL);
    if (p->completer_started) {
        pthread_mutex_lock(&p->lock);
        p->issuer_done = true;
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->completer, NULL);
    }
    for (unsigned i = 0; i < p->nstreams; i++)
        if (p->streams[i]) {
            ferry__be_stream_sync(p->dev, p->streams[i]);
            ferry__be_stream_destroy(p->dev, p->streams[i]);
        }
    for (unsigned i = 0; p->slots && i < p->depth; i++) {
        slot_t *s = &p->slots[i];
        for (int e = 0; e < EV_N; e++)
            ferry__be_event_destroy(p->dev, s->ev[e]);
        ferry__be_mem_free(p->dev, s->d_in);
        ferry__be_mem_free(p->dev, s->d_out);
        if (s->h_in)
            ferry_pool_free(p->pool, s->h_in);
        if (s->h_out)
            ferry_pool_free(p->pool, s->h_out);
    }
    free(p->slots);
    ferry_pool_destroy(p->pool);
    ferry__workers_destroy(p->workers);
    ferry__bqueue_destroy(p->queue);
    free(p->ready);
    free(p->trace);
    pthread_cond_destroy(&p->slot_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->drain_cv);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int ferry_pipeline_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out)
{
    if (cfg == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: NULL config or out");
    if (cfg->size < offsetof(ferry_pipeline_config_t, workers))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->size is %zu; use "
                                          "FERRY_PIPELINE_CONFIG_INIT",
                            cfg->size);
    if (cfg->device == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->device is NULL");
    ferry_device_t *dev = cfg->device;
    const ferry_options_t *o = dev->rt->opts;
    const ferry_stage_t *st = cfg->stage;
    if (st == NULL || st->size < offsetof(ferry_stage_t, ns_per_byte))
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->stage is "
                                                         "NULL or its size is not set "
                                                         "(FERRY_STAGE_INIT)"));
    bool virt = ferry_device_is_simulated(dev);
    if (virt && st->cpu == NULL)
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EINVAL, "stage '%s' has no CPU function: the "
                                                         "simulator runs it as the kernel",
                                           st->name ? st->name : "?"));
    if (!virt && st->gpu == NULL)
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EINVAL, "stage '%s' has no GPU launch function",
                                           st->name ? st->name : "?"));
    if (!(st->ns_per_byte >= 0.0) || st->ns_per_byte > 1e6)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "stage ns_per_byte %g out of range (0 to 1e6)",
                                                    st->ns_per_byte));

    size_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes
                                    : (size_t)ferry__opt_i64(o, FERRY__OPT_chunk_bytes);
    if (chunk == 0)
        chunk = dev->props.default_chunk_bytes;
    if (chunk == 0)
        chunk = 8u << 20; /* FACTS.md: 4-16 MiB chunks reach 97-100% of the round-trip ceiling */
    size_t gran = st->size > offsetof(ferry_stage_t, granularity) ? st->granularity : 0;
    if (gran > (1u << 20))
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "stage granularity %zu out of range (0 to 1M)",
                                                    gran));
    if (gran > 1 && chunk % gran != 0)
        chunk = chunk < gran ? gran : chunk - chunk % gran; /* elements never straddle chunks */
    long long depth = cfg->depth ? cfg->depth : ferry__opt_i64(o, FERRY__OPT_depth);
    long long ncopy = cfg->copy_streams ? cfg->copy_streams
                                        : ferry__opt_i64(o, FERRY__OPT_copy_streams);
    long long ncomp = cfg->compute_streams ? cfg->compute_streams
                                           : ferry__opt_i64(o, FERRY__OPT_compute_streams);
    int rc;
    if ((rc = check_range("chunk_bytes", (long long)chunk, 1, 1LL << 30)) != 0 ||
        (rc = check_range("depth", depth, 1, 64)) != 0 ||
        (rc = check_range("copy_streams", ncopy, 1, 8)) != 0 ||
        (rc = check_range("compute_streams", ncomp, 1, 16)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    int cprio = cfg->copy_priority != FERRY_PRIORITY_DEFAULT
                    ? cfg->copy_priority
                    : (int)ferry__opt_i64(o, FERRY__OPT_copy_priority);
    int kprio = cfg->compute_priority != FERRY_PRIORITY_DEFAULT
                    ? cfg->compute_priority
                    : (int)ferry__opt_i64(o, FERRY__OPT_compute_priority);
    /* CUDA priorities: greatest is numerically smallest (-5 on the H200), least is 0. */
    int lo = dev->props.priority_greatest, hi = dev->props.priority_least;
    if ((rc = check_range("copy_priority", cprio, lo, hi)) != 0 ||
        (rc = check_range("compute_priority", kprio, lo, hi)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    long long qd = cfg->queue_depth ? cfg->queue_depth : ferry__opt_i64(o, FERRY__OPT_queue_depth);
    if (qd == 0)
        qd = (ncopy * 2 + ncomp) * 2;
    if ((rc = check_range("queue_depth", qd, 1, 1 << 20)) != 0)
        return ferry__rt_fail(dev->rt, rc);
    if (cfg->nonblocking < -1 || cfg->nonblocking > 1)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "pipeline nonblocking=%d (accepted: -1, 0, 1)",
                                                    cfg->nonblocking));
    long long nworkers = cfg->workers ? cfg->workers : ferry__opt_i64(o, FERRY__OPT_workers);
    if (nworkers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nworkers = n < 1 ? 1 : (n > 8 ? 8 : n);
    }
    if ((rc = check_range("workers", nworkers, 1, 256)) != 0)
        return ferry__rt_fail(dev->rt, rc);

    ferry_pipeline_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_ENOMEM, "pipeline: out of memory"));
    p->dev = dev;
    p->stage = *st;
    ferry__strlcpy(p->stage_name, st->name ? st->name : "stage", sizeof(p->stage_name));
    p->stage.name = p->stage_name;
    p->chunk = chunk;
    p->depth = (unsigned)depth;
    p->ncopy = (unsigned)ncopy;
    p->ncomp = (unsigned)ncomp;
    p->single = cfg->size > offsetof(ferry_pipeline_config_t, single_stream) &&
                cfg->single_stream;
    p->nstreams = p->single ? 1 : p->ncopy * 2 + p->ncomp;
    p->queue_depth = (size_t)qd;
    p->slot_wake = p->depth / 4 ? p->depth / 4 : 1;
    p->copy_prio = cprio;
    p->comp_prio = kprio;
    p->nonblocking = cfg->nonblocking == -1 ? ferry__opt_i64(o, FERRY__OPT_nonblocking) != 0
                                            : cfg->nonblocking == 1;
    p->stage_threshold = (size_t)ferry__opt_i64(o, FERRY__OPT_stage_threshold);
    if (p->stage_threshold == 0)
        p->stage_threshold = SIZE_MAX / 4;
    p->tracing = ferry__opt_i64(o, FERRY__OPT_trace) != 0;
    ferry__mutex_init_adaptive(&p->lock);
    pthread_cond_init(&p->slot_cv, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->drain_cv, NULL);
    p->st.size = sizeof(p->st);

    if ((rc = ferry__bqueue_create((size_t)qd, sizeof(batch_rec_t *), &p->queue)) != 0 ||
        (rc = ferry__workers_create((unsigned)nworkers, "ferry-worker", &p->workers)) != 0)
        goto out_fail;

    /* Pool: two pinned buffers (in, out) per slot: stages x largest chunk x 2 with depth
     * stages in flight. Allocated once, here. */
    ferry_pool_config_t pc = FERRY_POOL_CONFIG_INIT;
    pc.slot_bytes = chunk;
    pc.slots = (size_t)depth * 2;
    if ((rc = ferry_pool_create(dev, &pc, &p->pool)) != 0)
        goto out_fail;
    p->slots = calloc((size_t)depth, sizeof(*p->slots));
    if (p->slots == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: out of memory");
        goto out_fail;
    }
    for (unsigned i = 0; i < p->depth; i++) {
        slot_t *s = &p->slots[i];
        void *hi_ = NULL, *ho_ = NULL;
        if ((rc = ferry_pool_alloc(p->pool, chunk, false, &hi_)) != 0 ||
            (rc = ferry_pool_alloc(p->pool, chunk, false, &ho_)) != 0)
            goto out_fail;
        s->h_in = hi_;
        s->h_out = ho_;
        if ((rc = ferry__be_mem_alloc(dev, chunk, &s->d_in)) != 0 ||
            (rc = ferry__be_mem_alloc(dev, chunk, &s->d_out)) != 0)
            goto out_fail;
        for (int e = 0; e < EV_N; e++)
            if ((rc = ferry__be_event_create(dev, &s->ev[e])) != 0)
                goto out_fail;
        s->next_free = p->free_slots;
        p->free_slots = s;
        p->nfree_slots++;
    }
    /* Streams in creation order H2D, compute, D2H: the order decides which hardware queue
     * each lands on (stream k -> queue k mod CUDA_DEVICE_MAX_CONNECTIONS). */
    for (unsigned i = 0; i < p->nstreams; i++) {
        bool copy = i < p->ncopy || i >= p->ncopy + p->ncomp;
        p->stream_kind[i] = p->single ? 'a' : i < p->ncopy ? 'h' : (copy ? 'd' : 'c');
        if ((rc = ferry__be_stream_create(dev, copy ? cprio : kprio, &p->streams[i])) != 0)
            goto out_fail;
    }
    if (pthread_create(&p->completer, NULL, completion_main, p) != 0) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: cannot start the completion thread");
        goto out_fail;
    }
    p->completer_started = true;
    pthread_setname_np(p->completer, "ferry-complete");
    if (pthread_create(&p->issuer, NULL, issuer_main, p) != 0) {
        rc = ferry__error(FERRY_ENOMEM, "pipeline: cannot start the issuer thread");
        goto out_fail;
    }
    p->issuer_started = true;
    pthread_setname_np(p->issuer, "ferry-issue");
    ferry_log(FERRY_LOG_INFO, "pipeline",
              "created: stage %s, chunk %zu, depth %u, streams %u H2D + %u compute + %u D2H, "
              "queue %lld, workers %lld",
              p->stage_name, chunk, p->depth, p->ncopy, p->ncomp, p->ncopy, qd, nworkers);
    *out = p;
    return 0;

out_fail:
    destroy(p);
    return ferry__rt_fail(dev->rt, rc);
}

int ferry_pipeline_submit(ferry_pipeline_t *p, const ferry_batch_t *batch, ferry_done_fn cb,
                          void *arg, uint64_t *id)
{
    if (p == NULL || batch == NULL || cb == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL pipeline, batch or "
                                          "callback");
    if (batch->size < offsetof(ferry_batch_t, prepare_arg))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: batch->size not set "
                                          "(use FERRY_BATCH_INIT)");
    if (batch->bytes > 0 && (batch->in == NULL) == (batch->prepare == NULL))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: a batch of %zu bytes needs "
                                          "exactly one of in and prepare",
                            batch->bytes);
    uint64_t nchunks = batch->bytes / p->chunk + (batch->bytes % p->chunk != 0);
    if (nchunks > UINT32_MAX)
        return ferry__error(FERRY_ERANGE, "ferry_pipeline_submit: %zu bytes make more than 2^32 "
                                          "chunks of %zu",
                            batch->bytes, p->chunk);
    if (batch->out != NULL && batch->in != NULL && batch->out != batch->in) {
        uintptr_t a = (uintptr_t)batch->in, b = (uintptr_t)batch->out;
        if (a < b + batch->bytes && b < a + batch->bytes)
            return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: in and out overlap "
                                              "partially");
    }
    batch_rec_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_submit: out of memory");
    b->b = *batch;
    b->b.size = sizeof(b->b);
    b->cb = cb;
    b->arg = arg;
    b->nchunks = (uint32_t)nchunks;
    b->chunks_left = (uint32_t)nchunks;
    b->submit_ns = ferry_device_now_ns(p->dev);
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        pthread_mutex_unlock(&p->lock);
        free(b);
        return ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline is closing");
    }
    uint64_t my_id = b->id = p->next_id++;
    pthread_mutex_unlock(&p->lock);
    bool waited = false;
    int rc = ferry__bqueue_push(p->queue, &b, !p->nonblocking, &waited);
    /* From here b may already be completed and freed. */
    pthread_mutex_lock(&p->lock);
    if (rc != 0) {
        if (rc == FERRY_EAGAIN)
            p->st.queue_full_eagain++;
    } else {
        p->submitted++;
        p->st.batches_submitted++;
        if (waited)
            p->st.queue_full_waits++;
        pthread_cond_broadcast(&p->work_cv);
    }
    pthread_mutex_unlock(&p->lock);
    if (rc != 0) {
        free(b); /* not queued, so still ours */
        return rc == FERRY_EAGAIN ? FERRY_EAGAIN
                                  : ferry__error(rc, "ferry_pipeline_submit: %s",
                                                 ferry_strerror(rc));
    }
    if (id != NULL)
        *id = my_id;
    return 0;
}

int ferry_pipeline_drain(ferry_pipeline_t *p)
{
    if (p == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_drain: NULL pipeline");
    pthread_mutex_lock(&p->lock);
    uint64_t target = p->submitted;
    while (p->completed < target)
        pthread_cond_wait(&p->drain_cv, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int ferry_pipeline_close(ferry_pipeline_t *p)
{
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    if (p->completed != p->submitted) {
        uint64_t n = p->submitted - p->completed;
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EBUSY, "ferry_pipeline_close: %llu batch(es) still in flight; "
                                         "drain first",
                            (unsigned long long)n);
    }
    p->closing = true;
    pthread_mutex_unlock(&p->lock);
    destroy(p);
    return 0;
}

int ferry_pipeline_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out)
{
    if (p == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_stats: NULL argument or size not set "
                                          "(use FERRY_PIPELINE_STATS_INIT)");
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    out->elapsed_ns = p->last_end > p->first_start ? p->last_end - p->first_start : 0;
    double secs = (double)out->elapsed_ns / 1e9;
    out->gbps_h2d = secs > 0 ? (double)out->bytes_h2d / secs / 1e9 : 0;
    out->gbps_d2h = secs > 0 ? (double)out->bytes_d2h / secs / 1e9 : 0;
    out->overlap = out->elapsed_ns
                       ? (double)(out->busy_h2d_ns + out->busy_compute_ns + out->busy_d2h_ns) /
                             (double)out->elapsed_ns
                       : 0;
    out->streams = p->nstreams;
    out->chunk_bytes = p->chunk;
    out->depth = p->depth;
    out->copy_streams = p->ncopy;
    out->compute_streams = p->ncomp;
    out->queue_depth = (unsigned)p->queue_depth;
    out->slots_in_use = p->depth - p->nfree_slots;
    for (unsigned i = 0; i < p->nstreams; i++) {
        out->stream_kind[i] = p->stream_kind[i];
        out->stream_busy_ns[i] = p->stream_busy[i];
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}

static const char *kind_name(char k)
{
    return k == 'h' ? "H2D" : k == 'c' ? "compute" : k == 'd' ? "D2H" : "all";
}

int ferry_pipeline_write_trace(ferry_pipeline_t *p, const char *path)
{
    if (p == NULL || path == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_write_trace: NULL argument");
    pthread_mutex_lock(&p->lock);
    if (!p->tracing && p->ntrace == 0) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ESTATE, "ferry_pipeline_write_trace: tracing is off (set the "
                                          "trace option, FERRY_TRACE=1)");
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EIO, "cannot write trace %s: %s", path, strerror(errno));
    }
    /* Chrome trace format: pid 1 holds one track (tid) per stream, pid 2 one per engine class.
     * Times in microseconds. */
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"backend\":\"%s\",\"device\":\"%s\","
               "\"simulated\":%s},\"traceEvents\":[\n",
            p->dev->ops->name, p->dev->props.name, p->dev->props.simulated ? "true" : "false");
    fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"streams\"}},\n");
    fprintf(f, "{\"ph\":\"M\",\"pid\":2,\"name\":\"process_name\",\"args\":{\"name\":\"engines\"}},\n");
    for (unsigned i = 0; i < p->nstreams; i++)
        fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":"
                   "{\"name\":\"stream %u (%s)\"}},\n",
                i, i, kind_name(p->stream_kind[i]));
    const char kinds[3] = {'h', 'c', 'd'};
    for (int k = 0; k < 3; k++)
        fprintf(f, "{\"ph\":\"M\",\"pid\":2,\"tid\":%d,\"name\":\"thread_name\",\"args\":"
                   "{\"name\":\"%s engine\"}},\n",
                k, kind_name(kinds[k]));
    uint64_t t0 = p->first_start;
    for (size_t i = 0; i < p->ntrace; i++) {
        const trace_rec_t *r = &p->trace[i];
        double ts = (double)(r->start - t0) / 1e3, dur = (double)(r->end - r->start) / 1e3;
        int eng = r->kind == 'h' ? 0 : (r->kind == 'c' ? 1 : 2);
        for (int pid = 1; pid <= 2; pid++)
            fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                       "\"name\":\"%s b%llu c%u\",\"cat\":\"%s\",\"args\":{\"batch\":%llu,"
                       "\"chunk\":%u,\"bytes\":%llu}},\n",
                    pid, pid == 1 ? (int)r->stream : eng, ts, dur, kind_name(r->kind),
                    (unsigned long long)r->batch, r->chunk, kind_name(r->kind),
                    (unsigned long long)r->batch, r->chunk, (unsigned long long)r->bytes);
    }
    fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":1}}\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_EIO, "error writing trace %s", path);
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}
