/* A pipeline in a worker process (remote.h, worker.h). The application's side keeps every batch
 * in flight, in submit order, until its worker reports it done: the batch's input is copied
 * into a staging area of shared memory (every region of it mapped in the worker at the same
 * address), the worker runs it on its device and writes the output there, and this side's
 * reader thread copies the output back and calls the callback, one at a time. When the worker
 * ends (it crashed, was killed, or said that its GPU path ended) the reader starts another from
 * the runtime's helper and sends it every batch still in flight, in order: a batch runs again
 * until one worker reports it, and is called back once (a report for a batch no longer in flight
 * is dropped). After RM_RESPAWNS workers in a row that did not start, the device is retired:
 * the reader runs what is in flight, and every later batch, on the stage's CPU function. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/config.h"
#include "core/host_mem.h"
#include "core/runtime.h"
#include "pipeline/remote.h"
#include "pipeline/remote_internal.h"

/* Send staging region @i to the worker if it has not mapped it. Under wmu. */
static int send_region(struct ferry__remote *r, unsigned i)
{
    rm_stage_t *s = r->stg[i];
    if (s->sent == r->generation + 1)
        return 0;
    ferry__wk_msg_t m = {
        .kind = FERRY__WK_MAP, .seq = s->r.serial, .in = s->r.base, .bytes = s->r.bytes};
    if (ferry__rm_send(r->ch, &m, s->r.fd) != 0)
        return -1;
    s->sent = r->generation + 1;
    return 0;
}

static int send_batch_now(struct ferry__remote *r, const rm_batch_t *b)
{
    if (b->fail != 0) {
        ferry__wk_msg_t f = {.kind = FERRY__WK_FAIL, .seq = b->seq, .status = b->fail};
        return ferry__rm_send(r->ch, &f, -1);
    }
    if (b->stg != RM_NO_STAGE
            ? send_region(r, b->stg) != 0
            : ferry__rm_send_shared(r, b->rin) != 0 || ferry__rm_send_shared(r, b->rout) != 0)
        return -1;
    ferry__wk_msg_t m = {.kind = FERRY__WK_SUBMIT,
                         .seq = b->seq,
                         .in = b->in_p,
                         .out = b->out_p,
                         .bytes = b->b.bytes,
                         .user = b->b.user};
    return ferry__rm_send(r->ch, &m, -1);
}

static int send_batch(struct ferry__remote *r, rm_batch_t *b)
{
    if (b->sent == r->generation + 1)
        return 0;
    int rc = send_batch_now(r, b);
    if (rc == 0)
        b->sent = r->generation + 1;
    return rc;
}

/* Send the batches staged and not sent to this worker yet, in order, as far as its channel takes
 * them (the rest go with the next flush: every report brings one); while one batch runs alone
 * (solo), nothing after it. Takes wmu and mu. */
static void flush(struct ferry__remote *r)
{
    pthread_mutex_lock(&r->wmu);
    pthread_mutex_lock(&r->mu);
    bool room = r->ch != NULL && !r->retired;
    for (int i = 0; room && i < RM_REGIONS; i++) /* blocks made since, mapped ahead of use */
        room = r->regions[i].serial == 0 || ferry__rm_send_shared(r, i) == 0;
    if (room)
        for (rm_batch_t *b = r->head; b != NULL && b->ready; b = r->solo ? NULL : b->next)
            if (send_batch(r, b) != 0)
                break; /* full, or the worker ended (replace() sends it all again) */
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->wmu);
}

/* ---- completions, and a worker's end ---------------------------------------------------- */

static uint64_t now_ns(void)
{
    return ferry__mono_ns();
}

/* Batch @b is done (@m: its report; NULL: the CPU ran it here, @status its result): output
 * back, callback, figures. On the reader thread, no lock held; @b is out of the list. */
