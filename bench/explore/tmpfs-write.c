/* Writing one file in tmpfs from several threads: pwrite (the inode's lock serialises it) against
 * stores into a shared mapping of the file (page faults in parallel), with and without
 * MADV_POPULATE_WRITE ahead of each request. Issue 17's tmpfs copy is bound by the file's write
 * rate (`ferry bench io`: 1.97 GB/s on the H200's host); this measures whether another writer
 * lifts it. Usage: tmpfs-write FILE GIB THREADS... ; prints GB/s per (mode, threads). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static size_t total, req = 8ul << 20;
static unsigned char *src, *map;
static int fd, nth, populate;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *by_pwrite(void *a)
{
    for (size_t o = (size_t)a * req; o < total; o += (size_t)nth * req)
        if (pwrite(fd, src + o, req, (off_t)o) != (ssize_t)req)
            abort();
    return NULL;
}

static void *by_map(void *a)
{
    for (size_t o = (size_t)a * req; o < total; o += (size_t)nth * req) {
        if (populate)
            madvise(map + o, req, MADV_POPULATE_WRITE);
        memcpy(map + o, src + o, req);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return fprintf(stderr, "usage: tmpfs-write FILE GIB THREADS...\n"), 2;
    total = (size_t)atoi(argv[2]) << 30;
    src = malloc(total);
    if (src == NULL)
        return 1;
    for (size_t i = 0; i < total; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 13);
    for (int a = 3; a < argc; a++)
        for (int mode = 0; mode < 3; mode++) {
            nth = atoi(argv[a]);
            populate = mode == 2;
            unlink(argv[1]);
            fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
            if (fd < 0 || (mode > 0 && ftruncate(fd, (off_t)total) != 0))
                return perror(argv[1]), 1;
            if (mode > 0 &&
                (map = mmap(NULL, total, PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
                return perror("mmap"), 1;
            pthread_t t[256];
            double t0 = now();
            for (long i = 0; i < nth; i++)
                pthread_create(&t[i], NULL, mode ? by_map : by_pwrite, (void *)i);
            for (int i = 0; i < nth; i++)
                pthread_join(t[i], NULL);
            if (mode > 0)
                munmap(map, total);
            double t1 = now();
            printf("%-13s %3d threads %6.2f GB/s\n",
                   mode == 0 ? "pwrite" : mode == 1 ? "mmap" : "mmap+populate", nth,
                   (double)total / (t1 - t0) / 1e9);
            close(fd);
        }
    unlink(argv[1]);
    return 0;
}
