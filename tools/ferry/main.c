/* ferry: the command-line tool. One file per subcommand; this one dispatches, and answers
 * --help and --version. Exit status: 0 ok, 1 failure, 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
    {"run", cmd_run, "stream data through a workload on the GPU or the simulated H200"},
    {"probe", cmd_probe, "show backends, devices and their properties"},
    {"bench", cmd_bench, "measure copies and the round-trip pipeline (copy | pipeline)"},
    {"options", cmd_options, "list every option, its variable, default and range"},
    {"connections", cmd_connections,
     "CUDA_DEVICE_MAX_CONNECTIONS: read, measure (--measure), recommend (--recommend)"},
    {"env", cmd_env, "print the snippet that makes CUDA_DEVICE_MAX_CONNECTIONS persistent"},
    {"exec", cmd_exec, "run a command with CUDA_DEVICE_MAX_CONNECTIONS set, per GPU if asked"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: ferry <command> [options]\n\n"
               "ferry streams data through NVIDIA GPUs with host-to-device copies, kernels and\n"
               "device-to-host copies overlapped; without a GPU it runs on a simulated H200.\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n  ferry <command> --help    options of one command\n"
               "  ferry --version           version\n\n"
               "Every option in `ferry options` is also a flag (--chunk-bytes 8M) and an\n"
               "environment variable (FERRY_CHUNK_BYTES=8M).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *c = argv[1];
    if (strcmp(c, "--help") == 0 || strcmp(c, "-h") == 0 || strcmp(c, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(c, "--version") == 0 || strcmp(c, "version") == 0) {
        printf("ferry %s\n", ferry_version_string());
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(c, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ferry: unknown command '%s'\n\n", c);
    usage(stderr);
    return CLI_USAGE;
}
