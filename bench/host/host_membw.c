/* Host memory bandwidth, the figure the simulator's host model needs: read (sum of 64-bit
 * words), write (memset) and copy (memcpy) over buffers far larger than the caches, with 1, 2,
 * 4, 8 and 16 threads, each thread on its own share; the median of 5 timed passes after one
 * warm-up pass. Prints one JSON line per (kind, threads).
 * Build: cc -O2 -pthread host_membw.c -o host_membw; run: ./host_membw [GiB, default 4] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hostbench.h"

struct part {
    unsigned char *a, *b;
    size_t n;
    int kind;
    uint64_t sum;
};

static void *work(void *arg)
{
    struct part *p = arg;
    p->sum = hostbench_pass(p->kind, p->a, p->b, p->n);
    return NULL;
}

static double pass(unsigned char *a, unsigned char *b, size_t bytes, int kind, int nt)
{
    struct part part[16];
    pthread_t th[16];
    size_t share = bytes / (size_t)nt / 4096 * 4096;
    double t0 = hostbench_now_s();
    for (int i = 0; i < nt; i++) {
        part[i] = (struct part){a + (size_t)i * share, b + (size_t)i * share, share, kind, 0};
        pthread_create(&th[i], NULL, work, &part[i]);
    }
    uint64_t s = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        s += part[i].sum;
    }
    double t = hostbench_now_s() - t0;
    hostbench_sink += s;
    return (double)share * (double)nt / t / 1e9;
}

int main(int argc, char **argv)
{
    size_t bytes = hostbench_gib_arg(argc, argv, "host_membw", 4.0, 64);
    unsigned char *a =
        mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *b =
        mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED) {
        perror("host_membw: mmap");
        return 1;
    }
    madvise(a, bytes, MADV_HUGEPAGE);
    madvise(b, bytes, MADV_HUGEPAGE);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    const int threads[] = {1, 2, 4, 8, 16};
    for (int k = HOSTBENCH_READ; k <= HOSTBENCH_COPY; k++)
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            double r[5];
            pass(a, b, bytes, k, threads[t]);
            for (int i = 0; i < 5; i++)
                r[i] = pass(a, b, bytes, k, threads[t]);
            double med = hostbench_median(r, 5);
            /* copy moves each byte twice through memory (read + write): gbps counts bytes
             * copied, traffic_gbps both */
            printf("{\"kind\":\"%s\",\"threads\":%d,\"bytes\":%zu,\"gbps\":%.2f,"
                   "\"traffic_gbps\":%.2f,\"min\":%.2f,\"max\":%.2f}\n",
                   hostbench_kind_name[k], threads[t], bytes, med,
                   k == HOSTBENCH_COPY ? 2 * med : med, r[0], r[4]);
            fflush(stdout);
        }
    return 0;
}
