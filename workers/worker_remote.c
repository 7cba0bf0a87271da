/*
 * worker_remote.c - the worker's link (its part of worker.h, written only
 * here): a local worker's DEALER, and a worker on another host: `coli-worker
 * --listen tcp://ADDR:PORT --keys DIR [-m MODEL]` (docs/scheduler.md, "Remote workers").
 *
 * The worker is the long-lived server: it binds a ROUTER as a CURVE server
 * with its secret key (DIR/worker.key). libzmq asks a ZAP handler about
 * every client that completes the CURVE handshake; ours runs in a thread of
 * its own on inproc://zeromq.zap.01 and admits exactly the coordinator
 * public keys of DIR (coordinator.pub, authorized_coordinators). A thread,
 * not the main loop, so that a coordinator's handshake is answered even while
 * a long batch computes.
 *
 * One coordinator at a time: a coordinator greets (a Hello) and from then on
 * it is the one served; messages of other peers are dropped. Another
 * coordinator that greets while the one served is still connected gets a
 * FAILED hello with reason "busy: ..." (it counts a `busy` fallback and
 * computes elsewhere); without that, two coordinators took the worker from
 * each other every time one reconnected. Whether the one served is still
 * there is asked of ZeroMQ at that moment: with ROUTER_MANDATORY a send to a
 * peer whose connection is gone fails at once, and ZMTP heartbeats (10 s)
 * end connections to hosts that vanished, so a coordinator that died without
 * a word locks the worker for at most that long. `--takeover` restores "the
 * newest greeting wins". Whoever greets has passed ZAP (an authorized key).
 * A listening worker never obeys Shutdown: coordinators never send it to a
 * remote worker (docs/scheduler.md); it is an operator's server, stopped by
 * a signal.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/curve_keys.h"
#include "core/error.h"
#include "workers/worker.h"

struct worker_zap {
    pthread_t thread;
    int started;
    void *rep; /* bound before the server socket exists */
    curve_key keys[CURVE_MAX_AUTHORIZED];
    int n_keys;
};

enum {
    ZAP_FRAMES = 7
}; /* version, request id, domain, address, routing id, mechanism, key */

static int s_authorized(const struct worker_zap *z, const zmq_msg_t *mech, const zmq_msg_t *cred) {
    if (zmq_msg_size(mech) != 5 || memcmp(zmq_msg_data((zmq_msg_t *)mech), "CURVE", 5) || zmq_msg_size(cred) != 32)
        return 0;
    char z85[CURVE_KEY_CHARS + 1];
    zmq_z85_encode(z85, zmq_msg_data((zmq_msg_t *)cred), 32);
    for (int i = 0; i < z->n_keys; i++)
        if (!strcmp(z85, z->keys[i])) return 1;
    fprintf(stderr, "coli-worker: refused a coordinator with key %s: not in the authorized keys\n", z85);
    return 0;
}

/* Answer one ZAP request (RFC 27): 200 for an authorized key, else 400. */
static int s_zap_one(struct worker_zap *z) {
    zmq_msg_t f[ZAP_FRAMES];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->rep, 0) < 0) {
            zmq_msg_close(&m);
            for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
            return -1; /* ETERM: the worker is closing */
        }
        more = zmq_msg_more(&m);
        if (n < ZAP_FRAMES)
            f[n++] = m;
        else
            zmq_msg_close(&m);
    }
    int ok = n == ZAP_FRAMES && s_authorized(z, &f[5], &f[6]);
    const char *status = ok ? "200" : "400", *text = ok ? "OK" : "key not authorized";
    zmq_send(z->rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->rep, n > 1 ? zmq_msg_data(&f[1]) : "", n > 1 ? zmq_msg_size(&f[1]) : 0, ZMQ_SNDMORE);
    zmq_send(z->rep, status, 3, ZMQ_SNDMORE);
    zmq_send(z->rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->rep, "", 0, ZMQ_SNDMORE); /* user id */
    zmq_send(z->rep, "", 0, 0);           /* metadata */
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    return 0;
}

static void *s_zap_main(void *arg) {
    struct worker_zap *z = arg;
    while (s_zap_one(z) == 0) {}
    zmq_close(z->rep);
    return NULL;
}

