/*
 * host_tier.c - remote hosts as a memory tier: every expert has a home (the
 * host the plan gave it, within that host's --devices budget). When a host
 * leaves service its experts move to another remote host with budget room
 * (a re-Place: the host stays up and keeps serving; until its ack lists an
 * expert, the coordinator computes it from its own mapping), else they stay
 * with the coordinator. When the host answers its Place again, its experts
 * return and the hosts that held them drop them (another re-Place: a Place
 * is the whole set a host holds, workers/worker_serve.c). Rows follow the
 * owner map alone, so the answer is the same bytes whichever host computed
 * an expert (docs/scheduler.md, "Remote hosts as a memory tier").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/kernels/expert_ffn.h"
#include "core/prefault.h"
#include "core/strbuf.h"

int host_tier_init(sched *s) {
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    s->place.home = malloc(n * sizeof *s->place.home);
    s->place.moving = malloc(n * sizeof *s->place.moving);
    s->place.heat = calloc(n, sizeof *s->place.heat);
    if (!s->place.home || !s->place.moving || !s->place.heat) return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    for (size_t i = 0; i < n; i++) s->place.home[i] = s->place.moving[i] = -1;
    return 0;
}

void host_tier_planned(sched *s) {
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    memcpy(s->place.home, s->place.owner, n * sizeof *s->place.home);
    if (s->cfg.heat) memcpy(s->place.heat, s->cfg.heat, n * sizeof *s->place.heat);
}

void host_tier_count(sched *s, int layer, const int32_t *ids, int64_t n_pairs) {
    uint64_t *row = s->place.heat + (size_t)layer * (size_t)s->model.n_expert;
    for (int64_t p = 0; p < n_pairs; p++) row[ids[p]]++;
}

int host_place_has(const sched *s, const worker_link *w, size_t slot) {
    return s->place.owner[slot] == w->id || s->place.home[slot] == w->id || s->place.moving[slot] == w->id;
}

static uint64_t s_slot_bytes(const sched *s, size_t slot) {
    return s->model.expert_bytes[slot / (size_t)s->model.n_expert];
}

/* A remote host other than lost that can take the expert in slot now (up, a
 * home tier, within its budget; 0 = unlimited; not one that refused it or
 * whose hello's caps rule it out), the least loaded; -1 none. load: bytes
 * each worker holds or was asked to. */
static int s_host_with_room(const sched *s, const worker_link *lost, const uint64_t *load, size_t slot) {
    const uint64_t eb = s_slot_bytes(s, slot);
    int best = -1;
    for (int i = 0; i < s->n_w; i++) {
        const worker_link *h = &s->w[i];
        if (h == lost || !h->tcp.on || h->dev.cache || h->state != LINK_UP) continue;
        if (s->place.refused_by[slot] >> i & 1) continue;
        if (h->dev.budget && load[i] + eb > h->dev.budget) continue;
        if (best < 0 || load[i] < load[best]) best = i;
    }
    return best;
}

/* Re-Place every host marked in again[] (it stays up and serving). */
static void s_replace_marked(sched *s, const unsigned char *again) {
    for (int i = 0; i < s->n_w; i++) {
        worker_link *h = &s->w[i];
        if (!again[i] || (h->state != LINK_UP && h->state != LINK_HUNG)) continue;
        if (link_send_place(s, h) != LINK_SENT) sup_worker_lost(s, h, "crash", 1);
    }
}

/* No re-Place left unanswered: the move in progress is done. */
static void s_maybe_done(sched *s) {
    if (!s->stats.moves.started_ns) return;
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].place.replacing) return;
    s->stats.moves.last_seconds = (double)(coli_now_ns() - s->stats.moves.started_ns) / 1e9;
    s->stats.moves.seconds += s->stats.moves.last_seconds;
    s->stats.moves.started_ns = 0;
}

typedef struct hot_slot {
    uint64_t heat;
    size_t slot;
} hot_slot;

