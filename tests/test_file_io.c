/*
 * test_file_io.c - core/file_io: inputs that are not regular files are
 * refused without blocking; an output appears whole or not at all (a failed
 * write leaves the old target and no temporary), replaces a file by rename
 * (a reader of the old one keeps its bytes), follows a symlink, never
 * replaces a no-replace target, and makes a secret 0600 whatever the umask.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "colibri.h"
#include "core/file_io.h"

static char s_dir[64];

static void setup(void) {
    strcpy(s_dir, "/tmp/coli-fileio-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(file_io, .init = setup, .fini = teardown, .timeout = 30);

static const char *s_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", s_dir, name);
    return buf;
}

static void s_put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static int s_has(const char *path, const char *text) {
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strcmp(buf, text) == 0;
}

//  Entries of the directory besides "." and "..".
static int s_entries(void) {
    DIR *d = opendir(s_dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

Test(file_io, a_fifo_or_directory_input_is_refused_without_blocking) {
    char fifo[128];
    cr_assert_eq(mkfifo(s_path(fifo, sizeof fifo, "fifo"), 0600), 0);
    struct stat st;
    errno = 0;
    cr_expect_eq(coli_open_regular(fifo, &st), -1);
    cr_expect_eq(errno, 0);
    cr_expect_str_eq(coli_file_kind(&st), "a FIFO");
    cr_expect_eq(coli_open_regular(s_dir, &st), -1);
    cr_expect_str_eq(coli_file_kind(&st), "a directory");
    cr_expect_eq(coli_open_regular("/nonexistent/x", &st), -1);
    cr_expect_eq(errno, ENOENT);
    char file[128];
    s_put(s_path(file, sizeof file, "f"), "abc");
    int fd = coli_open_regular(file, &st);
    cr_assert_geq(fd, 0);
    char buf[4] = "";
    cr_expect_eq(read(fd, buf, 3), 3, "a regular file reads as usual");
    cr_expect_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "blocking reads after the open");
    close(fd);
}

//  The old file is replaced by rename: one still open keeps its bytes (as a
//  mapped model keeps its weights), the path has the new ones.
Test(file_io, replace_is_a_rename_never_a_truncate) {
    char path[128];
    s_put(s_path(path, sizeof path, "out"), "old");
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(coli_outfile_write("test", path, "new!", 4, 0), 0, "%s", coli_last_error());
    char buf[8] = "";
    cr_expect_eq(pread(fd, buf, sizeof buf, 0), 3);
    cr_expect_str_eq(buf, "old");
    close(fd);
    cr_expect(s_has(path, "new!"));
    cr_expect_eq(s_entries(), 1, "no temporary left");
}

//  RLIMIT_FSIZE makes the write fail (EFBIG, SIGXFSZ ignored): the target
//  keeps its old bytes and no temporary remains; the message names the path.
Test(file_io, a_failed_write_leaves_the_target_and_no_temporary) {
    char path[128];
    s_put(s_path(path, sizeof path, "out"), "old");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    static char big[1 << 16];
    memset(big, 'x', sizeof big);
    cr_expect_eq(coli_outfile_write("test", path, big, sizeof big, 0), COLI_EIO);
    cr_expect(strstr(coli_last_error(), path) && strstr(coli_last_error(), "cannot write"), "%s", coli_last_error());
    cr_expect(s_has(path, "old"), "target changed");
    cr_expect_eq(s_entries(), 1, "a temporary was left behind");
    /* discard: the same, without writing anything */
    coli_outfile o;
    cr_assert_eq(coli_outfile_open(&o, "test", path, 0), 0);
    fputs("partial", o.fp);
    coli_outfile_discard(&o);
    cr_expect(s_has(path, "old"));
    cr_expect_eq(s_entries(), 1);
}

Test(file_io, a_symlink_stays_a_link_to_the_new_file) {
    char real[128], link[128];
    s_put(s_path(real, sizeof real, "real"), "old");
    cr_assert_eq(symlink("real", s_path(link, sizeof link, "link")), 0);
    cr_assert_eq(coli_outfile_write("test", link, "new", 3, 0), 0, "%s", coli_last_error());
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_expect(S_ISLNK(st.st_mode), "the link was replaced by a file");
    cr_expect(s_has(real, "new"));
    cr_expect_eq(s_entries(), 2);
}

Test(file_io, no_replace_and_secret_modes) {
    char path[128];
    s_path(path, sizeof path, "key");
    mode_t old = umask(0);
    cr_assert_eq(coli_outfile_write_line("key file", path, "k1", COLI_OUTFILE_NO_REPLACE | COLI_OUTFILE_SECRET), 0);
    umask(old);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);
    cr_expect_eq(coli_outfile_write_line("key file", path, "k2", COLI_OUTFILE_NO_REPLACE), COLI_EIO);
    cr_expect(strstr(coli_last_error(), "exists already"), "%s", coli_last_error());
    cr_expect(s_has(path, "k1\n"));
    cr_expect_eq(s_entries(), 1);
}

//  A device is written in place and its errors count; a FIFO without a
//  reader is refused at once instead of waiting for one.
Test(file_io, devices_are_written_directly_and_fail_loudly) {
    cr_expect_eq(coli_outfile_write_line("test", "/dev/null", "x", 0), 0, "%s", coli_last_error());
    cr_expect_eq(coli_outfile_write_line("test", "/dev/full", "x", 0), COLI_EIO);
    cr_expect(strstr(coli_last_error(), "/dev/full: cannot write: No space left"), "%s", coli_last_error());
    char fifo[128];
    cr_assert_eq(mkfifo(s_path(fifo, sizeof fifo, "fifo"), 0600), 0);
    cr_expect_eq(coli_outfile_write_line("test", fifo, "x", 0), COLI_EIO);
    cr_expect(strstr(coli_last_error(), "no process reads"), "%s", coli_last_error());
}

Test(file_io, same_file_by_device_and_inode) {
    char a[128], b[128], l[128], h[128], dot[160];
    s_put(s_path(a, sizeof a, "a"), "1");
    s_put(s_path(b, sizeof b, "b"), "1");
    cr_assert_eq(symlink(a, s_path(l, sizeof l, "l")), 0);
    cr_assert_eq(link(a, s_path(h, sizeof h, "h")), 0);
    snprintf(dot, sizeof dot, "%s/./a", s_dir);
    cr_expect(coli_same_file(a, l));
    cr_expect(coli_same_file(a, h));
    cr_expect(coli_same_file(a, dot));
    cr_expect(!coli_same_file(a, b), "equal bytes are not the same file");
    cr_expect(!coli_same_file(a, "/nonexistent"));
}

//  What a signal handler calls: every temporary being written goes, the
//  target stays, and the interrupted output then fails to commit.
Test(file_io, unlink_all_removes_the_temporaries_being_written) {
    char path[128];
    s_put(s_path(path, sizeof path, "out"), "old");
    coli_outfile a, b;
    cr_assert_eq(coli_outfile_open(&a, "test", path, 0), 0);
    cr_assert_eq(coli_outfile_open(&b, "test", path, 0), 0);
    fputs("partial", a.fp);
    cr_expect_eq(s_entries(), 3);
    coli_outfile_unlink_all();
    cr_expect_eq(s_entries(), 1, "temporaries left");
    cr_expect_eq(coli_outfile_commit(&a), COLI_EIO);
    coli_outfile_discard(&b);
    cr_expect(s_has(path, "old"));
    /* a finished output is no longer in the list */
    cr_assert_eq(coli_outfile_write("test", path, "new", 3, 0), 0);
    coli_outfile_unlink_all();
    cr_expect(s_has(path, "new"));
}
