/* The metrics registry: registration rules (names, counters ending in _total, labels, type
 * clashes, duplicates), the exact text format with escaping and histogram buckets, counters
 * summed from many threads, the atomic textfile, and the loopback endpoint (200 on /metrics,
 * 404 elsewhere, loopback only). */
#include <arpa/inet.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferry/metrics.h"
#include "testlib.h"

static char *render(ferry_metrics_t *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(ferry_metrics_write(m, f), 0);
    fclose(f);
    return buf;
}

static void test_registration_and_format(void **state)
{
    (void)state;
    ferry_metrics_t *m = NULL;
    assert_int_equal(ferry_metrics_create(&m), 0);
    ferry_metric_t *c = NULL, *c2 = NULL, *g = NULL, *h = NULL, *x = NULL;
    const char *const lab[] = {"dir", "h2d", NULL};
    const char *const lab2[] = {"dir", "say \"hi\"\\\n", NULL};
    assert_int_equal(ferry_metrics_counter(m, "ferry_test_bytes_total", "Bytes.", lab, &c), 0);
    assert_int_equal(ferry_metrics_counter(m, "ferry_test_bytes_total", "Bytes.", lab2, &c2), 0);
    assert_int_equal(ferry_metrics_gauge(m, "ferry_test_level", "Level.", NULL, &g), 0);
    const double b[] = {0.001, 0.01, 0.1};
    assert_int_equal(ferry_metrics_histogram(m, "ferry_test_seconds", "Latency.", NULL, b, 3, &h),
                     0);
    /* refused, by name */
    assert_int_equal(ferry_metrics_counter(m, "ferry_test_bytes", "no suffix", NULL, &x),
                     FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "_total"));
    assert_int_equal(ferry_metrics_gauge(m, "9lives", "bad", NULL, &x), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_gauge(m, "ferry-test", "bad", NULL, &x), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_gauge(m, "ferry_test_bytes_total", "clash", NULL, &x),
                     FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "already a counter"));
    assert_int_equal(ferry_metrics_counter(m, "ferry_test_bytes_total", "dup", lab, &x),
                     FERRY_EINVAL);
    const char *const badlab[] = {"__x", "1", NULL};
    assert_int_equal(ferry_metrics_gauge(m, "ferry_test_other", "bad label", badlab, &x),
                     FERRY_EINVAL);
    const double nb[] = {1, 0.5};
    assert_int_equal(ferry_metrics_histogram(m, "ferry_test_h2", "bad", NULL, nb, 2, &x),
                     FERRY_EINVAL);

    ferry_metric_add(c, 1024);
    ferry_metric_add(c, 1024);
    ferry_metric_add(c, -5); /* refused: counters do not go down */
    ferry_metric_set(g, 3);
    ferry_metric_add(g, -1.5);
    ferry_metric_observe(h, 0.0005);
    ferry_metric_observe(h, 0.05);
    ferry_metric_observe(h, 7);
    char *text = render(m);
    const char *want = "# HELP ferry_build_info ferry's version, in the label; always 1.\n"
                       "# TYPE ferry_build_info gauge\n"
                       "ferry_build_info{version=\"" FERRY_VERSION_STRING "\"} 1\n"
                       "# HELP ferry_test_bytes_total Bytes.\n"
                       "# TYPE ferry_test_bytes_total counter\n"
                       "ferry_test_bytes_total{dir=\"h2d\"} 2048\n"
                       "ferry_test_bytes_total{dir=\"say \\\"hi\\\"\\\\\\n\"} 0\n"
                       "# HELP ferry_test_level Level.\n"
                       "# TYPE ferry_test_level gauge\n"
                       "ferry_test_level 1.5\n"
                       "# HELP ferry_test_seconds Latency.\n"
                       "# TYPE ferry_test_seconds histogram\n"
                       "ferry_test_seconds_bucket{le=\"0.001\"} 1\n"
                       "ferry_test_seconds_bucket{le=\"0.01\"} 1\n"
                       "ferry_test_seconds_bucket{le=\"0.1\"} 2\n"
                       "ferry_test_seconds_bucket{le=\"+Inf\"} 3\n"
                       "ferry_test_seconds_sum 7.0505\n"
                       "ferry_test_seconds_count 3\n";
    if (strcmp(text, want) != 0)
        fail_msg("exposition differs:\n%s\nwanted:\n%s", text, want);
    free(text);
    ferry_metrics_destroy(m);
}

