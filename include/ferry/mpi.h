/* ferry across nodes: one job over the ranks of an MPI communicator (libferry_mpi, built when
 * CMake finds MPI; option FERRY_WITH_MPI). A file is cut into stripes; each rank takes the next
 * stripe not yet taken (a counter on rank 0, through MPI one-sided operations: a slower rank
 * takes fewer), reads it at its offset, streams it through its own pipeline (its devices, its
 * faults and fallbacks: everything a pipeline does) and writes the result at the same offset of
 * the output, so that the output is byte for byte what one process would write. A journal of
 * finished stripes, made durable before a stripe counts as finished, lets a job that stopped
 * (a rank that died, a signal) be finished later with no stripe lost or written twice.
 *
 * `mpirun -n N ferry run --input F --output G ...` is this job (docs/mpi.md). Link with
 * ferry::ferry_mpi (CMake) and MPI. */
#ifndef FERRY_MPI_H
#define FERRY_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one job does; the same on every rank (the caller's, read during the call only). */
typedef struct ferry_mpi_job {
    size_t size; /* sizeof(ferry_mpi_job_t): set by FERRY_MPI_JOB_INIT */
    /* a regular file, read by every rank at its stripes' offsets */
    const char *input;
    /* the output file: made (or, with resume, kept) by rank 0 at the input's size, each stripe
     * written at its offset; a regular file on a file system every rank sees */
    const char *output;
    /* this rank's pipeline: its config (device or devices, stage, options), made and closed by
     * the job; its stage's granularity must divide stripe_bytes and batch_bytes */
    const ferry_pipeline_config_t *pipeline;
    uint64_t stripe_bytes; /* 0: 256 MiB */
    size_t batch_bytes;    /* a stripe goes as batches of this; 0: 64 MiB; <= stripe_bytes */
    /* the journal's path prefix: rank r appends to "<journal>.<r>"; NULL: "<output>.journal" */
    const char *journal;
    /* 1: finish the job a journal describes (the same input, output and stripe size): stripes
     * it records as finished are not run again; 0: a new job (old journal files removed) */
    int resume;
    /* NULL, or called on the calling thread with this rank's pipeline once it is made (@up 1)
     * and before it is closed, drained (@up 0): to attach metrics, say (`ferry run` labels
     * them rank="R"); the pipeline is the job's, not to be submitted to or closed */
    void (*on_pipeline)(ferry_pipeline_t *p, int rank, int up, void *arg);
    void *arg;
    /* NULL, or each batch checked before its output is written, on one of check_threads
     * threads of the rank (0: 2): @in and @out the batch's buffers (@bytes each), @offset
     * where the batch starts in the file, @arg the job's. Return 0 to write the batch (it was
     * checked), FERRY_MPI_CHECK_SKIPPED to write it unchecked (a sample), or anything else:
     * the batch fails (its stripe is not journaled as finished, the job returns
     * FERRY_EVERIFY) and @why (@why_len bytes, "" on entry) may say what differed, for
     * ferry_mpi_last_error. Called concurrently from several threads; not to block for long
     * (a rank's buffers wait on it). `ferry run --verify` compares with the CPU reference. */
    int (*check)(const void *in, const void *out, size_t bytes, uint64_t offset, char *why,
                 size_t why_len, void *arg);
    unsigned check_threads; /* 0: 2; at most 64 */
} ferry_mpi_job_t;

#define FERRY_MPI_JOB_INIT FERRY_SIZED_INIT(ferry_mpi_job_t)

/* job.check's answer for a batch it let through without looking (a sample's others). */
#define FERRY_MPI_CHECK_SKIPPED (-1)

