/* `ferry run`: the main job. Streams generated data (or a file) through a built-in workload
 * on the GPU or the simulated H200, checks every output byte against the CPU reference, and
 * prints a summary (text or --json): time, GB/s each way, overlap, engine utilisation, batches;
 * --report draws it as an HTML page with a timeline of the first chunks (report.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "progress.h"
#include "report.h"
#include "run_io.h"

typedef struct run_totals {
    uint64_t ok_gpu, ok_cpu, failed, mismatched, verified_bytes;
    uint64_t first_bad_offset;
    int io_error;
} run_totals_t;

typedef struct ring_entry {
    unsigned char *in;  /* input of the batch: own buffer (file) or a slice of the pool */
    unsigned char *out; /* output of the batch */
    unsigned char *own_in;
    size_t bytes;
    uint64_t offset; /* in the stream */
    size_t pool_off; /* generated data: where the input and its reference sit in the pool */
    int status, where;
    uint64_t seq; /* the batch's number, for a stream output written in order */
    bool ready;   /* a stream output: verified, waiting for the batches before it */
} ring_entry_t;

/* Shared by the submitting thread, the pipeline's callback and the verifier threads. */
typedef struct run_state {
    pthread_mutex_t lock;
    pthread_cond_t cv_free, cv_done;
    ring_entry_t *ring;
    size_t nring;
    size_t *freeq, nfree;
    size_t *doneq, dhead, dcount;
    bool stop;
    run_totals_t t;
    uint64_t callbacks;
    /* what verification needs */
    ferry_workload_t *wl;
    const unsigned char *ref; /* generated data: the reference output of the whole pool */
    size_t batch_bytes;
    int outfd;
    /* A stream output (stdout, a device) is written in batch order: the verifier that finds
     * the next batch ready writes it and those after it, one writer at a time. */
    bool ordered, writing;
    uint64_t cut_seq;  /* the first batch that failed: the stream ends before it */
    uint64_t next_seq; /* the next batch to write */
    int signal;        /* SIGINT or SIGTERM taken: stop submitting */
} run_state_t;

/* Deterministic data: byte o of the stream is byte (o % 8) of word(o / 8), whatever the
 * chunking. Each 32-bit half is a float in +-[1, 2): no NaN or infinity, whose payloads the
 * GPU need not preserve, so every workload can be compared bit for bit. */
static uint64_t gen_word(uint64_t seed, uint64_t idx)
{
    uint64_t z = idx * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (z & 0x807fffff807fffffull) | 0x3f8000003f800000ull;
}

static void gen_fill(uint64_t seed, uint64_t offset, unsigned char *dst, size_t n)
{
    size_t i = 0;
    while (i < n && (offset + i) % 8 != 0) {
        uint64_t w = gen_word(seed, (offset + i) / 8);
        dst[i] = (unsigned char)(w >> (8 * ((offset + i) % 8)));
        i++;
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w = gen_word(seed, (offset + i) / 8);
        memcpy(dst + i, &w, 8); /* little-endian: byte k is bits 8k.. */
    }
    for (; i < n; i++) {
        uint64_t w = gen_word(seed, (offset + i) / 8);
        dst[i] = (unsigned char)(w >> (8 * ((offset + i) % 8)));
    }
}

static ssize_t read_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

/* A stream (stdin, a device): read up to @n bytes, fewer only at the end of the stream.
 * Returns the bytes read, -1 on an error, -2 when a signal stopped the run while it waited. */