/* Hottest first; equal heat in (layer, expert) order. */
static int s_hotter(const void *a, const void *b) {
    const hot_slot *x = a, *y = b;
    if (x->heat != y->heat) return x->heat > y->heat ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

int host_moves_plan(const sched *s, const worker_link *lost, int32_t *dest) {
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    hot_slot *hot = malloc((n ? n : 1) * sizeof *hot);
    if (!hot) return -1;
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (s->place.owner[k] == lost->id || s->place.moving[k] == lost->id)
            hot[m++] = (hot_slot){s->place.heat ? s->place.heat[k] : 0, k};
    /* the hottest first: when the other hosts' room is short, the experts most rows need get it and
       the coordinator computes the cold ones from its mapping */
    qsort(hot, m, sizeof *hot, s_hotter);
    uint64_t load[SCHED_MAX_WORKERS];
    for (int i = 0; i < s->n_w; i++) load[i] = s->w[i].place.owned_bytes;
    for (size_t j = 0; j < m; j++) {
        int to = s_host_with_room(s, lost, load, hot[j].slot);
        dest[hot[j].slot] = to;
        if (to >= 0) load[to] += s_slot_bytes(s, hot[j].slot);
    }
    free(hot);
    return (int)m;
}

void host_on_lost(sched *s, worker_link *w) {
    if (!w->tcp.on || w->dev.cache || !s->place.home) return;
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    unsigned char again[SCHED_MAX_WORKERS] = {0};
    w->place.replacing = 0; /* whatever it was asked is answered by nobody now */
    int32_t *dest = malloc((n ? n : 1) * sizeof *dest);
    if (dest && host_moves_plan(s, w, dest) < 0) { /* out of memory: everything stays with the coordinator */
        free(dest);
        dest = NULL;
    }
    int moved = 0;
    for (size_t k = 0; k < n; k++) {
        if (s->place.owner[k] != w->id && s->place.moving[k] != w->id) continue;
        int to = dest ? dest[k] : -1;
        s->place.owner[k] = -1; /* the coordinator computes it until a host has it */
        s->place.moving[k] = to;
        moved++;
        if (to >= 0) {
            again[to] = 1;
            continue;
        }
        s->stats.moves.to_coord++;
        s->stats.moves.to_coord_bytes += s_slot_bytes(s, k);
    }
    free(dest);
    if (!moved) return;
    s->stats.moves.events++;
    if (!s->stats.moves.started_ns) s->stats.moves.started_ns = coli_now_ns();
    if (s->verbose) fprintf(stderr, "colibri: %s lost: %d experts to move\n", w->device, moved);
    s_replace_marked(s, again);
    s_maybe_done(s); /* nothing sent: everything stayed with the coordinator */
}

/* mark[slot] = 1 for each expert a place reply lists as held. NULL: out of memory. */
static unsigned char *s_held(const sched *s, const Coli__PlaceAck *a) {
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    unsigned char *mark = calloc(n ? n : 1, 1);
    for (size_t i = 0; mark && i < a->n_resident; i++) {
        int l = a->resident[i]->layer, e = a->resident[i]->expert;
        if (l >= 0 && l < s->model.n_layer && e >= 0 && e < s->model.n_expert)
            mark[(size_t)l * (size_t)s->model.n_expert + (size_t)e] = 1;
    }
    return mark;
}

void host_on_replace_ack(sched *s, worker_link *w, const Coli__PlaceAck *a) {
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    unsigned char *held = s_held(s, a);
    for (size_t k = 0; held && k < n; k++) {
        if (s->place.moving[k] != w->id) continue;
        uint64_t eb = s_slot_bytes(s, k);
        s->place.moving[k] = -1;
        if (held[k]) { /* routed to it from the next assignment on */
            s->place.owner[k] = w->id;
            s->stats.moves.to_hosts++;
            s->stats.moves.to_hosts_bytes += eb;
            continue;
        }
        s->place.refused_by[k] |= 1ULL << w->id; /* it stays with the coordinator */
        w->place.owned_experts--;
        w->place.owned_bytes -= eb;
        w->place.refused_experts++;
        s->stats.moves.to_coord++;
        s->stats.moves.to_coord_bytes += eb;
    }
    free(held);
    if (a->status == COLI__STATUS__STATUS_OK) {
        w->place.resident_experts = a->resident_experts;
        w->place.resident_bytes = a->resident_bytes;
    }
    if (w->place.replacing > 0) w->place.replacing--;
    s_maybe_done(s);
}

void host_on_home_ack(sched *s, worker_link *w, const Coli__PlaceAck *a) {
    const size_t n = (size_t)s->model.n_layer * (size_t)s->model.n_expert;
    unsigned char again[SCHED_MAX_WORKERS] = {0};
    unsigned char *held = s_held(s, a);
    uint64_t back = 0;
    for (size_t k = 0; held && k < n; k++) {
        if (!held[k] || s->place.home[k] != w->id || s->place.owner[k] == w->id) continue;
        int guest = s->place.owner[k], asked = s->place.moving[k];
        uint64_t eb = s_slot_bytes(s, k);
        s->place.owner[k] = w->id;
        s->place.moving[k] = -1;
        for (int g = 0; g < 2; g++) { /* the host that held it, and one asked to: both drop it */
            int h = g ? asked : guest;
            if (h < 0 || h == w->id) continue;
            s->w[h].place.owned_experts--;
            s->w[h].place.owned_bytes -= eb;
            again[h] = 1;
        }
        back++;
        s->stats.moves.returned++;
        s->stats.moves.returned_bytes += eb;
    }
    free(held);
    if (back && s->verbose)
        fprintf(stderr, "colibri: %s is back: %llu experts return\n", w->device, (unsigned long long)back);
    s_replace_marked(s, again);
}

// ---------------------------------------------------------------------------
void host_moves_json(const sched *s, coli_strbuf *b) {
    const host_moves *m = &s->stats.moves;
    coli_strbuf_appendf(b,
                        ",\"expert_moves\":{\"hosts_lost\":%llu,\"to_hosts\":%llu,\"to_hosts_bytes\":%llu,"
                        "\"to_coordinator\":%llu,\"to_coordinator_bytes\":%llu,\"returned\":%llu,"
                        "\"returned_bytes\":%llu,\"bytes_moved\":%llu,\"move_seconds\":%.6f,\"last_move_seconds\":%.6f,"
                        "\"in_progress\":%d}",
                        (unsigned long long)m->events, (unsigned long long)m->to_hosts,
                        (unsigned long long)m->to_hosts_bytes, (unsigned long long)m->to_coord,
                        (unsigned long long)m->to_coord_bytes, (unsigned long long)m->returned,
                        (unsigned long long)m->returned_bytes,
                        (unsigned long long)(m->to_hosts_bytes + m->to_coord_bytes + m->returned_bytes), m->seconds,
                        m->last_seconds, m->started_ns != 0);
}

void host_moves_text(const sched *s, coli_strbuf *b) {
    const host_moves *m = &s->stats.moves;
    if (!m->events && !m->returned) return;
    coli_strbuf_appendf(b,
                        "  expert moves: %llu host%s lost; %llu experts (%.1f MiB) to other hosts, %llu (%.1f MiB) to "
                        "the coordinator, %llu (%.1f MiB) back home; %.3f s moving (latest %.3f s)\n",
                        (unsigned long long)m->events, m->events == 1 ? "" : "s", (unsigned long long)m->to_hosts,
                        (double)m->to_hosts_bytes / 1048576.0, (unsigned long long)m->to_coord,
                        (double)m->to_coord_bytes / 1048576.0, (unsigned long long)m->returned,
                        (double)m->returned_bytes / 1048576.0, m->seconds, m->last_seconds);
}

// ---------------------------------------------------------------------------
// What the coordinator prefaults (coordinator/api.c): not a host's experts.

static int s_cmp_range(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const coli_byte_range *)a)->p, y = (uintptr_t)((const coli_byte_range *)b)->p;
    return x < y ? -1 : x > y;
}

