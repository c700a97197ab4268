/* Host-side scheduling shared by the pipeline: the bounded submission queue (bqueue.c), the
 * Chase-Lev work-stealing deque (deque.c), and the worker pool with fork-join task groups and a
 * parallel memcpy built on it (workers.c). pthreads and C11 atomics only: <threads.h> breaks
 * under ThreadSanitizer. Every call returns 0 or a negative FERRY_* code. */
#ifndef FERRY_SCHED_H
#define FERRY_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ThreadSanitizer does not model atomic_thread_fence; the deque strengthens one store to a
 * release store under it so that TSan sees the happens-before edge the fences provide. */
#if defined(__SANITIZE_THREAD__)
#define FERRY_SCHED_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_SCHED_TSAN 1
#endif
#endif
#ifndef FERRY_SCHED_TSAN
#define FERRY_SCHED_TSAN 0
#endif

/* ---------------------------------------------------------------------------------------------
 * Bounded MPMC queue of fixed-size items: the pipeline's submission queue. Never drops.
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_bqueue ferry_bqueue_t;

/** A queue of @p capacity items of @p item_size bytes each (both > 0). Returns 0, FERRY_EINVAL
 *  (zero or overflowing sizes) or FERRY_ENOMEM; on error *out is untouched. */
int ferry__bqueue_create(size_t capacity, size_t item_size, ferry_bqueue_t **out);
/** Destroy @p q; no thread may be inside a call on it. NULL is a no-op. */
void ferry__bqueue_destroy(ferry_bqueue_t *q);
/** Copy @p item (item_size bytes, copied) in. With @p wait, block while full and set *waited
 *  to true when it had to wait (@p waited may be NULL; it is left alone otherwise); without,
 *  return FERRY_EAGAIN when full (the item is not queued). FERRY_ECLOSED once closed, also for
 *  a push that was waiting when the queue closed. Thread-safe. */
int ferry__bqueue_push(ferry_bqueue_t *q, const void *item, bool wait, bool *waited);
/** Copy the oldest item into @p item. With @p wait, block while empty; without, FERRY_EAGAIN
 *  when empty. FERRY_ECLOSED once closed AND empty: items pushed before the close are still
 *  delivered. Thread-safe. */
int ferry__bqueue_pop(ferry_bqueue_t *q, void *item, bool wait);
/** Like pop(wait=true) but gives up after @p timeout_ns (CLOCK_MONOTONIC), returning
 *  FERRY_ETIMEDOUT; 0 tries once. */
int ferry__bqueue_pop_timed(ferry_bqueue_t *q, void *item, uint64_t timeout_ns);
/** Refuse further pushes and wake every waiter (pushers get FERRY_ECLOSED, poppers drain what
 *  is left, then get FERRY_ECLOSED). Idempotent. Thread-safe. */
void ferry__bqueue_close(ferry_bqueue_t *q);
/** Items queued now (a snapshot). Thread-safe. */
size_t ferry__bqueue_len(ferry_bqueue_t *q);
/** Blocking pushers waiting for room that no pop has released yet: a pop releases every
 *  spinning pusher, and the sleeping ones when it wakes them (half empty). A pusher released
 *  and not yet back counts as running. For a virtual clock, which must not move while a
 *  pusher runs (a snapshot). Thread-safe. */
unsigned ferry__bqueue_pushers_blocked(ferry_bqueue_t *q);

/* ---------------------------------------------------------------------------------------------
 * Chase-Lev work-stealing deque of void * (Le, Pop, Cohen, Zappa Nardelli, "Correct and
 * efficient work-stealing for weak memory models", PPoPP 2013), growable.
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_deque ferry_deque_t;

/** A deque holding @p initial_capacity_pow2 items before its first growth (rounded up to a
 *  power of two, at least 2; 0 means 64). Returns 0, FERRY_EINVAL (absurd capacity) or
 *  FERRY_ENOMEM; on error *out is untouched. */
