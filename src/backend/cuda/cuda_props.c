/* What the cuda backend reports about a device: cudaDeviceProp, stream priorities, versions,
 * the PCIe link from NVML and its theoretical rate, NUMA locality from sysfs, the resident-grid
 * limit from the CUDA programming guide, and the default chunk size from FACTS.md. */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

double ferry__cuda_link_gbps(int gen, int width)
{
    /* Per lane: transfer rate (GT/s) x encoding efficiency = Gbit/s of payload. PCIe base
     * specifications: Gen1 2.5 and Gen2 5 GT/s with 8b/10b; Gen3 8, Gen4 16, Gen5 32 GT/s with
     * 128b/130b; Gen6 64 GT/s PAM4 in 256-byte FLITs of which 242 carry data. */
    static const double lane_gbit[] = {
        0.0,
        2.5 * 8 / 10,
        5.0 * 8 / 10,
        8.0 * 128 / 130,
        16.0 * 128 / 130,
        32.0 * 128 / 130,
        64.0 * 242 / 256,
    };
    if (gen <= 0 || gen > 6 || width <= 0)
        return 0.0;
    return lane_gbit[gen] * (double)width / 8.0;
}

int ferry__cuda_max_resident_grids(int cc_major, int cc_minor)
{
    /* CUDA C++ Programming Guide, "Compute Capabilities", row "Maximum number of resident
     * grids per device (Concurrent Kernel Execution)": 128 for every capability from 7.5 to
     * 12.x (the current table), and, in the older tables, 32 for 3.5-5.2 and 6.1, 16 for 3.0,
     * 5.3, 6.2 and 7.2, 4 for 3.2, 128 for 6.0 and 7.0. */
    int cc = cc_major * 10 + cc_minor;
    switch (cc) {
    case 30:
    case 53:
    case 62:
    case 72: return 16;
    case 32: return 4;
    case 35:
    case 37:
    case 50:
    case 52:
    case 61: return 32;
    default: return cc < 30 ? 16 : 128;
    }
}

int ferry__cuda_numa_node(const char *bus_id)
{
    char path[128], lower[32];
    size_t i = 0;
    for (; bus_id[i] != '\0' && i + 1 < sizeof(lower); i++)
        lower[i] = (char)(bus_id[i] >= 'A' && bus_id[i] <= 'F' ? bus_id[i] - 'A' + 'a' : bus_id[i]);
    lower[i] = '\0';
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", lower);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int node = -1;
    if (fscanf(f, "%d", &node) != 1)
        node = -1;
    fclose(f);
    return node < 0 ? -1 : node; /* the kernel writes -1 when the platform does not say */
}

/* "13.0" from CUDA's 1000 x major + 10 x minor. */
static void version_text(int v, char *out, size_t len)
{
    snprintf(out, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

int ferry__cuda_props(struct ferry_be_device *dev, ferry_device_props_t *out)
{
    const struct cudaDeviceProp *p = &dev->prop;
    ferry__be_props_begin(out, p->name, "cuda", dev->index, false);
    ferry__be_props_gpu(out, p->major, p->minor, p->multiProcessorCount, p->asyncEngineCount,
                        ferry__cuda_max_resident_grids(p->major, p->minor), dev->prio_least,
                        dev->prio_greatest, (uint64_t)p->totalGlobalMem, (uint64_t)p->l2CacheSize);
    out->concurrent_kernels = p->concurrentKernels != 0;
    struct ferry_cuda_pcie link;
    ferry__cuda_nvml_link(dev, &link);
    out->pcie_gen = link.gen > 0 ? link.gen : 0;
    out->pcie_width = link.width > 0 ? link.width : 0;
    out->pcie_gen_max = link.gen_max > 0 ? link.gen_max : 0;
    out->pcie_width_max = link.width_max > 0 ? link.width_max : 0;
    /* The maximum, not the current link: an idle GPU drops its link to Gen1 to save power. */
    out->link_gbps = ferry__cuda_link_gbps(out->pcie_gen_max, out->pcie_width_max);
    out->numa_node = dev->numa_node;
    if (dev->nvml.driver_version[0] != '\0')
        ferry__strlcpy(out->driver_version, dev->nvml.driver_version, sizeof(out->driver_version));
    else
        version_text(dev->driver_version, out->driver_version, sizeof(out->driver_version));
    version_text(dev->runtime_version, out->runtime_version, sizeof(out->runtime_version));
    snprintf(out->pci_bus_id, sizeof(out->pci_bus_id), "%s", dev->pci_bus_id);
    out->default_chunk_bytes = FERRY_CUDA_DEFAULT_CHUNK;
    out->piece_kernel_max = p->canUseHostPointerForRegisteredMem ? FERRY_CUDA_PIECE_KERNEL_MAX : 0u;
    return 0;
}
