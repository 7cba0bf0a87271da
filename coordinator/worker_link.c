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

#include "coordinator/sched_internal.h"
#include "coordinator/xdna_lane.h"
#include "error.h"

static const char *s_state_names[] = {"starting", "placing", "up", "hung", "down", "failed", "quarantined"};

const char *link_state_name(link_state st)
{
    return s_state_names[st];
}

void link_set_state(worker_link *w, link_state st, const char *reason)
{
    w->state = st;
    w->state_since_ns = wire_now_ns();
    snprintf(w->reason, sizeof w->reason, "%s", reason ? reason : "");
}

// ---------------------------------------------------------------------------
int link_send_place(sched *s, worker_link *w)
{
    size_t n = 0;
    for (size_t i = 0; i < (size_t)s->n_layer * (size_t)s->n_expert; i++)
        n += s->owner[i] == w->id;
    Coli__ExpertRef *refs = calloc(n ? n : 1, sizeof *refs);
    Coli__ExpertRef **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!refs || !ptrs) {
        free(refs);
        free(ptrs);
        return coli_fail(COLI_ENOMEM, "worker %d: place message", w->id);
    }
    size_t k = 0;
    w->owned_bytes = 0;
    for (int l = 0; l < s->n_layer; l++)
        for (int e = 0; e < s->n_expert; e++)
            if (s->owner[(size_t)l * (size_t)s->n_expert + (size_t)e] == w->id) {
                coli__expert_ref__init(&refs[k]);
                refs[k].layer = l;
                refs[k].expert = e;
                ptrs[k] = &refs[k];
                k++;
                w->owned_bytes += s->expert_bytes[l];
            }
    w->owned_experts = n;
    Coli__Place p = COLI__PLACE__INIT;
    p.model_path = s->model_path;
    p.model_size = s->model_size;
    p.header_hash = s->model_hash;
    p.n_experts = n;
    p.experts = ptrs;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_PLACE;
    env.place = &p;
    int rc = link_send(s, w, &env, NULL, 0, ZMQ_DONTWAIT);
    free(refs);
    free(ptrs);
    if (rc == 0)
        link_set_state(w, LINK_PLACING, "");
    return rc;
}

