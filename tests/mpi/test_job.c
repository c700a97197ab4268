/* ferry_mpi_run through its public header alone, as an MPI application of its own would call
 * it (run by ctest under `mpirun -n 3`): a stage of the test's own (each byte XOR a key,
 * granularity 1) over files of odd sizes, random stripe and
 * batch sizes over several seeds, each output checked byte for byte by rank 0; the pipeline
 * hook called once up and once down on every rank; every rank's figures the same; the check
 * hook (every batch checked, a refused one failing the job and resumed); and misuse:
 * NULL job, its size not set, a batch over the stripe, the output being the input, stripes
 * that cut the stage's granularity, a resume with no output, a missing input. Every call
 * returns the same value on every rank. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.h"
#include "ferry/mpi.h"

static int rank, nranks, failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* The stage: each byte XOR 0xa5, on the CPU (the simulator runs it as the kernel too). */
static int xor_cpu(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const unsigned char *in = a->in;
    unsigned char *out = a->out;
    for (size_t i = 0; i < a->bytes; i++)
        out[i] = in[i] ^ 0xa5;
    return 0;
}

static int hook_up, hook_down;
static void on_pipeline(ferry_pipeline_t *p, int r, int up, void *arg)
{
    (void)arg;
    CHECK(p != NULL && r == rank, "the hook's pipeline and rank");
    if (up)
        hook_up++;
    else
        hook_down++;
}

/* job.check: the output against the input XOR the key, every byte; refuses the batch that
 * holds byte `refuse_at` of the file (UINT64_MAX: none); lets the batch at 1 MiB through
 * unchecked (FERRY_MPI_CHECK_SKIPPED). Counts its calls. */
static uint64_t refuse_at = UINT64_MAX;
static int checks;
static int check_batch(const void *in, const void *out, size_t bytes, uint64_t offset, char *why,
                       size_t why_len, void *arg)
{
    CHECK(arg == &refuse_at, "the check's argument");
    __atomic_add_fetch(&checks, 1, __ATOMIC_RELAXED);
    if (offset == (1u << 20))
        return FERRY_MPI_CHECK_SKIPPED;
    const unsigned char *a = in, *b = out;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != (a[i] ^ 0xa5)) {
            snprintf(why, why_len, "byte %llu differs", (unsigned long long)(offset + i));
            return 1;
        }
    if (refuse_at >= offset && refuse_at < offset + bytes) {
        snprintf(why, why_len, "refused at %llu on purpose", (unsigned long long)refuse_at);
        return 2;
    }
    return 0;
}

