/* A pipeline over a set of devices (ferry_pipeline_config_t.devices) on a profile of two
 * simulated H200s, through the public API: every batch comes back exactly once and bit-exact
 * (the scale workload's CPU reference) however its parts were cut; two devices stream at
 * least 1.95x one (both measured here, virtual time); the shares follow the rates; prepare
 * sees offsets in the whole batch; a sticky fault on every device leaves none of the set and
 * loses no batch; bad sets are refused with the reason; the calls from a callback follow a
 * pipeline's rules. A machine's host memory is shared by its devices: a set stays under it and
 * reaches it, and a host above the links does not slow two devices. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "testlib.h"

/* Batches per stream(): 24, or 12 under sanitizers (FERRY_TEST_SCALE=sanitizer: the same
 * code, run 5-20x slower). */
#define NB_MAX 24
static int NB = NB_MAX;

typedef struct run {
    atomic_int calls[NB_MAX]; /* per batch id (from 0) */
    atomic_int failed, cpu;
} run_t;

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    run_t *rn = arg;
    if (r->id < NB_MAX)
        atomic_fetch_add(&rn->calls[r->id], 1);
    if (r->status != 0)
        atomic_fetch_add(&rn->failed, 1);
    if (r->where == FERRY_DONE_CPU)
        atomic_fetch_add(&rn->cpu, 1);
}

/* The in-tree profile with "devices": @n, in a temporary file (@path; the caller unlinks). */
static void profile_of(int n, char *path, size_t len)
{
    cJSON *root = test_profile_json();
    cJSON_DeleteItemFromObjectCaseSensitive(root, "devices");
    cJSON_AddNumberToObject(root, "devices", n);
    test_write_json(root, "/tmp/ferry-set-XXXXXX", path, len);
    cJSON_Delete(root);
}

/* A runtime on @n simulated H200s (with the options @kv), its devices opened into @devs. */
static ferry_runtime_t *set_runtime(int n, const char *const *kv, ferry_device_t **devs)
{
    char path[64];
    profile_of(n, path, sizeof(path));
    ferry_runtime_t *rt = test_sim_runtime_on(path, kv);
    for (int i = 0; i < n; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    unlink(path); /* read when a device opens */
    return rt;
}

/* Stream NB batches of @batch bytes of random floats through scale on @devs (@n of them: a
 * set when n > 1, else the one device's own pipeline); check every output against the CPU
 * reference and every callback once. Returns the stats. */
static ferry_pipeline_stats_t stream(ferry_device_t **devs, unsigned n, size_t batch,
                                     ferry_pipeline_t **keep)
{
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_config_t pc =
        test_pipeline_config(n > 1 ? NULL : devs[0], ferry_workload_stage(wl), 4u << 20);
    if (n > 1) {
        pc.devices = devs;
        pc.ndevices = n;
    }
    ferry_pipeline_t *p = test_pipeline(&pc);
    const char *scale = getenv("FERRY_TEST_SCALE");
    NB = scale != NULL && strcmp(scale, "sanitizer") == 0 ? NB_MAX / 2 : NB_MAX;
    unsigned char *in = malloc(NB * batch), *out = malloc(NB * batch), *ref = malloc(batch);
    assert_non_null(in);
    assert_non_null(out);
    assert_non_null(ref);
    uint64_t seed = 42;
    test_fill_floats(in, NB * batch, &seed);
    memset(out, 0, NB * batch);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    for (int i = 0; i < NB; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in + (size_t)i * batch;
        b.out = out + (size_t)i * batch;
        b.bytes = batch;
        uint64_t id = 0;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &rn, &id), 0);
        assert_int_equal(id, (uint64_t)i);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    for (int i = 0; i < NB; i++) {
        if (atomic_load(&rn.calls[i]) != 1)
            print_message("set of %u: batch %d called back %d times\n", n, i,
                          atomic_load(&rn.calls[i]));
        assert_int_equal(atomic_load(&rn.calls[i]), 1);
    }
    assert_int_equal(atomic_load(&rn.failed), 0);
    for (int i = 0; i < NB; i++) {
        assert_int_equal(ferry_workload_reference(wl, in + (size_t)i * batch, ref, batch), 0);
        assert_memory_equal(out + (size_t)i * batch, ref, batch);
    }
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &s), 0);
    assert_int_equal(s.batches_submitted, NB);
    assert_int_equal(s.batches_done_gpu + s.batches_done_cpu, NB);
    free(in);
    free(out);
    free(ref);
    if (keep != NULL) {
        *keep = p;
    } else {
        assert_int_equal(ferry_pipeline_destroy(p), 0);
    }
    ferry_workload_destroy(wl);
    return s;
}

