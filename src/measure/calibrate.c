/* ferry_calibrate: measure what the simulator's profile holds (copy curves, the shared link,
 * pageable rates, host call costs, the device-to-device rate) on a device, through the same
 * backend path ferry streams with. `ferry probe --calibrate` turns the result into a profile. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/runtime.h"
#include "ferry/bench.h"
#include "ferry/workloads.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int copy_rate(ferry_device_t *dev, size_t bytes, ferry_copy_dir_t dir, bool pageable,
                     double *gbps)
{
    ferry_copy_bench_config_t c = FERRY_COPY_BENCH_CONFIG_INIT;
    ferry_copy_bench_result_t r = FERRY_COPY_BENCH_RESULT_INIT;
    c.bytes = bytes;
    c.dir = dir;
    c.pageable = pageable;
    c.reps = pageable ? 5 : 10;
    c.warmup = 3;
    int rc = ferry_bench_copy(dev, &c, &r);
    *gbps = r.best_gbps;
    return rc;
}

enum { CAL_COPY, CAL_LAUNCH, CAL_RECORD, CAL_WAIT };

/* Median host time of one call of @what, over rounds of @n calls, on the device clock. */
static int host_cost(ferry_device_t *dev, int what, ferry_be_stream_t *s, ferry_be_event_t *ev,
                     void *dbuf, void *hbuf, const ferry_be_launch_t *l, double *out)
{
    enum { ROUNDS = 7, N = 64 };
    double per[ROUNDS];
    int rc = 0;
    for (int r = 0; r < ROUNDS + 1 && rc == 0; r++) { /* round 0 warms up */
        uint64_t t0 = ferry_device_now_ns(dev);
        for (int i = 0; i < N && rc == 0; i++) {
            switch (what) {
            case CAL_COPY: rc = ferry__be_memcpy_h2d(dev, s, dbuf, hbuf, 4096); break;
            case CAL_LAUNCH: rc = ferry__be_launch(dev, s, l); break;
            case CAL_RECORD: rc = ferry__be_event_record(dev, ev, s); break;
            default: rc = ferry__be_stream_wait_event(dev, s, ev); break;
            }
        }
        uint64_t t1 = ferry_device_now_ns(dev);
        if (rc == 0)
            rc = ferry__be_stream_sync(dev, s);
        if (r > 0)
            per[r - 1] = (double)(t1 - t0) / N;
    }
    if (rc == 0) {
        qsort(per, ROUNDS, sizeof(double), cmp_double);
        *out = per[ROUNDS / 2];
    }
    return rc;
}

/* One copy_pieces call of @pc (@n pieces) each way on @s, timed by events, the median of 5 after
 * a warm-up: *@gbps is the bytes of a call over the mean of the two directions' times. */
static int pieces_rate(ferry_device_t *dev, ferry_be_stream_t *s, ferry_be_event_t *e0,
                       ferry_be_event_t *e1, void *dbuf, const ferry_be_piece_t *pc, size_t n,
                       size_t kernel_max, double *gbps)
{
    enum { REPS = 5 };
    double t[2][REPS];
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += pc[i].bytes;
    int rc = 0;
    for (int r = 0; r < REPS + 1 && rc == 0; r++) {
        for (int d = 0; d < 2 && rc == 0; d++) {
            uint64_t a = 0, b = 0;
            if ((rc = ferry__be_event_record(dev, e0, s)) != 0 ||
                (rc = ferry__be_copy_pieces(dev, s, d == 0, dbuf, pc, n, kernel_max)) != 0 ||
                (rc = ferry__be_event_record(dev, e1, s)) != 0 ||
                (rc = ferry__be_stream_sync(dev, s)) != 0 ||
                (rc = ferry__be_event_time_ns(dev, e0, &a)) != 0 ||
                (rc = ferry__be_event_time_ns(dev, e1, &b)) != 0)
                break;
            if (r > 0)
                t[d][r - 1] = b > a ? (double)(b - a) : 0;
        }
    }
    if (rc != 0)
        return rc;
    qsort(t[0], REPS, sizeof(double), cmp_double);
    qsort(t[1], REPS, sizeof(double), cmp_double);
    double mid = (t[0][REPS / 2] + t[1][REPS / 2]) / 2;
    *gbps = mid > 0 ? (double)total / mid : 0;
    return 0;
}