//  w->row_pair / w->x hold the rows, grouped by expert (see scheduler.c).
int link_send_batch(sched *s, worker_link *w, int layer, int allow_load)
{
    int64_t n_groups = 0;
    Coli__Group *g = calloc((size_t)w->n_rows, sizeof *g);
    Coli__Group **gp = calloc((size_t)w->n_rows, sizeof *gp);
    if (!g || !gp) {
        free(g);
        free(gp);
        return coli_fail(COLI_ENOMEM, "worker %d: batch message", w->id);
    }
    for (int64_t r = 0; r < w->n_rows; r++) {
        int32_t e = s->cur_ids[w->row_pair[r]];
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
    b.n_embd = s->n_embd;
    b.n_rows = w->n_rows;
    b.n_groups = (size_t)n_groups;
    b.groups = gp;
    b.allow_load = allow_load;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.request_id = ++s->next_req;
    env.body_case = COLI__ENVELOPE__BODY_BATCH;
    env.batch = &b;
    size_t x_bytes = (size_t)w->n_rows * (size_t)s->n_embd * sizeof(float);
    /* the ring when this batch fits it; else (or for remote workers) ZeroMQ */
    int rc = w->ring.base && ring_fits(&w->ring, &env, x_bytes)
                 ? ring_send(&w->ring, RING_REQ, &env, w->x, x_bytes)
                 : link_send(s, w, &env, w->x, x_bytes, ZMQ_DONTWAIT);
    free(g);
    free(gp);
    if (rc == 0) {
        w->req_id = env.request_id;
        w->sent_ns = wire_now_ns();
    }
    return rc;
}

// ---------------------------------------------------------------------------
//  Stop a worker that answered garbage, and never use it again.
void link_quarantine(sched *s, worker_link *w, const char *why)
{
    if (w->state == LINK_QUARANTINED || w->state == LINK_DOWN || w->state == LINK_FAILED)
        return; /* out of service already: counted when it left */
    if (s->verbose)
        fprintf(stderr, "colibri: worker %d (%s) quarantined: %s\n", w->id, w->device, why);
    stats_fallback(s, w, "garbage");
    if (w->req_id)
        sched_rows_lost(s, w);
    link_set_state(w, LINK_QUARANTINED, why);
    sup_kill(s, w);
}

static void s_on_hello(sched *s, worker_link *w, const Coli__Hello *h)
{
    if (w->state != LINK_STARTING || w->hello_ok)
        return;
    snprintf(w->device_name, sizeof w->device_name, "%s", h->device_name ? h->device_name : "");
    w->caps_budget = h->memory_budget;
    if (h->status != COLI__STATUS__STATUS_OK) {
        const char *why = h->reason && *h->reason ? h->reason : "worker said FAILED";
        char code[24];
        const char *kind = sched_reason_code(why, code, sizeof code); /* e.g. PACKAGE_MISSING (xdna) */
        stats_fallback(s, w, kind ? kind : strstr(why, "no device") ? "no_device" : "plugin_load");
        link_set_state(w, LINK_FAILED, why);
        fprintf(stderr, "colibri: worker %d (%s): %s; its experts go to the CPU path\n", w->id,
                w->device, why);
        return;
    }
    w->hello_ok = 1;
    if (s->started && link_send_place(s, w) != 0)
        sup_worker_lost(s, w, "crash", 1);
}

// ---------------------------------------------------------------------------
// Partial residency: a placed expert the worker could not hold goes to the
// CPU path (a CPU worker loads it on demand, else in-process), counted as a
// fallback of that device with its reason; the first few by name on stderr.

#define SHOW_REFUSED 3
#define MAX_REFUSAL_KINDS 8

typedef struct refusal_tally {
    int shown;
    uint64_t more;                       /* refused beyond the first SHOW_REFUSED */
    char kind[MAX_REFUSAL_KINDS][24];
    uint64_t count[MAX_REFUSAL_KINDS];   /* of the `more` ones, by kind */
    int n_kinds;
} refusal_tally;

static void s_refuse(sched *s, worker_link *w, int l, int e, const char *kind, const char *why,
                     refusal_tally *t)
{
    size_t i = (size_t)l * (size_t)s->n_expert + (size_t)e;
    s->owner[i] = -1;
    s->refused_by[i] |= 1ULL << w->id;
    w->owned_experts--;
    w->owned_bytes -= s->expert_bytes[l];
    w->refused_experts++;
    stats_fallback(s, w, kind);
    if (t->shown < SHOW_REFUSED) {
        t->shown++;
        fprintf(stderr, "colibri: %s: blk.%d expert %d: %s (%s); it stays on the CPU path\n", w->device,
                l, e, kind, why && *why ? why : "no reason given");
        return;
    }
    t->more++;
    int k = 0;
    while (k < t->n_kinds && strcmp(t->kind[k], kind)) k++;
    if (k == t->n_kinds && k < MAX_REFUSAL_KINDS)
        snprintf(t->kind[t->n_kinds++], sizeof t->kind[0], "%s", kind);
    if (k < t->n_kinds) t->count[k]++;
}

static void s_refusal_summary(const worker_link *w, const refusal_tally *t)
{
    if (!t->more) return;
    char counts[256] = "";
    size_t len = 0;
    for (int k = 0; k < t->n_kinds && len < sizeof counts; k++)
        len += (size_t)snprintf(counts + len, sizeof counts - len, "%s%s %llu", k ? ", " : "",
                                t->kind[k], (unsigned long long)t->count[k]);
    fprintf(stderr, "colibri: %s: %llu more expert%s left on CPU (%s)\n", w->device,
            (unsigned long long)t->more, t->more == 1 ? "" : "s", counts);
}

//  Every expert placed on w that its reply does not list as held is refused:
//  with the worker's reason when it gave one, else "missing".
static int s_take_refusals(sched *s, worker_link *w, const Coli__PlaceAck *a)
{
    const size_t n_slots = (size_t)s->n_layer * (size_t)s->n_expert;
    unsigned char *mark = calloc(n_slots, 1); /* 1 held, 2 refused (handled) */
    if (!mark) return coli_fail(COLI_ENOMEM, "worker %d: place reply", w->id);
    refusal_tally t = {0};
    for (size_t i = 0; i < a->n_resident; i++) {
        int l = a->resident[i]->layer, e = a->resident[i]->expert;
        if (l >= 0 && l < s->n_layer && e >= 0 && e < s->n_expert)
            mark[(size_t)l * (size_t)s->n_expert + (size_t)e] = 1;
    }
    for (size_t i = 0; i < a->n_refused; i++) {
        const Coli__RefusedExpert *r = a->refused[i];
        if (r->layer < 0 || r->layer >= s->n_layer || r->expert < 0 || r->expert >= s->n_expert)
            continue;
        size_t k = (size_t)r->layer * (size_t)s->n_expert + (size_t)r->expert;
        if (s->owner[k] != w->id || mark[k]) continue;
        mark[k] = 2;
        s_refuse(s, w, r->layer, r->expert, r->kind && *r->kind ? r->kind : "load", r->reason, &t);
    }
    for (size_t k = 0; k < n_slots; k++)
        if (s->owner[k] == w->id && !mark[k])
            s_refuse(s, w, (int)(k / (size_t)s->n_expert), (int)(k % (size_t)s->n_expert), "missing",
                     "the place reply does not list it", &t);
    s_refusal_summary(w, &t);
    free(mark);
    return 0;
}

static void s_on_place_ack(sched *s, worker_link *w, const Coli__PlaceAck *a)
{
    if (w->state != LINK_PLACING)
        return;
    if (a->status != COLI__STATUS__STATUS_OK) {
        const char *why = a->reason && *a->reason ? a->reason : "placement refused";
        stats_fallback(s, w, "alloc");
        link_set_state(w, LINK_FAILED, why);
        fprintf(stderr, "colibri: worker %d (%s): %s; its experts go to the CPU path\n", w->id,
                w->device, why);
        sup_kill(s, w);
        return;
    }
    if (s_take_refusals(s, w, a) != 0) {
        stats_fallback(s, w, "alloc");
        link_set_state(w, LINK_FAILED, coli_last_error());
        sup_kill(s, w);
        return;
    }
    w->resident_experts = a->resident_experts;
    w->resident_bytes = a->resident_bytes;
    link_set_state(w, LINK_UP, "");
}

//  Is every output finite? (Checked only when every input was.)
static int s_all_finite(const void *v, size_t n)
{
    /* memcpy: a frame's bytes need not be 4-byte aligned */
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, (const char *)v + i * sizeof f, sizeof f);
        if (!isfinite(f)) return 0;
    }
    return 1;
}

