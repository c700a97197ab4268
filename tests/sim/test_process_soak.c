/* Soak of worker processes (isolation=process) on the simulator: 100,000 batches of random
 * sizes (1 byte to 64 KiB, one in 64 up to 1 MiB) through `scale`, split over 20 seeds, each
 * seed its own runtime and pipeline, while a thread deals faults at random moments: the worker
 * killed (SIGKILL) or stopped (SIGSTOP: option worker_deadline_ms kills it), a few batches that
 * end every worker they meet (poison: they run on the CPU in this process at last), and for some
 * seeds a sticky error or a hard hang injected in the first worker; every third seed stops its
 * worker once the batches are done, before the pipeline's destroy (killed at its deadline). Every
 * batch is called back exactly once, with status 0 and the reference's bytes; afterwards the
 * helper and every worker seen are gone, and no shared memory region or descriptor is left.
 * Sanitizer builds (FERRY_TEST_SCALE=sanitizer) run 4,000 batches, three seeds with a poisoned
 * batch; FERRY_TEST_SEED runs that one seed alone. A wall-clock budget (150 s, 180 s under
 * sanitizers) stops starting seeds once it has passed (what ran is checked); a plain build must
 * have run at least 50,000 batches. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "core/runtime.h"
#include "pipeline/remote.h"

#define SEEDS      20
#define RING       24         /* batches' buffers (more than the queue depth, 16) */
#define BIG        (1u << 20) /* the largest batch */
#define SMALL      (1u << 16) /* the largest of most batches */
#define MAX_POISON 2
#define MAX_PIDS   256
#define TAIL       64 /* no fault dealt once fewer batches than this are left to call back */
#define MARK0      0x3fabcdefu
#define MARK1      0xbfabcdefu /* a poisoned batch starts with these two floats */

static pid_t test_pid;
static ferry_cpu_fn scale_cpu; /* set before the first runtime: its helper forks with it */

/* The scale stage's CPU function, but in a worker (any process but the test's) a batch that
 * starts with the mark ends it: _exit or SIGKILL, by the batch's second word. */
static int poison_scale(const ferry_kernel_args_t *a, void *user)
{
    const unsigned char *in = a->in;
    uint32_t w[2];
    if (getpid() != test_pid && a->offset == 0 && a->bytes >= 8) {
        memcpy(w, in, 8);
        if (w[0] == MARK0 && w[1] == MARK1)
            raise(SIGKILL);
        if (w[0] == MARK0 && w[1] == MARK0)
            _exit(99);
    }
    return scale_cpu(a, user);
}

typedef struct soak {
    const ferry_workload_t *wl;
    unsigned nb;
    atomic_int *calls; /* per batch id */
    atomic_int failed, bad, twice, stray, gpu, cpu, poison_off_cpu;
    atomic_uint done;
    atomic_llong first_bad; /* the first batch whose output differs (-1: none) */
    uint64_t poison[MAX_POISON];
    unsigned npoison;
    unsigned char *in[RING], *out[RING];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned freel[RING], nfree;
} soak_t;

static bool is_poison(const soak_t *s, uint64_t id)
{
    for (unsigned i = 0; i < s->npoison; i++)
        if (s->poison[i] == id)
            return true;
    return false;
}

/* @out is the reference's output for @in (compared a page at a time: scale is per float). */
static bool matches(const ferry_workload_t *wl, const unsigned char *in, const unsigned char *out,
                    size_t bytes)
{
    unsigned char ref[4096];
    for (size_t off = 0; off < bytes; off += sizeof(ref)) {
        size_t n = bytes - off < sizeof(ref) ? bytes - off : sizeof(ref);
        if (ferry_workload_reference(wl, in + off, ref, n) != 0 || memcmp(ref, out + off, n) != 0)
            return false;
    }
    return true;
}

static unsigned slot_of(const soak_t *s, const void *in)
{
    for (unsigned i = 0; i < RING; i++)
        if (s->in[i] == in)
            return i;
    return RING;
}

/* On the reader thread: counted and checked here, asserted by the test's thread. A batch's
 * buffers are reused once it is called back the first time. */
