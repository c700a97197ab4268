/* The runtime: options (defaults, environment, caller), the backend choice ("auto" tries cuda
 * and falls back to the simulator with the reason kept), and the devices, opened lazily. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/sim/sim.h"
#include "base/config.h"
#include "core/runtime.h"
#include "ferry/connections.h"

int ferry__rt_fail(ferry_runtime_t *rt, int code)
{
    if (rt != NULL) {
        pthread_mutex_lock(&rt->lock);
        ferry__strlcpy(rt->last_error, ferry__last_error_text(), sizeof(rt->last_error));
        pthread_mutex_unlock(&rt->lock);
    }
    return code;
}

static int pick_backend(ferry_runtime_t *rt, const char *name)
{
    /* The count comes from the profile the devices will be opened with (the simulator's
     * "devices"), not from the built-in one. */
    const char *profile = rt->profile[0] ? rt->profile : NULL;
    if (strcmp(name, "auto") != 0) {
        const ferry_backend_ops_t *ops = ferry__backend_find(name);
        if (ops == NULL) {
            if (strcmp(name, "cuda") == 0)
                return ferry__error(FERRY_ENODEV,
                                    "backend cuda: this ferry was built without CUDA "
                                    "(configure with FERRY_WITH_CUDA=ON on a machine with nvcc)");
            return ferry__error(FERRY_ENODEV, "unknown backend '%s' (accepted: auto, sim, cuda)",
                                name);
        }
        int count = 0;
        char why[256] = "";
        int rc = ops->device_count(profile, &count, why, sizeof(why));
        if (rc != 0 || count <= 0)
            return ferry__error(rc ? rc : FERRY_ENODEV, "backend %s has no device: %s", name,
                                why[0] ? why : "none found");
        rt->ops = ops;
        rt->ndev = count;
        return 0;
    }
    char reasons[256] = "";
    for (size_t i = 0; ferry__backends[i] != NULL; i++) {
        const ferry_backend_ops_t *ops = ferry__backends[i];
        int count = 0;
        char why[200] = "";
        int rc = ops->device_count(profile, &count, why, sizeof(why));
        if (rc == 0 && count > 0) {
            rt->ops = ops;
            rt->ndev = count;
            ferry__strlcpy(rt->fallback_reason, reasons, sizeof(rt->fallback_reason));
            if (reasons[0])
                ferry_log(FERRY_LOG_INFO, "runtime", "backend auto: using %s (%s)", ops->name,
                          reasons);
            return 0;
        }
        size_t len = strlen(reasons);
        snprintf(reasons + len, sizeof(reasons) - len, "%s%s: %s", len ? "; " : "", ops->name,
                 why[0] ? why : "no device");
    }
#ifndef FERRY_WITH_CUDA
    (void)0;
#endif
    return ferry__error(FERRY_ENODEV, "no backend has a device: %s", reasons);
}

/* The connections options: set the variables before the first CUDA call of the process, which
 * is when CUDA reads them (FACTS.md). Once CUDA has started, a value it did not start with
 * cannot take effect: that is an error, not a silent no-op. */
static int apply_connections(const ferry_options_t *o)
{
    static const struct {
        const char *var, *opt;
        int id;
    } vars[] = {
        {"CUDA_DEVICE_MAX_CONNECTIONS", "connections", FERRY__OPT_connections},
        {"CUDA_DEVICE_MAX_COPY_CONNECTIONS", "copy_connections", FERRY__OPT_copy_connections},
    };
    bool started = ferry_cuda_initialized();
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        int64_t want = ferry__opt_i64(o, (ferry__opt_id_t)vars[i].id);
        if (want == 0)
            continue;
        char v[16];
        snprintf(v, sizeof(v), "%lld", (long long)want);
        const char *cur = getenv(vars[i].var);
        if (cur != NULL && strcmp(cur, v) == 0)
            continue; /* already what CUDA read, or will read */
        if (started)
            return ferry__error(FERRY_ESTATE,
                                "option %s=%s: CUDA was already started in this process with "
                                "%s=%s, and reads it only at start; a new process is needed "
                                "(`ferry exec --connections %s -- CMD`)",
                                vars[i].opt, v, vars[i].var, cur ? cur : "(unset)", v);
        if (cur != NULL)
            ferry_log(FERRY_LOG_INFO, "runtime", "option %s=%s replaces %s=%s", vars[i].opt, v,
                      vars[i].var, cur);
        if (setenv(vars[i].var, v, 1) != 0)
            return ferry__error(FERRY_ENOMEM, "setenv %s failed", vars[i].var);
    }
    return 0;
}

