/* Faults on the simulator: the fault-spec parser (every shape it accepts and refuses), and fault
 * walks: each kind of fault at many points of a stream of batches. Whatever goes wrong, every
 * batch completes exactly once, its output is bit-exact (from the GPU or from the CPU
 * fallback), a failed attempt leaves one failure record, and a sticky fault sends everything
 * after it to the CPU. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "ferry/workloads.h"

static void test_spec_parser(void **state)
{
    (void)state;
    struct ferry_fault_spec s;
    assert_int_equal(ferry__fault_spec_parse("", &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(ferry__fault_spec_parse(
                         "kernel@batch=5,sticky@n=3,alloc@p=0.5,slow@time=1.5ms:x=4:for=2s", &s),
                     0);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.f[0].kind, FERRY_FAULT_KERNEL);
    assert_int_equal(s.f[0].trigger, FERRY_TRIG_BATCH);
    assert_int_equal(s.f[0].value, 5);
    assert_int_equal(s.f[1].kind, FERRY_FAULT_STICKY);
    assert_int_equal(s.f[1].value, 3);
    assert_true(s.f[2].p == 0.5);
    assert_int_equal(s.f[3].value, 1500000);
    assert_true(s.f[3].factor == 4);
    assert_int_equal(s.f[3].for_ns, 2000000000ull);
    assert_int_equal(ferry__fault_spec_parse("share@time=2ms:gbps=12.5,share@n=4:gbps=3:dir=both:"
                                             "for=1s,share@n=1:gbps=1:dir=d2h",
                                             &s),
                     0);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.f[0].kind, FERRY_FAULT_SHARE);
    assert_int_equal(s.f[0].trigger, FERRY_TRIG_TIME);
    assert_true(s.f[0].gbps == 12.5);
    assert_int_equal(s.f[0].dirs, 1); /* h2d by default */
    assert_int_equal(s.f[1].dirs, 3);
    assert_int_equal(s.f[1].for_ns, 1000000000ull);
    assert_int_equal(s.f[2].dirs, 2);
    /* dev=: one device of a set; every device without it */
    assert_int_equal(
        ferry__fault_spec_parse("sticky@n=3:dev=1,kernel@p=0.1,slow@n=1:x=2:dev=0:for=1ms", &s), 0);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.f[0].dev, 1);
    assert_int_equal(s.f[1].dev, -1);
    assert_int_equal(s.f[2].dev, 0);
    assert_true(s.f[2].factor == 2);
    ferry__fault_spec_for_device(&s, 0);
    assert_int_equal(s.n, 2); /* device 0 keeps the kernel and slow items, in order */
    assert_int_equal(s.f[0].kind, FERRY_FAULT_KERNEL);
    assert_int_equal(s.f[1].kind, FERRY_FAULT_SLOW);
    static const char *const bad[] = {"sticky@n=1:dev=",
                                      "sticky@n=1:dev=-1",
                                      "sticky@n=1:dev=1024",
                                      "sticky@n=1:dev=a",
                                      "share@n=1",
                                      "share@n=1:gbps=0",
                                      "share@n=1:gbps=1001",
                                      "share@n=1:gbps=x",
                                      "share@p=0.5:gbps=1",
                                      "share@batch=1:gbps=1",
                                      "share@n=1:gbps=1:dir=up",
                                      "share@n=1:gbps=1:x=2",
                                      "slow@n=1:x=2:gbps=1",
                                      "kernel",
                                      "kernel@",
                                      "kernel@batch",
                                      "kernel@batch=x",
                                      "meteor@batch=1",
                                      "kernel@n=0",
                                      "kernel@p=0",
                                      "kernel@p=1.5",
                                      "kernel@p=abc",
                                      "kernel@time=5",
                                      "kernel@time=5min",
                                      "alloc@time=1ms",
                                      "alloc@batch=1",
                                      "slow@time=1ms",
                                      "slow@n=1:x=1",
                                      "slow@n=1:x=2000",
                                      "slow@n=1:y=2",
                                      "kernel@n=1:x=2",
                                      "kernel@n=1,",
                                      ",kernel@n=1",
                                      "kernel@n=1,,x",
                                      "kernel@when=1",
                                      " kernel@n=1",
                                      "kernel@n=-1",
                                      "slow@n=1:for=0s",
                                      "slow@n=1:x=2:for"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = ferry__fault_spec_parse(bad[i], &s);
        if (rc != FERRY_EPARSE && rc != FERRY_ERANGE)
            fail_msg("'%s' was accepted (rc %d)", bad[i], rc);
        assert_non_null(strstr(ferry_last_error(), "accepted"));
        assert_int_equal(s.n, 0);
    }
    char many[4096] = "";
    for (int i = 0; i < 40; i++)
        strcat(many, i ? ",kernel@n=1" : "kernel@n=1");
    assert_int_equal(ferry__fault_spec_parse(many, &s), FERRY_ERANGE);
}

