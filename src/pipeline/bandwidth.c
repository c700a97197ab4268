/* The bandwidth monitor: achieved copy throughput over a window of timed copies against what the
 * link delivers at those sizes (its measured curve), the alerts, and the link monitor's view of
 * another process's traffic. Completion thread. */
#include <errno.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/sim/sim.h"
#include "pipeline/pipeline_internal.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Whether the link carries traffic this pipeline did not move (beyond its own bytes and the
 * counter's overhead on them), at least bw_foreign_ratio of the link's rate @link_gbps in some
 * direction: that traffic per direction into @foreign (bytes per second). Inline (simulator),
 * a fresh sample first. Completion thread. */
static bool foreign_traffic(ferry_pipeline_t *p, uint64_t now, double link_gbps, double *foreign)
{
    foreign[0] = foreign[1] = 0;
    if (p->link == NULL)
        return false;
    ferry__linkmon_step(p->link, now, true);
    ferry__link_sample_t ls;
    ferry__linkmon_last(p->link, &ls);
    if (ls.count == 0)
        return false;
    bool any = false;
    for (int d = 0; d < 2; d++) {
        double own = ls.own[d] * (1 + FERRY_LINK_COUNTER_OVERHEAD);
        foreign[d] = ls.total[d] > own ? ls.total[d] - own : 0;
        any |= foreign[d] >= p->plan.bw_foreign_ratio * link_gbps * 1e9;
    }
    return any;
}

/* The bandwidth monitor: one timed copy of @bytes in @ns, direction @d (0 H2D, 1 D2H). Over a
 * full window, the rate while copying against the link's theoretical rate: below the alert
 * ratio an alert is raised (log, count, callback) naming the likely cause; 5 points above it,
 * cleared. Completion thread. */
/* Drop the lowest interval of @u into its floor. */
static void span_drop_lowest(ferry__span_union_t *u)
{
    if (u->hi[0] > u->floor)
        u->floor = u->hi[0];
    memmove(u->lo, u->lo + 1, (u->n - 1) * sizeof(u->lo[0]));
    memmove(u->hi, u->hi + 1, (u->n - 1) * sizeof(u->hi[0]));
    u->n--;
}

uint64_t ferry__span_union_add(ferry__span_union_t *u, uint64_t start, uint64_t end)
{
    if (start < u->floor)
        start = u->floor;
    if (end <= start)
        return 0;
    /* Its length less what the kept intervals (sorted, disjoint) already cover. */
    uint64_t added = end - start;
    unsigned first = 0;
    while (first < u->n && u->hi[first] < start)
        first++;
    unsigned last = first;
    uint64_t lo = start, hi = end;
    for (; last < u->n && u->lo[last] <= end; last++) {
        uint64_t a = u->lo[last] > start ? u->lo[last] : start;
        uint64_t b = u->hi[last] < end ? u->hi[last] : end;
        if (b > a)
            added -= b - a;
        lo = u->lo[last] < lo ? u->lo[last] : lo;
        hi = u->hi[last] > hi ? u->hi[last] : hi;
    }
    /* Intervals first..last-1 merge into [lo, hi). */
    unsigned merged = last - first;
    if (merged == 0 && u->n == FERRY__SPAN_KEEP) {
        /* No room for one more: the oldest goes into the floor, and the floor may now cut
         * into this one, so add it again (there is room now). */
        span_drop_lowest(u);
        return ferry__span_union_add(u, start, end);
    }
    if (merged == 0) {
        memmove(u->lo + first + 1, u->lo + first, (u->n - first) * sizeof(u->lo[0]));
        memmove(u->hi + first + 1, u->hi + first, (u->n - first) * sizeof(u->hi[0]));
        u->n++;
    } else if (merged > 1) {
        memmove(u->lo + first + 1, u->lo + last, (u->n - last) * sizeof(u->lo[0]));
        memmove(u->hi + first + 1, u->hi + last, (u->n - last) * sizeof(u->hi[0]));
        u->n -= merged - 1;
    }
    u->lo[first] = lo;
    u->hi[first] = hi;
    return added;
}

