/* `ferry run`'s regular files through ferry_file_t (run_files.h). The submitting thread keeps a
 * read in flight for every free ring entry and submits batches in the order their reads
 * complete; a thread of its own collects the output's writes and frees their entries. */
#include "run_files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ferry_file_config_t's defaults: requests in flight and their size */
#define FILE_DEPTH   16u
#define FILE_REQUEST (8u << 20)

size_t run_files_ring_extra(size_t batch_bytes)
{
    size_t bb = batch_bytes ? batch_bytes : 1;
    size_t k = ((size_t)FILE_DEPTH * FILE_REQUEST + bb - 1) / bb;
    return (k < FILE_DEPTH ? k : FILE_DEPTH) + 1;
}

/* Start reading batch @i into ring entry @idx. Returns whether it started (else printed). */
static bool start_read(run_feed_t *fd, size_t idx, unsigned long long i)
{
    ring_entry_t *re = &fd->st->ring[idx];
    re->offset = i * fd->bb;
    re->bytes = (size_t)(fd->total - re->offset < fd->bb ? fd->total - re->offset : fd->bb);
    re->seq = i;
    if (ferry_file_read_async(fd->src, re->in, re->bytes, re->offset, idx) == 0)
        return true;
    cli_fail(fd->cmd, "reading --input %s: %s", fd->name, ferry_last_error());
    return false;
}

static void give_back(run_state_t *st, size_t idx)
{
    pthread_mutex_lock(&st->lock);
    st->freeq[st->nfree++] = idx;
    pthread_cond_signal(&st->cv_free);
    pthread_mutex_unlock(&st->lock);
}

/* A read finished: submit its batch. Returns whether it did (else printed, entry freed). */
static bool on_read(run_feed_t *fd, const ferry_file_completion_t *c)
{
    ring_entry_t *re = &fd->st->ring[c->tag];
    if (c->error != 0 || c->bytes != re->bytes) {
        cli_fail(fd->cmd, "reading --input %s at %llu: %s", fd->name,
                 (unsigned long long)(re->offset + c->bytes),
                 c->error ? ferry_last_error() : "file shrank");
        give_back(fd->st, (size_t)c->tag);
        return false;
    }
    ferry_batch_t b = FERRY_BATCH_INIT;
    b.in = re->in;
    b.out = re->out;
    b.bytes = re->bytes;
    if (ferry_pipeline_submit(fd->pl, &b, run_on_done, &fd->cbs[c->tag], NULL) != 0) {
        cli_fail(fd->cmd, "submit: %s", ferry_last_error());
        give_back(fd->st, (size_t)c->tag);
        return false;
    }
    fd->nsub++;
    fd->nbytes += re->bytes;
    return true;
}

bool run_feed_file(run_feed_t *fd, cli_progress_t *bar)
{
    run_state_t *st = fd->st;
    unsigned long long next = 0, inflight = 0;
    bool failed = false, stop = false;
    for (;;) {
        pthread_mutex_lock(&st->lock);
        while (!stop && !failed && next < fd->nbatches && st->nfree > 0 && st->signal == 0) {
            size_t idx = st->freeq[--st->nfree];
            pthread_mutex_unlock(&st->lock);
            if (start_read(fd, idx, next)) {
                next++;
                inflight++;
            } else {
                failed = true;
                give_back(st, idx);
            }
            pthread_mutex_lock(&st->lock);
        }
        stop |= st->signal != 0;
        if (inflight == 0) {
            bool done = stop || failed || next >= fd->nbatches;
            if (!done) {
                /* no entry free, none being read: a wait while finished batches queue for a
                 * verifier is verification holding the run, one while the output's writes
                 * hold the entries is storage (run_report.c's bound) */
                run_wait_free(st);
            }
            pthread_mutex_unlock(&st->lock);
            if (done)
                break;
            continue;
        }
        uint64_t done_bytes = st->t.done_bytes;
        pthread_mutex_unlock(&st->lock);
        cli_progress_update(bar, done_bytes);
        /* bounded, so that a signal or newly freed entries are seen while reads are slow; the
         * time spent here is the run waiting for storage */
        ferry_file_completion_t c;
        uint64_t r0 = run_now_ns();
        int w = ferry_file_wait(fd->src, &c, 100);
        pthread_mutex_lock(&st->lock);
        st->read_ns += run_now_ns() - r0;
        pthread_mutex_unlock(&st->lock);
        if (w == FERRY_ETIMEDOUT)
            continue;
        if (w != 0) { /* io_uring itself failed: the reads in flight cannot be collected */
            cli_fail(fd->cmd, "reading --input %s: %s", fd->name, ferry_last_error());
            return false;
        }
        inflight--;
        if (stop || failed)
            give_back(st, (size_t)c.tag);
        else if (!on_read(fd, &c))
            failed = true;
    }
    return !failed;
}