static void on_done(const ferry_batch_result_t *r, void *arg)
{
    soak_t *s = arg;
    unsigned slot = slot_of(s, r->in);
    if (r->id >= s->nb || slot == RING) {
        atomic_fetch_add(&s->stray, 1);
        return;
    }
    if (atomic_fetch_add(&s->calls[r->id], 1) != 0) {
        atomic_fetch_add(&s->twice, 1);
        return;
    }
    if (r->status != 0) {
        atomic_fetch_add(&s->failed, 1);
    } else if (!matches(s->wl, r->in, r->out, r->bytes)) {
        long long none = -1;
        atomic_fetch_add(&s->bad, 1);
        atomic_compare_exchange_strong(&s->first_bad, &none, (long long)r->id);
    }
    atomic_fetch_add(r->where == FERRY_DONE_GPU ? &s->gpu : &s->cpu, 1);
    if (is_poison(s, r->id) && r->where != FERRY_DONE_CPU)
        atomic_fetch_add(&s->poison_off_cpu, 1);
    pthread_mutex_lock(&s->mu);
    s->freel[s->nfree++] = slot;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->done, 1);
}

static unsigned take_slot(soak_t *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->nfree == 0)
        pthread_cond_wait(&s->cv, &s->mu);
    unsigned slot = s->freel[--s->nfree];
    pthread_mutex_unlock(&s->mu);
    return slot;
}

/* A batch's size: one in 64 up to 1 MiB, the others 1 byte to 64 KiB, spread over the powers
 * of two (small ones as often as large ones). */
static size_t pick_size(uint64_t *rng)
{
    if (test_rand(rng) % 64 == 0)
        return (size_t)test_rand_range(rng, SMALL, BIG);
    unsigned bits = (unsigned)test_rand_range(rng, 0, 16);
    size_t hi = (size_t)1 << bits;
    return (size_t)test_rand_range(rng, hi / 2 + 1, hi);
}

/* Submit the seed's @s->nb batches through @p and drain. */
static void submit_all(ferry_pipeline_t *p, soak_t *s, uint64_t *rng)
{
    for (unsigned i = 0; i < s->nb; i++) {
        size_t sz = pick_size(rng);
        bool poisoned = is_poison(s, i);
        if (poisoned && sz < 4096)
            sz = 4096;
        unsigned slot = take_slot(s);
        unsigned char *in = s->in[slot];
        test_fill_floats(in, sz, rng);
        uint32_t w[2] = {MARK0, test_rand(rng) % 2 ? MARK1 : MARK0};
        if (poisoned)
            memcpy(in, w, 8);
        else if (sz >= 8 && memcmp(in, w, 4) == 0)
            in[0] ^= 1; /* never a mark by chance */
        memset(s->out[slot], 0, sz);
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in;
        b.out = s->out[slot];
        b.bytes = sz;
        uint64_t id = UINT64_MAX;
        assert_int_equal(ferry_pipeline_submit(p, &b, on_done, s, &id), 0);
        assert_int_equal(id, i);
    }
    assert_int_equal(ferry_pipeline_drain(p), 0);
}

typedef struct faults {
    ferry_pipeline_t *p;
    soak_t *s;
    atomic_int stop;
    uint64_t rng;
    unsigned max_ms;
    int kills_max, stops_max, kills, stops;
    bool prefer_stop;                        /* the first fault a stop (every fourth seed) */
    pid_t seen[MAX_PIDS], victims[MAX_PIDS]; /* the fault thread's until it is joined */
    int nseen, nvictims;
} faults_t;

static void note_pid(faults_t *f, pid_t pid)
{
    for (int i = 0; i < f->nseen; i++)
        if (f->seen[i] == pid)
            return;
    if (pid > 0 && f->nseen < MAX_PIDS)
        f->seen[f->nseen++] = pid;
}

/* Faults at random moments (10 ms to max_ms apart): the worker killed or stopped, once it (a new
 * one after the last fault) has finished a batch, and while more than TAIL batches are left. */
static void *fault_main(void *arg)
{
    faults_t *f = arg;
    pid_t last = -1;
    unsigned done_at = 0;
    while (!atomic_load(&f->stop)) {
        /* the first fault as soon as it may be dealt: short seeds (sanitizers) get one too */
        unsigned ms =
            f->kills + f->stops == 0 ? 1 : (unsigned)test_rand_range(&f->rng, 10, f->max_ms);
        for (unsigned t = 0; t < ms && !atomic_load(&f->stop); t += 5)
            usleep(5000);
        pid_t pid = ferry__remote_worker_pid(f->p);
        note_pid(f, pid);
        unsigned done = atomic_load(&f->s->done);
        if (pid <= 0 || pid == last || done <= done_at || done + TAIL >= f->s->nb)
            continue;
        bool stop = f->stops < f->stops_max &&
                    (f->kills >= f->kills_max || (f->prefer_stop && f->stops == 0) ||
                     test_rand(&f->rng) % 4 == 0);
        if (!stop && f->kills >= f->kills_max)
            continue;
        if (kill(pid, stop ? SIGSTOP : SIGKILL) != 0)
            continue;
        *(stop ? &f->stops : &f->kills) += 1;
        if (f->nvictims < MAX_PIDS)
            f->victims[f->nvictims++] = pid;
        last = pid;
        done_at = atomic_load(&f->s->done);
    }
    return NULL;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* What each open descriptor is, on a failure. */
static void print_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], to[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, to, sizeof(to) - 1);
        to[n > 0 ? n : 0] = '\0';
        print_message("  fd %s -> %s\n", e->d_name, to);
    }
    closedir(d);
}