static void no_op(const ferry_op_record_t *o, void *arg)
{
    (void)o;
    (void)arg;
}

static void test_two_devices_double_the_rate(void **state)
{
    (void)state;
    ferry_device_t *devs[2];
    ferry_runtime_t *rt = set_runtime(2, NULL, devs);
    ferry_pipeline_stats_t one = stream(devs, 1, 32u << 20, NULL);
    /* Virtual time, but the host feeds the devices: a part that reaches a member after it has
     * drained its pipeline (the set's thread descheduled on a loaded host: 1.664x once beside
     * the other tests on two cores) starts a fresh one. The host can only take rate away, so
     * the best of up to three runs stands for the model. */
    ferry_pipeline_t *p = NULL;
    double ratio = 0;
    for (int attempt = 0; attempt < 3 && ratio < 1.95; attempt++) {
        if (p != NULL)
            assert_int_equal(ferry_pipeline_destroy(p), 0);
        ferry_pipeline_stats_t two = stream(devs, 2, 32u << 20, &p);
        double r = two.gbps_h2d / one.gbps_h2d;
        print_message("one H200 %.2f GB/s, two %.2f GB/s: %.3fx\n", one.gbps_h2d, two.gbps_h2d, r);
        ratio = r > ratio ? r : ratio;
    }
    assert_true(ratio >= 1.95);
    assert_int_equal(ferry_pipeline_devices(p), 2);
    double shares = 0;
    for (unsigned i = 0; i < 2; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, i, &d), 0);
        print_message("device %d %s: %llu bytes in %llu parts, share %.3f, model %.1f GB/s\n",
                      d.index, d.name, (unsigned long long)d.bytes, (unsigned long long)d.parts,
                      d.share, d.model_gbps);
        assert_int_equal(d.index, (int)i);
        assert_false(d.left);
        assert_true(d.share > 0.4 && d.share < 0.6); /* equal devices, equal shares */
        assert_true(d.model_gbps > 30 && d.model_gbps < 60);
        shares += d.share;
    }
    assert_true(shares > 0.999 && shares < 1.001);
    ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
    assert_int_equal(ferry_pipeline_device_stats(p, 2, &d), FERRY_EINVAL);
    /* tracing off: no trace (a set writes its devices' when on: cli.run_devices), no ops */
    assert_int_equal(ferry_pipeline_write_trace(p, "/tmp/x.json"), FERRY_ESTATE);
    assert_int_equal(ferry_pipeline_ops(p, no_op, NULL), FERRY_ESTATE);
    assert_int_equal(ferry_pipeline_close(p), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    ferry_pipeline_stats_t fin = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &fin), 0);
    assert_int_equal(fin.batches_submitted, NB);
    ferry_batch_t b = FERRY_BATCH_INIT;
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &rn, NULL), FERRY_ECLOSED);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

typedef struct op_tally {
    uint64_t batch_bytes[NB_MAX]; /* per set batch: H2D bytes of the GPUs, the CPU's parts */
    uint64_t dev_bytes[3], dev_ops[3], kinds[3][3];
    unsigned bad;
} op_tally_t;

static void tally_op(const ferry_op_record_t *o, void *arg)
{
    op_tally_t *t = arg;
    if (o->size != sizeof(*o) || o->device >= 3 || o->batch >= NB_MAX || o->end_ns < o->start_ns ||
        (unsigned)o->kind > 2 || o->chunks < 1) {
        t->bad++;
        return;
    }
    t->kinds[o->device][o->kind]++;
    t->dev_ops[o->device]++;
    bool counts = o->device == 2 ? o->kind == FERRY_OP_COMPUTE : o->kind == FERRY_OP_H2D;
    if (counts) {
        t->batch_bytes[o->batch] += o->bytes;
        t->dev_bytes[o->device] += o->bytes;
    }
}

