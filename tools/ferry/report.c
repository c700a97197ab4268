/* The --report page: the HTML frame (head, inline CSS, the run's identity), text and tables,
 * and SVG charts drawn here: line charts over a log byte axis, a timeline of ops, horizontal
 * bars. Everything the page shows is in the file: no script, no fonts, nothing fetched. The
 * file is written as PATH.tmp and renamed, so a reader never sees half a page. */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct report {
    FILE *f;
    const char *cmd;
    char *path, *tmp;
};

/* Chart geometry, in SVG user units (1 unit = 1 CSS pixel at the natural size). */
#define CHART_W     880
#define PLOT_H      300
#define MARGIN_L    76 /* y tick labels and the y axis title */
#define MARGIN_R    24
#define MARGIN_T    40 /* the chart's title */
#define MARGIN_B    56 /* x tick labels and the x axis title */
#define LEGEND_ROW  20
#define LEGEND_COLS 2
#define ROW_H       24  /* timeline rows */
#define LABEL_W     150 /* timeline and bar labels */
#define WARNING_H   20  /* a warning line under a chart's title */

/* Okabe-Ito: told apart with the common colour-vision deficiencies. */
static const char *const palette[8] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                       "#e69f00", "#56b4e9", "#6b6b6b", "#000000"};
/* Op kinds: H2D blue, compute green, D2H vermillion (ferry_op_kind_t order). */
static const int kind_color[3] = {0, 2, 1};
static const char *const kind_label[3] = {"H2D", "compute", "D2H"};

static const char *color(int i)
{
    return palette[(unsigned)i % 8u];
}

/* ---- escaping ------------------------------------------------------------------------------ */

/* Text for HTML and SVG (XML) alike: markup characters as entities, and control characters,
 * which XML refuses, as '?'. */
static void esc(FILE *f, const char *s)
{
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        switch (*c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*c < 0x20 && *c != '\n' && *c != '\t' ? '?' : *c, f);
        }
    }
}

static void vesc(FILE *f, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    esc(f, buf);
}

static void escf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void escf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vesc(f, fmt, ap);
    va_end(ap);
}

/* ---- the file ------------------------------------------------------------------------------ */

int report_check_path(const char *cmd, const char *path)
{
    return cli_check_out_path(cmd, "report", path, "report.html");
}

static const char *page_css =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1b1b1b;"
    "background:#fff;margin:0}\n"
    "main{max-width:920px;margin:0 auto;padding:16px 20px 40px}\n"
    "h1{font-size:22px;margin:8px 0 4px}h2{font-size:17px;margin:28px 0 6px;"
    "border-bottom:1px solid #ddd;padding-bottom:3px}\n"
    "code{font:13px ui-monospace,monospace;background:#f3f3f3;padding:2px 5px;"
    "border-radius:3px;word-break:break-all}\n"
    "table{border-collapse:collapse;margin:8px 0;font-size:13px}\n"
    "th,td{border:1px solid #ddd;padding:3px 9px;text-align:left}td.n{white-space:nowrap}\n"
    "td.n,th.n{text-align:right}thead th{background:#f5f5f5}\n"
    "tbody th{background:#fafafa;font-weight:600}\n"
    "figure{margin:12px 0}figcaption{font-size:13px;color:#444;margin-top:2px}\n"
    "svg{max-width:100%;height:auto;background:#fff}\n"
    "svg text{font:12px system-ui,sans-serif;fill:#222}\n"
    "svg .ct{font-size:15px;font-weight:600}svg .at{font-size:12.5px;fill:#333}\n"
    "svg .ax{stroke:#333;stroke-width:1}svg .gr{stroke:#e6e6e6;stroke-width:1}\n"
    "svg .note{fill:#a33;font-size:13px}\n";

static void format_cmdline(FILE *f, int argc, char **argv)
{
    fputs("ferry", f);
    for (int i = 0; i < argc; i++) {
        bool plain =
            argv[i][0] != '\0' && strspn(argv[i], "abcdefghijklmnopqrstuvwxyz"
                                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                  "0123456789-_=.,/:+@%") == strlen(argv[i]);
        fputc(' ', f);
        if (plain) {
            esc(f, argv[i]);
            continue;
        }
        fputc('\'', f);
        for (const char *c = argv[i]; *c; c++) {
            char one[2] = {*c, '\0'};
            esc(f, *c == '\'' ? "'\\''" : one);
        }
        fputc('\'', f);
    }
}

