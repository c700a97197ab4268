/* Host scheduling costs: Chase-Lev push+pop on the owner, steals with one thief and with
 * contending thieves, worker-pool submit->run per task (from outside, from a worker, and the
 * round trip of one task with the workers awake and asleep), and bounded-queue push+pop.
 * Each case is the median of RUNS runs, reported in ns per operation. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"
#include "sched/sched.h"

#define RUNS  7
#define BENCH "deque"
/* "submit+run well under 1 us": the pool cases are held to this. */
#define POOL_TARGET_NS 1000.0

static void report(const char *name, double *v, size_t n, double target)
{
    bench_report(BENCH, name, bench_median(v, n), "ns/op", target);
}

/* ---- deque: owner push+pop ------------------------------------------------------------------ */

static double deque_owner_run(void)
{
    enum { BATCH = 1024, ROUNDS = 2000 };
    ferry_deque_t *d = NULL;
    if (ferry__deque_create(BATCH, &d) != 0)
        return -1;
    uintptr_t sink = 0;
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < ROUNDS; r++) {
        for (uintptr_t i = 1; i <= BATCH; i++)
            ferry__deque_push(d, (void *)i);
        for (int i = 0; i < BATCH; i++)
            sink += (uintptr_t)ferry__deque_pop(d);
    }
    uint64_t t1 = bench_now_ns();
    ferry__deque_destroy(d);
    if (sink != (uintptr_t)ROUNDS * BATCH * (BATCH + 1) / 2)
        fprintf(stderr, "bench_deque: owner checksum mismatch\n");
    return (double)(t1 - t0) / ((double)ROUNDS * BATCH);
}

/* ---- deque: steals ----------------------------------------------------------------------- */

#define STEAL_ITEMS 1000000u

struct steal_ctx {
    ferry_deque_t *d;
    atomic_bool go;
    atomic_size_t taken;
};

static void *thief(void *p)
{
    struct steal_ctx *c = p;
    while (!atomic_load_explicit(&c->go, memory_order_acquire))
        sched_yield();
    size_t mine = 0;
    for (;;) {
        if (ferry__deque_steal(c->d) != NULL) {
            mine++;
        } else if (ferry__deque_is_empty(c->d)) {
            break;
        }
    }
    atomic_fetch_add(&c->taken, mine);
    return NULL;
}

/* ns per stolen item, @thieves stealing a prefilled deque dry at once. */
static double steal_run(int thieves)
{
    struct steal_ctx c;
    atomic_init(&c.go, false);
    atomic_init(&c.taken, 0);
    if (ferry__deque_create(STEAL_ITEMS, &c.d) != 0)
        return -1;
    for (uintptr_t i = 1; i <= STEAL_ITEMS; i++)
        ferry__deque_push(c.d, (void *)i);
    pthread_t th[8];
    for (int i = 0; i < thieves; i++)
        pthread_create(&th[i], NULL, thief, &c);
    usleep(2000);
    uint64_t t0 = bench_now_ns();
    atomic_store_explicit(&c.go, true, memory_order_release);
    for (int i = 0; i < thieves; i++)
        pthread_join(th[i], NULL);
    uint64_t t1 = bench_now_ns();
    if (atomic_load(&c.taken) != STEAL_ITEMS)
        fprintf(stderr, "bench_deque: stole %zu of %u\n", atomic_load(&c.taken), STEAL_ITEMS);
    ferry__deque_destroy(c.d);
    return (double)(t1 - t0) / STEAL_ITEMS;
}

/* ---- pool ---------------------------------------------------------------------------------- */

#define POOL_TASKS 200000u

static atomic_size_t pool_ran;

static void count_task(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&pool_ran, 1, memory_order_relaxed);
}

static double pool_external_run(ferry_workers_t *w)
{
    atomic_store(&pool_ran, 0);
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < POOL_TASKS; i++)
        ferry__workers_submit(w, count_task, NULL);
    while (atomic_load_explicit(&pool_ran, memory_order_relaxed) < POOL_TASKS)
        sched_yield();
    return (double)(bench_now_ns() - t0) / POOL_TASKS;
}

struct fanout {
    ferry_workers_t *w;
    uint64_t ns;
};

static void fanout_root(void *arg)
{
    struct fanout *f = arg;
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < POOL_TASKS; i++)
        ferry__taskgroup_run(f->w, &g, count_task, NULL);
    ferry__taskgroup_wait(f->w, &g);
    f->ns = bench_now_ns() - t0;
    ferry__taskgroup_fini(&g);
}

static double pool_worker_run(ferry_workers_t *w)
{
    struct fanout f = {.w = w};
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    ferry__taskgroup_run(w, &g, fanout_root, &f);
    ferry__taskgroup_wait(w, &g);
    ferry__taskgroup_fini(&g);
    return (double)f.ns / POOL_TASKS;
}

static atomic_uint_fast64_t flag;

static void flag_task(void *arg)
{
    (void)arg;
    atomic_store_explicit(&flag, 1, memory_order_release);
}