/* ferry_pipeline_ops on a set of two GPUs and the CPU, tracing on: the ops carry the set's
 * batch ids and the device that ran them; every batch's bytes are covered once (the GPUs' H2D
 * ops and the CPU's parts); each device's ops add up to its bytes in the device stats; the
 * CPU's are one compute op per part. */
static void test_set_ops(void **state)
{
    (void)state;
    ferry_device_t *devs[3];
    const char *kv[] = {"trace", "1", NULL};
    ferry_runtime_t *rt = set_runtime(2, kv, devs);
    assert_int_equal(ferry_device_get(rt, FERRY_DEVICE_CPU, &devs[2]), 0);
    ferry_workload_t *wl = test_workload("scale");
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, ferry_workload_stage(wl), 4u << 20);
    pc.devices = devs;
    pc.ndevices = 3;
    ferry_pipeline_t *p = test_pipeline(&pc);
    const char *scale = getenv("FERRY_TEST_SCALE");
    int nb = scale != NULL && strcmp(scale, "sanitizer") == 0 ? NB_MAX / 2 : NB_MAX;
    size_t batch = 32u << 20;
    unsigned char *in = calloc(nb, batch), *out = malloc(nb * batch);
    assert_non_null(in);
    assert_non_null(out);
    run_t rn;
    memset(&rn, 0, sizeof(rn));
    for (int i = 0; i < nb; i++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in + (size_t)i * batch;
        b.out = out + (size_t)i * batch;
        b.bytes = batch;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &rn, NULL), 0);
        if (i < 2) /* the CPU's probes (a tail, then a chunk) come back before the rest */
            assert_int_equal(ferry_pipeline_drain(p), 0);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
    op_tally_t t;
    memset(&t, 0, sizeof(t));
    assert_int_equal(ferry_pipeline_ops(p, tally_op, &t), 0);
    assert_int_equal(t.bad, 0);
    for (int i = 0; i < nb; i++) {
        if (t.batch_bytes[i] != batch)
            fail_msg("batch %d: its ops cover %llu bytes of %zu", i,
                     (unsigned long long)t.batch_bytes[i], batch);
    }
    for (unsigned i = 0; i < 3; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, i, &d), 0);
        print_message("device %d: %llu bytes in %llu parts; %llu ops, %llu bytes\n", d.index,
                      (unsigned long long)d.bytes, (unsigned long long)d.parts,
                      (unsigned long long)t.dev_ops[i], (unsigned long long)t.dev_bytes[i]);
        assert_int_equal(t.dev_bytes[i], d.bytes);
        if (i < 2) { /* a GPU: three kinds of op, H2D and D2H alike */
            assert_true(t.kinds[i][FERRY_OP_H2D] > 0);
            assert_int_equal(t.kinds[i][FERRY_OP_H2D], t.kinds[i][FERRY_OP_D2H]);
        } else { /* the CPU: a compute op per part (where its function runs too slowly for a
                  * share, under sanitizers or beside a loaded host: then none, no op, and its
                  * note says why) */
            if (d.parts == 0)
                assert_non_null(strstr(d.note, "took no work: "));
            assert_int_equal(t.dev_ops[i], d.parts);
            assert_int_equal(t.kinds[i][FERRY_OP_COMPUTE], d.parts);
        }
    }
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_workload_destroy(wl);
    free(in);
    free(out);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* A batch's bytes made by prepare from their offsets in the whole batch, whatever chunk or part
 * they fall in: byte k is k * 7 + (k >> 13). */
static int gen_bytes(void *slot, size_t bytes, size_t offset, void *arg)
{
    (void)arg;
    unsigned char *p = slot;
    for (size_t j = 0; j < bytes; j++)
        p[j] = (unsigned char)((offset + j) * 7 + ((offset + j) >> 13));
    return 0;
}

/* Batches of sizes that are not whole chunks, small ones, empty ones and generated ones: each
 * part's prepare gets offsets in the whole batch. */
