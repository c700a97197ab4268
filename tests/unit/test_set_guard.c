/* The CPU device's guard (src/pipeline/set_guard.c) against a model of a set on real clocks: a
 * GPU and the CPU, each serving a queue of its own, with @inflight batches in flight, each
 * batch planned as the set plans it (its bytes shared so that both devices' backlogs, at the
 * rates the planner believes, finish together; the CPU only where the guard allows), the GPU
 * running slower while the CPU holds work (its threads draw the host memory the copies need),
 * with jitter per part and drift over the run. As on a real set, a segment's batches do not
 * finish in a span of their own: planned beside the GPU's backlog, the CPU takes a segment's
 * first batches whole and finishes them while the GPU still runs the segment before (measured
 * per segment, an H100 read that as 299 GB/s with the CPU against 29 without). The guard must
 * bench a CPU that makes the set slower, or no faster than its margin, and keep one that makes
 * it clearly faster, whatever the drift and whatever the planner believes of the CPU's rate; a
 * failed batch restarts the trial, and three failed trials bench it. */
#include <math.h>
#include <string.h>

#include "testlib.h"
#include "pipeline/set_guard.h"

#define MIB          ((uint64_t)1 << 20)
#define NB           400
#define MAX_INFLIGHT 64

typedef struct model {
    double gpu, gpu_busy; /* the GPU's GB/s while the CPU holds no work, and while it holds some */
    double cpu;           /* the CPU's GB/s */
    double cpu_believed;  /* the CPU's rate as the planner has it (0: cpu) */
    double drift;         /* the rates' growth over the run, a fraction (0.1: +10% at the end) */
    bool regime;          /* from the trial's second side with the CPU on, the GPU beside it */
    double gpu_busy_late; /* runs at this rate instead */
    double jitter;        /* each part's time +- this fraction */
    unsigned inflight;
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

typedef struct part {
    unsigned id;
    uint64_t bytes;
    double work; /* bytes left, scaled by the part's jitter */
    double submit;
} part_t;

typedef struct queue {
    part_t q[2 * MAX_INFLIGHT];
    unsigned head, n;
    uint64_t held; /* bytes of its parts not completed */
    double last_done;
} queue_t;

typedef struct sim {
    const model_t *m;
    ferry__cpu_guard_t g;
    outcome_t o;
    queue_t dev[2]; /* 0: the GPU, 1: the CPU */
    unsigned left[NB + 1], planned, completed;
    bool cpu_part[NB + 1];
    double t; /* ns */
    uint64_t rng;
} sim_t;

static void push(sim_t *s, unsigned d, unsigned id, uint64_t bytes)
{
    queue_t *q = &s->dev[d];
    double j = 1 + s->m->jitter * ((double)test_rand_range(&s->rng, 0, 2000) / 1000.0 - 1);
    q->q[(q->head + q->n) % (2 * MAX_INFLIGHT)] = (part_t){id, bytes, (double)bytes * j, s->t};
    q->n++;
    if (d == 1 && q->held == 0) /* the set tells the guard of every change (ferry__pset_hold) */
        ferry__guard_cpu(&s->g, true, (uint64_t)s->t);
    q->held += bytes;
    s->left[id]++;
}

/* Plan the next batch: the set's water filling over the devices the guard allows. */
static void plan(sim_t *s)
{
    unsigned id = s->planned++;
    uint64_t bytes = 64 * MIB;
    if (s->g.state == FERRY__GUARD_IDLE && id >= 3) /* calibrated from batch 3 on */
        ferry__guard_start(&s->g, id, s->m->inflight, (uint64_t)s->t, s->dev[1].held > 0);
    else
        ferry__guard_plan(&s->g, id, (uint64_t)s->t);
    bool cpu = id >= 3 && ferry__guard_cpu_ok(&s->g);
    if (s->o.decided_at >= 0 && cpu)
        s->o.cpu_batches_after++;
    s->cpu_part[id] = false;
    if (!cpu) {
        push(s, 0, id, bytes);
        return;
    }
    double rg = s->m->gpu, rc = s->m->cpu_believed > 0 ? s->m->cpu_believed : s->m->cpu;
    double tg = (double)s->dev[0].held / rg, tc = (double)s->dev[1].held / rc;
    double T = ((double)bytes + tg * rg + tc * rc) / (rg + rc);
    double cshare = tc >= T ? 0 : tg >= T ? (double)bytes : (T - tc) * rc;
    uint64_t c = (uint64_t)cshare / (8 * MIB) * (8 * MIB); /* whole chunks */
    if (c < bytes)
        push(s, 0, id, bytes - c);
    if (c > 0) {
        push(s, 1, id, c);
        s->cpu_part[id] = true;
    }
}

/* Batch @id completed: tell the guard (the set does so on its completion thread). */
static void batch_done(sim_t *s, unsigned id)
{
    const model_t *m = s->m;
    bool ok = (int)id != m->fail_id &&
              !(m->fail_all && s->g.state == FERRY__GUARD_TRIAL && s->g.phase >= 1);
    if (ferry__guard_done(&s->g, ok))
        s->o.decided_at = (int)id;
    s->completed++;
    if (s->planned < NB)
        plan(s);
}

static outcome_t run_model(const model_t *m, uint64_t seed)
{
    static sim_t s;
    memset(&s, 0, sizeof(s));
    s.m = m;
    s.rng = seed;
    s.o.decided_at = -1;
    for (unsigned i = 0; i < m->inflight && i < NB; i++)
        plan(&s);
    while (s.completed < s.planned) {
        bool busy = s.dev[1].held > 0;
        double f = 1 + m->drift * (double)s.completed / NB;
        bool late = m->regime && (s.g.state != FERRY__GUARD_TRIAL || s.g.phase >= 2);
        double gb = late && s.completed > 3 ? m->gpu_busy_late : m->gpu_busy;
        double rate[2] = {(busy ? gb : m->gpu) * f, m->cpu * f}; /* bytes per ns */
        int next = -1;
        double dt = 0;
        for (int d = 0; d < 2; d++) {
            if (s.dev[d].n == 0)
                continue;
            double need = s.dev[d].q[s.dev[d].head].work / rate[d];
            if (next < 0 || need < dt) {
                next = d;
                dt = need;
            }
        }
        s.t += dt;
        for (int d = 0; d < 2; d++)
            if (s.dev[d].n > 0)
                s.dev[d].q[s.dev[d].head].work -= dt * rate[d];
        queue_t *q = &s.dev[next];
        part_t p = q->q[q->head];
        q->head = (q->head + 1) % (2 * MAX_INFLIGHT);
        q->n--;
        q->held -= p.bytes;
        if (next == 1 && q->held == 0)
            ferry__guard_cpu(&s.g, false, (uint64_t)s.t);
        double from = p.submit > q->last_done ? p.submit : q->last_done;
        ferry__guard_part(&s.g, p.bytes, (uint64_t)from, (uint64_t)s.t);
        q->last_done = s.t;
        if (--s.left[p.id] == 0)
            batch_done(&s, p.id);
    }
    s.o.state = s.g.state;
    s.o.with = s.g.gbps_with;
    s.o.without = s.g.gbps_without;
    memcpy(s.o.note, s.g.note, sizeof(s.o.note));
    return s.o;
}

/* Over 20 seeds, every outcome is @want, and the CPU took work during the trial. */
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
        /* the figures are the set's rates each way, within the jitter's reach */
        double with = m->gpu_busy + m->cpu, without = m->gpu;
        if (m->drift != 0 || m->regime)
            continue;
        if (fabs(o.with / with - 1) > 0.05 || fabs(o.without / without - 1) > 0.05)
            fail_msg("%s, seed %llu: measured %.2f with, %.2f without; the model's %.2f, %.2f",
                     what, (unsigned long long)seed, o.with, o.without, with, without);
    }
}

