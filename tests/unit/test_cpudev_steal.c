/* The CPU device's queue gives up chunks it has not started (ferry__cpudev_steal, the set's
 * idle GPUs take them: set.c): from the newest part with one to spare, whole chunks (or a
 * small part's pieces) from its end, never the last one not started, never a probe's; the
 * part then runs and reports only what it kept, and the chunks taken are never run here. The
 * device's threads are held at a gate so that what has started is known. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "pipeline/set_cpu.h"

#define MIB ((size_t)1 << 20)

static atomic_int gate_open, started, worker_nice = 99;

static int gated_copy(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    atomic_store(&worker_nice, getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)));
    atomic_fetch_add(&started, 1);
    while (!atomic_load(&gate_open)) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    memcpy(a->out, a->in, a->bytes);
    return 0;
}

typedef struct {
    atomic_int calls;
    size_t bytes;
    int status;
} done_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    done_t *d = arg;
    d->bytes = r->bytes;
    d->status = r->status;
    atomic_fetch_add(&d->calls, 1);
}

static void wait_started(int n)
{
    for (int i = 0; i < 20000 && atomic_load(&started) < n; i++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&started), n);
}

static void submit(ferry__cpudev_t *c, unsigned char *in, unsigned char *out, size_t bytes,
                   bool probe, done_t *d)
{
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = bytes;
    assert_int_equal(ferry__cpudev_submit(c, &b, 0, 0, probe, on_done, d), 0);
}

/* The CPU device on two threads (this host may have more: lanes bound them), 1 MiB chunks,
 * running gated_copy with the gate shut; its threads 5 nicer than this one (option cpu_nice). */
static ferry__cpudev_t *gated_device(void)
{
    ferry_stage_t st = test_cpu_stage("gated", gated_copy);
    ferry__cpudev_t *c = NULL;
    assert_int_equal(ferry__cpudev_create(&st, MIB, 2, false, 0, 5, &c), 0);
    atomic_store(&gate_open, 0);
    atomic_store(&started, 0);
    return c;
}

static void test_steal(void **state)
{
    (void)state;
    ferry__cpudev_t *c = gated_device();
    size_t na = 8 * MIB, nb = 8 * MIB + 100, np = 256 << 10;
    unsigned char *in = malloc(na + nb + np), *out = malloc(na + nb + np);
    assert_true(in != NULL && out != NULL);
    for (size_t i = 0; i < na + nb + np; i++)
        in[i] = (unsigned char)(i * 131 + 7);
    memset(out, 0xee, na + nb + np);
    done_t da = {0}, db = {0}, dp = {0};
    submit(c, in, out, na, false, &da);
    wait_started(2); /* chunks 0 and 1 of A run, held at the gate */
    submit(c, in + na, out + na, nb, false, &db);
    submit(c, in + na + nb, out + na + nb, np, true, &dp); /* a probe: never taken */

    void *arg = NULL;
    size_t off = 0;
    /* B, the newest with chunks to spare: its last three (the last of them 100 bytes) */
    assert_int_equal(ferry__cpudev_steal(c, 3 * MIB, &arg, &off), 2 * MIB + 100);
    assert_ptr_equal(arg, &db);
    assert_int_equal(off, 6 * MIB);
    /* all B can spare: chunks 1 to 5, chunk 0 stays */
    assert_int_equal(ferry__cpudev_steal(c, 100 * MIB, &arg, &off), 5 * MIB);
    assert_ptr_equal(arg, &db);
    assert_int_equal(off, 1 * MIB);
    /* less than a chunk asked: a chunk, of A now (B has none to spare); A's chunk 2 is the
     * next to start and stays, so 3 to 7 may go, the last first */
    assert_int_equal(ferry__cpudev_steal(c, 1000, &arg, &off), MIB);
    assert_ptr_equal(arg, &da);
    assert_int_equal(off, 7 * MIB);
    assert_int_equal(ferry__cpudev_steal(c, 100 * MIB, &arg, &off), 4 * MIB);
    assert_int_equal(off, 3 * MIB);
    assert_int_equal(ferry__cpudev_steal(c, 100 * MIB, &arg, &off), 0); /* A: 2 stays */

    /* the worker runs nicer than the process by the device's increment (capped at 19) */
    int mine = getpriority(PRIO_PROCESS, 0), want = mine + 5 > 19 ? 19 : mine + 5;
    assert_int_equal(atomic_load(&worker_nice), want);
    atomic_store(&gate_open, 1);
    ferry__cpudev_drain(c);
    assert_int_equal(atomic_load(&da.calls), 1);
    assert_int_equal(atomic_load(&db.calls), 1);
    assert_int_equal(atomic_load(&dp.calls), 1);
    assert_int_equal(da.bytes, 3 * MIB); /* what each kept */
    assert_int_equal(db.bytes, MIB);
    assert_int_equal(dp.bytes, np);
    assert_int_equal(da.status | db.status | dp.status, 0);
    /* what was kept ran, what was taken did not */
    assert_memory_equal(out, in, 3 * MIB);
    for (size_t i = 3 * MIB; i < na; i++)
        assert_int_equal(out[i], 0xee);
    assert_memory_equal(out + na, in + na, MIB);
    for (size_t i = na + MIB; i < na + nb; i++)
        assert_int_equal(out[i], 0xee);
    assert_memory_equal(out + na + nb, in + na + nb, np);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry__cpudev_stats(c, &s);
    assert_int_equal(s.bytes_h2d, 4 * MIB); /* the probe is not counted */
    ferry__cpudev_destroy(c);
    free(in);
    free(out);
}

/* A small part spread in pieces over the threads gives up pieces, not more than it has. */
static void test_steal_pieces(void **state)
{
    (void)state;
    ferry__cpudev_t *c = gated_device();
    size_t n = 2 * MIB, small = 512 << 10;
    unsigned char *in = calloc(1, n + small), *out = malloc(n + small);
    assert_true(in != NULL && out != NULL);
    memset(out, 0xee, n + small);
    done_t da = {0}, db = {0};
    submit(c, in, out, n, false, &da);
    wait_started(2); /* A's two chunks run */
    void *arg = NULL;
    size_t off = 0;
    /* nothing to spare: A's chunks have all started, nothing else is queued */
    assert_int_equal(ferry__cpudev_steal(c, MIB, &arg, &off), 0);
    submit(c, in + n, out + n, small, false, &db); /* pieces of 256 KiB on two threads */
    assert_int_equal(ferry__cpudev_steal(c, 4 * MIB, &arg, &off), small / 2);
    assert_int_equal(off, small / 2);
    assert_int_equal(ferry__cpudev_steal(c, 4 * MIB, &arg, &off), 0);
    atomic_store(&gate_open, 1);
    ferry__cpudev_drain(c);
    assert_int_equal(da.bytes, n);
    assert_int_equal(db.bytes, small / 2);
    assert_int_equal(atomic_load(&db.calls), 1);
    ferry__cpudev_destroy(c);
    free(in);
    free(out);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_steal), cmocka_unit_test(test_steal_pieces))
