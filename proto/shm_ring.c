/*
 * shm_ring.c - the shared-memory data path (see shm_ring.h).
 *
 * Memory order: the writer fills a slot, then stores FULL (seq_cst); the
 * reader loads FULL (seq_cst) before it reads. The sleeping handshake is
 * Dekker's: the reader stores waiting=1 then loads state, the writer
 * stores state then loads waiting; with seq_cst at least one of them sees
 * the other's store, so a doorbell is never lost.
 */
#define _GNU_SOURCE
#include "proto/shm_ring.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/clock.h"

#define RING_MAGIC 0x474e49524c4f4355ULL /* "UCOLRING" */
#define RING_VERSION 1
#define RING_CTL_BYTES 4096
enum {
    SLOT_EMPTY = 0,
    SLOT_FULL = 1
};

struct ring_slot {            /* one direction; its own cache line */
    _Atomic uint32_t state;   /* SLOT_EMPTY / SLOT_FULL */
    _Atomic uint32_t waiting; /* the reader sleeps on the doorbell */
    uint64_t seq;             /* 1, 2, ...: messages written to this slot */
    uint64_t head_bytes;      /* packed Envelope, at the slot's start */
    uint64_t payload_bytes;   /* F32 payload, at head_cap */
    unsigned char pad[32];
};

struct ring_ctl {
    uint64_t magic;
    uint32_t version, gen;
    uint64_t head_cap, payload_cap;
    unsigned char pad[32];
    struct ring_slot slot[2];
};

_Static_assert(sizeof(struct ring_slot) == 64, "a slot header is one cache line");
_Static_assert(sizeof(struct ring_ctl) <= RING_CTL_BYTES, "the control block fits its page");

static size_t s_round(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Point the slot data at their places in the mapping. */
static void s_layout(shm_ring *r) {
    r->ctl = r->base;
    size_t slot = r->head_cap + r->payload_cap;
    r->data[RING_REQ] = (unsigned char *)r->base + RING_CTL_BYTES;
    r->data[RING_REP] = (unsigned char *)r->base + RING_CTL_BYTES + slot;
}

static void s_reset(shm_ring *r) {
    memset(r, 0, sizeof *r);
    r->fd = r->bell[0] = r->bell[1] = -1;
    r->live = 1;
}

int ring_create(shm_ring *r, unsigned gen, int64_t max_rows, int64_t n_embd) {
    s_reset(r);
    if (max_rows <= 0 || n_embd <= 0 || max_rows > ((int64_t)1 << 24) / 1 ||
        (uint64_t)max_rows * (uint64_t)n_embd > (uint64_t)COLI_MAX_MSG_BYTES / 4)
        return coli_fail(COLI_EINVAL, "shm ring: %lld rows of %lld floats is too large", (long long)max_rows,
                         (long long)n_embd);
    /* a batch header: fixed fields plus one group per row at most */
    r->head_cap = s_round(1024 + (size_t)max_rows * 32, 64);
    r->payload_cap = s_round((size_t)max_rows * (size_t)n_embd * sizeof(float), 64);
    r->size = RING_CTL_BYTES + 2 * (r->head_cap + r->payload_cap);
    r->fd = memfd_create("coli-ring", MFD_CLOEXEC);
    r->bell[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->bell[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = 0;
    if (r->fd < 0 || r->bell[0] < 0 || r->bell[1] < 0)
        rc = coli_fail(COLI_EIO, "shm ring: memfd/eventfd: %s", strerror(errno));
    else if (ftruncate(r->fd, (off_t)r->size) != 0)
        rc = coli_fail(COLI_EIO, "shm ring: size %zu bytes: %s", r->size, strerror(errno));
    else if ((r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0)) == MAP_FAILED)
        rc = coli_fail(COLI_EIO, "shm ring: map %zu bytes: %s", r->size, strerror(errno)), r->base = NULL;
    if (rc == 0 && !(r->head_copy = malloc(r->head_cap))) rc = coli_fail(COLI_ENOMEM, "shm ring: header buffer");
    if (rc) {
        ring_close(r);
        return rc;
    }
    s_layout(r);
    r->ctl->version = RING_VERSION;
    r->ctl->gen = gen;
    r->ctl->head_cap = r->head_cap;
    r->ctl->payload_cap = r->payload_cap;
    atomic_store(&r->ctl->slot[0].state, SLOT_EMPTY);
    atomic_store(&r->ctl->slot[1].state, SLOT_EMPTY);
    r->ctl->magic = RING_MAGIC; /* last: a half-made ring is never taken for one */
    return 0;
}

int ring_attach(shm_ring *r, int fd, int bell_req, int bell_rep, unsigned gen) {
    s_reset(r);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < RING_CTL_BYTES)
        return coli_fail(COLI_EPROTO, "shm ring: fd %d is not a ring (%s)", fd, errno ? strerror(errno) : "too small");
    r->fd = fd;
    r->bell[0] = bell_req;
    r->bell[1] = bell_rep;
    r->size = (size_t)st.st_size;
    r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->base == MAP_FAILED) {
        r->base = NULL;
        return coli_fail(COLI_EIO, "shm ring: map: %s", strerror(errno));
    }
    const struct ring_ctl *c = r->base;
    uint64_t hc = c->head_cap, pc = c->payload_cap;
    if (c->magic != RING_MAGIC || c->version != RING_VERSION || c->gen != gen || hc % 64 || pc % 64 || hc > r->size ||
        pc > r->size || RING_CTL_BYTES + 2 * (hc + pc) > r->size)
        return coli_fail(COLI_EPROTO,
                         "shm ring: bad header (magic, version %u, generation %u vs %u, "
                         "or slots larger than the file)",
                         c->version, c->gen, gen);
    r->head_cap = (size_t)hc;
    r->payload_cap = (size_t)pc;
    if (!(r->head_copy = malloc(r->head_cap))) return coli_fail(COLI_ENOMEM, "shm ring: header buffer");
    s_layout(r);
    return 0;
}