/* The children of @pid (its one thread's; the helper has one), at most @max in @out. */
static int children_of(pid_t pid, pid_t *out, int max)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0, c;
    while (n < max && fscanf(f, "%d", &c) == 1)
        out[n++] = c;
    fclose(f);
    return n;
}

typedef struct plan {
    uint64_t seed;
    unsigned nb;
    char inject[48];
    bool sanitizer, stop_at_close; /* the worker stopped, idle, before the pipeline's destroy */
} plan_t;

typedef struct tally {
    unsigned long long batches, gpu, cpu, restarts, seeds;
    int kills, stops, poisons, injected, retired;
} tally_t;

/* The seed's faults: its poisoned batches (0 to 2, 300 or more apart, in @s), what is injected
 * in its first worker (@pl->inject), the bounds of the fault thread (@f), and whether the worker
 * is stopped before the destroy. */
static void plan_faults(plan_t *pl, uint64_t *rng, soak_t *s, faults_t *f)
{
    unsigned want = (unsigned)test_rand_range(rng, 0, MAX_POISON);
    for (unsigned k = 0; k < want && pl->nb > 400; k++) {
        uint64_t id = test_rand_range(rng, 100, pl->nb - 100);
        bool near = false;
        for (unsigned j = 0; j < s->npoison; j++)
            near |= (s->poison[j] > id ? s->poison[j] - id : id - s->poison[j]) < 300;
        if (!near)
            s->poison[s->npoison++] = id;
    }
    /* under sanitizers a poisoned batch costs a dozen or more workers of about 2 s each (every
     * worker that ends counts against the oldest batch in flight, not always the poisoned one):
     * three seeds have one */
    if (pl->sanitizer && pl->nb <= 400 && pl->seed % 7 == 3)
        s->poison[s->npoison++] = test_rand_range(rng, pl->nb / 4, pl->nb / 2);
    unsigned n = (unsigned)test_rand_range(rng, 1, pl->nb / 10 > 1 ? pl->nb / 10 : 1);
    if (pl->seed % 5 == 3)
        snprintf(pl->inject, sizeof(pl->inject), "sticky@batch=%u", n);
    else if (pl->seed % 5 == 4)
        snprintf(pl->inject, sizeof(pl->inject), "hang-hard@batch=%u", n);
    f->kills_max = (int)test_rand_range(rng, 1, pl->sanitizer ? 3 : 10);
    f->stops_max = (int)test_rand_range(rng, pl->seed % 4 == 1, pl->sanitizer ? 1 : 2);
    f->prefer_stop = pl->seed % 4 == 1;
    f->max_ms = pl->sanitizer ? 600 : 250;
    pl->stop_at_close = pl->seed % 3 == 0;
}

static soak_t *soak_new(const ferry_workload_t *wl, unsigned nb)
{
    soak_t *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->wl = wl;
    s->nb = nb;
    s->calls = calloc(nb, sizeof(*s->calls));
    assert_non_null(s->calls);
    atomic_store(&s->first_bad, -1);
    for (unsigned i = 0; i < RING; i++) {
        s->in[i] = malloc(BIG);
        s->out[i] = malloc(BIG);
        assert_true(s->in[i] != NULL && s->out[i] != NULL);
        s->freel[s->nfree++] = i;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

static void soak_free(soak_t *s)
{
    for (unsigned i = 0; i < RING; i++) {
        free(s->in[i]);
        free(s->out[i]);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->calls);
    free(s);
}

/* Every batch once, status 0, bit-exact; the poisoned ones on the CPU; the figures agree. */
static void check_batches(const plan_t *pl, soak_t *s, ferry_pipeline_t *p)
{
    for (unsigned i = 0; i < s->nb; i++)
        if (atomic_load(&s->calls[i]) != 1)
            fail_msg("seed %llu: batch %u called back %d times", (unsigned long long)pl->seed, i,
                     atomic_load(&s->calls[i]));
    if (atomic_load(&s->bad) != 0)
        fail_msg("seed %llu: %d batch(es) differ from the reference, the first %lld",
                 (unsigned long long)pl->seed, atomic_load(&s->bad), atomic_load(&s->first_bad));
    assert_int_equal(atomic_load(&s->twice), 0);
    assert_int_equal(atomic_load(&s->stray), 0);
    assert_int_equal(atomic_load(&s->failed), 0);
    assert_int_equal(atomic_load(&s->poison_off_cpu), 0);
    assert_int_equal(atomic_load(&s->done), s->nb);
    assert_int_equal(atomic_load(&s->gpu) + atomic_load(&s->cpu), (int)s->nb);
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &st), 0);
    assert_int_equal(st.batches_submitted, s->nb);
    assert_int_equal(st.batches_done_gpu, atomic_load(&s->gpu));
    assert_int_equal(st.batches_done_cpu, atomic_load(&s->cpu));
    assert_int_equal(st.batches_failed, 0);
}

