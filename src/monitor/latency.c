/* Latency histograms and their registry by owner (latency.h). */
#include <pthread.h>
#include <string.h>

#include "monitor/latency.h"

const double ferry__lat_bounds_s[FERRY__LAT_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry__lat_hist_t *reg_head; /* under reg_lock */

void ferry__lat_hist_read(const ferry__lat_hist_t *h, uint64_t *buckets, uint64_t *sum_ns,
                          uint64_t *count)
{
    for (size_t i = 0; i <= FERRY__LAT_BUCKETS; i++)
        buckets[i] = atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
    *sum_ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
    *count = atomic_load_explicit(&h->count, memory_order_relaxed);
}

void ferry__lat_hist_register(ferry__lat_hist_t *h, const void *owner)
{
    pthread_mutex_lock(&reg_lock);
    h->owner = owner;
    h->next = reg_head;
    reg_head = h;
    pthread_mutex_unlock(&reg_lock);
}

void ferry__lat_hist_unregister(ferry__lat_hist_t *h)
{
    pthread_mutex_lock(&reg_lock);
    for (ferry__lat_hist_t **at = &reg_head; *at != NULL; at = &(*at)->next)
        if (*at == h) {
            *at = h->next;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
}

int ferry__lat_hist_read_owner(const void *owner, uint64_t *buckets, uint64_t *sum_ns,
                               uint64_t *count)
{
    int rc = -1;
    pthread_mutex_lock(&reg_lock);
    for (ferry__lat_hist_t *h = reg_head; h != NULL; h = h->next)
        if (h->owner == owner) {
            ferry__lat_hist_read(h, buckets, sum_ns, count);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    if (rc != 0) {
        memset(buckets, 0, (FERRY__LAT_BUCKETS + 1) * sizeof(*buckets));
        *sum_ns = *count = 0;
    }
    return rc;
}