//  Keep the plugin counters a result carries (names [a-z0-9_], at most 8).
static void s_take_counters(worker_link *w, const Coli__ExpertResult *r)
{
    for (size_t i = 0; i < r->n_counters && i < 8; i++) {
        const char *name = r->counters[i]->name ? r->counters[i]->name : "";
        size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (len == 0 || len != strlen(name) || len >= sizeof w->counter_name[0]) return;
        snprintf(w->counter_name[i], sizeof w->counter_name[i], "%s", name);
        w->counter_value[i] = r->counters[i]->value;
        w->n_counters = (int)i + 1;
    }
}

static void s_on_result(sched *s, worker_link *w, const wire_msg *m)
{
    const Coli__ExpertResult *r = m->env->result;
    uint64_t id = m->env->request_id;
    if (w->state != LINK_DOWN) s_take_counters(w, r);
    if (w->state == LINK_DOWN) {
        s->late_dropped++;          /* its process is gone; its rows went elsewhere */
        return;
    }
    if (w->state == LINK_HUNG && id == w->hung_req_id) {
        s->late_dropped++;          /* its work was done elsewhere already */
        w->hung_req_id = 0;
        link_set_state(w, LINK_UP, "");
        return;
    }
    if (!w->req_id || id != w->req_id) {
        char why[96];
        snprintf(why, sizeof why, "reply to request %llu, which it was not asked", (unsigned long long)id);
        link_quarantine(s, w, why);
        return;
    }
    if (r->status != COLI__STATUS__STATUS_OK) {
        if (s->verbose)
            fprintf(stderr, "colibri: worker %d (%s): %s\n", w->id, w->device, r->reason);
        char code[24];
        const char *kind = sched_reason_code(r->reason, code, sizeof code); /* a lane's decline */
        stats_fallback(s, w, kind ? kind : "error");
        sched_rows_lost(s, w);
        return;
    }
    size_t n = (size_t)w->n_rows * (size_t)s->n_embd;
    if (r->layer != s->cur_layer || r->n_embd != s->n_embd || r->n_rows != w->n_rows || r->dtype != 0 ||
        !wire_payload_is(m, (int64_t)n)) {
        link_quarantine(s, w, "reply sizes do not match the request");
        return;
    }
    const void *out = wire_payload_data(m);
    if (w->x_finite && !s_all_finite(out, n)) {
        link_quarantine(s, w, "non-finite output for finite input");
        return;
    }
    stats_latency(&w->lat, (double)(wire_now_ns() - w->sent_ns) / 1e9);
    w->batches++;
    w->rows += (uint64_t)w->n_rows;
    sched_rows_done(s, w, out);
    w->req_id = 0;
}

