/* The CLI's report writer (tools/ferry/report.c): paths refused before any work, the page only
 * in place once complete (PATH.tmp until then, removed when the rename fails), text and the
 * command line escaped, series drawn in x order on the log axis, the y axis above the data and
 * the link's line drawn only when its rate is known. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report.h"
#include "testlib.h"

static char dir[] = "/tmp/ferry-report-XXXXXX";
static ferry_runtime_t *rt;
static ferry_device_t *dev;

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(dir) == NULL)
        return -1;
    rt = test_sim_runtime();
    return ferry_device_get(rt, 0, &dev);
}

static int teardown(void **state)
{
    (void)state;
    ferry_runtime_destroy(rt);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The whole file at @path (NUL-terminated; the caller frees), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void test_check_path(void **state)
{
    (void)state;
    char p[256];
    snprintf(p, sizeof(p), "%s/ok.html", dir);
    assert_int_equal(report_check_path("test", p), CLI_OK);
    assert_int_equal(report_check_path("test", "relative.html"), CLI_OK);
    assert_int_equal(report_check_path("test", ""), CLI_USAGE);
    assert_int_equal(report_check_path("test", dir), CLI_USAGE);
    snprintf(p, sizeof(p), "%s/", dir);
    assert_int_equal(report_check_path("test", p), CLI_USAGE);
    snprintf(p, sizeof(p), "%s/missing/r.html", dir);
    assert_int_equal(report_check_path("test", p), CLI_USAGE);
    assert_int_equal(report_check_path("test", "/dev/null"), CLI_USAGE);
}

static report_t *open_page(const char *path)
{
    char *argv[] = {"run", "--input", "my file<&>'\".bin", NULL};
    report_t *r = report_open("test", path, "ferry <test>", 3, argv, rt, dev);
    assert_non_null(r);
    return r;
}

static void test_atomic_and_escaped(void **state)
{
    (void)state;
    char path[256], tmp[300];
    snprintf(path, sizeof(path), "%s/page.html", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *old = fopen(path, "w");
    assert_non_null(old);
    fputs("old page", old);
    fclose(old);
    report_t *r = open_page(path);
    report_heading(r, "a <heading> & %d", 7);
    report_text(r, "ctrl\001char");
    report_table(r, "h1", "h2", NULL);
    report_row(r, "1.5", "x<y", NULL);
    report_table_end(r);
    /* until it is closed, readers see the old page and the new one is PATH.tmp */
    char *page = slurp(path);
    assert_string_equal(page, "old page");
    free(page);
    assert_true(exists(tmp));
    assert_int_equal(report_close(r), CLI_OK);
    assert_false(exists(tmp));
    page = slurp(path);
    assert_non_null(page);
    assert_non_null(strstr(page, "<title>ferry &lt;test&gt;: report</title>"));
    /* shell-quoted ('\'' for a quote), then escaped */
    assert_non_null(strstr(page, "<code>ferry run --input 'my file&lt;&amp;&gt;&#39;\\&#39;&#39;"
                                 "&quot;.bin'</code>"));
    assert_non_null(strstr(page, "<h2>a &lt;heading&gt; &amp; 7</h2>"));
    assert_non_null(strstr(page, "<p>ctrl?char</p>"));
    assert_non_null(strstr(page, "<td class=\"n\">1.5</td><td>x&lt;y</td>"));
    assert_non_null(strstr(page, "NVIDIA H200 (simulated)"));
    assert_non_null(strstr(page, ferry_version_string()));
    assert_null(strstr(page, "my file<"));
    assert_non_null(strstr(page, "</html>\n"));
    free(page);
}

static void test_rename_failure_cleans_up(void **state)
{
    (void)state;
    char path[256], tmp[300], inner[300];
    snprintf(path, sizeof(path), "%s/taken", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    snprintf(inner, sizeof(inner), "%s/file", path);
    report_t *r = open_page(path);
    /* a non-empty directory appears where the page goes: the rename fails */
    assert_int_equal(mkdir(path, 0755), 0);
    FILE *f = fopen(inner, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(report_close(r), CLI_FAIL);
    assert_false(exists(tmp));
}

/* The x of each point of the first <path d="M..."> after @from, into @x (at most @max). */
static int path_xs(const char *from, double *x, int max)
{
    const char *d = strstr(strstr(from, "<path "), " d=\"M");
    int n = 0;
    for (const char *c = d + 5; n < max && *c != '"';) {
        char *end = NULL;
        x[n++] = strtod(c, &end);
        c = strpbrk(end, "L\"");
        if (*c == 'L')
            c++;
    }
    return n;
}

static void test_xy_chart(void **state)
{
    (void)state;
    char path[256], lname[256];
    snprintf(path, sizeof(path), "%s/xy.html", dir);
    report_t *r = open_page(path);
    const double x[4] = {16 << 20, 4096, 1 << 20, 65536}, y[4] = {55, 0.9, 43, 11};
    report_series_t s = {"H2D", x, y, 4, 0, false};
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    p.pcie_gen_max = 4, p.pcie_width_max = 16, p.link_gbps = 31.5;
    report_line_t line;
    const char *warning = "unset";
    assert_int_equal(report_link_line(&p, &line, lname, sizeof(lname), &warning), 1);
    assert_null(warning);
    assert_string_equal(lname, "PCIe Gen4 x16, 31.5 GB/s per direction (theoretical, from "
                               "NVML's generation x width)");
    report_xy_t c = {.chart = "known",
                     .title = "t",
                     .x_label = "bytes (log scale)",
                     .y_label = "GB/s",
                     .y_unit = "GB/s",
                     .series = &s,
                     .nseries = 1,
                     .lines = &line,
                     .nlines = 1};
    report_xy_chart(r, &c);
    p.link_gbps = 0; /* NVML gave nothing */
    assert_int_equal(report_link_line(&p, &line, lname, sizeof(lname), &warning), 0);
    assert_non_null(warning);
    c.chart = "unknown", c.nlines = 0, c.warning = warning;
    report_xy_chart(r, &c);
    assert_int_equal(report_close(r), CLI_OK);
    char *page = slurp(path);
    const char *known = strstr(page, "data-chart=\"known\""),
               *unk = strstr(page, "data-chart=\"unknown\"");
    assert_non_null(known);
    assert_non_null(unk);
    double px[8];
    assert_int_equal(path_xs(known, px, 8), 4);
    for (int i = 1; i < 4; i++)
        assert_true(px[i] > px[i - 1]); /* drawn in x order */
    /* a log axis: 4 KiB -> 64 KiB and 1 MiB -> 16 MiB are the same distance */
    assert_true(px[1] - px[0] > 0 && fabs((px[1] - px[0]) - (px[3] - px[2])) < 0.2);
    /* the y axis reaches past the data: the highest tick is 60 */
    assert_non_null(strstr(known, ">60</text>"));
    assert_null(strstr(known, ">70</text>"));
    const char *line_title = strstr(known, "<title>PCIe Gen4 x16, 31.5 GB/s");
    assert_true(line_title != NULL && line_title < unk);
    assert_non_null(strstr(unk, "class=\"note\">The link&#39;s theoretical rate is unknown"));
    assert_null(strstr(unk, "theoretical, from"));
    assert_non_null(strstr(known, "<title>H2D: 1.00 MiB, 43.00 GB/s</title>"));
    free(page);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_check_path),
          cmocka_unit_test(test_atomic_and_escaped),
          cmocka_unit_test(test_rename_failure_cleans_up), cmocka_unit_test(test_xy_chart))
