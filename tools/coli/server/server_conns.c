/*
 * server_conns.c - the deadline for a request's head and body. libmicrohttpd's
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
#include <sys/socket.h>
#include <time.h>

#include "tools/coli/server/server.h"
#include "core/clock.h"

typedef struct conn_entry {
    struct conn_entry *prev, *next;
    int fd;
    double t_start; /* when the current request's first byte could arrive */
    int received;   /* the request's head and body are in */
    int reaped;     /* shut down by the deadline */
} conn_entry;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_cv = PTHREAD_COND_INITIALIZER;
static conn_entry *s_head;
static int s_timeout_s, s_running;
static pthread_t s_reaper;

static conn_entry *s_entry(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
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
        }
        *socket_context = e;
    } else if (*socket_context) {
        conn_entry *e = *socket_context;
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
        e->received = 0;
        e->t_start = coli_now_s();
    }
    pthread_mutex_unlock(&s_mu);
}

/* Tell the client why (best effort, never blocking), then end the connection. */
static void s_reap(conn_entry *e, int timeout_s) {
    char body[256], msg[512];
    snprintf(body, sizeof body,
             "{\"error\":{\"message\":\"request: head and body not received within %d s\","
             "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_timeout\"}}",
             timeout_s);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    ssize_t sent = send(e->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;
    shutdown(e->fd, SHUT_RDWR);
    e->reaped = 1;
}

static void *s_reaper_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&s_mu);
    while (s_running) {
        double now = coli_now_s();
        for (conn_entry *e = s_head; e; e = e->next)
            if (!e->received && !e->reaped && e->fd >= 0 && now - e->t_start > s_timeout_s) s_reap(e, s_timeout_s);
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

int conns_start(int timeout_s) {
    s_timeout_s = timeout_s;
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
