/* The MPI job's journal (journal.h): fixed-size records, each with a checksum, appended to one
 * file per rank. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi/journal.h"

#define JR_MAGIC 0x3152464au /* "JFR1" */

typedef struct jrec {
    uint32_t magic, kind; /* kind: 1 claimed, 2 finished */
    int32_t rank;
    uint32_t pad;
    uint64_t stripe, stripe_bytes, total;
    uint64_t check; /* FNV-1a of the fields before it */
} jrec_t;

enum { JR_CLAIM = 1, JR_DONE = 2 };

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The directory and the file-name prefix ("<base>.") of @prefix's journal files. */
static void split(const char *prefix, char *dir, size_t dlen, char *base, size_t blen)
{
    char a[4096], b[4096];
    snprintf(a, sizeof(a), "%s", prefix);
    snprintf(b, sizeof(b), "%s", prefix);
    snprintf(dir, dlen, "%s", dirname(a));
    snprintf(base, blen, "%s.", basename(b));
}

/* Calls @fn for each journal file of @prefix (a name "<base>.<digits>"). */
static int each_file(const char *prefix, int (*fn)(const char *path, void *arg), void *arg)
{
    char dir[4096], base[1024];
    split(prefix, dir, sizeof(dir), base, sizeof(base));
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -1;
    size_t bl = strlen(base);
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) != 0 || n[bl] == '\0' ||
            strspn(n + bl, "0123456789") != strlen(n + bl))
            continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, n);
        rc = fn(path, arg);
    }
    closedir(d);
    return rc;
}

static int remove_one(const char *path, void *arg)
{
    (void)arg;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

int ferry__journal_clear(const char *prefix)
{
    return each_file(prefix, remove_one, NULL);
}

typedef struct scan {
    ferry__journal_state_t *st;
    uint64_t stripe_bytes, total, nstripes;
    char *why;
    size_t whylen;
} scan_t;

static int scan_one(const char *path, void *arg)
{
    scan_t *sc = arg;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(sc->why, sc->whylen, "cannot read journal %s: %s", path, strerror(errno));
        return -1;
    }
    jrec_t r;
    ssize_t n;
    while ((n = read(fd, &r, sizeof(r))) == (ssize_t)sizeof(r)) {
        if (r.magic != JR_MAGIC || r.check != fnv(&r, offsetof(jrec_t, check)))
            break; /* a torn last record (the job stopped while writing it): the end */
        if (r.stripe_bytes != sc->stripe_bytes || r.total != sc->total) {
            snprintf(sc->why, sc->whylen,
                     "journal %s is of another job: stripes of %llu bytes over %llu bytes, "
                     "where this job has stripes of %llu over %llu (the same --input, --output "
                     "and --stripe-bytes resume it)",
                     path, (unsigned long long)r.stripe_bytes, (unsigned long long)r.total,
                     (unsigned long long)sc->stripe_bytes, (unsigned long long)sc->total);
            close(fd);
            return -1;
        }
        if (r.stripe >= sc->nstripes)
            continue;
        if (r.kind == JR_DONE)
            sc->st->done[r.stripe] = 1;
        else if (r.kind == JR_CLAIM)
            sc->st->claimed_by[r.stripe] = r.rank;
    }
    close(fd);
    sc->st->files++;
    return 0;
}

int ferry__journal_scan(const char *prefix, uint64_t stripe_bytes, uint64_t total,
                        uint64_t nstripes, ferry__journal_state_t *st, char *why, size_t whylen)
{
    for (uint64_t i = 0; i < nstripes; i++)
        st->claimed_by[i] = -1;
    scan_t sc = {st, stripe_bytes, total, nstripes, why, whylen};
    why[0] = '\0';
    if (each_file(prefix, scan_one, &sc) != 0) {
        if (why[0] == '\0')
            snprintf(why, whylen, "cannot list the journal files of %s: %s", prefix,
                     strerror(errno));
        return -1;
    }
    return 0;
}

int ferry__journal_open(const char *prefix, int rank)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s.%d", prefix, rank);
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

int ferry__journal_note(int fd, int rank, uint64_t stripe, uint64_t stripe_bytes, uint64_t total,
                        bool done)
{
    jrec_t r = {.magic = JR_MAGIC,
                .kind = done ? JR_DONE : JR_CLAIM,
                .rank = rank,
                .stripe = stripe,
                .stripe_bytes = stripe_bytes,
                .total = total};
    r.check = fnv(&r, offsetof(jrec_t, check));
    if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        return -1;
    /* a finished stripe counts only once it is on the device: its output was synced before */
    return done ? fdatasync(fd) : 0;
}
