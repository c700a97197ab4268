/* The backend registry (in `auto` priority order) and the ferry__be_* wrappers: the one place
 * where a NULL operation becomes FERRY_ENOTSUP. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/base.h"

const ferry_backend_ops_t *const ferry__backends[] = {
#ifdef FERRY_WITH_CUDA
    &ferry__cuda_backend,
#endif
    &ferry__sim_backend,
    NULL,
};

const ferry_backend_ops_t *ferry__backend_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; ferry__backends[i] != NULL; i++)
        if (strcmp(ferry__backends[i]->name, name) == 0)
            return ferry__backends[i];
    return NULL;
}

int ferry__be_wait_any_check(const char *be, ferry_be_event_t *const *evs, size_t n,
                             const size_t *which,
                             ferry_be_device_t *(*dev_of)(const ferry_be_event_t *e))
{
    if (evs == NULL || n == 0 || which == NULL)
        return ferry__error(FERRY_EINVAL, "%s: event_wait_any: no events or NULL which", be);
    for (size_t i = 0; i < n; i++)
        if (evs[i] == NULL || dev_of(evs[i]) != dev_of(evs[0]))
            return ferry__error(FERRY_EINVAL,
                                "%s: event_wait_any: event %zu is NULL or belongs to another "
                                "device",
                                be, i);
    return 0;
}

void ferry__be_props_begin(ferry_device_props_t *out, const char *name, const char *backend,
                           int index, bool simulated)
{
    size_t size = out->size;
    memset(out, 0, sizeof(*out));
    out->size = size;
    ferry__strlcpy(out->name, name, sizeof(out->name));
    ferry__strlcpy(out->backend, backend, sizeof(out->backend));
    out->index = index;
    out->simulated = simulated;
}

void ferry__be_props_gpu(ferry_device_props_t *out, int cc_major, int cc_minor, int sms,
                         int copy_engines, int max_resident_grids, int priority_least,
                         int priority_greatest, uint64_t memory_bytes, uint64_t l2_bytes)
{
    out->cc_major = cc_major;
    out->cc_minor = cc_minor;
    out->sms = sms;
    out->copy_engines = copy_engines;
    out->max_resident_grids = max_resident_grids;
    out->priority_least = priority_least;
    out->priority_greatest = priority_greatest;
    out->memory_bytes = memory_bytes;
    out->l2_bytes = l2_bytes;
}

static int notsup(const ferry_device_t *d, const char *op)
{
    if (d->ops->caps & FERRY_BE_CAP_SHADOW)
        return ferry__error(FERRY_ENOTSUP,
                            "isolation=process: device %d is driven by worker processes, not "
                            "this one (%s is not offered here; isolation=thread has it)",
                            d->index, op);
    return ferry__error(FERRY_ENOTSUP, "backend %s does not support %s", d->ops->name, op);
}

/* The value of the optional operation @op of @d's backend called with the rest, or
 * FERRY_ENOTSUP where the backend leaves it NULL. An expression: the wrapper returns it. */
#define BE_CALL(d, op, ...) ((d)->ops->op ? (d)->ops->op(__VA_ARGS__) : notsup((d), #op))

int ferry__be_host_register(ferry_device_t *d, void *p, size_t n)
{
    return BE_CALL(d, host_register, d->be, p, n);
}

int ferry__be_host_unregister(ferry_device_t *d, void *p)
{
    return BE_CALL(d, host_unregister, d->be, p);
}

int ferry__be_mem_alloc(ferry_device_t *d, size_t n, void **out)
{
    return BE_CALL(d, mem_alloc, d->be, n, out);
}

void ferry__be_mem_free(ferry_device_t *d, void *p)
{
    if (p != NULL && d->ops->mem_free)
        d->ops->mem_free(d->be, p);
}

int ferry__be_stream_create(ferry_device_t *d, int priority, ferry_be_stream_t **out)
{
    return BE_CALL(d, stream_create, d->be, priority, out);
}

void ferry__be_stream_destroy(ferry_device_t *d, ferry_be_stream_t *s)
{
    if (s != NULL && d->ops->stream_destroy)
        d->ops->stream_destroy(s);
}

void *ferry__be_stream_native(ferry_device_t *d, ferry_be_stream_t *s)
{
    return d->ops->stream_native ? d->ops->stream_native(s) : NULL;
}

int ferry__be_stream_sync(ferry_device_t *d, ferry_be_stream_t *s)
{
    return BE_CALL(d, stream_sync, s);
}

int ferry__be_event_create(ferry_device_t *d, unsigned flags, ferry_be_event_t **out)
{
    return BE_CALL(d, event_create, d->be, flags, out);
}

void ferry__be_event_destroy(ferry_device_t *d, ferry_be_event_t *e)
{
    if (e != NULL && d->ops->event_destroy)
        d->ops->event_destroy(e);
}

int ferry__be_event_record(ferry_device_t *d, ferry_be_event_t *e, ferry_be_stream_t *s)
{
    return BE_CALL(d, event_record, e, s);
}

int ferry__be_stream_wait_event(ferry_device_t *d, ferry_be_stream_t *s, ferry_be_event_t *e)
{
    return BE_CALL(d, stream_wait_event, s, e);
}

int ferry__be_event_query(ferry_device_t *d, ferry_be_event_t *e)
{
    return BE_CALL(d, event_query, e);
}

