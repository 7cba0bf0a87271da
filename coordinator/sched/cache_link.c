/*
 * cache_link.c - live expert caches, coordinator side: routing to a cache
 * worker, the CacheLoad / CacheEvict / CacheAck conversation, counters.
 * The policy itself is expert_cache.c; docs/scheduler.md has the design.
 *
 * The two rules that keep every batch valid:
 *   - a slot is routed to the cache worker only once its load is
 *     acknowledged (EC_RESIDENT), never while it is LOADING;
 *   - a slot to evict leaves routing (EC_NONE) before the CacheEvict is sent,
 *     and decisions are taken between layers, when no batch is in flight.
 * A routed pair whose expert is not resident is computed by its home tier
 * (the byte- or heat-balanced placement among the other workers) in the same
 * layer: never waited for, counted as a miss.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/expert_cache.h"
#include "coordinator/sched/expert_predict.h"
#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/kernels/matmul.h"
#include "core/strbuf.h"

typedef struct cache_worker {
    expert_cache *ec;
    uint64_t *seq_of;  /* (slots) the CacheLoad in flight for a LOADING slot; 0: its Place */
    uint64_t next_seq; /* seqs sent so far (acks name one of them) */
    int64_t *missed;   /* (slots) this layer's misses, each once */
    unsigned char *in_missed;
    int n_missed;
    expert_predictor pred; /* the next layer's router (prefetch) */
} cache_worker;

static size_t s_slots(const sched *s) { return (size_t)s->model.n_layer * (size_t)s->model.n_expert; }

static void s_cw_free(cache_worker *cw) {
    if (!cw) return;
    ec_free(cw->ec);
    free(cw->seq_of);
    free(cw->missed);
    free(cw->in_missed);
    expert_predictor_free(&cw->pred);
    free(cw);
}

static int s_first_cache(const sched *s) {
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].dev.cache) return i;
    return -1;
}

void cache_budgets(const sched *s, device_spec *d, int n) {
    uint64_t all = 0;
    for (int l = 0; l < s->model.n_layer; l++) all += s->model.expert_bytes[l] * (uint64_t)s->model.n_expert;
    cache_budgets_of(all, d, n);
}

void cache_budgets_of(uint64_t all, device_spec *d, int n) {
    for (int i = 0; i < n; i++)
        if (d[i].cache && d[i].cache_pct > 0) {
            d[i].budget = (uint64_t)(d[i].cache_pct / 100.0 * (double)all);
            if (!d[i].budget) d[i].budget = 1; /* 0 would mean "no limit" to the plugin */
        }
}

int cache_setup(sched *s, const uint64_t *heat) {
    const size_t n = s_slots(s);
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (!w->dev.cache) continue;
        cache_worker *cw = calloc(1, sizeof *cw);
        if (cw) {
            ec_params p;
            ec_default_params(&p);
            p.margin = (double)s->set.cache_margin_pct / 100.0;
            cw->pred = (expert_predictor){.gguf = s->cfg.gguf,
                                          .n_embd = s->model.n_embd,
                                          .n_expert = s->model.n_expert,
                                          .k = s->cfg.n_expert_used};
            cw->ec = ec_new(s->model.n_layer, s->model.n_expert, s->model.expert_bytes, w->dev.budget, &p);
            cw->seq_of = calloc(n, sizeof *cw->seq_of);
            cw->missed = calloc(n, sizeof *cw->missed);
            cw->in_missed = calloc(n, 1);
        }
        if (!cw || !cw->ec || !cw->seq_of || !cw->missed || !cw->in_missed) {
            s_cw_free(cw);
            return coli_fail(COLI_ENOMEM, "scheduler: expert cache of worker %d", i);
        }
        w->cache = cw;
        /* the first cache starts with the heat's hottest; a later one sees only the first's misses */
        ec_seed(cw->ec, i == s_first_cache(s) ? heat : NULL);
    }
    return 0;
}

void cache_free(sched *s) {
    for (int i = 0; i < s->n_w; i++) {
        s_cw_free(s->w[i].cache);
        s->w[i].cache = NULL;
    }
}

int cache_place_has(const sched *s, const worker_link *w, size_t slot) {
    if (!w->cache) return host_place_has(s, w, slot);
    return w->cache->ec->state[slot] != EC_NONE;
}

