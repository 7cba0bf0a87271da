/*
 * worker_link.c - the coordinator's side of the conversation with each
 * worker: read and validate what arrives on the ROUTER socket, send Place
 * and batches. A message that fails validation is dropped and counted; a
 * worker whose answer is wrong (sizes, request id, NaN where its input had
 * none) is quarantined.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"

static const char *s_state_names[] = {"starting", "placing", "up", "hung", "down", "failed", "quarantined"};

const char *link_state_name(link_state st) { return s_state_names[st]; }

void link_set_state(worker_link *w, link_state st, const char *reason) {
    w->state = st;
    w->state_since_ns = coli_now_ns();
    snprintf(w->reason, sizeof w->reason, "%s", reason ? reason : "");
}

void link_count_sent(worker_link *w, const Coli__Envelope *env, size_t payload_bytes) {
    w->stats.bytes_sent += coli__envelope__get_packed_size(env) + payload_bytes;
    w->stats.messages_sent++;
}

void link_starting(worker_link *w) {
    w->req.id = 0;
    w->req.hung_id = 0;
    w->place.hello_ok = 0;
    cache_restart(w);
    link_set_state(w, LINK_STARTING, "");
    w->last_seen_ns = coli_now_ns();
}

// ---------------------------------------------------------------------------
link_sent link_send_place(sched *s, worker_link *w) {
    size_t n = 0;
    for (size_t i = 0; i < (size_t)s->model.n_layer * (size_t)s->model.n_expert; i++) n += cache_place_has(s, w, i);
    Coli__ExpertRef *refs = calloc(n ? n : 1, sizeof *refs);
    Coli__ExpertRef **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!refs || !ptrs) {
        free(refs);
        free(ptrs);
        coli_fail(COLI_ENOMEM, "worker %d: place message", w->id);
        return LINK_SEND_ERROR;
    }
    size_t k = 0;
    w->place.owned_bytes = 0;
    for (int l = 0; l < s->model.n_layer; l++)
        for (int e = 0; e < s->model.n_expert; e++)
            if (cache_place_has(s, w, (size_t)l * (size_t)s->model.n_expert + (size_t)e)) {
                coli__expert_ref__init(&refs[k]);
                refs[k].layer = l;
                refs[k].expert = e;
                ptrs[k] = &refs[k];
                k++;
                w->place.owned_bytes += s->model.expert_bytes[l];
            }
    w->place.owned_experts = n;
    Coli__Place p = COLI__PLACE__INIT;
    p.model_path = s->model.path;
    p.model_size = s->model.size;
    p.header_hash = s->model.hash;
    p.n_experts = n;
    p.experts = ptrs;
    p.cache = w->cache != NULL;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_PLACE;
    env.place = &p;
    link_sent rc = link_send(s, w, &env, NULL, 0, ZMQ_DONTWAIT);
    free(refs);
    free(ptrs);
    if (rc == LINK_SENT && (w->state == LINK_UP || w->state == LINK_HUNG))
        w->place.replacing++; /* a host's set changes (host_tier.c): it keeps serving meanwhile */
    else if (rc == LINK_SENT)
        link_set_state(w, LINK_PLACING, "");
    return rc;
}