static void test_odd_sizes_and_prepare(void **state)
{
    (void)state;
    ferry_device_t *devs[3];
    ferry_runtime_t *rt = set_runtime(3, NULL, devs);
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, &st, 1u << 20);
    pc.devices = devs;
    pc.ndevices = 3;
    ferry_pipeline_t *p = test_pipeline(&pc);
    static const size_t sizes[] = {
        0, 1, 4095, 1u << 20, (1u << 20) + 3, 5u << 20, 13u << 20, (17u << 20) + 12345};
    uint64_t seed = 7;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        unsigned char *out = malloc(n + 1), *want = malloc(n + 1), *in = malloc(n + 1);
        assert_non_null(out);
        assert_non_null(want);
        assert_non_null(in);
        bool gen = test_rand_range(&seed, 0, 1) == 1 || n == 0;
        for (size_t i = 0; i < n; i++)
            want[i] = (unsigned char)(i * 7 + (i >> 13));
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.out = out;
        b.bytes = n;
        if (gen) { /* made in the slots by prepare */
            b.prepare = n > 0 ? gen_bytes : NULL;
        } else { /* from the caller's buffer */
            b.in = in;
            memcpy(in, want, n);
        }
        run_t rn;
        memset(&rn, 0, sizeof(rn));
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, &rn, NULL), 0);
        assert_int_equal(ferry_pipeline_drain(p), 0);
        assert_int_equal(atomic_load(&rn.failed), 0);
        assert_memory_equal(out, want, n);
        free(out);
        free(want);
        free(in);
    }
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* Every device goes sticky at its 6th kernel: each leaves the set, its pipeline finishes on the
 * CPU, and every batch still comes back once and right. */
static void test_sticky_devices_leave(void **state)
{
    (void)state;
    const char *kv[] = {"inject", "sticky@n=6", NULL};
    ferry_device_t *devs[2];
    ferry_runtime_t *rt = set_runtime(2, kv, devs);
    ferry_pipeline_t *p = NULL;
    ferry_pipeline_stats_t s = stream(devs, 2, 8u << 20, &p);
    assert_true(s.gpu_lost);
    assert_true(s.batches_done_cpu > 0);
    for (unsigned i = 0; i < 2; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, i, &d), 0);
        print_message("device %u: left %d (%s), %llu parts, %llu on the CPU\n", i, d.left, d.why,
                      (unsigned long long)d.parts, (unsigned long long)d.parts_cpu);
        assert_true(d.left);
        assert_non_null(strstr(d.why, "sticky"));
    }
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* One device of three goes sticky at its 4th kernel (dev=1; early, so that it holds parts then
 * in every build): it leaves the set, and what it held
 * (parts queued, chunks in flight) runs on the other two instead of its CPU path: every batch
 * once and right, no chunk on the CPU, the bytes it gave up counted as moved, and the set keeps
 * about the rate of the two left (at least 1.5x one device, 1.25x under sanitizers: its clock,
 * as theirs, is virtual). */
static void test_lost_device_moves_to_others(void **state)
{
    (void)state;
    const char *kv[] = {"inject", "sticky@n=4:dev=1", NULL};
    ferry_device_t *devs[3];
    ferry_runtime_t *rt = set_runtime(3, kv, devs);
    ferry_pipeline_t *p = NULL;
    const char *scale = getenv("FERRY_TEST_SCALE");
    size_t batch = scale != NULL && strcmp(scale, "sanitizer") == 0 ? 8u << 20 : 16u << 20;
    ferry_pipeline_stats_t s = stream(devs, 3, batch, &p);
    assert_true(s.gpu_lost);
    assert_int_equal(s.chunks_cpu, 0);
    assert_int_equal(s.batches_done_cpu, 0);
    assert_true(s.chunks_moved > 0);
    uint64_t bytes = 0;
    for (unsigned i = 0; i < 3; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, i, &d), 0);
        print_message("device %u: left %d (%s), %llu bytes, %llu parts (%llu on the CPU), %llu "
                      "moved\n",
                      i, d.left, d.why, (unsigned long long)d.bytes, (unsigned long long)d.parts,
                      (unsigned long long)d.parts_cpu, (unsigned long long)d.bytes_moved);
        assert_int_equal(d.left, i == 1);
        assert_int_equal(d.parts_cpu, 0);
        assert_true(i == 1 ? d.bytes_moved > 0 : d.bytes_moved == 0);
        bytes += d.bytes;
    }
    assert_int_equal(bytes, (uint64_t)NB * batch); /* each byte counted once */
    double one = 47.0; /* an H200 of the profile alone, GB/s each way (test_two_devices...) */
    print_message("set of three, one lost: %.1f GB/s\n", s.gbps_h2d);
    /* the survivors both work: 1.5x one device; under sanitizers, whose 12 batches of 8 MiB
     * leave the fill and the drain a larger part of the run (71-79 GB/s seen), 1.25x */
    assert_true(s.gbps_h2d >= (batch < (16u << 20) ? 1.25 : 1.5) * one);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* A fault schedule's dev= past the devices the profile simulates is refused, naming it. */
