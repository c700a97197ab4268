/* Trace records and their export as Chrome trace JSON (trace.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "monitor/trace.h"

bool ferry__trace_push(ferry__trace_buf_t *b, const ferry__trace_rec_t *r)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        ferry__trace_rec_t *n = realloc(b->recs, cap * sizeof(*n));
        if (n == NULL)
            return false;
        b->recs = n;
        b->cap = cap;
    }
    b->recs[b->n++] = *r;
    return true;
}

void ferry__trace_free(ferry__trace_buf_t *b)
{
    free(b->recs);
    b->recs = NULL;
    b->n = b->cap = 0;
}

static const char *const note_names[] = {"bandwidth alert (H2D)", "bandwidth alert (D2H)",
                                         "deadline passed: abort flag raised", "GPU path lost"};

static const char *kind_name(char k)
{
    return k == 'h' ? "H2D" : k == 'c' ? "compute" : k == 'd' ? "D2H" : "all";
}

/* The trace's engine tracks: one per stream of each class (H2D, compute, D2H), as ops of one
 * class on several streams run at once and Perfetto nests the slices of one track by time.
 * The first stream of class @k and how many there are. */
static void engine_lanes(const ferry__trace_layout_t *lay, int k, unsigned *first, unsigned *n)
{
    if (lay->single) {
        *first = 0, *n = 1;
        return;
    }
    *first = k == 0 ? 0 : k == 1 ? lay->ncopy : lay->ncopy + lay->ncomp;
    *n = k == 1 ? lay->ncomp : lay->ncopy;
}

/* The engine track (pid 2) of an op of class @k on @stream. */
static int engine_tid(const ferry__trace_layout_t *lay, int k, unsigned stream)
{
    unsigned first, n;
    engine_lanes(lay, k, &first, &n);
    unsigned lane = stream >= first && stream - first < n ? stream - first : 0;
    return k * FERRY_STATS_MAX_STREAMS + (int)lane;
}

/* One device's tracks and records: its streams in process @pid, its engines in @pid + 1, the
 * processes named with @prefix ("" for a pipeline of one device). */
static void write_part(FILE *f, const ferry__trace_part_t *pt, int pid, const char *prefix)
{
    const ferry__trace_layout_t *lay = &pt->lay;
    uint64_t t0 = pt->t0;
    /* flows of different devices apart: the device in the id's top byte */
    uint64_t flow_dev = pt->index >= 0 ? (uint64_t)(pt->index + 1) << 56 : 0;
    fprintf(f,
            "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"%sstreams\"}"
            "},\n",
            pid, prefix);
    fprintf(f,
            "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"%sengines\"}"
            "},\n",
            pid + 1, prefix);
    for (unsigned i = 0; i < lay->nstreams; i++)
        fprintf(f,
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_name\",\"args\":"
                "{\"name\":\"stream %u (%s)\"}},\n",
                pid, i, i, kind_name(lay->stream_kind[i]));
    const char kinds[3] = {'h', 'c', 'd'};
    for (int k = 0; k < 3; k++) {
        unsigned first, n;
        engine_lanes(lay, k, &first, &n);
        for (unsigned l = 0; l < n; l++) {
            char lane[48] = "";
            if (n > 1)
                snprintf(lane, sizeof(lane), " %u (stream %u)", l, first + l);
            fprintf(f,
                    "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":"
                    "{\"name\":\"%s engine%s\"}},\n",
                    pid + 1, engine_tid(lay, k, first + l), kind_name(kinds[k]), lane);
        }
    }
    for (size_t i = 0; i < pt->n; i++) {
        const ferry__trace_rec_t *r = &pt->recs[i];
        double ts = (double)((r->start > t0 ? r->start : t0) - t0) / 1e3,
               dur = (double)(r->end - r->start) / 1e3;
        if (r->kind == 'a') {
            fprintf(f,
                    "{\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"name\":\"%s\","
                    "\"cat\":\"alert\",\"args\":{\"batch\":%llu,\"chunk\":%u}},\n",
                    pid + 1, ts, r->stream < 4 ? note_names[r->stream] : "note",
                    (unsigned long long)r->batch, r->chunk);
            continue;
        }
        int eng = r->kind == 'h' ? 0 : (r->kind == 'c' ? 1 : 2);
        /* A flow per chunk, H2D -> compute -> D2H, on the stream tracks: Perfetto draws the
         * arrows from the copy in to the kernel to the copy out. */
        fprintf(f,
                "{\"ph\":\"%s\",\"id\":%llu,\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"name\":\"chunk\","
                "\"cat\":\"flow\"%s},\n",
                r->kind == 'h'   ? "s"
                : r->kind == 'c' ? "t"
                                 : "f",
                (unsigned long long)(flow_dev | r->batch << 20 | (r->chunk & 0xFFFFFu)), pid,
                (unsigned)r->stream, ts + dur / 2, r->kind == 'd' ? ",\"bp\":\"e\"" : "");
        /* A copy group's ops name its chunks: "h2d b3 c4-7", a compute slice its kernels. */
        unsigned nsub = r->nsub > 1 ? r->nsub : 1;
        char chunks[32];
        if (nsub > 1)
            snprintf(chunks, sizeof(chunks), "%u-%u", r->chunk, r->chunk + nsub - 1);
        else
            snprintf(chunks, sizeof(chunks), "%u", r->chunk);
        for (int q = 0; q <= 1; q++)
            fprintf(f,
                    "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"name\":\"%s b%llu c%s\",\"cat\":\"%s\",\"args\":{\"batch\":%llu,"
                    "\"chunk\":%u,\"chunks\":%u,\"bytes\":%llu}},\n",
                    pid + q, q == 0 ? (int)r->stream : engine_tid(lay, eng, r->stream), ts, dur,
                    kind_name(r->kind), (unsigned long long)r->batch, chunks, kind_name(r->kind),
                    (unsigned long long)r->batch, r->chunk, nsub, (unsigned long long)r->bytes);
    }
}