int ferry__deque_create(size_t initial_capacity_pow2, ferry_deque_t **out);
/** Destroy @p d and every array its growth retired; no thread may be using it. NULL: no-op. */
void ferry__deque_destroy(ferry_deque_t *d);
/** Owner thread only. Push @p item. Returns 0, FERRY_EINVAL (@p item NULL: NULL means empty)
 *  or FERRY_ENOMEM when growth failed (the item is not pushed). */
int ferry__deque_push(ferry_deque_t *d, void *item);
/** Owner thread only: the newest item (LIFO), or NULL when empty. */
void *ferry__deque_pop(ferry_deque_t *d);
/** Any thread: the oldest item (FIFO), or NULL when empty or when it lost a race for it. */
void *ferry__deque_steal(ferry_deque_t *d);
/** Any thread: true when the deque looked empty at some instant during the call (a hint, used
 *  to skip victims and to decide whether to sleep; callers order it with their own fences). */
bool ferry__deque_is_empty(ferry_deque_t *d);

/* ---------------------------------------------------------------------------------------------
 * Worker pool: one Chase-Lev deque per thread, a shared injection queue for tasks submitted
 * from outside, random-victim stealing, brief spinning then sleeping on a condvar.
 * ------------------------------------------------------------------------------------------- */

typedef void (*ferry_task_fn)(void *arg);
typedef struct ferry_workers ferry_workers_t;

/** Start @p nthreads (1..256) worker threads named "<name>-<i>" (best effort, truncated to the
 *  system's 15 characters; @p name NULL: "ferry"). Worker threads block asynchronous signals.
 *  Returns 0, FERRY_EINVAL, FERRY_ENOMEM (memory or threads); on error *out is untouched. */
int ferry__workers_create(unsigned nthreads, const char *name, ferry_workers_t **out);
/** Run every task already submitted (and every task those submit), then join and free. Must
 *  not be called from one of @p w's own workers. Submits from outside after (or during) the
 *  call get FERRY_ECLOSED. NULL is a no-op. */
void ferry__workers_destroy(ferry_workers_t *w);
/** Run fn(arg) once on a worker. From one of @p w's workers it goes onto that worker's own
 *  deque (LIFO, stealable), else onto the injection queue. @p arg is borrowed until fn runs.
 *  Returns 0, FERRY_EINVAL (NULL), FERRY_ENOMEM or FERRY_ECLOSED; on error fn never runs.
 *  Thread-safe. */
int ferry__workers_submit(ferry_workers_t *w, ferry_task_fn fn, void *arg);
unsigned ferry__workers_count(const ferry_workers_t *w);
/** True when the calling thread is one of @p w's workers. */
bool ferry__workers_on_worker_thread(const ferry_workers_t *w);

/* Fork-join: run many tasks and wait for all of them. */
typedef struct ferry_taskgroup {
    atomic_size_t pending;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} ferry_taskgroup_t;

void ferry__taskgroup_init(ferry_taskgroup_t *g);
/** Release @p g; it must have no pending task (wait first). */
void ferry__taskgroup_fini(ferry_taskgroup_t *g);
/** Submit fn(arg) to @p w as a member of @p g. Returns what ferry__workers_submit returns; on
 *  error the task is not counted. Thread-safe; tasks of @p g may run more tasks in @p g. */
int ferry__taskgroup_run(ferry_workers_t *w, ferry_taskgroup_t *g, ferry_task_fn fn, void *arg);
/** Return once every task run in @p g has returned. On a worker of @p w the caller runs other
 *  tasks meanwhile (so fork-join from a task cannot deadlock); elsewhere it sleeps. After it
 *  returns @p g may be reused or finalised at once. */
void ferry__taskgroup_wait(ferry_workers_t *w, ferry_taskgroup_t *g);

/** memcpy(dst, src, n) split into pieces of at least @p min_piece bytes (0: 256 KiB) run in
 *  parallel on @p w and the calling thread; plain memcpy when n < 2 * min_piece or @p w is
 *  NULL. Never fails: a piece that cannot be submitted is copied by the caller. */
void ferry__parallel_memcpy(ferry_workers_t *w, void *dst, const void *src, size_t n,
                            size_t min_piece);

#endif