const char *report_link_text(const ferry_device_props_t *p, char *buf, size_t len)
{
    buf[0] = '\0';
    if (p->link_gbps <= 0)
        return buf;
    int gen = p->pcie_gen_max > 0 ? p->pcie_gen_max : p->pcie_gen;
    int width = p->pcie_width_max > 0 ? p->pcie_width_max : p->pcie_width;
    const char *from = p->simulated ? "the device profile" : "NVML's generation x width";
    if (gen > 0 && width > 0)
        snprintf(buf, len, "PCIe Gen%d x%d, %.1f GB/s per direction (theoretical, from %s)", gen,
                 width, p->link_gbps, from);
    else
        snprintf(buf, len, "%.1f GB/s per direction (theoretical, from %s)", p->link_gbps, from);
    return buf;
}

int report_link_line(const ferry_device_props_t *p, report_line_t *line, char *name, size_t len,
                     const char **warning)
{
    *warning = NULL;
    if (report_link_text(p, name, len)[0] != '\0') {
        *line = (report_line_t){name, p->link_gbps};
        return 1;
    }
    *warning = p->simulated ? "The profile gives no link rate: no limit is drawn."
                            : "The link's theoretical rate is unknown (NVML gave no PCIe "
                              "generation and width): no limit is drawn.";
    return 0;
}

static void write_identity(report_t *r, ferry_runtime_t *rt, ferry_device_t *dev)
{
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    char date[64], link[256];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S %Z", localtime_r(&now, &tm));
    report_table(r, NULL, NULL);
    report_kv(r, "date", "%s", date);
    report_kv(r, "device", "%s (index %d, backend %s)", p.name, p.index, ferry_runtime_backend(rt));
    if (p.simulated)
        report_kv(r, "driver / runtime", "simulated: times are virtual, from the profile %s",
                  p.profile[0] ? p.profile : "(built in)");
    else
        report_kv(r, "driver / runtime", "driver %s, CUDA runtime %s", p.driver_version,
                  p.runtime_version);
    report_link_text(&p, link, sizeof(link));
    report_kv(r, "link", "%s", link[0] ? link : "unknown (no PCIe generation and width)");
    report_kv(r, "ferry", "%s", ferry_version_string());
    report_table_end(r);
}

report_t *report_open(const char *cmd, const char *path, const char *what, int argc, char **argv,
                      ferry_runtime_t *rt, ferry_device_t *dev)
{
    report_t *r = calloc(1, sizeof(*r));
    size_t n = strlen(path) + 5;
    if (r == NULL || (r->path = strdup(path)) == NULL || (r->tmp = malloc(n)) == NULL) {
        cli_fail(cmd, "out of memory for the report");
        goto out_free;
    }
    r->cmd = cmd;
    snprintf(r->tmp, n, "%s.tmp", path);
    r->f = fopen(r->tmp, "w");
    if (r->f == NULL) {
        cli_fail(cmd, "cannot write --report %s (as %s): %s", path, r->tmp, strerror(errno));
        goto out_free;
    }
    FILE *f = r->f;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<meta name=\"generator\" content=\"ferry\">\n<title>");
    escf(f, "%s: report", what);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n<h1>", page_css);
    escf(f, "%s: report", what);
    fputs("</h1>\n<p><code>", f);
    format_cmdline(f, argc, argv);
    fputs("</code></p>\n", f);
    write_identity(r, rt, dev);
    return r;
out_free:
    if (r != NULL) {
        free(r->path);
        free(r->tmp);
    }
    free(r);
    return NULL;
}

int report_close(report_t *r)
{
    fputs("</main>\n</body>\n</html>\n", r->f);
    int bad = ferror(r->f);
    int rc = CLI_OK;
    if (fclose(r->f) != 0 || bad)
        rc = cli_fail(r->cmd, "writing --report %s (as %s): %s", r->path, r->tmp,
                      strerror(errno ? errno : EIO));
    else if (rename(r->tmp, r->path) != 0)
        rc = cli_fail(r->cmd, "--report %s: cannot rename %s into place: %s", r->path, r->tmp,
                      strerror(errno));
    if (rc != CLI_OK)
        unlink(r->tmp);
    free(r->path);
    free(r->tmp);
    free(r);
    return rc;
}

