/*
 * kv_cache.h - the state of one sequence: per layer either the keys and
 * values of every past position, or (the linear-attention layers of hybrid
 * models) a fixed-size recurrent state.
 *
 * Layout: k[kv layer][pos][k_dim] and v[kv layer][pos][v_dim], so one
 * position's K (or V) row for a layer is contiguous and attention walks
 * positions in order. k_dim = n_head_kv * key_length, v_dim = n_head_kv *
 * value_length. With v_in_k the values are the first v_dim elements of each
 * key row and nothing else is stored (deepseek2's latent cache: the key row
 * is [c_kv | k_pe], the value c_kv; docs/architectures.md).
 * Storage is F32, or fp16 (kv_f16 = 1) as llama.cpp's default cache: then
 * values are rounded to fp16 (nearest even) when written.
 *
 * Hybrid models (qwen3next, qwen35moe): a recurrent layer keeps no rows but
 * rec_floats F32 (its causal-conv tail and delta-rule matrices; the forward
 * pass of the family defines the layout), updated in place, so unlike rows
 * it cannot be rolled back to an earlier position. Two snapshots of all
 * recurrent states, taken at positions the caller picks (api.c: the prefix
 * cache's block boundaries), let the prefix cache keep the state of a
 * prefix; a snapshot is dropped as soon as the sequence is rewritten at or
 * before its position (kv_cache_rewind). A sequence that starts again at
 * position 0 starts from a zero state (kv_cache_rewind(c, 0)).
 */
#ifndef COLI_COORD_KV_CACHE_H
#define COLI_COORD_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define KV_SNAPS 2 /* recurrent snapshots a sequence keeps */

typedef void (*kv_copy_hook)(void *user, size_t bytes); /* kv_note_copy */

typedef struct kv_cache {
    int n_layer;
    int n_ctx;              /* positions it holds */
    int64_t k_dim;          /* elements of one position's keys */
    int64_t v_dim;          /* elements of one position's values */
    int v_in_k;             /* 1: V rows are the leading v_dim elements of K rows (v is NULL) */
    int f16;                /* 1: elements are uint16_t fp16; 0: float */
    void *k, *v;            /* (n_kv, n_ctx, k_dim) and (n_kv, n_ctx, v_dim) */
    int n_kv;               /* layers with KV rows (n_layer unless hybrid) */
    int n_rec;              /* layers with a recurrent state (0: none) */
    int64_t rec_floats;     /* floats of one recurrent layer's state */
    int *slot;              /* (n_layer) KV block (>= 0) or -1 - recurrent index; NULL: all KV */
    float *rec;             /* (n_rec, rec_floats) the recurrent states now */
    float *snap[KV_SNAPS];  /* (n_rec, rec_floats) copies of rec ... */
    int snap_pos[KV_SNAPS]; /* ... after this many positions (-1: empty) */
    kv_copy_hook copy_hook; /* called for each copy of this state (kv_note_copy), or NULL */
    void *copy_user;
} kv_cache;

/* What a sequence of a model keeps, per layer (model.h: model_kv_shape). */
typedef struct kv_shape {
    int n_layer;
    int64_t k_dim, v_dim;
    int v_in_k, f16;
    const uint8_t *recurrent; /* (n_layer) 1: a recurrent layer; NULL: none */
    int64_t rec_floats;       /* floats of one recurrent layer's state */
} kv_shape;

/* Allocate (zeroed). Returns 0, COLI_EINVAL or COLI_ENOMEM. */
int kv_cache_init_shape(kv_cache *c, const kv_shape *sh, int n_ctx);
/* What a sequence of this shape takes: KV bytes per position, recurrent bytes. */
void kv_shape_bytes(const kv_shape *sh, size_t *per_token, size_t *per_seq);
/* The same with every layer keeping KV. */
int kv_cache_init(kv_cache *c, int n_layer, int n_ctx, int64_t k_dim, int64_t v_dim, int v_in_k, int f16);
/* Bytes one position takes over all layers. */
size_t kv_cache_bytes_per_token(const kv_cache *c);
/* Bytes of the recurrent states: what a sequence takes whatever its length
 * (snapshots aside: KV_SNAPS times as much more at most). */
size_t kv_cache_rec_bytes(const kv_cache *c);
void kv_cache_free(kv_cache *c);

/* 1: layer keeps KV rows; 0: a recurrent state. */
int kv_cache_has_kv(const kv_cache *c, int layer);

/* Store n rows (k: (n, k_dim), v: (n, v_dim) floats; v unused with v_in_k)
 * at positions pos..pos+n-1 of a KV layer. */
void kv_cache_store(kv_cache *c, int layer, int pos, int n, const float *k, const float *v);

/* Start of the K / V row of (KV layer, pos): float* or uint16_t* per c->f16. */
const void *kv_cache_k(const kv_cache *c, int layer, int pos);
const void *kv_cache_v(const kv_cache *c, int layer, int pos);

/* The recurrent state of a recurrent layer (rec_floats F32). */
float *kv_cache_rec(const kv_cache *c, int layer);

/* The sequence is about to be written from position pos on: snapshots
 * after pos are dropped; at pos 0 the recurrent states start from zero. */
void kv_cache_rewind(kv_cache *c, int pos);
/* Keep a copy of the recurrent states as the state after pos positions
 * (replacing the oldest snapshot). No-op without recurrent layers. */
void kv_cache_snapshot(kv_cache *c, int pos);
/* The snapshot after pos positions, or NULL. */
const float *kv_cache_snap_at(const kv_cache *c, int pos);
/* Make the recurrent states a copy of snap (n_rec * rec_floats F32). */
void kv_cache_rec_load(kv_cache *c, const float *snap);

/* Every copy of a sequence's state (a recurrent snapshot taken or loaded,
 * a prefix-cache block's rows or snapshot copied from or into it) calls its
 * kv_cache's copy_hook with the bytes, on the copying thread: the server
 * counts the copies made while it holds its baton (docs/api.md: none should
 * be). Set after kv_cache_init_shape; NULL: none. */
void kv_note_copy(const kv_cache *c, size_t bytes);

/* fp16 -> fp32 for all 65536 bit patterns (the values coli_fp16_to_fp32
 * gives), built once: attention over an fp16 cache reads it per element. */
const float *kv_fp16_table(void);

#endif
