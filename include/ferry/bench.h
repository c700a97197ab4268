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
    size_t size;  /* sizeof(ferry_copy_bench_config_t), set by the INIT macro */
    size_t bytes; /* bytes per copy (per direction for BOTH), 1 .. 16G */
    ferry_copy_dir_t dir;
    bool pageable;   /* host memory from malloc instead of registered memory */
    unsigned warmup; /* untimed repetitions first; 0: 2 */
    unsigned reps;   /* timed repetitions, 1 .. 10000; 0: 10 */
} ferry_copy_bench_config_t;
#define FERRY_COPY_BENCH_CONFIG_INIT FERRY_SIZED_INIT(ferry_copy_bench_config_t)

typedef struct ferry_copy_bench_result {
    size_t size;        /* sizeof(ferry_copy_bench_result_t), set by the caller */
    double best_gbps;   /* bytes moved (both directions for BOTH) / fastest time, GB/s */
    double median_gbps; /* bytes moved / median time */
    double best_us, median_us;
    unsigned reps;
} ferry_copy_bench_result_t;
#define FERRY_COPY_BENCH_RESULT_INIT FERRY_SIZED_INIT(ferry_copy_bench_result_t)

/** Time copies of @p cfg->bytes on @p dev: host and device buffers are allocated (and host
 *  memory registered unless pageable) for the call and released before it returns; the host
 *  buffer holds random bytes. Returns 0, FERRY_EINVAL (bad size, direction or counts, with the
 *  accepted range in the last-error text), FERRY_ENOMEM, FERRY_EDEVMEM, FERRY_EBACKEND. */
FERRY_EXTERN int ferry_bench_copy(ferry_device_t *dev, const ferry_copy_bench_config_t *cfg,
                                  ferry_copy_bench_result_t *out);

#define FERRY_CALIBRATION_POINTS 6
#define FERRY_CALIBRATION_PIECES 3

typedef struct ferry_calibration {
    size_t size;                               /* sizeof(ferry_calibration_t), set by the caller */
    uint64_t bytes[FERRY_CALIBRATION_POINTS];  /* 4K, 64K, 1M, 4M, 16M, 64M */
    double h2d_gbps[FERRY_CALIBRATION_POINTS]; /* best of the repetitions, pinned */
    double d2h_gbps[FERRY_CALIBRATION_POINTS];
    double bidirectional_factor; /* 64 MiB both at once: each direction's share of its rate */
    double pageable_h2d_gbps, pageable_d2h_gbps; /* 64 MiB */
    double copy_submit_ns;                       /* host time of one async copy call (median) */
    double launch_ns;                            /* host time of one launch of the scale workload */
    double event_record_ns;                      /* host time of one event record */
    double stream_wait_ns;                       /* host time of one stream wait on an event */
    double d2d_gbps; /* the scale workload over 256 MiB: bytes / kernel time */
    /* Appended: small pieces (4, 16 and 64 KiB, 8 MiB of them apart in pinned memory, one call
     * in and one out): GB/s each way on the device clock moved by the copy engines (one
     * cudaMemcpyBatchAsync) and by the copy kernel over the host memory; piece_kernel_max, the
     * largest of the sizes up to which the kernel was the faster at each (0: at none). All 0
     * where the backend moves no pieces. */
    uint64_t piece_bytes[FERRY_CALIBRATION_PIECES];
    double piece_engine_gbps[FERRY_CALIBRATION_PIECES];
    double piece_kernel_gbps[FERRY_CALIBRATION_PIECES];
    uint64_t piece_kernel_max;
} ferry_calibration_t;
#define FERRY_CALIBRATION_INIT FERRY_SIZED_INIT(ferry_calibration_t)

/** Measure the simulator's parameters on @p dev (times from device events; host call costs
 *  from the device clock, which on the simulator is its virtual host clock, so calibrating
 *  the simulator gives back its profile). Takes a few seconds on a GPU. Returns 0,
 *  FERRY_EINVAL, FERRY_ENOMEM, FERRY_EDEVMEM, FERRY_EBACKEND. */
FERRY_EXTERN int ferry_calibrate(ferry_device_t *dev, ferry_calibration_t *out);

/** Write a simulator profile for @p dev from @p cal to @p path: the device's properties and
 *  the measured numbers, with the rest (engine split, register costs, defaults) taken from the
 *  profile at @p base (NULL: the installed h200.json); the result is loaded back and
 *  validated. Returns 0, FERRY_EINVAL, FERRY_EPARSE (base), FERRY_EIO (writing). */
FERRY_EXTERN int ferry_calibration_write_profile(ferry_device_t *dev,
                                                 const ferry_calibration_t *cal, const char *base,
                                                 const char *path);

#ifdef __cplusplus
}
#endif
#endif
