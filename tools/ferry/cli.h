/* Shared pieces of the ferry CLI: exit codes, usage errors, flag parsing over the options
 * table (every option is also a flag: --chunk-bytes 8M), number formatting and JSON output.
 * The CLI uses only ferry's public API. */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "ferry.h"
#include "ferry/metrics.h"
#include "ferry/workloads.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Print "ferry <cmd>: <msg>" and a hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "ferry <cmd>: <msg>" to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An argument cursor: --flag VALUE and --flag=VALUE are both accepted. */
typedef struct cli_args {
    int argc, i;
    char **argv;
    const char *cmd;
} cli_args_t;

/* If argv[i] is --@name (or --@name=...), set *value to its value (consuming the next argument
 * when needed) and return 1; 0 when it is another flag; CLI_USAGE-negative (-1) when the value
 * is missing (an error was printed). */
int cli_flag_value(cli_args_t *a, const char *name, const char **value);
/* If argv[i] is --@name (a switch), consume it and return true. */
bool cli_flag(cli_args_t *a, const char *name);
/* If argv[i] is --<option name with dashes>, apply it to @o. Returns 1 when applied, 0 when
 * not an option flag, -1 on a bad value (message printed). */
int cli_option_flag(cli_args_t *a, ferry_options_t *o);

/* Strict unsigned and size parsers for flag values; print a usage error naming the flag. */
int cli_parse_uint(const char *cmd, const char *flag, const char *v, unsigned long long lo,
                   unsigned long long hi, unsigned long long *out);
int cli_parse_size(const char *cmd, const char *flag, const char *v, unsigned long long *out);

/* A file the command writes at the end (--report, --trace), checked before the run: a path
 * in an existing, writable directory that is not a directory or an existing non-regular
 * file. Returns CLI_OK or CLI_USAGE ("--@flag '@path': why; accepted: ... (e.g. @example)"). */
int cli_check_out_path(const char *cmd, const char *flag, const char *path, const char *example);

/* Options from defaults and FERRY_* environment into *out. Returns CLI_OK, CLI_USAGE on a bad
 * variable (as the same bad flag is) or CLI_FAIL (out of memory), message printed. */
int cli_options(const char *cmd, ferry_options_t **out);

/* --quiet: the tool prints errors only. When argv holds --quiet, ferry's log lines below
 * FERRY_LOG_ERROR (warnings, info) are dropped from here on, including those of reading the
 * environment, which comes before the flags are parsed. Errors still print. */
void cli_quiet_logs(int argc, char **argv);

/* "4.00 GiB", "8.0 MiB", "512 B" */
const char *cli_bytes(unsigned long long b, char *buf, size_t len);
/* Open a command's JSON object: {"command":@command,"ferry_version":"0.1.0",
 * "time_utc":"2026-12-04T11:40:00Z" (when it was printed). The caller goes on with
 * ",\"key\":..." and closes the object. Every command's --json output starts here. */
void cli_json_begin(FILE *f, const char *command);
/* JSON string with escapes, quotes included. */
void cli_json_str(FILE *f, const char *s);

/* Whether stdout is a terminal and colour is allowed (NO_COLOR unset). */
bool cli_color(void);

/* The metrics of a command (metrics_export.c): with option metrics_addr or metrics_file set,
 * a registry with @p attached (NULL: none yet), served and/or written every second; nothing
 * otherwise (*out NULL). Start returns CLI_OK or CLI_FAIL (message printed); stop writes the
 * file a last time, detaches and frees. Attach and detach pipelines that come and go (detach
 * before closing one); the registry takes the command's own series. With metrics off (cm NULL)
 * attach and detach do nothing and the registry is NULL. */
typedef struct cli_metrics cli_metrics_t;
int cli_metrics_start(const char *cmd, const ferry_options_t *o, ferry_pipeline_t *p,
                      const char *label, bool quiet, cli_metrics_t **out);
int cli_metrics_attach(cli_metrics_t *cm, ferry_pipeline_t *p, const char *label);
void cli_metrics_detach(cli_metrics_t *cm, ferry_pipeline_t *p);
ferry_metrics_t *cli_metrics_registry(cli_metrics_t *cm);
int cli_metrics_stop(const char *cmd, cli_metrics_t *cm);

/* A subcommand: its name, entry, one-line summary, its own flags (space-separated), its
 * subcommands (NULL: none) and whether it also takes every option of the table as a flag. */
typedef struct cli_command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
    const char *flags;
    const char *subcommands;
    bool options;
} cli_command_t;
extern const cli_command_t cli_commands[];
extern const size_t cli_command_count;

int cmd_run(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_options(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_connections(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_exec(int argc, char **argv);

#endif