/* w->req.row_pair / w->req.x hold the rows, grouped by expert (see scheduler.c). */
link_sent link_send_batch(sched *s, worker_link *w, int layer, int allow_load) {
    int64_t n_groups = 0;
    Coli__Group *g = calloc((size_t)w->req.n_rows, sizeof *g);
    Coli__Group **gp = calloc((size_t)w->req.n_rows, sizeof *gp);
    if (!g || !gp) {
        free(g);
        free(gp);
        coli_fail(COLI_ENOMEM, "worker %d: batch message", w->id);
        return LINK_SEND_ERROR;
    }
    for (int64_t r = 0; r < w->req.n_rows; r++) {
        int32_t e = s->call.ids[w->req.row_pair[r]];
        if (n_groups == 0 || g[n_groups - 1].expert != e) {
            coli__group__init(&g[n_groups]);
            g[n_groups].expert = e;
            g[n_groups].row_begin = r;
            gp[n_groups] = &g[n_groups];
            n_groups++;
        }
        g[n_groups - 1].n_rows++;
    }
    Coli__ExpertBatch b = COLI__EXPERT_BATCH__INIT;
    b.layer = layer;
    b.dtype = 0;
    b.n_embd = s->model.n_embd;
    b.n_rows = w->req.n_rows;
    b.n_groups = (size_t)n_groups;
    b.groups = gp;
    b.allow_load = allow_load;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.request_id = ++s->call.next_req;
    env.body_case = COLI__ENVELOPE__BODY_BATCH;
    env.batch = &b;
    size_t x_bytes = (size_t)w->req.n_rows * (size_t)s->model.n_embd * sizeof(float);
    /* the ring when this batch fits it; else (or for remote workers) ZeroMQ */
    link_sent rc;
    if (w->shm.ring.base && ring_fits(&w->shm.ring, &env, x_bytes)) {
        rc = ring_send(&w->shm.ring, RING_REQ, &env, w->req.x, x_bytes) == 0 ? LINK_SENT : LINK_SEND_ERROR;
        if (rc == LINK_SENT) link_count_sent(w, &env, x_bytes);
    } else {
        rc = link_send(s, w, &env, w->req.x, x_bytes, ZMQ_DONTWAIT); /* counts what it sends */
    }
    free(g);
    free(gp);
    if (rc == LINK_SENT) {
        w->req.id = env.request_id;
        w->req.sent_ns = coli_now_ns();
    }
    return rc;
}

// ---------------------------------------------------------------------------
static void s_on_hello(sched *s, worker_link *w, const Coli__Hello *h) {
    if (w->state != LINK_STARTING || w->place.hello_ok) return;
    snprintf(w->place.device_name, sizeof w->place.device_name, "%s", h->device_name ? h->device_name : "");
    w->place.caps_budget = h->memory_budget;
    w->place.caps_types = (uint64_t)h->dtype_mask_hi << 32 | h->dtype_mask;
    w->place.caps_acts = h->act_mask;
    if (h->status != COLI__STATUS__STATUS_OK) {
        const char *why = h->reason && *h->reason ? h->reason : "worker said FAILED";
        char code[24]; /* a diagnostic the reason names (e.g. the xdna lane's PACKAGE_MISSING) counts as itself */
        const char *kind = wire_reason_code(why, code, sizeof code);
        if (!kind) kind = !strncmp(why, "busy", 4) ? "busy" : strstr(why, "no device") ? "no_device" : "plugin_load";
        sched_outcome(s, w, LINK_REFUSED, kind, why);
        return;
    }
    char why[256]; /* an OK hello we cannot work with: refused now, not handed experts */
    const char *kind = wire_hello_check(h, why, sizeof why);
    if (kind) {
        sched_outcome(s, w, LINK_REFUSED, kind, why);
        sup_kill(s, w); /* it said OK: it would not leave by itself */
        return;
    }
    w->place.hello_ok = 1;
    if (s->place.started && link_send_place(s, w) != LINK_SENT) sched_outcome(s, w, LINK_LOST, "crash", NULL);
}

// ---------------------------------------------------------------------------
// Partial residency: a placed expert the worker could not hold goes to the
// CPU path (a CPU worker loads it on demand, else in-process), counted as a
// fallback of that device with its reason; the first few by name on stderr.

#define SHOW_REFUSED 3
#define MAX_REFUSAL_KINDS 8

typedef struct refusal_tally {
    int shown;
    uint64_t more; /* refused beyond the first SHOW_REFUSED */
    char kind[MAX_REFUSAL_KINDS][24];
    uint64_t count[MAX_REFUSAL_KINDS]; /* of the `more` ones, by kind */
    int n_kinds;
} refusal_tally;

static void s_refuse(sched *s, worker_link *w, int l, int e, const char *kind, const char *why, refusal_tally *t) {
    size_t i = (size_t)l * (size_t)s->model.n_expert + (size_t)e;
    s->place.owner[i] = -1;
    if (s->place.home[i] == w->id) s->place.home[i] = -1; /* its home cannot hold it: no return either */
    s->place.refused_by[i] |= 1ULL << w->id;
    w->place.owned_experts--;
    w->place.owned_bytes -= s->model.expert_bytes[l];
    w->place.refused_experts++;
    sched_outcome(s, w, LINK_EXPERT_REFUSED, kind, why);
    if (t->shown < SHOW_REFUSED) {
        t->shown++;
        fprintf(stderr, "colibri: %s: blk.%d expert %d: %s (%s); it stays on the CPU path\n", w->device, l, e, kind,
                why && *why ? why : "no reason given");
        return;
    }
    t->more++;
    int k = 0;
    while (k < t->n_kinds && strcmp(t->kind[k], kind)) k++;
    if (k == t->n_kinds && k < MAX_REFUSAL_KINDS) snprintf(t->kind[t->n_kinds++], sizeof t->kind[0], "%s", kind);
    if (k < t->n_kinds) t->count[k]++;
}

