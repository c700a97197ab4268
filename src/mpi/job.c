/* One job over the ranks of a communicator (include/ferry/mpi.h). Rank 0 checks the input,
 * makes the output at the input's size, and clears or reads the journal (journal.h); what it
 * found goes to every rank. The stripes left to run are a list every rank holds; a counter in a
 * window on rank 0, taken with MPI_Fetch_and_op, hands out the next index of that list, so a
 * rank takes a stripe whenever it has room for one and a slower rank takes fewer. A rank runs
 * its stripes as batches through its own pipeline, from NSLOTS buffers (pinned where the device
 * allows): the calling thread reads a batch into a free buffer and submits it, and writes the
 * results that came back (the pipeline's callback only queues them) at their offsets. A stripe
 * whose batches all succeeded and are written is synced and then journaled as finished. Only
 * the calling thread makes MPI calls. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/mpi.h"
#include "mpi/journal.h"

#define DEFAULT_STRIPE (256ull << 20)
#define DEFAULT_BATCH  ((size_t)64 << 20)
#define NSLOTS         8
#define MAX_OPEN       2

static __thread char last_err[1024];

const char *ferry_mpi_last_error(void)
{
    return last_err;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof(last_err), fmt, ap);
    va_end(ap);
    return code;
}

typedef struct slot {
    unsigned char *in, *out;
    bool pinned, busy;
    uint64_t stripe, off;
    size_t bytes;
    int status, where;
} slot_t;

/* A stripe with batches not yet written. */
typedef struct open_stripe {
    uint64_t stripe;
    unsigned left; /* batches not yet written (or failed) */
    bool failed, all_sent;
} open_stripe_t;

typedef struct rank_job {
    const ferry_mpi_job_t *job;
    int rank, infd, outfd, jfd;
    uint64_t total, stripe_bytes;
    size_t batch;
    ferry_device_t *dev; /* for ferry_host_alloc */
    ferry_pipeline_t *pl;
    slot_t slots[NSLOTS];
    pthread_mutex_t lock;
    pthread_cond_t cv;
    unsigned doneq[NSLOTS], ndone; /* under lock: slots the pipeline finished */
    open_stripe_t open[NSLOTS + 1];
    unsigned nopen;
    ferry_mpi_rank_t me;
    int rc; /* the first error here */
} rank_job_t;

/* The callback's argument: the job and the slot. */
typedef struct cb_arg {
    rank_job_t *j;
    unsigned i;
} cb_arg_t;

static void batch_done(const ferry_batch_result_t *r, void *arg)
{
    cb_arg_t *a = arg;
    rank_job_t *j = a->j;
    pthread_mutex_lock(&j->lock);
    j->slots[a->i].status = r->status;
    j->slots[a->i].where = (int)r->where;
    j->doneq[j->ndone++] = a->i;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->lock);
}

