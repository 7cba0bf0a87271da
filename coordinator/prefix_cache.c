/* prefix_cache.c - see prefix_cache.h. */
#include "coordinator/prefix_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct pc_block {
    uint64_t domain;      /* whose prefix it is: compared exactly, never shared across domains */
    uint64_t key, parent; /* chain hash of the prefix up to its end / before it (the domain at the root) */
    struct pc_block *next_in_bucket;
    struct pc_block *newer, *older; /* the LRU list */
    uint64_t op;                    /* the operation that last touched it (store guard) */
    int32_t *ids;                   /* block_tokens ids */
    unsigned char *rows;            /* per KV layer: K rows, then V rows (unless v_in_k) */
    float *snap;                    /* hybrid: the recurrent states after the block, or NULL */
    int pins;                       /* restores copying from it now (outside the mutex) */
    int dead;                       /* evicted while pinned: the last unpin frees it */
} pc_block;

struct prefix_cache {
    pthread_mutex_t mu;
    int n_layer, n_kv, v_in_k, block_tokens;
    size_t k_row, v_row; /* bytes of one position's K / V row of one layer */
    size_t block_bytes;  /* rows of one block over all KV layers */
    size_t snap_bytes;   /* one snapshot of the recurrent states (0: none) */
    pc_block **buckets;
    size_t n_buckets; /* a power of two */
    pc_block *newest, *oldest;
    uint64_t op;
    prefix_cache_counters c;
};

static size_t s_elem_bytes(int f16) { return f16 ? 2 : 4; }

int prefix_cache_new(const kv_shape *shape, int block_tokens, size_t max_bytes, prefix_cache **out) {
    *out = NULL;
    if (block_tokens < 1 || shape->n_layer < 1 || shape->k_dim < 1)
        return coli_fail(COLI_EINVAL, "prefix cache: block of %d tokens over %d layers: expected >= 1", block_tokens,
                         shape->n_layer);
    prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return coli_fail(COLI_ENOMEM, "prefix cache: out of memory");
    pc->n_layer = shape->n_layer;
    for (int l = 0; l < shape->n_layer; l++) {
        const int rec = shape->recurrent && shape->recurrent[l];
        pc->n_kv += !rec;
        pc->snap_bytes += rec ? (size_t)shape->rec_floats * sizeof(float) : 0;
    }
    pc->v_in_k = shape->v_in_k;
    pc->block_tokens = block_tokens;
    pc->k_row = (size_t)shape->k_dim * s_elem_bytes(shape->f16);
    pc->v_row = shape->v_in_k ? 0 : (size_t)shape->v_dim * s_elem_bytes(shape->f16);
    pc->block_bytes = (size_t)pc->n_kv * (size_t)block_tokens * (pc->k_row + pc->v_row);
    size_t want = max_bytes / (pc->block_bytes + 1) * 2 + 1, nb = 64;
    while (nb < want && nb < ((size_t)1 << 22)) nb *= 2;
    pc->n_buckets = nb;
    pc->buckets = calloc(nb, sizeof *pc->buckets);
    if (!pc->buckets) {
        free(pc);
        return coli_fail(COLI_ENOMEM, "prefix cache: out of memory for %zu buckets", nb);
    }
    pthread_mutex_init(&pc->mu, NULL);
    pc->c.max_bytes = max_bytes;
    pc->c.block_tokens = block_tokens;
    *out = pc;
    return 0;
}

static void s_free_block(pc_block *b) {
    if (!b) return;
    free(b->ids);
    free(b->rows);
    free(b->snap);
    free(b);
}

/* 1 while this thread holds a cache's mutex: tests check no copy runs then. */
static _Thread_local int s_locked_here;

static void s_lock(prefix_cache *pc) {
    pthread_mutex_lock(&pc->mu);
    s_locked_here = 1;
}

static void s_unlock(prefix_cache *pc) {
    s_locked_here = 0;
    pthread_mutex_unlock(&pc->mu);
}

int prefix_cache_locked_here(void) { return s_locked_here; }

void prefix_cache_free(prefix_cache **ppc) {
    if (!ppc || !*ppc) return;
    prefix_cache *pc = *ppc;
    for (pc_block *b = pc->newest, *next; b; b = next) {
        next = b->older;
        s_free_block(b);
    }
    free(pc->buckets);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
    *ppc = NULL;
}

/* The key of the prefix that ends with ids[0..n) after the prefix keyed parent
 * (FNV-1a over the ids' bytes, then a murmur-style finalizer). */
static uint64_t s_chain_key(uint64_t parent, const int32_t *ids, int n) {
    uint64_t h = parent ^ 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1; /* 0 is the key "before the first block" */
}

