/* A worker process (worker.h): a runtime of its own on the device it was given, one pipeline
 * with the application's stage, and a loop that maps the regions it is sent, submits the
 * batches it is sent (pointers into them) and reports each completion. Its callbacks run on
 * its pipeline's completion thread and send on the channel under a lock; the loop reads. When
 * its pipeline's GPU path ends (a sticky error, a hang) it says so and exits at once: what it
 * had not reported the application runs again on a fresh worker, and the device is back in a
 * new process instead of the CPU path. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "core/runtime.h"
#include "ferry/options.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/worker.h"
#include "proc/chan.h"
#include "proc/shm.h"

typedef struct wk {
    ferry__chan_t ch;
    pthread_mutex_t mu; /* the channel's sends */
    ferry_pipeline_t *pl;
    const ferry__wk_hello_t *h;
    uint64_t beat_ms;        /* option worker_deadline_ms; 0: no heartbeat */
    pthread_mutex_t beat_mu; /* closing; held while the heartbeat reads the figures */
    pthread_cond_t beat_cv;
    pthread_t beat;
    bool beating, closing;
    _Atomic int lost;
} wk_t;

/* A message to the application: a hot one through the ring (a full ring is waited out: the
 * application's reader empties it; a BEAT is dropped instead), the others over the socket.
 * 0, or -1 when the application has gone. */