/* The three expert tensors of layer l (gate, up, down of all its experts) into ex[*k..]. */
static int s_expert_extents(const gguf_file *f, int l, int n_expert, coli_byte_range *ex, int *k) {
    expert_weights first, last;
    int rc = expert_weights_from_gguf(f, l, 0, &first);
    if (rc == 0) rc = expert_weights_from_gguf(f, l, n_expert - 1, &last);
    if (rc) return rc;
    const expert_part_bytes b = expert_parts_bytes(&last);
    const void *lo[3] = {first.gate, first.up, first.down}, *hi[3] = {last.gate, last.up, last.down};
    const size_t n[3] = {b.gate, b.up, b.down};
    for (int i = 0; i < 3; i++)
        ex[(*k)++] = (coli_byte_range){lo[i], (size_t)((const char *)hi[i] - (const char *)lo[i]) + n[i]};
    return 0;
}

/* [base, base + size) less the sorted ranges ex[0..k) into out (appended at *n). */
static void s_complement(const char *base, size_t size, coli_byte_range *ex, int k, coli_byte_range *out, int *n) {
    qsort(ex, (size_t)k, sizeof *ex, s_cmp_range);
    const char *at = base, *end = base + size;
    for (int i = 0; i < k; i++) {
        const char *a = ex[i].p, *b = a + ex[i].n;
        if (a > at) out[(*n)++] = (coli_byte_range){at, (size_t)(a - at)};
        if (b > at) at = b;
    }
    if (end > at) out[(*n)++] = (coli_byte_range){at, (size_t)(end - at)};
}

