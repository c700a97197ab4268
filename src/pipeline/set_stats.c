/* A set pipeline's figures, per device and summed, its trace, and the device calls on any
 * pipeline (ferry_pipeline_devices, ferry_pipeline_device_stats). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/set.h"
#include "pipeline/set_internal.h"

/* The set's figures: its own batch counts; the devices' bytes, chunks and faults summed; time
 * the longest device's (the devices run side by side); rates over it. */
/* Device @i's own figures: its pipeline's, or the CPU device's. */
static void dev_stats(struct ferry__pset *s, unsigned i, ferry_pipeline_stats_t *out)
{
    if (s->d[i].cpu != NULL)
        ferry__cpudev_stats(s->d[i].cpu, out);
    else
        ferry_pipeline_stats(s->d[i].pl, out);
}

void ferry__pset_fill_stats(struct ferry__pset *s, ferry_pipeline_stats_t *out)
{
    ferry_pipeline_stats_t sum = FERRY_PIPELINE_STATS_INIT;
    unsigned base = 0; /* the plan (chunk, depth, streams): the first GPU's */
    while (base + 1 < s->n && s->d[base].pl == NULL)
        base++;
    for (unsigned k = 0; k < s->n; k++) {
        unsigned i = k == 0 ? base : k <= base ? k - 1 : k;
        ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
        dev_stats(s, i, &st);
        if (k == 0)
            sum = st;
        else {
#define SUMF(f) sum.f += st.f
            SUMF(chunks);
            SUMF(bytes_h2d);
            SUMF(bytes_d2h);
            SUMF(staged_bytes);
            SUMF(copied_out_bytes);
            SUMF(chunks_timed);
            SUMF(chunks_cpu);
            SUMF(failure_records);
            SUMF(deadlines_passed);
            SUMF(chunks_retried);
            SUMF(bw_alerts);
            SUMF(failure_log_errors);
            SUMF(chunks_moved);
#undef SUMF
            sum.gpu_lost |= st.gpu_lost;
            sum.gpu_hung |= st.gpu_hung;
            sum.host_pinned &= st.host_pinned;
            sum.slots_in_use += st.slots_in_use;
#define MAXF(f) sum.f = st.f > sum.f ? st.f : sum.f
            MAXF(elapsed_ns);
            MAXF(busy_h2d_ns);
            MAXF(busy_compute_ns);
            MAXF(busy_d2h_ns);
            MAXF(ladder_level);
#undef MAXF
        }
    }
    pthread_mutex_lock(&s->lock);
    sum.batches_submitted = s->submitted;
    sum.batches_done_gpu = s->done_gpu;
    sum.batches_done_cpu = s->done_cpu;
    sum.batches_failed = s->failed;
    sum.queue_full_waits = s->full_waits;
    sum.queue_full_eagain = s->full_eagain;
    sum.queue_depth = s->max_inflight;
    pthread_mutex_unlock(&s->lock);
    double el = (double)sum.elapsed_ns;
    sum.gbps_h2d = el > 0 ? (double)sum.bytes_h2d / el : 0;
    sum.gbps_d2h = el > 0 ? (double)sum.bytes_d2h / el : 0;
    sum.overlap =
        el > 0 ? (double)(sum.busy_h2d_ns + sum.busy_compute_ns + sum.busy_d2h_ns) / el : 0;
    *out = sum;
}

void ferry__pset_stats(struct ferry__pset *s, ferry_pipeline_stats_t *out)
{
    pthread_mutex_lock(&s->lock);
    bool fin = s->final_ready;
    if (fin)
        *out = s->final;
    pthread_mutex_unlock(&s->lock);
    if (!fin)
        ferry__pset_fill_stats(s, out);
}

unsigned ferry__pset_devices(const struct ferry__pset *s)
{
    return s->n;
}

