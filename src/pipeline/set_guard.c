/* The CPU device's guard (set_guard.h): the trial of a set with and without the CPU. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "pipeline/set_guard.h"

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
    g->id0 = id0;
    g->trials = trials + 1;
    g->why_over = why;
    g->state = FERRY__GUARD_TRIAL;
    g->held = busy;
    g->plan_with = true; /* the first phase */
    g->busy0 = g->busy = true;
    g->start_ns = g->last_ns = g->side_ns = now_ns;
    g->planned[1] = 1;
}

bool ferry__guard_cpu_ok(const ferry__cpu_guard_t *g)
{
    switch (g->state) {
    case FERRY__GUARD_IDLE:
    case FERRY__GUARD_KEEP: return true;
    case FERRY__GUARD_BENCH: return false;
    case FERRY__GUARD_TRIAL: break;
    }
    return g->phase == 0 || g->phase == 2;
}

/* A side's time up to @now_ns. */
static uint64_t side_time(const ferry__cpu_guard_t *g, bool busy, uint64_t now_ns)
{
    uint64_t t = g->ns[busy];
    if (g->busy == busy && now_ns > g->side_ns)
        t += now_ns - g->side_ns;
    return t;
}

/* The side is busy while the CPU holds work or the batches being planned may give it some
 * (between two parts of a phase with it, its queue may run dry for a moment, and a side turning
 * at each such moment would share the GPUs' parts out at their average rate: 2% in the CPU's
 * favour with 4 batches in flight). */
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
    if (!busy && g->first_ns == 0) {
        g->first_ns = g->ns[1] > 0 ? g->ns[1] : 1;
        g->first_end_ns = at_ns;
    }
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
    switch (g->phase) {
    case 0:
        if (id >= g->id0 + g->len)
            g->phase = 1;
        break;
    case 1: /* without, until the CPU is done and the set has run without it 2x the first side */
        if (g->first_ns > 0 && side_time(g, false, at_ns) >= 2 * g->first_ns)
            g->phase = 2;
        break;
    case 2: /* with, until this side has lasted as long as the first */
        if (side_time(g, true, at_ns) >= 2 * g->first_ns)
            g->phase = 3;
        break;
    default: break;
    }
    g->plan_with = g->phase == 0 || g->phase == 2;
    g->planned[g->plan_with]++;
    side_update(g, at_ns);
}

/* The period of a stretch on @side (busy: with the CPU) that ends at @end_ns: 0 without the
 * CPU, 1 with it in the first phases, 2 with it after (set_guard.h: ferry__cpu_guard_t.bytes). */
static unsigned period(const ferry__cpu_guard_t *g, bool busy, uint64_t end_ns)
{
    if (!busy)
        return 0;
    return g->first_end_ns == 0 || end_ns <= g->first_end_ns ? 1 : 2;
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
    double in[3] = {0, 0, 0}; /* ns of the part's span on each side, from the trial's start */
    for (unsigned i = i0; i < g->nturn; i++) {
        uint64_t turn = g->turn_ns[i % FERRY__GUARD_TURNS];
        if (turn >= done_ns)
            break;
        if (turn > t) {
            in[period(g, side, turn)] += (double)(turn - t);
            t = turn;
        }
        side = !side;
    }
    in[period(g, side, done_ns)] += (double)(done_ns - t);
    double span = done_ns > from_ns ? (double)(done_ns - from_ns) : 0;
    if (span <= 0) { /* no span: its bytes on the side it ended on */
        g->bytes[period(g, side, done_ns)] += (double)bytes;
        g->parts[period(g, side, done_ns)]++;
        return;
    }
    unsigned on = 0, last = 0;
    for (unsigned k = 0; k < 3; k++) {
        g->bytes[k] += (double)bytes * in[k] / span;
        if (in[k] > 0) {
            on++;
            last = k;
        }
    }
    if (on == 1)
        g->parts[last]++;
}

