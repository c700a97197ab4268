/* The pipeline's public calls with bad input (NULL, zero, unsized structs, out-of-range values,
 * overflowing sizes), backpressure (a full queue blocks or says FERRY_EAGAIN and drops
 * nothing), close refusing while work is in flight, and the runtime's own checks. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "testlib.h"

static ferry_stage_t copy_stage(void)
{
    ferry_stage_t s = test_cpu_stage("copy", test_cpu_copy);
    return s;
}

static void count_cb(const ferry_batch_result_t *r, void *arg)
{
    (void)r;
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_runtime_bad_input(void **state)
{
    (void)state;
    ferry_runtime_t *r = NULL;
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    assert_int_equal(ferry_runtime_create(&cfg, NULL), FERRY_EINVAL);
    cfg.backend = "quantum";
    assert_int_equal(ferry_runtime_create(&cfg, &r), FERRY_ENODEV);
    assert_non_null(strstr(ferry_last_error(), "quantum"));
    assert_null(r);
    cfg.backend = "sim";
    cfg.profile = "/nonexistent/profile.json";
    assert_int_not_equal(ferry_runtime_create(&cfg, &r), 0);
    assert_non_null(strstr(ferry_last_error(), "/nonexistent/profile.json"));
    ferry_runtime_config_t unsized = {0};
    assert_int_equal(ferry_runtime_create(&unsized, &r), FERRY_EINVAL);
    ferry_runtime_destroy(NULL);
    assert_int_equal(ferry_device_count(NULL), FERRY_EINVAL);
    assert_int_equal(ferry_device_count(test_rt), 1);
    ferry_device_t *d = NULL;
    assert_int_equal(ferry_device_get(test_rt, 1, &d), FERRY_ENODEV);
    assert_non_null(strstr(ferry_runtime_last_error(test_rt), "device 1"));
    assert_int_equal(ferry_device_get(test_rt, -2, &d), FERRY_ENODEV);
    /* -1 is the CPU as a device: no memory of its own, so no pinned pool on it */
    ferry_device_t *cpu = NULL;
    assert_int_equal(ferry_device_get(test_rt, FERRY_DEVICE_CPU, &cpu), 0);
    ferry_device_props_t cp = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(ferry_device_props(cpu, &cp), 0);
    assert_string_equal(cp.backend, "cpu");
    assert_int_equal(cp.index, FERRY_DEVICE_CPU);
    void *mem = NULL;
    assert_int_equal(ferry_host_alloc(cpu, 4096, &mem), FERRY_ENOTSUP);
    assert_int_equal(ferry_device_get(test_rt, 0, NULL), FERRY_EINVAL);
    ferry_device_props_t p = {0};
    assert_int_equal(ferry_device_props(test_dev, &p), FERRY_EINVAL);
    ferry_device_props_t q = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(ferry_device_props(test_dev, &q), 0);
    assert_true(q.simulated);
    assert_int_equal(q.sms, 132);
    assert_int_equal(q.copy_engines, 3);
    assert_int_equal(q.priority_least, 0);
    assert_int_equal(q.priority_greatest, -5);
    assert_string_equal(ferry_runtime_backend(test_rt), "sim");
    assert_true(ferry_device_is_simulated(test_dev));
    /* The simulated device's host is its profile's, not this machine's. */
    ferry_host_props_t h0 = {0};
    assert_int_equal(ferry_device_host(test_dev, &h0), FERRY_EINVAL);
    assert_int_equal(ferry_device_host(NULL, &h0), FERRY_EINVAL);
    ferry_host_props_t h = FERRY_HOST_PROPS_INIT;
    assert_int_equal(ferry_device_host(test_dev, &h), 0);
    assert_true(h.modelled);
    assert_int_equal(h.threads, 16);
    assert_true(h.memory_gbps == 150.0 && h.read_gbps == 57.6 && h.copy_gbps == 46.9);
    assert_string_equal(h.storage_kind, "tmpfs");
    assert_true(h.storage_read_gbps == 34.7 && h.storage_write_gbps == 1.97);
}

