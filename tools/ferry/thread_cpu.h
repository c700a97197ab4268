/* Where a benchmark's CPU time went, by thread name: snapshots of this process's threads' CPU
 * time (Linux: /proc/self/task/TID/schedstat, nanoseconds on the CPU) and their difference
 * grouped by name, so that `ferry bench items` can say which of ferry's threads (ferry-complete,
 * ferry-gather, ...), CUDA's, or the caller's own spent it. */
#ifndef FERRY_CLI_THREAD_CPU_H
#define FERRY_CLI_THREAD_CPU_H

#include <stdint.h>

#define THREAD_CPU_MAX    512
#define THREAD_CPU_GROUPS 16

typedef struct thread_cpu_snap {
    struct {
        int tid;
        char name[16];
        uint64_t ns;
    } t[THREAD_CPU_MAX];
    unsigned n;
    double process_s; /* the whole process's CPU time (getrusage), ended threads included */
} thread_cpu_snap_t;

typedef struct thread_cpu_group {
    char name[16]; /* the thread name with any trailing digits cut; "(ended)": threads gone
                      by the second snapshot, the process's time that no live thread holds */
    double s;
} thread_cpu_group_t;

/* Fills @s; 0, or -1 where /proc/self/task cannot be read (then @s->n is 0). */
int thread_cpu_snapshot(thread_cpu_snap_t *s);
/* The CPU seconds between @a and @b (taken later) by name, largest first, into @g (at most
 * THREAD_CPU_GROUPS; the smallest merged into "(other)" past that); returns how many. */
unsigned thread_cpu_groups(const thread_cpu_snap_t *a, const thread_cpu_snap_t *b,
                           thread_cpu_group_t *g);

#endif
