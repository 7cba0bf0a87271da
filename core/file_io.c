/* file_io.c - see file_io.h. */
#include "core/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int coli_open_regular(const char *path, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    const int stat_ok = fstat(fd, st) == 0;
    if (!stat_ok || !S_ISREG(st->st_mode)) {
        int e = stat_ok ? 0 : errno;
        close(fd);
        errno = e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); /* a regular file: plain blocking reads */
    return fd;
}

const char *coli_file_kind(const struct stat *st) {
    if (S_ISREG(st->st_mode)) return "a regular file";
    if (S_ISDIR(st->st_mode)) return "a directory";
    if (S_ISFIFO(st->st_mode)) return "a FIFO";
    if (S_ISCHR(st->st_mode)) return "a character device";
    if (S_ISBLK(st->st_mode)) return "a block device";
    if (S_ISSOCK(st->st_mode)) return "a socket";
    return "not a plain file";
}

// ----------------------------------------------------------------------------
// output

/* Longest piece of the target's name kept in the temporary's, so that
 * ".NAME.tmp-PID-N" stays within NAME_MAX whatever the target is called. */
#define OUTFILE_NAME_KEEP 200

/* The temporaries being written, for coli_outfile_unlink_all from a
 * signal handler: a slot is a pointer set and cleared atomically. */
#define OUTFILE_LIVE_MAX 32
static char *volatile s_live[OUTFILE_LIVE_MAX];

