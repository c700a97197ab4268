/* A progress bar for long commands (`ferry run`, the bench sweeps, `ferry connections
 * --measure`), on stderr, only when stdout and stderr are both terminals: never into a pipe or
 * a file. Coloured unless NO_COLOR is set (https://no-color.org). Redrawn at most ten times a
 * second, with the time left at the rate so far (ETA); cleared when done, so the command's own
 * output follows on a clean line. */
#ifndef FERRY_CLI_PROGRESS_H
#define FERRY_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct cli_progress {
    bool on, color, bytes; /* shown; coloured; the amounts are bytes (else items) */
    const char *label;
    uint64_t total;
    uint64_t t0_ns, drawn_ns;
} cli_progress_t;

/* @label: what is counted ("run", "configurations"); @total: the amount at the end; @bytes:
 * whether amounts are bytes (shown as sizes, with a rate). @quiet turns it off. */
void cli_progress_begin(cli_progress_t *pr, const char *label, uint64_t total, bool bytes,
                        bool quiet);
/* @done of the total so far (redraws when due). */
void cli_progress_update(cli_progress_t *pr, uint64_t done);
/* Clear the line. */
void cli_progress_end(cli_progress_t *pr);

#endif