static void test_inject_dev_out_of_range(void **state)
{
    (void)state;
    char path[64];
    test_profile_with_devices(path, sizeof(path), 2);
    const char *kv[] = {"inject", "sticky@n=3:dev=2", NULL};
    ferry_runtime_t *rt = NULL;
    assert_int_equal(test_sim_runtime_create(path, kv, &rt), FERRY_EINVAL);
    assert_null(rt);
    assert_non_null(strstr(ferry_last_error(), "dev=2"));
    assert_non_null(strstr(ferry_last_error(), "accepted: dev=0 to 1"));
    unlink(path);
}

/* A mixed rig (profiles/h200-a100.json: an H200 beside an A100 PCIe on a Gen4 link, half its
 * rate): the set reaches at least 95% of the sum of the two alone, the H200 taking about two
 * thirds of the bytes. */
static void test_mixed_rig(void **state)
{
    (void)state;
    char path[512];
    test_profile_named("h200-a100.json", path, sizeof(path));
    ferry_runtime_t *rt = test_sim_runtime_on(path, NULL);
    ferry_device_t *devs[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    double alone[2];
    for (int i = 0; i < 2; i++)
        alone[i] = stream(&devs[i], 1, 32u << 20, NULL).gbps_h2d;
    ferry_pipeline_t *p = NULL;
    double set = stream(devs, 2, 32u << 20, &p).gbps_h2d;
    double share0 = 0;
    for (unsigned i = 0; i < 2; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        assert_int_equal(ferry_pipeline_device_stats(p, i, &d), 0);
        print_message("device %d %s: share %.3f, model %.1f GB/s (alone %.1f)\n", d.index, d.name,
                      d.share, d.model_gbps, alone[i]);
        if (i == 0)
            share0 = d.share;
    }
    print_message("H200 %.2f + A100 %.2f = %.2f GB/s alone; the set %.2f (%.1f%%)\n", alone[0],
                  alone[1], alone[0] + alone[1], set, set / (alone[0] + alone[1]) * 100);
    assert_true(alone[1] < 0.55 * alone[0] && alone[1] > 0.45 * alone[0]);
    assert_true(set >= 0.95 * (alone[0] + alone[1]));
    assert_true(share0 > 0.6 && share0 < 0.73);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* A machine of one device (a profile that does not exist: the machine is refused first) with
 * the section host_memory @host and the source @src. */
#define MACHINE_HOST(host, src)                                                                    \
    "{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": " src                          \
    ", \"host_memory\": " host ", \"devices\": [{\"profile\": \"x\"}]}"
#define SRC_BOTH "{\"devices\": \"d\", \"host_memory\": \"h\"}"

/* Machine profiles are parsed as strictly as device profiles: each bad one is refused naming
 * the file and the key, when the runtime counts its devices or opens one. */
static void test_bad_machines(void **state)
{
    (void)state;
    char ok[1024];
    snprintf(ok, sizeof(ok),
             "{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"test\", "
             "\"devices\": [{\"profile\": \"%s\", \"count\": 3}]}",
             FERRY_TEST_PROFILE);
    struct {
        const char *json, *why;
    } bad[] = {
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\"}", "devices"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\", \"devices\": []}",
         "devices"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"devices\": [{\"profile\": \"x\"}]}",
         "source"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\", \"extra\": 1, "
         "\"devices\": [{\"profile\": \"x\"}]}",
         "extra"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\", "
         "\"devices\": [{\"profile\": \"x\", \"count\": 0}]}",
         "count"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\", "
         "\"devices\": [{\"profile\": \"x\", \"count\": 8.2e14}]}",
         "count"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\", "
         "\"devices\": [{\"profile\": 5}]}",
         "profile"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": \"s\", "
         "\"devices\": [{\"profile\": \"/nonexistent/h.json\"}]}",
         "/nonexistent/h.json"},
        /* host_memory: a figure with its source, a number in (0, 1e5] */
        {MACHINE_HOST("{\"gbps\": 100}", "\"s\""), "source.host_memory"},
        {MACHINE_HOST("{\"gbps\": 100}", "{\"devices\": \"d\"}"), "source.host_memory"},
        {MACHINE_HOST("{\"gbps\": 100}", "{\"devices\": \"d\", \"host_memory\": \"\"}"),
         "source.host_memory"},
        {MACHINE_HOST("{\"gbps\": 100}", "{\"host_memory\": \"h\"}"), "source.devices"},
        {MACHINE_HOST("{\"gbps\": 100}", "{\"devices\": \"d\", \"host_memory\": \"h\", "
                                         "\"cpu\": \"c\"}"),
         "source.cpu"},
        {MACHINE_HOST("{\"gbps\": 100}", "{\"devices\": \"d\", \"host_memory\": 5}"),
         "source.host_memory"},
        {MACHINE_HOST("100", SRC_BOTH), "{\"gbps\": X}"},
        {MACHINE_HOST("{}", SRC_BOTH), "host_memory.gbps"},
        {MACHINE_HOST("{\"gbps\": \"fast\"}", SRC_BOTH), "host_memory.gbps\" must be a number > 0"},
        {MACHINE_HOST("{\"gbps\": 0}", SRC_BOTH), "host_memory.gbps\" must be a number > 0"},
        {MACHINE_HOST("{\"gbps\": -5}", SRC_BOTH), "host_memory.gbps\" must be a number > 0"},
        {MACHINE_HOST("{\"gbps\": 1e6}", SRC_BOTH), "<= 100000"},
        {MACHINE_HOST("{\"gbps\": 100, \"read_gbps\": 50}", SRC_BOTH), "host_memory.read_gbps"},
        {"{\"format\": \"ferry-machine-1\", \"name\": \"m\", \"source\": {\"devices\": \"d\", "
         "\"host_memory\": \"h\"}, \"devices\": [{\"profile\": \"x\"}]}",
         "without a section \"host_memory\""},
    };
    char path[] = "/tmp/ferry-machine-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 1; i++) {
        const char *text = i < sizeof(bad) / sizeof(bad[0]) ? bad[i].json : ok;
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
        cfg.backend = "sim";
        cfg.profile = path;
        ferry_runtime_t *rt = NULL;
        int rc = ferry_runtime_create(&cfg, &rt);
        ferry_device_t *d = NULL;
        if (rc == 0)
            rc = ferry_device_get(rt, 0, &d);
        if (i == sizeof(bad) / sizeof(bad[0])) { /* the good one: three devices */
            assert_int_equal(rc, 0);
            assert_int_equal(ferry_device_count(rt), 3);
            assert_int_equal(ferry_device_get(rt, 2, &d), 0);
            assert_int_equal(ferry_device_get(rt, 3, &d), FERRY_ENODEV);
        } else {
            print_message("%s -> %s\n", bad[i].why, ferry_last_error());
            assert_int_not_equal(rc, 0);
            assert_non_null(strstr(ferry_last_error(), bad[i].why));
        }
        ferry_runtime_destroy(rt);
    }
    unlink(path);
}

