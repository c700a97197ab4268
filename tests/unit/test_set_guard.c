/* The CPU device's guard (src/pipeline/set_guard.c) against a model of a set on real clocks:
 * batches planned one after another with @inflight of them in flight, each served at the set's
 * rate with or without the CPU, that rate set by the share of the batches in flight that gave
 * the CPU work (the CPU's threads run beside the GPUs' copies while it holds any), with jitter,
 * drift over the run and completions out of order. The guard must bench a CPU that makes the
 * set slower, or no faster than its margin, and keep one that makes it clearly faster, whatever
 * the drift; a failed batch restarts the trial, and three failed trials bench it. */
#include <math.h>
#include <string.h>

#include "testlib.h"
#include "pipeline/set_guard.h"

#define MIB ((uint64_t)1 << 20)
#define NB  400

typedef struct model {
    double with, without; /* the set's GB/s with the CPU holding work, and without */
    double drift;         /* the rate's growth over the run, a fraction (0.1: +10% at the end) */
    double jitter;        /* each batch's time +- this fraction */
    unsigned inflight;
    bool swap;    /* completions of neighbours out of order */
    int fail_id;  /* a batch that fails (-1: none) */
    int fail_all; /* every batch from the trial's second segment on fails */
} model_t;

typedef struct outcome {
    ferry__guard_state_t state;
    int decided_at; /* the batch whose completion decided, -1: none */
    unsigned cpu_batches_after;
    double with, without;
    char note[160];
} outcome_t;

/* Batch @c completed at @at: tell the guard (the set does so on its completion thread). */
static void report(ferry__cpu_guard_t *g, const model_t *m, outcome_t *o, unsigned c, uint64_t at,
                   uint64_t bytes)
{
    bool ok = (int)c != m->fail_id &&
              !(m->fail_all && g->state == FERRY__GUARD_TRIAL && c >= g->id0 + g->len);
    if (ferry__guard_done(g, c, bytes, at, ok))
        o->decided_at = (int)c;
}

static outcome_t run_model(const model_t *m, uint64_t seed)
{
    ferry__cpu_guard_t g;
    memset(&g, 0, sizeof(g));
    bool cpu[NB];
    uint64_t rng = seed, t = 0, bytes = 64 * MIB, held_at = 0;
    int held = -1; /* a completion reported after its successor's (m->swap) */
    outcome_t o = {.decided_at = -1};
    for (unsigned id = 0; id < NB + m->inflight; id++) {
        if (id < NB) { /* plan: the set starts a trial at a calibrated batch while idle */
            if (g.state == FERRY__GUARD_IDLE && id >= 3)
                ferry__guard_start(&g, id, m->inflight);
            cpu[id] = id >= 3 && ferry__guard_cpu_ok(&g, id);
            if (o.decided_at >= 0 && cpu[id])
                o.cpu_batches_after++;
        }
        if (id < m->inflight)
            continue;
        unsigned k = id - m->inflight; /* completes now: served beside those in flight */
        unsigned on = 0, n = 0;
        for (unsigned j = k; j < id && j < NB; j++, n++)
            on += cpu[j];
        double rate = m->without + (m->with - m->without) * (n > 0 ? (double)on / n : 0);
        rate *= 1 + m->drift * (double)k / NB;
        double ns = (double)bytes / rate;
        ns *= 1 + m->jitter * ((double)test_rand_range(&rng, 0, 2000) / 1000.0 - 1);
        t += (uint64_t)ns;
        if (m->swap && k % 3 == 1 && k + 1 < NB) {
            held = (int)k;
            held_at = t;
            continue;
        }
        report(&g, m, &o, k, t, bytes);
        if (held >= 0)
            report(&g, m, &o, (unsigned)held, held_at, bytes);
        held = -1;
    }
    o.state = g.state;
    o.with = g.gbps_with;
    o.without = g.gbps_without;
    memcpy(o.note, g.note, sizeof(o.note));
    return o;
}

/* Over 20 seeds, every outcome is @want. */
static void expect(const model_t *m, ferry__guard_state_t want, const char *what)
{
    for (uint64_t seed = 1; seed <= 20; seed++) {
        outcome_t o = run_model(m, seed * 7919);
        if (o.state != want)
            fail_msg("%s, seed %llu: %s (%s)", what, (unsigned long long)seed,
                     o.state == FERRY__GUARD_KEEP    ? "kept"
                     : o.state == FERRY__GUARD_BENCH ? "benched"
                                                     : "undecided",
                     o.note);
        assert_true(o.decided_at >= 0);
        if (want == FERRY__GUARD_BENCH)
            assert_int_equal(o.cpu_batches_after, 0);
    }
}