typedef struct walk {
    int gpu, cpu, failed;
    unsigned records; /* lines in the failure log */
    ferry_pipeline_stats_t st;
} walk_t;

/* Up to two more options for the walks (NULL: none). */
static const char *walk_key, *walk_val, *walk_key2, *walk_val2;

/* 24 batches of 4 chunks (256 KiB chunks) of random floats through `scale`, with the fault
 * schedule @spec; checks exactly-once and the output of every batch that did not fail. */
static walk_t walk(const char *spec, uint64_t seed)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ferry-faults-XXXXXX");
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    /* A copy per chunk unless the walk says otherwise (the counts checked are per chunk);
     * later pairs win. */
    const char *kv[] = {"inject", spec, "failure_log", log, "coalesce_bytes", "0", walk_key,
                        walk_val, NULL, NULL,          NULL};
    if (walk_key != NULL && walk_key2 != NULL)
        kv[8] = walk_key2, kv[9] = walk_val2;
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_workload_t *wl = test_workload("scale");
    ferry_stage_t st = *ferry_workload_stage(wl);
    const size_t chunk = 256u << 10, per = 4 * chunk, nb = 24, total = nb * per;
    test_bufs_t bufs = test_bufs_alloc(total);
    unsigned char *in = bufs.in, *out = bufs.out, *ref = bufs.ref;
    uint64_t rs = seed;
    test_fill_floats(in, total, &rs);
    memset(out, 0xAB, total);
    assert_int_equal(ferry_workload_reference(wl, in, ref, total), 0);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, chunk);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static test_done_t d;
    memset(&d, 0, sizeof(d));
    test_submit_split(p, in, out, (size_t)nb * per, per, test_on_done, &d);
    walk_t w = {0};
    w.st.size = sizeof(w.st);
    assert_int_equal(ferry_pipeline_stats(p, &w.st), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    for (size_t b = 0; b < nb; b++)
        if (atomic_load(&d.calls[b]) != 1)
            fail_msg("inject '%s': batch %zu completed %d times", spec, b,
                     atomic_load(&d.calls[b]));
    w.gpu = atomic_load(&d.gpu);
    w.cpu = atomic_load(&d.cpu);
    w.failed = atomic_load(&d.failed);
    assert_int_equal(w.gpu + w.cpu + w.failed, (int)nb);
    if (w.failed == 0 && memcmp(out, ref, total) != 0)
        fail_msg("inject '%s': output differs from the CPU reference", spec);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[2048];
    while (fgets(line, sizeof(line), f) != NULL) {
        w.records++;
        assert_non_null(strstr(line, "\"batch\":"));
        assert_non_null(strstr(line, "\"error\":\""));
        assert_non_null(strstr(line, "\"plan\":"));
    }
    fclose(f);
    unlink(log);
    test_bufs_free(&bufs);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    return w;
}

/* Sanitizer builds (FERRY_TEST_SCALE=sanitizer) walk fewer points: the same code, run slower. */
/* walk() with the fault spec @fault=@at (fault "kernel@batch", at 3: "kernel@batch=3"). */
static walk_t walk_at(const char *fault, int at, uint64_t seed)
{
    char spec[64];
    snprintf(spec, sizeof(spec), "%s=%d", fault, at);
    return walk(spec, seed);
}

static int step(int normal)
{
    const char *s = getenv("FERRY_TEST_SCALE");
    return s != NULL && strcmp(s, "sanitizer") == 0 ? normal * 4 : normal;
}