// ---------------------------------------------------------------------------
//  The worker a routing id names ("w<id>.<gen>" of the current generation).
static worker_link *s_find(sched *s, const wire_msg *m, int *stale)
{
    char id[32];
    *stale = 0;
    if (m->peer_len == 0 || m->peer_len >= sizeof id)
        return NULL;
    memcpy(id, m->peer, m->peer_len);
    id[m->peer_len] = 0;
    int wid;
    unsigned gen;
    char tail;
    if (sscanf(id, "w%d.%u%c", &wid, &gen, &tail) != 2 || wid < 0 || wid >= s->n_w)
        return NULL;
    worker_link *w = &s->w[wid];
    if (gen != w->gen || w->routing_len != m->peer_len) {
        *stale = gen < w->gen;
        return NULL;
    }
    return w;
}

void link_dispatch(sched *s, worker_link *w, const wire_msg *m)
{
    w->last_seen_ns = wire_now_ns();
    switch (m->env->body_case) {
    case COLI__ENVELOPE__BODY_HELLO: s_on_hello(s, w, m->env->hello); break;
    case COLI__ENVELOPE__BODY_PLACE_ACK: s_on_place_ack(s, w, m->env->place_ack); break;
    case COLI__ENVELOPE__BODY_RESULT: s_on_result(s, w, m); break;
    case COLI__ENVELOPE__BODY_HEARTBEAT:
        w->heartbeats++;
        /* a late reply in the ring was written before this heartbeat: take it first */
        if (w->state == LINK_HUNG) link_ring_take(s, w);
        if (w->state == LINK_HUNG && w->hung_req_id &&
            m->env->heartbeat->last_request_id >= w->hung_req_id) {
            w->hung_req_id = 0; /* alive again; a late reply, if any, is stale now */
            link_set_state(w, LINK_UP, "");
        }
        break;
    default: break;
    }
}

void link_poll(sched *s, int timeout_ms)
{
    enum { CAP = 1 + SCHED_MAX_WORKERS * 4 };
    zmq_pollitem_t items[CAP];
    int n = 0, any_pidfd_missing = 0;
    items[n++] = (zmq_pollitem_t){s->router, 0, ZMQ_POLLIN, 0};
    n += remote_poll_items(s, items + n, CAP - n);
    for (int i = 0; i < s->n_w; i++) {
        if (s->w[i].pid <= 0) continue;
        if (s->w[i].pidfd >= 0) items[n++] = (zmq_pollitem_t){NULL, s->w[i].pidfd, ZMQ_POLLIN, 0};
        else any_pidfd_missing = 1;
    }
    if (any_pidfd_missing && (timeout_ms < 0 || timeout_ms > 20))
        timeout_ms = 20; /* fall back to polling waitpid */
    if (timeout_ms != 0) {
        int bells = link_rings_arm(s, items + n, CAP - n);
        if (bells >= 0)
            zmq_poll(items, n + bells, timeout_ms);
        link_rings_disarm(s);
    }
    link_take_rings(s); /* before reaping: a reply written before death counts */
    for (;;) {
        wire_msg m;
        int rc = wire_recv(s->router, 1, ZMQ_DONTWAIT, &m);
        if (rc == COLI_ETIMEOUT || rc == COLI_EIO)
            break;
        int stale = 0;
        worker_link *w = rc == 0 || rc == COLI_EPROTO ? s_find(s, &m, &stale) : NULL;
        if (!w) {
            if (stale) s->stale_dropped++;
            else s->foreign_dropped++;
        } else if (rc == COLI_EPROTO) {
            w->last_seen_ns = wire_now_ns();
            link_quarantine(s, w, "malformed message"); /* one of ours speaks garbage */
        } else {
            link_dispatch(s, w, &m);
        }
        wire_msg_clear(&m);
    }
    remote_take(s);
    sup_tick(s);
}