int moe_exec_prefault_ranges(moe_exec *e, const gguf_file *f, int n_layer, int n_expert, coli_byte_range **out,
                             int *n) {
    *out = NULL;
    *n = 0;
    if (!e->computes_here) {
        coli_byte_range *r = malloc(sizeof *r);
        if (!r) return coli_fail(COLI_ENOMEM, "prefault: out of memory");
        *r = (coli_byte_range){gguf_base(f), gguf_size(f)};
        *out = r;
        *n = 1;
        return 0;
    }
    size_t cap = 3 * (size_t)n_layer + 1 + 3 * (size_t)n_layer * (size_t)n_expert + 3 * (size_t)n_layer;
    coli_byte_range *ex = malloc((3 * (size_t)n_layer + 1) * sizeof *ex), *r = malloc(cap * sizeof *r);
    int k = 0, rc = !ex || !r ? coli_fail(COLI_ENOMEM, "prefault: out of memory") : 0;
    for (int l = 0; rc == 0 && l < n_layer; l++)
        if (expert_layer_present(f, l)) rc = s_expert_extents(f, l, n_expert, ex, &k);
    if (rc == 0) s_complement(gguf_base(f), gguf_size(f), ex, k, r, n);
    for (int l = 0; rc == 0 && l < n_layer; l++)
        for (int x = 0, present = expert_layer_present(f, l); present && x < n_expert; x++) {
            expert_weights w;
            if (!e->computes_here(e, l, x) || expert_weights_from_gguf(f, l, x, &w) != 0) continue;
            const expert_part_bytes b = expert_parts_bytes(&w);
            r[(*n)++] = (coli_byte_range){w.gate, b.gate};
            r[(*n)++] = (coli_byte_range){w.up, b.up};
            r[(*n)++] = (coli_byte_range){w.down, b.down};
        }
    free(ex);
    if (rc) {
        free(r);
        *n = 0;
        return rc;
    }
    *out = r;
    return 0;
}
