/* The per-device performance model (src/sched/perfmodel.c): its trimmed estimate against one
 * spike and a lasting slowdown, prediction across size buckets, the earliest-finish choice over
 * devices driven by a virtual-time simulation (shares, spiky devices, exclusion, bounded
 * exploration), save and load (round trip, devices of another name, malformed texts) and
 * recording and predicting from several threads at once (run under TSan in the TSan tree). */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "sched/perfmodel.h"

#define MIB   ((size_t)1 << 20)
#define CHUNK (4 * MIB)

static ferry_perfmodel_t *model_new(void)
{
    ferry_perfmodel_t *m = NULL;
    assert_int_equal(ferry__perf_create(&m), 0);
    assert_non_null(m);
    return m;
}

static uint64_t predict(ferry_perfmodel_t *m, int dev, int stage, size_t bytes)
{
    uint64_t ns = 0;
    assert_int_equal(ferry__perf_predict(m, dev, stage, bytes, &ns), 0);
    return ns;
}

/* @ns with a jitter of up to +-2%. */
static uint64_t jitter(uint64_t ns, uint64_t *rng)
{
    return ns - ns / 50 + test_rand_range(rng, 0, ns / 25);
}

static void assert_near(double got, double want, double tol, const char *what)
{
    if (fabs(got - want) > tol * fabs(want))
        fail_msg("%s: got %.6g, want %.6g within %.1f%%", what, got, want, tol * 100);
}

/* One sample of 100x among steady ones moves the estimate by under 5%, and so does a sample
 * 100x faster; neither is forgotten in the count. */
static void test_spike(void **state)
{
    (void)state;
    uint64_t rng = test_seed(11);
    ferry_perfmodel_t *m = model_new();
    for (int i = 0; i < FERRY_PERF_WINDOW; i++)
        assert_int_equal(ferry__perf_record(m, 0, 0, CHUNK, jitter(1000000, &rng)), 0);
    double before = (double)predict(m, 0, 0, CHUNK);
    assert_near(before, 1e6, 0.02, "steady estimate");
    assert_int_equal(ferry__perf_record(m, 0, 0, CHUNK, 100000000), 0);
    assert_near((double)predict(m, 0, 0, CHUNK), before, 0.05, "after a 100x spike");
    assert_int_equal(ferry__perf_record(m, 0, 0, CHUNK, 10000), 0);
    assert_near((double)predict(m, 0, 0, CHUNK), before, 0.05, "after a 100x fast sample");
    /* Early on too: a first sample that is a spike is outvoted by the next two. */
    assert_int_equal(ferry__perf_record(m, 1, 0, CHUNK, 100000000), 0);
    assert_int_equal(ferry__perf_record(m, 1, 0, CHUNK, 1000000), 0);
    assert_int_equal(ferry__perf_record(m, 1, 0, CHUNK, 1000000), 0);
    assert_near((double)predict(m, 1, 0, CHUNK), 1e6, 0.05, "a first-sample spike");
    ferry__perf_destroy(m);
}

/* A device that became 2x slower for good is learnt within one window, and not before a few
 * samples have agreed. */
static void test_lasting_slowdown(void **state)
{
    (void)state;
    uint64_t rng = test_seed(12);
    ferry_perfmodel_t *m = model_new();
    for (int i = 0; i < 2 * FERRY_PERF_WINDOW; i++)
        ferry__perf_record(m, 0, 0, CHUNK, jitter(1000000, &rng));
    for (int i = 0; i < FERRY_PERF_WINDOW; i++) {
        ferry__perf_record(m, 0, 0, CHUNK, jitter(2000000, &rng));
        if (i == 1)
            assert_near((double)predict(m, 0, 0, CHUNK), 1e6, 0.05, "two slow samples");
    }
    assert_near((double)predict(m, 0, 0, CHUNK), 2e6, 0.05, "one window of slow samples");
    ferry__perf_destroy(m);
}

/* Buckets: time = 50 us + bytes at 4 GB/s, measured at 1 and 16 MiB only. 3 and 4 MiB are
 * interpolated in bytes between them; 64 MiB is scaled from 16; a size inside a measured
 * bucket scales with bytes. Without data at any size: FERRY_EAGAIN. */
static uint64_t affine_ns(size_t bytes)
{
    return 50000 + (uint64_t)bytes / 4;
}