static void test_bad_sets(void **state)
{
    (void)state;
    char path[64];
    profile_of(2, path, sizeof(path));
    ferry_runtime_t *rt = test_sim_runtime_on(path, NULL);
    ferry_runtime_t *rt2 = test_sim_runtime_on(path, NULL);
    ferry_device_t *d0, *d1, *other;
    assert_int_equal(ferry_device_get(rt, 0, &d0), 0);
    assert_int_equal(ferry_device_get(rt, 1, &d1), 0);
    assert_int_equal(ferry_device_get(rt2, 0, &other), 0);
    unlink(path);
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(d0, &st, 1u << 20);
    ferry_device_t *twice[2] = {d0, d0}, *mixed[2] = {d0, other}, *nul[2] = {d0, NULL},
                   *ok[2] = {d0, d1};
    ferry_pipeline_t *p = NULL;
    pc.devices = ok;
    pc.ndevices = 2;
    assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL); /* device too */
    assert_non_null(strstr(ferry_last_error(), "both set"));
    pc.device = NULL;
    struct {
        ferry_device_t **devs;
        unsigned n;
        const char *why;
    } bad[] = {{twice, 2, "same device"},
               {mixed, 2, "another runtime"},
               {nul, 2, "NULL"},
               {NULL, 2, "NULL"},
               {ok, 65, "1 to 64"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pc.devices = bad[i].devs;
        pc.ndevices = bad[i].n;
        assert_int_equal(ferry_pipeline_create(&pc, &p), FERRY_EINVAL);
        assert_non_null(strstr(ferry_last_error(), bad[i].why));
    }
    /* A set of one is a set: the same calls answer. */
    pc.devices = ok;
    pc.ndevices = 1;
    assert_int_equal(ferry_pipeline_create(&pc, &p), 0);
    assert_int_equal(ferry_pipeline_devices(p), 1);
    /* the runtime refuses to go while it lives */
    assert_int_equal(ferry_runtime_destroy(rt), FERRY_EBUSY);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    assert_int_equal(ferry_runtime_destroy(rt2), 0);
}

