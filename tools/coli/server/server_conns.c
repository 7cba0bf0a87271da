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
 * descriptor, and both run under the registry's mutex, so the reaper never
 * touches a number that a newer connection reuses.
 *
 * Each server has its own registry (server_conns, in server.h), so one
 * process can run several servers.
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

int conns_plan(server_config *cfg, char *err, size_t err_cap) {
    const rlim_t nofile = s_raise_nofile();
    const long long usable = nofile > (rlim_t)(1 << 30) ? (1 << 30) : (long long)nofile - CONNS_FD_RESERVE;
    cfg->fd_limit = (long long)nofile;
    if (cfg->max_connections > 0) { /* given: it must fit */
        if (cfg->max_connections + conns_slack(cfg->max_connections) <= usable) return 0;
        snprintf(err, err_cap,
                 "%d: needs %d file descriptors with the %d kept for closing ones and %d for the rest; the "
                 "limit (ulimit -n) is %lld",
                 cfg->max_connections, cfg->max_connections + conns_slack(cfg->max_connections) + CONNS_FD_RESERVE,
                 conns_slack(cfg->max_connections), CONNS_FD_RESERVE, (long long)nofile);
        return SERVER_USAGE;
    }
    long long n = usable * 4 / 5; /* n + n / 4 <= usable */
    if (usable - n < 32) n = usable - 32;
    if (n > CONNS_AUTO_MAX) n = CONNS_AUTO_MAX;
    if (n < 1) {
        snprintf(err, err_cap, "the file-descriptor limit (ulimit -n) is %lld: too low to serve (at least %d)",
                 (long long)nofile, CONNS_FD_RESERVE + 33);
        return SERVER_FAIL;
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
static void s_reap(server_conns *cn, conn_entry *e, const char *status, const char *code, const char *message) {
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
    cn->live--;
}

static void s_reap_late(server_conns *cn, conn_entry *e) {
    char message[128];
    snprintf(message, sizeof message, "request: head and body not received within %d s", cn->timeout_s);
    s_reap(cn, e, "408 Request Timeout", "request_timeout", message);
}

/* With cn->mu held, one connection over the limit (fresh is the newest): close
 * the oldest one still sending its head, else its body, else fresh itself. */
static void s_make_room(server_conns *cn, conn_entry *fresh) {
    conn_entry *victim = NULL;
    for (conn_entry *e = fresh->next; e; e = e->next) {
        if (e->received || e->reaped || e->fd < 0) continue;
        if (!victim || e->head < victim->head || (e->head == victim->head && e->t_start < victim->t_start)) victim = e;
    }
    char message[200];
    snprintf(message, sizeof message, "connections: the server's limit of %d is reached; %s was closed to make room",
             cn->limit,
             victim ? "this one, the oldest still sending its request,"
                    : "every other one has a request in flight; this one");
    if (!victim && fresh->fd < 0) return; /* nothing to close: over the limit until one ends */
    s_reap(cn, victim ? victim : fresh, "503 Service Unavailable", "too_many_connections", message);
}

void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    server_conns *cn = cls;
    pthread_mutex_lock(&cn->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_entry *e = calloc(1, sizeof *e); /* without one, the connection just has no deadline */
        if (e) {
            e->fd = http_connection_fd(c);
            e->t_start = coli_now_s();
            e->next = cn->head;
            if (cn->head) cn->head->prev = e;
            cn->head = e;
            if (++cn->live > cn->limit) s_make_room(cn, e);
        }
        *socket_context = e;
    } else if (*socket_context) {
        conn_entry *e = *socket_context;
        if (!e->reaped) cn->live--;
        if (e->prev)
            e->prev->next = e->next;
        else
            cn->head = e->next;
        if (e->next) e->next->prev = e->prev;
        free(e);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&cn->mu);
}

void conns_head_received(server_conns *cn, struct MHD_Connection *c) {
    pthread_mutex_lock(&cn->mu);
    conn_entry *e = s_entry(c);
    if (e) e->head = 1;
    pthread_mutex_unlock(&cn->mu);
}

void conns_request_received(server_conns *cn, struct MHD_Connection *c) {
    pthread_mutex_lock(&cn->mu);
    conn_entry *e = s_entry(c);
    if (e) e->received = 1;
    pthread_mutex_unlock(&cn->mu);
}

void conns_request_done(server_conns *cn, struct MHD_Connection *c) {
    pthread_mutex_lock(&cn->mu);
    conn_entry *e = s_entry(c);
    if (e) {
        e->head = e->received = 0;
        e->t_start = coli_now_s();
    }
    pthread_mutex_unlock(&cn->mu);
}

static void *s_reaper_main(void *arg) {
    server_conns *cn = arg;
    pthread_mutex_lock(&cn->mu);
    while (cn->running) {
        double now = coli_now_s();
        for (conn_entry *e = cn->head; e; e = e->next)
            if (!e->received && !e->reaped && e->fd >= 0 && now - e->t_start > cn->timeout_s) s_reap_late(cn, e);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L; /* the deadline holds to within 0.1 s */
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&cn->cv, &cn->mu, &until);
    }
    pthread_mutex_unlock(&cn->mu);
    return NULL;
}

void conns_init(server_conns *cn) {
    memset(cn, 0, sizeof *cn);
    pthread_mutex_init(&cn->mu, NULL);
    pthread_cond_init(&cn->cv, NULL);
}

void conns_destroy(server_conns *cn) {
    pthread_cond_destroy(&cn->cv);
    pthread_mutex_destroy(&cn->mu);
}

int conns_start(server_conns *cn, int timeout_s, int limit) {
    cn->timeout_s = timeout_s;
    cn->limit = limit;
    cn->live = 0;
    cn->running = 1;
    int e = pthread_create(&cn->reaper, NULL, s_reaper_main, cn);
    if (e) {
        cn->running = 0;
        fprintf(stderr, "coli serve: cannot start the request-deadline thread: %s\n", strerror(e));
        return -1;
    }
    return 0;
}

void conns_stop(server_conns *cn) {
    pthread_mutex_lock(&cn->mu);
    int was = cn->running;
    cn->running = 0;
    pthread_cond_broadcast(&cn->cv);
    pthread_mutex_unlock(&cn->mu);
    if (was) pthread_join(cn->reaper, NULL);
}
