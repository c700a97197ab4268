/* ferry_file_t (include/ferry/io.h) through the public API: reads land byte for byte in the
 * caller's buffers and writes put every byte at its offset, for sizes and offsets that are not
 * multiples of the request or of 4 KiB, misaligned buffers, reads past the end of the file, on
 * the disk and in tmpfs, each completion returned once with its tag; and misuse refused by
 * name: NULL, length 0, the wrong direction, misalignment with FERRY_FILE_DIRECT_ONLY, bad
 * config values, close with requests in flight, a wait with nothing in flight (at once). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ferry/io.h"
#include "testlib.h"

#define MIB (1u << 20)

static unsigned char *aligned(size_t n)
{
    void *m = NULL;
    assert_int_equal(posix_memalign(&m, 4096, n + 4096), 0);
    memset(m, 0xee, n + 4096);
    return m;
}

/* Wait for @n completions, each tag below 3 at most once, without error; bytes[tag] set. Then
 * nothing is left in flight. */
static void wait_all(ferry_file_t *f, unsigned n, size_t *bytes)
{
    bool seen[16] = {0};
    for (unsigned i = 0; i < n; i++) {
        ferry_file_completion_t c;
        assert_int_equal(ferry_file_wait(f, &c, 10000), 0);
        assert_true(c.tag < 3);
        assert_false(seen[c.tag]);
        seen[c.tag] = true;
        assert_int_equal(c.error, 0);
        assert_int_equal(c.sys_errno, 0);
        bytes[c.tag] = c.bytes;
    }
    ferry_file_completion_t c;
    assert_int_equal(ferry_file_wait(f, &c, 1000), FERRY_ESTATE);
}

/* Read @path (@size bytes) in pieces of awkward sizes, one at a misaligned buffer address, and
 * one past the end of the file; check every byte and the byte counts. */
static void read_check(const char *path, uint64_t size)
{
    ferry_file_config_t cfg = FERRY_FILE_CONFIG_INIT;
    cfg.depth = 8;
    cfg.request_bytes = 4 * MIB;
    ferry_file_t *f = NULL;
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ, &cfg, &f), 0);
    /* [0, a) aligned; [a, b) at a misaligned buffer; [b, size + 5000) past the end */
    uint64_t a = size / 2 - size / 2 % 4096, b = a + (size - a) / 3;
    uint64_t off[3] = {0, a, b}, len[3] = {a, b - a, size - b + 5000};
    unsigned char *buf[3];
    unsigned n = 0;
    for (unsigned i = 0; i < 3; i++) {
        buf[i] = aligned(len[i] + 1);
        if (len[i] == 0)
            continue;
        unsigned char *at = buf[i] + (i == 1 ? 1 : 0);
        assert_int_equal(ferry_file_read_async(f, at, len[i], off[i], i), 0);
        n++;
    }
    size_t got[3] = {0};
    wait_all(f, n, got);
    for (unsigned i = 0; i < 3; i++) {
        size_t want = i == 2 ? (size_t)(size - b) : (size_t)len[i];
        if (len[i] == 0)
            continue;
        assert_int_equal(got[i], want);
        const unsigned char *at = buf[i] + (i == 1 ? 1 : 0);
        for (size_t k = 0; k < want; k++)
            if (at[k] != test_file_byte(off[i] + k))
                fail_msg("%s: byte %llu read as %u", path, (unsigned long long)(off[i] + k), at[k]);
        if (i == 2) /* never past the length asked for */
            assert_int_equal(at[len[i]], 0xee);
    }
    assert_int_equal(ferry_file_close(f), 0);
    for (unsigned i = 0; i < 3; i++)
        free(buf[i]);
}

static void test_read(void **state)
{
    (void)state;
    const uint64_t sizes[] = {13 * MIB + 4097 + 3, 8 * MIB, 4097, 1};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        char path[300];
        snprintf(path, sizeof(path), "%s/in%zu.bin", test_dir, k);
        test_make_file(path, sizes[k]);
        read_check(path, sizes[k]);
    }
}

/* Write @size bytes to @path in parts out of order, with defaults or buffered; read back. */
static void write_check(const char *path, uint64_t size, bool buffered)
{
    ferry_file_config_t cfg = FERRY_FILE_CONFIG_INIT;
    cfg.buffered = buffered;
    ferry_file_t *f = NULL;
    assert_int_equal(ferry_file_open(path, FERRY_FILE_WRITE | FERRY_FILE_TRUNCATE, &cfg, &f), 0);
    unsigned char *src = aligned(size + 1);
    for (uint64_t i = 0; i < size; i++)
        src[i] = test_file_byte(i);
    /* the end first, then a misaligned middle from a misaligned buffer, then the start */
    uint64_t a = (size / 3) & ~4095ull, b = a + (size - a) / 2 + 1;
    unsigned char *mis = aligned(b - a + 1);
    memcpy(mis + 1, src + a, b - a);
    assert_int_equal(ferry_file_write_async(f, src + b, size - b, b, 2), 0);
    assert_int_equal(ferry_file_write_async(f, mis + 1, b - a, a, 1), 0);
    unsigned n = 2;
    if (a > 0) {
        assert_int_equal(ferry_file_write_async(f, src, a, 0, 0), 0);
        n++;
    }
    size_t got[3] = {0};
    wait_all(f, n, got);
    assert_int_equal(got[2], size - b);
    assert_int_equal(got[1], b - a);
    assert_int_equal(ferry_file_sync(f), 0);
    if (buffered)
        assert_false(ferry_file_is_direct(f));
    assert_int_equal(ferry_file_close(f), 0);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, size);
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    for (uint64_t i = 0; i < size; i++)
        if (fgetc(in) != test_file_byte(i))
            fail_msg("%s: byte %llu differs", path, (unsigned long long)i);
    fclose(in);
    free(src);
    free(mis);
}

