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

/* Segment k's batches: the first runs g->lead more (the last is planned while the batches before
 * it are in flight, and so starts on the CPU that many batches early). */
static unsigned seg_len(const ferry__cpu_guard_t *g, unsigned k)
{
    return k == 0 ? g->len + g->lead : g->len;
}

/* The segment of batch @id (FERRY__GUARD_SEGS: after the trial); @id >= g->id0. */
static unsigned seg_of(const ferry__cpu_guard_t *g, uint64_t id)
{
    uint64_t off = id - g->id0;
    unsigned k = 0;
    while (k < FERRY__GUARD_SEGS && off >= seg_len(g, k))
        off -= seg_len(g, k++);
    return k;
}

void ferry__guard_start(ferry__cpu_guard_t *g, uint64_t id0, unsigned inflight, uint64_t now_ns,
                        bool busy)
{
    unsigned trials = g->trials;
    if (trials >= FERRY__GUARD_MAX_TRIALS) {
        const char *why = g->why_over != NULL ? g->why_over : "were cut short";
        g->state = FERRY__GUARD_BENCH;
        snprintf(g->note, sizeof(g->note), "benched: %u trials with and without it %s", trials,
                 why);
        return;
    }
    const char *why = g->why_over;
    memset(g, 0, sizeof(*g));
    unsigned len = inflight * 2;
    g->len = len < FERRY__GUARD_MIN_LEN   ? FERRY__GUARD_MIN_LEN
             : len > FERRY__GUARD_MAX_LEN ? FERRY__GUARD_MAX_LEN
                                          : len;
    g->lead = inflight < g->len ? inflight : g->len;
    g->id0 = id0;
    g->trials = trials + 1;
    g->why_over = why;
    g->state = FERRY__GUARD_TRIAL;
    g->held = busy;
    g->plan_with = ferry__guard_cpu_ok(g, id0); /* the first segment: with it */
    g->busy0 = g->busy = busy || g->plan_with;
    g->start_ns = g->last_ns = g->side_ns = now_ns;
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
    unsigned k = seg_of(g, id);
    return k < FERRY__GUARD_SEGS && seg_with(k); /* after it: without, until decided */
}

/* The side is the CPU's: busy while it holds work or the batches being planned may give it
 * some (between two parts of a segment with it, its queue may run dry for a moment). */
static void side_update(ferry__cpu_guard_t *g, uint64_t at_ns)
{
    bool busy = g->held || g->plan_with;
    if (g->state != FERRY__GUARD_TRIAL || busy == g->busy)
        return;
    if (at_ns < g->side_ns) /* the turns' clocks read on different threads: kept in order */
        at_ns = g->side_ns;
    g->ns[g->busy] += at_ns - g->side_ns;
    g->side_ns = at_ns;
    g->turn_ns[g->nturn % FERRY__GUARD_TURNS] = at_ns;
    g->nturn++;
    g->busy = busy;
}

void ferry__guard_cpu(ferry__cpu_guard_t *g, bool held, uint64_t at_ns)
{
    g->held = held;
    side_update(g, at_ns);
}

void ferry__guard_plan(ferry__cpu_guard_t *g, uint64_t id, uint64_t at_ns)
{
    if (g->state != FERRY__GUARD_TRIAL)
        return;
    g->plan_with = ferry__guard_cpu_ok(g, id);
    side_update(g, at_ns);
}

