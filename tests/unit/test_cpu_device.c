/* The CPU as a device (FERRY_DEVICE_CPU) through the public API: the calls that need a GPU's
 * memory, streams or copies refuse it with FERRY_ENOTSUP and a message, and never crash; a set
 * of the CPU alone (cfg->devices, or cfg->device by itself) runs batches bit-exact; a stage
 * without a CPU function is refused when the set has the CPU (docs/devices.md: refused at
 * create, never a CPU that silently takes nothing). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/bench.h"
#include "ferry/connections.h"
#include "testlib.h"

static ferry_device_t *cpu_dev(void)
{
    ferry_device_t *cpu = NULL;
    assert_int_equal(ferry_device_get(test_rt, FERRY_DEVICE_CPU, &cpu), 0);
    assert_non_null(cpu);
    return cpu;
}

static void expect_enotsup(int rc, const char *what)
{
    if (rc != FERRY_ENOTSUP)
        fail_msg("%s on the CPU device: %d (%s), expected FERRY_ENOTSUP", what, rc,
                 ferry_err_name(rc));
    assert_true(ferry_last_error()[0] != '\0');
}

static void test_misuse(void **state)
{
    (void)state;
    ferry_device_t *cpu = cpu_dev();
    ferry_device_t *again = NULL;
    assert_int_equal(ferry_device_get(test_rt, FERRY_DEVICE_CPU, &again), 0);
    assert_ptr_equal(again, cpu); /* one per runtime */
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(ferry_device_props(cpu, &p), 0);
    assert_string_equal(p.backend, "cpu");
    assert_false(p.simulated);
    assert_false(ferry_device_is_simulated(cpu));
    assert_true(ferry_device_now_ns(cpu) > 0);
    ferry_host_props_t h = FERRY_HOST_PROPS_INIT;
    assert_int_equal(ferry_device_host(cpu, &h), 0);
    assert_true(h.threads >= 1);

    ferry_pool_t *pool = NULL;
    expect_enotsup(ferry_pool_create(cpu, NULL, &pool), "ferry_pool_create");
    assert_null(pool);
    char buf[8192];
    expect_enotsup(ferry_host_register(cpu, buf, sizeof(buf)), "ferry_host_register");
    void *mem = NULL;
    expect_enotsup(ferry_host_alloc(cpu, 4096, &mem), "ferry_host_alloc");
    assert_null(mem);
    ferry_copy_bench_config_t bc = FERRY_COPY_BENCH_CONFIG_INIT;
    bc.bytes = 1u << 20;
    ferry_copy_bench_result_t br = FERRY_COPY_BENCH_RESULT_INIT;
    expect_enotsup(ferry_bench_copy(cpu, &bc, &br), "ferry_bench_copy");
    ferry_calibration_t cal = FERRY_CALIBRATION_INIT;
    expect_enotsup(ferry_calibrate(cpu, &cal), "ferry_calibrate");
    ferry_conn_measure_t cm = FERRY_CONN_MEASURE_INIT;
    expect_enotsup(ferry_connections_measure(cpu, 2, 100000, 100000, 1, &cm),
                   "ferry_connections_measure");
}

typedef struct {
    atomic_int calls[16];
    atomic_int failed, on_cpu;
} tally_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    tally_t *t = arg;
    if (r->id < 16)
        atomic_fetch_add(&t->calls[r->id], 1);
    atomic_fetch_add(&t->failed, r->status != 0);
    atomic_fetch_add(&t->on_cpu, r->where == FERRY_DONE_CPU);
}

/* A prepare: byte k of a batch is k >> 12, whatever pieces it is asked for. */
static int gen(void *slot, size_t bytes, size_t offset, void *arg)
{
    (void)arg;
    unsigned char *p = slot;
    for (size_t j = 0; j < bytes; j++)
        p[j] = (unsigned char)((offset + j) >> 12);
    return 0;
}

/* @nb batches of random sizes through @p, half given by pointer and half prepared; every one
 * called back once, bit-exact, nothing written past its end. */
