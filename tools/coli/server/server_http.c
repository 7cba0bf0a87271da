/*
 * server_http.c - the HTTP side of `coli serve`, on libmicrohttpd: an event
 * loop on a small pool of threads (so slow or idle clients cost a socket,
 * not a thread, and cannot lock others out), limits on connections in all
 * and per client address, a deadline for each request's head and body
 * (server_conns.c), a bound on the request body (413 before reading it when
 * Content-Length says so), unambiguous framing (RFC 9112: one
 * Content-Length, never with Transfer-Encoding), Bearer auth for the /v1
 * endpoints, routing, and the JSON and OpenAI-error replies every handler
 * uses. A request that waits for its tokens is suspended, not blocked: the
 * slot thread resumes it (job_wake) when there is something to send.
 * Its state (the daemon, the bound port, requests in flight) lives in the
 * server (server_http in server.h), so one process can run several servers.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tools/coli/server/server.h"
#include "core/clock.h"

/* Per request: the body as it arrives, and the status we answered with. */
typedef struct http_req {
    char *body;
    size_t len, cap;
    int too_big;   /* past --max-body: the rest is read and dropped, then 413 */
    int no_memory; /* the body could not be stored: 500, not 413 */
    int ep;
    int status;
    int key;   /* the number of the API key it came with (its cache domain); -1: none */
    job *job;  /* a non-streamed completion waiting for its answer */
    server *s; /* the server it came to */
} http_req;

#define HTTP_POOL_THREADS 4

/* The request this pool thread is answering (a pool thread serves one server's daemon). */
static __thread http_req *t_req;

job *http_current_job(void) { return t_req ? t_req->job : NULL; }

int http_current_key(void) { return t_req ? t_req->key : -1; }

void http_set_job(job *j) {
    if (!t_req || t_req->job == j) return;
    job_retain(j);
    job_release(t_req->job);
    t_req->job = j;
}

void http_suspend(struct MHD_Connection *c) { MHD_suspend_connection(c); }
void http_resume(struct MHD_Connection *c) { MHD_resume_connection(c); }

int http_connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* --cors-origin of the server the current request came to; NULL: no CORS headers. */
static const char *s_cors_origin(void) { return t_req ? t_req->s->cfg.cors_origin : NULL; }

