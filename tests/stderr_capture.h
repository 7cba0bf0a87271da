/*
 * stderr_capture.h - the diagnostics a test expects stay out of what `make test` prints.
 *
 * Fault-injection tests make the library and the workers they start print one-line
 * diagnostics (HELPER_UNAVAILABLE, "its experts go to the CPU path", ...). Those are the
 * behaviour under test, not news for the reader of the results, so:
 *
 *   TestSuite(x, .init = stderr_quiet);   every test of x writes its stderr and stdout (and
 *                                         those of every process it starts) to a file (a
 *                                         library's progress lines too); a test that
 *                                         fails has the file printed after its result,
 *                                         one that passes has it removed
 *   stderr_captured()                     what the current test wrote so far, to assert on
 *   stderr_capture_begin / _end           capture one stretch of a test and get its text
 *
 * COLI_TEST_VERBOSE=1 leaves both alone (every diagnostic printed as it happens).
 * The file is named from the runner's pid and the test's suite and name, so the runner's
 * report hook (in the parent process) finds it after the test's process has exited.
 */
#ifndef COLI_TESTS_STDERR_CAPTURE_H
#define COLI_TESTS_STDERR_CAPTURE_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int s_quiet_fd = -1;

//  The file of one test: /tmp/coli-test-stderr-RUNNERPID-SUITE-NAME.
static void s_quiet_path(char *out, size_t len, pid_t runner, const char *suite, const char *name) {
    snprintf(out, len, "/tmp/coli-test-stderr-%d-%s-%s", (int)runner, suite, name);
}

//  Read a whole file descriptor from offset 0 into a NUL-terminated string.
static char *s_read_fd(int fd) {
    off_t n = lseek(fd, 0, SEEK_END);
    char *text = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    cr_assert(text);
    if (n > 0) cr_assert_eq(pread(fd, text, (size_t)n, 0), (ssize_t)n);
    return text;
}

//  .init of a suite: the test's stderr and stdout (fds 2 and 1, inherited by its children) go
//  to its file. Criterion reports from its runner process, so its lines are not affected.
static inline void stderr_quiet(void) {
    if (getenv("COLI_TEST_VERBOSE")) return;
    char path[512];
    s_quiet_path(path, sizeof path, getppid(), criterion_current_test->category, criterion_current_test->name);
    fflush(stderr);
    s_quiet_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (s_quiet_fd < 0) return;
    fflush(stdout);
    dup2(s_quiet_fd, 1);
    dup2(s_quiet_fd, 2);
}

//  What the current test has written so far ("" without stderr_quiet). Free it.
static inline char *stderr_captured(void) {
    fflush(stdout);
    fflush(stderr);
    return s_quiet_fd >= 0 ? s_read_fd(s_quiet_fd) : strdup("");
}

//  In the runner: print a failed test's diagnostics after its result, then remove the file.
static void s_quiet_report(struct criterion_test_stats *stats, bool failed) {
    char path[512];
    s_quiet_path(path, sizeof path, getpid(), stats->test->category, stats->test->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (failed) {
        char *text = s_read_fd(fd);
        if (*text)
            fprintf(stderr, "---- stderr of %s::%s ----\n%s----\n", stats->test->category, stats->test->name, text);
        free(text);
    }
    close(fd);
    unlink(path);
}

ReportHook(POST_FINI)(struct criterion_test_stats *stats) {
    s_quiet_report(stats, stats->test_status == CR_STATUS_FAILED);
}

//  A crashed test has no POST_FINI.
ReportHook(TEST_CRASH)(struct criterion_test_stats *stats) { s_quiet_report(stats, true); }

//  One stretch of a test: stderr into an anonymous file until stderr_capture_end.
typedef struct stderr_capture {
    int fd, saved;
} stderr_capture;

static inline stderr_capture stderr_capture_begin(void) {
    fflush(stderr);
    char path[] = "/tmp/coli-stderr-XXXXXX";
    stderr_capture c = {mkstemp(path), dup(2)};
    cr_assert_geq(c.fd, 0, "mkstemp");
    unlink(path);
    dup2(c.fd, 2);
    return c;
}

//  Restore stderr and return what was written meanwhile (free it).
static inline char *stderr_capture_end(stderr_capture c) {
    fflush(stderr);
    dup2(c.saved, 2);
    close(c.saved);
    char *text = s_read_fd(c.fd);
    close(c.fd);
    return text;
}

#endif