/* ---- text and tables ----------------------------------------------------------------------- */

void report_heading(report_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("<h2>", r->f);
    vesc(r->f, fmt, ap);
    fputs("</h2>\n", r->f);
    va_end(ap);
}

void report_text(report_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("<p>", r->f);
    vesc(r->f, fmt, ap);
    fputs("</p>\n", r->f);
    va_end(ap);
}

/* A cell is numeric (right-aligned) when it starts with a digit, a sign or a dot. */
static bool numeric(const char *s)
{
    return s[0] != '\0' && strchr("0123456789+-.", s[0]) != NULL;
}

static void cells(FILE *f, const char *tag, const char *first, va_list ap)
{
    fputs("<tr>", f);
    for (const char *c = first; c != NULL; c = va_arg(ap, const char *)) {
        fprintf(f, "<%s%s>", tag, numeric(c) ? " class=\"n\"" : "");
        esc(f, c);
        fprintf(f, "</%s>", tag);
    }
    fputs("</tr>\n", f);
}

void report_table(report_t *r, const char *first, ...)
{
    fputs("<table>\n", r->f);
    if (first != NULL) {
        va_list ap;
        va_start(ap, first);
        fputs("<thead>", r->f);
        cells(r->f, "th", first, ap);
        fputs("</thead>\n", r->f);
        va_end(ap);
    }
    fputs("<tbody>\n", r->f);
}

void report_row(report_t *r, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    cells(r->f, "td", first, ap);
    va_end(ap);
}

void report_kv(report_t *r, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("<tr><th>", r->f);
    esc(r->f, key);
    fputs("</th><td>", r->f);
    vesc(r->f, fmt, ap);
    fputs("</td></tr>\n", r->f);
    va_end(ap);
}

void report_table_end(report_t *r)
{
    fputs("</tbody>\n</table>\n", r->f);
}

/* ---- axes ---------------------------------------------------------------------------------- */

typedef struct axis {
    double lo, hi; /* in axis units: log2 of the value on a log axis */
    bool log2;
    double px0, px1; /* pixels of lo and hi (px1 < px0 on a y axis) */
    double step;     /* linear: the tick step */
} axis_t;

static double axis_px(const axis_t *a, double v)
{
    double t = a->log2 ? log2(v) : v;
    return a->px0 + (t - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0);
}

/* 1, 2, 2.5 or 5 times a power of ten, near @span / @ticks. */
static double nice_step(double span, int ticks)
{
    double raw = span / ticks, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
}

/* A linear axis from 0 to a round number at or above @max. */
static axis_t linear_axis(double max, double px0, double px1, int ticks)
{
    if (!(max > 0) || !isfinite(max))
        max = 1;
    axis_t a = {.lo = 0, .px0 = px0, .px1 = px1};
    a.step = nice_step(max, ticks);
    a.hi = ceil(max / a.step - 1e-9) * a.step;
    return a;
}

/* A log2 axis over whole powers of two around [@min, @max]. */
static axis_t log2_axis(double min, double max, double px0, double px1)
{
    axis_t a = {.log2 = true, .px0 = px0, .px1 = px1};
    a.lo = floor(log2(min > 0 ? min : 1));
    a.hi = ceil(log2(max > min ? max : min));
    if (a.hi - a.lo < 2) {
        a.lo -= 1;
        a.hi += 1;
    }
    return a;
}

/* "4 KiB", "16 MiB": a power of two, for tick labels. */
static const char *pow2_label(double b, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, "%g %s", b, units[u]);
    return buf;
}

/* Plain numbers for tick labels: no trailing zeros, no "-0". */
static const char *num_label(double v, char *buf, size_t len)
{
    snprintf(buf, len, "%g", fabs(v) < 1e-12 ? 0.0 : v);
    return buf;
}

static void text_at(FILE *f, double x, double y, const char *anchor, const char *cls, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s%s>", x, y, anchor,
            cls ? " class=\"" : "", cls ? cls : "", cls ? "\"" : "");
    esc(f, s);
    fputs("</text>\n", f);
}

