/* Where the host time of a pipeline goes, by phase: a build with FERRY_PROF=1 (C flags
 * -DFERRY_PROF=1; off by default, when every macro here is empty) times each marked phase on
 * the monotonic clock and counts it, per thread in a slot of its own (no line shared between
 * threads on the timed paths), and ferry__prof_log sums the slots at debug level. Wall time:
 * a phase that sleeps (a wait) counts its sleep; the others are CPU while the thread runs. For
 * reading a host cost apart on a GPU machine without a profiler (bench/explore/ab-items.sh
 * prints the lines), not for production builds: a phase costs two clock reads. */
#ifndef FERRY_PROF_H
#define FERRY_PROF_H

#include <stdint.h>

#ifndef FERRY_PROF
#define FERRY_PROF 0
#endif

/* The phases; ferry__prof_log names them in this order. */
typedef enum ferry__prof_phase {
    FERRY__PROF_SUBMIT,       /* ferry__gather_submit, whole (an item's submit) */
    FERRY__PROF_SUBMIT_ROOM,  /* of it: the slow path, under the gather lock (waits included) */
    FERRY__PROF_SEND,         /* ferry__gather_send, whole, on any thread */
    FERRY__PROF_SEND_LAYOUT,  /* of it: the slab laid out, its pieces found, its table written */
    FERRY__PROF_SEND_ISSUE,   /* of it: the pipeline's submit of the slab (issue included) */
    FERRY__PROF_ISSUE,        /* a chunk (a slab) issued, whole, on any thread */
    FERRY__PROF_ISSUE_IN,     /* of it: the copy in (staging included) */
    FERRY__PROF_ISSUE_RUN,    /* of it: the stage's launch */
    FERRY__PROF_ISSUE_OUT,    /* of it: the copy out */
    FERRY__PROF_COMP_POLL,    /* completion pass: adopt and poll */
    FERRY__PROF_COMP_RETIRE,  /* retire, the watchdog fed, slots recycled */
    FERRY__PROF_COMP_QUEUE,   /* queued batches issued by the completion thread */
    FERRY__PROF_COMP_CB,      /* the batches called back (a slab's slab_done, whole) */
    FERRY__PROF_COMP_WAIT,    /* event waits (sleep included) */
    FERRY__PROF_COMP_IDLE,    /* waits for work (sleep included) */
    FERRY__PROF_SLAB_SCATTER, /* slab_done: outputs copied back */
    FERRY__PROF_SLAB_FREE,    /* slab_done: the slab freed, submitters woken */
    FERRY__PROF_SLAB_SEND,    /* slab_done: the open slab sealed and sent (device idle) */
    FERRY__PROF_SLAB_ITEMS,   /* slab_done: the items' callbacks */
    FERRY__PROF_N
} ferry__prof_phase_t;

#if FERRY_PROF
uint64_t ferry__prof_now(void);
void ferry__prof_add(ferry__prof_phase_t ph, uint64_t ns);
/* The sums over every thread so far, one debug line, led by @who. */
void ferry__prof_log(const char *who);
#define FERRY_PROF_BEGIN(v)   uint64_t v = ferry__prof_now()
#define FERRY_PROF_END(ph, v) ferry__prof_add((ph), ferry__prof_now() - (v))
#define FERRY_PROF_LOG(who)   ferry__prof_log(who)
#else
#define FERRY_PROF_BEGIN(v)   ((void)0)
#define FERRY_PROF_END(ph, v) ((void)0)
#define FERRY_PROF_LOG(who)   ((void)0)
#endif

#endif
