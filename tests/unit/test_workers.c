/* The worker pool: argument checks, 100,000 tasks from four submitter threads run exactly once,
 * tasks that submit tasks, task groups waited on from outside and from inside a worker (one
 * thread: only helping avoids a deadlock), destroy running what is pending, and parallel_memcpy
 * bit-exact over odd sizes and unaligned offsets. */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MANY_TASKS 100000u
#define SUBMITTERS 4

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Poll @c until it reaches @target or 60 s pass (a hang fails instead of blocking CTest). */
static bool wait_count(atomic_size_t *c, size_t target)
{
    uint64_t end = now_ns() + 60000000000ull;
    while (atomic_load(c) < target) {
        if (now_ns() > end)
            return false;
        usleep(200);
    }
    return true;
}

static void no_op(void *arg)
{
    (void)arg;
}

static void test_arguments(void **state)
{
    (void)state;
    ferry_workers_t *w = NULL;
    assert_int_equal(ferry__workers_create(0, "t", &w), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "1..256"));
    assert_int_equal(ferry__workers_create(257, "t", &w), FERRY_EINVAL);
    assert_int_equal(ferry__workers_create(2, "t", NULL), FERRY_EINVAL);
    assert_null(w);
    assert_int_equal(ferry__workers_submit(NULL, no_op, NULL), FERRY_EINVAL);
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    assert_int_equal(ferry__taskgroup_run(NULL, &g, no_op, NULL), FERRY_EINVAL);
    assert_int_equal(atomic_load(&g.pending), 0);
    ferry__taskgroup_wait(NULL, &g); /* nothing pending: returns */
    ferry__taskgroup_fini(&g);
    assert_int_equal(ferry__workers_count(NULL), 0);
    assert_false(ferry__workers_on_worker_thread(NULL));
    ferry__workers_destroy(NULL);

    assert_int_equal(ferry__workers_create(1, NULL, &w), 0);
    assert_int_equal(ferry__workers_count(w), 1);
    assert_int_equal(ferry__workers_submit(w, NULL, NULL), FERRY_EINVAL);
    assert_false(ferry__workers_on_worker_thread(w));
    ferry__workers_destroy(w);
}

/* ---- names and the 256-thread bound ------------------------------------------------------- */

struct name_probe {
    ferry_workers_t *w;
    atomic_size_t done;
    atomic_int not_on_worker;
    pthread_mutex_t lock;
    char names[8][16];
    int nnames;
};

static void record_name(void *arg)
{
    struct name_probe *p = arg;
    if (!ferry__workers_on_worker_thread(p->w))
        atomic_fetch_add(&p->not_on_worker, 1);
    char buf[16] = "";
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    pthread_mutex_lock(&p->lock);
    if (p->nnames < 8)
        memcpy(p->names[p->nnames++], buf, sizeof(buf));
    pthread_mutex_unlock(&p->lock);
    atomic_fetch_add(&p->done, 1);
}