static void s_remember(char *tmp) {
    for (int i = 0; i < OUTFILE_LIVE_MAX; i++) {
        char *none = NULL;
        if (__atomic_compare_exchange_n(&s_live[i], &none, tmp, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
    }
}

static void s_forget(char *tmp) {
    for (int i = 0; tmp && i < OUTFILE_LIVE_MAX; i++) {
        char *mine = tmp;
        __atomic_compare_exchange_n(&s_live[i], &mine, NULL, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
}

void coli_outfile_unlink_all(void) {
    for (int i = 0; i < OUTFILE_LIVE_MAX; i++) {
        char *tmp = __atomic_load_n(&s_live[i], __ATOMIC_SEQ_CST);
        if (tmp) unlink(tmp); /* async-signal-safe */
    }
}

static void s_free(coli_outfile *o) {
    s_forget(o->tmp);
    free(o->what);
    free(o->name);
    free(o->target);
    free(o->tmp);
    o->what = o->name = o->target = o->tmp = NULL;
    o->fp = NULL;
}

static int s_fail(const coli_outfile *o, int e, const char *why) {
    return coli_fail(COLI_EIO, "%s %s: %s: %s", o->what, o->name, why, strerror(e));
}

/* Written in place, not through a temporary: what is not a regular file
 * (a device, a FIFO) and what lives in /dev or /proc (/dev/stdout is the
 * caller's stdout: a rename there would be wrong). */
static int s_direct(const char *path) {
    struct stat st;
    if (!strncmp(path, "/dev/", 5) || !strncmp(path, "/proc/", 6)) return 1;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}

/* The file the output becomes: a symlink's regular file, so that the
 * rename replaces that file and the link stays a link. */
static char *s_target(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) == 0) {
        char *real = realpath(path, NULL);
        if (real) return real;
    }
    return strdup(path);
}

/* A new file beside o->target, created exclusively: 0 or errno. */
static int s_open_tmp(coli_outfile *o, int *fd) {
    const char *slash = strrchr(o->target, '/');
    const char *base = slash ? slash + 1 : o->target;
    const int dir_len = slash ? (int)(slash - o->target) + 1 : 0; /* "dir/" or "" */
    static unsigned s_seq;
    size_t cap = strlen(o->target) + 64;
    if (!(o->tmp = malloc(cap))) return ENOMEM;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned seq = __atomic_fetch_add(&s_seq, 1, __ATOMIC_RELAXED);
        snprintf(o->tmp, cap, "%.*s.%.*s.tmp-%ld-%u", dir_len, o->target, OUTFILE_NAME_KEEP, base, (long)getpid(), seq);
        *fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, o->flags & COLI_OUTFILE_SECRET ? 0600 : 0666);
        if (*fd >= 0) {
            /* O_CREAT's mode is masked by the umask: a secret gets exactly 0600 */
            if ((o->flags & COLI_OUTFILE_SECRET) && fchmod(*fd, 0600) != 0) {
                int e = errno;
                close(*fd);
                unlink(o->tmp);
                return e;
            }
            return 0;
        }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(o->tmp);
    o->tmp = NULL;
    return e;
}

/* A device or FIFO, opened as fopen "w" would but without waiting for a
 * FIFO's reader (ENXIO then). 0 or errno. */
static int s_open_direct(coli_outfile *o, int *fd) {
    *fd = open(o->target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0666);
    if (*fd < 0) return errno;
    int fl = fcntl(*fd, F_GETFL);
    if (fl >= 0) fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    return 0;
}

int coli_outfile_open(coli_outfile *o, const char *what, const char *path, int flags) {
    memset(o, 0, sizeof *o);
    o->flags = flags;
    o->what = strdup(what ? what : "output");
    o->name = path ? strdup(path) : NULL;
    o->target = path ? s_target(path) : NULL;
    if (!o->what || !o->name || !o->target) {
        s_free(o);
        return coli_fail(COLI_ENOMEM, "%s %s: out of memory", what ? what : "output", path ? path : "");
    }
    struct stat st;
    if ((flags & COLI_OUTFILE_NO_REPLACE) && lstat(path, &st) == 0) {
        int rc = coli_fail(COLI_EIO, "%s %s: exists already; not overwriting it", o->what, path);
        s_free(o);
        return rc;
    }
    int fd = -1, e = s_direct(o->target) ? s_open_direct(o, &fd) : s_open_tmp(o, &fd);
    if (!e && !(o->fp = fdopen(fd, "wb"))) {
        e = errno;
        close(fd);
        if (o->tmp) unlink(o->tmp);
    }
    if (e) {
        int rc = s_fail(o, e, e == ENXIO ? "cannot open (a FIFO no process reads)" : "cannot create");
        s_free(o);
        return rc;
    }
    if (o->tmp) s_remember(o->tmp);
    return 0;
}

/* Flush, fsync (a temporary: the data is on disk before its name is) and
 * close: 0 or errno. */
static int s_close(coli_outfile *o) {
    int e = ferror(o->fp) ? (errno ? errno : EIO) : 0;
    if (fflush(o->fp) != 0 && !e) e = errno;
    if (!e && o->tmp && fsync(fileno(o->fp)) != 0) e = errno;
    if (fclose(o->fp) != 0 && !e) e = errno;
    o->fp = NULL;
    return e;
}

/* The temporary becomes the target: rename, or link when the target must
 * not be replaced (link fails if it appeared meanwhile). 0 or errno. */
static int s_publish(coli_outfile *o) {
    if (o->flags & COLI_OUTFILE_NO_REPLACE) {
        if (link(o->tmp, o->target) != 0) return errno;
        unlink(o->tmp);
        return 0;
    }
    return rename(o->tmp, o->target) != 0 ? errno : 0;
}

int coli_outfile_commit(coli_outfile *o) {
    if (!o->fp) return coli_fail(COLI_EIO, "%s: not open", o->what ? o->what : "output");
    int e = s_close(o), rc = 0;
    if (e)
        rc = s_fail(o, e, "cannot write");
    else if (o->tmp && (e = s_publish(o)) != 0)
        rc = s_fail(o, e, e == EEXIST ? "cannot create" : "cannot rename the finished file into place");
    if (rc && o->tmp) unlink(o->tmp);
    s_free(o);
    return rc;
}

void coli_outfile_discard(coli_outfile *o) {
    if (!o) return;
    if (o->fp) fclose(o->fp);
    if (o->tmp) unlink(o->tmp);
    s_free(o);
}

int coli_outfile_write(const char *what, const char *path, const void *data, size_t len, int flags) {
    coli_outfile o;
    int rc = coli_outfile_open(&o, what, path, flags);
    if (rc) return rc;
    if (len) fwrite(data, 1, len, o.fp); /* a short write sets ferror: commit reports it */
    return coli_outfile_commit(&o);
}

int coli_outfile_write_line(const char *what, const char *path, const char *text, int flags) {
    coli_outfile o;
    int rc = coli_outfile_open(&o, what, path, flags);
    if (rc) return rc;
    fputs(text, o.fp);
    fputc('\n', o.fp);
    return coli_outfile_commit(&o);
}

int coli_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