/* isolation=process: the arena of shared memory, then the helper that forks the workers, first
 * of all (proc/zygote.h: the helper has this process's memory of now, before the backend has
 * started anything). */
static int start_workers(ferry_runtime_t *rt, const char *backend)
{
    const char *rules = ferry__opt_str(rt->opts, FERRY__OPT_connections_per_device);
    bool process = strcmp(ferry__opt_str(rt->opts, FERRY__OPT_isolation), "process") == 0;
    unsigned v;
    if (rules[0] != '\0' && !process)
        return ferry__error(FERRY_EINVAL,
                            "option connections_per_device needs isolation=process: one process "
                            "has one CUDA_DEVICE_MAX_CONNECTIONS for all its GPUs (or run a "
                            "program per GPU: ferry exec --per-device)");
    int rc = rules[0] != '\0'
                 ? ferry_connections_rule(rules, "option connections_per_device", -1, "", 0, 0, &v)
                 : 0;
    if (rc < 0)
        return rc;
    if (!process)
        return 0;
    if (backend == NULL || backend[0] == '\0')
        backend = ferry__opt_str(rt->opts, FERRY__OPT_backend);
    if (strcmp(backend, "sim") != 0 && ferry_cuda_initialized())
        return ferry__error(FERRY_ESTATE,
                            "isolation=process: CUDA has already started in this process (a "
                            "runtime on the GPU made before this one, or the program's own CUDA "
                            "calls): workers forked from it could not use the GPU; make the "
                            "isolation=process runtime before anything starts CUDA");
    rc = ferry__shm_arena_reserve((size_t)ferry__opt_i64(rt->opts, FERRY__OPT_worker_reserve),
                                  &rt->arena);
    if (rc == 0)
        rc = ferry__zyg_start(&rt->zyg);
    return rc;
}