static int send_wk(wk_t *w, const ferry__wk_msg_t *m)
{
    pthread_mutex_lock(&w->mu);
    int rc;
    if (FERRY__WK_IS_HOT(m->kind)) {
        while ((rc = ferry__chan_post(&w->ch, m, FERRY__WK_HOT)) != 0 && errno == EAGAIN &&
               m->kind != FERRY__WK_BEAT) {
            pthread_mutex_unlock(&w->mu);
            usleep(20);
            pthread_mutex_lock(&w->mu);
        }
        rc = rc != 0 && m->kind == FERRY__WK_BEAT && errno == EAGAIN ? 0 : rc;
    } else {
        rc = ferry__chan_send(&w->ch, m, sizeof(*m), -1, 0);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static wk_t *the_worker; /* one a process */

/* The heartbeat (option worker_deadline_ms): every quarter of the deadline, a BEAT while the
 * pipeline finishes chunks or has no batch in flight. A worker stopped, deadlocked (its
 * pipeline's lock held: the figures never come) or stuck on chunks that never end sends none,
 * and the application kills it once the deadline has passed with batches in flight. */
static void *beat_main(void *arg)
{
    wk_t *w = arg;
    uint64_t period_ns = w->beat_ms * 1000000ull / 4, last = UINT64_MAX;
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    pthread_mutex_lock(&w->beat_mu);
    while (!w->closing) {
        uint64_t ns = (uint64_t)at.tv_nsec + period_ns;
        at.tv_sec += (time_t)(ns / 1000000000u);
        at.tv_nsec = (long)(ns % 1000000000u);
        while (!w->closing && pthread_cond_timedwait(&w->beat_cv, &w->beat_mu, &at) == 0) {
        }
        if (w->closing)
            break;
        ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
        ferry_pipeline_stats(w->pl, &st);
        uint64_t done = st.chunks + st.chunks_cpu;
        bool idle =
            st.batches_submitted == st.batches_done_gpu + st.batches_done_cpu + st.batches_failed;
        ferry__wk_msg_t m = {.kind = FERRY__WK_BEAT};
        if ((done != last || idle) && send_wk(w, &m) != 0)
            break; /* the application is gone: the main loop sees it too */
        last = done;
    }
    w->beating = false; /* detached: beat_stop waits for this */
    pthread_cond_broadcast(&w->beat_cv);
    pthread_mutex_unlock(&w->beat_mu);
    return NULL;
}

/* Start the heartbeat, if option worker_deadline_ms asks for one. */
static int beat_start(wk_t *w, ferry_runtime_t *rt)
{
    w->beat_ms = (uint64_t)ferry__opt_i64(rt->opts, FERRY__OPT_worker_deadline_ms);
    pthread_mutex_init(&w->beat_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->beat_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (w->beat_ms == 0)
        return 0;
    /* detached: the worker may _exit while it runs or after it ended (its socket closed) */
    pthread_mutex_lock(&w->beat_mu);
    w->beating = pthread_create(&w->beat, NULL, beat_main, w) == 0;
    if (w->beating)
        pthread_detach(w->beat);
    int rc = w->beating ? 0 : -1;
    pthread_mutex_unlock(&w->beat_mu);
    return rc;
}

/* Stop it: before the pipeline goes. */
static void beat_stop(wk_t *w)
{
    pthread_mutex_lock(&w->beat_mu);
    w->closing = true;
    pthread_cond_broadcast(&w->beat_cv);
    while (w->beating)
        pthread_cond_wait(&w->beat_cv, &w->beat_mu);
    pthread_mutex_unlock(&w->beat_mu);
}

/* The pipeline's GPU path has ended (pipeline_internal.h, gpu_end): the worker says so and
 * exits before the CPU path runs anything. The application runs what it had not reported on a
 * new worker; the device's queued copies, which may still land in the batches' memory, end with
 * this process. */
static void lost(ferry_pipeline_t *p, bool hung)
{
    (void)p;
    wk_t *w = the_worker;
    if (atomic_exchange(&w->lost, 1) == 0) {
        ferry__wk_msg_t m = {.kind = FERRY__WK_LOST, .status = FERRY_ESTICKY};
        snprintf(m.text, sizeof(m.text), "%s", hung ? "a kernel hung" : "a sticky error");
        send_wk(w, &m);
    }
    _exit(hung ? FERRY__WK_EXIT_HUNG : FERRY__WK_EXIT_STICKY);
}

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    wk_t *w = the_worker;
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(w->pl, &st);
    if (st.gpu_lost || st.gpu_hung) /* the GPU path ended (a backstop: gpu_end comes first) */
        lost(w->pl, st.gpu_hung);
    ferry__wk_msg_t m = {.kind = FERRY__WK_DONE,
                         .status = r->status,
                         .seq = (uint64_t)(uintptr_t)arg,
                         .where = (int32_t)r->where,
                         .chunks = r->chunks,
                         .submit_ns = r->submit_ns,
                         .done_ns = r->done_ns,
                         .elapsed_ns = st.elapsed_ns,
                         .busy_ns = {st.busy_h2d_ns, st.busy_compute_ns, st.busy_d2h_ns},
                         .chunks_all = st.chunks,
                         .chunks_cpu = st.chunks_cpu};
    if (send_wk(w, &m) != 0)
        _exit(4); /* the application is gone */
}

/* Runtime, device and pipeline from the hello; the reason in @why on an error. */
static int start(wk_t *w, const char *opts, const void *user, ferry_runtime_t **rt,
                 ferry_stage_t *st)
{
    const ferry__wk_hello_t *h = w->h;
    ferry_options_t *o = NULL;
    int rc = ferry_options_create(&o);
    if (rc == 0)
        rc = ferry__options_apply_text(o, opts, h->options_len);
    if (rc == 0)
        rc = ferry_options_set(o, "isolation", "thread");
    ferry_runtime_config_t rc_cfg = FERRY_RUNTIME_CONFIG_INIT;
    rc_cfg.backend = h->backend;
    rc_cfg.options = o;
    if (rc == 0)
        rc = ferry_runtime_create(&rc_cfg, rt);
    ferry_options_destroy(o);
    ferry_device_t *dev = NULL;
    if (rc == 0)
        rc = ferry_device_get(*rt, h->device, &dev);
    if (rc != 0)
        return rc;
    *st = (ferry_stage_t)FERRY_STAGE_INIT;
    st->name = h->stage_name;
    st->gpu = h->gpu;
    st->cpu = h->cpu;
    st->user = h->user;
    if (h->user_bytes > 0) { /* copied out of the message: aligned as malloc aligns */
        void *u = malloc(h->user_bytes);
        if (u == NULL)
            return ferry__error(FERRY_ENOMEM, "worker: out of memory");
        memcpy(u, user, h->user_bytes);
        st->user = u; /* the process's until it exits */
    }
    st->ns_per_byte = h->ns_per_byte;
    st->granularity = h->granularity;
    ferry_pipeline_config_t c = h->cfg;
    c.size = sizeof(c);
    c.device = dev;
    c.devices = NULL;
    c.ndevices = 0;
    c.stage = st;
    c.on_alert = NULL;
    c.alert_arg = NULL;
    int prc = ferry_pipeline_create(&c, &w->pl);
    if (prc == 0)
        w->pl->gpu_end = lost;
    return prc;
}

/* The regions this worker has mapped: a region the application sends at a place where an
 * older one of another serial was (one it freed since) replaces it, unpinned first. */
typedef struct wk_region {
    void *base;
    size_t bytes;
    uint64_t serial;
} wk_region_t;
static wk_region_t *regions;
static size_t nregions, cap_regions;

/* Unpin and unmap the regions that overlap [@p, @p + @n). */
static void drop_overlaps(ferry_device_t *dev, const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < nregions;) {
        wk_region_t *g = &regions[i];
        uintptr_t b = (uintptr_t)g->base;
        if (b < a + n && a < b + g->bytes) {
            if (dev != NULL)
                (void)ferry_host_unregister(dev, g->base);
            ferry__shm_unmap_at(g->base, g->bytes);
            *g = regions[--nregions];
        } else {
            i++;
        }
    }
}

/* A region to map where the application has it (its serial in seq), and to pin for the
 * device; one this worker has already is kept as it is. */
static int map_region(wk_t *w, ferry_runtime_t *rt, const ferry__wk_msg_t *m, int fd)
{
    for (size_t i = 0; i < nregions; i++)
        if (regions[i].serial == m->seq && regions[i].base == m->in) {
            close(fd);
            return 0;
        }
    ferry_device_t *dev = NULL;
    if (ferry_device_get(rt, w->h->device, &dev) != 0)
        dev = NULL;
    drop_overlaps(dev, m->in, m->bytes);
    if (nregions == cap_regions) {
        size_t cap = cap_regions ? 2 * cap_regions : 16;
        wk_region_t *nr = realloc(regions, cap * sizeof(*nr));
        if (nr == NULL) {
            close(fd);
            return ferry__error(FERRY_ENOMEM, "worker: out of memory");
        }
        regions = nr;
        cap_regions = cap;
    }
    int rc = ferry__shm_map_at(fd, m->in, m->bytes, w->h->arena, w->h->arena_bytes);
    close(fd);
    if (rc != 0)
        return rc;
    regions[nregions++] = (wk_region_t){m->in, m->bytes, m->seq};
    if (dev != NULL && ferry_host_register(dev, m->in, m->bytes) != 0) /* unpinned: staged */
        ferry_log(FERRY_LOG_WARN, "pipeline", "worker: %s", ferry_last_error());
    return 0;
}

/* MEASURE: the connections pattern on this worker's device, its queues its own. */
static void measure(wk_t *w, ferry_runtime_t *rt, const ferry__wk_msg_t *m)
{
    ferry__wk_msg_t a = {.kind = FERRY__WK_MEASURED};
    a.meas = (ferry_conn_measure_t)FERRY_CONN_MEASURE_INIT;
    ferry_device_t *dev = NULL;
    a.status = ferry_device_get(rt, w->h->device, &dev);
    if (a.status == 0)
        a.status = ferry_connections_measure(dev, m->chunks, m->submit_ns, m->done_ns,
                                             (unsigned)m->status, &a.meas);
    if (a.status != 0)
        snprintf(a.text, sizeof(a.text), "%s", ferry_last_error());
    send_wk(w, &a);
}

/* The application's next message and its descriptor (-1 when none): 0, or -1 at the end. */
static int recv_wk(wk_t *w, ferry__wk_msg_t *m, int *fd)
{
    return ferry__chan_recv(&w->ch, m, sizeof(*m), fd, -1) > 0 ? 0 : -1;
}

int ferry__worker_main(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    const ferry__wk_hello_t *h = msg;
    if (nfds < FERRY__CHAN_FDS || len < sizeof(*h) || h->magic != FERRY__WK_MAGIC ||
        len != sizeof(*h) + h->options_len + h->user_bytes)
        return 2;
    static wk_t w;
    w = (wk_t){.h = h};
    if (ferry__chan_attach(fds, &w.ch) != 0)
        return 2;
    pthread_mutex_init(&w.mu, NULL);
    the_worker = &w;
    const char *opts = (const char *)(h + 1);
    ferry_runtime_t *rt = NULL;
    ferry_stage_t st;
    int rc = start(&w, opts, opts + h->options_len, &rt, &st);
    ferry__wk_msg_t m = {.kind = FERRY__WK_READY, .status = rc};
    m.stats.size = sizeof(m.stats);
    if (rc != 0)
        snprintf(m.text, sizeof(m.text), "%s", ferry_last_error());
    else
        ferry_pipeline_stats(w.pl, &m.stats); /* its connections, as its context read them */
    if (send_wk(&w, &m) != 0 || rc != 0)
        _exit(rc != 0 ? 2 : 4);
    if (beat_start(&w, rt) != 0)
        _exit(2); /* without it the application would take it for hung */
    for (;;) {
        int fd = -1;
        if (recv_wk(&w, &m, &fd) != 0)
            _exit(4); /* the application is gone: nothing to report to */
        if (m.kind == FERRY__WK_MAP && fd >= 0) {
            if (map_region(&w, rt, &m, fd) != 0)
                _exit(4);
        } else if (m.kind == FERRY__WK_SUBMIT) {
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = m.in;
            b.out = m.out;
            b.bytes = m.bytes;
            b.user = m.user;
            int src = ferry_pipeline_submit(w.pl, &b, on_done, (void *)(uintptr_t)m.seq, NULL);
            if (src != 0) { /* refused: the batch fails, said once */
                ferry__wk_msg_t d = {.kind = FERRY__WK_DONE, .seq = m.seq, .status = src};
                d.where = FERRY_DONE_FAILED;
                send_wk(&w, &d);
            }
        } else if (m.kind == FERRY__WK_MEASURE) {
            measure(&w, rt, &m);
        } else if (m.kind == FERRY__WK_FAIL) {
            ferry__wk_msg_t d = {.kind = FERRY__WK_DONE, .seq = m.seq, .status = m.status};
            d.where = FERRY_DONE_FAILED;
            send_wk(&w, &d);
        } else if (m.kind == FERRY__WK_CLOSE) {
            ferry_pipeline_drain(w.pl);
            beat_stop(&w);
            ferry__wk_msg_t s = {.kind = FERRY__WK_STATS};
            s.stats.size = sizeof(s.stats);
            ferry_pipeline_stats(w.pl, &s.stats);
            ferry_pipeline_destroy(w.pl);
            ferry_runtime_destroy(rt);
            send_wk(&w, &s);
            _exit(0);
        } else if (fd >= 0) {
            close(fd);
        }
    }
}