/* The H100's case: the GPU at 25 GB/s beside a CPU of 15 where it made 46 alone. */
static void test_hurting_cpu_benched(void **state)
{
    (void)state;
    model_t m = {
        .gpu = 46, .gpu_busy = 25, .cpu = 15, .jitter = 0.05, .inflight = 8, .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 13%");
    outcome_t o = run_model(&m, 5); /* benched after the first two segments */
    assert_non_null(strstr(o.note, "benched after half its trial: the set ran at"));
    assert_true(o.decided_at < (int)(3 + 3 * 16 + 8));
    m.gpu_busy = 29.6; /* 3% */
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 3%");
    m.inflight = 16; /* segments of 32 */
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 3%, 16 in flight");
    m.cpu_believed =
        1.5 * m.cpu; /* the planner overrates it (as an H100 host did: 22.6 for 15.4) */
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 3%, overrated");
    o = run_model(&m, 5);
    assert_true(o.with < o.without);
    assert_non_null(strstr(o.note, "benched: the set ran at"));
}

static void test_helping_cpu_kept(void **state)
{
    (void)state;
    model_t m = {
        .gpu = 46, .gpu_busy = 44, .cpu = 16, .jitter = 0.05, .inflight = 8, .fail_id = -1};
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 30%");
    m.gpu_busy = 40.6;
    m.cpu = 10; /* +10% */
    m.inflight = 16;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 10%, 16 in flight");
    m.cpu_believed = 0.5 * m.cpu;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 10%, underrated");
    m.cpu_believed = 1.5 * m.cpu;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 10%, overrated");
    outcome_t o = run_model(&m, 3);
    assert_true(o.with > o.without * (1 + FERRY__GUARD_MARGIN));
    assert_non_null(strstr(o.note, "kept: the set ran at"));
}

/* No faster than the margin: benched (it brings only risk). */
static void test_tie_benched(void **state)
{
    (void)state;
    model_t m = {
        .gpu = 46, .gpu_busy = 36, .cpu = 10, .jitter = 0.02, .inflight = 8, .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "the CPU changes nothing");
}

/* A rate that doubles over the run (the host warming, another job ending) favours neither side:
 * the segments are planned with, without, without, with. */
static void test_drift_cancels(void **state)
{
    (void)state;
    model_t m = {.gpu = 46,
                 .gpu_busy = 36,
                 .cpu = 10,
                 .drift = 1.0,
                 .jitter = 0.02,
                 .inflight = 4,
                 .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "equal rates, rising");
    m.drift = -0.5;
    expect(&m, FERRY__GUARD_BENCH, "equal rates, falling");
    m.cpu = 10 + 46 * 0.12;
    expect(&m, FERRY__GUARD_KEEP, "the CPU adds 12%, falling");
    m.drift = 1.0;
    m.cpu = 10 - 46 * 0.05;
    expect(&m, FERRY__GUARD_BENCH, "the CPU costs 5%, rising");
}

/* The GPU beside the CPU at 43 GB/s in the first side with it, at 19 in the second (as an H100
 * host ran): the two sides with it are not averaged into a gain. */
static void test_regime_change(void **state)
{
    (void)state;
    model_t m = {.gpu = 46,
                 .gpu_busy = 43,
                 .cpu = 18,
                 .regime = 60,
                 .gpu_busy_late = 19,
                 .jitter = 0.03,
                 .inflight = 16,
                 .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "the CPU helps, then costs");
    outcome_t o = run_model(&m, 1);
    assert_non_null(strstr(o.note, " then "));
}

static void test_failures(void **state)
{
    (void)state;
    /* one failed batch in the trial: it starts over and decides */
    model_t m = {
        .gpu = 46, .gpu_busy = 44, .cpu = 16, .jitter = 0.02, .inflight = 4, .fail_id = 10};
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

/* A CPU so slow that the planner gives it nothing: the set runs alike either way, and the CPU
 * is benched. */
static void test_cpu_never_busy(void **state)
{
    (void)state;
    model_t m = {.gpu = 46,
                 .gpu_busy = 46,
                 .cpu = 0.01,
                 .cpu_believed = 0.01,
                 .jitter = 0.02,
                 .inflight = 4,
                 .fail_id = -1};
    expect(&m, FERRY__GUARD_BENCH, "a CPU that takes nothing");
}

/* The API's edges: the first phase bounded, the phases timed, IDLE and decided states, the
 * sides of intervals, trials that measure too little. */
static void test_edges(void **state)
{
    (void)state;
    ferry__cpu_guard_t g;
    memset(&g, 0, sizeof(g));
    assert_true(ferry__guard_cpu_ok(&g));
    assert_false(ferry__guard_done(&g, true)); /* no trial: nothing */
    ferry__guard_part(&g, 1, 0, 1);
    assert_int_equal(g.parts[1], 0);
    ferry__guard_start(&g, 100, 0, 0, false);
    assert_int_equal(g.len, FERRY__GUARD_MIN_LEN);
    ferry__guard_start(&g, 100, 1000, 1000, false);
    assert_int_equal(g.len, FERRY__GUARD_MAX_LEN);

    /* the phases: with for 6 batches; without until the CPU is done (at 1300: 300 ns with it)
     * and 600 ns have passed without it; with for 300 ns more; without */
    memset(&g, 0, sizeof(g));
    ferry__guard_start(&g, 100, 3, 1000, false);
    assert_int_equal(g.len, 6);
    assert_true(g.busy && ferry__guard_cpu_ok(&g));
    ferry__guard_cpu(&g, true, 1020);
    for (uint64_t id = 101; id < 106; id++)
        ferry__guard_plan(&g, id, 1000 + id - 100);
    assert_true(ferry__guard_cpu_ok(&g));
    ferry__guard_plan(&g, 106, 1100);
    assert_false(ferry__guard_cpu_ok(&g)); /* phase 1 */
    assert_true(g.busy);                   /* the CPU still holds work */
    ferry__guard_cpu(&g, false, 1300);
    assert_false(g.busy);
    ferry__guard_plan(&g, 107, 1500);
    assert_false(ferry__guard_cpu_ok(&g));
    ferry__guard_plan(&g, 108, 1900);
    assert_true(ferry__guard_cpu_ok(&g)); /* phase 2 */
    assert_true(g.busy);
    ferry__guard_plan(&g, 109, 2000);
    assert_true(ferry__guard_cpu_ok(&g));
    ferry__guard_plan(&g, 110, 2200);
    assert_false(ferry__guard_cpu_ok(&g)); /* phase 3 */
    assert_false(g.busy);
    assert_int_equal(g.ns[1], 600);
    assert_int_equal(g.ns[0], 600);
    for (uint64_t t = 1000; t < 1300; t += 75) /* 50 GB/s with it, 40 without */
        ferry__guard_part(&g, 75 * 50, t, t + 75);
    for (uint64_t t = 1300; t < 1900; t += 150)
        ferry__guard_part(&g, 150 * 40, t, t + 150);
    for (uint64_t t = 1900; t < 2200; t += 75)
        ferry__guard_part(&g, 75 * 50, t, t + 75);
    assert_true(ferry__guard_done(&g, true));
    assert_int_equal(g.state, FERRY__GUARD_KEEP);
    assert_non_null(strstr(g.note,
                           "kept: the set ran at 50.00 then 50.00 GB/s with it, 40.00 without (8 "
                           "batches planned with it, 3 without)"));
    assert_true(ferry__guard_cpu_ok(&g));

    /* the sides of intervals: idle from 1000 (the second phase), busy from 1100 to 1300 */
    memset(&g, 0, sizeof(g));
    ferry__guard_start(&g, 100, 3, 1000, false);
    ferry__guard_plan(&g, 106, 1000);
    assert_false(g.busy);
    ferry__guard_cpu(&g, true, 1100);
    ferry__guard_cpu(&g, true, 1150); /* no turn */
    ferry__guard_cpu(&g, false, 1300);
    ferry__guard_part(&g, 100, 1000, 1100); /* idle throughout */
    ferry__guard_part(&g, 200, 1000, 1200); /* half and half */
    ferry__guard_part(&g, 300, 1250, 1400); /* a third busy */
    ferry__guard_part(&g, 50, 900, 1000);   /* ended at the start: not counted */
    ferry__guard_part(&g, 40, 950, 1050);   /* half before the start: half of it, idle */
    assert_int_equal(g.nturn, 3);
    assert_true(fabs(g.bytes[0] - (100 + 100 + 200 + 20)) < 1e-6);
    assert_true(fabs(g.bytes[2] - (100 + 100)) < 1e-6); /* the second period with it */
    assert_true(g.bytes[1] == 0);
    assert_int_equal(g.parts[0], 2);
    assert_int_equal(g.parts[1] + g.parts[2], 0);
    assert_int_equal(g.last_ns, 1400);

    /* trials that end with too few parts measured: each starts over, and after
     * FERRY__GUARD_MAX_TRIALS the CPU is benched, saying why */
    memset(&g, 0, sizeof(g));
    for (unsigned t = 0; t < FERRY__GUARD_MAX_TRIALS; t++) {
        ferry__guard_start(&g, 0, 0, 10, false);
        assert_int_equal(g.state, FERRY__GUARD_TRIAL);
        ferry__guard_plan(&g, 4, 20); /* without: idle from 20, 10 ns with it */
        ferry__guard_plan(&g, 5, 50); /* with, from 50 */
        ferry__guard_plan(&g, 6, 80); /* without, from 80 */
        assert_int_equal(g.phase, 3);
        assert_false(ferry__guard_done(&g, true));
        assert_int_equal(g.state, FERRY__GUARD_IDLE);
    }
    ferry__guard_start(&g, 0, 0, 10, false);
    assert_int_equal(g.state, FERRY__GUARD_BENCH);
    assert_non_null(strstr(g.note, "measured too few parts without it"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hurting_cpu_benched), cmocka_unit_test(test_helping_cpu_kept),
        cmocka_unit_test(test_tie_benched),         cmocka_unit_test(test_drift_cancels),
        cmocka_unit_test(test_regime_change),       cmocka_unit_test(test_failures),
        cmocka_unit_test(test_cpu_never_busy),      cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
