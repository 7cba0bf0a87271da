/*
 * expert_cache.h - the live expert cache's policy (coordinator side, no I/O):
 * which experts a cache worker should hold, from the routing it sees.
 * docs/scheduler.md, "Live expert cache", argues the choices.
 *
 * Slots are layer * n_expert + expert. A slot is NONE (not held), LOADING (a
 * load was sent, not acknowledged: not routed) or RESIDENT (acknowledged:
 * routed to the cache worker). The bytes of LOADING + RESIDENT slots never
 * exceed the budget; an eviction frees its bytes when it is decided, since
 * the worker handles its messages in order (the CacheEvict before any later
 * CacheLoad).
 *
 * Score: LFU with exponential decay. Each routed pair that reaches the cache
 * adds `inc` to its slot's score; `inc` grows by 2^(tokens / half_life) as
 * tokens go by (so older touches weigh less, without touching every slot);
 * all scores are rescaled when inc gets large. Slots are compared by their
 * share of their layer's (decayed) touches, so layers compare fairly even
 * while one layer has seen a large batch the later layers have not seen yet
 * (a prefill). Hysteresis: a candidate replaces the coldest resident slot
 * only when its share exceeds that slot's by the factor (1 + margin).
 */
#ifndef COLI_COORD_SCHED_EXPERT_CACHE_H
#define COLI_COORD_SCHED_EXPERT_CACHE_H

#include <stddef.h>
#include <stdint.h>

enum {
    EC_NONE = 0,
    EC_LOADING = 1,
    EC_RESIDENT = 2
};

typedef struct ec_params {
    double half_life_tokens; /* score half-life in tokens (default 128) */
    double margin;           /* hysteresis factor (default 0.25) */
    int max_loads;           /* loads one decision may start (default 4); bounds the traffic per layer */
} ec_params;

typedef struct ec_counters {
    uint64_t hits, misses;    /* routed pairs reaching the cache: served by it / not */
    uint64_t promotions;      /* loads acknowledged resident (promotion or prefetch) */
    uint64_t evictions;       /* evictions decided (and sent) */
    uint64_t bytes_moved;     /* bytes of the experts acknowledged loaded (initial set included) */
    uint64_t load_refused;    /* loads the worker refused (budget, memory) */
    uint64_t prefetch_issued; /* loads started by the next-layer prediction */
    uint64_t prefetch_used;   /* prefetched slots later routed while resident */
} ec_counters;

/* One decision: evict `victim` (-1: none) then load `slot`. */
typedef struct ec_action {
    int64_t victim, slot;
} ec_action;

typedef struct expert_cache {
    int n_layer, n_expert;
    uint64_t *expert_bytes;    /* (n_layer) copy */
    uint64_t budget, used;     /* bytes: budget; held or being loaded */
    unsigned char *state;      /* (slots) EC_* */
    unsigned char *prefetched; /* (slots) 1: loaded by prefetch and not routed since */
    unsigned char *pinned;     /* (slots) 1: never evicted (ec_pin) */
    double *score;             /* (slots) */
    double *mass;              /* (n_layer) decayed touches of each layer (sum of its scores) */
    double inc;
    ec_params p;
    ec_counters c;
} expert_cache;

/* Defaults of ec_params (half-life 128 tokens, margin 0.25, 4 loads). */
void ec_default_params(ec_params *p);
/* A cache of budget bytes for a model of n_layer x n_expert experts of
 * expert_bytes[l] each (copied). p NULL: defaults. NULL when out of memory. */
expert_cache *ec_new(int n_layer, int n_expert, const uint64_t *expert_bytes, uint64_t budget, const ec_params *p);
void ec_free(expert_cache *ec);
size_t ec_slots(const expert_cache *ec);
/* Tokens went by (a layer call of n_tok tokens advances n_tok / n_layer): older touches weigh less. */
void ec_advance(expert_cache *ec, double tokens);
/* A routed pair of slot reached the cache: its score rises; returns 1 (a hit)
 * when it is RESIDENT, else 0 (a miss); counts either. */
int ec_touch(expert_cache *ec, size_t slot);
/* A routed pair of slot: its score (and its layer's mass) rise; nothing counted. */
void ec_count(expert_cache *ec, size_t slot);
/* Hold slot for good (--pin onto the disk tier's RAM): LOADING now and never
 * a victim. Before ec_seed. 0, or -1 when it does not fit in what is left of
 * the budget (or holds no bytes: a dense layer). */
int ec_pin(expert_cache *ec, size_t slot);
/* Seed the scores and choose the initial resident set from heat
 * ((slots) selection counts; all zero or NULL: nothing): hottest first while
 * they fit. The chosen slots become LOADING. Returns how many. */
size_t ec_seed(expert_cache *ec, const uint64_t *heat);
/* Decide promotions for the candidate slots (a layer's misses, hottest
 * first is not required): a NONE candidate is loaded into free room, or in
 * place of the coldest RESIDENT slot when it beats it under the hysteresis.
 * States are updated (victims NONE, candidates LOADING). Writes at most
 * min(cap, p.max_loads) actions; returns how many. prefetch: count them as
 * prefetches (same room and hysteresis rules). */
int ec_decide(expert_cache *ec, const int64_t *cand, int n_cand, int prefetch, ec_action *out, int cap);
/* The worker's answer to a load of slot: resident (ok) or refused. */
void ec_loaded(expert_cache *ec, size_t slot, int ok);
/* The answer to the Place of a (re)started worker: like ec_loaded, but the
 * initial set is not a promotion (its bytes still count as moved). */
void ec_placed(expert_cache *ec, size_t slot, int ok);
/* An eviction could not be sent: slot is RESIDENT again (nothing was routed meanwhile). */
void ec_unevict(expert_cache *ec, size_t slot);
/* A load could not be sent: slot is NONE again. */
void ec_unload(expert_cache *ec, size_t slot);
/* The worker restarted: nothing is resident; what it held or was loading is
 * LOADING again (to be sent with its next Place). */
void ec_restart(expert_cache *ec);

#endif