static void test_buckets(void **state)
{
    (void)state;
    ferry_perfmodel_t *m = model_new();
    uint64_t ns = 7;
    assert_int_equal(ferry__perf_predict(m, 0, 0, CHUNK, &ns), FERRY_EAGAIN);
    assert_int_equal(ns, 7);
    for (int i = 0; i < 8; i++) {
        ferry__perf_record(m, 0, 0, MIB, affine_ns(MIB));
        ferry__perf_record(m, 0, 0, 16 * MIB, affine_ns(16 * MIB));
    }
    assert_near((double)predict(m, 0, 0, 3 * MIB), (double)affine_ns(3 * MIB), 0.001, "3 MiB");
    assert_near((double)predict(m, 0, 0, 4 * MIB), (double)affine_ns(4 * MIB), 0.001, "4 MiB");
    assert_true(predict(m, 0, 0, 3 * MIB) < predict(m, 0, 0, 4 * MIB));
    assert_near((double)predict(m, 0, 0, 64 * MIB), (double)affine_ns(64 * MIB), 0.02, "64 MiB");
    assert_near((double)predict(m, 0, 0, 20 * MIB), 20.0 / 16 * affine_ns(16 * MIB), 0.001,
                "20 MiB, in the 16 MiB bucket");
    assert_near((double)predict(m, 0, 0, 4096), (double)affine_ns(MIB) / 256, 0.001, "4 KiB");
    assert_int_equal(ferry__perf_predict(m, 1, 0, CHUNK, &ns), FERRY_EAGAIN);
    assert_int_equal(ferry__perf_predict(m, 0, 1, CHUNK, &ns), FERRY_EAGAIN);
    assert_int_equal(ferry__perf_predict(m, 0, 0, 0, &ns), FERRY_EINVAL);
    assert_int_equal(ferry__perf_predict(m, FERRY_PERF_DEVICES, 0, CHUNK, &ns), FERRY_EINVAL);
    assert_int_equal(ferry__perf_record(m, 0, FERRY_PERF_STAGES, CHUNK, 1), FERRY_EINVAL);
    assert_int_equal(ferry__perf_record(m, -1, 0, CHUNK, 1), FERRY_EINVAL);
    ferry__perf_destroy(m);
}

/* The CPU device's probe (pipeline/set.c): one sample of 256 KiB is all a device has, and
 * every larger size is predicted from it in proportion to bytes (16 and 32 MiB: 64x and 128x
 * its time), so that a CPU a hundred times slower than the GPU is seen as such at the chunk
 * sizes it would be given. A later sample at 32 MiB makes 4 MiB a line through both points. */
static void test_small_probe(void **state)
{
    (void)state;
    ferry_perfmodel_t *m = model_new();
    size_t probe = 256u << 10;
    ferry__perf_record(m, 0, 0, probe, 6900000); /* fma at intensity 200: 38 MB/s */
    assert_near((double)predict(m, 0, 0, 16 * MIB), 64 * 6900000.0, 0.001, "16 MiB from 256 KiB");
    assert_near((double)predict(m, 0, 0, 32 * MIB), 128 * 6900000.0, 0.001, "32 MiB from 256 KiB");
    assert_near((double)predict(m, 0, 0, 64u << 10), 6900000.0 / 4, 0.001, "64 KiB");
    ferry__perf_record(m, 0, 0, 32 * MIB, 100 * 6900000ull); /* larger parts a little faster */
    double lo = 6900000.0, hi = 100 * 6900000.0, x = (4.0 * MIB - probe) / (32.0 * MIB - probe);
    assert_near((double)predict(m, 0, 0, 4 * MIB), lo + (hi - lo) * x, 0.001, "4 MiB between");
    ferry__perf_destroy(m);
}

/* ---- a virtual-time machine of devices that run their queues in order -------------------- */

#define SIM_DEVS  8
#define SIM_DEPTH 8192 /* chunks a device may have queued */

struct sim {
    uint64_t real_ns[SIM_DEVS];     /* a chunk's true time on each device */
    unsigned spike_every[SIM_DEVS]; /* every n-th sample is recorded spike_x times longer */
    double spike_x;
    uint64_t queued[FERRY_PERF_DEVICES];
    uint64_t fifo[SIM_DEVS][SIM_DEPTH]; /* the committed ns of each queued chunk */
    unsigned head[SIM_DEVS], len[SIM_DEVS], samples[SIM_DEVS];
    uint64_t busy_until[SIM_DEVS];
    unsigned done[SIM_DEVS];
    uint64_t end_ns;
};

