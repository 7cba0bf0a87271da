/*
 * test_serve_limits.c - `coli serve` under resource attacks and at shutdown:
 * a flood of slow clients (each trickling its header) must not lock others
 * out, the head-and-body deadline must close trickling connections, the
 * per-client-address limit must hold, and SIGTERM must finish running
 * requests within --shutdown-grace, answer queued ones 503 shutting_down and
 * end a cut stream with an error event. All traffic stays on 127.0.0.0/8
 * (a flood comes from 127.0.0.2.., the well-behaved client from 127.0.0.1).
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "tests/serve_util.h"

/* A TCP connection to 127.0.0.1:port from the local address src (e.g. "127.0.0.2"). */
static int s_connect_from(int port, const char *src) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in from = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &from.sin_addr);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&from, sizeof from) != 0 || connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 if the server ended fd (EOF or reset); reads and drops what it sent. */
static int s_closed_by_server(int fd, char *first, size_t cap) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 0) <= 0) return 0;
    char buf[1024];
    ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n > 0 && first && !*first) {
        buf[n] = '\0';
        snprintf(first, cap, "%.200s", buf);
    }
    if (n > 0) n = recv(fd, buf, sizeof buf, MSG_DONTWAIT); /* the EOF after the 408 */
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

typedef struct call {
    int port;
    const char *body;
    http_resp r;
} call;

static void *s_call(void *arg) {
    call *c = arg;
    c->r = su_post(c->port, "/v1/completions", c->body);
    return NULL;
}

enum {
    FLOOD_ADDRS = 5,
    FLOOD_PER_ADDR = 80,
    FLOOD = FLOOD_ADDRS * FLOOD_PER_ADDR
};

