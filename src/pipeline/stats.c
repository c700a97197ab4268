/* A pipeline's figures: ferry_pipeline_stats, and the snapshot (ferry__pipe_fill_stats) that
 * close keeps as its final ones. A set's and a remote pipeline's are their own (set_stats.c,
 * remote.c); a gather's items replace its slabs in the batch counts (gather.c). */
#include <stddef.h>

#include "pipeline/gather.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/remote.h"
#include "pipeline/set.h"

int ferry_pipeline_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out)
{
    /* An older caller's struct, smaller than this library's, gets the fields it has: at least
     * its size and the first counter. */
    if (p == NULL || out == NULL ||
        out->size < offsetof(ferry_pipeline_stats_t, batches_submitted) + sizeof(uint64_t))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_stats: NULL argument or size not set "
                                          "(use FERRY_PIPELINE_STATS_INIT)");
    ferry_pipeline_stats_t full = FERRY_PIPELINE_STATS_INIT;
    if (p->set != NULL || p->remote != NULL) {
        if (p->set != NULL)
            ferry__pset_stats(p->set, &full);
        else
            ferry__remote_stats(p->remote, &full);
        ferry__sized_copy_out(out, &full, sizeof(full));
        return 0;
    }
    pthread_mutex_lock(&p->lock);
    if (p->api.final_ready)
        full = p->api.final; /* closed: the figures as of its close */
    else
        ferry__pipe_fill_stats(p, &full);
    pthread_mutex_unlock(&p->lock);
    if (p->gather != NULL)
        ferry__gather_stats(p->gather, &full);
    ferry__sized_copy_out(out, &full, sizeof(full));
    return 0;
}

/* The stats now. Under lock. */
void ferry__pipe_fill_stats(ferry_pipeline_t *p, ferry_pipeline_stats_t *out)
{
    *out = p->api.st;
    out->chunks = atomic_load_explicit(&p->sh.chunks_issued, memory_order_relaxed);
    out->staged_bytes = atomic_load_explicit(&p->sh.staged_bytes, memory_order_relaxed);
    out->batches_done_gpu = atomic_load_explicit(&p->sh.done_gpu, memory_order_relaxed);
    out->batches_done_cpu = atomic_load_explicit(&p->sh.done_cpu, memory_order_relaxed);
    out->chunks_cpu = p->api.chunks_cpu_seen +
                      atomic_load_explicit(&p->sh.chunks_cpu_direct, memory_order_relaxed);
    out->deadlines_passed = atomic_load_explicit(&p->wdog.deadlines_passed, memory_order_relaxed);
    ferry__watchdog_stats(p->wdog.wd, out);
    out->ladder_level = (unsigned)ferry__ladder_level(&p->ladder);
    out->bw_alerts = p->api.bw_alerts_seen;
    out->bw_ratio[0] = p->api.bw_ratio_seen[0];
    out->bw_ratio[1] = p->api.bw_ratio_seen[1];
    ferry__link_sample_t ls;
    ferry__linkmon_last(p->link, &ls);
    out->link_samples = ls.count;
    for (int d = 0; d < 2; d++) {
        out->link_bps[d] = ls.count ? ls.total[d] : -1;
        out->link_own_bps[d] = ls.count ? ls.own[d] : -1;
    }
    out->ladder_steps_down = p->api.steps_down_seen;
    out->ladder_steps_up = p->api.steps_up_seen;
    out->gpu_hung = atomic_load_explicit(&p->sh.hang_lost, memory_order_relaxed) != 0;
    out->failure_records = p->api.failure_records_seen;
    if (out->size > offsetof(ferry_pipeline_stats_t, chunks_retried))
        out->chunks_retried = p->api.chunks_retried_seen;
    out->failure_log_errors =
        atomic_load_explicit(&p->comp.flog.write_errors, memory_order_relaxed);
    out->chunks_moved = atomic_load_explicit(&p->sh.chunks_moved, memory_order_relaxed);
    out->gpu_lost = atomic_load_explicit(&p->sh.gpu_lost, memory_order_relaxed) != 0;
    out->batches_failed = atomic_load_explicit(&p->sh.failed, memory_order_relaxed);
    out->elapsed_ns =
        p->comp.last_end > p->comp.first_start ? p->comp.last_end - p->comp.first_start : 0;
    /* Sampled timing: the busy figures of the timed ops, scaled to all of them. */
    out->chunks_timed = p->comp.chunks_timed;
    out->host_pinned = p->host_pinned;
    out->connections = p->dev->connections;
    out->context_streams = p->context_streams;
    double scale =
        p->comp.chunks_timed ? (double)p->comp.chunks_retired / (double)p->comp.chunks_timed : 0;
    out->busy_h2d_ns = (uint64_t)((double)p->api.st.busy_h2d_ns * scale);
    out->busy_compute_ns = (uint64_t)((double)p->api.st.busy_compute_ns * scale);
    out->busy_d2h_ns = (uint64_t)((double)p->api.st.busy_d2h_ns * scale);
    /* Sampled, a union is of the sampled ops only, scaled up: an estimate, which cannot
     * exceed the time there was. */
    uint64_t *busy[3] = {&out->busy_h2d_ns, &out->busy_compute_ns, &out->busy_d2h_ns};
    for (int i = 0; i < 3; i++)
        if (*busy[i] > out->elapsed_ns)
            *busy[i] = out->elapsed_ns;
    double secs = (double)out->elapsed_ns / 1e9;
    out->gbps_h2d = secs > 0 ? (double)out->bytes_h2d / secs / 1e9 : 0;
    out->gbps_d2h = secs > 0 ? (double)out->bytes_d2h / secs / 1e9 : 0;
    out->overlap = out->elapsed_ns
                       ? (double)(out->busy_h2d_ns + out->busy_compute_ns + out->busy_d2h_ns) /
                             (double)out->elapsed_ns
                       : 0;
    out->streams = p->plan.nstreams;
    out->chunk_bytes = p->plan.chunk;
    out->copy_group = p->plan.group;
    out->depth = p->plan.depth;
    out->copy_streams = p->plan.ncopy;
    out->compute_streams = p->plan.ncomp;
    out->queue_depth = (unsigned)p->plan.queue_depth;
    /* A slot abandoned to a hung kernel is bound to no chunk any more. */
    out->slots_in_use = p->plan.depth - p->api.nfree_slots - p->api.nabandoned;
    for (unsigned i = 0; i < p->plan.nstreams; i++) {
        out->stream_kind[i] = p->stream_kind[i];
        out->stream_busy_ns[i] =
            p->comp.stream_timed[i]
                ? (uint64_t)((double)p->comp.stream_busy[i] * (double)p->comp.stream_ops[i] /
                             (double)p->comp.stream_timed[i])
                : 0;
    }
}
