/* The watchdog (watchdog.h): deadlines, the abort word, the heartbeat, and the two threads
 * watching each other. */
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault/watchdog.h"

#define MAX_HEADS FERRY_STATS_MAX_STREAMS
/* Raises remembered for the overrun figure (the newest ones). */
#define RAISES 8
/* A thread that has not shown life for this long (and at least this many periods) stalled. */
#define STALL_MIN_NS (100u * 1000000u)
/* The mapped pages: the abort word's copies, then the heartbeat's counter. */
#define HB_OFFSET         ((size_t)FERRY_ABORT_REPLICAS * FERRY_ABORT_STRIDE)
#define PAGE_BYTES        (HB_OFFSET + 4096)
#define STALL_MIN_PERIODS 50u

struct ferry__watchdog {
    ferry_device_t *dev;
    ferry__wd_config_t cfg;
    char name[64];

    /* The mapped pages: the abort word's copies (ferry.h: FERRY_ABORT_REPLICAS) in the first,
     * the heartbeat's counter at the start of the second. The abort
     * word moves to device memory where the backend offers one (abort_own): kernels then
     * poll it at no cost, and only abort_kernels writes it. */
    unsigned char *page;
    bool registered;
    /* Words of the mapped page, shared with kernels: plain uint64_t, not _Atomic (the device
     * reads and writes them too), so the host uses the __atomic builtins on them. */
    volatile uint64_t *abort_host, *hb_host;
    const volatile uint64_t *abort_dev;
    volatile uint64_t *abort_own;
    volatile uint64_t *hb_dev;
    ferry_be_stream_t *hb_stream;

    pthread_mutex_t mu; /* the heads and the step's state */
    ferry__wd_head_t heads[MAX_HEADS];
    unsigned nheads;
    uint64_t lat_ewma_ns;
    _Atomic uint64_t comp_tick, wd_tick; /* device clock of the last publish, the last step */
    _Atomic uint64_t raised;             /* the abort word's value */
    struct {
        uint64_t seq, deadline_at;
    } raises[RAISES];
    unsigned nraises;
    struct {
        uint64_t seq, ns;
    } aborted[MAX_HEADS]; /* per head: since when it has been at or below the abort word */
    bool hung, comp_stalled;
    atomic_bool wd_stalled;
    _Atomic uint64_t hb_sent; /* written under mu, read by the stats without it */
    uint64_t hb_sent_ns, hb_launch_ns;
    bool hb_stalled, hb_off, hb_launching;

    /* Stats. */
    _Atomic uint64_t overrun_max, hb_seen, hb_stalls, comp_stalls, wd_stalls;

    pthread_t thread, hb_thread;
    bool started, hb_started, stop; /* stop under mu */
    pthread_cond_t cv, hb_cv;
};

static uint64_t stall_ns(const ferry__watchdog_t *w, uint64_t floor)
{
    uint64_t t = w->cfg.period_ns * STALL_MIN_PERIODS;
    if (t < STALL_MIN_NS)
        t = STALL_MIN_NS;
    return t > floor ? t : floor;
}

/* ---- the mapped page -------------------------------------------------------------------- */

static void map_page(ferry__watchdog_t *w)
{
    void *pg = NULL;
    void *dp = NULL;
    if (posix_memalign(&pg, 4096, PAGE_BYTES) != 0) {
        ferry_log(FERRY_LOG_WARN, "watchdog", "%s: out of memory for the abort word", w->name);
        return;
    }
    memset(pg, 0, PAGE_BYTES);
    w->page = pg;
    int rc = ferry__be_host_register(w->dev, pg, PAGE_BYTES);
    if (rc == 0) {
        w->registered = true;
        rc = ferry__be_host_device_ptr(w->dev, pg, &dp);
    }
    if (rc != 0) {
        ferry_log(FERRY_LOG_INFO, "watchdog",
                  "%s: no abort word and no heartbeat (mapped host memory: %s); deadlines still "
                  "apply",
                  w->name, ferry__last_error_text());
        return;
    }
    w->abort_host = (volatile uint64_t *)pg;
    w->hb_host = (volatile uint64_t *)((unsigned char *)pg + HB_OFFSET);
    w->abort_dev = (const volatile uint64_t *)dp;
    w->hb_dev = (volatile uint64_t *)((unsigned char *)dp + HB_OFFSET);
}