/* Ticks of a linear axis: lo, lo + step, ... up to hi. */
static int linear_ticks(const axis_t *a)
{
    return (int)floor((a->hi - a->lo) / a->step + 1e-6) + 1;
}

/* The y axis: ticks, grid lines across the plot [@x0, @x1], labels, the title (rotated). */
static void y_axis(FILE *f, const axis_t *y, double x0, double x1, const char *title)
{
    char b[32];
    for (int i = 0; i < linear_ticks(y); i++) {
        double v = y->lo + i * y->step, py = axis_px(y, v);
        fprintf(f, "<line class=\"gr\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", x0, x1,
                py, py);
        text_at(f, x0 - 6, py + 4, "end", NULL, num_label(v, b, sizeof(b)));
    }
    fprintf(f, "<line class=\"ax\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", x0, x0,
            y->px0, y->px1);
    double mid = (y->px0 + y->px1) / 2;
    fprintf(f,
            "<text class=\"at\" text-anchor=\"middle\" transform=\"translate(16 %.1f) "
            "rotate(-90)\">",
            mid);
    esc(f, title);
    fputs("</text>\n", f);
}

/* A log2 byte axis along the bottom at @py: a tick per power of two (fewer when crowded). */
static void x_bytes_axis(FILE *f, const axis_t *x, double py, const char *title)
{
    char b[32];
    int stride = (int)ceil((x->hi - x->lo) / 10);
    for (int i = 0; i <= (int)(x->hi - x->lo); i += stride) {
        double e = x->lo + i, px = axis_px(x, exp2(e));
        fprintf(f, "<line class=\"ax\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", px, px,
                py, py + 5);
        text_at(f, px, py + 19, "middle", NULL, pow2_label(exp2(e), b, sizeof(b)));
    }
    fprintf(f, "<line class=\"ax\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", x->px0,
            x->px1, py, py);
    text_at(f, (x->px0 + x->px1) / 2, py + 42, "middle", "at", title);
}

/* A linear x axis along the bottom at @py, with grid lines up to @top. */
static void x_linear_axis(FILE *f, const axis_t *x, double py, double top, const char *title)
{
    char b[32];
    for (int i = 0; i < linear_ticks(x); i++) {
        double v = x->lo + i * x->step, px = axis_px(x, v);
        fprintf(f, "<line class=\"gr\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", px, px,
                top, py);
        text_at(f, px, py + 19, "middle", NULL, num_label(v, b, sizeof(b)));
    }
    fprintf(f, "<line class=\"ax\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", x->px0,
            x->px1, py, py);
    text_at(f, (x->px0 + x->px1) / 2, py + 42, "middle", "at", title);
}

/* ---- chart frame and legend ---------------------------------------------------------------- */

/* Open a chart of @height (plus a line for @warning, drawn under the title); returns the top
 * of its plot area. */
static double svg_open(FILE *f, const char *chart, const char *title, const char *warning,
                       int height)
{
    bool warn = warning != NULL && warning[0] != '\0';
    height += warn ? WARNING_H : 0;
    fputs("<figure>\n<svg data-chart=\"", f);
    esc(f, chart);
    fprintf(f,
            "\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
            "height=\"%d\" role=\"img\">\n<title>",
            CHART_W, height, CHART_W, height);
    esc(f, title);
    fputs("</title>\n", f);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", CHART_W,
            height);
    text_at(f, MARGIN_L, 24, "start", "ct", title);
    if (warn)
        text_at(f, MARGIN_L, 24 + WARNING_H, "start", "note", warning);
    return MARGIN_T + (warn ? WARNING_H : 0);
}

static void svg_close(FILE *f, const char *note)
{
    fputs("</svg>\n", f);
    if (note != NULL && note[0] != '\0') {
        fputs("<figcaption>", f);
        esc(f, note);
        fputs("</figcaption>\n", f);
    }
    fputs("</figure>\n", f);
}

enum swatch { SW_SOLID, SW_DASHED, SW_DOTTED, SW_BOX };
static const char *const dash[] = {"", " stroke-dasharray=\"6 4\"", " stroke-dasharray=\"2 3\""};

