/* The union of busy intervals (base/span_union.h): each interval adds only the time no kept
 * piece covers; past FERRY__SPAN_KEEP pieces the oldest falls into the floor. */
#include <string.h>

#include "base/span_union.h"

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
