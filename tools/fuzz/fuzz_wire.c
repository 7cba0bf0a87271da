/*
 * fuzz_wire.c - libFuzzer target for what a worker or coordinator receives
 * on a ZeroMQ socket (proto/wire.c): the input is cut into up to 4 frames
 * (a length byte before each, the rest in the last), sent as one multipart
 * message over inproc from a DEALER to a ROUTER (as a worker's message
 * reaches the coordinator) and to a DEALER (as the coordinator's reaches a
 * worker), and read back with wire_recv. Whatever it accepts is walked: every
 * field a receiver reads (the body's sub-messages, repeated fields, strings)
 * and every payload byte (the cache protocol's CacheLoad / CacheEvict /
 * CacheAck included), and a Hello or PlaceAck goes through the checks the
 * coordinator runs on them (wire_hello_check, wire_place_ack_check). Built
 * and run by `make fuzz` (docs/protocol.md).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>

#include "proto/wire.h"

static void *s_ctx, *s_router, *s_dealer, *s_pair_a, *s_pair_b;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    s_ctx = zmq_ctx_new();
    s_router = zmq_socket(s_ctx, ZMQ_ROUTER);
    s_dealer = zmq_socket(s_ctx, ZMQ_DEALER);
    s_pair_a = zmq_socket(s_ctx, ZMQ_DEALER);
    s_pair_b = zmq_socket(s_ctx, ZMQ_DEALER);
    wire_socket_setup(s_router, 1);
    wire_socket_setup(s_dealer, 0);
    zmq_setsockopt(s_dealer, ZMQ_ROUTING_ID, "w0.0", 4);
    zmq_bind(s_router, "inproc://fuzz-router");
    zmq_connect(s_dealer, "inproc://fuzz-router");
    zmq_bind(s_pair_a, "inproc://fuzz-pair");
    zmq_connect(s_pair_b, "inproc://fuzz-pair");
    return 0;
}

static volatile unsigned s_sink;

static void s_refs(Coli__ExpertRef *const *refs, size_t n) {
    for (size_t i = 0; i < n; i++) s_sink += (unsigned)refs[i]->layer + (unsigned)refs[i]->expert;
}

static void s_refused(Coli__RefusedExpert *const *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        s_sink += (unsigned)r[i]->layer + (unsigned)r[i]->expert;
        if (r[i]->kind) s_sink += (unsigned)strlen(r[i]->kind);
        if (r[i]->reason) s_sink += (unsigned)strlen(r[i]->reason);
    }
}

/* The checks the coordinator runs before it acts on a hello or a place
 * reply (a bogus why would be read past its end under ASan). */
static void s_check(const Coli__Envelope *e) {
    char why[256];
    if (e->body_case == COLI__ENVELOPE__BODY_HELLO && wire_hello_check(e->hello, why, sizeof why))
        s_sink += (unsigned)strlen(why);
    if (e->body_case == COLI__ENVELOPE__BODY_PLACE_ACK && wire_place_ack_check(e->place_ack, 4, 4, why, sizeof why))
        s_sink += (unsigned)strlen(why);
}

static void s_walk(const wire_msg *m) {
    const Coli__Envelope *e = m->env;
    const unsigned char *p = wire_payload_data(m);
    for (size_t i = 0, n = wire_payload_size(m); i < n; i++) s_sink += p[i];
    (void)wire_payload_is(m, (int64_t)(wire_payload_size(m) / 4));
    switch (e->body_case) {
    case COLI__ENVELOPE__BODY_HELLO: {
        const char *str[5] = {e->hello->plugin, e->hello->device, e->hello->reason, e->hello->device_name,
                              e->hello->session};
        for (int i = 0; i < 5; i++)
            if (str[i]) s_sink += (unsigned)strlen(str[i]);
        s_sink += e->hello->abi_major + e->hello->dtype_mask + (unsigned)e->hello->max_rows;
        break;
    }
    case COLI__ENVELOPE__BODY_PLACE:
        if (e->place->model_path) s_sink += (unsigned)strlen(e->place->model_path);
        for (size_t i = 0; i < e->place->n_experts; i++) s_sink += (unsigned)e->place->experts[i]->layer;
        break;
    case COLI__ENVELOPE__BODY_PLACE_ACK:
        s_refs(e->place_ack->resident, e->place_ack->n_resident);
        s_refused(e->place_ack->refused, e->place_ack->n_refused);
        break;
    case COLI__ENVELOPE__BODY_CACHE_LOAD: s_refs(e->cache_load->experts, e->cache_load->n_experts); break;
    case COLI__ENVELOPE__BODY_CACHE_EVICT: s_refs(e->cache_evict->experts, e->cache_evict->n_experts); break;
    case COLI__ENVELOPE__BODY_CACHE_ACK:
        s_refs(e->cache_ack->loaded, e->cache_ack->n_loaded);
        s_refs(e->cache_ack->evicted, e->cache_ack->n_evicted);
        s_refs(e->cache_ack->resident, e->cache_ack->n_resident);
        s_refused(e->cache_ack->refused, e->cache_ack->n_refused);
        if (e->cache_ack->reason) s_sink += (unsigned)strlen(e->cache_ack->reason);
        s_sink += (unsigned)(e->cache_ack->copies + e->cache_ack->copy_bytes);
        break;
    case COLI__ENVELOPE__BODY_BATCH:
        for (size_t i = 0; i < e->batch->n_groups; i++) s_sink += (unsigned)e->batch->groups[i]->n_rows;
        break;
    case COLI__ENVELOPE__BODY_RESULT:
        if (e->result->reason) s_sink += (unsigned)strlen(e->result->reason);
        break;
    default: break;
    }
    s_check(e);
}

/* Send the frames of data (up to 4) on `from`, read one message on `to`. */
static void s_round(void *from, void *to, int is_router, const uint8_t *data, size_t size) {
    int frames = size ? 1 + data[0] % 4 : 1;
    size_t at = size ? 1 : 0;
    for (int f = 0; f < frames; f++) {
        size_t n = size - at;
        if (f + 1 < frames && at < size) {
            size_t want = data[at++];
            n = want < size - at ? want : size - at;
        }
        zmq_send(from, data + at, n, f + 1 < frames ? ZMQ_SNDMORE : 0);
        at += n;
    }
    wire_msg m;
    int rc = wire_recv(to, is_router, 0, &m);
    if (rc == 0) s_walk(&m);
    wire_msg_clear(&m);
    /* nothing may be left half-read */
    zmq_msg_t left;
    zmq_msg_init(&left);
    if (zmq_msg_recv(&left, to, ZMQ_DONTWAIT) >= 0) __builtin_trap();
    zmq_msg_close(&left);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    s_round(s_dealer, s_router, 1, data, size); /* worker -> coordinator */
    s_round(s_pair_a, s_pair_b, 0, data, size); /* coordinator -> worker */
    return 0;
}