/* The rates so far into @gbps (bytes per ns: GB/s), up to the latest completion: without the
 * CPU, with it in its first side, with it after (0 before that has begun); false when a period
 * has fewer than FERRY__GUARD_MIN_PARTS parts (the second with the CPU: when @second). */
static bool rates(const ferry__cpu_guard_t *g, double gbps[3], bool second)
{
    uint64_t ns[3] = {side_time(g, false, g->last_ns), g->first_ns, 0};
    uint64_t with = side_time(g, true, g->last_ns);
    if (g->first_ns == 0)
        ns[1] = with;
    else
        ns[2] = with > g->first_ns ? with - g->first_ns : 0;
    for (unsigned k = 0; k < 3; k++) {
        bool need = k < 2 || second;
        if (need && (g->parts[k] < FERRY__GUARD_MIN_PARTS || ns[k] == 0))
            return false;
        gbps[k] = ns[k] > 0 ? g->bytes[k] / (double)ns[k] : 0;
    }
    return true;
}

static void decided(ferry__cpu_guard_t *g, const double gbps[3], bool keep, const char *when)
{
    g->gbps_with = gbps[2] > 0 && gbps[2] < gbps[1] ? gbps[2] : gbps[1];
    g->gbps_without = gbps[0];
    g->state = keep ? FERRY__GUARD_KEEP : FERRY__GUARD_BENCH;
    char with[48];
    if (gbps[2] > 0)
        snprintf(with, sizeof(with), "%.2f then %.2f", gbps[1], gbps[2]);
    else
        snprintf(with, sizeof(with), "%.2f", gbps[1]);
    snprintf(g->note, sizeof(g->note),
             "%s%s: the set ran at %s GB/s with it, %.2f without (%u batches planned with it, "
             "%u without)",
             keep ? "kept" : "benched", when, with, g->gbps_without, g->planned[1], g->planned[0]);
}

bool ferry__guard_done(ferry__cpu_guard_t *g, bool ok)
{
    if (g->state != FERRY__GUARD_TRIAL)
        return false;
    if (!ok) { /* a fallback's rate says nothing of the CPU: the next batch starts over */
        g->why_over = "were cut short by failed batches";
        g->state = FERRY__GUARD_IDLE;
        return false;
    }
    double gbps[3];
    if (g->phase == 1 && g->first_ns > 0 && side_time(g, false, g->last_ns) >= g->first_ns &&
        rates(g, gbps, false) && gbps[1] < gbps[0] * (1 - FERRY__GUARD_EARLY)) {
        decided(g, gbps, false, " after half its trial");
        return true;
    }
    if (g->phase < 3 || g->busy)
        return false;
    if (!rates(g, gbps, true)) { /* start over */
        g->why_over = g->parts[0] < FERRY__GUARD_MIN_PARTS ? "measured too few parts without it"
                                                           : "measured too few parts with it";
        g->state = FERRY__GUARD_IDLE;
        return false;
    }
    /* both sides with it must beat the side without: a rate that changes its regime halfway
     * (an H100 host: the GPU at 43 GB/s beside the CPU in the first, at 19 in the second) is
     * not averaged into a gain */
    double with = gbps[1] < gbps[2] ? gbps[1] : gbps[2];
    decided(g, gbps, with >= gbps[0] * (1 + FERRY__GUARD_MARGIN), "");
    return true;
}

void ferry__guard_saved(ferry__cpu_guard_t *g, bool keep, double with_gbps, double without_gbps,
                        const char *from)
{
    memset(g, 0, sizeof(*g));
    g->state = keep ? FERRY__GUARD_KEEP : FERRY__GUARD_BENCH;
    g->gbps_with = with_gbps;
    g->gbps_without = without_gbps;
    snprintf(g->note, sizeof(g->note),
             "%s (perf_model %.40s): the set ran at %.2f GB/s with it, %.2f without",
             keep ? "kept" : "benched", from, with_gbps, without_gbps);
}