/* Small pieces by the copy engines and by the copy kernel (backend copy_pieces, kernel_max 0
 * and unbounded): 8 MiB of pieces a call, each at twice its size from the last in pinned
 * memory (none merged), into @dbuf. Sets c's piece fields. */
static int piece_crossover(ferry_device_t *dev, ferry_be_stream_t *s, ferry_be_event_t *e0,
                           ferry_be_event_t *e1, void *dbuf, ferry_calibration_t *c)
{
    static const uint64_t sizes[FERRY_CALIBRATION_PIECES] = {4096, 16384, 65536};
    const size_t span = 8u << 20;
    if (!ferry__be_has_copy_pieces(dev))
        return 0;
    unsigned char *h =
        mmap(NULL, 2 * span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ferry_be_piece_t *pc = malloc(span / sizes[0] * sizeof(*pc));
    int rc = 0;
    if (h == MAP_FAILED || pc == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "ferry_calibrate: out of memory");
        goto out;
    }
    memset(h, 0x5a, 2 * span);
    if ((rc = ferry__be_host_register(dev, h, 2 * span)) != 0)
        goto out;
    bool won = true;
    for (int k = 0; rc == 0 && k < FERRY_CALIBRATION_PIECES; k++) {
        size_t n = span / sizes[k];
        for (size_t i = 0; i < n; i++)
            pc[i] = (ferry_be_piece_t){h + 2 * i * sizes[k], i * sizes[k], sizes[k]};
        c->piece_bytes[k] = sizes[k];
        if ((rc = pieces_rate(dev, s, e0, e1, dbuf, pc, n, 0, &c->piece_engine_gbps[k])) != 0 ||
            (rc = pieces_rate(dev, s, e0, e1, dbuf, pc, n, SIZE_MAX, &c->piece_kernel_gbps[k])) !=
                0)
            break;
        won = won && c->piece_kernel_gbps[k] > c->piece_engine_gbps[k];
        if (won)
            c->piece_kernel_max = sizes[k];
    }
    ferry__be_host_unregister(dev, h);
out:
    if (h != MAP_FAILED)
        munmap(h, 2 * span);
    free(pc);
    return rc;
}

