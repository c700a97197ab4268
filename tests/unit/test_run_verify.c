/* `ferry run`'s verifier (tools/ferry/run_verify.c) driven directly: a batch of the generated
 * pool is checked against the digests of its reference, a wrong byte anywhere in it (any digest
 * block, the short last block) is caught and its offset in the stream reported exactly, short
 * batches fall back to the CPU reference, and --verify sample and off check what they say; the
 * verifier threads share a batch's units and still report each batch once, exactly. */
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "testlib.h"

/* Three digest blocks per batch, the last one short; three batches in the pool. */
#define BATCH ((size_t)2 * RUN_DIGEST_BLOCK + 4000)
#define SLOTS 3

static ferry_workload_t *wl;
static unsigned char *pool, *out, *scratch;
static uint64_t *digests;
static run_state_t st;

static int setup(void **state)
{
    (void)state;
    ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
    if (ferry_workload_create("scale", &wp, &wl) != 0)
        return -1;
    pool = malloc(SLOTS * BATCH);
    out = malloc(BATCH);
    scratch = malloc(BATCH);
    digests = calloc(SLOTS * run_digest_blocks(BATCH), sizeof(uint64_t));
    if (!pool || !out || !scratch || !digests)
        return -1;
    if (!run_make_reference(7, wl, pool, SLOTS * BATCH, BATCH, digests))
        return -1;
    st = (run_state_t){.wl = wl,
                       .digests = digests,
                       .blocks_per_batch = run_digest_blocks(BATCH),
                       .batch_bytes = BATCH,
                       .last_seq = 40};
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ferry_workload_destroy(wl);
    free(pool);
    free(out);
    free(scratch);
    free(digests);
    return 0;
}

/* Batch @seq of the stream, from pool slot @slot, with the right output. */
static ring_entry_t entry(uint64_t seq, size_t slot, size_t bytes)
{
    ring_entry_t e = {.in = pool + slot * BATCH, .out = out, .bytes = bytes};
    e.offset = seq * BATCH;
    e.pool_off = slot * BATCH;
    e.seq = seq;
    ferry_workload_reference(wl, e.in, out, bytes);
    return e;
}

static void good_batches_match(void **state)
{
    (void)state;
    st.verify = RUN_VERIFY_FULL;
    assert_int_equal(run_digest_blocks(BATCH), 3);
    for (size_t slot = 0; slot < SLOTS; slot++) {
        ring_entry_t e = entry(slot, slot, BATCH);
        run_totals_t t = {0};
        assert_true(run_verify_batch(&st, &e, scratch, &t));
        assert_int_equal(t.verified_bytes, BATCH);
        assert_int_equal(t.done_bytes, BATCH);
        assert_int_equal(t.checked, 1);
        assert_int_equal(t.mismatched, 0);
        assert_int_equal(t.ok_gpu, 1);
    }
    /* the output of another slot is not this one's: caught at the first byte that differs */
    ring_entry_t e = entry(5, 2, BATCH);
    ferry_workload_reference(wl, pool + BATCH, out, BATCH);
    unsigned char *want = malloc(BATCH);
    assert_non_null(want);
    ferry_workload_reference(wl, e.in, want, BATCH);
    size_t k = 0;
    while (want[k] == out[k])
        k++;
    free(want);
    run_totals_t t = {0};
    assert_false(run_verify_batch(&st, &e, scratch, &t));
    assert_int_equal(t.mismatched, 1);
    assert_int_equal(t.first_bad_offset, 5 * BATCH + k);
}

/* One wrong byte (a flipped bit) at each of these places in a batch: the first, inside each
 * block, at the blocks' edges, in the short last block, the last byte. */
static void wrong_byte_found_exactly(void **state)
{
    (void)state;
    st.verify = RUN_VERIFY_FULL;
    const size_t at[] = {0,
                         1,
                         4095,
                         RUN_DIGEST_BLOCK - 1,
                         RUN_DIGEST_BLOCK,
                         RUN_DIGEST_BLOCK + 12345,
                         2 * RUN_DIGEST_BLOCK,
                         2 * RUN_DIGEST_BLOCK + 3999,
                         BATCH - 1};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        ring_entry_t e = entry(9, i % SLOTS, BATCH);
        out[at[i]] ^= 0x10;
        /* a second wrong byte later: the first is reported */
        if (at[i] + 100 < BATCH)
            out[at[i] + 100] ^= 0x01;
        run_totals_t t = {0};
        assert_false(run_verify_batch(&st, &e, scratch, &t));
        assert_int_equal(t.mismatched, 1);
        assert_int_equal(t.verified_bytes, 0);
        assert_int_equal(t.first_bad_offset, 9 * BATCH + at[i]);
    }
}

/* A short last batch is checked against the CPU reference of its input, offset exact too. */
static void short_batch_uses_the_cpu_reference(void **state)
{
    (void)state;
    st.verify = RUN_VERIFY_FULL;
    ring_entry_t e = entry(40, 0, BATCH - 1001);
    run_totals_t t = {0};
    assert_true(run_verify_batch(&st, &e, scratch, &t));
    assert_int_equal(t.verified_bytes, BATCH - 1001);
    out[777777] ^= 0x80;
    t = (run_totals_t){0};
    assert_false(run_verify_batch(&st, &e, scratch, &t));
    assert_int_equal(t.first_bad_offset, 40 * BATCH + 777777);
}

