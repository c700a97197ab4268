/* `ferry run` started by an MPI launcher (mpirun, srun): the job of include/ferry/mpi.h over the
 * ranks of MPI_COMM_WORLD, --input cut into stripes that the ranks take as they have room, the
 * result written into --output at each stripe's offset; rank 0 prints the job's summary
 * (docs/mpi.md). Built with MPI only (FERRY_HAVE_MPI); without it a launch of several ranks is
 * refused, since each would run the whole job into the same output. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry.h"
#include "ferry/workloads.h"
#include "json.h"
#include "run.h"

#ifdef FERRY_HAVE_MPI
#include "ferry/mpi.h"
#endif

static const char cmd[] = "run";

int run_mpi_ranks(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0') {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end == '\0' && n > 0)
                return (int)n;
        }
    }
    /* PMIx alone (srun --mpi=pmix) says the rank, not the size: at least one */
    return getenv("PMIX_RANK") != NULL ? 1 : 0;
}

#ifndef FERRY_HAVE_MPI

int run_mpi(const run_opts_t *ro, ferry_options_t *opts, bool verify_given)
{
    (void)ro;
    (void)opts;
    (void)verify_given;
    return cli_fail(cmd,
                    "started as one of %d ranks by an MPI launcher, but this ferry was "
                    "built without MPI (FERRY_WITH_MPI; Debian: libopenmpi-dev): each rank "
                    "would run the whole job into the same output",
                    run_mpi_ranks());
}

#else

static void print_text(const ferry_mpi_result_t *r, const run_opts_t *ro, const char *workload,
                       bool checked)
{
    char b1[32], b2[32];
    uint64_t gpu = 0, cpu = 0, failed = 0, nchecked = 0, bchecked = 0, nbad = 0;
    printf("ferry run: %s over %u rank(s), %s of %s in %llu stripe(s) of %s -> %s\n", workload,
           r->nranks, cli_bytes(r->bytes, b1, sizeof(b1)), ro->input,
           (unsigned long long)r->stripes, cli_bytes(ro->stripe_bytes, b2, sizeof(b2)), ro->output);
    for (unsigned i = 0; i < r->nranks; i++) {
        const ferry_mpi_rank_t *k = &r->ranks[i];
        printf("  rank %-4d %s, %s: %llu stripe(s), %s in %.3f s, %.2f GB/s; on its device "
               "%.2f GB/s%s\n",
               k->rank, k->host, k->device[0] ? k->device : "no device",
               (unsigned long long)k->stripes, cli_bytes(k->bytes, b1, sizeof(b1)), k->seconds,
               k->gbps, k->device_gbps, k->simulated ? " (simulated)" : "");
        if (k->faults > 0 || k->chunks_cpu > 0 || k->ladder_level > 0)
            printf("            faults: %llu failed GPU attempt(s), %llu chunk(s) retried on the "
                   "GPU, %llu run on the CPU; ladder level %u at the end\n",
                   (unsigned long long)k->faults, (unsigned long long)k->chunks_retried,
                   (unsigned long long)k->chunks_cpu, k->ladder_level);
        gpu += k->batches_gpu;
        cpu += k->batches_cpu;
        failed += k->batches_failed;
        nchecked += k->batches_checked;
        bchecked += k->bytes_checked;
        nbad += k->batches_check_failed;
    }
    printf("  job       %llu stripe(s) run in %.3f s (the slowest rank): %.2f GB/s; on the "
           "devices' clocks %.2f GB/s; %llu finished before (resumed)\n",
           (unsigned long long)r->stripes_done, r->seconds, r->gbps, r->device_gbps,
           (unsigned long long)r->stripes_resumed);
    if (r->stripes_unfinished > 0)
        printf("  resumed   %llu stripe(s) a stopped job had claimed and not finished, run "
               "again: %s\n",
               (unsigned long long)r->stripes_unfinished, r->unfinished);
    printf("  batches   %llu ok on GPU, %llu ok on CPU, %llu failed\n", (unsigned long long)gpu,
           (unsigned long long)cpu, (unsigned long long)failed);
    if (!checked)
        printf("  verify    off (--verify sample|full checks the batches against the CPU "
               "reference)\n");
    else
        printf("  verify    %s: %llu batch(es), %s, checked against the CPU reference: %s\n",
               ro->verify, (unsigned long long)nchecked, cli_bytes(bchecked, b1, sizeof(b1)),
               nbad == 0 && failed == 0 ? "all match" : "MISMATCH (the job failed)");
}