int ferry_calibrate(ferry_device_t *dev, ferry_calibration_t *out)
{
    if (dev == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL, "ferry_calibrate: NULL argument or size not set "
                                          "(use FERRY_CALIBRATION_INIT)");
    static const uint64_t sizes[FERRY_CALIBRATION_POINTS] = {4096,    65536,    1 << 20,
                                                             4 << 20, 16 << 20, 64 << 20};
    ferry_calibration_t c = FERRY_CALIBRATION_INIT;
    int rc = 0;
    for (int i = 0; rc == 0 && i < FERRY_CALIBRATION_POINTS; i++) {
        c.bytes[i] = sizes[i];
        rc = copy_rate(dev, sizes[i], FERRY_COPY_H2D, false, &c.h2d_gbps[i]);
        if (rc == 0)
            rc = copy_rate(dev, sizes[i], FERRY_COPY_D2H, false, &c.d2h_gbps[i]);
    }
    double both = 0;
    const int last = FERRY_CALIBRATION_POINTS - 1;
    if (rc == 0)
        rc = copy_rate(dev, 64u << 20, FERRY_COPY_BOTH, false, &both);
    if (rc == 0) {
        c.bidirectional_factor = both / (c.h2d_gbps[last] + c.d2h_gbps[last]);
        if (c.bidirectional_factor > 1.0)
            c.bidirectional_factor = 1.0;
        rc = copy_rate(dev, 64u << 20, FERRY_COPY_H2D, true, &c.pageable_h2d_gbps);
    }
    if (rc == 0)
        rc = copy_rate(dev, 64u << 20, FERRY_COPY_D2H, true, &c.pageable_d2h_gbps);
    if (rc != 0)
        return ferry__rt_fail(dev->rt, rc);

    /* Host costs and the kernel rate, with the scale workload as the kernel. */
    ferry_workload_t *wl = NULL;
    ferry_be_stream_t *s = NULL;
    ferry_be_event_t *ev = NULL, *e0 = NULL, *e1 = NULL;
    const size_t big = 256u << 20;
    void *din = NULL, *dout = NULL;
    unsigned char *h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bool reg = false;
    if (h == MAP_FAILED) {
        h = NULL;
        rc = ferry__error(FERRY_ENOMEM, "ferry_calibrate: out of memory");
        goto out;
    }
    if ((rc = ferry_workload_create("scale", NULL, &wl)) != 0 ||
        (rc = ferry__be_host_register(dev, h, 4096)) != 0)
        goto out;
    reg = true;
    if ((rc = ferry__be_stream_create(dev, dev->props.priority_least, &s)) != 0 ||
        (rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &ev)) != 0 ||
        (rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &e0)) != 0 ||
        (rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &e1)) != 0 ||
        (rc = ferry__be_mem_alloc(dev, big, &din)) != 0 ||
        (rc = ferry__be_mem_alloc(dev, big, &dout)) != 0)
        goto out;
    const ferry_stage_t *st = ferry_workload_stage(wl);
    ferry_be_launch_t l = {
        .gpu = st->gpu,
        .cpu = st->cpu,
        .user = st->user,
        .args = {.size = sizeof(ferry_kernel_args_t), .in = din, .out = dout, .bytes = 4},
        .blocks = 1};
    if ((rc = ferry__be_event_record(dev, ev, s)) != 0 ||
        (rc = host_cost(dev, CAL_COPY, s, ev, din, h, &l, &c.copy_submit_ns)) != 0 ||
        (rc = host_cost(dev, CAL_LAUNCH, s, ev, din, h, &l, &c.launch_ns)) != 0 ||
        (rc = host_cost(dev, CAL_RECORD, s, ev, din, h, &l, &c.event_record_ns)) != 0 ||
        (rc = host_cost(dev, CAL_WAIT, s, ev, din, h, &l, &c.stream_wait_ns)) != 0)
        goto out;
    if ((rc = piece_crossover(dev, s, e0, e1, din, &c)) != 0)
        goto out;
    /* The kernel over 256 MiB, best of 5, timed with events. */
    l.args.bytes = big;
    l.blocks = (uint32_t)(dev->props.sms > 0 ? dev->props.sms : 1);
    double best = 0;
    for (int r = 0; r < 6 && rc == 0; r++) {
        uint64_t a = 0, b = 0;
        if ((rc = ferry__be_event_record(dev, e0, s)) != 0 ||
            (rc = ferry__be_launch(dev, s, &l)) != 0 ||
            (rc = ferry__be_event_record(dev, e1, s)) != 0 ||
            (rc = ferry__be_stream_sync(dev, s)) != 0 ||
            (rc = ferry__be_event_time_ns(dev, e0, &a)) != 0 ||
            (rc = ferry__be_event_time_ns(dev, e1, &b)) != 0)
            break;
        double g = b > a ? (double)big / (double)(b - a) : 0;
        if (r > 0 && g > best)
            best = g;
    }
    c.d2d_gbps = best;
    if (rc == 0)
        *out = c;
out:
    ferry__be_mem_free(dev, din);
    ferry__be_mem_free(dev, dout);
    ferry__be_event_destroy(dev, ev);
    ferry__be_event_destroy(dev, e0);
    ferry__be_event_destroy(dev, e1);
    ferry__be_stream_destroy(dev, s);
    if (reg)
        ferry__be_host_unregister(dev, h);
    if (h)
        munmap(h, 4096);
    ferry_workload_destroy(wl);
    return rc ? ferry__rt_fail(dev->rt, rc) : 0;
}