void cache_restart(worker_link *w) {
    if (!w->cache) return;
    ec_restart(w->cache->ec);
    memset(w->cache->seq_of, 0, (size_t)w->cache->ec->n_layer * (size_t)w->cache->ec->n_expert * sizeof(uint64_t));
}

/* Slot of an ExpertRef, or -1 when it names no slot of the model. */
static int64_t s_slot_of(const sched *s, const Coli__ExpertRef *r) {
    if (!r || r->layer < 0 || r->layer >= s->model.n_layer || r->expert < 0 || r->expert >= s->model.n_expert)
        return -1;
    return (int64_t)r->layer * s->model.n_expert + r->expert;
}

void cache_on_place_ack(sched *s, worker_link *w, const Coli__PlaceAck *a) {
    expert_cache *ec = w->cache->ec;
    const size_t n = s_slots(s);
    unsigned char *held = calloc(n, 1);
    for (size_t i = 0; held && i < a->n_resident; i++) {
        int64_t k = s_slot_of(s, a->resident[i]);
        if (k >= 0) held[k] = 1;
    }
    for (size_t k = 0; k < n; k++)
        if (ec->state[k] == EC_LOADING && w->cache->seq_of[k] == 0) ec_placed(ec, k, held && held[k]);
    free(held);
}

/* Every slot the coordinator routes to w must be in the ack's resident list. */
static int s_resident_agrees(const sched *s, const worker_link *w, const Coli__CacheAck *a) {
    const expert_cache *ec = w->cache->ec;
    size_t routed = 0, listed = 0;
    for (size_t k = 0; k < s_slots(s); k++) routed += ec->state[k] == EC_RESIDENT;
    for (size_t i = 0; i < a->n_resident; i++) {
        int64_t k = s_slot_of(s, a->resident[i]);
        if (k < 0) return 0;
        listed += ec->state[k] == EC_RESIDENT;
    }
    return listed == routed;
}

/* The ack's loaded / refused / evicted lists against what is in flight. 0 or why not. */
static const char *s_check_ack(const sched *s, const worker_link *w, const Coli__CacheAck *a) {
    const cache_worker *cw = w->cache;
    if (a->seq == 0 || a->seq > cw->next_seq) return "a cache ack for a request never sent";
    for (size_t i = 0; i < a->n_loaded + a->n_refused; i++) {
        Coli__ExpertRef ref = COLI__EXPERT_REF__INIT;
        if (i >= a->n_loaded)
            ref.layer = a->refused[i - a->n_loaded]->layer, ref.expert = a->refused[i - a->n_loaded]->expert;
        int64_t k = s_slot_of(s, i < a->n_loaded ? a->loaded[i] : &ref);
        if (k < 0 || cw->ec->state[k] != EC_LOADING || cw->seq_of[k] != a->seq)
            return "a cache ack names an expert that request did not load";
    }
    for (size_t i = 0; i < a->n_evicted; i++) {
        int64_t k = s_slot_of(s, a->evicted[i]);
        if (k < 0 || cw->ec->state[k] == EC_RESIDENT) return "a cache ack evicts an expert still routed to it";
    }
    return NULL;
}

void cache_on_ack(sched *s, worker_link *w, const Coli__CacheAck *a) {
    if (!w->cache) {
        sched_outcome(s, w, LINK_GARBAGE, "garbage", "a cache ack from a worker that is no cache");
        return;
    }
    if (w->state != LINK_UP && w->state != LINK_HUNG) return; /* out of service: its next Place decides */
    cache_worker *cw = w->cache;
    const char *bad = s_check_ack(s, w, a);
    if (!bad && a->status != COLI__STATUS__STATUS_OK) {
        int loads = 0; /* a refused load request: its experts are not held; a refused eviction is a disagreement */
        for (size_t k = 0; k < s_slots(s); k++)
            if (cw->ec->state[k] == EC_LOADING && cw->seq_of[k] == a->seq) ec_loaded(cw->ec, k, 0), loads++;
        if (!loads) bad = "the worker refused an eviction";
        if (s->verbose || !loads)
            fprintf(stderr, "colibri: worker %d (%s): cache request %llu refused: %s\n", w->id, w->device,
                    (unsigned long long)a->seq, a->reason ? a->reason : "");
    }
    for (size_t i = 0; !bad && a->status == COLI__STATUS__STATUS_OK && i < a->n_loaded; i++)
        ec_loaded(cw->ec, (size_t)s_slot_of(s, a->loaded[i]), 1);
    for (size_t i = 0; !bad && a->status == COLI__STATUS__STATUS_OK && i < a->n_refused; i++) {
        Coli__ExpertRef ref = COLI__EXPERT_REF__INIT;
        ref.layer = a->refused[i]->layer, ref.expert = a->refused[i]->expert;
        ec_loaded(cw->ec, (size_t)s_slot_of(s, &ref), 0);
    }
    if (!bad && !s_resident_agrees(s, w, a)) bad = "its resident set lacks an expert routed to it";
    if (bad) {
        sched_outcome(s, w, LINK_GARBAGE, "garbage", bad);
        return;
    }
    w->place.resident_experts = a->n_resident;
    w->place.resident_bytes = a->resident_bytes;
}

