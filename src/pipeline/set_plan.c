/* How a set cuts a batch: each device's rate (the performance model, or a prior from its
 * link), the CPU device's probe, and the parts, contiguous and whole chunks, sized by water
 * filling so that the devices are expected to finish together (set.c says more). */
#include <stdlib.h>
#include <string.h>

#include "pipeline/set_internal.h"

/* The CPU's first part beside other devices (ferry__pset_plan_parts). */
#define PSET_CPU_PROBE (256u << 10)

/* ---- the rate model ------------------------------------------------------------------- */

/* Device @i's rate for parts of @bytes, bytes per ns, from the performance model (sched/
 * perfmodel.h: a trimmed window of its parts' service times); 0 before it has measured one. */
double ferry__pset_dev_rate(const struct ferry__pset *s, unsigned i, size_t bytes)
{
    uint64_t ns = 0;
    if (bytes == 0 || ferry__perf_predict(s->model, (int)i, 0, bytes, &ns) != 0 || ns == 0)
        return 0;
    return (double)bytes / (double)ns;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Every device's rate for parts of about @bytes, in @r: its own measured one; before it has
 * one, its link's theoretical rate scaled by what the measured devices reach of theirs (the
 * median of those ratios; 1 when none has measured): a Gen4 card beside a Gen5 one starts at
 * half the share, and both are corrected by their first parts. (Holding back batches until
 * every device had measured one cost 1.5-3% on short runs and made the split depend on the
 * host's timing; the link's rate is a good enough start for the copies, and a compute-bound
 * stage corrects it within the batches in flight.) */
void ferry__pset_plan_rates(const struct ferry__pset *s, size_t bytes, double *r)
{
    double ratio[FERRY_MAX_DEVICE_SET];
    unsigned nk = 0;
    for (unsigned i = 0; i < s->n; i++)
        if ((r[i] = ferry__pset_dev_rate(s, i, bytes)) > 0 && s->d[i].link_gbps > 0)
            ratio[nk++] = r[i] / s->d[i].link_gbps;
    double k = 1.0;
    if (nk > 0) {
        qsort(ratio, nk, sizeof(double), cmp_double);
        k = ratio[nk / 2];
    }
    for (unsigned i = 0; i < s->n; i++)
        if (r[i] <= 0)
            r[i] = s->d[i].cpu != NULL     ? 1.0 /* alone (cpu_probe: else no work) */
                   : s->d[i].link_gbps > 0 ? k * s->d[i].link_gbps
                                           : k;
}

/* The CPU device while it is not calibrated (-1: none, or calibrated): it gets no share of a
 * batch until a probe of a whole chunk has come back (or its rate came from a saved model, or
 * it has run parts), so that a CPU slower than its first guess holds nothing. */
static int cpu_probe(const struct ferry__pset *s)
{
    for (unsigned i = 0; i < s->n; i++) {
        const pset_dev_t *d = &s->d[i];
        if (d->cpu == NULL || d->left || s->guard.state == FERRY__GUARD_BENCH)
            continue;
        bool rated = ferry__pset_dev_rate(s, i, s->chunk) > 0;
        if (!rated || (d->probed > 0 && d->probed < s->chunk && d->parts == 0))
            return (int)i;
    }
    return -1;
}

void ferry__pset_hold(struct ferry__pset *s, unsigned dev, int64_t delta, uint64_t at_ns)
{
    pset_dev_t *d = &s->d[dev];
    bool was = d->held > 0;
    d->held = (uint64_t)((int64_t)d->held + delta);
    if (d->cpu != NULL && was != (d->held > 0))
        ferry__guard_cpu(&s->guard, d->held > 0,
                         at_ns != 0 || s->guard.state != FERRY__GUARD_TRIAL ? at_ns
                                                                            : ferry__mono_ns());
}