/* Every rank got the same return value. */
static void same_everywhere(int rc, const char *what)
{
    int lo = rc, hi = rc;
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi, "%s: ranks returned %d to %d", what, lo, hi);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char in[512], out[512], jr[512];
    snprintf(in, sizeof(in), "%s/mpi-job-in.bin", dir);
    snprintf(out, sizeof(out), "%s/mpi-job-out.bin", dir);
    snprintf(jr, sizeof(jr), "%s/mpi-job", dir);

    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    CHECK(ferry_runtime_create(NULL, &rt) == 0, "runtime: %s", ferry_last_error());
    CHECK(ferry_device_get(rt, 0, &dev) == 0, "device: %s", ferry_last_error());
    ferry_stage_t st = FERRY_STAGE_INIT;
    st.name = "xor";
    st.cpu = xor_cpu;
    ferry_pipeline_config_t pc = FERRY_PIPELINE_CONFIG_INIT;
    pc.device = dev;
    pc.stage = &st;

    uint64_t seed = 12345;
    for (int round = 0; round < 6; round++) {
        /* rank 0 writes an input of an odd size; everyone learns the job's sizes */
        uint64_t sizes[3];
        if (rank == 0) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            sizes[0] = 1 + (seed >> 33) % (6u << 20);                /* bytes */
            sizes[1] = (uint64_t)(4096 + (seed >> 20) % (1u << 20)); /* stripe */
            sizes[2] = 1 + (seed >> 40) % sizes[1];                  /* batch */
            if (round == 0)
                sizes[0] = 0; /* an empty file: nothing to run, an empty output */
            FILE *f = fopen(in, "wb");
            CHECK(f != NULL, "cannot write %s", in);
            for (uint64_t i = 0; f != NULL && i < sizes[0]; i++)
                fputc((int)((i * 2654435761u) >> 13 & 0xff), f);
            if (f != NULL)
                fclose(f);
        }
        MPI_Bcast(sizes, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        ferry_mpi_job_t job = FERRY_MPI_JOB_INIT;
        job.input = in;
        job.output = out;
        job.pipeline = &pc;
        job.stripe_bytes = sizes[1];
        job.batch_bytes = (size_t)sizes[2];
        job.journal = jr;
        job.on_pipeline = on_pipeline;
        hook_up = hook_down = 0;
        ferry_mpi_result_t res = FERRY_MPI_RESULT_INIT;
        int rc = ferry_mpi_run(MPI_COMM_WORLD, &job, &res);
        same_everywhere(rc, "a job");
        CHECK(rc == 0, "round %d (%llu bytes, stripes of %llu, batches of %llu): %s", round,
              (unsigned long long)sizes[0], (unsigned long long)sizes[1],
              (unsigned long long)sizes[2], ferry_mpi_last_error());
        CHECK(hook_up == 1 && hook_down == 1, "the hook: %d up, %d down", hook_up, hook_down);
        uint64_t nstripes = (sizes[0] + sizes[1] - 1) / sizes[1], bytes = 0, stripes = 0;
        CHECK(res.nranks == (unsigned)nranks && res.stripes == nstripes &&
                  res.stripes_done == nstripes && res.bytes == sizes[0],
              "the result: %u ranks, %llu stripes, %llu done", res.nranks,
              (unsigned long long)res.stripes, (unsigned long long)res.stripes_done);
        for (unsigned r = 0; r < res.nranks; r++) {
            bytes += res.ranks[r].bytes;
            stripes += res.ranks[r].stripes;
            CHECK(res.ranks[r].rank == (int)r, "rank %u's figures in its place", r);
        }
        CHECK(bytes == sizes[0] && stripes == nstripes, "the ranks' bytes %llu, stripes %llu",
              (unsigned long long)bytes, (unsigned long long)stripes);
        ferry_mpi_result_free(&res);
        if (rank == 0) { /* the output: every byte */
            FILE *a = fopen(in, "rb"), *b = fopen(out, "rb");
            CHECK(a != NULL && b != NULL, "cannot read the files back");
            uint64_t i = 0;
            int x, y;
            while (a != NULL && b != NULL && (x = fgetc(a)) != EOF) {
                y = fgetc(b);
                if (y != (x ^ 0xa5)) {
                    CHECK(0, "round %d: byte %llu is %d, want %d", round, (unsigned long long)i, y,
                          x ^ 0xa5);
                    break;
                }
                i++;
            }
            CHECK(b == NULL || fgetc(b) == EOF, "round %d: the output is longer", round);
            if (a != NULL)
                fclose(a);
            if (b != NULL)
                fclose(b);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    /* job.check: every batch checked on the rank's checker threads, then one refused: the job
     * fails with FERRY_EVERIFY everywhere, naming the batch and the check's words, and its
     * stripe is not journaled, so a resume with a check that passes runs it (and only the
     * stripes not finished) */
    if (rank == 0) {
        FILE *f = fopen(in, "wb");
        CHECK(f != NULL, "cannot write %s", in);
        for (uint64_t i = 0; f != NULL && i < (3u << 20) + 77; i++)
            fputc((int)((i * 40503u) >> 7 & 0xff), f);
        if (f != NULL)
            fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    {
        ferry_mpi_job_t cj = FERRY_MPI_JOB_INIT;
        cj.input = in;
        cj.output = out;
        cj.pipeline = &pc;
        cj.journal = jr;
        cj.stripe_bytes = 256 << 10;
        cj.batch_bytes = 64 << 10;
        cj.check = check_batch;
        cj.arg = &refuse_at;
        cj.check_threads = 3;
        ferry_mpi_result_t res = FERRY_MPI_RESULT_INIT;
        checks = 0;
        int crc = ferry_mpi_run(MPI_COMM_WORLD, &cj, &res);
        same_everywhere(crc, "a checked job");
        uint64_t nb = 0, nbytes = 0, nchecks = 0, mine = (uint64_t)checks;
        for (unsigned r = 0; crc == 0 && r < res.nranks; r++) {
            nb += res.ranks[r].batches_checked;
            nbytes += res.ranks[r].bytes_checked;
        }
        MPI_Allreduce(&mine, &nchecks, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        CHECK(crc == 0 && nb == 48 && nbytes == (3u << 20) + 77 - (64 << 10) && nchecks == 49,
              "a checked job: %d (%s), %llu batches and %llu bytes checked, %llu calls", crc,
              ferry_mpi_last_error(), (unsigned long long)nb, (unsigned long long)nbytes,
              (unsigned long long)nchecks);
        ferry_mpi_result_free(&res);
        refuse_at = (2u << 20) + 5000; /* in stripe 8 */
        crc = ferry_mpi_run(MPI_COMM_WORLD, &cj, &res);
        same_everywhere(crc, "a refused batch");
        CHECK(crc == FERRY_EVERIFY && strstr(ferry_mpi_last_error(), "at 2097152 (stripe 8") &&
                  strstr(ferry_mpi_last_error(), "refused at 2102152 on purpose"),
              "a refused batch: %d %s", crc, ferry_mpi_last_error());
        uint64_t refused = 0;
        for (unsigned r = 0; r < res.nranks; r++)
            refused += res.ranks[r].batches_check_failed;
        CHECK(refused == 1, "a refused batch: %llu counted", (unsigned long long)refused);
        ferry_mpi_result_free(&res);
        refuse_at = UINT64_MAX;
        cj.resume = 1;
        crc = ferry_mpi_run(MPI_COMM_WORLD, &cj, &res);
        same_everywhere(crc, "the resume after a refused batch");
        CHECK(crc == 0 && res.stripes_done >= 1 && res.stripes_done + res.stripes_resumed == 13,
              "the resume after a refused batch: %d (%s), %llu run, %llu resumed", crc,
              ferry_mpi_last_error(), (unsigned long long)res.stripes_done,
              (unsigned long long)res.stripes_resumed);
        ferry_mpi_result_free(&res);
        cj.resume = 0;
        cj.check_threads = 65;
        crc = ferry_mpi_run(MPI_COMM_WORLD, &cj, NULL);
        CHECK(crc == FERRY_EINVAL && strstr(ferry_mpi_last_error(), "check_threads"),
              "65 check threads: %d %s", crc, ferry_mpi_last_error());
    }

    /* misuse: the same refusal on every rank, with a message */
    int rc = ferry_mpi_run(MPI_COMM_WORLD, NULL, NULL);
    same_everywhere(rc, "NULL job");
    CHECK(rc == FERRY_EINVAL && ferry_mpi_last_error()[0], "NULL job: %d", rc);
    ferry_mpi_job_t bad = FERRY_MPI_JOB_INIT;
    bad.size = 0;
    rc = ferry_mpi_run(MPI_COMM_WORLD, &bad, NULL);
    CHECK(rc == FERRY_EINVAL, "size not set: %d", rc);
    ferry_mpi_job_t job = FERRY_MPI_JOB_INIT;
    job.input = in;
    job.output = out;
    job.pipeline = &pc;
    job.journal = jr;
    job.stripe_bytes = 4096;
    job.batch_bytes = 8192;
    rc = ferry_mpi_run(MPI_COMM_WORLD, &job, NULL);
    same_everywhere(rc, "batch over stripe");
    CHECK(rc == FERRY_EINVAL && strstr(ferry_mpi_last_error(), "batch_bytes"),
          "batch over "
          "stripe: %d %s",
          rc, ferry_mpi_last_error());
    job.batch_bytes = 0;
    job.output = in;
    rc = ferry_mpi_run(MPI_COMM_WORLD, &job, NULL);
    CHECK(rc == FERRY_EINVAL, "the output is the input: %d", rc);
    job.output = out;
    st.granularity = 8;
    job.stripe_bytes = 4100;
    rc = ferry_mpi_run(MPI_COMM_WORLD, &job, NULL);
    CHECK(rc == FERRY_EINVAL && strstr(ferry_mpi_last_error(), "granularity"),
          "stripes cutting the granularity: %d %s", rc, ferry_mpi_last_error());
    st.granularity = 0;
    job.stripe_bytes = 4096;
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/mpi-job-missing.bin", dir);
    job.input = missing;
    rc = ferry_mpi_run(MPI_COMM_WORLD, &job, NULL);
    same_everywhere(rc, "a missing input");
    CHECK(rc == FERRY_EIO && strstr(ferry_mpi_last_error(), "mpi-job-missing.bin"),
          "a missing input: %d %s", rc, ferry_mpi_last_error());
    job.input = in;
    job.output = missing;
    job.resume = 1;
    rc = ferry_mpi_run(MPI_COMM_WORLD, &job, NULL);
    CHECK(rc != 0, "a resume with no output or journal: %d", rc);
    ferry_runtime_destroy(rt);

    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d failure(s) over %d ranks\n", all ? "FAILED" : "ok", all, nranks);
    MPI_Finalize();
    return all ? 1 : 0;
}