static int set_err(rank_job_t *j, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_err(rank_job_t *j, int code, const char *fmt, ...)
{
    if (j->rc != 0)
        return j->rc;
    va_list ap;
    va_start(ap, fmt);
    char m[768];
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    snprintf(last_err, sizeof(last_err), "rank %d: %s", j->rank, m);
    return j->rc = code;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k == 0 ? (errno = EIO, -1) : -1; /* the file shrank under the job */
        got += (size_t)k;
    }
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
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

static open_stripe_t *find_open(rank_job_t *j, uint64_t stripe)
{
    for (unsigned i = 0; i < j->nopen; i++)
        if (j->open[i].stripe == stripe)
            return &j->open[i];
    return NULL;
}

/* Stripe @o has no batch left: synced and journaled as finished when all of it succeeded. */
static void stripe_end(rank_job_t *j, open_stripe_t *o)
{
    uint64_t s = o->stripe;
    bool ok = !o->failed;
    *o = j->open[--j->nopen];
    if (!ok)
        return;
    if (fdatasync(j->outfd) != 0) {
        set_err(j, FERRY_EIO, "syncing %s: %s", j->job->output, strerror(errno));
        return;
    }
    if (ferry__journal_note(j->jfd, j->rank, s, j->stripe_bytes, j->total, true) != 0) {
        set_err(j, FERRY_EIO, "writing the journal: %s", strerror(errno));
        return;
    }
    j->me.stripes++;
    uint64_t end = (s + 1) * j->stripe_bytes < j->total ? (s + 1) * j->stripe_bytes : j->total;
    j->me.bytes += end - s * j->stripe_bytes;
}

/* Wait for one finished batch and write it out. */
static void write_one(rank_job_t *j)
{
    pthread_mutex_lock(&j->lock);
    while (j->ndone == 0)
        pthread_cond_wait(&j->cv, &j->lock);
    unsigned i = j->doneq[--j->ndone];
    pthread_mutex_unlock(&j->lock);
    slot_t *sl = &j->slots[i];
    open_stripe_t *o = find_open(j, sl->stripe);
    if (sl->status != 0) {
        j->me.batches_failed++;
        o->failed = true;
        set_err(j, FERRY_EBACKEND, "a batch of stripe %llu (offset %llu) failed: %s",
                (unsigned long long)sl->stripe, (unsigned long long)sl->off,
                ferry_strerror(sl->status));
    } else {
        j->me.batches_gpu += sl->where == FERRY_DONE_GPU;
        j->me.batches_cpu += sl->where == FERRY_DONE_CPU;
        if (pwrite_all(j->outfd, sl->out, sl->bytes, sl->off) != 0) {
            o->failed = true;
            set_err(j, FERRY_EIO, "writing %s at %llu: %s", j->job->output,
                    (unsigned long long)sl->off, strerror(errno));
        }
    }
    sl->busy = false;
    if (--o->left == 0 && o->all_sent)
        stripe_end(j, o);
}

static slot_t *free_slot(rank_job_t *j, unsigned *idx)
{
    for (;;) {
        for (unsigned i = 0; i < NSLOTS; i++)
            if (!j->slots[i].busy) {
                *idx = i;
                return &j->slots[i];
            }
        write_one(j);
    }
}

/* Run stripe @s: its batches read, submitted, and (as they come back) written. */
static void run_stripe(rank_job_t *j, uint64_t s, cb_arg_t *cbs)
{
    uint64_t from = s * j->stripe_bytes;
    uint64_t to = from + j->stripe_bytes < j->total ? from + j->stripe_bytes : j->total;
    if (ferry__journal_note(j->jfd, j->rank, s, j->stripe_bytes, j->total, false) != 0) {
        set_err(j, FERRY_EIO, "writing the journal: %s", strerror(errno));
        return;
    }
    open_stripe_t *o = &j->open[j->nopen++];
    *o = (open_stripe_t){.stripe = s};
    for (uint64_t off = from; off < to && j->rc == 0; off += j->batch) {
        unsigned i;
        slot_t *sl = free_slot(j, &i);
        o = find_open(j, s); /* the array moves as stripes end */
        sl->stripe = s;
        sl->off = off;
        sl->bytes = to - off < j->batch ? (size_t)(to - off) : j->batch;
        if (pread_all(j->infd, sl->in, sl->bytes, off) != 0) {
            set_err(j, FERRY_EIO, "reading %s at %llu: %s", j->job->input, (unsigned long long)off,
                    strerror(errno));
            break;
        }
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = sl->in;
        b.out = sl->out;
        b.bytes = sl->bytes;
        int rc = ferry_pipeline_submit(j->pl, &b, batch_done, &cbs[i], NULL);
        if (rc != 0) {
            set_err(j, rc, "submitting a batch of stripe %llu: %s", (unsigned long long)s,
                    ferry_last_error());
            break;
        }
        sl->busy = true;
        o->left++;
    }
    o = find_open(j, s);
    o->all_sent = true;
    o->failed |= j->rc != 0;
    if (o->left == 0)
        stripe_end(j, o);
}

/* ---- set-up on rank 0, shared with every rank ------------------------------------------ */

typedef struct setup {
    int64_t rc;
    uint64_t total, nstripes, unfinished, resumed;
    char held[512]; /* resumed: who held the unfinished stripes (ferry_mpi_result_t.unfinished) */
} setup_t;

/* "rank R: stripe(s) s s s; rank Q: stripe(s) s" of the stripes claimed and not finished, into
 * @out ("..." where it is full). */
static void held_note(const unsigned char *done, const int *claimed, uint64_t n, char *out,
                      size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    int max = -1;
    for (uint64_t i = 0; i < n; i++)
        max = claimed[i] > max ? claimed[i] : max;
    for (int r = 0; r <= max; r++) {
        bool any = false;
        for (uint64_t i = 0; i < n; i++) {
            if (done[i] || claimed[i] != r)
                continue;
            int k = any ? snprintf(out + at, len - at, " %llu", (unsigned long long)i)
                        : snprintf(out + at, len - at, "%srank %d: stripe(s) %llu", at ? "; " : "",
                                   r, (unsigned long long)i);
            if (k < 0 || (size_t)k >= len - at - 4) {
                snprintf(out + at, len - at, "...");
                return;
            }
            at += (size_t)k;
            any = true;
        }
    }
}

static int check_job(const ferry_mpi_job_t *job)
{
    if (job == NULL || job->size < offsetof(ferry_mpi_job_t, resume) + sizeof(int))
        return fail(FERRY_EINVAL, "ferry_mpi_run: NULL job or its size not set "
                                  "(FERRY_MPI_JOB_INIT)");
    if (job->input == NULL || job->output == NULL || job->pipeline == NULL)
        return fail(FERRY_EINVAL, "ferry_mpi_run: the job needs an input, an output and a "
                                  "pipeline config");
    if (strcmp(job->input, job->output) == 0)
        return fail(FERRY_EINVAL, "ferry_mpi_run: the output %s is the input", job->output);
    uint64_t stripe = job->stripe_bytes ? job->stripe_bytes : DEFAULT_STRIPE;
    size_t batch = job->batch_bytes ? job->batch_bytes : DEFAULT_BATCH;
    if (batch > stripe)
        batch = (size_t)stripe; /* a stripe smaller than the default batch is one batch */
    const ferry_stage_t *st = job->pipeline->stage;
    size_t g = st != NULL && st->granularity > 1 ? st->granularity : 1;
    if (stripe % g != 0 || batch % g != 0)
        return fail(FERRY_EINVAL,
                    "ferry_mpi_run: stripe_bytes %llu and batch_bytes %zu must be multiples of "
                    "the stage's granularity (%zu bytes), as one process cuts its batches",
                    (unsigned long long)stripe, batch, g);
    if (job->batch_bytes > stripe)
        return fail(FERRY_EINVAL,
                    "ferry_mpi_run: batch_bytes %zu is over stripe_bytes %llu (accepted: "
                    "1 to the stripe's size)",
                    job->batch_bytes, (unsigned long long)stripe);
    return 0;
}

/* Rank 0: the input's size, the output made at it, the journal cleared or read into @done. */
static int setup_root(const ferry_mpi_job_t *job, const char *jpath, uint64_t stripe, setup_t *su,
                      unsigned char **done)
{
    struct stat sb;
    int fd = open(job->input, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(FERRY_EIO, "rank 0: cannot open the input %s: %s", job->input, strerror(errno));
    int rc = fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)
                 ? fail(FERRY_EINVAL, "rank 0: the input %s is not a regular file", job->input)
                 : 0;
    close(fd);
    if (rc != 0)
        return rc;
    su->total = (uint64_t)sb.st_size;
    su->nstripes = (su->total + stripe - 1) / stripe;
    *done = calloc(su->nstripes + 1, 1);
    int *claimed = calloc(su->nstripes + 1, sizeof(int));
    if (*done == NULL || claimed == NULL) {
        free(claimed);
        return fail(FERRY_ENOMEM, "rank 0: the journal's %llu stripes",
                    (unsigned long long)su->nstripes);
    }
    if (job->resume) {
        ferry__journal_state_t js = {*done, claimed, 0};
        char why[768];
        if (ferry__journal_scan(jpath, stripe, su->total, su->nstripes, &js, why, sizeof(why)) !=
            0) {
            free(claimed);
            return fail(FERRY_EINVAL, "rank 0: %s", why);
        }
        if (js.files == 0) {
            free(claimed);
            return fail(FERRY_EINVAL,
                        "rank 0: resume: no journal %s.<rank> found (a job that ran with "
                        "this --output and journal leaves one)",
                        jpath);
        }
        for (uint64_t i = 0; i < su->nstripes; i++) {
            su->resumed += (*done)[i];
            su->unfinished += !(*done)[i] && claimed[i] >= 0;
        }
        held_note(*done, claimed, su->nstripes, su->held, sizeof(su->held));
    } else if (ferry__journal_clear(jpath) != 0) {
        free(claimed);
        return fail(FERRY_EIO, "rank 0: cannot remove the old journal files %s.*: %s", jpath,
                    strerror(errno));
    }
    free(claimed);
    /* resumed: the output the stopped job wrote, which must be there (made again, the stripes
     * it finished would read as zeros) */
    fd = open(job->output, O_WRONLY | O_CLOEXEC | (job->resume ? 0 : O_CREAT | O_TRUNC), 0644);
    if (fd < 0)
        return fail(FERRY_EIO, "rank 0: cannot %s the output %s: %s",
                    job->resume ? "open (to resume)" : "make", job->output, strerror(errno));
    rc =
        ftruncate(fd, (off_t)su->total) != 0
            ? fail(FERRY_EIO, "rank 0: cannot size the output %s: %s", job->output, strerror(errno))
            : 0;
    close(fd);
    return rc;
}

/* ---- one rank -------------------------------------------------------------------------- */

static bool has_hook(const ferry_mpi_job_t *job)
{
    return job->size >= offsetof(ferry_mpi_job_t, arg) + sizeof(void *) && job->on_pipeline != NULL;
}

/* This rank's files, buffers and pipeline. */
static int rank_open(rank_job_t *j, const char *jpath)
{
    const ferry_pipeline_config_t *pc = j->job->pipeline;
    j->dev = pc->device != NULL ? pc->device : pc->devices != NULL ? pc->devices[0] : NULL;
    if (j->dev != NULL) {
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        if (ferry_device_props(j->dev, &p) == 0)
            snprintf(j->me.device, sizeof(j->me.device), "%s", p.name);
    }
    gethostname(j->me.host, sizeof(j->me.host) - 1);
    j->infd = open(j->job->input, O_RDONLY | O_CLOEXEC);
    if (j->infd < 0)
        return set_err(j, FERRY_EIO, "cannot open the input %s: %s", j->job->input,
                       strerror(errno));
    j->outfd = open(j->job->output, O_WRONLY | O_CLOEXEC);
    if (j->outfd < 0)
        return set_err(j, FERRY_EIO, "cannot open the output %s: %s", j->job->output,
                       strerror(errno));
    j->jfd = ferry__journal_open(jpath, j->rank);
    if (j->jfd < 0)
        return set_err(j, FERRY_EIO, "cannot open the journal %s.%d: %s", jpath, j->rank,
                       strerror(errno));
    for (unsigned i = 0; i < NSLOTS; i++) {
        slot_t *sl = &j->slots[i];
        void *p = NULL;
        /* pinned where the device allows it (else the pipeline stages the batches) */
        sl->pinned = j->dev != NULL && ferry_host_alloc(j->dev, 2 * j->batch, &p) == 0;
        if (!sl->pinned && posix_memalign(&p, 4096, 2 * j->batch) != 0)
            p = NULL;
        if (p == NULL)
            return set_err(j, FERRY_ENOMEM, "%u buffers of 2 x %zu bytes", NSLOTS, j->batch);
        sl->in = p;
        sl->out = sl->in + j->batch;
    }
    int rc = ferry_pipeline_create(pc, &j->pl);
    if (rc != 0)
        return set_err(j, rc, "cannot create the pipeline: %s", ferry_last_error());
    if (has_hook(j->job))
        j->job->on_pipeline(j->pl, j->rank, 1, j->job->arg);
    return 0;
}

static void rank_close(rank_job_t *j)
{
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    if (j->pl != NULL && ferry_pipeline_drain(j->pl) == 0 &&
        ferry_pipeline_stats(j->pl, &st) == 0) {
        j->me.device_seconds = (double)st.elapsed_ns / 1e9;
        j->me.device_gbps = st.elapsed_ns > 0 ? (double)j->me.bytes / (double)st.elapsed_ns : 0;
    }
    j->me.simulated = j->dev != NULL && ferry_device_is_simulated(j->dev);
    if (j->pl != NULL && has_hook(j->job))
        j->job->on_pipeline(j->pl, j->rank, 0, j->job->arg);
    if (j->pl != NULL && ferry_pipeline_destroy(j->pl) != 0)
        set_err(j, FERRY_EBACKEND, "closing the pipeline: %s", ferry_last_error());
    for (unsigned i = 0; i < NSLOTS; i++) {
        if (j->slots[i].in == NULL)
            continue;
        if (j->slots[i].pinned)
            ferry_host_free(j->dev, j->slots[i].in);
        else
            free(j->slots[i].in);
    }
    if (j->infd >= 0)
        close(j->infd);
    if (j->outfd >= 0 && close(j->outfd) != 0)
        set_err(j, FERRY_EIO, "closing %s: %s", j->job->output, strerror(errno));
    if (j->jfd >= 0)
        close(j->jfd);
}

/* Take stripes from the shared counter until none is left (or this rank failed). */
static void take_stripes(rank_job_t *j, MPI_Win win, const uint64_t *todo, uint64_t ntodo)
{
    cb_arg_t cbs[NSLOTS];
    for (unsigned i = 0; i < NSLOTS; i++)
        cbs[i] = (cb_arg_t){j, i};
    while (j->rc == 0) {
        /* room for the next stripe first: a rank holds at most MAX_OPEN stripes (the one it
         * reads while the last one's batches run), so that the stripes left go to whichever
         * rank frees up, not to one that claimed a queue of them */
        while (j->nopen >= MAX_OPEN)
            write_one(j);
        int64_t one = 1, got = 0;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&one, &got, MPI_INT64_T, 0, 0, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        if (got < 0 || (uint64_t)got >= ntodo)
            break;
        run_stripe(j, todo[got], cbs);
    }
    /* what is in flight comes back (and is written) even after an error */
    for (;;) {
        bool busy = false;
        for (unsigned i = 0; i < NSLOTS; i++)
            busy |= j->slots[i].busy;
        if (!busy)
            break;
        write_one(j);
    }
}

/* Every rank agrees on the first rank's error (its code and text), if any. */
static int agree(MPI_Comm comm, int rank, int rc)
{
    int mine = rc != 0 ? rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX)
        return 0;
    int code = rc;
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    MPI_Bcast(last_err, (int)sizeof(last_err), MPI_CHAR, first, comm);
    return code;
}