static void s_refusal_summary(const worker_link *w, const refusal_tally *t) {
    if (!t->more) return;
    char counts[256] = "";
    size_t len = 0;
    for (int k = 0; k < t->n_kinds && len < sizeof counts; k++)
        len += (size_t)snprintf(counts + len, sizeof counts - len, "%s%s %llu", k ? ", " : "", t->kind[k],
                                (unsigned long long)t->count[k]);
    fprintf(stderr, "colibri: %s: %llu more expert%s left on CPU (%s)\n", w->device, (unsigned long long)t->more,
            t->more == 1 ? "" : "s", counts);
}

/* Every expert placed on w that its reply does not list as held is refused:
 * with the worker's reason when it gave one, else "missing". */
static int s_take_refusals(sched *s, worker_link *w, const Coli__PlaceAck *a) {
    const size_t n_slots = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    unsigned char *mark = calloc(n_slots, 1); /* 1 held, 2 refused (handled) */
    if (!mark) return coli_fail(COLI_ENOMEM, "worker %d: place reply", w->id);
    refusal_tally t = {0};
    for (size_t i = 0; i < a->n_resident; i++) {
        int l = a->resident[i]->layer, e = a->resident[i]->expert;
        if (l >= 0 && l < s->model.n_layer && e >= 0 && e < s->model.n_expert)
            mark[(size_t)l * (size_t)s->model.n_expert + (size_t)e] = 1;
    }
    for (size_t i = 0; i < a->n_refused; i++) {
        const Coli__RefusedExpert *r = a->refused[i];
        if (r->layer < 0 || r->layer >= s->model.n_layer || r->expert < 0 || r->expert >= s->model.n_expert) continue;
        size_t k = (size_t)r->layer * (size_t)s->model.n_expert + (size_t)r->expert;
        if (s->place.owner[k] != w->id || mark[k]) continue;
        mark[k] = 2;
        s_refuse(s, w, r->layer, r->expert, r->kind && *r->kind ? r->kind : "load", r->reason, &t);
    }
    for (size_t k = 0; k < n_slots; k++)
        if (s->place.owner[k] == w->id && !mark[k])
            s_refuse(s, w, (int)(k / (size_t)s->model.n_expert), (int)(k % (size_t)s->model.n_expert), "missing",
                     "the place reply does not list it", &t);
    s_refusal_summary(w, &t);
    free(mark);
    return 0;
}

/* A reply that lists an expert it was not placed, or one outside the model,
 * or a status that is neither: NULL when none of these, else why. */
static const char *s_place_ack_malformed(sched *s, worker_link *w, const Coli__PlaceAck *a, char *why, size_t n) {
    if (wire_place_ack_check(a, s->model.n_layer, s->model.n_expert, why, n)) return why;
    for (size_t i = 0; i < a->n_resident + a->n_refused; i++) {
        int l = i < a->n_resident ? a->resident[i]->layer : a->refused[i - a->n_resident]->layer;
        int e = i < a->n_resident ? a->resident[i]->expert : a->refused[i - a->n_resident]->expert;
        if (!cache_place_has(s, w, (size_t)l * (size_t)s->model.n_expert + (size_t)e)) {
            snprintf(why, n, "place reply: lists expert %d.%d, which it was not placed", l, e);
            return why;
        }
    }
    return NULL;
}