static void finish(struct ferry__remote *r, rm_batch_t *b, const ferry__wk_msg_t *m, int status)
{
    if (m != NULL && r->solo) { /* the batch run alone is done: the others follow (flush) */
        pthread_mutex_lock(&r->wmu);
        pthread_mutex_lock(&r->mu);
        r->solo = false;
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->wmu);
    }
    ferry_batch_where_t where = m != NULL ? (ferry_batch_where_t)m->where : FERRY_DONE_CPU;
    status = m != NULL ? m->status : status;
    if (status != 0)
        where = FERRY_DONE_FAILED;
    if (status == 0 && b->stg != RM_NO_STAGE && b->b.out != NULL && b->b.bytes > 0)
        memcpy(b->b.out, b->out_p, b->b.bytes);
    uint64_t t = now_ns();
    ferry_batch_result_t res = {.id = b->seq,
                                .status = status,
                                .where = where,
                                .in = b->b.in,
                                .out = b->b.out,
                                .bytes = b->b.bytes,
                                .chunks = m != NULL ? m->chunks : 1,
                                /* the device's clock, as a pipeline reports it (the worker's;
                                 * this process's for the CPU here) */
                                .submit_ns = m != NULL ? m->submit_ns : b->submit_ns,
                                .done_ns = m != NULL ? m->done_ns : t};
    pthread_mutex_lock(&r->mu);
    if (b->stg != RM_NO_STAGE)
        r->stg[b->stg]->busy = false;
    else
        ferry__rm_regions_put(r, b);
    pthread_mutex_unlock(&r->mu);
    b->cb(&res, b->arg);
    pthread_mutex_lock(&r->mu);
    r->done_gpu += where == FERRY_DONE_GPU;
    r->done_cpu += where == FERRY_DONE_CPU;
    r->failed += where == FERRY_DONE_FAILED;
    r->bytes += status == 0 ? b->b.bytes : 0;
    r->last_ns = t;
    if (m != NULL) {
        r->now = *m;
        r->barren = 0;
    }
    if (r->recover_t0 != 0 && where == FERRY_DONE_GPU) { /* the first batch of a new worker */
        r->recovery_ns = t - r->recover_t0;
        r->recover_t0 = 0;
    }
    r->nfl--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    free(b);
}

/* Take batch @seq out of the list: it, or NULL when it is not in flight (a report of a batch
 * that an earlier worker also reported: dropped). */
static rm_batch_t *take(struct ferry__remote *r, uint64_t seq)
{
    pthread_mutex_lock(&r->mu);
    rm_batch_t **pp = &r->head, *prev = NULL;
    while (*pp != NULL && (*pp)->seq != seq) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    rm_batch_t *b = *pp;
    if (b != NULL) {
        *pp = b->next;
        if (r->tail == b)
            r->tail = prev;
    }
    pthread_mutex_unlock(&r->mu);
    return b;
}

/* Run @b's stage on the CPU here, chunk by chunk, into its staging output. */
static int run_on_cpu(struct ferry__remote *r, rm_batch_t *b)
{
    if (r->stage.cpu == NULL)
        return ferry__error(FERRY_ESTICKY,
                            "isolation=process: device %d retired and stage '%s' "
                            "has no CPU function",
                            r->dev->index, r->h->stage_name);
    for (size_t off = 0; off < b->b.bytes; off += RM_CPU_CHUNK) {
        size_t n = b->b.bytes - off < RM_CPU_CHUNK ? b->b.bytes - off : RM_CPU_CHUNK;
        ferry_kernel_args_t a = {.size = sizeof(a),
                                 .in = b->in_p + off,
                                 .out = b->out_p != NULL ? b->out_p + off : NULL,
                                 .bytes = n,
                                 .offset = off,
                                 .batch_id = b->seq,
                                 .chunk = (uint32_t)(off / RM_CPU_CHUNK),
                                 .batch_user = b->b.user};
        int rc = r->stage.cpu(&a, r->stage.user);
        if (rc != 0)
            return FERRY_EKERNEL;
    }
    return 0;
}

/* A worker ended: the oldest batch in flight, which a worker runs first, is counted against;
 * once it has been the oldest in RM_RESPAWNS workers that ended (a batch that ends every worker
 * it meets: a kernel that faults on its data) it comes out of the list, returned, to run on the
 * CPU instead. NULL otherwise. Under mu, with wmu. */
static rm_batch_t *poison_batch(struct ferry__remote *r)
{
    rm_batch_t *b = r->head;
    if (b == NULL || !b->ready || ++b->tries < RM_RESPAWNS)
        return NULL;
    r->head = b->next;
    if (r->tail == b)
        r->tail = NULL;
    b->next = NULL;
    return b;
}

/* The worker ended: replace it and send it everything in flight, or retire the device (after
 * RM_RESPAWNS workers in a row that did not start, or ended before they finished a batch). On
 * the reader thread. Returns RM_REPLACED, RM_RETIRED, or RM_CLOSED (the pipeline was closed:
 * no worker is needed). */
