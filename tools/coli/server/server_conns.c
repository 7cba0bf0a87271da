/*
 * server_conns.c - the connection limit and the deadline for a request's
 * head and body.
 *
 * The limit: --max-connections (by default what the file-descriptor limit
 * allows, conns_plan) counts open connections. At the limit a new connection
 * is not refused: the oldest connection still sending its request (its head
 * first, then a body; an idle kept-alive one waits for its next head) is
 * answered 503 and closed to make room, and only when every connection has a
 * complete request in flight is the new one closed instead. So slow clients
 * from however many addresses cannot lock out /health and a normal request:
 * they push out each other, oldest first. libmicrohttpd's own limit is set
 * above ours (CONNS_SLACK) so that it never refuses first, and closed
 * connections may linger until its thread sees them.
 *
 * The deadline: libmicrohttpd's
 * own timeout is an idle timeout: a client that trickles one byte every few
 * seconds never meets it, and holds its connection (one of --max-connections)
 * for as long as it likes. Here every connection is registered when it opens;
 * a reaper thread shuts down the socket of one whose request has not fully
 * arrived within --request-timeout seconds (it is answered 408 first, in the
 * JSON error shape), and the daemon then closes it as it would any connection
 * the client closed. The clock restarts for each request of a kept-alive
 * connection.
 *
 * Why shutdown() on a descriptor is safe: an entry leaves the registry in
 * the CLOSED notification, which libmicrohttpd gives before it closes the
 * descriptor, and both run under s_mu, so the reaper never touches a number
 * that a newer connection reuses.
 */
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "tools/coli/args.h"
#include "tools/coli/server/server.h"
#include "core/clock.h"

/* Descriptors kept for everything but connections: the model, worker pipes and
 * sockets, ZeroMQ's own, libmicrohttpd's listen, epoll and wake-up ones. */
#define CONNS_FD_RESERVE 256
/* The most connections the default allows (each costs a descriptor and memory). */
#define CONNS_AUTO_MAX 65536

typedef struct conn_entry {
    struct conn_entry *prev, *next;
    int fd;
    double t_start; /* when the current request's first byte could arrive */
    int head;       /* the request's head is in */
    int received;   /* the request's head and body are in */
    int reaped;     /* shut down (deadline or limit): no longer counted */
} conn_entry;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_cv = PTHREAD_COND_INITIALIZER;
static conn_entry *s_head;
static int s_timeout_s, s_running;
static int s_limit, s_live; /* --max-connections; entries not reaped */
static pthread_t s_reaper;

int conns_slack(int limit) { return limit / 4 > 32 ? limit / 4 : 32; }

/* Raise the soft descriptor limit to the hard one; the limit now in force. */
static rlim_t s_raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl.rlim_cur = rl.rlim_max;
    }
    return rl.rlim_cur;
}

int conns_plan(server_config *cfg) {
    const rlim_t nofile = s_raise_nofile();
    const long long usable = nofile > (rlim_t)(1 << 30) ? (1 << 30) : (long long)nofile - CONNS_FD_RESERVE;
    cfg->fd_limit = (long long)nofile;
    if (cfg->max_connections > 0) { /* given: it must fit */
        if (cfg->max_connections + conns_slack(cfg->max_connections) <= usable) return 0;
        return args_error("serve", "--max-connections",
                          "%d: needs %d file descriptors with the %d kept for closing ones and %d for the rest; the "
                          "limit (ulimit -n) is %lld",
                          cfg->max_connections,
                          cfg->max_connections + conns_slack(cfg->max_connections) + CONNS_FD_RESERVE,
                          conns_slack(cfg->max_connections), CONNS_FD_RESERVE, (long long)nofile);
    }
    long long n = usable * 4 / 5; /* n + n / 4 <= usable */
    if (usable - n < 32) n = usable - 32;
    if (n > CONNS_AUTO_MAX) n = CONNS_AUTO_MAX;
    if (n < 1) {
        fprintf(stderr, "coli serve: the file-descriptor limit (ulimit -n) is %lld: too low to serve (at least %d)\n",
                (long long)nofile, CONNS_FD_RESERVE + 33);
        return CLI_FAIL;
    }
    cfg->max_connections = (int)n;
    return 0;
}