static void print_json(const ferry_mpi_result_t *r, const run_opts_t *ro, const char *workload,
                       int rc, bool checked)
{
    uint64_t nchecked = 0, bchecked = 0, nbad = 0;
    for (unsigned i = 0; i < r->nranks; i++) {
        nchecked += r->ranks[i].batches_checked;
        bchecked += r->ranks[i].bytes_checked;
        nbad += r->ranks[i].batches_check_failed;
    }
    json_t j;
    json_command_begin(&j, stdout, "run");
    json_key_bool(&j, "ok", rc == 0);
    json_key_bool(&j, "mpi", true);
    json_key_str(&j, "workload", workload);
    json_key_str(&j, "input", ro->input);
    json_key_str(&j, "output", ro->output);
    json_key_uint(&j, "ranks", r->nranks);
    json_key_uint(&j, "bytes", r->bytes);
    json_key_uint(&j, "stripe_bytes", ro->stripe_bytes);
    json_key_uint(&j, "stripes", r->stripes);
    json_key_uint(&j, "stripes_done", r->stripes_done);
    json_key_uint(&j, "stripes_resumed", r->stripes_resumed);
    json_key_uint(&j, "stripes_unfinished", r->stripes_unfinished);
    json_key_str(&j, "unfinished", r->unfinished);
    json_key_double(&j, "seconds", r->seconds, 6);
    json_key_double(&j, "gbps", r->gbps, 3);
    json_key_double(&j, "device_seconds", r->device_seconds, 6);
    json_key_double(&j, "device_gbps", r->device_gbps, 3);
    json_key_str(&j, "verify", checked ? ro->verify : "off");
    json_key_uint(&j, "batches_checked", nchecked);
    json_key_uint(&j, "bytes_checked", bchecked);
    json_key_uint(&j, "batches_check_failed", nbad);
    if (checked)
        json_key_bool(&j, "verified", rc == 0 && nbad == 0);
    if (rc != 0)
        json_key_str(&j, "error", ferry_mpi_last_error());
    json_key(&j, "per_rank");
    json_array_begin(&j);
    for (unsigned i = 0; i < r->nranks; i++) {
        const ferry_mpi_rank_t *k = &r->ranks[i];
        json_object_begin(&j);
        json_key_int(&j, "rank", k->rank);
        json_key_str(&j, "host", k->host);
        json_key_str(&j, "device", k->device);
        json_key_uint(&j, "stripes", k->stripes);
        json_key_uint(&j, "bytes", k->bytes);
        json_key_double(&j, "seconds", k->seconds, 6);
        json_key_double(&j, "gbps", k->gbps, 3);
        json_key_double(&j, "device_seconds", k->device_seconds, 6);
        json_key_double(&j, "device_gbps", k->device_gbps, 3);
        json_key_bool(&j, "simulated", k->simulated != 0);
        json_key_uint(&j, "batches_gpu", k->batches_gpu);
        json_key_uint(&j, "batches_cpu", k->batches_cpu);
        json_key_uint(&j, "batches_failed", k->batches_failed);
        json_key_uint(&j, "faults", k->faults);
        json_key_uint(&j, "chunks_retried", k->chunks_retried);
        json_key_uint(&j, "chunks_cpu", k->chunks_cpu);
        json_key_uint(&j, "ladder_level", k->ladder_level);
        json_key_uint(&j, "batches_checked", k->batches_checked);
        json_object_end(&j);
    }
    json_array_end(&j);
    json_end(&j);
}

/* The job's hooks' argument: each rank's metrics (options metrics_file, metrics_addr: labelled
 * rank="R", a file and a port of each rank's own, cli_metrics_start_rank, attached to its
 * pipeline while the job runs) and --verify's check. */
typedef struct rank_hooks {
    const run_opts_t *ro;
    ferry_options_t *opts;
    cli_metrics_t *cm;
    int rc;
    const ferry_workload_t *wl;
    size_t batch; /* the job's batch size: a shorter batch is a stripe's last */
} rank_hooks_t;

/* --verify under MPI (job.check, on the rank's checker threads): the batch's output against the
 * workload's CPU reference, block by block (each block compared while in cache); sample checks
 * one batch in RUN_VERIFY_SAMPLE_EVERY by its place in the file, and every short one. */
