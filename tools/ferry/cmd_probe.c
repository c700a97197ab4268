/* `ferry probe`: the backends built in, whether each has a device (and why not), and every
 * device's properties; on the simulator, the profile it models. Text or --json. */
#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "ferry/bench.h"

static void print_props_text(const ferry_device_props_t *p, const ferry_host_props_t *h)
{
    char mem[32], l2[32];
    printf("  device %d: %s%s\n", p->index, p->name, p->simulated ? "  [simulated]" : "");
    printf("    compute capability  %d.%d, %d SMs, up to %d resident grids, concurrent kernels "
           "%s\n",
           p->cc_major, p->cc_minor, p->sms, p->max_resident_grids,
           p->concurrent_kernels ? "yes" : "no");
    printf("    memory              %s, L2 %s\n", cli_bytes(p->memory_bytes, mem, sizeof(mem)),
           cli_bytes(p->l2_bytes, l2, sizeof(l2)));
    printf("    copy engines        %d\n", p->copy_engines);
    printf("    stream priorities   %d (least) .. %d (greatest)\n", p->priority_least,
           p->priority_greatest);
    if (p->pcie_gen > 0)
        printf("    PCIe link           Gen%d x%d (max Gen%d x%d), %.1f GB/s per direction "
               "theoretical\n",
               p->pcie_gen, p->pcie_width, p->pcie_gen_max, p->pcie_width_max, p->link_gbps);
    else
        printf("    PCIe link           unknown\n");
    if (p->numa_node >= 0)
        printf("    NUMA node           %d\n", p->numa_node);
    else
        printf("    NUMA node           unknown\n");
    if (p->pci_bus_id[0])
        printf("    PCI bus id          %s\n", p->pci_bus_id);
    printf("    driver / runtime    %s / %s\n", p->driver_version, p->runtime_version);
    if (p->profile[0])
        printf("    profile             %s\n", p->profile);
    if (h->modelled && h->memory_gbps > 0)
        printf("    host                the profile's: %d threads; memory %.0f GB/s to DMA and CPU "
               "together, "
               "one thread reads %.1f GB/s, all %.1f\n",
               h->threads, h->memory_gbps, h->thread_read_gbps, h->read_gbps);
    if (h->modelled && h->dma_cpu_loss > 0)
        printf("    host DMA            loses %.2f%% per 10 GB/s of CPU memory traffic beside it\n",
               h->dma_cpu_loss * 1000);
    if (h->modelled && h->storage_read_gbps > 0)
        printf("    storage             the profile's %s: read %.1f GB/s%s\n", h->storage_kind,
               h->storage_read_gbps, h->storage_write_gbps > 0 ? "" : ", write not measured");
}

/* The device's host in --json: null where the backend does not model it. */
static void host_json(json_t *j, const ferry_host_props_t *h)
{
    json_key(j, "host");
    if (!h->modelled) {
        json_null(j);
        return;
    }
    json_object_begin(j);
    json_key_int(j, "threads", h->threads);
    json_key_double(j, "memory_gbps", h->memory_gbps, 3);
    json_key_double(j, "thread_read_gbps", h->thread_read_gbps, 3);
    json_key_double(j, "read_gbps", h->read_gbps, 3);
    json_key_double(j, "write_gbps", h->write_gbps, 3);
    json_key_double(j, "copy_gbps", h->copy_gbps, 3);
    json_key_double(j, "dma_cpu_loss", h->dma_cpu_loss, 6);
    json_key_str(j, "storage_kind", h->storage_kind);
    json_key_double(j, "storage_read_gbps", h->storage_read_gbps, 3);
    json_key_double(j, "storage_write_gbps", h->storage_write_gbps, 3);
    json_object_end(j);
}