static void test_names_and_bounds(void **state)
{
    (void)state;
    struct name_probe p;
    memset(&p, 0, sizeof(p));
    pthread_mutex_init(&p.lock, NULL);
    assert_int_equal(ferry__workers_create(3, "averyverylongpoolname", &p.w), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(ferry__workers_submit(p.w, record_name, &p), 0);
    assert_true(wait_count(&p.done, 8));
    ferry__workers_destroy(p.w);
    assert_int_equal(atomic_load(&p.not_on_worker), 0);
    for (int i = 0; i < p.nnames; i++) {
        /* Truncated name, index kept: "averyverylongpo" would lose which worker it is. */
        printf("# thread name %s\n", p.names[i]);
        assert_int_equal(strlen(p.names[i]), 15);
        assert_memory_equal(p.names[i], "averyverylong-", 14);
        assert_in_range(p.names[i][14], '0', '2');
    }

    /* The upper bound itself is accepted and every thread can run a task. */
    memset(&p, 0, sizeof(p));
    pthread_mutex_init(&p.lock, NULL);
    assert_int_equal(ferry__workers_create(256, "big", &p.w), 0);
    assert_int_equal(ferry__workers_count(p.w), 256);
    for (int i = 0; i < 512; i++)
        assert_int_equal(ferry__workers_submit(p.w, record_name, &p), 0);
    ferry__workers_destroy(p.w); /* runs all 512 before joining */
    assert_int_equal(atomic_load(&p.done), 512);
    assert_int_equal(atomic_load(&p.not_on_worker), 0);
    pthread_mutex_destroy(&p.lock);
}

/* ---- many tasks from four submitters ------------------------------------------------------ */

static struct many {
    ferry_workers_t *w;
    atomic_uchar ran[MANY_TASKS];
    atomic_size_t total;
    atomic_size_t off_worker;
    int submit_rc[SUBMITTERS];
} many;

static void many_task(void *arg)
{
    uintptr_t i = (uintptr_t)arg;
    if (!ferry__workers_on_worker_thread(many.w))
        atomic_fetch_add(&many.off_worker, 1);
    atomic_fetch_add_explicit(&many.ran[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&many.total, 1, memory_order_relaxed);
}

static void *many_submitter(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (uintptr_t i = (uintptr_t)id; i < MANY_TASKS; i += SUBMITTERS) {
        int rc = ferry__workers_submit(many.w, many_task, (void *)i);
        if (rc != 0) {
            many.submit_rc[id] = rc;
            break;
        }
    }
    return NULL;
}

static void test_many_tasks_four_submitters(void **state)
{
    (void)state;
    memset(&many, 0, sizeof(many));
    assert_int_equal(ferry__workers_create(3, "many", &many.w), 0);
    pthread_t th[SUBMITTERS];
    uint64_t t0 = now_ns();
    for (intptr_t i = 0; i < SUBMITTERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, many_submitter, (void *)i), 0);
    for (int i = 0; i < SUBMITTERS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < SUBMITTERS; i++)
        assert_int_equal(many.submit_rc[i], 0);
    assert_true(wait_count(&many.total, MANY_TASKS));
    printf("# %u tasks in %.1f ms\n", MANY_TASKS, (double)(now_ns() - t0) / 1e6);
    ferry__workers_destroy(many.w);
    size_t lost = 0, dup = 0;
    for (size_t i = 0; i < MANY_TASKS; i++) {
        unsigned char n = atomic_load(&many.ran[i]);
        lost += n == 0;
        dup += n > 1;
    }
    assert_int_equal(lost, 0);
    assert_int_equal(dup, 0);
    assert_int_equal(atomic_load(&many.total), MANY_TASKS);
    assert_int_equal(atomic_load(&many.off_worker), 0);
}

/* ---- nested submits ------------------------------------------------------------------------ */

#define TREE_FANOUT 4
#define TREE_DEPTH  7 /* 21845 tasks */

static struct tree {
    ferry_workers_t *w;
    atomic_size_t ran;
    atomic_size_t leaves;
    atomic_int errors;
} tree;

static void tree_task(void *arg)
{
    uintptr_t depth = (uintptr_t)arg;
    if (!ferry__workers_on_worker_thread(tree.w))
        atomic_fetch_add(&tree.errors, 1);
    if (depth < TREE_DEPTH) {
        for (int i = 0; i < TREE_FANOUT; i++)
            if (ferry__workers_submit(tree.w, tree_task, (void *)(depth + 1)) != 0)
                atomic_fetch_add(&tree.errors, 1);
    } else {
        atomic_fetch_add(&tree.leaves, 1);
    }
    atomic_fetch_add(&tree.ran, 1);
}

static void test_nested_submits(void **state)
{
    (void)state;
    size_t expect = 0, level = 1;
    for (int d = 0; d <= TREE_DEPTH; d++, level *= TREE_FANOUT)
        expect += level;
    unsigned threads[] = {1, 2, 4};
    for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
        memset(&tree, 0, sizeof(tree));
        assert_int_equal(ferry__workers_create(threads[k], "tree", &tree.w), 0);
        assert_int_equal(ferry__workers_submit(tree.w, tree_task, (void *)(uintptr_t)0), 0);
        assert_true(wait_count(&tree.ran, expect));
        ferry__workers_destroy(tree.w);
        assert_int_equal(atomic_load(&tree.ran), expect);
        assert_int_equal(atomic_load(&tree.leaves), level / TREE_FANOUT);
        assert_int_equal(atomic_load(&tree.errors), 0);
    }
}

