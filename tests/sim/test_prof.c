/* The phase profile of a FERRY_PROF build (src/base/prof.h; the ASan+UBSan tree is one, CMake
 * option FERRY_PROF): batches gathered into slabs from several threads on the simulated GPU, the
 * profile's debug line at the pipeline's destroy read back through the log handler. Each
 * submitted batch counts one submit, each slab one send (its lay-out, its submit), one issue
 * (its copy in, launch and copy out) and one call back of its items. A build without it logs no
 * profile. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static char prof_line[2048];
static atomic_int prof_lines;

static void on_log(ferry_log_level_t level, const char *subsystem, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    if (strcmp(subsystem, "prof") == 0) {
        snprintf(prof_line, sizeof(prof_line), "%s", msg);
        atomic_fetch_add(&prof_lines, 1);
    }
}

/* Phase @name's time (us) and count in the profile line; false when it is not there. */
static bool phase(const char *name, unsigned long long *us, unsigned long long *n)
{
    char key[64];
    snprintf(key, sizeof(key), " %s ", name);
    const char *at = strstr(prof_line, key);
    return at != NULL && sscanf(at + strlen(key), "%llu/%llu", us, n) == 2;
}

static void on_done(const ferry_batch_result_t *r, void *arg)
{
    if (r->status != 0)
        atomic_fetch_add((atomic_int *)arg, 1);
}

enum { THREADS = 4, PER_THREAD = 150, ITEM = 4096 };

typedef struct {
    ferry_pipeline_t *p;
    unsigned char *in, *out;
    atomic_int *failed;
    unsigned t;
} sub_t;

static void *submitter(void *arg)
{
    sub_t *s = arg;
    for (unsigned i = 0; i < PER_THREAD; i++) {
        size_t at = ((size_t)s->t * PER_THREAD + i) * ITEM;
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = s->in + at;
        b.out = s->out + at;
        b.bytes = ITEM;
        assert_int_equal(ferry_pipeline_submit(s->p, &b, on_done, s->failed, NULL), 0);
    }
    return NULL;
}

static void test_gathered_counts(void **state)
{
    (void)state;
    const char *const kv[] = {"gather_bytes", "256K", NULL};
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    ferry_set_log_handler(on_log, NULL);
    ferry_set_log_level(FERRY_LOG_DEBUG);
    ferry_workload_t *wl = test_workload("copy");
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = test_device(rt);
    pc.stage = ferry_workload_stage(wl);
    ferry_pipeline_t *p = test_pipeline(&pc);
    size_t total = (size_t)THREADS * PER_THREAD * ITEM;
    unsigned char *in = malloc(total), *out = calloc(1, total);
    assert_true(in != NULL && out != NULL);
    uint64_t r = test_seed(5);
    test_fill_random(in, total, &r);
    atomic_int failed = 0;
    pthread_t th[THREADS];
    sub_t sub[THREADS];
    for (unsigned t = 0; t < THREADS; t++) {
        sub[t] = (sub_t){p, in, out, &failed, t};
        assert_int_equal(pthread_create(&th[t], NULL, submitter, &sub[t]), 0);
    }
    for (unsigned t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(ferry_pipeline_drain(p), 0);
    assert_int_equal(atomic_load(&failed), 0);
    assert_memory_equal(in, out, total);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.batches_gathered, THREADS * PER_THREAD);
    assert_true(st.slabs > 0);
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    ferry_set_log_handler(NULL, NULL);
#if FERRY_PROF
    assert_int_equal(atomic_load(&prof_lines), 1);
    print_message("%s\n", prof_line);
    unsigned long long us, n;
    assert_true(phase("submit", &us, &n));
    assert_int_equal(n, THREADS * PER_THREAD);
    assert_true(us > 0);
    assert_true(phase("send", &us, &n));
    assert_int_equal(n, st.slabs);
    assert_true(phase("send_layout", &us, &n));
    assert_int_equal(n, st.slabs);
    assert_true(phase("send_issue", &us, &n));
    assert_int_equal(n, st.slabs);
    const char *issue[] = {"issue", "issue_in", "issue_run", "issue_out"};
    for (int k = 0; k < 4; k++) { /* a slab is one chunk, issued once (no fault here) */
        assert_true(phase(issue[k], &us, &n));
        assert_int_equal(n, st.slabs);
    }
    assert_true(phase("slab_items", &us, &n));
    assert_int_equal(n, st.slabs);
    assert_true(phase("comp_cb", &us, &n));
    assert_true(n >= 1 && n <= st.slabs);
    assert_true(phase("comp_poll", &us, &n));
    assert_true(n >= 1);
#else
    assert_int_equal(atomic_load(&prof_lines), 0); /* no profile outside a FERRY_PROF build */
    (void)phase;
#endif
    free(in);
    free(out);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_gathered_counts))
