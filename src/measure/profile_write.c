/* ferry_calibration_write_profile: turn measurements of a real device into a simulator
 * profile. The base profile supplies what is not measured (the copy-engine split, pinning
 * costs, defaults); everything measured replaces it, and the "source" section says so. The
 * file is loaded back through the strict parser before the call succeeds. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/sim/sim.h"
#include "core/runtime.h"
#include "ferry/bench.h"

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = malloc(FERRY_SIM_PROFILE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, FERRY_SIM_PROFILE_MAX_BYTES, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static void set_num(cJSON *obj, const char *key, double v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddNumberToObject(obj, key, v);
}

static void set_str(cJSON *obj, const char *key, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddStringToObject(obj, key, v);
}

static cJSON *curve(const ferry_calibration_t *cal, const double *gbps)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < FERRY_CALIBRATION_POINTS; i++) {
        cJSON *pt = cJSON_CreateObject();
        cJSON_AddNumberToObject(pt, "bytes", (double)cal->bytes[i]);
        /* three decimals: what the measurement resolves, and what keeps the file readable */
        cJSON_AddNumberToObject(pt, "gbps", (double)(long long)(gbps[i] * 1000 + 0.5) / 1000);
        cJSON_AddItemToArray(arr, pt);
    }
    return arr;
}