int ferry_runtime_create(const ferry_runtime_config_t *cfg, ferry_runtime_t **out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_runtime_create: out is NULL");
    ferry_runtime_config_t c;
    int rc = ferry__config_import(&c, sizeof(c), cfg, &ferry__cfg_runtime, NULL);
    if (rc != 0)
        return rc;
    ferry_runtime_t *rt = ferry__obj_alloc(out, sizeof(*rt), "ferry_runtime_create", &rc);
    if (rt == NULL)
        return rc;
    pthread_mutex_init(&rt->lock, NULL);
    pthread_rwlock_init(&rt->reg_lock, NULL);
    static _Atomic uint64_t epochs; /* each runtime's generations apart from any other's */
    atomic_init(&rt->reg_gen, atomic_fetch_add(&epochs, 1) << 32);
    if (c.options != NULL) {
        rc = ferry_options_clone(c.options, &rt->opts);
    } else {
        rc = ferry_options_create(&rt->opts);
        if (rc == 0)
            rc = ferry_options_apply_env(rt->opts);
    }
    if (rc != 0)
        goto out_free;
    /* Process-wide: the runtime's option applies unless the application set the level. */
    ferry__log_level_default((ferry_log_level_t)ferry__opt_i64(rt->opts, FERRY__OPT_log_level));
    if ((rc = start_workers(rt, c.backend)) != 0)
        goto out_free;
    if ((rc = apply_connections(rt->opts)) != 0)
        goto out_free;

    /* The options come from the config: its unset backend and profile are filled now. */
    if ((rc = ferry__config_fill(&c, &ferry__cfg_runtime, rt->opts)) != 0)
        goto out_free;
    ferry__strlcpy(rt->profile, c.profile, sizeof(rt->profile));
    /* isolation=process: a probe opens the device, not this process */
    rc = rt->zyg != NULL ? ferry__rt_probe_backend(rt, c.backend,
                                                   (int)ferry__opt_i64(rt->opts, FERRY__OPT_device))
                         : pick_backend(rt, c.backend);
    if (rc != 0)
        goto out_free;
    const char *inject = ferry__opt_str(rt->opts, FERRY__OPT_inject);
    if (inject[0] != '\0' && strcmp(rt->ops->name, "sim") != 0) {
        rc = ferry__error(FERRY_ENOTSUP,
                          "option inject: faults are injected on the simulator only (--backend "
                          "sim); on a GPU, tests/gpu plants real ones");
        goto out_free;
    }
    if (rt->ops->abi != FERRY_BACKEND_ABI) {
        rc = ferry__error(FERRY_EBACKEND, "backend %s has ABI %d, ferry expects %d", rt->ops->name,
                          rt->ops->abi, FERRY_BACKEND_ABI);
        goto out_free;
    }
    rt->devs = calloc((size_t)rt->ndev, sizeof(*rt->devs));
    if (rt->devs == NULL) {
        rc = ferry__error(FERRY_ENOMEM, "ferry_runtime_create: out of memory");
        goto out_free;
    }
    /* Open the configured device now, so that a bad profile or a broken GPU is reported
     * here and not at the first pipeline. */
    int64_t index = ferry__opt_i64(rt->opts, FERRY__OPT_device);
    if (index >= rt->ndev) {
        rc = ferry__error(FERRY_ENODEV, "option device=%lld but backend %s has %d device(s)",
                          (long long)index, rt->ops->name, rt->ndev);
        goto out_free;
    }
    ferry_device_t *dev = NULL;
    rc = ferry_device_get(rt, (int)index, &dev);
    if (rc != 0)
        goto out_free;
    *out = rt;
    return 0;

out_free:
    ferry_runtime_destroy(rt);
    return rc;
}

void ferry__rt_child_add(ferry_runtime_t *rt, ferry__rt_child_t *c)
{
    pthread_mutex_lock(&rt->lock);
    c->prev = NULL;
    c->next = rt->children;
    if (rt->children != NULL)
        rt->children->prev = c;
    rt->children = c;
    pthread_mutex_unlock(&rt->lock);
}

void ferry__rt_child_remove(ferry_runtime_t *rt, ferry__rt_child_t *c)
{
    pthread_mutex_lock(&rt->lock);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else if (rt->children == c)
        rt->children = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    pthread_mutex_unlock(&rt->lock);
}

void ferry__rt_share(ferry_runtime_t *rt, void *base, size_t bytes, uint64_t serial)
{
    pthread_mutex_lock(&rt->lock);
    for (ferry__rt_child_t *c = rt->children; c != NULL; c = c->next)
        if (c->on_share != NULL)
            c->on_share(c, base, bytes, serial);
    pthread_mutex_unlock(&rt->lock);
}

/* The live children of @rt, named, into the calling thread's last error: FERRY_EBUSY, or 0
 * when none is live. Under rt->lock. */
static int refuse_live_children(ferry_runtime_t *rt)
{
    char names[320] = "";
    size_t at = 0;
    unsigned live = 0;
    for (ferry__rt_child_t *c = rt->children; c != NULL; c = c->next) {
        char name[96];
        if (!c->is_live(c, name, sizeof(name)))
            continue;
        if (live++ < 4 && at < sizeof(names))
            at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", live > 1 ? ", " : "",
                                   name);
    }
    if (live == 0)
        return 0;
    return ferry__error(FERRY_EBUSY,
                        "ferry_runtime_destroy: %u pipeline(s) still open on this runtime (%s%s); "
                        "close or destroy them first",
                        live, names, live > 4 ? ", ..." : "");
}

