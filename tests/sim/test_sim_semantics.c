/* Semantics of the simulated device beyond its timing laws: real bytes move (bit-exact round
 * trips through a kernel's CPU function), event ordering and stream_wait_event, host costs and
 * synchronous pageable copies, priorities without preemption, resident-grid and memory limits,
 * non-sticky kernel errors, and strict rejection of bad profiles naming the key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "internal.h"

static const ferry_backend_ops_t *be = &ferry__sim_backend;

/* ---- helpers ----------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void seed_rng(uint64_t fallback)
{
    const char *s = getenv("FERRY_TEST_SEED");
    rng_state = s != NULL ? strtoull(s, NULL, 0) : fallback;
    printf("seed %llu (set FERRY_TEST_SEED to replay)\n", (unsigned long long)rng_state);
}

static ferry_be_device_t *open_dev(const char *profile)
{
    ferry_be_device_t *dev = simtest_open(profile);
    assert_non_null(dev);
    return dev;
}

/* A variant of the in-tree profile: in object @section (NULL: the root), or in element @index
 * of its array @key, set @field (or @key) to the JSON @json, or delete it when @json is NULL.
 * Writes a temporary file and returns its path in @path. */
struct mod {
    const char *section;
    const char *key;
    int index;
    const char *field;
    const char *json;
    const char *expect; /* what the error text must name */
};

static void write_variant(const struct mod *m, char *path, size_t len)
{
    cJSON *root = test_profile_json();
    cJSON *obj = m->section != NULL ? cJSON_GetObjectItem(root, m->section) : root;
    assert_non_null(obj);
    const char *name = m->key;
    if (m->index >= 0) {
        obj = cJSON_GetArrayItem(cJSON_GetObjectItem(obj, m->key), m->index);
        assert_non_null(obj);
        name = m->field;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, name);
    if (m->json != NULL) {
        cJSON *v = cJSON_Parse(m->json);
        assert_non_null(v);
        cJSON_AddItemToObject(obj, name, v);
    }
    test_write_json(root, "/tmp/ferry-sim-profile-XXXXXX", path, len);
    cJSON_Delete(root);
}

static ferry_be_device_t *open_variant(const char *section, const char *key, const char *json)
{
    char path[64];
    struct mod m = {.section = section, .key = key, .index = -1, .json = json};
    write_variant(&m, path, sizeof(path));
    ferry_be_device_t *dev = open_dev(path);
    unlink(path);
    return dev;
}

static uint64_t ev_time(ferry_be_event_t *e)
{
    uint64_t t = 0;
    assert_int_equal(be->event_time_ns(e, &t), 0);
    return t;
}

static int xor_kernel(const ferry_kernel_args_t *a, void *user)
{
    unsigned char key = *(unsigned char *)user;
    const unsigned char *in = a->in;
    unsigned char *out = a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = in[i] ^ key;
    return 0;
}

static int nop_kernel(const ferry_kernel_args_t *a, void *user)
{
    (void)a;
    (void)user;
    return 0;
}

static int fail_kernel(const ferry_kernel_args_t *a, void *user)
{
    (void)a;
    (void)user;
    return FERRY_EKERNEL;
}

/* Appends its chunk number to a log, so tests see the order kernels really ran in. */
static int log_kernel(const ferry_kernel_args_t *a, void *user)
{
    int *log = user;
    log[++log[0]] = (int)a->chunk;
    return 0;
}

static ferry_be_launch_t kern(ferry_cpu_fn fn, void *user, uint32_t blocks, uint64_t block_ns)
{
    ferry_be_launch_t l = {.cpu = fn, .user = user, .blocks = blocks, .block_ns = block_ns};
    l.args.size = sizeof(l.args);
    return l;
}

/* ---- bytes ------------------------------------------------------------------------------- */

static void test_round_trip_bit_exact(void **state)
{
    (void)state;
    seed_rng(20261202);
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    size_t n = (size_t)8 << 20;
    unsigned char *in = malloc(n), *out = calloc(1, n);
    void *d_in, *d_out;
    assert_non_null(in);
    assert_non_null(out);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = rng();
        memcpy(in + i, &r, 8);
    }
    assert_int_equal(be->host_register(dev, in, n), 0);
    assert_int_equal(be->host_register(dev, out, n), 0);
    assert_int_equal(be->mem_alloc(dev, n, &d_in), 0);
    assert_int_equal(be->mem_alloc(dev, n, &d_out), 0);
    ferry_be_stream_t *h, *c, *d;
    ferry_be_event_t *eh, *ec, *ed;
    assert_int_equal(be->stream_create(dev, 0, &h), 0);
    assert_int_equal(be->stream_create(dev, 0, &c), 0);
    assert_int_equal(be->stream_create(dev, 0, &d), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &eh), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &ec), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &ed), 0);

    unsigned char key = 0xa5;
    ferry_be_launch_t l = kern(xor_kernel, &key, 132, 20000);
    l.args.in = d_in;
    l.args.out = d_out;
    l.args.bytes = n;
    assert_int_equal(be->memcpy_h2d(h, d_in, in, n), 0);
    assert_int_equal(be->event_record(eh, h), 0);
    assert_int_equal(be->stream_wait_event(c, eh), 0);
    assert_int_equal(be->launch(c, &l), 0);
    assert_int_equal(be->event_record(ec, c), 0);
    assert_int_equal(be->stream_wait_event(d, ec), 0);
    assert_int_equal(be->memcpy_d2h(d, out, d_out, n), 0);
    assert_int_equal(be->event_record(ed, d), 0);

    /* Nothing has completed in model time yet, so no byte has moved. */
    assert_int_equal(be->event_query(ed), FERRY_EAGAIN);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(out[i], 0);
    size_t which = 9;
    assert_int_equal(be->event_wait_any(&ed, 1, UINT64_MAX, &which), 0);
    assert_int_equal(which, 0);
    assert_int_equal(be->event_query(ed), 0);
    for (size_t i = 0; i < n; i++)
        if (out[i] != (in[i] ^ key))
            fail_msg("byte %zu: 0x%02x, expected 0x%02x", i, out[i], in[i] ^ key);
    /* Stage order in time: H2D, then kernel, then D2H. */
    assert_true(ev_time(eh) < ev_time(ec));
    assert_true(ev_time(ec) + ferry__sim_copy_ns(ferry__sim_device_profile(dev), 1, n, true) <=
                ev_time(ed));

    struct ferry_sim_stats st;
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.bytes[FERRY_SIM_H2D], n);
    assert_int_equal(st.bytes[FERRY_SIM_D2H], n);
    assert_int_equal(st.kernels, 1);
    assert_int_equal(st.blocks, 132);
    assert_int_equal(st.ops_submitted, st.ops_completed);
    be->event_destroy(eh);
    be->event_destroy(ec);
    be->event_destroy(ed);
    be->stream_destroy(h);
    be->stream_destroy(c);
    be->stream_destroy(d);
    be->mem_free(dev, d_in);
    be->mem_free(dev, d_out);
    assert_int_equal(be->host_unregister(dev, in), 0);
    assert_int_equal(be->host_unregister(dev, out), 0);
    be->device_close(dev);
    free(in);
    free(out);
}

