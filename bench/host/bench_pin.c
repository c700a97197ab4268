/* Pinning host memory, 4 KiB pages against ferry_host_alloc (transparent huge pages, touched
 * by several threads): mmap with MADV_NOHUGEPAGE, touch by one thread, ferry_host_register,
 * against ferry_host_alloc of the same size; each timed 3 times, alternating, the median
 * printed as one JSON line per way. Through the public API, on the device the runtime picks
 * (a GPU when there is one). Usage: bench_pin [GiB, default 4] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <ferry.h>

#include "hostbench.h"

static double now_ms(void)
{
    return hostbench_now_s() * 1e3;
}

static double med3(double *v)
{
    return hostbench_median(v, 3);
}

int main(int argc, char **argv)
{
    size_t bytes = hostbench_gib_arg(argc, argv, "bench_pin", 4.0, 256);
    ferry_runtime_config_t rc = FERRY_RUNTIME_CONFIG_INIT;
    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    if (ferry_runtime_create(&rc, &rt) != 0 || ferry_device_get(rt, 0, &dev) != 0) {
        fprintf(stderr, "bench_pin: %s\n", ferry_last_error());
        return 1;
    }
    double touch[3], reg[3], small_total[3], huge[3];
    for (int r = 0; r < 3; r++) {
        double t0 = now_ms();
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            perror("bench_pin: mmap");
            return 1;
        }
        madvise(m, bytes, MADV_NOHUGEPAGE);
        memset(m, 0, bytes);
        double t1 = now_ms();
        if (ferry_host_register(dev, m, bytes) != 0) {
            fprintf(stderr, "bench_pin: %s\n", ferry_last_error());
            return 1;
        }
        double t2 = now_ms();
        ferry_host_unregister(dev, m);
        munmap(m, bytes);
        touch[r] = t1 - t0;
        reg[r] = t2 - t1;
        small_total[r] = t2 - t0;
        void *h = NULL;
        t0 = now_ms();
        if (ferry_host_alloc(dev, bytes, &h) != 0) {
            fprintf(stderr, "bench_pin: %s\n", ferry_last_error());
            return 1;
        }
        huge[r] = now_ms() - t0;
        ferry_host_free(dev, h);
    }
    printf("{\"way\":\"4k_pages_touch_register\",\"backend\":\"%s\",\"bytes\":%zu,\"ms\":%.1f,"
           "\"touch_ms\":%.1f,\"register_ms\":%.1f}\n",
           ferry_runtime_backend(rt), bytes, med3(small_total), med3(touch), med3(reg));
    printf("{\"way\":\"ferry_host_alloc\",\"backend\":\"%s\",\"bytes\":%zu,\"ms\":%.1f}\n",
           ferry_runtime_backend(rt), bytes, med3(huge));
    ferry_runtime_destroy(rt);
    return 0;
}
