/* How fast can a file in tmpfs be written, and by how many threads: pwrite (the kernel holds the
 * inode's lock for each write), one shared mapping of the whole file, or a mapping per request
 * (with and without MAP_POPULATE, or after an fallocate of the request's range: what a writer
 * needs so that a full file system answers ENOSPC instead of SIGBUS on a mapping). Prints one
 * JSON line a run.
 * Usage: tmpfs-write FILE GIB MODE THREADS; MODE: pwrite, map, mapreq, mapreq-populate,
 * falloc-mapreq. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define REQ (8ul << 20)
#define SRC (256ul << 20)
static size_t total, next_off;
static char *src, *map;
static int fd, mode;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *modes[] = {"pwrite", "map", "mapreq", "mapreq-populate", "falloc-mapreq"};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *work(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        size_t o = next_off;
        next_off += REQ;
        pthread_mutex_unlock(&mu);
        if (o >= total)
            return NULL;
        const char *s = src + o % SRC;
        if (mode == 0) {
            if (pwrite(fd, s, REQ, (off_t)o) != (ssize_t)REQ)
                abort();
        } else if (mode == 1) {
            memcpy(map + o, s, REQ);
        } else {
            if (mode == 4 && fallocate(fd, 0, (off_t)o, (off_t)REQ) != 0)
                abort();
            char *m = mmap(NULL, REQ, PROT_WRITE, MAP_SHARED | (mode == 3 ? MAP_POPULATE : 0), fd,
                           (off_t)o);
            if (m == MAP_FAILED)
                abort();
            memcpy(m, s, REQ);
            munmap(m, REQ);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    total = strtoul(argv[2], NULL, 10) << 30;
    for (mode = 0; mode < 5 && strcmp(argv[3], modes[mode]) != 0; mode++)
        ;
    int nth = atoi(argv[4]);
    if (mode == 5 || nth < 1 || nth > 64)
        return 2;
    src = malloc(SRC);
    for (size_t i = 0; i < SRC; i++)
        src[i] = (char)(i * 2654435761u >> 13);
    unlink(argv[1]);
    fd = open(argv[1], O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return 1;
    double t0 = now();
    if (mode != 0 && ftruncate(fd, (off_t)total) != 0)
        return 1;
    if (mode == 1 && (map = mmap(NULL, total, PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        return 1;
    pthread_t t[64];
    for (int i = 0; i < nth; i++)
        pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < nth; i++)
        pthread_join(t[i], NULL);
    if (mode == 1)
        munmap(map, total);
    double dt = now() - t0;
    printf(
        "{\"what\":\"tmpfs-write\",\"mode\":\"%s\",\"threads\":%d,\"bytes\":%zu,\"gbps\":%.3f}\n",
        modes[mode], nth, total, total / dt / 1e9);
    close(fd);
    unlink(argv[1]);
    return 0;
}
