/* The link monitor (linkmon.h). */
#include "monitor/linkmon.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/base.h"

struct ferry__linkmon {
    ferry_device_t *dev;
    ferry__linkmon_config_t cfg;
    char name[64];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started, stop, off;
    unsigned errors; /* failed samples, logged the first time */
    uint64_t last_step_ns;
    ferry__link_sample_t last; /* under mu */
};

/* One sample, both directions, one after the other (each blocks on a GPU). Returns false when
 * the backend cannot count (the monitor turns itself off). No lock held. */
static bool take_sample(ferry__linkmon_t *m)
{
    ferry__link_sample_t s = {0};
    for (int d = 0; d < 2; d++) {
        double bps = 0;
        uint64_t win = 0;
        int rc = ferry__be_link_rate(m->dev, d, &bps, &win);
        uint64_t t = ferry_device_now_ns(m->dev);
        if (rc == FERRY_ENOTSUP) {
            ferry_log(FERRY_LOG_INFO, "link", "%s: %s: another process on the link cannot be told",
                      m->name, ferry__last_error_text());
            return false;
        }
        if (rc == FERRY_EAGAIN)
            return true; /* nothing to average yet (the simulator at time 0) */
        if (rc != 0) {
            if (m->errors++ == 0)
                ferry_log(FERRY_LOG_WARN, "link", "%s: reading the link's counter: %s (%s)",
                          m->name, ferry_err_name(rc), ferry__last_error_text());
            return true;
        }
        if (win > t)
            win = t;
        s.total[d] = bps;
        s.own[d] = win ? ferry__rate_ring_sum(m->cfg.own, t - win, t) * 1e9 / (double)win : 0;
        /* The pipeline counts its bytes when its chunks retire, a little after their copies
         * end: a window can hold bytes that crossed the link before it, and this run's share
         * came out above the link's total (47.9 of 47.7 GB/s). Its share is at most all. */
        if (s.own[d] > bps)
            s.own[d] = bps;
        s.at_ns = t;
    }
    pthread_mutex_lock(&m->mu);
    s.count = m->last.count + 1;
    m->last = s;
    pthread_mutex_unlock(&m->mu);
    return true;
}

static void *linkmon_main(void *arg)
{
    ferry__linkmon_t *m = arg;
    /* A sample, then a period's sleep, until told to stop or the backend cannot count. */
    while (take_sample(m) && ferry__cond_nap(&m->cv, &m->mu, &m->stop, m->cfg.period_ns)) {
    }
    return NULL;
}

int ferry__linkmon_create(ferry_device_t *dev, const ferry__linkmon_config_t *cfg,
                          ferry__linkmon_t **out)
{
    *out = NULL;
    ferry__linkmon_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return ferry__error(FERRY_ENOMEM, "link monitor: out of memory");
    m->dev = dev;
    m->cfg = *cfg;
    ferry__strlcpy(m->name, cfg->name ? cfg->name : "pipeline", sizeof(m->name));
    pthread_mutex_init(&m->mu, NULL);
    ferry__cond_init_monotonic(&m->cv);
    if (!cfg->own_thread) {
        /* Inline: find out now whether the backend can count (a simulator call is free). */
        if (!take_sample(m)) {
            ferry__linkmon_destroy(m);
            return 0;
        }
        m->last_step_ns = ferry_device_now_ns(dev);
    } else {
        if (ferry__thread_start(&m->thread, &m->started, linkmon_main, m, "ferry-link") != 0) {
            ferry__linkmon_destroy(m);
            return ferry__error(FERRY_ENOMEM, "link monitor: cannot start its thread");
        }
    }
    *out = m;
    return 0;
}

void ferry__linkmon_destroy(ferry__linkmon_t *m)
{
    if (m == NULL)
        return;
    ferry__flag_set_wake(&m->mu, &m->stop, &m->cv, NULL);
    if (m->started)
        pthread_join(m->thread, NULL);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void ferry__linkmon_step(ferry__linkmon_t *m, uint64_t now, bool force)
{
    if (m == NULL || m->cfg.own_thread || m->off)
        return;
    if (!force && now - m->last_step_ns < m->cfg.period_ns)
        return;
    m->last_step_ns = now;
    if (!take_sample(m))
        m->off = true;
}

void ferry__linkmon_last(ferry__linkmon_t *m, ferry__link_sample_t *out)
{
    if (m == NULL) {
        *out = (ferry__link_sample_t){0};
        return;
    }
    pthread_mutex_lock(&m->mu);
    *out = m->last;
    pthread_mutex_unlock(&m->mu);
}
