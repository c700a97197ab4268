/* The CPU as a device of a set: a FIFO of parts, each cut into chunks that the device's threads
 * take in order (several threads on the chunks of one part), the stage's CPU function from the
 * part's input to its output. The part calls back when its last chunk is done. See
 * set_cpu.h for the clock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/set_cpu.h"

#define CPUDEV_MAX_THREADS 256
#define CPUDEV_MIN_PIECE   (64u << 10)

typedef struct cpart {
    ferry_batch_t b;
    uint64_t batch_id;
    size_t base_off;
    size_t piece; /* bytes per chunk run: the chunk, or less to spread a small part */
    uint32_t nchunks, next, left;
    int status;
    uint64_t submit_ns, done_ns;
    uint64_t work_ns; /* its chunks' time, summed */
    bool probe;       /* timed, not counted (ferry__cpudev_submit) */
    ferry_done_fn cb;
    void *arg;
    struct cpart *next_part;
} cpart_t;

struct ferry__cpudev {
    ferry_stage_t stage;
    size_t chunk;
    unsigned lanes, nthreads;
    bool virt;
    int nice;        /* real clocks: the threads' nice increment (option cpu_nice) */
    double mem_bpns; /* bytes per ns through the host's memory; 0: not modelled */
    pthread_mutex_t lock;
    pthread_cond_t work, idle;
    cpart_t *head, *tail;
    unsigned inflight;
    bool stop;
    pthread_t th[CPUDEV_MAX_THREADS];
    bool started[CPUDEV_MAX_THREADS];
    uint64_t seq;
    /* figures */
    uint64_t chunks, bytes, busy_ns, first_ns, last_ns;
    bool any;
};

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A chunk of @p (@n bytes) ran from @t0 to @t1 on this thread's clock. Under c->lock. */
static void account(ferry__cpudev_t *c, cpart_t *p, size_t n, uint64_t t0, uint64_t t1)
{
    uint64_t dur = t1 > t0 ? t1 - t0 : 1;
    p->work_ns += dur;
    if (!p->probe) {
        c->busy_ns += dur;
        c->chunks++;
        c->bytes += n;
    }
    if (c->virt)
        return; /* placed on the clock when the part ends (place) */
    if (!p->probe) {
        if (!c->any || t0 < c->first_ns)
            c->first_ns = t0;
        c->any = true;
        c->last_ns = t1 > c->last_ns ? t1 : c->last_ns;
    }
    p->done_ns = t1 > p->done_ns ? t1 : p->done_ns;
}

/* The virtual clock: the device serves its parts one after another, each for its chunks' time
 * over the lanes (they run side by side), or its bytes through the host's memory at mem_bpns
 * when that takes longer. Under c->lock, when @p's last chunk is done. */
static void place(ferry__cpudev_t *c, cpart_t *p)
{
    double t = (double)p->work_ns / (double)c->lanes;
    if (c->mem_bpns > 0 && (double)p->b.bytes / c->mem_bpns > t)
        t = (double)p->b.bytes / c->mem_bpns;
    c->any |= !p->probe; /* a probe alone: no elapsed time of the device's own work */
    p->submit_ns = c->last_ns;
    c->last_ns += (uint64_t)t + 1;
    p->done_ns = c->last_ns;
}

/* Run chunk @k of @p on this thread (@tmp: two chunks of scratch). Returns the CPU function's
 * result, or the prepare's. */
static int run_chunk(ferry__cpudev_t *c, cpart_t *p, uint32_t k, uint64_t seq, unsigned char *tmp,
                     uint64_t *t0, uint64_t *t1)
{
    size_t off = (size_t)k * p->piece;
    size_t n = p->b.bytes - off < p->piece ? p->b.bytes - off : p->piece;
    const void *in = p->b.in != NULL ? (const unsigned char *)p->b.in + off : NULL;
    int rc = 0;
    if (p->b.prepare != NULL) {
        rc = p->b.prepare(tmp, n, off, p->b.prepare_arg);
        in = tmp;
    }
    ferry_kernel_args_t a = {.size = sizeof(a),
                             .in = in,
                             .out = p->b.out != NULL ? (unsigned char *)p->b.out + off
                                                     : tmp + c->chunk,
                             .bytes = n,
                             .offset = p->base_off + off,
                             .batch_id = p->batch_id,
                             .chunk = (uint32_t)((p->base_off + off) / c->chunk),
                             .seq = seq,
                             .batch_user = p->b.user};
    *t0 = c->virt ? thread_cpu_ns() : ferry__mono_ns();
    if (rc == 0)
        rc = ferry__stage_cpu_run(&c->stage, &a);
    *t1 = c->virt ? thread_cpu_ns() : ferry__mono_ns();
    return rc;
}