static void test_kernel_fault_walk(void **state)
{
    (void)state;
    uint64_t seed = test_seed(21);
    /* Every batch in turn: its first kernel fails once; the chunk is retried on the GPU a
     * ladder step lower and succeeds: every batch on the GPU, one record (action "retry"). */
    for (int b = 0; b < 24; b += step(1)) {
        walk_t w = walk_at("kernel@batch", b, seed + (uint64_t)b);
        assert_int_equal(w.gpu, 24);
        assert_int_equal(w.cpu, 0);
        assert_int_equal(w.records, 1);
        assert_int_equal(w.st.chunks_retried, 1);
        assert_int_equal(w.st.chunks_cpu, 0);
        assert_int_equal(w.st.ladder_steps_down, 1);
        assert_false(w.st.gpu_lost);
    }
    /* Without retries (gpu_retries=0) the CPU redoes that chunk. */
    walk_key = "gpu_retries", walk_val = "0";
    for (int b = 0; b < 24; b += step(6)) {
        walk_t w = walk_at("kernel@batch", b, seed + 50 + (uint64_t)b);
        assert_int_equal(w.cpu, 1);
        assert_int_equal(w.gpu, 23);
        assert_int_equal(w.records, 1);
        assert_int_equal(w.st.chunks_cpu, 1);
        assert_int_equal(w.st.chunks_retried, 0);
    }
    /* Kernel number K of the stream (any chunk), at many points. */
    for (int k = 1; k <= 96; k += step(7)) {
        walk_t w = walk_at("kernel@n", k, seed + 100 + (uint64_t)k);
        assert_int_equal(w.cpu, 1);
        assert_int_equal(w.records, 1);
    }
    walk_key = walk_val = NULL;
    /* Random kernel faults: whatever hits, nothing is lost and every record is accounted: one
     * per failed attempt, a chunk done on the CPU having failed twice. */
    walk_t w = walk("kernel@p=0.2", seed);
    printf("# p=0.2: %d batches on GPU, %d with CPU help, %u records, %llu retried\n", w.gpu, w.cpu,
           w.records, (unsigned long long)w.st.chunks_retried);
    assert_int_equal(w.records, w.st.chunks_retried + 2 * w.st.chunks_cpu);
    assert_true(w.st.chunks_retried > 0);
}

/* Copies coalesced (coalesce_bytes 1M: a batch's 4 chunks share one copy each way, a kernel
 * each): a fault in any chunk costs its group, which is retried or redone whole, and nothing
 * is lost or wrong. */
static void test_coalesced_fault_walk(void **state)
{
    (void)state;
    uint64_t seed = test_seed(23);
    walk_key = "coalesce_bytes", walk_val = "1M";
    for (int b = 0; b < 24; b += step(3)) {
        walk_t w = walk_at("kernel@batch", b, seed + (uint64_t)b);
        assert_int_equal(w.st.copy_group, 4);
        assert_int_equal(w.gpu, 24);
        assert_int_equal(w.records, 1);
        assert_int_equal(w.st.chunks_retried, 4); /* the group ran again */
        assert_int_equal(w.st.chunks, 96);
    }
    walk_key2 = "gpu_retries", walk_val2 = "0";
    for (int k = 1; k <= 96; k += step(11)) {
        walk_t w = walk_at("kernel@n", k, seed + 100 + (uint64_t)k);
        assert_int_equal(w.cpu, 1);
        assert_int_equal(w.gpu, 23);
        assert_int_equal(w.records, 1);
        assert_int_equal(w.st.chunks_cpu, 4); /* the CPU redid the whole group */
    }
    walk_key2 = walk_val2 = NULL;
    for (int k = 1; k <= 96; k += step(13)) {
        walk_t w = walk_at("sticky@n", k, seed + 200 + (uint64_t)k);
        assert_true(w.st.gpu_lost);
        assert_int_equal(w.failed, 0);
        assert_int_equal(w.gpu + w.cpu, 24);
    }
    walk_t w = walk("kernel@p=0.2", seed);
    assert_int_equal(w.records * 4, w.st.chunks_retried + 2 * w.st.chunks_cpu);
    walk_key = walk_val = NULL;
}

static void test_sticky_fault_walk(void **state)
{
    (void)state;
    uint64_t seed = test_seed(22);
    for (int k = 1; k <= 96; k += step(5)) {
        walk_t w = walk_at("sticky@n", k, seed + (uint64_t)k);
        /* The batches whose chunks were all done before the fault stay on the GPU; everything
         * from the faulting chunk's batch on is finished by the CPU. */
        int first = (k - 1) / 4;
        assert_true(w.st.gpu_lost);
        assert_int_equal(w.failed, 0);
        assert_true(w.gpu <= first);
        assert_true(w.cpu >= 24 - first - 8); /* a few later batches may have finished first */
        assert_true(w.records >= 1);
        assert_true(w.records <= 8 * 4); /* the chunks in flight, at most depth x streams */
    }
    walk_t w = walk("sticky@time=0.3ms", seed);
    assert_true(w.st.gpu_lost);
    assert_int_equal(w.gpu + w.cpu, 24);
}

