/* Soak: 1,000,000 small batches (FERRY_SOAK_BATCHES to change it) through `scale` on the
 * simulator with random kernel faults and a slow spell, submitted without blocking from two
 * threads. Every batch completes exactly once with the right output (GPU or CPU fallback);
 * nothing leaks (the sanitizer builds run it too). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/workloads.h"
#include "testlib.h"

#define SLICE 64   /* bytes per batch */
#define RING  8192 /* batches whose buffers are live at once (slices of one buffer) */

typedef struct soak {
    ferry_pipeline_t *p;
    const ferry_workload_t *wl;
    float *in, *out;
    atomic_ullong done, cpu, bad, twice;
    atomic_uint busy[RING]; /* a slice is in use from submit to callback */
    uint64_t n;
} soak_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    soak_t *s = arg;
    size_t slot = (size_t)(((const unsigned char *)r->in - (const unsigned char *)s->in) / SLICE);
    float ref[SLICE / 4];
    ferry_workload_reference(s->wl, r->in, ref, SLICE);
    if (r->status != 0 || memcmp(ref, r->out, SLICE) != 0)
        atomic_fetch_add(&s->bad, 1);
    if (r->where == FERRY_DONE_CPU)
        atomic_fetch_add(&s->cpu, 1);
    /* A slice is busy from its submit to its callback: a second callback finds it free. */
    if (atomic_exchange(&s->busy[slot], 0) != 1)
        atomic_fetch_add(&s->twice, 1);
    atomic_fetch_add(&s->done, 1);
}

typedef struct feeder {
    soak_t *s;
    uint64_t count;
    unsigned first; /* the feeder's slices: first, first + 2, ... */
} feeder_t;

static void *feed(void *arg)
{
    feeder_t *f = arg;
    soak_t *s = f->s;
    unsigned slot = f->first;
    for (uint64_t i = 0; i < f->count; i++) {
        while (atomic_load(&s->busy[slot]) != 0)
            slot = (slot + 2) % RING; /* a slice still in flight: take the next of ours */
        atomic_store(&s->busy[slot], 1);
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = (const unsigned char *)s->in + (size_t)slot * SLICE;
        b.out = (unsigned char *)s->out + (size_t)slot * SLICE;
        b.bytes = SLICE;
        int rc;
        while ((rc = ferry_pipeline_submit(s->p, &b, on_done, s, NULL)) == FERRY_EAGAIN)
            sched_yield(); /* the queue is full: back-pressure */
        if (rc != 0)
            fail_msg("submit: %s", ferry_last_error());
        slot = (slot + 2) % RING;
    }
    return NULL;
}

static void test_soak(void **state)
{
    (void)state;
    const char *env = getenv("FERRY_SOAK_BATCHES");
    uint64_t n = env ? strtoull(env, NULL, 10) : 1000000;
    const char *const kv[] = {"inject", "kernel@p=0.0005,slow@n=5000:x=3:for=5ms", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("scale");
    static soak_t s;
    memset(&s, 0, sizeof(s));
    s.n = n;
    s.wl = wl;
    s.in = malloc((size_t)RING * SLICE);
    s.out = malloc((size_t)RING * SLICE);
    assert_true(s.in && s.out);
    uint64_t seed = test_seed(41);
    test_fill_floats(s.in, (size_t)RING * SLICE, &seed);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, ferry_workload_stage(wl), 4096);
    pc.nonblocking = 1;
    assert_int_equal(ferry_pipeline_create(&pc, &s.p), 0);
    feeder_t f[2] = {{&s, n / 2, 0}, {&s, n - n / 2, 1}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, feed, &f[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(ferry_pipeline_drain(s.p), 0);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(s.p, &st), 0);
    assert_int_equal(ferry_pipeline_close(s.p), 0);
    /* Batch ids are unique, not dense (a refused submit uses one up): count by slice. */
    uint64_t missing = 0;
    for (unsigned i = 0; i < RING; i++)
        missing += atomic_load(&s.busy[i]) != 0;
    printf("# %llu batches: %llu done, %llu with the CPU fallback, %llu wrong, %llu twice, %llu "
           "missing; %llu failure records, %llu chunks retried on the GPU\n",
           (unsigned long long)n, (unsigned long long)atomic_load(&s.done),
           (unsigned long long)atomic_load(&s.cpu), (unsigned long long)atomic_load(&s.bad),
           (unsigned long long)atomic_load(&s.twice), (unsigned long long)missing,
           (unsigned long long)st.failure_records, (unsigned long long)st.chunks_retried);
    assert_int_equal(atomic_load(&s.done), n);
    assert_int_equal(atomic_load(&s.bad), 0);
    assert_int_equal(atomic_load(&s.twice), 0);
    assert_int_equal(missing, 0);
    /* The faults did fire: failed attempts, retried on the GPU (a chunk reaches the CPU only
     * when its retry fails too, p^2). */
    assert_true(n < 100000 || (st.failure_records > 0 && st.chunks_retried > 0));
    assert_int_equal(st.failure_records, st.chunks_retried + 2 * st.chunks_cpu);
    assert_int_equal(st.batches_done_gpu + st.batches_done_cpu, n);
    free(s.in);
    free(s.out);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_soak))