typedef struct legend_item {
    const char *name;
    const char *color;
    enum swatch swatch;
    bool wide; /* a row of its own (long names: the reference lines) */
} legend_item_t;

/* Where item @i goes (row, column) in @cols columns; returns the rows used by all @n. */
static int legend_place(const legend_item_t *it, int n, int cols, int *row, int *col)
{
    int r = 0, c = 0;
    for (int i = 0; i < n; i++) {
        if (it[i].wide && c != 0)
            r++, c = 0;
        row[i] = r, col[i] = c;
        if (it[i].wide || ++c == cols)
            r++, c = 0;
    }
    return r + (c != 0);
}

static void legend_swatch(FILE *f, const legend_item_t *it, double x, double y)
{
    if (it->swatch == SW_BOX)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"11\" fill=\"%s\"/>\n", x,
                y - 9, it->color);
    else
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2.5\"%s/>\n",
                x, x + 22, y - 4, y - 4, it->color, dash[it->swatch]);
}

/* The legend in @cols columns from (@left, @top) down: a swatch and the name per item. */
static void legend(FILE *f, const legend_item_t *it, int n, int cols, double left, double top)
{
    int *row = calloc((size_t)n + 1, sizeof(int)), *col = calloc((size_t)n + 1, sizeof(int));
    double colw = (CHART_W - MARGIN_R - left) / cols;
    if (row != NULL && col != NULL) {
        legend_place(it, n, cols, row, col);
        for (int i = 0; i < n; i++) {
            double x = left + col[i] * colw, y = top + row[i] * LEGEND_ROW;
            legend_swatch(f, &it[i], x, y);
            text_at(f, x + 30, y, "start", NULL, it[i].name);
        }
    }
    free(row);
    free(col);
}

static int legend_rows(const legend_item_t *it, int n, int cols)
{
    int *row = calloc((size_t)n + 1, sizeof(int)), *col = calloc((size_t)n + 1, sizeof(int));
    int rows = row != NULL && col != NULL ? legend_place(it, n, cols, row, col) : n;
    free(row);
    free(col);
    return rows;
}

/* ---- line chart ---------------------------------------------------------------------------- */

static void xy_ranges(const report_xy_t *c, double top, axis_t *x, axis_t *y)
{
    double xmin = INFINITY, xmax = 0, ymax = 0;
    for (int s = 0; s < c->nseries; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            double xv = c->series[s].x[i], yv = c->series[s].y[i];
            if (!(xv > 0 || (c->x_unit != NULL && xv == 0)) || !isfinite(yv))
                continue;
            xmin = fmin(xmin, xv);
            xmax = fmax(xmax, xv);
            ymax = fmax(ymax, yv);
        }
    for (int l = 0; l < c->nlines; l++)
        ymax = fmax(ymax, c->lines[l].y);
    *x = c->x_unit != NULL
             ? linear_axis(xmax, MARGIN_L, CHART_W - MARGIN_R, 8)
             : log2_axis(isfinite(xmin) ? xmin : 1, xmax, MARGIN_L, CHART_W - MARGIN_R);
    *y = linear_axis(ymax * 1.04, top + PLOT_H, top, 6);
}

/* Point indices sorted by x (insertion sort: series have at most a few dozen points). */
static void sort_points(const report_series_t *s, int *idx)
{
    for (int i = 0; i < s->n; i++) {
        int k = i;
        idx[i] = i;
        while (k > 0 && s->x[idx[k - 1]] > s->x[idx[k]]) {
            int t = idx[k - 1];
            idx[k - 1] = idx[k];
            idx[k] = t;
            k--;
        }
    }
}

static void series_path(FILE *f, const report_series_t *s, const int *idx, const axis_t *x,
                        const axis_t *y)
{
    fprintf(f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s d=\"", color(s->color),
            s->dashed ? " stroke-dasharray=\"6 4\"" : "");
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        double xv = s->x[idx[i]], yv = s->y[idx[i]];
        if ((xv > 0 || (!x->log2 && xv == 0)) && isfinite(yv))
            fprintf(f, "%s%.1f %.1f", k++ ? " L" : "M", axis_px(x, xv), axis_px(y, yv));
    }
    fputs("\"/>\n", f);
}

