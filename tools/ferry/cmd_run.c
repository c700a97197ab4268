/* `ferry run`: the main job. Streams generated data (or a file) through a built-in workload
 * on the GPU or the simulated H200, checks every output byte against the CPU reference
 * (run_verify.c; --verify), and prints a summary (text or --json): time, GB/s each way, overlap,
 * engine utilisation, batches; --report draws it as an HTML page (run_report.c). This file holds
 * the command line and the run: files, pipeline, buffers, submission (of a regular --input file:
 * run_files.c, reads ahead in flight). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
#include "report.h"
#include "run.h"
#include "run_files.h"
#include "run_io.h"

static const char run_cmd[] = "run";

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

/* Page-aligned memory (free() releases it) for the buffers the copies read and write where
 * pinning is refused: on the H200 a copy from or to a buffer 16 bytes into a page, where
 * glibc's malloc puts large blocks, ran 1.5% slower
 * (bench/results/2026-12-04-h200-explore-alignment.jsonl). */
static void *page_alloc(size_t n)
{
    void *m = NULL;
    return posix_memalign(&m, 4096, n) == 0 ? m : NULL;
}

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
           "  --verify full|sample|off\n"
           "                       check every batch (full, the default), one batch in 16 and\n"
           "                       the last (sample), or none (off: the summary says 'not\n"
           "                       verified')\n"
           "  --trace FILE         write a Chrome trace (open in ui.perfetto.dev)\n"
           "  --report FILE        write an HTML page: timeline of the first chunks, engine\n"
           "                       utilisation, summary (docs/report.md)\n"
           "  --single-stream      every op on one stream: the no-overlap baseline\n"
           "  --json               print the summary as one JSON object\n"
           "  --quiet              print nothing but errors: no summary, no progress bar, no\n"
           "                       warnings (exit status tells)\n"
           "  --stripe-bytes SIZE, --resume, --journal PREFIX\n"
           "                       started by mpirun or srun: one job over the ranks, --input\n"
           "                       cut into stripes of SIZE (default 256M) that the ranks take\n"
           "                       as they free up; --resume finishes a job that stopped, from\n"
           "                       its journal (default OUTPUT.journal.RANK; docs/mpi.md)\n"
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
    run_opts_t *r = into;
    if (r->batch_bytes == 0 || r->batch_bytes > (1ull << 34))
        return cli_usage_error(cmd, "--batch-bytes must be 1 to 16G");
    r->batch_set = true;
    return CLI_OK;
}

static int check_verify(const char *cmd, const char *v, void *into)
{
    run_opts_t *r = into;
    static const char *const names[] = {"full", "sample", "off"};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, names[i]) == 0) {
            r->verify_mode = (run_verify_t)i;
            return CLI_OK;
        }
    return cli_usage_error(cmd, "--verify '%s': accepted: full, sample, off", v);
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

static int check_stripe_bytes(const char *cmd, const char *v, void *into)
{
    (void)v;
    if (((run_opts_t *)into)->stripe_bytes == 0)
        return cli_usage_error(cmd, "--stripe-bytes must be at least 1 (a multiple of 4 for "
                                    "the float workloads)");
    return 0;
}

