/* A set's ops (ferry_pipeline_ops): each GPU's trace records with its pipeline's batch ids
 * mapped back to the set's batches, and the CPU device's parts as ops of their own. A GPU's
 * pipeline numbers the parts it is given from 0, so its map is an array indexed by that id,
 * filled when a part is submitted (set.c, submit_part) while the option trace is on. The CPU
 * device records no ops: the set keeps its parts, one compute op each, for as many chunks as
 * trace_chunks says (all with 0). */
#include <stdlib.h>
#include <string.h>

#include "pipeline/set.h"
#include "pipeline/set_internal.h"

/* Room for entry @at of device @i's map. Under the set's lock. */
static pset_map_t *map_slot(pset_dev_t *d, size_t at)
{
    if (at >= d->capmap) {
        size_t cap = d->capmap ? d->capmap : 64;
        while (cap <= at)
            cap *= 2;
        pset_map_t *m = realloc(d->map, cap * sizeof(*m));
        if (m == NULL)
            return NULL; /* the ops of later parts show unmapped: skipped */
        for (size_t k = d->capmap; k < cap; k++)
            m[k] = (pset_map_t){.id = UINT64_MAX};
        d->map = m;
        d->capmap = cap;
    }
    if (at >= d->nmap)
        d->nmap = at + 1;
    return &d->map[at];
}

void ferry__pset_map_part(struct ferry__pset *s, const pset_part_t *pt, uint64_t sub_id)
{
    pset_map_t *m = map_slot(&s->d[pt->dev], (size_t)sub_id);
    if (m != NULL)
        *m = (pset_map_t){.id = pt->b->id, .off = pt->off, .bytes = pt->bytes};
}

void ferry__pset_cpu_op(struct ferry__pset *s, const pset_part_t *pt, uint64_t start_ns,
                        uint64_t end_ns)
{
    uint32_t chunks = (uint32_t)((pt->bytes + s->chunk - 1) / s->chunk); /* the set's chunks */
    pset_dev_t *d = &s->d[pt->dev];
    uint64_t had = 0; /* bounded by trace_chunks when counted */
    for (size_t k = 0; s->trace_chunks > 0 && k < d->nmap; k++)
        had += d->map[k].chunks;
    if (s->trace_chunks > 0 && had >= s->trace_chunks)
        return;
    pset_map_t *m = map_slot(d, d->nmap);
    if (m != NULL)
        *m = (pset_map_t){.id = pt->b->id,
                          .off = pt->off,
                          .bytes = pt->bytes,
                          .chunks = chunks,
                          .start_ns = start_ns,
                          .end_ns = end_ns};
}

/* Device @i's copy of its map (the caller frees it), *@n its entries. */
static pset_map_t *map_copy(struct ferry__pset *s, unsigned i, size_t *n)
{
    pthread_mutex_lock(&s->lock);
    pset_dev_t *d = &s->d[i];
    *n = d->nmap;
    pset_map_t *c = malloc(d->nmap ? d->nmap * sizeof(*c) : 1);
    if (c != NULL && d->nmap)
        memcpy(c, d->map, d->nmap * sizeof(*c));
    pthread_mutex_unlock(&s->lock);
    return c;
}

/* The CPU device @i's parts as ops, each from its submission to its end, on its clock from
 * its first part. */
static void cpu_ops(const pset_map_t *m, size_t n, unsigned i, size_t chunk, ferry_op_fn fn,
                    void *arg)
{
    uint64_t t0 = UINT64_MAX;
    for (size_t k = 0; k < n; k++)
        t0 = m[k].start_ns < t0 ? m[k].start_ns : t0;
    for (size_t k = 0; k < n; k++) {
        ferry_op_record_t o = {.size = sizeof(o),
                               .batch = m[k].id,
                               .chunk = (uint32_t)(m[k].off / chunk),
                               .kind = FERRY_OP_COMPUTE,
                               .start_ns = m[k].start_ns - t0,
                               .end_ns = m[k].end_ns > m[k].start_ns ? m[k].end_ns - t0
                                                                     : m[k].start_ns - t0,
                               .bytes = m[k].bytes,
                               .chunks = m[k].chunks,
                               .device = i};
        fn(&o, arg);
    }
}

int ferry__pset_ops(struct ferry__pset *s, ferry_op_fn fn, void *arg)
{
    if (!s->trace)
        return ferry__error(FERRY_ESTATE, "ferry_pipeline_ops: tracing is off (set the trace "
                                          "option, FERRY_TRACE=1)");
    int rc = 0;
    for (unsigned i = 0; rc == 0 && i < s->n; i++) {
        size_t n = 0;
        pset_map_t *m = map_copy(s, i, &n);
        if (m == NULL)
            return ferry__error(FERRY_ENOMEM, "ferry_pipeline_ops: a copy of %zu parts", n);
        if (s->d[i].cpu != NULL) {
            cpu_ops(m, n, i, s->chunk, fn, arg);
            free(m);
            continue;
        }
        ferry__trace_part_t part;
        ferry__trace_rec_t *recs = NULL;
        rc = ferry__pipe_trace_snapshot(s->d[i].pl, &part, &recs);
        for (size_t k = 0; rc == 0 && k < part.n; k++) {
            if (recs[k].kind == 'a' || recs[k].batch >= n || m[recs[k].batch].id == UINT64_MAX)
                continue; /* instant events are not ops; a part not mapped yet */
            const pset_map_t *pm = &m[recs[k].batch];
            ferry_op_record_t o = ferry__trace_op_record(&recs[k], part.t0);
            o.batch = pm->id;
            o.chunk += (uint32_t)(pm->off / s->chunk);
            o.device = i;
            fn(&o, arg);
        }
        free(recs);
        free(m);
    }
    return rc;
}
