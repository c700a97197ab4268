/* One job over the ranks of a communicator (include/ferry/mpi.h). Rank 0 checks the input,
 * makes the output at the input's size, and clears or reads the journal (journal.h); what it
 * found goes to every rank. The stripes left to run are a list every rank holds; a counter in a
 * window on rank 0, taken with MPI_Fetch_and_op, hands out the next index of that list, so a
 * rank takes a stripe whenever it has room for one and a slower rank takes fewer. A rank runs
 * its stripes as batches through its own pipeline, from NSLOTS buffers (pinned where the device
 * allows), over the parallel reader and writer of ferry/io.h: the calling thread starts a read
 * into every free buffer and submits each batch whose read finished; the pipeline's callback
 * starts the batch's write at its offset, and a writer thread collects the writes. A stripe
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
#include <time.h>
#include <unistd.h>

#include "ferry/io.h"
#include "ferry/mpi.h"
#include "mpi/journal.h"

#define DEFAULT_STRIPE (256ull << 20)
#define DEFAULT_BATCH  ((size_t)64 << 20)
#define NSLOTS         8
#define MAX_OPEN       2
#define MAX_CHECKERS   64

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

enum slot_state { SLOT_FREE, SLOT_READING, SLOT_RUNNING, SLOT_WRITING };

typedef struct slot {
    unsigned char *in, *out;
    bool pinned;
    enum slot_state state; /* the calling thread's alone */
    uint64_t stripe, off;
    size_t bytes;
    int status, where; /* the pipeline's result */
    int io_error;      /* the output's write failed (FERRY_EIO), or job.check refused the
                          batch (FERRY_EVERIFY); its words in why */
    char why[256];
} slot_t;

/* A stripe with batches not yet read, or read and not yet written. */
typedef struct open_stripe {
    uint64_t stripe;
    uint64_t next, end; /* the next byte to read, the stripe's end */
    unsigned left;      /* batches started (read) and not yet written (or failed) */
    bool failed;
} open_stripe_t;

typedef struct rank_job {
    const ferry_mpi_job_t *job;
    int rank, jfd;
    uint64_t total, stripe_bytes;
    size_t batch;
    ferry_device_t *dev; /* for ferry_host_alloc */
    ferry_pipeline_t *pl;
    ferry_file_t *src, *dst; /* the input and the output, many requests in flight */
    slot_t slots[NSLOTS];
    unsigned reads; /* reads in flight (the calling thread's) */
    pthread_mutex_t lock;
    pthread_cond_t cv;             /* a slot joined doneq */
    pthread_cond_t wcv;            /* a write started, or the writer is to stop */
    unsigned doneq[NSLOTS], ndone; /* under lock: slots written, or whose batch failed */
    unsigned writes;               /* under lock: writes started and not yet collected */
    bool writer_started, writer_stop;
    pthread_t writer;
    /* job.check: the batches to check (under lock), its threads */
    pthread_cond_t ccv;
    unsigned checkq[NSLOTS], ncheck, nchecker;
    bool check_stop;
    pthread_t checker[MAX_CHECKERS];
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

static void slot_finished(rank_job_t *j, unsigned i)
{
    pthread_mutex_lock(&j->lock);
    j->doneq[j->ndone++] = i;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->lock);
}

static bool has_check(const ferry_mpi_job_t *job)
{
    return job->size >= offsetof(ferry_mpi_job_t, check_threads) + sizeof(unsigned) &&
           job->check != NULL;
}

/* Start slot @i's write at its offset (which never blocks on the storage; the writer thread
 * collects it), or finish the slot with the error. */
static void start_write(rank_job_t *j, unsigned i)
{
    slot_t *sl = &j->slots[i];
    if (ferry_file_write_async(j->dst, sl->out, sl->bytes, sl->off, i) == 0) {
        pthread_mutex_lock(&j->lock);
        j->writes++;
        pthread_cond_signal(&j->wcv);
        pthread_mutex_unlock(&j->lock);
        return;
    }
    sl->io_error = FERRY_EIO;
    snprintf(sl->why, sizeof(sl->why), "%s", ferry_last_error());
    slot_finished(j, i);
}