void ferry__span_union_cover(ferry__span_union_t *u, uint64_t end)
{
    while (u->n > 0 && u->lo[0] < end) {
        if (u->hi[0] > end) { /* part of it lies past @end: keep that part */
            u->lo[0] = end;
            break;
        }
        span_drop_lowest(u);
    }
    if (end > u->floor)
        u->floor = end;
}

/* The text of a window's change of state (@low: raised, else cleared) and, raised, its likely
 * cause: small transfers, pageable memory, another process on the link (its rates into
 * @foreign), both directions low, or the link itself. */
static ferry_alert_cause_t alert_text(ferry_pipeline_t *p, int d, bool low, bool small, double gbps,
                                      double judge, double expect, uint64_t now, char *text,
                                      size_t len, double foreign[2])
{
    const struct bw_win *w = &p->comp.bw[d];
    double link = p->dev->props.link_gbps;
    uint64_t sizes[BW_WINDOW];
    memcpy(sizes, w->bytes, sizeof(sizes));
    qsort(sizes, BW_WINDOW, sizeof(sizes[0]), cmp_u64);
    uint64_t median = sizes[BW_WINDOW / 2];
    ferry_alert_cause_t cause = FERRY_CAUSE_UNKNOWN;
    const char *dir = d == 0 ? "H2D" : "D2H";
    char ref[112] = "";
    if (expect > 0)
        snprintf(ref, sizeof(ref), " (%.0f%% of the %.1f GB/s it delivers for these copies)",
                 judge * 100, expect);
    if (!low) {
        snprintf(text, len, "%s copies back at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s", dir,
                 gbps, w->ratio * 100, link, ref);
    } else if (small || (p->link_prof == NULL && median < (1u << 20))) {
        cause = FERRY_CAUSE_SMALL_TRANSFERS;
        if (p->plan.group > 1) /* copies merge already: what limits them is the batches */
            snprintf(text, len,
                     "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: small transfers "
                     "(median %llu KiB); each copy pays a fixed cost and copies merge only a "
                     "batch's chunks: submit batches of 4 MiB or more",
                     dir, gbps, w->ratio * 100, link, ref, (unsigned long long)(median >> 10));
        else
            snprintf(text, len,
                     "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: small transfers "
                     "(median %llu KiB); each copy pays a fixed cost: use chunks of 4 MiB or "
                     "more, or coalesce_bytes=8M to merge the copies of a batch's chunks",
                     dir, gbps, w->ratio * 100, link, ref, (unsigned long long)(median >> 10));
    } else if (!p->host_pinned) {
        cause = FERRY_CAUSE_PAGEABLE;
        snprintf(text, len,
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: pageable host memory "
                 "(pinning was refused): raise the locked-memory limit",
                 dir, gbps, w->ratio * 100, link, ref);
    } else if (foreign_traffic(p, now, link, foreign)) {
        cause = FERRY_CAUSE_FOREIGN;
        snprintf(text, len,
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: another process moves "
                 "data on the link (the link counts %.1f GB/s H2D and %.1f GB/s D2H that this "
                 "pipeline did not move)",
                 dir, gbps, w->ratio * 100, link, ref, foreign[0] / 1e9, foreign[1] / 1e9);
    } else if (p->comp.bw[!d].n == BW_WINDOW && p->comp.bw[!d].alerting) {
        cause = FERRY_CAUSE_CONTENTION;
        snprintf(
            text, len,
            "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s, and the other direction "
            "is low too: both directions contend for the host's side of the link",
            dir, gbps, w->ratio * 100, link, ref);
    } else {
        snprintf(text, len,
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: not small transfers, "
                 "pageable memory or another process%s: the link may run below its rated "
                 "generation or width (`ferry probe`)",
                 dir, gbps, w->ratio * 100, link, ref,
                 p->link == NULL ? " (not told: no link counter, or link_sample_ms 0)" : "");
    }
    return cause;
}

