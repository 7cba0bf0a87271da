/* kv_cache.c - see kv_cache.h. */
#include "coordinator/kv_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/quant/quant.h"

static size_t s_elem(const kv_cache *c) { return c->f16 ? sizeof(uint16_t) : sizeof(float); }

/* Element offset of (layer, pos, 0) in rows of width dim. */
static size_t s_offset(const kv_cache *c, int layer, int pos, int64_t dim) {
    return ((size_t)layer * (size_t)c->n_ctx + (size_t)pos) * (size_t)dim;
}

int kv_cache_init(kv_cache *c, int n_layer, int n_ctx, int64_t k_dim, int64_t v_dim, int v_in_k, int f16) {
    memset(c, 0, sizeof *c);
    if (v_in_k && v_dim > k_dim)
        return coli_fail(COLI_EINVAL, "KV cache: values of %lld inside keys of %lld", (long long)v_dim,
                         (long long)k_dim);
    c->n_layer = n_layer;
    c->n_ctx = n_ctx;
    c->k_dim = k_dim;
    c->v_dim = v_dim;
    c->f16 = f16 ? 1 : 0;
    c->v_in_k = v_in_k ? 1 : 0;
    size_t nk = (size_t)n_layer * (size_t)n_ctx * (size_t)k_dim;
    size_t nv = c->v_in_k ? 0 : (size_t)n_layer * (size_t)n_ctx * (size_t)v_dim;
    c->k = calloc(nk, s_elem(c));
    c->v = nv ? calloc(nv, s_elem(c)) : NULL;
    if (!c->k || (nv && !c->v)) {
        kv_cache_free(c);
        return coli_fail(COLI_ENOMEM, "KV cache: cannot allocate %zu + %zu bytes (%d layers, %d positions)",
                         nk * (f16 ? 2 : 4), nv * (f16 ? 2 : 4), n_layer, n_ctx);
    }
    return 0;
}

void kv_cache_free(kv_cache *c) {
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}

void kv_cache_store(kv_cache *c, int layer, int pos, int n, const float *k, const float *v) {
    size_t ko = s_offset(c, layer, pos, c->k_dim), nk = (size_t)n * (size_t)c->k_dim;
    size_t vo = s_offset(c, layer, pos, c->v_dim), nv = c->v_in_k ? 0 : (size_t)n * (size_t)c->v_dim;
    if (!c->f16) {
        memcpy((float *)c->k + ko, k, nk * sizeof(float));
        if (nv) memcpy((float *)c->v + vo, v, nv * sizeof(float));
        return;
    }
    uint16_t *kd = (uint16_t *)c->k + ko;
    for (size_t i = 0; i < nk; i++) kd[i] = coli_fp32_to_fp16(k[i]);
    if (!nv) return;
    uint16_t *vd = (uint16_t *)c->v + vo;
    for (size_t i = 0; i < nv; i++) vd[i] = coli_fp32_to_fp16(v[i]);
}

const void *kv_cache_k(const kv_cache *c, int layer, int pos) {
    return (const char *)c->k + s_offset(c, layer, pos, c->k_dim) * s_elem(c);
}

size_t kv_cache_bytes_per_token(const kv_cache *c) {
    return (size_t)c->n_layer * (size_t)(c->k_dim + (c->v_in_k ? 0 : c->v_dim)) * s_elem(c);
}

const void *kv_cache_v(const kv_cache *c, int layer, int pos) {
    if (c->v_in_k) return kv_cache_k(c, layer, pos);
    return (const char *)c->v + s_offset(c, layer, pos, c->v_dim) * s_elem(c);
}

static float s_fp16_table[65536];
static pthread_once_t s_fp16_once = PTHREAD_ONCE_INIT;

static void s_fill_fp16_table(void) {
    for (uint32_t h = 0; h < 65536; h++) s_fp16_table[h] = coli_fp16_to_fp32((uint16_t)h);
}

const float *kv_fp16_table(void) {
    pthread_once(&s_fp16_once, s_fill_fp16_table);
    return s_fp16_table;
}
