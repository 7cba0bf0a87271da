/*
 * cli_run.h - run a program of the build (bin/coli, bin/gen_model) from a
 * test and capture its exit status, stdout and stderr.
 *
 * Output goes to temporary files rather than pipes so that a chatty child
 * can never block on a full pipe while we wait for it.
 */
#ifndef COLI_TESTS_CLI_RUN_H
#define COLI_TESTS_CLI_RUN_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct cli_result {
    int status; /* exit code; 128 + signal if killed; -1 if it could not start */
    char *out;  /* stdout, NUL-terminated (malloc'd) */
    char *err;  /* stderr, NUL-terminated (malloc'd) */
    size_t out_len, err_len;
} cli_result;

/* "$COLI_BUILD" or "build": where `make test` put the programs and fixtures. */
static inline const char *cli_build_dir(void) {
    const char *b = getenv("COLI_BUILD");
    return b && *b ? b : "build";
}

/* path = "$COLI_BUILD/<rel>" into buf. */
static inline const char *cli_build_path(char *buf, size_t cap, const char *rel) {
    snprintf(buf, cap, "%s/%s", cli_build_dir(), rel);
    return buf;
}

static inline int cli_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Whole file into a NUL-terminated malloc'd buffer; NULL if unreadable. */
static inline char *cli_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Run argv (argv[0] is a path), wait for it; the result owns its buffers. */
static inline cli_result cli_run(char *const argv[]) {
    cli_result r = {.status = -1};
    char out_path[] = "/tmp/coli-test-out-XXXXXX", err_path[] = "/tmp/coli-test-err-XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    if (out_fd >= 0 && err_fd >= 0 && posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0) {
        int ws;
        if (waitpid(pid, &ws, 0) == pid) r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    posix_spawn_file_actions_destroy(&fa);
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    r.out = cli_slurp(out_path, &r.out_len);
    r.err = cli_slurp(err_path, &r.err_len);
    if (!r.out) r.out = calloc(1, 1);
    if (!r.err) r.err = calloc(1, 1);
    unlink(out_path);
    unlink(err_path);
    return r;
}

static inline void cli_result_free(cli_result *r) {
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* Number of lines in s (a last line without '\n' counts). */
static inline int cli_count_lines(const char *s) {
    int n = 0;
    for (const char *p = s; *p; p++) n += *p == '\n';
    size_t len = strlen(s);
    return n + (len > 0 && s[len - 1] != '\n');
}

/* Run a shell command line (for pipes and redirections the test needs) and
 * keep the first cap - 1 bytes of its stdout in out, NUL-terminated.
 * Returns pclose's status (0: exit 0), or -1 if it could not start. */
static inline int cli_shell(const char *cmd, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    return pclose(f);
}

/* coli CMD -m MODEL -t 2 --devices D A1..A4 with D = inproc and then cpu:2
 * (two worker processes): both exit 0 and print the same stdout, which is
 * returned (the caller frees). The family tests' "workers give the
 * in-process bytes" through the command line (coli run, coli perplexity).
 * Needs criterion. */
static inline char *cli_inproc_equals_workers(const char *model, const char *cmd, const char *a1, const char *a2,
                                              const char *a3, const char *a4) {
    char coli[4200];
    cli_build_path(coli, sizeof coli, "bin/coli");
    char *outs[2];
    const char *dev[2] = {"inproc", "cpu:2"};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {coli,           (char *)cmd, "-m",       (char *)model, "-t",       "2", "--devices",
                        (char *)dev[i], (char *)a1,  (char *)a2, (char *)a3,    (char *)a4, NULL};
        cli_result res = cli_run(argv);
        cr_assert_eq(res.status, 0, "coli %s --devices %s: %s", cmd, dev[i], res.err);
        outs[i] = res.out;
        free(res.err);
    }
    cr_expect_str_eq(outs[0], outs[1], "coli %s: workers and in-process differ", cmd);
    free(outs[1]);
    return outs[0];
}

#endif
