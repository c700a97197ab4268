/* The union of an engine's busy intervals (ferry__span_union_*): each interval adds only the time
 * no earlier one covered, in whatever order the intervals arrive, as copies of two copy streams
 * retire out of order; past its kept pieces the oldest fall into the floor. Checked against a
 * brute-force union over a bitmap for random interval sets. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pipeline/pipeline_internal.h"

static void test_orders(void **state)
{
    (void)state;
    ferry__span_union_t u = {0};
    assert_int_equal(ferry__span_union_add(&u, 10, 20), 10);
    assert_int_equal(ferry__span_union_add(&u, 15, 25), 5);  /* overlap */
    assert_int_equal(ferry__span_union_add(&u, 30, 40), 10); /* a gap stays a gap */
    assert_int_equal(ferry__span_union_add(&u, 22, 35), 5);  /* fills the gap only */
    assert_int_equal(ferry__span_union_add(&u, 0, 5), 5);    /* earlier, out of order */
    assert_int_equal(ferry__span_union_add(&u, 0, 40), 5);   /* what is left: [5, 10) */
    assert_int_equal(ferry__span_union_add(&u, 12, 13), 0);  /* inside */
    ferry__span_union_cover(&u, 100);                        /* an anchor's end */
    assert_int_equal(ferry__span_union_add(&u, 90, 110), 10);
}

/* Random intervals that arrive up to 3 places out of order, as with a few copy streams: the
 * union matches a bitmap's, as long as fewer than FERRY__SPAN_KEEP pieces are open at once. */
static void test_random_against_bitmap(void **state)
{
    (void)state;
    enum { T = 4000, N = 300 };
    static unsigned char bit[T];
    srand(7);
    for (int round = 0; round < 200; round++) {
        memset(bit, 0, sizeof(bit));
        ferry__span_union_t u = {0};
        uint64_t lo[N], hi[N], got = 0, want = 0;
        uint64_t at = 0;
        for (int i = 0; i < N; i++) { /* in start order, each a little past the last */
            at += (uint64_t)(rand() % 12);
            lo[i] = at;
            hi[i] = at + 1 + (uint64_t)(rand() % 20);
            if (hi[i] > T)
                hi[i] = T;
        }
        for (int i = 0; i + 3 < N; i += 4) { /* shuffle within groups of four */
            for (int k = 3; k > 0; k--) {
                int j = i + rand() % (k + 1);
                uint64_t a = lo[i + k], b = hi[i + k];
                lo[i + k] = lo[j], hi[i + k] = hi[j];
                lo[j] = a, hi[j] = b;
            }
        }
        for (int i = 0; i < N; i++) {
            got += ferry__span_union_add(&u, lo[i], hi[i]);
            for (uint64_t x = lo[i]; x < hi[i]; x++)
                bit[x] = 1;
        }
        for (int x = 0; x < T; x++)
            want += bit[x];
        assert_int_equal(got, want);
    }
}

/* More open pieces than it keeps: the oldest go into the floor (counted as covered), and the
 * union never counts a time twice. */
static void test_overflow(void **state)
{
    (void)state;
    ferry__span_union_t u = {0};
    uint64_t sum = 0;
    for (uint64_t i = 0; i < 3 * FERRY__SPAN_KEEP; i++)
        sum += ferry__span_union_add(&u, 100 + 10 * i, 105 + 10 * i);
    assert_int_equal(sum, 5 * 3 * FERRY__SPAN_KEEP);
    assert_true(u.n <= FERRY__SPAN_KEEP);
    /* Into the gaps: the ones below the floor add nothing, the kept ones' gaps add 5 each. */
    sum = 0;
    for (uint64_t i = 0; i < 3 * FERRY__SPAN_KEEP; i++)
        sum += ferry__span_union_add(&u, 105 + 10 * i, 110 + 10 * i);
    assert_true(sum <= 5 * 3 * FERRY__SPAN_KEEP);
    assert_true(sum >= 5 * (FERRY__SPAN_KEEP - 1));
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_orders), cmocka_unit_test(test_random_against_bitmap),
          cmocka_unit_test(test_overflow))
