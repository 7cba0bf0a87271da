/*
 * shm_ring.h - the shared-memory data path between the coordinator and one
 * local worker (docs/scheduler.md, "Shared-memory data path").
 *
 * One memfd per worker generation, mapped by both: a control page, then a
 * request slot (coordinator -> worker) and a reply slot (worker ->
 * coordinator), each big enough for the largest batch. A slot carries the
 * very message the ZeroMQ path would carry (packed Envelope + raw F32
 * payload), so request ids, validation and failure handling are the same
 * on both paths; only the transport differs.
 *
 * Ownership: a slot whose state word is EMPTY belongs to its writer, FULL to
 * its reader. The reader spins briefly on the state word, then sleeps on an
 * eventfd "doorbell" that sits in the same poll set as its ZeroMQ socket
 * and pidfds (a futex could not be waited on together with those). The
 * writer rings the doorbell only when the reader said it sleeps.
 *
 * Neither side trusts the other's header: every size is checked against
 * the capacities the reader computed itself before a byte is read.
 */
#ifndef COLI_PROTO_SHM_RING_H
#define COLI_PROTO_SHM_RING_H

#include <stddef.h>
#include <stdint.h>

#include "proto/wire.h"

enum {
    RING_REQ = 0,
    RING_REP = 1
}; /* slot: request / reply */

/* One spin-wait step (PAUSE on x86: frees the core's pipeline for its sibling). */
static inline void ring_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct ring_slot ring_slot;
typedef struct ring_ctl ring_ctl;

typedef struct shm_ring {
    int live;   /* 0: all-zero, nothing to close (a calloc'd ring is valid) */
    void *base; /* the mapping, NULL when not set up */
    size_t size;
    int fd;             /* the memfd */
    int bell[2];        /* eventfds: wake the worker (REQ) / the coordinator (REP) */
    size_t head_cap;    /* bytes for a packed Envelope in each slot */
    size_t payload_cap; /* bytes for the payload in each slot */
    ring_ctl *ctl;
    unsigned char *data[2];     /* start of each slot's data (head, then payload) */
    uint64_t sent[2], taken[2]; /* messages written / read per slot, by this side */
    unsigned char *head_copy;   /* (head_cap) private copy of a header before unpacking */
} shm_ring;

/* Coordinator: a fresh ring for worker generation gen, with room for
 * max_rows rows of n_embd F32 each way. The fds are close-on-exec; the
 * supervisor clears that in the child only. */
int ring_create(shm_ring *r, unsigned gen, int64_t max_rows, int64_t n_embd);
/* Worker: map the ring the coordinator made (fds inherited), checking its
 * magic, version, generation and that its slots fit the file. */
int ring_attach(shm_ring *r, int fd, int bell_req, int bell_rep, unsigned gen);
void ring_close(shm_ring *r);

/* 1 if a message with this envelope and payload fits one slot. */
int ring_fits(const shm_ring *r, Coli__Envelope *env, size_t payload_bytes);
/* Write a message into slot dir and mark it FULL (ringing the doorbell if
 * the reader sleeps). COLI_EIO (errno EBUSY): the slot still belongs to the reader;
 * COLI_ERANGE: it does not fit (send it over ZeroMQ). */
int ring_send(shm_ring *r, int dir, Coli__Envelope *env, const void *payload, size_t payload_bytes);
/* Like ring_send, but the slot header lies about the sizes (fault tests). */
int ring_send_garbage(shm_ring *r, int dir);
/* 1 if slot dir holds a message for its reader. */
int ring_ready(const shm_ring *r, int dir);
/* Read the message in slot dir: out->env unpacked, payload pointing into
 * the slot (valid until ring_release). COLI_EPROTO for a slot whose sizes,
 * sequence number or header are wrong (out->env stays NULL). */
int ring_recv(shm_ring *r, int dir, wire_msg *out);
/* Give slot dir back to its writer. */
void ring_release(shm_ring *r, int dir);
/* Spin up to spin_ns for slot dir; 1 if it became ready. */
int ring_spin(const shm_ring *r, int dir, uint64_t spin_ns);
/* Before sleeping on bell[dir]: say so, then re-check. Returns 1 if the slot
 * is already ready (do not sleep). Call ring_sleep_end after waking. */
int ring_sleep_begin(shm_ring *r, int dir);
void ring_sleep_end(shm_ring *r, int dir);

#endif
