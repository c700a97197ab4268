/* Machine profiles ("ferry-machine-1"): a simulated machine of several devices, each from a
 * device profile of its own, so that a rig of different GPUs (an H200 beside a slower card) can
 * be simulated. Parsed strictly, like device profiles (docs/simulator.md, "Machines"):
 *
 *   {"format": "ferry-machine-1", "name": "...", "source": "where the rig comes from",
 *    "devices": [{"profile": "h200.json"}, {"profile": "a100-pcie.json", "count": 2}]}
 *
 * An optional "host_memory": {"gbps": X} is the memory traffic the machine's host serves all
 * its devices together (sim_host.c shares it); with it, "source" is an object with a string per
 * part: {"devices": "...", "host_memory": "..."}. A device profile's path is taken relative to
 * the machine file's directory unless absolute. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "backend/sim/sim.h"
#include "base/base.h"

#define MACHINE_FORMAT "ferry-machine-1"
/* The most host memory traffic a machine may claim, GB/s: far above any host built (a
 * two-socket server with 12 channels of DDR5-8800 each serves about 1690). */
#define MACHINE_HOST_GBPS_MAX 1e5

bool ferry__sim_is_machine(const char *text, size_t len)
{
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *f = root != NULL ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
    bool yes = cJSON_IsString(f) && strcmp(f->valuestring, MACHINE_FORMAT) == 0;
    cJSON_Delete(root);
    return yes;
}

/* Every key of @o in @allowed (NULL-terminated), none twice. */
static int machine_keys(const char *path, const cJSON *o, const char *where,
                        const char *const *allowed)
{
    for (const cJSON *it = o->child; it != NULL; it = it->next) {
        bool known = false;
        for (size_t i = 0; allowed[i] != NULL; i++)
            known |= strcmp(it->string, allowed[i]) == 0;
        for (const cJSON *p = o->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0)
                return ferry__error(FERRY_EPARSE, "%s: duplicate key \"%s%s\"", path, where,
                                    it->string);
        if (!known) {
            char list[96] = "";
            for (size_t i = 0; allowed[i] != NULL; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                         i > 0 ? ", " : "", allowed[i]);
            return ferry__error(FERRY_EPARSE,
                                "%s: unknown key \"%s%s\" in a machine profile (accepted: %s)",
                                path, where, it->string, list);
        }
    }
    return 0;
}

static int machine_string(const char *path, const cJSON *o, const char *where, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
        return ferry__error(FERRY_EPARSE, "%s: key \"%s%s\" must be a non-empty string", path,
                            where, key);
    return 0;
}

/* "source": a string, or with a host_memory section an object {"devices": "where the rig comes
 * from", "host_memory": "where its figure comes from"}: each figure says where it is from. */
static int machine_source(const char *path, const cJSON *root)
{
    static const char *const keys[] = {"devices", "host_memory", NULL};
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
    bool host = cJSON_GetObjectItemCaseSensitive(root, "host_memory") != NULL;
    if (!cJSON_IsObject(src)) {
        if (host && cJSON_IsString(src))
            return ferry__error(FERRY_EPARSE,
                                "%s: section \"host_memory\" needs a key \"source.host_memory\" "
                                "saying where its figure comes from: \"source\" must then be an "
                                "object {\"devices\": \"...\", \"host_memory\": \"...\"}",
                                path);
        return machine_string(path, root, "", "source");
    }
    int rc = machine_keys(path, src, "source.", keys);
    if (rc == 0)
        rc = machine_string(path, src, "source.", "devices");
    if (rc == 0 && host)
        rc = machine_string(path, src, "source.", "host_memory");
    if (rc == 0 && !host && cJSON_GetObjectItemCaseSensitive(src, "host_memory") != NULL)
        rc = ferry__error(FERRY_EPARSE,
                          "%s: key \"source.host_memory\" without a section \"host_memory\"", path);
    return rc;
}

