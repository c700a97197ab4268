/* Files at storage speed: a file source and sink for a pipeline (ferry_file_t: reads and
 * writes of whole batches straight into and out of the caller's buffers, many io_uring requests
 * in flight, completions in the order they finish), and storage alone as fio's sequential jobs
 * measure it (ferry_io_bench, `ferry bench io`; docs/benchmarks.md). Both use O_DIRECT where
 * the file system allows it and buffered I/O with the same requests in flight (on io_uring's
 * worker threads) where it refuses it or keeps its files in the page cache alone (tmpfs, ramfs:
 * O_DIRECT bypasses nothing there). */
#ifndef FERRY_IO_H
#define FERRY_IO_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called by a read with each request's bytes in file order: @p data holds the @p len bytes of
 * the file at @p offset and is valid during the call only. Nonzero stops the read, and
 * ferry_io_bench returns that value (set the last error through your own means first). */
typedef int (*ferry_io_data_fn)(void *arg, uint64_t offset, const void *data, size_t len);

typedef struct ferry_io_bench_config {
    size_t size;              /* sizeof(ferry_io_bench_config_t), set by the INIT macro */
    const char *path;         /* the file: read, or (write) made; not NULL, not empty */
    bool write;               /* write a new file of @bytes instead of reading @path */
    bool force;               /* write: replace @path when it is an existing regular file */
    uint64_t bytes;           /* read: at most this many (0: the whole file); write: 1 .. 1P */
    size_t request_bytes;     /* bytes per request, 4M .. 16M, a multiple of 4K; 0: 8M */
    unsigned depth;           /* requests in flight, 8 .. 32; 0: 16 */
    ferry_io_data_fn on_data; /* read: each request's bytes, in order; NULL: none */
    void *arg;                /* for on_data */
} ferry_io_bench_config_t;
#define FERRY_IO_BENCH_CONFIG_INIT FERRY_SIZED_INIT(ferry_io_bench_config_t)

typedef struct ferry_io_bench_result {
    size_t size;          /* sizeof(ferry_io_bench_result_t), set by the caller */
    uint64_t bytes;       /* bytes read or written */
    double seconds;       /* first request to the last completion (a write: and its fdatasync) */
    double gbps;          /* bytes / seconds / 1e9 (0 for no bytes) */
    size_t request_bytes; /* as used */
    unsigned depth;       /* as configured (a file of fewer requests has fewer in flight) */
    bool direct;          /* every request went with O_DIRECT; false: the file system refused
                             it (on open or on a request) or keeps the file in the page cache
                             (tmpfs), and the file went buffered */
} ferry_io_bench_result_t;
#define FERRY_IO_BENCH_RESULT_INIT FERRY_SIZED_INIT(ferry_io_bench_result_t)

/** Read @p cfg->path front to back (or, with cfg->write, make it and write cfg->bytes to it,
 *  each 8-byte little-endian word holding its own offset in the file, the last one cut at the
 *  end) and time it. @p cfg and the path are read during the call only; buffers are allocated
 *  for the call. A write refuses an existing file unless cfg->force, and removes what it made
 *  when it fails. Only regular files are accepted: a directory, FIFO, device or socket is
 *  refused without being read. @p out is filled on success only.
 *  Returns 0, FERRY_EINVAL (NULL, size not set, a value out of range, not a regular file, an
 *  existing file to write; the accepted values in the last error), FERRY_ENOMEM, FERRY_EIO
 *  (open, read, write or sync failed; the last error names the file and the errno text), or
 *  on_data's nonzero value. Thread-safe for distinct files. */
FERRY_EXTERN int ferry_io_bench(const ferry_io_bench_config_t *cfg, ferry_io_bench_result_t *out);

/* ---------------------------------------------------------------------------------------------
 * Asynchronous file source and sink
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_file ferry_file_t;

/* ferry_file_open flags: exactly one of READ and WRITE, the others with WRITE only. */
#define FERRY_FILE_READ     0x1u /* read an existing regular file */
#define FERRY_FILE_WRITE    0x2u /* write a regular file, made if missing, never shortened */
#define FERRY_FILE_EXCL     0x4u /* WRITE: refuse an existing file (FERRY_EINVAL) */
#define FERRY_FILE_TRUNCATE 0x8u /* WRITE: an existing file starts empty */
/* Every request O_DIRECT, or refused: the open fails with FERRY_ENOTSUP where the file system
 * refuses O_DIRECT or keeps files in the page cache alone (tmpfs, ramfs), and a request whose
 * buffer, length or offset is not a multiple of 4 KiB fails with FERRY_EINVAL. Without it, O_DIRECT
 * is asked for and what cannot go with it (a misaligned buffer, offset or tail; a file system that
 * refuses it) goes buffered. */
#define FERRY_FILE_DIRECT_ONLY 0x10u

typedef struct ferry_file_config {
    size_t size;          /* sizeof(ferry_file_config_t), set by the INIT macro */
    unsigned depth;       /* io_uring requests in flight, 8 .. 32; 0: 16 */
    size_t request_bytes; /* a longer read or write is cut into requests of this many bytes,
                             4M .. 16M, a multiple of 4K; 0: 8M */
    bool buffered;        /* never O_DIRECT (page cache), same requests in flight */
} ferry_file_config_t;
#define FERRY_FILE_CONFIG_INIT FERRY_SIZED_INIT(ferry_file_config_t)