static void test_copy_checks_device_ranges(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *s;
    void *d;
    char host[64];
    assert_int_equal(be->stream_create(dev, 0, &s), 0);
    assert_int_equal(be->mem_alloc(dev, 4096, &d), 0);
    assert_int_equal(be->memcpy_h2d(s, (char *)d + 4090, host, 7), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "device allocation"));
    assert_int_equal(be->memcpy_d2h(s, host, host, 7), FERRY_EINVAL);
    assert_int_equal(be->memcpy_h2d(s, (char *)d + 4089, host, 7), 0);
    assert_int_equal(be->host_register(dev, host, sizeof(host)), 0);
    assert_int_equal(be->host_register(dev, host + 8, 8), FERRY_EINVAL);
    assert_int_equal(be->host_unregister(dev, host + 8), FERRY_EINVAL);
    assert_int_equal(be->host_unregister(dev, host), 0);
    be->stream_destroy(s);
    be->device_close(dev);
}

/* ---- events ------------------------------------------------------------------------------ */

static void test_events_and_stream_wait(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *s1, *s2, *s3;
    ferry_be_event_t *e1, *e1b, *e2, *never;
    assert_int_equal(be->stream_create(dev, 0, &s1), 0);
    assert_int_equal(be->stream_create(dev, 0, &s2), 0);
    assert_int_equal(be->stream_create(dev, 0, &s3), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e1), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e1b), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e2), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &never), 0);

    /* A never-recorded event is complete at time 0, and waiting on it waits for nothing. */
    uint64_t t = 99;
    assert_int_equal(be->event_query(never), 0);
    assert_int_equal(be->event_time_ns(never, &t), 0);
    assert_int_equal(t, 0);

    int log[8] = {0};
    ferry_be_launch_t k1 = kern(log_kernel, log, 1, 1000000);
    ferry_be_launch_t k2 = kern(log_kernel, log, 1, 500000);
    k1.args.chunk = 1;
    k2.args.chunk = 2;
    assert_int_equal(be->launch(s1, &k1), 0);
    assert_int_equal(be->event_record(e1, s1), 0);
    assert_int_equal(be->event_record(e1b, s1), 0);
    assert_int_equal(be->stream_wait_event(s2, never), 0);
    assert_int_equal(be->stream_wait_event(s2, e1), 0);
    /* Re-recording e1 on an idle stream does not release s2: the wait took the record in
     * force when it was made. */
    assert_int_equal(be->event_record(e1, s3), 0);
    assert_int_equal(be->launch(s2, &k2), 0);
    assert_int_equal(be->event_record(e2, s2), 0);

    assert_int_equal(be->event_query(e2), FERRY_EAGAIN);
    assert_int_equal(be->event_query(e1b), FERRY_EAGAIN);
    assert_int_equal(be->event_time_ns(e2, &t), FERRY_EAGAIN);
    /* Queries cost no virtual time and never move the model. */
    uint64_t before = be->now_ns(dev);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(be->event_query(e2), FERRY_EAGAIN);
    assert_int_equal(be->now_ns(dev), before);

    ferry_be_event_t *both[2] = {e2, e1b};
    size_t which = 9;
    assert_int_equal(be->event_wait_any(both, 2, UINT64_MAX, &which), 0);
    assert_int_equal(which, 1);
    assert_int_equal(be->now_ns(dev), ev_time(e1b));
    assert_int_equal(log[0], 1);
    assert_int_equal(be->event_query(e2), FERRY_EAGAIN);
    assert_int_equal(be->event_wait_any(both, 1, UINT64_MAX, &which), 0);
    assert_int_equal(which, 0);
    assert_int_equal(be->now_ns(dev), ev_time(e2));
    /* k2 started only when k1 ended: e2 - e1b is k2's 0.5 ms, give or take the queue hop. */
    uint64_t gap = ev_time(e2) - ev_time(e1b);
    assert_true(gap >= 500000 && gap < 510000);
    assert_int_equal(log[0], 2);
    assert_int_equal(log[1], 1);
    assert_int_equal(log[2], 2);
    /* The re-record on idle s3 completed long before. */
    assert_true(ev_time(e1) < ev_time(e1b));

    /* An untimed event orders and completes like any other, and has no time to give. */
    ferry_be_event_t *plain = NULL, *bad = NULL;
    assert_int_equal(be->event_create(dev, 0, &plain), 0);
    assert_int_equal(be->event_create(dev, 2, &bad), FERRY_EINVAL);
    assert_null(bad);
    assert_int_equal(be->launch(s1, &k2), 0);
    assert_int_equal(be->event_record(plain, s1), 0);
    assert_int_equal(be->event_query(plain), FERRY_EAGAIN);
    assert_int_equal(be->event_wait_any(&plain, 1, UINT64_MAX, &which), 0);
    assert_int_equal(be->event_query(plain), 0);
    assert_int_equal(be->event_time_ns(plain, &t), FERRY_ENOTSUP);
    assert_non_null(strstr(ferry_last_error(), "without timing"));
    be->event_destroy(plain);

    be->event_destroy(e1);
    be->event_destroy(e1b);
    be->event_destroy(e2);
    be->event_destroy(never);
    be->stream_destroy(s1);
    be->stream_destroy(s2);
    be->stream_destroy(s3);
    be->device_close(dev);
}