static void test_create_bad_input(void **state)
{
    (void)state;
    ferry_stage_t s = copy_stage();
    ferry_pipeline_t *p = (ferry_pipeline_t *)0x1;
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL); /* no device */
    cfg.device = test_dev;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL); /* no stage */
    cfg.stage = &s;
    assert_int_equal(ferry_pipeline_create(NULL, &p), FERRY_EINVAL);
    assert_int_equal(ferry_pipeline_create(&cfg, NULL), FERRY_EINVAL);
    ferry_stage_t nocpu = FERRY_STAGE_INIT;
    cfg.stage = &nocpu;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "CPU function"));
    cfg.stage = &s;
    struct {
        unsigned *field;
        unsigned bad;
        const char *name;
    } cases[] = {
        {&cfg.depth, 65, "depth"},
        {&cfg.copy_streams, 9, "copy_streams"},
        {&cfg.compute_streams, 17, "compute_streams"},
        {&cfg.workers, 257, "workers"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        *cases[i].field = cases[i].bad;
        assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
        assert_non_null(strstr(ferry_last_error(), cases[i].name));
        *cases[i].field = 0;
    }
    cfg.chunk_bytes = (2ull << 30);
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "chunk_bytes"));
    cfg.chunk_bytes = 0;
    cfg.compute_priority = -6; /* the H200 accepts -5..0 */
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "compute_priority"));
    cfg.compute_priority = 1;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
    cfg.compute_priority = FERRY_PRIORITY_DEFAULT;
    cfg.nonblocking = 7;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
    cfg.nonblocking = -1;
    s.ns_per_byte = -1;
    assert_int_equal(ferry_pipeline_create(&cfg, &p), FERRY_EINVAL);
    s.ns_per_byte = 0;
    ferry_pipeline_config_t unsized = {0};
    assert_int_equal(ferry_pipeline_create(&unsized, &p), FERRY_EINVAL);
    assert_ptr_equal(p, (ferry_pipeline_t *)0x1);
    assert_int_equal(ferry_pipeline_close(NULL), 0);
    assert_int_equal(ferry_pipeline_drain(NULL), FERRY_EINVAL);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(NULL, &st), FERRY_EINVAL);
}

static void test_submit_bad_input(void **state)
{
    (void)state;
    ferry_stage_t s = copy_stage();
    ferry_pipeline_config_t cfg = test_pipeline_config(test_dev, &s, 4096);
    ferry_pipeline_t *p = test_pipeline(&cfg);
    atomic_int calls = 0;
    char buf[64], out[64];
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.bytes = sizeof(buf);
    assert_int_equal(ferry_pipeline_submit(p, &b, count_cb, &calls, NULL), FERRY_EINVAL);
    b.in = buf;
    assert_int_equal(ferry_pipeline_submit(p, &b, NULL, &calls, NULL), FERRY_EINVAL);
    assert_int_equal(ferry_pipeline_submit(NULL, &b, count_cb, &calls, NULL), FERRY_EINVAL);
    assert_int_equal(ferry_pipeline_submit(p, NULL, count_cb, &calls, NULL), FERRY_EINVAL);
    ferry_batch_t unsized = {0};
    assert_int_equal(ferry_pipeline_submit(p, &unsized, count_cb, &calls, NULL), FERRY_EINVAL);
    b.out = buf + 8; /* partial overlap */
    assert_int_equal(ferry_pipeline_submit(p, &b, count_cb, &calls, NULL), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "overlap"));
    b.out = out;
    b.bytes = SIZE_MAX; /* > 2^32 chunks of 4 KiB */
    assert_int_equal(ferry_pipeline_submit(p, &b, count_cb, &calls, NULL), FERRY_ERANGE);
    /* none of the refused calls may ever call back */
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&calls), 0);
    /* a valid one does, once */
    b.bytes = sizeof(buf);
    memset(buf, 7, sizeof(buf));
    uint64_t id = 99;
    assert_int_equal(ferry_pipeline_submit(p, &b, count_cb, &calls, &id), 0);
    assert_int_equal(id, 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&calls), 1);
    assert_memory_equal(out, buf, sizeof(buf));
    assert_int_equal(ferry_pipeline_close(p), 0);
}

/* A prepare callback that holds the issuer until released: the queue behind it fills. */
typedef struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    bool open;
    bool entered;
} gate_t;

static int gated_prepare(void *slot, size_t bytes, size_t offset, void *arg)
{
    gate_t *g = arg;
    pthread_mutex_lock(&g->m);
    g->entered = true;
    pthread_cond_broadcast(&g->c);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
    memset(slot, (int)(offset & 0xff), bytes);
    return 0;
}

/* A pipeline of queue @depth (@nonblocking) whose issuer is held by a gated batch of @bytes
 * (completing into @calls) until gate_open(@g). */
static ferry_pipeline_t *gated_pipeline(unsigned depth, int nonblocking, size_t bytes, gate_t *g,
                                        atomic_int *calls)
{
    static ferry_stage_t s;
    s = copy_stage();
    ferry_pipeline_config_t cfg = test_pipeline_config(test_dev, &s, 4096);
    cfg.queue_depth = depth;
    cfg.nonblocking = nonblocking;
    ferry_pipeline_t *p = test_pipeline(&cfg);
    ferry_batch_t gated = FERRY_BATCH_INIT;
    gated.bytes = bytes;
    gated.prepare = gated_prepare;
    gated.prepare_arg = g;
    assert_int_equal(ferry_pipeline_submit(p, &gated, count_cb, calls, NULL), 0);
    pthread_mutex_lock(&g->m);
    while (!g->entered)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
    return p;
}