/* The optional section "host_memory": {"gbps": X}, X in (0, MACHINE_HOST_GBPS_MAX]. */
static int machine_host(const char *path, const cJSON *root, double *gbps)
{
    static const char *const keys[] = {"gbps", NULL};
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "host_memory");
    *gbps = 0.0;
    if (h == NULL)
        return 0;
    if (!cJSON_IsObject(h))
        return ferry__error(FERRY_EPARSE,
                            "%s: key \"host_memory\" must be an object {\"gbps\": X}: the "
                            "memory traffic in GB/s the host serves all its devices together",
                            path);
    int rc = machine_keys(path, h, "host_memory.", keys);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(h, "gbps");
    if (rc == 0 &&
        (!cJSON_IsNumber(g) || !(g->valuedouble > 0.0) || g->valuedouble > MACHINE_HOST_GBPS_MAX))
        rc = ferry__error(FERRY_EPARSE,
                          "%s: key \"host_memory.gbps\" must be a number > 0 and <= %g (GB/s "
                          "of memory traffic the host serves all its devices together)",
                          path, MACHINE_HOST_GBPS_MAX);
    if (rc == 0)
        *gbps = g->valuedouble;
    return rc;
}

/* One entry of "devices": its profile's path (resolved) and count. */
static int machine_entry(const char *path, const cJSON *e, int i, char *dev_path, size_t len,
                         int *count)
{
    static const char *const keys[] = {"profile", "count", NULL};
    char where[32];
    snprintf(where, sizeof(where), "devices[%d].", i);
    if (!cJSON_IsObject(e))
        return ferry__error(FERRY_EPARSE,
                            "%s: \"devices[%d]\" must be an object {\"profile\": FILE, "
                            "\"count\": N}",
                            path, i);
    int rc = machine_keys(path, e, where, keys);
    if (rc != 0)
        return rc;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "profile");
    if (!cJSON_IsString(p) || p->valuestring[0] == '\0')
        return ferry__error(FERRY_EPARSE, "%s: key \"%sprofile\" must name a device profile", path,
                            where);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "count");
    *count = 1;
    if (c != NULL) {
        /* the range first: a double beyond int's is no int to compare with (undefined) */
        if (!cJSON_IsNumber(c) || !(c->valuedouble >= 1 && c->valuedouble <= 64) ||
            c->valuedouble != (double)(int)c->valuedouble)
            return ferry__error(FERRY_EPARSE, "%s: key \"%scount\" must be an integer in [1, 64]",
                                path, where);
        *count = c->valueint;
    }
    const char *slash = strrchr(path, '/');
    int n = p->valuestring[0] == '/' || slash == NULL
                ? snprintf(dev_path, len, "%s", p->valuestring)
                : snprintf(dev_path, len, "%.*s/%s", (int)(slash - path), path, p->valuestring);
    if (n < 0 || (size_t)n >= len)
        return ferry__error(FERRY_EINVAL, "%s: \"%sprofile\": the path is too long", path, where);
    return 0;
}

int ferry__sim_machine_parse(const char *text, size_t len, const char *path, int index,
                             struct ferry_sim_machine *out)
{
    static const char *const keys[] = {"format", "name", "source", "devices", "host_memory", NULL};
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ferry__error(FERRY_EPARSE, "%s: a machine profile must be a JSON object", path);
    }
    struct ferry_sim_machine m = {0};
    int rc = machine_keys(path, root, "", keys);
    if (rc == 0)
        rc = machine_string(path, root, "", "name");
    if (rc == 0)
        rc = machine_source(path, root);
    if (rc == 0)
        rc = machine_host(path, root, &m.host_memory_gbps);
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
    int n = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
    if (rc == 0 && n < 1)
        rc = ferry__error(FERRY_EPARSE,
                          "%s: key \"devices\" must be a non-empty array of "
                          "{\"profile\": FILE, \"count\": N}",
                          path);
    int i = 0;
    bool found = false;
    for (const cJSON *e = rc == 0 ? devs->child : NULL; rc == 0 && e != NULL; e = e->next, i++) {
        char p[sizeof(m.dev_path)];
        int count = 0;
        rc = machine_entry(path, e, i, p, sizeof(p), &count);
        if (rc == 0 && (!found && (index < m.total + count || i == 0))) {
            memcpy(m.dev_path, p, sizeof(p));
            found = index < m.total + count;
        }
        m.total += count;
        if (rc == 0 && m.total > 64)
            rc = ferry__error(FERRY_EPARSE, "%s: more than 64 devices", path);
    }
    cJSON_Delete(root);
    if (rc == 0)
        *out = m;
    return rc;
}