// ---------------------------------------------------------------------------
int cache_route(sched *s, size_t slot, int count) {
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        cache_worker *cw = w->cache;
        if (!cw) continue;
        int resident = cw->ec->state[slot] == EC_RESIDENT;
        int usable = resident && w->state == LINK_UP && !s->call.excluded[i];
        if (count) {
            /* a hit is a pair this cache serves; anything else reaching it is a miss */
            if (usable)
                ec_touch(cw->ec, slot);
            else if (!(s->place.refused_by[slot] >> i & 1)) { /* one it cannot compute (caps) is no miss */
                ec_count(cw->ec, slot);
                cw->ec->c.misses++;
                if (!cw->in_missed[slot]) cw->in_missed[slot] = 1, cw->missed[cw->n_missed++] = (int64_t)slot;
            }
        }
        if (usable) return i;
    }
    return -1;
}

/* Send one CacheEvict or CacheLoad naming slots[0..n). LINK_SENT or why not. */
static link_sent s_send_refs(sched *s, worker_link *w, const int64_t *slots, int n, int evict, uint64_t seq) {
    Coli__ExpertRef refs[64], *ptrs[64];
    for (int i = 0; i < n; i++) {
        coli__expert_ref__init(&refs[i]);
        refs[i].layer = (int32_t)(slots[i] / s->model.n_expert);
        refs[i].expert = (int32_t)(slots[i] % s->model.n_expert);
        ptrs[i] = &refs[i];
    }
    Coli__CacheLoad ld = COLI__CACHE_LOAD__INIT;
    Coli__CacheEvict ev = COLI__CACHE_EVICT__INIT;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    if (evict) {
        ev.seq = seq, ev.n_experts = (size_t)n, ev.experts = ptrs;
        env.body_case = COLI__ENVELOPE__BODY_CACHE_EVICT, env.cache_evict = &ev;
    } else {
        ld.seq = seq, ld.n_experts = (size_t)n, ld.experts = ptrs;
        env.body_case = COLI__ENVELOPE__BODY_CACHE_LOAD, env.cache_load = &ld;
    }
    return link_send(s, w, &env, NULL, 0, ZMQ_DONTWAIT);
}

/* Carry out decisions: the evictions (already out of routing) in one message, then the loads. */
static void s_apply(sched *s, worker_link *w, const ec_action *act, int n) {
    cache_worker *cw = w->cache;
    int64_t victims[64], loads[64] = {0};
    int nv = 0;
    for (int i = 0; i < n; i++) {
        if (act[i].victim >= 0) victims[nv++] = act[i].victim;
        loads[i] = act[i].slot;
    }
    if (nv && s_send_refs(s, w, victims, nv, 1, ++cw->next_seq) != LINK_SENT) {
        for (int i = 0; i < nv; i++) ec_unevict(cw->ec, (size_t)victims[i]); /* nothing was routed meanwhile */
        for (int i = 0; i < n; i++) ec_unload(cw->ec, (size_t)loads[i]);
        return;
    }
    uint64_t seq = ++cw->next_seq;
    if (s_send_refs(s, w, loads, n, 0, seq) != LINK_SENT) {
        for (int i = 0; i < n; i++) ec_unload(cw->ec, (size_t)loads[i]);
        return;
    }
    for (int i = 0; i < n; i++) cw->seq_of[loads[i]] = seq;
}

/* Candidates hottest first (insertion sort: a layer misses few distinct experts). */
static void s_sort_by_score(const expert_cache *ec, int64_t *c, int n) {
    for (int i = 1; i < n; i++) {
        int64_t v = c[i];
        int j = i;
        for (; j > 0 && ec->score[c[j - 1]] < ec->score[v]; j--) c[j] = c[j - 1];
        c[j] = v;
    }
}

