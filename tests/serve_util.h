/*
 * serve_util.h - start `coli serve` on 127.0.0.1 and a free port (--port 0,
 * read back from its "listening on" line), talk raw HTTP/1.0 to it (so a
 * test can send anything, malformed or not), stop it. Static functions:
 * include from one test file each.
 */
#ifndef COLI_TESTS_SERVE_UTIL_H
#define COLI_TESTS_SERVE_UTIL_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cli_run.h"

typedef struct serve_proc {
    pid_t pid;
    int port;
    int out_fd;     /* the server's stdout */
    char log[8192]; /* what it printed up to "ready" */
} serve_proc;

typedef struct http_resp {
    int status; /* 0 if no status line came back */
    char *raw;  /* everything received, NUL-terminated */
    const char *body;
    size_t len;
} http_resp;

static inline double su_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The model every serve test uses: the random tiny llama MoE of `make fixtures`. */
static inline const char *su_model(char *buf, size_t cap) {
    cli_build_path(buf, cap, "fixtures/tiny-llama-moe-f32.gguf");
    if (!cli_file_exists(buf)) cr_skip_test("%s missing: run make fixtures (make test does)", buf);
    return buf;
}

/* The servers this test process started and has not stopped: a test that ends early (a failed
 * cr_assert, cr_skip_test after su_start) must not leave one running, holding a port and the
 * runner's output pipe. Killed at exit, which Criterion reaches after either. */
static pid_t su_running[16];

static void su_kill_running(void) {
    for (size_t i = 0; i < sizeof su_running / sizeof su_running[0]; i++)
        if (su_running[i] > 0) {
            kill(su_running[i], SIGKILL);
            waitpid(su_running[i], NULL, 0);
            su_running[i] = 0;
        }
}

static void su_track(pid_t old, pid_t now) {
    static int registered;
    if (!registered) registered = atexit(su_kill_running) == 0;
    for (size_t i = 0; i < sizeof su_running / sizeof su_running[0]; i++)
        if (su_running[i] == old) {
            su_running[i] = now;
            return;
        }
}

/* Start coli serve -m model EXTRA... and wait for "ready" (30 s). */
static inline serve_proc su_start(const char *model, const char *const *extra) {
    serve_proc p = {.pid = -1, .out_fd = -1};
    char coli[4096];
    cli_build_path(coli, sizeof coli, "bin/coli");
    const char *argv[32] = {coli, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1"};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    int fds[2];
    cr_assert_eq(pipe(fds), 0, "pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    int rc = posix_spawn(&p.pid, coli, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    cr_assert_eq(rc, 0, "cannot start %s: %s", coli, strerror(rc));
    su_track(0, p.pid);
    p.out_fd = fds[0];
    size_t len = 0;
    double until = su_now() + 30;
    while (!strstr(p.log, "coli serve: ready") && su_now() < until && len + 1 < sizeof p.log) {
        struct pollfd pf = {.fd = p.out_fd, .events = POLLIN};
        if (poll(&pf, 1, 200) <= 0) continue;
        ssize_t got = read(p.out_fd, p.log + len, sizeof p.log - 1 - len);
        if (got <= 0) break;
        len += (size_t)got;
        p.log[len] = '\0';
    }
    const char *at = strstr(p.log, "listening on http://127.0.0.1:");
    if (at) p.port = atoi(at + strlen("listening on http://127.0.0.1:"));
    if (!strstr(p.log, "coli serve: ready") || p.port <= 0) {
        kill(p.pid, SIGKILL);
        waitpid(p.pid, NULL, 0);
        su_track(p.pid, 0);
        cr_assert_fail("coli serve did not become ready; it printed: %s", p.log);
    }
    return p;
}

/* SIGTERM, wait up to 10 s (then SIGKILL); the exit status, 128+signal if killed. */
static inline int su_stop(serve_proc *p) {
    if (p->pid <= 0) return -1;
    kill(p->pid, SIGTERM);
    int ws = 0, status = -1;
    double until = su_now() + 10;
    while (su_now() < until) {
        pid_t r = waitpid(p->pid, &ws, WNOHANG);
        if (r == p->pid) {
            status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            break;
        }
        usleep(20000);
    }
    if (status < 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &ws, 0);
        status = 128 + SIGKILL;
    }
    close(p->out_fd);
    su_track(p->pid, 0);
    p->pid = -1;
    return status;
}

static inline int su_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int su_send_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0) return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read until the server closes (HTTP/1.0) or timeout_s passes. */
static inline http_resp su_read_resp(int fd, double timeout_s) {
    http_resp r = {0};
    size_t cap = 65536, len = 0;
    r.raw = malloc(cap);
    double until = su_now() + timeout_s;
    while (r.raw && su_now() < until) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        if (len + 4096 > cap) r.raw = realloc(r.raw, cap *= 2);
        ssize_t n = recv(fd, r.raw + len, cap - len - 1, 0);
        if (n <= 0) break;
        len += (size_t)n;
    }
    if (!r.raw) return r;
    r.raw[len] = '\0';
    if (sscanf(r.raw, "HTTP/1.%*d %d", &r.status) != 1) r.status = 0;
    char *b = strstr(r.raw, "\r\n\r\n");
    r.body = b ? b + 4 : r.raw + len;
    r.len = (size_t)(r.raw + len - r.body);
    return r;
}

/* Send raw bytes, read the whole answer. */
static inline http_resp su_raw(int port, const char *req, size_t len, double timeout_s) {
    int fd = su_connect(port);
    http_resp r = {0};
    if (fd < 0) return r;
    if (su_send_all(fd, req, len) == 0) r = su_read_resp(fd, timeout_s);
    close(fd);
    return r;
}

static inline char *su_format_request(const char *method, const char *path, const char *headers, const char *body) {
    size_t blen = body ? strlen(body) : 0;
    size_t cap = blen + 1024 + (headers ? strlen(headers) : 0);
    char *req = malloc(cap);
    int n =
        snprintf(req, cap,
                 "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                 method, path, headers ? headers : "", blen);
    if (blen) memcpy(req + n, body, blen + 1);
    return req;
}

static inline http_resp su_request(int port, const char *method, const char *path, const char *headers,
                                   const char *body) {
    char *req = su_format_request(method, path, headers, body);
    http_resp r = su_raw(port, req, strlen(req), 60);
    free(req);
    return r;
}

static inline http_resp su_post(int port, const char *path, const char *body) {
    return su_request(port, "POST", path, NULL, body);
}

static inline http_resp su_get(int port, const char *path) { return su_request(port, "GET", path, NULL, NULL); }

static inline void su_free(http_resp *r) {
    free(r->raw);
    r->raw = NULL;
}

#endif
