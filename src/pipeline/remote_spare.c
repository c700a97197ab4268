/* The warm spare of a pipeline in a worker process (remote_internal.h, option worker_spare).
 * A new worker costs a process, a runtime, a CUDA context (230-345 ms on the H200 host) and
 * the pinning of every region it is sent (22-26 ms a GiB); a spare has done all that before it
 * is needed. A thread of its own starts it while the worker runs, then sends it the regions
 * the worker has (as far as its socket takes them without waiting: the rest go when it takes
 * over); replace() makes it the worker at once and starts the next spare. */
#include <signal.h>
#include <unistd.h>

#include "base/base.h"
#include "core/runtime.h"
#include "pipeline/remote.h"
#include "pipeline/remote_internal.h"

/* Send the spare every region that it does not have. Under wmu and mu. */
static void map_all(struct ferry__remote *r)
{
    const rm_worker_t *w = &r->spare;
    for (unsigned i = 0; i < r->nstg; i++) {
        rm_stage_t *s = r->stg[i];
        ferry__wk_msg_t m = {
            .kind = FERRY__WK_MAP, .seq = s->r.serial, .in = s->r.base, .bytes = s->r.bytes};
        if (s->spare_sent != w->gen + 1 && ferry__rm_send(w->ch, &m, s->r.fd) != 0)
            return; /* its socket is full: the rest when it takes over */
        s->spare_sent = w->gen + 1;
    }
    for (unsigned i = 0; i < RM_REGIONS; i++) {
        rm_region_t *g = &r->regions[i];
        ferry__wk_msg_t m = {
            .kind = FERRY__WK_MAP, .seq = g->serial, .in = g->base, .bytes = g->bytes};
        if (g->serial == 0 || g->spare_sent == w->gen + 1)
            continue;
        if (ferry__rm_send(w->ch, &m, g->fd) != 0)
            return;
        g->spare_sent = w->gen + 1;
    }
}

/* End a worker that is not r's: close its channel (it exits) and wait, SIGKILL past the
 * wait. */
static void end_worker(struct ferry__remote *r, rm_worker_t *w)
{
    int st = 0;
    ferry__rm_hangup(w->ch);
    w->ch = NULL;
    ferry__zyg_reap(r->rt->zyg, &w->proc, RM_EXIT_WAIT, &st);
}

static void *spare_main(void *arg)
{
    struct ferry__remote *r = arg;
    pthread_mutex_lock(&r->mu);
    uint32_t gen = ++r->next_gen;
    pthread_mutex_unlock(&r->mu);
    rm_worker_t w;
    int rc = ferry__rm_start(r, gen, &w);
    if (rc != 0)
        ferry_log(FERRY_LOG_WARN, "pipeline", "device %d: a spare worker did not start: %s",
                  r->dev->index, ferry_last_error());
    pthread_mutex_lock(&r->wmu);
    pthread_mutex_lock(&r->mu);
    bool keep = rc == 0 && r->want_spare && !r->retired;
    if (keep) {
        r->spare = w;
        r->spare_ready = true;
        map_all(r);
    }
    r->spare_busy = false;
    bool tail = rc == 0 && !keep; /* closed, or retired, meanwhile: it is ended below */
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->wmu);
    if (tail)
        end_worker(r, &w);
    /* detached: ferry__rm_spare_stop waits for this, and r may go right after, so the last
     * thing this thread does with r (wmu released before: it went with r once) */
    pthread_mutex_lock(&r->mu);
    r->spare_thread = false;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void ferry__rm_spare_start(struct ferry__remote *r)
{
    pthread_mutex_lock(&r->mu);
    bool go = r->want_spare && !r->spare_ready && !r->spare_busy && !r->spare_thread && !r->retired;
    if (go)
        r->spare_busy = r->spare_thread = true;
    pthread_mutex_unlock(&r->mu);
    if (!go)
        return;
    /* detached: a process that exits without closing its pipelines leaves no thread that
     * ended unjoined behind */
    pthread_t th; /* its own: the next spare may be started before this call returns */
    bool ok = pthread_create(&th, NULL, spare_main, r) == 0;
    if (ok)
        pthread_detach(th);
    if (!ok) {
        pthread_mutex_lock(&r->mu);
        r->spare_busy = r->spare_thread = false;
        pthread_mutex_unlock(&r->mu);
    }
}

bool ferry__rm_spare_take(struct ferry__remote *r)
{
    pthread_mutex_lock(&r->mu);
    bool ready = r->spare_ready;
    rm_worker_t w = r->spare;
    if (ready) { /* what was sent to it is what the worker now has */
        r->spare_ready = false;
        for (unsigned i = 0; i < r->nstg; i++)
            r->stg[i]->sent = r->stg[i]->spare_sent;
        for (unsigned i = 0; i < RM_REGIONS; i++)
            r->regions[i].sent = r->regions[i].spare_sent;
    }
    pthread_mutex_unlock(&r->mu);
    if (ready)
        ferry__rm_install(r, &w);
    return ready;
}

void ferry__rm_spare_stop(struct ferry__remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->want_spare = false;
    while (r->spare_thread)
        pthread_cond_wait(&r->cv, &r->mu);
    bool ready = r->spare_ready;
    rm_worker_t w = r->spare;
    r->spare_ready = false;
    pthread_mutex_unlock(&r->mu);
    if (ready)
        end_worker(r, &w);
}

pid_t ferry__remote_spare_pid(const ferry_pipeline_t *p)
{
    if (p == NULL || p->remote == NULL)
        return -1;
    pthread_mutex_lock(&p->remote->mu);
    pid_t pid = p->remote->spare_ready ? p->remote->spare.proc.pid : -1;
    pthread_mutex_unlock(&p->remote->mu);
    return pid;
}
