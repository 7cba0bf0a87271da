/*
 * prefix_cache.h - KV rows of token prefixes seen before, so a request that
 * starts like an earlier one (the next turn of a chat, a shared system
 * prompt) copies them instead of computing them again.
 *
 * The unit is a block of block_tokens positions. A block is keyed by the
 * whole prefix up to its end: a 64-bit chain hash (the parent block's key
 * mixed with this block's ids), and an entry also keeps its own ids and its
 * parent's key, which a lookup compares too. Every call names a domain
 * (0: the default one): a block is found only by calls of the domain that
 * stored it (compared exactly, and the chain hash starts from it), so
 * callers that must not learn of each other's prompts share nothing. KV rows of position p depend
 * only on ids[0..p] (causal attention, and the determinism contract of
 * core/kernels/matmul.h: a row's result never depends on the batch), so restored
 * rows are the bits a cold prefill would write, and what follows from them
 * (logits, sampled tokens) is identical.
 *
 * Hybrid models: a recurrent layer's state cannot be cut back to a block's
 * end, so a block may also carry a snapshot of the recurrent states after
 * its last position (taken by the sequence there: kv_cache_snapshot), and a
 * prefix is restored only up to the end of its last block that has one;
 * blocks after the last snapshot a store sees are not stored.
 *
 * Memory: the blocks' KV (and snapshot) bytes are bounded by max_bytes; the least recently
 * used block goes first, and a chain is touched from its end back to its
 * start, so leaves are evicted before the prefixes others hang on (a block
 * evicted while a restore copies from it is freed when that copy ends). All
 * calls are thread-safe (one mutex, never held while copying).
 */
#ifndef COLI_COORD_PREFIX_CACHE_H
#define COLI_COORD_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator/kv_cache.h"

typedef struct prefix_cache prefix_cache;

typedef struct prefix_cache_counters {
    uint64_t hit_tokens;     /* prompt positions restored from the cache */
    uint64_t miss_tokens;    /* prompt positions a lookup could not restore (prefilled) */
    uint64_t evicted_tokens; /* positions dropped to stay under max_bytes */
    uint64_t stored_tokens;  /* positions added */
    size_t bytes;            /* KV bytes held now */
    size_t max_bytes;
    int n_blocks; /* blocks held now */
    int block_tokens;
} prefix_cache_counters;

/* A cache for sequence states of this shape. block_tokens >= 1;
 * max_bytes >= 0 (0: nothing is ever stored). Returns 0 with *out, or
 * COLI_EINVAL / COLI_ENOMEM. */
int prefix_cache_new(const kv_shape *shape, int block_tokens, size_t max_bytes, prefix_cache **out);
void prefix_cache_free(prefix_cache **pc);

/* Copy the longest cached prefix of ids[0..n) that is at most max_tokens
 * long (whole blocks; hybrid: ending with a snapshot, which becomes kv's
 * recurrent state) into kv positions 0.., counting hits and, for the
 * n - restored prompt positions left to compute, misses. Returns the
 * positions restored (>= 0), or COLI_EINVAL when kv's shape differs. */
int prefix_cache_restore(prefix_cache *pc, uint64_t domain, kv_cache *kv, const int32_t *ids, int n, int max_tokens);

/* Store the whole blocks of ids[0..n), whose KV rows kv holds at positions
 * 0..n-1 (blocks already held are only touched; hybrid: with kv's snapshots
 * at their ends, up to the last one it has). Returns the blocks added
 * (>= 0), COLI_EINVAL (shape, n > kv->n_ctx) or COLI_ENOMEM. */
int prefix_cache_store(prefix_cache *pc, uint64_t domain, const kv_cache *kv, const int32_t *ids, int n);

void prefix_cache_get_counters(prefix_cache *pc, prefix_cache_counters *out);

/* 1 while the calling thread holds a prefix cache's mutex. Restores and
 * stores copy rows and snapshots without it (a restore pins the blocks it
 * copies from; a store copies what is missing, then links it in), so one
 * request's copy holds no other's lookup up: tests check this from a copy
 * hook (kv_cache's copy_hook). */
int prefix_cache_locked_here(void);

#endif