/* The pipeline's callback: a batch that succeeded goes to the checkers (job.check) or straight
 * to its write; one that failed is finished. */
static void batch_done(const ferry_batch_result_t *r, void *arg)
{
    cb_arg_t *a = arg;
    rank_job_t *j = a->j;
    slot_t *sl = &j->slots[a->i];
    sl->status = r->status;
    sl->where = (int)r->where;
    sl->io_error = 0;
    if (r->status != 0) {
        slot_finished(j, a->i);
    } else if (j->nchecker > 0) {
        pthread_mutex_lock(&j->lock);
        j->checkq[j->ncheck++] = a->i;
        pthread_cond_signal(&j->ccv);
        pthread_mutex_unlock(&j->lock);
    } else {
        start_write(j, a->i);
    }
}

/* job.check's threads: a batch it passes is written, one it refuses finished as failed. */
static void *checker_main(void *arg)
{
    rank_job_t *j = arg;
    pthread_mutex_lock(&j->lock);
    for (;;) {
        while (j->ncheck == 0 && !j->check_stop)
            pthread_cond_wait(&j->ccv, &j->lock);
        if (j->ncheck == 0)
            break;
        unsigned i = j->checkq[--j->ncheck];
        pthread_mutex_unlock(&j->lock);
        slot_t *sl = &j->slots[i];
        sl->why[0] = '\0';
        int rc = j->job->check(sl->in, sl->out, sl->bytes, sl->off, sl->why, sizeof(sl->why),
                               j->job->arg);
        pthread_mutex_lock(&j->lock);
        if (rc == 0) {
            j->me.batches_checked++;
            j->me.bytes_checked += sl->bytes;
        } else if (rc != FERRY_MPI_CHECK_SKIPPED) {
            j->me.batches_check_failed++;
        }
        pthread_mutex_unlock(&j->lock);
        if (rc == 0 || rc == FERRY_MPI_CHECK_SKIPPED) {
            start_write(j, i);
        } else {
            sl->io_error = FERRY_EVERIFY;
            if (sl->why[0] == '\0')
                snprintf(sl->why, sizeof(sl->why), "the check returned %d", rc);
            slot_finished(j, i);
        }
        pthread_mutex_lock(&j->lock);
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* The output's writes, collected: each written slot is finished. */
static void *writer_main(void *arg)
{
    rank_job_t *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        while (j->writes == 0 && !j->writer_stop)
            pthread_cond_wait(&j->wcv, &j->lock);
        bool idle = j->writes == 0;
        pthread_mutex_unlock(&j->lock);
        if (idle)
            return NULL; /* stopped with nothing in flight */
        ferry_file_completion_t c;
        int w = ferry_file_wait(j->dst, &c, 100);
        if (w == FERRY_ETIMEDOUT)
            continue;
        if (w == FERRY_ESTATE) { /* counted before it was queued: look again shortly */
            nanosleep(&(struct timespec){0, 200000}, NULL);
            continue;
        }
        if (w != 0) {
            /* io_uring itself failed: the writes in flight cannot be collected, and their
             * slots never come back. Say so to the calling thread, which stops waiting. */
            pthread_mutex_lock(&j->lock);
            j->writes = 0;
            pthread_mutex_unlock(&j->lock);
            for (unsigned i = 0; i < NSLOTS; i++)
                if (j->slots[i].state == SLOT_WRITING) {
                    j->slots[i].io_error = FERRY_EIO;
                    snprintf(j->slots[i].why, sizeof(j->slots[i].why), "%s", ferry_last_error());
                    slot_finished(j, i);
                }
            return NULL;
        }
        slot_t *sl = &j->slots[c.tag];
        if (c.error != 0 || c.bytes != sl->bytes) {
            sl->io_error = FERRY_EIO;
            snprintf(sl->why, sizeof(sl->why), "%s", c.error ? ferry_last_error() : "short write");
        }
        pthread_mutex_lock(&j->lock);
        j->writes--;
        pthread_mutex_unlock(&j->lock);
        slot_finished(j, (unsigned)c.tag);
    }
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

static open_stripe_t *find_open(rank_job_t *j, uint64_t stripe)
{
    for (unsigned i = 0; i < j->nopen; i++)
        if (j->open[i].stripe == stripe)
            return &j->open[i];
    return NULL;
}

/* A batch of stripe @o is no longer in flight: when it was the stripe's last one and the whole
 * stripe was read, the stripe ends, synced and journaled as finished if all of it succeeded. */
static void batch_left(rank_job_t *j, open_stripe_t *o)
{
    if (--o->left > 0 || (o->next < o->end && !o->failed && j->rc == 0))
        return;
    uint64_t s = o->stripe;
    bool ok = !o->failed && o->next >= o->end;
    *o = j->open[--j->nopen];
    if (!ok)
        return;
    if (ferry_file_sync(j->dst) != 0) {
        set_err(j, FERRY_EIO, "syncing %s: %s", j->job->output, ferry_last_error());
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

/* Slot @i's batch was written, or failed: counted, the slot free again. */
static void slot_done(rank_job_t *j, unsigned i)
{
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
        if (sl->io_error == FERRY_EVERIFY) {
            o->failed = true;
            set_err(
                j, FERRY_EVERIFY, "the batch at %llu (stripe %llu, %zu bytes) failed its check: %s",
                (unsigned long long)sl->off, (unsigned long long)sl->stripe, sl->bytes, sl->why);
        } else if (sl->io_error != 0) {
            o->failed = true;
            set_err(j, FERRY_EIO, "writing %s at %llu: %s", j->job->output,
                    (unsigned long long)sl->off, sl->why);
        }
    }
    sl->state = SLOT_FREE;
    batch_left(j, o);
}

/* A read finished: its batch submitted to the pipeline, or the stripe failed. */
static void read_done(rank_job_t *j, const ferry_file_completion_t *c, cb_arg_t *cbs)
{
    slot_t *sl = &j->slots[c->tag];
    j->reads--;
    open_stripe_t *o = find_open(j, sl->stripe);
    if (c->error != 0 || c->bytes != sl->bytes) {
        set_err(j, FERRY_EIO, "reading %s at %llu: %s", j->job->input,
                (unsigned long long)(sl->off + c->bytes),
                c->error ? ferry_last_error() : "the file shrank under the job");
    } else if (j->rc == 0) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = sl->in;
        b.out = sl->out;
        b.bytes = sl->bytes;
        sl->state = SLOT_RUNNING; /* before the submit: the callback may come at once */
        int rc = ferry_pipeline_submit(j->pl, &b, batch_done, &cbs[c->tag], NULL);
        if (rc == 0)
            return;
        set_err(j, rc, "submitting a batch of stripe %llu: %s", (unsigned long long)sl->stripe,
                ferry_last_error());
    }
    o->failed = true;
    sl->state = SLOT_FREE;
    batch_left(j, o);
}

/* Claim the next stripe from the shared counter and open it. Returns false when none is left
 * (or the journal failed). */
static bool claim(rank_job_t *j, MPI_Win win, const uint64_t *todo, uint64_t ntodo)
{
    int64_t one = 1, got = 0;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Fetch_and_op(&one, &got, MPI_INT64_T, 0, 0, MPI_SUM, win);
    MPI_Win_unlock(0, win);
    if (got < 0 || (uint64_t)got >= ntodo)
        return false;
    uint64_t s = todo[got];
    if (ferry__journal_note(j->jfd, j->rank, s, j->stripe_bytes, j->total, false) != 0) {
        set_err(j, FERRY_EIO, "writing the journal: %s", strerror(errno));
        return false;
    }
    uint64_t from = s * j->stripe_bytes;
    uint64_t to = from + j->stripe_bytes < j->total ? from + j->stripe_bytes : j->total;
    j->open[j->nopen++] = (open_stripe_t){.stripe = s, .next = from, .end = to};
    return true;
}

/* Start reading the next batch of an open stripe into free slot @i. Returns whether it did. */
static bool start_read(rank_job_t *j, unsigned i)
{
    open_stripe_t *o = NULL;
    for (unsigned k = 0; k < j->nopen && o == NULL; k++)
        if (j->open[k].next < j->open[k].end && !j->open[k].failed)
            o = &j->open[k];
    if (o == NULL)
        return false;
    slot_t *sl = &j->slots[i];
    sl->stripe = o->stripe;
    sl->off = o->next;
    sl->bytes = o->end - o->next < j->batch ? (size_t)(o->end - o->next) : j->batch;
    if (ferry_file_read_async(j->src, sl->in, sl->bytes, sl->off, i) != 0) {
        o->failed = true;
        set_err(j, FERRY_EIO, "reading %s at %llu: %s", j->job->input, (unsigned long long)sl->off,
                ferry_last_error());
        if (o->left == 0)
            *o = j->open[--j->nopen];
        return false;
    }
    o->next += sl->bytes;
    o->left++;
    sl->state = SLOT_READING;
    j->reads++;
    return true;
}

/* Take stripes from the shared counter until none is left (or this rank failed): every free
 * slot reads the next batch of an open stripe (a rank holds at most MAX_OPEN stripes: the one
 * it reads while the last one's batches run, so that the stripes left go to whichever rank
 * frees up, not to one that claimed a queue of them); a finished read is submitted, a batch
 * that comes back is written by the callback and collected by the writer thread. */
static void take_stripes(rank_job_t *j, MPI_Win win, const uint64_t *todo, uint64_t ntodo)
{
    cb_arg_t cbs[NSLOTS];
    for (unsigned i = 0; i < NSLOTS; i++)
        cbs[i] = (cb_arg_t){j, i};
    bool more = true; /* the counter may still hand out stripes */
    for (;;) {
        pthread_mutex_lock(&j->lock);
        unsigned done[NSLOTS], n = j->ndone;
        memcpy(done, j->doneq, n * sizeof(unsigned));
        j->ndone = 0;
        pthread_mutex_unlock(&j->lock);
        for (unsigned k = 0; k < n; k++)
            slot_done(j, done[k]);
        unsigned busy = 0;
        for (unsigned i = 0; i < NSLOTS; i++) {
            slot_t *sl = &j->slots[i];
            while (sl->state == SLOT_FREE && j->rc == 0 && !start_read(j, i) && more &&
                   j->nopen < MAX_OPEN && j->rc == 0)
                more = claim(j, win, todo, ntodo);
            busy += sl->state != SLOT_FREE;
        }
        if (busy == 0 && (!more || j->rc != 0))
            break; /* what was in flight came back (and was written), even after an error */
        if (j->reads > 0) {
            ferry_file_completion_t c;
            int w = ferry_file_wait(j->src, &c, 1);
            if (w == 0)
                read_done(j, &c, cbs);
            else if (w != FERRY_ETIMEDOUT) { /* io_uring itself failed: the reads are lost */
                set_err(j, FERRY_EIO, "reading %s: %s", j->job->input, ferry_last_error());
                break;
            }
            continue;
        }
        pthread_mutex_lock(&j->lock);
        while (j->ndone == 0)
            pthread_cond_wait(&j->cv, &j->lock);
        pthread_mutex_unlock(&j->lock);
    }
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
    if (has_check(job) && job->check_threads > MAX_CHECKERS)
        return fail(FERRY_EINVAL, "ferry_mpi_run: check_threads %u (accepted: 0 to %d)",
                    job->check_threads, MAX_CHECKERS);
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

/* This rank's files, buffers, pipeline and writer thread. */
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
    /* the parallel reader and writer of `ferry run` (ferry_file_t): O_DIRECT where the file
     * system takes it, several requests in flight either way */
    if (ferry_file_open(j->job->input, FERRY_FILE_READ, NULL, &j->src) != 0)
        return set_err(j, FERRY_EIO, "cannot open the input: %s", ferry_last_error());
    if (ferry_file_open(j->job->output, FERRY_FILE_WRITE, NULL, &j->dst) != 0)
        return set_err(j, FERRY_EIO, "cannot open the output: %s", ferry_last_error());
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
    if ((rc = pthread_create(&j->writer, NULL, writer_main, j)) != 0)
        return set_err(j, FERRY_ENOMEM, "cannot start the output's writer: %s", strerror(rc));
    j->writer_started = true;
    unsigned nc = !has_check(j->job) ? 0 : j->job->check_threads == 0 ? 2 : j->job->check_threads;
    for (; j->nchecker < nc; j->nchecker++)
        if ((rc = pthread_create(&j->checker[j->nchecker], NULL, checker_main, j)) != 0)
            return set_err(j, FERRY_ENOMEM, "cannot start the batches' checkers: %s", strerror(rc));
    return 0;
}

static void rank_close(rank_job_t *j)
{
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    if (j->pl != NULL && ferry_pipeline_drain(j->pl) == 0 &&
        ferry_pipeline_stats(j->pl, &st) == 0) {
        j->me.device_seconds = (double)st.elapsed_ns / 1e9;
        j->me.device_gbps = st.elapsed_ns > 0 ? (double)j->me.bytes / (double)st.elapsed_ns : 0;
        j->me.faults = st.failure_records;
        j->me.chunks_retried = st.chunks_retried;
        j->me.chunks_cpu = st.chunks_cpu;
        j->me.ladder_level = st.ladder_level;
    }
    j->me.simulated = j->dev != NULL && ferry_device_is_simulated(j->dev);
    if (j->pl != NULL && has_hook(j->job))
        j->job->on_pipeline(j->pl, j->rank, 0, j->job->arg);
    if (j->pl != NULL && ferry_pipeline_destroy(j->pl) != 0)
        set_err(j, FERRY_EBACKEND, "closing the pipeline: %s", ferry_last_error());
    if (j->nchecker > 0) { /* every batch was checked: take_stripes waited for them */
        pthread_mutex_lock(&j->lock);
        j->check_stop = true;
        pthread_cond_broadcast(&j->ccv);
        pthread_mutex_unlock(&j->lock);
        for (unsigned i = 0; i < j->nchecker; i++)
            pthread_join(j->checker[i], NULL);
    }
    if (j->writer_started) { /* every write was collected: take_stripes waited for them */
        pthread_mutex_lock(&j->lock);
        j->writer_stop = true;
        pthread_cond_signal(&j->wcv);
        pthread_mutex_unlock(&j->lock);
        pthread_join(j->writer, NULL);
    }
    for (unsigned i = 0; i < NSLOTS; i++) {
        if (j->slots[i].in == NULL)
            continue;
        if (j->slots[i].pinned)
            ferry_host_free(j->dev, j->slots[i].in);
        else
            free(j->slots[i].in);
    }
    if (j->src != NULL)
        ferry_file_close(j->src);
    if (j->dst != NULL && ferry_file_close(j->dst) != 0)
        set_err(j, FERRY_EIO, "closing %s: %s", j->job->output, ferry_last_error());
    if (j->jfd >= 0)
        close(j->jfd);
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

    rank_job_t j = {.job = job, .rank = rank, .jfd = -1, .total = su.total, .stripe_bytes = stripe};
    j.batch = job->batch_bytes ? job->batch_bytes : DEFAULT_BATCH;
    j.batch = j.batch < stripe ? j.batch : (size_t)stripe;
    j.me.rank = rank;
    pthread_mutex_init(&j.lock, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_cond_init(&j.wcv, NULL);
    pthread_cond_init(&j.ccv, NULL);
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
    pthread_cond_destroy(&j.wcv);
    pthread_cond_destroy(&j.ccv);
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
