/* The built-in workloads on a real GPU are bit-identical to the CPU reference: copy, scale and
 * fma (intensity 1 and 64) through a pipeline on the cuda backend, over odd sizes and unaligned
 * host buffers; and the kernels alone over every alignment of device input and output, in place,
 * with trailing bytes, and over random bit patterns (NaN payloads, infinities, denormals).
 * Skips (exit 77) without a GPU. */
#include <stdatomic.h>
#include <string.h>

#include "cudatest.h"

typedef struct wl_case {
    const char *name;
    unsigned intensity;
} wl_case_t;

static const wl_case_t cases[] = {
    {"copy", 0},
    {"scale", 0},
    {"fma", 1},
    {"fma", 64},
};

static ferry_workload_t *make(const wl_case_t *c)
{
    ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
    wp.intensity = c->intensity;
    ferry_workload_t *w = NULL;
    int rc = ferry_workload_create(c->name, &wp, &w);
    if (rc != 0)
        fail_msg("workload %s: %s", c->name, ferry_last_error());
    assert_non_null(ferry_workload_stage(w)->gpu);
    return w;
}

typedef struct done {
    atomic_int calls, bad;
} done_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    done_t *d = arg;
    atomic_fetch_add(&d->calls, 1);
    if (r->status != 0 || r->where != FERRY_DONE_GPU)
        atomic_fetch_add(&d->bad, 1);
}

static void test_pipeline_bit_exact(void **state)
{
    (void)state;
    uint64_t rs = test_seed(0xC0DA);
    /* Odd sizes and tails; several chunks of 1 MiB (+4 so chunk boundaries move). */
    static const size_t sizes[] = {
        1, 3, 4, 7, 4099, 65536, 1 << 20, (1 << 20) + 5, (3 << 20) + 2, (9 << 20) + 1};
    enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ferry_workload_t *w = make(&cases[c]);
        ferry_pipeline_config_t cfg =
            test_pipeline_config(dev, ferry_workload_stage(w), (1 << 20) + 4);
        cfg.depth = 4;
        cfg.copy_streams = 2;
        cfg.compute_streams = 2;
        ferry_pipeline_t *p = NULL;
        if (ferry_pipeline_create(&cfg, &p) != 0)
            fail_msg("%s: pipeline_create: %s", cases[c].name, ferry_last_error());
        unsigned char *in[NS], *out[NS], *ref[NS];
        done_t d = {0};
        for (size_t i = 0; i < NS; i++) {
            size_t n = sizes[i];
            /* +1 / +3: unaligned host buffers, staged through the pinned pool */
            in[i] = malloc(n + 1);
            out[i] = malloc(n + 4);
            ref[i] = malloc(n);
            assert_true(in[i] && out[i] && ref[i]);
            cudatest_fill_floats(in[i] + 1, n, &rs);
            memset(out[i], 0xA5, n + 4);
            assert_int_equal(ferry_workload_reference(w, in[i] + 1, ref[i], n), 0);
            ferry_batch_t b = FERRY_BATCH_INIT;
            b.in = in[i] + 1;
            b.out = out[i] + 3;
            b.bytes = n;
            if (ferry_pipeline_submit(p, &b, on_done, &d, NULL) != 0)
                fail_msg("%s: submit: %s", cases[c].name, ferry_last_error());
        }
        assert_int_equal(ferry_pipeline_drain(p), 0);
        assert_int_equal(atomic_load(&d.calls), NS);
        assert_int_equal(atomic_load(&d.bad), 0);
        for (size_t i = 0; i < NS; i++) {
            long at = cudatest_first_diff(out[i] + 3, ref[i], sizes[i]);
            if (at >= 0)
                fail_msg("%s intensity %u, %zu bytes: first difference at byte %ld", cases[c].name,
                         cases[c].intensity, sizes[i], at);
            assert_int_equal(out[i][2], 0xA5); /* nothing written around the output */
            assert_int_equal(out[i][3 + sizes[i]], 0xA5);
            free(in[i]);
            free(out[i]);
            free(ref[i]);
        }
        ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
        assert_int_equal(ferry_pipeline_stats(p, &st), 0);
        assert_int_equal(st.batches_done_gpu, NS);
        assert_true(st.elapsed_ns > 0);
        printf("# %s/%u: %.1f GB/s H2D, overlap %.2f\n", cases[c].name, cases[c].intensity,
               st.gbps_h2d, st.overlap);
        assert_int_equal(ferry_pipeline_close(p), 0);
        ferry_workload_destroy(w);
    }
}

/* Run @w's GPU launcher on [d_in + ioff, +bytes) -> [d_out + ooff, ...) (or in place) through the
 * backend wrappers and compare with the CPU reference of @src, bit for bit, with guard bytes. */
