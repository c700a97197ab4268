/* ferry: the command-line tool. One file per subcommand; this one dispatches, and answers
 * --help and --version. Exit status: 0 ok, 1 failure, 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The commands, with the flags of their own (the man page and the bash completion are made
 * from this table and the options table: `ferry options --man`, `--bash-completion`;
 * cli.man_completion checks these flags against each command's --help). */
const cli_command_t cli_commands[] = {
    {"run", cmd_run, "stream data through a workload on the GPU or the simulated H200",
     "--bytes --input --output --workload --intensity --batch-bytes --verify --trace --report "
     "--single-stream --stripe-bytes --resume --journal --json --quiet --help",
     NULL, true},
    {"probe", cmd_probe, "show backends, devices and their properties",
     "--json --backend --profile --calibrate -o --output --help", NULL, true},
    {"bench", cmd_bench,
     "measure copies, the round-trip pipeline, storage and small items (copy | pipeline | io | "
     "items)",
     "--sizes --reps --no-pageable --bytes --chunks --streams --intensity --passes --host-offset "
     "--coalesce-bytes --compare --compare-bytes --compare-profile --json --csv --report "
     "--write --force --request-bytes --depth --item-sizes --threads --rate --scattered --help",
     "copy pipeline io items", true},
    {"options", cmd_options, "list every option, its variable, default and range",
     "--markdown --json --man --bash-completion --help", NULL, false},
    {"connections", cmd_connections,
     "CUDA_DEVICE_MAX_CONNECTIONS: read, measure (--measure), recommend (--recommend)",
     "--json --measure --recommend --ordering --streams --reps --values --help", NULL, true},
    {"env", cmd_env, "print the snippet that makes CUDA_DEVICE_MAX_CONNECTIONS persistent",
     "--connections --copy-connections --format --json --help", NULL, false},
    {"exec", cmd_exec, "run a command with CUDA_DEVICE_MAX_CONNECTIONS set, per GPU if asked",
     "--connections --copy-connections --per-device --backend --help", NULL, false},
};
const size_t cli_command_count = sizeof(cli_commands) / sizeof(cli_commands[0]);

static void usage(FILE *f)
{
    fprintf(f, "usage: ferry <command> [options]\n\n"
               "ferry streams data through NVIDIA GPUs with host-to-device copies, kernels and\n"
               "device-to-host copies overlapped; without a GPU it runs on a simulated H200.\n\n"
               "commands:\n");
    for (size_t i = 0; i < cli_command_count; i++)
        fprintf(f, "  %-12s %s\n", cli_commands[i].name, cli_commands[i].summary);
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
    for (size_t i = 0; i < cli_command_count; i++)
        if (strcmp(c, cli_commands[i].name) == 0)
            return cli_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ferry: unknown command '%s'\n\n", c);
    usage(stderr);
    return CLI_USAGE;
}
