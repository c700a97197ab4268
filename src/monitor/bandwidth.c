/* The bandwidth monitor (monitor/bandwidth.h): achieved copy throughput over a window of timed
 * copies against what the link delivers at those sizes (its measured curve), the alerts, and
 * the link monitor's view of another process's traffic. The feeding thread's (the pipeline's
 * completion thread). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "monitor/bandwidth.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

void ferry__bwmon_init(ferry__bwmon_t *m, const ferry__bwmon_config_t *cfg)
{
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
}

/* Whether the link carries traffic the feeder did not move (beyond its own bytes and the
 * counter's overhead on them), at least foreign_ratio of the link's rate @link_gbps in some
 * direction: that traffic per direction into @foreign (bytes per second). Inline (simulator),
 * a fresh sample first. */
static bool foreign_traffic(ferry__bwmon_t *m, uint64_t now, double link_gbps, double *foreign)
{
    foreign[0] = foreign[1] = 0;
    if (m->cfg.link == NULL)
        return false;
    ferry__linkmon_step(m->cfg.link, now, true);
    ferry__link_sample_t ls;
    ferry__linkmon_last(m->cfg.link, &ls);
    if (ls.count == 0)
        return false;
    bool any = false;
    for (int d = 0; d < 2; d++) {
        double own = ls.own[d] * (1 + FERRY_LINK_COUNTER_OVERHEAD);
        foreign[d] = ls.total[d] > own ? ls.total[d] - own : 0;
        any |= foreign[d] >= m->cfg.foreign_ratio * link_gbps * 1e9;
    }
    return any;
}

/* The explanation of a window's change of state @a, whose measured fields are set (raised, else
 * cleared): its text, in m->text, and, raised, its likely cause: small transfers, pageable
 * memory, another process on the link (its rates into a->foreign_gbps), both directions low, or
 * the link itself. */
static void alert_explain(ferry__bwmon_t *m, bool small, double judge, double expect,
                          ferry_alert_t *a)
{
    int d = a->direction;
    bool low = a->raised;
    double gbps = a->gbps;
    double foreign[2] = {0, 0};
    const struct ferry__bw_win *w = &m->win[d];
    double link = m->cfg.link_gbps;
    char *text = m->text;
    size_t len = sizeof(m->text);
    uint64_t sizes[FERRY__BW_WINDOW];
    memcpy(sizes, w->bytes, sizeof(sizes));
    qsort(sizes, FERRY__BW_WINDOW, sizeof(sizes[0]), cmp_u64);
    uint64_t median = sizes[FERRY__BW_WINDOW / 2];
    ferry_alert_cause_t cause = FERRY_CAUSE_UNKNOWN;
    const char *dir = d == 0 ? "H2D" : "D2H";
    char ref[112] = "";
    if (expect > 0)
        snprintf(ref, sizeof(ref), " (%.0f%% of the %.1f GB/s it delivers for these copies)",
                 judge * 100, expect);
    if (!low) {
        snprintf(text, len, "%s copies back at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s", dir,
                 gbps, w->ratio * 100, link, ref);
    } else if (small || (m->cfg.curve == NULL && median < (1u << 20))) {
        cause = FERRY_CAUSE_SMALL_TRANSFERS;
        if (m->cfg.copies_merge) /* copies merge already: what limits them is the batches */
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
    } else if (!m->cfg.host_pinned) {
        cause = FERRY_CAUSE_PAGEABLE;
        snprintf(text, len,
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: pageable host memory "
                 "(pinning was refused): raise the locked-memory limit",
                 dir, gbps, w->ratio * 100, link, ref);
    } else if (foreign_traffic(m, a->device_ns, link, foreign)) {
        cause = FERRY_CAUSE_FOREIGN;
        snprintf(text, len,
                 "%s copies at %.1f GB/s, %.0f%% of the link's %.0f GB/s%s: another process moves "
                 "data on the link (the link counts %.1f GB/s H2D and %.1f GB/s D2H that this "
                 "pipeline did not move)",
                 dir, gbps, w->ratio * 100, link, ref, foreign[0] / 1e9, foreign[1] / 1e9);
    } else if (m->win[!d].n == FERRY__BW_WINDOW && m->win[!d].alerting) {
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
                 m->cfg.link == NULL ? " (not told: no link counter, or link_sample_ms 0)" : "");
    }
    a->cause = cause;
    a->text = text;
    a->foreign_gbps[0] = foreign[0] / 1e9;
    a->foreign_gbps[1] = foreign[1] / 1e9;
}