Test(serve_limits, slow_client_flood_does_not_lock_others_out, .timeout = 180) {
    char model[4096];
    /* 5 addresses x 80 slow clients against 50 per address, 300 in all, a 3 s deadline */
    const char *extra[] = {"--max-connections", "300", "--max-conn-per-client", "50", "--request-timeout", "3", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    static int fds[FLOOD];
    /* one more that stops after half a head and then waits: it must be told 408 (the trickling
     * ones may lose that text to the reset their unread header lines cause when the server closes) */
    int quiet = s_connect_from(p.port, "127.0.0.30");
    cr_assert_geq(quiet, 0);
    su_send_all(quiet, "GET /health HTTP/1.1\r\nHost: x\r\n", 31);
    double t_flood = su_now();
    for (int i = 0; i < FLOOD; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i / FLOOD_PER_ADDR);
        fds[i] = s_connect_from(p.port, src);
        cr_assert_geq(fds[i], 0, "flood connection %d from %s: %s", i, src, strerror(errno));
        const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
        su_send_all(fds[i], head, strlen(head));
    }
    usleep(300000);
    /* under the flood, a normal client gets its completion and /health, each in under a second */
    double t0 = su_now();
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"Hello\",\"max_tokens\":2}");
    double t_completion = su_now() - t0;
    cr_expect_eq(r.status, 200, "completion under the flood: %s", r.raw ? r.raw : "(none)");
    cr_expect_lt(t_completion, 1.0, "completion under the flood took %.2f s", t_completion);
    su_free(&r);
    t0 = su_now();
    r = su_get(p.port, "/health");
    double t_health = su_now() - t0;
    cr_expect_eq(r.status, 200, "/health under the flood: %s", r.raw ? r.raw : "(none)");
    cr_expect_lt(t_health, 1.0, "/health under the flood took %.2f s", t_health);
    su_free(&r);
    /* keep trickling a header line every 0.5 s: only the deadline can end them (3 s + slack) */
    int n_closed = 0;
    static char closed[FLOOD];
    memset(closed, 0, sizeof closed);
    while (n_closed < FLOOD && su_now() - t_flood < 8.0) {
        for (int i = 0; i < FLOOD; i++) {
            if (closed[i]) continue;
            if (s_closed_by_server(fds[i], NULL, 0)) {
                closed[i] = 1;
                n_closed++;
            } else {
                send(fds[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        usleep(500000);
    }
    cr_expect_eq(n_closed, FLOOD, "%d of %d trickling connections still open %.1f s after they began", FLOOD - n_closed,
                 FLOOD, su_now() - t_flood);
    for (int i = 0; i < FLOOD; i++) close(fds[i]);
    http_resp told = su_read_resp(quiet, 3.0);
    close(quiet);
    cr_expect(told.status == 408 && strstr(told.body, "\"code\":\"request_timeout\""),
              "a stalled request head was not told 408 request_timeout: %s", told.raw ? told.raw : "(nothing)");
    su_free(&told);
    /* the per-address limit: 60 idle connections from one address, 10 are refused at once */
    enum {
        N_IDLE = 60
    };
    int idle[N_IDLE], refused = 0;
    for (int i = 0; i < N_IDLE; i++) idle[i] = s_connect_from(p.port, "127.0.0.20");
    usleep(500000);
    for (int i = 0; i < N_IDLE; i++) refused += idle[i] < 0 || s_closed_by_server(idle[i], NULL, 0);
    cr_expect_eq(refused, N_IDLE - 50, "%d of %d connections from one address refused (limit 50)", refused, N_IDLE);
    for (int i = 0; i < N_IDLE; i++)
        if (idle[i] >= 0) close(idle[i]);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"Hello\",\"max_tokens\":2}");
    cr_expect_eq(r.status, 200, "after the flood: %s", r.raw ? r.raw : "(none)");
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

/* The last `data: ` event of an SSE body, parsed (NULL if none is JSON). */
static cJSON *s_last_event(const char *body, int *saw_finish) {
    cJSON *last = NULL;
    *saw_finish = 0;
    for (const char *at = strstr(body, "data: {"); at; at = strstr(at + 1, "data: {")) {
        const char *end = strstr(at, "\n\n");
        if (!end) break;
        cJSON_Delete(last);
        last = cJSON_ParseWithLength(at + 6, (size_t)(end - at - 6));
        cJSON *fr = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(last, "choices"), 0), "finish_reason");
        if (cJSON_IsString(fr)) *saw_finish = 1;
    }
    return last;
}

/* Batched, the plain request and the stream decode in one batch: the stream
 * must leave it at the abort while the server still exits cleanly. */
static void s_sigterm_case(int batched) {
    char model[4096];
    const char *extra[] = {
        "--parallel", "2", "--queue", "8", "--shutdown-grace", "1.5", batched ? NULL : "--no-batching", NULL};
    setenv("COLI_SERVE_DELAY_MS", "100", 1); /* 12 tokens: ~1.2 s; 100 tokens: ~10 s */
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    call plain = {.port = p.port, .body = "{\"prompt\":\"a\",\"max_tokens\":12,\"temperature\":0}"};
    call stream = {.port = p.port, .body = "{\"prompt\":\"b\",\"max_tokens\":100,\"temperature\":0,\"stream\":true}"};
    call queued = {.port = p.port, .body = "{\"prompt\":\"c\",\"max_tokens\":4,\"temperature\":0}"};
    pthread_t th[3];
    pthread_create(&th[0], NULL, s_call, &plain);
    pthread_create(&th[1], NULL, s_call, &stream);
    usleep(300000);
    pthread_create(&th[2], NULL, s_call, &queued); /* both slots are busy: it waits */
    usleep(300000);
    double t_term = su_now();
    kill(p.pid, SIGTERM);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    double t_answers = su_now() - t_term;
    /* the running plain request finished within the grace period, in full */
    cr_expect_eq(plain.r.status, 200, "running request: %s", plain.r.raw ? plain.r.raw : "(none)");
    cJSON *a = cJSON_Parse(plain.r.body);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0);
    const char *fr = cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason"));
    double n_gen = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "usage"), "completion_tokens"));
    cr_expect(fr && (!strcmp(fr, "stop") || n_gen == 12), "running request cut: finish %s after %g tokens",
              fr ? fr : "-", n_gen);
    cJSON_Delete(a);
    /* the queued one was never started: 503 shutting_down */
    cr_expect_eq(queued.r.status, 503, "queued request: %s", queued.r.raw ? queued.r.raw : "(none)");
    cr_expect(queued.r.body && strstr(queued.r.body, "\"code\":\"shutting_down\""), "queued: %s", queued.r.body);
    /* the stream could not finish in 1.5 s: it ends with an error event, never a finish_reason */
    int saw_finish = 0;
    cr_expect_eq(stream.r.status, 200, "stream: %s", stream.r.raw ? stream.r.raw : "(none)");
    cJSON *last = s_last_event(stream.r.body ? stream.r.body : "", &saw_finish);
    cJSON *err = cJSON_GetObjectItem(last, "error");
    cr_expect(!saw_finish, "a cut stream reported a normal finish: %s", stream.r.body);
    cr_expect(err && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(err, "code")) ?: "", "shutting_down"),
              "a cut stream did not end with a shutting_down error event: %s", stream.r.body);
    cJSON_Delete(last);
    cr_expect_lt(t_answers, 1.5 + 3.0, "answers came %.1f s after SIGTERM (grace 1.5 s)", t_answers);
    for (int i = 0; i < 3; i++) su_free(i == 0 ? &plain.r : i == 1 ? &stream.r : &queued.r);
    cr_expect_eq(su_stop(&p), 0, "the server's exit status after SIGTERM (%s)", batched ? "batched" : "--no-batching");
}