/* ---- task groups --------------------------------------------------------------------------- */

#define GROUP_TASKS 10000

struct slot_arg {
    unsigned *slots; /* plain memory: the wait must order these writes before our reads */
    unsigned index;
    unsigned value;
};

static void slot_task(void *arg)
{
    struct slot_arg *a = arg;
    a->slots[a->index] = a->value;
}

static void test_taskgroup_wait_outside(void **state)
{
    (void)state;
    ferry_workers_t *w = NULL;
    assert_int_equal(ferry__workers_create(3, "grp", &w), 0);
    unsigned *slots = calloc(GROUP_TASKS, sizeof(*slots));
    struct slot_arg *args = calloc(GROUP_TASKS, sizeof(*args));
    assert_non_null(slots);
    assert_non_null(args);
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    /* Twice on the same group: it is reusable once waited on. */
    for (unsigned round = 1; round <= 2; round++) {
        for (unsigned i = 0; i < GROUP_TASKS; i++) {
            args[i] = (struct slot_arg){.slots = slots, .index = i, .value = i * 3 + round};
            assert_int_equal(ferry__taskgroup_run(w, &g, slot_task, &args[i]), 0);
        }
        ferry__taskgroup_wait(w, &g);
        assert_int_equal(atomic_load(&g.pending), 0);
        for (unsigned i = 0; i < GROUP_TASKS; i++)
            assert_int_equal(slots[i], i * 3 + round);
    }
    ferry__taskgroup_wait(w, &g); /* empty group: immediate */
    ferry__taskgroup_fini(&g);
    ferry__workers_destroy(w);
    free(args);
    free(slots);
}

/* A task that forks GROUP_TASKS children into its own group and joins them: on a one-thread
 * pool this only finishes because the waiting worker runs the children itself. */
struct inner {
    ferry_workers_t *w;
    unsigned *slots;
    struct slot_arg *args;
    unsigned mismatches;
    bool on_worker;
};

static void inner_fork_join(void *arg)
{
    struct inner *in = arg;
    in->on_worker = ferry__workers_on_worker_thread(in->w);
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    for (unsigned i = 0; i < GROUP_TASKS; i++) {
        in->args[i] = (struct slot_arg){.slots = in->slots, .index = i, .value = i + 7};
        if (ferry__taskgroup_run(in->w, &g, slot_task, &in->args[i]) != 0)
            in->mismatches++;
    }
    ferry__taskgroup_wait(in->w, &g);
    ferry__taskgroup_fini(&g);
    for (unsigned i = 0; i < GROUP_TASKS; i++)
        in->mismatches += in->slots[i] != i + 7;
}

/* Recursive fork-join: fib(n) with a group per level, nested as deep as n. */
struct fib {
    ferry_workers_t *w;
    unsigned n;
    uint64_t result;
};

static void fib_task(void *arg)
{
    struct fib *f = arg;
    if (f->n < 2) {
        f->result = f->n;
        return;
    }
    struct fib a = {.w = f->w, .n = f->n - 1}, b = {.w = f->w, .n = f->n - 2};
    ferry_taskgroup_t g;
    ferry__taskgroup_init(&g);
    if (ferry__taskgroup_run(f->w, &g, fib_task, &a) != 0)
        fib_task(&a);
    fib_task(&b);
    ferry__taskgroup_wait(f->w, &g);
    ferry__taskgroup_fini(&g);
    f->result = a.result + b.result;
}