int ferry_mpi_run(MPI_Comm comm, const ferry_mpi_job_t *job, ferry_mpi_result_t *out)
{
    last_err[0] = '\0';
    if (comm == MPI_COMM_NULL)
        return fail(FERRY_EINVAL, "ferry_mpi_run: MPI_COMM_NULL");
    if (out != NULL && out->size < sizeof(*out))
        return fail(FERRY_EINVAL, "ferry_mpi_run: the result's size not set "
                                  "(FERRY_MPI_RESULT_INIT)");
    int rank = 0, nranks = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &nranks);
    int rc = agree(comm, rank, check_job(job)); /* the same job everywhere: the same verdict */
    if (rc != 0)
        return rc;
    char jpath[4096];
    snprintf(jpath, sizeof(jpath), "%s", job->journal ? job->journal : "");
    if (job->journal == NULL)
        snprintf(jpath, sizeof(jpath), "%s.journal", job->output);
    uint64_t stripe = job->stripe_bytes ? job->stripe_bytes : DEFAULT_STRIPE;
    setup_t su = {0};
    unsigned char *done = NULL;
    if (rank == 0)
        su.rc = setup_root(job, jpath, stripe, &su, &done);
    if ((rc = agree(comm, rank, (int)su.rc)) != 0) {
        free(done);
        return rc;
    }
    MPI_Bcast(&su, (int)sizeof(su), MPI_BYTE, 0, comm);
    if (rank != 0 && (done = calloc(su.nstripes + 1, 1)) == NULL)
        rc = fail(FERRY_ENOMEM, "rank %d: the list of %llu stripes", rank,
                  (unsigned long long)su.nstripes);
    if ((rc = agree(comm, rank, rc)) != 0) {
        free(done);
        return rc;
    }
    MPI_Bcast(done, (int)su.nstripes, MPI_BYTE, 0, comm);
    uint64_t *todo = malloc((su.nstripes + 1) * sizeof(uint64_t)), ntodo = 0;
    for (uint64_t i = 0; todo != NULL && i < su.nstripes; i++)
        if (!done[i])
            todo[ntodo++] = i;
    free(done);

    rank_job_t j = {.job = job,
                    .rank = rank,
                    .infd = -1,
                    .outfd = -1,
                    .jfd = -1,
                    .total = su.total,
                    .stripe_bytes = stripe};
    j.batch = job->batch_bytes ? job->batch_bytes : DEFAULT_BATCH;
    j.batch = j.batch < stripe ? j.batch : (size_t)stripe;
    j.me.rank = rank;
    pthread_mutex_init(&j.lock, NULL);
    pthread_cond_init(&j.cv, NULL);
    if (todo == NULL)
        set_err(&j, FERRY_ENOMEM, "the list of %llu stripes", (unsigned long long)su.nstripes);
    else
        rank_open(&j, jpath);
    /* a rank that could not open takes no stripe; the others run them all */
    int64_t *counter = NULL;
    MPI_Win win;
    MPI_Win_allocate(rank == 0 ? (MPI_Aint)sizeof(int64_t) : 0, (int)sizeof(int64_t), MPI_INFO_NULL,
                     comm, &counter, &win);
    if (rank == 0)
        *counter = 0;
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    if (j.rc == 0)
        take_stripes(&j, win, todo, ntodo);
    j.me.seconds = MPI_Wtime() - t0;
    MPI_Barrier(comm); /* nobody takes from the counter any more */
    MPI_Win_free(&win);
    rank_close(&j);
    free(todo);
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.lock);
    j.me.gbps = j.me.seconds > 0 ? (double)j.me.bytes / j.me.seconds / 1e9 : 0;

    ferry_mpi_rank_t *all = calloc((size_t)nranks, sizeof(*all));
    int failed_alloc = all == NULL, any_failed = 0;
    MPI_Allreduce(&failed_alloc, &any_failed, 1, MPI_INT, MPI_MAX, comm);
    if (!any_failed)
        MPI_Allgather(&j.me, (int)sizeof(j.me), MPI_BYTE, all, (int)sizeof(j.me), MPI_BYTE, comm);
    rc = agree(comm, rank, j.rc);
    if (any_failed) {
        free(all);
        return rc != 0 ? rc : fail(FERRY_ENOMEM, "the ranks' figures");
    }
    if (out != NULL) {
        ferry_mpi_result_free(out);
        *out = (ferry_mpi_result_t)FERRY_MPI_RESULT_INIT;
        out->nranks = (unsigned)nranks;
        out->ranks = all;
        out->bytes = su.total;
        out->stripes = su.nstripes;
        out->stripes_resumed = su.resumed;
        out->stripes_unfinished = su.unfinished;
        snprintf(out->unfinished, sizeof(out->unfinished), "%s", su.held);
        uint64_t bytes = 0;
        for (int r = 0; r < nranks; r++) {
            out->stripes_done += all[r].stripes;
            bytes += all[r].bytes;
            out->seconds = all[r].seconds > out->seconds ? all[r].seconds : out->seconds;
            if (all[r].device_seconds > out->device_seconds)
                out->device_seconds = all[r].device_seconds;
        }
        out->gbps = out->seconds > 0 ? (double)bytes / out->seconds / 1e9 : 0;
        out->device_gbps = out->device_seconds > 0 ? (double)bytes / out->device_seconds / 1e9 : 0;
    } else {
        free(all);
    }
    return rc;
}