/* The fixture of the tests that simulate: a model and a machine, both empty. */
struct fx {
    ferry_perfmodel_t *m;
    struct sim *s;
};

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->s = calloc(1, sizeof(*f->s))) == NULL || ferry__perf_create(&f->m) != 0)
        return -1;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    ferry__perf_destroy(f->m);
    free(f->s);
    free(f);
    return 0;
}

/* Give @chunks chunks to the devices of @devices by ferry__perf_choose, keeping @depth in
 * flight; each device completes its head chunk after its real time and records the sample.
 * s->done counts this call's chunks, s->end_ns its virtual time. */
static void simulate(ferry_perfmodel_t *m, struct sim *s, uint64_t devices, unsigned chunks,
                     unsigned depth)
{
    uint64_t now = 0;
    unsigned submitted = 0, finished = 0, inflight = 0;
    memset(s->done, 0, sizeof(s->done));
    while (finished < chunks) {
        while (submitted < chunks && inflight < depth) {
            ferry_perf_choice_t c;
            assert_int_equal(ferry__perf_choose(m, 0, CHUNK, devices, s->queued, &c), 0);
            int d = c.dev;
            assert_true(d >= 0 && d < SIM_DEVS && (devices >> d & 1));
            assert_true(s->len[d] < SIM_DEPTH);
            s->fifo[d][(s->head[d] + s->len[d]++) % SIM_DEPTH] = c.ns;
            s->queued[d] += c.ns;
            if (s->len[d] == 1)
                s->busy_until[d] = now + s->real_ns[d];
            submitted++;
            inflight++;
        }
        int d = -1;
        for (int i = 0; i < SIM_DEVS; i++)
            if (s->len[i] > 0 && (d < 0 || s->busy_until[i] < s->busy_until[d]))
                d = i;
        now = s->busy_until[d];
        uint64_t sample = s->real_ns[d];
        if (s->spike_every[d] != 0 && ++s->samples[d] % s->spike_every[d] == 0)
            sample = (uint64_t)(sample * s->spike_x);
        assert_int_equal(ferry__perf_record(m, d, 0, CHUNK, sample), 0);
        s->queued[d] -= s->fifo[d][s->head[d]];
        s->head[d] = (s->head[d] + 1) % SIM_DEPTH;
        s->len[d]--;
        s->done[d]++;
        finished++;
        inflight--;
        if (s->len[d] > 0)
            s->busy_until[d] = now + s->real_ns[d];
    }
    s->end_ns = now;
}

/* Calibrate with @calib chunks at a pipeline's depth (16), then hand out @chunks chunks at once,
 * as a whole job submitted up front: their shares follow the model alone, since no sample comes
 * back before every chunk is placed (StarPU's dmda at push time). */
static void run_job(ferry_perfmodel_t *m, struct sim *s, uint64_t devices, unsigned calib,
                    unsigned chunks)
{
    simulate(m, s, devices, calib, 16);
    simulate(m, s, devices, chunks, chunks);
}

/* Two devices of rates 1 and 0.5: shares 2:1 within 5%, and the job takes the time of the
 * two together (within 5%); also kept at a pipeline's depth. */
static void test_share_two_rates(void **state)
{
    struct fx *f = *state;
    f->s->real_ns[0] = 1000000;
    f->s->real_ns[1] = 2000000;
    run_job(f->m, f->s, 0x3, 300, 3000);
    assert_int_equal(f->s->done[0] + f->s->done[1], 3000);
    assert_near((double)f->s->done[0] / f->s->done[1], 2.0, 0.05, "share of the fast device");
    assert_near((double)f->s->end_ns, 3000 * 1e6 / 1.5, 0.05, "makespan");
    simulate(f->m, f->s, 0x3, 3000, 16);
    assert_near((double)f->s->done[0] / f->s->done[1], 2.0, 0.05, "share at depth 16");
}

/* The StarPU failure: a device whose samples spike 50x one time in ten still gets its fair
 * share, beside a device half as fast ... */
static void test_share_spiky(void **state)
{
    struct fx *f = *state;
    f->s->real_ns[0] = 1000000;
    f->s->real_ns[1] = 2000000;
    f->s->spike_every[0] = 10;
    f->s->spike_x = 50;
    run_job(f->m, f->s, 0x3, 300, 3000);
    assert_near((double)f->s->done[0] / f->s->done[1], 2.0, 0.05, "share of the spiky device");
}