static void test_slow_link_and_memory(void **state)
{
    (void)state;
    uint64_t seed = test_seed(23);
    walk_t fast = walk("", seed);
    walk_t slow = walk("slow@n=1:x=20", seed);
    printf("# slow link: %.1f GB/s, normal %.1f GB/s\n", slow.st.gbps_h2d, fast.st.gbps_h2d);
    assert_int_equal(slow.gpu, 24);
    assert_int_equal(slow.records, 0);
    assert_true(slow.st.gbps_h2d < 0.35 * fast.st.gbps_h2d);
    walk_t window = walk("slow@time=0.2ms:x=20:for=0.4ms", seed);
    assert_int_equal(window.gpu, 24);
    assert_true(window.st.gbps_h2d < fast.st.gbps_h2d && window.st.gbps_h2d > slow.st.gbps_h2d);
    /* Memory pressure when the slots are made: fewer slots, same results. */
    walk_t mem = walk("alloc@n=7", seed);
    assert_int_equal(mem.gpu, 24);
    assert_int_equal(mem.st.depth, 3);
}

/* Hangs: a kernel that never ends by itself. One that polls the abort flag is stopped once its
 * chunk passes the deadline, and only that chunk is redone on the CPU; one that ignores the flag
 * ends the GPU path a floor later, and everything in flight and after goes to the CPU. Either
 * way nothing is lost and the output is exact. */
static void test_hang_walk(void **state)
{
    (void)state;
    uint64_t seed = test_seed(24);
    for (int b = 0; b < 24; b += step(5)) {
        walk_t w = walk_at("hang@batch", b, seed + (uint64_t)b);
        assert_int_equal(w.st.deadlines_passed, 1);
        assert_false(w.st.gpu_lost);
        assert_int_equal(w.cpu, 1);
        assert_int_equal(w.gpu, 23);
        assert_int_equal(w.records, 1);
        /* Stopped and retired soon after the deadline: the simulator's completion thread
         * checks at every pass, and waits on the device 2 ms at a time. */
        if (w.st.deadline_overrun_ns == 0 || w.st.deadline_overrun_ns > 10000000u)
            fail_msg("hang@batch=%d: aborted chunk retired %llu ns past its deadline "
                     "(want (0, 10 ms])",
                     b, (unsigned long long)w.st.deadline_overrun_ns);
        /* The heartbeat ran through the hang (the kernel left SMs free) and nothing stalled. */
        assert_true(w.st.heartbeats_sent >= 2);
        assert_true(w.st.heartbeats_seen == w.st.heartbeats_sent);
        assert_int_equal(w.st.heartbeat_stalls, 0);
        assert_int_equal(w.st.completion_stalls + w.st.watchdog_stalls, 0);
        w = walk_at("hang-hard@batch", b, seed + 50 + (uint64_t)b);
        assert_true(w.st.gpu_lost);
        assert_true(w.st.gpu_hung);
        printf("# hang-hard@batch=%d: heartbeats sent %llu seen %llu stalls %llu\n", b,
               (unsigned long long)w.st.heartbeats_sent, (unsigned long long)w.st.heartbeats_seen,
               (unsigned long long)w.st.heartbeat_stalls);
        assert_int_equal(w.failed, 0);
        assert_true(w.gpu <= b);
        assert_true(w.records >= 1);
    }
}

/* The ladder's level 1: each non-sticky failure takes a step down (one compute stream, at most
 * 2 chunks in flight, synchronous), 64 good chunks in a row a step back up; results stay exact
 * at every level. */
static void test_ladder(void **state)
{
    (void)state;
    uint64_t seed = test_seed(25);
    walk_key = "gpu_retries", walk_val = "0"; /* kernels counted by n: no retry launches */
    walk_t one = walk("kernel@batch=2", seed);
    printf("# one fault: down %llu, up %llu, level %u\n",
           (unsigned long long)one.st.ladder_steps_down, (unsigned long long)one.st.ladder_steps_up,
           one.st.ladder_level);
    assert_int_equal(one.st.ladder_steps_down, 1);
    assert_int_equal(one.st.ladder_steps_up, 1); /* 88 good chunks follow */
    assert_int_equal(one.st.ladder_level, 0);
    walk_t three = walk("kernel@n=5,kernel@n=6,kernel@n=7", seed);
    assert_int_equal(three.st.ladder_steps_down, 3);
    assert_int_equal(three.cpu, 1); /* kernels 5-7: chunks 0-2 of batch 1 */
    assert_true(three.st.ladder_steps_up >= 1);
    walk_t late = walk("kernel@n=93,kernel@n=94,kernel@n=95", seed);
    assert_int_equal(late.st.ladder_level, 3); /* no good chunks left to climb back */
    walk_t rnd = walk("kernel@p=0.2", seed);
    assert_true(rnd.st.ladder_steps_down > 0);
    walk_key = walk_val = NULL;
}