static void test_wait_any_timeout_advances_the_clock(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *s;
    ferry_be_event_t *e;
    assert_int_equal(be->stream_create(dev, 0, &s), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e), 0);
    ferry_be_launch_t k = kern(nop_kernel, NULL, 1, 10000000);
    assert_int_equal(be->launch(s, &k), 0);
    assert_int_equal(be->event_record(e, s), 0);
    uint64_t t0 = be->now_ns(dev);
    size_t which = 7;
    assert_int_equal(be->event_wait_any(&e, 1, 1000000, &which), FERRY_ETIMEDOUT);
    assert_int_equal(be->now_ns(dev), t0 + 1000000);
    assert_int_equal(be->event_wait_any(&e, 1, UINT64_MAX, &which), 0);
    assert_int_equal(which, 0);
    assert_true(be->now_ns(dev) >= t0 + 10000000 - 10000);
    /* Already complete: returns at once, the clock stays. */
    uint64_t t1 = be->now_ns(dev);
    assert_int_equal(be->event_wait_any(&e, 1, 5, &which), 0);
    assert_int_equal(be->now_ns(dev), t1);
    be->event_destroy(e);
    be->stream_destroy(s);
    be->device_close(dev);
}

static void test_host_costs(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *s;
    ferry_be_event_t *e;
    void *d;
    size_t n = 1 << 20;
    unsigned char *h = calloc(1, n);
    assert_int_equal(be->stream_create(dev, 0, &s), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e), 0);
    assert_int_equal(be->mem_alloc(dev, n, &d), 0);
    assert_int_equal(be->host_register(dev, h, n), 0);
    uint64_t t = be->now_ns(dev);
    ferry_be_launch_t k = kern(nop_kernel, NULL, 1, 0);
    assert_int_equal(be->launch(s, &k), 0);
    assert_int_equal(be->now_ns(dev) - t, 4600); /* FACTS.md: empty launch ~4.6 us */
    t = be->now_ns(dev);
    assert_int_equal(be->memcpy_h2d(s, d, h, n), 0);
    assert_int_equal(be->now_ns(dev) - t, 2500); /* async copy submit ~2.5 us */
    t = be->now_ns(dev);
    assert_int_equal(be->event_record(e, s), 0);
    assert_int_equal(be->now_ns(dev) - t, 1500); /* cudaEventRecord ~1.5 us */
    t = be->now_ns(dev);
    (void)be->event_query(e);
    assert_int_equal(be->now_ns(dev), t);
    assert_int_equal(be->stream_sync(s), 0);
    assert_int_equal(be->now_ns(dev), ev_time(e));
    be->event_destroy(e);
    be->stream_destroy(s);
    be->device_close(dev);
    free(h);
}

/* copy_pieces with kernel_max: the pieces of that size or smaller (and of the profile's
 * piece_kernel_max) cost one launch a 240 of them on the host and FERRY_SIM_PIECE_KERNEL_DEV_NS
 * once on the device, the others the copy engines' call and FERRY_SIM_PIECE_DEV_NS each; every
 * byte lands either way, both directions, pieces scattered and of odd sizes. A profile without
 * piece_kernel_max moves them all by the engines whatever the caller asks. */
static void test_copy_pieces_kernel(void **state)
{
    (void)state;
    seed_rng(20261207);
    enum { N = 340 };
    size_t n = (size_t)8 << 20;
    unsigned char *h = malloc(n), *back = calloc(1, n);
    assert_non_null(h);
    assert_non_null(back);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = rng();
        memcpy(h + i, &r, 8);
    }
    static ferry_be_piece_t pin[N], pout[N];
    size_t off = 0;
    for (unsigned i = 0; i < N; i++) { /* one a 24 KiB of h, 1-20 KiB long */
        size_t bytes = 1 + (size_t)(rng() % (20u << 10));
        pin[i] = (ferry_be_piece_t){h + (size_t)i * (24u << 10), off, bytes};
        pout[i] = (ferry_be_piece_t){back + (size_t)i * (24u << 10), off, bytes};
        off += bytes;
    }
    uint64_t dev_ns[3], host_ns[3];
    for (int k = 0; k < 3; k++) { /* engines; the kernel up to 16 KiB; asked, on a plain profile */
        size_t kmax = k ? 16u << 10 : 0, small = 0;
        for (unsigned i = 0; k < 2 && i < N; i++)
            small += pin[i].bytes <= kmax;
        ferry_be_device_t *dev = k < 2 ? open_variant("copy", "piece_kernel_max", "16384")
                                       : open_dev(FERRY_TEST_PROFILE);
        const struct ferry_sim_profile *pf = ferry__sim_device_profile(dev);
        ferry_be_stream_t *s;
        ferry_be_event_t *e;
        void *d;
        assert_int_equal(be->stream_create(dev, 0, &s), 0);
        assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e), 0);
        assert_int_equal(be->mem_alloc(dev, off, &d), 0);
        assert_int_equal(be->host_register(dev, h, n), 0);
        assert_int_equal(be->host_register(dev, back, n), 0);
        memset(back, 0, n);
        uint64_t t = be->now_ns(dev);
        assert_int_equal(be->copy_pieces(s, true, d, pin, N, kmax), 0);
        host_ns[k] = be->now_ns(dev) - t;
        uint64_t want = (small + 239) / 240 * pf->launch_ns;
        if (small < N)
            want += pf->copy_submit_ns + (N - small) * FERRY_SIM_PIECE_HOST_NS;
        assert_int_equal(host_ns[k], want);
        assert_int_equal(be->event_record(e, s), 0);
        t = be->now_ns(dev);
        assert_int_equal(be->stream_sync(s), 0);
        dev_ns[k] = ev_time(e) - t;
        assert_int_equal(be->copy_pieces(s, false, d, pout, N, kmax), 0);
        assert_int_equal(be->stream_sync(s), 0);
        for (unsigned i = 0; i < N; i++)
            if (memcmp(pout[i].host, pin[i].host, pin[i].bytes) != 0)
                fail_msg("kernel_max %zu: piece %u (%zu bytes) differs", kmax, i, pin[i].bytes);
        be->event_destroy(e);
        be->stream_destroy(s);
        be->mem_free(dev, d);
        assert_int_equal(be->host_unregister(dev, h), 0);
        assert_int_equal(be->host_unregister(dev, back), 0);
        be->device_close(dev);
    }
    /* the kernel's pieces: one fixed cost instead of one a piece, on both clocks */
    assert_true(host_ns[1] < host_ns[0]);
    assert_true(dev_ns[1] < dev_ns[0]);
    assert_int_equal(host_ns[2], host_ns[0]);
    assert_int_equal(dev_ns[2], dev_ns[0]);
    free(h);
    free(back);
}