static void series_markers(FILE *f, const report_series_t *s, const axis_t *x, const axis_t *y,
                           const char *unit, const char *x_unit)
{
    char b[32];
    for (int i = 0; i < s->n; i++) {
        if (!(s->x[i] > 0 || (x_unit != NULL && s->x[i] == 0)) || !isfinite(s->y[i]))
            continue;
        fprintf(f,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" stroke=\"%s\" "
                "stroke-width=\"1.5\"><title>",
                axis_px(x, s->x[i]), axis_px(y, s->y[i]), s->dashed ? "#fff" : color(s->color),
                color(s->color));
        if (x_unit != NULL)
            snprintf(b, sizeof(b), "%.4g %s", s->x[i], x_unit);
        else
            cli_bytes((unsigned long long)s->x[i], b, sizeof(b));
        escf(f, "%s: %s, %.2f %s", s->name, b, s->y[i], unit ? unit : "");
        fputs("</title></circle>\n", f);
    }
}

static void hline(FILE *f, const report_line_t *l, const axis_t *x, const axis_t *y)
{
    double py = axis_px(y, l->y);
    fprintf(f,
            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"2 3\"><title>",
            x->px0, x->px1, py, py);
    esc(f, l->name);
    fputs("</title></line>\n", f);
}

/* Legend items: the series, then the reference lines (a row each). NULL when out of memory. */
static legend_item_t *xy_legend(const report_xy_t *c)
{
    legend_item_t *items = calloc((size_t)(c->nseries + c->nlines) + 1, sizeof(*items));
    for (int s = 0; items != NULL && s < c->nseries; s++) {
        const report_series_t *se = &c->series[s];
        items[s] =
            (legend_item_t){se->name, color(se->color), se->dashed ? SW_DASHED : SW_SOLID, false};
    }
    for (int l = 0; items != NULL && l < c->nlines; l++)
        items[c->nseries + l] = (legend_item_t){c->lines[l].name, "#333", SW_DOTTED, true};
    return items;
}

static void xy_series(FILE *f, const report_series_t *se, const axis_t *x, const axis_t *y,
                      const char *unit, const char *x_unit)
{
    int *idx = malloc(sizeof(int) * (size_t)(se->n + 1));
    if (idx != NULL) {
        sort_points(se, idx);
        series_path(f, se, idx, x, y);
    }
    free(idx);
    series_markers(f, se, x, y, unit, x_unit);
}

void report_xy_chart(report_t *r, const report_xy_t *c)
{
    FILE *f = r->f;
    axis_t x, y;
    int nleg = c->nseries + c->nlines;
    legend_item_t *items = xy_legend(c);
    int rows = items ? legend_rows(items, nleg, LEGEND_COLS) : 0;
    int height = MARGIN_T + PLOT_H + MARGIN_B + rows * LEGEND_ROW + 10;
    double top = svg_open(f, c->chart, c->title, c->warning, height);
    xy_ranges(c, top, &x, &y);
    y_axis(f, &y, x.px0, x.px1, c->y_label);
    if (c->x_unit != NULL)
        x_linear_axis(f, &x, y.px0, top, c->x_label);
    else
        x_bytes_axis(f, &x, y.px0, c->x_label);
    for (int l = 0; l < c->nlines; l++)
        hline(f, &c->lines[l], &x, &y);
    for (int s = 0; s < c->nseries; s++)
        xy_series(f, &c->series[s], &x, &y, c->y_unit, c->x_unit);
    if (items)
        legend(f, items, nleg, LEGEND_COLS, MARGIN_L, top + PLOT_H + MARGIN_B + 12);
    free(items);
    svg_close(f, c->note);
}

/* ---- timeline ------------------------------------------------------------------------------ */

static void op_rect(FILE *f, const ferry_op_record_t *op, const axis_t *x, double y, double scale,
                    const char *unit)
{
    char b[32];
    double x0 = axis_px(x, (double)op->start_ns / scale);
    double x1 = axis_px(x, fmin((double)op->end_ns, x->hi * scale) / scale);
    unsigned k = op->kind <= FERRY_OP_D2H ? (unsigned)op->kind : 1u;
    fprintf(f,
            "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
            "stroke=\"#fff\" stroke-width=\"0.4\"><title>",
            x0, y + 3, fmax(x1 - x0, 0.6), ROW_H - 6, color(kind_color[k]));
    escf(f, "%s, batch %llu chunk %u: %s, %.3f to %.3f %s", kind_label[k],
         (unsigned long long)op->batch, op->chunk, cli_bytes(op->bytes, b, sizeof(b)),
         (double)op->start_ns / scale, (double)op->end_ns / scale, unit);
    fputs("</title></rect>\n", f);
}