enum { RM_REPLACED, RM_RETIRED, RM_CLOSED };
static int replace(struct ferry__remote *r, const char *said)
{
    int st = 0;
    ferry__zyg_proc_t old = r->proc;
    ferry__zyg_reap(r->rt->zyg, &old, RM_EXIT_WAIT, &st);
    pthread_mutex_lock(&r->wmu);
    pthread_mutex_lock(&r->mu);
    ferry__rm_hangup(r->ch);
    r->ch = NULL;
    r->proc.pid = -1;
    ferry__worker_end_t end = {.device = r->dev->index,
                               .stage = r->h->stage_name,
                               .pid = (int)old.pid,
                               .generation = r->generation,
                               .exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                               .signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0,
                               .in_flight = r->nfl,
                               .oldest_batch = r->head != NULL ? r->head->seq : UINT64_MAX};
    if (r->closing && r->nfl == 0) { /* closed meanwhile, its CLOSE sent to the one that ended */
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->wmu);
        return RM_CLOSED;
    }
    r->ended.elapsed_ns += r->now.elapsed_ns;
    for (int k = 0; k < 3; k++)
        r->ended.busy_ns[k] += r->now.busy_ns[k];
    r->ended.chunks_all += r->now.chunks_all;
    r->ended.chunks_cpu += r->now.chunks_cpu;
    memset(&r->now, 0, sizeof(r->now));
    r->recover_t0 = now_ns();
    /* a batch found to end every worker runs on the CPU; workers that keep ending with none
     * finished, whatever their batches, retire the device */
    rm_batch_t *poison = poison_batch(r);
    bool barren = ++r->barren >= RM_BARREN;
    pthread_mutex_unlock(&r->mu);
    if (said == NULL && WIFEXITED(st) && WEXITSTATUS(st) == FERRY__WK_EXIT_STICKY)
        said = "a sticky error"; /* its LOST unread (worker.h) */
    else if (said == NULL && WIFEXITED(st) && WEXITSTATUS(st) == FERRY__WK_EXIT_HUNG)
        said = "a kernel hung";
    ferry_log(FERRY_LOG_WARN, "pipeline",
              "device %d: its worker (pid %d) ended (%s%s%s %d): starting another", r->dev->index,
              (int)old.pid, said != NULL ? said : "", said != NULL ? "; " : "",
              WIFSIGNALED(st) ? "signal" : "exit status",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    int rc = -1;
    bool spare = !barren && ferry__rm_spare_take(r);
    if (spare) { /* warm: its context made, its memory pinned */
        rc = 0;
        ferry_log(FERRY_LOG_INFO, "pipeline", "device %d: the spare worker (pid %d) took over",
                  r->dev->index, (int)r->proc.pid);
    }
    for (unsigned k = 0; !barren && k < RM_RESPAWNS && rc != 0; k++) {
        pthread_mutex_lock(&r->mu);
        uint32_t gen = ++r->next_gen;
        pthread_mutex_unlock(&r->mu);
        if ((rc = ferry__rm_spawn(r, gen)) != 0)
            ferry_log(FERRY_LOG_WARN, "pipeline", "device %d: a new worker did not start: %s",
                      r->dev->index, ferry_last_error());
    }
    if (rc == 0) {
        pthread_mutex_lock(&r->mu);
        r->restarts++;
        pthread_mutex_unlock(&r->mu);
        /* everything staged and in flight, in order (the list only grows meanwhile); but a
         * batch that was the oldest in flight in two workers that ended runs alone first: if
         * it ends this one too it is the cause (poison_batch), if not the others follow */
        pthread_mutex_lock(&r->mu);
        rm_batch_t *h = r->head;
        r->solo = h != NULL && h->ready && h->tries >= RM_RESPAWNS - 1;
        pthread_mutex_unlock(&r->mu);
    }
    if (rc != 0 && r->ch == NULL) {
        pthread_mutex_lock(&r->mu);
        r->retired = true;
        pthread_mutex_unlock(&r->mu);
        ferry_log(FERRY_LOG_ERROR, "pipeline",
                  "device %d: %u workers in a row %s: retired; its batches run on the CPU",
                  r->dev->index, barren ? RM_BARREN : RM_RESPAWNS,
                  barren ? "ended before they finished a batch" : "did not start");
    }
    pthread_mutex_lock(&r->mu); /* the failure record: who ended, how, and what was done */
    end.cause = said != NULL ? said : "";
    end.action = rc != 0 ? "retired" : spare ? "spare" : "new worker";
    ferry__failure_log_worker(&r->flog, &end);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->wmu);
    if (rc == 0)
        ferry__rm_spare_start(r); /* the next spare, in the background */
    flush(r);
    if (poison != NULL) { /* on the CPU here, called back like the others */
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "device %d: batch %llu was the oldest in flight in %u workers that ended: it "
                  "runs on the CPU",
                  r->dev->index, (unsigned long long)poison->seq, poison->tries);
        finish(r, poison, NULL, run_on_cpu(r, poison));
    }
    return r->retired ? RM_RETIRED : RM_REPLACED;
}

