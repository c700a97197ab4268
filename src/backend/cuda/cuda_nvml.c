/* NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): the driver version string, the
 * PCIe link (current and maximum generation and width), PCIe throughput and replay counters.
 * NVML is optional: without it (no driver, a container without the library, a build machine)
 * every field reads unknown and nothing fails. ferry declares the few NVML symbols it uses
 * (cuda_internal.h) because nvml.h is not part of the CUDA toolkit install here. */
#include <dlfcn.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

#define NVML_LIB "libnvidia-ml.so.1"

/* dlsym into a function pointer without the object-to-function cast ISO C forbids. */
static bool sym(void *lib, const char *name, void *fn_ptr, size_t fn_size)
{
    void *p = dlsym(lib, name);
    if (p == NULL)
        return false;
    memcpy(fn_ptr, &p, fn_size);
    return true;
}

void ferry__cuda_nvml_open(struct ferry_be_device *dev)
{
    struct ferry_cuda_nvml *n = &dev->nvml;
    memset(n, 0, sizeof(*n));
    void *lib = dlopen(NVML_LIB, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        ferry_log(FERRY_LOG_INFO, "cuda",
                  "device %d: NVML not loaded (%s): PCIe link and "
                  "counters unknown",
                  dev->index, why ? why : NVML_LIB);
        return;
    }
    nvml_return_t (*init)(void) = NULL;
    nvml_return_t (*driver)(char *, unsigned) = NULL;
    nvml_return_t (*by_bus)(const char *, nvml_device_t *) = NULL;
    if (!sym(lib, "nvmlInit_v2", &init, sizeof(init)) ||
        !sym(lib, "nvmlShutdown", &n->shutdown, sizeof(n->shutdown)) ||
        !sym(lib, "nvmlErrorString", &n->error_string, sizeof(n->error_string))) {
        ferry_log(FERRY_LOG_INFO, "cuda", "device %d: %s lacks nvmlInit_v2: NVML not used",
                  dev->index, NVML_LIB);
        goto out_close;
    }
    nvml_return_t r = init();
    if (r != 0) {
        ferry_log(FERRY_LOG_INFO, "cuda", "device %d: nvmlInit_v2: %s (%d): NVML not used",
                  dev->index, n->error_string(r), r);
        goto out_close;
    }
    n->lib = lib;
    /* Optional symbols: a missing one leaves its field unknown. */
    sym(lib, "nvmlSystemGetDriverVersion", &driver, sizeof(driver));
    sym(lib, "nvmlDeviceGetHandleByPciBusId_v2", &by_bus, sizeof(by_bus));
    sym(lib, "nvmlDeviceGetCurrPcieLinkGeneration", &n->curr_gen, sizeof(n->curr_gen));
    sym(lib, "nvmlDeviceGetMaxPcieLinkGeneration", &n->max_gen, sizeof(n->max_gen));
    sym(lib, "nvmlDeviceGetCurrPcieLinkWidth", &n->curr_width, sizeof(n->curr_width));
    sym(lib, "nvmlDeviceGetMaxPcieLinkWidth", &n->max_width, sizeof(n->max_width));
    sym(lib, "nvmlDeviceGetPcieThroughput", &n->throughput, sizeof(n->throughput));
    sym(lib, "nvmlDeviceGetPcieReplayCounter", &n->replays, sizeof(n->replays));
    if (driver != NULL && driver(n->driver_version, sizeof(n->driver_version)) != 0)
        n->driver_version[0] = '\0';
    /* NVML numbers GPUs its own way (not CUDA_VISIBLE_DEVICES order): find ours by bus id. */
    if (by_bus != NULL && dev->pci_bus_id[0] != '\0') {
        r = by_bus(dev->pci_bus_id, &n->dev);
        if (r != 0) {
            ferry_log(FERRY_LOG_INFO, "cuda",
                      "device %d: nvmlDeviceGetHandleByPciBusId_v2(%s): %s (%d): PCIe link "
                      "unknown",
                      dev->index, dev->pci_bus_id, n->error_string(r), r);
            n->dev = NULL;
        }
    }
    return;
out_close:
    dlclose(lib);
    memset(n, 0, sizeof(*n));
}

void ferry__cuda_nvml_close(struct ferry_be_device *dev)
{
    struct ferry_cuda_nvml *n = &dev->nvml;
    if (n->lib == NULL)
        return;
    /* nvmlInit/nvmlShutdown are reference counted: each device holds one reference. */
    n->shutdown();
    dlclose(n->lib);
    memset(n, 0, sizeof(*n));
}

/* One unsigned NVML reading as an int64, -1 when unknown. */
static int64_t read_u(const struct ferry_cuda_nvml *n,
                      nvml_return_t (*fn)(nvml_device_t, unsigned *))
{
    unsigned v = 0;
    if (n->lib == NULL || n->dev == NULL || fn == NULL || fn(n->dev, &v) != 0)
        return -1;
    return (int64_t)v;
}

void ferry__cuda_nvml_link(struct ferry_be_device *dev, struct ferry_cuda_pcie *out)
{
    const struct ferry_cuda_nvml *n = &dev->nvml;
    out->gen = (int)read_u(n, n->curr_gen);
    out->width = (int)read_u(n, n->curr_width);
    out->gen_max = (int)read_u(n, n->max_gen);
    out->width_max = (int)read_u(n, n->max_width);
    out->tx_bytes_per_s = out->rx_bytes_per_s = out->replay_count = -1;
}

int ferry__cuda_pcie_counters(ferry_be_device_t *dev, struct ferry_cuda_pcie *out)
{
    if (dev == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL, "cuda: pcie_counters: NULL device or out");
    const struct ferry_cuda_nvml *n = &dev->nvml;
    ferry__cuda_nvml_link(dev, out);
    out->replay_count = read_u(n, n->replays);
    if (n->lib != NULL && n->dev != NULL && n->throughput != NULL) {
        /* NVML reports KB/s (taken as 1024 bytes) over a 20 ms sample. */
        unsigned v = 0;
        if (n->throughput(n->dev, FERRY_NVML_PCIE_TX_BYTES, &v) == 0)
            out->tx_bytes_per_s = (int64_t)v * 1024;
        if (n->throughput(n->dev, FERRY_NVML_PCIE_RX_BYTES, &v) == 0)
            out->rx_bytes_per_s = (int64_t)v * 1024;
    }
    return 0;
}

int ferry__cuda_nvml_rate(struct ferry_be_device *dev, int dir, double *bytes_per_s)
{
    const struct ferry_cuda_nvml *n = &dev->nvml;
    if (n->lib == NULL || n->dev == NULL || n->throughput == NULL)
        return ferry__error(FERRY_ENOTSUP,
                            "cuda: device %d: NVML's PCIe throughput counter is "
                            "not available (NVML not loaded or too old)",
                            dev->index);
    unsigned v = 0;
    nvml_return_t r =
        n->throughput(n->dev, dir == 0 ? FERRY_NVML_PCIE_RX_BYTES : FERRY_NVML_PCIE_TX_BYTES, &v);
    if (r != 0)
        return ferry__error(r == 3 ? FERRY_ENOTSUP : FERRY_EIO,
                            "cuda: device %d: nvmlDeviceGetPcieThroughput: %s (%d)", dev->index,
                            n->error_string(r), r);
    *bytes_per_s = (double)v * 1024; /* KB/s, taken as 1024 bytes as elsewhere */
    return 0;
}