void cache_after_layer(sched *s, int64_t n_tok) {
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        cache_worker *cw = w->cache;
        if (!cw) continue;
        ec_advance(cw->ec, (double)n_tok / (double)s->model.n_layer);
        if (w->state == LINK_UP && cw->n_missed) {
            ec_action act[64];
            s_sort_by_score(cw->ec, cw->missed, cw->n_missed);
            int n = ec_decide(cw->ec, cw->missed, cw->n_missed, 0, act, 64);
            if (n) s_apply(s, w, act, n);
        }
        for (int k = 0; k < cw->n_missed; k++) cw->in_missed[cw->missed[k]] = 0;
        cw->n_missed = 0;
    }
}

// ---------------------------------------------------------------------------
// Prefetch: the next layer's likely experts (expert_predict.h) are loaded
// while layer l's experts run.

void cache_prefetch(sched *s, int layer, const float *x, int64_t n_tok) {
    const int next = layer + 1;
    if (!s->set.cache_prefetch || next >= s->model.n_layer || !s->model.expert_bytes[next]) return;
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        cache_worker *cw = w->cache;
        if (!cw || w->state != LINK_UP) continue;
        int64_t cand[1024];
        int n = expert_predict(&cw->pred, next, x, n_tok, cand), m = 0;
        if (!n) return;             /* no usable router: no prediction */
        for (int k = 0; k < n; k++) /* not one its hello's caps rule out (scheduler.c s_able) */
            if (cw->ec->state[cand[k]] == EC_NONE && !(s->place.refused_by[cand[k]] >> i & 1)) cand[m++] = cand[k];
        ec_action act[64];
        int n_act = m ? ec_decide(cw->ec, cand, m, 1, act, 64) : 0;
        if (n_act) s_apply(s, w, act, n_act);
        return; /* the first cache up: a later one sees only what the first misses */
    }
}

// ---------------------------------------------------------------------------
void cache_stats_json(const worker_link *w, coli_strbuf *b) {
    if (!w->cache) return;
    const expert_cache *ec = w->cache->ec;
    const ec_counters *c = &ec->c;
    size_t held = 0;
    for (size_t k = 0; k < ec_slots(ec); k++) held += ec->state[k] == EC_RESIDENT;
    uint64_t routed = c->hits + c->misses;
    coli_strbuf_appendf(b,
                        ",\"cache\":{\"budget_bytes\":%llu,\"used_bytes\":%llu,\"resident_experts\":%zu,"
                        "\"hits\":%llu,\"misses\":%llu,\"hit_rate\":%.6f,\"promotions\":%llu,\"evictions\":%llu,"
                        "\"bytes_moved\":%llu,\"load_refused\":%llu,\"prefetch_issued\":%llu,"
                        "\"prefetch_used\":%llu,\"prefetch_hit_rate\":%.6f}",
                        (unsigned long long)ec->budget, (unsigned long long)ec->used, held, (unsigned long long)c->hits,
                        (unsigned long long)c->misses, routed ? (double)c->hits / (double)routed : 0.0,
                        (unsigned long long)c->promotions, (unsigned long long)c->evictions,
                        (unsigned long long)c->bytes_moved, (unsigned long long)c->load_refused,
                        (unsigned long long)c->prefetch_issued, (unsigned long long)c->prefetch_used,
                        c->prefetch_issued ? (double)c->prefetch_used / (double)c->prefetch_issued : 0.0);
}

void cache_stats_text(const worker_link *w, coli_strbuf *b) {
    if (!w->cache) return;
    const ec_counters *c = &w->cache->ec->c;
    uint64_t routed = c->hits + c->misses;
    coli_strbuf_appendf(b,
                        "    cache %s: budget %.1f MiB  hits %llu  misses %llu  (hit rate %.1f%%)  promotions %llu  "
                        "evictions %llu  moved %.1f MiB  prefetch %llu issued, %llu used\n",
                        w->device, (double)w->cache->ec->budget / 1048576.0, (unsigned long long)c->hits,
                        (unsigned long long)c->misses, routed ? 100.0 * (double)c->hits / (double)routed : 0.0,
                        (unsigned long long)c->promotions, (unsigned long long)c->evictions,
                        (double)c->bytes_moved / 1048576.0, (unsigned long long)c->prefetch_issued,
                        (unsigned long long)c->prefetch_used);
}
