/* The watchdog's rules, stepped by hand on chosen clock values (inline mode, on a simulated
 * device for the mapped page): a head past its deadline raises the abort word to its sequence
 * number once; a head at or below the word still there a floor later is a hang, reported once;
 * stale heads (a completion thread that stopped polling) raise nothing and are reported; a
 * watchdog that stopped stepping is reported by the completion thread's check. */
#include <string.h>

#include "internal.h"

#define MS 1000000ull

typedef struct seen {
    int deadlines, hangs;
    uint64_t seq, deadline_ns;
} seen_t;

static void on_deadline(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t deadline,
                        int stopped)
{
    (void)now;
    (void)stopped;
    seen_t *s = ctx;
    s->deadlines++;
    s->seq = h->seq;
    s->deadline_ns = deadline;
}

static void on_hang(void *ctx, const ferry__wd_head_t *h, uint64_t now, uint64_t since_abort,
                    bool hb)
{
    (void)h;
    (void)now;
    (void)since_abort;
    (void)hb;
    ((seen_t *)ctx)->hangs++;
}

static ferry__watchdog_t *make(ferry_device_t *dev, seen_t *s)
{
    ferry__wd_config_t c = {
        .own_thread = false,
        .period_ns = 1 * MS,
        .heartbeat_ns = 0,
        .factor = 8,
        .floor_ns = 10 * MS,
        .name = "test",
        .on_deadline = on_deadline,
        .on_hang = on_hang,
        .ctx = s,
    };
    ferry__watchdog_t *w = NULL;
    assert_int_equal(ferry__watchdog_create(dev, &c, &w), 0);
    return w;
}

static void test_deadline_then_hang(void **state)
{
    (void)state;
    seen_t s = {0};
    ferry__watchdog_t *w = make(test_dev, &s);
    const volatile uint64_t *word = ferry__watchdog_abort_word(w);
    assert_non_null(word); /* the simulator maps the page at its own address */
    /* Two D2H streams; the head of stream 1 started at 1 ms; mean latency 0.5 ms: deadline
     * 10 + 8 x 0.5 = 14 ms. */
    ferry__wd_head_t heads[2] = {{0}, {.seq = 7, .since_ns = 1 * MS, .batch = 3, .chunk = 1}};
    ferry__watchdog_publish(w, heads, 2, MS / 2, 2 * MS);
    ferry__watchdog_step(w, 2 * MS);
    ferry__watchdog_publish(w, heads, 2, MS / 2, 15 * MS);
    ferry__watchdog_step(w, 15 * MS); /* 14 ms at the head: not past it */
    assert_int_equal(s.deadlines, 0);
    assert_int_equal(ferry__watchdog_raised(w), 0);
    ferry__watchdog_publish(w, heads, 2, MS / 2, 16 * MS);
    ferry__watchdog_step(w, 16 * MS);
    assert_int_equal(s.deadlines, 1);
    assert_int_equal(s.seq, 7);
    assert_int_equal(s.deadline_ns, 14 * MS);
    assert_int_equal(ferry__watchdog_raised(w), 7);
    assert_int_equal(*word, 7);
    /* Raised once; the hang clock starts at the next step that sees it still there. */
    ferry__watchdog_publish(w, heads, 2, MS / 2, 17 * MS);
    ferry__watchdog_step(w, 17 * MS);
    ferry__watchdog_publish(w, heads, 2, MS / 2, 27 * MS);
    ferry__watchdog_step(w, 27 * MS);
    assert_int_equal(s.deadlines, 1);
    assert_int_equal(s.hangs, 0);
    ferry__watchdog_publish(w, heads, 2, MS / 2, 28 * MS);
    ferry__watchdog_step(w, 28 * MS);
    assert_int_equal(s.hangs, 1);
    ferry__watchdog_publish(w, heads, 2, MS / 2, 40 * MS);
    ferry__watchdog_step(w, 40 * MS);
    assert_int_equal(s.hangs, 1);
    /* The aborted chunk retired 2 ms after its deadline (1 + 14 = 15 ms). */
    ferry__watchdog_retired_aborted(w, 7, 17 * MS);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    ferry__watchdog_stats(w, &st);
    assert_int_equal(st.deadline_overrun_ns, 2 * MS);
    /* A newer head passes its own deadline: raised again, to its number. */
    heads[0] = (ferry__wd_head_t){.seq = 9, .since_ns = 40 * MS};
    ferry__watchdog_publish(w, heads, 2, MS / 2, 60 * MS);
    ferry__watchdog_step(w, 60 * MS);
    assert_int_equal(s.deadlines, 2);
    assert_int_equal(*word, 9);
    ferry__watchdog_destroy(w, false);
}

static void test_stalls(void **state)
{
    (void)state;
    seen_t s = {0};
    ferry__watchdog_t *w = make(test_dev, &s);
    ferry__wd_head_t h = {.seq = 1, .since_ns = 0};
    ferry__watchdog_publish(w, &h, 1, 0, 0);
    /* No publish for 150 ms with a chunk in flight: the completion thread stalled; its head is
     * stale, so its deadline (10 ms) raises nothing meanwhile. */
    ferry__watchdog_step(w, 150 * MS);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    ferry__watchdog_stats(w, &st);
    assert_int_equal(st.completion_stalls, 1);
    assert_int_equal(s.deadlines, 0);
    ferry__watchdog_step(w, 160 * MS);
    ferry__watchdog_stats(w, &st);
    assert_int_equal(st.completion_stalls, 1); /* one episode, one report */
    /* It polls again, and the head really is late: raised now. */
    ferry__watchdog_publish(w, &h, 1, 0, 161 * MS);
    ferry__watchdog_step(w, 161 * MS);
    assert_int_equal(s.deadlines, 1);
    /* The watchdog last stepped at 161 ms: alive at 200, stalled at 300, back after a step. */
    ferry__watchdog_check_alive(w, 200 * MS);
    ferry__watchdog_stats(w, &st);
    assert_int_equal(st.watchdog_stalls, 0);
    ferry__watchdog_check_alive(w, 300 * MS);
    ferry__watchdog_check_alive(w, 301 * MS);
    ferry__watchdog_stats(w, &st);
    assert_int_equal(st.watchdog_stalls, 1);
    ferry__watchdog_step(w, 302 * MS);
    ferry__watchdog_check_alive(w, 303 * MS);
    ferry__watchdog_check_alive(w, 500 * MS);
    ferry__watchdog_stats(w, &st);
    assert_int_equal(st.watchdog_stalls, 2);
    ferry__watchdog_destroy(w, false);
}

TEST_MAIN(test_sim_setup, test_sim_teardown, cmocka_unit_test(test_deadline_then_hang),
          cmocka_unit_test(test_stalls))
