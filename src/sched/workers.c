/* The host worker pool: N threads, each owning a Chase-Lev deque; tasks from outside go through
 * one mutex-protected injection queue. An idle worker pops its own deque, then the injection
 * queue, then steals from a random victim, spins briefly, then sleeps on a condvar. Also here:
 * fork-join task groups (a waiting worker helps) and the parallel memcpy used for staging. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np, PTHREAD_MUTEX_ADAPTIVE_NP */
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "sched/sched.h"

/* The fences below are kept for the hardware; TSan cannot model them (gcc says so with
 * -Wtsan), and the few edges it needs are given to it as release stores instead. */
#if FERRY_SCHED_TSAN && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wtsan"
#endif

#define WORKERS_MAX 256
/* Free task nodes a worker keeps for itself; beyond this it gives half to the shared spare list,
 * which outside submitters allocate from (their tasks end up freed on the workers). */
#define FREE_LIST_CAP 256
/* At most this many injected tasks move to a worker's deque in one visit (then others steal
 * them): fewer trips through the injection lock under a burst of outside submits. */
#define INJECT_BATCH_MAX 16
/* Idle search rounds before sleeping, backing off with cpu pauses (1, 2, 4 ... 64 per round):
 * about 35 us on the 2-vCPU EPYC KVM guest we measured (26 ns per pause). No sched_yield: there,
 * a thread that yielded a few times before blocking was woken ~3.8 ms late (one tick) behind a
 * busy waker, against ~30 us without. */
#define SPIN_ROUNDS          24
#define SPIN_MAX_PAUSES      64
#define MEMCPY_MAX_PIECES    64
#define MEMCPY_DEFAULT_PIECE ((size_t)256 * 1024)

struct task {
    ferry_task_fn fn;
    void *arg;
    ferry_taskgroup_t *group; /* NULL for plain submits */
    struct task *next;        /* free lists and the injection queue */
};

struct worker {
    _Alignas(64) ferry_workers_t *pool;
    ferry_deque_t *deque;
    struct task *free_list; /* owner-only */
    unsigned nfree;
    unsigned index;
    uint64_t rng; /* victim choice */
    pthread_t thread;
    bool started;
};

/* Three cache lines (at least): what every search reads, what every outside submit writes, and
 * the sleep bookkeeping, so that a burst of submits does not slow the workers' reads of n. */
struct ferry_workers {
    unsigned n;
    struct worker *workers; /* n entries, cache-line aligned */

    _Alignas(64) pthread_mutex_t inject_lock; /* guards the four fields below */
    struct task *inject_head, *inject_tail;
    struct task *spare; /* free nodes for outside submitters */
    bool inject_closed;
    atomic_size_t inject_len; /* written under inject_lock, read without it as a hint */

    /* Sleeping: a worker announces itself in sleepers (under sleep_lock), then rechecks for work
     * after a full fence; a submitter publishes work, fences, then reads spinning and sleepers.
     * One of the two always sees the other, so no wakeup is lost. */
    _Alignas(64) pthread_mutex_t sleep_lock;
    pthread_cond_t wake;
    atomic_uint spinning;         /* workers searching for work (they will find new tasks) */
    atomic_uint sleepers;         /* workers in (or about to enter) the condvar wait */
    atomic_uint helpers_sleeping; /* of those, workers waiting on a task group */
    atomic_bool closed;
};

static _Thread_local struct worker *tls_worker;

static unsigned rand_below(struct worker *self, unsigned n)
{
    /* xorshift64; multiply-shift maps it onto [0, n) without a division. */
    uint64_t x = self->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    self->rng = x;
    return (unsigned)(((x >> 32) * (uint64_t)n) >> 32);
}

/* ---- task nodes ---------------------------------------------------------------------------- */

static struct task *node_alloc_local(struct worker *self)
{
    struct task *t = self->free_list;
    if (t != NULL) {
        self->free_list = t->next;
        self->nfree--;
        return t;
    }
    return malloc(sizeof(*t));
}