/* ... and among eight equal devices, two of which are spiky (none gets 5% more or less). */
static void test_share_spiky_of_8(void **state)
{
    struct fx *f = *state;
    f->s->spike_every[0] = f->s->spike_every[5] = 10;
    f->s->spike_x = 50;
    for (int d = 0; d < SIM_DEVS; d++)
        f->s->real_ns[d] = 1000000;
    run_job(f->m, f->s, 0xff, 800, 8000);
    for (int d = 0; d < SIM_DEVS; d++)
        assert_near(f->s->done[d], 1000, 0.05, "share of one of 8 equal devices");
    simulate(f->m, f->s, 0xff, 8000, 32);
    for (int d = 0; d < SIM_DEVS; d++)
        assert_near(f->s->done[d], 1000, 0.05, "share of one of 8 at depth 32");
}

/* An excluded device gets nothing, also when it is the fastest; back in, it gets its share;
 * with every device excluded there is no choice. */
static void test_excluded(void **state)
{
    struct fx *f = *state;
    ferry_perfmodel_t *m = f->m;
    struct sim *s = f->s;
    s->real_ns[0] = s->real_ns[2] = 2000000;
    s->real_ns[1] = 1000000;
    assert_int_equal(ferry__perf_exclude(m, 1, true), 0);
    assert_true(ferry__perf_is_excluded(m, 1));
    run_job(m, s, 0x7, 100, 1000);
    assert_int_equal(s->done[1], 0);
    assert_near(s->done[0], 500, 0.05, "device 0 with 1 excluded");
    assert_int_equal(ferry__perf_exclude(m, 1, false), 0);
    assert_false(ferry__perf_is_excluded(m, 1));
    run_job(m, s, 0x7, 100, 1000);
    assert_near(s->done[1], 500, 0.05, "device 1 back in");
    for (int d = 0; d < 3; d++)
        ferry__perf_exclude(m, d, true);
    ferry_perf_choice_t c;
    assert_int_equal(ferry__perf_choose(m, 0, CHUNK, 0x7, s->queued, &c), FERRY_ENODEV);
    assert_int_equal(ferry__perf_choose(m, 0, CHUNK, 0, s->queued, &c), FERRY_ENODEV);
}

/* An uncalibrated device is explored at once but gets at most FERRY_PERF_EXPLORE_MAX chunks
 * before a sample comes back; calibrated and slow, it gets nothing more. With no device
 * calibrated, chunks go round the devices (none is flooded). */
static void test_explore(void **state)
{
    (void)state;
    ferry_perfmodel_t *m = model_new();
    uint64_t queued[FERRY_PERF_DEVICES] = {0};
    unsigned got[2] = {0};
    for (int i = 0; i < FERRY_PERF_CALIBRATED; i++)
        ferry__perf_record(m, 0, 0, CHUNK, 1000000);
    for (int i = 0; i < 100; i++) {
        ferry_perf_choice_t c;
        assert_int_equal(ferry__perf_choose(m, 0, CHUNK, 0x3, queued, &c), 0);
        got[c.dev]++;
        assert_int_equal(c.explore, c.dev == 1);
        assert_int_equal(c.ns, 1000000); /* device 0's prediction, a guess for device 1 */
        assert_int_equal(c.finish_ns, queued[c.dev] + c.ns);
        if (c.dev == 0) /* device 0 completes at once; device 1 never does */
            ferry__perf_record(m, 0, 0, CHUNK, 1000000);
        else
            queued[1] += c.ns;
    }
    assert_int_equal(got[1], FERRY_PERF_EXPLORE_MAX);
    /* Its samples come back 10x slower: calibrated, it loses on speed while device 0 is idle. */
    for (int i = 0; i < FERRY_PERF_CALIBRATED; i++)
        ferry__perf_record(m, 1, 0, CHUNK, 10000000);
    queued[1] = 0;
    for (int i = 0; i < 100; i++) {
        ferry_perf_choice_t c;
        assert_int_equal(ferry__perf_choose(m, 0, CHUNK, 0x3, queued, &c), 0);
        assert_int_equal(c.dev, 0);
        assert_false(c.explore);
    }
    ferry__perf_destroy(m);

    m = model_new();
    memset(got, 0, sizeof(got));
    for (int i = 0; i < 10; i++) {
        ferry_perf_choice_t c;
        assert_int_equal(ferry__perf_choose(m, 0, CHUNK, 0x3, queued, &c), 0);
        assert_true(c.explore);
        assert_int_equal(c.ns, 0);
        got[c.dev]++;
    }
    assert_int_equal(got[0], 5);
    assert_int_equal(got[1], 5);
    ferry__perf_destroy(m);
}