Test(serve_limits, sigterm_finishes_running_refuses_queued_and_cuts_streams_with_an_error, .timeout = 120) {
    s_sigterm_case(1);
}

Test(serve_limits, sigterm_without_batching, .timeout = 120) { s_sigterm_case(0); }

enum {
    CAP = 16,
    CROWD = 48
};

/* At --max-connections, slow clients push each other out, oldest first: they are told 503
 * too_many_connections; a request in flight is never the one closed, and /health and a
 * completion still answer (finding 4: 5 addresses x 256 slow clients filled the table). */
Test(serve_limits, full_table_closes_the_oldest_slow_connections, .timeout = 120) {
    char model[4096];
    const char *extra[] = {"--max-connections", "16", "--request-timeout", "60", NULL};
    setenv("COLI_SERVE_DELAY_MS", "100", 1); /* the running request: 60 tokens, ~6 s */
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    call running = {.port = p.port, .body = "{\"prompt\":\"a\",\"max_tokens\":60,\"temperature\":0}"};
    pthread_t th;
    pthread_create(&th, NULL, s_call, &running);
    usleep(300000);
    static int fds[CROWD];
    for (int i = 0; i < CROWD; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i % 6);
        fds[i] = s_connect_from(p.port, src);
        cr_expect_geq(fds[i], 0, "slow connection %d from %s: %s", i, src, strerror(errno));
        if (fds[i] >= 0) su_send_all(fds[i], "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", 41);
        usleep(2000); /* one after the other: the first is the oldest */
    }
    usleep(500000);
    char *req = su_format_request("GET", "/health", NULL, NULL); /* 10 s each: nothing waits that long */
    http_resp r = su_raw(p.port, req, strlen(req), 10);
    free(req);
    cr_expect_eq(r.status, 200, "/health with the table full: %s", r.raw ? r.raw : "(none)");
    su_free(&r);
    req = su_format_request("POST", "/v1/completions", NULL, "{\"prompt\":\"Hello\",\"max_tokens\":2}");
    r = su_raw(p.port, req, strlen(req), 10);
    free(req);
    cr_expect_eq(r.status, 200, "a completion with the table full: %s", r.raw ? r.raw : "(none)");
    su_free(&r);
    usleep(200000);
    int n_closed = 0;
    char first[256] = "";
    static char closed[CROWD];
    for (int i = 0; i < CROWD; i++) n_closed += closed[i] = (char)s_closed_by_server(fds[i], first, sizeof first);
    /* the running request holds one place: at most CAP - 1 slow ones stay */
    cr_expect_geq(n_closed, CROWD - (CAP - 1), "%d of %d slow connections closed (limit %d)", n_closed, CROWD, CAP);
    cr_expect(closed[0], "the oldest slow connection is still open");
    cr_expect(!closed[CROWD - 1], "the newest slow connection was closed");
    cr_expect(strstr(first, "503 Service Unavailable") && strstr(first, "limit of 16"), "a closed one was told: %s",
              first);
    for (int i = 0; i < CROWD; i++)
        if (fds[i] >= 0) close(fds[i]);
    pthread_join(th, NULL);
    cr_expect_eq(running.r.status, 200, "the request in flight: %s", running.r.raw ? running.r.raw : "(none)");
    cr_expect(running.r.body && strstr(running.r.body, "\"completion_tokens\":60"), "%s", running.r.body);
    su_free(&running.r);
    cr_expect_eq(su_stop(&p), 0);
}

