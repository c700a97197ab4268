/* The simulated GPU backend's internal interface: the device profile (parsed strictly from JSON,
 * see docs/simulator.md), the copy-time model, and read-only hooks for tests and tools (ferry
 * probe, fuzzers). Nothing here is public; names carry the ferry__sim_ prefix. The backend itself
 * is reached through ferry__sim_backend (backend/backend.h). */
#ifndef FERRY_BACKEND_SIM_H
#define FERRY_BACKEND_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* The "format" string a profile must carry. */
#define FERRY_SIM_PROFILE_FORMAT "ferry-profile-1"
/* Most points per copy curve. */
#define FERRY_SIM_CURVE_MAX 32
/* Profiles larger than this are refused before parsing (a profile is a few KiB). */
#define FERRY_SIM_PROFILE_MAX_BYTES (1u << 20)

enum ferry_sim_dir { FERRY_SIM_H2D = 0, FERRY_SIM_D2H = 1 };

/* copy_pieces (cudaMemcpyBatchAsync): what a piece costs beyond its bytes, on the device and on
 * the calling thread. An H100 host (bench/explore/small_copies.cu, 2026-12-06): 128 pieces of
 * 64 KiB in one call moved 8 MiB at 97.7-97.8% of one copy's rate each way (~28 ns a piece)
 * and the call took 90-92 us (~0.7 us a piece). Not yet in the profiles: measured once, on one
 * kind of host. */
#define FERRY_SIM_PIECE_DEV_NS  28u
#define FERRY_SIM_PIECE_HOST_NS 700u
/* Pieces of piece_kernel_max bytes or fewer move by a copy kernel (a launch a 240 pieces, each
 * charged launch_ns): on the same host it moved 8 MiB of 4-16 KiB pieces at 88-109% of one
 * copy's rate H2D and 93-98% D2H, ~5 us a call whatever its pieces. The model moves them as
 * the copy engines' bytes (the link is what both share) with that fixed cost once a call, not
 * on the SMs it really runs on. */
#define FERRY_SIM_PIECE_KERNEL_DEV_NS 5000u
#define FERRY_SIM_PIECE_KERNEL_MAX    240u

/* A measured copy curve: the elapsed time of one copy of bytes[i] on an idle GPU, as bytes[i] /
 * gbps[i] (GB/s = bytes per ns). Bytes and times strictly increase. */
struct ferry_sim_curve {
    int n;
    uint64_t bytes[FERRY_SIM_CURVE_MAX];
    double gbps[FERRY_SIM_CURVE_MAX];
};

/* A device profile: every number the model uses. Filled by ferry__sim_profile_load. */
struct ferry_sim_profile {
    char path[256];  /* file it was read from ("" when parsed from memory) */
    char format[32]; /* FERRY_SIM_PROFILE_FORMAT */
    char name[128];  /* "NVIDIA H200 (simulated)" */
    int devices;     /* devices this profile simulates (optional key, default 1) */
    /* device */
    int sms;
    int cc_major, cc_minor;
    uint64_t memory_bytes;
    uint64_t l2_bytes;
    int copy_engines;        /* asyncEngineCount, reported only */
    int max_resident_grids;  /* kernels dispatched and not finished, at most */
    int priority_least;      /* numerically largest priority (0 on the H200) */
    int priority_greatest;   /* numerically smallest, the highest priority (-5) */
    double d2d_gbps;         /* device-to-device rate: the default cost of a memory-bound pass */
    int connections_default; /* hardware queues when CUDA_DEVICE_MAX_CONNECTIONS is unset */
    /* pcie */
    int pcie_gen, pcie_width;
    double pcie_gbps; /* theoretical per direction */
    /* copy, indexed by enum ferry_sim_dir */
    int engines[2]; /* FIFO copy engines per direction */
    struct ferry_sim_curve curve[2];
    double bidir_factor;     /* each direction's share of its rate while both transfer */
    double pageable_gbps[2]; /* rate of copies from or to unregistered host memory */
    /* Optional: pieces of copy_pieces this size or smaller move by a copy kernel over mapped
     * host memory (0, the default: never; `ferry probe --calibrate` measures it). */
    uint64_t piece_kernel_max;
    /* host costs, charged to the virtual host clock */
    uint64_t copy_submit_ns;
    uint64_t launch_ns;
    uint64_t event_record_ns;
    uint64_t stream_wait_ns;
    uint64_t register_ns_per_gib;
    uint64_t unregister_ns_per_gib;
    /* Optional: the most host memory registered at once; beyond it host_register is refused
     * as a locked-memory limit would refuse it (0, the default: no limit). */
    uint64_t pin_limit_bytes;
    /* defaults */
    uint64_t default_chunk_bytes;
    /* host_memory (optional section; all 0 when absent: not modelled). memory_gbps is the
     * traffic, bytes read plus bytes written per ns, that the host's memory serves to the DMA
     * of every device and the CPU together: pinned copies draw from it (the model caps their
     * sum at it). The thread figures say what the CPU's own work can reach. */
    double host_memory_gbps;
    double host_thread_read_gbps;
    double host_read_gbps, host_write_gbps, host_copy_gbps; /* all threads; copy: bytes copied */
    int host_threads;
    double host_dma_cpu_loss; /* the DMA's loss per GB/s of CPU traffic; 0: not modelled */
    /* storage (optional section): the file system files of a run are on, on the profile's
     * machine; rates of a parallel sequential read and write (0 when absent or not measured) */
    char storage_kind[32];
    double storage_read_gbps, storage_write_gbps;
    /* Set when loaded as a device of a machine profile with a host_memory section: the
     * machine's file (resolved, so that every device of it names the same one) and its
     * host_memory.gbps, which the machine's open devices share (sim_host.c). "" and 0 else. */
    char machine_path[256];
    double machine_memory_gbps;
};

