/* How a thread waits for CUDA events (event_wait_any): it polls, never cudaEventSynchronize,
 * which has no timeout (a hung kernel reports no error on a compute GPU, FACTS.md: only our
 * own deadline can end the wait); and the device's count of the waits' work, logged when the
 * device closes (FERRY_LOG_LEVEL=debug), so that a pipeline's host cost can be read apart. */
#include <sched.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h"

/* The polling: spin (yielding) this long first, then sleep from WAIT_SLEEP_MIN_NS doubling up
 * to WAIT_SLEEP_MAX_NS. FACTS.md: an empty kernel plus a synchronise round trip is 8.6 us and
 * record + query 1.5 us, so a short spin catches quick completions; the sleeps keep a long
 * wait off the CPU. The completion thread sets its timer slack to 1 us: Linux's default
 * (50 us) stretches short sleeps. */
#define WAIT_SPIN_NS      20000ull
#define WAIT_SLEEP_MIN_NS 4000ull
#define WAIT_SLEEP_MAX_NS 20000ull
/* A thread's waits come in a rhythm: the completion thread of a busy pipeline waits a chunk's
 * (or a gathered slab's) turn on the link after the one before, ~170-230 us for 8 MiB. Polling
 * such a wait from the start spun 20 us and woke about ten times; a thread whose last wait
 * ended by its event after more than WAIT_HINT_MIN_NS sleeps until half of that has passed
 * (at most WAIT_HINT_MAX_NS: what a quick batch after a long one may lose) before it polls,
 * and naps up to an eighth of it (a quarter of WAIT_HINT_MAX_NS at most): a completion is seen
 * at most that late. */
#define WAIT_HINT_MIN_NS (4 * WAIT_SPIN_NS)
#define WAIT_HINT_MAX_NS 200000ull

/* Spells (on unless a build sets FERRY_CUDA_WAIT_SPELLS=0, the policy before them): a wait that
 * times out leaves its spell open, and the thread's next wait for the same recording of the
 * same first event goes on with it (its start, rhythm and nap; naps from a sixteenth of the
 * rhythm) instead of starting afresh. The completion thread of a pipeline that is issuing waits
 * in 50 us slices; without spells a timed-out wait left no rhythm, so each slice began with the
 * 20 us spin. Three rounds on an H100 (bench/results/2026-12-07-h100-waits-rounds): the same
 * rates, p99 without a direction, ferry's CPU at 256 KiB items at 90% 0.5-1.0 us an item lower
 * in every round. */
#ifndef FERRY_CUDA_WAIT_SPELLS
#define FERRY_CUDA_WAIT_SPELLS 1
#endif
static _Thread_local struct {
    uint64_t last_ns;  /* the length of the last spell that ended by its event; 0: none */
    uint64_t spell_ns; /* when the open spell began; 0: none open */
    uint64_t nap_ns;   /* its next nap */
    const struct ferry_be_event *ev;
    uint32_t gen; /* ev's recording the open spell waits for */
} wt;

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

int ferry__cuda_query(struct ferry_be_event *e, size_t index, size_t n)
{
    if (!ferry__cuda_recorded(e))
        return 0; /* never recorded counts as complete, as cudaEventQuery says */
    cudaError_t r = cudaEventQuery(e->ev);
    if (r == cudaSuccess)
        return 0;
    if (r == cudaErrorNotReady)
        return FERRY_EAGAIN;
    return ferry__cuda_fail(r, "cudaEventQuery(event %zu of %zu)", index, n);
}

/* What one wait did, added to its device's counts when it returns. */
typedef struct {
    uint64_t queries, yields, naps, nap_ns;
} wait_acc_t;