static void print_props_json(json_t *j, const ferry_device_props_t *p, const ferry_host_props_t *h)
{
    char cc[24];
    snprintf(cc, sizeof(cc), "%d.%d", p->cc_major, p->cc_minor);
    json_object_begin(j);
    json_key_int(j, "index", p->index);
    json_key_str(j, "name", p->name);
    json_key_bool(j, "simulated", p->simulated);
    json_key_str(j, "cc", cc);
    json_key_int(j, "sms", p->sms);
    json_key_int(j, "max_resident_grids", p->max_resident_grids);
    json_key_bool(j, "concurrent_kernels", p->concurrent_kernels);
    json_key_uint(j, "memory_bytes", p->memory_bytes);
    json_key_uint(j, "l2_bytes", p->l2_bytes);
    json_key_int(j, "copy_engines", p->copy_engines);
    json_key_int(j, "priority_least", p->priority_least);
    json_key_int(j, "priority_greatest", p->priority_greatest);
    json_key_int(j, "pcie_gen", p->pcie_gen);
    json_key_int(j, "pcie_width", p->pcie_width);
    json_key_int(j, "pcie_gen_max", p->pcie_gen_max);
    json_key_int(j, "pcie_width_max", p->pcie_width_max);
    json_key_double(j, "link_gbps", p->link_gbps, 3);
    json_key_int(j, "numa_node", p->numa_node);
    json_key_str(j, "driver_version", p->driver_version);
    json_key_str(j, "runtime_version", p->runtime_version);
    json_key_str(j, "pci_bus_id", p->pci_bus_id);
    json_key_str(j, "profile", p->profile);
    host_json(j, h);
    json_object_end(j);
}

static int usage(void)
{
    printf("usage: ferry probe [--json] [--backend NAME] [--profile FILE]\n"
           "       ferry probe --calibrate -o FILE [--backend NAME] [--json]\n\n"
           "Show every backend built into ferry, whether it has a device here (and the reason\n"
           "when it does not), and each device's properties: name, compute capability, SMs,\n"
           "memory, copy engines, stream priorities, PCIe link, NUMA node, versions. The\n"
           "simulator shows the device profile it models.\n\n"
           "  --json            one JSON object\n"
           "  --backend NAME    probe only this backend (sim, cuda)\n"
           "  --profile FILE    simulator profile to load (default: profiles/h200.json)\n"
           "  --calibrate -o FILE (or --output FILE)\n"
           "                    measure copies, the shared link, pageable rates, host call costs\n"
           "                    and the kernel rate on the device, and write a simulator profile\n"
           "                    (--backend sim --profile FILE then models this device)\n");
    return CLI_OK;
}