/* ---- save and load --------------------------------------------------------------------------- */

static ferry_perfmodel_t *model_random(uint64_t *rng)
{
    ferry_perfmodel_t *m = model_new();
    ferry__perf_name_device(m, 0, "NVIDIA H200 0000:17:00.0");
    ferry__perf_name_device(m, 3, "cpu");
    ferry__perf_name_device(m, 9, "named, no data \"quoted\"");
    ferry__perf_name_stage(m, 0, "scale");
    ferry__perf_name_stage(m, 2, "h2d");
    static const int devs[] = {0, 3}, stages[] = {0, 2};
    for (int i = 0; i < 400; i++) {
        size_t bytes = (size_t)test_rand_range(rng, 4096, 256 * MIB);
        int d = devs[i % 2], st = stages[(i / 2) % 2];
        ferry__perf_record(m, d, st, bytes,
                           1000 + bytes / (d == 0 ? 20 : 3) + test_rand(rng) % 999);
    }
    return m;
}

static int sum_counts(const ferry_perf_entry_t *e, void *arg)
{
    assert_true(e->bytes >= (UINT64_C(1) << e->bucket));
    assert_near(e->gbps, (double)e->bytes / e->ns, 1e-12, "GB/s");
    *(uint64_t *)arg += e->count;
    return 0;
}

static void test_save_load(void **state)
{
    (void)state;
    uint64_t rng = test_seed(13);
    ferry_perfmodel_t *a = model_random(&rng), *b = model_new();
    char *ta = NULL, *tb = NULL;
    unsigned skipped = 99;
    assert_int_equal(ferry__perf_save(a, &ta), 0);
    assert_non_null(strstr(ta, "\"ferry-perfmodel-1\""));
    assert_int_equal(ferry__perf_load(b, ta, "a.json", &skipped), 0);
    assert_int_equal(skipped, 0);
    assert_int_equal(ferry__perf_save(b, &tb), 0);
    assert_string_equal(ta, tb);
    for (int i = 0; i < 200; i++) {
        size_t bytes = (size_t)test_rand_range(&rng, 1, 1024 * MIB);
        for (int d = 0; d < 4; d++) {
            uint64_t pa = 0, pb = 0;
            int ra = ferry__perf_predict(a, d, 2, bytes, &pa);
            assert_int_equal(ra, ferry__perf_predict(b, d, 2, bytes, &pb));
            assert_int_equal(pa, pb);
        }
    }
    uint64_t ca = 0, cb = 0;
    assert_int_equal(ferry__perf_foreach(a, sum_counts, &ca), 0);
    assert_int_equal(ferry__perf_foreach(b, sum_counts, &cb), 0);
    assert_int_equal(ca, 400);
    assert_int_equal(cb, 400);
    free(tb);
    ferry__perf_destroy(b);

    /* Slot 0 holds another GPU here: its entries are skipped, slot 3's apply. */
    b = model_new();
    ferry__perf_name_device(b, 0, "NVIDIA A100 0000:17:00.0");
    assert_int_equal(ferry__perf_load(b, ta, "a.json", &skipped), 0);
    assert_true(skipped > 0);
    uint64_t ns;
    assert_int_equal(ferry__perf_predict(b, 0, 0, CHUNK, &ns), FERRY_EAGAIN);
    assert_int_equal(ferry__perf_predict(b, 3, 0, CHUNK, &ns), 0);
    assert_int_equal(ns, predict(a, 3, 0, CHUNK));
    ferry__perf_destroy(b);

    /* Through a file. */
    char path[] = "/tmp/ferry_perfmodel_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    b = model_new();
    assert_int_equal(ferry__perf_save_file(a, path), 0);
    assert_int_equal(ferry__perf_load_file(b, path, NULL), 0);
    assert_int_equal(ferry__perf_save(b, &tb), 0);
    assert_string_equal(ta, tb);
    unlink(path);
    assert_int_equal(ferry__perf_load_file(b, path, NULL), FERRY_EIO);
    free(ta);
    free(tb);
    ferry__perf_destroy(a);
    ferry__perf_destroy(b);
}

