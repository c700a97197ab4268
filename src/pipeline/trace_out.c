/* What a pipeline hands out of its trace: the Chrome trace file (ferry_pipeline_write_trace;
 * a set's gathers its devices', set_stats.c), the ops as records (ferry_pipeline_ops; a
 * set's, set_ops.c), and a device's snapshot for a set's trace and ops. */
#include <stdlib.h>
#include <string.h>

#include "core/runtime.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/set.h"

/* Take @p's lock when it has a trace to give (tracing on, or records kept); else an error that
 * names @who, without the lock. */
static int lock_traced(ferry_pipeline_t *p, const char *who)
{
    pthread_mutex_lock(&p->lock);
    if (atomic_load_explicit(&p->sh.tracing, memory_order_relaxed) || p->api.trace.n != 0)
        return 0;
    pthread_mutex_unlock(&p->lock);
    return ferry__error(FERRY_ESTATE, "%s: tracing is off (set the trace option, FERRY_TRACE=1)",
                        who);
}

/* @p's layout, and a copy of its records (the caller frees *@copy), for a set's trace. */
int ferry__pipe_trace_snapshot(ferry_pipeline_t *p, ferry__trace_part_t *out,
                               ferry__trace_rec_t **copy)
{
    int rc = lock_traced(p, "ferry_pipeline_write_trace");
    if (rc != 0)
        return rc;
    size_t n = p->api.trace.n;
    *copy = malloc(n ? n * sizeof(**copy) : 1);
    if (*copy == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_write_trace: %zu records", n);
    }
    if (n)
        memcpy(*copy, p->api.trace.recs, n * sizeof(**copy));
    *out = (ferry__trace_part_t){.lay = {.backend = p->dev->ops->name,
                                         .device = p->dev->props.name,
                                         .simulated = p->dev->props.simulated,
                                         .single = p->plan.single,
                                         .ncopy = p->plan.ncopy,
                                         .ncomp = p->plan.ncomp,
                                         .nstreams = p->plan.nstreams,
                                         .stream_kind = p->stream_kind},
                                 .recs = *copy,
                                 .n = n,
                                 .t0 = p->comp.first_start,
                                 .index = p->dev->props.index};
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int ferry_pipeline_write_trace(ferry_pipeline_t *p, const char *path)
{
    if (p == NULL || path == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_write_trace: NULL argument");
    if (p->set != NULL)
        return ferry__pset_write_trace(p->set, path);
    if (p->remote != NULL)
        return ferry__error(FERRY_ESTATE, "ferry_pipeline_write_trace: tracing is off (a "
                                          "pipeline in a worker process records no ops yet)");
    /* written from a copy, so that the file is written without the lock */
    ferry__trace_part_t part;
    ferry__trace_rec_t *copy = NULL;
    int rc = ferry__pipe_trace_snapshot(p, &part, &copy);
    if (rc == 0)
        rc = ferry__trace_write_json(path, &part.lay, part.recs, part.n, part.t0);
    free(copy);
    return rc;
}

int ferry_pipeline_ops(ferry_pipeline_t *p, ferry_op_fn fn, void *arg)
{
    if (p == NULL || fn == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_ops: NULL argument");
    if (p->set != NULL)
        return ferry__pset_ops(p->set, fn, arg);
    if (p->remote != NULL)
        return ferry__error(FERRY_ESTATE, "ferry_pipeline_ops: tracing is off (a pipeline in a "
                                          "worker process records no ops yet)");
    int rc = lock_traced(p, "ferry_pipeline_ops");
    if (rc != 0)
        return rc;
    /* A snapshot, so that @fn runs without the lock the completion thread needs. */
    size_t n = p->api.trace.n;
    trace_rec_t *copy = malloc(n ? n * sizeof(*copy) : 1);
    if (copy == NULL) {
        pthread_mutex_unlock(&p->lock);
        return ferry__error(FERRY_ENOMEM, "ferry_pipeline_ops: out of memory for %zu records", n);
    }
    if (n)
        memcpy(copy, p->api.trace.recs, n * sizeof(*copy));
    uint64_t t0 = p->comp.first_start;
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++) {
        if (copy[i].kind == 'a')
            continue; /* instant events are not ops */
        ferry_op_record_t o = ferry__trace_op_record(&copy[i], t0);
        fn(&o, arg);
    }
    free(copy);
    return 0;
}
