/* A set of the GPU and the CPU on a real GPU: when the CPU falls behind its plan (its function
 * turns slow after its first chunks, as a host busy with other work would), the GPU, out of
 * work, takes the chunks of the CPU's queue that it has not started (bytes_stolen), and every
 * batch is still bit-exact and called back once. Skips (exit 77) without a GPU. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudatest.h"

#define NB    96 /* 6 GiB: a fast GPU ends 1.5 GiB before the CPU's chunk probe comes back */
#define BATCH ((size_t)64 << 20)

static ferry_cpu_fn copy_cpu;
static atomic_int cpu_calls;

/* the workload's own CPU function, then 40 ms asleep per call after the first 64 calls */
static int slow_after(const ferry_kernel_args_t *a, void *user)
{
    int rc = copy_cpu(a, user);
    if (atomic_fetch_add(&cpu_calls, 1) >= 64) {
        struct timespec ts = {0, 40000000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

typedef struct done {
    atomic_int calls[NB];
    atomic_int bad;
} done_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    done_t *d = arg;
    if (r->id < NB)
        atomic_fetch_add(&d->calls[r->id], 1);
    if (r->status != 0)
        atomic_fetch_add(&d->bad, 1);
}

static void test_gpu_takes_a_slow_cpus_queue(void **state)
{
    (void)state;
    ferry_workload_t *w = test_workload("copy");
    ferry_stage_t st = *ferry_workload_stage(w);
    copy_cpu = st.cpu;
    st.cpu = slow_after;
    ferry_device_t *cpu = NULL;
    assert_int_equal(ferry_device_get(rt, FERRY_DEVICE_CPU, &cpu), 0);
    ferry_device_t *devs[2] = {dev, cpu};
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, &st, 4u << 20);
    pc.devices = devs;
    pc.ndevices = 2;
    unsigned char *in = NULL, *out = NULL;
    assert_int_equal(ferry_host_alloc(dev, NB * BATCH, (void **)&in), 0);
    assert_int_equal(ferry_host_alloc(dev, NB * BATCH, (void **)&out), 0);
    uint64_t seed = test_seed(0x57EA1);
    cudatest_fill_floats(in, NB * BATCH, &seed);
    uint64_t stolen = 0;
    for (int round = 0; round < 3 && stolen == 0; round++) {
        atomic_store(&cpu_calls, 0);
        memset(out, 0, NB * BATCH);
        ferry_pipeline_t *p = test_pipeline(&pc);
        done_t d;
        memset(&d, 0, sizeof(d));
        for (unsigned i = 0; i < NB; i++) {
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = in + i * BATCH;
            b.out = out + i * BATCH;
            b.bytes = BATCH;
            assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &d, NULL), 0);
        }
        assert_int_equal(ferry_pipeline_drain(p), 0);
        for (unsigned i = 0; i < NB; i++)
            assert_int_equal(atomic_load(&d.calls[i]), 1);
        assert_int_equal(atomic_load(&d.bad), 0);
        assert_memory_equal(out, in, NB * BATCH);
        ferry_pipeline_device_stats_t g = FERRY_PIPELINE_DEVICE_STATS_INIT,
                                      c = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, 0, &g), 0);
        assert_int_equal(ferry_pipeline_device_stats(p, 1, &c), 0);
        printf("GPU %llu bytes, %llu of them taken from the CPU's queue; CPU %llu bytes in %llu "
               "parts, %d calls; %s\n",
               (unsigned long long)g.bytes, (unsigned long long)g.bytes_stolen,
               (unsigned long long)c.bytes, (unsigned long long)c.parts, atomic_load(&cpu_calls),
               c.note);
        assert_int_equal(g.bytes + c.bytes, (uint64_t)NB * BATCH);
        assert_int_equal(c.bytes_stolen, 0);
        stolen = g.bytes_stolen;
        assert_int_equal(ferry_pipeline_destroy(p), 0);
    }
    assert_true(stolen > 0);
    ferry_host_free(dev, in);
    ferry_host_free(dev, out);
    ferry_workload_destroy(w);
}

TEST_MAIN(cudatest_setup, cudatest_teardown, cmocka_unit_test(test_gpu_takes_a_slow_cpus_queue))
