/* Device sets over random configurations and fault mixes, many seeds: 1 to 4 simulated H200s,
 * random chunk and batch sizes (not multiples of anything), generated or copied input, random
 * queue depth and blocking mode, and faults (kernel errors, sticky errors, hangs, slow links;
 * on every device or on one, whose work then moves to the others) drawn per seed; a third of
 * the seeds add the CPU as one more device (FERRY_DEVICE_CPU, its parts run by the stage's CPU
 * function; when every GPU has left, it takes them all). Whatever happens, every accepted batch
 * is called back exactly once, its output is bit-exact, and the set closes. A bounded budget
 * (seeds), a quarter under sanitizers (FERRY_TEST_SCALE=sanitizer). FERRY_TEST_SEED repeats one
 * seed. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "testlib.h"

#define MAX_BATCHES 40

typedef struct {
    atomic_int calls[MAX_BATCHES];
    atomic_int failed;
} tally_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    tally_t *t = arg;
    if (r->id < MAX_BATCHES)
        atomic_fetch_add(&t->calls[r->id], 1);
    if (r->status != 0)
        atomic_fetch_add(&t->failed, 1);
}

/* Input made in the slots from its offsets (prepare): byte k of batch b is k * 13 + b. */
static int gen(void *slot, size_t bytes, size_t offset, void *arg)
{
    unsigned b = *(const unsigned *)arg;
    unsigned char *p = slot;
    for (size_t j = 0; j < bytes; j++)
        p[j] = (unsigned char)((offset + j) * 13 + b);
    return 0;
}

static void one_seed(uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    int ndev = (int)test_rand_range(&rng, 1, 4);
    size_t chunk = (size_t)test_rand_range(&rng, 64u << 10, 2u << 20);
    size_t maxb = (size_t)test_rand_range(&rng, 1, 6u << 20);
    unsigned nb = (unsigned)test_rand_range(&rng, 1, MAX_BATCHES);
    static const char *const faults[] = {"",
                                         "kernel@p=0.05",
                                         "sticky@n=7",
                                         "kernel@p=0.02,sticky@n=20",
                                         "hang@n=9",
                                         "slow@n=3:x=4",
                                         "kernel@p=0.1,hang@p=0.02",
                                         "sticky@n=5:dev=0",
                                         "kernel@p=0.05,sticky@n=9:dev=1",
                                         "hang@n=6:dev=0,sticky@n=12:dev=1"};
    const char *inject = faults[test_rand_range(&rng, 0, sizeof(faults) / sizeof(faults[0]) - 1)];
    if (ndev < 2 && strstr(inject, "dev=1") != NULL) /* no device 1: the one device instead */
        inject = "sticky@n=5:dev=0";
    char depth[16];
    snprintf(depth, sizeof(depth), "%u", (unsigned)test_rand_range(&rng, 1, 4 * ndev + 4));
    const char *kv[] = {"inject", inject, "queue_depth", depth, NULL};

    cJSON *root = test_profile_json();
    cJSON_DeleteItemFromObjectCaseSensitive(root, "devices");
    cJSON_AddNumberToObject(root, "devices", ndev);
    char path[64];
    test_write_json(root, "/tmp/ferry-setfuzz-XXXXXX", path, sizeof(path));
    cJSON_Delete(root);
    ferry_runtime_t *rt = test_sim_runtime_on(path, kv);
    ferry_device_t *devs[5];
    for (int i = 0; i < ndev; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    /* drawn apart from rng, so that the seeds without the CPU keep their configurations */
    bool with_cpu = (seed * 0x2545f4914f6cdd1dull >> 33) % 3 == 0;
    if (with_cpu) {
        assert_int_equal(ferry_device_get(rt, FERRY_DEVICE_CPU, &devs[ndev]), 0);
        /* first or last: the CPU's place in the list changes the parts' order */
        if (seed % 2 == 0) {
            ferry_device_t *c = devs[ndev];
            memmove(&devs[1], &devs[0], (size_t)ndev * sizeof(devs[0]));
            devs[0] = c;
        }
    }
    unlink(path);

    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, &st, chunk);
    pc.devices = devs;
    pc.ndevices = (unsigned)ndev + with_cpu;
    pc.nonblocking = (int)test_rand_range(&rng, 0, 1);
    ferry_pipeline_t *p = test_pipeline(&pc);
    print_message(
        "seed %llu: %d device(s)%s, chunk %zu, %u batch(es) up to %zu, '%s', depth %s, %s\n",
        (unsigned long long)seed, ndev, with_cpu ? " and the CPU" : "", chunk, nb, maxb, inject,
        depth, pc.nonblocking ? "nonblocking" : "blocking");

    size_t sizes[MAX_BATCHES];
    unsigned char *in[MAX_BATCHES], *out[MAX_BATCHES];
    unsigned ids[MAX_BATCHES];
    tally_t t;
    memset(&t, 0, sizeof(t));
    for (unsigned i = 0; i < nb; i++) {
        sizes[i] = (size_t)test_rand_range(&rng, 0, maxb);
        in[i] = malloc(sizes[i] + 1);
        out[i] = malloc(sizes[i] + 1);
        assert_non_null(in[i]);
        assert_non_null(out[i]);
        ids[i] = i;
        bool prepared = test_rand_range(&rng, 0, 1) == 1 && sizes[i] > 0;
        for (size_t k = 0; k < sizes[i]; k++)
            in[i][k] = (unsigned char)(k * 13 + i);
        memset(out[i], 0xee, sizes[i] + 1);
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.bytes = sizes[i];
        b.out = out[i];
        if (prepared) {
            b.prepare = gen;
            b.prepare_arg = &ids[i];
        } else {
            b.in = in[i];
        }
        uint64_t id = 0;
        int rc;
        while ((rc = ferry_pipeline_submit(p, &b, on_done, &t, &id)) == FERRY_EAGAIN)
            usleep(100); /* nonblocking and full: retry, as a caller would */
        assert_int_equal(rc, 0);
        assert_int_equal(id, i);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    for (unsigned i = 0; i < nb; i++) {
        if (atomic_load(&t.calls[i]) != 1)
            fail_msg("seed %llu: batch %u called back %d times", (unsigned long long)seed, i,
                     atomic_load(&t.calls[i]));
        if (memcmp(out[i], in[i], sizes[i]) != 0)
            fail_msg("seed %llu: batch %u (%zu bytes) differs", (unsigned long long)seed, i,
                     sizes[i]);
        assert_int_equal(out[i][sizes[i]], 0xee); /* nothing written past the end */
        free(in[i]);
        free(out[i]);
    }
    assert_int_equal(atomic_load(&t.failed), 0);
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.batches_done_gpu + s.batches_done_cpu, nb);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

static void test_random_sets(void **state)
{
    (void)state;
    const char *one = getenv("FERRY_TEST_SEED");
    if (one != NULL && one[0] != '\0') {
        one_seed(test_seed(1));
        return;
    }
    const char *scale = getenv("FERRY_TEST_SCALE");
    unsigned seeds = scale != NULL && strcmp(scale, "sanitizer") == 0 ? 25 : 100;
    for (unsigned i = 1; i <= seeds; i++)
        one_seed(i);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_random_sets))
