/* ferry_io_bench (include/ferry/io.h) through the public API: every byte of a file arrives, in
 * order, for sizes that are not a multiple of the request or of 4 KiB, an empty file and a
 * read limit; a written file holds the documented pattern; a missing file, a directory and a
 * FIFO are refused (the FIFO without blocking), as are an existing file to write and every bad
 * value, by name; tmpfs goes buffered exactly when it refuses O_DIRECT. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/io.h"
#include "testlib.h"

#define MIB (1u << 20)

typedef struct seen {
    uint64_t next; /* the offset the next piece must start at */
    unsigned calls;
    bool pattern; /* check the writer's pattern instead of byte_at */
    bool bad;
    int stop_at; /* nonzero: return FERRY_ECANCELED on that call */
} seen_t;

static int check_piece(void *arg, uint64_t offset, const void *data, size_t len)
{
    seen_t *s = arg;
    const unsigned char *p = data;
    s->calls++;
    if (offset != s->next || len == 0)
        s->bad = true;
    for (size_t i = 0; i < len && !s->bad; i++) {
        uint64_t at = offset + i, w = at & ~7ull;
        unsigned char want = s->pattern ? (unsigned char)(w >> (8 * (at - w))) : test_file_byte(at);
        if (p[i] != want)
            s->bad = true;
    }
    s->next = offset + len;
    return s->stop_at && s->calls == (unsigned)s->stop_at ? FERRY_ECANCELED : 0;
}

static int read_file(const char *path, uint64_t limit, size_t rq, seen_t *s,
                     ferry_io_bench_result_t *r)
{
    ferry_io_bench_config_t c = FERRY_IO_BENCH_CONFIG_INIT;
    c.path = path;
    c.bytes = limit;
    c.request_bytes = rq;
    c.depth = 8;
    c.on_data = check_piece;
    c.arg = s;
    return ferry_io_bench(&c, r);
}

static void test_read_sizes(void **state)
{
    (void)state;
    /* several requests with a short, unaligned last one; exactly two requests; under a block */
    const uint64_t sizes[] = {9 * MIB + 4097 + 3, 8 * MIB, 4095, 1};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        char path[300];
        snprintf(path, sizeof(path), "%s/in%zu.bin", test_dir, k);
        test_make_file(path, sizes[k]);
        seen_t s = {0};
        ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
        assert_int_equal(read_file(path, 0, 4 * MIB, &s, &r), 0);
        assert_false(s.bad);
        assert_int_equal(s.next, sizes[k]);
        assert_int_equal(s.calls, (sizes[k] + 4 * MIB - 1) / (4 * MIB));
        assert_int_equal(r.bytes, sizes[k]);
        assert_int_equal(r.request_bytes, 4 * MIB);
        assert_int_equal(r.depth, 8);
        assert_true(r.seconds >= 0);
    }
}

static void test_read_limit_and_empty(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/limit.bin", test_dir);
    test_make_file(path, 9 * MIB);
    seen_t s = {0};
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    assert_int_equal(read_file(path, 5 * MIB + 7, 0, &s, &r), 0); /* 8M default requests */
    assert_false(s.bad);
    assert_int_equal(s.next, 5 * MIB + 7);
    assert_int_equal(r.bytes, 5 * MIB + 7);
    assert_int_equal(r.request_bytes, 8 * MIB);

    snprintf(path, sizeof(path), "%s/empty.bin", test_dir);
    test_make_file(path, 0);
    s = (seen_t){0};
    assert_int_equal(read_file(path, 0, 0, &s, &r), 0);
    assert_int_equal(s.calls, 0);
    assert_int_equal(r.bytes, 0);
    assert_true(r.gbps == 0);
}

static void test_callback_stops(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/stop.bin", test_dir);
    test_make_file(path, 13 * MIB);
    seen_t s = {.stop_at = 2};
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    assert_int_equal(read_file(path, 0, 4 * MIB, &s, &r), FERRY_ECANCELED);
    assert_int_equal(s.calls, 2);
}

static void expect_refused(const char *path, int want, const char *text)
{
    seen_t s = {0};
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    assert_int_equal(read_file(path, 0, 0, &s, &r), want);
    assert_int_equal(s.calls, 0);
    assert_non_null(strstr(ferry_last_error(), path));
    assert_non_null(strstr(ferry_last_error(), text));
}