int ferry_runtime_destroy(ferry_runtime_t *rt)
{
    if (rt == NULL)
        return 0;
    pthread_mutex_lock(&rt->lock);
    int rc = refuse_live_children(rt);
    ferry__rt_child_t *c = rt->children;
    if (rc == 0)
        rt->children = NULL;
    pthread_mutex_unlock(&rt->lock);
    if (rc != 0)
        return ferry__rt_fail(rt, rc);
    /* Pipelines closed but not destroyed: their memory goes with the runtime. */
    while (c != NULL) {
        ferry__rt_child_t *next = c->next;
        c->prev = c->next = NULL;
        c->destroy(c);
        c = next;
    }
    for (int i = 0; rt->devs != NULL && i < rt->ndev; i++) {
        ferry_device_t *d = rt->devs[i];
        if (d == NULL)
            continue;
        d->ops->device_close(d->be);
        free(d);
    }
    free(rt->devs);
    free(rt->cpu_dev);
    free(rt->regs);
    free(rt->probed);
    ferry__zyg_stop(rt->zyg); /* the workers are gone with their pipelines; the helper too */
    ferry__shm_arena_release(&rt->arena);
    ferry_options_destroy(rt->opts);
    pthread_rwlock_destroy(&rt->reg_lock);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
    return 0;
}

const char *ferry_runtime_backend(const ferry_runtime_t *rt)
{
    return (rt && rt->ops) ? rt->ops->name : "";
}

const char *ferry_runtime_fallback_reason(const ferry_runtime_t *rt)
{
    return rt ? rt->fallback_reason : "";
}

const char *ferry_runtime_last_error(const ferry_runtime_t *rt)
{
    return rt ? rt->last_error : "";
}

const ferry_options_t *ferry_runtime_options(const ferry_runtime_t *rt)
{
    return rt ? rt->opts : NULL;
}