static int s_queue(struct MHD_Connection *c, int status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    /* Counted when queued, not when sent: a client that has its answer and asks
     * /metrics at once must find its request there. */
    if (t_req && !t_req->status) metrics_count_request(&t_req->s->metrics, t_req->ep, status);
    if (t_req) t_req->status = status;
    const char *cors = s_cors_origin();
    if (cors) MHD_add_response_header(resp, "Access-Control-Allow-Origin", cors);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

int http_reply_text(struct MHD_Connection *c, int status, char *text, const char *content_type) {
    if (!text) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", content_type);
    return s_queue(c, status, r);
}

int http_reply_json(struct MHD_Connection *c, int status, char *json_text) {
    return http_reply_text(c, status, json_text, "application/json");
}

int http_reply_stream(struct MHD_Connection *c, struct MHD_Response *r) {
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return s_queue(c, 200, r);
}

int http_reply_error(server *s, struct MHD_Connection *c, int ep, int status, const char *type, const char *code,
                     const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return http_reply_json(c, status, text);
}

/* Constant-time comparison, so the key cannot be guessed byte by byte from timing. */
static int s_key_matches(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = (unsigned)(gl ^ kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* 1 if the request may go on, with r->key the number of the key it gave; every key is
 * compared in full, so timing tells neither a key nor which one matched. */
static int s_authorized(server *s, struct MHD_Connection *c, const char *url, http_req *r) {
    r->key = -1;
    if (!s->cfg.n_api_keys || strncmp(url, "/v1/", 4) != 0) return 1; /* /health, /metrics, the dashboard stay open */
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return 0;
    for (int i = 0; i < s->cfg.n_api_keys; i++)
        if (s_key_matches(h + 7, s->cfg.api_keys[i]) && r->key < 0) r->key = i;
    return r->key >= 0;
}

static int s_route(server *s, struct MHD_Connection *c, const char *url, const char *method, http_req *r) {
    int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    int ep = r->ep;
    if (ep == EP_OTHER)
        return http_reply_error(s, c, ep, 404, "invalid_request_error", "not_found", NULL, "%s %s: no such endpoint",
                                method, url);
    int want_post = ep == EP_COMPLETIONS || ep == EP_CHAT || ep == EP_TOKENIZE || ep == EP_DETOKENIZE;
    if ((want_post && !post) || (!want_post && !get))
        return http_reply_error(s, c, ep, 405, "invalid_request_error", "method_not_allowed", NULL,
                                "%s %s: method not allowed (use %s)", method, url, want_post ? "POST" : "GET");
    if (r->too_big)
        return http_reply_error(s, c, ep, 413, "invalid_request_error", "request_too_large", NULL,
                                "request body: larger than the limit of %zu bytes", s->cfg.max_body);
    if (r->no_memory)
        return http_reply_error(s, c, ep, 500, "server_error", NULL, NULL,
                                "request body: out of memory after %zu bytes", r->len);
    if (ep == EP_METRICS) return handle_metrics(s, c);
    if (ep == EP_HEALTH) return handle_health(s, c);
    if (ep == EP_DASHBOARD) return handle_dashboard_page(s, c);
    if (ep == EP_DASHBOARD_JSON) return handle_dashboard_json(s, c);
    if (r->job) return completion_reply(s, c, r->job); /* resumed: the answer has come */
    if (atomic_load(&s->stopping))
        return http_reply_error(s, c, ep, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    if (!atomic_load(&s->ready))
        return http_reply_error(s, c, ep, 503, "server_error", "model_loading", NULL,
                                "the model is still loading; try again shortly");
    if (ep == EP_MODELS) return handle_models(s, c);
    if (ep == EP_PROPS) return handle_props(s, c);
    if (ep == EP_TOKENIZE) return handle_tokenize(s, c, r->body ? r->body : "", r->len);
    if (ep == EP_DETOKENIZE) return handle_detokenize(s, c, r->body ? r->body : "", r->len);
    return handle_completion(s, c, ep == EP_CHAT, r->body ? r->body : "", r->len);
}

/* What the framing headers say (counted over every header line, not the first). */
typedef struct framing {
    int n_length, lengths_differ, chunked;
    const char *length;
} framing;

static enum MHD_Result s_framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->n_length++ && strcmp(f->length, value ? value : "")) f->lengths_differ = 1;
        f->length = value ? value : "";
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->chunked = 1;
    }
    return MHD_YES;
}

/* 0, or the reason the body's length is ambiguous (a proxy may have read it otherwise). */
static const char *s_ambiguous_framing(struct MHD_Connection *c) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, s_framing_header, &f);
    if (f.lengths_differ) return "two different Content-Length headers";
    if (f.n_length && f.chunked) return "both Content-Length and Transfer-Encoding";
    return NULL;
}

/* A CORS preflight (OPTIONS): 204 with what browsers may send; no auth (browsers send none). */
static int s_preflight(struct MHD_Connection *c) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Allow", "GET, POST, OPTIONS");
    if (s_cors_origin()) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    return s_queue(c, 204, resp);
}

/* The first call for a request: headers only. Refuse early what we can. */
static int s_first_call(server *s, struct MHD_Connection *c, const char *url, const char *method, http_req *r) {
    const char *ambiguous = s_ambiguous_framing(c);
    if (ambiguous)
        return http_reply_error(s, c, r->ep, 400, "invalid_request_error", "ambiguous_framing", NULL,
                                "request framing: %s (RFC 9112 forbids it)", ambiguous);
    if (strcmp(method, "OPTIONS") == 0 && r->ep != EP_OTHER) return s_preflight(c);
    if (!s_authorized(s, c, url, r))
        return http_reply_error(s, c, r->ep, 401, "invalid_request_error", "invalid_api_key", NULL,
                                "missing or wrong API key: send 'Authorization: Bearer KEY'");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
        return http_reply_error(s, c, r->ep, 413, "invalid_request_error", "request_too_large", NULL,
                                "request body: %s bytes, more than the limit of %zu", cl, s->cfg.max_body);
    return MHD_YES;
}

