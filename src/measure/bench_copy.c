/* ferry_bench_copy: the copy rate of a device by size and direction, timed with device events
 * around each copy (virtual on the simulator), so `ferry bench copy` and the bandwidth ceiling
 * of `ferry bench pipeline` use the same backend path as streaming does. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/config.h"
#include "core/runtime.h"
#include "ferry/bench.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int ferry_bench_copy(ferry_device_t *dev, const ferry_copy_bench_config_t *cfg,
                     ferry_copy_bench_result_t *out)
{
    if (dev == NULL || cfg == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL, "ferry_bench_copy: NULL argument or size not set "
                                          "(use the INIT macros)");
    ferry_copy_bench_config_t c; /* bytes 1 to 16G; warmup 2 and reps 10 when unset */
    int rc = ferry__config_import(&c, sizeof(c), cfg, &ferry__cfg_copy_bench, NULL);
    if (rc != 0)
        return rc;
    cfg = &c;
    if ((unsigned)cfg->dir > FERRY_COPY_BOTH)
        return ferry__error(FERRY_EINVAL,
                            "ferry_bench_copy: direction %d (accepted: 0 H2D, "
                            "1 D2H, 2 both)",
                            (int)cfg->dir);
    unsigned reps = cfg->reps, warm = cfg->warmup;

    int nbuf = cfg->dir == FERRY_COPY_BOTH ? 2 : 1;
    size_t n = cfg->bytes;
    unsigned char *host[2] = {0};
    void *devbuf[2] = {0};
    bool reg[2] = {false, false};
    ferry_be_stream_t *st[2] = {0};
    ferry_be_event_t *ev[4] = {0};
    uint64_t *times = calloc(reps, sizeof(*times));
    rc = times ? 0 : ferry__error(FERRY_ENOMEM, "ferry_bench_copy: out of memory");
    for (int i = 0; rc == 0 && i < nbuf; i++) {
        if (cfg->pageable) {
            host[i] = malloc(n);
        } else {
            void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            host[i] = m == MAP_FAILED ? NULL : m;
        }
        if (host[i] == NULL) {
            rc = ferry__error(FERRY_ENOMEM, "ferry_bench_copy: no host memory for %zu bytes", n);
            break;
        }
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        for (size_t k = 0; k + 8 <= n; k += 8) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            memcpy(host[i] + k, &x, 8);
        }
        if (!cfg->pageable) {
            if ((rc = ferry__be_host_register(dev, host[i], n)) != 0)
                break;
            reg[i] = true;
        }
        if ((rc = ferry__be_mem_alloc(dev, n, &devbuf[i])) != 0 ||
            (rc = ferry__be_stream_create(dev, dev->props.priority_least, &st[i])) != 0 ||
            (rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &ev[2 * i])) != 0 ||
            (rc = ferry__be_event_create(dev, FERRY_BE_EVENT_TIMING, &ev[2 * i + 1])) != 0)
            break;
    }
    for (unsigned r = 0; rc == 0 && r < warm + reps; r++) {
        for (int i = 0; rc == 0 && i < nbuf; i++) {
            bool h2d = cfg->dir == FERRY_COPY_H2D || (cfg->dir == FERRY_COPY_BOTH && i == 0);
            if ((rc = ferry__be_event_record(dev, ev[2 * i], st[i])) != 0)
                break;
            rc = h2d ? ferry__be_memcpy_h2d(dev, st[i], devbuf[i], host[i], n)
                     : ferry__be_memcpy_d2h(dev, st[i], host[i], devbuf[i], n);
            if (rc == 0)
                rc = ferry__be_event_record(dev, ev[2 * i + 1], st[i]);
        }
        uint64_t t0 = UINT64_MAX, t1 = 0;
        for (int i = 0; rc == 0 && i < nbuf; i++) {
            uint64_t a = 0, b = 0;
            if ((rc = ferry__be_stream_sync(dev, st[i])) != 0 ||
                (rc = ferry__be_event_time_ns(dev, ev[2 * i], &a)) != 0 ||
                (rc = ferry__be_event_time_ns(dev, ev[2 * i + 1], &b)) != 0)
                break;
            t0 = a < t0 ? a : t0;
            t1 = b > t1 ? b : t1;
        }
        if (rc == 0 && r >= warm)
            times[r - warm] = t1 > t0 ? t1 - t0 : 1;
    }
    if (rc == 0) {
        qsort(times, reps, sizeof(*times), cmp_u64);
        double moved = (double)n * nbuf;
        double med = reps % 2 ? (double)times[reps / 2]
                              : ((double)times[reps / 2 - 1] + (double)times[reps / 2]) / 2;
        out->best_us = (double)times[0] / 1e3;
        out->median_us = med / 1e3;
        out->best_gbps = moved / (double)times[0];
        out->median_gbps = moved / med;
        out->reps = reps;
    }
    for (int i = 0; i < 4; i++)
        ferry__be_event_destroy(dev, ev[i]);
    for (int i = 0; i < nbuf; i++) {
        ferry__be_stream_destroy(dev, st[i]);
        ferry__be_mem_free(dev, devbuf[i]);
        if (reg[i])
            ferry__be_host_unregister(dev, host[i]);
        if (host[i] != NULL) {
            if (cfg->pageable)
                free(host[i]);
            else
                munmap(host[i], n);
        }
    }
    free(times);
    return rc ? ferry__rt_fail(dev->rt, rc) : 0;
}
