/* The MPI job's journal: rank r appends a record to "<prefix>.<r>" when it claims a stripe and,
 * once the stripe's output is synced, a record that it finished it (synced too). Records are
 * fixed-size with a checksum, so a record torn by a crash ends a file's reading and nothing
 * else. A resumed job reads every "<prefix>.<digits>" file: the union of the finished stripes
 * is not run again. */
#ifndef FERRY_MPI_JOURNAL_H
#define FERRY_MPI_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ferry__journal_state {
    unsigned char *done; /* nstripes: 1 when a record says it finished */
    int *claimed_by;     /* nstripes: the last rank that claimed it (-1: none) */
    unsigned files;      /* journal files read */
} ferry__journal_state_t;

/* Remove the journal files of @prefix. 0, or -1 with errno. */
int ferry__journal_clear(const char *prefix);
/* Read the journal files of @prefix into @st (its arrays of @nstripes, zeroed by the caller).
 * 0, or -1 with @why set (a file of another job: other stripe size or total; unreadable). */
int ferry__journal_scan(const char *prefix, uint64_t stripe_bytes, uint64_t total,
                        uint64_t nstripes, ferry__journal_state_t *st, char *why, size_t whylen);
/* This rank's journal file, opened for appending; -1 with errno. */
int ferry__journal_open(const char *prefix, int rank);
/* Append that @rank claimed (@done false) or finished (@done true, then synced) @stripe. 0, or
 * -1 with errno. */
int ferry__journal_note(int fd, int rank, uint64_t stripe, uint64_t stripe_bytes, uint64_t total,
                        bool done);

#endif
