/* CUDA_DEVICE_MAX_CONNECTIONS and CUDA_DEVICE_MAX_COPY_CONNECTIONS: how CUDA reads a value,
 * ferry's strict parsing of the values it is asked to set, what a value costs in device memory,
 * and a recommendation for a workload. The facts behind it (FACTS.md, measured on an H200 with
 * CUDA 13.0): the documented range is 1..32, the default 8 (without MPS); 0 and "abc" behave
 * as unset; 33 and 64 were used as given (memory grew) but are undocumented; the variable is
 * read once, at cuInit, for every device of the process; ~64 KiB of device memory per compute
 * connection and ~192 KiB per copy connection. */
#ifndef FERRY_CONNECTIONS_H
#define FERRY_CONNECTIONS_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_CONNECTIONS_DEFAULT       8u
#define FERRY_CONNECTIONS_MAX           32u          /* documented */
#define FERRY_CONNECTIONS_COMPUTE_BYTES (64u << 10)  /* device memory per compute connection */
#define FERRY_CONNECTIONS_COPY_BYTES    (192u << 10) /* device memory per copy connection */

typedef enum ferry_conn_status {
    FERRY_CONN_UNSET = 0,    /* not set, or empty: the default */
    FERRY_CONN_VALID,        /* an integer in 1..32 */
    FERRY_CONN_UNDOCUMENTED, /* an integer above 32: used as given (measured at 33 and 64) */
    FERRY_CONN_IGNORED,      /* 0 or negative: behaves as unset (measured at 0) */
    FERRY_CONN_MALFORMED     /* not a plain decimal integer ("abc", "8x", " 8") */
} ferry_conn_status_t;

typedef struct ferry_conn_reading {
    ferry_conn_status_t status;
    unsigned effective; /* the queues CUDA uses, as far as is known */
    bool measured;      /* that reading was measured (FACTS.md), not inferred */
    char note[200];     /* one sentence for people */
} ferry_conn_reading_t;

/** How CUDA reads @p text (NULL: the variable is not set) as a connections variable. Always
 *  fills @p out and returns 0 (FERRY_EINVAL for a NULL @p out). */
FERRY_EXTERN int ferry_connections_read(const char *text, ferry_conn_reading_t *out);

/** Strict parsing of a value ferry is asked to set: a decimal integer in 1..32, nothing else
 *  (no sign, spaces, suffix or leading zeros beyond "0"). @p what names the input in the error
 *  text ("--connections", "FERRY_CONNECTIONS"). Returns 0, FERRY_EPARSE or FERRY_ERANGE. */
FERRY_EXTERN int ferry_connections_parse(const char *what, const char *text, unsigned *out);

/** Per-device rules, "MATCH=VALUE" items separated by commas, the first that matches wins:
 *  MATCH is index:K (ferry's device index), name:TEXT (a case-insensitive part of the device's
 *  name), cc:X.Y (compute capability exactly), cc>=X.Y, or * (any); VALUE is a connections
 *  value (ferry_connections_parse). The value for device @p index called @p name of compute
 *  capability @p cc_major.@p cc_minor: returns 1 with *@p value set, 0 when no rule matches
 *  (*@p value untouched), FERRY_EINVAL (a malformed rule, anywhere in @p rules: the message
 *  names it, @p what first, and the syntax), FERRY_EPARSE or FERRY_ERANGE (a bad VALUE). Every
 *  rule is checked whatever matches: index -1 checks the text alone. Thread-safe. */
FERRY_EXTERN int ferry_connections_rule(const char *rules, const char *what, int index,
                                        const char *name, int cc_major, int cc_minor,
                                        unsigned *value);

/** Device memory per context for @p compute compute and @p copy copy connections, in bytes,
 *  from the measured per-connection costs. */
FERRY_EXTERN size_t ferry_connections_memory_bytes(unsigned compute, unsigned copy);

/** True when CUDA has been initialised in this process (cuInit ran): a connections variable
 *  set now would not be read. False when CUDA is not loaded, or loaded and not initialised. */
FERRY_EXTERN bool ferry_cuda_initialized(void);

/** The measured law (FACTS.md): @p streams streams, each given kernel A (@p a_ns, one block)
 *  then kernel B (@p b_ns, one block), issued stream by stream, take a x ceil(streams / C) with
 *  C queues; issued round-robin (every A, then every B) they run concurrent at any C. */
typedef struct ferry_conn_measure {
    size_t size;                /* sizeof(ferry_conn_measure_t), set by the INIT macro */
    unsigned streams;           /* streams the pattern ran on */
    double a_ms, b_ms;          /* the kernels' lengths */
    double total_ms;            /* stream by stream, median of the repetitions */
    double roundrobin_ms;       /* round-robin, median */
    double waves;               /* total / a: how many times A's length the pattern took */
    double effective_queues;    /* streams / round(waves): the queues the pattern saw */
    bool at_least;              /* one wave: the queues are at least `streams` */
    double serialization;       /* total / roundrobin: 1 concurrent, up to `streams` serial */
    uint64_t device_used_bytes; /* device memory in use with the streams created (total - free) */
    uint64_t device_total_bytes;
} ferry_conn_measure_t;
#define FERRY_CONN_MEASURE_INIT FERRY_SIZED_INIT(ferry_conn_measure_t)

/** Run the pattern on @p dev (cuda: a spin kernel on the GPU's global timer; sim: the model)
 *  @p reps times after a warm-up. @p streams 1..64, @p a_ns and @p b_ns 1 us..1 s, @p reps
 *  1..100. The queues are those of this process: CUDA read the variable at cuInit, so one
 *  value per process (`ferry connections --measure` starts one child per value). Returns 0,
 *  FERRY_EINVAL, FERRY_ENOTSUP (ferry built without CUDA kernels for this backend) or a backend
 *  error. */
FERRY_EXTERN int ferry_connections_measure(ferry_device_t *dev, unsigned streams, uint64_t a_ns,
                                           uint64_t b_ns, unsigned reps, ferry_conn_measure_t *out);

/** ferry_connections_measure where pipeline @p drives its device: under isolation=process in
 *  its worker process, whose CUDA_DEVICE_MAX_CONNECTIONS is its own (option
 *  connections_per_device): the queues that worker really got; in this process otherwise.
 *  Arguments as ferry_connections_measure's. @p must have no batch in flight (drain first). Not
 *  from @p's own callbacks. Returns 0, FERRY_EINVAL (NULL, @out not set up with
 *  FERRY_CONN_MEASURE_INIT, a pipeline over a set of devices), FERRY_EBUSY (batches in flight,
 *  another measurement running, or called from a callback), FERRY_ECLOSED, FERRY_ESTICKY (the
 *  device was retired: no worker), FERRY_EBACKEND (the worker ended meanwhile), or
 *  ferry_connections_measure's errors. */
FERRY_EXTERN int ferry_pipeline_connections_measure(ferry_pipeline_t *p, unsigned streams,
                                                    uint64_t a_ns, uint64_t b_ns, unsigned reps,
                                                    ferry_conn_measure_t *out);

#ifdef __cplusplus
}
#endif
#endif