static const cli_flag_def_t run_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, run_opts_t, json, "print the summary as one JSON object")},
    {CLI_FLAG("quiet", CLI_SWITCH, run_opts_t, quiet, "print nothing but errors")},
    {CLI_FLAG("single-stream", CLI_SWITCH, run_opts_t, single_stream, "every op on one stream")},
    {CLI_FLAG("bytes", CLI_SIZE, run_opts_t, bytes, "bytes of generated data"),
     .check = check_bytes},
    {CLI_FLAG("batch-bytes", CLI_SIZE, run_opts_t, batch_bytes, "bytes per submitted batch"),
     .check = check_batch_bytes},
    {CLI_FLAG("verify", CLI_STRING, run_opts_t, verify, "full, sample or off"),
     .check = check_verify},
    {CLI_FLAG("workload", CLI_STRING, run_opts_t, workload, "copy, scale or fma")},
    {CLI_FLAG("intensity", CLI_UINT, run_opts_t, intensity, "fma: fused multiply-adds per float"),
     .lo = 1, .hi = 100000},
    {CLI_FLAG("input", CLI_STRING, run_opts_t, input, "stream FILE instead of generated data")},
    {CLI_FLAG("output", CLI_STRING, run_opts_t, output, "write the transformed stream to FILE")},
    {CLI_FLAG("trace", CLI_STRING, run_opts_t, trace, "write a Chrome trace"),
     .check = check_trace},
    {CLI_FLAG("report", CLI_STRING, run_opts_t, report, "write an HTML page"),
     .check = check_report},
    {CLI_FLAG("stripe-bytes", CLI_SIZE, run_opts_t, stripe_bytes,
              "under mpirun: bytes per stripe the ranks take (default 256M)"),
     .check = check_stripe_bytes},
    {CLI_FLAG("resume", CLI_SWITCH, run_opts_t, resume,
              "under mpirun: finish the job the journal describes")},
    {CLI_FLAG("journal", CLI_STRING, run_opts_t, journal,
              "under mpirun: the journal's path prefix (default OUTPUT.journal)")},
    {NULL},
};

