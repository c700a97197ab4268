/* The progress bar (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define BAR_WIDTH 30
#define REDRAW_NS 100000000u

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cli_progress_begin(cli_progress_t *pr, const char *label, uint64_t total, bool bytes,
                        bool quiet)
{
    const char *nc = getenv("NO_COLOR");
    *pr = (cli_progress_t){
        .on = !quiet && total > 0 && isatty(STDERR_FILENO) && isatty(STDOUT_FILENO),
        .color = nc == NULL || nc[0] == '\0',
        .bytes = bytes,
        .label = label,
        .total = total,
        .t0_ns = mono_ns(),
    };
}

/* "ETA 42s", "ETA 3m05s", "ETA 1h02m": the time left at the rate so far; "ETA --" before
 * anything is done, as there is no rate yet. */
static void eta_text(uint64_t done, uint64_t total, double elapsed_s, char *buf, size_t len)
{
    if (done == 0 || elapsed_s <= 0) {
        snprintf(buf, len, "ETA --");
        return;
    }
    double left = elapsed_s * (double)(total - done) / (double)done;
    unsigned long long s = (unsigned long long)(left + 0.5);
    if (s < 60)
        snprintf(buf, len, "ETA %llus", s);
    else if (s < 3600)
        snprintf(buf, len, "ETA %llum%02llus", s / 60, s % 60);
    else
        snprintf(buf, len, "ETA %lluh%02llum", s / 3600, s / 60 % 60);
}

static void draw(cli_progress_t *pr, uint64_t done, uint64_t now)
{
    if (done > pr->total)
        done = pr->total;
    double frac = (double)done / (double)pr->total;
    int fill = (int)(frac * BAR_WIDTH + 0.5);
    char bar[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s%.*s%s%s] %3.0f%%", pr->label, pr->color ? "\033[32m" : "", fill, bar,
            pr->color ? "\033[0m" : "", bar + fill, frac * 100);
    double s = (double)(now - pr->t0_ns) / 1e9;
    if (pr->bytes) {
        char b1[32], b2[32];
        fprintf(stderr, "  %s / %s", cli_bytes(done, b1, sizeof(b1)),
                cli_bytes(pr->total, b2, sizeof(b2)));
        if (s > 0)
            fprintf(stderr, "  %.1f GB/s wall", (double)done / s / 1e9);
    } else {
        fprintf(stderr, "  %llu / %llu", (unsigned long long)done, (unsigned long long)pr->total);
    }
    char eta[32];
    eta_text(done, pr->total, s, eta, sizeof(eta));
    fprintf(stderr, "  %s", eta);
    fprintf(stderr, "\033[K");
    fflush(stderr);
    pr->drawn_ns = now;
}

void cli_progress_update(cli_progress_t *pr, uint64_t done)
{
    if (!pr->on)
        return;
    uint64_t now = mono_ns();
    if (pr->drawn_ns != 0 && now - pr->drawn_ns < REDRAW_NS && done < pr->total)
        return;
    draw(pr, done, now);
}

void cli_progress_end(cli_progress_t *pr)
{
    if (!pr->on || pr->drawn_ns == 0)
        return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
