/* The metrics registry: registration rules (names, counters ending in _total, labels, type
 * clashes, duplicates), the exact text format with escaping and histogram buckets, counters
 * summed from many threads, the atomic textfile, and the loopback endpoint (200 on /metrics,
 * 404 elsewhere, 405 for other methods, loopback only, names and IPv6 resolved, and clients that
 * neither slow a scrape nor the shutdown). */
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
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

/* A TCP connection to "HOST:PORT" or "[HOST]:PORT" (numeric, loopback) within 2 s, or -1. */
static int connect_to(const char *hostport)
{
    char host[64];
    const char *colon = strrchr(hostport, ':');
    const char *h = hostport, *he = colon;
    if (*h == '[') {
        h++;
        he--;
    }
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return -1;
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    /* on Linux the send timeout bounds connect(2) too: a server that does not accept cannot
     * hold the test */
    struct timeval tv = {.tv_sec = 2};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* GET @p path with a 5 s bound on every wait; the response, or "" when the server closed or
 * did not answer. */
static char *http_request(const char *hostport, const char *method, const char *path)
{
    static char resp[65536];
    resp[0] = '\0';
    int fd = connect_to(hostport);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char req[256];
    int k = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     method, path);
    assert_int_equal(send(fd, req, (size_t)k, MSG_NOSIGNAL), k);
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(resp) - 1 && (r = recv(fd, resp + got, sizeof(resp) - 1 - got, 0)) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    close(fd);
    return resp;
}

static char *http_get(const char *hostport, const char *path)
{
    return http_request(hostport, "GET", path);
}

/* A registry holding one gauge, ferry_test_up, set to @v. */
static ferry_metrics_t *registry_up(double v)
{
    ferry_metrics_t *m = NULL;
    assert_int_equal(ferry_metrics_create(&m), 0);
    ferry_metric_t *g = NULL;
    assert_int_equal(ferry_metrics_gauge(m, "ferry_test_up", "Up.", NULL, &g), 0);
    ferry_metric_set(g, v);
    return m;
}

static void test_endpoint(void **state)
{
    (void)state;
    ferry_metrics_t *m = registry_up(1);
    char bound[64] = "";
    assert_int_equal(ferry_metrics_serve(m, "0.0.0.0:0", bound, sizeof(bound)), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "loopback"));
    assert_int_equal(ferry_metrics_serve(m, "[::]:0", bound, sizeof(bound)), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "not loopback"));
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1", bound, sizeof(bound)), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "127.0.0.1:PORT"));
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:99999", bound, sizeof(bound)), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:", bound, sizeof(bound)), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:-1", bound, sizeof(bound)), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_serve(m, "::1:0", bound, sizeof(bound)), FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "brackets"));
    assert_int_equal(ferry_metrics_serve(m, "[::1:0", bound, sizeof(bound)), FERRY_EINVAL);
    assert_int_equal(ferry_metrics_serve(m, "no-such-host.invalid:0", bound, sizeof(bound)),
                     FERRY_EINVAL);
    assert_non_null(strstr(ferry_last_error(), "cannot resolve 'no-such-host.invalid'"));
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:0", bound, sizeof(bound)), 0);
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:0", bound, sizeof(bound)), FERRY_EBUSY);
    printf("# serving on %s\n", bound);
    assert_non_null(strstr(bound, "127.0.0.1:"));
    char *r = http_get(bound, "/metrics");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(r, "text/plain; version=0.0.4"));
    assert_non_null(strstr(r, "ferry_test_up 1\n"));
    r = http_get(bound, "/metrics?x=1");
    assert_non_null(strstr(r, "ferry_test_up 1\n"));
    r = http_request(bound, "HEAD", "/metrics");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK"));
    assert_null(strstr(r, "ferry_test_up"));
    r = http_get(bound, "/");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    r = http_request(bound, "DELETE", "/metrics");
    assert_non_null(strstr(r, "HTTP/1.1 405"));
    assert_non_null(strstr(r, "Allow: GET, HEAD"));
    ferry_metrics_destroy(m);
}

/* Point 9 of issue 15: names and IPv6 loopback are resolved, not refused. */
static void test_endpoint_names(void **state)
{
    (void)state;
    const char *const addrs[] = {"localhost:0", "[::1]:0", "127.0.0.2:0"};
    for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
        ferry_metrics_t *m = registry_up(2);
        char bound[64] = "";
        int rc = ferry_metrics_serve(m, addrs[i], bound, sizeof(bound));
        if (rc != 0 && strchr(addrs[i], '[') != NULL &&
            strstr(ferry_last_error(), "Cannot assign") != NULL) {
            printf("# %s: this host has no IPv6 loopback (%s)\n", addrs[i], ferry_last_error());
            ferry_metrics_destroy(m);
            continue;
        }
        if (rc != 0)
            fail_msg("%s refused: %s", addrs[i], ferry_last_error());
        printf("# %s bound %s\n", addrs[i], bound);
        if (strchr(addrs[i], '[') != NULL)
            assert_int_equal(strncmp(bound, "[::1]:", 6), 0);
        else if (addrs[i][0] == '1')
            assert_int_equal(strncmp(bound, "127.0.0.2:", 10), 0);
        else
            assert_true(strncmp(bound, "127.", 4) == 0 || strncmp(bound, "[::1]:", 6) == 0);
        char *r = http_get(bound, "/metrics");
        assert_non_null(strstr(r, "ferry_test_up 2\n"));
        ferry_metrics_destroy(m);
    }
}