/* Load and validate the profile at @path into @out. Strict: an unreadable file is FERRY_EIO, a
 * syntax error, unknown or duplicate key, missing required key, wrong type, out-of-range value,
 * zero or negative rate or non-monotonic curve is FERRY_EPARSE; the last-error text names the
 * file, the key and what is accepted. @out is written only on success. Thread-safe. */
int ferry__sim_profile_load(const char *path, struct ferry_sim_profile *out);
/* The same on @len bytes of JSON at @text; @name names the source in messages. For fuzzers. */
int ferry__sim_profile_parse(const char *text, size_t len, const char *name,
                             struct ferry_sim_profile *out);
/* The profile of device @index of the machine at @path: a device profile (each of its
 * "devices" is the same), or a machine profile ("ferry-machine-1", sim_machine.c) listing a
 * device profile per device, whose devices field becomes the machine's count. An index past
 * the count loads the first device's (the caller refuses the index). */
int ferry__sim_profile_load_device(const char *path, int index, struct ferry_sim_profile *out);
/* A machine profile as read for one of its devices. */
struct ferry_sim_machine {
    int total;               /* the machine's devices */
    double host_memory_gbps; /* section host_memory's gbps; 0 when absent */
    char dev_path[256];      /* the device's profile (past the count, the first device's) */
};
/* Machine profiles (sim_machine.c): whether @text is one, and what device @index of it needs
 * (relative paths resolved against @path's directory) in *@out, written only on success.
 * FERRY_EPARSE names the file and key. */
bool ferry__sim_is_machine(const char *text, size_t len);
int ferry__sim_machine_parse(const char *text, size_t len, const char *path, int index,
                             struct ferry_sim_machine *out);
/* Load the built-in profile, h200.json from the first of: the profiles of the tree the program
 * was installed in (<prefix>/share/ferry/profiles, <prefix> found from /proc/self/exe), those of
 * the tree the library was installed in (found with dladdr), FERRY_SOURCE_PROFILE_DIR,
 * FERRY_PROFILE_DIR. A file that exists but is invalid is an error (no silent fall back); none
 * found is FERRY_ENODEV naming the paths tried. */
int ferry__sim_profile_load_default(struct ferry_sim_profile *out);

/* Device-side time in ns of one copy of @bytes in direction @dir on an otherwise idle device
 * (latency plus transfer at the one-direction rate); @pinned false uses the pageable rate. */
uint64_t ferry__sim_copy_ns(const struct ferry_sim_profile *p, int dir, uint64_t bytes,
                            bool pinned);
/* The part of that time that does not use the link (setup and completion latency). */
uint64_t ferry__sim_copy_latency_ns(const struct ferry_sim_profile *p, int dir, uint64_t bytes);

/* The profile a sim device was opened with (borrowed, valid until device_close), for `ferry
 * probe`. NULL when @dev is NULL. */
const struct ferry_sim_profile *ferry__sim_device_profile(ferry_be_device_t *dev);
/* Hardware queues in effect (from CUDA_DEVICE_MAX_CONNECTIONS at open). */
int ferry__sim_connections(ferry_be_device_t *dev);

/* Counters of one device since open. */
struct ferry_sim_stats {
    uint64_t ops_submitted, ops_completed;
    uint64_t copies[2], bytes[2], pageable_copies;
    uint64_t kernels, kernel_errors, blocks;
    int peak_resident_grids;
    uint64_t mem_used, mem_peak;
};
int ferry__sim_stats(ferry_be_device_t *dev, struct ferry_sim_stats *out);

/* Faults: the option `inject` (fault_spec.h, docs/faults.md) gives each device a schedule of
 * kernel errors, sticky errors, hangs, a slow or shared link and allocation failures, seeded by
 * ferry_be_open_params_t.seed. sim_model.c decides them where a kernel or copy starts or
 * completes, sim_backend.c's mem_alloc for allocations. */

#endif