/* Each text is refused with FERRY_EPARSE and a message naming the key and what it accepts;
 * the model keeps what it had. */
static void test_malformed(void **state)
{
    (void)state;
#define HEAD "{\"format\": \"ferry-perfmodel-1\", \"devices\": [{\"slot\": 0, \"name\": \"g\"}], "
#define STG  "\"stages\": [{\"id\": 0, \"name\": \"s\"}], "
#define ENT  "\"entries\": [{\"device\": 0, \"stage\": 0, \"bucket\": 22, \"bytes\": 4194304, "
#define VER  "\"entries\": [], \"verdicts\": [{\"device\": 0, \"stage\": 0, "
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"format\": ", "m.json: not valid JSON"},
        {"[]", "the top level must be an object with the keys format, devices, stages, entries"},
        {"{\"format\": \"ferry-perfmodel-2\", \"devices\": [], \"stages\": [], \"entries\": []}",
         "key \"format\" must be \"ferry-perfmodel-1\" (got \"ferry-perfmodel-2\")"},
        {HEAD STG "\"entries\": [], \"extra\": 1}",
         "unknown key \"extra\"; accepted keys: format, devices, stages, entries"},
        {HEAD STG "\"entries\": {}}", "key \"entries\" must be an array (got an object)"},
        {HEAD STG ENT "\"ns\": -5, \"count\": 3}]}",
         "key \"entries[0].ns\" must be a number of ns > 0 and <= 1e+18 (got -5)"},
        {HEAD STG ENT "\"ns\": 0, \"count\": 3}]}", "key \"entries[0].ns\" must be a number"},
        {HEAD STG ENT "\"ns\": 5, \"count\": \"3\"}]}",
         "key \"entries[0].count\" must be an integer in [1, 9007199254740992] (got \"3\")"},
        {HEAD STG ENT "\"ns\": 5, \"count\": 2.5}]}", "\"entries[0].count\" must be an integer"},
        {HEAD STG ENT "\"ns\": 5, \"cnt\": 3}]}",
         "unknown key \"entries[0].cnt\"; accepted keys: device, stage, bucket, bytes, ns, count"},
        {HEAD STG ENT "\"ns\": 5}]}", "missing key \"entries[0].count\" (an integer in [1, "},
        {HEAD STG ENT "\"ns\": 5, \"count\": 3, \"ns\": 6}]}", "duplicate key \"entries[0].ns\""},
        {HEAD STG "\"entries\": [{\"device\": 0, \"stage\": 0, \"bucket\": 21, \"bytes\": "
                  "4194304, \"ns\": 5, \"count\": 3}]}",
         "key \"entries[0].bytes\" must be an integer in [2097152, 4194303] for bucket 21 (got "
         "4194304)"},
        {HEAD STG "\"entries\": [{\"device\": 1, \"stage\": 0, \"bucket\": 22, \"bytes\": "
                  "4194304, \"ns\": 5, \"count\": 3}]}",
         "key \"entries[0].device\" is 1, which \"devices\" does not list"},
        {HEAD STG ENT "\"ns\": 5, \"count\": 3}, {\"device\": 0, \"stage\": 0, \"bucket\": 22, "
                      "\"bytes\": 5000000, \"ns\": 6, \"count\": 1}]}",
         "entries[1] repeats the key (device 0, stage 0, bucket 22) of an earlier entry"},
        {"{\"format\": \"ferry-perfmodel-1\", \"devices\": [{\"slot\": 64, \"name\": \"g\"}], "
         "\"stages\": [], \"entries\": []}",
         "key \"devices[0].slot\" must be an integer in [0, 63] (got 64)"},
        {"{\"format\": \"ferry-perfmodel-1\", \"devices\": [{\"slot\": 0, \"name\": 7}], "
         "\"stages\": [], \"entries\": []}",
         "key \"devices[0].name\" must be a string of at most 63 bytes (got 7)"},
        {"{\"format\": \"ferry-perfmodel-1\", \"devices\": [{\"slot\": 0, \"name\": \"g\"}, "
         "{\"slot\": 0, \"name\": \"h\"}], \"stages\": [], \"entries\": []}",
         "key \"devices[1].slot\" repeats slot 0"},
        {HEAD "\"stages\": [7], \"entries\": []}",
         "\"stages[0]\" must be an object with the keys id, name (got 7)"},
        {HEAD STG VER "\"keep\": 2, \"with_gbps\": 1, \"without_gbps\": 2}]}",
         "key \"verdicts[0].keep\" must be an integer in [0, 1] (got 2)"},
        {HEAD STG VER "\"keep\": 0, \"with_gbps\": -1, \"without_gbps\": 2}]}",
         "key \"verdicts[0].with_gbps\" must be a number of GB/s >= 0 and <= 1e+06 (got -1)"},
        {HEAD STG VER "\"keep\": 0, \"with_gbps\": 1}]}",
         "missing key \"verdicts[0].without_gbps\""},
        {HEAD STG "\"entries\": [], \"verdicts\": [{\"device\": 1, \"stage\": 0, \"keep\": 0, "
                  "\"with_gbps\": 1, \"without_gbps\": 2}]}",
         "key \"verdicts[0].device\" is 1, which \"devices\" does not list"},
        {HEAD STG VER "\"keep\": 0, \"with_gbps\": 1, \"without_gbps\": 2}, {\"device\": 0, "
                      "\"stage\": 0, \"keep\": 1, \"with_gbps\": 3, \"without_gbps\": 2}]}",
         "verdicts[1] repeats the device 0 and stage 0 of verdicts[0]"},
    };
    ferry_perfmodel_t *m = model_new();
    ferry__perf_record(m, 0, 0, CHUNK, 1234567);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = ferry__perf_load(m, cases[i].text, "m.json", NULL);
        if (rc != FERRY_EPARSE || strstr(ferry_last_error(), cases[i].want) == NULL ||
            strncmp(ferry_last_error(), "m.json: ", 8) != 0)
            fail_msg("case %zu: rc %d, message \"%s\", want \"%s\"", i, rc, ferry_last_error(),
                     cases[i].want);
        assert_int_equal(predict(m, 0, 0, CHUNK), 1234567);
    }
    /* The well-formed text these cases break is accepted. */
    assert_int_equal(ferry__perf_load(m, HEAD STG ENT "\"ns\": 5, \"count\": 3}]}", NULL, NULL), 0);
    assert_int_equal(predict(m, 0, 0, CHUNK), 5);
    ferry__perf_destroy(m);
