/*
 * link_remote.c - workers on other hosts, coordinator side (docs/scheduler.md,
 * "Remote workers").
 *
 * A remote worker is a long-lived server (`coli worker --listen tcp://...
 * --keys DIR`): it binds, we connect. Each remote worker gets a DEALER of its
 * own, a CURVE client with our key pair (COLI_KEYS=DIR) and the worker's
 * public key, so the worker knows us and we know it. Why not the ROUTER that
 * local workers connect to: CURVE keys are per connection, a socket monitor
 * reports handshake failures per socket, and a fresh DEALER per generation
 * (reconnect) starts with nothing queued from the previous connection.
 *
 * The worker speaks only when spoken to: right after connecting we send a
 * greeting (a Hello carrying the worker id and generation); it answers with
 * its own Hello, and from there on the conversation is the local one (Place,
 * batches, heartbeats) over ZeroMQ only (no shared-memory ring).
 *
 * What the monitor tells us: a handshake the worker refused (our key is not
 * among its authorized ones: ZAP status 400) or that could not complete
 * (wrong worker public key, or a worker without CURVE) is the fallback
 * reason `auth`, once, and the worker is not tried again (keys do not fix
 * themselves). A connection that drops after its handshake is a `crash`:
 * the supervisor reconnects with back-off (a new generation), but never
 * restarts the process, which is not ours. A first connection that cannot
 * be made at all (refused, unreachable) is the reason `connect` at once, not
 * a wait for the start deadline (s_connect_failed).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/curve_keys.h"
#include "coordinator/sched/sched_internal.h"
#include "core/error.h"

enum {
    REMOTE_EVENTS = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                    ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED
};

void remote_close(worker_link *w) {
    if (w->tcp.sock) zmq_close(w->tcp.sock);
    if (w->tcp.mon) zmq_close(w->tcp.mon);
    w->tcp.sock = w->tcp.mon = NULL;
}

/* The DEALER: limits as for local sockets, CURVE client, ZMTP heartbeats (a
 * peer that vanished without a word, e.g. a host that lost power, drops
 * the connection instead of leaving it open forever), connect retry back-off. */