/* The CPU device when the guard keeps it from the batch being planned (set_guard.h), else -1.
 * The guard runs on real clocks, once the CPU is calibrated (@probe < 0), while a GPU is in the
 * set: with none left the CPU takes the work. */
static int cpu_benched(struct ferry__pset *s, int probe)
{
    int cpu = -1;
    bool gpu = false;
    for (unsigned i = 0; i < s->n; i++) {
        if (s->d[i].left)
            continue;
        if (s->d[i].cpu != NULL)
            cpu = (int)i;
        else
            gpu = true;
    }
    if (cpu < 0 || !gpu)
        return -1;
    if (s->guard.state == FERRY__GUARD_BENCH) /* by its trial, or by a saved one's (any clock) */
        return cpu;
    if (s->virt || probe >= 0)
        return -1;
    if (s->guard.state == FERRY__GUARD_IDLE)
        ferry__guard_start(&s->guard, s->next_id, s->inflight, ferry__mono_ns(),
                           s->d[cpu].held > 0);
    else
        ferry__guard_plan(&s->guard, s->next_id, ferry__mono_ns());
    return ferry__guard_cpu_ok(&s->guard) ? -1 : cpu;
}

/* Cut @bytes into parts (at most one per device, contiguous, whole chunks but the last, in
 * device order) written to @parts; returns how many; *@probe_bytes > 0 when the CPU device
 * (*@probe_dev) is to time a copy of the batch's last *@probe_bytes (probe_start). Under the
 * lock; adds the parts to the devices' held bytes. */
