/* Host memory for copies (host_mem.c): aligned mappings on transparent huge pages, touched in
 * parallel. Used by ferry_host_alloc and ferry_pool_create. */
#ifndef FERRY_CORE_HOST_MEM_H
#define FERRY_CORE_HOST_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Map @bytes (rounded up to 2 MiB from 2 MiB up, else to 4 KiB) aligned to @align (a power of
 * two; at least 2 MiB for 2 MiB and more), asking for transparent huge pages. *@mapped is the
 * size to give ferry__host_unmap. Returns NULL when the mapping fails. Nothing is touched. */
void *ferry__host_map(size_t bytes, size_t align, size_t *mapped);
void ferry__host_unmap(void *p, size_t mapped); /* NULL is a no-op */
/* Write zeros over [p, p + bytes) with up to 8 threads (one below 128 MiB), so that the pages
 * exist, on the caller's NUMA node, before they are pinned. */
void ferry__host_touch(void *p, size_t bytes);

struct ferry_runtime;
struct ferry__shm_arena;

/* isolation=process: the region of ferry_host_alloc memory of @arena (a runtime's) that holds
 * [@p, @p + @n), the whole of it inside one (memory shared with worker processes: its place and its
 * serial, proc/shm.h). Returns false when none does. Thread-safe. */
typedef struct ferry__host_shared {
    void *base;
    size_t bytes;
    uint64_t serial;
} ferry__host_shared_t;
bool ferry__host_shared(const void *p, size_t n, const struct ferry__shm_arena *arena,
                        ferry__host_shared_t *out);
/* Call @fn for every block of @arena (its lock not held). */
void ferry__host_shared_each(const struct ferry__shm_arena *arena,
                             void (*fn)(void *arg, const ferry__host_shared_t *g), void *arg);
/* isolation=process: @bytes of memory shared with the workers, a region of @rt's arena (2 MiB
 * aligned), that ferry__host_shared finds; *@mapped its size. NULL with the error set. Not
 * pinned here: each worker pins what it is sent. */
void *ferry__host_shared_map(struct ferry_runtime *rt, size_t bytes, size_t *mapped);
/* Give it back (NULL, or memory not from ferry__host_shared_map: a no-op). */
void ferry__host_shared_unmap(struct ferry_runtime *rt, void *p);
/* A descriptor of the region of serial @serial (close-on-exec, the caller's to close), or -1
 * when it has been freed. */
int ferry__host_shared_fd(uint64_t serial);

#endif