static void node_free(ferry_workers_t *w, struct worker *self, struct task *t)
{
    t->next = self->free_list;
    self->free_list = t;
    if (++self->nfree <= FREE_LIST_CAP)
        return;
    /* Give half back so that nodes freed here can serve outside submitters. */
    struct task *first = self->free_list, *last = first;
    for (unsigned i = 1; i < FREE_LIST_CAP / 2; i++)
        last = last->next;
    self->free_list = last->next;
    self->nfree -= FREE_LIST_CAP / 2;
    pthread_mutex_lock(&w->inject_lock);
    last->next = w->spare;
    w->spare = first;
    pthread_mutex_unlock(&w->inject_lock);
}

static void free_chain(struct task *t)
{
    while (t != NULL) {
        struct task *next = t->next;
        free(t);
        t = next;
    }
}

/* ---- finding work -------------------------------------------------------------------------- */

/* Wake one sleeping worker unless a spinning one will pick the work up anyway. Callers have
 * published the work (deque push or injection) before calling. */
static void notify(ferry_workers_t *w)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&w->spinning, memory_order_relaxed) != 0)
        return;
    if (atomic_load_explicit(&w->sleepers, memory_order_relaxed) == 0)
        return;
    /* Passing through the lock puts every announced sleeper inside its wait (it holds the lock
     * from announcing to waiting); signalling after the unlock spares the woken thread a
     * second block on the mutex we would still hold. */
    pthread_mutex_lock(&w->sleep_lock);
    pthread_mutex_unlock(&w->sleep_lock);
    pthread_cond_signal(&w->wake);
}

/* A hint: callers issue a seq_cst fence first (see the sleeping comment in ferry_workers). */
static bool work_available(ferry_workers_t *w)
{
    if (atomic_load_explicit(&w->inject_len, memory_order_relaxed) > 0)
        return true;
    for (unsigned i = 0; i < w->n; i++)
        if (!ferry__deque_is_empty(w->workers[i].deque))
            return true;
    return false;
}

/* Take the oldest injected task; move a share of the others onto our deque for thieves. */
static struct task *take_injected(ferry_workers_t *w, struct worker *self)
{
    pthread_mutex_lock(&w->inject_lock);
    struct task *t = w->inject_head;
    if (t == NULL) {
        pthread_mutex_unlock(&w->inject_lock);
        return NULL;
    }
    size_t len = atomic_load_explicit(&w->inject_len, memory_order_relaxed);
    size_t take = len / w->n;
    if (take > INJECT_BATCH_MAX)
        take = INJECT_BATCH_MAX;
    if (take == 0)
        take = 1;
    struct task *last = t;
    size_t got = 1;
    while (got < take && last->next != NULL) {
        last = last->next;
        got++;
    }
    w->inject_head = last->next;
    if (w->inject_head == NULL)
        w->inject_tail = NULL;
    atomic_store_explicit(&w->inject_len, len - got, memory_order_relaxed);
    pthread_mutex_unlock(&w->inject_lock);

    /* Detach t..last; the extras are t->next..last, none when we took only t. */
    struct task *extra = last == t ? NULL : t->next;
    last->next = NULL;
    bool pushed = false;
    while (extra != NULL) {
        struct task *next = extra->next;
        if (ferry__deque_push(self->deque, extra) != 0) {
            /* Our deque cannot grow: put the rest back at the front, order kept. */
            size_t back = 0;
            struct task *tail = extra;
            for (struct task *p = extra; p != NULL; p = p->next) {
                tail = p;
                back++;
            }
            pthread_mutex_lock(&w->inject_lock);
            tail->next = w->inject_head;
            w->inject_head = extra;
            if (w->inject_tail == NULL)
                w->inject_tail = tail;
            atomic_fetch_add_explicit(&w->inject_len, back, memory_order_relaxed);
            pthread_mutex_unlock(&w->inject_lock);
            break;
        }
        pushed = true;
        extra = next;
    }
    if (pushed)
        notify(w);
    return t;
}

