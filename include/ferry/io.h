/* Storage alone, as fio's sequential jobs measure it: a file read or written front to back with
 * many io_uring requests in flight, O_DIRECT where the file system allows it and buffered I/O
 * where it refuses it (tmpfs). `ferry bench io` is built on this; docs/benchmarks.md. */
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
                             it (on open or on a request) and the file went buffered */
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

#ifdef __cplusplus
}
#endif
#endif
