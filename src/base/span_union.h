/* The union of busy intervals of one engine class (a copy direction's engines, the compute
 * streams): how long any of them was busy, exact for intervals that arrive in any order within
 * its last FERRY__SPAN_KEEP disjoint pieces (a D2H of one copy stream retires before the other
 * stream's earlier one); everything below floor counts as covered. Zero-initialised is empty.
 * One thread at a time. */
#ifndef FERRY_SPAN_UNION_H
#define FERRY_SPAN_UNION_H

#include <stdint.h>

#define FERRY__SPAN_KEEP 8u

typedef struct ferry__span_union {
    uint64_t floor;
    unsigned n;
    uint64_t lo[FERRY__SPAN_KEEP], hi[FERRY__SPAN_KEEP]; /* sorted, disjoint, above floor */
} ferry__span_union_t;

/* Add [@start, @end): returns the time it covers that the union did not. */
uint64_t ferry__span_union_add(ferry__span_union_t *u, uint64_t start, uint64_t end);
/* Count everything before @end as covered (adds nothing). */
void ferry__span_union_cover(ferry__span_union_t *u, uint64_t end);

#endif