/* After destroy: the helper, and every worker the test saw, are gone; the shared memory
 * regions and the open descriptors are as before the seed. */
static void check_left(const plan_t *pl, const faults_t *f, pid_t helper, int regions, int fds)
{
    assert_int_equal(kill(helper, 0), -1);
    for (int i = 0; i < f->nseen; i++)
        if (kill(f->seen[i], 0) == 0)
            fail_msg("seed %llu: worker %d outlived its runtime", (unsigned long long)pl->seed,
                     (int)f->seen[i]);
    for (int i = 0; i < f->nvictims; i++)
        assert_int_equal(kill(f->victims[i], 0), -1);
    if (test_shared_regions() != regions || open_fds() != fds) {
        print_fds();
        fail_msg("seed %llu: %d shared region(s) and %d descriptor(s) open, %d and %d before",
                 (unsigned long long)pl->seed, test_shared_regions(), open_fds(), regions, fds);
    }
}

/* The helper's children once the seed's batches are done: the running worker and its warm
 * spare (option worker_spare), nothing else (no zombie nor stopped worker left behind), when
 * the kernel lists them. A spare still starting is waited for (up to 10 s). */
static void check_children(const plan_t *pl, faults_t *f, ferry_pipeline_t *p, pid_t helper)
{
    pid_t kids[8], w = ferry__remote_worker_pid(p), sp = -1;
    note_pid(f, w);
    int n = -1, odd = 0;
    for (int tries = 0; tries < 1000; tries++) {
        sp = ferry__remote_spare_pid(p);
        if ((n = children_of(helper, kids, 8)) < 0)
            return;
        odd = 0;
        for (int i = 0; i < n; i++)
            odd += kids[i] != w && kids[i] != sp;
        if (odd == 0)
            break;
        usleep(10000);
    }
    note_pid(f, sp);
    if (odd != 0)
        fail_msg("seed %llu: the helper has %d child(ren) (first %d), the worker is %d and its "
                 "spare %d",
                 (unsigned long long)pl->seed, n, n > 0 ? (int)kids[0] : -1, (int)w, (int)sp);
}

