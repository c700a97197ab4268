/* The CUDA backend's internal interface that needs no CUDA header: PCIe counters from NVML for
 * the monitoring layer, the link-rate and error-code arithmetic (pure, so tests check them on
 * machines without a GPU). The backend itself is reached through ferry__cuda_backend
 * (backend/backend.h); its CUDA-typed internals live in cuda_internal.h. */
#ifndef FERRY_BACKEND_CUDA_H
#define FERRY_BACKEND_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/* One reading of the device's PCIe counters. Every field is -1 when unknown: NVML did not load
 * (no driver, or libnvidia-ml.so.1 absent), does not know the device, or the GPU does not
 * support the query (replay counters are missing on some virtualised GPUs). */
struct ferry_cuda_pcie {
    int gen, width;         /* link now; it drops (Gen1) while the GPU idles to save power */
    int gen_max, width_max; /* what the GPU and slot together can do */
    int64_t tx_bytes_per_s; /* from the GPU to the host, NVML's 20 ms sample (1 KB units) */
    int64_t rx_bytes_per_s; /* from the host to the GPU, likewise */
    int64_t replay_count;   /* link-level retransmissions since the driver loaded */
};

/* Read the counters of @dev (a cuda device). The throughput query samples for about 20 ms in
 * NVML: call it from a monitoring thread, not from the data path. Returns 0 (fields that
 * cannot be read are -1; nothing fails without NVML) or FERRY_EINVAL. Thread-safe. */
int ferry__cuda_pcie_counters(ferry_be_device_t *dev, struct ferry_cuda_pcie *out);

/* Theoretical bytes per second per direction of a PCIe link of generation @gen and @width
 * lanes, in GB/s (1e9 B/s): Gen1/2 8b/10b at 2.5/5 GT/s, Gen3/4/5 128b/130b at 8/16/32 GT/s,
 * Gen6 FLIT (242/256) at 64 GT/s. Gen5 x16 = 63.0. 0 when either is unknown (<= 0 or > 6). */
double ferry__cuda_link_gbps(int gen, int width);

/* The FERRY_* code a CUDA runtime error number (cudaError_t) maps to: the one translation
 * table (cuda_error.c). 0 for cudaSuccess. */
int ferry__cuda_error_code(int cuda_error);

/* Most kernels resident on one device at once (the "maximum number of resident grids per
 * device" row of the CUDA programming guide's compute capability table). */
int ferry__cuda_max_resident_grids(int cc_major, int cc_minor);

#endif