typedef struct slow_client {
    const char *addr;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool stop;
    int sent;
} slow_client_t;

/* Sends a request one byte every 0.2 s and never finishes it. */
static void *slow_main(void *arg)
{
    slow_client_t *sc = arg;
    int fd = connect_to(sc->addr);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: a-very-slow-client\r\nX-Pad: "
                       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    pthread_mutex_lock(&sc->lock);
    for (size_t i = 0; fd >= 0 && !sc->stop && i < sizeof(req) - 1; i++) {
        if (send(fd, &req[i], 1, MSG_NOSIGNAL) != 1)
            break;
        sc->sent++;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&sc->cv, &sc->lock, &ts);
    }
    pthread_mutex_unlock(&sc->lock);
    /* the connection stays open until the test ends, as an abandoned client's would */
    return (void *)(intptr_t)fd;
}

/* Point 8 of issue 15: 200 idle connections and a client sending a byte every 0.2 s do not
 * slow a scrape past 100 ms, and destroying the registry with all of them attached takes less
 * than a second. Connections past the limit wait until one closes; an idle one is closed within
 * the idle timeout. Bounded: about FERRY_METRICS_IDLE_TIMEOUT_S + 3 s. */
static void test_endpoint_clients(void **state)
{
    (void)state;
    ferry_metrics_t *m = registry_up(1);
    char bound[64] = "";
    assert_int_equal(ferry_metrics_serve(m, "127.0.0.1:0", bound, sizeof(bound)), 0);

    enum { IDLE = 200 };
    static int idle[IDLE];
    for (int i = 0; i < IDLE; i++) {
        idle[i] = connect_to(bound);
        assert_true(idle[i] >= 0);
    }
    /* one of them sends half a request line and stops */
    assert_int_equal(send(idle[0], "GET /metr", 9, MSG_NOSIGNAL), 9);
    slow_client_t sc = {.addr = bound};
    pthread_mutex_init(&sc.lock, NULL);
    pthread_cond_init(&sc.cv, NULL);
    pthread_t slow;
    assert_int_equal(pthread_create(&slow, NULL, slow_main, &sc), 0);
    usleep(300000);

    double worst = 0;
    for (int i = 0; i < 5; i++) {
        double t0 = now_s();
        char *r = http_get(bound, "/metrics");
        double dt = now_s() - t0;
        assert_non_null(strstr(r, "ferry_test_up 1\n"));
        worst = dt > worst ? dt : worst;
        usleep(100000);
    }
    pthread_mutex_lock(&sc.lock);
    int sent = sc.sent;
    pthread_mutex_unlock(&sc.lock);
    printf("# 5 scrapes beside %d idle connections and a slow client (%d bytes sent): the "
           "slowest took %.1f ms\n",
           IDLE, sent, worst * 1e3);
    assert_true(sent >= 2); /* the slow client was sending while the scrapes ran */
    assert_true(worst < 0.100);

    /* At the limit (the idle ones, the slow one and these) a further connection is not
     * served until one closes. */
    enum { EXTRA = FERRY_METRICS_CONNECTION_LIMIT - IDLE - 1 };
    static int extra[EXTRA];
    for (int i = 0; i < EXTRA; i++) {
        extra[i] = connect_to(bound);
        assert_true(extra[i] >= 0);
    }
    usleep(200000); /* the server accepts them */
    int over = connect_to(bound);
    assert_true(over >= 0);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(send(over, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
    struct pollfd pf = {.fd = over, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, 300), 0);
    for (int i = 0; i < EXTRA; i++)
        close(extra[i]);
    double t0 = now_s();
    assert_int_equal(poll(&pf, 1, 2000), 1);
    printf("# connection %d waited at the limit of %d, served %.1f ms after others closed\n",
           FERRY_METRICS_CONNECTION_LIMIT + 1, FERRY_METRICS_CONNECTION_LIMIT,
           (now_s() - t0) * 1e3);
    char buf[256];
    assert_true(recv(over, buf, sizeof(buf), 0) > 0);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200", 12), 0);
    close(over);

    /* An idle connection is closed within the idle timeout (plus a second's slack). */
    struct timeval tv = {.tv_sec = FERRY_METRICS_IDLE_TIMEOUT_S + 1};
    setsockopt(idle[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    t0 = now_s();
    ssize_t got = recv(idle[1], &c, 1, 0);
    printf("# an idle connection closed after %.2f s\n", now_s() - t0);
    assert_int_equal(got, 0);

    /* The slow client is still attached (one byte every 0.2 s keeps it active): destroy. */
    t0 = now_s();
    ferry_metrics_destroy(m);
    double dt = now_s() - t0;
    printf("# destroyed with the slow client and idle connections attached in %.1f ms\n", dt * 1e3);
    assert_true(dt < 1.0);
    pthread_mutex_lock(&sc.lock);
    sc.stop = true;
    pthread_cond_signal(&sc.cv);
    pthread_mutex_unlock(&sc.lock);
    void *ret = NULL;
    pthread_join(slow, &ret);
    if ((int)(intptr_t)ret >= 0)
        close((int)(intptr_t)ret);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    pthread_mutex_destroy(&sc.lock);
    pthread_cond_destroy(&sc.cv);
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

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_registration_and_format),
          cmocka_unit_test(test_threads_and_file), cmocka_unit_test(test_endpoint),
          cmocka_unit_test(test_endpoint_names), cmocka_unit_test(test_endpoint_clients),
          cmocka_unit_test(test_short_numbers))