static void *adder(void *arg)
{
    for (int i = 0; i < 100000; i++)
        ferry_metric_add(arg, 1);
    return NULL;
}

static void test_threads_and_file(void **state)
{
    (void)state;
    ferry_metrics_t *m = NULL;
    assert_int_equal(ferry_metrics_create(&m), 0);
    ferry_metric_t *c = NULL;
    assert_int_equal(ferry_metrics_counter(m, "ferry_test_events_total", "Events.", NULL, &c), 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, adder, c), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    char path[] = "/tmp/ferry-metrics-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ferry_metrics_write_file(m, path), 0);
    FILE *f = fopen(path, "r");
    char buf[512] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    assert_non_null(strstr(buf, "ferry_test_events_total 400000\n"));
    assert_int_equal(ferry_metrics_write_file(m, "/nonexistent/dir/m.prom"), FERRY_EIO);
    assert_non_null(strstr(ferry_last_error(), "/nonexistent/dir/m.prom"));
    ferry_metrics_destroy(m);
}

static char *http_get(const char *hostport, const char *path)
{
    char host[64];
    const char *colon = strrchr(hostport, ':');
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[256];
    int k = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    assert_int_equal(send(fd, req, (size_t)k, 0), k);
    static char resp[65536];
    size_t got = 0;
    ssize_t r;
    while ((r = recv(fd, resp + got, sizeof(resp) - 1 - got, 0)) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    close(fd);
    return resp;
}

static void test_endpoint(void **state)
{
    (void)state;
    ferry_metrics_t *m = NULL;
    assert_int_equal(ferry_metrics_create(&m), 0);
    ferry_metric_t *g = NULL;
    assert_int_equal(ferry_metrics_gauge(m, "ferry_test_up", "Up.", NULL, &g), 0);
    ferry_metric_set(g, 1);
    char bound[64] = "";
    assert_int_equal(ferry_metrics_serve(m, "0.0.0.0:0", bound, sizeof(bound)), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "loopback"));
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1", bound, sizeof(bound)), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:99999", bound, sizeof(bound)), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:0", bound, sizeof(bound)), 0);
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:0", bound, sizeof(bound)), FERRY_EBUSY);
    printf("# serving on %s\n", bound);
    char *r = http_get(bound, "/metrics");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(r, "text/plain; version=0.0.4"));
    assert_non_null(strstr(r, "ferry_test_up 1\n"));
    r = http_get(bound, "/");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    ferry_metrics_destroy(m);
}

/* Bucket bounds and values print in the shortest form that reads back exactly. */
static void test_short_numbers(void **state)
{
    (void)state;
    ferry_metrics_t *m = NULL;
    assert_int_equal(ferry_metrics_create(&m), 0);
    ferry_metric_t *h = NULL, *g = NULL;
    const double b[] = {1e-7, 0.00025, 0.3, 2.5, 1e21};
    assert_int_equal(
        ferry_metrics_histogram(m, "ferry_test_short_seconds", "Short.", NULL, b, 5, &h), 0);
    assert_int_equal(ferry_metrics_gauge(m, "ferry_test_third", "A third.", NULL, &g), 0);
    ferry_metric_set(g, 1.0 / 3.0);
    char *text = render(m);
    const char *want[] = {"{le=\"1e-07\"} 0\n",
                          "{le=\"0.00025\"} 0\n",
                          "{le=\"0.3\"} 0\n",
                          "{le=\"2.5\"} 0\n",
                          "{le=\"1e+21\"} 0\n",
                          "ferry_test_third 0.3333333333333333\n",
                          "ferry_build_info{version=\"" FERRY_VERSION_STRING "\"} 1\n"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("'%s' not in:\n%s", want[i], text);
    assert_null(strstr(text, "0.00025000000000000001"));
    free(text);
    ferry_metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registration_and_format),
        cmocka_unit_test(test_threads_and_file),
        cmocka_unit_test(test_endpoint),
        cmocka_unit_test(test_short_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