/* The abort word in device memory where the backend has one (a GPU): every read of a mapped
 * host word by a kernel crosses the link, and reads from many blocks queue (FACTS.md: a
 * byte-wise kernel polling once per block, 13.5 us -> 2,214 us over 8 MiB). Else the mapped
 * page's word stays. */
static void own_word(ferry__watchdog_t *w)
{
    volatile uint64_t *word = NULL;
    int rc = ferry__be_abort_word_create(w->dev, &word);
    if (rc == 0) {
        w->abort_own = word;
        w->abort_dev = word;
        w->abort_host = NULL;
    } else if (rc != FERRY_ENOTSUP) {
        ferry_log(FERRY_LOG_WARN, "watchdog",
                  "%s: no abort word in device memory (%s): kernels that poll "
                  "ferry_should_abort() read it over the link",
                  w->name, ferry__last_error_text());
    }
}

static void unmap_page(ferry__watchdog_t *w, bool hung)
{
    if (w->page == NULL)
        return;
    /* The last beat: waited for, unless the device is hung (a GPU would never return; the
     * simulator returns at once). */
    if (w->hb_stream != NULL && (!hung || !w->cfg.own_thread))
        (void)ferry__be_stream_sync(w->dev, w->hb_stream);
    /* A beat still queued on a GPU may be written later, into freed memory: keep the page
     * then. (A simulated one stuck behind a hung kernel never runs once no abort can come.) */
    if (w->cfg.own_thread && w->hb_host != NULL &&
        __atomic_load_n(w->hb_host, __ATOMIC_ACQUIRE) < w->hb_sent) {
        ferry_log(FERRY_LOG_DEBUG, "watchdog", "%s: a heartbeat is still queued; its page stays",
                  w->name);
        return;
    }
    /* Unregistering waits for the device: not on a hung one (the page is left to the end). */
    if (hung && w->cfg.own_thread)
        return;
    if (w->registered)
        ferry__be_host_unregister(w->dev, w->page);
    free(w->page);
}

/* ---- the step --------------------------------------------------------------------------- */

enum { ACT_RAISE, ACT_HANG };
typedef struct action {
    int kind;
    ferry__wd_head_t h;
    uint64_t ns; /* raise: the deadline; hang: time since the abort */
} action_t;

/* The completion thread's sign of life: reported when it stopped polling with chunks in
 * flight. Returns true while it is stalled (its heads are stale: deadlines wait). Under mu. */
static bool completion_stalled(ferry__watchdog_t *w, uint64_t now)
{
    bool inflight = false;
    for (unsigned i = 0; i < w->nheads; i++)
        inflight |= w->heads[i].seq != 0;
    uint64_t tick = atomic_load_explicit(&w->comp_tick, memory_order_acquire);
    bool stalled = inflight && now > tick && now - tick > stall_ns(w, w->cfg.floor_ns);
    if (stalled && !w->comp_stalled) {
        atomic_fetch_add_explicit(&w->comp_stalls, 1, memory_order_relaxed);
        ferry_log(FERRY_LOG_WARN, "watchdog",
                  "%s: the completion thread has not polled for %.0f ms with chunks in flight "
                  "(a batch callback that blocks?); deadlines wait until it does",
                  w->name, (double)(now - tick) / 1e6);
    } else if (!stalled && w->comp_stalled) {
        ferry_log(FERRY_LOG_INFO, "watchdog", "%s: the completion thread polls again", w->name);
    }
    w->comp_stalled = stalled;
    return stalled;
}

/* The abort word to @seq: the value chunks are judged by, and every copy of a word in the mapped
 * page (a word in device memory is written by abort_kernels). Under mu. */
static void raise_word(ferry__watchdog_t *w, uint64_t seq)
{
    atomic_store_explicit(&w->raised, seq, memory_order_seq_cst);
    /* The mapped copies are read by kernels: a builtin store, they cannot be _Atomic. */
    for (unsigned r = 0; w->abort_host != NULL && r < FERRY_ABORT_REPLICAS; r++)
        __atomic_store_n(
            (volatile uint64_t *)((volatile unsigned char *)w->abort_host + r * FERRY_ABORT_STRIDE),
            seq, __ATOMIC_SEQ_CST);
}

/* Deadlines of the heads: raise the abort word past one, report a hang a floor after. Under
 * mu; the callbacks run later, from @acts. */