void ring_close(shm_ring *r) {
    if (!r->live) return;
    if (r->base) munmap(r->base, r->size);
    if (r->fd >= 0) close(r->fd);
    for (int i = 0; i < 2; i++)
        if (r->bell[i] >= 0) close(r->bell[i]);
    free(r->head_copy);
    memset(r, 0, sizeof *r);
}

// ---------------------------------------------------------------------------
int ring_fits(const shm_ring *r, Coli__Envelope *env, size_t payload_bytes) {
    env->version = COLI_PROTOCOL_VERSION;
    return r->base && coli__envelope__get_packed_size(env) <= r->head_cap && payload_bytes <= r->payload_cap;
}

/* Mark the slot FULL and wake its reader if it sleeps. */
static void s_publish(shm_ring *r, int dir) {
    struct ring_slot *sl = &r->ctl->slot[dir];
    atomic_store(&sl->state, SLOT_FULL);
    if (atomic_load(&sl->waiting)) {
        uint64_t one = 1;
        ssize_t n = write(r->bell[dir], &one, sizeof one);
        (void)n; /* EAGAIN: the counter is already non-zero, the reader wakes anyway */
    }
}

static int s_claim(shm_ring *r, int dir) {
    if (!r->base) return coli_fail(COLI_EINVAL, "shm ring: not set up");
    if (atomic_load(&r->ctl->slot[dir].state) != SLOT_EMPTY) {
        errno = EBUSY;
        return coli_fail(COLI_EIO, "shm ring: %s slot still held by its reader", dir == RING_REQ ? "request" : "reply");
    }
    return 0;
}