static void finish(ferry__cpudev_t *c, cpart_t *p)
{
    /* A probe on real clocks reports the time its pieces would take with every thread busy:
     * their summed run time over the threads. Its own span is mostly the threads' waking (a
     * 256 KiB probe of fma at intensity 64 spans 4 pieces of 50 us each plus the wake-ups:
     * it read 0.7-1.5 GB/s on an H100 host whose 8 threads ran that stage at 10.9, and the CPU
     * then never got the chunk's probe that would have rated it). The chunk's probe, a piece
     * per thread, still measures what the threads' memory traffic and the other threads on the
     * host leave them. */
    if (p->probe && !c->virt && p->work_ns > 0) {
        uint64_t full = p->work_ns / (c->nthreads > 0 ? c->nthreads : 1);
        p->done_ns = p->submit_ns + (full > 0 ? full : 1);
    }
    ferry_batch_result_t r = {.id = p->batch_id,
                              .status = p->status,
                              .where = p->status != 0 ? FERRY_DONE_FAILED : FERRY_DONE_CPU,
                              .in = p->b.in,
                              .out = p->b.out,
                              .bytes = p->b.bytes,
                              .chunks = p->nchunks,
                              .submit_ns = p->submit_ns,
                              .done_ns = p->done_ns > p->submit_ns ? p->done_ns : p->submit_ns};
    p->cb(&r, p->arg);
    free(p);
    pthread_mutex_lock(&c->lock);
    if (--c->inflight == 0)
        pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->lock);
}

/* On real clocks the device's threads yield to the host's others (option cpu_nice): a GPU's
 * submission and completion threads, the verifiers and the application come first, and the CPU
 * takes the cores they leave. Linux applies setpriority to one thread by its id; failing to
 * lower a priority is harmless (raising it back is what needs a privilege). */
static void yield_priority(const ferry__cpudev_t *c)
{
    if (c->virt || c->nice <= 0)
        return;
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (cur == -1 && errno != 0)
        return;
    int want = cur + c->nice > 19 ? 19 : cur + c->nice;
    if (setpriority(PRIO_PROCESS, tid, want) != 0)
        ferry_log(FERRY_LOG_DEBUG, "cpu", "cannot lower the CPU device's thread priority: %s",
                  strerror(errno));
}

static void *cpudev_main(void *arg)
{
    ferry__cpudev_t *c = arg;
    yield_priority(c);
    unsigned char *tmp = malloc(2 * c->chunk);
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (c->head == NULL && !c->stop)
            pthread_cond_wait(&c->work, &c->lock);
        if (c->head == NULL)
            break;
        cpart_t *p = c->head;
        uint32_t k = p->next++;
        if (p->next == p->nchunks && (c->head = p->next_part) == NULL)
            c->tail = NULL;
        uint64_t seq = ++c->seq;
        pthread_mutex_unlock(&c->lock);
        uint64_t t0 = 0, t1 = 0;
        int rc = tmp != NULL ? run_chunk(c, p, k, seq, tmp, &t0, &t1)
                             : ferry__error(FERRY_ENOMEM, "the CPU device: no scratch memory");
        size_t off = (size_t)k * p->piece;
        pthread_mutex_lock(&c->lock);
        account(c, p, p->b.bytes - off < p->piece ? p->b.bytes - off : p->piece, t0, t1);
        if (rc != 0 && p->status == 0)
            p->status = rc > 0 || rc < FERRY_ERR_MIN_ ? FERRY_EKERNEL : rc;
        if (--p->left == 0) {
            if (c->virt)
                place(c, p);
            pthread_mutex_unlock(&c->lock);
            finish(c, p);
            pthread_mutex_lock(&c->lock);
        }
    }
    pthread_mutex_unlock(&c->lock);
    free(tmp);
    return NULL;
}

int ferry__cpudev_create(const ferry_stage_t *stage, size_t chunk, unsigned lanes, bool virt,
                         double mem_gbps, int nice, ferry__cpudev_t **out)
{
    if (stage == NULL || stage->cpu == NULL)
        return ferry__error(FERRY_EINVAL, "the CPU as a device: stage '%s' has no CPU function",
                            stage != NULL && stage->name != NULL ? stage->name : "?");
    ferry__cpudev_t *c = calloc(1, sizeof(*c));
    lanes = lanes < 1 ? 1 : lanes > CPUDEV_MAX_THREADS ? CPUDEV_MAX_THREADS : lanes;
    if (c == NULL)
        return ferry__error(FERRY_ENOMEM, "the CPU as a device: out of memory");
    c->stage = *stage;
    c->stage.name = NULL; /* borrowed: not kept */
    c->chunk = chunk > 0 ? chunk : 1;
    c->lanes = lanes;
    c->virt = virt;
    c->nice = nice;
    c->mem_bpns = mem_gbps > 0 ? mem_gbps : 0; /* GB/s is bytes per ns */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->nthreads = cpus > 0 && (unsigned)cpus < lanes ? (unsigned)cpus : lanes;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->idle, NULL);
    for (unsigned i = 0; i < c->nthreads; i++)
        if (ferry__thread_start(&c->th[i], &c->started[i], cpudev_main, c, "ferry-cpu") != 0) {
            ferry__cpudev_destroy(c);
            return ferry__error(FERRY_ENOMEM, "the CPU as a device: cannot start thread %u", i);
        }
    *out = c;
    return 0;
}