static struct task *steal_any(ferry_workers_t *w, struct worker *self)
{
    unsigned n = w->n;
    unsigned start = rand_below(self, n);
    for (unsigned i = 0; i < n; i++) {
        unsigned v = start + i < n ? start + i : start + i - n;
        struct worker *victim = &w->workers[v];
        if (victim == self || ferry__deque_is_empty(victim->deque))
            continue;
        struct task *t = ferry__deque_steal(victim->deque);
        if (t != NULL)
            return t;
    }
    return NULL;
}

static struct task *find_task(ferry_workers_t *w, struct worker *self)
{
    struct task *t = ferry__deque_pop(self->deque);
    if (t != NULL)
        return t;
    if (atomic_load_explicit(&w->inject_len, memory_order_relaxed) > 0) {
        t = take_injected(w, self);
        if (t != NULL)
            return t;
    }
    return steal_any(w, self);
}

/* Leave the spinning state. The last spinner to leave wakes a sleeper when work is left over,
 * because submitters skipped the wakeup while they saw it spinning. */
static void stop_spinning(ferry_workers_t *w)
{
    if (atomic_fetch_sub_explicit(&w->spinning, 1, memory_order_seq_cst) != 1)
        return;
    atomic_thread_fence(memory_order_seq_cst);
    if (work_available(w))
        notify(w);
}

static bool group_done_now(ferry_taskgroup_t *g)
{
    return atomic_load_explicit(&g->pending, memory_order_acquire) == 0;
}

/* Search, spin, then sleep until a task turns up (returned) or, with @g, until @g has no
 * pending task, or, without @g, until the pool is closed and no work is left (NULL). */