/* The default limit follows the file-descriptor limit: the soft one is raised to the hard
 * one at start; a --max-connections the limit cannot hold is refused in one line. */
Test(serve_limits, connection_limit_from_the_descriptor_limit, .timeout = 60) {
    char model[4096], coli[4096];
    su_model(model, sizeof model);
    cli_build_path(coli, sizeof coli, "bin/coli");
    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    if (old.rlim_max < 2048 || old.rlim_max == RLIM_INFINITY)
        cr_skip_test("hard descriptor limit %llu", (unsigned long long)old.rlim_max);
    struct rlimit low = {512, old.rlim_max};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    serve_proc p = su_start(model, NULL); /* inherits the soft 512 */
    setrlimit(RLIMIT_NOFILE, &old);
    char want[128];
    snprintf(want, sizeof want, "(file-descriptor limit %llu)", (unsigned long long)old.rlim_max);
    cr_expect(strstr(p.log, want), "the soft limit was not raised to the hard one: %s", p.log);
    const char *at = strstr(p.log, "at most ");
    cr_expect(at && atoi(at + 8) > 512, "%s", p.log);
    cr_expect_eq(su_stop(&p), 0);
    char cmd[9000];
    /* timeout: a server that takes it would serve until killed */
    snprintf(cmd, sizeof cmd, "ulimit -n 400 && exec timeout 20 %s serve -m %s --port 0 --max-connections 1000 2>&1",
             coli, model);
    char out[1024];
    cr_expect_neq(cli_shell(cmd, out, sizeof out), 0, "accepted: %s", out);
    cr_expect(cli_count_lines(out) == 1 && strstr(out, "--max-connections") && strstr(out, "limit (ulimit -n) is 400"),
              "%s", out);
}

/* colibri_queue_depth (answers waiting) from /metrics; -1 if unreadable. */
static int s_queue_depth(int port) {
    http_resp r = su_get(port, "/metrics");
    const char *at = r.body ? strstr(r.body, "\ncolibri_queue_depth ") : NULL;
    int v = at ? atoi(at + strlen("\ncolibri_queue_depth ")) : -1;
    su_free(&r);
    return v;
}

/* Wait (at most 20 s) until at least n answers wait: the order the requests were queued in. */
static void s_wait_depth(int port, int n) {
    double until = su_now() + 20;
    while (s_queue_depth(port) < n && su_now() < until) usleep(20000);
    cr_expect_geq(s_queue_depth(port), n, "the queue never held %d answers", n);
}

/* Wait (at most 20 s) until a slot generates. */
static void s_wait_busy(int port) {
    double until = su_now() + 20;
    int busy = 0;
    while (!busy && su_now() < until) {
        http_resp h = su_get(port, "/health");
        busy = h.body && strstr(h.body, "\"slots_busy\":1");
        su_free(&h);
        if (!busy) usleep(20000);
    }
    cr_expect(busy, "no slot ever got busy");
}

/* The queue counts answers: a request is queued whole or refused whole (429), so a refused
 * n = 5 leaves no answers behind to crowd out the next request; an n no queue can ever hold
 * is 400 naming n (finding 8). */