/* The file around the parts: the header (the first part's backend and device), each part's
 * processes from pid 1 on, the sort index. */
static int write_file(const char *path, const ferry__trace_part_t *parts, size_t nparts)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return ferry__error(FERRY_EIO, "cannot write trace %s: %s", path, strerror(errno));
    /* Chrome trace format: per device, one process with a track (tid) per stream and one with
     * a track per engine class. Times in microseconds. */
    const ferry__trace_layout_t *lay = &parts[0].lay;
    fprintf(f,
            "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"backend\":\"%s\",\"device\":\"%s\","
            "\"simulated\":%s,\"devices\":%zu},\"traceEvents\":[\n",
            lay->backend, lay->device, lay->simulated ? "true" : "false", nparts);
    for (size_t i = 0; i < nparts; i++) {
        char prefix[32] = "";
        if (parts[i].index >= 0)
            snprintf(prefix, sizeof(prefix), "device %d: ", parts[i].index);
        write_part(f, &parts[i], 1 + 2 * (int)i, prefix);
    }
    fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":1}"
               "}\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return ferry__error(FERRY_EIO, "error writing trace %s", path);
    return 0;
}

int ferry__trace_write_json(const char *path, const ferry__trace_layout_t *lay,
                            const ferry__trace_rec_t *recs, size_t nrecs, uint64_t t0)
{
    ferry__trace_part_t one = {.lay = *lay, .recs = recs, .n = nrecs, .t0 = t0, .index = -1};
    return write_file(path, &one, 1);
}

int ferry__trace_write_json_parts(const char *path, const ferry__trace_part_t *parts, size_t nparts)
{
    if (nparts == 0)
        return ferry__error(FERRY_EINVAL, "trace %s: no devices", path);
    return write_file(path, parts, nparts);
}

ferry_op_record_t ferry__trace_op_record(const ferry__trace_rec_t *r, uint64_t t0)
{
    ferry_op_record_t o = {.size = sizeof(o), .batch = r->batch, .chunk = r->chunk};
    o.stream = r->stream;
    o.kind = r->kind == 'h' ? FERRY_OP_H2D : r->kind == 'c' ? FERRY_OP_COMPUTE : FERRY_OP_D2H;
    o.start_ns = r->start > t0 ? r->start - t0 : 0;
    o.end_ns = r->end > t0 ? r->end - t0 : 0;
    o.bytes = r->bytes;
    o.chunks = r->nsub > 1 ? r->nsub : 1;
    return o;
}