/* The work of the stages below: each float times 1.0009765625. */
static int scale_exact(const ferry_kernel_args_t *a)
{
    const float *in = a->in;
    float *out = a->out;
    for (size_t i = 0; i < a->bytes / 4; i++)
        out[i] = in[i] * 1.0009765625f;
    return 0;
}

/* A chunk whose GPU attempts both fail (the first and the retry) is done by the CPU: two
 * records (actions "retry" then "cpu"), two ladder steps. On the simulator the kernel is the CPU
 * function, so one function stands for both: it fails attempts 0 and 1 of batch 2 chunk 0. */
static int fails_twice(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    if (a->batch_id == 2 && a->chunk == 0 && a->attempt < 2)
        return FERRY_EKERNEL;
    return scale_exact(a);
}

static void test_retry_fails_too(void **state)
{
    (void)state;
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ferry-retry-XXXXXX");
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    const char *const kv[] = {"failure_log", log, NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("fails-twice", fails_twice);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
    pc.coalesce_bytes = SIZE_MAX; /* a copy per chunk: the records counted are per chunk */
    ferry_pipeline_t *p = test_pipeline(&pc);
    static test_done_t d;
    memset(&d, 0, sizeof(d));
    float *in = malloc(16u << 20), *out = calloc(1, 16u << 20);
    assert_true(in && out);
    for (size_t i = 0; i < (4u << 20); i++)
        in[i] = 1.0f + (float)(i % 1000) / 1000.0f;
    test_submit_split(p, in, out, 4 * (4u << 20), 4u << 20, test_on_done, &d);
    ferry_pipeline_stats_t ps = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &ps), 0);
    assert_int_equal(ferry_pipeline_close(p), 0);
    for (int b = 0; b < 4; b++)
        assert_int_equal(atomic_load(&d.calls[b]), 1);
    assert_int_equal(atomic_load(&d.cpu), 1);
    assert_int_equal(atomic_load(&d.gpu), 3);
    assert_int_equal(ps.failure_records, 2);
    assert_int_equal(ps.chunks_cpu, 1);
    assert_int_equal(ps.chunks_retried, 0);
    assert_int_equal(ps.ladder_steps_down, 2);
    for (size_t i = 0; i < (4u << 20); i++)
        if (out[i] != in[i] * 1.0009765625f)
            fail_msg("output differs at element %zu", i);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[2048];
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(strstr(line, "\"attempt\":0"));
    assert_non_null(strstr(line, "\"level\":1"));
    assert_non_null(strstr(line, "\"action\":\"retry\""));
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(strstr(line, "\"attempt\":1"));
    assert_non_null(strstr(line, "\"level\":2"));
    assert_non_null(strstr(line, "\"action\":\"cpu\""));
    assert_null(fgets(line, sizeof(line), f));
    fclose(f);
    unlink(log);
    free(in);
    free(out);
    ferry_runtime_destroy(rt);
}

/* Without a CPU function a failed chunk fails its batch, once, with the reason. */
static int gpu_only_cpu(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    if (a->attempt > 0)
        return FERRY_ENOTSUP; /* stands in for "no CPU function" on the simulator */
    return scale_exact(a);
}

static void test_no_fallback_fails_once(void **state)
{
    (void)state;
    const char *const kv[] = {"inject", "kernel@batch=2", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_device_t *dev = test_device(rt);
    ferry_stage_t st = test_cpu_stage("gpu-only", gpu_only_cpu);
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
    ferry_pipeline_t *p = test_pipeline(&pc);
    static test_done_t d;
    memset(&d, 0, sizeof(d));
    float *buf = calloc(1, 16u << 20);
    test_submit_split(p, buf, buf, 4 * (4u << 20), 4u << 20, test_on_done, &d);
    assert_int_equal(ferry_pipeline_close(p), 0);
    for (int b = 0; b < 4; b++)
        assert_int_equal(atomic_load(&d.calls[b]), 1);
    assert_int_equal(atomic_load(&d.failed), 1);
    assert_int_equal(atomic_load(&d.gpu), 3);
    free(buf);
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_spec_parser), cmocka_unit_test(test_kernel_fault_walk),
          cmocka_unit_test(test_coalesced_fault_walk), cmocka_unit_test(test_sticky_fault_walk),
          cmocka_unit_test(test_slow_link_and_memory), cmocka_unit_test(test_hang_walk),
          cmocka_unit_test(test_ladder), cmocka_unit_test(test_retry_fails_too),
          cmocka_unit_test(test_no_fallback_fails_once))