static struct task *wait_for_task(ferry_workers_t *w, struct worker *self, ferry_taskgroup_t *g)
{
    atomic_fetch_add_explicit(&w->spinning, 1, memory_order_seq_cst);
    for (;;) {
        for (unsigned round = 0; round < SPIN_ROUNDS; round++) {
            if (g != NULL && group_done_now(g)) {
                stop_spinning(w);
                return NULL;
            }
            /* Read closed before searching: once closed, an empty search is final. */
            bool closed = atomic_load_explicit(&w->closed, memory_order_acquire);
            struct task *t = find_task(w, self);
            if (t != NULL) {
                stop_spinning(w);
                return t;
            }
            if (closed && g == NULL) {
                stop_spinning(w);
                return NULL;
            }
            unsigned pauses = 1u << (round < 6 ? round : 6);
            for (unsigned i = 0; i < pauses && i < SPIN_MAX_PAUSES; i++)
                ferry__cpu_relax();
        }
        pthread_mutex_lock(&w->sleep_lock);
        atomic_fetch_add_explicit(&w->sleepers, 1, memory_order_seq_cst);
        if (g != NULL)
            atomic_fetch_add_explicit(&w->helpers_sleeping, 1, memory_order_seq_cst);
        atomic_fetch_sub_explicit(&w->spinning, 1, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        bool done =
            g != NULL ? group_done_now(g) : atomic_load_explicit(&w->closed, memory_order_acquire);
        if (!done && !work_available(w))
            pthread_cond_wait(&w->wake, &w->sleep_lock);
        atomic_fetch_add_explicit(&w->spinning, 1, memory_order_seq_cst);
        if (g != NULL)
            atomic_fetch_sub_explicit(&w->helpers_sleeping, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&w->sleepers, 1, memory_order_relaxed);
        pthread_mutex_unlock(&w->sleep_lock);
    }
}

/* ---- running ------------------------------------------------------------------------------- */

static void group_done(ferry_workers_t *w, ferry_taskgroup_t *g)
{
    /* Not the last: a lock-free decrement (release, so the waiter sees this task's writes). */
    size_t v = atomic_load_explicit(&g->pending, memory_order_relaxed);
    while (v > 1) {
        if (atomic_compare_exchange_weak_explicit(&g->pending, &v, v - 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return;
    }
    /* Perhaps the last: decrement under the lock, so that a waiter that sees zero must still
     * take the lock after we release it, and may free @g once it has it. @g is not touched
     * after the unlock. */
    pthread_mutex_lock(&g->lock);
    size_t left = atomic_fetch_sub_explicit(&g->pending, 1, memory_order_acq_rel) - 1;
    if (left == 0)
        pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    if (left != 0)
        return;
    /* Workers helping in ferry__taskgroup_wait may sleep on the pool's condvar. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&w->helpers_sleeping, memory_order_relaxed) > 0) {
        pthread_mutex_lock(&w->sleep_lock);
        pthread_mutex_unlock(&w->sleep_lock);
        pthread_cond_broadcast(&w->wake);
    }
}

static void run_task(ferry_workers_t *w, struct worker *self, struct task *t)
{
    ferry_task_fn fn = t->fn;
    void *arg = t->arg;
    ferry_taskgroup_t *g = t->group;
    /* Free first: a task that submits more reuses this node. */
    node_free(w, self, t);
    fn(arg);
    if (g != NULL)
        group_done(w, g);
}

static void *worker_main(void *p)
{
    struct worker *self = p;
    ferry_workers_t *w = self->pool;
    tls_worker = self;
    for (;;) {
        struct task *t = find_task(w, self);
        if (t == NULL)
            t = wait_for_task(w, self, NULL);
        if (t == NULL)
            break;
        run_task(w, self, t);
    }
    tls_worker = NULL;
    return NULL;
}

/* ---- the pool ------------------------------------------------------------------------------ */

static void name_thread(pthread_t th, const char *name, unsigned index)
{
#if defined(__linux__)
    /* Linux allows 15 characters: shorten the name, never the index. */
    char buf[16];
    char idx[12];
    int idx_len = snprintf(idx, sizeof(idx), "-%u", index);
    int room = (int)sizeof(buf) - 1 - idx_len;
    snprintf(buf, sizeof(buf), "%.*s%s", room, name, idx);
    (void)pthread_setname_np(th, buf);
#else
    (void)th;
    (void)name;
    (void)index;
#endif
}

static void stop_and_join(ferry_workers_t *w)
{
    pthread_mutex_lock(&w->inject_lock);
    w->inject_closed = true;
    pthread_mutex_unlock(&w->inject_lock);
    atomic_store_explicit(&w->closed, true, memory_order_seq_cst);
    pthread_mutex_lock(&w->sleep_lock);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->sleep_lock);
    for (unsigned i = 0; i < w->n; i++)
        if (w->workers[i].started)
            pthread_join(w->workers[i].thread, NULL);
}

static void free_pool(ferry_workers_t *w)
{
    for (unsigned i = 0; i < w->n; i++) {
        free_chain(w->workers[i].free_list);
        ferry__deque_destroy(w->workers[i].deque);
    }
    free_chain(w->spare);
    free_chain(w->inject_head); /* empty unless creation failed half way */
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->sleep_lock);
    pthread_mutex_destroy(&w->inject_lock);
    free(w->workers);
    free(w);
}

/* The pool's injection lock, sleep lock and wake condition; on failure none is left. */
static int init_locks(ferry_workers_t *w)
{
    if (ferry__mutex_init_adaptive(&w->inject_lock) != 0)
        return -1;
    if (pthread_mutex_init(&w->sleep_lock, NULL) == 0) {
        if (pthread_cond_init(&w->wake, NULL) == 0)
            return 0;
        pthread_mutex_destroy(&w->sleep_lock);
    }
    pthread_mutex_destroy(&w->inject_lock);
    return -1;
}

int ferry__workers_create(unsigned nthreads, const char *name, ferry_workers_t **out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "workers_create: out is NULL");
    if (nthreads < 1 || nthreads > WORKERS_MAX)
        return ferry__error(FERRY_EINVAL, "workers_create: %u threads, accepted 1..%d", nthreads,
                            WORKERS_MAX);
    if (name == NULL)
        name = "ferry";