/* A retired device: run the batches in flight on the CPU, in order, as they come. */
static void run_retired(struct ferry__remote *r)
{
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while ((r->head == NULL || !r->head->ready) && !r->closing)
            pthread_cond_wait(&r->cv, &r->mu);
        rm_batch_t *b = r->head;
        if (b == NULL) {
            pthread_mutex_unlock(&r->mu);
            return;
        }
        pthread_mutex_unlock(&r->mu);
        take(r, b->seq);
        finish(r, b, NULL, run_on_cpu(r, b));
    }
}

/* The worker's next message: 0, or -1 at its end. A worker that sends nothing, its heartbeat
 * included, for option worker_deadline_ms while a batch it was sent is in flight, or while its
 * answer to CLOSE is owed (the pipeline closing), is hung (stopped, deadlocked, stuck on a
 * chunk): it is killed, and the read that follows ends. */
static int next_message(struct ferry__remote *r, ferry__wk_msg_t *m)
{
    for (;;) {
        int got = ferry__rm_recv(r->ch, m, r->deadline_ms > 0 ? (int)r->deadline_ms : -1);
        if (got != 0)
            return got > 0 ? 0 : -1;
        if (r->killed != NULL)
            continue; /* killed already: its end comes */
        pthread_mutex_lock(&r->mu);
        rm_batch_t *b = r->head;
        bool owed = b != NULL && b->sent == r->generation + 1;
        bool closing = r->closing; /* nothing in flight; CLOSE sent, or about to be */
        uint64_t seq = owed ? b->seq : 0;
        pthread_mutex_unlock(&r->mu);
        if (!owed && !closing)
            continue;
        if (owed)
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "device %d: its worker (pid %d) sent nothing for %u ms (option "
                      "worker_deadline_ms) with batch %llu in flight: killing it",
                      r->dev->index, (int)r->proc.pid, r->deadline_ms, (unsigned long long)seq);
        else
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "device %d: its worker (pid %d) sent nothing for %u ms (option "
                      "worker_deadline_ms) while the pipeline closes: killing it",
                      r->dev->index, (int)r->proc.pid, r->deadline_ms);
        r->killed = "hung past its deadline";
        ferry__zyg_kill(&r->proc, SIGKILL);
    }
}

