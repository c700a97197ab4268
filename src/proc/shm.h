/* Shared host memory for worker processes (isolation=process: docs/architecture.md, "Worker
 * processes"): regions backed by a memfd, mapped MAP_SHARED in this process and, in a worker
 * that was given a region's descriptor, at the same address, so that a pointer into it names
 * the same bytes in both. The pool, ferry_host_alloc memory and a pipeline's slots are to live
 * in such regions, each worker registering them with its own CUDA context.
 *
 * The same address must be free in the worker. Workers are forked from a helper forked early
 * (zygote.h), whose address space is this process's of then; an address this process picks
 * later may be taken there (memory this process has unmapped since, the helper's own). So the
 * regions are placed in an arena: address space reserved (PROT_NONE, no memory) before the
 * helper is forked, and so reserved in every worker too; a region is mapped over its part of
 * the reservation, here and in a worker, and freed back to it.
 *
 * The process layer includes base alone (scripts/check-layers.sh). */
#ifndef FERRY_PROC_SHM_H
#define FERRY_PROC_SHM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__SHM_ARENA_HOLES 256

typedef struct ferry__shm_arena {
    void *base;   /* the reservation; NULL when none */
    size_t bytes; /* its size, a multiple of the huge page size (2 MiB) */
    pthread_mutex_t mu;
    struct {
        size_t off, bytes;
    } free[FERRY__SHM_ARENA_HOLES]; /* the free ranges, by offset, none adjacent */
    unsigned nfree;
} ferry__shm_arena_t;

typedef struct ferry__shm {
    int fd;          /* the memfd (close-on-exec); -1 when none */
    void *base;      /* where it is mapped, inside its arena; NULL when none */
    size_t bytes;    /* its size, a multiple of 2 MiB */
    bool huge;       /* transparent huge pages were asked for and the kernel took the advice */
    uint64_t serial; /* this process's count of regions made, at this one: a worker that has a
                        region of another serial at this place maps this one anew */
    ferry__shm_arena_t *arena;
} ferry__shm_t;
#define FERRY__SHM_INIT                                                                            \
    {                                                                                              \
        .fd = -1                                                                                   \
    }

/* Reserve @bytes of address space (rounded up to 2 MiB; no memory, no swap) in @a. Call it
 * before the helper is forked. Returns 0, FERRY_EINVAL (NULL, 0 bytes), FERRY_ENOMEM (mmap
 * refused, errno named). */
int ferry__shm_arena_reserve(size_t bytes, ferry__shm_arena_t *a);

/* Give the reservation back (every region of it destroyed first). NULL or none: a no-op. */
void ferry__shm_arena_release(ferry__shm_arena_t *a);

/* Make a region of at least @bytes (rounded up to 2 MiB), zero-filled, at the lowest free
 * place of @a that fits, mapped here, named "ferry:@name" in /proc/PID/maps. Asks for
 * transparent huge pages (madvise: shmem honours it where /sys/kernel/mm/transparent_hugepage/
 * shmem_enabled says advise or always). Thread-safe. Returns 0, FERRY_EINVAL (NULL @a, @out
 * or @name, 0 bytes), FERRY_ENOMEM (no room left in @a: its size named; memfd_create,
 * ftruncate or mmap refused: the call and errno named); *@out is FERRY__SHM_INIT on an error. */
int ferry__shm_create(ferry__shm_arena_t *a, size_t bytes, const char *name, ferry__shm_t *out);

/* In a worker: map @bytes of @fd at @base, which must lie inside the arena @a_base .. @a_base +
 * @a_bytes that the worker inherited. Returns 0, FERRY_EINVAL (outside it), FERRY_EIO (mmap
 * refused, errno named). */
int ferry__shm_map_at(int fd, void *base, size_t bytes, void *a_base, size_t a_bytes);

/* In a worker: give [@base, @base + @bytes), mapped by ferry__shm_map_at, back to the
 * reservation (the region's memory goes when no process maps it). */
void ferry__shm_unmap_at(void *base, size_t bytes);

/* Whether [@p, @p + @n) lies inside @s (false for NULL or an empty region). */
bool ferry__shm_holds(const ferry__shm_t *s, const void *p, size_t n);

/* Unmap, close, and give its place back to its arena (reserved again). NULL, or a region never
 * made, is a no-op; *@s is FERRY__SHM_INIT after. Thread-safe. */
void ferry__shm_destroy(ferry__shm_t *s);

#endif