int ferry_device_count(ferry_runtime_t *rt)
{
    if (rt == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_device_count: runtime is NULL");
    return rt->ndev;
}

/* The CPU as a device (FERRY_DEVICE_CPU): made at the first call, freed with the runtime. */
static int cpu_device(ferry_runtime_t *rt, ferry_device_t **out)
{
    pthread_mutex_lock(&rt->lock);
    ferry_device_t *d = rt->cpu_dev;
    if (d == NULL && (d = calloc(1, sizeof(*d))) != NULL) {
        d->rt = rt;
        d->ops = &ferry__cpu_device_ops;
        d->index = FERRY_DEVICE_CPU;
        d->props.size = sizeof(d->props);
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        char name[64];
        snprintf(name, sizeof(name), "CPU (%ld threads)", cpus > 0 ? cpus : 1);
        ferry__be_props_begin(&d->props, name, "cpu", FERRY_DEVICE_CPU, false);
        rt->cpu_dev = d;
    }
    pthread_mutex_unlock(&rt->lock);
    if (d == NULL)
        return ferry__rt_fail(rt, ferry__error(FERRY_ENOMEM, "ferry_device_get: out of memory"));
    *out = d;
    return 0;
}

int ferry_device_get(ferry_runtime_t *rt, int index, ferry_device_t **out)
{
    if (rt == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_device_get: NULL argument");
    if (index == FERRY_DEVICE_CPU)
        return cpu_device(rt, out);
    if (index < 0 || index >= rt->ndev)
        return ferry__rt_fail(rt, ferry__error(FERRY_ENODEV,
                                               "device %d does not exist (backend %s has %d; "
                                               "the CPU is FERRY_DEVICE_CPU)",
                                               index, rt->ops->name, rt->ndev));
    int rc = 0;
    pthread_mutex_lock(&rt->lock);
    ferry_device_t *d = rt->devs[index];
    if (d == NULL) {
        d = calloc(1, sizeof(*d));
        if (d == NULL) {
            rc = ferry__error(FERRY_ENOMEM, "ferry_device_get: out of memory");
            goto out_unlock;
        }
        ferry_be_open_params_t params = {
            .profile_path = rt->profile[0] ? rt->profile : NULL,
            .options = rt->opts,
            .seed = (uint64_t)ferry__opt_i64(rt->opts, FERRY__OPT_seed),
        };
        rc = rt->ops->caps & FERRY_BE_CAP_SHADOW ? ferry__rt_probe_device(rt, index, d)
                                                 : rt->ops->device_open(index, &params, &d->be);
        if (rc != 0) {
            free(d);
            goto out_unlock;
        }
        d->rt = rt;
        d->ops = rt->ops;
        d->index = index;
        if (!(rt->ops->caps & FERRY_BE_CAP_SHADOW)) { /* a shadow's are its probe's */
            ferry_conn_reading_t cr;
            ferry_connections_read(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), &cr);
            d->connections = cr.effective;
        }
        d->props.size = sizeof(d->props);
        rc = rt->ops->device_props(d->be, &d->props);
        if (rc != 0) {
            rt->ops->device_close(d->be);
            free(d);
            goto out_unlock;
        }
        rt->devs[index] = d;
    }
    *out = d;
out_unlock:
    pthread_mutex_unlock(&rt->lock);
    return rc ? ferry__rt_fail(rt, rc) : 0;
}

int ferry_device_props(ferry_device_t *dev, ferry_device_props_t *out)
{
    if (dev == NULL || out == NULL || out->size < offsetof(ferry_device_props_t, pci_bus_id))
        return ferry__error(FERRY_EINVAL, "ferry_device_props: NULL argument or size not set "
                                          "(use FERRY_DEVICE_PROPS_INIT)");
    size_t n = out->size < sizeof(*out) ? out->size : sizeof(*out);
    memcpy(out, &dev->props, n);
    out->size = n;
    return 0;
}

/* One index of a device list: digits only, below the backend's count. */
static int select_index(ferry_runtime_t *rt, const char *tok, size_t len, const char *spec,
                        int *out)
{
    long v = 0;
    size_t i = 0;
    for (; i < len && tok[i] >= '0' && tok[i] <= '9' && v < 100000; i++)
        v = v * 10 + (tok[i] - '0');
    if (len == 0 || i < len)
        return ferry__error(FERRY_EINVAL,
                            "devices \"%s\": \"%.*s\" is not a device; accepted: all, cpu, "
                            "or device indices, separated by commas (0,2 or all,cpu)",
                            spec, (int)len, tok);
    if (v >= rt->ndev)
        return ferry__error(FERRY_ENODEV,
                            "devices \"%s\": device %ld does not exist (backend "
                            "%s has %d: 0 to %d)",
                            spec, v, rt->ops->name, rt->ndev, rt->ndev - 1);
    *out = (int)v;
    return 0;
}

int ferry_devices_select(ferry_runtime_t *rt, const char *spec, ferry_device_t **out, unsigned max,
                         unsigned *n)
{
    if (rt == NULL || out == NULL || n == NULL || max == 0)
        return ferry__error(FERRY_EINVAL, "ferry_devices_select: NULL argument or max 0");
    char one[24];
    if (spec == NULL)
        spec = ferry__opt_str(rt->opts, FERRY__OPT_devices);
    if (spec == NULL || spec[0] == '\0') {
        snprintf(one, sizeof(one), "%lld", (long long)ferry__opt_i64(rt->opts, FERRY__OPT_device));
        spec = one;
    }
    int idx[FERRY_MAX_DEVICE_SET];
    unsigned k = 0;
    int rc = 0;
    for (const char *p = spec; rc == 0;) {
        const char *c = strchr(p, ',');
        size_t len = c != NULL ? (size_t)(c - p) : strlen(p);
        int add[FERRY_MAX_DEVICE_SET], na = 1;
        if (len == 3 && memcmp(p, "all", 3) == 0) {
            for (na = 0; na < rt->ndev && na < FERRY_MAX_DEVICE_SET; na++)
                add[na] = na;
        } else if (len == 3 && memcmp(p, "cpu", 3) == 0) {
            add[0] = FERRY_DEVICE_CPU;
        } else {
            rc = select_index(rt, p, len, spec, &add[0]);
        }
        for (int a = 0; rc == 0 && a < na; a++) {
            for (unsigned j = 0; rc == 0 && j < k; j++)
                if (idx[j] == add[a])
                    rc =
                        add[a] == FERRY_DEVICE_CPU
                            ? ferry__error(FERRY_EINVAL, "devices \"%s\": cpu is named twice", spec)
                            : ferry__error(FERRY_EINVAL, "devices \"%s\": device %d is named twice",
                                           spec, add[a]);
            if (rc == 0 && k == FERRY_MAX_DEVICE_SET)
                rc = ferry__error(FERRY_EINVAL, "devices \"%s\": more than %d devices", spec,
                                  FERRY_MAX_DEVICE_SET);
            if (rc == 0)
                idx[k++] = add[a];
        }
        if (c == NULL)
            break;
        p = c + 1;
    }
    if (rc == 0 && k > max)
        rc = ferry__error(FERRY_EINVAL, "devices \"%s\": %u devices, room for %u", spec, k, max);
    for (unsigned j = 0; rc == 0 && j < k; j++)
        rc = ferry_device_get(rt, idx[j], &out[j]);
    if (rc != 0)
        return ferry__rt_fail(rt, rc);
    *n = k;
    return 0;
}

int ferry_device_host(ferry_device_t *dev, ferry_host_props_t *out)
{
    if (dev == NULL || !FERRY_SIZE_OK(out, sizeof(ferry_host_props_t)))
        return ferry__error(FERRY_EINVAL, "ferry_device_host: NULL argument or size not set "
                                          "(use FERRY_HOST_PROPS_INIT)");
    ferry_host_props_t h = {.size = sizeof(h)};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    h.threads = cpus > 0 ? (int)cpus : 1;
    if (dev->ops->host_props != NULL)
        dev->ops->host_props(dev->be, &h);
    size_t n = out->size < sizeof(h) ? out->size : sizeof(h);
    memcpy(out, &h, n);
    out->size = n;
    return 0;
}

bool ferry_device_is_simulated(const ferry_device_t *dev)
{
    return dev != NULL && (dev->ops->caps & FERRY_BE_CAP_VIRTUAL_CLOCK) != 0;
}

uint64_t ferry_device_now_ns(ferry_device_t *dev)
{
    if (dev == NULL)
        return 0;
    return dev->ops->now_ns ? dev->ops->now_ns(dev->be) : ferry__mono_ns();
}

/* Index of the first range whose start is > @a. */
static size_t reg_upper(const ferry_runtime_t *rt, uintptr_t a)
{
    size_t lo = 0, hi = rt->nregs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rt->regs[mid].start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The last ranges a thread found (REG_SEEN of them: a batch's input and output, a slab's),
 * each with the runtime and generation it was found in. */
#define REG_SEEN 4
static _Thread_local struct {
    const ferry_runtime_t *rt;
    uint64_t gen;
    uintptr_t start, end;
} reg_seen[REG_SEEN];
static _Thread_local unsigned reg_seen_next;

uintptr_t ferry__rt_registration_of(ferry_device_t *dev, const void *p, size_t n)
{
    ferry_runtime_t *rt = dev->rt;
    uintptr_t a = (uintptr_t)p;
    uint64_t gen = atomic_load_explicit(&rt->reg_gen, memory_order_acquire);
    for (unsigned k = 0; k < REG_SEEN; k++)
        if (reg_seen[k].rt == rt && reg_seen[k].gen == gen && a >= reg_seen[k].start &&
            a < reg_seen[k].end && n <= reg_seen[k].end - a)
            return reg_seen[k].start;
    uintptr_t start = 0;
    pthread_rwlock_rdlock(&rt->reg_lock);
    size_t i = reg_upper(rt, a);
    if (i > 0) {
        const struct ferry_reg_range *r = &rt->regs[i - 1];
        /* pinned for every device */
        start = a >= r->start && n <= r->end - a && a < r->end ? r->start : 0;
        if (start != 0) { /* the generation under the lock: no write moves it meanwhile */
            unsigned k = reg_seen_next++ % REG_SEEN;
            reg_seen[k].rt = rt;
            reg_seen[k].gen = atomic_load_explicit(&rt->reg_gen, memory_order_relaxed);
            reg_seen[k].start = r->start;
            reg_seen[k].end = r->end;
        }
    }
    pthread_rwlock_unlock(&rt->reg_lock);
    return start;
}

bool ferry__rt_is_registered(ferry_device_t *dev, const void *p, size_t n)
{
    return ferry__rt_registration_of(dev, p, n) != 0;
}

/* Whether a range of @kind is pinned by the backend here: not a pool's slab (its pool pins
 * it), nor anything under isolation=process, where this process drives no device (core/
 * probe.c): ferry_host_alloc memory is shared, each worker pinning it for its own context,
 * and a ferry_host_register range is staged into shared memory like any other. */
static bool pins(const ferry_runtime_t *rt, int kind)
{
    return kind != FERRY__REG_POOL && rt->zyg == NULL;
}

/* Insert [a, a + bytes) into the sorted ranges, pinned first unless @kind is a pool's slab.
 * Under the write lock. */
static int reg_insert(ferry_device_t *dev, void *p, size_t bytes, int kind, const char *who)
{
    ferry_runtime_t *rt = dev->rt;
    uintptr_t a = (uintptr_t)p;
    size_t i = reg_upper(rt, a);
    if ((i > 0 && rt->regs[i - 1].end > a) || (i < rt->nregs && rt->regs[i].start < a + bytes))
        return ferry__error(FERRY_EINVAL, "%s: [%p, +%zu) overlaps a range already registered", who,
                            p, bytes);
    if (rt->nregs == rt->regs_cap) {
        size_t cap = rt->regs_cap ? rt->regs_cap * 2 : 8;
        struct ferry_reg_range *nr = realloc(rt->regs, cap * sizeof(*nr));
        if (nr == NULL)
            return ferry__error(FERRY_ENOMEM, "%s: out of memory", who);
        rt->regs = nr;
        rt->regs_cap = cap;
    }
    if (pins(rt, kind)) {
        int rc = ferry__be_host_register(dev, p, bytes);
        if (rc != 0)
            return rc;
    }
    memmove(&rt->regs[i + 1], &rt->regs[i], (rt->nregs - i) * sizeof(*rt->regs));
    rt->regs[i] = (struct ferry_reg_range){a, a + bytes, dev->index, (uint8_t)kind};
    rt->nregs++;
    atomic_fetch_add_explicit(&rt->reg_gen, 1, memory_order_release);
    return 0;
}

int ferry__rt_track(ferry_device_t *dev, void *p, size_t n, int kind, const char *who)
{
    if (n > UINTPTR_MAX - (uintptr_t)p)
        return ferry__error(FERRY_EINVAL, "%s: range wraps around", who);
    pthread_rwlock_wrlock(&dev->rt->reg_lock);
    int rc = reg_insert(dev, p, n, kind, who);
    pthread_rwlock_unlock(&dev->rt->reg_lock);
    return rc;
}

static const char *const reg_owner[] = {
    [FERRY__REG_USER] = "ferry_host_register",
    [FERRY__REG_POOL] = "ferry_pool_create",
    [FERRY__REG_ALLOC] = "ferry_host_alloc",
};

int ferry__rt_untrack(ferry_device_t *dev, void *p, int kind, const char *who)
{
    ferry_runtime_t *rt = dev->rt;
    pthread_rwlock_wrlock(&rt->reg_lock);
    size_t i = reg_upper(rt, (uintptr_t)p);
    int rc = 0;
    if (i == 0 || rt->regs[i - 1].start != (uintptr_t)p || rt->regs[i - 1].device != dev->index ||
        rt->regs[i - 1].kind != kind) {
        rc = ferry__error(FERRY_EINVAL, "%s: %p did not come from %s on this device", who, p,
                          reg_owner[kind]);
        goto out_unlock;
    }
    if (pins(rt, kind) && (rc = ferry__be_host_unregister(dev, p)) != 0)
        goto out_unlock;
    memmove(&rt->regs[i - 1], &rt->regs[i], (rt->nregs - i) * sizeof(*rt->regs));
    rt->nregs--;
    atomic_fetch_add_explicit(&rt->reg_gen, 1, memory_order_release);
out_unlock:
    pthread_rwlock_unlock(&rt->reg_lock);
    return rc;
}

int ferry_host_register(ferry_device_t *dev, void *p, size_t bytes)
{
    if (dev == NULL || p == NULL || bytes == 0)
        return ferry__error(FERRY_EINVAL, "ferry_host_register: NULL pointer or zero bytes");
    int rc = ferry__rt_track(dev, p, bytes, FERRY__REG_USER, "ferry_host_register");
    return rc ? ferry__rt_fail(dev->rt, rc) : 0;
}

int ferry_host_unregister(ferry_device_t *dev, void *p)
{
    if (dev == NULL || p == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_host_unregister: NULL argument");
    int rc = ferry__rt_untrack(dev, p, FERRY__REG_USER, "ferry_host_unregister");
    return rc ? ferry__rt_fail(dev->rt, rc) : 0;
}

struct ferry__link_curve {
    struct ferry_sim_profile prof;
};

int ferry__device_link_curve(ferry_device_t *d, ferry__link_curve_t **out)
{
    if (d == NULL || out == NULL)
        return FERRY_EINVAL;
    ferry__link_curve_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return FERRY_ENOMEM;
    int rc = 0;
    if (d->ops == &ferry__sim_backend) {
        const struct ferry_sim_profile *p = ferry__sim_device_profile(d->be);
        if (p == NULL)
            rc = FERRY_ENOTSUP;
        else
            c->prof = *p;
    } else {
        rc = d->rt->profile[0] != '\0' ? ferry__sim_profile_load(d->rt->profile, &c->prof)
                                       : ferry__sim_profile_load_default(&c->prof);
        if (rc == 0 &&
            (c->prof.pcie_gen != d->props.pcie_gen || c->prof.pcie_width != d->props.pcie_width))
            rc = FERRY_ENOTSUP; /* another link: its curve says nothing of this one */
    }
    if (rc != 0) {
        free(c);
        return FERRY_ENOTSUP;
    }
    *out = c;
    return 0;
}

void ferry__link_curve_destroy(ferry__link_curve_t *c)
{
    free(c);
}

double ferry__link_curve_peak_gbps(const ferry__link_curve_t *c, int dir)
{
    const struct ferry_sim_curve *cv = &c->prof.curve[dir != 0];
    return cv->gbps[cv->n - 1];
}

void ferry__link_curve_copy_ns(const ferry__link_curve_t *c, int dir, uint64_t bytes,
                               double *one_way, double *both_ways)
{
    double peak = ferry__link_curve_peak_gbps(c, dir);
    double lat = (double)ferry__sim_copy_latency_ns(&c->prof, dir, bytes);
    *both_ways = lat + (double)bytes / (peak * c->prof.bidir_factor);
    *one_way = lat + (double)bytes / peak;
}
