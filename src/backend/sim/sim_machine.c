/* Machine profiles ("ferry-machine-1"): a simulated machine of several devices, each from a
 * device profile of its own, so that a rig of different GPUs (an H200 beside a slower card) can
 * be simulated. Parsed strictly, like device profiles (docs/simulator.md, "Machines"):
 *
 *   {"format": "ferry-machine-1", "name": "...", "source": "where the rig comes from",
 *    "devices": [{"profile": "h200.json"}, {"profile": "a100-pcie.json", "count": 2}]}
 *
 * A device profile's path is taken relative to the machine file's directory unless absolute. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "backend/sim/sim.h"
#include "base/base.h"

#define MACHINE_FORMAT "ferry-machine-1"

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
        if (!known)
            return ferry__error(FERRY_EPARSE, "%s: unknown key \"%s%s\" in a machine profile",
                                path, where, it->string);
    }
    return 0;
}

static int machine_string(const char *path, const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
        return ferry__error(FERRY_EPARSE, "%s: key \"%s\" must be a non-empty string", path, key);
    return 0;
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
        return ferry__error(FERRY_EPARSE, "%s: key \"%sprofile\" must name a device profile",
                            path, where);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "count");
    *count = 1;
    if (c != NULL) {
        if (!cJSON_IsNumber(c) || c->valuedouble != (double)(int)c->valuedouble ||
            c->valueint < 1 || c->valueint > 64)
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
                             char *dev_path, size_t dev_path_len, int *total)
{
    static const char *const keys[] = {"format", "name", "source", "devices", NULL};
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ferry__error(FERRY_EPARSE, "%s: a machine profile must be a JSON object", path);
    }
    int rc = machine_keys(path, root, "", keys);
    if (rc == 0)
        rc = machine_string(path, root, "name");
    if (rc == 0)
        rc = machine_string(path, root, "source");
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
    int n = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
    if (rc == 0 && n < 1)
        rc = ferry__error(FERRY_EPARSE,
                          "%s: key \"devices\" must be a non-empty array of "
                          "{\"profile\": FILE, \"count\": N}",
                          path);
    int sum = 0, i = 0;
    bool found = false;
    for (const cJSON *e = rc == 0 ? devs->child : NULL; rc == 0 && e != NULL; e = e->next, i++) {
        char p[sizeof(((struct ferry_sim_profile *)0)->path)];
        int count = 0;
        rc = machine_entry(path, e, i, p, sizeof(p), &count);
        if (rc == 0 && (!found && (index < sum + count || i == 0))) {
            snprintf(dev_path, dev_path_len, "%s", p);
            found = index < sum + count;
        }
        sum += count;
        if (rc == 0 && sum > 64)
            rc = ferry__error(FERRY_EPARSE, "%s: more than 64 devices", path);
    }
    cJSON_Delete(root);
    if (rc == 0)
        *total = sum;
    return rc;
}
