/* The bandwidth monitor on its own, fed timed copies by hand: nothing until a window is full;
 * an alert raised once when a window runs under the alert ratio, held until it is 5 points
 * above it (no flapping in between) and cleared once; the cause named from what the monitor
 * was told (small transfers, pageable memory, both directions low, the link itself); off when
 * the ratio or the link's rate is 0; judged against the simulated link's copy curve, a round
 * trip of 512 KiB copies at 80% of what the link delivers for them is quiet below 60% of the
 * theoretical rate; and fed the union of two copy streams' overlapping intervals, the rate is
 * the bytes over the time any copy ran. */
#include <string.h>

#include "internal.h"

#define MIB (1ull << 20)

typedef struct fed {
    int changes, raised;
    ferry_alert_t last;
    char text[512];
} fed_t;

/* @n copies of @bytes in direction @d, each busy for what @gbps takes (GB/s = bytes per ns). */
static fed_t feed(ferry__bwmon_t *m, int d, uint64_t bytes, double gbps, unsigned n)
{
    fed_t f = {0};
    static uint64_t now;
    for (unsigned i = 0; i < n; i++) {
        ferry_alert_t al;
        uint64_t ns = (uint64_t)((double)bytes / gbps);
        now += ns;
        if (ferry__bwmon_sample(m, d, bytes, ns, now, &al)) {
            f.changes++;
            f.raised += al.raised;
            f.last = al;
            snprintf(f.text, sizeof(f.text), "%s", al.text);
            assert_int_equal(al.size, sizeof(al));
            assert_int_equal(al.direction, d);
            assert_int_equal(al.device_ns, now);
            assert_true(al.link_gbps == m->cfg.link_gbps);
            assert_true(al.foreign_gbps[0] == 0 && al.foreign_gbps[1] == 0);
        }
    }
    return f;
}

static ferry__bwmon_config_t config(void)
{
    ferry__bwmon_config_t c = {
        .link_gbps = 50, .alert_ratio = 0.6, .foreign_ratio = 0.1, .host_pinned = true};
    return c;
}

/* @m started afresh with @c. */
static ferry__bwmon_t *fresh(ferry__bwmon_t *m, const ferry__bwmon_config_t *c)
{
    ferry__bwmon_init(m, c);
    return m;
}

static void test_raise_hold_clear(void **state)
{
    (void)state;
    ferry__bwmon_config_t c = config();
    ferry__bwmon_t m;
    ferry__bwmon_init(&m, &c);
    /* Seven copies: the window is not full, nothing is judged. */
    assert_int_equal(feed(&m, 0, 8 * MIB, 40, 7).changes, 0);
    assert_true(m.win[0].ratio == 0);
    /* The eighth: 40 of 50 GB/s, healthy. */
    assert_int_equal(feed(&m, 0, 8 * MIB, 40, 1).changes, 0);
    assert_float_equal(m.win[0].ratio, 0.8, 1e-5);
    /* Down to 20 GB/s: one alert as the window crosses 60%, the cause not told. */
    fed_t f = feed(&m, 0, 8 * MIB, 20, 8);
    assert_int_equal(f.changes, 1);
    assert_int_equal(f.raised, 1);
    assert_true(f.last.ratio < 0.6 && f.last.ratio > 0.4);
    assert_int_equal(f.last.cause, FERRY_CAUSE_UNKNOWN);
    assert_non_null(strstr(f.text, "not told"));
    assert_null(strstr(f.text, "delivers for these copies")); /* no curve */
    assert_float_equal(m.win[0].ratio, 0.4, 1e-5);
    assert_int_equal(m.alerts, 1);
    assert_int_equal(feed(&m, 0, 8 * MIB, 20, 8).changes, 0); /* still low: said once */
    /* 62%: above the ratio, not 5 points above it: the alert stands. */
    assert_int_equal(feed(&m, 0, 8 * MIB, 31, 8).changes, 0);
    assert_float_equal(m.win[0].ratio, 0.62, 1e-5);
    /* Back to 40 GB/s: cleared once, at 65% or more. */
    f = feed(&m, 0, 8 * MIB, 40, 8);
    assert_int_equal(f.changes, 1);
    assert_int_equal(f.raised, 0);
    assert_true(f.last.ratio >= 0.65);
    assert_non_null(strstr(f.text, "back at"));
    assert_int_equal(m.alerts, 1);
    /* The other direction's window is its own. */
    assert_int_equal(m.win[1].n, 0);
}

static void test_causes(void **state)
{
    (void)state;
    ferry__bwmon_config_t c = config();
    ferry__bwmon_t m;
    /* Both directions low: the second names the contention. */
    assert_int_equal(feed(fresh(&m, &c), 0, 8 * MIB, 20, 8).raised, 1);
    fed_t f = feed(&m, 1, 8 * MIB, 20, 8);
    assert_int_equal(f.raised, 1);
    assert_int_equal(f.last.cause, FERRY_CAUSE_CONTENTION);
    assert_int_equal(m.alerts, 2);
    /* Small copies (no curve: a median under 1 MiB), and the advice with copies merged. */
    f = feed(fresh(&m, &c), 0, 64 << 10, 10, 8);
    assert_int_equal(f.last.cause, FERRY_CAUSE_SMALL_TRANSFERS);
    assert_non_null(strstr(f.text, "median 64 KiB"));
    assert_non_null(strstr(f.text, "coalesce_bytes"));
    c.copies_merge = true;
    f = feed(fresh(&m, &c), 0, 64 << 10, 10, 8);
    assert_int_equal(f.last.cause, FERRY_CAUSE_SMALL_TRANSFERS);
    assert_non_null(strstr(f.text, "submit batches"));
    /* Pageable host memory. */
    c = config();
    c.host_pinned = false;
    f = feed(fresh(&m, &c), 1, 8 * MIB, 20, 8);
    assert_int_equal(f.raised, 1);
    assert_int_equal(f.last.cause, FERRY_CAUSE_PAGEABLE);
}