/* One finished read or write, from ferry_file_wait. */
typedef struct ferry_file_completion {
    uint64_t tag;  /* as given to ferry_file_read_async / ferry_file_write_async */
    size_t bytes;  /* bytes transferred: the length asked for, fewer for a read that met the
                      end of the file (then the bytes before it), or before an error */
    int error;     /* 0, or FERRY_EIO: the read or write failed (the last error of the thread
                      that waited names the file, the byte and the errno text) */
    int sys_errno; /* the errno of the failure, 0 when none */
} ferry_file_completion_t;

/** Open @p path for asynchronous reads or writes (@p flags: FERRY_FILE_*), with
 *  ferry_file_config_t @p cfg (NULL: defaults; read during the call only). Only a regular file
 *  is accepted: a directory, FIFO, device or socket is refused without being read (a FIFO
 *  without blocking). On success *out owns the file until ferry_file_close; on error *out is
 *  untouched. Returns 0, FERRY_EINVAL (NULL, flags or a value out of range, not a regular file,
 *  an existing file with FERRY_FILE_EXCL), FERRY_ENOTSUP (FERRY_FILE_DIRECT_ONLY where the file
 *  system refuses O_DIRECT, or on tmpfs), FERRY_ENOMEM or FERRY_EIO (open or io_uring set-up
 * failed); the last error names the file and the errno text. Thread-safe. */
FERRY_EXTERN int ferry_file_open(const char *path, unsigned flags, const ferry_file_config_t *cfg,
                                 ferry_file_t **out);

/** Start reading @p len bytes of @p f at byte @p offset into @p buf; ferry_file_wait later
 *  returns its completion with @p tag. The bytes land in @p buf itself (no copy through another
 *  buffer): @p buf is borrowed and must stay valid, and neither read nor written by the caller,
 *  until that completion is returned. O_DIRECT needs @p buf, @p offset and @p len to be
 *  multiples of 4 KiB (page-aligned memory: posix_memalign); a misaligned tail goes
 *  buffered, as does the whole request when @p buf or @p offset is misaligned. A long request
 *  is cut into requests of cfg->request_bytes, at most cfg->depth in flight over the file;
 *  requests beyond that wait inside @p f and start as others finish (this call never blocks on
 *  the storage). A read that meets the end of the file completes with the bytes before it (the
 *  rest of @p buf, up to @p len, may have been written: O_DIRECT moves whole blocks).
 *  Returns 0, or FERRY_EINVAL (NULL @p f or @p buf, @p len 0, a file opened for writing, a
 *  misaligned request with FERRY_FILE_DIRECT_ONLY), FERRY_ENOMEM or FERRY_EIO (io_uring
 *  refused a submission before: @p f can only be waited on and closed); on error nothing was
 *  started and no completion will come for @p tag. Thread-safe: may be called from any threads
 *  at once, and while another thread waits in ferry_file_wait. The request only queues here:
 *  the thread that waits starts it (the kernel cancels the I/O a thread started when that
 *  thread exits, so the calling thread may exit at once; the waiting one may not while
 *  requests are in flight). */
FERRY_EXTERN int ferry_file_read_async(ferry_file_t *f, void *buf, size_t len, uint64_t offset,
                                       uint64_t tag);

/** Start writing the @p len bytes of @p buf to @p f at byte @p offset, as ferry_file_read_async
 *  reads (the same alignment, splitting, ownership and thread rules; @p buf is only read). The
 *  file grows as needed; nothing is flushed to the device (fsync the file's path, or
 *  ferry_file_sync). Returns 0, FERRY_EINVAL (as for reads; a file opened for reading) or
 *  FERRY_ENOMEM. */
FERRY_EXTERN int ferry_file_write_async(ferry_file_t *f, const void *buf, size_t len,
                                        uint64_t offset, uint64_t tag);

/** Wait at most @p timeout_ms (0: only look; negative: without limit) for a read or write of
 *  @p f to finish, and return it in *@p out, in the order they finish (not the order started).
 *  Every started request's completion is returned exactly once. Returns 0 (*out filled, its
 *  error field saying whether the request succeeded), FERRY_ETIMEDOUT (none finished in time),
 *  FERRY_ESTATE (nothing in flight: returns at once, whatever the timeout), FERRY_EINVAL (NULL)
 *  or FERRY_EIO (io_uring itself failed). One thread at a time may wait on one file; it starts
 *  the queued requests and must not exit while they are in flight (their completions not yet
 *  returned). */
FERRY_EXTERN int ferry_file_wait(ferry_file_t *f, ferry_file_completion_t *out, int timeout_ms);

/** Flush what was written to @p f to the device (fdatasync), requests in flight excepted.
 *  Returns 0, FERRY_EINVAL (NULL) or FERRY_EIO (the last error names the file). Thread-safe. */
FERRY_EXTERN int ferry_file_sync(ferry_file_t *f);

/** Whether every request of @p f so far went with O_DIRECT (false for NULL, for a file system
 *  that refused O_DIRECT, and once any went buffered). Thread-safe. */
FERRY_EXTERN bool ferry_file_is_direct(const ferry_file_t *f);

/** Close @p f and free it. Refused with FERRY_EBUSY, @p f left open, while a request's
 *  completion has not been returned by ferry_file_wait (wait for every one first: the buffers
 *  are still the kernel's). Returns 0 (also for NULL), FERRY_EBUSY or FERRY_EIO (close failed:
 *  @p f is freed all the same). Not to be called while another thread uses @p f. */
FERRY_EXTERN int ferry_file_close(ferry_file_t *f);

#ifdef __cplusplus
}
#endif
#endif
