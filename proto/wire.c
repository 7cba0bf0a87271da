/*
 * wire.c - framing of coordinator <-> worker messages (see wire.h).
 */
#include "proto/wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/gguf/gguf.h"
#include "plugins/plugin_abi.h"

// ---------------------------------------------------------------------------
int wire_socket_setup(void *sock, int is_router) {
    int zero = 0, one = 1;
    int64_t max = COLI_MAX_MSG_BYTES;
    if (zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0)
        return coli_fail(COLI_EIO, "zmq socket options: %s", zmq_strerror(errno));
    if (is_router && zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0)
        return coli_fail(COLI_EIO, "zmq ROUTER_MANDATORY: %s", zmq_strerror(errno));
    return 0;
}

// ---------------------------------------------------------------------------
int wire_send(void *sock, const void *peer, size_t peer_len, Coli__Envelope *env, const void *payload,
              size_t payload_bytes, int flags) {
    env->version = COLI_PROTOCOL_VERSION;
    size_t n = coli__envelope__get_packed_size(env);
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf) return coli_fail(COLI_ENOMEM, "wire: %zu bytes for a header", n);
    coli__envelope__pack(env, buf);
    int more = payload ? ZMQ_SNDMORE : 0;
    int rc = 0;
    if (peer && zmq_send(sock, peer, peer_len, flags | ZMQ_SNDMORE) < 0) rc = -1;
    if (rc == 0 && zmq_send(sock, buf, n, flags | more) < 0) rc = -1;
    if (rc == 0 && payload && zmq_send(sock, payload, payload_bytes, flags) < 0) rc = -1;
    int saved = errno;
    if (buf != stackbuf) free(buf);
    errno = saved;
    if (rc != 0) return coli_fail(COLI_EIO, "wire send: %s", zmq_strerror(saved));
    return 0;
}

// ---------------------------------------------------------------------------
//  Drop the rest of a multipart message we gave up on.
static void s_drain_parts(void *sock) {
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

static int s_has_more(void *sock) {
    int more = 0;
    size_t sz = sizeof more;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
    return more;
}

/* Read the routing id frame of a ROUTER message into out->peer. */
static int s_recv_peer(void *sock, int flags, wire_msg *out) {
    zmq_msg_t id;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&id);
        return e == EAGAIN ? COLI_ETIMEOUT : coli_fail(COLI_EIO, "wire recv: %s", zmq_strerror(e));
    }
    size_t n = zmq_msg_size(&id);
    out->peer_len = n < WIRE_MAX_PEER ? n : WIRE_MAX_PEER;
    memcpy(out->peer, zmq_msg_data(&id), out->peer_len);
    zmq_msg_close(&id);
    if (!s_has_more(sock)) return coli_fail(COLI_EPROTO, "wire: message without a header frame");
    return 0;
}

// ---------------------------------------------------------------------------
int wire_recv(void *sock, int is_router, int flags, wire_msg *out) {
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (is_router) {
        rc = s_recv_peer(sock, flags, out);
        if (rc != 0) {
            if (rc == COLI_EPROTO) s_drain_parts(sock);
            return rc;
        }
        flags = 0; /* the rest of a multipart message is already here */
    }
    zmq_msg_t head;
    zmq_msg_init(&head);
    if (zmq_msg_recv(&head, sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&head);
        return e == EAGAIN ? COLI_ETIMEOUT : coli_fail(COLI_EIO, "wire recv: %s", zmq_strerror(e));
    }
    out->env = coli__envelope__unpack(NULL, zmq_msg_size(&head), zmq_msg_data(&head));
    zmq_msg_close(&head);
    if (!out->env) {
        s_drain_parts(sock);
        return coli_fail(COLI_EPROTO, "wire: header frame is not a protocol envelope");
    }
    if (out->env->version != COLI_PROTOCOL_VERSION) {
        uint32_t v = out->env->version;
        s_drain_parts(sock);
        wire_msg_clear(out);
        return coli_fail(COLI_EPROTO, "wire: protocol version %u, expected %u", v, COLI_PROTOCOL_VERSION);
    }
    if (s_has_more(sock)) {
        zmq_msg_init(&out->payload);
        out->has_payload = 1;
        if (zmq_msg_recv(&out->payload, sock, 0) < 0 || s_has_more(sock)) {
            s_drain_parts(sock);
            wire_msg_clear(out);
            return coli_fail(COLI_EPROTO, "wire: more than one payload frame");
        }
    }
    return 0;
}

