/*
 * kv_cache.h - the keys and values of every past position, per layer.
 *
 * Layout: k[layer][pos][k_dim] and v[layer][pos][v_dim], so one position's
 * K (or V) row for a layer is contiguous and attention walks positions in
 * order. k_dim = n_head_kv * key_length, v_dim = n_head_kv * value_length.
 * With v_in_k the values are the first v_dim elements of each key row and
 * nothing else is stored (deepseek2's latent cache: the key row is
 * [c_kv | k_pe], the value c_kv; docs/architectures.md).
 * Storage is F32, or fp16 (kv_f16 = 1) as llama.cpp's default cache: then
 * values are rounded to fp16 (nearest even) when written.
 */
#ifndef COLI_COORD_KV_CACHE_H
#define COLI_COORD_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_cache {
    int n_layer;
    int n_ctx;     /* positions it holds */
    int64_t k_dim; /* elements of one position's keys */
    int64_t v_dim; /* elements of one position's values */
    int v_in_k;    /* 1: V rows are the leading v_dim elements of K rows (v is NULL) */
    int f16;       /* 1: elements are uint16_t fp16; 0: float */
    void *k, *v;   /* (n_layer, n_ctx, k_dim) and (n_layer, n_ctx, v_dim) */
} kv_cache;

/* Allocate (zeroed). Returns 0 or COLI_ENOMEM. */
int kv_cache_init(kv_cache *c, int n_layer, int n_ctx, int64_t k_dim, int64_t v_dim, int v_in_k, int f16);
/* Bytes one position takes over all layers. */
size_t kv_cache_bytes_per_token(const kv_cache *c);
void kv_cache_free(kv_cache *c);

/* Store n rows (k: (n, k_dim), v: (n, v_dim) floats; v unused with v_in_k)
 * at positions pos..pos+n-1. */
void kv_cache_store(kv_cache *c, int layer, int pos, int n, const float *k, const float *v);

/* Start of the K / V row of (layer, pos): float* or uint16_t* per c->f16. */
const void *kv_cache_k(const kv_cache *c, int layer, int pos);
const void *kv_cache_v(const kv_cache *c, int layer, int pos);

/* fp16 -> fp32 for all 65536 bit patterns (the values coli_fp16_to_fp32
 * gives), built once: attention over an fp16 cache reads it per element. */
const float *kv_fp16_table(void);

#endif
