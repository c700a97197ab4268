/* The phase profile of a FERRY_PROF=1 build (prof.h). Each thread takes a slot of its own on
 * first use, kept after it exits (its sums stay counted); a thread past the last slot shares
 * the last one, whose adds are atomic like every other's. */
#include "base/prof.h"

#if FERRY_PROF
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "base/base.h"

#define PROF_SLOTS 1024u

typedef struct {
    _Alignas(64) _Atomic uint64_t ns[FERRY__PROF_N];
    _Atomic uint64_t n[FERRY__PROF_N];
} prof_slot_t;

static prof_slot_t slots[PROF_SLOTS];
static atomic_uint next_slot;
static _Thread_local prof_slot_t *mine;

static const char *const names[FERRY__PROF_N] = {
    "submit",    "submit_room",  "send",      "send_layout", "send_issue", "issue",   "issue_in",
    "issue_run", "issue_out",    "comp_poll", "comp_retire", "comp_queue", "comp_cb", "comp_wait",
    "comp_idle", "slab_scatter", "slab_free", "slab_send",   "slab_items"};

uint64_t ferry__prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void ferry__prof_add(ferry__prof_phase_t ph, uint64_t ns)
{
    if (mine == NULL) {
        unsigned k = atomic_fetch_add_explicit(&next_slot, 1, memory_order_relaxed);
        mine = &slots[k < PROF_SLOTS ? k : PROF_SLOTS - 1];
    }
    atomic_fetch_add_explicit(&mine->ns[ph], ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&mine->n[ph], 1, memory_order_relaxed);
}

void ferry__prof_log(const char *who)
{
    char line[1536];
    size_t len = 0;
    unsigned used = atomic_load_explicit(&next_slot, memory_order_relaxed);
    used = used < PROF_SLOTS ? used : PROF_SLOTS;
    for (int ph = 0; ph < FERRY__PROF_N; ph++) {
        uint64_t ns = 0, n = 0;
        for (unsigned k = 0; k < used; k++) {
            ns += atomic_load_explicit(&slots[k].ns[ph], memory_order_relaxed);
            n += atomic_load_explicit(&slots[k].n[ph], memory_order_relaxed);
        }
        int w = snprintf(line + len, sizeof(line) - len, " %s %llu/%llu", names[ph],
                         (unsigned long long)(ns / 1000), (unsigned long long)n);
        if (w < 0 || (size_t)w >= sizeof(line) - len)
            break;
        len += (size_t)w;
    }
    ferry_log(FERRY_LOG_DEBUG, "prof", "%s (us/count):%s", who, line);
}
#endif
