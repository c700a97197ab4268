/* The fallback ladder's decisions and the failure records (ladder.h). */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "fault/ladder.h"

void ferry__ladder_step_down(ferry__ladder_t *l)
{
    l->healthy = 0;
    int lv = atomic_load_explicit(&l->level, memory_order_relaxed);
    if (lv >= LADDER_MAX)
        return;
    atomic_store_explicit(&l->level, lv + 1, memory_order_relaxed);
    l->steps_down++;
    ferry_log(FERRY_LOG_WARN, "pipeline", "ladder: down to level %d (%s)", lv + 1,
              lv + 1 == 1   ? "one compute stream"
              : lv + 1 == 2 ? "at most 2 chunks in flight"
                            : "synchronous: one stream, one chunk");
}

void ferry__ladder_healthy(ferry__ladder_t *l)
{
    if (++l->healthy >= LADDER_HEALTHY &&
        atomic_load_explicit(&l->level, memory_order_relaxed) > 0) {
        int lv = atomic_fetch_sub_explicit(&l->level, 1, memory_order_relaxed) - 1;
        l->healthy = 0;
        l->steps_up++;
        ferry_log(FERRY_LOG_INFO, "pipeline", "ladder: back up to level %d", lv);
    }
}

bool ferry__ladder_may_retry(const ferry__ladder_t *l, int err, uint32_t attempt, bool eligible)
{
    return err != FERRY_ESTICKY && err != FERRY_ETIMEDOUT && eligible && attempt < l->gpu_retries;
}

int ferry__failure_log_open(ferry__failure_log_t *fl, const char *path)
{
    if (path == NULL || path[0] == '\0')
        return 0;
    ferry__strlcpy(fl->path, path, sizeof(fl->path));
    fl->f = fopen(path, "a");
    if (fl->f == NULL)
        return ferry__error(FERRY_EIO, "option failure_log: cannot open '%s' for appending: %s",
                            path, strerror(errno));
    return 0;
}

void ferry__failure_log_close(ferry__failure_log_t *fl)
{
    if (fl->f != NULL)
        fclose(fl->f);
    fl->f = NULL;
}

/* A record's start: its time (UTC, microseconds). */
static void record_time(FILE *f)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(f, "{\"time\":\"%s.%06ldZ\",", when, ts.tv_nsec / 1000);
}

static void record_end(ferry__failure_log_t *fl);

void ferry__failure_log_worker(ferry__failure_log_t *fl, const ferry__worker_end_t *e)
{
    fl->records++;
    if (fl->f == NULL)
        return;
    FILE *f = fl->f;
    record_time(f);
    fprintf(f, "\"kind\":\"worker\",\"device\":%d,\"stage\":", e->device);
    ferry__json_str(f, e->stage);
    fprintf(f, ",\"pid\":%d,\"generation\":%u,", e->pid, e->generation);
    if (e->signal != 0)
        fprintf(f, "\"signal\":%d,\"exit_status\":null,", e->signal);
    else
        fprintf(f, "\"signal\":null,\"exit_status\":%d,", e->exit_status);
    fprintf(f, "\"cause\":");
    ferry__json_str(f, e->cause);
    fprintf(f, ",\"in_flight\":%u,\"oldest_batch\":", e->in_flight);
    if (e->oldest_batch == UINT64_MAX)
        fprintf(f, "null");
    else
        fprintf(f, "%llu", (unsigned long long)e->oldest_batch);
    fprintf(f, ",\"action\":\"%s\"}\n", e->action);
    record_end(fl);
}

void ferry__failure_log_write(ferry__failure_log_t *fl, const ferry__failure_rec_t *r)
{
    fl->records++;
    if (fl->f == NULL)
        return;
    FILE *f = fl->f;
    record_time(f);
    fprintf(f, "\"device_ns\":%llu,\"batch\":%llu,\"attempt\":%u,\"stage\":",
            (unsigned long long)r->device_ns, (unsigned long long)r->batch, r->attempt);
    ferry__json_str(f, r->stage);
    fprintf(f,
            ",\"chunk\":%u,\"chunks\":%u,\"offset\":%zu,\"bytes\":%zu,\"streams\":{\"h2d\":%u,"
            "\"compute\":%u,\"d2h\":%u},\"plan\":{\"copy_streams\":%u,\"compute_streams\":%u,"
            "\"depth\":%u,\"chunk_bytes\":%zu},\"launch\":{\"blocks\":%d},"
            "\"buffers\":{\"host_in\":\"%p\",\"out\":\"%p\",\"d_in\":\"%p\",\"d_out\":\"%p\"},"
            "\"issue_ns\":%llu,\"level\":%d,\"error\":\"%s\",\"message\":",
            r->chunk, r->chunks, r->offset, r->bytes, r->h2d, r->comp, r->d2h, r->copy_streams,
            r->compute_streams, r->depth, r->chunk_bytes, r->blocks, r->host_in, r->out, r->d_in,
            r->d_out, (unsigned long long)r->issue_ns, strcmp(r->action, "retry") == 0 ? 1 : 2,
            ferry_err_name(r->err));
    ferry__json_str(f, r->msg);
    fprintf(f, ",\"action\":\"%s\",\"gpu_lost\":%s}\n", r->action, r->gpu_lost ? "true" : "false");
    record_end(fl);
}

/* A record's end: flushed, one write (records of several processes appended to one file do not
 * interleave). One that cannot be written (a full disk, /dev/full) is counted in the stats and
 * said once: the caller decides whether the run failed. */
static void record_end(ferry__failure_log_t *fl)
{
    FILE *f = fl->f;
    errno = 0;
    if (fflush(f) != 0 || ferror(f)) {
        int werr = errno;
        clearerr(f);
        if (atomic_fetch_add_explicit(&fl->write_errors, 1, memory_order_relaxed) == 0)
            ferry_log(FERRY_LOG_WARN, "pipeline",
                      "failure_log '%s': cannot write a failure record: %s (later records may "
                      "be lost too)",
                      fl->path, werr ? strerror(werr) : "write error");
    }
}