/* ---- pageable memory ---------------------------------------------------------------------- */

static void test_pageable_is_slower_and_synchronous(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    size_t n = (size_t)16 << 20;
    unsigned char *pinned = malloc(n), *pageable = malloc(n);
    void *d;
    ferry_be_stream_t *s;
    assert_int_equal(be->stream_create(dev, 0, &s), 0);
    assert_int_equal(be->mem_alloc(dev, n, &d), 0);
    assert_int_equal(be->host_register(dev, pinned, n), 0);
    for (int dir = 0; dir < 2; dir++) {
        /* Pinned: the call returns after its submit cost; the bytes move later. */
        memset(pinned, 0x11, n);
        memset(pageable, 0x22, n);
        memset(d, 0x33, n);
        uint64_t t0 = be->now_ns(dev);
        if (dir == FERRY_SIM_H2D)
            assert_int_equal(be->memcpy_h2d(s, d, pinned, n), 0);
        else
            assert_int_equal(be->memcpy_d2h(s, pinned, d, n), 0);
        assert_int_equal(be->now_ns(dev) - t0, 2500);
        assert_int_equal(dir == FERRY_SIM_H2D ? ((unsigned char *)d)[n - 1] : pinned[n - 1],
                         0x33 ^ (dir == FERRY_SIM_H2D ? 0 : 0x33 ^ 0x11));
        assert_int_equal(be->stream_sync(s), 0);
        uint64_t pinned_ns = be->now_ns(dev) - t0;
        /* Pageable: the call itself returns only when the copy is done. */
        memset(d, 0x33, n);
        t0 = be->now_ns(dev);
        if (dir == FERRY_SIM_H2D) {
            assert_int_equal(be->memcpy_h2d(s, d, pageable, n), 0);
            assert_int_equal(((unsigned char *)d)[n - 1], 0x22);
        } else {
            assert_int_equal(be->memcpy_d2h(s, pageable, d, n), 0);
            assert_int_equal(pageable[n - 1], 0x33);
        }
        uint64_t pageable_ns = be->now_ns(dev) - t0;
        double gbps = (double)n / (double)pageable_ns;
        printf("%s 16 MiB: pinned %.1f us, pageable %.1f us (%.2f GB/s), %.1fx slower\n",
               dir ? "D2H" : "H2D", pinned_ns / 1e3, pageable_ns / 1e3, gbps,
               (double)pageable_ns / (double)pinned_ns);
        /* FACTS.md: pageable H2D 6-7.4 GB/s, D2H 9.6-13 GB/s; pinned is 4-9x faster. */
        assert_true(pageable_ns >= 4 * pinned_ns && pageable_ns <= 9 * pinned_ns);
        if (dir == FERRY_SIM_H2D)
            assert_true(gbps >= 6.0 && gbps <= 7.4);
        else
            assert_true(gbps >= 9.6 && gbps <= 13.0);
    }
    struct ferry_sim_stats st;
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.pageable_copies, 2);
    be->stream_destroy(s);
    be->device_close(dev);
    free(pinned);
    free(pageable);
}

/* ---- SMs ------------------------------------------------------------------------------- */

/* 132 SMs. A low-priority kernel of 264 one-ms blocks fills them; a kernel of 132 blocks
 * launched just after waits for the first wave (no preemption), then takes every freed SM
 * before the low kernel's second wave when its stream has the higher priority. */
static void run_priority(int lo_prio, int hi_prio, uint64_t *lo_end, uint64_t *hi_end)
{
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *lo, *hi;
    ferry_be_event_t *start, *elo, *ehi;
    assert_int_equal(be->stream_create(dev, lo_prio, &lo), 0);
    assert_int_equal(be->stream_create(dev, hi_prio, &hi), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &start), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &elo), 0);
    assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &ehi), 0);
    ferry_be_launch_t kl = kern(nop_kernel, NULL, 264, 1000000);
    ferry_be_launch_t kh = kern(nop_kernel, NULL, 132, 1000000);
    assert_int_equal(be->event_record(start, lo), 0);
    assert_int_equal(be->launch(lo, &kl), 0);
    assert_int_equal(be->event_record(elo, lo), 0);
    assert_int_equal(be->launch(hi, &kh), 0);
    assert_int_equal(be->event_record(ehi, hi), 0);
    assert_int_equal(be->stream_sync(lo), 0);
    assert_int_equal(be->stream_sync(hi), 0);
    *lo_end = ev_time(elo) - ev_time(start);
    *hi_end = ev_time(ehi) - ev_time(start);
    be->event_destroy(start);
    be->event_destroy(elo);
    be->event_destroy(ehi);
    be->stream_destroy(lo);
    be->stream_destroy(hi);
    be->device_close(dev);
}

static void test_priorities_pick_pending_blocks(void **state)
{
    (void)state;
    uint64_t lo, hi;
    run_priority(0, -5, &lo, &hi);
    printf("high priority: its kernel ends at %.3f ms, the low one at %.3f ms\n", hi / 1e6,
           lo / 1e6);
    assert_true(hi >= 2000000 && hi < 2020000); /* waited for the first wave, then ran */
    assert_true(lo >= 3000000 && lo < 3020000);
    /* Out-of-range priorities clamp to the device's range (-5 .. 0), as CUDA does. */
    uint64_t lo2, hi2;
    run_priority(7, -100, &lo2, &hi2);
    assert_int_equal(lo2, lo);
    assert_int_equal(hi2, hi);
    /* Equal priorities: FIFO, the earlier kernel's blocks first. */
    run_priority(0, 0, &lo, &hi);
    printf("equal priority: first kernel ends at %.3f ms, second at %.3f ms\n", lo / 1e6, hi / 1e6);
    assert_true(lo >= 2000000 && lo < 2020000);
    assert_true(hi >= 3000000 && hi < 3020000);
}