bool ferry__bwmon_sample(ferry__bwmon_t *m, int d, uint64_t bytes, uint64_t ns, uint64_t now,
                         ferry_alert_t *out)
{
    double link = m->cfg.link_gbps;
    double ratio = m->cfg.alert_ratio;
    if (ratio <= 0 || link <= 0)
        return false;
    struct ferry__bw_win *w = &m->win[d];
    /* Running sums (exact: a slot not yet filled holds 0): every sampled chunk comes here, and
     * only a change of state needs the window itself. */
    w->sum_bytes += bytes - w->bytes[w->at];
    w->sum_ns += ns - w->ns[w->at];
    w->bytes[w->at] = bytes;
    w->ns[w->at] = ns;
    w->at = (w->at + 1) % FERRY__BW_WINDOW;
    if (w->n < FERRY__BW_WINDOW) {
        w->n++;
        if (w->n < FERRY__BW_WINDOW)
            return false;
    }
    if (w->sum_ns == 0)
        return false;
    double gbps = (double)w->sum_bytes / (double)w->sum_ns;
    w->ratio = gbps / link;
    /* What the link delivers at the window's sizes (the measured curve: latency + bytes at the
     * asymptotic rate), each direction sharing it with the other as a round trip does, and one
     * way alone. The H200 moved 37-38 GB/s H2D in 8 MiB copies, healthy, under 60% of the
     * theoretical 63 GB/s: judged against that, ferry alone raised 11 and 7 alerts in a run
     * (bench/results/2026-12-03-h200-485b4bd-link.jsonl). A window is low when it runs under
     * the alert ratio of what its sizes deliver, or when its sizes are so small that the link
     * itself delivers under that share of its large-copy rate (the small-transfers cause). */
    double judge = w->ratio, expect = 0, one_way = 0, peak = link;
    bool small = false;
    if (m->cfg.curve != NULL) {
        double t_both = 0, t_one = 0, wbytes = 0;
        peak = ferry__link_curve_peak_gbps(m->cfg.curve, d);
        for (unsigned i = 0; i < FERRY__BW_WINDOW; i++) {
            double one, both;
            ferry__link_curve_copy_ns(m->cfg.curve, d, w->bytes[i], &one, &both);
            t_both += both;
            t_one += one;
            wbytes += (double)w->bytes[i];
        }
        expect = t_both > 0 ? wbytes / t_both : 0;
        one_way = t_one > 0 ? wbytes / t_one : 0;
        if (expect > 0) {
            judge = gbps / expect;
            small = one_way < ratio * peak;
        }
    }
    bool low = small || judge < ratio;
    bool high = !small && judge >= ratio + 0.05;
    if ((low && w->alerting) || (!low && !high) || (high && !w->alerting))
        return false;
    w->alerting = low;
    *out = (ferry_alert_t){.size = sizeof(*out),
                           .raised = low,
                           .direction = d,
                           .gbps = gbps,
                           .link_gbps = link,
                           .ratio = w->ratio,
                           .device_ns = now};
    alert_explain(m, small, judge, expect, out);
    if (low)
        m->alerts++;
    ferry_log(low ? FERRY_LOG_WARN : FERRY_LOG_INFO, "bandwidth", "%s%s", low ? "alert: " : "",
              m->text);
    return true;
}