static void timeline_rows(FILE *f, const report_timeline_t *t, const axis_t *x, double top)
{
    for (unsigned i = 0; i < t->rows; i++) {
        double y = top + (double)i * ROW_H;
        if (i % 2 == 0)
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" "
                    "fill=\"#f6f6f6\"/>\n",
                    x->px0, y, x->px1 - x->px0, ROW_H);
        text_at(f, x->px0 - 8, y + ROW_H / 2.0 + 4, "end", NULL, t->row_names[i]);
    }
}

void report_timeline_chart(report_t *r, const report_timeline_t *t)
{
    FILE *f = r->f;
    /* microseconds for windows under 2 ms, else milliseconds */
    bool us = t->window_ns < 2000000;
    double scale = us ? 1e3 : 1e6;
    const char *unit = us ? "us" : "ms";
    double plot_h = (double)t->rows * ROW_H;
    /* the axis ends at the window's end: nothing later is drawn */
    axis_t x = linear_axis((double)t->window_ns / scale, LABEL_W, CHART_W - MARGIN_R, 8);
    x.hi = (double)t->window_ns / scale;
    int height = (int)(MARGIN_T + plot_h + MARGIN_B + LEGEND_ROW + 10);
    double top = svg_open(f, t->chart, t->title, NULL, height);
    timeline_rows(f, t, &x, top);
    x_linear_axis(f, &x, top + plot_h, top,
                  us ? "time since the first chunk's issue (us, device clock)"
                     : "time since the first chunk's issue (ms, device clock)");
    for (size_t i = 0; i < t->nops; i++) {
        const ferry_op_record_t *op = &t->ops[i];
        if (op->stream < t->rows && (double)op->start_ns < x.hi * scale)
            op_rect(f, op, &x, top + (double)op->stream * ROW_H, scale, unit);
    }
    legend_item_t items[3];
    for (int k = 0; k < 3; k++)
        items[k] = (legend_item_t){kind_label[k], color(kind_color[k]), SW_BOX, false};
    legend(f, items, 3, 3, LABEL_W, top + plot_h + MARGIN_B + 12);
    svg_close(f, t->note);
}

/* ---- bars ---------------------------------------------------------------------------------- */

static void bar(FILE *f, const report_bar_t *b, const axis_t *x, double y)
{
    double w = axis_px(x, fmax(b->value * 100, 0)) - x->px0;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>",
            x->px0, y + 4, fmax(w, 0.5), ROW_H - 8, color(b->color));
    escf(f, "%s: %.1f%% busy", b->label, b->value * 100);
    fputs("</title></rect>\n", f);
    char v[32];
    snprintf(v, sizeof(v), "%.1f%%", b->value * 100);
    text_at(f, x->px0 + fmax(w, 0) + 5, y + ROW_H / 2.0 + 4, "start", NULL, v);
    text_at(f, x->px0 - 8, y + ROW_H / 2.0 + 4, "end", NULL, b->label);
}

void report_bars_chart(report_t *r, const char *chart, const char *title, const char *x_label,
                       const report_bar_t *bars, int n, const char *note)
{
    FILE *f = r->f;
    double max = 100;
    for (int i = 0; i < n; i++)
        max = fmax(max, bars[i].value * 100);
    double plot_h = (double)n * ROW_H;
    /* room on the right for the value labels */
    axis_t x = linear_axis(max, LABEL_W + 20, CHART_W - MARGIN_R - 50, 5);
    int height = (int)(MARGIN_T + plot_h + MARGIN_B);
    double top = svg_open(f, chart, title, NULL, height);
    x_linear_axis(f, &x, top + plot_h, top, x_label);
    for (int i = 0; i < n; i++)
        bar(f, &bars[i], &x, top + (double)i * ROW_H);
    svg_close(f, note);
}
