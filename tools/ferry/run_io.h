/* `ferry run`'s files and signals: --input and --output opened without ever blocking (regular
 * files, character devices, and - for stdin or stdout; FIFOs and the like are refused), the
 * output written to a temporary file beside its target and renamed into place only once the
 * run verified, and SIGINT/SIGTERM turned into an orderly stop with a bound on the wait. */
#ifndef FERRY_CLI_RUN_IO_H
#define FERRY_CLI_RUN_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

typedef struct run_file {
    const char *name; /* as given: a path, or "-" for stdin or stdout */
    int fd;           /* -1: not open */
    bool stream;      /* read or written in order: stdin, stdout, a character device */
    struct stat sb;   /* the opened file's (input) or the existing target's (output) */
    bool exists;      /* output: the target existed before the run */
    char *tmp;        /* output: the temporary file; NULL once renamed or removed */
    char *target;     /* output: the path tmp is renamed to (symlinks resolved) */
} run_file_t;
#define RUN_FILE_INIT                                                                              \
    {                                                                                              \
        .fd = -1                                                                                   \
    }

/* Open --input @path ("-": stdin) for reading. Regular files are read by offset; stdin and
 * character devices (/dev/zero) are streams. Anything else (a FIFO by path, a directory, a
 * block device, a socket) is refused before it is opened. Returns CLI_OK, CLI_USAGE (a kind
 * of file not accepted, message printed) or CLI_FAIL (cannot open, message printed). */
int run_input_open(const char *cmd, const char *path, run_file_t *in);

/* Open --output @path ("-": stdout) for writing. A regular file (existing or not) is written
 * to a temporary file .NAME.ferry-XXXXXX in its directory (the mode a plain create would
 * give, or the existing file's); a character device (/dev/null) and stdout are streams. For
 * stdout the data go to a duplicate of descriptor 1, and descriptor 1 is pointed at stderr so
 * that nothing printed afterwards (the summary included) mixes with the data.
 * Refused (CLI_USAGE) when it names the same file as @in (same device and inode, through
 * links too), when stdout is a terminal, and for FIFOs, directories and other kinds.
 * Returns CLI_OK, CLI_USAGE or CLI_FAIL, with a message printed. */
int run_output_open(const char *cmd, const char *path, const run_file_t *in, run_file_t *out);

/* The temporary file: flush it to disk, close it and rename it over the target. A stream is
 * only closed. Returns CLI_OK or CLI_FAIL (message printed; the temporary file removed). */
int run_output_commit(const char *cmd, run_file_t *out);

/* Close @f; an output's temporary file is removed. Safe on a file never opened. */
void run_file_close(run_file_t *f);

/* SIGINT and SIGTERM while a run is in progress: blocked in every thread (call before any
 * thread is made) and taken by a thread of their own, which calls @on_signal(sig, arg) once
 * (a signal ignored when the process started stays ignored).
 * Should the run not reach run_signals_finish within @grace_s of that signal, or a second
 * signal come, that thread removes the watched output's temporary file (run_signals_watch),
 * prints why on stderr and ends the process with 128 + the signal's number. */
typedef struct run_signals run_signals_t;
int run_signals_start(const char *cmd, unsigned grace_s, void (*on_signal)(int sig, void *arg),
                      void *arg, run_signals_t **out_sg);
/* Start the thread that takes them (until then they wait, blocked). Call it once the runtime is
 * made: isolation=process forks its helper there, and that fork must come before any other
 * thread exists (an allocator may hold a lock across it: AddressSanitizer's did). Returns
 * CLI_OK or CLI_FAIL (printed). */
int run_signals_listen(run_signals_t *sg);
/* Hand @out, opened by run_output_open, to the signal thread (under its lock: it may be
 * reading the watched output at that moment). */
void run_signals_watch(run_signals_t *sg, run_file_t *out);
/* The run's work is over (nothing in flight): signals from now on are left pending. */
void run_signals_finish(run_signals_t *sg);
/* The first signal taken (0: none). */
int run_signals_caught(run_signals_t *sg);
/* Stop the thread and restore the signal mask. NULL is a no-op. */
void run_signals_stop(run_signals_t *sg);

/* "SIGINT", "SIGTERM" */
const char *run_signal_name(int sig);

#endif
