/*
 * worker_identity.c - a local worker proves it is the process we spawned.
 *
 * Local workers reach the coordinator's ROUTER on an abstract unix address
 * that any local process may connect to, and ZeroMQ routes by the routing id
 * a peer announces. A predictable id ("w0.1") lets another process claim a
 * restarting worker's place first: it would receive the Place (model path)
 * and, on the ZeroMQ data path, activations, and lock the real worker out
 * (ROUTER refuses a second peer with an id in use). So each spawn gets a
 * fresh id with a 128-bit secret from getrandom: "w<id>.<gen>.<32 hex>". It
 * travels in a pipe that only that child inherits (--id-fd), never in argv
 * or the environment, which other processes can read under /proc. Messages
 * from any other id are dropped and counted (impostor_messages_refused when
 * the id names a live worker and generation, foreign_messages_dropped
 * otherwise); nothing is ever sent to an id we did not make. The reasoning
 * against SO_PEERCRED is in docs/scheduler.md ("Local worker identity").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"

#define SECRET_BYTES 16

int ident_new_secret(worker_link *w, int *read_fd) {
    unsigned char raw[SECRET_BYTES];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return coli_fail(COLI_EIO, "worker %d: getrandom: %s", w->id, strerror(errno));
        got += (size_t)n;
    }
    char hex[2 * SECRET_BYTES + 1];
    for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    w->proc.routing_len =
        (size_t)snprintf(w->proc.routing_id, sizeof w->proc.routing_id, "w%d.%u.%s", w->id, w->proc.gen, hex);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return coli_fail(COLI_EIO, "worker %d: identity pipe: %s", w->id, strerror(errno));
    /* far below the pipe's capacity: the write cannot block */
    ssize_t n = write(fds[1], w->proc.routing_id, w->proc.routing_len);
    close(fds[1]);
    if (n != (ssize_t)w->proc.routing_len) {
        close(fds[0]);
        return coli_fail(COLI_EIO, "worker %d: identity pipe: short write", w->id);
    }
    *read_fd = fds[0];
    return 0;
}

/* Equal bytes, in time that does not depend on where they differ. */
static int s_same(const void *a, const void *b, size_t n) {
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= ((const unsigned char *)a)[i] ^ ((const unsigned char *)b)[i];
    return d == 0;
}

worker_link *ident_find(sched *s, const void *peer, size_t peer_len, int *kind) {
    char id[64];
    *kind = 0;
    if (peer_len == 0 || peer_len >= sizeof id) return NULL;
    memcpy(id, peer, peer_len);
    id[peer_len] = 0;
    int wid, used = 0;
    unsigned gen;
    if (sscanf(id, "w%d.%u%n", &wid, &gen, &used) != 2 || wid < 0 || wid >= s->n_w) return NULL;
    worker_link *w = &s->w[wid];
    if (gen < w->proc.gen) {
        *kind = 1;
        return NULL;
    }
    if (gen > w->proc.gen || w->tcp.on) /* a remote worker never speaks on our ROUTER */
        return NULL;
    if (w->proc.routing_len != peer_len || !s_same(id, w->proc.routing_id, peer_len)) {
        *kind = 2;
        return NULL;
    }
    return w;
}
