/* A pipeline's lifetime and its misuse, through the public header alone (no internal header):
 * a stage of its own, several submitting threads, and the sequences that used to crash or
 * hang: submit after close, a double close, close racing submits, destroying the runtime under
 * a live pipeline, and a callback that submits on a full queue, drains, closes or destroys its
 * own pipeline. Every call returns a code, asserted here; none crashes or waits for ever (an
 * alarm bounds each test). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.h"

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: a call did not return within the test's bound\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(1);
}

static unsigned bound_s(void)
{
    const char *s = getenv("FERRY_TEST_SCALE");
    return s != NULL && strcmp(s, "sanitizer") == 0 ? 240 : 60;
}

/* The stage: add one to every byte. */
static int plus_one(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const unsigned char *in = a->in;
    unsigned char *out = a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = (unsigned char)(in[i] + 1);
    return 0;
}

static ferry_runtime_t *make_runtime(void)
{
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    rc.backend = "sim";
    rc.profile = FERRY_TEST_PROFILE;
    ferry_runtime_t *rt = NULL;
    assert_int_equal(ferry_runtime_create(&rc, &rt), 0);
    return rt;
}

static ferry_pipeline_t *make_pipeline(ferry_runtime_t *rt, const char *name, unsigned depth,
                                       unsigned queue)
{
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = name;
    st.cpu = plus_one;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = &st;
    pc.chunk_bytes = 4096;
    pc.depth = depth;
    pc.queue_depth = queue;
    pc.nonblocking = 0;
    ferry_pipeline_t *p = NULL;
    assert_int_equal(ferry_pipeline_create(&pc, &p), 0);
    return p;
}

typedef struct counts {
    atomic_int done, bad;
} counts_t;

static void count_done(const ferry_batch_result_t *r, void *arg)
{
    counts_t *c = arg;
    const unsigned char *in = r->in, *out = r->out;
    if (r->status != 0 || r->where == FERRY_DONE_FAILED ||
        (out != NULL && (unsigned char)(in[r->bytes - 1] + 1) != out[r->bytes - 1]))
        atomic_fetch_add(&c->bad, 1);
    atomic_fetch_add(&c->done, 1);
}

static unsigned char in_buf[64 << 10], out_buf[64 << 10];

/* A batch of 4 KiB from in_buf at @at; its output at the same offset of out_buf when @at is a
 * multiple of 4 KiB (batches in flight at once get their own), else discarded. */
static int submit_one(ferry_pipeline_t *p, ferry_done_fn cb, void *arg, size_t at)
{
    ferry_batch_t b = FERRY_BATCH_INIT;
    at %= sizeof(in_buf) - 4096;
    b.in = in_buf + at;
    b.out = at % 4096 == 0 ? out_buf + at : NULL;
    b.bytes = 4096;
    return ferry_pipeline_submit(p, &b, cb, arg, NULL);
}