/* `ferry probe --calibrate -o FILE`: measure the device and write a simulator profile. */
static int calibrate(ferry_options_t *opts, const char *backend, const char *path, bool json)
{
    const char *cmd = "probe";
    /* The profile's place is checked first: a calibration takes seconds (minutes under a
     * sanitizer) and its results would be lost at the end. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        strcpy(dir, ".");
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_fail(cmd, "cannot write the profile '%s': its directory '%s' does not exist",
                        path, dir);
    if (access(dir, W_OK) != 0 || (access(path, F_OK) == 0 && access(path, W_OK) != 0))
        return cli_fail(cmd, "cannot write the profile '%s': %s", path, strerror(EACCES));
    ferry_runtime_config_t rc_ = FERRY_RUNTIME_CONFIG_INIT;
    rc_.backend = backend;
    rc_.options = opts;
    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    int rc = CLI_FAIL;
    if (ferry_runtime_create(&rc_, &rt) != 0) {
        cli_fail(cmd, "%s", ferry_last_error());
        return CLI_FAIL;
    }
    int64_t idx = 0;
    ferry_options_get_i64(opts, "device", &idx);
    ferry_calibration_t cal = FERRY_CALIBRATION_INIT;
    if (ferry_device_get(rt, (int)idx, &dev) != 0 || ferry_calibrate(dev, &cal) != 0 ||
        ferry_calibration_write_profile(dev, &cal, NULL, path) != 0) {
        cli_fail(cmd, "calibration: %s", ferry_last_error());
        goto out;
    }
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    if (json) {
        json_t j;
        json_command_begin(&j, stdout, "probe");
        json_key_bool(&j, "calibrated", true);
        json_key_str(&j, "backend", ferry_runtime_backend(rt));
        json_key_str(&j, "device", p.name);
        json_key_str(&j, "profile", path);
        json_key(&j, "copy");
        json_array_begin(&j);
        for (int i = 0; i < FERRY_CALIBRATION_POINTS; i++) {
            json_object_begin(&j);
            json_key_uint(&j, "bytes", cal.bytes[i]);
            json_key_double(&j, "h2d_gbps", cal.h2d_gbps[i], 3);
            json_key_double(&j, "d2h_gbps", cal.d2h_gbps[i], 3);
            json_object_end(&j);
        }
        json_array_end(&j);
        json_key_double(&j, "bidirectional_factor", cal.bidirectional_factor, 4);
        json_key_double(&j, "pageable_h2d_gbps", cal.pageable_h2d_gbps, 3);
        json_key_double(&j, "pageable_d2h_gbps", cal.pageable_d2h_gbps, 3);
        json_key_double(&j, "copy_submit_ns", cal.copy_submit_ns, 0);
        json_key_double(&j, "launch_ns", cal.launch_ns, 0);
        json_key_double(&j, "event_record_ns", cal.event_record_ns, 0);
        json_key_double(&j, "stream_wait_ns", cal.stream_wait_ns, 0);
        json_key_double(&j, "d2d_gbps", cal.d2d_gbps, 1);
        json_key(&j, "pieces");
        json_array_begin(&j);
        for (int i = 0; i < FERRY_CALIBRATION_PIECES && cal.piece_bytes[i] > 0; i++) {
            json_object_begin(&j);
            json_key_uint(&j, "bytes", cal.piece_bytes[i]);
            json_key_double(&j, "engines_gbps", cal.piece_engine_gbps[i], 3);
            json_key_double(&j, "kernel_gbps", cal.piece_kernel_gbps[i], 3);
            json_object_end(&j);
        }
        json_array_end(&j);
        json_key_uint(&j, "piece_kernel_max", cal.piece_kernel_max);
        json_end(&j);
    } else {
        printf("calibrated %s (%s backend)\n", p.name, ferry_runtime_backend(rt));
        printf("  copies (best GB/s)   ");
        for (int i = 0; i < FERRY_CALIBRATION_POINTS; i++) {
            char b[32];
            printf("%s %.1f/%.1f", cli_bytes(cal.bytes[i], b, sizeof(b)), cal.h2d_gbps[i],
                   cal.d2h_gbps[i]);
            printf(i + 1 < FERRY_CALIBRATION_POINTS ? ", " : "  (H2D/D2H)\n");
        }
        printf("  both directions      each at %.3f of its rate\n", cal.bidirectional_factor);
        printf("  pageable             H2D %.2f GB/s, D2H %.2f GB/s\n", cal.pageable_h2d_gbps,
               cal.pageable_d2h_gbps);
        printf("  host cost per call   copy %.0f ns, launch %.0f ns, event record %.0f ns, "
               "stream wait %.0f ns\n",
               cal.copy_submit_ns, cal.launch_ns, cal.event_record_ns, cal.stream_wait_ns);
        printf("  kernel (scale)       %.0f GB/s over 256 MiB\n", cal.d2d_gbps);
        if (cal.piece_bytes[0] > 0) {
            printf("  small pieces         ");
            for (int i = 0; i < FERRY_CALIBRATION_PIECES; i++) {
                char b[32];
                printf("%s %.1f/%.1f", cli_bytes(cal.piece_bytes[i], b, sizeof(b)),
                       cal.piece_engine_gbps[i], cal.piece_kernel_gbps[i]);
                printf(i + 1 < FERRY_CALIBRATION_PIECES ? ", " : "  (engines/kernel GB/s)\n");
            }
            printf("  copy kernel          pieces up to %llu bytes\n",
                   (unsigned long long)cal.piece_kernel_max);
        }
        printf("profile written to %s: use it with --backend sim --profile %s\n", path, path);
    }
    rc = CLI_OK;
out:
    ferry_runtime_destroy(rt);
    return rc;
}

typedef struct probe_flags {
    bool json, cal;
    const char *only, *outpath;
} probe_flags_t;

static int check_backend(const char *cmd, const char *v, void *into)
{
    (void)into;
    if (strcmp(v, "sim") != 0 && strcmp(v, "cuda") != 0)
        return cli_usage_error(cmd, "--backend '%s': accepted: sim, cuda", v);
    return CLI_OK;
}

static const cli_flag_def_t probe_flags[] = {
    {CLI_FLAG("json", CLI_SWITCH, probe_flags_t, json, "one JSON object")},
    {CLI_FLAG("calibrate", CLI_SWITCH, probe_flags_t, cal,
              "measure this machine into a device profile")},
    {CLI_FLAG("output", CLI_STRING, probe_flags_t, outpath, "the profile --calibrate writes"),
     .short_name = 'o', .value_noun = "a file name"},
    {CLI_FLAG("backend", CLI_STRING, probe_flags_t, only, "sim or cuda only"),
     .check = check_backend},
    {NULL},
};

/* One backend of the listing: whether it is built and available, and its devices (text, or
 * a member of @j's "backends" array). Sets *any when a device answered; adds why @b is
 * unavailable to @whynot. */
static void probe_backend(const char *b, ferry_options_t *opts, json_t *j, bool *any, char *whynot,
                          size_t whynot_len)
{
    const char *const *names = ferry_backend_names();
    bool built = false;
    for (size_t k = 0; names[k]; k++)
        built |= strcmp(names[k], b) == 0;
    char why[256] = "";
    int count = built ? ferry_backend_probe(b, why, sizeof(why)) : FERRY_ENODEV;
    if (!built)
        snprintf(why, sizeof(why),
                 "not built in (configure with FERRY_WITH_CUDA=ON where "
                 "nvcc is installed)");
    ferry_runtime_t *rt = NULL;
    char err[512] = "";
    if (count > 0) {
        ferry_runtime_config_t rc_ = FERRY_RUNTIME_CONFIG_INIT;
        rc_.backend = b;
        rc_.options = opts;
        int e = ferry_runtime_create(&rc_, &rt);
        if (e != 0) {
            snprintf(err, sizeof(err), "%s: %s", ferry_err_name(e), ferry_last_error());
            rt = NULL;
        }
    }
    if (j != NULL) {
        json_object_begin(j);
        json_key_str(j, "name", b);
        json_key_bool(j, "built", built);
        json_key_bool(j, "available", rt != NULL);
        json_key_str(j, "reason", count > 0 ? err : why);
        json_key(j, "devices");
        json_array_begin(j);
    }
    if (rt == NULL) {
        size_t used = strlen(whynot);
        snprintf(whynot + used, whynot_len - used, "%sbackend %s: %s", used ? "; " : "", b,
                 count > 0 ? err : why);
    }
    if (j == NULL) {
        printf("\nbackend %s: ", b);
        if (rt)
            printf("available, %d device(s)\n", ferry_device_count(rt));
        else
            printf("unavailable: %s\n", count > 0 ? err : why);
    }
    for (int d = 0; rt && d < ferry_device_count(rt); d++) {
        ferry_device_t *dev = NULL;
        ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
        ferry_host_props_t h = FERRY_HOST_PROPS_INIT;
        if (ferry_device_get(rt, d, &dev) != 0 || ferry_device_props(dev, &p) != 0 ||
            ferry_device_host(dev, &h) != 0) {
            fprintf(stderr, "ferry probe: backend %s, device %d: %s\n", b, d, ferry_last_error());
            continue;
        }
        *any = true;
        if (j != NULL) {
            print_props_json(j, &p, &h);
        } else {
            print_props_text(&p, &h);
        }
    }
    if (j != NULL) {
        json_array_end(j);
        json_object_end(j);
    }
    ferry_runtime_destroy(rt);
}

/* The environment that changes how CUDA behaves in this process (read at cuInit): the end of
 * the listing, or of @j's object (closed here). */
static void probe_environment(json_t *j)
{
    static const char *const env_names[] = {"CUDA_DEVICE_MAX_CONNECTIONS",
                                            "CUDA_DEVICE_MAX_COPY_CONNECTIONS",
                                            "CUDA_LAUNCH_BLOCKING",
                                            "CUDA_VISIBLE_DEVICES",
                                            "CUDA_MPS_PIPE_DIRECTORY",
                                            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                            NULL};
    if (j != NULL) {
        json_array_end(j);
        json_key(j, "environment");
        json_object_begin(j);
        for (int i = 0; env_names[i]; i++) {
            json_key(j, env_names[i]);
            json_str_or_null(j, getenv(env_names[i]));
        }
        json_end(j);
    } else {
        printf("\nenvironment (read by CUDA when it starts in a process)\n");
        for (int i = 0; env_names[i]; i++) {
            const char *v = getenv(env_names[i]);
            printf("  %-36s %s%s%s\n", env_names[i], v ? "'" : "unset", v ? v : "", v ? "'" : "");
        }
        const char *c = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        char *end = NULL;
        long n = c ? strtol(c, &end, 10) : 0;
        if (c == NULL)
            printf("  hardware work queues per context: 8 (CUDA's default)\n");
        else if (end == c || *end != '\0' || n < 1)
            printf("  hardware work queues per context: 8: '%s' is not a valid value, and CUDA "
                   "treats it as unset (valid: 1 to 32)\n",
                   c);
        else if (n > 32)
            printf("  hardware work queues per context: %ld is above the documented 32: "
                   "undocumented behaviour\n",
                   n);
        else
            printf("  hardware work queues per context: %ld\n", n);
    }
}

int cmd_probe(int argc, char **argv)
{
    const char *cmd = "probe";
    probe_flags_t fl = {.json = false};
    ferry_options_t *opts = NULL;
    cli_parser_t parser = {.cmd = cmd, .flags = {probe_flags}, .into = &fl};
    int rc = cli_parse_options(&parser, argc, argv, 1, &opts);
    if (rc != CLI_OK)
        return rc == CLI_HELP ? usage() : rc;
    bool json = fl.json, cal = fl.cal;
    const char *only = fl.only, *outpath = fl.outpath;

    if (cal || outpath) {
        if (!cal || !outpath) {
            cli_usage_error(cmd, "--calibrate and -o FILE go together");
            goto out_usage;
        }
        rc = calibrate(opts, only, outpath, json);
        ferry_options_destroy(opts);
        return rc;
    }
    const char *all[] = {"cuda", "sim", NULL};
    json_t j;
    if (json) {
        json_command_begin(&j, stdout, "probe");
        json_key(&j, "backends");
        json_array_begin(&j);
    } else {
        printf("ferry %s\n", ferry_version_string());
    }
    bool any = false;
    char whynot[1024] = ""; /* why each backend asked for is unavailable, for the error line */
    for (size_t i = 0; all[i] != NULL; i++) {
        if (only && strcmp(only, all[i]) != 0)
            continue;
        probe_backend(all[i], opts, json ? &j : NULL, &any, whynot, sizeof(whynot));
    }
    probe_environment(json ? &j : NULL);
    /* The listing above is the answer; the failure, when no device answered, is an error. */
    rc = any ? CLI_OK : cli_fail(cmd, "no usable device (%s)", whynot[0] ? whynot : "none found");
    ferry_options_destroy(opts);
    return rc;
out_usage:
    ferry_options_destroy(opts);
    return CLI_USAGE;
}
