/*
 * link_ring.c - the coordinator's side of the shared-memory data path
 * (proto/shm_ring.h): take replies from the workers' rings, spin
 * briefly while requests are in flight, arm the doorbells before a
 * blocking poll. A reply read from a ring goes through the same handlers
 * as one read from the ROUTER socket (link_dispatch), so ids, sizes and
 * NaNs are checked the same way; a slot whose own header lies is garbage.
 */
#include <string.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"

/* A ring whose process we still believe in (a dead one's last words are dropped). */
static int s_ring_live(const worker_link *w) {
    return w->shm.ring.base &&
           (w->state == LINK_UP || w->state == LINK_HUNG || w->state == LINK_STARTING || w->state == LINK_PLACING);
}

/* We expect a reply on w's ring: a request in flight, or a late one. */
static int s_ring_awaited(const worker_link *w) {
    return s_ring_live(w) && (w->req.id || (w->state == LINK_HUNG && w->req.hung_id));
}

// ---------------------------------------------------------------------------
void link_ring_take(sched *s, worker_link *w) {
    if (!s_ring_live(w) || !ring_ready(&w->shm.ring, RING_REP)) return;
    wire_msg m;
    int rc = ring_recv(&w->shm.ring, RING_REP, &m);
    if (rc != 0) {
        ring_release(&w->shm.ring, RING_REP);
        sched_outcome(s, w, LINK_GARBAGE, "garbage", "garbage in the shared-memory ring");
        return;
    }
    w->shm.replies++;
    link_dispatch(s, w, &m); /* reads the payload in place ... */
    wire_msg_clear(&m);
    ring_release(&w->shm.ring, RING_REP); /* ... so the slot goes back only now */
}

void link_take_rings(sched *s) {
    for (int i = 0; i < s->n_w; i++) link_ring_take(s, &s->w[i]);
}

void link_spin_rings(sched *s) {
    uint64_t until = coli_now_ns() + s->lim.spin_ns;
    for (;;) {
        int awaited = 0, got = 0;
        for (int i = 0; i < s->n_w; i++) {
            worker_link *w = &s->w[i];
            if (!w->req.id || !s_ring_live(w)) continue;
            if (ring_ready(&w->shm.ring, RING_REP)) {
                link_ring_take(s, w);
                got = 1;
            }
            awaited += w->req.id != 0;
        }
        uint64_t now = coli_now_ns();
        if (!awaited) return;
        if (got)
            until = now + s->lim.spin_ns;
        else if (now >= until)
            return;
        for (int k = 0; k < 32; k++) ring_pause();
    }
}

// ---------------------------------------------------------------------------
int link_rings_arm(sched *s, zmq_pollitem_t *items, int max_items) {
    int n = 0;
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (!s_ring_awaited(w) || n == max_items) continue;
        if (ring_sleep_begin(&w->shm.ring, RING_REP)) return -1;
        items[n++] = (zmq_pollitem_t){NULL, w->shm.ring.bell[RING_REP], ZMQ_POLLIN, 0};
    }
    return n;
}

void link_rings_disarm(sched *s) {
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].shm.ring.base) ring_sleep_end(&s->w[i].shm.ring, RING_REP);
}