static int s_socket(sched *s, worker_link *w, const char *keys) {
    w->tcp.sock = zmq_socket(s->net.zctx, ZMQ_DEALER);
    if (!w->tcp.sock) return coli_fail(COLI_EIO, "%s: zmq socket: %s", w->device, zmq_strerror(errno));
    int rc = wire_socket_setup(w->tcp.sock, 0);
    if (rc == 0) rc = curve_client_setup(w->tcp.sock, keys, w->dev.endpoint);
    if (rc) return coli_fail_prefix(rc, "%s", w->device);
    int hb_ivl = 1000, hb_timeout = 10000, retry_max = 5000, ipv6 = 1; /* tcp://[::1]:P as well as IPv4 */
    zmq_setsockopt(w->tcp.sock, ZMQ_IPV6, &ipv6, sizeof ipv6);
    zmq_setsockopt(w->tcp.sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(w->tcp.sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof hb_timeout);
    zmq_setsockopt(w->tcp.sock, ZMQ_RECONNECT_IVL_MAX, &retry_max, sizeof retry_max);
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://coli-monitor.%d.%u", w->id, w->proc.gen);
    w->tcp.mon = zmq_socket_monitor(w->tcp.sock, mon, REMOTE_EVENTS) == 0 ? zmq_socket(s->net.zctx, ZMQ_PAIR) : NULL;
    int zero = 0;
    if (!w->tcp.mon || zmq_setsockopt(w->tcp.mon, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(w->tcp.mon, mon) != 0)
        return coli_fail(COLI_EIO, "%s: socket monitor: %s", w->device, zmq_strerror(errno));
    if (zmq_connect(w->tcp.sock, w->dev.endpoint) != 0)
        return coli_fail(COLI_EIO, "%s: connect %s: %s", w->device, w->dev.endpoint, zmq_strerror(errno));
    return 0;
}

int remote_preflight(const coli_settings *set, const device_spec *d, int n) {
    for (int i = 0; i < n; i++) {
        if (!d[i].endpoint[0]) continue;
        const char *keys = set->keys_dir;
        if (!curve_available())
            return coli_fail(COLI_EUNSUPPORTED,
                             "remote:%d (%s): this libzmq has no CURVE support "
                             "(zmq_has(\"curve\") is 0); remote workers need it",
                             d[i].index, d[i].endpoint);
        if (!keys || !*keys)
            return coli_fail(COLI_EINVAL,
                             "remote:%d (%s): remote workers need CURVE keys: set COLI_KEYS=DIR "
                             "or give --keys DIR (coli keygen DIR makes them)",
                             d[i].index, d[i].endpoint);
        curve_key k;
        int rc = curve_key_read(keys, "coordinator.key", 1, k);
        if (rc) return rc;
    }
    return 0;
}

int remote_connect(sched *s, worker_link *w) {
    remote_close(w);
    w->tcp.on = 1;
    w->proc.pid = 0;
    w->proc.pidfd = -1;
    w->tcp.handshaked = 0;
    w->proc.exit_seen_ns = 0;
    w->proc.routing_len = (size_t)snprintf(w->proc.routing_id, sizeof w->proc.routing_id, "w%d.%u", w->id, w->proc.gen);
    link_starting(w);
    int rc = remote_preflight(&s->set, &w->dev, 1);
    if (rc) return rc;
    rc = s_socket(s, w, s->set.keys_dir);
    if (rc) {
        remote_close(w);
        return rc;
    }
    /* queued until the connection is up (ZMQ_IMMEDIATE is 0) */
    Coli__Hello greet = COLI__HELLO__INIT;
    greet.worker_id = w->id;
    greet.generation = w->proc.gen;
    greet.device = w->device;
    greet.session = s->net.session; /* a reconnect of ours is let in; another coordinator is "busy" */
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HELLO;
    env.hello = &greet;
    rc = wire_send(w->tcp.sock, NULL, 0, &env, NULL, 0, ZMQ_DONTWAIT);
    if (rc == 0) link_count_sent(w, &env, 0);
    return rc;
}

link_sent link_send(sched *s, worker_link *w, Coli__Envelope *env, const void *payload, size_t bytes, int flags) {
    if (!w->tcp.on) {
        if (wire_send(s->net.router, w->proc.routing_id, w->proc.routing_len, env, payload, bytes, flags) == 0) {
            link_count_sent(w, env, bytes);
            return LINK_SENT;
        }
        return errno == EHOSTUNREACH ? LINK_UNREACHABLE : LINK_SEND_ERROR; /* wire_send keeps errno */
    }
    if (!w->tcp.sock) {
        coli_fail(COLI_EIO, "%s: not connected", w->device);
        return LINK_UNREACHABLE;
    }
    if (wire_send(w->tcp.sock, NULL, 0, env, payload, bytes, flags) == 0) {
        link_count_sent(w, env, bytes);
        return LINK_SENT;
    }
    /* EAGAIN too: nothing can be queued to it */
    return errno == EAGAIN || errno == EHOSTUNREACH ? LINK_UNREACHABLE : LINK_SEND_ERROR;
}

int remote_poll_items(sched *s, zmq_pollitem_t *items, int max_items) {
    int n = 0;
    for (int i = 0; i < s->n_w && n + 2 <= max_items; i++)
        if (s->w[i].tcp.sock) {
            items[n++] = (zmq_pollitem_t){s->w[i].tcp.sock, 0, ZMQ_POLLIN, 0};
            items[n++] = (zmq_pollitem_t){s->w[i].tcp.mon, 0, ZMQ_POLLIN, 0};
        }
    return n;
}

// ---------------------------------------------------------------------------
//  The handshake failed: our key is not authorized (ZAP status), or the
//  worker's public key is not the one we have, or it does not speak CURVE.
static void s_auth_failed(sched *s, worker_link *w, unsigned event, unsigned value) {
    char why[512];
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        snprintf(why, sizeof why,
                 "%s refused our key (status %u): coordinator.pub is not among its "
                 "authorized keys",
                 w->dev.endpoint, value);
    else
        snprintf(why, sizeof why,
                 "CURVE handshake with %s failed: wrong worker public key, or the "
                 "worker does not use --keys",
                 w->dev.endpoint);
    sched_outcome(s, w, LINK_REFUSED, "auth", why);
}

/* The first TCP connection failed (ZeroMQ retries it): nothing listens at
 * the endpoint or it cannot be reached. Waiting for the start deadline would
 * only stall the load: the worker is lost now (counted once, as `connect`)
 * and reconnected with back-off. A reconnect (generation > 0) keeps letting
 * ZeroMQ retry until the start deadline instead: a host that restarts is
 * taken the moment it listens again, and refusals in a row do not put it on
 * probation (supervisor.c). */
static void s_connect_failed(sched *s, worker_link *w) {
    if (w->proc.gen > 0) return;
    fprintf(stderr,
            "colibri: worker %d (%s): %s: connection refused (nothing listens there, or it cannot be "
            "reached); its experts go to the CPU path, reconnecting with back-off\n",
            w->id, w->device, w->dev.endpoint);
    sched_outcome(s, w, LINK_LOST, "connect", NULL);
}

static void s_on_event(sched *s, worker_link *w, unsigned event, unsigned value) {
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        w->tcp.handshaked = 1;
        return;
    }
    if (event == ZMQ_EVENT_CONNECT_RETRIED) {
        if (!w->tcp.handshaked && w->state == LINK_STARTING) s_connect_failed(s, w);
        return;
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
        /* the connection was up: the process (or its host, or the path) is gone */
        if (w->tcp.handshaked && w->state != LINK_DOWN && w->state != LINK_FAILED && w->state != LINK_QUARANTINED) {
            if (s->verbose) fprintf(stderr, "colibri: worker %d (%s) disconnected\n", w->id, w->device);
            sched_outcome(s, w, LINK_LOST, "crash", NULL);
        }
        return;
    }
    if (!w->tcp.handshaked && w->state == LINK_STARTING) s_auth_failed(s, w, event, value);
}

/* Monitor events: frame 1 = u16 event + u32 value, frame 2 = the endpoint. */
static void s_take_events(sched *s, worker_link *w) {
    while (w->tcp.mon) {
        zmq_msg_t a, b;
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, w->tcp.mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&a);
            return;
        }
        zmq_msg_init(&b);
        if (zmq_msg_more(&a)) zmq_msg_recv(&b, w->tcp.mon, 0);
        uint16_t ev = 0;
        uint32_t val = 0;
        if (zmq_msg_size(&a) >= 6) {
            memcpy(&ev, zmq_msg_data(&a), 2);
            memcpy(&val, (const char *)zmq_msg_data(&a) + 2, 4);
        }
        zmq_msg_close(&a);
        zmq_msg_close(&b);
        s_on_event(s, w, ev, val);
    }
}

void remote_take(sched *s) {
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        while (w->tcp.sock) { /* messages first: a reply sent before a disconnect counts */
            wire_msg m;
            int rc = wire_recv(w->tcp.sock, 0, ZMQ_DONTWAIT, &m);
            if (rc == COLI_ETIMEOUT || rc == COLI_EIO) break;
            if (rc == COLI_EPROTO) {
                w->last_seen_ns = coli_now_ns();
                sched_outcome(s, w, LINK_GARBAGE, "garbage", "malformed message");
            } else {
                link_dispatch(s, w, &m);
            }
            wire_msg_clear(&m);
        }
        s_take_events(s, w);
    }
}