/* The answer to ferry_pipeline_connections_measure: the worker's, or an error. */
static void measured(struct ferry__remote *r, int status, const ferry_conn_measure_t *m,
                     const char *text)
{
    pthread_mutex_lock(&r->mu);
    if (r->measuring && !r->measured) {
        r->meas_status = status;
        if (m != NULL)
            r->meas = *m;
        snprintf(r->meas_text, sizeof(r->meas_text), "%s", text);
        r->measured = true;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static void *reader_main(void *arg)
{
    struct ferry__remote *r = arg;
    ferry__pipe_own_thread = r->h;
    for (;;) {
        ferry__wk_msg_t m;
        int got = next_message(r, &m);
        if (got == 0 && m.kind == FERRY__WK_BEAT)
            continue;
        if (got == 0 && m.kind == FERRY__WK_MEASURED) {
            measured(r, m.status, &m.meas, m.text);
            continue;
        }
        if (got == 0 && m.kind == FERRY__WK_DONE) {
            rm_batch_t *b = take(r, m.seq);
            if (b != NULL)
                finish(r, b, &m, 0);
            flush(r); /* room in the worker's channel, or the batch run alone done */
            continue;
        }
        if (got == 0 && m.kind == FERRY__WK_STATS) { /* the answer to CLOSE: it exits */
            pthread_mutex_lock(&r->mu);
            r->wstats = m.stats;
            pthread_mutex_unlock(&r->mu);
            int st; /* stopped, or slow to exit, it is killed: its pidfd never outlives it */
            ferry__zyg_reap(r->rt->zyg, &r->proc, RM_EXIT_WAIT, &st);
            break;
        }
        pthread_mutex_lock(&r->mu);
        bool done = r->closing && r->nfl == 0;
        pthread_mutex_unlock(&r->mu);
        if (done) { /* it ended (or was killed) while closing: reaped, its pidfd closed */
            int st;
            ferry__zyg_reap(r->rt->zyg, &r->proc, RM_EXIT_WAIT, &st);
            break;
        }
        measured(r, FERRY_EBACKEND, NULL, "the worker ended during the measurement");
        int how = replace(r, got == 0 && m.kind == FERRY__WK_LOST ? m.text : r->killed);
        r->killed = NULL;
        if (how == RM_RETIRED)
            run_retired(r);
        if (how != RM_REPLACED)
            break;
    }
    pthread_mutex_lock(&r->mu);
    r->reader_done = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- the calls ---------------------------------------------------------------------------- */

static void remote_free(struct ferry__remote *r)
{
    for (unsigned i = 0; r->stg != NULL && i < r->nstg; i++) {
        ferry__shm_destroy(&r->stg[i]->r);
        free(r->stg[i]);
    }
    free(r->stg);
    for (unsigned i = 0; i < RM_REGIONS; i++)
        if (r->regions[i].serial != 0)
            close(r->regions[i].fd);
    free(r->opts);
    free(r->inj);
    ferry__failure_log_close(&r->flog);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->wmu);
    free(r->h);
    free(r);
}

static void child_share(ferry__rt_child_t *c, void *base, size_t bytes, uint64_t serial)
{
    ferry_pipeline_t *h = (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
    ferry__rm_share(h->remote, base, bytes, serial);
}

static bool child_is_live(ferry__rt_child_t *c, char *name, size_t len)
{
    ferry_pipeline_t *h = (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
    snprintf(name, len, "'%s' #%u (in a worker process)", h->stage_name, h->serial);
    pthread_mutex_lock(&h->remote->mu);
    bool live = !h->remote->released;
    pthread_mutex_unlock(&h->remote->mu);
    return live;
}

static void child_destroy(ferry__rt_child_t *c)
{
    ferry_pipeline_t *h = (ferry_pipeline_t *)((char *)c - offsetof(ferry_pipeline_t, child));
    remote_free(h->remote);
}

int ferry__remote_create(const ferry_pipeline_config_t *cfg, ferry_pipeline_t **out)
{
    ferry_device_t *dev = cfg->device;
    ferry_runtime_t *rt = dev->rt;
    if (ferry__opt_i64(rt->opts, FERRY__OPT_trace) != 0)
        return ferry__error(FERRY_ENOTSUP, "isolation=process: option trace is not offered in "
                                           "worker processes yet (isolation=thread has it)");
    struct ferry__remote *r = calloc(1, sizeof(*r));
    ferry_pipeline_t *h = aligned_alloc(FERRY__CACHE_LINE, sizeof(*h));
    if (r == NULL || h == NULL) {
        free(r);
        free(h);
        return ferry__error(FERRY_ENOMEM, "pipeline: out of memory");
    }
    memset(h, 0, sizeof(*h));
    static _Atomic unsigned serials;
    h->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
    h->dev = dev;
    h->remote = r;
    ferry__strlcpy(h->stage_name, cfg->stage->name ? cfg->stage->name : "stage",
                   sizeof(h->stage_name));
    r->h = h;
    r->rt = rt;
    r->dev = dev;
    r->stage = *cfg->stage;
    r->stage.name = h->stage_name;
    r->proc.pid = -1;
    r->proc.pidfd = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->wmu, NULL);
    pthread_cond_init(&r->cv, NULL);
    unsigned q = cfg->queue_depth ? cfg->queue_depth
                                  : (unsigned)ferry__opt_i64(rt->opts, FERRY__OPT_queue_depth);
    r->limit = q > 0 ? q : 16;
    r->deadline_ms = (unsigned)ferry__opt_i64(rt->opts, FERRY__OPT_worker_deadline_ms);
    int nb = cfg->nonblocking >= 0 && cfg->nonblocking != FERRY_UNSET
                 ? cfg->nonblocking
                 : (int)ferry__opt_i64(rt->opts, FERRY__OPT_nonblocking);
    r->nonblocking = nb == 1;
    size_t ch = cfg->chunk_bytes ? cfg->chunk_bytes
                                 : (size_t)ferry__opt_i64(rt->opts, FERRY__OPT_chunk_bytes);
    r->chunk = ch > 0 ? ch : RM_CPU_CHUNK;
    r->capstg = 4 * r->limit;
    r->stg = calloc(r->capstg, sizeof(*r->stg));
    int rc = r->stg == NULL ? ferry__error(FERRY_ENOMEM, "pipeline: out of memory")
                            : ferry__rm_make_hello(r, cfg);
    if (rc == 0)
        rc = ferry__failure_log_open(&r->flog, ferry__opt_str(rt->opts, FERRY__OPT_failure_log));
    if (rc == 0)
        rc = ferry__rm_spawn(r, 0);
    r->want_spare = ferry__opt_i64(rt->opts, FERRY__OPT_worker_spare) != 0;
    if (rc == 0) /* the blocks made before it, mapped (pinned) by its worker ahead of use */
        ferry__host_shared_each(&rt->arena, ferry__rm_share_existing, r);
    if (rc == 0)
        ferry__rm_spare_start(r); /* before the reader: only the reader starts the next ones */
    if (rc == 0 &&
        ferry__thread_start(&r->reader, &r->reader_started, reader_main, r, "ferry-remote") != 0)
        rc = ferry__error(FERRY_ENOMEM, "pipeline: cannot start the worker's reader thread");
    if (rc != 0) {
        ferry__rm_spare_stop(r);
        if (r->ch != NULL) {
            ferry__rm_hangup(r->ch); /* the worker reads the end of its channel and exits */
            r->ch = NULL;
            int st;
            ferry__zyg_reap(rt->zyg, &r->proc, RM_EXIT_WAIT, &st);
        }
        remote_free(r);
        return rc;
    }
    h->child.is_live = child_is_live;
    h->child.destroy = child_destroy;
    h->child.on_share = child_share;
    ferry__rt_child_add(rt, &h->child);
    *out = h;
    return 0;
}

/* A staging region of at least @bytes not in use: reused, or made (a power of two). Under mu;
 * returns its index, or -1 with the error set. */
static int stage_get(struct ferry__remote *r, size_t bytes)
{
    int best = -1, spare = -1;
    for (unsigned i = 0; i < r->nstg; i++) {
        rm_stage_t *s = r->stg[i];
        if (s->busy)
            continue;
        spare = (int)i;
        if (s->r.bytes >= bytes && (best < 0 || s->r.bytes < r->stg[best]->r.bytes))
            best = (int)i;
    }
    if (best >= 0) {
        r->stg[best]->busy = true;
        return best;
    }
    size_t want = RM_STAGE_MIN;
    while (want < bytes && want < SIZE_MAX / 2)
        want *= 2;
    int i = r->nstg < r->capstg ? (int)r->nstg : spare; /* full: a free one too small goes */
    if (i < 0)
        return ferry__error(FERRY_ENOMEM, "isolation=process: no staging region free");
    rm_stage_t *s = (unsigned)i < r->nstg ? r->stg[i] : calloc(1, sizeof(*s));
    if (s == NULL)
        return ferry__error(FERRY_ENOMEM, "isolation=process: out of memory");
    if ((unsigned)i < r->nstg)
        ferry__shm_destroy(&s->r); /* the worker's mapping is replaced when it is sent again */
    int rc = ferry__shm_create(&r->rt->arena, want, "staging", &s->r);
    if (rc != 0) {
        if ((unsigned)i == r->nstg)
            free(s);
        else
            s->sent = s->spare_sent = 0;
        return rc;
    }
    s->busy = true;
    s->sent = s->spare_sent = 0;
    if ((unsigned)i == r->nstg)
        r->stg[r->nstg++] = s;
    return i;
}

/* Where @b runs from: its own memory when that is ferry_host_alloc memory, shared with the
 * worker (@in_g, @out_g: its regions; NULL: not shared), else a staging region of at least
 * twice its size (input, then output). Under mu; 0, or the error. */
static int place(struct ferry__remote *r, rm_batch_t *b, const ferry__host_shared_t *in_g,
                 const ferry__host_shared_t *out_g)
{
    b->rin = b->rout = -1;
    if (in_g != NULL && (b->rin = ferry__rm_region_get(r, in_g)) >= 0 &&
        (out_g == NULL || (b->rout = ferry__rm_region_get(r, out_g)) >= 0)) {
        b->stg = RM_NO_STAGE;
        b->in_p = (unsigned char *)b->b.in;
        b->out_p = b->b.out;
        return 0;
    }
    ferry__rm_regions_put(r, b);
    b->rin = b->rout = -1;
    int si = stage_get(r, 2 * (b->b.bytes > 0 ? b->b.bytes : 1));
    if (si < 0)
        return si;
    b->stg = (unsigned)si;
    b->in_p = r->stg[si]->r.base;
    b->out_p = b->b.out != NULL ? b->in_p + b->b.bytes : NULL;
    r->staged++;
    return 0;
}

int ferry__remote_submit(struct ferry__remote *r, const ferry_batch_t *batch, ferry_done_fn cb,
                         void *arg, uint64_t *id)
{
    ferry_batch_t in;
    int rc = ferry__config_import(&in, sizeof(in), batch, &ferry__cfg_batch, NULL);
    if (rc != 0)
        return rc;
    if (cb == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_submit: NULL callback");
    if (in.bytes > 0 && (in.in == NULL) == (in.prepare == NULL))
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_submit: a batch of %zu bytes needs exactly one of in "
                            "and prepare",
                            in.bytes);
    bool own = on_own_thread(r->h);
    /* ferry_host_alloc memory is shared with the worker: it reads and writes it there; but a
     * batch whose output overlaps its input is staged (run again after a worker's end, it
     * would read what the first run wrote) */
    ferry__host_shared_t g[2];
    uintptr_t i0 = (uintptr_t)in.in, o0 = (uintptr_t)in.out;
    bool apart = in.out == NULL || o0 >= i0 + in.bytes || i0 >= o0 + in.bytes;
    bool shared = in.in != NULL && in.bytes > 0 && apart &&
                  ferry__host_shared(in.in, in.bytes, &r->rt->arena, &g[0]) &&
                  (in.out == NULL || ferry__host_shared(in.out, in.bytes, &r->rt->arena, &g[1]));
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->shut) {
            pthread_mutex_unlock(&r->mu);
            return ferry__error(FERRY_ECLOSED, "ferry_pipeline_submit: pipeline '%s' #%u is closed",
                                r->h->stage_name, r->h->serial);
        }
        if (r->nfl < r->limit)
            break;
        if (r->nonblocking || own) {
            pthread_mutex_unlock(&r->mu);
            return ferry__error(own && !r->nonblocking ? FERRY_EBUSY : FERRY_EAGAIN,
                                "ferry_pipeline_submit: %u batches in flight, the queue depth%s",
                                r->limit, own ? " (from its own callback: cannot wait)" : "");
        }
        pthread_cond_wait(&r->cv, &r->mu);
    }
    rm_batch_t *b = calloc(1, sizeof(*b));
    if (b != NULL)
        *b = (rm_batch_t){.seq = r->next_seq, .b = in, .cb = cb, .arg = arg};
    int prc = b != NULL ? place(r, b, shared ? &g[0] : NULL, shared && in.out ? &g[1] : NULL)
                        : ferry__error(FERRY_ENOMEM, "ferry_pipeline_submit: out of memory");
    if (prc != 0) {
        pthread_mutex_unlock(&r->mu);
        free(b);
        return prc;
    }
    r->next_seq++;
    b->submit_ns = now_ns();
    if (r->first_ns == 0)
        r->first_ns = b->submit_ns;
    if (r->tail != NULL)
        r->tail->next = b;
    else
        r->head = b;
    r->tail = b;
    r->nfl++;
    r->entering++;
    r->submitted++;
    unsigned char *base = b->in_p;
    bool staged = b->stg != RM_NO_STAGE;
    pthread_mutex_unlock(&r->mu);
    if (staged && in.in != NULL && in.bytes > 0)
        memcpy(base, in.in, in.bytes);
    for (size_t off = 0; in.in == NULL && off < in.bytes && b->fail == 0; off += r->chunk) {
        size_t n = in.bytes - off < r->chunk ? in.bytes - off : r->chunk;
        int rc2 = in.prepare(base + off, n, off, in.prepare_arg);
        b->fail = rc2 == 0 ? 0 : rc2 < 0 ? rc2 : FERRY_EKERNEL;
    }
    uint64_t seq = b->seq;
    pthread_mutex_lock(&r->mu);
    b->ready = true;
    pthread_cond_broadcast(&r->cv); /* a retired device's reader runs it */
    pthread_mutex_unlock(&r->mu);
    flush(r); /* a worker that ended gets it from replace() */
    pthread_mutex_lock(&r->mu);
    r->entering--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (id != NULL)
        *id = seq;
    return 0;
}

static int refuse_own(const struct ferry__remote *r, const char *fn)
{
    return ferry__error(FERRY_EBUSY,
                        "%s: called from a callback of pipeline '%s' #%u, which would wait for "
                        "itself; call it from another thread",
                        fn, r->h->stage_name, r->h->serial);
}

int ferry__remote_drain(struct ferry__remote *r)
{
    if (on_own_thread(r->h))
        return refuse_own(r, "ferry_pipeline_drain");
    pthread_mutex_lock(&r->mu);
    while ((r->nfl > 0 || r->entering > 0) && !r->reader_done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int ferry__remote_close(struct ferry__remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->shut = true;
    pthread_cond_broadcast(&r->cv);
    if (r->released) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    if (on_own_thread(r->h)) {
        pthread_mutex_unlock(&r->mu);
        return refuse_own(r, "ferry_pipeline_close");
    }
    if (r->nfl > 0 || r->entering > 0) {
        unsigned n = r->nfl;
        pthread_mutex_unlock(&r->mu);
        return ferry__error(FERRY_EBUSY,
                            "ferry_pipeline_close: pipeline '%s' #%u is shut to new batches, but "
                            "%u batch(es) are still in flight; drain, then close again",
                            r->h->stage_name, r->h->serial, n);
    }
    r->closing = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&r->wmu);
    if (r->ch != NULL) {
        ferry__wk_msg_t m = {.kind = FERRY__WK_CLOSE}; /* nothing in flight: room, or an end */
        (void)ferry__chan_send(r->ch, &m, sizeof(m), -1, 0);
    }
    pthread_mutex_unlock(&r->wmu);
    if (r->reader_started)
        pthread_join(r->reader, NULL);
    r->reader_started = false;
    ferry__rm_spare_stop(r);
    ferry__rm_hangup(r->ch);
    r->ch = NULL;
    pthread_mutex_lock(&r->mu);
    r->released = true;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int ferry__remote_destroy(struct ferry__remote *r)
{
    if (on_own_thread(r->h)) {
        pthread_mutex_lock(&r->mu);
        r->shut = true;
        pthread_mutex_unlock(&r->mu);
        return refuse_own(r, "ferry_pipeline_destroy");
    }
    while (ferry__remote_close(r) == FERRY_EBUSY)
        ferry__remote_drain(r);
    ferry__rt_child_remove(r->rt, &r->h->child);
    remote_free(r);
    return 0;
}

void ferry__remote_stats(struct ferry__remote *r, ferry_pipeline_stats_t *out)
{
    pthread_mutex_lock(&r->mu);
    /* the worker's own as it started (its plan), or as it closed */
    ferry_pipeline_stats_t s = r->wstats;
    s.size = sizeof(s);
    s.batches_submitted = r->submitted;
    s.batches_done_gpu = r->done_gpu;
    s.batches_done_cpu = r->done_cpu;
    s.batches_failed = r->failed;
    s.bytes_h2d = s.bytes_d2h = r->bytes;
    /* on the device's clock, as a pipeline in this process reports it (the simulator's is
     * virtual); the workers' summed when one was replaced */
    s.elapsed_ns = r->ended.elapsed_ns + r->now.elapsed_ns;
    s.busy_h2d_ns = r->ended.busy_ns[0] + r->now.busy_ns[0];
    s.busy_compute_ns = r->ended.busy_ns[1] + r->now.busy_ns[1];
    s.busy_d2h_ns = r->ended.busy_ns[2] + r->now.busy_ns[2];
    s.chunks = r->ended.chunks_all + r->now.chunks_all;
    s.chunks_cpu = r->ended.chunks_cpu + r->now.chunks_cpu;
    s.gpu_lost = r->retired;
    s.worker_restarts = r->restarts;
    s.worker_recovery_ns = r->recovery_ns;
    s.failure_records += r->flog.records; /* the workers' ends, beside the last one's chunks */
    s.failure_log_errors += atomic_load_explicit(&r->flog.write_errors, memory_order_relaxed);
    pthread_mutex_unlock(&r->mu);
    double el = (double)s.elapsed_ns;
    s.gbps_h2d = s.gbps_d2h = el > 0 ? (double)s.bytes_h2d / el : 0;
    s.overlap = el > 0 ? (double)(s.busy_h2d_ns + s.busy_compute_ns + s.busy_d2h_ns) / el : 0;
    *out = s;
}

pid_t ferry__remote_worker_pid(const ferry_pipeline_t *p)
{
    if (p == NULL || p->remote == NULL)
        return -1;
    pthread_mutex_lock(&p->remote->mu);
    pid_t pid = p->remote->proc.pid;
    pthread_mutex_unlock(&p->remote->mu);
    return pid;
}

uint64_t ferry__remote_staged(const ferry_pipeline_t *p)
{
    if (p == NULL || p->remote == NULL)
        return 0;
    pthread_mutex_lock(&p->remote->mu);
    uint64_t n = p->remote->staged;
    pthread_mutex_unlock(&p->remote->mu);
    return n;
}
