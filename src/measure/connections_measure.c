/* ferry_connections_measure: the stream-by-stream A-then-B pattern of FACTS.md's connections
 * law, timed on the device (virtual time on the simulator), and the same kernels round-robin
 * as the concurrent reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime.h"
#include "ferry/connections.h"

#define MAX_STREAMS 64

static int nop(const ferry_kernel_args_t *a, void *user)
{
    (void)a;
    (void)user;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One pass: A then B on each stream, stream by stream (@rr false), or every A then every B
 * (@rr true). Returns the span from the first issue to the last end, in ns, in *out. */
static int pass(ferry_device_t *dev, ferry_be_stream_t **st, ferry_be_event_t **end, unsigned n,
                ferry_be_launch_t *ka, ferry_be_launch_t *kb, bool rr, uint64_t *out)
{
    int rc = 0;
    uint64_t t0 = ferry_device_now_ns(dev);
    if (rr) {
        for (unsigned i = 0; rc == 0 && i < n; i++)
            rc = ferry__be_launch(dev, st[i], ka);
        for (unsigned i = 0; rc == 0 && i < n; i++)
            rc = ferry__be_launch(dev, st[i], kb);
    } else {
        for (unsigned i = 0; rc == 0 && i < n; i++)
            if ((rc = ferry__be_launch(dev, st[i], ka)) == 0)
                rc = ferry__be_launch(dev, st[i], kb);
    }
    for (unsigned i = 0; rc == 0 && i < n; i++)
        rc = ferry__be_event_record(dev, end[i], st[i]);
    uint64_t t1 = 0;
    for (unsigned i = 0; rc == 0 && i < n; i++) {
        uint64_t t = 0;
        if ((rc = ferry__be_stream_sync(dev, st[i])) == 0 &&
            (rc = ferry__be_event_time_ns(dev, end[i], &t)) == 0 && t > t1)
            t1 = t;
    }
    *out = t1 > t0 ? t1 - t0 : 0;
    return rc;
}

int ferry_connections_measure(ferry_device_t *dev, unsigned streams, uint64_t a_ns, uint64_t b_ns,
                              unsigned reps, ferry_conn_measure_t *out)
{
    if (dev == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL, "ferry_connections_measure: NULL argument or size not "
                                          "set (use FERRY_CONN_MEASURE_INIT)");
    if (streams < 1 || streams > MAX_STREAMS || a_ns < 1000 || a_ns > 1000000000 || b_ns < 1000 ||
        b_ns > 1000000000 || reps < 1 || reps > 100)
        return ferry__error(FERRY_EINVAL,
                            "ferry_connections_measure: streams %u (accepted 1..64), kernels "
                            "%llu and %llu ns (1 us..1 s), reps %u (1..100)",
                            streams, (unsigned long long)a_ns, (unsigned long long)b_ns, reps);
    bool virt = ferry_device_is_simulated(dev);
    ferry_gpu_fn spin = ferry__be_gpu_launcher(dev->ops, "spin");
    if (!virt && spin == NULL)
        return ferry__error(FERRY_ENOTSUP, "ferry_connections_measure: this ferry was built "
                                           "without CUDA kernels");
    unsigned long long ans = a_ns, bns = b_ns;
    ferry_be_launch_t ka = {.gpu = spin, .cpu = nop, .user = &ans, .blocks = 1, .block_ns = a_ns};
    ferry_be_launch_t kb = {.gpu = spin, .cpu = nop, .user = &bns, .blocks = 1, .block_ns = b_ns};
    ka.args.size = kb.args.size = sizeof(ferry_kernel_args_t);
    ferry_be_stream_t *st[MAX_STREAMS] = {0};
    ferry_be_event_t *end[MAX_STREAMS] = {0};
    double *tot = calloc(reps, sizeof(double)), *rrv = calloc(reps, sizeof(double));
    int rc = tot && rrv ? 0 : ferry__error(FERRY_ENOMEM, "ferry_connections_measure: no memory");
    for (unsigned i = 0; rc == 0 && i < streams; i++)
        if ((rc = ferry__be_stream_create(dev, dev->props.priority_least, &st[i])) == 0)
            rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &end[i]);
    uint64_t ns = 0;
    /* Warm-up: module load and first launches stay out of the numbers. */
    if (rc == 0)
        rc = pass(dev, st, end, streams, &kb, &kb, true, &ns);
    for (unsigned r = 0; rc == 0 && r < reps; r++) {
        if ((rc = pass(dev, st, end, streams, &ka, &kb, false, &ns)) != 0)
            break;
        tot[r] = (double)ns / 1e6;
        if ((rc = pass(dev, st, end, streams, &ka, &kb, true, &ns)) != 0)
            break;
        rrv[r] = (double)ns / 1e6;
    }
    uint64_t fr = 0, total = 0;
    if (rc == 0 && (rc = ferry__be_mem_info(dev, &fr, &total)) == 0) {
        out->streams = streams;
        out->a_ms = (double)a_ns / 1e6;
        out->b_ms = (double)b_ns / 1e6;
        out->total_ms = median(tot, reps);
        out->roundrobin_ms = median(rrv, reps);
        out->waves = out->total_ms / out->a_ms;
        double w = round(out->waves);
        w = w < 1 ? 1 : w;
        out->effective_queues = (double)streams / w;
        out->at_least = w <= 1;
        out->serialization = out->roundrobin_ms > 0 ? out->total_ms / out->roundrobin_ms : 0;
        out->device_used_bytes = total - fr;
        out->device_total_bytes = total;
    }
    for (unsigned i = 0; i < streams; i++) {
        ferry__be_event_destroy(dev, end[i]);
        ferry__be_stream_destroy(dev, st[i]);
    }
    free(tot);
    free(rrv);
    return rc ? ferry__rt_fail(dev->rt, rc) : 0;
}