/* The first error of the output, with its text (st->lock held). */
static void sink_error(run_state_t *st, int err, const char *why)
{
    if (st->t.io_error)
        return;
    st->t.io_error = err;
    snprintf(st->io_why, sizeof(st->io_why), "%s", why);
}

int run_sink_write(run_state_t *st, ring_entry_t *e)
{
    pthread_mutex_lock(&st->lock);
    st->writes++;
    pthread_mutex_unlock(&st->lock);
    int rc =
        ferry_file_write_async(st->sink, e->out, e->bytes, e->offset, (uint64_t)(e - st->ring));
    if (rc == 0)
        return 0;
    pthread_mutex_lock(&st->lock);
    st->writes--;
    sink_error(st, rc == FERRY_ENOMEM ? ENOMEM : EIO, ferry_last_error());
    pthread_mutex_unlock(&st->lock);
    return rc == FERRY_ENOMEM ? ENOMEM : EIO;
}

static void *sink_main(void *arg)
{
    run_state_t *st = arg;
    for (;;) {
        /* read before the wait: once set, every write has been started (the verifiers have
         * stopped), so a wait that then finds nothing in flight means all are done. A wait
         * that found nothing before the flag was set says nothing of writes started since. */
        pthread_mutex_lock(&st->lock);
        bool stopping = st->sink_stop;
        pthread_mutex_unlock(&st->lock);
        ferry_file_completion_t c;
        int w = ferry_file_wait(st->sink, &c, 100);
        if (w == 0) {
            pthread_mutex_lock(&st->lock);
            if (c.error != 0)
                sink_error(st, c.sys_errno ? c.sys_errno : EIO, ferry_last_error());
            st->writes--;
            st->freeq[st->nfree++] = (size_t)c.tag;
            pthread_cond_signal(&st->cv_free);
            pthread_mutex_unlock(&st->lock);
            continue;
        }
        if (w == FERRY_ETIMEDOUT)
            continue;
        if (w != FERRY_ESTATE) { /* io_uring itself failed: what is in flight is lost */
            pthread_mutex_lock(&st->lock);
            sink_error(st, EIO, ferry_last_error());
            pthread_mutex_unlock(&st->lock);
            return NULL;
        }
        if (stopping)
            return NULL;
        /* nothing in flight: the verifiers start writes without waking this thread, which
         * looks again in 1 ms (a write of a batch takes longer) */
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

int run_sink_start(const char *cmd, run_state_t *st, pthread_t *th)
{
    int e = pthread_create(th, NULL, sink_main, st);
    if (e != 0)
        return cli_fail(cmd, "cannot start the output's writer: %s", strerror(e));
    st->sink_started = true;
    return CLI_OK;
}

void run_sink_stop(run_state_t *st, pthread_t *th)
{
    if (st->sink_started) {
        pthread_mutex_lock(&st->lock);
        st->sink_stop = true;
        pthread_mutex_unlock(&st->lock);
        pthread_join(*th, NULL);
        st->sink_started = false;
    }
    if (st->sink != NULL && ferry_file_close(st->sink) != 0)
        sink_error(st, EIO, ferry_last_error()); /* the other threads have stopped */
    st->sink = NULL;
}
