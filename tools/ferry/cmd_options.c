/* `ferry options`: every option with its flag, environment variable, default, range and doc;
 * `--markdown` writes the table that docs/options.md holds; `--json` for scripts. */
#include <string.h>

#include "cli.h"

static const char *type_name(ferry_option_type_t t)
{
    switch (t) {
    case FERRY_OPT_SIZE: return "size";
    case FERRY_OPT_UINT: return "uint";
    case FERRY_OPT_INT: return "int";
    case FERRY_OPT_BOOL: return "bool";
    case FERRY_OPT_ENUM: return "enum";
    case FERRY_OPT_STRING: return "string";
    case FERRY_OPT_DOUBLE: return "number";
    }
    return "?";
}

static void range_text(const ferry_option_info_t *o, char *buf, size_t len)
{
    switch (o->type) {
    case FERRY_OPT_ENUM: snprintf(buf, len, "%s", o->choices); break;
    case FERRY_OPT_BOOL: snprintf(buf, len, "0|1"); break;
    case FERRY_OPT_STRING: snprintf(buf, len, "text"); break;
    case FERRY_OPT_DOUBLE: snprintf(buf, len, "%g..%g", o->min, o->max); break;
    default:
        if (o->max >= 1.8e19)
            snprintf(buf, len, "%.0f..2^64-1", o->min);
        else
            snprintf(buf, len, "%.0f..%.0f", o->min, o->max);
    }
}

static void flag_name(const char *name, char *buf, size_t len)
{
    size_t j = 0;
    for (; name[j] && j + 1 < len; j++)
        buf[j] = name[j] == '_' ? '-' : name[j];
    buf[j] = '\0';
}

int cmd_options(int argc, char **argv)
{
    bool md = false, json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--markdown") == 0)
            md = true;
        else if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: ferry options [--markdown | --json]\n\n"
                   "List every ferry option: its command-line flag, its environment variable,\n"
                   "type, default, accepted range and what it does. Values are parsed strictly:\n"
                   "a bad value is an error naming the option and what is accepted.\n");
            return CLI_OK;
        } else
            return cli_usage_error("options", "unknown argument '%s'", argv[i]);
    }
    if (md && json)
        return cli_usage_error("options", "--markdown and --json exclude each other");
    size_t n = ferry_option_count();
    if (json) {
        cli_json_begin(stdout, "options");
        printf(",\"options\":[");
    }
    if (md)
        printf("| option | flag | environment | type | default | accepted | meaning |\n"
               "| --- | --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < n; i++) {
        const ferry_option_info_t *o = ferry_option_at(i);
        char range[128], flag[64];
        range_text(o, range, sizeof(range));
        flag_name(o->name, flag, sizeof(flag));
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_str(stdout, o->name);
            printf(",\"flag\":\"--%s\",\"env\":\"%s\",\"type\":\"%s\",\"default\":", flag, o->env,
                   type_name(o->type));
            cli_json_str(stdout, o->default_value);
            printf(",\"accepted\":");
            cli_json_str(stdout, range);
            printf(",\"doc\":");
            cli_json_str(stdout, o->doc);
            printf("}");
        } else if (md) {
            printf("| `%s` | `--%s` | `%s` | %s | `%s` | `%s` | %s |\n", o->name, flag, o->env,
                   type_name(o->type), o->default_value[0] ? o->default_value : "\"\"", range,
                   o->doc);
        } else {
            printf("%-18s %-22s %-7s default %-6s %s\n    %s\n", o->name, o->env,
                   type_name(o->type), o->default_value[0] ? o->default_value : "\"\"", range,
                   o->doc);
        }
    }
    if (json)
        printf("]}\n");
    return CLI_OK;
}