static unsigned check_heads(ferry__watchdog_t *w, uint64_t now, action_t *acts)
{
    unsigned n = 0;
    uint64_t deadline = w->cfg.floor_ns + (uint64_t)(w->cfg.factor * (double)w->lat_ewma_ns);
    for (unsigned i = 0; i < w->nheads; i++) {
        const ferry__wd_head_t *h = &w->heads[i];
        if (h->seq == 0)
            continue;
        uint64_t raised = atomic_load_explicit(&w->raised, memory_order_relaxed);
        if (h->seq > raised) {
            if (now <= h->since_ns || now - h->since_ns <= deadline)
                continue;
            raise_word(w, h->seq);
            w->raises[w->nraises % RAISES].seq = h->seq;
            w->raises[w->nraises % RAISES].deadline_at = h->since_ns + deadline;
            w->nraises++;
            acts[n++] = (action_t){ACT_RAISE, *h, deadline};
        } else if (w->aborted[i].seq != h->seq) {
            w->aborted[i].seq = h->seq;
            w->aborted[i].ns = now;
        } else if (!w->hung && now - w->aborted[i].ns > w->cfg.floor_ns) {
            w->hung = true;
            acts[n++] = (action_t){ACT_HANG, *h, now - w->aborted[i].ns};
        }
    }
    return n;
}

/* The heartbeat's check: a beat not seen within the floor of its launch, or a launch that has
 * not returned within the floor (the driver may wait for a busy device), is a stall, reported
 * once until beats are seen again. Returns whether a beat is due. Under mu. */
static bool heartbeat_check(ferry__watchdog_t *w, uint64_t now)
{
    if (w->hb_host == NULL || w->cfg.heartbeat_ns == 0 || w->hb_off)
        return false;
    uint64_t seen = __atomic_load_n(w->hb_host, __ATOMIC_ACQUIRE);
    atomic_store_explicit(&w->hb_seen, seen, memory_order_relaxed);
    uint64_t since = w->hb_launching ? w->hb_launch_ns : w->hb_sent_ns;
    if (w->hb_launching || seen < w->hb_sent) {
        if (!w->hb_stalled && now > since && now - since > w->cfg.floor_ns) {
            w->hb_stalled = true;
            atomic_fetch_add_explicit(&w->hb_stalls, 1, memory_order_relaxed);
            ferry_log(FERRY_LOG_WARN, "watchdog",
                      w->hb_launching ? "%s: launching the heartbeat kernel has not returned for "
                                        "%.0f ms: the driver waits for the GPU"
                                      : "%s: the GPU has not run the heartbeat kernel for %.0f "
                                        "ms: it schedules no new work (a kernel holding every SM, "
                                        "or a hung GPU)",
                      w->name, (double)(now - since) / 1e6);
        }
        return false;
    }
    if (w->hb_stalled) {
        w->hb_stalled = false;
        ferry_log(FERRY_LOG_INFO, "watchdog", "%s: the heartbeat runs again", w->name);
    }
    return w->hb_sent == 0 || now - w->hb_sent_ns >= w->cfg.heartbeat_ns;
}

/* Queue the next beat. Not under mu: a launch can block in the driver, and the deadlines must
 * not wait for it (on a GPU this runs in the heartbeat thread). */
static void heartbeat_send(ferry__watchdog_t *w, uint64_t now)
{
    pthread_mutex_lock(&w->mu);
    w->hb_launching = true;
    w->hb_launch_ns = now;
    uint64_t value = w->hb_sent + 1;
    pthread_mutex_unlock(&w->mu);
    int rc = 0;
    if (w->hb_stream == NULL)
        rc = ferry__be_stream_create(w->dev, w->cfg.heartbeat_priority, &w->hb_stream);
    if (rc == 0)
        rc = ferry__be_heartbeat(w->dev, w->hb_stream, w->hb_dev, value);
    pthread_mutex_lock(&w->mu);
    w->hb_launching = false;
    if (rc == 0) {
        atomic_store_explicit(&w->hb_sent, value, memory_order_relaxed);
        w->hb_sent_ns = now;
    } else {
        w->hb_off = true;
        ferry_log(FERRY_LOG_WARN, "watchdog", "%s: the heartbeat stopped: %s", w->name,
                  ferry__last_error_text());
    }
    pthread_mutex_unlock(&w->mu);
}