static pc_block *s_find(prefix_cache *pc, uint64_t domain, uint64_t key, uint64_t parent, const int32_t *ids) {
    for (pc_block *b = pc->buckets[key & (pc->n_buckets - 1)]; b; b = b->next_in_bucket)
        if (b->key == key && b->parent == parent && b->domain == domain &&
            memcmp(b->ids, ids, (size_t)pc->block_tokens * sizeof(int32_t)) == 0)
            return b;
    return NULL;
}

static void s_unlink_lru(prefix_cache *pc, pc_block *b) {
    if (b->newer)
        b->newer->older = b->older;
    else
        pc->newest = b->older;
    if (b->older)
        b->older->newer = b->newer;
    else
        pc->oldest = b->newer;
    b->newer = b->older = NULL;
}

static void s_touch(prefix_cache *pc, pc_block *b) {
    if (b->newer || b->older || pc->newest == b) s_unlink_lru(pc, b); /* a new block is in no list yet */
    b->older = pc->newest;
    if (pc->newest) pc->newest->newer = b;
    pc->newest = b;
    if (!pc->oldest) pc->oldest = b;
    b->op = pc->op;
}

/* Touch chain[n-1] .. chain[0]: the prefix's first block ends up newest. */
static void s_touch_chain(prefix_cache *pc, pc_block **chain, int n) {
    for (int i = n - 1; i >= 0; i--) s_touch(pc, chain[i]);
}

/* Bytes a block holds: its rows and its snapshot. */
static size_t s_bytes_of(const prefix_cache *pc, const pc_block *b) {
    return pc->block_bytes + (b->snap ? pc->snap_bytes : 0);
}

static void s_evict_oldest(prefix_cache *pc) {
    pc_block *b = pc->oldest;
    s_unlink_lru(pc, b);
    pc_block **p = &pc->buckets[b->key & (pc->n_buckets - 1)];
    while (*p != b) p = &(*p)->next_in_bucket;
    *p = b->next_in_bucket;
    pc->c.bytes -= s_bytes_of(pc, b);
    pc->c.n_blocks--;
    pc->c.evicted_tokens += (uint64_t)pc->block_tokens;
    if (b->pins)
        b->dead = 1; /* a restore is copying from it: found by no one now, freed by its last unpin */
    else
        s_free_block(b);
}

/* Evict older blocks (never one this operation touched) until need more
 * bytes fit: 1 when they do. */
static int s_make_room(prefix_cache *pc, size_t need) {
    while (pc->c.bytes + need > pc->c.max_bytes && pc->oldest && pc->oldest->op != pc->op) s_evict_oldest(pc);
    return pc->c.bytes + need <= pc->c.max_bytes;
}

static int s_shape_ok(const prefix_cache *pc, const kv_cache *kv) {
    return kv->n_layer == pc->n_layer && kv->n_kv == pc->n_kv && kv->v_in_k == pc->v_in_k &&
           (size_t)kv->k_dim * s_elem_bytes(kv->f16) == pc->k_row &&
           (kv->v_in_k ? 0 : (size_t)kv->v_dim * s_elem_bytes(kv->f16)) == pc->v_row &&
           kv_cache_rec_bytes(kv) == pc->snap_bytes;
}

/* Copy one block's rows between the cache and kv (to_kv: which way). */
static void s_copy_rows(const prefix_cache *pc, pc_block *b, kv_cache *kv, int pos, int to_kv) {
    const size_t kb = (size_t)pc->block_tokens * pc->k_row, vb = (size_t)pc->block_tokens * pc->v_row;
    unsigned char *r = b->rows;
    kv_note_copy(kv, pc->block_bytes);
    for (int l = 0; l < pc->n_layer; l++) {
        if (!kv_cache_has_kv(kv, l)) continue; /* a recurrent layer: its state is in the snapshot */
        void *k = (void *)kv_cache_k(kv, l, pos);
        if (to_kv)
            memcpy(k, r, kb);
        else
            memcpy(r, k, kb);
        void *v = (void *)kv_cache_v(kv, l, pos);
        if (vb && to_kv)
            memcpy(v, r + kb, vb);
        else if (vb)
            memcpy(r + kb, v, vb);
        r += kb + vb;
    }
}

/* The copies run outside the mutex, from blocks pinned under it, so one
 * request's copy never holds another's lookup or store up. */