Test(serve_limits, queue_counts_answers_all_or_none, .timeout = 120) {
    char model[4096];
    const char *extra[] = {"--parallel", "1", "--queue", "4", NULL};
    setenv("COLI_SERVE_DELAY_MS", "50", 1);
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    call running = {.port = p.port, .body = "{\"prompt\":\"a\",\"max_tokens\":100,\"temperature\":0}"};
    pthread_t th;
    pthread_create(&th, NULL, s_call, &running);
    s_wait_busy(p.port); /* it holds the one slot */
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"b\",\"max_tokens\":2,\"n\":5}");
    cr_expect_eq(r.status, 429, "5 answers with 4 waiting places: %s", r.raw ? r.raw : "(none)");
    cr_expect(r.body && strstr(r.body, "\"code\":\"queue_full\""), "%s", r.body);
    su_free(&r);
    cr_expect_eq(s_queue_depth(p.port), 0, "a refused request left answers in the queue");
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"c\",\"max_tokens\":2,\"n\":4}");
    cr_expect_eq(r.status, 200, "4 answers with 4 waiting places: %s", r.raw ? r.raw : "(none)");
    su_free(&r);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"d\",\"max_tokens\":2,\"n\":6}");
    cr_expect_eq(r.status, 400, "6 answers, more than 1 slot + 4 places: %s", r.raw ? r.raw : "(none)");
    cr_expect(r.body && strstr(r.body, "\"param\":\"n\""), "%s", r.body);
    su_free(&r);
    pthread_join(th, NULL);
    cr_expect_eq(running.r.status, 200);
    su_free(&running.r);
    cr_expect_eq(su_stop(&p), 0);
}

typedef struct ordered_call {
    call c;
    atomic_int *clock; /* the order the answers came back in */
    int done_at;
} ordered_call;

static void *s_ordered_call(void *arg) {
    ordered_call *o = arg;
    s_call(&o->c);
    o->done_at = atomic_fetch_add(o->clock, 1);
    return NULL;
}

/* Requests take turns: a small request queued behind one of n = 4 gets the slot after the
 * big one's first answer, not after all four, so its answer comes back first (finding 8). */
Test(serve_limits, queued_requests_take_turns, .timeout = 120) {
    char model[4096];
    const char *extra[] = {"--parallel", "1", "--queue", "8", NULL};
    setenv("COLI_SERVE_DELAY_MS", "50", 1);
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    atomic_int clock = 0;
    ordered_call a = {{p.port, "{\"prompt\":\"a\",\"max_tokens\":40,\"temperature\":0}", {0}}, &clock, -1};
    ordered_call big = {{p.port, "{\"prompt\":\"b\",\"max_tokens\":8,\"n\":4,\"temperature\":0}", {0}}, &clock, -1};
    ordered_call small = {{p.port, "{\"prompt\":\"c\",\"max_tokens\":8,\"temperature\":0}", {0}}, &clock, -1};
    pthread_t th[3];
    pthread_create(&th[0], NULL, s_ordered_call, &a);
    s_wait_busy(p.port);
    pthread_create(&th[1], NULL, s_ordered_call, &big);
    s_wait_depth(p.port, 3); /* the big one is queued (all 4, or 3 if its first has started) */
    pthread_create(&th[2], NULL, s_ordered_call, &small);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    cr_expect_eq(a.c.r.status, 200, "%s", a.c.r.raw ? a.c.r.raw : "(none)");
    cr_expect_eq(big.c.r.status, 200, "%s", big.c.r.raw ? big.c.r.raw : "(none)");
    cr_expect_eq(small.c.r.status, 200, "%s", small.c.r.raw ? small.c.r.raw : "(none)");
    cr_expect_lt(small.done_at, big.done_at, "the small request waited for all 4 answers of the big one");
    su_free(&a.c.r);
    su_free(&big.c.r);
    su_free(&small.c.r);
    cr_expect_eq(su_stop(&p), 0);
}

/* The answers of one request still spread over the free slots (each one taken signals the
 * next): n = 3 on an idle server of 3 slots decodes in batches of more than one row. */