static ssize_t read_stream(int fd, void *buf, size_t n, run_state_t *st)
{
    size_t got = 0;
    while (got < n) {
        if (__atomic_load_n(&st->signal, __ATOMIC_RELAXED) != 0)
            return -2;
        /* a writer that sends nothing must not keep a signal waiting */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, 100);
        if (r < 0 && errno != EINTR)
            return -1;
        if (r <= 0)
            continue;
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

static int write_stream(int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t k = write(fd, (const char *)buf + put, n - put);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        put += (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n, uint64_t off)
{
    size_t put = 0;
    while (put < n) {
        ssize_t k = pwrite(fd, (const char *)buf + put, n - put, (off_t)(off + put));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        put += (size_t)k;
    }
    return 0;
}

typedef struct cb_ctx {
    run_state_t *st;
    size_t idx;
} cb_ctx_t;

/* The pipeline's callback (a ferry thread): hand the batch to the verifiers. */
static void on_done(const ferry_batch_result_t *r, void *arg)
{
    cb_ctx_t *c = arg;
    run_state_t *st = c->st;
    pthread_mutex_lock(&st->lock);
    st->ring[c->idx].status = r->status;
    st->ring[c->idx].where = (int)r->where;
    st->doneq[(st->dhead + st->dcount) % st->nring] = c->idx;
    st->dcount++;
    st->callbacks++;
    pthread_cond_signal(&st->cv_done);
    pthread_mutex_unlock(&st->lock);
}

/* Compare one finished batch with the CPU reference (and write it out to a file); runs on
 * verifier threads, several at once, so that checking keeps up with a GPU. Returns whether
 * the batch completed and matched. */
static bool verify_entry(run_state_t *st, ring_entry_t *e, unsigned char *scratch, run_totals_t *t)
{
    if (e->status != 0) {
        t->failed++;
        return false;
    }
    if (e->where == FERRY_DONE_CPU)
        t->ok_cpu++;
    else
        t->ok_gpu++;
    const unsigned char *expect;
    if (st->ref != NULL && e->bytes == st->batch_bytes && st->batch_bytes % 4 == 0) {
        expect = st->ref + e->pool_off;
    } else {
        /* File input; a short last batch; or batches of 1-3 bytes, each a part of a float that
         * the float workloads transform on its own (workloads.h): not a slice of the pool's
         * reference, which was made over whole floats. */
        ferry_workload_reference(st->wl, e->in, scratch, e->bytes);
        expect = scratch;
    }
    bool match = memcmp(expect, e->out, e->bytes) == 0;
    if (!match) {
        size_t k = 0;
        while (expect[k] == e->out[k])
            k++;
        t->first_bad_offset = e->offset + k;
        t->mismatched++;
    } else {
        t->verified_bytes += e->bytes;
    }
    if (st->outfd >= 0 && !st->ordered && write_full(st->outfd, e->out, e->bytes, e->offset) != 0)
        t->io_error = errno ? errno : EIO;
    return match;
}

/* A stream output: write the batches that are next in order, as long as no other verifier
 * is writing. Under st->lock (dropped while writing). */
static void write_in_order(run_state_t *st)
{
    while (!st->writing) {
        ring_entry_t *e = NULL;
        size_t idx = 0;
        for (size_t i = 0; i < st->nring && e == NULL; i++)
            if (st->ring[i].ready && st->ring[i].seq == st->next_seq)
                e = &st->ring[idx = i];
        if (e == NULL)
            return;
        st->writing = true;
        bool skip = e->seq >= st->cut_seq || st->t.io_error;
        pthread_mutex_unlock(&st->lock);
        int err = 0;
        if (!skip && write_stream(st->outfd, e->out, e->bytes) != 0)
            err = errno ? errno : EIO;
        pthread_mutex_lock(&st->lock);
        if (err && !st->t.io_error)
            st->t.io_error = err;
        st->writing = false;
        e->ready = false;
        st->next_seq++;
        st->freeq[st->nfree++] = idx;
        pthread_cond_signal(&st->cv_free);
    }
}

static void *verifier_main(void *arg)
{
    run_state_t *st = arg;
    unsigned char *scratch = malloc(st->batch_bytes ? st->batch_bytes : 1);
    pthread_mutex_lock(&st->lock);
    for (;;) {
        while (st->dcount == 0 && !st->stop)
            pthread_cond_wait(&st->cv_done, &st->lock);
        if (st->dcount == 0)
            break;
        size_t idx = st->doneq[st->dhead];
        st->dhead = (st->dhead + 1) % st->nring;
        st->dcount--;
        pthread_mutex_unlock(&st->lock);
        run_totals_t t = {0};
        bool good = false;
        if (scratch == NULL)
            t.io_error = ENOMEM;
        else
            good = verify_entry(st, &st->ring[idx], scratch, &t);
        pthread_mutex_lock(&st->lock);
        st->t.ok_gpu += t.ok_gpu;
        st->t.ok_cpu += t.ok_cpu;
        st->t.failed += t.failed;
        st->t.verified_bytes += t.verified_bytes;
        if (t.mismatched) {
            if (st->t.mismatched == 0 || t.first_bad_offset < st->t.first_bad_offset)
                st->t.first_bad_offset = t.first_bad_offset;
            st->t.mismatched += t.mismatched;
        }
        if (t.io_error && !st->t.io_error)
            st->t.io_error = t.io_error;
        if (st->ordered) {
            /* a stream cannot have a hole: it ends before the first batch that is wrong */
            if (!good && st->ring[idx].seq < st->cut_seq)
                st->cut_seq = st->ring[idx].seq;
            st->ring[idx].ready = true;
            write_in_order(st);
            continue;
        }
        st->freeq[st->nfree++] = idx;
        pthread_cond_signal(&st->cv_free);
    }
    pthread_mutex_unlock(&st->lock);
    free(scratch);
    return NULL;
}

/* Let the verifiers finish what is queued, then join them. */
static void stop_verifiers(run_state_t *st, pthread_t *th, unsigned *n)
{
    if (*n == 0)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = true;
    pthread_cond_broadcast(&st->cv_done);
    pthread_mutex_unlock(&st->lock);
    for (unsigned i = 0; i < *n; i++)
        pthread_join(th[i], NULL);
    *n = 0;
}

/* Fill @pool with generated data and @ref with its reference output, in parallel. */
typedef struct prep_job {
    uint64_t seed;
    unsigned char *pool, *ref;
    size_t begin, end; /* multiples of 4 */
    const ferry_workload_t *wl;
} prep_job_t;

static void *prep_main(void *arg)
{
    prep_job_t *j = arg;
    gen_fill(j->seed, j->begin, j->pool + j->begin, j->end - j->begin);
    ferry_workload_reference(j->wl, j->pool + j->begin, j->ref + j->begin, j->end - j->begin);
    return NULL;
}

/* Page-aligned memory (free() releases it) for the buffers the copies read and write: on the
 * H200 a copy from or to a buffer 16 bytes into a page, where glibc's malloc puts large blocks,
 * ran 1.5% slower (bench/results/2026-12-04-h200-explore-alignment.jsonl). */
static void *page_alloc(size_t n)
{
    void *m = NULL;
    return posix_memalign(&m, 4096, n) == 0 ? m : NULL;
}

static unsigned helper_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* leave two CPUs to the pipeline's issuer and completion threads */
    n = n > 3 ? n - 2 : 1;
    return (unsigned)(n > 8 ? 8 : n);
}

typedef struct run_opts {
    const char *workload;
    unsigned long long intensity;
    unsigned long long bytes;
    unsigned long long batch_bytes;
    const char *input, *output, *trace, *report;
    bool json, quiet, single_stream;
    bool bytes_set;               /* --bytes given: with --input, a limit */
    bool output_stream;           /* --output is stdout or a device, written in order */
    int signal;                   /* the run was stopped by this signal (0: it was not) */
    bool report_done;             /* the report was written */
    unsigned long long tl_chunks; /* --report: the chunks its timeline shows */
    const ferry_options_t *opts;
    int argc; /* the command line, for the report */
    char **argv;
} run_opts_t;

static int usage(void)
{
    printf("usage: ferry run [options]\n\n"
           "Stream data through a built-in workload, check every byte against the CPU reference,\n"
           "and print what happened: time, GB/s each way, overlap of copies and compute, engine\n"
           "utilisation, batches. Runs on the GPU when one answers, else on the simulated H200\n"
           "(its times are virtual, marked 'simulated').\n\n"
           "  --bytes SIZE         bytes of generated data (default 4G; K, M, G suffixes); with\n"
           "                       --input, read at most SIZE bytes of it (as dd's count)\n"
           "  --input FILE         stream FILE instead of generated data: a regular file, a\n"
           "                       character device (/dev/zero), or - for stdin (a pipe)\n"
           "  --output FILE        write the transformed stream to FILE, put in place only once\n"
           "                       every batch verified; a character device (/dev/null), or -\n"
           "                       for stdout (the summary then goes to stderr)\n"
           "  --workload NAME      copy, scale (default) or fma (tunable compute)\n"
           "  --intensity N        fma: fused multiply-adds per float, 1..100000 (default 64)\n"
           "  --batch-bytes SIZE   bytes per submitted batch (default 64M)\n"
           "  --trace FILE         write a Chrome trace (open in ui.perfetto.dev)\n"
           "  --report FILE        write an HTML page: timeline of the first chunks, engine\n"
           "                       utilisation, summary (docs/report.md)\n"
           "  --single-stream      every op on one stream: the no-overlap baseline\n"
           "  --json               print the summary as one JSON object\n"
           "  --quiet              print nothing but errors: no summary, no progress bar, no\n"
           "                       warnings (exit status tells)\n"
           "  --backend auto|sim|cuda, --profile FILE, --chunk-bytes SIZE, --depth N,\n"
           "  --copy-streams N, --compute-streams N, --queue-depth N, --seed N ...\n"
           "                       any option of `ferry options`\n\n"
           "Exit status: 0 when every batch completed and matched the reference, 1 otherwise,\n"
           "2 on a usage error, 130 (SIGINT) or 143 (SIGTERM) when a signal stopped the run.\n");
    return CLI_OK;
}

static int check_bytes(const char *cmd, const char *v, void *into)
{
    (void)cmd;
    (void)v;
    ((run_opts_t *)into)->bytes_set = true;
    return CLI_OK;
}

static int check_batch_bytes(const char *cmd, const char *v, void *into)
{
    (void)v;
    const run_opts_t *r = into;
    if (r->batch_bytes == 0 || r->batch_bytes > (1ull << 34))
        return cli_usage_error(cmd, "--batch-bytes must be 1 to 16G");
    return CLI_OK;
}

static int check_trace(const char *cmd, const char *v, void *into)
{
    (void)into;
    return cli_check_out_path(cmd, "trace", v, "trace.json");
}

static int check_report(const char *cmd, const char *v, void *into)
{
    (void)into;
    return report_check_path(cmd, v);
}

#define RUN_FLAG(field) offsetof(run_opts_t, field)
static const cli_flag_def_t run_flags[] = {
    {.name = "json",
     .kind = CLI_SWITCH,
     .offset = RUN_FLAG(json),
     .help = "print the summary as one JSON object"},
    {.name = "quiet",
     .kind = CLI_SWITCH,
     .offset = RUN_FLAG(quiet),
     .help = "print nothing but errors"},
    {.name = "single-stream",
     .kind = CLI_SWITCH,
     .offset = RUN_FLAG(single_stream),
     .help = "every op on one stream"},
    {.name = "bytes",
     .kind = CLI_SIZE,
     .offset = RUN_FLAG(bytes),
     .help = "bytes of generated data",
     .check = check_bytes},
    {.name = "batch-bytes",
     .kind = CLI_SIZE,
     .offset = RUN_FLAG(batch_bytes),
     .help = "bytes per submitted batch",
     .check = check_batch_bytes},
    {.name = "workload",
     .kind = CLI_STRING,
     .offset = RUN_FLAG(workload),
     .help = "copy, scale or fma"},
    {.name = "intensity",
     .kind = CLI_UINT,
     .offset = RUN_FLAG(intensity),
     .help = "fma: fused multiply-adds per float",
     .lo = 1,
     .hi = 100000},
    {.name = "input",
     .kind = CLI_STRING,
     .offset = RUN_FLAG(input),
     .help = "stream FILE instead of generated data"},
    {.name = "output",
     .kind = CLI_STRING,
     .offset = RUN_FLAG(output),
     .help = "write the transformed stream to FILE"},
    {.name = "trace",
     .kind = CLI_STRING,
     .offset = RUN_FLAG(trace),
     .help = "write a Chrome trace",
     .check = check_trace},
    {.name = "report",
     .kind = CLI_STRING,
     .offset = RUN_FLAG(report),
     .help = "write an HTML page",
     .check = check_report},
    {NULL},
};
#undef RUN_FLAG

static int parse(int argc, char **argv, ferry_options_t *o, run_opts_t *r)
{
    const char *cmd = "run";
    cli_parser_t p = {.cmd = cmd, .flags = {run_flags}, .into = r, .options = o};
    int prc = cli_parse(&p, argc, argv, 1);
    if (prc == CLI_HELP)
        return -1;
    if (prc != CLI_OK)
        return prc;
    bool known = false;
    for (const char *const *n = ferry_workload_names(); *n; n++)
        known |= strcmp(*n, r->workload) == 0;
    if (!known)
        return cli_usage_error(cmd, "--workload '%s': accepted: copy, scale, fma", r->workload);
    if (r->intensity && strcmp(r->workload, "fma") != 0)
        return cli_usage_error(cmd, "--intensity applies to --workload fma only");
    if (r->bytes == 0 && (!r->input || r->bytes_set))
        return cli_usage_error(cmd, "--bytes must be at least 1");
    return 0;
}

/* The kind of a stream in --json ("all": --single-stream, every op on one stream). */
static const char *stream_kind_key(char k)
{
    return k == 'h' ? "h2d" : k == 'c' ? "compute" : k == 'd' ? "d2h" : "all";
}

/* The health counters of the run: the fallback ladder, deadlines, watchdog and link. */
static void json_health(json_t *j, const ferry_pipeline_stats_t *s)
{
    json_key_uint(j, "chunks_cpu", s->chunks_cpu);
    json_key_uint(j, "failure_records", s->failure_records);
    json_key_bool(j, "gpu_lost", s->gpu_lost);
    json_key_bool(j, "gpu_hung", s->gpu_hung);
    json_key_uint(j, "deadlines_passed", s->deadlines_passed);
    json_key_uint(j, "ladder_steps_down", s->ladder_steps_down);
    json_key_uint(j, "ladder_steps_up", s->ladder_steps_up);
    json_key_uint(j, "ladder_level", s->ladder_level);
    json_key_uint(j, "bw_alerts", s->bw_alerts);
    json_key_double(j, "link_ratio_h2d", s->bw_ratio[0], 4);
    json_key_double(j, "link_ratio_d2h", s->bw_ratio[1], 4);
    json_key_uint(j, "chunks_retried", s->chunks_retried);
    json_key_uint(j, "link_samples", s->link_samples);
    if (s->link_samples > 0) {
        json_key_double(j, "link_gbps_h2d", s->link_bps[0] / 1e9, 3);
        json_key_double(j, "link_gbps_d2h", s->link_bps[1] / 1e9, 3);
        json_key_double(j, "link_own_gbps_h2d", s->link_own_bps[0] / 1e9, 3);
        json_key_double(j, "link_own_gbps_d2h", s->link_own_bps[1] / 1e9, 3);
    }
    json_key_double(j, "deadline_overrun_s", (double)s->deadline_overrun_ns / 1e9, 6);
    json_key_uint(j, "heartbeats_sent", s->heartbeats_sent);
    json_key_uint(j, "heartbeats_seen", s->heartbeats_seen);
    json_key_uint(j, "heartbeat_stalls", s->heartbeat_stalls);
    json_key_uint(j, "completion_stalls", s->completion_stalls);
    json_key_uint(j, "watchdog_stalls", s->watchdog_stalls);
}

static void print_json(const run_opts_t *ro, ferry_runtime_t *rt, const ferry_device_props_t *p,
                       const ferry_pipeline_stats_t *s, const run_totals_t *t,
                       unsigned long long total, unsigned long long nbatches,
                       unsigned long long chunk, double wall_s, bool ok)
{
    double el = (double)s->elapsed_ns / 1e9;
    json_t j;
    json_command_begin(&j, stdout, "run");
    json_key_bool(&j, "ok", ok);
    json_key_str(&j, "backend", ferry_runtime_backend(rt));
    json_key_str(&j, "device", p->name);
    json_key_bool(&j, "simulated", p->simulated);
    json_key_str(&j, "profile", p->profile);
    json_key_str(&j, "workload", ro->workload);
    json_key_uint(&j, "bytes", total);
    json_key_uint(&j, "batches", nbatches);
    json_key_uint(&j, "chunk_bytes", chunk);
    json_key_uint(&j, "chunks", s->chunks);
    json_key_uint(&j, "copy_group", s->copy_group);
    json_key_double(&j, "time_s", el, 9);
    json_key_bool(&j, "time_simulated", p->simulated);
    json_key_double(&j, "wall_s", wall_s, 3);
    json_key_double(&j, "gbps_h2d", s->gbps_h2d, 3);
    json_key_double(&j, "gbps_d2h", s->gbps_d2h, 3);
    json_key_double(&j, "link_gbps", p->link_gbps, 3);
    json_key_double(&j, "overlap", s->overlap, 4);
    json_key_double(&j, "util_h2d", el > 0 ? (double)s->busy_h2d_ns / 1e9 / el : 0, 4);
    json_key_double(&j, "util_compute", el > 0 ? (double)s->busy_compute_ns / 1e9 / el : 0, 4);
    json_key_double(&j, "util_d2h", el > 0 ? (double)s->busy_d2h_ns / 1e9 / el : 0, 4);
    json_key(&j, "streams");
    json_array_begin(&j);
    for (unsigned i = 0; i < s->streams; i++) {
        double busy = (double)s->stream_busy_ns[i] / 1e9;
        json_object_begin(&j);
        json_key_uint(&j, "index", i);
        json_key_str(&j, "kind", stream_kind_key(s->stream_kind[i]));
        json_key_double(&j, "busy_s", busy, 9);
        json_key_double(&j, "util", el > 0 ? busy / el : 0, 4);
        json_object_end(&j);
    }
    json_array_end(&j);
    json_key_bool(&j, "host_pinned", s->host_pinned);
    json_key_uint(&j, "chunks_timed", s->chunks_timed);
    json_health(&j, s);
    json_key_uint(&j, "batches_ok_gpu", t->ok_gpu);
    json_key_uint(&j, "batches_ok_cpu", t->ok_cpu);
    json_key_uint(&j, "batches_failed", t->failed);
    json_key_uint(&j, "batches_mismatched", t->mismatched);
    json_key_uint(&j, "verified_bytes", t->verified_bytes);
    json_key_bool(&j, "verified", ok);
    json_key_uint(&j, "failure_log_errors", s->failure_log_errors);
    json_key_bool(&j, "interrupted", ro->signal != 0);
    if (ro->signal) {
        json_key_str(&j, "signal", run_signal_name(ro->signal));
        json_key_uint(&j, "bytes_done", t->verified_bytes);
    }
    if (ro->trace)
        json_key_str(&j, "trace", ro->trace);
    if (ro->report_done)
        json_key_str(&j, "report", ro->report);
    json_end(&j);
}

static void print_summary(const run_opts_t *ro, ferry_runtime_t *rt, ferry_device_t *dev,
                          const ferry_pipeline_stats_t *s, const run_totals_t *t,
                          unsigned long long total, unsigned long long nbatches,
                          unsigned long long chunk, double wall_s, bool ok)
{
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    double el = (double)s->elapsed_ns / 1e9;
    double u_h = el > 0 ? (double)s->busy_h2d_ns / 1e9 / el : 0;
    double u_c = el > 0 ? (double)s->busy_compute_ns / 1e9 / el : 0;
    double u_d = el > 0 ? (double)s->busy_d2h_ns / 1e9 / el : 0;
    if (ro->json) {
        print_json(ro, rt, &p, s, t, total, nbatches, chunk, wall_s, ok);
        return;
    }
    char b1[32], b2[32], b3[32];
    const char *sim = p.simulated ? " (simulated)" : "";
    printf("ferry run: %s, %s in %llu batch(es) of up to %s, chunks of %s", ro->workload,
           cli_bytes(total, b1, sizeof(b1)), nbatches, cli_bytes(ro->batch_bytes, b2, sizeof(b2)),
           cli_bytes(chunk, b3, sizeof(b3)));
    if (s->copy_group > 1)
        printf(", up to %u per copy (coalesce_bytes)", s->copy_group);
    printf("\n");
    printf("  backend    %s, %s%s\n", ferry_runtime_backend(rt), p.name, p.profile[0] ? "" : "");
    if (p.profile[0])
        printf("  profile    %s\n", p.profile);
    printf("  time       %.3f ms%s, wall %.2f s\n", el * 1e3, sim, wall_s);
    printf("  H2D        %.1f GB/s%s\n", s->gbps_h2d, sim);
    printf("  D2H        %.1f GB/s%s", s->gbps_d2h, sim);
    if (p.link_gbps > 0)
        printf("   (link: %.0f GB/s per direction, theoretical)", p.link_gbps);
    printf("\n  overlap    %.2f  (engine busy time / elapsed: 1 = serial, 3 = all busy)\n",
           s->overlap);
    printf("  engines    H2D %.1f%%, compute %.1f%%, D2H %.1f%%\n", u_h * 100, u_c * 100,
           u_d * 100);
    printf("  streams   ");
    for (unsigned i = 0; i < s->streams; i++)
        printf(" %u:%s %.1f%%", i,
               s->stream_kind[i] == 'h'   ? "H2D"
               : s->stream_kind[i] == 'c' ? "compute"
               : s->stream_kind[i] == 'd' ? "D2H"
                                          : "all",
               el > 0 ? (double)s->stream_busy_ns[i] / 1e9 / el * 100 : 0);
    if (!s->host_pinned)
        printf("\n  host       pageable: pinning was refused, copies ran at pageable rates");
    printf("\n  batches    %llu ok on GPU, %llu ok on CPU, %llu failed\n",
           (unsigned long long)t->ok_gpu, (unsigned long long)t->ok_cpu,
           (unsigned long long)t->failed);
    if (s->bw_alerts > 0)
        printf("  bandwidth  %llu alert(s): copies ran below the alert share of the link (the "
               "log names the likely cause); last window H2D %.0f%%, D2H %.0f%% of the link\n",
               (unsigned long long)s->bw_alerts, s->bw_ratio[0] * 100, s->bw_ratio[1] * 100);
    /* The latest sample, when it saw traffic (one taken before or after the run sees none). */
    if (s->link_samples > 0 && s->link_bps[0] + s->link_bps[1] > 0)
        printf("  link       last of %llu sample(s): %.1f GB/s H2D, %.1f GB/s D2H on the link, "
               "of which this run at most %.1f and %.1f\n",
               (unsigned long long)s->link_samples, s->link_bps[0] / 1e9, s->link_bps[1] / 1e9,
               s->link_own_bps[0] / 1e9, s->link_own_bps[1] / 1e9);
    if (s->ladder_steps_down > 0)
        printf("  ladder     %llu step(s) down (fewer streams, fewer chunks in flight), %llu back "
               "up; level %u at the end\n",
               (unsigned long long)s->ladder_steps_down, (unsigned long long)s->ladder_steps_up,
               s->ladder_level);
    if (s->deadlines_passed > 0)
        printf("  deadlines  %llu chunk(s) passed their deadline; the abort flag was raised%s\n",
               (unsigned long long)s->deadlines_passed,
               s->deadline_overrun_ns > 0 ? "; aborted chunks were redone" : "");
    if (s->heartbeat_stalls + s->completion_stalls + s->watchdog_stalls > 0)
        printf("  watchdog   stalls: the GPU ran no heartbeat %llu time(s), the completion thread "
               "stopped polling %llu, the watchdog stopped %llu (the log says when)\n",
               (unsigned long long)s->heartbeat_stalls, (unsigned long long)s->completion_stalls,
               (unsigned long long)s->watchdog_stalls);
    if (s->gpu_lost)
        printf("  faults     %s ended the GPU path: later chunks ran on the CPU fallback\n",
               s->gpu_hung ? "a hung kernel (it ignored the abort flag)" : "a sticky error");
    if (s->failure_records > 0 || s->chunks_cpu > 0) {
        const char *flog = ro->opts ? ferry_options_get_str(ro->opts, "failure_log") : NULL;
        printf("  failures   %llu failed GPU attempt(s), %llu chunk(s) then done by a GPU retry, "
               "%llu on the CPU; records: %s\n",
               (unsigned long long)s->failure_records, (unsigned long long)s->chunks_retried,
               (unsigned long long)s->chunks_cpu,
               flog && flog[0] ? flog : "none (set --failure-log FILE)");
    }
    if (s->failure_log_errors > 0)
        printf("  failures   %llu record(s) could not be written to %s\n",
               (unsigned long long)s->failure_log_errors,
               ro->opts ? ferry_options_get_str(ro->opts, "failure_log") : "the failure log");
    if (ro->signal)
        printf("  stopped    by %s after %s of %s verified; %s\n", run_signal_name(ro->signal),
               cli_bytes(t->verified_bytes, b1, sizeof(b1)), cli_bytes(total, b2, sizeof(b2)),
               !ro->output         ? "nothing more was submitted"
               : ro->output_stream ? "the output stream ends there"
                                   : "--output was not written");
    if (t->mismatched == 0 && t->failed == 0 && ro->signal)
        printf("  verify     OK: the %s done match the CPU reference\n",
               cli_bytes(t->verified_bytes, b1, sizeof(b1)));
    else if (t->mismatched == 0 && t->failed == 0)
        printf("  verify     OK: all %s match the CPU reference\n",
               cli_bytes(t->verified_bytes, b1, sizeof(b1)));
    else if (t->mismatched)
        printf("  verify     FAILED: %llu batch(es) differ from the CPU reference, first at byte "
               "%llu\n",
               (unsigned long long)t->mismatched, (unsigned long long)t->first_bad_offset);
    else
        printf("  verify     FAILED: %llu batch(es) did not complete\n",
               (unsigned long long)t->failed);
    if (ro->trace)
        printf("  trace      %s (open in ui.perfetto.dev)\n", ro->trace);
    if (ro->report_done)
        printf("  report     %s\n", ro->report);
}

/* ---- --report ------------------------------------------------------------------------------ */

/* The report's timeline shows the first REPORT_CHUNKS chunks (the first trace_chunks when that
 * option is set, at most REPORT_MAX_CHUNKS), drawn from the trace's op records. Without --trace
 * only those chunks are recorded and timed; the rest of the run is sampled as usual. */
#define REPORT_CHUNKS     64
#define REPORT_MAX_CHUNKS 4096

static void report_trace_setup(run_opts_t *ro, ferry_options_t *opts)
{
    int64_t tc = 0, tr = 0;
    ferry_options_get_i64(opts, "trace_chunks", &tc);
    ferry_options_get_i64(opts, "trace", &tr);
    if (tc == 0 && tr == 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", REPORT_CHUNKS);
        ferry_options_set(opts, "trace_chunks", v);
    }
    ro->tl_chunks = tc <= 0 ? REPORT_CHUNKS : tc > REPORT_MAX_CHUNKS ? REPORT_MAX_CHUNKS : tc;
    ferry_options_set(opts, "trace", "1");
}

typedef struct run_outcome {
    const ferry_pipeline_stats_t *s;
    const run_totals_t *t;
    unsigned long long total, nbatches;
    double wall_s;
    bool ok;
} run_outcome_t;

typedef struct op_list {
    ferry_op_record_t *v;
    size_t n, cap, max;
} op_list_t;

/* ferry_pipeline_ops callback: keep the first @max ops (the earliest: ops come in the order
 * their chunks retired). */
static void keep_op(const ferry_op_record_t *op, void *arg)
{
    op_list_t *l = arg;
    if (l->n == l->max)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        ferry_op_record_t *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            l->max = l->n;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *op;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The timeline's window: until the @chunks-th chunk's D2H ended, or sooner where the records
 * of a kind of op stop when fewer than the run's @run_chunks were recorded (a trace of the
 * first N chunks: the H2D engine goes on with chunk N+1, unrecorded, while the last recorded
 * D2Hs run), so that no row looks idle for want of records. *done: the chunks whose D2H ended
 * in the window. 0 when no chunk was recorded. */
static uint64_t window_end(const op_list_t *l, unsigned long long chunks, uint64_t run_chunks,
                           size_t *done)
{
    uint64_t *ends = malloc((l->n + 1) * sizeof(*ends)), w = 0, last[3] = {0, 0, 0};
    size_t k = 0;
    for (size_t i = 0; ends != NULL && i < l->n; i++) {
        const ferry_op_record_t *op = &l->v[i];
        if (op->kind == FERRY_OP_D2H)
            ends[k++] = op->end_ns;
        if ((unsigned)op->kind < 3 && op->end_ns > last[op->kind])
            last[op->kind] = op->end_ns;
    }
    *done = 0;
    if (k > 0) {
        qsort(ends, k, sizeof(*ends), cmp_u64);
        w = ends[(k < chunks ? k : (size_t)chunks) - 1];
        for (int kind = 0; kind < 3 && k < run_chunks; kind++)
            w = last[kind] < w ? last[kind] : w;
        while (*done < k && ends[*done] <= w)
            ++*done;
    }
    free(ends);
    return w;
}

static const char *stream_kind_name(char k)
{
    return k == 'h' ? "H2D" : k == 'c' ? "compute" : k == 'd' ? "D2H" : "all";
}

static int kind_color(char k)
{
    return k == 'h' ? 0 : k == 'c' ? 2 : k == 'd' ? 1 : 6;
}

static void timeline_section(report_t *r, const run_opts_t *ro, ferry_pipeline_t *pl,
                             const ferry_pipeline_stats_t *s, bool simulated)
{
    /* the window's chunks, and those in flight with them (depth is at most 64) */
    op_list_t l = {.max = 3 * ((size_t)ro->tl_chunks + 64)};
    report_heading(r, "Timeline");
    size_t shown = 0;
    uint64_t w = 0;
    if (ferry_pipeline_ops(pl, keep_op, &l) == 0)
        w = window_end(&l, ro->tl_chunks, s->chunks, &shown);
    if (w == 0 || s->streams == 0) {
        report_text(r, "No op was recorded: the run moved no chunk through the GPU.");
        free(l.v);
        return;
    }
    char names[FERRY_STATS_MAX_STREAMS][40], title[160];
    const char *rows[FERRY_STATS_MAX_STREAMS];
    for (unsigned i = 0; i < s->streams; i++) {
        snprintf(names[i], sizeof(names[i]), "stream %u (%s)", i,
                 stream_kind_name(s->stream_kind[i]));
        rows[i] = names[i];
    }
    snprintf(title, sizeof(title), "The first %.3f ms of the run's %.3f ms: %zu chunk(s) done",
             (double)w / 1e6, (double)s->elapsed_ns / 1e6, shown);
    report_text(r,
                "One row per stream, a rectangle per op (hover over it for its batch, chunk, "
                "bytes and times), from the trace's op records (device events%s). %s",
                simulated ? ": virtual time on the simulator" : "",
                ro->trace ? "With --trace every chunk is recorded; the chart shows the first ones."
                          : "Without --trace only the first chunks are recorded and timed (the "
                            "chart ends where a stream's records do); the rest of the run is "
                            "sampled (one chunk in 31) as usual.");
    report_timeline_t t = {.chart = "timeline",
                           .title = title,
                           .row_names = rows,
                           .rows = s->streams,
                           .ops = l.v,
                           .nops = l.n,
                           .window_ns = w};
    report_timeline_chart(r, &t);
    free(l.v);
}
static void utilisation_section(report_t *r, const ferry_pipeline_stats_t *s)
{
    double el = (double)s->elapsed_ns;
    report_bar_t bars[3 + FERRY_STATS_MAX_STREAMS];
    char names[FERRY_STATS_MAX_STREAMS][40], note[320];
    bars[0] = (report_bar_t){"H2D engine", el > 0 ? (double)s->busy_h2d_ns / el : 0, 0};
    bars[1] =
        (report_bar_t){"compute, all streams", el > 0 ? (double)s->busy_compute_ns / el : 0, 2};
    bars[2] = (report_bar_t){"D2H engine", el > 0 ? (double)s->busy_d2h_ns / el : 0, 1};
    int n = 3;
    for (unsigned i = 0; i < s->streams; i++, n++) {
        snprintf(names[i], sizeof(names[i]), "stream %u (%s)", i,
                 stream_kind_name(s->stream_kind[i]));
        bars[n] = (report_bar_t){names[i], el > 0 ? (double)s->stream_busy_ns[i] / el : 0,
                                 kind_color(s->stream_kind[i])};
    }
    snprintf(note, sizeof(note),
             "Busy time over the elapsed %.3f ms, from the pipeline's stats: %llu of %llu "
             "chunks timed, the rest scaled from them. Compute adds up its streams, so it "
             "passes 100%% when kernels run side by side.",
             el / 1e6, (unsigned long long)s->chunks_timed, (unsigned long long)s->chunks);
    report_heading(r, "Engine utilisation");
    report_bars_chart(r, "engine-utilisation", "Busy fraction per engine and stream",
                      "busy (% of the elapsed time)", bars, n, note);
}

static void summary_section(report_t *r, const run_opts_t *ro, ferry_device_t *dev,
                            const run_outcome_t *o)
{
    const ferry_pipeline_stats_t *s = o->s;
    const run_totals_t *t = o->t;
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    char b1[32], b2[32], b3[32], link[256];
    const char *sim = p.simulated ? " (simulated)" : "";
    report_heading(r, "Summary");
    report_table(r, NULL, NULL);
    if (strcmp(ro->workload, "fma") == 0)
        report_kv(r, "workload", "fma, %llu multiply-adds per float",
                  ro->intensity ? ro->intensity : 64);
    else
        report_kv(r, "workload", "%s", ro->workload);
    report_kv(r, "bytes",
              "%s in %llu batch(es) of up to %s; %llu chunk(s) of %s, up to %u per copy",
              cli_bytes(o->total, b1, sizeof(b1)), o->nbatches,
              cli_bytes(ro->batch_bytes, b2, sizeof(b2)), (unsigned long long)s->chunks,
              cli_bytes(s->chunk_bytes, b3, sizeof(b3)), s->copy_group ? s->copy_group : 1);
    report_kv(r, "time", "%.3f ms%s, wall %.2f s", (double)s->elapsed_ns / 1e6, sim, o->wall_s);
    report_kv(r, "H2D", "%.2f GB/s%s", s->gbps_h2d, sim);
    report_kv(r, "D2H", "%.2f GB/s%s", s->gbps_d2h, sim);
    report_link_text(&p, link, sizeof(link));
    report_kv(r, "link", "%s", link[0] ? link : "unknown");
    report_kv(r, "overlap", "%.2f (engine busy time / elapsed: 1 serial, 3 all busy)", s->overlap);
    if (s->streams == 1)
        report_kv(r, "plan", "depth %u, every op on one stream (--single-stream), queue %u",
                  s->depth, s->queue_depth);
    else
        report_kv(r, "plan",
                  "depth %u, %u copy stream(s) per direction, %u compute stream(s), queue %u",
                  s->depth, s->copy_streams, s->compute_streams, s->queue_depth);
    report_kv(r, "host memory", "%s", s->host_pinned ? "pinned" : "pageable: pinning was refused");
    report_kv(r, "batches", "%llu on the GPU, %llu on the CPU, %llu failed",
              (unsigned long long)t->ok_gpu, (unsigned long long)t->ok_cpu,
              (unsigned long long)t->failed);
    report_kv(r, "failures",
              "%llu failed GPU attempt(s), %llu chunk(s) on the CPU fallback, %llu deadline(s) "
              "passed, GPU path %s",
              (unsigned long long)s->failure_records, (unsigned long long)s->chunks_cpu,
              (unsigned long long)s->deadlines_passed, s->gpu_lost ? "lost" : "kept");
    report_kv(r, "ladder", "%llu step(s) down, %llu up, level %u at the end",
              (unsigned long long)s->ladder_steps_down, (unsigned long long)s->ladder_steps_up,
              s->ladder_level);
    report_kv(r, "bandwidth alerts", "%llu", (unsigned long long)s->bw_alerts);
    if (t->mismatched)
        report_kv(r, "verify", "FAILED: %llu batch(es) differ, first at byte %llu",
                  (unsigned long long)t->mismatched, (unsigned long long)t->first_bad_offset);
    else
        report_kv(r, "verify", "%s: %s of %s match the CPU reference", o->ok ? "OK" : "FAILED",
                  cli_bytes(t->verified_bytes, b1, sizeof(b1)),
                  cli_bytes(o->total, b2, sizeof(b2)));
    report_table_end(r);
}

static int write_report(const run_opts_t *ro, ferry_runtime_t *rt, ferry_device_t *dev,
                        ferry_pipeline_t *pl, const run_outcome_t *o)
{
    report_t *r = report_open("run", ro->report, "ferry run", ro->argc, ro->argv, rt, dev);
    if (r == NULL)
        return CLI_FAIL;
    summary_section(r, ro, dev, o);
    timeline_section(r, ro, pl, o->s, ferry_device_is_simulated(dev));
    utilisation_section(r, o->s);
    return report_close(r);
}

/* How long a run stopped by a signal may take to finish the batches in flight before it
 * gives up on them (run_io.h): a few queues of 64 MiB batches on the simulator, whose kernels
 * run on this CPU, take about a second. */
#define RUN_GRACE_S 10

/* The signal thread (run_io.c): stop submitting, wake the submitter. */
static void on_signal(int sig, void *arg)
{
    run_state_t *st = arg;
    pthread_mutex_lock(&st->lock);
    __atomic_store_n(&st->signal, sig, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&st->cv_free);
    pthread_mutex_unlock(&st->lock);
}

int cmd_run(int argc, char **argv)
{
    const char *cmd = "run";
    run_opts_t ro = {.workload = "scale", .bytes = 4ull << 30, .batch_bytes = 64ull << 20};
    int rc = CLI_FAIL;
    cli_quiet_logs(argc, argv);
    ferry_options_t *opts = NULL;
    int orc = cli_options(cmd, &opts);
    if (orc != CLI_OK)
        return orc;
    int pr = parse(argc, argv, opts, &ro);
    ro.opts = opts;
    if (pr != 0) {
        ferry_options_destroy(opts);
        return pr < 0 ? usage() : pr;
    }
    if (ro.trace)
        ferry_options_set(opts, "trace", "1");
    ro.argc = argc;
    ro.argv = argv;
    if (ro.report)
        report_trace_setup(&ro, opts);

    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    ferry_pipeline_t *pl = NULL;
    cli_metrics_t *metrics = NULL;
    ferry_workload_t *wl = NULL;
    run_state_t st = {.outfd = -1};
    cb_ctx_t *cbs = NULL;
    unsigned char *pool = NULL, *ref = NULL;
    size_t pool_bytes = 0;
    bool pool_pinned = false;
    pthread_t verifiers[8];
    unsigned nver = 0;
    int infd = -1;
    run_file_t in = RUN_FILE_INIT, out = RUN_FILE_INIT;
    run_signals_t *sg = NULL;
    pthread_mutex_init(&st.lock, NULL);
    pthread_cond_init(&st.cv_free, NULL);
    pthread_cond_init(&st.cv_done, NULL);
    st.cut_seq = UINT64_MAX;

    /* Before any other thread exists, ferry's included, so that SIGINT and SIGTERM reach only
     * the thread that takes them. */
    if (run_signals_start(cmd, &out, RUN_GRACE_S, on_signal, &st, &sg) != CLI_OK)
        goto out;
    unsigned long long total = ro.bytes;
    bool stream_in = false;
    if (ro.input) {
        if ((rc = run_input_open(cmd, ro.input, &in)) != CLI_OK)
            goto out;
        infd = in.fd;
        stream_in = in.stream;
        /* --bytes is a limit on what is read; a stream without it is read to its end */
        if (!stream_in && (!ro.bytes_set || (unsigned long long)in.sb.st_size < total))
            total = (unsigned long long)in.sb.st_size;
        else if (stream_in && !ro.bytes_set)
            total = ULLONG_MAX;
    }
    if (ro.output) {
        if ((rc = run_output_open(cmd, ro.output, &in, &out)) != CLI_OK)
            goto out;
        st.outfd = out.fd;
        st.ordered = ro.output_stream = out.stream;
        /* a reader that went away is a write error (EPIPE) to report, not a silent death */
        if (out.stream)
            signal(SIGPIPE, SIG_IGN);
    }
    rc = CLI_FAIL;

    ferry_runtime_config_t rcfg = FERRY_RUNTIME_CONFIG_INIT;
    rcfg.options = opts;
    int e = ferry_runtime_create(&rcfg, &rt);
    if (e != 0) {
        cli_fail(cmd, "%s: %s", ferry_strerror(e), ferry_last_error());
        goto out;
    }
    if (!ro.quiet && !ro.json && ferry_runtime_fallback_reason(rt)[0])
        fprintf(stderr, "ferry run: no GPU (%s); running on the simulated device\n",
                ferry_runtime_fallback_reason(rt));
    int64_t devidx = 0;
    ferry_options_get_i64(opts, "device", &devidx);
    if (ferry_device_get(rt, (int)devidx, &dev) != 0) {
        cli_fail(cmd, "%s", ferry_last_error());
        goto out;
    }
    ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
    wp.intensity = (unsigned)ro.intensity;
    if (ferry_workload_create(ro.workload, &wp, &wl) != 0) {
        cli_fail(cmd, "%s", ferry_last_error());
        goto out;
    }
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = ferry_workload_stage(wl);
    pc.single_stream = ro.single_stream;
    if (ferry_pipeline_create(&pc, &pl) != 0) {
        cli_fail(cmd, "cannot create the pipeline: %s", ferry_last_error());
        goto out;
    }
    int64_t seed = 1;
    ferry_options_get_i64(opts, "seed", &seed);
    ferry_pipeline_stats_t plan = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(pl, &plan);

    /* Batches are whole floats (the workloads' granularity) so that every full batch has the
     * same reference as its slice of the pool. */
    size_t bb = ro.batch_bytes < total ? (size_t)ro.batch_bytes : (size_t)total;
    if (bb >= 4)
        bb -= bb % 4;
    if (bb == 0)
        bb = 1;
    unsigned long long nbatches = total / bb + (total % bb != 0); /* a stream: until its end */
    st.batch_bytes = bb;
    st.wl = wl;
    /* Enough entries that the queue and every slot can be full while others are verified. */
    st.nring = (size_t)plan.queue_depth + plan.depth + 2 + helper_threads();
    if (st.nring > nbatches)
        st.nring = nbatches ? nbatches : 1;
    st.ring = calloc(st.nring, sizeof(*st.ring));
    st.freeq = calloc(st.nring, sizeof(size_t));
    st.doneq = calloc(st.nring, sizeof(size_t));
    cbs = calloc(st.nring, sizeof(*cbs));
    bool alloc_ok = st.ring && st.freeq && st.doneq && cbs;
    for (size_t i = 0; alloc_ok && i < st.nring; i++) {
        ring_entry_t *re = &st.ring[i];
        re->out = page_alloc(bb);
        if (infd >= 0)
            re->own_in = re->in = page_alloc(bb);
        alloc_ok = re->out && (infd < 0 || re->in);
        st.freeq[st.nfree++] = i;
        cbs[i] = (cb_ctx_t){&st, i};
    }
    /* Generated data: a pool of whole batches (up to 1 GiB on a GPU, 256 MiB on the simulator,
     * whose kernels run on this CPU) made once with its reference output; batches cycle over
     * it, so checking a batch is one memcmp. A different --seed gives different data. */
    if (alloc_ok && infd < 0 && nbatches > 0) {
        size_t cap = ferry_device_is_simulated(dev) ? (256u << 20) : (1u << 30);
        size_t k = cap / bb ? cap / bb : 1;
        if (k > nbatches)
            k = (size_t)nbatches;
        pool_bytes = k * bb;
        pool = page_alloc(pool_bytes);
        ref = malloc(pool_bytes);
        alloc_ok = pool && ref;
        if (alloc_ok) {
            unsigned nt = helper_threads();
            pthread_t th[8];
            prep_job_t jobs[8];
            size_t step = (pool_bytes / nt + 3) & ~(size_t)3;
            for (unsigned i = 0; i < nt; i++) {
                size_t b0 = i * step < pool_bytes ? i * step : pool_bytes;
                size_t b1 = b0 + step < pool_bytes ? b0 + step : pool_bytes;
                jobs[i] = (prep_job_t){(uint64_t)seed, pool, ref, b0, b1, wl};
                pthread_create(&th[i], NULL, prep_main, &jobs[i]);
            }
            for (unsigned i = 0; i < nt; i++)
                pthread_join(th[i], NULL);
            st.ref = ref;
        }
    }
    if (!alloc_ok) {
        cli_fail(cmd, "out of host memory for %zu buffers of %zu bytes", st.nring, bb);
        goto out;
    }
    /* Pinned input and output: the copies go straight from and to them. Pinning may be
     * refused (the memlock limit): then the pipeline stages through its own pinned slots. */
    bool pinned_all = true;
    if (pool != NULL)
        pinned_all &= pool_pinned = ferry_host_register(dev, pool, pool_bytes) == 0;
    for (size_t i = 0; i < st.nring; i++) {
        pinned_all &= ferry_host_register(dev, st.ring[i].out, bb) == 0;
        if (st.ring[i].own_in)
            pinned_all &= ferry_host_register(dev, st.ring[i].own_in, bb) == 0;
    }
    if (!pinned_all && !ro.quiet)
        fprintf(stderr, "ferry run: could not pin all buffers (%s); those are staged\n",
                ferry_last_error());

    nver = helper_threads();
    for (unsigned i = 0; i < nver; i++)
        if (pthread_create(&verifiers[i], NULL, verifier_main, &st) != 0) {
            nver = i;
            break;
        }

    if (cli_metrics_start(cmd, opts, pl, "run", ro.quiet, &metrics) != CLI_OK)
        goto out;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    bool failed_submit = false;
    cli_progress_t bar;
    cli_progress_begin(&bar, "ferry run", total == ULLONG_MAX ? 0 : total, true, ro.quiet);
    unsigned long long submitted = 0, nsub = 0; /* bytes and batches */
    for (unsigned long long i = 0; i < nbatches; i++) {
        pthread_mutex_lock(&st.lock);
        while (st.nfree == 0 && st.signal == 0)
            pthread_cond_wait(&st.cv_free, &st.lock);
        /* a signal, or an output stream that cannot be written: submit nothing more */
        if (st.signal != 0 || (st.ordered && st.t.io_error)) {
            pthread_mutex_unlock(&st.lock);
            break;
        }
        size_t idx = st.freeq[--st.nfree];
        uint64_t done_bytes = st.t.verified_bytes;
        pthread_mutex_unlock(&st.lock);
        cli_progress_update(&bar, done_bytes);
        ring_entry_t *re = &st.ring[idx];
        re->offset = i * bb;
        re->bytes = (size_t)(total - re->offset < bb ? total - re->offset : bb);
        re->seq = i;
        size_t want = re->bytes;
        if (stream_in) {
            ssize_t got = read_stream(infd, re->in, re->bytes, &st);
            if (got < 0 && got != -2) {
                cli_fail(cmd, "reading --input %s at %llu: %s", ro.input,
                         (unsigned long long)re->offset, strerror(errno));
                failed_submit = true;
                break;
            }
            if (got <= 0) { /* the stream's end, or a signal */
                pthread_mutex_lock(&st.lock);
                st.freeq[st.nfree++] = idx;
                pthread_mutex_unlock(&st.lock);
                break;
            }
            re->bytes = (size_t)got;
        } else if (infd >= 0) {
            ssize_t got = read_full(infd, re->in, re->bytes, re->offset);
            if (got != (ssize_t)re->bytes) {
                cli_fail(cmd, "reading --input %s at %llu: %s", ro.input,
                         (unsigned long long)re->offset, got < 0 ? strerror(errno) : "file shrank");
                failed_submit = true;
                break;
            }
        } else {
            re->pool_off = (size_t)(i % (pool_bytes / bb)) * bb;
            re->in = pool + re->pool_off;
        }
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = re->in;
        b.out = re->out;
        b.bytes = re->bytes;
        if (ferry_pipeline_submit(pl, &b, on_done, &cbs[idx], NULL) != 0) {
            cli_fail(cmd, "submit: %s", ferry_last_error());
            failed_submit = true;
            break;
        }
        submitted += re->bytes;
        nsub++;
        if (re->bytes < want) /* the stream ended */
            break;
    }
    nbatches = nsub;
    ferry_pipeline_drain(pl);
    stop_verifiers(&st, verifiers, &nver);
    run_signals_finish(sg);
    ro.signal = run_signals_caught(sg);
    if (stream_in && (!ro.signal || total == ULLONG_MAX))
        total = submitted;
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    cli_progress_end(&bar);
    int mrc = cli_metrics_stop(cmd, metrics);
    metrics = NULL;
    if (mrc != CLI_OK)
        goto out;
    double wall = (double)(ts1.tv_sec - ts0.tv_sec) + (double)(ts1.tv_nsec - ts0.tv_nsec) / 1e9;
    if (failed_submit)
        goto out;

    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(pl, &s);
    if (ro.trace && ferry_pipeline_write_trace(pl, ro.trace) != 0) {
        cli_fail(cmd, "%s", ferry_last_error());
        goto out;
    }
    if (st.t.io_error) {
        cli_fail(cmd, "writing --output %s: %s", ro.output, strerror(st.t.io_error));
        goto out;
    }
    bool ok = !ro.signal && st.t.failed == 0 && st.t.mismatched == 0 && st.callbacks == nbatches &&
              st.t.verified_bytes == total;
    rc = ok ? CLI_OK : CLI_FAIL;
    /* the output takes its name only now, every batch verified */
    if (ok && ro.output && run_output_commit(cmd, &out) != CLI_OK)
        rc = CLI_FAIL;
    if (ro.report) {
        run_outcome_t oc = {&s, &st.t, total, nbatches, wall, ok};
        if (write_report(&ro, rt, dev, pl, &oc) == CLI_OK)
            ro.report_done = true;
        else
            rc = CLI_FAIL;
    }
    if (!ro.quiet)
        print_summary(&ro, rt, dev, &s, &st.t, total, nbatches, s.chunk_bytes, wall, ok);
    if (s.failure_log_errors > 0)
        rc = cli_fail(cmd, "--failure-log %s: %llu failure record(s) could not be written",
                      ferry_options_get_str(opts, "failure_log"),
                      (unsigned long long)s.failure_log_errors);
    if (ro.signal)
        rc = 128 + ro.signal;

out:
    cli_metrics_stop(cmd, metrics);
    stop_verifiers(&st, verifiers, &nver);
    if (pl && ferry_pipeline_close(pl) != 0) {
        ferry_pipeline_drain(pl);
        ferry_pipeline_close(pl);
    }
    for (size_t i = 0; st.ring && i < st.nring; i++) {
        if (dev && st.ring[i].out)
            ferry_host_unregister(dev, st.ring[i].out);
        if (dev && st.ring[i].own_in)
            ferry_host_unregister(dev, st.ring[i].own_in);
        free(st.ring[i].own_in);
        free(st.ring[i].out);
    }
    if (pool_pinned)
        ferry_host_unregister(dev, pool);
    free(pool);
    free(ref);
    ferry_workload_destroy(wl);
    ferry_runtime_destroy(rt);
    free(st.ring);
    free(st.freeq);
    free(st.doneq);
    free(cbs);
    run_signals_stop(sg); /* first: its thread may remove the temporary output */
    run_file_close(&in);
    run_file_close(&out);
    pthread_mutex_destroy(&st.lock);
    pthread_cond_destroy(&st.cv_free);
    pthread_cond_destroy(&st.cv_done);
    ferry_options_destroy(opts);
    return rc;
}