static void s_on_place_ack(sched *s, worker_link *w, const Coli__PlaceAck *a) {
    char why_bad[192];
    if ((w->state == LINK_UP || w->state == LINK_HUNG) && w->place.replacing) {
        /* a re-Place (host_tier.c): its set may have shrunk since, so only the shape is judged */
        if (wire_place_ack_check(a, s->model.n_layer, s->model.n_expert, why_bad, sizeof why_bad))
            sched_outcome(s, w, LINK_GARBAGE, "garbage", why_bad);
        else
            host_on_replace_ack(s, w, a);
        return;
    }
    if (w->state != LINK_PLACING) {
        /* before its hello or after the answer: not a reply to anything we sent */
        if (w->state == LINK_STARTING) sched_outcome(s, w, LINK_GARBAGE, "garbage", "a place reply before its hello");
        return;
    }
    if (s_place_ack_malformed(s, w, a, why_bad, sizeof why_bad)) {
        fprintf(stderr, "colibri: worker %d (%s): %s; its experts go to the CPU path\n", w->id, w->device, why_bad);
        sched_outcome(s, w, LINK_GARBAGE, "garbage", why_bad);
        return;
    }
    if (a->status != COLI__STATUS__STATUS_OK) {
        const char *why = a->reason && *a->reason ? a->reason : "placement refused";
        sched_outcome(s, w, LINK_REFUSED, "alloc", why);
        return;
    }
    if (w->cache)
        cache_on_place_ack(s, w, a); /* what it could not take is simply not cached */
    else if (s_take_refusals(s, w, a) != 0) {
        sched_outcome(s, w, LINK_REFUSED, "alloc", coli_last_error());
        return;
    }
    w->place.resident_experts = a->resident_experts;
    w->place.resident_bytes = a->resident_bytes;
    link_set_state(w, LINK_UP, "");
    if (!w->cache) host_on_home_ack(s, w, a); /* a host that is back takes its experts back */
}

/* Is every output finite? (Checked only when every input was.) */
static int s_all_finite(const void *v, size_t n) {
    /* memcpy: a frame's bytes need not be 4-byte aligned */
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, (const char *)v + i * sizeof f, sizeof f);
        if (!isfinite(f)) return 0;
    }
    return 1;
}

/* Keep the plugin counters a result carries (names [a-z0-9_], at most 8). */
static void s_take_counters(worker_link *w, const Coli__ExpertResult *r) {
    link_stats *st = &w->stats;
    for (size_t i = 0; i < r->n_counters && i < SCHED_MAX_COUNTERS; i++) {
        const char *name = r->counters[i]->name ? r->counters[i]->name : "";
        size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (len == 0 || len != strlen(name) || len >= sizeof st->counter_name[0]) return;
        snprintf(st->counter_name[i], sizeof st->counter_name[i], "%s", name);
        st->counter_value[i] = r->counters[i]->value;
        st->n_counters = (int)i + 1;
    }
}

static void s_on_result(sched *s, worker_link *w, const wire_msg *m) {
    const Coli__ExpertResult *r = m->env->result;
    uint64_t id = m->env->request_id;
    if (w->state == LINK_DOWN) {
        s->stats.late_dropped++; /* its process is gone; its rows went elsewhere */
        return;
    }
    s_take_counters(w, r); /* a live worker's latest, even on a late or failed reply */
    if (w->state == LINK_HUNG && id == w->req.hung_id) {
        s->stats.late_dropped++; /* its work was done elsewhere already */
        w->req.hung_id = 0;
        link_set_state(w, LINK_UP, "");
        return;
    }
    if (!w->req.id || id != w->req.id) {
        char why[96];
        snprintf(why, sizeof why, "reply to request %llu, which it was not asked", (unsigned long long)id);
        sched_outcome(s, w, LINK_GARBAGE, "garbage", why);
        return;
    }
    if (r->status != COLI__STATUS__STATUS_OK) {
        char code[24]; /* a lane's decline (e.g. DECLINED_ROWS) counts as itself */
        const char *kind = wire_reason_code(r->reason, code, sizeof code);
        sched_outcome(s, w, LINK_BATCH_FAILED, kind ? kind : "error", r->reason);
        return;
    }
    size_t n = (size_t)w->req.n_rows * (size_t)s->model.n_embd;
    if (r->layer != s->call.layer || r->n_embd != s->model.n_embd || r->n_rows != w->req.n_rows || r->dtype != 0 ||
        !wire_payload_is(m, (int64_t)n)) {
        sched_outcome(s, w, LINK_GARBAGE, "garbage", "reply sizes do not match the request");
        return;
    }
    const void *out = wire_payload_data(m);
    if (w->req.x_finite && !s_all_finite(out, n)) {
        sched_outcome(s, w, LINK_GARBAGE, "garbage", "non-finite output for finite input");
        return;
    }
    sched_rows_done(s, w, out);
}