static void test_taskgroup_wait_inside_worker(void **state)
{
    (void)state;
    unsigned threads[] = {1, 2, 4};
    for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
        ferry_workers_t *w = NULL;
        assert_int_equal(ferry__workers_create(threads[k], "inner", &w), 0);
        struct inner in = {.w = w};
        in.slots = calloc(GROUP_TASKS, sizeof(*in.slots));
        in.args = calloc(GROUP_TASKS, sizeof(*in.args));
        assert_non_null(in.slots);
        assert_non_null(in.args);
        struct fib f = {.w = w, .n = 18};
        /* An outside group to wait for the two roots. */
        ferry_taskgroup_t outer;
        ferry__taskgroup_init(&outer);
        assert_int_equal(ferry__taskgroup_run(w, &outer, inner_fork_join, &in), 0);
        assert_int_equal(ferry__taskgroup_run(w, &outer, fib_task, &f), 0);
        ferry__taskgroup_wait(w, &outer);
        ferry__taskgroup_fini(&outer);
        assert_true(in.on_worker);
        assert_int_equal(in.mismatches, 0);
        assert_int_equal(f.result, 2584);
        ferry__workers_destroy(w);
        free(in.slots);
        free(in.args);
    }
}

/* ---- destroy runs what is pending ---------------------------------------------------------- */

static struct pend {
    ferry_workers_t *w;
    atomic_bool gate;
    atomic_size_t ran;
    atomic_size_t children;
    atomic_int child_submit_errors;
} pend;

static void pend_child(void *arg)
{
    (void)arg;
    atomic_fetch_add(&pend.children, 1);
}

static void pend_task(void *arg)
{
    /* Hold every worker until the test opens the gate, so destroy has work left to run. */
    while (!atomic_load(&pend.gate))
        sched_yield();
    if ((uintptr_t)arg % 2 == 0 && ferry__workers_submit(pend.w, pend_child, NULL) != 0)
        atomic_fetch_add(&pend.child_submit_errors, 1);
    atomic_fetch_add(&pend.ran, 1);
}

static void *destroyer(void *arg)
{
    ferry__workers_destroy(arg);
    return NULL;
}

static void test_destroy_runs_pending(void **state)
{
    (void)state;
    memset(&pend, 0, sizeof(pend));
    assert_int_equal(ferry__workers_create(2, "pend", &pend.w), 0);
    uintptr_t submitted = 0;
    for (; submitted < 1000; submitted++)
        assert_int_equal(ferry__workers_submit(pend.w, pend_task, (void *)submitted), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, destroyer, pend.w), 0);
    /* Outside submits are accepted until destroy closes the pool, then refused. The pool
     * stays allocated meanwhile: its workers are parked at the gate with tasks pending. */
    int rc = 0;
    uint64_t end = now_ns() + 20000000000ull;
    while (now_ns() < end && submitted < 5000000) {
        rc = ferry__workers_submit(pend.w, pend_task, (void *)submitted);
        if (rc != 0)
            break;
        submitted++;
    }
    assert_int_equal(rc, FERRY_ECLOSED);
    atomic_store(&pend.gate, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    printf("# %zu tasks pending at destroy\n", (size_t)submitted);
    assert_int_equal(atomic_load(&pend.ran), submitted);
    assert_int_equal(atomic_load(&pend.children), (submitted + 1) / 2);
    assert_int_equal(atomic_load(&pend.child_submit_errors), 0);
}

/* ---- parallel memcpy ------------------------------------------------------------------------ */

#define MEMCPY_MAX ((size_t)9 << 20)
#define GUARD      64

struct copy_case {
    ferry_workers_t *w;
    unsigned char *dst, *src;
    size_t n, min_piece;
};

static void run_copy_case(void *arg)
{
    struct copy_case *c = arg;
    ferry__parallel_memcpy(c->w, c->dst, c->src, c->n, c->min_piece);
}

