/* Memory failures on a real GPU are reported, not sticky: an oversized device allocation returns
 * FERRY_EDEVMEM naming the size and the free memory, registering twice or unregistering what is
 * not registered is FERRY_EINVAL, and the device keeps working afterwards (a pipeline runs).
 * Skips (exit 77) without a GPU. */
#include <stdatomic.h>
#include <string.h>

#include "cudatest.h"

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    if (r->status == 0 && r->where == FERRY_DONE_GPU)
        atomic_fetch_add((atomic_int *)arg, 1);
}

/* A small scale pipeline still runs and matches the reference. */
static void still_works(void)
{
    ferry_workload_t *w = test_workload("scale");
    ferry_pipeline_config_t cfg = test_pipeline_config(dev, ferry_workload_stage(w), 1 << 20);
    ferry_pipeline_t *p = NULL;
    if (ferry_pipeline_create(&cfg, &p) != 0)
        fail_msg("pipeline_create: %s", ferry_last_error());
    size_t n = (4 << 20) + 12;
    unsigned char *in = malloc(n), *out = malloc(n), *ref = malloc(n);
    uint64_t rs = 7;
    cudatest_fill_floats(in, n, &rs);
    assert_int_equal(ferry_workload_reference(w, in, ref, n), 0);
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = n;
    atomic_int ok = 0;
    assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &ok, NULL), 0);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&ok), 1);
    assert_int_equal(cudatest_first_diff(out, ref, n), -1);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_workload_destroy(w);
    free(in);
    free(out);
    free(ref);
}

static void test_oversized_alloc(void **state)
{
    (void)state;
    ferry_device_props_t pr = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(ferry_device_props(dev, &pr), 0);
    size_t huge = (size_t)pr.memory_bytes * 4; /* four times the device */
    void *p = NULL;
    int rc = ferry__be_mem_alloc(dev, huge, &p);
    const char *msg = ferry_last_error();
    printf("# %s\n", msg);
    assert_int_equal(rc, FERRY_EDEVMEM);
    assert_null(p);
    char size_text[32];
    snprintf(size_text, sizeof(size_text), "%zu bytes", huge);
    assert_non_null(strstr(msg, size_text));
    assert_non_null(strstr(msg, "free of"));
    assert_non_null(strstr(msg, "cudaErrorMemoryAllocation (2)"));
    /* Not sticky, and not left behind for the next launch's cudaGetLastError to report. */
    still_works();
}

static void test_registration_errors(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    void *buf = NULL;
    assert_int_equal(posix_memalign(&buf, 4096, n), 0);
    memset(buf, 0, n);
    assert_int_equal(ferry_host_register(dev, buf, n), 0);
    /* The runtime's own registry refuses the second registration ... */
    assert_int_equal(ferry_host_register(dev, buf, n), FERRY_EINVAL);
    /* ... and so does CUDA, through the backend alone. */
    assert_int_equal(ferry__be_host_register(dev, buf, n), FERRY_EINVAL);
    printf("# %s\n", ferry_last_error());
    assert_non_null(strstr(ferry_last_error(), "cudaHostRegister"));
    assert_non_null(strstr(ferry_last_error(), "cudaErrorHostMemoryAlreadyRegistered (712)"));
    assert_int_equal(ferry_host_unregister(dev, buf), 0);
    assert_int_equal(ferry_host_unregister(dev, buf), FERRY_EINVAL);
    assert_int_equal(ferry__be_host_unregister(dev, buf), FERRY_EINVAL);
    printf("# %s\n", ferry_last_error());
    assert_non_null(strstr(ferry_last_error(), "cudaErrorHostMemoryNotRegistered (713)"));
    free(buf);
    still_works();
}

TEST_MAIN(cudatest_setup, cudatest_teardown, cmocka_unit_test(test_oversized_alloc),
          cmocka_unit_test(test_registration_errors))