int ring_send(shm_ring *r, int dir, Coli__Envelope *env, const void *payload, size_t payload_bytes) {
    int rc = s_claim(r, dir);
    if (rc) return rc;
    if (!ring_fits(r, env, payload_bytes)) return coli_fail(COLI_ERANGE, "shm ring: message larger than a slot");
    struct ring_slot *sl = &r->ctl->slot[dir];
    sl->head_bytes = coli__envelope__pack(env, r->data[dir]);
    if (payload_bytes) memcpy(r->data[dir] + r->head_cap, payload, payload_bytes);
    sl->payload_bytes = payload_bytes;
    sl->seq = ++r->sent[dir];
    s_publish(r, dir);
    return 0;
}

int ring_send_garbage(shm_ring *r, int dir) {
    int rc = s_claim(r, dir);
    if (rc) return rc;
    struct ring_slot *sl = &r->ctl->slot[dir];
    sl->head_bytes = r->head_cap + 4096; /* runs past the slot */
    sl->payload_bytes = r->payload_cap * 2;
    sl->seq = ++r->sent[dir];
    s_publish(r, dir);
    return 0;
}

int ring_ready(const shm_ring *r, int dir) { return r->base && atomic_load(&r->ctl->slot[dir].state) == SLOT_FULL; }

int ring_recv(shm_ring *r, int dir, wire_msg *out) {
    memset(out, 0, sizeof *out);
    if (!ring_ready(r, dir)) return COLI_ETIMEOUT;
    const struct ring_slot *sl = &r->ctl->slot[dir];
    uint64_t hb = sl->head_bytes, pb = sl->payload_bytes, seq = sl->seq;
    if (seq != r->taken[dir] + 1)
        return coli_fail(COLI_EPROTO, "shm ring: message %llu, expected %llu", (unsigned long long)seq,
                         (unsigned long long)(r->taken[dir] + 1));
    r->taken[dir] = seq;
    if (hb == 0 || hb > r->head_cap || pb > r->payload_cap || pb % sizeof(float))
        return coli_fail(COLI_EPROTO,
                         "shm ring: slot says %llu header + %llu payload bytes, "
                         "room is %zu + %zu",
                         (unsigned long long)hb, (unsigned long long)pb, r->head_cap, r->payload_cap);
    /* unpack a private copy: the peer cannot change it under the decoder */
    memcpy(r->head_copy, r->data[dir], (size_t)hb);
    out->env = coli__envelope__unpack(NULL, (size_t)hb, r->head_copy);
    if (!out->env) return coli_fail(COLI_EPROTO, "shm ring: header is not a protocol envelope");
    if (out->env->version != COLI_PROTOCOL_VERSION) {
        uint32_t v = out->env->version;
        wire_msg_clear(out);
        return coli_fail(COLI_EPROTO, "shm ring: protocol version %u, expected %u", v, COLI_PROTOCOL_VERSION);
    }
    if (pb) {
        out->has_payload = 2;
        out->ext_payload = r->data[dir] + r->head_cap;
        out->ext_bytes = (size_t)pb;
    }
    return 0;
}

void ring_release(shm_ring *r, int dir) {
    if (r->base) atomic_store(&r->ctl->slot[dir].state, SLOT_EMPTY);
}

int ring_spin(const shm_ring *r, int dir, uint64_t spin_ns) {
    uint64_t until = coli_now_ns() + spin_ns;
    for (int i = 0;; i++) {
        if (ring_ready(r, dir)) return 1;
        if ((i & 63) == 63) {
            if (coli_now_ns() >= until) return 0;
            /* on an oversubscribed machine the peer may wait for our core */
            sched_yield();
        }
        ring_pause();
    }
}

int ring_sleep_begin(shm_ring *r, int dir) {
    if (!r->base) return 0;
    atomic_store(&r->ctl->slot[dir].waiting, 1);
    if (ring_ready(r, dir)) {
        ring_sleep_end(r, dir);
        return 1;
    }
    return 0;
}

void ring_sleep_end(shm_ring *r, int dir) {
    if (!r->base) return;
    atomic_store(&r->ctl->slot[dir].waiting, 0);
    uint64_t v;
    ssize_t n = read(r->bell[dir], &v, sizeof v); /* drain; EAGAIN when nobody rang */
    (void)n;
}