    ferry_workers_t *w = aligned_alloc(64, sizeof(*w));
    if (w == NULL)
        goto out_nomem;
    memset(w, 0, sizeof(*w));
    w->n = nthreads;
    w->workers = aligned_alloc(64, nthreads * sizeof(struct worker));
    if (w->workers == NULL)
        goto out_free;
    memset(w->workers, 0, nthreads * sizeof(struct worker));
    atomic_init(&w->inject_len, 0);
    atomic_init(&w->spinning, 0);
    atomic_init(&w->sleepers, 0);
    atomic_init(&w->helpers_sleeping, 0);
    atomic_init(&w->closed, false);
    if (init_locks(w) != 0)
        goto out_free;
    for (unsigned i = 0; i < nthreads; i++) {
        struct worker *wk = &w->workers[i];
        wk->pool = w;
        wk->index = i;
        wk->rng = 0x9e3779b97f4a7c15ull * (i + 1) | 1;
        /* 256 covers a fork-join fan-out without growth; the deque grows past it if needed. */
        if (ferry__deque_create(256, &wk->deque) != 0)
            goto out_pool;
    }

    /* Workers must not take the caller's asynchronous signals: block them all while creating
     * the threads, which inherit the mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = 0;
    for (unsigned i = 0; i < nthreads && err == 0; i++) {
        struct worker *wk = &w->workers[i];
        err = pthread_create(&wk->thread, NULL, worker_main, wk);
        if (err == 0) {
            wk->started = true;
            name_thread(wk->thread, name, i);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        stop_and_join(w);
        free_pool(w);
        return ferry__error(FERRY_ENOMEM, "workers_create: pthread_create: %s", strerror(err));
    }
    *out = w;
    return 0;

out_pool:
    free_pool(w); /* destroys the deques made so far and the locks */
    goto out_nomem;
out_free:
    free(w->workers); /* NULL if its allocation failed */
    free(w);
out_nomem:
    return ferry__error(FERRY_ENOMEM, "workers_create: out of memory for %u workers", nthreads);
}

void ferry__workers_destroy(ferry_workers_t *w)
{
    if (w == NULL)
        return;
    if (ferry__workers_on_worker_thread(w)) {
        /* Joining ourselves would hang forever; leaking is the lesser evil. */
        ferry_log(FERRY_LOG_ERROR, "sched", "workers_destroy called from its own worker; ignored");
        return;
    }
    stop_and_join(w);
    FERRY_ASSERT(w->inject_head == NULL);
    free_pool(w);
}