static void test_resident_grid_limit(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_variant("device", "max_resident_grids", "2");
    ferry_be_stream_t *s[3];
    ferry_be_launch_t k = kern(nop_kernel, NULL, 1, 1000000);
    uint64_t t0 = be->now_ns(dev);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(be->stream_create(dev, 0, &s[i]), 0);
        assert_int_equal(be->launch(s[i], &k), 0);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(be->stream_sync(s[i]), 0);
    uint64_t total = be->now_ns(dev) - t0;
    assert_true(total >= 2000000 && total < 2100000);
    struct ferry_sim_stats st;
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.peak_resident_grids, 2);
    for (int i = 0; i < 3; i++)
        be->stream_destroy(s[i]);
    be->device_close(dev);
}

/* ---- errors ------------------------------------------------------------------------------ */

/* The pipeline's shape: compute stream c: wait(h2d) kernel record(comp_end); D2H stream d:
 * wait(comp_end) record(d2h_start) copy record(d2h_end). A failed kernel shows on every event
 * after it on c, and through the wait on d's events, and on nothing of the next chunk. */
static void test_kernel_error_is_reported_not_sticky(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *c, *d, *other;
    enum { COMP_END, COMP_AFTER, D2H_START, D2H_END, OTHER, N1 };
    ferry_be_event_t *e[2][N1];
    void *dbuf;
    char *host = calloc(1, 4096);
    assert_int_equal(be->mem_alloc(dev, 4096, &dbuf), 0);
    assert_int_equal(be->host_register(dev, host, 4096), 0);
    assert_int_equal(be->stream_create(dev, 0, &c), 0);
    assert_int_equal(be->stream_create(dev, 0, &d), 0);
    assert_int_equal(be->stream_create(dev, 0, &other), 0);
    for (int chunk = 0; chunk < 2; chunk++)
        for (int i = 0; i < N1; i++)
            assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e[chunk][i]), 0);
    ferry_be_launch_t bad = kern(fail_kernel, NULL, 4, 10000);
    ferry_be_launch_t good = kern(nop_kernel, NULL, 4, 10000);
    for (int chunk = 0; chunk < 2; chunk++) {
        assert_int_equal(be->launch(c, chunk == 0 ? &bad : &good), 0);
        assert_int_equal(be->event_record(e[chunk][COMP_END], c), 0);
        assert_int_equal(be->event_record(e[chunk][COMP_AFTER], c), 0);
        assert_int_equal(be->stream_wait_event(d, e[chunk][COMP_END]), 0);
        assert_int_equal(be->event_record(e[chunk][D2H_START], d), 0);
        assert_int_equal(be->memcpy_d2h(d, host, dbuf, 4096), 0);
        assert_int_equal(be->event_record(e[chunk][D2H_END], d), 0);
        assert_int_equal(be->launch(other, &good), 0);
        assert_int_equal(be->event_record(e[chunk][OTHER], other), 0);
    }
    size_t which = 9;
    assert_int_equal(be->event_wait_any(&e[0][COMP_END], 1, UINT64_MAX, &which), FERRY_EKERNEL);
    assert_int_equal(which, 0);
    assert_int_equal(be->stream_sync(c), 0); /* the last kernel on c succeeded */
    assert_int_equal(be->stream_sync(d), 0);
    assert_int_equal(be->stream_sync(other), 0);
    assert_int_equal(be->event_query(e[0][COMP_END]), FERRY_EKERNEL);
    assert_non_null(strstr(ferry_last_error(), "EKERNEL"));
    assert_int_equal(be->event_query(e[0][COMP_END]), FERRY_EKERNEL); /* queries repeat */
    assert_int_equal(be->event_query(e[0][COMP_AFTER]), FERRY_EKERNEL);
    assert_int_equal(be->event_query(e[0][D2H_START]), FERRY_EKERNEL);
    assert_int_equal(be->event_query(e[0][D2H_END]), FERRY_EKERNEL);
    assert_int_equal(be->event_query(e[0][OTHER]), 0);
    for (int i = 0; i < N1; i++)
        assert_int_equal(be->event_query(e[1][i]), 0); /* not sticky */
    struct ferry_sim_stats st;
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.kernel_errors, 1);
    assert_int_equal(st.kernels, 4);

    /* A run of waits adds up: d waits on a failed event, then a good one. */
    ferry_be_event_t *good_ev = e[1][COMP_END], *bad_ev = e[0][COMP_END], *r = e[1][OTHER];
    assert_int_equal(be->stream_wait_event(d, bad_ev), 0);
    assert_int_equal(be->stream_wait_event(d, good_ev), 0);
    assert_int_equal(be->event_record(r, d), 0);
    assert_int_equal(be->stream_sync(d), FERRY_EKERNEL);
    assert_int_equal(be->event_query(r), FERRY_EKERNEL);
    /* A new wait on good input clears it. */
    assert_int_equal(be->memcpy_d2h(d, host, dbuf, 4096), 0);
    assert_int_equal(be->stream_wait_event(d, good_ev), 0);
    assert_int_equal(be->event_record(r, d), 0);
    assert_int_equal(be->stream_sync(d), 0);
    assert_int_equal(be->event_query(r), 0);
    /* stream_sync reports a failed last kernel, as long as it is the last one. */
    assert_int_equal(be->launch(c, &bad), 0);
    assert_int_equal(be->stream_sync(c), FERRY_EKERNEL);
    assert_int_equal(be->stream_sync(c), FERRY_EKERNEL);
    assert_int_equal(be->launch(c, &good), 0);
    assert_int_equal(be->stream_sync(c), 0);
    /* Kernels back to back before one event (a copy group's): a good kernel after a failed
     * one does not hide the failure from that event; once reported, the next good one clears
     * it. */
    assert_int_equal(be->launch(c, &bad), 0);
    assert_int_equal(be->launch(c, &good), 0);
    assert_int_equal(be->event_record(r, c), 0);
    assert_int_equal(be->stream_sync(c), FERRY_EKERNEL);
    assert_int_equal(be->event_query(r), FERRY_EKERNEL);
    assert_int_equal(be->launch(c, &good), 0);
    assert_int_equal(be->event_record(r, c), 0);
    assert_int_equal(be->stream_sync(c), 0);
    assert_int_equal(be->event_query(r), 0);

    for (int chunk = 0; chunk < 2; chunk++)
        for (int i = 0; i < N1; i++)
            be->event_destroy(e[chunk][i]);
    be->stream_destroy(c);
    be->stream_destroy(d);
    be->stream_destroy(other);
    assert_int_equal(be->host_unregister(dev, host), 0);
    be->device_close(dev);
    free(host);
}