unsigned ferry__pset_plan_parts(struct ferry__pset *s, size_t bytes, pset_part_t *parts,
                                unsigned *probe_dev, size_t *probe_bytes)
{
    double r[FERRY_MAX_DEVICE_SET], t[FERRY_MAX_DEVICE_SET], share[FERRY_MAX_DEVICE_SET];
    ferry__pset_plan_rates(s, bytes / s->n > s->chunk ? bytes / s->n : s->chunk, r);
    bool any = false;
    for (unsigned i = 0; i < s->n; i++)
        any |= !s->d[i].left;
    /* The CPU takes no share while another device is there until it is calibrated: it times a
     * copy of the batch's tail that no batch waits for (one probe at a time, probe_start):
     * first PSET_CPU_PROBE bytes, from which the model predicts its parts (proportionally to
     * bytes, sched/perfmodel.h); then, only when that predicts a share of at least half a
     * chunk, a whole chunk, as its parts will be (a small probe runs in the caches: under
     * AddressSanitizer 256 KiB of scale predicted 3x the rate of its 8 MiB parts, and one such
     * part held a short run at 0.7x the GPU alone). A whole chunk as its first part held a run for
     * as long as a slow CPU took on it (16 MiB of fma at intensity 200: 6.1 GB/s where the GPU
     * alone made 47.5), and a probe of 256 KiB inside the batch still did on a short run (128 MiB
     * of it: 19.5 GB/s, the probe 6.9 ms of the CPU's clock). */
    int probe = cpu_probe(s);
    int benched = cpu_benched(s, probe);
    unsigned others = 0;
    for (unsigned i = 0; i < s->n; i++)
        others += (int)i != probe && (!any || !s->d[i].left);
    size_t pb = bytes < PSET_CPU_PROBE ? bytes : PSET_CPU_PROBE;
    if (probe >= 0 && s->d[probe].probed > 0) { /* the chunk's probe, if worth it */
        double others_r = 0;
        for (unsigned i = 0; i < s->n; i++)
            others_r += (int)i != probe && (!any || !s->d[i].left) ? r[i] : 0;
        double cpu_share = (double)bytes * r[probe] / (others_r + r[probe]);
        pb = cpu_share * 2 >= (double)s->chunk ? (bytes < s->chunk ? bytes : s->chunk) : 0;
    }
    pb -= pb % s->gran;
    *probe_bytes = 0;
    if (probe >= 0 && others > 0 && !s->d[probe].probing && pb > 0) {
        *probe_dev = (unsigned)probe;
        *probe_bytes = pb;
        s->d[probe].probing = true;
    }
    /* the devices that take work (every one when all have left: their pipelines run on the
     * CPU), by expected start */
    unsigned ord[FERRY_MAX_DEVICE_SET], k = 0;
    for (unsigned i = 0; i < s->n; i++) {
        /* A GPU's backlog is what it holds now. Simulated devices each keep their own virtual
         * clock, which runs at the speed this CPU simulates them, not at their modelled rates,
         * and the clocks of two devices do not compare: a simulated device's backlog is the
         * device time of all the work given it, so that the devices finish together, each on
         * its own clock. */
        t[i] = s->virt ? s->d[i].vbusy : (double)s->d[i].held / r[i];
        share[i] = 0;
        if ((!any || !s->d[i].left) && ((int)i != probe || others == 0) && (int)i != benched)
            ord[k++] = i;
    }
    for (unsigned a = 1; a < k; a++) /* insertion sort: a handful of devices */
        for (unsigned b = a; b > 0 && t[ord[b]] < t[ord[b - 1]]; b--) {
            unsigned x = ord[b];
            ord[b] = ord[b - 1];
            ord[b - 1] = x;
        }
    if (bytes <= s->chunk || k == 1) {
        unsigned best = ord[0];
        for (unsigned j = 1; j < k; j++)
            if (t[ord[j]] + (double)bytes / r[ord[j]] < t[best] + (double)bytes / r[best])
                best = ord[j];
        share[best] = (double)bytes;
    } else {
        /* water filling: the first m devices by start all finish at T */
        double sum_r = 0, sum_tr = 0, T = 0;
        unsigned m = 0;
        while (m < k) {
            sum_r += r[ord[m]];
            sum_tr += t[ord[m]] * r[ord[m]];
            m++;
            T = ((double)bytes + sum_tr) / sum_r;
            if (m == k || T <= t[ord[m]])
                break;
        }
        for (unsigned j = 0; j < m; j++)
            share[ord[j]] = (T - t[ord[j]]) * r[ord[j]];
    }
    /* contiguous ranges in device order */
    unsigned np = 0;
    size_t off = 0;
    double cum = 0;
    for (unsigned i = 0; i < s->n && off < bytes; i++) {
        if (share[i] <= 0)
            continue;
        cum += share[i];
        /* the nearest chunk boundary (whole chunks are the cheapest to move: cutting at an
         * eighth of a chunk measured 0.6% lower on the mixed rig): what rounding leaves, the
         * devices' backlogs even out over the next batches */
        size_t end = (size_t)((cum + (double)s->chunk / 2) / (double)s->chunk) * s->chunk;
        bool last = true;
        for (unsigned j = i + 1; j < s->n; j++)
            last &= share[j] <= 0;
        if (last || end > bytes)
            end = bytes;
        if (end <= off)
            continue;
        parts[np++] = (pset_part_t){
            .dev = i, .off = off, .bytes = end - off, .plan_ns = (double)(end - off) / r[i]};
        ferry__pset_hold(s, i, (int64_t)(end - off), 0);
        s->d[i].vbusy += parts[np - 1].plan_ns;
        off = end;
    }
    if (np == 0) { /* an empty batch: to the earliest device */
        parts[np++] = (pset_part_t){.dev = ord[0], .off = 0, .bytes = 0};
    } else if (off < bytes) { /* rounding left a tail: the last part takes it */
        ferry__pset_hold(s, parts[np - 1].dev, (int64_t)(bytes - off), 0);
        double more = (double)(bytes - off) / r[parts[np - 1].dev];
        s->d[parts[np - 1].dev].vbusy += more;
        parts[np - 1].plan_ns += more;
        parts[np - 1].bytes += bytes - off;
    }
    return np;
}