#undef HEAD
#undef STG
#undef ENT
#undef VER
}

/* Verdicts: set and read, saved and loaded with the model (a file without them loads), and
 * skipped for a slot of another name, like the rates. */
static void test_verdicts(void **state)
{
    (void)state;
    ferry_perfmodel_t *a = model_new(), *b = model_new();
    ferry_perf_verdict_t v;
    assert_int_equal(ferry__perf_verdict(a, 1, 0, &v), 0);
    assert_false(v.set);
    assert_int_equal(ferry__perf_set_verdict(a, 64, 0, true, 1, 1), FERRY_EINVAL);
    assert_int_equal(ferry__perf_set_verdict(a, 1, 0, true, -1, 1), FERRY_EINVAL);
    assert_int_equal(ferry__perf_set_verdict(a, 1, 0, true, NAN, 1), FERRY_EINVAL);
    assert_int_equal(ferry__perf_verdict(a, 1, 64, &v), FERRY_EINVAL);
    ferry__perf_name_device(a, 1, "cpu 8 threads");
    ferry__perf_name_stage(a, 0, "scale");
    assert_int_equal(ferry__perf_set_verdict(a, 1, 0, false, 38.25, 44.5), 0);
    assert_int_equal(ferry__perf_verdict(a, 1, 0, &v), 1);
    assert_true(v.set && !v.keep && v.with_gbps == 38.25 && v.without_gbps == 44.5);
    assert_int_equal(ferry__perf_verdict(a, 0, 0, &v), 0); /* another slot: none */
    char *ta = NULL, *tb = NULL;
    assert_int_equal(ferry__perf_save(a, &ta), 0);
    assert_non_null(strstr(ta, "\"verdicts\""));
    assert_int_equal(ferry__perf_load(b, ta, "a.json", NULL), 0);
    assert_int_equal(ferry__perf_verdict(b, 1, 0, &v), 1);
    assert_true(!v.keep && v.with_gbps == 38.25 && v.without_gbps == 44.5);
    assert_int_equal(ferry__perf_save(b, &tb), 0);
    assert_string_equal(ta, tb);
    free(tb);
    ferry__perf_destroy(b);
    /* another CPU in slot 1: skipped, counted */
    b = model_new();
    ferry__perf_name_device(b, 1, "cpu 4 threads");
    unsigned skipped = 0;
    assert_int_equal(ferry__perf_load(b, ta, "a.json", &skipped), 0);
    assert_int_equal(skipped, 1);
    assert_int_equal(ferry__perf_verdict(b, 1, 0, &v), 0);
    ferry__perf_destroy(b);
    /* a file from before verdicts */
    b = model_new();
    assert_int_equal(ferry__perf_load(b,
                                      "{\"format\": \"ferry-perfmodel-1\", \"devices\": [], "
                                      "\"stages\": [], \"entries\": []}",
                                      NULL, NULL),
                     0);
    free(ta);
    ferry__perf_destroy(a);
    ferry__perf_destroy(b);
}

