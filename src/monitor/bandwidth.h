/* The bandwidth monitor: achieved copy throughput over a window of timed copies per direction
 * against what the link delivers at those sizes (its measured copy curve, else its theoretical
 * rate), raising and clearing alerts that name the likely cause (small transfers, pageable
 * memory, another process on the link, both directions low, the link itself). The pipeline
 * feeds it one timed copy at a time from its completion thread; nothing here knows a pipeline. */
#ifndef FERRY_MONITOR_BANDWIDTH_H
#define FERRY_MONITOR_BANDWIDTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/runtime.h"
#include "ferry.h"
#include "monitor/linkmon.h"

/* Timed copies in a direction's window. */
#define FERRY__BW_WINDOW 8u

typedef struct ferry__bwmon_config {
    double link_gbps;     /* the link's theoretical rate per direction; <= 0: the monitor is off */
    double alert_ratio;   /* a window below this share of what its copies get is low; <= 0: off */
    double foreign_ratio; /* another process's traffic, as a share of link_gbps, that names it */
    const ferry__link_curve_t *curve; /* borrowed; NULL: judged against link_gbps alone */
    ferry__linkmon_t *link;           /* borrowed; NULL: another process's traffic is not told */
    bool host_pinned;                 /* the copies' host memory is pinned (else pageable) */
    bool copies_merge;                /* a batch's chunks' copies merge already (the advice) */
} ferry__bwmon_config_t;

typedef struct ferry__bwmon {
    ferry__bwmon_config_t cfg;
    struct ferry__bw_win {
        uint64_t bytes[FERRY__BW_WINDOW], ns[FERRY__BW_WINDOW];
        uint64_t sum_bytes, sum_ns; /* of the window, kept as samples come and go */
        unsigned n, at;
        bool alerting;
        double ratio; /* the last full window's rate against link_gbps */
    } win[2];
    uint64_t alerts; /* raised so far */
    char text[512];  /* the last change of state's sentence (ferry_alert_t.text) */
} ferry__bwmon_t;

/* Start @m empty with @cfg (copied; its pointers are borrowed for @m's life). */
void ferry__bwmon_init(ferry__bwmon_t *m, const ferry__bwmon_config_t *cfg);

/* One timed copy of @bytes in direction @dir (0 H2D, 1 D2H) that kept the direction's engines
 * busy @busy_ns (what it adds to the union of that direction's copies), at device time @now.
 * Over a full window, the rate while copying against what the link delivers at the window's
 * sizes: below the alert ratio an alert is raised, 5 points above it cleared, each logged.
 * Returns true on such a change of state, with *@out filled (its text lives in @m until the
 * next call), for the caller to pass on; false otherwise, *@out untouched. One thread. */
bool ferry__bwmon_sample(ferry__bwmon_t *m, int dir, uint64_t bytes, uint64_t busy_ns, uint64_t now,
                         ferry_alert_t *out);

#endif