void ferry__watchdog_step(ferry__watchdog_t *w, uint64_t now)
{
    action_t acts[2 * MAX_HEADS];
    unsigned n = 0;
    pthread_mutex_lock(&w->mu);
    atomic_store_explicit(&w->wd_tick, now, memory_order_release);
    if (!completion_stalled(w, now))
        n = check_heads(w, now, acts);
    bool beat = heartbeat_check(w, now);
    bool hb_stalled = w->hb_stalled;
    pthread_mutex_unlock(&w->mu);
    if (beat && !w->cfg.own_thread)
        heartbeat_send(w, now);
    for (unsigned i = 0; i < n; i++) {
        if (acts[i].kind == ACT_RAISE) {
            int stopped = ferry__be_abort_kernels(w->dev, w->abort_dev, acts[i].h.seq);
            w->cfg.on_deadline(w->cfg.ctx, &acts[i].h, now, acts[i].ns, stopped);
        } else {
            w->cfg.on_hang(w->cfg.ctx, &acts[i].h, now, acts[i].ns, hb_stalled);
        }
    }
}

/* ---- the thread ------------------------------------------------------------------------- */

static void *watchdog_main(void *arg)
{
    ferry__watchdog_t *w = arg;
#ifdef __linux__
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* a 1 ms period must wake on time */
#endif
    while (ferry__cond_nap(&w->cv, &w->mu, &w->stop, w->cfg.period_ns))
        ferry__watchdog_step(w, ferry_device_now_ns(w->dev));
    return NULL;
}