static int check_batch(const void *in, const void *out, size_t bytes, uint64_t offset, char *why,
                       size_t why_len, void *arg)
{
    const rank_hooks_t *h = arg;
    if (h->ro->verify_mode == RUN_VERIFY_SAMPLE && bytes == h->batch &&
        offset / h->batch % RUN_VERIFY_SAMPLE_EVERY != 0)
        return FERRY_MPI_CHECK_SKIPPED;
    unsigned char *ref = malloc(RUN_CHECK_BLOCK);
    if (ref == NULL) {
        snprintf(why, why_len, "no memory for the reference");
        return 1;
    }
    const unsigned char *a = in, *b = out;
    int rc = 0;
    for (size_t off = 0; off < bytes && rc == 0; off += RUN_CHECK_BLOCK) {
        size_t n = bytes - off < RUN_CHECK_BLOCK ? bytes - off : RUN_CHECK_BLOCK;
        if (ferry_workload_reference(h->wl, a + off, ref, n) != 0) {
            snprintf(why, why_len, "the CPU reference failed: %s", ferry_last_error());
            rc = 1;
        } else if (memcmp(ref, b + off, n) != 0) {
            size_t k = 0;
            while (ref[k] == b[off + k])
                k++;
            snprintf(why, why_len, "byte %llu of the output differs from the CPU reference",
                     (unsigned long long)(offset + off + k));
            rc = 1;
        }
    }
    free(ref);
    return rc;
}

/* --verify's threads on this rank: full takes many (the reference costs what the stage does on
 * the CPU), shared among the ranks of a node (Open MPI's local size); sample two. */
static unsigned check_threads(const run_opts_t *ro)
{
    if (ro->verify_mode != RUN_VERIFY_FULL)
        return 2;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long local = ls != NULL && atol(ls) > 0 ? atol(ls) : 1;
    long n = (cpus > 0 ? cpus : 2) / 2 / local;
    return n < 1 ? 1 : n > 64 ? 64 : (unsigned)n;
}

static void on_pipeline(ferry_pipeline_t *p, int rank, int up, void *arg)
{
    rank_hooks_t *rm = arg;
    if (up)
        rm->rc = cli_metrics_start_rank(cmd, rm->opts, p, "run", rm->ro->quiet, rank, &rm->cm);
    else if (rm->cm != NULL && cli_metrics_stop(cmd, rm->cm) != CLI_OK)
        rm->rc = CLI_FAIL;
}

/* SIGINT and SIGTERM during the job: mpirun sends SIGTERM to every rank when one ends (Open MPI
 * 4 cannot go on without it), and a user's ^C comes the same way. Rank 0 says, from the journal,
 * which stripes were claimed and not finished, by rank (the one that ended among them), and
 * that --resume finishes the job; every rank then exits at once (128 + the signal): the job
 * cannot finish, and its journal already holds what a resume needs. Blocked before MPI_Init so
 * that MPI's threads leave the signals to this one. */
typedef struct stop_watch {
    sigset_t set;
    int rank;
    ferry_mpi_job_t job; /* valid while running is set */
    atomic_int running;
} stop_watch_t;

static void *stop_main(void *arg)
{
    stop_watch_t *sw = arg;
    int sig = 0;
    if (sigwait(&sw->set, &sig) != 0)
        return NULL;
    if (sw->rank == 0 && atomic_load(&sw->running)) {
        char held[1024];
        int n = ferry_mpi_unfinished(&sw->job, held, sizeof(held));
        fprintf(stderr,
                "ferry run: the job stopped (%s: mpirun stops every rank when one ends); %s%s%s; "
                "run the same command with --resume to finish it\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM",
                n > 0   ? "claimed and not finished: "
                : n < 0 ? "the journal cannot say what was left: "
                        : "no stripe was in progress",
                n > 0   ? held
                : n < 0 ? ferry_mpi_last_error()
                        : "",
                "");
        fflush(stderr);
    }
    _exit(128 + sig);
    return NULL;
}

/* What a job over ranks cannot do, said rather than ignored (every rank finds the same). */
static int check_mpi_flags(const run_opts_t *ro)
{
    struct stat sb;
    if (ro->input == NULL || ro->output == NULL)
        return cli_usage_error(cmd, "under an MPI launcher, ferry run streams a file: --input "
                                    "FILE and --output FILE are both needed (docs/mpi.md)");
    if (strcmp(ro->input, "-") == 0 || stat(ro->input, &sb) != 0 || !S_ISREG(sb.st_mode))
        return cli_usage_error(cmd,
                               "--input %s: under an MPI launcher, a regular file every "
                               "rank can read",
                               ro->input);
    if (strcmp(ro->output, "-") == 0 || (stat(ro->output, &sb) == 0 && !S_ISREG(sb.st_mode)))
        return cli_usage_error(cmd,
                               "--output %s: under an MPI launcher, a regular file every "
                               "rank can write",
                               ro->output);
    if (ro->trace || ro->report || ro->bytes_set)
        return cli_usage_error(cmd, "%s: not available for a job over MPI ranks",
                               ro->trace    ? "--trace"
                               : ro->report ? "--report"
                                            : "--bytes");
    return 0;
}