void ferry__guard_part(ferry__cpu_guard_t *g, uint64_t bytes, uint64_t from_ns, uint64_t done_ns)
{
    if (g->state != FERRY__GUARD_TRIAL || done_ns <= g->start_ns)
        return;
    if (done_ns > g->last_ns)
        g->last_ns = done_ns;
    /* the side at @from_ns: busy0 flipped at each turn up to it (before the turns kept, by
     * their count) */
    unsigned kept = g->nturn < FERRY__GUARD_TURNS ? g->nturn : FERRY__GUARD_TURNS;
    unsigned i0 = g->nturn - kept;
    bool side = g->busy0 ^ (i0 & 1);
    uint64_t t = from_ns > g->start_ns ? from_ns : g->start_ns;
    double in[2] = {0, 0}; /* ns of the part's span on each side, from the trial's start */
    for (unsigned i = i0; i < g->nturn; i++) {
        uint64_t turn = g->turn_ns[i % FERRY__GUARD_TURNS];
        if (turn >= done_ns)
            break;
        if (turn > t) {
            in[side] += (double)(turn - t);
            t = turn;
        }
        side = !side;
    }
    in[side] += (double)(done_ns - t);
    double span = done_ns > from_ns ? (double)(done_ns - from_ns) : 0;
    if (span <= 0) { /* no span: its bytes on the side it ended on */
        g->bytes[side] += (double)bytes;
        g->parts[side]++;
        return;
    }
    for (int k = 0; k < 2; k++)
        g->bytes[k] += (double)bytes * in[k] / span;
    if (in[0] == 0 || in[1] == 0)
        g->parts[in[1] > 0]++;
}

/* Each side's rate so far into @gbps (bytes per ns: GB/s), the current side's time counted up to
 * the latest completion; false when a side has fewer than FERRY__GUARD_MIN_LEN parts. */
static bool rates(const ferry__cpu_guard_t *g, double gbps[2])
{
    uint64_t ns[2] = {g->ns[0], g->ns[1]};
    ns[g->busy] += g->last_ns > g->side_ns ? g->last_ns - g->side_ns : 0;
    for (int side = 0; side < 2; side++) {
        if (g->parts[side] < FERRY__GUARD_MIN_LEN || ns[side] == 0)
            return false;
        gbps[side] = g->bytes[side] / (double)ns[side];
    }
    return true;
}

static void decided(ferry__cpu_guard_t *g, const double gbps[2], bool keep, const char *when)
{
    g->gbps_with = gbps[1];
    g->gbps_without = gbps[0];
    g->state = keep ? FERRY__GUARD_KEEP : FERRY__GUARD_BENCH;
    snprintf(g->note, sizeof(g->note),
             "%s%s: the set ran at %.2f GB/s with it, %.2f without (%u batches planned with it, "
             "%u without)",
             keep ? "kept" : "benched", when, g->gbps_with, g->gbps_without,
             *when ? g->len + g->lead : 2 * g->len + g->lead, *when ? g->len : 2 * g->len);
}

/* Every segment is complete: decide, or start over when a side was measured too little. */
static bool decide(ferry__cpu_guard_t *g)
{
    double gbps[2];
    if (!rates(g, gbps)) {
        g->why_over = g->parts[1] < FERRY__GUARD_MIN_LEN ? "measured too few parts with it"
                                                         : "measured too few parts without it";
        g->state = FERRY__GUARD_IDLE;
        return false;
    }
    decided(g, gbps, gbps[1] >= gbps[0] * (1 + FERRY__GUARD_MARGIN), "");
    return true;
}

/* The first two segments are complete: a CPU that clearly costs the set is benched now rather
 * than given the last segment too. */
static bool decide_early(ferry__cpu_guard_t *g)
{
    double gbps[2];
    if (!rates(g, gbps) || gbps[1] >= gbps[0] * (1 - FERRY__GUARD_EARLY))
        return false;
    decided(g, gbps, false, " after half its trial");
    return true;
}

bool ferry__guard_done(ferry__cpu_guard_t *g, uint64_t id, bool ok)
{
    if (g->state != FERRY__GUARD_TRIAL || id < g->id0)
        return false;
    unsigned k = seg_of(g, id);
    if (k >= FERRY__GUARD_SEGS)
        return false;
    if (!ok) { /* a fallback's rate says nothing of the CPU: the next batch starts over */
        g->why_over = "were cut short by failed batches";
        g->state = FERRY__GUARD_IDLE;
        return false;
    }
    g->done[k]++;
    if (k < 2 && g->done[0] == seg_len(g, 0) && g->done[1] == seg_len(g, 1) && decide_early(g))
        return true;
    for (unsigned j = 0; j < FERRY__GUARD_SEGS; j++)
        if (g->done[j] < seg_len(g, j))
            return false;
    return decide(g);
}
