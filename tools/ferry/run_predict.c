/* `ferry run` on the simulator: what the run would reach end to end on the host the profile
 * describes (docs/simulator.md, "The host"). The simulated device gives the transport rate (its
 * copies already draw from the host's memory); this file adds the host side the simulator does
 * not run: the bytes of host memory traffic each streamed byte costs (the DMA both ways, file
 * reads and writes, verification), the verifier threads' reading rate and the storage's rates.
 * The prediction is the least of those limits, named. */
#include <string.h>

#include "run.h"

/* Bytes of host memory traffic per byte moved from or to a file on @h's storage: the kernel's
 * copy through the page cache (read once, written once) on tmpfs; a direct transfer otherwise
 * (the drive's DMA writes or reads the buffer once). */
static double file_traffic(const ferry_host_props_t *h)
{
    return strcmp(h->storage_kind, "tmpfs") == 0 ? 2.0 : 1.0;
}

/* Keep the least limit seen so far, with its name and reason. */
static void limit(run_predict_t *p, double gbps, const char *bound, const char *why)
{
    if (gbps <= 0 || (p->gbps > 0 && gbps >= p->gbps))
        return;
    p->gbps = gbps;
    p->bound = bound;
    snprintf(p->why, sizeof(p->why), "%s", why);
}

void run_predict(const run_opts_t *ro, const ferry_host_props_t *h, double transport_gbps,
                 const char *device_bound, run_predict_t *p)
{
    *p = (run_predict_t){0};
    if (!h->modelled || h->memory_gbps <= 0)
        return;
    p->have = true;
    char why[200];
    double frac = ro->verify_mode == RUN_VERIFY_FULL     ? 1.0
                  : ro->verify_mode == RUN_VERIFY_SAMPLE ? 1.0 / RUN_VERIFY_SAMPLE_EVERY
                                                         : 0.0;
    /* Generated data is checked by one read of the output (its digests); a file's by reading
     * its input (to make the reference, in cache) and the output. */
    double reads = ro->input_file || ro->input_stream ? 2.0 : 1.0;
    double traffic = 2.0 + frac * reads; /* the H2D reads and the D2H writes, verification */
    if (ro->input_file)
        traffic += file_traffic(h);
    else if (ro->input_stream)
        traffic += 2.0; /* a pipe: copied in by the kernel */
    if (ro->output_file)
        traffic += file_traffic(h);
    else if (ro->output_stream && !ro->output_null)
        traffic += 1.0;
    p->traffic = traffic;
    /* the CPU's share of it: verification, and the kernel's copies of a tmpfs file or a pipe */
    double cpu_traffic = frac * reads;
    bool tmpfs = strcmp(h->storage_kind, "tmpfs") == 0;
    cpu_traffic += ro->input_file ? (tmpfs ? 2.0 : 0.0) : ro->input_stream ? 2.0 : 0.0;
    cpu_traffic += ro->output_file                         ? (tmpfs ? 2.0 : 0.0)
                   : ro->output_stream && !ro->output_null ? 1.0
                                                           : 0.0;

    snprintf(why, sizeof(why), "the simulated device's transport rate");
    limit(p, transport_gbps, device_bound, why);
    snprintf(why, sizeof(why), "%.1f bytes of host memory traffic per byte, at %.0f GB/s", traffic,
             h->memory_gbps);
    limit(p, h->memory_gbps / traffic, "host memory", why);
    if (h->dma_cpu_loss > 0 && cpu_traffic > 0) {
        /* The DMA slows as the CPU draws memory beside it, and the CPU's traffic follows the
         * DMA's rate x: x = T (1 - loss cpu x), so x = T / (1 + loss cpu T). */
        double x = transport_gbps / (1 + h->dma_cpu_loss * cpu_traffic * transport_gbps);
        snprintf(why, sizeof(why),
                 "the DMA loses %.2f%% per 10 GB/s of CPU memory traffic beside it (%.1f "
                 "byte(s) per byte)",
                 h->dma_cpu_loss * 1000, cpu_traffic);
        limit(p, x, "host memory", why);
    }
    if (frac > 0 && h->thread_read_gbps > 0) {
        /* the verifiers ferry run would start there (run_helper_threads) */
        unsigned v = h->threads > 2 ? (unsigned)h->threads - 2 : 1;
        v = v < RUN_MAX_HELPERS ? v : RUN_MAX_HELPERS;
        double cpu = v * h->thread_read_gbps;
        if (h->read_gbps > 0 && cpu > h->read_gbps)
            cpu = h->read_gbps;
        snprintf(why, sizeof(why),
                 "%u verifier(s) reading %.0f byte(s) per byte checked, %.1f GB/s", v, reads, cpu);
        limit(p, cpu / reads / frac, "verification", why);
    }
    if (ro->input_file && h->storage_read_gbps > 0) {
        snprintf(why, sizeof(why), "reading %s at %.1f GB/s", h->storage_kind,
                 h->storage_read_gbps);
        limit(p, h->storage_read_gbps, "storage", why);
    }
    if (ro->output_file) {
        /* Writes not measured on tmpfs: the kernel copies into the page cache at the CPUs'
         * copy rate. */
        double w = h->storage_write_gbps > 0               ? h->storage_write_gbps
                   : strcmp(h->storage_kind, "tmpfs") == 0 ? h->copy_gbps
                                                           : 0;
        snprintf(why, sizeof(why), "writing %s at %.1f GB/s%s", h->storage_kind, w,
                 h->storage_write_gbps > 0 ? "" : " (its copy rate: writes not measured)");
        limit(p, w, "storage", why);
    }
}