/* One seed: its runtime, pipeline and fault thread; checked; its line printed; added to @t. */
static void run_seed(plan_t *pl, const ferry_workload_t *wl, tally_t *t)
{
    uint64_t rng = pl->seed * 0x9e3779b97f4a7c15ull + 1;
    soak_t *s = soak_new(wl, pl->nb);
    faults_t f = {.s = s, .rng = test_rand(&rng)};
    plan_faults(pl, &rng, s, &f);
    int regions = test_shared_regions(), fds = open_fds();
    /* no bandwidth alerts: small batches are what this soak is about */
    const char *kv[] = {"isolation",
                        "process",
                        "worker_deadline_ms",
                        pl->sanitizer ? "1500" : "300",
                        "bw_alert_ratio",
                        "0",
                        "inject",
                        pl->inject,
                        NULL};
    if (pl->inject[0] == '\0')
        kv[6] = NULL;
    uint64_t t0 = test_now_ns();
    ferry_runtime_t *rt = test_sim_runtime_with(kv);
    pid_t helper = ferry__zyg_pid(rt->zyg);
    ferry_device_t *dev = NULL;
    assert_int_equal(ferry_device_get(rt, 0, &dev), 0);
    ferry_stage_t st = *ferry_workload_stage(wl);
    st.name = "poison-scale";
    st.cpu = poison_scale;
    ferry_pipeline_config_t pc = test_pipeline_config(dev, &st, 1u << 20);
    ferry_pipeline_t *p = test_pipeline(&pc);
    f.p = p;
    note_pid(&f, ferry__remote_worker_pid(p));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fault_main, &f), 0);
    submit_all(p, s, &rng);
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    check_batches(pl, s, p);
    check_children(pl, &f, p, helper);
    ferry_pipeline_stats_t ps = FERRY_PIPELINE_STATS_INIT;
    assert_int_equal(ferry_pipeline_stats(p, &ps), 0);
    pid_t idle = pl->stop_at_close ? ferry__remote_worker_pid(p) : -1;
    if (idle > 0)
        assert_int_equal(kill(idle, SIGSTOP), 0); /* its answer to CLOSE never comes */
    uint64_t t1 = test_now_ns();
    assert_int_equal(ferry_pipeline_destroy(p), 0);
    double close_ms = (double)(test_now_ns() - t1) / 1e6;
    if (idle > 0) /* killed at its deadline (a poll or two), reaped */
        assert_true(close_ms < 4 * atof(kv[3]) + 2000);
    assert_int_equal(ferry_runtime_destroy(rt), 0);
    check_left(pl, &f, helper, regions, fds);
    if (f.kills + f.stops + (int)s->npoison > 0)
        assert_true(ps.worker_restarts >= 1);
    print_message("seed %2llu: %u batches (%d on the CPU), %d kills, %d stops, %u poisoned, "
                  "inject %s: %llu restarts%s, destroy %.0f ms%s, %.0f ms\n",
                  (unsigned long long)pl->seed, pl->nb, atomic_load(&s->cpu), f.kills, f.stops,
                  s->npoison, pl->inject[0] ? pl->inject : "-",
                  (unsigned long long)ps.worker_restarts, ps.gpu_lost ? " (device retired)" : "",
                  close_ms, idle > 0 ? " (its worker stopped)" : "",
                  (double)(test_now_ns() - t0) / 1e6);
    t->batches += pl->nb;
    t->gpu += (unsigned long long)atomic_load(&s->gpu);
    t->cpu += (unsigned long long)atomic_load(&s->cpu);
    t->restarts += ps.worker_restarts;
    t->kills += f.kills;
    t->stops += f.stops;
    t->poisons += (int)s->npoison;
    t->injected += pl->inject[0] != '\0';
    t->retired += ps.gpu_lost;
    t->seeds++;
    soak_free(s);
}

static void test_process_soak(void **state)
{
    (void)state;
    const char *scale = getenv("FERRY_TEST_SCALE"), *one = getenv("FERRY_TEST_SEED");
    bool sanitizer = scale != NULL && strcmp(scale, "sanitizer") == 0;
    unsigned total = sanitizer ? 4000 : 100000;
    double budget_s = sanitizer ? 180 : 150;
    ferry_workload_t *wl = test_workload("scale");
    test_pid = getpid(); /* before the first runtime: its helper, and so the workers, see them */
    scale_cpu = ferry_workload_stage(wl)->cpu;
    tally_t t = {0};
    uint64_t t0 = test_now_ns();
    unsigned seeds = one != NULL ? 1 : SEEDS;
    for (unsigned k = 0; k < seeds; k++) {
        double el = (double)(test_now_ns() - t0) / 1e9;
        if (el > budget_s) {
            print_message("budget of %.0f s passed after %u seeds (%.0f s): no more seeds\n",
                          budget_s, k, el);
            break;
        }
        plan_t pl = {.seed = one != NULL ? strtoull(one, NULL, 0) : k + 1,
                     .nb = total / SEEDS,
                     .sanitizer = sanitizer};
        run_seed(&pl, wl, &t);
    }
    print_message("total: %llu batches over %llu seeds (%llu on the GPU, %llu on the CPU), %d "
                  "kills, %d stops, %d poisoned, %d injected, %llu restarts, %d retired, %.1f s; "
                  "every batch once and bit-exact, nothing left behind\n",
                  t.batches, t.seeds, t.gpu, t.cpu, t.kills, t.stops, t.poisons, t.injected,
                  t.restarts, t.retired, (double)(test_now_ns() - t0) / 1e9);
    if (one == NULL && !sanitizer)
        assert_true(t.batches >= 50000); /* the budget may shorten the soak, not empty it */
    if (one == NULL && t.seeds >= 10)
        assert_true(t.kills > 0 && t.stops > 0 && t.poisons > 0 && t.injected > 0);
    ferry_workload_destroy(wl);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_process_soak))
