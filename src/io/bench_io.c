/* ferry_io_bench: the public face of the file streams (file_io.h) for `ferry bench io`. */
#include <endian.h>
#include <string.h>

#include "base/base.h"
#include "ferry/io.h"
#include "io/file_io.h"

typedef struct bench_ctx {
    const ferry_io_bench_config_t *cfg;
} bench_ctx_t;

/* Writes: each 8-byte little-endian word holds its offset in the file. Whole words are
 * stored one at a time (a byte at a time, the fill ran at about 1.5 GB/s and held `bench io
 * --write` to it on tmpfs, bench/results/2026-12-05-h100-issue17b); a word cut by the start or
 * the end of @buf byte by byte. */
static void fill_pattern(uint64_t offset, unsigned char *buf, size_t len)
{
    uint64_t w = offset & ~7ull;
    size_t skip = (size_t)(offset - w), i = 0;
    if (skip == 0) {
        for (; i + 8 <= len; i += 8, w += 8) {
            uint64_t le = htole64(w);
            memcpy(buf + i, &le, 8);
        }
    }
    while (i < len) {
        unsigned char b[8];
        for (int k = 0; k < 8; k++)
            b[k] = (unsigned char)(w >> (8 * k));
        size_t n = 8 - skip < len - i ? 8 - skip : len - i;
        memcpy(buf + i, b + skip, n);
        i += n;
        skip = 0;
        w += 8;
    }
}

static int on_request(void *ctx, uint64_t offset, void *buf, size_t len)
{
    const ferry_io_bench_config_t *cfg = ((bench_ctx_t *)ctx)->cfg;
    if (cfg->write) {
        fill_pattern(offset, buf, len);
        return 0;
    }
    return cfg->on_data ? cfg->on_data(cfg->arg, offset, buf, len) : 0;
}

static int check(const ferry_io_bench_config_t *cfg, const ferry_io_bench_result_t *out)
{
    if (!FERRY_SIZE_OK(cfg, sizeof(*cfg)) || !FERRY_SIZE_OK(out, sizeof(*out)))
        return ferry__error(FERRY_EINVAL, "ferry_io_bench: NULL argument or size not set "
                                          "(use the INIT macros)");
    if (cfg->path == NULL || cfg->path[0] == '\0')
        return ferry__error(FERRY_EINVAL, "ferry_io_bench: no file (path NULL or empty)");
    int rc = ferry__io_check_shape("ferry_io_bench", cfg->request_bytes, cfg->depth);
    if (rc != 0)
        return rc;
    if (cfg->write && (cfg->bytes == 0 || cfg->bytes > (1ull << 50)))
        return ferry__error(FERRY_EINVAL, "ferry_io_bench: write of %llu bytes (accepted: 1 to 1P)",
                            (unsigned long long)cfg->bytes);
    return 0;
}

int ferry_io_bench(const ferry_io_bench_config_t *cfg, ferry_io_bench_result_t *out)
{
    int rc = check(cfg, out);
    if (rc != 0)
        return rc;
    bench_ctx_t ctx = {cfg};
    ferry__io_spec_t s = {.path = cfg->path,
                          .write = cfg->write,
                          .force = cfg->force,
                          .bytes = cfg->bytes,
                          .request_bytes = cfg->request_bytes ? cfg->request_bytes : 8u << 20,
                          .depth = cfg->depth ? cfg->depth : 16,
                          .data = on_request,
                          .ctx = &ctx};
    ferry__io_stats_t st = {0};
    if ((rc = ferry__io_stream(&s, &st)) != 0)
        return rc;
    ferry_io_bench_result_t r = {.size = sizeof(r),
                                 .bytes = st.bytes,
                                 .seconds = (double)st.ns / 1e9,
                                 .gbps = st.ns ? (double)st.bytes / (double)st.ns : 0,
                                 .request_bytes = s.request_bytes,
                                 .depth = s.depth,
                                 .direct = st.direct};
    ferry__sized_copy_out(out, &r, sizeof(r));
    return 0;
}