int prefix_cache_restore(prefix_cache *pc, uint64_t domain, kv_cache *kv, const int32_t *ids, int n, int max_tokens) {
    if (!s_shape_ok(pc, kv)) return coli_fail(COLI_EINVAL, "prefix cache: KV cache of another shape");
    const int B = pc->block_tokens;
    if (max_tokens > n) max_tokens = n;
    if (max_tokens > kv->n_ctx) max_tokens = kv->n_ctx;
    const int most = max_tokens > 0 ? max_tokens / B : 0;
    pc_block **chain = malloc((size_t)(most + 1) * sizeof *chain);
    if (!chain) return coli_fail(COLI_ENOMEM, "prefix cache: out of memory");
    s_lock(pc);
    pc->op++;
    uint64_t parent = domain;
    int got = 0;
    for (; got < most; got++) {
        const int32_t *blk = ids + (size_t)got * (size_t)B;
        const uint64_t key = s_chain_key(parent, blk, B);
        pc_block *b = s_find(pc, domain, key, parent, blk);
        if (!b) break;
        chain[got] = b;
        parent = key;
    }
    /* hybrid: the recurrent states exist only where a snapshot was kept */
    while (pc->snap_bytes && got > 0 && !chain[got - 1]->snap) got--;
    for (int i = 0; i < got; i++) chain[i]->pins++;
    s_touch_chain(pc, chain, got);
    pc->c.hit_tokens += (uint64_t)got * (uint64_t)B;
    if (n > got * B) pc->c.miss_tokens += (uint64_t)(n - got * B);
    s_unlock(pc);
    kv_cache_rewind(kv, 0); /* the sequence's earlier snapshots are another prefix's */
    for (int i = 0; i < got; i++) s_copy_rows(pc, chain[i], kv, i * B, 1);
    if (pc->snap_bytes && got > 0) {
        kv_cache_rec_load(kv, chain[got - 1]->snap); /* a block's snap is set once, never replaced */
        kv_cache_snapshot(kv, got * B);
    }
    s_lock(pc);
    for (int i = 0; i < got; i++)
        if (--chain[i]->pins == 0 && chain[i]->dead) s_free_block(chain[i]);
    s_unlock(pc);
    free(chain);
    return got * B;
}

/* A new block, not in the cache yet: ids and a copy of kv's rows at pos
 * (made without the mutex). NULL with COLI_ENOMEM in *rc. */
static pc_block *s_stage(const prefix_cache *pc, uint64_t domain, uint64_t key, uint64_t parent, const int32_t *ids,
                         const kv_cache *kv, int pos, int *rc) {
    pc_block *b = calloc(1, sizeof *b);
    if (b) b->ids = malloc((size_t)pc->block_tokens * sizeof(int32_t));
    if (b && b->ids) b->rows = malloc(pc->block_bytes);
    if (!b || !b->ids || !b->rows) {
        s_free_block(b);
        *rc = coli_fail(COLI_ENOMEM, "prefix cache: out of memory for a block of %zu bytes", pc->block_bytes);
        return NULL;
    }
    b->domain = domain;
    b->key = key;
    b->parent = parent;
    memcpy(b->ids, ids, (size_t)pc->block_tokens * sizeof(int32_t));
    s_copy_rows(pc, b, (kv_cache *)kv, pos, 0);
    return b;
}

/* A copy of kv's snapshot after pos (n bytes; none: NULL) made without the
 * mutex; NULL with COLI_ENOMEM in *rc. */
static float *s_stage_snap(const kv_cache *kv, int pos, size_t n, int *rc) {
    const float *snap = kv_cache_snap_at(kv, pos);
    if (!snap) return NULL;
    float *c = malloc(n);
    if (!c) {
        *rc = coli_fail(COLI_ENOMEM, "prefix cache: out of memory for a snapshot of %zu bytes", n);
        return NULL;
    }
    kv_note_copy(kv, n);
    memcpy(c, snap, n);
    return c;
}

/* Put the staged block b in (mutex held) if the budget allows, evicting
 * older blocks (never one touched by this operation): 1, or 0 (full of
 * this prefix; b stays the caller's). */
static int s_link(prefix_cache *pc, pc_block *b) {
    if (!s_make_room(pc, pc->block_bytes)) return 0;
    pc_block **bucket = &pc->buckets[b->key & (pc->n_buckets - 1)];
    b->next_in_bucket = *bucket;
    *bucket = b;
    s_touch(pc, b);
    pc->c.bytes += pc->block_bytes;
    pc->c.n_blocks++;
    pc->c.stored_tokens += (uint64_t)pc->block_tokens;
    return 1;
}

/* What a store works with: per block its key, and what it copied for it. */
typedef struct pc_store {
    uint64_t *keys;
    pc_block **chain, **fresh; /* the blocks found or put in / staged new ones */
    float **snaps;             /* staged snapshots for blocks without one */
} pc_store;

static void s_store_free(pc_store *st, int n) {
    for (int i = 0; st->fresh && i < n; i++) s_free_block(st->fresh[i]);
    for (int i = 0; st->snaps && i < n; i++) free(st->snaps[i]);
    free(st->keys);
    free(st->chain);
    free(st->fresh);
    free(st->snaps);
}