static void test_launch_without_cpu_fn(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *s;
    assert_int_equal(be->stream_create(dev, 0, &s), 0);
    ferry_be_launch_t k = kern(NULL, NULL, 1, 1000);
    uint64_t t = be->now_ns(dev);
    assert_int_equal(be->launch(s, &k), FERRY_ENOTSUP);
    assert_non_null(strstr(ferry_last_error(), "CPU function"));
    assert_int_equal(be->now_ns(dev), t);
    be->stream_destroy(s);
    be->device_close(dev);
}

static void test_device_memory_exhaustion(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_variant("device", "memory_bytes", "67108864");
    void *a = NULL, *b = NULL;
    assert_int_equal(be->mem_alloc(dev, (size_t)48 << 20, &a), 0);
    assert_int_equal(be->mem_alloc(dev, (size_t)32 << 20, &b), FERRY_EDEVMEM);
    assert_null(b);
    assert_non_null(strstr(ferry_last_error(), "exhausted"));
    assert_int_equal(be->mem_alloc(dev, (size_t)16 << 20, &b), 0);
    struct ferry_sim_stats st;
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.mem_used, (uint64_t)64 << 20);
    be->mem_free(dev, a);
    assert_int_equal(be->mem_alloc(dev, (size_t)32 << 20, &a), 0);
    be->mem_free(dev, a);
    be->mem_free(dev, b);
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.mem_used, 0);
    assert_int_equal(st.mem_peak, (uint64_t)64 << 20);
    be->device_close(dev);
}

/* ---- profiles ---------------------------------------------------------------------------- */

static void test_bad_profiles_rejected(void **state)
{
    (void)state;
    static const struct mod mods[] = {
        {"copy", "bidirectional_factor", -1, NULL, NULL, "copy.bidirectional_factor"},
        {NULL, "host", -1, NULL, NULL, "\"host\""},
        {"host", "launch_ns", -1, NULL, NULL, "host.launch_ns"},
        {"device", "warp_size", -1, NULL, "32", "device.warp_size"},
        {NULL, "extra", -1, NULL, "\"x\"", "\"extra\""},
        {"device", "sms", -1, NULL, "\"132\"", "device.sms"},
        {"device", "sms", -1, NULL, "132.5", "device.sms"},
        {"device", "cc", -1, NULL, "9.0", "device.cc"},
        {"device", "connections_default", -1, NULL, "0", "device.connections_default"},
        {"copy", "h2d", 2, "gbps", "0", "copy.h2d[2].gbps"},
        {"copy", "h2d", 2, "gbps", "\"43.2\"", "copy.h2d[2].gbps"},
        {"copy", "pageable_d2h_gbps", -1, NULL, "-1", "copy.pageable_d2h_gbps"},
        {"copy", "bidirectional_factor", -1, NULL, "1.5", "copy.bidirectional_factor"},
        {"copy", "h2d", 1, "bytes", "4096", "copy.h2d[1].bytes"},
        {"copy", "d2h", 2, "gbps", "10", "copy.d2h[3]"},
        {"copy", "h2d", 0, "rate", "1", "copy.h2d[0].rate"},
        {"copy", "d2h", -1, NULL, "[]", "copy.d2h"},
        {NULL, "format", -1, NULL, "\"ferry-profile-2\"", "\"format\""},
        {"source", "copy", -1, NULL, "5", "source.copy"},
        {"source", "kernels", -1, NULL, "\"made up\"", "source.kernels"},
        {NULL, "devices", -1, NULL, "0", "\"devices\""},
        {"host_memory", "gbps", -1, NULL, "0", "host_memory.gbps"},
        {"host_memory", "threads", -1, NULL, "0", "host_memory.threads"},
        {"host_memory", "read_gbps", -1, NULL, NULL, "host_memory.read_gbps"},
        {"host_memory", "cache_gbps", -1, NULL, "3", "host_memory.cache_gbps"},
        {NULL, "host_memory", -1, NULL, "5", "\"host_memory\""},
        {"storage", "kind", -1, NULL, "\"\"", "storage.kind"},
        {"storage", "write_gbps", -1, NULL, "-2", "storage.write_gbps"},
        {"source", "storage", -1, NULL, NULL, "source.storage"},
    };
    for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
        char path[64];
        struct ferry_sim_profile p;
        write_variant(&mods[i], path, sizeof(path));
        int rc = ferry__sim_profile_load(path, &p);
        printf("%-28s -> %s: %s\n", mods[i].expect, ferry_err_name(rc), ferry_last_error());
        assert_int_equal(rc, FERRY_EPARSE);
        assert_non_null(strstr(ferry_last_error(), mods[i].expect));
        assert_non_null(strstr(ferry_last_error(), path));
        /* device_open refuses it the same way. */
        ferry_be_device_t *dev = NULL;
        ferry_be_open_params_t params = {.profile_path = path};
        assert_int_equal(be->device_open(0, &params, &dev), FERRY_EPARSE);
        assert_null(dev);
        unlink(path);
    }
}

static void test_profile_text_errors(void **state)
{
    (void)state;
    struct ferry_sim_profile p;
    static const char *const texts[] = {"{", "[]", "{\"format\": \"ferry-profile-1\"} x",
                                        "{\"format\": \"x\", \"format\": \"y\"}", ""};
    static const char *const expect[] = {"malformed", "must be a JSON object", "after the JSON",
                                         "duplicate key \"format\"", "malformed"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        assert_int_equal(ferry__sim_profile_parse(texts[i], strlen(texts[i]), "t.json", &p),
                         FERRY_EPARSE);
        assert_non_null(strstr(ferry_last_error(), expect[i]));
        assert_non_null(strstr(ferry_last_error(), "t.json"));
    }
    assert_int_equal(ferry__sim_profile_load("/nonexistent/h200.json", &p), FERRY_EIO);
    assert_non_null(strstr(ferry_last_error(), "/nonexistent/h200.json"));
}