static void run_verified(ferry_pipeline_t *p, unsigned nb, size_t maxb, tally_t *t)
{
    uint64_t rng = 7;
    unsigned char *in[16], *out[16];
    size_t sizes[16];
    memset(t, 0, sizeof(*t));
    for (unsigned i = 0; i < nb; i++) {
        sizes[i] = (size_t)test_rand_range(&rng, 1, maxb);
        in[i] = malloc(sizes[i]);
        out[i] = malloc(sizes[i] + 1);
        assert_true(in[i] != NULL && out[i] != NULL);
        for (size_t k = 0; k < sizes[i]; k++)
            in[i][k] = (unsigned char)(k >> 12);
        memset(out[i], 0xee, sizes[i] + 1);
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.bytes = sizes[i];
        b.out = out[i];
        if (i % 2 == 0) {
            b.in = in[i];
        } else {
            b.prepare = gen;
        }
        uint64_t id = 99;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, t, &id), 0);
        assert_int_equal(id, i);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    for (unsigned i = 0; i < nb; i++) {
        assert_int_equal(atomic_load(&t->calls[i]), 1);
        assert_memory_equal(out[i], in[i], sizes[i]);
        assert_int_equal(out[i][sizes[i]], 0xee);
        free(in[i]);
        free(out[i]);
    }
    assert_int_equal(atomic_load(&t->failed), 0);
}

static void test_cpu_alone(void **state)
{
    (void)state;
    ferry_device_t *cpu = cpu_dev();
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    for (int how = 0; how < 2; how++) {
        /* how 0: cfg->devices = {cpu}; 1: cfg->device = cpu alone, a set of one */
        ferry_pipeline_config_t pc = test_pipeline_config(how == 1 ? cpu : NULL, &st, 1u << 20);
        ferry_device_t *devs[1] = {cpu};
        if (how == 0) {
            pc.devices = devs;
            pc.ndevices = 1;
        }
        ferry_pipeline_t *p = test_pipeline(&pc);
        tally_t t;
        run_verified(p, 12, 3u << 20, &t);
        assert_int_equal(atomic_load(&t.on_cpu), 12); /* done by the CPU: where says so */
        assert_int_equal(ferry_pipeline_devices(p), 1);
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, 0, &d), 0);
        assert_int_equal(d.index, FERRY_DEVICE_CPU);
        assert_true(d.share > 0.999 && d.parts == 12 && d.parts_cpu == 0 && !d.left);
        assert_true(d.model_gbps > 0);
        ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &s), 0);
        assert_int_equal(s.batches_done_cpu, 12);
        assert_int_equal(s.batches_failed, 0);
        assert_true(s.bytes_h2d == d.bytes && s.elapsed_ns > 0);
        assert_int_equal(ferry_pipeline_destroy(p), 0);
    }
}

/* A set of @devs copying in chunks of 1 MiB. */
static ferry_pipeline_t *set_of(ferry_device_t **devs, unsigned n)
{
    static ferry_stage_t st;
    st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, &st, 1u << 20);
    pc.devices = devs;
    pc.ndevices = n;
    return test_pipeline(&pc);
}

/* The set takes work on the GPU and the CPU: bytes verified, the CPU probed (a rate). */
static void test_gpu_and_cpu(void **state)
{
    (void)state;
    ferry_device_t *devs[2] = {test_dev, cpu_dev()};
    ferry_pipeline_t *p = set_of(devs, 2);
    tally_t t;
    run_verified(p, 16, 6u << 20, &t);
    ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
    assert_int_equal(ferry_pipeline_device_stats(p, 1, &d), 0);
    assert_int_equal(d.index, FERRY_DEVICE_CPU);
    assert_true(d.model_gbps > 0); /* its probe came back: it has a rate */
    assert_int_equal(ferry_pipeline_destroy(p), 0);
}

/* A stage without a CPU function and the CPU in the set: refused at create, saying why. */
static void test_no_cpu_function(void **state)
{
    (void)state;
    ferry_stage_t nocpu = FERRY_STAGE_INIT;
    nocpu.name = "gpu-only";
    ferry_device_t *cpu = cpu_dev();
    ferry_device_t *sets[2][2] = {{cpu, NULL}, {test_dev, cpu}};
    for (unsigned k = 0; k < 2; k++) {
        ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
        pc.stage = &nocpu;
        pc.devices = sets[k];
        pc.ndevices = k + 1;
        ferry_pipeline_t *p = NULL;
        assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
        assert_null(p);
        assert_non_null(strstr(ferry_last_error(), "CPU function"));
    }
    /* and the CPU named twice */
    ferry_device_t *twice[2] = {cpu, cpu};
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, &st, 0);
    pc.devices = twice;
    pc.ndevices = 2;
    ferry_pipeline_t *p = NULL;
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "same device"));
}

TEST_MAIN(test_sim_setup, test_sim_teardown, cmocka_unit_test(test_misuse),
          cmocka_unit_test(test_cpu_alone), cmocka_unit_test(test_gpu_and_cpu),
          cmocka_unit_test(test_no_cpu_function))