void ferry__pipe_bw_sample(ferry_pipeline_t *p, int d, uint64_t bytes, uint64_t ns, uint64_t now)
{
    double link = p->dev->props.link_gbps;
    if (p->plan.bw_alert_ratio <= 0 || link <= 0)
        return;
    struct bw_win *w = &p->comp.bw[d];
    /* Running sums (exact: a slot not yet filled holds 0): every sampled chunk comes here, and
     * only a change of state needs the window itself. */
    w->sum_bytes += bytes - w->bytes[w->at];
    w->sum_ns += ns - w->ns[w->at];
    w->bytes[w->at] = bytes;
    w->ns[w->at] = ns;
    w->at = (w->at + 1) % BW_WINDOW;
    if (w->n < BW_WINDOW) {
        w->n++;
        if (w->n < BW_WINDOW)
            return;
    }
    if (w->sum_ns == 0)
        return;
    double gbps = (double)w->sum_bytes / (double)w->sum_ns;
    w->ratio = gbps / link;
    /* What the link delivers at the window's sizes (the measured curve: latency + bytes at the
     * asymptotic rate), each direction sharing it with the other as a round trip does, and one
     * way alone. The H200 moved 37-38 GB/s H2D in 8 MiB copies, healthy, under 60% of the
     * theoretical 63 GB/s: judged against that, ferry alone raised 11 and 7 alerts in a run
     * (bench/results/2026-12-03-h200-485b4bd-link.jsonl). A window is low when it runs under
     * bw_alert_ratio of what its sizes deliver, or when its sizes are so small that the link
     * itself delivers under that share of its large-copy rate (the small-transfers cause). */
    double judge = w->ratio, expect = 0, one_way = 0, peak = link;
    bool small = false;
    if (p->link_prof != NULL) {
        const struct ferry_sim_profile *lp = p->link_prof;
        const struct ferry_sim_curve *c = &lp->curve[d];
        double t_both = 0, t_one = 0, wbytes = 0;
        peak = c->gbps[c->n - 1];
        for (unsigned i = 0; i < BW_WINDOW; i++) {
            double lat = (double)ferry__sim_copy_latency_ns(lp, d, w->bytes[i]);
            t_both += lat + (double)w->bytes[i] / (peak * lp->bidir_factor);
            t_one += lat + (double)w->bytes[i] / peak;
            wbytes += (double)w->bytes[i];
        }
        expect = t_both > 0 ? wbytes / t_both : 0;
        one_way = t_one > 0 ? wbytes / t_one : 0;
        if (expect > 0) {
            judge = gbps / expect;
            small = one_way < p->plan.bw_alert_ratio * peak;
        }
    }
    bool low = small || judge < p->plan.bw_alert_ratio;
    bool high = !small && judge >= p->plan.bw_alert_ratio + 0.05;
    if ((low && w->alerting) || (!low && !high) || (high && !w->alerting))
        return;
    w->alerting = low;
    char text[512];
    double foreign[2] = {0, 0};
    ferry_alert_cause_t cause =
        alert_text(p, d, low, small, gbps, judge, expect, now, text, sizeof(text), foreign);
    if (low) {
        p->comp.bw_alerts++;
        trace_note(p, d == 0 ? NOTE_BW_H2D : NOTE_BW_D2H, 0, 0, now);
    }
    ferry_log(low ? FERRY_LOG_WARN : FERRY_LOG_INFO, "bandwidth", "%s%s", low ? "alert: " : "",
              text);
    if (p->on_alert != NULL) {
        ferry_alert_t al = {.size = sizeof(al),
                            .raised = low,
                            .direction = d,
                            .gbps = gbps,
                            .link_gbps = link,
                            .ratio = w->ratio,
                            .cause = cause,
                            .text = text,
                            .device_ns = now,
                            .foreign_gbps = {foreign[0] / 1e9, foreign[1] / 1e9}};
        p->on_alert(&al, p->alert_arg);
    }
}

/* Retire one chunk whose events are complete (or which failed): copy its output out, read its
 * event times if it was timed. @now: the device clock at this pass, the end of an untimed
 * chunk as far as the stats know (late by the polling latency, a few microseconds).
 * Completion thread, no lock held. */