/* The command line, and what no single flag can check. */
static int check_flags(const run_opts_t *r)
{
    const char *cmd = run_cmd;
    bool known = false;
    for (const char *const *n = ferry_workload_names(); *n; n++)
        known |= strcmp(*n, r->workload) == 0;
    if (!known)
        return cli_usage_error(cmd, "--workload '%s': accepted: copy, scale, fma", r->workload);
    if (r->intensity && strcmp(r->workload, "fma") != 0)
        return cli_usage_error(cmd, "--intensity applies to --workload fma only");
    if (r->bytes == 0 && (!r->input || r->bytes_set))
        return cli_usage_error(cmd, "--bytes must be at least 1");
    if (run_mpi_ranks() == 0 && (r->stripe_bytes || r->resume || r->journal))
        return cli_usage_error(cmd,
                               "%s: only for a job over MPI ranks (mpirun -n N ferry run "
                               "..., srun ...; docs/mpi.md)",
                               r->stripe_bytes ? "--stripe-bytes"
                               : r->resume     ? "--resume"
                                               : "--journal");
    return 0;
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

/* Everything one run holds; run_cleanup() releases it. */
typedef struct run_ctx {
    run_opts_t ro;
    ferry_options_t *opts;
    ferry_runtime_t *rt;
    ferry_device_t *dev;
    ferry_pipeline_t *pl;
    cli_metrics_t *metrics;
    ferry_workload_t *wl;
    run_state_t st;
    cb_ctx_t *cbs;
    unsigned char *pool;
    uint64_t *digests; /* of the pool's reference output (run.h) */
    size_t pool_bytes;
    bool pool_pinned;
    unsigned long long pinned_bytes; /* buffers ferry_host_alloc pinned, */
    uint64_t pin_ns;                 /* in this long */
    char pin_refused[256];           /* why pinning was refused ("": it was not) */
    pthread_t verifiers[RUN_MAX_HELPERS];
    unsigned nver;
    ferry_file_t *src; /* a regular --input file */
    pthread_t sink_thread;
    int infd;
    bool stream_in;
    run_file_t in, out;
    run_signals_t *sg;
    unsigned long long total, nbatches, submitted;
    size_t bb; /* bytes per batch */
    int64_t seed;
} run_ctx_t;

/* The signals, --input and --output. Returns CLI_OK, CLI_USAGE or CLI_FAIL (printed). */
static int open_io(run_ctx_t *c)
{
    /* Blocked before any other thread exists, ferry's included, so that SIGINT and SIGTERM
     * reach only the thread that takes them (started once the runtime is made). */
    if (run_signals_start(run_cmd, RUN_GRACE_S, on_signal, &c->st, &c->sg) != CLI_OK)
        return CLI_FAIL;
    c->total = c->ro.bytes;
    if (c->ro.input) {
        int rc = run_input_open(run_cmd, c->ro.input, &c->in);
        if (rc != CLI_OK)
            return rc;
        c->infd = c->in.fd;
        c->stream_in = c->in.stream;
        c->ro.input_stream = c->in.stream;
        c->ro.input_file = !c->in.stream;
        if (!c->stream_in && ferry_file_open(c->ro.input, FERRY_FILE_READ, NULL, &c->src) != 0)
            return cli_fail(run_cmd, "cannot read --input %s: %s", c->ro.input, ferry_last_error());
        /* --bytes is a limit on what is read; a stream without it is read to its end */
        if (!c->stream_in && (!c->ro.bytes_set || (unsigned long long)c->in.sb.st_size < c->total))
            c->total = (unsigned long long)c->in.sb.st_size;
        else if (c->stream_in && !c->ro.bytes_set)
            c->total = ULLONG_MAX;
    }
    if (c->ro.output) {
        int rc = run_output_open(run_cmd, c->ro.output, &c->in, &c->out);
        if (rc != CLI_OK)
            return rc;
        run_signals_watch(c->sg, &c->out); /* a late stop removes its temporary file */
        c->st.outfd = c->out.fd;
        c->st.ordered = c->ro.output_stream = c->out.stream;
        c->ro.output_file = !c->out.stream;
        struct stat null_sb;
        c->ro.output_null = c->out.stream && S_ISCHR(c->out.sb.st_mode) &&
                            stat("/dev/null", &null_sb) == 0 &&
                            null_sb.st_rdev == c->out.sb.st_rdev;
        if (!c->out.stream && ferry_file_open(c->out.tmp, FERRY_FILE_WRITE, NULL, &c->st.sink) != 0)
            return cli_fail(run_cmd, "cannot write --output %s: %s", c->ro.output,
                            ferry_last_error());
        /* a reader that went away is a write error (EPIPE) to report, not a silent death */
        if (c->out.stream)
            signal(SIGPIPE, SIG_IGN);
    }
    return CLI_OK;
}

/* The runtime, the device, the workload and the pipeline. Returns CLI_OK or CLI_FAIL. */
static int open_pipeline(run_ctx_t *c)
{
    ferry_runtime_config_t rcfg = FERRY_RUNTIME_CONFIG_INIT;
    rcfg.options = c->opts;
    int e = ferry_runtime_create(&rcfg, &c->rt);
    if (e != 0)
        return cli_fail(run_cmd, "%s: %s", ferry_strerror(e), ferry_last_error());
    if (run_signals_listen(c->sg) != CLI_OK) /* after the runtime's fork (run_io.h) */
        return CLI_FAIL;
    if (!c->ro.quiet && !c->ro.json && ferry_runtime_fallback_reason(c->rt)[0])
        fprintf(stderr, "ferry run: no GPU (%s); running on the simulated device\n",
                ferry_runtime_fallback_reason(c->rt));
    /* --devices (or --device): one device, or a set the pipeline spreads batches over */
    ferry_device_t *devs[FERRY_MAX_DEVICE_SET];
    unsigned ndev = 0;
    e = ferry_devices_select(c->rt, NULL, devs, FERRY_MAX_DEVICE_SET, &ndev);
    if (e == FERRY_EINVAL) /* the value is wrong, not the machine */
        return cli_usage_error(run_cmd, "--devices: %s", ferry_last_error());
    if (e != 0)
        return cli_fail(run_cmd, "%s", ferry_last_error());
    c->dev = devs[0];
    ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
    wp.intensity = (unsigned)c->ro.intensity;
    if (ferry_workload_create(c->ro.workload, &wp, &c->wl) != 0)
        return cli_fail(run_cmd, "%s", ferry_last_error());
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    if (ndev > 1) {
        pc.devices = devs;
        pc.ndevices = ndev;
    } else {
        pc.device = c->dev;
    }
    pc.stage = ferry_workload_stage(c->wl);
    pc.single_stream = c->ro.single_stream;
    if (ferry_pipeline_create(&pc, &c->pl) != 0)
        return cli_fail(run_cmd, "cannot create the pipeline: %s", ferry_last_error());
    c->seed = 1;
    ferry_options_get_i64(c->opts, "seed", &c->seed);
    return CLI_OK;
}

/* Memory for the copies: pinned by ferry_host_alloc (huge pages, touched by several threads:
 * 4 GiB in 0.35 s on the H200 host, 2.9 s in 4 KiB pages touched by one thread), or where
 * pinning is refused (the memlock limit) pageable memory that the pipeline stages through its
 * own pinned slots. NULL: out of memory. */
static void *copy_buf(run_ctx_t *c, size_t n, bool *pinned)
{
    uint64_t t0 = run_now_ns();
    void *p = NULL;
    *pinned = ferry_host_alloc(c->dev, n, &p) == 0;
    if (*pinned) {
        c->pinned_bytes += n;
    } else {
        if (!c->pin_refused[0])
            snprintf(c->pin_refused, sizeof(c->pin_refused), "%s", ferry_last_error());
        p = page_alloc(n);
    }
    c->pin_ns += run_now_ns() - t0;
    return p;
}

static void copy_buf_free(run_ctx_t *c, void *p, bool pinned)
{
    if (pinned)
        ferry_host_free(c->dev, p);
    else
        free(p);
}

/* The ring of batches in flight, and for generated data the pool they cycle over with its
 * reference output. Returns whether every allocation succeeded. */
static bool alloc_ring(run_ctx_t *c)
{
    run_state_t *st = &c->st;
    ferry_pipeline_stats_t plan = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(c->pl, &plan);
    /* Enough entries that the queue and every slot can be full while others are verified. */
    st->nring = (size_t)plan.queue_depth + plan.depth + 2 + run_helper_threads();
    /* and the reads ahead, the writes behind, of regular files */
    st->nring +=
        (c->src ? run_files_ring_extra(c->bb) : 0) + (st->sink ? run_files_ring_extra(c->bb) : 0);
    if (st->nring > c->nbatches)
        st->nring = c->nbatches ? c->nbatches : 1;
    st->ring = calloc(st->nring, sizeof(*st->ring));
    st->freeq = calloc(st->nring, sizeof(size_t));
    st->doneq = calloc(st->nring, sizeof(size_t));
    c->cbs = calloc(st->nring, sizeof(*c->cbs));
    bool ok = st->ring && st->freeq && st->doneq && c->cbs;
    for (size_t i = 0; ok && i < st->nring; i++) {
        ring_entry_t *re = &st->ring[i];
        re->out = copy_buf(c, c->bb, &re->out_pinned);
        if (c->infd >= 0)
            re->own_in = re->in = copy_buf(c, c->bb, &re->in_pinned);
        ok = re->out && (c->infd < 0 || re->in);
        st->freeq[st->nfree++] = i;
        c->cbs[i] = (cb_ctx_t){st, i};
    }
    /* Generated data: a pool of whole batches (up to 1 GiB on a GPU, 256 MiB on the simulator,
     * whose kernels run on this CPU) made once with the digests of its reference output;
     * batches cycle over it, so checking a batch reads its output once. A different --seed
     * gives different data. */
    if (ok && c->infd < 0 && c->nbatches > 0) {
        size_t cap = ferry_device_is_simulated(c->dev) ? (256u << 20) : (1u << 30);
        size_t k = cap / c->bb ? cap / c->bb : 1;
        if (k > c->nbatches)
            k = (size_t)c->nbatches;
        c->pool_bytes = k * c->bb;
        c->pool = copy_buf(c, c->pool_bytes, &c->pool_pinned);
        st->blocks_per_batch = run_digest_blocks(c->bb);
        c->digests = calloc(k * st->blocks_per_batch, sizeof(uint64_t));
        ok =
            c->pool && c->digests &&
            run_make_reference((uint64_t)c->seed, c->wl, c->pool, c->pool_bytes, c->bb, c->digests);
        st->digests = c->digests;
    }
    return ok;
}

/* Batches, buffers, pinning and the verifier threads. Returns CLI_OK or CLI_FAIL. */
static int prepare_buffers(run_ctx_t *c)
{
    /* Batches are whole floats (the workloads' granularity) so that every full batch has the
     * same reference as its slice of the pool. */
    size_t bb = c->ro.batch_bytes < c->total ? (size_t)c->ro.batch_bytes : (size_t)c->total;
    if (bb >= 4)
        bb -= bb % 4;
    if (bb == 0)
        bb = 1;
    c->bb = bb;
    c->nbatches = c->total / bb + (c->total % bb != 0); /* a stream: until its end */
    c->st.batch_bytes = bb;
    c->st.wl = c->wl;
    c->st.verify = c->ro.verify_mode;
    c->st.last_seq = c->total == ULLONG_MAX ? UINT64_MAX : c->nbatches - 1;
    if (!alloc_ring(c))
        return cli_fail(run_cmd, "out of host memory for %zu buffers of %zu bytes", c->st.nring,
                        bb);
    /* Pinned input and output (copy_buf): the copies go straight from and to them. */
    if (c->pin_refused[0] && !c->ro.quiet)
        fprintf(stderr, "ferry run: could not pin all buffers (%s); those are staged\n",
                c->pin_refused);
    c->nver = run_verifiers_start(&c->st, c->verifiers, RUN_MAX_HELPERS);
    c->st.verifiers = c->nver;
    return c->st.sink ? run_sink_start(run_cmd, &c->st, &c->sink_thread) : CLI_OK;
}

/* Fill ring entry @re with batch @i: read from a stream --input, or point into the generated
 * pool (a regular --input file: run_feed_file).
 * Returns 1 filled, 0 the input stream ended (or a signal came), -1 a read error (printed). */
static int fill_batch(run_ctx_t *c, ring_entry_t *re, unsigned long long i)
{
    re->offset = i * c->bb;
    re->bytes = (size_t)(c->total - re->offset < c->bb ? c->total - re->offset : c->bb);
    re->seq = i;
    if (c->stream_in) {
        ssize_t got = read_stream(c->infd, re->in, re->bytes, &c->st);
        if (got < 0 && got != -2) {
            cli_fail(run_cmd, "reading --input %s at %llu: %s", c->ro.input,
                     (unsigned long long)re->offset, strerror(errno));
            return -1;
        }
        if (got <= 0) /* the stream's end, or a signal */
            return 0;
        re->bytes = (size_t)got;
    } else {
        re->pool_off = (size_t)(i % (c->pool_bytes / c->bb)) * c->bb;
        re->in = c->pool + re->pool_off;
    }
    return 1;
}

/* Submit every batch, waiting for a free ring entry before each. Returns false when a read or
 * a submit failed (printed); c->nbatches becomes the batches submitted. */
static bool submit_batches(run_ctx_t *c, cli_progress_t *bar)
{
    run_state_t *st = &c->st;
    unsigned long long nsub = 0;
    bool failed = false;
    for (unsigned long long i = 0; i < c->nbatches; i++) {
        pthread_mutex_lock(&st->lock);
        /* a wait while finished batches queue for a verifier is verification holding the run,
         * one while the output's writes hold the entries storage */
        while (st->nfree == 0 && st->signal == 0)
            run_wait_free(st);
        /* a signal, or an output stream that cannot be written: submit nothing more */
        if (st->signal != 0 || (st->ordered && st->t.io_error)) {
            pthread_mutex_unlock(&st->lock);
            break;
        }
        size_t idx = st->freeq[--st->nfree];
        uint64_t done_bytes = st->t.done_bytes;
        pthread_mutex_unlock(&st->lock);
        cli_progress_update(bar, done_bytes);
        ring_entry_t *re = &st->ring[idx];
        size_t want = (size_t)(c->total - i * c->bb < c->bb ? c->total - i * c->bb : c->bb);
        uint64_t r0 = c->infd >= 0 ? run_now_ns() : 0;
        int f = fill_batch(c, re, i);
        if (r0)
            st->read_ns += run_now_ns() - r0;
        if (f <= 0) {
            failed = f < 0;
            if (f == 0) {
                pthread_mutex_lock(&st->lock);
                st->freeq[st->nfree++] = idx;
                pthread_mutex_unlock(&st->lock);
            }
            break;
        }
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = re->in;
        b.out = re->out;
        b.bytes = re->bytes;
        if (ferry_pipeline_submit(c->pl, &b, run_on_done, &c->cbs[idx], NULL) != 0) {
            cli_fail(run_cmd, "submit: %s", ferry_last_error());
            failed = true;
            break;
        }
        c->submitted += re->bytes;
        nsub++;
        if (re->bytes < want) /* the stream ended */
            break;
    }
    c->nbatches = nsub;
    return !failed;
}

/* After the last batch: stats, the trace, the output put in place, the report and the
 * summary. Returns the exit status. */
static int finish(run_ctx_t *c, double wall)
{
    run_opts_t *ro = &c->ro;
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(c->pl, &s);
    if (ro->trace && ferry_pipeline_write_trace(c->pl, ro->trace) != 0)
        return cli_fail(run_cmd, "%s", ferry_last_error());
    if (c->st.t.io_error)
        return cli_fail(run_cmd, "writing --output %s: %s", ro->output,
                        c->st.io_why[0] ? c->st.io_why : strerror(c->st.t.io_error));
    bool ok = !ro->signal && c->st.t.failed == 0 && c->st.t.mismatched == 0 &&
              c->st.callbacks == c->nbatches && c->st.t.done_bytes == c->total &&
              (ro->verify_mode != RUN_VERIFY_FULL || c->st.t.verified_bytes == c->total);
    int rc = ok ? CLI_OK : CLI_FAIL;
    /* the output takes its name only now, every batch verified */
    if (ok && ro->output && run_output_commit(run_cmd, &c->out) != CLI_OK)
        rc = CLI_FAIL;
    run_outcome_t oc = {&s,   &c->st.t, c->total,        c->nbatches,     wall,
                        ok,   &c->st,   c->st.verifiers, c->pinned_bytes, (double)c->pin_ns / 1e9,
                        c->pl};
    if (ro->report) {
        if (run_write_report(ro, c->rt, c->dev, c->pl, &oc) == CLI_OK)
            ro->report_done = true;
        else
            rc = CLI_FAIL;
    }
    if (!ro->quiet)
        run_print_summary(ro, c->rt, c->dev, &oc, s.chunk_bytes);
    if (s.failure_log_errors > 0)
        rc = cli_fail(run_cmd, "--failure-log %s: %llu failure record(s) could not be written",
                      ferry_options_get_str(c->opts, "failure_log"),
                      (unsigned long long)s.failure_log_errors);
    if (ro->signal)
        rc = 128 + ro->signal;
    return rc;
}

/* The run itself: metrics, submission, drain, then finish(). Returns the exit status. */
static int run_batches(run_ctx_t *c)
{
    if (cli_metrics_start(run_cmd, c->opts, c->pl, "run", c->ro.quiet, &c->metrics) != CLI_OK)
        return CLI_FAIL;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    cli_progress_t bar;
    cli_progress_begin(&bar, "ferry run", c->total == ULLONG_MAX ? 0 : c->total, true, c->ro.quiet);
    bool submitted_all;
    if (c->src != NULL) {
        run_feed_t fd = {.st = &c->st,
                         .src = c->src,
                         .pl = c->pl,
                         .cbs = c->cbs,
                         .cmd = run_cmd,
                         .name = c->ro.input,
                         .total = c->total,
                         .nbatches = c->nbatches,
                         .bb = c->bb};
        submitted_all = run_feed_file(&fd, &bar);
        c->nbatches = fd.nsub;
        c->submitted = fd.nbytes;
    } else {
        submitted_all = submit_batches(c, &bar);
    }
    ferry_pipeline_drain(c->pl);
    run_verifiers_stop(&c->st, c->verifiers, &c->nver);
    run_sink_stop(&c->st, &c->sink_thread);
    run_signals_finish(c->sg);
    c->ro.signal = run_signals_caught(c->sg);
    if (c->stream_in && (!c->ro.signal || c->total == ULLONG_MAX))
        c->total = c->submitted;
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    cli_progress_end(&bar);
    int mrc = cli_metrics_stop(run_cmd, c->metrics);
    c->metrics = NULL;
    if (mrc != CLI_OK || !submitted_all)
        return CLI_FAIL;
    double wall = (double)(ts1.tv_sec - ts0.tv_sec) + (double)(ts1.tv_nsec - ts0.tv_nsec) / 1e9;
    return finish(c, wall);
}

static void run_cleanup(run_ctx_t *c)
{
    run_state_t *st = &c->st;
    cli_metrics_stop(run_cmd, c->metrics);
    run_verifiers_stop(st, c->verifiers, &c->nver);
    if (c->pl && ferry_pipeline_close(c->pl) != 0) {
        ferry_pipeline_drain(c->pl);
        ferry_pipeline_close(c->pl);
    }
    run_sink_stop(st, &c->sink_thread);
    ferry_file_close(c->src); /* no read in flight: run_feed_file waited for them */
    for (size_t i = 0; st->ring && i < st->nring; i++) {
        copy_buf_free(c, st->ring[i].own_in, st->ring[i].in_pinned);
        copy_buf_free(c, st->ring[i].out, st->ring[i].out_pinned);
    }
    copy_buf_free(c, c->pool, c->pool_pinned);
    free(c->digests);
    ferry_workload_destroy(c->wl);
    ferry_runtime_destroy(c->rt);
    free(st->ring);
    free(st->lat_ns);
    free(st->freeq);
    free(st->doneq);
    free(c->cbs);
    run_signals_stop(c->sg); /* first: its thread may remove the temporary output */
    run_file_close(&c->in);
    run_file_close(&c->out);
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->cv_free);
    pthread_cond_destroy(&st->cv_done);
    ferry_options_destroy(c->opts);
}