/* From a set's callback: drain and destroy refuse (EBUSY), a submit on a full set refuses
 * instead of blocking, a submit with room is taken. */
typedef struct cb_probe {
    ferry_pipeline_t *p;
    atomic_int drain_rc, destroy_rc, submits_ok, submits_busy, calls;
} cb_probe_t;

static void probe_done(const ferry_batch_result_t *r, void *arg)
{
    cb_probe_t *c = arg;
    (void)r;
    if (atomic_fetch_add(&c->calls, 1) > 0)
        return; /* the batches submitted from here come back here too */
    atomic_store(&c->drain_rc, ferry_pipeline_drain(c->p));
    atomic_store(&c->destroy_rc, ferry_pipeline_destroy(c->p) == FERRY_EBUSY ? 1 : 0);
}

static void test_calls_from_a_callback(void **state)
{
    (void)state;
    ferry_device_t *devs[2];
    ferry_runtime_t *rt = set_runtime(2, NULL, devs);
    ferry_stage_t st = test_cpu_stage("copy", test_cpu_copy);
    ferry_pipeline_config_t pc = test_pipeline_config(NULL, &st, 1u << 20);
    pc.devices = devs;
    pc.ndevices = 2;
    ferry_pipeline_t *p = test_pipeline(&pc);
    cb_probe_t c;
    memset(&c, 0, sizeof(c));
    c.p = p;
    static unsigned char in[1 << 20], out[1 << 20];
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = in;
    b.out = out;
    b.bytes = sizeof(in);
    assert_int_equal(ferry_pipeline_submit(p, &b, probe_done, &c, NULL), 0);
    for (int i = 0; i < 200 && atomic_load(&c.calls) == 0; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&c.drain_rc), FERRY_EBUSY);
    assert_int_equal(atomic_load(&c.destroy_rc), 1); /* it shut the set */
    assert_int_equal(ferry_pipeline_submit(p, &b, probe_done, &c, NULL), FERRY_ECLOSED);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* A machine of @n simulated H200s (the in-tree device profile) whose host serves @gbps, in a
 * temporary file (@path; the caller unlinks). */
static void machine_of(int n, double gbps, char *path, size_t len)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "ferry-machine-1");
    cJSON_AddStringToObject(root, "name", "test machine");
    cJSON *src = cJSON_AddObjectToObject(root, "source");
    cJSON_AddStringToObject(src, "devices", "the in-tree H200");
    cJSON_AddStringToObject(src, "host_memory", "a figure for the test");
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(root, "host_memory"), "gbps", gbps);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "profile", FERRY_TEST_PROFILE);
    cJSON_AddNumberToObject(e, "count", n);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "devices"), e);
    test_write_json(root, "/tmp/ferry-machine-XXXXXX", path, len);
    cJSON_Delete(root);
}