static void test_profile_and_props(void **state)
{
    (void)state;
    struct ferry_sim_profile p;
    assert_int_equal(ferry__sim_profile_load(FERRY_TEST_PROFILE, &p), 0);
    assert_string_equal(p.format, FERRY_SIM_PROFILE_FORMAT);
    assert_int_equal(p.sms, 132);
    assert_int_equal(p.curve[FERRY_SIM_H2D].n, 6);
    assert_true(p.d2d_gbps == 2100.0);
    assert_int_equal(p.default_chunk_bytes, 8u << 20);
    /* the host the H200 was measured in (host_memory, storage) */
    assert_true(p.host_memory_gbps == 150.0 && p.host_thread_read_gbps == 6.5);
    assert_int_equal(p.host_threads, 16);
    assert_string_equal(p.storage_kind, "tmpfs");
    assert_true(p.storage_read_gbps == 34.7 && p.storage_write_gbps == 1.97);
    /* Both sections are optional: without them nothing of the host is modelled. */
    static const struct mod no_host[] = {{NULL, "host_memory", -1, NULL, NULL, NULL},
                                         {NULL, "storage", -1, NULL, NULL, NULL}};
    for (int i = 0; i < 2; i++) {
        char path[64];
        write_variant(&no_host[i], path, sizeof(path));
        struct ferry_sim_profile r;
        assert_int_equal(ferry__sim_profile_load(path, &r), 0);
        unlink(path);
        assert_true(i == 0 ? r.host_memory_gbps == 0.0 && r.host_threads == 0
                           : r.storage_kind[0] == '\0' && r.storage_read_gbps == 0.0);
    }
    struct ferry_sim_profile q;
    assert_int_equal(ferry__sim_profile_load_default(&q), 0);
    assert_int_equal(q.sms, 132);

    ferry_be_device_t *dev = open_dev(NULL); /* the built-in search */
    ferry_device_props_t props = FERRY_DEVICE_PROPS_INIT;
    assert_int_equal(be->device_props(dev, &props), 0);
    assert_string_equal(props.name, "NVIDIA H200 (simulated)");
    assert_string_equal(props.backend, "sim");
    assert_string_equal(props.driver_version, "simulated");
    assert_true(props.simulated);
    assert_int_equal(props.sms, 132);
    assert_int_equal(props.cc_major, 9);
    assert_int_equal(props.cc_minor, 0);
    assert_int_equal(props.copy_engines, 3);
    assert_int_equal(props.max_resident_grids, 128);
    assert_int_equal(props.priority_least, 0);
    assert_int_equal(props.priority_greatest, -5);
    assert_int_equal(props.pcie_gen, 5);
    assert_int_equal(props.pcie_width, 16);
    assert_true(props.link_gbps == 63.0);
    assert_true(props.memory_bytes > (uint64_t)139 << 30);
    assert_true(strstr(props.profile, "h200.json") != NULL);
    assert_int_equal(ferry__sim_connections(dev), 8);
    assert_int_equal(be->now_ns(dev), 0);
    assert_null(be->stream_native(NULL));
    ferry_device_props_t small = {.size = 8};
    assert_int_equal(be->device_props(dev, &small), FERRY_EINVAL);
    be->device_close(dev);

    int count = 0;
    char why[256];
    assert_int_equal(be->device_count(NULL, &count, why, sizeof(why)), 0);
    assert_int_equal(count, 1);
    /* The count is the given profile's "devices", not the built-in profile's. */
    static const struct mod two = {NULL, "devices", -1, NULL, "2", NULL};
    char two_path[64];
    write_variant(&two, two_path, sizeof(two_path));
    assert_int_equal(be->device_count(two_path, &count, why, sizeof(why)), 0);
    assert_int_equal(count, 2);
    ferry_be_open_params_t two_params = {.profile_path = two_path};
    assert_int_equal(be->device_open(1, &two_params, &dev), 0);
    be->device_close(dev);
    unlink(two_path);
    ferry_be_open_params_t params = {.profile_path = FERRY_TEST_PROFILE};
    assert_int_equal(be->device_open(1, &params, &dev), FERRY_ENODEV);
    assert_string_equal(be->name, "sim");
    assert_int_equal(be->abi, FERRY_BACKEND_ABI);
    assert_int_equal(be->caps, FERRY_BE_CAP_VIRTUAL_CLOCK | FERRY_BE_CAP_HOST_COST);
}

/* ---- determinism ------------------------------------------------------------------------- */

#define RW_STREAMS 6
#define RW_EVENTS  4
#define RW_OPS     400

/* A seeded random mix of copies, kernels, records and waits; returns every record's time. */
static void random_workload(uint64_t seed, uint64_t *times, unsigned char *digest)
{
    rng_state = seed;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    ferry_be_stream_t *s[RW_STREAMS];
    ferry_be_event_t *e[RW_EVENTS];
    size_t n = 1 << 20;
    unsigned char *h = malloc(n * 2);
    void *d;
    assert_int_equal(be->mem_alloc(dev, n, &d), 0);
    assert_int_equal(be->host_register(dev, h, n), 0); /* the second half stays pageable */
    for (size_t i = 0; i < 2 * n; i++)
        h[i] = (unsigned char)i;
    for (int i = 0; i < RW_STREAMS; i++)
        assert_int_equal(be->stream_create(dev, -(int)(i % 3), &s[i]), 0);
    for (int i = 0; i < RW_EVENTS; i++)
        assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &e[i]), 0);
    unsigned char key = 0x5c;
    int nt = 0;
    for (int i = 0; i < RW_OPS; i++) {
        ferry_be_stream_t *st = s[rng() % RW_STREAMS];
        size_t bytes = 1 + rng() % n;
        size_t off = (rng() % 2) * n;
        ferry_be_launch_t k = kern(xor_kernel, &key, 1 + (uint32_t)(rng() % 300), rng() % 50000);
        k.args.in = d;
        k.args.out = d;
        k.args.bytes = 4096;
        switch (rng() % 6) {
        case 0: assert_int_equal(be->memcpy_h2d(st, d, h + off, bytes), 0); break;
        case 1: assert_int_equal(be->memcpy_d2h(st, h + off, d, bytes), 0); break;
        case 2:
        case 3: assert_int_equal(be->launch(st, &k), 0); break;
        case 4: assert_int_equal(be->event_record(e[rng() % RW_EVENTS], st), 0); break;
        default: assert_int_equal(be->stream_wait_event(st, e[rng() % RW_EVENTS]), 0); break;
        }
        if (i % 50 == 49) {
            size_t which;
            assert_int_equal(be->event_wait_any(e, RW_EVENTS, UINT64_MAX, &which), 0);
            times[nt++] = be->now_ns(dev);
        }
    }
    for (int i = 0; i < RW_STREAMS; i++)
        assert_int_equal(be->stream_sync(s[i]), 0);
    times[nt++] = be->now_ns(dev);
    memcpy(digest, h, 64);
    for (int i = 0; i < RW_EVENTS; i++)
        be->event_destroy(e[i]);
    for (int i = 0; i < RW_STREAMS; i++)
        be->stream_destroy(s[i]);
    be->device_close(dev);
    free(h);
}