static void test_refusals(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/missing.bin", test_dir);
    expect_refused(path, FERRY_EIO, "No such file or directory");
    expect_refused(test_dir, FERRY_EINVAL, "is a directory");
    snprintf(path, sizeof(path), "%s/fifo", test_dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    expect_refused(path, FERRY_EINVAL, "is a FIFO"); /* would block forever if opened plainly */
}

static void test_write(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/out.bin", test_dir);
    ferry_io_bench_config_t c = FERRY_IO_BENCH_CONFIG_INIT;
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    c.path = path;
    c.write = true;
    c.bytes = 6 * MIB + 5; /* not a multiple of 4 KiB nor of 8 */
    c.request_bytes = 4 * MIB;
    assert_int_equal(ferry_io_bench(&c, &r), 0);
    assert_int_equal(r.bytes, 6 * MIB + 5);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 6 * MIB + 5);
    seen_t s = {.pattern = true};
    ferry_io_bench_result_t rr = FERRY_IO_BENCH_RESULT_INIT;
    assert_int_equal(read_file(path, 0, 0, &s, &rr), 0);
    assert_false(s.bad);
    assert_int_equal(s.next, 6 * MIB + 5);

    /* an existing file: refused, untouched; replaced with force */
    c.bytes = 4096;
    assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "exists"));
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 6 * MIB + 5);
    c.force = true;
    assert_int_equal(ferry_io_bench(&c, &r), 0);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 4096);
    /* force replaces regular files only */
    c.path = test_dir;
    assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "is a directory"));
}

static void test_tmpfs(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/dev/shm/ferry-io-test-%d", (int)getpid());
    struct stat sb;
    if (stat("/dev/shm", &sb) != 0)
        skip();
    test_make_file(path, 5 * MIB + 11);
    seen_t s = {0};
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    int rc = read_file(path, 0, 4 * MIB, &s, &r);
    unlink(path);
    assert_int_equal(rc, 0);
    assert_false(s.bad);
    assert_int_equal(s.next, 5 * MIB + 11);
    /* tmpfs keeps its files in the page cache: buffered (O_DIRECT, which Linux 6.6 and later
     * accept there, would bypass nothing), and said so */
    assert_false(r.direct);
}

static void test_bad_values(void **state)
{
    (void)state;
    ferry_io_bench_result_t r = FERRY_IO_BENCH_RESULT_INIT;
    ferry_io_bench_config_t c = FERRY_IO_BENCH_CONFIG_INIT;
    assert_int_equal(ferry_io_bench(NULL, &r), FERRY_EINVAL);
    assert_int_equal(ferry_io_bench(&c, NULL), FERRY_EINVAL);
    assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL); /* no path */
    assert_non_null(strstr(ferry_last_error(), "no file"));
    c.path = "";
    assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL);
    c.path = test_dir;
    const size_t bad_rq[] = {MIB, 4 * MIB - 4096, 4 * MIB + 1, 16 * MIB + 4096};
    for (size_t i = 0; i < sizeof(bad_rq) / sizeof(bad_rq[0]); i++) {
        c.request_bytes = bad_rq[i];
        assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL);
        assert_non_null(strstr(ferry_last_error(), "request bytes"));
    }
    c.request_bytes = 0;
    const unsigned bad_depth[] = {1, 7, 33};
    for (size_t i = 0; i < 3; i++) {
        c.depth = bad_depth[i];
        assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL);
        assert_non_null(strstr(ferry_last_error(), "depth"));
    }
    c.depth = 0;
    c.write = true; /* a write needs bytes */
    assert_int_equal(ferry_io_bench(&c, &r), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "write of 0 bytes"));
    ferry_io_bench_config_t unsized = c;
    unsized.size = 0;
    assert_int_equal(ferry_io_bench(&unsized, &r), FERRY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_sizes),     cmocka_unit_test(test_read_limit_and_empty),
        cmocka_unit_test(test_callback_stops), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_write),          cmocka_unit_test(test_tmpfs),
        cmocka_unit_test(test_bad_values),
    };
    return cmocka_run_group_tests(tests, test_dir_setup, test_dir_teardown);
}
