/*
 * file_io.h - the files a command reads and writes, safely: an input is a
 * regular file opened without blocking (a FIFO would wait forever for a
 * writer), an output appears whole or not at all, never at the cost of an
 * input.
 *
 * Every file a command writes (a quantized model, a heat file, a routing
 * trace, stats JSON, keys, a plot) goes through here: it is written to a
 * temporary file beside its target (same directory, so the rename cannot
 * cross file systems), flushed and fsync'd, and renamed over the target
 * only when every byte made it. A failure (ENOSPC, EFBIG, EIO) removes the
 * temporary file and leaves the target as it was; an existing target, which
 * may be a file some process still has mapped (a model), is replaced by
 * rename and never truncated in place.
 *
 * Targets that are not regular files are written directly, as fopen "w"
 * would: an existing device, FIFO or socket (/dev/null, /dev/full) and any
 * path under /dev/ or /proc/ (/dev/stdout names the caller's stdout, and a
 * rename beside it would be wrong). Their write errors are reported the same
 * way. A FIFO without a reader is refused rather than waited on. A symlink to
 * a regular file is followed: the file it names is replaced, the link stays.
 *
 * Every error is one line "WHAT PATH: reason" in coli_last_error.
 */
#ifndef COLI_CORE_FILE_IO_H
#define COLI_CORE_FILE_IO_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/* Open path for reading if it is a regular file: O_NONBLOCK for the open (a
 * FIFO then does not wait for a writer), fstat, then back to blocking reads.
 * Returns the fd (O_CLOEXEC) with *st filled; -1 with errno when it cannot
 * be opened; -1 with errno 0 and *st filled when it is not a regular file
 * (coli_file_kind(st) says what it is). */
int coli_open_regular(const char *path, struct stat *st);

/* "a directory", "a FIFO", "a character device", ...: what st is, for
 * "not a regular file (a FIFO)". */
const char *coli_file_kind(const struct stat *st);

enum {
    COLI_OUTFILE_SECRET = 1,     /* mode exactly 0600 (else 0666 less the umask) */
    COLI_OUTFILE_NO_REPLACE = 2, /* fail if the target exists (keys are never overwritten) */
};

typedef struct coli_outfile {
    FILE *fp;     /* write here (stdio buffered); NULL when not open */
    char *what;   /* "heat file", "--stats-json": the start of every message */
    char *name;   /* the path as given, for messages */
    char *target; /* the file the output becomes (a symlink resolved) */
    char *tmp;    /* the temporary beside it; NULL: written directly (a device) */
    int flags;    /* COLI_OUTFILE_* */
} coli_outfile;

/* Start writing path; what names it in messages. 0, or COLI_EIO /
 * COLI_ENOMEM (o is then closed: nothing to discard). */
int coli_outfile_open(coli_outfile *o, const char *what, const char *path, int flags);

/* Finish: flush, fsync, close, rename into place. Any error seen since
 * open (ferror included) fails it: the temporary file is removed and the
 * target left alone. 0 or COLI_EIO. o is closed either way. */
int coli_outfile_commit(coli_outfile *o);

/* Give up: close and remove the temporary file; the target is untouched.
 * Safe on a closed or zeroed o. */
void coli_outfile_discard(coli_outfile *o);

/* Remove every temporary still being written (async-signal-safe): for a
 * command's SIGINT/SIGTERM handler, so that an interrupted quantize leaves
 * no hidden partial file. The targets are untouched. */
void coli_outfile_unlink_all(void);

/* The whole output at once: open, write len bytes, commit. 0 or the error. */
int coli_outfile_write(const char *what, const char *path, const void *data, size_t len, int flags);

/* A text file of one line: text and a newline (JSON documents). */
int coli_outfile_write_line(const char *what, const char *path, const char *text, int flags);

/* 1 when a and b name the same existing file (same device and inode: "./x",
 * an absolute path, a symlink or a hard link to it), else 0. */
int coli_same_file(const char *a, const char *b);

#endif