int ferry__cpudev_submit(ferry__cpudev_t *c, const ferry_batch_t *part, uint64_t batch_id,
                         size_t base_off, bool probe, ferry_done_fn cb, void *arg)
{
    cpart_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ferry__error(FERRY_ENOMEM, "the CPU as a device: a part record");
    p->b = *part;
    p->batch_id = batch_id;
    p->base_off = base_off;
    p->probe = probe;
    /* a part smaller than a chunk per thread (the probe) is spread over the threads, in
     * pieces of at least CPUDEV_MIN_PIECE at the stage's granularity */
    size_t g = c->stage.granularity > 1 ? c->stage.granularity : 1;
    size_t piece = (part->bytes + c->nthreads - 1) / c->nthreads;
    piece = piece > CPUDEV_MIN_PIECE ? piece : CPUDEV_MIN_PIECE;
    piece = (piece + g - 1) / g * g;
    p->piece = piece < c->chunk ? piece : c->chunk;
    p->nchunks = (uint32_t)((part->bytes + p->piece - 1) / p->piece);
    p->left = p->nchunks;
    p->cb = cb;
    p->arg = arg;
    pthread_mutex_lock(&c->lock);
    c->inflight++;
    if (!c->virt)
        p->submit_ns = ferry__mono_ns();
    if (p->nchunks == 0) { /* nothing to run: done now, on its clock */
        if (c->virt)
            p->submit_ns = c->last_ns;
        p->done_ns = p->submit_ns;
        pthread_mutex_unlock(&c->lock);
        finish(c, p);
        return 0;
    }
    if (c->tail != NULL)
        c->tail->next_part = p;
    else
        c->head = p;
    c->tail = p;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

size_t ferry__cpudev_steal(ferry__cpudev_t *c, size_t max_bytes, void **arg, size_t *off)
{
    size_t got = 0;
    pthread_mutex_lock(&c->lock);
    cpart_t *p = NULL; /* the newest part with a piece to spare */
    for (cpart_t *q = c->head; q != NULL; q = q->next_part)
        if (!q->probe && q->nchunks > q->next + 1)
            p = q;
    /* whole pieces (chunks, or a small part's pieces at the stage's granularity), never its
     * last one not started: the part then still ends on one of this device's threads, which
     * calls it back */
    if (p != NULL) {
        size_t spare = p->nchunks - (p->next + 1), k = max_bytes / p->piece;
        k = k < 1 ? 1 : k > spare ? spare : k;
        uint32_t from = p->nchunks - (uint32_t)k;
        *off = (size_t)from * p->piece;
        got = p->b.bytes - *off;
        *arg = p->arg;
        p->left -= p->nchunks - from;
        p->nchunks = from;
        p->b.bytes = *off;
    }
    pthread_mutex_unlock(&c->lock);
    return got;
}

void ferry__cpudev_drain(ferry__cpudev_t *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->inflight > 0)
        pthread_cond_wait(&c->idle, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

void ferry__cpudev_stats(ferry__cpudev_t *c, ferry_pipeline_stats_t *out)
{
    ferry_pipeline_stats_t s = FERRY_PIPELINE_STATS_INIT;
    pthread_mutex_lock(&c->lock);
    s.chunks = c->chunks; /* chunks_cpu counts a GPU's fallback: none here */
    s.bytes_h2d = s.bytes_d2h = c->bytes;
    s.elapsed_ns = c->any ? c->last_ns - c->first_ns : 0;
    s.busy_compute_ns = c->busy_ns / c->lanes; /* virtual: the lanes' share of the clock */
    s.chunk_bytes = c->chunk;
    s.depth = c->lanes;
    s.host_pinned = true; /* nothing to pin: the CPU reads the batches where they are */
    pthread_mutex_unlock(&c->lock);
    double el = (double)s.elapsed_ns;
    s.gbps_h2d = s.gbps_d2h = el > 0 ? (double)s.bytes_h2d / el : 0;
    s.overlap = el > 0 ? (double)s.busy_compute_ns / el : 0;
    *out = s;
}

unsigned ferry__cpudev_lanes(const ferry__cpudev_t *c)
{
    return c->lanes;
}

void ferry__cpudev_destroy(ferry__cpudev_t *c)
{
    if (c == NULL)
        return;
    ferry__cpudev_drain(c);
    ferry__flag_set_wake(&c->lock, &c->stop, &c->work, NULL);
    for (unsigned i = 0; i < c->nthreads; i++)
        if (c->started[i])
            pthread_join(c->th[i], NULL);
    pthread_cond_destroy(&c->idle);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
