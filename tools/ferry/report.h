/* The --report page of `ferry run` and `ferry bench copy|pipeline`: one self-contained HTML file
 * (inline CSS, SVG charts drawn here, no script, nothing fetched), written to FILE.tmp and
 * renamed into place. The commands compose their page from the pieces below; each chart is an
 * <svg data-chart="NAME"> so that tests and scripts can find it. */
#ifndef FERRY_CLI_REPORT_H
#define FERRY_CLI_REPORT_H

#include "cli.h"

typedef struct report report_t;

/* Whether @path can become a report, checked before the work starts: not empty, not a
 * directory nor another non-regular file, in a directory that exists and is writable. Prints
 * an error naming the flag, the path and what is accepted; returns CLI_OK or CLI_USAGE. */
int report_check_path(const char *cmd, const char *path);

/* Start the page at @path (written to @path.tmp until report_close): the title "@what: report",
 * the command line (`ferry` and @argc/@argv), the date, the device of @dev (name, backend,
 * driver and runtime or "simulated" and the profile, the link) and ferry's version. Returns
 * NULL on error (printed). */
report_t *report_open(const char *cmd, const char *path, const char *what, int argc, char **argv,
                      ferry_runtime_t *rt, ferry_device_t *dev);
/* Finish the page and rename it into place; frees @r. Returns CLI_OK, or CLI_FAIL with the
 * error printed and the temporary file removed. */
int report_close(report_t *r);

/* "PCIe Gen5 x16, 63.0 GB/s per direction (theoretical, ...)", or "" when the rate is unknown. */
const char *report_link_text(const ferry_device_props_t *p, char *buf, size_t len);

/* Text: a section heading and a paragraph (printf formats, escaped). */
void report_heading(report_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void report_text(report_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Tables: report_table(r, "header", ..., NULL) (a NULL first header: none), report_row(r,
 * "cell", ..., NULL) per row, report_table_end(r). report_kv: a row of a two-column table. */
void report_table(report_t *r, const char *first, ...) __attribute__((sentinel));
void report_row(report_t *r, const char *first, ...) __attribute__((sentinel));
void report_kv(report_t *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void report_table_end(report_t *r);

/* A line chart over a byte-size x axis on a log scale, or a linear one from 0 (x_unit). */
typedef struct report_series {
    const char *name;
    const double *x, *y; /* @n points, any order (drawn sorted by x); x > 0 */
    int n;
    int color;   /* index into the palette (0..7) */
    bool dashed; /* dashed line, hollow markers */
} report_series_t;

typedef struct report_line { /* a horizontal reference line across the plot */
    const char *name;
    double y;
} report_line_t;

/* The link's theoretical rate as a reference line for @p, named in @name: returns 1 with *line
 * set, or 0 with *warning set to the text that says the rate is unknown (no line is drawn
 * rather than a made-up one). */
int report_link_line(const ferry_device_props_t *p, report_line_t *line, char *name, size_t len,
                     const char **warning);

typedef struct report_xy {
    const char *chart;             /* the data-chart attribute */
    const char *title;             /* over the plot */
    const char *x_label, *y_label; /* with their units */
    const char *y_unit;            /* in tooltips: "GB/s" */
    const char *x_unit; /* NULL: x is bytes, on a log2 axis; else a linear axis from 0 in this
                           unit (tooltips: "12.5 ms"), where x may be 0 */
    const report_series_t *series;
    int nseries;
    const report_line_t *lines;
    int nlines;
    const char *warning; /* in the chart, under its title (what it cannot show); NULL: none */
    const char *note;    /* under the chart; NULL: none */
} report_xy_t;
void report_xy_chart(report_t *r, const report_xy_t *c);

/* A timeline: one row per stream, a rectangle per op (its batch, chunk, bytes and times in a
 * <title> tooltip), coloured by kind, over [0, @window_ns]; ops past the window are clipped. */
typedef struct report_timeline {
    const char *chart, *title;
    const char *const *row_names; /* @rows labels, indexed by the ops' stream */
    unsigned rows;
    const ferry_op_record_t *ops;
    size_t nops;
    uint64_t window_ns;
    const char *note;
} report_timeline_t;
void report_timeline_chart(report_t *r, const report_timeline_t *t);

/* Horizontal bars of fractions (drawn as percentages, axis at least 0-100%). */
typedef struct report_bar {
    const char *label;
    double value;
    int color;
} report_bar_t;
void report_bars_chart(report_t *r, const char *chart, const char *title, const char *x_label,
                       const report_bar_t *bars, int n, const char *note);

#endif