void wire_msg_clear(wire_msg *m) {
    if (m->env) coli__envelope__free_unpacked(m->env, NULL);
    m->env = NULL;
    if (m->has_payload == 1) zmq_msg_close(&m->payload);
    m->has_payload = 0;
    m->ext_payload = NULL;
    m->ext_bytes = 0;
}

const void *wire_payload_data(const wire_msg *m) {
    if (m->has_payload == 2) return m->ext_payload;
    return m->has_payload ? zmq_msg_data((zmq_msg_t *)&m->payload) : NULL;
}

size_t wire_payload_size(const wire_msg *m) {
    if (m->has_payload == 2) return m->ext_bytes;
    return m->has_payload ? zmq_msg_size((zmq_msg_t *)&m->payload) : 0;
}

int wire_payload_is(const wire_msg *m, int64_t n_floats) {
    if (n_floats < 0 || n_floats > COLI_MAX_MSG_BYTES / 4) return 0;
    size_t want = (size_t)n_floats * sizeof(float);
    return wire_payload_size(m) == want;
}

void wire_model_identity(const gguf_file *f, uint64_t *size, uint64_t *hash) {
    size_t n = gguf_data_offset(f);
    if (n > ((size_t)16 << 20)) n = (size_t)16 << 20;
    *size = (uint64_t)gguf_size(f);
    *hash = coli_fnv1a(gguf_base(f), n, COLI_FNV1A_SEED);
}

// ---------------------------------------------------------------------------
static int s_name_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

const char *wire_reason_code(const char *why, char *buf, size_t n) {
    if (!why) return NULL;
    for (const char *p = why; *p; p++) {
        if (!(*p >= 'A' && *p <= 'Z') || (p > why && (s_name_char(p[-1]) || p[-1] == '_'))) continue;
        size_t len = 0;
        int underscore = 0;
        while (s_name_char(p[len]) || p[len] == '_') underscore |= p[len++] == '_';
        if (underscore && p[len] == ':' && p[len - 1] != '_' && len < n) {
            memcpy(buf, p, len);
            buf[len] = '\0';
            return buf;
        }
        p += len ? len - 1 : 0;
    }
    return NULL;
}

// ---------------------------------------------------------------------------
const char *wire_hello_check(const Coli__Hello *h, char *why, size_t n) {
    if (h->abi_major != MOE_PLUGIN_ABI_MAJOR) {
        snprintf(why, n, "hello: the worker's plugin speaks ABI %u.%u, this coordinator %d.%d", h->abi_major,
                 h->abi_minor, MOE_PLUGIN_ABI_MAJOR, MOE_PLUGIN_ABI_MINOR);
        return "abi";
    }
    if (h->dtype_mask == 0 && h->dtype_mask_hi == 0) {
        snprintf(why, n, "hello: the worker computes no weight type (empty type mask)");
        return "caps";
    }
    if (h->max_rows < 0) {
        snprintf(why, n, "hello: the worker's row limit %lld is negative", (long long)h->max_rows);
        return "caps";
    }
    /* a bit this ABI does not define would be trusted to mean an activation we
       never hand over correctly: refuse rather than guess */
    if (h->act_mask & ~(uint32_t)MOE_ACT_KNOWN) {
        snprintf(why, n, "hello: act_mask %#x has bits %#x this ABI does not define (known %#x)", h->act_mask,
                 h->act_mask & ~(uint32_t)MOE_ACT_KNOWN, (unsigned)MOE_ACT_KNOWN);
        return "caps";
    }
    return NULL;
}

/* Is (layer, expert) inside the model? Writes why when not. */
static int s_ref_in_model(const char *list, int layer, int expert, int n_layer, int n_expert, char *why, size_t n) {
    if (layer >= 0 && layer < n_layer && expert >= 0 && expert < n_expert) return 1;
    snprintf(why, n, "place reply: %s expert %d.%d is outside the model (%d layers x %d experts)", list, layer, expert,
             n_layer, n_expert);
    return 0;
}

const char *wire_place_ack_check(const Coli__PlaceAck *a, int n_layer, int n_expert, char *why, size_t n) {
    if (a->status != COLI__STATUS__STATUS_OK && a->status != COLI__STATUS__STATUS_FAILED) {
        snprintf(why, n, "place reply: unknown status %d", (int)a->status);
        return "garbage";
    }
    for (size_t i = 0; i < a->n_resident; i++)
        if (!s_ref_in_model("resident", a->resident[i]->layer, a->resident[i]->expert, n_layer, n_expert, why, n))
            return "garbage";
    for (size_t i = 0; i < a->n_refused; i++)
        if (!s_ref_in_model("refused", a->refused[i]->layer, a->refused[i]->expert, n_layer, n_expert, why, n))
            return "garbage";
    return NULL;
}
