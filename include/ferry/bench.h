/* Measurements ferry makes of a device, through the same backend it streams with: the copy
 * rate by size and direction (pinned or pageable). Times come from device events (virtual on
 * the simulator); each result keeps the best and the median of its repetitions. */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ferry_copy_dir {
    FERRY_COPY_H2D = 0,
    FERRY_COPY_D2H = 1,
    FERRY_COPY_BOTH = 2 /* one H2D and one D2H of the same size at once, on two streams */
} ferry_copy_dir_t;

typedef struct ferry_copy_bench_config {
    size_t size;       /* sizeof(ferry_copy_bench_config_t), set by the INIT macro */
    size_t bytes;      /* bytes per copy (per direction for BOTH), 1 .. 16G */
    ferry_copy_dir_t dir;
    bool pageable;     /* host memory from malloc instead of registered memory */
    unsigned warmup;   /* untimed repetitions first; 0: 2 */
    unsigned reps;     /* timed repetitions, 1 .. 10000; 0: 10 */
} ferry_copy_bench_config_t;
#define FERRY_COPY_BENCH_CONFIG_INIT {.size = sizeof(ferry_copy_bench_config_t)}

typedef struct ferry_copy_bench_result {
    size_t size;        /* sizeof(ferry_copy_bench_result_t), set by the caller */
    double best_gbps;   /* bytes moved (both directions for BOTH) / fastest time, GB/s */
    double median_gbps; /* bytes moved / median time */
    double best_us, median_us;
    unsigned reps;
} ferry_copy_bench_result_t;
#define FERRY_COPY_BENCH_RESULT_INIT {.size = sizeof(ferry_copy_bench_result_t)}

/** Time copies of @p cfg->bytes on @p dev: host and device buffers are allocated (and host
 *  memory registered unless pageable) for the call and released before it returns; the host
 *  buffer holds random bytes. Returns 0, FERRY_EINVAL (bad size, direction or counts, with the
 *  accepted range in the last-error text), FERRY_ENOMEM, FERRY_EDEVMEM, FERRY_EBACKEND. */
FERRY_EXTERN int ferry_bench_copy(ferry_device_t *dev, const ferry_copy_bench_config_t *cfg,
                                  ferry_copy_bench_result_t *out);

#ifdef __cplusplus
}
#endif
#endif