static void test_write(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/out.bin", test_dir);
    write_check(path, 21 * MIB + 4095, false);
    write_check(path, 5 * MIB + 3, true);
    write_check(path, 9000, false);
}

static void test_tmpfs(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/dev/shm/ferry-file-test-%d", (int)getpid());
    struct stat sb;
    if (stat("/dev/shm", &sb) != 0)
        skip();
    write_check(path, 9 * MIB + 77, false);
    read_check(path, 9 * MIB + 77);
    unlink(path);
}

static void test_misuse(void **state)
{
    (void)state;
    char path[300], buf[16];
    snprintf(path, sizeof(path), "%s/m.bin", test_dir);
    test_make_file(path, 8192);
    ferry_file_t *f = NULL;
    ferry_file_completion_t c;
    assert_int_equal(ferry_file_open(NULL, FERRY_FILE_READ, NULL, &f), FERRY_EINVAL);
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ, NULL, NULL), FERRY_EINVAL);
    assert_int_equal(ferry_file_open(path, 0, NULL, &f), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "flags"));
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ | FERRY_FILE_WRITE, NULL, &f),
                     FERRY_EINVAL);
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ | FERRY_FILE_TRUNCATE, NULL, &f),
                     FERRY_EINVAL);
    ferry_file_config_t cfg = FERRY_FILE_CONFIG_INIT;
    cfg.depth = 7;
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ, &cfg, &f), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "depth 7"));
    cfg.depth = 0;
    cfg.request_bytes = 5000000;
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ, &cfg, &f), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "request bytes"));
    cfg.request_bytes = 0;
    cfg.size = 0;
    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ, &cfg, &f), FERRY_EINVAL);
    assert_null(f);
    assert_int_equal(ferry_file_open(path, FERRY_FILE_WRITE | FERRY_FILE_EXCL, NULL, &f),
                     FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "exists"));
    assert_int_equal(ferry_file_open(test_dir, FERRY_FILE_READ, NULL, &f), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "is a directory"));

    assert_int_equal(ferry_file_open(path, FERRY_FILE_READ, NULL, &f), 0);
    assert_int_equal(ferry_file_read_async(NULL, buf, 1, 0, 0), FERRY_EINVAL);
    assert_int_equal(ferry_file_read_async(f, NULL, 1, 0, 0), FERRY_EINVAL);
    assert_int_equal(ferry_file_read_async(f, buf, 0, 0, 0), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "length 0"));
    assert_int_equal(ferry_file_write_async(f, buf, 1, 0, 0), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "opened for reading"));
    assert_int_equal(ferry_file_wait(NULL, &c, 0), FERRY_EINVAL);
    assert_int_equal(ferry_file_wait(f, NULL, 0), FERRY_EINVAL);
    /* nothing in flight: at once, even without a time limit */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ferry_file_wait(f, &c, -1), FERRY_ESTATE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 2);
    assert_non_null(strstr(ferry_last_error(), "nothing in flight"));
    /* in flight: close refused, then the completion, then close */
    assert_int_equal(ferry_file_read_async(f, buf, sizeof(buf), 100, 42), 0);
    assert_int_equal(ferry_file_close(f), FERRY_EBUSY);
    assert_int_equal(ferry_file_wait(f, &c, -1), 0);
    assert_int_equal(c.tag, 42);
    assert_int_equal(c.bytes, sizeof(buf));
    assert_int_equal((unsigned char)buf[0], test_file_byte(100));
    assert_int_equal(ferry_file_close(f), 0);
    assert_int_equal(ferry_file_close(NULL), 0);

    /* O_DIRECT required: misaligned requests refused (where the file system takes it) */
    int rc = ferry_file_open(path, FERRY_FILE_READ | FERRY_FILE_DIRECT_ONLY, NULL, &f);
    if (rc == FERRY_ENOTSUP)
        return;
    assert_int_equal(rc, 0);
    unsigned char *ab = aligned(8192);
    assert_int_equal(ferry_file_read_async(f, ab + 1, 4096, 0, 0), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "DIRECT_ONLY"));
    assert_int_equal(ferry_file_read_async(f, ab, 4095, 0, 0), FERRY_EINVAL);
    assert_int_equal(ferry_file_read_async(f, ab, 4096, 1, 0), FERRY_EINVAL);
    assert_int_equal(ferry_file_read_async(f, ab, 8192, 0, 7), 0);
    assert_int_equal(ferry_file_wait(f, &c, -1), 0);
    assert_int_equal(c.tag, 7);
    assert_int_equal(c.bytes, 8192);
    assert_int_equal(ab[8191], test_file_byte(8191));
    assert_true(ferry_file_is_direct(f));
    assert_int_equal(ferry_file_close(f), 0);
    free(ab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_write),
        cmocka_unit_test(test_tmpfs),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, test_dir_setup, test_dir_teardown);
}