Test(serve_limits, answers_of_one_request_share_free_slots, .timeout = 120) {
    char model[4096];
    const char *extra[] = {"--parallel", "3", NULL};
    setenv("COLI_SERVE_DELAY_MS", "30", 1);
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":20,\"n\":3}");
    cr_expect_eq(r.status, 200, "%s", r.raw ? r.raw : "(none)");
    su_free(&r);
    r = su_get(p.port, "/metrics");
    const char *at = r.body ? strstr(r.body, "\ncolibri_batch_max_rows ") : NULL;
    cr_expect(at && atoi(at + strlen("\ncolibri_batch_max_rows ")) >= 2, "the 3 answers ran one at a time: %s",
              at ? at : "(no colibri_batch_max_rows)");
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_limits, api_key_file) {
    char model[4096], path[] = "/tmp/coli-test-key-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "s3cret-from-file\n", 17), 17);
    close(fd);
    const char *extra[] = {"--api-key-file", path, NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 401, "%s", r.raw);
    su_free(&r);
    r = su_request(p.port, "POST", "/v1/completions", "Authorization: Bearer s3cret-from-file\r\n",
                   "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    su_stop(&p);
    unlink(path);
}

/* Several keys, one per line: each is let in, comments and blank lines are not keys. */
Test(serve_limits, api_key_file_several_keys) {
    char model[4096], path[] = "/tmp/coli-test-key-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *text = "# the team\nalpha-key\n\n   \n# the bot\nbeta-key\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    const char *extra[] = {"--api-key-file", path, NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    const char *headers[] = {"Authorization: Bearer alpha-key\r\n", "Authorization: Bearer beta-key\r\n",
                             "Authorization: Bearer # the team\r\n", "Authorization: Bearer alpha-ke\r\n"};
    for (int i = 0; i < 4; i++) {
        http_resp r = su_request(p.port, "POST", "/v1/completions", headers[i], "{\"prompt\":\"a\",\"max_tokens\":1}");
        cr_expect_eq(r.status, i < 2 ? 200 : 401, "%s: %s", headers[i], r.raw);
        su_free(&r);
    }
    su_stop(&p);
    unlink(path);
}

/* A key file that is missing, empty, only comments, a directory, or has a bad line: one
 * line on stderr naming the file, exit 2 (1 where it cannot be read), before the model loads. */
Test(serve_limits, api_key_file_bad, .timeout = 150) {
    char model[4096], coli[4096], dir[] = "/tmp/coli-test-keydir-XXXXXX";
    su_model(model, sizeof model);
    cli_build_path(coli, sizeof coli, "bin/coli");
    cr_assert_not_null(mkdtemp(dir));
    static const char *const contents[] = {NULL, "", "# only a comment\n\n", NULL, "good\ntwo words\n", "k\nk\n"};
    static const char *const why[] = {"cannot open", "no key", "no key", "not a regular file", "line 2", "line 2"};
    for (int i = 0; i < 6; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/keys%d", dir, i);
        if (i == 3) mkdir(path, 0700);
        if (contents[i]) {
            FILE *f = fopen(path, "w");
            cr_assert_not_null(f);
            fputs(contents[i], f);
            fclose(f);
        }
        /* timeout: a server that takes the file would serve until killed */
        char *argv[] = {"/usr/bin/timeout", "20", coli, "serve", "-m", model, "--port", "0",
                        "--api-key-file",   path, NULL};
        cli_result c = cli_run(argv);
        cr_expect_neq(c.status, 0, "case %d: a bad key file was accepted", i);
        cr_expect_eq(cli_count_lines(c.err), 1, "case %d: %s", i, c.err);
        cr_expect(strstr(c.err, path) && strstr(c.err, why[i]), "case %d: the error names neither %s nor '%s': %s", i,
                  path, why[i], c.err);
        cr_expect(!strstr(c.out, "listening"), "case %d: it started: %s", i, c.out);
        cli_result_free(&c);
        if (i == 3)
            rmdir(path);
        else
            unlink(path);
    }
    rmdir(dir);
}