static void test_deterministic(void **state)
{
    (void)state;
    uint64_t a[RW_OPS / 50 + 1], b[RW_OPS / 50 + 1];
    unsigned char da[64], db[64];
    seed_rng(7);
    uint64_t seed = rng_state;
    random_workload(seed, a, da);
    random_workload(seed, b, db);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_equal(da, db, sizeof(da));
    for (size_t i = 1; i < sizeof(a) / sizeof(a[0]); i++)
        assert_true(a[i] >= a[i - 1]);
}

/* ---- threads ----------------------------------------------------------------------------- */

#define TH_N   4
#define TH_OPS 300

struct th_arg {
    ferry_be_device_t *dev;
    ferry_be_stream_t *s;
    ferry_be_event_t *e;
    void *d;
    unsigned char *h;
    int rc;
};

static void *th_main(void *p)
{
    struct th_arg *a = p;
    unsigned char key = 0x3d;
    ferry_be_launch_t k = kern(xor_kernel, &key, 8, 2000);
    k.args.in = a->d;
    k.args.out = a->d;
    k.args.bytes = 4096;
    for (int i = 0; i < TH_OPS && a->rc == 0; i++) {
        switch (i % 4) {
        case 0: a->rc = be->memcpy_h2d(a->s, a->d, a->h, 4096); break;
        case 1: a->rc = be->launch(a->s, &k); break;
        case 2: a->rc = be->memcpy_d2h(a->s, a->h, a->d, 4096); break;
        default:
            a->rc = be->event_record(a->e, a->s);
            while (a->rc == 0 && be->event_query(a->e) == FERRY_EAGAIN) {
                size_t which;
                a->rc = be->event_wait_any(&a->e, 1, 1000, &which);
                if (a->rc == FERRY_ETIMEDOUT)
                    a->rc = 0;
            }
            break;
        }
    }
    if (a->rc == 0)
        a->rc = be->stream_sync(a->s);
    return NULL;
}

/* Every op may be called from any thread: four threads drive their own streams at once. */
static void test_threads(void **state)
{
    (void)state;
    ferry_be_device_t *dev = open_dev(FERRY_TEST_PROFILE);
    struct th_arg a[TH_N];
    pthread_t t[TH_N];
    for (int i = 0; i < TH_N; i++) {
        a[i] = (struct th_arg){.dev = dev};
        a[i].h = calloc(1, 4096);
        assert_int_equal(be->host_register(dev, a[i].h, 4096), 0);
        assert_int_equal(be->mem_alloc(dev, 4096, &a[i].d), 0);
        memset(a[i].d, i, 4096);
        assert_int_equal(be->stream_create(dev, 0, &a[i].s), 0);
        assert_int_equal(be->event_create(dev, FERRY_BE_EVENT_TIMING, &a[i].e), 0);
    }
    for (int i = 0; i < TH_N; i++)
        assert_int_equal(pthread_create(&t[i], NULL, th_main, &a[i]), 0);
    for (int i = 0; i < TH_N; i++)
        pthread_join(t[i], NULL);
    struct ferry_sim_stats st;
    assert_int_equal(ferry__sim_stats(dev, &st), 0);
    assert_int_equal(st.ops_submitted, (uint64_t)TH_N * TH_OPS);
    assert_int_equal(st.ops_completed, st.ops_submitted);
    assert_int_equal(st.kernels, (uint64_t)TH_N * TH_OPS / 4);
    for (int i = 0; i < TH_N; i++) {
        assert_int_equal(a[i].rc, 0);
        /* h2d, xor, d2h 75 times over zeros: an odd number of xors leaves the key. */
        assert_int_equal(a[i].h[100], 0x3d);
        be->event_destroy(a[i].e);
        be->stream_destroy(a[i].s);
        be->mem_free(dev, a[i].d);
        assert_int_equal(be->host_unregister(dev, a[i].h), 0);
        free(a[i].h);
    }
    be->device_close(dev);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_round_trip_bit_exact),
          cmocka_unit_test(test_copy_checks_device_ranges),
          cmocka_unit_test(test_events_and_stream_wait),
          cmocka_unit_test(test_wait_any_timeout_advances_the_clock),
          cmocka_unit_test(test_host_costs),
          cmocka_unit_test(test_pageable_is_slower_and_synchronous),
          cmocka_unit_test(test_priorities_pick_pending_blocks),
          cmocka_unit_test(test_resident_grid_limit),
          cmocka_unit_test(test_kernel_error_is_reported_not_sticky),
          cmocka_unit_test(test_launch_without_cpu_fn),
          cmocka_unit_test(test_device_memory_exhaustion),
          cmocka_unit_test(test_bad_profiles_rejected), cmocka_unit_test(test_profile_text_errors),
          cmocka_unit_test(test_profile_and_props), cmocka_unit_test(test_deterministic),
          cmocka_unit_test(test_copy_pieces_kernel), cmocka_unit_test(test_threads))