/* Median submit -> ran -> seen round trip of one task; @idle_us sleeps between samples so
 * that the workers have gone to sleep (the futex wake is then part of the cost). */
static double pool_roundtrip(ferry_workers_t *w, int samples, unsigned idle_us)
{
    double *v = malloc((size_t)samples * sizeof(*v));
    if (v == NULL)
        return -1;
    for (int i = 0; i < samples; i++) {
        if (idle_us > 0)
            usleep(idle_us);
        atomic_store(&flag, 0);
        uint64_t t0 = bench_now_ns();
        ferry__workers_submit(w, flag_task, NULL);
        while (atomic_load_explicit(&flag, memory_order_acquire) == 0)
            ;
        v[i] = (double)(bench_now_ns() - t0);
    }
    double m = bench_median(v, (size_t)samples);
    free(v);
    return m;
}

/* ---- bqueue -------------------------------------------------------------------------------- */

#define BQ_ITEMS 1000000u

static double bqueue_single_run(void)
{
    enum { CAP = 64 };
    ferry_bqueue_t *q = NULL;
    if (ferry__bqueue_create(CAP, sizeof(uint64_t), &q) != 0)
        return -1;
    uint64_t sink = 0, x;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < BQ_ITEMS; i += CAP) {
        for (uint64_t k = 0; k < CAP; k++)
            ferry__bqueue_push(q, &i, false, NULL);
        for (uint64_t k = 0; k < CAP; k++) {
            ferry__bqueue_pop(q, &x, false);
            sink += x;
        }
    }
    uint64_t t1 = bench_now_ns();
    ferry__bqueue_destroy(q);
    (void)sink;
    return (double)(t1 - t0) / BQ_ITEMS;
}

static void *bq_consumer(void *p)
{
    ferry_bqueue_t *q = p;
    uint64_t x;
    while (ferry__bqueue_pop(q, &x, true) == 0)
        ;
    return NULL;
}

static double bqueue_1p1c_run(void)
{
    ferry_bqueue_t *q = NULL;
    if (ferry__bqueue_create(64, sizeof(uint64_t), &q) != 0)
        return -1;
    pthread_t th;
    pthread_create(&th, NULL, bq_consumer, q);
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < BQ_ITEMS; i++)
        ferry__bqueue_push(q, &i, true, NULL);
    ferry__bqueue_close(q);
    pthread_join(th, NULL);
    uint64_t t1 = bench_now_ns();
    ferry__bqueue_destroy(q);
    return (double)(t1 - t0) / BQ_ITEMS;
}

int main(void)
{
    double v[RUNS];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* Like the `workers` option's default: online CPUs, at most 8; BENCH_WORKERS overrides. */
    unsigned nworkers = ncpu < 2 ? 1u : ncpu > 8 ? 8u : (unsigned)ncpu;
    const char *env = getenv("BENCH_WORKERS");
    if (env != NULL && atoi(env) >= 1 && atoi(env) <= 256)
        nworkers = (unsigned)atoi(env);
    printf("# bench_deque: %ld online CPUs, pool of %u workers, median of %d runs\n", ncpu,
           nworkers, RUNS);

    for (int r = 0; r < RUNS; r++)
        v[r] = deque_owner_run();
    report("deque_push_pop_owner", v, RUNS, 0);
    for (int r = 0; r < RUNS; r++)
        v[r] = steal_run(1);
    report("deque_steal_1thief", v, RUNS, 0);
    for (int r = 0; r < RUNS; r++)
        v[r] = steal_run(2);
    report("deque_steal_2thieves", v, RUNS, 0);
    for (int r = 0; r < RUNS; r++)
        v[r] = steal_run(4);
    report("deque_steal_4thieves", v, RUNS, 0);

    ferry_workers_t *w = NULL;
    if (ferry__workers_create(nworkers, "bench", &w) != 0) {
        fprintf(stderr, "bench_deque: cannot create the pool\n");
        return 1;
    }
    for (int r = 0; r < RUNS; r++)
        v[r] = pool_external_run(w);
    report("pool_submit_run_external", v, RUNS, POOL_TARGET_NS);
    for (int r = 0; r < RUNS; r++)
        v[r] = pool_worker_run(w);
    report("pool_submit_run_from_worker", v, RUNS, POOL_TARGET_NS);
    for (int r = 0; r < RUNS; r++)
        v[r] = pool_roundtrip(w, 2000, 0);
    report("pool_roundtrip_awake", v, RUNS, 0);
    for (int r = 0; r < RUNS; r++)
        v[r] = pool_roundtrip(w, 50, 2000);
    report("pool_roundtrip_asleep", v, RUNS, 0);
    ferry__workers_destroy(w);

    for (int r = 0; r < RUNS; r++)
        v[r] = bqueue_single_run();
    report("bqueue_push_pop_1thread", v, RUNS, 0);
    for (int r = 0; r < RUNS; r++)
        v[r] = bqueue_1p1c_run();
    report("bqueue_push_pop_1p1c", v, RUNS, 0);
    return 0;
}