/* GPUs: the heartbeat's own thread, so that a launch that blocks holds up no deadline. */
static void *heartbeat_main(void *arg)
{
    ferry__watchdog_t *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        uint64_t nap =
            w->cfg.period_ns < w->cfg.heartbeat_ns ? w->cfg.period_ns : w->cfg.heartbeat_ns;
        ferry__cond_sleep(&w->hb_cv, &w->mu, &w->stop, nap);
        if (w->stop)
            break;
        uint64_t now = ferry_device_now_ns(w->dev);
        bool beat = !w->hb_off && __atomic_load_n(w->hb_host, __ATOMIC_ACQUIRE) >= w->hb_sent &&
                    (w->hb_sent == 0 || now - w->hb_sent_ns >= w->cfg.heartbeat_ns);
        if (beat) {
            pthread_mutex_unlock(&w->mu);
            heartbeat_send(w, now);
            pthread_mutex_lock(&w->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int ferry__watchdog_create(ferry_device_t *dev, const ferry__wd_config_t *cfg,
                           ferry__watchdog_t **out)
{
    int rc = 0;
    ferry__watchdog_t *w = ferry__obj_alloc(out, sizeof(*w), "watchdog", &rc);
    if (w == NULL)
        return rc;
    w->dev = dev;
    w->cfg = *cfg;
    ferry__strlcpy(w->name, cfg->name ? cfg->name : "pipeline", sizeof(w->name));
    w->cfg.name = w->name;
    pthread_mutex_init(&w->mu, NULL);
    ferry__cond_init_monotonic(&w->cv);
    ferry__cond_init_monotonic(&w->hb_cv);
    map_page(w);
    own_word(w);
    uint64_t now = ferry_device_now_ns(dev);
    w->comp_tick = w->wd_tick = now;
    /* The first beat from here, before any stage kernel runs: its stream is created and its
     * kernel loaded while the device is free. */
    if (w->hb_host != NULL && cfg->heartbeat_ns != 0)
        heartbeat_send(w, now);
    if (cfg->own_thread) {
        if (ferry__thread_start(&w->thread, &w->started, watchdog_main, w, "ferry-watchdog") != 0) {
            ferry__watchdog_destroy(w, false);
            return ferry__error(FERRY_ENOMEM, "watchdog: cannot start its thread");
        }
        if (w->hb_host != NULL && cfg->heartbeat_ns != 0 &&
            ferry__thread_start(&w->hb_thread, &w->hb_started, heartbeat_main, w,
                                "ferry-heartbeat") != 0) {
            ferry__watchdog_destroy(w, false);
            return ferry__error(FERRY_ENOMEM, "watchdog: cannot start the heartbeat thread");
        }
    }
    *out = w;
    return 0;
}

void ferry__watchdog_destroy(ferry__watchdog_t *w, bool hung)
{
    if (w == NULL)
        return;
    ferry__flag_set_wake(&w->mu, &w->stop, &w->cv, &w->hb_cv);
    if (w->started)
        pthread_join(w->thread, NULL);
    if (w->hb_started)
        pthread_join(w->hb_thread, NULL);
    unmap_page(w, hung);
    ferry__be_abort_word_destroy(w->dev, w->abort_own);
    ferry__be_stream_destroy(w->dev, w->hb_stream);
    pthread_cond_destroy(&w->cv);
    pthread_cond_destroy(&w->hb_cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* ---- the completion thread's side ------------------------------------------------------- */

const volatile uint64_t *ferry__watchdog_abort_word(const ferry__watchdog_t *w)
{
    return w != NULL ? w->abort_dev : NULL;
}

uint64_t ferry__watchdog_raised(const ferry__watchdog_t *w)
{
    return w != NULL ? atomic_load_explicit(&w->raised, memory_order_seq_cst) : 0;
}

void ferry__watchdog_publish(ferry__watchdog_t *w, const ferry__wd_head_t *heads, unsigned n,
                             uint64_t lat_ewma_ns, uint64_t now)
{
    if (n > MAX_HEADS)
        n = MAX_HEADS;
    pthread_mutex_lock(&w->mu);
    memcpy(w->heads, heads, n * sizeof(*heads));
    w->nheads = n;
    w->lat_ewma_ns = lat_ewma_ns;
    atomic_store_explicit(&w->comp_tick, now, memory_order_release);
    pthread_mutex_unlock(&w->mu);
}

void ferry__watchdog_alive(ferry__watchdog_t *w, uint64_t now)
{
    atomic_store_explicit(&w->comp_tick, now, memory_order_release);
}

void ferry__watchdog_check_alive(ferry__watchdog_t *w, uint64_t now)
{
    uint64_t tick = atomic_load_explicit(&w->wd_tick, memory_order_acquire);
    bool stalled = now > tick && now - tick > stall_ns(w, 0);
    if (stalled == atomic_load_explicit(&w->wd_stalled, memory_order_relaxed))
        return;
    atomic_store_explicit(&w->wd_stalled, stalled, memory_order_relaxed);
    if (stalled) {
        atomic_fetch_add_explicit(&w->wd_stalls, 1, memory_order_relaxed);
        ferry_log(FERRY_LOG_ERROR, "watchdog",
                  "%s: the watchdog thread has not run for %.0f ms: deadlines and the heartbeat "
                  "go unchecked meanwhile (an overloaded host?)",
                  w->name, (double)(now - tick) / 1e6);
    } else {
        ferry_log(FERRY_LOG_INFO, "watchdog", "%s: the watchdog thread runs again", w->name);
    }
}

int ferry__watchdog_abort(ferry__watchdog_t *w, uint64_t seq)
{
    if (w == NULL)
        return FERRY_ENOTSUP;
    pthread_mutex_lock(&w->mu);
    if (seq > atomic_load_explicit(&w->raised, memory_order_relaxed))
        raise_word(w, seq);
    pthread_mutex_unlock(&w->mu);
    if (w->abort_dev == NULL)
        return FERRY_ENOTSUP;
    return ferry__be_abort_kernels(w->dev, w->abort_dev, seq);
}

void ferry__watchdog_retired_aborted(ferry__watchdog_t *w, uint64_t seq, uint64_t now)
{
    pthread_mutex_lock(&w->mu);
    for (unsigned i = 0; i < RAISES && i < w->nraises; i++) {
        if (w->raises[i].seq != seq)
            continue;
        uint64_t over = now > w->raises[i].deadline_at ? now - w->raises[i].deadline_at : 0;
        if (over > w->overrun_max)
            atomic_store_explicit(&w->overrun_max, over, memory_order_relaxed);
    }
    pthread_mutex_unlock(&w->mu);
}

void ferry__watchdog_stats(const ferry__watchdog_t *w, ferry_pipeline_stats_t *out)
{
    if (w == NULL || out->size < offsetof(ferry_pipeline_stats_t, watchdog_stalls) + 8)
        return;
    out->deadline_overrun_ns = atomic_load_explicit(&w->overrun_max, memory_order_relaxed);
    out->heartbeats_sent = atomic_load_explicit(&w->hb_sent, memory_order_relaxed);
    out->heartbeats_seen = atomic_load_explicit(&w->hb_seen, memory_order_relaxed);
    out->heartbeat_stalls = atomic_load_explicit(&w->hb_stalls, memory_order_relaxed);
    out->completion_stalls = atomic_load_explicit(&w->comp_stalls, memory_order_relaxed);
    out->watchdog_stalls = atomic_load_explicit(&w->wd_stalls, memory_order_relaxed);
}
