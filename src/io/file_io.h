/* Sequential file streams on ferry_file_t (file.c): many requests of one size in flight over a
 * ring of aligned buffers, O_DIRECT where the file system takes it and buffered I/O where it
 * refuses it, errors with the file name and errno text in the last error. Reads hand each
 * request's bytes to a callback in file order; writes ask a callback to fill each request's
 * buffer. Used by ferry_io_bench (bench_io.c). */
#ifndef FERRY_IO_FILE_IO_H
#define FERRY_IO_FILE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__IO_ALIGN 4096u /* O_DIRECT alignment of offsets, lengths and buffers */

typedef struct ferry__io_spec {
    const char *path;
    bool write;           /* create @path (O_EXCL unless @force) and write @bytes to it */
    bool force;           /* write: replace an existing regular file */
    uint64_t bytes;       /* read: at most this many (0: the whole file); write: the size */
    size_t request_bytes; /* a multiple of FERRY__IO_ALIGN, checked by the caller */
    unsigned depth;       /* requests in flight, at least 1 */
    /* read: the bytes at @offset, in file order; write: fill @buf with the bytes of
     * [@offset, @offset + @len). Nonzero stops the stream with that code (the callback sets
     * the last error). May be NULL for a read. */
    int (*data)(void *ctx, uint64_t offset, void *buf, size_t len);
    void *ctx;
} ferry__io_spec_t;

typedef struct ferry__io_stats {
    uint64_t bytes; /* bytes read or written */
    uint64_t ns;    /* first submission to the last completion (writes: and fdatasync) */
    bool direct;    /* every request went with O_DIRECT */
    unsigned depth; /* requests in flight at most (the depth, or fewer for a small file) */
} ferry__io_stats_t;

/* Stream @s. Returns 0, FERRY_EINVAL (not a regular file, an existing file to write without
 * force), FERRY_EIO (open, read, write or sync failed; the file shrank), FERRY_ENOMEM, or the
 * callback's code; the last error names the file and the errno text. */
int ferry__io_stream(const ferry__io_spec_t *s, ferry__io_stats_t *out);

/* Request bytes (0, or 4M .. 16M, a multiple of 4K) and depth (0, or 8 .. 32) in range, else
 * FERRY_EINVAL with @who, the value and the accepted range in the last error (file.c). */
int ferry__io_check_shape(const char *who, size_t request_bytes, unsigned depth);

#endif
