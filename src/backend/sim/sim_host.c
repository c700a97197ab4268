/* The host a simulated device sits in: what ferry_device_host() reports for it, and the host
 * memory of a machine profile shared by the machine's open devices (docs/simulator.md,
 * "Machines"). Each device gets a static share of the machine's host_memory.gbps in proportion
 * to its copy demand among the devices open now; its copies are capped at that share. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim_model.h"
#include "base/base.h"

/* One machine whose devices are open in this process. The share is a ratio of demands: each
 * device's in MB/s (whole numbers, so that opening and closing add and take away exactly). */
struct sim_host {
    struct sim_host *next;
    char path[sizeof(((struct ferry_sim_profile *)0)->machine_path)];
    double gbps;
    int users;                /* open devices, under hosts_lock */
    atomic_uint_fast64_t sum; /* their demands together; read by rerate without a lock */
};

/* Machines with open devices. Devices open and close on any thread (a device set opens each
 * from the thread that asks for it), so the list has a lock; rerate reads only the sum. */
static pthread_mutex_t hosts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_host *hosts;

/* A device's copy demand: the asymptotic rates of its two copy curves (their last points),
 * in MB/s, at least 1. */
static uint64_t demand_of(const struct ferry_sim_profile *p)
{
    double gbps = 0.0;
    for (int d = 0; d < 2; d++)
        gbps += p->curve[d].n > 0 ? p->curve[d].gbps[p->curve[d].n - 1] : 0.0;
    uint64_t mbps = (uint64_t)(gbps * 1000.0 + 0.5);
    return mbps > 0 ? mbps : 1;
}

int ferry__sim_host_attach(struct ferry_be_device *dev)
{
    const struct ferry_sim_profile *p = &dev->prof;
    if (p->machine_path[0] == '\0' || !(p->machine_memory_gbps > 0.0))
        return 0; /* a plain device profile, or a machine without a host_memory section */
    uint64_t demand = demand_of(p);
    pthread_mutex_lock(&hosts_lock);
    struct sim_host *h = hosts;
    /* the same file with another figure (rewritten between opens) is another machine */
    while (h != NULL &&
           (strcmp(h->path, p->machine_path) != 0 || h->gbps != p->machine_memory_gbps))
        h = h->next;
    if (h == NULL && (h = calloc(1, sizeof(*h))) != NULL) {
        memcpy(h->path, p->machine_path, sizeof(h->path));
        h->gbps = p->machine_memory_gbps;
        atomic_init(&h->sum, 0);
        h->next = hosts;
        hosts = h;
    }
    if (h != NULL) {
        h->users++;
        atomic_fetch_add_explicit(&h->sum, demand, memory_order_relaxed);
    }
    pthread_mutex_unlock(&hosts_lock);
    if (h == NULL)
        return ferry__error(FERRY_ENOMEM, "sim: out of memory opening device %d", dev->index);
    dev->host = h;
    dev->host_demand = demand;
    ferry_log(FERRY_LOG_INFO, "sim",
              "device %d: host memory of %s, %.1f GB/s, shared by demand (%.1f GB/s now)",
              dev->index, p->machine_path, h->gbps, ferry__sim_host_cap(dev));
    return 0;
}

void ferry__sim_host_detach(struct ferry_be_device *dev)
{
    struct sim_host *h = dev->host;
    if (h == NULL)
        return;
    pthread_mutex_lock(&hosts_lock);
    atomic_fetch_sub_explicit(&h->sum, dev->host_demand, memory_order_relaxed);
    if (--h->users == 0) {
        struct sim_host **pp = &hosts;
        while (*pp != h)
            pp = &(*pp)->next;
        *pp = h->next;
        free(h);
    }
    pthread_mutex_unlock(&hosts_lock);
    dev->host = NULL;
}

double ferry__sim_host_cap(const struct ferry_be_device *dev)
{
    double own = dev->prof.host_memory_gbps;
    if (dev->host == NULL)
        return own;
    uint64_t sum = atomic_load_explicit(&dev->host->sum, memory_order_relaxed);
    double share = sum > 0 ? dev->host->gbps * (double)dev->host_demand / (double)sum : 0.0;
    return own > 0.0 && own < share ? own : share;
}

void ferry__sim_host_props(ferry_be_device_t *dev, ferry_host_props_t *out)
{
    const struct ferry_sim_profile *p = &dev->prof;
    out->modelled = true;
    if (p->host_threads > 0)
        out->threads = p->host_threads;
    /* a device of a machine sits in the machine's host: its figure, not the device profile's */
    out->memory_gbps = dev->host != NULL ? dev->host->gbps : p->host_memory_gbps;
    out->thread_read_gbps = p->host_thread_read_gbps;
    out->read_gbps = p->host_read_gbps;
    out->write_gbps = p->host_write_gbps;
    out->copy_gbps = p->host_copy_gbps;
    out->dma_cpu_loss = p->host_dma_cpu_loss;
    snprintf(out->storage_kind, sizeof(out->storage_kind), "%s", p->storage_kind);
    out->storage_read_gbps = p->storage_read_gbps;
    out->storage_write_gbps = p->storage_write_gbps;
}