/* The batches of the machine tests: 32 MiB, or 8 MiB under sanitizers (ThreadSanitizer takes
 * about a minute per 384 MiB streamed; smaller batches sit a little further below the links). */
static size_t machine_batch(void)
{
    const char *scale = getenv("FERRY_TEST_SCALE");
    return scale != NULL && strcmp(scale, "sanitizer") == 0 ? 8u << 20 : 32u << 20;
}

/* The host memory traffic of a run: bytes both ways per second of virtual time, GB/s. */
static double traffic(ferry_pipeline_stats_t s)
{
    return s.gbps_h2d + s.gbps_d2h;
}

/* Four H200s in a host that serves 200 GB/s, under the 4 x ~95 their links move. Device 0
 * open alone has the whole host: its link is the limit. With the four open, the set draws no
 * more than the host (model rounding aside) and reaches at least 95% of it; the share is
 * static, so device 0 streaming alone now has a quarter. The host is the machine's for
 * ferry_device_host. */
static void test_machine_host_caps_the_set(void **state)
{
    (void)state;
    const double host = 200.0;
    char path[64];
    machine_of(4, host, path, sizeof(path));
    ferry_runtime_t *rt = test_sim_runtime_on(path, NULL);
    ferry_device_t *devs[4];
    assert_int_equal(ferry_device_get(rt, 0, &devs[0]), 0);
    double link = traffic(stream(devs, 1, machine_batch(), NULL));
    for (int i = 1; i < 4; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    unlink(path);
    ferry_host_props_t h = FERRY_HOST_PROPS_INIT;
    assert_int_equal(ferry_device_host(devs[3], &h), 0);
    assert_true(h.modelled && h.memory_gbps == host);
    double set = traffic(stream(devs, 4, machine_batch(), NULL));
    double quarter = traffic(stream(devs, 1, machine_batch(), NULL));
    double want = 4 * link < host ? 4 * link : host;
    print_message("one H200 open %.1f GB/s; four in a %.0f GB/s host %.1f GB/s (%.1f%% of %.1f); "
                  "one of four open %.1f\n",
                  link, host, set, set / want * 100, want, quarter);
    assert_true(link > 80 && link < 100); /* its link, not a share: ~95 on 32 MiB batches */
    assert_true(set <= 1.02 * host);
    assert_true(set >= 0.95 * want);
    assert_true(quarter >= 0.95 * host / 4 && quarter <= 1.02 * host / 4);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

/* A host above the links leaves two devices of a machine at twice one. */
static void test_machine_host_above_links(void **state)
{
    (void)state;
    char path[64];
    machine_of(2, 1000.0, path, sizeof(path));
    ferry_runtime_t *rt = test_sim_runtime_on(path, NULL);
    ferry_device_t *devs[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(ferry_device_get(rt, i, &devs[i]), 0);
    unlink(path);
    double r1 = stream(devs, 1, machine_batch(), NULL).gbps_h2d, r2 = 0;
    /* The best of up to three runs, as test_two_devices_double_the_rate: beside the other tests
     * of an ASan build on two cores one run made 1.464x (CI, 2026-12-07), where it makes 1.968x
     * alone or beside two spinning threads; the host can only take rate away. */
    for (int attempt = 0; attempt < 3 && r2 < 1.95 * r1; attempt++) {
        r2 = stream(devs, 2, machine_batch(), NULL).gbps_h2d;
        print_message("1000 GB/s host: one %.2f, two %.2f GB/s each way: %.3fx\n", r1, r2, r2 / r1);
    }
    assert_true(r2 >= 1.95 * r1);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_two_devices_double_the_rate),
          cmocka_unit_test(test_odd_sizes_and_prepare), cmocka_unit_test(test_sticky_devices_leave),
          cmocka_unit_test(test_mixed_rig), cmocka_unit_test(test_bad_machines),
          cmocka_unit_test(test_bad_sets), cmocka_unit_test(test_calls_from_a_callback),
          cmocka_unit_test(test_machine_host_caps_the_set),
          cmocka_unit_test(test_machine_host_above_links),
          cmocka_unit_test(test_lost_device_moves_to_others),
          cmocka_unit_test(test_inject_dev_out_of_range), cmocka_unit_test(test_set_ops))