/* Under the mutex: which blocks are missing, which lack kv's snapshot
 * (want[i]: 1 rows, 2 snapshot). */
static void s_store_plan(prefix_cache *pc, uint64_t domain, const kv_cache *kv, const int32_t *ids, int n_blocks,
                         const pc_store *st, unsigned char *want) {
    const int B = pc->block_tokens;
    s_lock(pc);
    for (int i = 0; i < n_blocks; i++) {
        const uint64_t parent = i ? st->keys[i - 1] : domain;
        const pc_block *b = s_find(pc, domain, st->keys[i], parent, ids + (size_t)i * (size_t)B);
        want[i] = (unsigned char)((b ? 0 : 1) |
                                  (pc->snap_bytes && kv_cache_snap_at(kv, (i + 1) * B) && (!b || !b->snap) ? 2 : 0));
    }
    s_unlock(pc);
}

/* Under the mutex: link the chain, staged blocks and snapshots in (what
 * they take over is no longer the store's). Returns the blocks added. */
static int s_store_link(prefix_cache *pc, uint64_t domain, const int32_t *ids, int n_blocks, pc_store *st) {
    const int B = pc->block_tokens;
    s_lock(pc);
    pc->op++;
    int i = 0, added = 0;
    for (; i < n_blocks; i++) {
        const uint64_t parent = i ? st->keys[i - 1] : domain;
        pc_block *b = s_find(pc, domain, st->keys[i], parent, ids + (size_t)i * (size_t)B);
        if (b) {
            s_touch(pc, b); /* marks it as this operation's: not evicted below */
        } else if (st->fresh[i] && s_link(pc, st->fresh[i])) {
            b = st->fresh[i];
            st->fresh[i] = NULL;
            added++;
        }
        if (!b) break; /* full, or gone since the plan (evicted): the rest hangs on nothing */
        if (st->snaps[i] && !b->snap && s_make_room(pc, pc->snap_bytes)) {
            b->snap = st->snaps[i]; /* set once, never replaced: restores read it unlocked */
            st->snaps[i] = NULL;
            pc->c.bytes += pc->snap_bytes;
        }
        st->chain[i] = b;
    }
    s_touch_chain(pc, st->chain, i);
    s_unlock(pc);
    return added;
}

/* Three steps so the copies run without the mutex: plan what is missing
 * (locked), copy it (unlocked), link it in (locked; a block another store
 * put in meanwhile wins and the copy is dropped). */
int prefix_cache_store(prefix_cache *pc, uint64_t domain, const kv_cache *kv, const int32_t *ids, int n) {
    if (!s_shape_ok(pc, kv) || n > kv->n_ctx)
        return coli_fail(COLI_EINVAL, "prefix cache: KV cache of another shape, or %d tokens > its %d", n, kv->n_ctx);
    const int B = pc->block_tokens;
    int n_blocks = n / B;
    while (pc->snap_bytes && n_blocks > 0 && !kv_cache_snap_at(kv, n_blocks * B)) n_blocks--;
    if (n_blocks == 0 || pc->c.max_bytes < pc->block_bytes) return 0;
    const size_t N = (size_t)n_blocks;
    pc_store st = {malloc(N * sizeof *st.keys), malloc(N * sizeof *st.chain), calloc(N, sizeof *st.fresh),
                   calloc(N, sizeof *st.snaps)};
    unsigned char *want = malloc(N);
    const int have = st.keys && st.chain && st.fresh && st.snaps && want;
    int rc = have ? 0 : coli_fail(COLI_ENOMEM, "prefix cache: out of memory");
    for (int i = 0; rc == 0 && i < n_blocks; i++)
        st.keys[i] = s_chain_key(i ? st.keys[i - 1] : domain, ids + (size_t)i * (size_t)B, B);
    if (rc == 0) s_store_plan(pc, domain, kv, ids, n_blocks, &st, want);
    for (int i = 0; rc == 0 && i < n_blocks; i++) {
        if (want[i] & 1)
            st.fresh[i] = s_stage(pc, domain, st.keys[i], i ? st.keys[i - 1] : domain, ids + (size_t)i * (size_t)B, kv,
                                  i * B, &rc);
        if (want[i] & 2) st.snaps[i] = s_stage_snap(kv, (i + 1) * B, pc->snap_bytes, &rc);
    }
    /* after a failed copy: the blocks before it still go in */
    const int added = have ? s_store_link(pc, domain, ids, n_blocks, &st) : 0;
    s_store_free(&st, n_blocks);
    free(want);
    return rc < 0 ? rc : added;
}

void prefix_cache_get_counters(prefix_cache *pc, prefix_cache_counters *out) {
    s_lock(pc);
    *out = pc->c;
    s_unlock(pc);
}
