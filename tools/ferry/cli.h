/* Shared pieces of the ferry CLI: exit codes, usage errors, flag parsing over the options
 * table (every option is also a flag: --chunk-bytes 8M), number formatting. JSON output: json.h.
 * The CLI uses only ferry's public API. */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ferry.h"
#include "ferry/metrics.h"
#include "ferry/workloads.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Print "ferry <cmd>: <msg>" and a hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "ferry <cmd>: <msg>" to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Not an exit status: cli_parse() saw --help or -h. */
enum { CLI_HELP = 3 };

/* How a flag of a command's table takes its value. */
typedef enum cli_flag_kind {
    CLI_SWITCH, /* no value: sets the bool at the offset */
    CLI_STRING, /* the value as given: a const char * at the offset */
    CLI_UINT,   /* an integer from lo to hi: an unsigned long long at the offset */
    CLI_SIZE,   /* a size with K, M, G suffixes: an unsigned long long at the offset */
    CLI_CUSTOM, /* a value handed to the check alone, which stores it (the offset unused) */
} cli_flag_kind_t;

/* One flag of a command: --name (a switch) or --name VALUE / --name=VALUE. The value goes to
 * offsetof(the command's flag struct, field); then @check, when set, validates or converts it
 * (value NULL for a switch) and returns CLI_OK or CLI_USAGE with the message printed. A table
 * ends with an entry whose name is NULL. */
typedef struct cli_flag_def {
    const char *name;
    cli_flag_kind_t kind;
    size_t offset;
    const char *help;
    unsigned long long lo, hi; /* CLI_UINT: the accepted range */
    int (*check)(const char *cmd, const char *value, void *into);
    char short_name;        /* -X VALUE and -XVALUE too; 0: none */
    const char *value_noun; /* the short form's missing-value error: "-X needs <noun>" */
} cli_flag_def_t;

/* A table row's first fields: CLI_FLAG("bytes", CLI_SIZE, run_opts_t, bytes, "help"). */
#define CLI_FLAG(n, k, type, field, h)                                                             \
    .name = (n), .kind = (k), .offset = offsetof(type, field), .help = (h)

/* A command's command line: its flag tables (searched in order, then the options table when
 * @options is set: every option is also a flag), and where the values go. */
typedef struct cli_parser {
    const char *cmd;
    const cli_flag_def_t *flags[2]; /* NULL: none */
    void *into;                     /* the struct the tables' offsets point into */
    ferry_options_t *options;       /* NULL: the command takes no option flags */
    const char *context;            /* "unknown argument 'x' <context>"; NULL: none */
    bool command_after_dashdash;    /* "--" ends the flags, a bare word must come after it */
    const char **operand; /* one bare word anywhere among the flags (a FILE); NULL: none */
    int rest;             /* out: the index after "--"; -1: no "--" */
} cli_parser_t;

/* cli_options() then cli_parse() with p->options set to them: the start of every command that
 * takes the options as flags. Returns what cli_parse() does, or CLI_FAIL/CLI_USAGE from
 * cli_options(); *out holds the options on CLI_OK only (destroyed otherwise). */
int cli_parse_options(cli_parser_t *p, int argc, char **argv, int first, ferry_options_t **out);

/* Walk argv[first..argc) against @p's tables, in order. Returns CLI_OK, CLI_HELP (--help or -h
 * came before any error; nothing printed) or CLI_USAGE (an unknown flag, a missing or bad
 * value: message printed). */
int cli_parse(cli_parser_t *p, int argc, char **argv, int first);

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
/* The same for rank @rank of a job over MPI ranks: every sample labelled rank="@rank", the file
 * FILE.rank@rank (before its extension) and the port PORT + @rank. */
int cli_metrics_start_rank(const char *cmd, const ferry_options_t *o, ferry_pipeline_t *p,
                           const char *label, bool quiet, int rank, cli_metrics_t **out);
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
