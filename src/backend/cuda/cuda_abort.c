/* Abort words in device memory. A kernel that polls ferry_should_abort() once per block reads
 * its multiprocessor's copy of its word (ferry.h: FERRY_ABORT_REPLICAS copies) from L2; a word
 * in mapped host memory costs every read a PCIe round trip, and the reads queue (FACTS.md: a
 * byte-wise kernel over 8 MiB, one read per block, 13.5 us without the read, 2,214 us with it).
 * The host raises a word on a stream of its own at the greatest priority with
 * cuStreamWriteValue64, once per copy: a stream memory operation needs neither an SM nor a copy
 * engine, so a grid that holds every SM does not delay it. Where the driver lacks it, a copy
 * of the copies from a pinned mirror does the same (measured on the H200: a 4 KiB copy on that
 * stream can wait behind the copies of a hung chunk's stream; docs/faults.md). */
#include <string.h>

#include "backend/cuda/cuda_internal.h"

/* Bytes a word takes: its copies, raised together. */
#define STRIDE ((size_t)FERRY_ABORT_REPLICAS * FERRY_ABORT_STRIDE)
#define SLAB   ((size_t)FERRY_CUDA_ABORT_WORDS * STRIDE)

void ferry__cuda_abort_open(struct ferry_be_device *dev)
{
    pthread_mutex_init(&dev->abort.mu, NULL);
}

/* Frees what build() made, the stream first; what was not made is NULL. */
static void free_slab(struct ferry_cuda_abort *a)
{
    if (a->stream != NULL)
        cudaStreamDestroy(a->stream);
    if (a->slab != NULL)
        cudaFree(a->slab);
    cudaFreeHost(a->mirror);
    a->stream = NULL;
    a->slab = NULL;
    a->mirror = NULL;
}

void ferry__cuda_abort_close(struct ferry_be_device *dev)
{
    struct ferry_cuda_abort *a = &dev->abort;
    if (a->ready && a->ever_raised) {
        /* A kernel that ignored its abort may still run: freeing would wait for it. */
        ferry_log(FERRY_LOG_DEBUG, "cuda",
                  "device %d: abort words were raised: their %zu bytes stay allocated until "
                  "the process ends",
                  dev->index, SLAB);
    } else if (a->ready) {
        free_slab(a);
    }
    pthread_mutex_destroy(&a->mu);
}

/* Write @value into every copy of the word at @word (device) on the abort stream. */
static int write_word(struct ferry_cuda_abort *a, unsigned char *word, uint64_t value)
{
    if (a->write_value != NULL) {
        for (unsigned r = 0; r < FERRY_ABORT_REPLICAS; r++) {
            int cr = a->write_value(a->stream, (uint64_t)(uintptr_t)(word + r * FERRY_ABORT_STRIDE),
                                    value, 0);
            if (cr != 0)
                return ferry__error(FERRY_EBACKEND, "cuda: cuStreamWriteValue64: CUresult %d", cr);
        }
        return 0;
    }
    /* The mirror only grows between zeroings: a copy still queued that reads a later value
     * delivers a later raise, which is what the word is for. */
    unsigned char *src = a->mirror + (size_t)(word - a->slab);
    for (unsigned r = 0; r < FERRY_ABORT_REPLICAS; r++) {
        uint64_t *c = (uint64_t *)(void *)(src + r * FERRY_ABORT_STRIDE);
        /* Pinned memory a copy engine reads: not _Atomic, so the builtins. */
        if (value == 0 || __atomic_load_n(c, __ATOMIC_RELAXED) < value)
            __atomic_store_n(c, value, __ATOMIC_RELEASE);
    }
    cudaError_t e = cudaMemcpyAsync(word, src, STRIDE, cudaMemcpyHostToDevice, a->stream);
    return e == cudaSuccess ? 0 : ferry__cuda_fail(e, "cudaMemcpyAsync of an abort word");
}

/* The driver's stream write, tried on word 0 (zero, and zero again after). */
static void find_write_value(struct ferry_be_device *dev)
{
    struct ferry_cuda_abort *a = &dev->abort;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == NULL) {
        ferry_log(FERRY_LOG_INFO, "cuda",
                  "device %d: no cuStreamWriteValue64: abort words are raised by copies",
                  dev->index);
        return;
    }
    memcpy(&a->write_value, &fn, sizeof(fn)); /* ISO C: no cast from void * */
    if (write_word(a, a->slab, 0) != 0 || cudaStreamSynchronize(a->stream) != cudaSuccess) {
        ferry_log(FERRY_LOG_INFO, "cuda",
                  "device %d: cuStreamWriteValue64 failed (%s): abort words are raised by "
                  "copies",
                  dev->index, ferry__last_error_text());
        a->write_value = NULL;
    }
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
        goto out_free;
    }
    e = cudaStreamCreateWithPriority(&a->stream, cudaStreamNonBlocking, dev->prio_greatest);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "cudaStreamCreateWithPriority for the abort words");
        goto out_free;
    }
    /* Zeroed with a copy, not a memset (which may be a kernel), and waited for once. */
    e = cudaMemcpyAsync(a->slab, a->mirror, SLAB, cudaMemcpyHostToDevice, a->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(a->stream);
    if (e != cudaSuccess) {
        rc = ferry__cuda_fail(e, "zeroing the abort words");
        goto out_free;
    }
    find_write_value(dev);
    a->ready = true;
    return 0;
out_free:
    free_slab(a);
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
    /* A word never raised first: it is still zero, and needs no write. */
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
        rc = write_word(a, word, 0);
        cudaError_t e = rc == 0 ? cudaStreamSynchronize(a->stream) : cudaSuccess;
        if (e != cudaSuccess)
            rc = ferry__cuda_fail(e, "zeroing abort word %d", pick);
        if (rc != 0)
            goto out;
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
    if (rc == 0)
        rc = write_word(a, a->slab + (size_t)i * STRIDE, upto);
    a->raised |= 1ull << i;
    a->ever_raised = true;
    pthread_mutex_unlock(&a->mu);
    return rc;
}
