/* The CPU device's guard (set_guard.h): the trial of a set with and without the CPU. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "pipeline/set_guard.h"

/* Segment k of the trial: with the CPU for 0 and 3, without for 1 and 2. */
static bool seg_with(unsigned k)
{
    return k == 0 || k == FERRY__GUARD_SEGS - 1;
}

void ferry__guard_start(ferry__cpu_guard_t *g, uint64_t id0, unsigned inflight)
{
    unsigned trials = g->trials;
    if (trials >= FERRY__GUARD_MAX_TRIALS) {
        g->state = FERRY__GUARD_BENCH;
        snprintf(g->note, sizeof(g->note),
                 "benched: %u trials with and without it were cut short by failed batches", trials);
        return;
    }
    memset(g, 0, sizeof(*g));
    unsigned len = inflight * 2;
    g->len = len < FERRY__GUARD_MIN_LEN   ? FERRY__GUARD_MIN_LEN
             : len > FERRY__GUARD_MAX_LEN ? FERRY__GUARD_MAX_LEN
                                          : len;
    g->id0 = id0;
    g->trials = trials + 1;
    g->state = FERRY__GUARD_TRIAL;
}

bool ferry__guard_cpu_ok(const ferry__cpu_guard_t *g, uint64_t id)
{
    switch (g->state) {
    case FERRY__GUARD_IDLE:
    case FERRY__GUARD_KEEP: return true;
    case FERRY__GUARD_BENCH: return false;
    case FERRY__GUARD_TRIAL: break;
    }
    if (id < g->id0)
        return true; /* cannot happen: a trial starts at the batch being planned */
    uint64_t k = (id - g->id0) / g->len;
    return k < FERRY__GUARD_SEGS && seg_with((unsigned)k); /* after it: without, until decided */
}

/* Every segment is complete: decide. */
static void decide(ferry__cpu_guard_t *g)
{
    uint64_t with_b = 0, without_b = 0, with_ns = 0, without_ns = 0;
    for (unsigned k = 0; k < FERRY__GUARD_SEGS; k++) {
        uint64_t from = k == 0 ? g->before_ns : g->end_ns[k - 1];
        uint64_t span = g->end_ns[k] > from ? g->end_ns[k] - from : 0;
        if (seg_with(k)) {
            with_b += g->bytes[k];
            with_ns += span;
        } else {
            without_b += g->bytes[k];
            without_ns += span;
        }
    }
    g->gbps_with = with_ns > 0 ? (double)with_b / (double)with_ns : 0; /* bytes per ns: GB/s */
    g->gbps_without = without_ns > 0 ? (double)without_b / (double)without_ns : 0;
    bool keep = g->gbps_without > 0 && g->gbps_with >= g->gbps_without * (1 + FERRY__GUARD_MARGIN);
    g->state = keep ? FERRY__GUARD_KEEP : FERRY__GUARD_BENCH;
    snprintf(g->note, sizeof(g->note),
             "%s: the set ran at %.2f GB/s with it, %.2f without (%u batches each way)",
             keep ? "kept" : "benched", g->gbps_with, g->gbps_without, 2 * g->len);
}

bool ferry__guard_done(ferry__cpu_guard_t *g, uint64_t id, uint64_t bytes, uint64_t done_ns,
                       bool ok)
{
    if (g->state != FERRY__GUARD_TRIAL)
        return false;
    if (id < g->id0) {
        g->before_ns = done_ns > g->before_ns ? done_ns : g->before_ns;
        return false;
    }
    uint64_t k = (id - g->id0) / g->len;
    if (k >= FERRY__GUARD_SEGS)
        return false;
    if (!ok) { /* a fallback's rate says nothing of the CPU: the next batch starts over */
        g->state = FERRY__GUARD_IDLE;
        return false;
    }
    g->bytes[k] += bytes;
    g->end_ns[k] = done_ns > g->end_ns[k] ? done_ns : g->end_ns[k];
    g->done[k]++;
    for (unsigned j = 0; j < FERRY__GUARD_SEGS; j++)
        if (g->done[j] < g->len)
            return false;
    decide(g);
    return true;
}
