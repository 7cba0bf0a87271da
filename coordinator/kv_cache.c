/* kv_cache.c - see kv_cache.h. */
#include "coordinator/kv_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/quant/quant.h"

static size_t s_elem(const kv_cache *c) { return c->f16 ? sizeof(uint16_t) : sizeof(float); }

/* KV block of a model layer (the layer itself unless hybrid). */
static int s_kv_block(const kv_cache *c, int layer) { return c->slot ? c->slot[layer] : layer; }

/* Element offset of (layer, pos, 0) in rows of width dim. */
static size_t s_offset(const kv_cache *c, int layer, int pos, int64_t dim) {
    return ((size_t)s_kv_block(c, layer) * (size_t)c->n_ctx + (size_t)pos) * (size_t)dim;
}

static size_t s_rec_total(const kv_cache *c) { return (size_t)c->n_rec * (size_t)c->rec_floats; }

/* Per layer its KV block or recurrent index (c->slot), counting both kinds. */
static int s_layer_slots(kv_cache *c, const kv_shape *sh) {
    c->n_kv = sh->n_layer;
    if (!sh->recurrent) return 0;
    if (!(c->slot = malloc((size_t)sh->n_layer * sizeof *c->slot)))
        return coli_fail(COLI_ENOMEM, "sequence state: out of memory");
    c->n_kv = 0;
    for (int l = 0; l < sh->n_layer; l++) c->slot[l] = sh->recurrent[l] ? -1 - c->n_rec++ : c->n_kv++;
    c->rec_floats = sh->rec_floats;
    return 0;
}

static int s_alloc_rec(kv_cache *c) {
    const size_t n = s_rec_total(c);
    if (!n) return 0;
    int ok = (c->rec = calloc(n, sizeof(float))) != NULL;
    for (int i = 0; i < KV_SNAPS; i++) ok &= (c->snap[i] = malloc(n * sizeof(float))) != NULL;
    return ok ? 0
              : coli_fail(COLI_ENOMEM, "sequence state: cannot allocate %d recurrent states of %lld floats", c->n_rec,
                          (long long)c->rec_floats);
}

int kv_cache_init_shape(kv_cache *c, const kv_shape *sh, int n_ctx) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < KV_SNAPS; i++) c->snap_pos[i] = -1;
    if (sh->v_in_k && sh->v_dim > sh->k_dim)
        return coli_fail(COLI_EINVAL, "KV cache: values of %lld inside keys of %lld", (long long)sh->v_dim,
                         (long long)sh->k_dim);
    if (sh->recurrent && sh->rec_floats < 1)
        return coli_fail(COLI_EINVAL, "sequence state: recurrent layers of %lld floats", (long long)sh->rec_floats);
    c->n_layer = sh->n_layer;
    c->n_ctx = n_ctx;
    c->k_dim = sh->k_dim;
    c->v_dim = sh->v_dim;
    c->f16 = sh->f16 ? 1 : 0;
    c->v_in_k = sh->v_in_k ? 1 : 0;
    int rc = s_layer_slots(c, sh);
    if (rc == 0) rc = s_alloc_rec(c);
    if (rc) {
        kv_cache_free(c);
        return rc;
    }
    size_t nk = (size_t)c->n_kv * (size_t)n_ctx * (size_t)c->k_dim;
    size_t nv = c->v_in_k ? 0 : (size_t)c->n_kv * (size_t)n_ctx * (size_t)c->v_dim;
    c->k = nk ? calloc(nk, s_elem(c)) : NULL;
    c->v = nv ? calloc(nv, s_elem(c)) : NULL;
    if ((nk && !c->k) || (nv && !c->v)) {
        kv_cache_free(c);
        return coli_fail(COLI_ENOMEM, "KV cache: cannot allocate %zu + %zu bytes (%d layers, %d positions)",
                         nk * (sh->f16 ? 2 : 4), nv * (sh->f16 ? 2 : 4), c->n_kv, n_ctx);
    }
    return 0;
}

void kv_shape_bytes(const kv_shape *sh, size_t *per_token, size_t *per_seq) {
    const size_t row = (size_t)(sh->k_dim + (sh->v_in_k ? 0 : sh->v_dim)) * (sh->f16 ? 2 : 4);
    *per_token = *per_seq = 0;
    for (int l = 0; l < sh->n_layer; l++) {
        if (sh->recurrent && sh->recurrent[l])
            *per_seq += (size_t)sh->rec_floats * sizeof(float);
        else
            *per_token += row;
    }
}

int kv_cache_init(kv_cache *c, int n_layer, int n_ctx, int64_t k_dim, int64_t v_dim, int v_in_k, int f16) {
    const kv_shape sh = {.n_layer = n_layer, .k_dim = k_dim, .v_dim = v_dim, .v_in_k = v_in_k, .f16 = f16};
    return kv_cache_init_shape(c, &sh, n_ctx);
}

void kv_cache_free(kv_cache *c) {
    free(c->k);
    free(c->v);
    free(c->slot);
    free(c->rec);
    for (int i = 0; i < KV_SNAPS; i++) free(c->snap[i]);
    c->k = c->v = NULL;
    c->slot = NULL;
    c->rec = NULL;
    memset(c->snap, 0, sizeof c->snap);
}

int kv_cache_has_kv(const kv_cache *c, int layer) { return s_kv_block(c, layer) >= 0; }

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
    return (size_t)c->n_kv * (size_t)(c->k_dim + (c->v_in_k ? 0 : c->v_dim)) * s_elem(c);
}

size_t kv_cache_rec_bytes(const kv_cache *c) { return s_rec_total(c) * sizeof(float); }

const void *kv_cache_v(const kv_cache *c, int layer, int pos) {
    if (c->v_in_k) return kv_cache_k(c, layer, pos);
    return (const char *)c->v + s_offset(c, layer, pos, c->v_dim) * s_elem(c);
}

float *kv_cache_rec(const kv_cache *c, int layer) {
    return c->rec + (size_t)(-1 - s_kv_block(c, layer)) * (size_t)c->rec_floats;
}

void kv_cache_rewind(kv_cache *c, int pos) {
    for (int i = 0; i < KV_SNAPS; i++)
        if (c->snap_pos[i] > pos) c->snap_pos[i] = -1;
    if (pos == 0 && c->rec) memset(c->rec, 0, kv_cache_rec_bytes(c));
}

void kv_note_copy(const kv_cache *c, size_t bytes) {
    if (c->copy_hook) c->copy_hook(c->copy_user, bytes);
}

void kv_cache_snapshot(kv_cache *c, int pos) {
    if (!c->rec) return;
    kv_note_copy(c, kv_cache_rec_bytes(c));
    int i = c->snap_pos[0] <= c->snap_pos[1] ? 0 : 1; /* the empty or the older one ... */
    for (int j = 0; j < KV_SNAPS; j++)
        if (c->snap_pos[j] == pos) i = j; /* ... unless one is at pos already */
    memcpy(c->snap[i], c->rec, kv_cache_rec_bytes(c));
    c->snap_pos[i] = pos;
}

const float *kv_cache_snap_at(const kv_cache *c, int pos) {
    for (int i = 0; i < KV_SNAPS; i++)
        if (c->rec && c->snap_pos[i] == pos) return c->snap[i];
    return NULL;
}

void kv_cache_rec_load(kv_cache *c, const float *snap) {
    if (!c->rec) return;
    kv_note_copy(c, kv_cache_rec_bytes(c));
    memcpy(c->rec, snap, kv_cache_rec_bytes(c));
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