int ferry_mpi_unfinished(const ferry_mpi_job_t *job, char *out, size_t len)
{
    if (out == NULL || len == 0)
        return fail(FERRY_EINVAL, "ferry_mpi_unfinished: NULL or empty buffer");
    out[0] = '\0';
    int rc = check_job(job);
    if (rc != 0)
        return rc;
    struct stat sb;
    if (stat(job->input, &sb) != 0)
        return fail(FERRY_EIO, "ferry_mpi_unfinished: the input %s: %s", job->input,
                    strerror(errno));
    char jpath[4096];
    if (job->journal != NULL)
        snprintf(jpath, sizeof(jpath), "%s", job->journal);
    else
        snprintf(jpath, sizeof(jpath), "%s.journal", job->output);
    uint64_t stripe = job->stripe_bytes ? job->stripe_bytes : DEFAULT_STRIPE;
    uint64_t total = (uint64_t)sb.st_size, n = (total + stripe - 1) / stripe;
    unsigned char *done = calloc(n + 1, 1);
    int *claimed = calloc(n + 1, sizeof(int));
    char why[768];
    ferry__journal_state_t js = {done, claimed, 0};
    if (done == NULL || claimed == NULL)
        rc = fail(FERRY_ENOMEM, "ferry_mpi_unfinished: %llu stripes", (unsigned long long)n);
    else if (ferry__journal_scan(jpath, stripe, total, n, &js, why, sizeof(why)) != 0)
        rc = fail(FERRY_EINVAL, "ferry_mpi_unfinished: %s", why);
    int count = 0;
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        count += !done[i] && claimed[i] >= 0;
    if (rc == 0)
        held_note(done, claimed, n, out, len);
    free(done);
    free(claimed);
    return rc != 0 ? rc : count;
}

void ferry_mpi_result_free(ferry_mpi_result_t *r)
{
    if (r == NULL)
        return;
    free(r->ranks);
    r->ranks = NULL;
    r->nranks = 0;
}
