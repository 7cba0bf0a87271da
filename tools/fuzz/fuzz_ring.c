/*
 * fuzz_ring.c - libFuzzer target for the shared-memory ring reader
 * (proto/shm_ring.c): the input's first 24 bytes become a slot header the
 * peer wrote (sequence, header bytes, payload bytes; the sizes folded so
 * that both in- and out-of-range values occur), the rest the slot's data;
 * ring_recv must refuse or return a message whose header and payload lie
 * inside the slot. Then the same bytes as a ring's control page:
 * ring_attach must refuse anything but a well-formed ring.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto/shm_ring.h"

static shm_ring s_ring;
static volatile unsigned s_sink;

/* The slot header layout of shm_ring.c (its first fields). */
typedef struct slot_head {
    uint32_t state, waiting;
    uint64_t seq, head_bytes, payload_bytes;
} slot_head;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return ring_create(&s_ring, 1, 4, 16) == 0 ? 0 : 1;
}

static uint64_t s_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void s_slot(const uint8_t *data, size_t size) {
    if (size < 24) return;
    slot_head *sl = (slot_head *)((unsigned char *)s_ring.base + 64); /* ctl fields, then slot[0] */
    uint64_t seq = s_u64(data), hb = s_u64(data + 8), pb = s_u64(data + 16);
    /* mostly the next message, sizes mostly near the room */
    sl->seq = seq & 1 ? s_ring.taken[RING_REQ] + 1 : seq;
    sl->head_bytes = hb & 1 ? (hb >> 1) % (s_ring.head_cap + 64) : hb;
    sl->payload_bytes = pb & 1 ? (pb >> 1) % (s_ring.payload_cap + 64) : pb;
    size_t room = s_ring.head_cap + s_ring.payload_cap, n = size - 24 < room ? size - 24 : room;
    memcpy(s_ring.data[RING_REQ], data + 24, n);
    __atomic_store_n(&sl->state, 1, __ATOMIC_SEQ_CST);
    wire_msg m;
    if (ring_recv(&s_ring, RING_REQ, &m) == 0) {
        const unsigned char *p = wire_payload_data(&m);
        for (size_t i = 0, k = wire_payload_size(&m); i < k; i++) s_sink += p[i];
    }
    wire_msg_clear(&m);
    ring_release(&s_ring, RING_REQ);
    s_ring.taken[RING_REQ] = 0; /* every input starts from a fresh ring's sequence */
}

static void s_attach(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz-ring", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t len = size < 16384 ? size : 16384;
    int b0 = dup(fd), b1 = dup(fd); /* stand-ins for the doorbells */
    /* at least a control page, so that the header checks are reached */
    if (write(fd, data, len) != (ssize_t)len || ftruncate(fd, len < 4096 ? 4096 : (off_t)len) != 0) {
        close(fd), close(b0), close(b1);
        return;
    }
    shm_ring r;
    int rc = ring_attach(&r, fd, b0, b1, 1);
    if (rc == 0) {
        wire_msg m = {0}; /* cleared below even when nothing was read */
        if (ring_ready(&r, RING_REQ) && ring_recv(&r, RING_REQ, &m) == 0) {
            const unsigned char *p = wire_payload_data(&m);
            for (size_t i = 0, k = wire_payload_size(&m); i < k; i++) s_sink += p[i];
        }
        wire_msg_clear(&m);
    }
    if (r.fd < 0) /* refused before it took the fds */
        close(fd), close(b0), close(b1);
    ring_close(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    s_slot(data, size);
    s_attach(data, size);
    return 0;
}
