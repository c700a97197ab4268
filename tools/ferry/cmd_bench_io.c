/* `ferry bench io FILE`: the storage alone, as fio's sequential jobs measure it: FILE read front
 * to back (or, with --write, made and written) with many io_uring requests in flight, O_DIRECT
 * where the file system allows it (ferry_io_bench, include/ferry/io.h). */
#include <stdio.h>

#include "bench.h"
#include "ferry/io.h"

int bench_io(const bench_opts_t *bo)
{
    ferry_io_bench_config_t c = FERRY_IO_BENCH_CONFIG_INIT;
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    c.path = bo->file;
    c.write = bo->write;
    c.force = bo->force;
    c.bytes = bo->bytes;
    c.request_bytes = (size_t)bo->request_bytes;
    c.depth = (unsigned)bo->depth;
    const char *mode = bo->write ? "write" : "read";
    if (ferry_io_bench(&c, &r) != 0)
        return cli_fail("bench", "io %s: %s", mode, ferry_last_error());
    const char *const lab[] = {"mode", mode, NULL};
    bench_metrics_result(bo, "ferry_bench_io_bytes_per_second",
                         "Sequential file rate of `ferry bench io`.", lab, r.gbps * 1e9);
    ferry_metric_add(bo->cases_done, 1);
    if (bo->json) {
        json_t j;
        json_command_begin(&j, stdout, "bench io");
        json_key_str(&j, "file", bo->file);
        json_key_str(&j, "mode", mode);
        json_key_uint(&j, "bytes", r.bytes);
        json_key_double(&j, "seconds", r.seconds, 6);
        json_key_double(&j, "gbps", r.gbps, 3);
        json_key_uint(&j, "request_bytes", r.request_bytes);
        json_key_uint(&j, "depth", r.depth);
        json_key_bool(&j, "direct", r.direct);
        json_key_bool(&j, "ok", true);
        json_end(&j);
        return CLI_OK;
    }
    char b[32], rq[32];
    printf("# io %s '%s': %s, requests of %s, depth %u, %s\n", mode, bo->file,
           cli_bytes(r.bytes, b, sizeof(b)), cli_bytes(r.request_bytes, rq, sizeof(rq)), r.depth,
           r.direct ? "O_DIRECT"
                    : "buffered (the file system refused O_DIRECT, or keeps the file in the page "
                      "cache: tmpfs)");
    printf("%.2f GB/s  %llu bytes in %.3f s\n", r.gbps, (unsigned long long)r.bytes, r.seconds);
    return CLI_OK;
}
