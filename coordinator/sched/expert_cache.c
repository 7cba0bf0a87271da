/*
 * expert_cache.c - the live expert cache's policy: LFU with decay and
 * hysteresis (see expert_cache.h; docs/scheduler.md argues it). Plain
 * bookkeeping, no I/O: cache_link.c sends what it decides.
 */
#include "coordinator/sched/expert_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EC_RESCALE_AT 1e100 /* inc past this: divide every score and inc by it */

void ec_default_params(ec_params *p) {
    p->half_life_tokens = 128;
    p->margin = 0.25;
    p->max_loads = 4;
}

size_t ec_slots(const expert_cache *ec) { return (size_t)ec->n_layer * (size_t)ec->n_expert; }

expert_cache *ec_new(int n_layer, int n_expert, const uint64_t *expert_bytes, uint64_t budget, const ec_params *p) {
    expert_cache *ec = calloc(1, sizeof *ec);
    if (!ec) return NULL;
    ec->n_layer = n_layer;
    ec->n_expert = n_expert;
    ec->budget = budget;
    ec->inc = 1;
    if (p)
        ec->p = *p;
    else
        ec_default_params(&ec->p);
    if (ec->p.half_life_tokens <= 0) ec->p.half_life_tokens = 128;
    if (ec->p.max_loads < 1) ec->p.max_loads = 1;
    size_t n = ec_slots(ec);
    ec->expert_bytes = malloc((size_t)n_layer * sizeof *ec->expert_bytes);
    ec->state = calloc(n ? n : 1, 1);
    ec->prefetched = calloc(n ? n : 1, 1);
    ec->pinned = calloc(n ? n : 1, 1);
    ec->score = calloc(n ? n : 1, sizeof *ec->score);
    ec->mass = calloc((size_t)n_layer, sizeof *ec->mass);
    if (!ec->expert_bytes || !ec->state || !ec->prefetched || !ec->pinned || !ec->score || !ec->mass) {
        ec_free(ec);
        return NULL;
    }
    memcpy(ec->expert_bytes, expert_bytes, (size_t)n_layer * sizeof *ec->expert_bytes);
    return ec;
}

void ec_free(expert_cache *ec) {
    if (!ec) return;
    free(ec->expert_bytes);
    free(ec->state);
    free(ec->prefetched);
    free(ec->pinned);
    free(ec->score);
    free(ec->mass);
    free(ec);
}

static uint64_t s_bytes(const expert_cache *ec, size_t slot) { return ec->expert_bytes[slot / (size_t)ec->n_expert]; }

void ec_advance(expert_cache *ec, double tokens) {
    if (tokens <= 0) return;
    ec->inc *= exp2(tokens / ec->p.half_life_tokens);
    if (ec->inc < EC_RESCALE_AT) return;
    for (size_t i = 0; i < ec_slots(ec); i++) ec->score[i] /= ec->inc;
    for (int l = 0; l < ec->n_layer; l++) ec->mass[l] /= ec->inc;
    ec->inc = 1;
}

/* Slot's share of its layer's touches (0 when the layer has none). */
static double s_share(const expert_cache *ec, size_t slot) {
    double m = ec->mass[slot / (size_t)ec->n_expert];
    return m > 0 ? ec->score[slot] / m : 0;
}

void ec_count(expert_cache *ec, size_t slot) {
    ec->score[slot] += ec->inc;
    ec->mass[slot / (size_t)ec->n_expert] += ec->inc;
}

int ec_touch(expert_cache *ec, size_t slot) {
    ec_count(ec, slot);
    if (ec->state[slot] != EC_RESIDENT) {
        ec->c.misses++;
        return 0;
    }
    ec->c.hits++;
    if (ec->prefetched[slot]) {
        ec->prefetched[slot] = 0;
        ec->c.prefetch_used++;
    }
    return 1;
}

int ec_pin(expert_cache *ec, size_t slot) {
    if (ec->pinned[slot]) return 0;
    const uint64_t b = s_bytes(ec, slot);
    if (!b || ec->used + b > ec->budget) return -1;
    ec->pinned[slot] = 1;
    ec->state[slot] = EC_LOADING;
    ec->used += b;
    return 0;
}