static void test_null_and_double_calls(void **state)
{
    (void)state;
    alarm(bound_s());
    assert_int_equal(ferry_pipeline_close(NULL), 0);
    assert_int_equal(ferry_pipeline_destroy(NULL), 0);
    assert_int_equal(ferry_runtime_destroy(NULL), 0);
    assert_int_equal(ferry_pipeline_drain(NULL), FERRY_EINVAL);
    ferry_batch_t b = FERRY_BATCH_INIT;
    assert_int_equal(ferry_pipeline_submit(NULL, &b, count_done, NULL, NULL), FERRY_EINVAL);

    ferry_runtime_t *rt = make_runtime();
    ferry_pipeline_t *p = make_pipeline(rt, "double", 4, 4);
    static counts_t c;
    for (int i = 0; i < 10; i++)
        assert_int_equal(submit_one(p, count_done, &c, (size_t)i * 4096), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    /* Closed: every call still answers, from the same handle. */
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(submit_one(p, count_done, &c, 0), FERRY_ECLOSED);
    assert_non_null(strstr(ferry_last_error(), "closed"));
    assert_int_equal(ferry_pipeline_drain(p), 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.batches_submitted, 10);
    assert_int_equal(st.batches_done_gpu, 10);
    assert_int_equal(st.slots_in_use, 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(atomic_load(&c.done), 10);
    assert_int_equal(atomic_load(&c.bad), 0);

    /* Destroy without close: it closes, waiting for what is in flight. */
    p = make_pipeline(rt, "no-close", 2, 2);
    memset(&c, 0, sizeof(c));
    for (int i = 0; i < 50; i++)
        assert_int_equal(submit_one(p, count_done, &c, (size_t)i * 4096), 0);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(atomic_load(&c.done), 50);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    alarm(0);
}

static void test_runtime_destroy_refuses_open_pipelines(void **state)
{
    (void)state;
    alarm(bound_s());
    ferry_runtime_t *rt = make_runtime();
    ferry_pipeline_t *a = make_pipeline(rt, "alpha", 2, 2);
    ferry_pipeline_t *b = make_pipeline(rt, "beta", 2, 2);
    static counts_t c;
    assert_int_equal(submit_one(a, count_done, &c, 0), 0);
    assert_int_equal(ferry_runtime_destroy(rt), FERRY_EBUSY);
    assert_non_null(strstr(ferry_last_error(), "'alpha'"));
    assert_non_null(strstr(ferry_last_error(), "'beta'"));
    assert_non_null(strstr(ferry_runtime_last_error(rt), "2 pipeline(s)"));
    /* Nothing was destroyed: both still work. */
    assert_int_equal(submit_one(b, count_done, &c, 4096), 0);
    assert_int_equal(ferry_pipeline_drain(a), 0);
    assert_int_equal(ferry_pipeline_drain(b), 0);
    assert_int_equal(atomic_load(&c.done), 2);
    assert_int_equal(ferry_pipeline_destroy(a), 0);
    assert_int_equal(ferry_runtime_destroy(rt), FERRY_EBUSY);
    assert_null(strstr(ferry_last_error(), "'alpha'"));
    assert_non_null(strstr(ferry_last_error(), "'beta'"));
    /* Closed but not destroyed: the runtime frees it. */
    assert_int_equal(ferry_pipeline_close(b), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    alarm(0);
}

typedef struct racer {
    ferry_pipeline_t *p;
    counts_t *c;
    int accepted, closed, other;
    int after_closed; /* accepted after this thread saw FERRY_ECLOSED: must stay 0 */
} racer_t;

static void *race_submit(void *arg)
{
    racer_t *r = arg;
    /* Until the close: the alarm bounds it. */
    for (int i = 0;; i++) {
        int rc = submit_one(r->p, count_done, r->c, (size_t)i * 64 + 1);
        if (rc == 0) {
            r->accepted++;
            r->after_closed += r->closed > 0;
        } else if (rc == FERRY_ECLOSED) {
            r->closed++;
        } else {
            r->other++;
        }
        if (r->closed > 20)
            break;
    }
    return NULL;
}

static void test_close_races_submits(void **state)
{
    (void)state;
    alarm(bound_s());
    ferry_runtime_t *rt = make_runtime();
    for (int round = 0; round < 6; round++) {
        ferry_pipeline_t *p = make_pipeline(rt, "race", 2, 2);
        static counts_t c;
        memset(&c, 0, sizeof(c));
        racer_t r[4];
        pthread_t th[4];
        for (int t = 0; t < 4; t++) {
            r[t] = (racer_t){.p = p, .c = &c};
            assert_int_equal(pthread_create(&th[t], NULL, race_submit, &r[t]), 0);
        }
        usleep(1000u * (unsigned)(round * 3));
        /* Several closes at once, while the submitters run: each shuts it, none frees it. */
        int rc1 = ferry_pipeline_close(p), rc2 = ferry_pipeline_close(p);
        assert_true(rc1 == 0 || rc1 == FERRY_EBUSY);
        assert_true(rc2 == 0 || rc2 == FERRY_EBUSY);
        for (int t = 0; t < 4; t++)
            assert_int_equal(pthread_join(th[t], NULL), 0);
        int accepted = 0;
        for (int t = 0; t < 4; t++) {
            assert_int_equal(r[t].other, 0);
            assert_int_equal(r[t].after_closed, 0);
            assert_true(r[t].closed > 0); /* every thread ran into the close */
            accepted += r[t].accepted;
        }
        assert_int_equal(ferry_pipeline_drain(p), 0);
        assert_int_equal(ferry_pipeline_close(p), 0);
        /* Exactly the accepted batches completed, each once. */
        assert_int_equal(atomic_load(&c.done), accepted);
        assert_int_equal(atomic_load(&c.bad), 0);
        ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &st), 0);
        assert_int_equal(st.batches_submitted, (uint64_t)accepted);
        assert_int_equal(ferry_pipeline_destroy(p), 0);
    }
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    alarm(0);
}

/* Callbacks that call back into their own pipeline. */
typedef struct reentry {
    ferry_pipeline_t *p;
    atomic_int done, accepted, ebusy, eclosed, other;
    atomic_int budget; /* batches the callbacks may still submit */
    int drain_rc, close_rc, destroy_rc, submit_after_close_rc;
    atomic_int mode;  /* 0 submit two; 1 drain, close, destroy once */
    atomic_int in_cb; /* callbacks running */
} reentry_t;

static void reentry_body(reentry_t *e);

static void on_reentry(const ferry_batch_result_t *r, void *arg)
{
    (void)r;
    reentry_t *e = arg;
    atomic_fetch_add(&e->in_cb, 1);
    reentry_body(e);
    atomic_fetch_sub(&e->in_cb, 1);
}

static void reentry_body(reentry_t *e)
{
    atomic_fetch_add(&e->done, 1);
    if (atomic_load(&e->mode) == 1) {
        if (atomic_exchange(&e->mode, 2) != 1)
            return;
        e->drain_rc = ferry_pipeline_drain(e->p);
        e->destroy_rc = ferry_pipeline_destroy(e->p);
        e->close_rc = ferry_pipeline_close(e->p);
        e->submit_after_close_rc = submit_one(e->p, on_reentry, e, 1);
        return;
    }
    if (atomic_load(&e->mode) != 0)
        return;
    /* Each callback submits two batches, blocking mode, queue 2, depth 2: the queue fills. */
    for (int i = 0; i < 2; i++) {
        if (atomic_fetch_sub(&e->budget, 1) <= 0)
            return;
        int rc = submit_one(e->p, on_reentry, e, (size_t)i * 64 + 1);
        atomic_fetch_add(rc == 0               ? &e->accepted
                         : rc == FERRY_EBUSY   ? &e->ebusy
                         : rc == FERRY_ECLOSED ? &e->eclosed
                                               : &e->other,
                         1);
    }
}

static void test_callbacks_on_their_own_pipeline(void **state)
{
    (void)state;
    alarm(bound_s());
    ferry_runtime_t *rt = make_runtime();
    ferry_pipeline_t *p = make_pipeline(rt, "reentry", 2, 2);
    static reentry_t e;
    memset(&e, 0, sizeof(e));
    e.p = p;
    atomic_store(&e.budget, 400);
    for (int i = 0; i < 2; i++)
        assert_int_equal(submit_one(p, on_reentry, &e, (size_t)i * 64 + 1), 0);
    /* Each callback takes from the budget whether its submit is accepted or refused, and a
     * refusal means batches are queued, whose callbacks go on: the chain ends when the budget
     * does. Drain until no callback runs and every accepted batch is done. */
    for (;;) {
        assert_int_equal(ferry_pipeline_drain(p), 0);
        if (atomic_load(&e.budget) <= 0 && atomic_load(&e.in_cb) == 0 &&
            atomic_load(&e.done) == 2 + atomic_load(&e.accepted))
            break;
        usleep(1000);
    }
    printf("# callbacks: %d submits accepted, %d refused with FERRY_EBUSY (queue full)\n",
           atomic_load(&e.accepted), atomic_load(&e.ebusy));
    assert_int_equal(atomic_load(&e.other), 0);
    assert_int_equal(atomic_load(&e.eclosed), 0);
    assert_int_equal(atomic_load(&e.done), 2 + atomic_load(&e.accepted));
    assert_true(atomic_load(&e.accepted) > 0);
    assert_true(atomic_load(&e.ebusy) > 0); /* the queue was full at times */

    /* Drain, destroy and close from a callback: refused with FERRY_EBUSY; the close shuts the
     * pipeline, so a submit from the callback after it gets FERRY_ECLOSED, as does one here. */
    atomic_store(&e.mode, 1);
    assert_int_equal(submit_one(p, on_reentry, &e, 1), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&e.mode), 2);
    assert_int_equal(e.drain_rc, FERRY_EBUSY);
    assert_int_equal(e.destroy_rc, FERRY_EBUSY);
    assert_int_equal(e.close_rc, FERRY_EBUSY);
    assert_int_equal(e.submit_after_close_rc, FERRY_ECLOSED);
    assert_int_equal(submit_one(p, on_reentry, &e, 1), FERRY_ECLOSED);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    alarm(0);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    for (size_t i = 0; i < sizeof(in_buf); i++)
        in_buf[i] = (unsigned char)(i * 7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_and_double_calls),
        cmocka_unit_test(test_runtime_destroy_refuses_open_pipelines),
        cmocka_unit_test(test_close_races_submits),
        cmocka_unit_test(test_callbacks_on_their_own_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