static void test_hurting_cpu_benched(void **state)
{
    (void)state;
    model_t m = {.with = 40, .without = 46, .jitter = 0.05, .inflight = 8, .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 13%");
    m.with = 44.5; /* 3% */
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 3%");
    m.inflight = 16; /* segments of 32: in flight, half of one */
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 3%, 16 in flight");
    outcome_t o = run_model(&m, 5);
    assert_true(o.with < o.without);
    assert_non_null(strstr(o.note, "benched: the set ran at"));
}

static void test_helping_cpu_kept(void **state)
{
    (void)state;
    model_t m = {.with = 60, .without = 46, .jitter = 0.05, .inflight = 8, .fail_id = -1};
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 30%");
    m.with = 46 * 1.10;
    m.inflight = 16;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 10%, 16 in flight");
    outcome_t o = run_model(&m, 3);
    assert_true(o.with > o.without * (1 + FERRY__GUARD_MARGIN));
    assert_non_null(strstr(o.note, "kept: the set ran at"));
}

/* No faster than the margin: benched (it brings only risk). */
static void test_tie_benched(void **state)
{
    (void)state;
    model_t m = {.with = 46, .without = 46, .jitter = 0.02, .inflight = 8, .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "the CPU changes nothing");
}

/* A rate that doubles over the run (8% over the trial's 32 batches: the host warming, another
 * job ending) favours neither side: the segments go with, without, without, with. */
static void test_drift_cancels(void **state)
{
    (void)state;
    model_t m = {
        .with = 46, .without = 46, .drift = 1.0, .jitter = 0.02, .inflight = 4, .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "equal rates, rising");
    m.drift = -0.5;
    expect(&m, FERRY__GUARD_BENCH, "equal rates, falling");
    m.with = 46 * 1.12;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 12%, falling");
    m.drift = 1.0;
    m.with = 46 * 0.95;
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 5%, rising");
}

static void test_out_of_order(void **state)
{
    (void)state;
    model_t m = {
        .with = 40, .without = 46, .jitter = 0.05, .inflight = 8, .swap = true, .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 13%, out of order");
    m.with = 56;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 22%, out of order");
}

static void test_failures(void **state)
{
    (void)state;
    /* one failed batch in the trial: it starts over and decides */
    model_t m = {.with = 60, .without = 46, .jitter = 0.02, .inflight = 4, .fail_id = 10};
    outcome_t o = run_model(&m, 1);
    assert_int_equal(o.state, FERRY__GUARD_KEEP);
    assert_true(o.decided_at > 10 + 4 * 8);
    /* failures in every trial: benched after FERRY__GUARD_MAX_TRIALS */
    m.fail_id = -1;
    m.fail_all = 1;
    o = run_model(&m, 1);
    assert_int_equal(o.state, FERRY__GUARD_BENCH);
    assert_non_null(strstr(o.note, "cut short by failed batches"));
}

/* The API's edges: segments bounded, IDLE and decided states. */
static void test_edges(void **state)
{
    (void)state;
    ferry__cpu_guard_t g;
    memset(&g, 0, sizeof(g));
    assert_true(ferry__guard_cpu_ok(&g, 0));
    assert_false(ferry__guard_done(&g, 0, 1, 1, true)); /* no trial: nothing */
    ferry__guard_start(&g, 100, 0);
    assert_int_equal(g.len, FERRY__GUARD_MIN_LEN);
    ferry__guard_start(&g, 100, 1000);
    assert_int_equal(g.len, FERRY__GUARD_MAX_LEN);
    assert_true(ferry__guard_cpu_ok(&g, 100));                        /* segment 0: with */
    assert_false(ferry__guard_cpu_ok(&g, 100 + g.len));               /* 1: without */
    assert_false(ferry__guard_cpu_ok(&g, 100 + 2 * g.len));           /* 2: without */
    assert_true(ferry__guard_cpu_ok(&g, 100 + 3 * g.len));            /* 3: with */
    assert_false(ferry__guard_cpu_ok(&g, 100 + 4 * g.len));           /* after, undecided */
    assert_false(ferry__guard_done(&g, 100 + 4 * g.len, 1, 1, true)); /* past it: ignored */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hurting_cpu_benched),
        cmocka_unit_test(test_helping_cpu_kept),
        cmocka_unit_test(test_tie_benched),
        cmocka_unit_test(test_drift_cancels),
        cmocka_unit_test(test_out_of_order),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