/* ---- threads -----------------------------------------------------------------------------------
 */

#define REC_THREADS 4
#define REC_EACH    5000

struct thr {
    ferry_perfmodel_t *m;
    int id;
    atomic_bool *stop;
};

static void *recorder(void *arg)
{
    struct thr *t = arg;
    uint64_t rng = 1000 + (uint64_t)t->id;
    for (int i = 0; i < REC_EACH; i++) {
        size_t bytes = (size_t)test_rand_range(&rng, 1, 64 * MIB);
        int rc =
            ferry__perf_record(t->m, (int)(test_rand(&rng) % 4), t->id % 2, bytes, 1 + bytes / 4);
        if (rc != 0)
            return (void *)1;
    }
    return NULL;
}

static int count_entries(const ferry_perf_entry_t *e, void *arg)
{
    (void)e;
    (*(int *)arg)++;
    return 0;
}

static void *reader(void *arg)
{
    struct thr *t = arg;
    uint64_t rng = 77, queued[FERRY_PERF_DEVICES] = {0};
    while (!atomic_load(t->stop)) {
        uint64_t ns;
        ferry_perf_choice_t c;
        int n = 0, rc = ferry__perf_predict(t->m, (int)(test_rand(&rng) % 4), 0, CHUNK, &ns);
        if ((rc != 0 && rc != FERRY_EAGAIN) || ferry__perf_choose(t->m, 1, CHUNK, 0xf, queued, &c))
            return (void *)1;
        if (t->id == 0) {
            char *text = NULL;
            if (ferry__perf_foreach(t->m, count_entries, &n) != 0 || ferry__perf_save(t->m, &text))
                return (void *)1;
            free(text);
            ferry__perf_exclude(t->m, 3, (n & 1) != 0);
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    ferry_perfmodel_t *m = model_new();
    atomic_bool stop = false;
    pthread_t rec[REC_THREADS], rd[2];
    struct thr rt[REC_THREADS], dt[2];
    for (int i = 0; i < 2; i++) {
        dt[i] = (struct thr){.m = m, .id = i, .stop = &stop};
        assert_int_equal(pthread_create(&rd[i], NULL, reader, &dt[i]), 0);
    }
    for (int i = 0; i < REC_THREADS; i++) {
        rt[i] = (struct thr){.m = m, .id = i, .stop = &stop};
        assert_int_equal(pthread_create(&rec[i], NULL, recorder, &rt[i]), 0);
    }
    void *ret;
    for (int i = 0; i < REC_THREADS; i++) {
        pthread_join(rec[i], &ret);
        assert_null(ret);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) {
        pthread_join(rd[i], &ret);
        assert_null(ret);
    }
    uint64_t total = 0;
    assert_int_equal(ferry__perf_foreach(m, sum_counts, &total), 0);
    assert_int_equal(total, REC_THREADS * REC_EACH);
    ferry__perf_destroy(m);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_spike), cmocka_unit_test(test_lasting_slowdown),
          cmocka_unit_test(test_buckets), cmocka_unit_test(test_small_probe),
          cmocka_unit_test_setup_teardown(test_share_two_rates, fx_setup, fx_teardown),
          cmocka_unit_test_setup_teardown(test_share_spiky, fx_setup, fx_teardown),
          cmocka_unit_test_setup_teardown(test_share_spiky_of_8, fx_setup, fx_teardown),
          cmocka_unit_test_setup_teardown(test_excluded, fx_setup, fx_teardown),
          cmocka_unit_test(test_explore), cmocka_unit_test(test_save_load),
          cmocka_unit_test(test_malformed), cmocka_unit_test(test_verdicts),
          cmocka_unit_test(test_threads))