// ---------------------------------------------------------------------------
void link_dispatch(sched *s, worker_link *w, const wire_msg *m) {
    w->last_seen_ns = coli_now_ns();
    w->stats.bytes_received += coli__envelope__get_packed_size(m->env) + wire_payload_size(m);
    w->stats.messages_received++;
    switch (m->env->body_case) {
    case COLI__ENVELOPE__BODY_HELLO: s_on_hello(s, w, m->env->hello); break;
    case COLI__ENVELOPE__BODY_PLACE_ACK: s_on_place_ack(s, w, m->env->place_ack); break;
    case COLI__ENVELOPE__BODY_RESULT: s_on_result(s, w, m); break;
    case COLI__ENVELOPE__BODY_CACHE_ACK: cache_on_ack(s, w, m->env->cache_ack); break;
    case COLI__ENVELOPE__BODY_STATS: break;
    case COLI__ENVELOPE__BODY_HEARTBEAT:
        w->stats.heartbeats++;
        w->stats.rss_bytes = m->env->heartbeat->rss_bytes;
        w->stats.model_rss_bytes = m->env->heartbeat->model_rss_bytes;
        w->stats.cgroup_bytes = m->env->heartbeat->cgroup_bytes;
        /* a late reply in the ring was written before this heartbeat: take it first */
        if (w->state == LINK_HUNG) link_ring_take(s, w);
        if (w->state == LINK_HUNG && w->req.hung_id && m->env->heartbeat->last_request_id >= w->req.hung_id) {
            w->req.hung_id = 0; /* alive again; a late reply, if any, is stale now */
            link_set_state(w, LINK_UP, "");
        }
        break;
    default: { /* no body (an unknown field), or a kind only the coordinator sends */
        char why[96];
        snprintf(why, sizeof why, "a message of kind %d, which a worker does not send", (int)m->env->body_case);
        if (w->state == LINK_STARTING || w->state == LINK_PLACING)
            fprintf(stderr, "colibri: worker %d (%s): %s; its experts go to the CPU path\n", w->id, w->device, why);
        sched_outcome(s, w, LINK_GARBAGE, "garbage", why);
        break;
    }
    }
}

void link_poll(sched *s, int timeout_ms) {
    enum {
        CAP = 1 + SCHED_MAX_WORKERS * 4
    };
    zmq_pollitem_t items[CAP];
    int n = 0, any_pidfd_missing = 0;
    items[n++] = (zmq_pollitem_t){s->net.router, 0, ZMQ_POLLIN, 0};
    n += remote_poll_items(s, items + n, CAP - n);
    for (int i = 0; i < s->n_w; i++) {
        if (s->w[i].proc.pid <= 0) continue;
        if (s->w[i].proc.pidfd >= 0)
            items[n++] = (zmq_pollitem_t){NULL, s->w[i].proc.pidfd, ZMQ_POLLIN, 0};
        else
            any_pidfd_missing = 1;
    }
    if (any_pidfd_missing && (timeout_ms < 0 || timeout_ms > 20)) timeout_ms = 20; /* fall back to polling waitpid */
    if (timeout_ms != 0) {
        int bells = link_rings_arm(s, items + n, CAP - n);
        if (bells >= 0) zmq_poll(items, n + bells, timeout_ms);
        link_rings_disarm(s);
    }
    link_take_rings(s); /* before reaping: a reply written before death counts */
    for (;;) {
        wire_msg m;
        int rc = wire_recv(s->net.router, 1, ZMQ_DONTWAIT, &m);
        if (rc == COLI_ETIMEOUT || rc == COLI_EIO) break;
        int kind = 0; /* who it is when not one of ours: worker_identity.c */
        worker_link *w = rc == 0 || rc == COLI_EPROTO ? ident_find(s, m.peer, m.peer_len, &kind) : NULL;
        if (!w) {
            if (kind == 1)
                s->stats.stale_dropped++;
            else if (kind == 2)
                s->stats.impostor_dropped++;
            else
                s->stats.foreign_dropped++;
        } else if (rc == COLI_EPROTO) {
            w->last_seen_ns = coli_now_ns();
            sched_outcome(s, w, LINK_GARBAGE, "garbage", "malformed message"); /* one of ours speaks garbage */
        } else {
            link_dispatch(s, w, &m);
        }
        wire_msg_clear(&m);
    }
    remote_take(s);
}
