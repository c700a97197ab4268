/* The pipeline's plan (plan.h): each setting from the config when set there, else from the
 * runtime's options (both through the config import, base/config.c), else from the device's
 * properties, checked against its range. Pure but for the warnings it logs about a copy group
 * that merges nothing or less than asked. */
#include <stdint.h>
#include <string.h>

#include "base/config.h"
#include "pipeline/plan.h"

static int check_range(const char *what, long long v, long long lo, long long hi)
{
    if (v < lo || v > hi)
        return ferry__error(FERRY_EINVAL,
                            "pipeline %s=%lld is out of range (accepted: %lld to %lld)", what, v,
                            lo, hi);
    return 0;
}

static int check_stage(const ferry_stage_t *st, bool virt)
{
    if (virt && st->cpu == NULL)
        return ferry__error(FERRY_EINVAL,
                            "stage '%s' has no CPU function: the simulator runs it as the kernel",
                            st->name ? st->name : "?");
    if (!virt && st->gpu == NULL)
        return ferry__error(FERRY_EINVAL, "stage '%s' has no GPU launch function",
                            st->name ? st->name : "?");
    return 0;
}

/* The chunk: config, option, device profile, 8 MiB; rounded down to the stage's granularity. */
static int plan_chunk(const ferry_pipeline_config_t *cfg, const ferry__pipe_plan_env_t *env,
                      size_t *chunk_out)
{
    size_t chunk = cfg->chunk_bytes; /* the option's when the config left it unset */
    if (chunk == 0)
        chunk = env->props->default_chunk_bytes;
    if (chunk == 0)
        chunk = 8u << 20; /* FACTS.md: 4-16 MiB chunks reach 97-100% of the round-trip ceiling */
    size_t gran = cfg->stage->granularity;
    if (gran > 1 && chunk % gran != 0)
        chunk = chunk < gran ? gran : chunk - chunk % gran; /* elements never straddle chunks */
    *chunk_out = chunk;
    return 0;
}

/* A copy group: adjacent chunks of a batch share one copy each way (FACTS.md: a copy costs ~5 us
 * plus its bytes at the link's rate, so 1 MiB copies lose ~20%). */
static unsigned plan_group(const ferry_pipeline_config_t *cfg, const ferry_options_t *o,
                           size_t chunk)
{
    size_t coalesce = cfg->coalesce_bytes;
    /* The default merges what it can quietly; a value someone chose is told when it merges
     * nothing or more than a copy takes. */
    bool chosen = coalesce != 0 || ferry__opt_given(o, FERRY__OPT_coalesce_bytes);
    if (coalesce == 0)
        coalesce = (size_t)ferry__opt_i64(o, FERRY__OPT_coalesce_bytes);
    unsigned group = coalesce == SIZE_MAX || coalesce <= chunk ? 1u
                     : coalesce / chunk > GROUP_MAX            ? GROUP_MAX
                                                               : (unsigned)(coalesce / chunk);
    /* Said, not refused: the option stays meaningful for other chunk sizes. */
    if (chosen && coalesce != 0 && coalesce != SIZE_MAX && coalesce < 2 * chunk)
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "coalesce_bytes %zu holds fewer than two chunks of %zu: a copy per chunk "
                  "(set it to at least twice chunk_bytes to merge copies)",
                  coalesce, chunk);
    else if (chosen && coalesce != 0 && coalesce != SIZE_MAX && coalesce / chunk > GROUP_MAX)
        ferry_log(FERRY_LOG_WARN, "pipeline",
                  "coalesce_bytes %zu holds %zu chunks of %zu: copies merge %u chunks at most",
                  coalesce, coalesce / chunk, chunk, GROUP_MAX);
    return group;
}

/* Depth, streams, priorities, queue and workers. */
static int plan_shape(const ferry_pipeline_config_t *cfg, const ferry__pipe_plan_env_t *env,
                      struct ferry__pipe_plan *pl)
{
    /* Depth, streams, priorities, nonblocking: set by the config or filled from the options by
     * the import, which checked the depth and streams. The chunk (the profile's, rounded) and
     * the priorities (the device's range) are checked here. */
    long long depth = cfg->depth, ncopy = cfg->copy_streams, ncomp = cfg->compute_streams;
    int rc;
    if ((rc = check_range("chunk_bytes", (long long)pl->chunk, 1, 1LL << 30)) != 0)
        return rc;
    int cprio = cfg->copy_priority, kprio = cfg->compute_priority;
    /* CUDA priorities: greatest is numerically smallest (-5 on the H200), least is 0. */
    int lo = env->props->priority_greatest, hi = env->props->priority_least;
    if ((rc = check_range("copy_priority", cprio, lo, hi)) != 0 ||
        (rc = check_range("compute_priority", kprio, lo, hi)) != 0)
        return rc;
    long long qd = cfg->queue_depth;
    if (qd == 0)
        qd = (ncopy * 2 + ncomp) * 2;
    long long nworkers = cfg->workers;
    if (nworkers == 0)
        nworkers = env->ncpu < 1 ? 1 : (env->ncpu > 8 ? 8 : env->ncpu);
    pl->depth = (unsigned)depth;
    pl->ncopy = (unsigned)ncopy;
    pl->ncomp = (unsigned)ncomp;
    pl->single = cfg->single_stream;
    pl->nstreams = pl->single ? 1 : pl->ncopy * 2 + pl->ncomp;
    pl->queue_depth = (size_t)qd;
    pl->copy_prio = cprio;
    pl->comp_prio = kprio;
    pl->nworkers = (unsigned)nworkers;
    pl->nonblocking = cfg->nonblocking == 1;
    pl->anchors = pl->single ? 1u : pl->ncopy > pl->ncomp ? pl->ncopy : pl->ncomp;
    return 0;
}