int run_mpi(const run_opts_t *ro, ferry_options_t *opts, bool verify_given)
{
    static stop_watch_t sw;
    sigemptyset(&sw.set);
    sigaddset(&sw.set, SIGINT);
    sigaddset(&sw.set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sw.set, NULL);
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return cli_fail(cmd, "MPI_Init failed");
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sw.rank = rank;
    int rc = check_mpi_flags(ro);
    ferry_runtime_t *rt = NULL;
    ferry_workload_t *wl = NULL;
    ferry_mpi_result_t res = FERRY_MPI_RESULT_INIT;
    int jr = 0;
    if (rc == 0) {
        ferry_runtime_config_t rcfg = FERRY_RUNTIME_CONFIG_INIT;
        rcfg.options = opts;
        ferry_device_t *devs[FERRY_MAX_DEVICE_SET];
        unsigned ndev = 0;
        ferry_workload_params_t wp = FERRY_WORKLOAD_PARAMS_INIT;
        wp.intensity = (unsigned)ro->intensity;
        ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
        if ((jr = ferry_runtime_create(&rcfg, &rt)) == 0 &&
            (jr = ferry_devices_select(rt, NULL, devs, FERRY_MAX_DEVICE_SET, &ndev)) == 0 &&
            (jr = ferry_workload_create(ro->workload, &wp, &wl)) == 0) {
            if (ndev > 1) {
                pc.devices = devs;
                pc.ndevices = ndev;
            } else {
                pc.device = devs[0];
            }
            pc.stage = ferry_workload_stage(wl);
            pc.single_stream = ro->single_stream;
            ferry_mpi_job_t job = FERRY_MPI_JOB_INIT;
            job.input = ro->input;
            job.output = ro->output;
            job.pipeline = &pc;
            job.stripe_bytes = ro->stripe_bytes;
            /* the default batch is at most a stripe; a --batch-bytes over it is refused */
            job.batch_bytes = (size_t)ro->batch_bytes;
            if (!ro->batch_set && ro->stripe_bytes && ro->stripe_bytes < ro->batch_bytes)
                job.batch_bytes = (size_t)ro->stripe_bytes;
            job.journal = ro->journal;
            job.resume = ro->resume;
            sw.job = job; /* its paths are the command line's: they outlive the job */
            pthread_t stop_th;
            if (pthread_create(&stop_th, NULL, stop_main, &sw) == 0)
                pthread_detach(stop_th);
            rank_hooks_t rm = {ro, opts, NULL, CLI_OK, wl, job.batch_bytes};
            if (rm.batch == 0) /* the job's default: 64 MiB, at most a stripe */
                rm.batch = ro->stripe_bytes && ro->stripe_bytes < (64u << 20)
                               ? (size_t)ro->stripe_bytes
                               : (size_t)64 << 20;
            job.on_pipeline = on_pipeline;
            job.arg = &rm;
            if (verify_given && ro->verify_mode != RUN_VERIFY_OFF) {
                job.check = check_batch;
                job.check_threads = check_threads(ro);
            }
            atomic_store(&sw.running, 1);
            jr = ferry_mpi_run(MPI_COMM_WORLD, &job, &res);
            atomic_store(&sw.running, 0); /* its config goes out of scope below */
            rc = rm.rc; /* a metrics file or port that failed (said by that rank) */
            if (rank == 0 && res.nranks > 0) {
                if (ro->json)
                    print_json(&res, ro, ro->workload, jr, job.check != NULL);
                else if (!ro->quiet)
                    print_text(&res, ro, ro->workload, job.check != NULL);
            }
            if (jr != 0 && rank == 0)
                cli_fail(cmd, "%s", ferry_mpi_last_error());
        } else {
            /* this rank alone: the job was never joined, so the others would wait for it */
            cli_fail(cmd, "rank %d: %s", rank, ferry_last_error());
            ferry_workload_destroy(wl);
            ferry_runtime_destroy(rt);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    ferry_mpi_result_free(&res);
    ferry_workload_destroy(wl);
    if (rt != NULL)
        ferry_runtime_destroy(rt);
    MPI_Finalize();
    return rc != 0 ? rc : jr != 0 ? CLI_FAIL : CLI_OK;
}

#endif
