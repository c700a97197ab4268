/* Shared host memory regions in a reserved arena (shm.h): memfd, ftruncate, mmap MAP_FIXED over
 * the reservation, a first-fit list of free ranges. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"
#include "proc/shm.h"

#define SHM_ALIGN ((size_t)2 << 20) /* a huge page: regions can be backed by them */

static size_t round_up(size_t n)
{
    return (n + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
}

int ferry__shm_arena_reserve(size_t bytes, ferry__shm_arena_t *a)
{
    if (a == NULL || bytes == 0 || bytes > SIZE_MAX / 2)
        return ferry__error(FERRY_EINVAL,
                            "shared memory: an arena needs a size above 0 (got "
                            "%zu bytes)",
                            bytes);
    memset(a, 0, sizeof(*a));
    bytes = round_up(bytes);
    /* one huge page more, to align the base */
    void *p = mmap(NULL, bytes + SHM_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return ferry__error(FERRY_ENOMEM, "shared memory: reserving %zu bytes of address space: %s",
                            bytes, strerror(errno));
    uintptr_t b = ((uintptr_t)p + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
    if (b > (uintptr_t)p)
        munmap(p, b - (uintptr_t)p);
    if ((uintptr_t)p + SHM_ALIGN > b)
        munmap((void *)(b + bytes), (uintptr_t)p + SHM_ALIGN - b);
    a->base = (void *)b;
    a->bytes = bytes;
    a->free[0].off = 0;
    a->free[0].bytes = bytes;
    a->nfree = 1;
    pthread_mutex_init(&a->mu, NULL);
    return 0;
}

void ferry__shm_arena_release(ferry__shm_arena_t *a)
{
    if (a == NULL || a->base == NULL)
        return;
    munmap(a->base, a->bytes);
    pthread_mutex_destroy(&a->mu);
    memset(a, 0, sizeof(*a));
}

/* Take @bytes from the first free range that fits: its offset, or SIZE_MAX. Under a->mu. */
static size_t take(ferry__shm_arena_t *a, size_t bytes)
{
    for (unsigned i = 0; i < a->nfree; i++) {
        if (a->free[i].bytes < bytes)
            continue;
        size_t off = a->free[i].off;
        a->free[i].off += bytes;
        a->free[i].bytes -= bytes;
        if (a->free[i].bytes == 0) {
            memmove(&a->free[i], &a->free[i + 1], sizeof(a->free[0]) * (a->nfree - i - 1));
            a->nfree--;
        }
        return off;
    }
    return SIZE_MAX;
}

/* Give [@off, @off + @bytes) back, merged with its neighbours. Under a->mu. False when the
 * list is full (the range stays reserved, unused). */
static bool give(ferry__shm_arena_t *a, size_t off, size_t bytes)
{
    unsigned i = 0;
    while (i < a->nfree && a->free[i].off < off)
        i++;
    bool prev = i > 0 && a->free[i - 1].off + a->free[i - 1].bytes == off;
    bool next = i < a->nfree && off + bytes == a->free[i].off;
    if (prev && next) {
        a->free[i - 1].bytes += bytes + a->free[i].bytes;
        memmove(&a->free[i], &a->free[i + 1], sizeof(a->free[0]) * (a->nfree - i - 1));
        a->nfree--;
    } else if (prev) {
        a->free[i - 1].bytes += bytes;
    } else if (next) {
        a->free[i].off = off;
        a->free[i].bytes += bytes;
    } else {
        if (a->nfree == FERRY__SHM_ARENA_HOLES)
            return false;
        memmove(&a->free[i + 1], &a->free[i], sizeof(a->free[0]) * (a->nfree - i));
        a->free[i].off = off;
        a->free[i].bytes = bytes;
        a->nfree++;
    }
    return true;
}

/* Put the reservation back over [@p, @p + @n). */
static void reserve_again(void *p, size_t n)
{
    void *q = mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    (void)q; /* MAP_FIXED over our own range: it cannot move */
}

int ferry__shm_create(ferry__shm_arena_t *a, size_t bytes, const char *name, ferry__shm_t *out)
{
    if (out != NULL)
        *out = (ferry__shm_t)FERRY__SHM_INIT;
    if (a == NULL || a->base == NULL || out == NULL || name == NULL || bytes == 0 ||
        bytes > SIZE_MAX / 2)
        return ferry__error(FERRY_EINVAL,
                            "shared memory: a region needs an arena, a name and a size above 0 "
                            "(got %s, %zu bytes)",
                            name != NULL ? name : "NULL", bytes);
    bytes = round_up(bytes);
    pthread_mutex_lock(&a->mu);
    size_t off = take(a, bytes);
    pthread_mutex_unlock(&a->mu);
    if (off == SIZE_MAX)
        return ferry__error(FERRY_ENOMEM,
                            "shared memory: no room for %zu bytes in the arena of %zu bytes "
                            "reserved for worker processes",
                            bytes, a->bytes);
    char full[64];
    snprintf(full, sizeof(full), "ferry:%.50s", name);
    void *at = (char *)a->base + off;
    int rc = 0, e = 0;
    const char *what = "memfd_create";
    int fd = memfd_create(full, MFD_CLOEXEC);
    if (fd < 0) {
        e = errno;
    } else if (ftruncate(fd, (off_t)bytes) != 0) {
        e = errno;
        what = "ftruncate";
    } else if (mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
               MAP_FAILED) {
        e = errno;
        what = "mmap";
        reserve_again(at, bytes);
    }
    if (e != 0) {
        if (fd >= 0)
            close(fd);
        pthread_mutex_lock(&a->mu);
        give(a, off, bytes);
        pthread_mutex_unlock(&a->mu);
        rc = ferry__error(FERRY_ENOMEM, "shared memory: %s(%s, %zu bytes): %s", what, full, bytes,
                          strerror(e));
        return rc;
    }
    out->fd = fd;
    out->base = at;
    out->bytes = bytes;
    out->arena = a;
    static _Atomic uint64_t serials;
    out->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
#ifdef MADV_HUGEPAGE
    out->huge = madvise(at, bytes, MADV_HUGEPAGE) == 0;
#endif
    return 0;
}

int ferry__shm_map_at(int fd, void *base, size_t bytes, void *a_base, size_t a_bytes)
{
    uintptr_t p = (uintptr_t)base, b = (uintptr_t)a_base;
    if (base == NULL || a_base == NULL || p < b || p - b > a_bytes || bytes > a_bytes - (p - b))
        return ferry__error(FERRY_EINVAL,
                            "shared memory: %p (%zu bytes) is not inside the arena at %p (%zu "
                            "bytes)",
                            base, bytes, a_base, a_bytes);
    if (mmap(base, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
        return ferry__error(FERRY_EIO, "shared memory: mmap at %p (%zu bytes): %s", base, bytes,
                            strerror(errno));
    return 0;
}

void ferry__shm_unmap_at(void *base, size_t bytes)
{
    if (base != NULL && bytes > 0)
        reserve_again(base, bytes);
}

bool ferry__shm_holds(const ferry__shm_t *s, const void *p, size_t n)
{
    if (s == NULL || s->base == NULL || p == NULL)
        return false;
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)s->base;
    return a >= b && a - b <= s->bytes && n <= s->bytes - (a - b);
}

void ferry__shm_destroy(ferry__shm_t *s)
{
    if (s == NULL || s->base == NULL) {
        if (s != NULL && s->fd >= 0)
            close(s->fd);
        if (s != NULL)
            *s = (ferry__shm_t)FERRY__SHM_INIT;
        return;
    }
    reserve_again(s->base, s->bytes); /* unmaps the region and keeps its place reserved */
    close(s->fd);
    ferry__shm_arena_t *a = s->arena;
    pthread_mutex_lock(&a->mu);
    give(a, (size_t)((char *)s->base - (char *)a->base), s->bytes);
    pthread_mutex_unlock(&a->mu);
    *s = (ferry__shm_t)FERRY__SHM_INIT;
}
