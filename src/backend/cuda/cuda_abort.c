/* Abort words in device memory. A kernel that polls ferry_should_abort() once per block reads
 * its word from L2; a word in mapped host memory costs every read a PCIe round trip, and the
 * reads queue (FACTS.md: a byte-wise kernel over 8 MiB, one read per block, 13.5 us without
 * the read, 2,214 us with it). The host raises a word on a stream of its own at the greatest
 * priority with cuStreamWriteValue64 (a stream memory operation, which needs neither an SM nor
 * a copy engine: a grid that holds every SM does not delay it), or, where the driver lacks
 * it, with an 8-byte copy from a pinned mirror. */
#include <string.h>

#include "backend/cuda/cuda_internal.h"

#define STRIDE 64u /* bytes between words: one word per 64-byte sector */
#define SLAB   ((size_t)FERRY_CUDA_ABORT_WORDS * STRIDE)

void ferry__cuda_abort_open(struct ferry_be_device *dev)
{
    pthread_mutex_init(&dev->abort.mu, NULL);
}

void ferry__cuda_abort_close(struct ferry_be_device *dev)
{
    struct ferry_cuda_abort *a = &dev->abort;
    if (a->ready && a->ever_raised) {
        /* A kernel that ignored its abort may still run: freeing would wait for it. */
        ferry_log(FERRY_LOG_DEBUG, "cuda",
                  "device %d: abort words were raised: their %zu "
                  "bytes stay allocated until the process ends",
                  dev->index, SLAB);
    } else if (a->ready) {
        cudaStreamDestroy(a->stream);
        cudaFree(a->slab);
        cudaFreeHost(a->mirror);
    }
    pthread_mutex_destroy(&a->mu);
}

/* The slab, its mirror and the stream, on the first word. Under mu; the device is current. */
static int build(struct ferry_be_device *dev)
{
    struct ferry_cuda_abort *a = &dev->abort;
    int rc;
    cudaError_t e = cudaHostAlloc((void **)&a->mirror, SLAB, cudaHostAllocPortable);
    if (e != cudaSuccess)
        return ferry__cuda_fail(e, "cudaHostAlloc(%zu bytes) for the abort words", SLAB);
    memset(a->mirror, 0, SLAB);
    e = cudaMalloc((void **)&a->slab, SLAB);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaMalloc(%zu bytes) for the abort words", SLAB);
        goto out_mirror;
    }
    e = cudaStreamCreateWithPriority(&a->stream, cudaStreamNonBlocking, dev->prio_greatest);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaStreamCreateWithPriority for the abort words");
        goto out_slab;
    }
    /* Zeroed with a copy, not a memset (which may be a kernel), and waited for once. */
    e = cudaMemcpyAsync(a->slab, a->mirror, SLAB, cudaMemcpyHostToDevice, a->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(a->stream);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "zeroing the abort words");
        goto out_stream;
    }
    /* The driver's stream write, tried once on word 0 (already zero). */
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault, &q);
    if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && fn != NULL) {
        memcpy(&a->write_value, &fn, sizeof(fn)); /* ISO C: no cast from void * */
        int r = a->write_value(a->stream, (uint64_t)(uintptr_t)a->slab, 0, 0);
        if (r == 0 && cudaStreamSynchronize(a->stream) == cudaSuccess) {
            ferry_log(FERRY_LOG_DEBUG, "cuda", "device %d: abort words raised by stream writes",
                      dev->index);
        } else {
            ferry_log(FERRY_LOG_INFO, "cuda",
                      "device %d: cuStreamWriteValue64 answered %d: abort words raised by "
                      "8-byte copies",
                      dev->index, r);
            a->write_value = NULL;
        }
    }
    a->ready = true;
    return 0;
out_stream:
    cudaStreamDestroy(a->stream);
out_slab:
    cudaFree(a->slab);
out_mirror:
    cudaFreeHost(a->mirror);
    a->mirror = NULL;
    a->slab = NULL;
    return rc;
}