/* One rank's part of the job. */
typedef struct ferry_mpi_rank {
    int rank;
    char host[64];
    char device[128]; /* its pipeline's first device */
    uint64_t bytes;   /* of the stripes it ran */
    uint64_t stripes;
    uint64_t batches_gpu, batches_cpu, batches_failed;
    double seconds; /* from the job's start (a barrier) to its last write */
    double gbps;    /* bytes / seconds */
    /* its pipeline's time on its devices' clock, first copy to last (virtual on the
     * simulator, where wall time is the simulation's), and bytes / that */
    double device_seconds, device_gbps;
    int simulated; /* 1: its device is simulated */
    /* Faults its pipeline handled (ferry_pipeline_stats_t): failed GPU attempts recorded,
     * chunks that succeeded on a GPU retry, chunks the CPU fallback produced, and the ladder's
     * level at the end (0: the plan as configured). */
    uint64_t faults, chunks_retried, chunks_cpu;
    unsigned ladder_level;
    /* job.check: the batches it checked and passed (and their bytes), and refused */
    uint64_t batches_checked, bytes_checked, batches_check_failed;
} ferry_mpi_rank_t;

typedef struct ferry_mpi_result {
    size_t size; /* sizeof(ferry_mpi_result_t): set by FERRY_MPI_RESULT_INIT */
    unsigned nranks;
    ferry_mpi_rank_t *ranks;     /* nranks of them, by rank; free with ferry_mpi_result_free */
    uint64_t bytes;              /* the input's size */
    uint64_t stripes;            /* in all */
    uint64_t stripes_done;       /* run by this job */
    uint64_t stripes_resumed;    /* finished before (resume), not run again */
    uint64_t stripes_unfinished; /* claimed in the journal by a job that stopped, run again */
    double seconds;              /* the slowest rank's */
    double gbps;                 /* bytes run by this job / seconds */
    double device_seconds;       /* the slowest rank's on its devices' clock */
    double device_gbps;          /* bytes run by this job / device_seconds */
    /* resumed: the ranks of the stopped job and the stripes each had claimed and not finished
     * ("rank 1: stripe(s) 12 15; rank 2: stripe(s) 13"; "..." where it is cut); "" when none */
    char unfinished[512];
} ferry_mpi_result_t;

#define FERRY_MPI_RESULT_INIT FERRY_SIZED_INIT(ferry_mpi_result_t)

/** Run @p job over the ranks of @p comm: a collective call, made by every rank of @p comm with
 *  the same job, after MPI_Init (only the calling thread makes MPI calls). Every rank's @p out
 *  (may be NULL; its size set) is
 *  filled with every rank's figures on success and on a failure of the stripes' batches.
 *  Returns the same value on every rank: 0; FERRY_EINVAL (NULL job or communicator, a size
 *  not set, a value out of range, an input that is not a regular file, a journal of another
 *  job); FERRY_EIO (a file that cannot be opened, read, written or synced, on any rank);
 *  FERRY_ENOMEM; FERRY_EBACKEND (batches failed: their stripes are not journaled as finished,
 *  so resume runs them again); FERRY_EVERIFY (job.check refused a batch: likewise); or what
 *  creating a rank's pipeline returned.
 *  ferry_mpi_last_error() says what and where (the rank) on every rank. Not thread-safe with
 *  other MPI calls on @p comm. */
FERRY_EXTERN int ferry_mpi_run(MPI_Comm comm, const ferry_mpi_job_t *job, ferry_mpi_result_t *out);

/** What the journal of @p job (its input, output, journal and stripe_bytes as given to
 *  ferry_mpi_run) says was claimed and not finished, by rank, into @p out ("rank 1: stripe(s)
 *  5 8; rank 2: stripe(s) 7"; "" when nothing is): for saying, when a job stops, which stripes
 *  a resume will run again. Reads files only, no MPI call: callable from any thread, while the
 *  job runs (a thread that watches for signals). Returns how many such stripes, or
 *  FERRY_EINVAL (a bad job or buffer, a journal of another job), FERRY_EIO (no input),
 *  FERRY_ENOMEM; ferry_mpi_last_error() on this thread says which. */
FERRY_EXTERN int ferry_mpi_unfinished(const ferry_mpi_job_t *job, char *out, size_t len);

/** Release what ferry_mpi_run put in @p r (its ranks); @p r may be NULL. */
FERRY_EXTERN void ferry_mpi_result_free(ferry_mpi_result_t *r);

/** The last ferry_mpi_run error's text on this thread ("" when none). */
FERRY_EXTERN const char *ferry_mpi_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
