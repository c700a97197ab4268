/* Host memory for copies: mapped aligned, on transparent huge pages where the system allows
 * (pinning 2 x 4 GiB took 6.2 s in 4 KiB pages and 2.0 s in 2 MiB pages on the H200 host,
 * touching included), touched by several threads on the caller's NUMA node, then pinned.
 * ferry_pool_create maps its slab here too. */
#include "core/host_mem.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/base.h"
#include "core/runtime.h"

#define HUGE_BYTES      ((size_t)2 << 20)
#define TOUCH_THREADS   8
#define TOUCH_MIN_SHARE ((size_t)64 << 20) /* below this a thread more does not pay */

void *ferry__host_map(size_t bytes, size_t align, size_t *mapped)
{
    size_t page = 4096;
    if (bytes >= HUGE_BYTES && align < HUGE_BYTES)
        align = HUGE_BYTES;
    if (align < page)
        align = page;
    size_t unit = bytes >= HUGE_BYTES ? HUGE_BYTES : page;
    if (bytes > SIZE_MAX - unit - align)
        return NULL;
    size_t total = (bytes + unit - 1) / unit * unit;
    /* Alignments above the page size are honoured by over-mapping and trimming. */
    size_t map_bytes = total + (align > page ? align : 0);
    void *m = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
    if (a != (uintptr_t)m)
        munmap(m, a - (uintptr_t)m);
    size_t tail = (uintptr_t)m + map_bytes - (a + total);
    if (tail)
        munmap((void *)(a + total), tail);
    /* A hint: where transparent huge pages are "never", or the call is refused, the memory
     * stays in small pages and works the same. */
    if (unit == HUGE_BYTES)
        (void)madvise((void *)a, total, MADV_HUGEPAGE);
    *mapped = total;
    return (void *)a;
}

void ferry__host_unmap(void *p, size_t mapped)
{
    if (p != NULL)
        munmap(p, mapped);
}

struct touch_part {
    unsigned char *p;
    size_t n;
};

static void *touch_one(void *arg)
{
    struct touch_part *t = arg;
    memset(t->p, 0, t->n);
    return NULL;
}

