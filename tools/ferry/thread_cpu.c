/* Threads' CPU time by name (thread_cpu.h). */
#include "thread_cpu.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *r = fgets(buf, (int)len, f);
    fclose(f);
    if (r == NULL)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

int thread_cpu_snapshot(thread_cpu_snap_t *s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    s->process_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    s->n = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && s->n < THREAD_CPU_MAX) {
        int tid = atoi(e->d_name);
        if (tid <= 0)
            continue;
        char path[64], line[128], name[16];
        unsigned long long ns;
        snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
        if (read_line(path, name, sizeof(name)) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
        if (read_line(path, line, sizeof(line)) != 0 || sscanf(line, "%llu", &ns) != 1)
            continue; /* ended meanwhile */
        s->t[s->n].tid = tid;
        snprintf(s->t[s->n].name, sizeof(s->t[s->n].name), "%s", name);
        s->t[s->n].ns = ns;
        s->n++;
    }
    closedir(d);
    return 0;
}

/* @g's group named @name (added if new and there is room; else "(other)", the last). */
static thread_cpu_group_t *group(thread_cpu_group_t *g, unsigned *n, const char *name)
{
    for (unsigned i = 0; i < *n; i++)
        if (strcmp(g[i].name, name) == 0)
            return &g[i];
    if (*n == THREAD_CPU_GROUPS - 1)
        name = "(other)";
    else if (*n == THREAD_CPU_GROUPS)
        return &g[THREAD_CPU_GROUPS - 1];
    snprintf(g[*n].name, sizeof(g[*n].name), "%s", name);
    g[*n].s = 0;
    return &g[(*n)++];
}

static int by_seconds(const void *x, const void *y)
{
    double a = ((const thread_cpu_group_t *)x)->s, b = ((const thread_cpu_group_t *)y)->s;
    return a < b ? 1 : a > b ? -1 : 0;
}

unsigned thread_cpu_groups(const thread_cpu_snap_t *a, const thread_cpu_snap_t *b,
                           thread_cpu_group_t *g)
{
    unsigned n = 0;
    double live = 0;
    for (unsigned i = 0; i < b->n; i++) {
        uint64_t before = 0;
        for (unsigned j = 0; j < a->n; j++)
            if (a->t[j].tid == b->t[i].tid) {
                before = a->t[j].ns;
                break;
            }
        char name[16];
        snprintf(name, sizeof(name), "%s", b->t[i].name);
        size_t len = strlen(name); /* "cuda00001400006", "ferry-perfmodel-1": one group each */
        while (len > 1 && ((name[len - 1] >= '0' && name[len - 1] <= '9') || name[len - 1] == '-'))
            name[--len] = '\0';
        double s = (double)(b->t[i].ns - (b->t[i].ns >= before ? before : b->t[i].ns)) / 1e9;
        group(g, &n, name)->s += s;
        live += s;
    }
    double ended = (b->process_s - a->process_s) - live;
    if (ended > 0)
        group(g, &n, "(ended)")->s += ended;
    qsort(g, n, sizeof(*g), by_seconds);
    return n;
}