static conn_entry *s_entry(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Tell the client why (best effort, never blocking: an HTTP status line and
 * an OpenAI error), then end the connection; it no longer counts. */
static void s_reap(conn_entry *e, const char *status, const char *code, const char *message) {
    char body[512], msg[1024];
    snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
             message, status[0] == '5' ? "server_error" : "invalid_request_error", code);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     status, strlen(body), body);
    ssize_t sent = send(e->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;
    shutdown(e->fd, SHUT_RDWR);
    e->reaped = 1;
    s_live--;
}

static void s_reap_late(conn_entry *e) {
    char message[128];
    snprintf(message, sizeof message, "request: head and body not received within %d s", s_timeout_s);
    s_reap(e, "408 Request Timeout", "request_timeout", message);
}

/* With s_mu held, one connection over the limit (fresh is the newest): close
 * the oldest one still sending its head, else its body, else fresh itself. */
static void s_make_room(conn_entry *fresh) {
    conn_entry *victim = NULL;
    for (conn_entry *e = fresh->next; e; e = e->next) {
        if (e->received || e->reaped || e->fd < 0) continue;
        if (!victim || e->head < victim->head || (e->head == victim->head && e->t_start < victim->t_start)) victim = e;
    }
    char message[200];
    snprintf(message, sizeof message, "connections: the server's limit of %d is reached; %s was closed to make room",
             s_limit,
             victim ? "this one, the oldest still sending its request,"
                    : "every other one has a request in flight; this one");
    if (!victim && fresh->fd < 0) return; /* nothing to close: over the limit until one ends */
    s_reap(victim ? victim : fresh, "503 Service Unavailable", "too_many_connections", message);
}

void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    (void)cls;
    pthread_mutex_lock(&s_mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_entry *e = calloc(1, sizeof *e); /* without one, the connection just has no deadline */
        if (e) {
            e->fd = http_connection_fd(c);
            e->t_start = coli_now_s();
            e->next = s_head;
            if (s_head) s_head->prev = e;
            s_head = e;
            if (++s_live > s_limit) s_make_room(e);
        }
        *socket_context = e;
    } else if (*socket_context) {
        conn_entry *e = *socket_context;
        if (!e->reaped) s_live--;
        if (e->prev)
            e->prev->next = e->next;
        else
            s_head = e->next;
        if (e->next) e->next->prev = e->prev;
        free(e);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&s_mu);
}

void conns_head_received(struct MHD_Connection *c) {
    pthread_mutex_lock(&s_mu);
    conn_entry *e = s_entry(c);
    if (e) e->head = 1;
    pthread_mutex_unlock(&s_mu);
}

void conns_request_received(struct MHD_Connection *c) {
    pthread_mutex_lock(&s_mu);
    conn_entry *e = s_entry(c);
    if (e) e->received = 1;
    pthread_mutex_unlock(&s_mu);
}

void conns_request_done(struct MHD_Connection *c) {
    pthread_mutex_lock(&s_mu);
    conn_entry *e = s_entry(c);
    if (e) {
        e->head = e->received = 0;
        e->t_start = coli_now_s();
    }
    pthread_mutex_unlock(&s_mu);
}

static void *s_reaper_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&s_mu);
    while (s_running) {
        double now = coli_now_s();
        for (conn_entry *e = s_head; e; e = e->next)
            if (!e->received && !e->reaped && e->fd >= 0 && now - e->t_start > s_timeout_s) s_reap_late(e);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L; /* the deadline holds to within 0.1 s */
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s_cv, &s_mu, &until);
    }
    pthread_mutex_unlock(&s_mu);
    return NULL;
}

int conns_start(int timeout_s, int limit) {
    s_timeout_s = timeout_s;
    s_limit = limit;
    s_live = 0;
    s_running = 1;
    int e = pthread_create(&s_reaper, NULL, s_reaper_main, NULL);
    if (e) {
        s_running = 0;
        fprintf(stderr, "coli serve: cannot start the request-deadline thread: %s\n", strerror(e));
        return -1;
    }
    return 0;
}

void conns_stop(void) {
    pthread_mutex_lock(&s_mu);
    int was = s_running;
    s_running = 0;
    pthread_cond_broadcast(&s_cv);
    pthread_mutex_unlock(&s_mu);
    if (was) pthread_join(s_reaper, NULL);
}
