/* The metrics of a running command: a registry with the command's pipelines attached as they
 * come and go and its own series, served on --metrics-addr and written to --metrics-file every
 * second and once at the end (options metrics_addr, metrics_file). `ferry run` and `ferry
 * bench` share it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ferry/metrics.h"

struct cli_metrics {
    const char *cmd; /* for messages: "run", "bench" (a literal) */
    ferry_metrics_t *reg;
    ferry_pipeline_t *p;
    char *file;
    pthread_t writer;
    bool writing;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool stop;
};

static void *writer_main(void *arg)
{
    cli_metrics_t *cm = arg;
    pthread_mutex_lock(&cm->lock);
    while (!cm->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cm->cv, &cm->lock, &ts);
        if (cm->stop)
            break;
        pthread_mutex_unlock(&cm->lock);
        if (ferry_metrics_write_file(cm->reg, cm->file) != 0)
            fprintf(stderr, "ferry: %s\n", ferry_last_error());
        pthread_mutex_lock(&cm->lock);
    }
    pthread_mutex_unlock(&cm->lock);
    return NULL;
}

/* One rank's metrics of a job over ranks: the file FILE.rankR (before its extension:
 * ferry.prom -> ferry.rankR.prom, which node_exporter's textfile collector still reads) and the
 * port PORT + R (port 0 stays 0: any). */
static void rank_file(const char *file, int rank, char *out, size_t len)
{
    const char *slash = strrchr(file, '/');
    const char *dot = strrchr(slash != NULL ? slash + 1 : file, '.');
    if (dot == NULL || dot == (slash != NULL ? slash + 1 : file))
        snprintf(out, len, "%s.rank%d", file, rank);
    else
        snprintf(out, len, "%.*s.rank%d%s", (int)(dot - file), file, rank, dot);
}

static int rank_addr(const char *cmd, const char *addr, int rank, char *out, size_t len)
{
    const char *colon = strrchr(addr, ':');
    char *end;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
    if (colon == NULL || *end != '\0' || port < 0 || port + rank > 65535)
        return cli_fail(cmd,
                        "metrics_addr '%s': a job over ranks needs HOST:PORT, each rank "
                        "serving PORT + its rank (0: any port)",
                        addr);
    snprintf(out, len, "%.*s:%ld", (int)(colon - addr), addr, port ? port + rank : 0);
    return CLI_OK;
}

int cli_metrics_start(const char *cmd, const ferry_options_t *o, ferry_pipeline_t *p,
                      const char *label, bool quiet, cli_metrics_t **out)
{
    return cli_metrics_start_rank(cmd, o, p, label, quiet, -1, out);
}

int cli_metrics_start_rank(const char *cmd, const ferry_options_t *o, ferry_pipeline_t *p,
                           const char *label, bool quiet, int rank, cli_metrics_t **out)
{
    *out = NULL;
    const char *addr = ferry_options_get_str(o, "metrics_addr");
    const char *file = ferry_options_get_str(o, "metrics_file");
    if ((addr == NULL || !addr[0]) && (file == NULL || !file[0]))
        return CLI_OK;
    char raddr[256], rfile[4096];
    if (rank >= 0 && addr != NULL && addr[0]) {
        if (rank_addr(cmd, addr, rank, raddr, sizeof(raddr)) != CLI_OK)
            return CLI_FAIL;
        addr = raddr;
    }
    if (rank >= 0 && file != NULL && file[0]) {
        rank_file(file, rank, rfile, sizeof(rfile));
        file = rfile;
    }
    cli_metrics_t *cm = calloc(1, sizeof(*cm));
    if (cm == NULL)
        return cli_fail(cmd, "out of memory for the metrics");
    pthread_mutex_init(&cm->lock, NULL);
    pthread_cond_init(&cm->cv, NULL);
    cm->cmd = cmd;
    cm->p = p;
    char rk[16];
    snprintf(rk, sizeof(rk), "%d", rank);
    if (ferry_metrics_create(&cm->reg) != 0 ||
        (rank >= 0 && ferry_metrics_label_all(cm->reg, "rank", rk) != 0) ||
        (p != NULL && ferry_metrics_add_pipeline(cm->reg, p, label) != 0))
        goto fail;
    if (addr != NULL && addr[0]) {
        char bound[64];
        if (ferry_metrics_serve(cm->reg, addr, bound, sizeof(bound)) != 0)
            goto fail;
        /* Always said, even with --quiet: a script that asked for port 0 needs the port. */
        fprintf(stderr, "ferry %s: metrics on http://%s/metrics\n", cmd, bound);
        (void)quiet;
    }
    if (file != NULL && file[0]) {
        cm->file = strdup(file);
        /* A path that cannot be written is found now, not a second into the run. */
        if (cm->file == NULL || ferry_metrics_write_file(cm->reg, cm->file) != 0)
            goto fail;
        if (pthread_create(&cm->writer, NULL, writer_main, cm) != 0) {
            cli_fail(cmd, "cannot start the metrics writer");
            goto fail_quiet;
        }
        cm->writing = true;
    }
    *out = cm;
    return CLI_OK;
fail:
    cli_fail(cmd, "%s", ferry_last_error());
fail_quiet:
    ferry_metrics_destroy(cm->reg);
    free(cm->file);
    free(cm);
    return CLI_FAIL;
}

ferry_metrics_t *cli_metrics_registry(cli_metrics_t *cm)
{
    return cm != NULL ? cm->reg : NULL;
}

int cli_metrics_attach(cli_metrics_t *cm, ferry_pipeline_t *p, const char *label)
{
    if (cm == NULL)
        return CLI_OK;
    if (ferry_metrics_add_pipeline(cm->reg, p, label) != 0)
        return cli_fail(cm->cmd, "metrics: %s", ferry_last_error());
    return CLI_OK;
}

void cli_metrics_detach(cli_metrics_t *cm, ferry_pipeline_t *p)
{
    if (cm != NULL)
        ferry_metrics_remove_pipeline(cm->reg, p);
}

int cli_metrics_stop(const char *cmd, cli_metrics_t *cm)
{
    if (cm == NULL)
        return CLI_OK;
    int rc = CLI_OK;
    if (cm->writing) {
        pthread_mutex_lock(&cm->lock);
        cm->stop = true;
        pthread_cond_signal(&cm->cv);
        pthread_mutex_unlock(&cm->lock);
        pthread_join(cm->writer, NULL);
    }
    if (cm->file != NULL && ferry_metrics_write_file(cm->reg, cm->file) != 0)
        rc = cli_fail(cmd, "%s", ferry_last_error());
    if (cm->p != NULL)
        ferry_metrics_remove_pipeline(cm->reg, cm->p);
    ferry_metrics_destroy(cm->reg);
    pthread_mutex_destroy(&cm->lock);
    pthread_cond_destroy(&cm->cv);
    free(cm->file);
    free(cm);
    return rc;
}