int ferry__be_event_wait_any(ferry_device_t *d, ferry_be_event_t *const *evs, size_t n,
                             uint64_t timeout_ns, size_t *which)
{
    return BE_CALL(d, event_wait_any, evs, n, timeout_ns, which);
}

int ferry__be_event_time_ns(ferry_device_t *d, ferry_be_event_t *e, uint64_t *out)
{
    return BE_CALL(d, event_time_ns, e, out);
}

int ferry__be_memcpy_h2d(ferry_device_t *d, ferry_be_stream_t *s, void *dst, const void *src,
                         size_t n)
{
    return BE_CALL(d, memcpy_h2d, s, dst, src, n);
}

int ferry__be_memcpy_d2h(ferry_device_t *d, ferry_be_stream_t *s, void *dst, const void *src,
                         size_t n)
{
    return BE_CALL(d, memcpy_d2h, s, dst, src, n);
}

int ferry__be_copy_pieces(ferry_device_t *d, ferry_be_stream_t *s, bool to_dev, void *dev,
                          const ferry_be_piece_t *pieces, size_t n, size_t kernel_max)
{
    return BE_CALL(d, copy_pieces, s, to_dev, dev, pieces, n, kernel_max);
}

bool ferry__be_has_copy_pieces(const ferry_device_t *d)
{
    return d->ops->copy_pieces != NULL;
}

int ferry__be_launch(ferry_device_t *d, ferry_be_stream_t *s, const ferry_be_launch_t *l)
{
    if (s == NULL || l == NULL)
        return ferry__error(FERRY_EINVAL, "%s: launch: NULL stream or launch", d->ops->name);
    return BE_CALL(d, launch, s, l);
}

ferry_gpu_fn ferry__be_gpu_launcher(const ferry_backend_ops_t *ops, const char *name)
{
    return ops != NULL && ops->gpu_launcher != NULL && name != NULL ? ops->gpu_launcher(name)
                                                                    : NULL;
}

ferry_gpu_fn ferry__backend_gpu_launcher(const char *name)
{
    ferry_gpu_fn fn = NULL;
    for (size_t i = 0; fn == NULL && ferry__backends[i] != NULL; i++)
        fn = ferry__be_gpu_launcher(ferry__backends[i], name);
    return fn;
}

const char *const *ferry_backend_names(void)
{
    static const char *names[8];
    static atomic_bool ready;
    if (!atomic_load_explicit(&ready, memory_order_acquire)) {
        size_t i = 0;
        for (; ferry__backends[i] != NULL && i < 7; i++)
            names[i] = ferry__backends[i]->name;
        names[i] = NULL;
        atomic_store_explicit(&ready, true, memory_order_release);
    }
    return names;
}

int ferry_backend_probe(const char *name, char *why, size_t why_len)
{
    char buf[256] = "";
    const ferry_backend_ops_t *ops = ferry__backend_find(name);
    if (ops == NULL) {
        if (why && why_len)
            snprintf(why, why_len, "%s",
                     name && strcmp(name, "cuda") == 0 ? "built without CUDA" : "unknown backend");
        return ferry__error(FERRY_ENODEV, "unknown backend '%s'", name ? name : "(null)");
    }
    int count = 0;
    int rc = ops->device_count(NULL, &count, buf, sizeof(buf));
    if (rc == 0 && count <= 0) {
        rc = FERRY_ENODEV;
        snprintf(buf, sizeof(buf), "no device found");
    }
    if (why && why_len)
        snprintf(why, why_len, "%s", rc == 0 ? "" : buf);
    return rc == 0 ? count : ferry__error(rc, "backend %s: %s", name, buf);
}

int ferry__be_mem_info(ferry_device_t *d, uint64_t *free_bytes, uint64_t *total_bytes)
{
    return BE_CALL(d, mem_info, d->be, free_bytes, total_bytes);
}

int ferry__be_abort_kernels(ferry_device_t *d, const volatile uint64_t *word, uint64_t upto)
{
    return BE_CALL(d, abort_kernels, d->be, word, upto);
}

int ferry__be_abort_word_create(ferry_device_t *d, volatile uint64_t **out)
{
    return BE_CALL(d, abort_word_create, d->be, out);
}

void ferry__be_abort_word_destroy(ferry_device_t *d, volatile uint64_t *word)
{
    if (d->ops->abort_word_destroy != NULL && word != NULL)
        d->ops->abort_word_destroy(d->be, word);
}

int ferry__be_host_device_ptr(ferry_device_t *d, void *host, void **out)
{
    return BE_CALL(d, host_device_ptr, d->be, host, out);
}

int ferry__be_heartbeat(ferry_device_t *d, ferry_be_stream_t *s, volatile uint64_t *word,
                        uint64_t value)
{
    return BE_CALL(d, heartbeat, s, word, value);
}

int ferry__be_link_rate(ferry_device_t *d, int dir, double *bytes_per_s, uint64_t *window_ns)
{
    return BE_CALL(d, link_rate, d->be, dir, bytes_per_s, window_ns);
}

/* Quiet, unlike BE_CALL: asked at every launch, where "not supported" is no error. */
int ferry__be_gpu_clock_at(ferry_device_t *d, uint64_t host_ns, uint64_t *out)
{
    return d->ops->gpu_clock_at ? d->ops->gpu_clock_at(d->be, host_ns, out) : FERRY_ENOTSUP;
}