int ferry__pset_device_stats(struct ferry__pset *s, unsigned i, ferry_pipeline_device_stats_t *out)
{
    if (i >= s->n)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_device_stats: device %u of a set of %u",
                            i, s->n);
    ferry_pipeline_device_stats_t o = FERRY_PIPELINE_DEVICE_STATS_INIT;
    dev_stats(s, i, &o.stats);
    pthread_mutex_lock(&s->lock);
    pset_dev_t *d = &s->d[i];
    uint64_t all = 0;
    for (unsigned j = 0; j < s->n; j++)
        all += s->d[j].bytes;
    o.index = d->index;
    snprintf(o.name, sizeof(o.name), "%s", d->name);
    o.bytes = d->bytes;
    o.parts = d->parts;
    o.parts_cpu = d->parts_cpu;
    o.share = all > 0 ? (double)d->bytes / (double)all : 0;
    o.model_gbps = ferry__pset_dev_rate(s, i, d->last_bytes); /* bytes per ns is GB/s */
    o.left = d->left;
    o.bytes_moved = d->bytes_moved;
    o.bytes_stolen = d->bytes_stolen;
    snprintf(o.why, sizeof(o.why), "%s", d->why);
    if (d->cpu != NULL && s->guard.note[0] != '\0')
        snprintf(o.note, sizeof(o.note), "%s", s->guard.note);
    else if (d->cpu != NULL && d->parts == 0 && d->probed >= s->chunk)
        snprintf(o.note, sizeof(o.note),
                 "took no work: at the %.2f GB/s its probe of %zu KiB ran, its share of a batch "
                 "beside the other devices would be under half a chunk",
                 ferry__pset_dev_rate(s, i, d->probed), d->probed >> 10);
    else if (d->cpu != NULL && d->parts == 0 && d->probed > 0) /* or the run ended first */
        snprintf(o.note, sizeof(o.note),
                 "took no work: its first probe (%zu KiB) ran at %.2f GB/s; it needs a share of "
                 "half a chunk, and a chunk's probe",
                 d->probed >> 10, ferry__pset_dev_rate(s, i, d->probed));
    else if (d->cpu != NULL && d->parts == 0)
        snprintf(o.note, sizeof(o.note),
                 "took no work: not measured yet (no probe of it has come "
                 "back)");
    pthread_mutex_unlock(&s->lock);
    ferry__sized_copy_out(out, &o, sizeof(o));
    return 0;
}

int ferry__pset_write_trace(struct ferry__pset *s, const char *path)
{
    ferry__trace_part_t parts[FERRY_MAX_DEVICE_SET];
    ferry__trace_rec_t *copies[FERRY_MAX_DEVICE_SET] = {0};
    int rc = 0;
    unsigned np = 0; /* the GPUs' (the CPU device records no ops) */
    for (unsigned i = 0; rc == 0 && i < s->n; i++)
        if (s->d[i].pl != NULL)
            rc = ferry__pipe_trace_snapshot(s->d[i].pl, &parts[np], &copies[np]), np++;
    if (rc == 0)
        rc = ferry__trace_write_json_parts(path, parts, np);
    for (unsigned i = 0; i < s->n; i++)
        free(copies[i]);
    return rc;
}

/* ---- the device calls on any pipeline ------------------------------------------------ */

unsigned ferry_pipeline_devices(ferry_pipeline_t *p)
{
    return p == NULL ? 0 : p->set != NULL ? ferry__pset_devices(p->set) : 1;
}

int ferry_pipeline_device_stats(ferry_pipeline_t *p, unsigned i, ferry_pipeline_device_stats_t *out)
{
    if (p == NULL || out == NULL || out->size < offsetof(ferry_pipeline_device_stats_t, stats))
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_device_stats: NULL argument or size "
                                          "not set (use FERRY_PIPELINE_DEVICE_STATS_INIT)");
    if (p->set != NULL)
        return ferry__pset_device_stats(p->set, i, out);
    if (i != 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_pipeline_device_stats: device %u of a pipeline "
                            "of one device",
                            i);
    ferry_pipeline_device_stats_t o = FERRY_PIPELINE_DEVICE_STATS_INIT;
    ferry_pipeline_stats(p, &o.stats);
    o.index = p->dev->props.index;
    snprintf(o.name, sizeof(o.name), "%s", p->dev->props.name);
    o.bytes = o.stats.bytes_h2d;
    o.parts = o.stats.batches_done_gpu + o.stats.batches_done_cpu;
    o.parts_cpu = o.stats.batches_done_cpu;
    o.share = 1.0;
    o.model_gbps = o.stats.gbps_h2d;
    o.left = o.stats.gpu_lost || o.stats.gpu_hung;
    ferry__sized_copy_out(out, &o, sizeof(o));
    return 0;
}