/* sample: batches 0, 16, 32 ... and the last are checked, the others only counted; off: none. */
static void sample_and_off(void **state)
{
    (void)state;
    st.verify = RUN_VERIFY_SAMPLE;
    for (uint64_t seq = 0; seq <= 40; seq++) {
        ring_entry_t e = entry(seq, seq % SLOTS, BATCH);
        out[100] ^= 1;
        run_totals_t t = {0};
        bool checked = seq % RUN_VERIFY_SAMPLE_EVERY == 0 || seq == 40;
        assert_int_equal(run_verify_batch(&st, &e, scratch, &t), !checked);
        assert_int_equal(t.checked, checked);
        assert_int_equal(t.mismatched, checked);
        assert_int_equal(t.done_bytes, BATCH);
    }
    st.verify = RUN_VERIFY_OFF;
    ring_entry_t e = entry(0, 0, BATCH);
    out[0] ^= 1;
    run_totals_t t = {0};
    assert_true(run_verify_batch(&st, &e, scratch, &t));
    assert_int_equal(t.checked, 0);
    assert_int_equal(t.verified_bytes, 0);
    assert_int_equal(t.done_bytes, BATCH);
    /* a batch that did not complete is a failure whatever --verify says */
    e.status = FERRY_EBACKEND;
    t = (run_totals_t){0};
    assert_false(run_verify_batch(&st, &e, scratch, &t));
    assert_int_equal(t.failed, 1);
    assert_int_equal(t.done_bytes, 0);
    assert_string_equal(run_verify_name(RUN_VERIFY_SAMPLE), "sample");
}

/* The verifier threads share a batch by units (take_unit in run_verify.c): four of them check
 * batches one at a time, each batch with 0 to 3 wrong bytes at random (a unit each, or two in
 * one): the first is reported exactly, once per batch, a good batch's bytes all count, and a
 * short batch (the CPU reference) the same. */
static void verifiers_share_a_batch(void **state)
{
    (void)state;
    run_state_t s = st;
    s.verify = RUN_VERIFY_FULL;
    s.nring = 2;
    ring_entry_t ring[2];
    size_t freeq[2], doneq[2];
    s.ring = ring;
    s.freeq = freeq;
    s.doneq = doneq;
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cv_free, NULL);
    pthread_cond_init(&s.cv_done, NULL);
    pthread_t th[4];
    unsigned n = 0;
    while (n < 4) /* one helper thread per call on a small machine */
        n += run_verifiers_start(&s, th + n, 4 - n);
    uint64_t rng = 12345;
    for (uint64_t seq = 0; seq < 60; seq++) {
        size_t bytes = seq % 7 == 6 ? BATCH - 4 * (seq + 1) : BATCH; /* some short ones */
        ring_entry_t e = entry(seq, seq % SLOTS, bytes);
        unsigned wrong = (unsigned)(seq % 4);
        for (unsigned w = 0; w < wrong; w++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            out[(size_t)(rng >> 20) % bytes] ^= 0x04;
        }
        pthread_mutex_lock(&s.lock);
        s.t = (run_totals_t){0};
        s.nfree = 0;
        ring[0] = e;
        cb_ctx_t c = {&s, 0};
        pthread_mutex_unlock(&s.lock);
        ferry_batch_result_t r = {.status = 0, .where = FERRY_DONE_GPU};
        run_on_done(&r, &c);
        pthread_mutex_lock(&s.lock);
        while (s.nfree == 0)
            pthread_cond_wait(&s.cv_free, &s.lock);
        /* the first wrong byte (a bit flipped twice is right again) */
        unsigned char *want = malloc(bytes);
        assert_non_null(want);
        ferry_workload_reference(wl, e.in, want, bytes);
        size_t first = 0;
        while (first < bytes && want[first] == out[first])
            first++;
        free(want);
        assert_int_equal(s.t.mismatched, first < bytes);
        assert_int_equal(s.t.checked, 1);
        assert_int_equal(s.t.verified_bytes, first < bytes ? 0 : bytes);
        if (first < bytes)
            assert_int_equal(s.t.first_bad_offset, seq * BATCH + first);
        assert_true(ring[0].vunits >= 1 && ring[0].vleft == 0);
        pthread_mutex_unlock(&s.lock);
    }
    run_verifiers_stop(&s, th, &n);
    assert_int_equal(n, 0);
    free(s.lat_ns);
    pthread_cond_destroy(&s.cv_done);
    pthread_cond_destroy(&s.cv_free);
    pthread_mutex_destroy(&s.lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_batches_match),
        cmocka_unit_test(wrong_byte_found_exactly),
        cmocka_unit_test(short_batch_uses_the_cpu_reference),
        cmocka_unit_test(sample_and_off),
        cmocka_unit_test(verifiers_share_a_batch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
