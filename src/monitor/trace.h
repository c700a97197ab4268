/* Trace records and their export: op records (one per H2D, kernel or D2H of a chunk or copy
 * group, and instant notes), kept in a growing buffer by their owner, written as Chrome trace
 * JSON (ui.perfetto.dev: one track per stream and one per engine) or handed out as public
 * ferry_op_record_t. Knows nothing of pipelines: the owner passes its stream layout. */
#ifndef FERRY_MONITOR_TRACE_H
#define FERRY_MONITOR_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

typedef struct ferry__trace_rec {
    uint64_t batch;
    uint32_t chunk;
    uint16_t stream;
    char kind; /* 'h', 'c', 'd'; 'a' an alert (instant): stream holds its trace_note */
    uint64_t start, end, bytes;
    uint32_t nsub; /* the chunks of its copy group (0 read as 1) */
} ferry__trace_rec_t;

/* Instant events in the trace. */
enum trace_note { NOTE_BW_H2D, NOTE_BW_D2H, NOTE_DEADLINE, NOTE_GPU_LOST };

typedef struct ferry__trace_buf {
    ferry__trace_rec_t *recs;
    size_t n, cap;
} ferry__trace_buf_t;

/* Append @r; false when out of memory (the buffer is unchanged). */
bool ferry__trace_push(ferry__trace_buf_t *b, const ferry__trace_rec_t *r);
void ferry__trace_free(ferry__trace_buf_t *b);

/* The streams the records name: H2D streams first, then compute, then D2H (or one stream for
 * everything), and each stream's kind ('h', 'c', 'd', 'a'). */
typedef struct ferry__trace_layout {
    const char *backend, *device;
    bool simulated;
    bool single;
    unsigned ncopy, ncomp, nstreams;
    const char *stream_kind;
} ferry__trace_layout_t;

/* Write @n records as Chrome trace JSON to @path, times relative to @t0. Returns 0 or
 * FERRY_EIO. */
int ferry__trace_write_json(const char *path, const ferry__trace_layout_t *lay,
                            const ferry__trace_rec_t *recs, size_t nrecs, uint64_t t0);

/* One device's records in a trace of several (a set of devices): its layout, its records
 * (times relative to its own @t0, on its own clock) and its index, which names its tracks
 * ("device 1: streams") and keeps its flows apart. */
typedef struct ferry__trace_part {
    ferry__trace_layout_t lay;
    const ferry__trace_rec_t *recs;
    size_t n;
    uint64_t t0;
    int index;
} ferry__trace_part_t;
/* Write @nparts devices' records into one trace at @path: two processes (streams, engines) per
 * device. Returns 0 or FERRY_EIO. */
int ferry__trace_write_json_parts(const char *path, const ferry__trace_part_t *parts,
                                  size_t nparts);
/* Record @r as a public op record, times relative to @t0. */
ferry_op_record_t ferry__trace_op_record(const ferry__trace_rec_t *r, uint64_t t0);

#endif
