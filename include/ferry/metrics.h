/* Metrics: one registry of counters, gauges and histograms, with pipelines attached so that
 * their statistics are read at exposition time, written in the Prometheus text format (0.0.4):
 * to a stream, to a textfile for node_exporter (replaced atomically), or served on loopback at
 * /metrics. Names follow Prometheus conventions: ferry's own start with `ferry_`, use base
 * units (`_bytes`, `_seconds`) and counters end in `_total`. Thread-safe. */
#ifndef FERRY_METRICS_H
#define FERRY_METRICS_H

#include <stdio.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_metrics ferry_metrics_t;
typedef struct ferry_metric ferry_metric_t;

/** A new, empty registry. Returns 0 or FERRY_ENOMEM. */
FERRY_EXTERN int ferry_metrics_create(ferry_metrics_t **out);
/** Stop serving (every connection is closed at once), detach pipelines, free everything. NULL
 *  is a no-op. */
FERRY_EXTERN void ferry_metrics_destroy(ferry_metrics_t *m);

/** Register one series. @p name: [a-zA-Z_:][a-zA-Z0-9_:]*, counters ending in `_total`;
 *  @p labels: NULL or name, value, ..., NULL (values escaped on output). Series of one name
 *  share type and help. Returns 0, FERRY_EINVAL (a bad name, label or type clash, naming it) or
 *  FERRY_ENOMEM. The metric lives as long as the registry. */
FERRY_EXTERN int ferry_metrics_counter(ferry_metrics_t *m, const char *name, const char *help,
                                       const char *const *labels, ferry_metric_t **out);
FERRY_EXTERN int ferry_metrics_gauge(ferry_metrics_t *m, const char *name, const char *help,
                                     const char *const *labels, ferry_metric_t **out);
/** A histogram with @p n increasing upper bounds (+Inf is added). */
FERRY_EXTERN int ferry_metrics_histogram(ferry_metrics_t *m, const char *name, const char *help,
                                         const char *const *labels, const double *bounds, size_t n,
                                         ferry_metric_t **out);

/** Counters: add @p v >= 0 (a negative @p v is ignored and logged). Gauges: add any @p v. */
FERRY_EXTERN void ferry_metric_add(ferry_metric_t *c, double v);
/** Gauges only. */
FERRY_EXTERN void ferry_metric_set(ferry_metric_t *g, double v);
/** Histograms only. */
FERRY_EXTERN void ferry_metric_observe(ferry_metric_t *h, double v);

/** Add the label @p name="@p value" to every sample the registry writes, before a series' own
 *  labels (a job's rank="3", a host's name): for labels no series has. Calls add up. Returns
 *  0, FERRY_EINVAL (NULL, or @p name not a valid label name, naming it) or FERRY_ENOMEM. */
FERRY_EXTERN int ferry_metrics_label_all(ferry_metrics_t *m, const char *name, const char *value);

/** Attach @p p: its statistics appear as `ferry_pipeline_*` and `ferry_fault_*` series with the
 *  label pipeline="@p label". Detach before closing the pipeline. Returns 0, FERRY_EINVAL or
 *  FERRY_ENOMEM. */
FERRY_EXTERN int ferry_metrics_add_pipeline(ferry_metrics_t *m, ferry_pipeline_t *p,
                                            const char *label);
FERRY_EXTERN void ferry_metrics_remove_pipeline(ferry_metrics_t *m, ferry_pipeline_t *p);

/** Write every series in the Prometheus text format. Returns 0 or FERRY_EIO. */
FERRY_EXTERN int ferry_metrics_write(ferry_metrics_t *m, FILE *f);
/** Write to @p path through a temporary file and rename(2), so a reader (node_exporter's
 *  textfile collector) never sees half a file. Returns 0 or FERRY_EIO naming the path. */
FERRY_EXTERN int ferry_metrics_write_file(ferry_metrics_t *m, const char *path);
/** The endpoint's limits: connections open at once (more wait in the kernel's queue, not
 *  accepted, until one closes), and the seconds a connection may stay without sending or
 *  receiving a byte before it is closed. */
#define FERRY_METRICS_CONNECTION_LIMIT 512
#define FERRY_METRICS_IDLE_TIMEOUT_S   5

/** Serve GET (and HEAD) /metrics over HTTP on @p addr, "HOST:PORT": HOST an IPv4 address, an
 *  IPv6 address in brackets or a name, resolved with getaddrinfo(3); only loopback results
 *  are used (127.x.x.x, ::1), the first that binds; PORT 0 picks a free one. Other paths get
 *  404, other methods 405. Served by libmicrohttpd on one thread of its own until the registry
 *  is destroyed: no client, however slow or idle, delays another's scrape or the destroy (all
 *  connections are closed then). The address actually bound ("127.0.0.1:PORT", "[::1]:PORT")
 *  is copied to @p bound (borrowed, may be NULL). Returns 0, FERRY_EINVAL (a malformed
 *  address, a name that does not resolve, or one that is not loopback, naming what is
 *  accepted), FERRY_EBUSY (serving already) or FERRY_EIO (socket, bind or listen failed, with
 *  the reason). Thread-safe. */
FERRY_EXTERN int ferry_metrics_serve(ferry_metrics_t *m, const char *addr, char *bound,
                                     size_t bound_len);

#ifdef __cplusplus
}
#endif
#endif