int ferry__cuda_abort_word_create(struct ferry_be_device *dev, volatile uint64_t **out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: abort_word_create: NULL device or out");
    struct ferry_cuda_abort *a = &dev->abort;
    int rc = ferry__cuda_use_device(dev->index);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&a->mu);
    if (!a->ready && (rc = build(dev)) != 0)
        goto out;
    /* A word never raised first: it is still zero, and needs no copy. */
    int pick = -1;
    for (int i = 0; i < FERRY_CUDA_ABORT_WORDS && pick < 0; i++)
        if (!(a->used >> i & 1) && !(a->raised >> i & 1))
            pick = i;
    for (int i = 0; i < FERRY_CUDA_ABORT_WORDS && pick < 0; i++)
        if (!(a->used >> i & 1))
            pick = i;
    if (pick < 0) {
        rc = ferry__error(FERRY_ENOMEM, "cuda: all %d abort words of device %d are in use",
                          FERRY_CUDA_ABORT_WORDS, dev->index);
        goto out;
    }
    unsigned char *word = a->slab + (size_t)pick * STRIDE;
    if (a->raised >> pick & 1) {
        /* Raised by an earlier pipeline: zeroed behind its raises, on the same stream. */
        uint64_t *src = (uint64_t *)(void *)(a->mirror + (size_t)pick * STRIDE);
        __atomic_store_n(src, 0, __ATOMIC_RELEASE);
        cudaError_t e = cudaMemcpyAsync(word, src, 8, cudaMemcpyHostToDevice, a->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(a->stream);
        if (e != cudaSuccess) {
            rc = ferry__cuda_fail(e, "zeroing abort word %d", pick);
            goto out;
        }
        a->raised &= ~(1ull << pick);
    }
    a->used |= 1ull << pick;
    *out = (volatile uint64_t *)(void *)word;
out:
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* The index of @word in the slab, or -1 when it is not one of ours. */
static int word_index(const struct ferry_cuda_abort *a, const volatile uint64_t *word)
{
    const unsigned char *w = (const unsigned char *)(uintptr_t)word;
    if (!a->ready || w < a->slab || w >= a->slab + SLAB || (size_t)(w - a->slab) % STRIDE)
        return -1;
    return (int)((size_t)(w - a->slab) / STRIDE);
}

void ferry__cuda_abort_word_destroy(struct ferry_be_device *dev, volatile uint64_t *word)
{
    if (dev == NULL || word == NULL)
        return;
    struct ferry_cuda_abort *a = &dev->abort;
    pthread_mutex_lock(&a->mu);
    int i = word_index(a, word);
    if (i >= 0)
        a->used &= ~(1ull << i);
    pthread_mutex_unlock(&a->mu);
}

int ferry__cuda_abort_raise(struct ferry_be_device *dev, const volatile uint64_t *word,
                            uint64_t upto)
{
    if (dev == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: abort_kernels: NULL device");
    struct ferry_cuda_abort *a = &dev->abort;
    pthread_mutex_lock(&a->mu);
    int i = word_index(a, word);
    if (i < 0) {
        /* A word in mapped host memory: the caller stored it, kernels read it there. */
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    int rc = ferry__cuda_use_device(dev->index);
    if (rc == 0) {
        /* The mirror only grows: a copy still queued that reads a later value delivers a
         * later raise, which is what the word is for. */
        uint64_t *src = (uint64_t *)(void *)(a->mirror + (size_t)i * STRIDE);
        if (__atomic_load_n(src, __ATOMIC_RELAXED) < upto)
            __atomic_store_n(src, upto, __ATOMIC_RELEASE);
        cudaError_t e =
            cudaMemcpyAsync((void *)(uintptr_t)word, src, 8, cudaMemcpyHostToDevice, a->stream);
        if (e != cudaSuccess)
            rc = ferry__cuda_fail(e, "raising abort word %d to %llu", i, (unsigned long long)upto);
        a->raised |= 1ull << i;
        a->ever_raised = true;
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}