int ferry_calibration_write_profile(ferry_device_t *dev, const ferry_calibration_t *cal,
                                    const char *base, const char *path)
{
    if (dev == NULL || cal == NULL || path == NULL || cal->size < sizeof(*cal))
        return ferry__error(FERRY_EINVAL, "ferry_calibration_write_profile: NULL argument");
    for (int i = 0; i < FERRY_CALIBRATION_POINTS; i++)
        if (!(cal->h2d_gbps[i] > 0) || !(cal->d2h_gbps[i] > 0) ||
            (i > 0 && cal->bytes[i] <= cal->bytes[i - 1]))
            return ferry__error(FERRY_EINVAL, "calibration: copy curve point %d is not usable", i);
    struct ferry_sim_profile bp;
    int rc = base ? ferry__sim_profile_load(base, &bp) : ferry__sim_profile_load_default(&bp);
    if (rc != 0)
        return ferry__rt_fail(dev->rt, rc);
    char *text = read_file(bp.path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (root == NULL)
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EPARSE, "cannot re-read profile %s", bp.path));
    const ferry_device_props_t *p = &dev->props;
    char name[200], when[32], src[1024];
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(when, sizeof(when), "%Y-%m-%d", &tmv);
    char base_name[128];
    ferry__strlcpy(base_name, p->name, sizeof(base_name));
    char *suffix = strstr(base_name, " (simulated");
    if (suffix != NULL)
        *suffix = '\0'; /* calibrating the simulator itself */
    snprintf(name, sizeof(name), "%s (simulated, calibrated %s)", base_name, when);
    set_str(root, "name", name);
    cJSON *source = cJSON_GetObjectItemCaseSensitive(root, "source");
    cJSON *dv = cJSON_GetObjectItemCaseSensitive(root, "device");
    cJSON *pcie = cJSON_GetObjectItemCaseSensitive(root, "pcie");
    cJSON *copy = cJSON_GetObjectItemCaseSensitive(root, "copy");
    cJSON *host = cJSON_GetObjectItemCaseSensitive(root, "host");
    if (!cJSON_IsObject(source) || !cJSON_IsObject(dv) || !cJSON_IsObject(pcie) ||
        !cJSON_IsObject(copy) || !cJSON_IsObject(host)) {
        cJSON_Delete(root);
        return ferry__rt_fail(dev->rt,
                              ferry__error(FERRY_EPARSE, "profile %s lacks a section", bp.path));
    }
    snprintf(src, sizeof(src),
             "`ferry probe --calibrate` on %s (%s backend, driver %s, runtime %s) on %s: "
             "properties from the device; copies timed with events, best of 10 (pageable of 5); "
             "host costs are medians on the device clock; d2d_gbps is the scale workload over "
             "256 MiB. The rest comes from %s.",
             p->name, dev->ops->name, p->driver_version, p->runtime_version, when,
             strrchr(bp.path, '/') ? strrchr(bp.path, '/') + 1 : bp.path);
    /* The strict parser knows the source keys: the measured sections get the calibration. */
    set_str(source, "device", src);
    set_str(source, "copy", src);
    set_str(source, "host", src);
    if (p->sms > 0)
        set_num(dv, "sms", p->sms);
    char cc[16];
    snprintf(cc, sizeof(cc), "%d.%d", p->cc_major, p->cc_minor);
    set_str(dv, "cc", cc);
    if (p->memory_bytes > 0)
        set_num(dv, "memory_bytes", (double)p->memory_bytes);
    if (p->l2_bytes > 0)
        set_num(dv, "l2_bytes", (double)p->l2_bytes);
    if (p->copy_engines > 0)
        set_num(dv, "copy_engines", p->copy_engines);
    set_num(dv, "priority_least", p->priority_least);
    set_num(dv, "priority_greatest", p->priority_greatest);
    if (cal->d2d_gbps > 0)
        set_num(dv, "d2d_gbps", (double)(long long)(cal->d2d_gbps + 0.5));
    if (p->pcie_gen > 0 && p->link_gbps > 0) {
        set_num(pcie, "gen", p->pcie_gen_max > 0 ? p->pcie_gen_max : p->pcie_gen);
        set_num(pcie, "width", p->pcie_width_max > 0 ? p->pcie_width_max : p->pcie_width);
        set_num(pcie, "theoretical_gbps", p->link_gbps);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(copy, "h2d", curve(cal, cal->h2d_gbps));
    cJSON_ReplaceItemInObjectCaseSensitive(copy, "d2h", curve(cal, cal->d2h_gbps));
    if (cal->bidirectional_factor > 0)
        set_num(copy, "bidirectional_factor",
                (double)(long long)(cal->bidirectional_factor * 1000 + 0.5) / 1000);
    if (cal->pageable_h2d_gbps > 0)
        set_num(copy, "pageable_h2d_gbps", (double)(long long)(cal->pageable_h2d_gbps * 100) / 100);
    if (cal->pageable_d2h_gbps > 0)
        set_num(copy, "pageable_d2h_gbps", (double)(long long)(cal->pageable_d2h_gbps * 100) / 100);
    if (cal->piece_bytes[0] > 0) /* measured: the backend moves pieces */
        set_num(copy, "piece_kernel_max", (double)cal->piece_kernel_max);
    set_num(host, "copy_submit_ns", (double)(long long)(cal->copy_submit_ns + 0.5));
    set_num(host, "launch_ns", (double)(long long)(cal->launch_ns + 0.5));
    set_num(host, "event_record_ns", (double)(long long)(cal->event_record_ns + 0.5));
    set_num(host, "stream_wait_ns", (double)(long long)(cal->stream_wait_ns + 0.5));
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    if (out == NULL)
        return ferry__rt_fail(dev->rt, ferry__error(FERRY_ENOMEM, "profile: out of memory"));
    FILE *f = fopen(path, "w");
    rc = 0;
    if (f == NULL || fprintf(f, "%s\n", out) < 0)
        rc = ferry__error(FERRY_EIO, "cannot write profile %s", path);
    if (f != NULL && fclose(f) != 0 && rc == 0)
        rc = ferry__error(FERRY_EIO, "cannot write profile %s", path);
    free(out);
    if (rc == 0) {
        struct ferry_sim_profile check;
        rc = ferry__sim_profile_load(path, &check); /* the strict parser has the last word */
    }
    return rc ? ferry__rt_fail(dev->rt, rc) : 0;
}