int cmd_run(int argc, char **argv)
{
    static const char verify_default[] = "full";
    run_ctx_t c = {
        .ro = {.workload = "scale",
               .verify = verify_default,
               .bytes = 4ull << 30,
               .batch_bytes = 64ull << 20},
        .st = {.outfd = -1, .cut_seq = UINT64_MAX},
        .infd = -1,
        .in = RUN_FILE_INIT,
        .out = RUN_FILE_INIT,
    };
    cli_quiet_logs(argc, argv);
    cli_parser_t p = {.cmd = run_cmd, .flags = {run_flags}, .into = &c.ro};
    int pr = cli_parse_options(&p, argc, argv, 1, &c.opts);
    if (pr != CLI_OK)
        return pr == CLI_HELP ? usage() : pr;
    if ((pr = check_flags(&c.ro)) != CLI_OK) {
        ferry_options_destroy(c.opts);
        return pr;
    }
    /* started by mpirun or srun: one rank of a job over them (a launch of one rank too) */
    if (run_mpi_ranks() > 0) {
        pr = run_mpi(&c.ro, c.opts, c.ro.verify != verify_default);
        ferry_options_destroy(c.opts);
        return pr;
    }
    c.ro.opts = c.opts;
    if (c.ro.trace)
        ferry_options_set(c.opts, "trace", "1");
    c.ro.argc = argc;
    c.ro.argv = argv;
    if (c.ro.report)
        run_report_trace_setup(&c.ro, c.opts);
    pthread_mutex_init(&c.st.lock, NULL);
    pthread_cond_init(&c.st.cv_free, NULL);
    pthread_cond_init(&c.st.cv_done, NULL);

    int rc = open_io(&c);
    if (rc == CLI_OK)
        rc = open_pipeline(&c);
    if (rc == CLI_OK)
        rc = prepare_buffers(&c);
    if (rc == CLI_OK)
        rc = run_batches(&c);
    run_cleanup(&c);
    return rc;
}