static int done(struct ferry_cuda_waits *w, const wait_acc_t *a, int rc)
{
    atomic_fetch_add_explicit(&w->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(rc == FERRY_ETIMEDOUT ? &w->timeouts : &w->ended, 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&w->queries, a->queries, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->yields, a->yields, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->naps, a->naps, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->nap_ns, a->nap_ns, memory_order_relaxed);
    return rc;
}

static void nap(wait_acc_t *a, uint64_t ns)
{
    sleep_ns(ns);
    a->naps++;
    a->nap_ns += ns;
}

int ferry__cuda_wait_any(ferry_be_event_t *const *evs, size_t n, uint64_t timeout_ns, size_t *which)
{
    struct ferry_cuda_waits *w = &evs[0]->dev->waits;
    uint64_t start = ferry__mono_ns();
    uint32_t gen = atomic_load_explicit(&evs[0]->gen, memory_order_relaxed);
    bool spells = FERRY_CUDA_WAIT_SPELLS != 0;
    bool goes_on = spells && wt.spell_ns != 0 && wt.ev == evs[0] && wt.gen == gen;
    uint64_t spell = goes_on ? wt.spell_ns : start;
    uint64_t hint = wt.last_ns > WAIT_HINT_MIN_NS ? wt.last_ns : 0;
    if (!spells)
        wt.last_ns = 0; /* until this wait ends by its event */
    uint64_t nap_max = WAIT_SLEEP_MAX_NS, cut = WAIT_HINT_MAX_NS / 4;
    if (hint > 0 && hint / 8 > nap_max)
        nap_max = hint / 8 < cut ? hint / 8 : cut;
    uint64_t next = goes_on ? wt.nap_ns
                    : spells && hint > 0 && hint / 16 > WAIT_SLEEP_MIN_NS
                        ? (hint / 16 < nap_max ? hint / 16 : nap_max)
                        : WAIT_SLEEP_MIN_NS;
    /* The hinted first sleep ends at half the rhythm after the spell began (without spells,
     * only in a wait longer than that). */
    uint64_t until = hint > 0 && (spells || hint / 2 < timeout_ns)
                         ? spell + (hint / 2 < WAIT_HINT_MAX_NS ? hint / 2 : WAIT_HINT_MAX_NS)
                         : 0;
    wt.spell_ns = 0;
    wait_acc_t a = {0};
    for (;;) {
        for (size_t i = 0; i < n; i++) {
            int rc = ferry__cuda_query(evs[i], i, n);
            a.queries++;
            if (rc != FERRY_EAGAIN) {
                *which = i;
                wt.last_ns = rc == 0 ? ferry__mono_ns() - spell : 0;
                return done(w, &a, rc);
            }
        }
        uint64_t now = ferry__mono_ns(), waited = now - start;
        if (waited >= timeout_ns) {
            wt.spell_ns = spell, wt.nap_ns = next, wt.ev = evs[0], wt.gen = gen;
            return done(w, &a,
                        ferry__error(FERRY_ETIMEDOUT,
                                     "cuda: event_wait_any: none of %zu events completed "
                                     "within %llu ns",
                                     n, (unsigned long long)timeout_ns));
        }
        uint64_t left = timeout_ns - waited;
        if (now < until) {
            nap(&a, until - now < left ? until - now : left);
            continue;
        }
        if (now - spell < WAIT_SPIN_NS && hint == 0) {
            sched_yield();
            a.yields++;
            continue;
        }
        nap(&a, next < left ? next : left);
        next = next * 2 < nap_max ? next * 2 : nap_max;
    }
}

void ferry__cuda_waits_log(const ferry_be_device_t *dev)
{
    const struct ferry_cuda_waits *w = &dev->waits;
    uint64_t calls = atomic_load_explicit(&w->calls, memory_order_relaxed);
    if (calls == 0)
        return;
    ferry_log(FERRY_LOG_DEBUG, "cuda",
              "device %d event waits: %llu (%llu ended, %llu timed out), %llu queries, %llu "
              "yields, %llu naps (%.1f ms)",
              dev->index, (unsigned long long)calls,
              (unsigned long long)atomic_load_explicit(&w->ended, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&w->timeouts, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&w->queries, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&w->yields, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&w->naps, memory_order_relaxed),
              (double)atomic_load_explicit(&w->nap_ns, memory_order_relaxed) / 1e6);
}