static void gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->m);
    g->open = true;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

static void test_backpressure_nonblocking_and_close_busy(void **state)
{
    (void)state;
    gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
    atomic_int calls = 0;
    ferry_pipeline_t *p = gated_pipeline(3, 1, 100, &g, &calls);
    /* the issuer is held: exactly queue_depth more fit, then FERRY_EAGAIN */
    char in[16] = "abcdefghijklmno";
    char outs[4][16];
    int accepted = 0;
    for (int i = 0; i < 4; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in;
        b.out = outs[i];
        b.bytes = sizeof(in);
        int rc = ferry_pipeline_submit(p, &b, count_cb, &calls, NULL);
        if (i < 3)
            assert_int_equal(rc, 0);
        else
            assert_int_equal(rc, FERRY_EAGAIN);
        accepted += rc == 0;
    }
    assert_int_equal(ferry_pipeline_close(p), FERRY_EBUSY);
    assert_non_null(strstr(ferry_last_error(), "in flight"));
    gate_open(&g);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&calls), 1 + accepted);
    for (int i = 0; i < 3; i++)
        assert_memory_equal(outs[i], in, sizeof(in));
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.queue_full_eagain, 1);
    assert_int_equal(st.batches_submitted, 4);
    assert_int_equal(ferry_pipeline_close(p), 0);
}

typedef struct submitter {
    ferry_pipeline_t *p;
    ferry_batch_t b;
    atomic_int *calls;
    atomic_int done;
} submitter_t;

static void *blocking_submit(void *arg)
{
    submitter_t *s = arg;
    int rc = ferry_pipeline_submit(s->p, &s->b, count_cb, s->calls, NULL);
    atomic_store(&s->done, rc == 0 ? 1 : -1);
    return NULL;
}

static void test_backpressure_blocking(void **state)
{
    (void)state;
    gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
    atomic_int calls = 0;
    ferry_pipeline_t *p = gated_pipeline(1, 0, 10, &g, &calls);
    char in[8] = "1234567", out1[8], out2[8];
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out1;
    b.bytes = 8;
    assert_int_equal(ferry_pipeline_submit(p, &b, count_cb, &calls, NULL), 0); /* fills queue */
    submitter_t sub = {.p = p, .calls = &calls};
    sub.b = b;
    sub.b.out = out2;
    pthread_t t;
    pthread_create(&t, NULL, blocking_submit, &sub);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(atomic_load(&sub.done), 0); /* still blocked: queue full */
    gate_open(&g);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&sub.done), 1);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&calls), 3);
    assert_memory_equal(out2, in, 8);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_true(st.queue_full_waits >= 1);
    assert_int_equal(ferry_pipeline_close(p), 0);
}

static int failing_cpu(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    return a->chunk == 1 ? FERRY_EKERNEL : test_cpu_copy(a, NULL);
}

typedef struct result_rec {
    atomic_int calls;
    int status;
    int where;
} result_rec_t;

static void record_cb(const ferry_batch_result_t *r, void *arg)
{
    result_rec_t *rr = arg;
    rr->status = r->status;
    rr->where = (int)r->where;
    atomic_fetch_add(&rr->calls, 1);
}

static void test_failed_stage_completes_once(void **state)
{
    (void)state;
    ferry_stage_t s = copy_stage();
    s.cpu = failing_cpu;
    ferry_pipeline_config_t cfg = test_pipeline_config(test_dev, &s, 1024);
    ferry_pipeline_t *p = test_pipeline(&cfg);
    static char in[4096], out[4096];
    result_rec_t bad = {0}, good = {0};
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = sizeof(in); /* 4 chunks: chunk 1 fails */
    assert_int_equal(ferry_pipeline_submit(p, &b, record_cb, &bad, NULL), 0);
    b.bytes = 1000; /* one chunk: fine */
    assert_int_equal(ferry_pipeline_submit(p, &b, record_cb, &good, NULL), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&bad.calls), 1);
    assert_int_not_equal(bad.status, 0);
    assert_int_equal(bad.where, FERRY_DONE_FAILED);
    assert_int_equal(atomic_load(&good.calls), 1);
    assert_int_equal(good.status, 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.batches_failed, 1);
    assert_int_equal(st.batches_done_gpu, 1);
    assert_int_equal(st.slots_in_use, 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
}

TEST_MAIN(test_sim_setup, test_sim_teardown, cmocka_unit_test(test_runtime_bad_input),
          cmocka_unit_test(test_create_bad_input), cmocka_unit_test(test_submit_bad_input),
          cmocka_unit_test(test_backpressure_nonblocking_and_close_busy),
          cmocka_unit_test(test_backpressure_blocking),
          cmocka_unit_test(test_failed_stage_completes_once))