static void test_off(void **state)
{
    (void)state;
    ferry__bwmon_config_t c = config();
    ferry__bwmon_t m;
    c.alert_ratio = 0;
    assert_int_equal(feed(fresh(&m, &c), 0, 8 * MIB, 1, 16).changes, 0);
    assert_true(m.win[0].ratio == 0 && m.alerts == 0);
    c = config();
    c.link_gbps = 0; /* the link's rate unknown */
    assert_int_equal(feed(fresh(&m, &c), 0, 8 * MIB, 1, 16).changes, 0);
    assert_true(m.win[0].ratio == 0 && m.alerts == 0);
}

/* @n copies of @bytes in direction @d at @share of what the curve says the link delivers both
 * ways. */
static fed_t feed_curve(ferry__bwmon_t *m, int d, uint64_t bytes, double share, unsigned n)
{
    double one, both;
    ferry__link_curve_copy_ns(m->cfg.curve, d, bytes, &one, &both);
    assert_true(one > 0 && both > one);
    return feed(m, d, bytes, (double)bytes / both * share, n);
}

static void test_curve(void **state)
{
    (void)state;
    ferry_runtime_t *rt = test_sim_runtime();
    ferry_device_t *dev = test_device(rt);
    ferry__link_curve_t *curve = NULL;
    assert_int_equal(ferry__device_link_curve(dev, &curve), 0);
    assert_non_null(curve);
    double peak = ferry__link_curve_peak_gbps(curve, 0);
    assert_true(peak > 0 && peak < dev->props.link_gbps);
    ferry__bwmon_config_t c = config();
    c.link_gbps = dev->props.link_gbps;
    c.curve = curve;
    ferry__bwmon_t m;
    /* 512 KiB copies at 80% of what the link delivers for them while the other way copies too:
     * under 60% of the theoretical rate, and quiet. */
    assert_int_equal(feed_curve(fresh(&m, &c), 0, 512 << 10, 0.8, 16).changes, 0);
    assert_int_equal(feed_curve(&m, 1, 512 << 10, 0.8, 16).changes, 0);
    printf("# 512 KiB copies: %.1f%% and %.1f%% of the link's %.1f GB/s\n", m.win[0].ratio * 100,
           m.win[1].ratio * 100, c.link_gbps);
    assert_true(m.win[0].ratio < 0.6 && m.win[1].ratio < 0.6);
    /* 8 MiB copies at half of it: low, and the text says against what. */
    fed_t f = feed_curve(&m, 0, 8 * MIB, 0.5, 8);
    assert_int_equal(f.raised, 1);
    assert_int_equal(f.last.cause, FERRY_CAUSE_UNKNOWN);
    assert_non_null(strstr(f.text, "it delivers for these copies"));
    /* 64 KiB copies at full speed: the link itself delivers them under 60% of its peak. */
    f = feed_curve(fresh(&m, &c), 0, 64 << 10, 1.0, 8);
    assert_int_equal(f.raised, 1);
    assert_int_equal(f.last.cause, FERRY_CAUSE_SMALL_TRANSFERS);
    ferry__link_curve_destroy(curve);
    ferry__link_curve_destroy(NULL);
    ferry_runtime_destroy(rt);
}

/* Two copy streams whose copies of a direction run at once, in pairs: the union of their
 * intervals counts each pair's time once, and the rate is the link's. Their sum would have
 * read half of it, and an alert. */
static void test_union_of_two_streams(void **state)
{
    (void)state;
    ferry__bwmon_config_t c = config();
    c.link_gbps = 2; /* two bytes per ns: a byte per ns each way, times two streams */
    ferry__bwmon_t m;
    ferry__bwmon_init(&m, &c);
    ferry__span_union_t u = {0};
    uint64_t copy = 2 * MIB, t = 1000, busy = 0;
    for (unsigned k = 0; k < 8; k++) {
        /* stream k % 2: the second of a pair retires first, as out of order as it gets */
        uint64_t start = t + (k / 2) * copy, end = start + copy;
        uint64_t add = ferry__span_union_add(&u, start, end);
        assert_int_equal(add, k % 2 == 0 ? copy : 0);
        busy += add;
        ferry_alert_t al;
        assert_false(ferry__bwmon_sample(&m, 0, copy, add, end, &al));
    }
    assert_int_equal(busy, 4 * copy);
    assert_true(m.win[0].ratio == 1.0);
    assert_int_equal(m.alerts, 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_raise_hold_clear), cmocka_unit_test(test_causes),
          cmocka_unit_test(test_off), cmocka_unit_test(test_curve),
          cmocka_unit_test(test_union_of_two_streams))