/* Timing, tracing, faults and the bandwidth monitor: options only. */
static void plan_knobs(const ferry__pipe_plan_env_t *env, double ns_per_byte,
                       struct ferry__pipe_plan *pl)
{
    const ferry_options_t *o = env->opts;
    pl->stage_threshold = (size_t)ferry__opt_i64(o, FERRY__OPT_stage_threshold);
    if (pl->stage_threshold == 0)
        pl->stage_threshold = SIZE_MAX / 4;
    pl->deadline_factor = ferry__opt_double(o, FERRY__OPT_deadline_factor);
    pl->deadline_floor_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_deadline_floor_ms) * 1000000u;
    pl->bw_alert_ratio = ferry__opt_double(o, FERRY__OPT_bw_alert_ratio);
    pl->bw_foreign_ratio = ferry__opt_double(o, FERRY__OPT_bw_foreign_ratio);
    pl->gpu_retries = (unsigned)ferry__opt_i64(o, FERRY__OPT_gpu_retries);
    pl->watchdog_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_watchdog_ms) * 1000000u;
    pl->heartbeat_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_heartbeat_ms) * 1000000u;
    pl->link_sample_ns = (uint64_t)ferry__opt_i64(o, FERRY__OPT_link_sample_ms) * 1000000u;
    const char *flog = ferry__opt_str(o, FERRY__OPT_failure_log);
    pl->failure_log = flog != NULL && flog[0] != '\0' ? flog : NULL;
    pl->trace = ferry__opt_i64(o, FERRY__OPT_trace) != 0;
    pl->trace_chunks = (uint64_t)ferry__opt_i64(o, FERRY__OPT_trace_chunks);
    pl->time_all = strcmp(ferry__opt_str(o, FERRY__OPT_op_timing), "all") == 0;
    pl->time_none = strcmp(ferry__opt_str(o, FERRY__OPT_op_timing), "off") == 0;
    double link = env->props->link_gbps > 4 ? env->props->link_gbps / 4 : 1;
    size_t chunk = pl->chunk;
    unsigned group = pl->group;
    pl->lat_init_ns = (uint64_t)((double)pl->depth * (ns_per_byte * (double)chunk * group +
                                                      2.0 * (double)chunk * group / link));
}

int ferry__pipe_plan_make(const ferry_pipeline_config_t *caller, const ferry__pipe_plan_env_t *env,
                          struct ferry__pipe_plan *out)
{
    int rc;
    memset(out, 0, sizeof(*out));
    ferry_pipeline_config_t c;
    ferry_stage_t st;
    if ((rc = ferry__config_import(&c, sizeof(c), caller, &ferry__cfg_pipeline, env->opts)) != 0)
        return rc;
    if (c.stage == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_pipeline_create: cfg->stage is NULL");
    if ((rc = ferry__config_import(&st, sizeof(st), c.stage, &ferry__cfg_stage, env->opts)) != 0)
        return rc;
    c.stage = &st;
    const ferry_pipeline_config_t *cfg = &c;
    if ((rc = check_stage(cfg->stage, env->simulated)) != 0 ||
        (rc = plan_chunk(cfg, env, &out->chunk)) != 0)
        return rc;
    out->group = plan_group(cfg, env->opts, out->chunk);
    if ((rc = plan_shape(cfg, env, out)) != 0)
        return rc;
    /* CUDA binds a device to the calling thread (cudaSetDevice): ferry must not change the
     * caller's current device behind its back, so on such backends only ferry's threads issue.
     * On a virtual clock the issuer thread alone issues (hand_to_issuer). */
    out->virtual_clock = env->simulated;
    out->caller_issues = !env->native_stream && !out->virtual_clock;
    plan_knobs(env, cfg->stage->ns_per_byte, out);
    return 0;
}