static void s_take_body(server *s, http_req *r, const char *data, size_t n) {
    if (r->too_big || r->no_memory) return;
    if (r->len + n > s->cfg.max_body) {
        r->too_big = 1; /* keep reading (and dropping) so that we can answer 413 */
        return;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->len + n + 1 > 2 * r->cap ? r->len + n + 1 : 2 * r->cap;
        char *b = realloc(r->body, cap);
        if (!b) {
            r->no_memory = 1;
            return;
        }
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->ep = metrics_endpoint(url);
        r->s = s;
        *con_cls = r;
        t_req = r;
        atomic_fetch_add(&s->http.in_flight, 1);
        conns_head_received(&s->conns, c);
        return (enum MHD_Result)s_first_call(s, c, url, method, r);
    }
    t_req = r;
    if (*upload_size) {
        s_take_body(s, r, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    conns_request_received(&s->conns, c);
    enum MHD_Result rc = (enum MHD_Result)s_route(s, c, url, method, r);
    t_req = NULL; /* the same thread may serve another connection next */
    return rc;
}

static void s_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    server *s = cls;
    http_req *r = *con_cls;
    if (!r) return;
    if (t_req == r) t_req = NULL;
    job_release(r->job);
    free(r->body);
    free(r);
    *con_cls = NULL;
    conns_request_done(&s->conns, c);
    atomic_fetch_sub(&s->http.in_flight, 1);
}

static int s_resolve(server *s, struct sockaddr_storage *addr, int *ipv6) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int e = getaddrinfo(s->cfg.host, NULL, &hints, &res);
    if (e || !res) {
        fprintf(stderr, "coli serve: --host %s: %s\n", s->cfg.host, gai_strerror(e));
        return SERVER_FAIL;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *ipv6 = res->ai_family == AF_INET6;
    if (*ipv6)
        ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)s->cfg.port);
    else
        ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)s->cfg.port);
    freeaddrinfo(res);
    return 0;
}

int http_start(server *s) {
    struct sockaddr_storage addr;
    int ipv6 = 0;
    if (s_resolve(s, &addr, &ipv6)) return SERVER_FAIL;
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (ipv6) flags |= MHD_USE_IPv6;
    if (s->cfg.verbose) flags |= MHD_USE_ERROR_LOG;
    if (conns_start(&s->conns, s->cfg.request_timeout_s, s->cfg.max_connections)) return SERVER_FAIL;
    /* libmicrohttpd's limit is above ours: at ours the oldest slow connection makes room
     * (server_conns.c), and it lingers until its thread closes it */
    const unsigned mhd_limit = (unsigned)(s->cfg.max_connections + conns_slack(s->cfg.max_connections));
    s->http.daemon = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, s_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, s, MHD_OPTION_NOTIFY_CONNECTION, conns_notify, &s->conns,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_POOL_THREADS, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.max_conn_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)120, MHD_OPTION_END);
    if (!s->http.daemon) {
        conns_stop(&s->conns);
        fprintf(stderr, "coli serve: cannot listen on %s:%d (address in use, or not allowed)\n", s->cfg.host,
                s->cfg.port);
        return SERVER_FAIL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->http.daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->http.port = di ? di->port : s->cfg.port;
    printf("coli serve: listening on http://%s%s%s:%d\n", ipv6 ? "[" : "", s->cfg.host, ipv6 ? "]" : "", s->http.port);
    printf("coli serve: at most %d connections, %d per client address (file-descriptor limit %lld)\n",
           s->cfg.max_connections, s->cfg.max_conn_per_client, s->cfg.fd_limit);
    fflush(stdout);
    return 0;
}

void http_init(server *s) {
    s->http.daemon = NULL;
    s->http.listen_fd = MHD_INVALID_SOCKET;
    atomic_init(&s->http.in_flight, 0);
}

void http_quiesce(server *s) {
    if (s->http.daemon && s->http.listen_fd == MHD_INVALID_SOCKET)
        s->http.listen_fd = MHD_quiesce_daemon(s->http.daemon);
}

void http_stop(server *s, double wait_s) {
    /* Answers of finished jobs may still be on their way out; MHD_stop_daemon
     * would cut them. Every suspended request has been resumed by then (each
     * job ended), which MHD_stop_daemon requires. Bounded by wait_s. */
    double until = coli_now_s() + wait_s;
    while (s->http.daemon && atomic_load(&s->http.in_flight) > 0 && coli_now_s() < until) usleep(10000);
    if (s->http.daemon) MHD_stop_daemon(s->http.daemon);
    s->http.daemon = NULL;
    if (s->http.listen_fd != MHD_INVALID_SOCKET) close(s->http.listen_fd);
    s->http.listen_fd = MHD_INVALID_SOCKET;
    conns_stop(&s->conns);
}