/* The ZAP handler: authorized keys loaded, REP bound, thread started. */
static int s_start_zap(worker *w) {
    struct worker_zap *z = calloc(1, sizeof *z);
    if (!z) return coli_fail(COLI_ENOMEM, "coli-worker: ZAP handler");
    w->link.zap = z;
    int rc = curve_authorized_load(w->a.keys, z->keys, CURVE_MAX_AUTHORIZED, &z->n_keys);
    if (rc) return rc;
    z->rep = zmq_socket(w->link.zctx, ZMQ_REP);
    int linger = 0;
    if (z->rep && zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof linger) == 0 &&
        zmq_bind(z->rep, "inproc://zeromq.zap.01") == 0) {
        if (pthread_create(&z->thread, NULL, s_zap_main, z) == 0) {
            z->started = 1; /* the socket is the thread's now */
            return 0;
        }
        rc = coli_fail(COLI_EIO, "coli-worker: ZAP handler thread: %s", strerror(errno));
    } else {
        rc = coli_fail(COLI_EIO, "coli-worker: ZAP handler socket: %s", zmq_strerror(errno));
    }
    if (z->rep) zmq_close(z->rep); /* closed now, or zmq_ctx_term would wait for it */
    z->rep = NULL;
    return rc;
}

static int s_listen(worker *w) {
    if (!w->a.keys)
        return coli_fail(COLI_EINVAL, "coli-worker: --listen needs --keys DIR (remote workers only talk to "
                                      "authenticated coordinators; coli keygen DIR makes the keys)");
    if (!curve_available())
        return coli_fail(COLI_EUNSUPPORTED, "coli-worker: this libzmq has no CURVE support; cannot --listen");
    w->link.zctx = zmq_ctx_new();
    if (!w->link.zctx) return coli_fail(COLI_EIO, "coli-worker: zmq context: %s", zmq_strerror(errno));
    int rc = s_start_zap(w);
    if (rc) return rc;
    w->link.sock = zmq_socket(w->link.zctx, ZMQ_ROUTER);
    if (!w->link.sock) return coli_fail(COLI_EIO, "coli-worker: zmq socket: %s", zmq_strerror(errno));
    if ((rc = wire_socket_setup(w->link.sock, 1)) || (rc = curve_server_setup(w->link.sock, w->a.keys))) return rc;
    int hb_ivl = 1000, hb_timeout = 10000;
    zmq_setsockopt(w->link.sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(w->link.sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof hb_timeout);
    if (zmq_bind(w->link.sock, w->a.listen) != 0)
        return coli_fail(COLI_EIO, "coli-worker: bind %s: %s", w->a.listen, zmq_strerror(errno));
    char ep[256];
    size_t len = sizeof ep;
    if (zmq_getsockopt(w->link.sock, ZMQ_LAST_ENDPOINT, ep, &len) != 0) snprintf(ep, sizeof ep, "%s", w->a.listen);
    printf("coli-worker: listening on %s\n", ep); /* the port, when --listen asked for any (:*) */
    fflush(stdout);
    w->link.listening = 1;
    return 0;
}

/* A local worker: a DEALER under the coordinator's routing id for this spawn. */
static int s_dealer(worker *w, const char *id, size_t len) {
    w->link.zctx = zmq_ctx_new();
    w->link.sock = w->link.zctx ? zmq_socket(w->link.zctx, ZMQ_DEALER) : NULL;
    if (!w->link.sock) return coli_fail(COLI_EIO, "coli-worker: zmq socket: %s", zmq_strerror(errno));
    zmq_setsockopt(w->link.sock, ZMQ_ROUTING_ID, id, len);
    int rc = wire_socket_setup(w->link.sock, 0);
    if (rc != 0) return rc;
    if (zmq_connect(w->link.sock, w->a.connect) != 0)
        return coli_fail(COLI_EIO, "coli-worker: connect %s: %s", w->a.connect, zmq_strerror(errno));
    return 0;
}

int worker_connect(worker *w, const char *id, size_t len) {
    w->link.worker_id = w->a.worker_id;
    w->link.generation = w->a.generation;
    return w->a.listen ? s_listen(w) : s_dealer(w, id, len);
}

int worker_send(worker *w, Coli__Envelope *env, const void *payload, size_t bytes, int flags) {
    if (!w->link.listening) return wire_send(w->link.sock, NULL, 0, env, payload, bytes, flags);
    if (!w->link.peer_len) return 0; /* nobody to tell yet */
    return wire_send(w->link.sock, w->link.peer, w->link.peer_len, env, payload, bytes, flags);
}

/* Is the coordinator served now still connected? A heartbeat to it: with
 * ROUTER_MANDATORY, a send to a peer whose connection is gone fails at once. */
static int s_served_alive(worker *w) {
    Coli__Heartbeat h = COLI__HEARTBEAT__INIT;
    worker_heartbeat_fill(w, &h);
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &h;
    return wire_send(w->link.sock, w->link.peer, w->link.peer_len, &env, NULL, 0, ZMQ_DONTWAIT) == 0;
}

/* A FAILED hello to the coordinator that greeted second. */
static void s_refuse_busy(worker *w, const wire_msg *m) {
    w->link.busy_refused++;
    fprintf(stderr,
            "coli-worker: refused a second coordinator (%llu so far): busy serving another; "
            "--takeover lets the newest greeting win\n",
            (unsigned long long)w->link.busy_refused);
    Coli__Hello h = COLI__HELLO__INIT;
    char device[64];
    snprintf(device, sizeof device, "%s:%d", w->a.plugin, w->a.device_index);
    h.plugin = (char *)w->a.plugin;
    h.device = device;
    h.status = COLI__STATUS__STATUS_FAILED;
    h.reason = "busy: serving another coordinator (its operator may restart it with --takeover)";
    h.abi_major = MOE_PLUGIN_ABI_MAJOR;
    h.abi_minor = MOE_PLUGIN_ABI_MINOR;
    h.worker_id = m->env->hello->worker_id;
    h.generation = m->env->hello->generation;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    wire_send(w->link.sock, m->peer, m->peer_len, &env, NULL, 0, ZMQ_DONTWAIT);
}

int worker_remote_gate(worker *w, const wire_msg *m) {
    int current = w->link.peer_len && m->peer_len == w->link.peer_len && !memcmp(m->peer, w->link.peer, m->peer_len);
    if (current && m->env->body_case == COLI__ENVELOPE__BODY_SHUTDOWN) {
        fprintf(stderr, "coli-worker: ignored Shutdown from the coordinator: a remote worker stops by signal\n");
        return 1;
    }
    if (m->env->body_case == COLI__ENVELOPE__BODY_HELLO) {
        const char *session = m->env->hello->session ? m->env->hello->session : "";
        int same_session = session[0] && !strcmp(session, w->link.peer_session); /* it reconnected */
        if (w->link.peer_len && !current && !same_session && !w->a.takeover && s_served_alive(w)) {
            s_refuse_busy(w, m);
            return 1;
        }
        if (w->link.peer_len && !current)
            fprintf(stderr, "coli-worker: a new coordinator greeted; serving it from now on\n");
        snprintf(w->link.peer_session, sizeof w->link.peer_session, "%s", session);
        memcpy(w->link.peer, m->peer, m->peer_len);
        w->link.peer_len = m->peer_len;
        w->link.worker_id = m->env->hello->worker_id;
        w->link.generation = m->env->hello->generation;
        worker_served_anew(w);
        worker_send_hello(w, 1, "");
        return 1;
    }
    return !current; /* not the coordinator served: dropped */
}

void worker_link_linger(worker *w, int ms) {
    if (w->link.sock) zmq_setsockopt(w->link.sock, ZMQ_LINGER, &ms, sizeof ms);
}

void worker_link_close(worker *w) {
    if (w->link.sock) zmq_close(w->link.sock);
    if (w->link.zctx) zmq_ctx_term(w->link.zctx); /* the ZAP thread ends at ETERM */
    if (w->link.zap && w->link.zap->started) pthread_join(w->link.zap->thread, NULL);
    free(w->link.zap);
    memset(&w->link, 0, sizeof w->link);
}