void ferry__host_touch(void *p, size_t bytes)
{
    size_t nt = bytes / TOUCH_MIN_SHARE;
    if (nt > TOUCH_THREADS)
        nt = TOUCH_THREADS;
    if (nt < 2) {
        memset(p, 0, bytes);
        return;
    }
    struct touch_part part[TOUCH_THREADS];
    pthread_t th[TOUCH_THREADS];
    bool started[TOUCH_THREADS] = {false};
    size_t share = (bytes / nt + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
    for (size_t i = 0, off = 0; i < nt; i++, off += share) {
        part[i].p = (unsigned char *)p + off;
        part[i].n = off >= bytes ? 0 : (bytes - off < share ? bytes - off : share);
        /* a thread that cannot start leaves its share to this one */
        started[i] = i > 0 && pthread_create(&th[i], NULL, touch_one, &part[i]) == 0;
    }
    for (size_t i = 0; i < nt; i++)
        if (!started[i])
            touch_one(&part[i]);
    for (size_t i = 1; i < nt; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

/* The mapped size of each ferry_host_alloc block, by start; under a lock of its own (few
 * blocks, taken and freed rarely). */
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block {
    void *p;
    size_t mapped;
    ferry__shm_t *shm; /* isolation=process: the shared region it is; NULL otherwise */
} * blocks;
static size_t nblocks, blocks_cap;

static int block_add(void *p, size_t mapped, ferry__shm_t *shm)
{
    pthread_mutex_lock(&blocks_lock);
    int rc = 0;
    if (nblocks == blocks_cap) {
        size_t cap = blocks_cap ? 2 * blocks_cap : 16;
        struct block *nb = realloc(blocks, cap * sizeof(*nb));
        if (nb == NULL)
            rc = FERRY_ENOMEM;
        else
            blocks = nb, blocks_cap = cap;
    }
    if (rc == 0)
        blocks[nblocks++] = (struct block){p, mapped, shm};
    pthread_mutex_unlock(&blocks_lock);
    return rc;
}

/* Remove @p's block; its mapped size, 0 when @p is no block; its shared region in *@shm. */
static size_t block_take(void *p, ferry__shm_t **shm)
{
    size_t mapped = 0;
    *shm = NULL;
    pthread_mutex_lock(&blocks_lock);
    for (size_t i = 0; i < nblocks; i++)
        if (blocks[i].p == p) {
            mapped = blocks[i].mapped;
            *shm = blocks[i].shm;
            blocks[i] = blocks[--nblocks];
            break;
        }
    if (nblocks == 0) {
        free(blocks);
        blocks = NULL;
        blocks_cap = 0;
    }
    pthread_mutex_unlock(&blocks_lock);
    return mapped;
}

/* isolation=process: a region of the runtime's arena, for ferry_host_alloc. */
static int shared_map(ferry_runtime_t *rt, size_t bytes, ferry__shm_t **out)
{
    ferry__shm_t *s = malloc(sizeof(*s));
    if (s == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_host_alloc: out of memory");
    int rc = ferry__shm_create(&rt->arena, bytes, "host", s);
    if (rc != 0) {
        free(s);
        return ferry__error(rc,
                            "%zu bytes of memory shared with worker processes: %s (option "
                            "worker_reserve sets how much there is)",
                            bytes, ferry_last_error());
    }
    *out = s;
    return 0;
}

static void unmap_block(void *p, size_t mapped, ferry__shm_t *shm)
{
    if (shm != NULL) {
        ferry__shm_destroy(shm);
        free(shm);
    } else {
        ferry__host_unmap(p, mapped);
    }
}

void *ferry__host_shared_map(ferry_runtime_t *rt, size_t bytes, size_t *mapped)
{
    ferry__shm_t *shm = NULL;
    if (shared_map(rt, bytes, &shm) != 0)
        return NULL;
    if (block_add(shm->base, shm->bytes, shm) != 0) {
        ferry__error(FERRY_ENOMEM, "shared memory: out of memory");
        unmap_block(shm->base, shm->bytes, shm);
        return NULL;
    }
    *mapped = shm->bytes;
    ferry__rt_share(rt, shm->base, shm->bytes, shm->serial);
    return shm->base;
}

void ferry__host_shared_unmap(ferry_runtime_t *rt, void *p)
{
    ferry__shm_t *shm;
    size_t mapped = block_take(p, &shm);
    if (shm != NULL) {
        ferry__rt_share(rt, shm->base, 0, shm->serial);
        unmap_block(p, mapped, shm);
    }
}

int ferry_host_alloc(ferry_device_t *dev, size_t bytes, void **out)
{
    if (dev == NULL || out == NULL || bytes == 0)
        return ferry__error(FERRY_EINVAL, "ferry_host_alloc: NULL argument or zero bytes");
    if (bytes > ((size_t)1 << 40))
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_EINVAL,
                                                    "ferry_host_alloc: %zu bytes (accepted: 1 "
                                                    "to 1T)",
                                                    bytes));
    size_t mapped;
    ferry__shm_t *shm = NULL;
    void *p = NULL;
    if (dev->rt->zyg != NULL) { /* isolation=process: shared with the workers */
        int src = shared_map(dev->rt, bytes, &shm);
        if (src != 0)
            return ferry__rt_fail(dev->rt, src);
        p = shm->base;
        mapped = shm->bytes;
    } else if ((p = ferry__host_map(bytes, 0, &mapped)) == NULL) {
        return ferry__rt_fail(
            dev->rt,
            ferry__error(FERRY_ENOMEM, "ferry_host_alloc: mapping %zu bytes failed", bytes));
    }
    /* Pinning faults every page in; touching first, by several threads, is faster and puts
     * the pages on this thread's NUMA node. The simulator pins nothing: its pages come as
     * they are first used (a run's ring of buffers is not all used). */
    if (!ferry_device_is_simulated(dev))
        ferry__host_touch(p, mapped);
    int rc = block_add(p, mapped, shm);
    if (rc != 0)
        ferry__error(rc, "ferry_host_alloc: out of memory");
    else if ((rc = ferry__rt_track(dev, p, mapped, FERRY__REG_ALLOC, "ferry_host_alloc")) != 0)
        block_take(p, &shm);
    if (rc != 0) {
        unmap_block(p, mapped, shm);
        return ferry__rt_fail(dev->rt, rc);
    }
    if (shm != NULL) /* the pipelines in worker processes map it now */
        ferry__rt_share(dev->rt, shm->base, shm->bytes, shm->serial);
    *out = p;
    return 0;
}

int ferry_host_free(ferry_device_t *dev, void *p)
{
    if (p == NULL)
        return 0;
    if (dev == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_host_free: NULL device");
    int rc = ferry__rt_untrack(dev, p, FERRY__REG_ALLOC, "ferry_host_free");
    if (rc != 0)
        return ferry__rt_fail(dev->rt, rc);
    ferry__shm_t *shm;
    size_t mapped = block_take(p, &shm);
    if (shm != NULL)
        ferry__rt_share(dev->rt, shm->base, 0, shm->serial);
    unmap_block(p, mapped, shm);
    return 0;
}

bool ferry__host_shared(const void *p, size_t n, const ferry__shm_arena_t *arena,
                        ferry__host_shared_t *out)
{
    bool found = false;
    pthread_mutex_lock(&blocks_lock);
    for (size_t i = 0; i < nblocks && !found; i++) {
        const ferry__shm_t *s = blocks[i].shm;
        if (s != NULL && s->arena == arena && ferry__shm_holds(s, p, n)) {
            *out = (ferry__host_shared_t){.base = s->base, .bytes = s->bytes, .serial = s->serial};
            found = true;
        }
    }
    pthread_mutex_unlock(&blocks_lock);
    return found;
}

int ferry__host_shared_fd(uint64_t serial)
{
    int fd = -1;
    pthread_mutex_lock(&blocks_lock);
    for (size_t i = 0; i < nblocks && fd < 0; i++)
        if (blocks[i].shm != NULL && blocks[i].shm->serial == serial)
            fd = fcntl(blocks[i].shm->fd, F_DUPFD_CLOEXEC, 0);
    pthread_mutex_unlock(&blocks_lock);
    return fd;
}

void ferry__host_shared_each(const ferry__shm_arena_t *arena,
                             void (*fn)(void *arg, const ferry__host_shared_t *g), void *arg)
{
    pthread_mutex_lock(&blocks_lock);
    size_t n = 0;
    ferry__host_shared_t *all = malloc((nblocks ? nblocks : 1) * sizeof(*all));
    for (size_t i = 0; all != NULL && i < nblocks; i++) {
        const ferry__shm_t *s = blocks[i].shm;
        if (s != NULL && s->arena == arena)
            all[n++] = (ferry__host_shared_t){s->base, s->bytes, s->serial};
    }
    pthread_mutex_unlock(&blocks_lock);
    for (size_t i = 0; i < n; i++) /* not under the lock: @fn takes it (ferry__host_shared_fd) */
        fn(arg, &all[i]);
    free(all);
}