/* Copy @n bytes from src + soff to dst + doff and check them and the guard bytes around. */
static void check_copy(ferry_workers_t *w, bool from_worker, unsigned char *dbuf,
                       const unsigned char *sbuf, size_t n, size_t soff, size_t doff,
                       size_t min_piece)
{
    memset(dbuf, 0xa5, doff + n + GUARD);
    struct copy_case c = {.w = w,
                          .dst = dbuf + doff,
                          .src = (unsigned char *)sbuf + soff,
                          .n = n,
                          .min_piece = min_piece};
    if (from_worker) {
        ferry_taskgroup_t g;
        ferry__taskgroup_init(&g);
        assert_int_equal(ferry__taskgroup_run(w, &g, run_copy_case, &c), 0);
        ferry__taskgroup_wait(w, &g);
        ferry__taskgroup_fini(&g);
    } else {
        run_copy_case(&c);
    }
    if (memcmp(dbuf + doff, sbuf + soff, n) != 0) {
        size_t i = 0;
        while (dbuf[doff + i] == sbuf[soff + i])
            i++;
        fail_msg("n %zu soff %zu doff %zu min_piece %zu: first wrong byte at %zu", n, soff, doff,
                 min_piece, i);
    }
    for (size_t i = 0; i < doff; i++)
        assert_int_equal(dbuf[i], 0xa5);
    for (size_t i = 0; i < GUARD; i++)
        assert_int_equal(dbuf[doff + n + i], 0xa5);
}

static void test_parallel_memcpy(void **state)
{
    (void)state;
    uint64_t rng = test_seed(0x3e3c0b1);
    unsigned char *src = malloc(MEMCPY_MAX + GUARD);
    unsigned char *dst = malloc(MEMCPY_MAX + 2 * GUARD);
    assert_non_null(src);
    assert_non_null(dst);
    test_fill_random(src, MEMCPY_MAX + GUARD, &rng);

    ferry_workers_t *w3 = NULL, *w1 = NULL;
    assert_int_equal(ferry__workers_create(3, "cpy", &w3), 0);
    assert_int_equal(ferry__workers_create(1, "cpy1", &w1), 0);

    const size_t sizes[] = {0,
                            1,
                            2,
                            3,
                            7,
                            63,
                            64,
                            65,
                            4095,
                            4097,
                            65537,
                            (1 << 20) + 3,
                            3 << 20,
                            (5 << 20) - 1,
                            MEMCPY_MAX - 7,
                            MEMCPY_MAX};
    const size_t pieces[] = {0, 1, 7, 4096, 65536 + 3, 1 << 20};
    size_t cases = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
            size_t n = sizes[s];
            size_t soff = (size_t)test_rand_range(&rng, 0, 7);
            size_t doff = (size_t)test_rand_range(&rng, 0, 7);
            if (n + soff > MEMCPY_MAX + GUARD)
                soff = 0;
            check_copy(w3, false, dst, src, n, soff, doff, pieces[p]);
            cases++;
        }
    }
    /* Random sizes and offsets, from outside, from inside a worker, one-thread pool, no pool. */
    for (int i = 0; i < 24; i++) {
        size_t n = (size_t)test_rand_range(&rng, 1, MEMCPY_MAX - 8);
        size_t soff = (size_t)test_rand_range(&rng, 0, 8);
        size_t doff = (size_t)test_rand_range(&rng, 0, GUARD);
        size_t piece = (size_t)test_rand_range(&rng, 1, 1 << 20);
        ferry_workers_t *w = i % 4 == 3 ? NULL : i % 4 == 2 ? w1 : w3;
        check_copy(w, w != NULL && i % 2 == 1, dst, src, n, soff, doff, piece);
        cases++;
    }
    /* From inside a worker of a one-thread pool: the waiting worker must copy the pieces. */
    check_copy(w1, true, dst, src, MEMCPY_MAX, 3, 5, 4096);
    printf("# %zu copies checked\n", cases + 1);
    ferry__workers_destroy(w1);
    ferry__workers_destroy(w3);
    free(dst);
    free(src);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_arguments), cmocka_unit_test(test_names_and_bounds),
          cmocka_unit_test(test_many_tasks_four_submitters), cmocka_unit_test(test_nested_submits),
          cmocka_unit_test(test_taskgroup_wait_outside),
          cmocka_unit_test(test_taskgroup_wait_inside_worker),
          cmocka_unit_test(test_destroy_runs_pending), cmocka_unit_test(test_parallel_memcpy))