size_t ec_seed(expert_cache *ec, const uint64_t *heat) {
    const size_t n = ec_slots(ec);
    uint64_t total = 0;
    for (size_t i = 0; heat && i < n; i++) total += heat[i];
    if (!total) return 0;
    /* scores as if the heat had been seen over one half-life of tokens */
    double rows = (double)total / (double)ec->n_layer;
    for (size_t i = 0; i < n; i++) {
        ec->score[i] = (double)heat[i] / rows * ec->p.half_life_tokens * ec->inc;
        ec->mass[i / (size_t)ec->n_expert] += ec->score[i];
    }
    size_t chosen = 0;
    for (;;) { /* hottest NONE slot that fits; ties in slot order: deterministic */
        int64_t best = -1;
        for (size_t i = 0; i < n; i++)
            if (ec->state[i] == EC_NONE && heat[i] && s_bytes(ec, i) && ec->used + s_bytes(ec, i) <= ec->budget &&
                (best < 0 || heat[i] > heat[best]))
                best = (int64_t)i;
        if (best < 0) return chosen;
        ec->state[best] = EC_LOADING;
        ec->used += s_bytes(ec, (size_t)best);
        chosen++;
    }
}

/* The RESIDENT slot with the lowest score (ties: lowest slot), or -1; a
 * pinned slot is never chosen. */
static int64_t s_coldest(const expert_cache *ec) {
    int64_t v = -1;
    for (size_t i = 0; i < ec_slots(ec); i++)
        if (ec->state[i] == EC_RESIDENT && !ec->pinned[i] && (v < 0 || s_share(ec, i) < s_share(ec, (size_t)v)))
            v = (int64_t)i;
    return v;
}

int ec_decide(expert_cache *ec, const int64_t *cand, int n_cand, int prefetch, ec_action *out, int cap) {
    int n = 0;
    if (cap > ec->p.max_loads) cap = ec->p.max_loads;
    for (int i = 0; i < n_cand && n < cap; i++) {
        size_t c = (size_t)cand[i];
        uint64_t b = s_bytes(ec, c);
        if (ec->state[c] != EC_NONE || b == 0 || b > ec->budget) continue;
        int64_t victim = -1;
        if (ec->used + b > ec->budget) {
            victim = s_coldest(ec);
            /* hysteresis: only a clearly hotter candidate displaces it, and only when that makes room */
            if (victim < 0 || s_share(ec, c) <= s_share(ec, (size_t)victim) * (1 + ec->p.margin) ||
                ec->used - s_bytes(ec, (size_t)victim) + b > ec->budget)
                continue;
            ec->state[victim] = EC_NONE;
            ec->prefetched[victim] = 0;
            ec->used -= s_bytes(ec, (size_t)victim);
            ec->c.evictions++;
        }
        ec->state[c] = EC_LOADING;
        ec->prefetched[c] = (unsigned char)(prefetch != 0);
        ec->used += b;
        if (prefetch) ec->c.prefetch_issued++;
        out[n++] = (ec_action){victim, (int64_t)c};
    }
    return n;
}

void ec_loaded(expert_cache *ec, size_t slot, int ok) {
    if (ec->state[slot] != EC_LOADING) return;
    if (ok) {
        ec->state[slot] = EC_RESIDENT;
        ec->c.promotions++;
        ec->c.bytes_moved += s_bytes(ec, slot);
        return;
    }
    ec->state[slot] = EC_NONE;
    ec->prefetched[slot] = 0;
    ec->used -= s_bytes(ec, slot);
    ec->c.load_refused++;
}

void ec_placed(expert_cache *ec, size_t slot, int ok) {
    uint64_t promotions = ec->c.promotions;
    ec_loaded(ec, slot, ok);
    ec->c.promotions = promotions;
}

void ec_unevict(expert_cache *ec, size_t slot) {
    if (ec->state[slot] != EC_NONE) return;
    ec->state[slot] = EC_RESIDENT;
    ec->used += s_bytes(ec, slot);
    ec->c.evictions--;
}

void ec_unload(expert_cache *ec, size_t slot) {
    if (ec->state[slot] != EC_LOADING) return;
    ec->state[slot] = EC_NONE;
    ec->used -= s_bytes(ec, slot);
    if (ec->prefetched[slot]) ec->c.prefetch_issued--;
    ec->prefetched[slot] = 0;
}

void ec_restart(expert_cache *ec) {
    for (size_t i = 0; i < ec_slots(ec); i++)
        if (ec->state[i] == EC_RESIDENT) ec->state[i] = EC_LOADING;
}
