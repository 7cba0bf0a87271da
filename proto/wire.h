/*
 * wire.h - one message on the wire: a protobuf-c Envelope frame plus at most
 * one raw F32 payload frame (see docs/protocol.md). Shared by the
 * coordinator and the worker process.
 *
 * Receiving never trusts the peer: a message with a bad header, an unknown
 * version, more frames than allowed or a payload whose size disagrees with
 * what the header says is consumed whole and reported as COLI_EPROTO, so
 * the caller can count it and go on.
 */
#ifndef COLI_PROTO_WIRE_H
#define COLI_PROTO_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "proto/coli.pb-c.h"

#define COLI_PROTOCOL_VERSION 1
/* Largest message either side accepts (ZMQ_MAXMSGSIZE): a bigger one drops
 * the peer's connection before it is buffered. */
#define COLI_MAX_MSG_BYTES ((int64_t)1 << 30)
#define WIRE_MAX_PEER 255

typedef struct wire_msg {
    Coli__Envelope *env;     /* unpacked header; NULL until a receive succeeds */
    zmq_msg_t payload;       /* frame 1, valid when has_payload == 1 */
    int has_payload;         /* 1: frame 1 above; 2: ext_payload (shared-memory ring) */
    const void *ext_payload; /* payload read in place from a ring slot */
    size_t ext_bytes;
    unsigned char peer[WIRE_MAX_PEER]; /* routing id of the sender (ROUTER side) */
    size_t peer_len;
} wire_msg;

/* Set LINGER 0 and MAXMSGSIZE on a socket (and ROUTER_MANDATORY on a ROUTER). */
int wire_socket_setup(void *sock, int is_router);

/* Send env (version set here) plus an optional payload frame. peer/peer_len:
 * the routing id to address on a ROUTER socket, NULL on a DEALER. flags:
 * ZMQ_DONTWAIT or 0. Returns 0, COLI_EIO (with errno kept: EHOSTUNREACH when a
 * ROUTER peer is gone, EAGAIN when the queue is full). */
int wire_send(void *sock, const void *peer, size_t peer_len, Coli__Envelope *env, const void *payload,
              size_t payload_bytes, int flags);

/* Receive one whole message (non-blocking when flags has ZMQ_DONTWAIT).
 * is_router: the first frame is the sender's routing id. Returns 0,
 * COLI_ETIMEOUT when nothing is waiting, COLI_EPROTO for a malformed message
 * (consumed; out->peer still names the sender when known), COLI_EIO. */
int wire_recv(void *sock, int is_router, int flags, wire_msg *out);
void wire_msg_clear(wire_msg *m);

/* The payload's bytes (any alignment) and size, whichever path it came by. */
const void *wire_payload_data(const wire_msg *m);
size_t wire_payload_size(const wire_msg *m);

/* 1 if the payload holds exactly n_floats F32 values. */
int wire_payload_is(const wire_msg *m, int64_t n_floats);

/* Identity of a model file both sides check before sharing work on it: its
 * size and the FNV-1a hash (core/hash.h) of its header (up to the tensor data, at most
 * 16 MiB). */
struct gguf_file;
void wire_model_identity(const struct gguf_file *f, uint64_t *size, uint64_t *hash);

/* The diagnostic a reason (Hello, RefusedExpert, ExpertResult) names, which
 * both sides count as the fallback reason: the first upper-case word with at
 * least one underscore followed by ':' ("plugin 'xdna': open device 0:
 * PACKAGE_MISSING: no package" -> "PACKAGE_MISSING"), copied into buf (n
 * bytes; a name that does not fit is no name). Returns buf, or NULL when the
 * reason names none (or why is NULL). docs/protocol.md. */
const char *wire_reason_code(const char *why, char *buf, size_t n);

/* Checks of what a worker says, before the coordinator acts on it (also run
 * by the wire fuzzer on whatever it accepts). Each returns NULL when the
 * message is fine, else the fallback reason it counts as, with a one-line
 * why (n bytes). */
/* An OK Hello: the plugin ABI major the coordinator speaks ("abi": both
 * numbers named), at least one weight type and a row limit >= 0 ("caps"). */
const char *wire_hello_check(const Coli__Hello *h, char *why, size_t n);
/* A PlaceAck: a known status and every expert it lists inside a model of
 * n_layer x n_expert ("garbage"). */
const char *wire_place_ack_check(const Coli__PlaceAck *a, int n_layer, int n_expert, char *why, size_t n);

#endif