static int submit(ferry_workers_t *w, ferry_task_fn fn, void *arg, ferry_taskgroup_t *g)
{
    struct worker *self = tls_worker;
    struct task *t;
    if (self != NULL && self->pool == w) {
        t = node_alloc_local(self);
        if (t == NULL)
            return ferry__error(FERRY_ENOMEM, "workers_submit: out of memory for a task");
        t->fn = fn;
        t->arg = arg;
        t->group = g;
        if (ferry__deque_push(self->deque, t) != 0) {
            node_free(w, self, t);
            return FERRY_ENOMEM; /* the deque set the detail */
        }
        notify(w);
        return 0;
    }

    pthread_mutex_lock(&w->inject_lock);
    if (w->inject_closed) {
        pthread_mutex_unlock(&w->inject_lock);
        return ferry__error(FERRY_ECLOSED, "workers_submit: the pool is being destroyed");
    }
    t = w->spare;
    if (t != NULL)
        w->spare = t->next;
    else
        t = malloc(sizeof(*t)); /* rare: only until the spare list has warmed up */
    if (t == NULL) {
        pthread_mutex_unlock(&w->inject_lock);
        return ferry__error(FERRY_ENOMEM, "workers_submit: out of memory for a task");
    }
    t->fn = fn;
    t->arg = arg;
    t->group = g;
    t->next = NULL;
    if (w->inject_tail != NULL)
        w->inject_tail->next = t;
    else
        w->inject_head = t;
    w->inject_tail = t;
    atomic_store_explicit(&w->inject_len,
                          atomic_load_explicit(&w->inject_len, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    pthread_mutex_unlock(&w->inject_lock);
    notify(w);
    return 0;
}

int ferry__workers_submit(ferry_workers_t *w, ferry_task_fn fn, void *arg)
{
    if (w == NULL || fn == NULL)
        return ferry__error(FERRY_EINVAL, "workers_submit: NULL %s", w == NULL ? "pool" : "fn");
    return submit(w, fn, arg, NULL);
}

unsigned ferry__workers_count(const ferry_workers_t *w)
{
    return w != NULL ? w->n : 0;
}

bool ferry__workers_on_worker_thread(const ferry_workers_t *w)
{
    return w != NULL && tls_worker != NULL && tls_worker->pool == w;
}

/* ---- task groups --------------------------------------------------------------------------- */

void ferry__taskgroup_init(ferry_taskgroup_t *g)
{
    atomic_init(&g->pending, 0);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
}

void ferry__taskgroup_fini(ferry_taskgroup_t *g)
{
    if (g == NULL)
        return;
    FERRY_ASSERT(atomic_load(&g->pending) == 0);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

int ferry__taskgroup_run(ferry_workers_t *w, ferry_taskgroup_t *g, ferry_task_fn fn, void *arg)
{
    if (w == NULL || g == NULL || fn == NULL)
        return ferry__error(FERRY_EINVAL, "taskgroup_run: NULL %s",
                            w == NULL   ? "pool"
                            : g == NULL ? "group"
                                        : "fn");
    atomic_fetch_add_explicit(&g->pending, 1, memory_order_relaxed);
    int rc = submit(w, fn, arg, g);
    if (rc != 0)
        group_done(w, g);
    return rc;
}

void ferry__taskgroup_wait(ferry_workers_t *w, ferry_taskgroup_t *g)
{
    if (g == NULL)
        return;
    if (ferry__workers_on_worker_thread(w)) {
        struct worker *self = tls_worker;
        while (!group_done_now(g)) {
            struct task *t = find_task(w, self);
            if (t == NULL)
                t = wait_for_task(w, self, g);
            if (t != NULL)
                run_task(w, self, t);
        }
        /* The last group_done may still hold g->lock; once we have had it, @g is ours. */
        pthread_mutex_lock(&g->lock);
        pthread_mutex_unlock(&g->lock);
        return;
    }
    pthread_mutex_lock(&g->lock);
    while (!group_done_now(g))
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

/* ---- parallel memcpy ----------------------------------------------------------------------- */

struct memcpy_piece {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
};

static void memcpy_task(void *arg)
{
    struct memcpy_piece *p = arg;
    memcpy(p->dst, p->src, p->n);
}

void ferry__parallel_memcpy(ferry_workers_t *w, void *dst, const void *src, size_t n,
                            size_t min_piece)
{
    if (min_piece == 0)
        min_piece = MEMCPY_DEFAULT_PIECE;
    if (w == NULL || n / 2 < min_piece) {
        if (n > 0)
            memcpy(dst, src, n);
        return;
    }
    size_t pieces = n / min_piece;
    size_t most = (size_t)w->n + 1 < MEMCPY_MAX_PIECES ? (size_t)w->n + 1 : MEMCPY_MAX_PIECES;
    if (pieces > most)
        pieces = most;
    size_t step = n / pieces;
    /* Cut at 64-byte boundaries of dst so that no cache line is written by two threads, when
     * the pieces are long enough to stay >= min_piece after the cut. */
    bool align = step >= min_piece + 64;
    struct memcpy_piece piece[MEMCPY_MAX_PIECES];
    size_t off = 0;
    for (size_t i = 0; i < pieces; i++) {
        size_t end = n;
        if (i + 1 < pieces) {
            end = (i + 1) * step;
            if (align)
                end -= ((uintptr_t)dst + end) & 63;
        }
        piece[i].dst = (unsigned char *)dst + off;
        piece[i].src = (const unsigned char *)src + off;
        piece[i].n = end - off;
        off = end;
    }
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    for (size_t i = 1; i < pieces; i++)
        if (ferry__taskgroup_run(w, &g, memcpy_task, &piece[i]) != 0)
            memcpy_task(&piece[i]);
    memcpy_task(&piece[0]);
    ferry__taskgroup_wait(w, &g);
    ferry__taskgroup_fini(&g);
}