static void kernel_once(ferry_workload_t *w, ferry_be_stream_t *s, unsigned char *d_in,
                        unsigned char *d_out, const unsigned char *src, size_t bytes, size_t ioff,
                        size_t ooff, bool in_place, unsigned char *host, unsigned char *ref)
{
    const ferry_stage_t *st = ferry_workload_stage(w);
    static unsigned char guard[64];
    memset(guard, 0x5A, sizeof(guard));
    unsigned char *dout = in_place ? d_in + ioff : d_out + ooff;
    assert_int_equal(ferry__be_memcpy_h2d(dev, s, d_in + ioff, src, bytes), 0);
    if (!in_place) {
        assert_int_equal(ferry__be_memcpy_h2d(dev, s, dout + bytes, guard, 16), 0);
        if (ooff >= 16)
            assert_int_equal(ferry__be_memcpy_h2d(dev, s, dout - 16, guard, 16), 0);
    }
    ferry_be_launch_t l = {
        .gpu = st->gpu,
        .cpu = st->cpu,
        .user = st->user,
        .args = {
            .size = sizeof(ferry_kernel_args_t), .in = d_in + ioff, .out = dout, .bytes = bytes}};
    if (ferry__be_launch(dev, s, &l) != 0)
        fail_msg("launch: %s", ferry_last_error());
    assert_int_equal(ferry__be_memcpy_d2h(dev, s, host, dout, bytes + (in_place ? 0 : 16)), 0);
    unsigned char before[16];
    memcpy(before, guard, sizeof(before));
    if (!in_place && ooff >= 16)
        assert_int_equal(ferry__be_memcpy_d2h(dev, s, before, dout - 16, 16), 0);
    if (ferry__be_stream_sync(dev, s) != 0)
        fail_msg("stream_sync: %s", ferry_last_error());
    assert_int_equal(ferry_workload_reference(w, src, ref, bytes), 0);
    long at = cudatest_first_diff(host, ref, bytes);
    if (at >= 0) {
        uint32_t g = 0, e = 0;
        size_t k = (size_t)at / 4 * 4;
        if (k + 4 <= bytes) {
            memcpy(&g, host + k, 4);
            memcpy(&e, ref + k, 4);
        }
        fail_msg("%s: %zu bytes, in +%zu, out +%zu%s: byte %ld differs (word 0x%08x, expected "
                 "0x%08x)",
                 st->name, bytes, ioff, ooff, in_place ? " (in place)" : "", at, g, e);
    }
    if (!in_place && cudatest_first_diff(host + bytes, guard, 16) >= 0)
        fail_msg("%s: %zu bytes, out +%zu: wrote past the end", st->name, bytes, ooff);
    if (cudatest_first_diff(before, guard, 16) >= 0)
        fail_msg("%s: %zu bytes, out +%zu: wrote before the start", st->name, bytes, ooff);
}

static void test_kernel_alignments(void **state)
{
    (void)state;
    uint64_t rs = test_seed(0xA11C);
    enum { MAXB = 70000 };
    unsigned char *d_in = NULL, *d_out = NULL;
    assert_int_equal(ferry__be_mem_alloc(dev, MAXB + 64, (void **)&d_in), 0);
    assert_int_equal(ferry__be_mem_alloc(dev, MAXB + 64, (void **)&d_out), 0);
    ferry_be_stream_t *s = NULL;
    assert_int_equal(ferry__be_stream_create(dev, 0, &s), 0);
    unsigned char *src = malloc(MAXB), *host = malloc(MAXB + 16), *ref = malloc(MAXB);
    assert_true(src && host && ref);
    static const size_t sizes[] = {0, 1, 2, 3, 4, 5, 8, 15, 16, 17, 33, 64, 1001, 4099, 65541};
    static const size_t ioffs[] = {0, 1, 2, 4, 8, 12};
    static const size_t ooffs[] = {0, 3, 4, 8, 16, 20};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ferry_workload_t *w = make(&cases[c]);
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
            for (size_t a = 0; a < sizeof(ioffs) / sizeof(ioffs[0]); a++)
                for (size_t b = 0; b <= sizeof(ooffs) / sizeof(ooffs[0]); b++) {
                    bool in_place = b == sizeof(ooffs) / sizeof(ooffs[0]);
                    cudatest_fill_floats(src, sizes[si], &rs);
                    kernel_once(w, s, d_in, d_out, src, sizes[si], ioffs[a],
                                in_place ? 0 : ooffs[b], in_place, host, ref);
                }
        /* Any bit pattern: NaNs keep their payload (quieted, as x86 does), infinities and
         * denormals follow IEEE. */
        for (int rep = 0; rep < 4; rep++) {
            test_fill_random(src, MAXB, &rs);
            kernel_once(w, s, d_in, d_out, src, MAXB, rep == 1 ? 1 : 0, rep == 2 ? 4 : 0, rep == 3,
                        host, ref);
        }
        ferry_workload_destroy(w);
    }
    free(src);
    free(host);
    free(ref);
    ferry__be_stream_destroy(dev, s);
    ferry__be_mem_free(dev, d_in);
    ferry__be_mem_free(dev, d_out);
}

TEST_MAIN(cudatest_setup, cudatest_teardown, cmocka_unit_test(test_pipeline_bit_exact),
          cmocka_unit_test(test_kernel_alignments))
