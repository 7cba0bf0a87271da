/*
 * model_dsa.c - what DeepSeek Sparse Attention adds to deepseek2's latent
 * attention in the file (deepseek32: DeepSeek-V3.2, glm-dsa: GLM-5), read
 * as llama.cpp de3ff815 reads it (src/models/deepseek32.cpp, glm-dsa.cpp):
 *
 *   <arch>.attention.indexer.head_count / key_length / top_k   (required)
 *   <arch>.attention.indexer.types (glm-dsa, optional): per layer full (1)
 *       or shared (0, reuses the positions the full layer before it chose);
 *       absent: every layer full when context_length < 1048576, else
 *       GLM-5.2's pattern (layers 0, 1, then every fourth from 2)
 *   blk.N.indexer.attn_q_b, attn_k, k_norm (weight + bias), proj
 *
 * Only llama.cpp's newer latent-cache layout (key_length_mla, attn_k_b /
 * attn_v_b) with a q latent (q_lora_rank) exists for these families.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

/* GLM-5.2's layer count in llama.cpp's default indexer pattern. */
#define GLM52_PATTERN_LAYERS 78

/* A required positive "<arch>.<suffix>" up to max. */
static int s_req(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t max, int *out) {
    int64_t v;
    int rc = model_opt_int(f, hp, suffix, 0, max, &v);
    if (rc < 0) return rc;
    if (v <= 0)
        return coli_fail(COLI_EFORMAT, "metadata '%s.%s' missing or 0: %s needs it for its sparse attention",
                         hp->arch_name, suffix, hp->arch_name);
    *out = (int)v;
    return 0;
}

/* A key llama.cpp requires whose value deepseek2's reader defaults. */
static int s_present(const gguf_file *f, const model_hparams *hp, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    if (gguf_find_key(f, key) >= 0) return 0;
    return coli_fail(COLI_EFORMAT, "metadata '%s' missing (required for %s)", key, hp->arch_name);
}

/* Element il of an integer or bool array. */
static int64_t s_arr_at(gguf_type et, const void *data, uint64_t il) {
    const unsigned char *p = (const unsigned char *)data;
    switch (et) {
    case GGUF_BOOL:
    case GGUF_UINT8:
    case GGUF_INT8: return p[il] != 0;
    case GGUF_UINT16:
    case GGUF_INT16: return (p[2 * il] | p[2 * il + 1]) != 0;
    case GGUF_UINT32:
    case GGUF_INT32: return (p[4 * il] | p[4 * il + 1] | p[4 * il + 2] | p[4 * il + 3]) != 0;
    default: return -1;
    }
}

/* 1 when layer il has its own indexer (full), 0 when it reuses (shared);
 * the key was checked by s_check_types. */
static int s_is_full(const gguf_file *f, const model_hparams *hp, int il) {
    char key[128];
    gguf_type et;
    uint64_t n;
    const void *data;
    int64_t v;
    if (hp->arch != ARCH_GLM_DSA) return 1;
    snprintf(key, sizeof key, "%s.attention.indexer.types", hp->arch_name);
    const int64_t id = gguf_find_key(f, key);
    if (id < 0) {
        if (hp->n_ctx_train < 1048576) return 1;
        return il < GLM52_PATTERN_LAYERS && (il < 2 || (il - 2) % 4 == 0);
    }
    if (gguf_kv_type(f, id) != GGUF_ARRAY) return gguf_get_i64(f, key, &v) == 0 && v != 0;
    if (gguf_get_arr(f, key, &et, &n, &data) < 0) return -1;
    return (int)s_arr_at(et, data, (uint64_t)il);
}

/* attention.indexer.types: a flag per layer (llama.cpp: exactly n_layer
 * of them, or one for all), and layer 0 must be full. */
static int s_check_types(const gguf_file *f, const model_hparams *hp) {
    char key[128];
    gguf_type et;
    uint64_t n;
    const void *data;
    snprintf(key, sizeof key, "%s.attention.indexer.types", hp->arch_name);
    const int64_t id = gguf_find_key(f, key);
    if (id >= 0 && gguf_kv_type(f, id) == GGUF_ARRAY) {
        if (gguf_get_arr(f, key, &et, &n, &data) < 0) return COLI_EFORMAT;
        if (n != (uint64_t)hp->n_layer || s_arr_at(et, data, 0) < 0)
            return coli_fail(COLI_EFORMAT, "metadata '%s': expected %d integer or bool flags (one per layer), got %llu",
                             key, hp->n_layer, (unsigned long long)n);
    }
    if (s_is_full(f, hp, 0) != 1)
        return coli_fail(COLI_EFORMAT,
                         "metadata '%s': layer 0 is shared, but a shared layer reuses the choice of a full one "
                         "before it",
                         key);
    return 0;
}

/* The multi-token-prediction blocks after the trunk (nextn_predict_layers):
 * llama.cpp's draft head, not run here. When the file carries them their
 * NextN tensors must have the shapes llama.cpp loads; nothing is kept. */
static int s_check_mtp(const gguf_file *f, const model_hparams *hp) {
    const int64_t E = hp->n_embd;
    const coli_tensor *t;
    int64_t n_blocks;
    int rc = model_opt_int(f, hp, "block_count", hp->n_layer, 1 << 12, &n_blocks);
    for (int il = hp->n_layer; rc == 0 && il < (int)n_blocks; il++) {
        if ((rc = model_blk(f, il, "nextn.eh_proj.weight", 2, 2 * E, E, 1, MASK_MATRIX, 1, &t)) < 0 || !t) continue;
        if ((rc = model_blk(f, il, "nextn.enorm.weight", 1, E, 1, 1, MASK_F32, 0, &t)) < 0) break;
        rc = model_blk(f, il, "nextn.hnorm.weight", 1, E, 1, 1, MASK_F32, 0, &t);
    }
    return rc;
}

int model_dsa_read(const gguf_file *f, model_hparams *hp) {
    int rc;
    if (!hp->mla_absorbed)
        return coli_fail(COLI_EFORMAT,
                         "metadata '%s.attention.key_length_mla' missing: %s runs on the latent cache only "
                         "(attn_k_b / attn_v_b, as llama.cpp converts it)",
                         hp->arch_name, hp->arch_name);
    if (hp->n_lora_q <= 0)
        return coli_fail(COLI_EFORMAT,
                         "metadata '%s.attention.q_lora_rank' missing or 0: the indexer's queries come from "
                         "the q latent",
                         hp->arch_name);
    if ((rc = s_present(f, hp, "expert_shared_count")) < 0) return rc;
    if (hp->arch == ARCH_DEEPSEEK32 && (rc = s_present(f, hp, "expert_gating_func")) < 0) return rc;
    if ((rc = s_req(f, hp, "attention.indexer.head_count", 1 << 12, &hp->idx_n_head)) < 0 ||
        (rc = s_req(f, hp, "attention.indexer.key_length", 1 << 14, &hp->idx_head_dim)) < 0 ||
        (rc = s_req(f, hp, "attention.indexer.top_k", 1 << 24, &hp->idx_top_k)) < 0)
        return rc;
    if (hp->n_rot > hp->idx_head_dim)
        return coli_fail(COLI_EFORMAT,
                         "metadata '%s.attention.indexer.key_length' = %d: smaller than the %d rope dims its "
                         "heads start with",
                         hp->arch_name, hp->idx_head_dim, hp->n_rot);
    hp->idx_neox = hp->arch == ARCH_DEEPSEEK32;
    hp->idx_norm_eps = hp->arch == ARCH_DEEPSEEK32 ? 1e-6f : 0.0f;
    if ((rc = s_check_types(f, hp)) < 0) return rc;
    return s_check_mtp(f, hp);
}

/* get_mscale of llama.cpp's context setup. */
static float s_mscale(float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * logf(scale) + 1.0f; }

void model_dsa_yarn(model_hparams *hp, int yarn, float attn_factor, float log_mul) {
    if (!yarn) return; /* without YaRN the deepseek2 factors hold */
    /* deepseek32 reads yarn_log_multiplier and undoes the converter's 0.1;
     * glm-dsa never reads it (0). Without deepseek2's special case the
     * context's rope factor is mscale(f, 1) / mscale(f, lm), then YaRN's own
     * correction cancelled; the graph's q.k multiplier undoes that again. */
    const float f = 1.0f / hp->rope.freq_scale, g = 1.0f + 0.1f * logf(f);
    const float lm = hp->arch == ARCH_DEEPSEEK32 ? log_mul / 0.1f : 0.0f;
    float yaf = lm != 0.0f ? s_mscale(f, 1.0f) / s_mscale(f, lm) : s_mscale(f, 1.0f);
    yaf = yaf * (1.0f / g) * attn_factor;
    const float mscale = yaf * g * (1.0f + 0.1f * lm * logf(f));
    hp->rope.attn_factor = yaf;
    hp->attn_scale = mscale * mscale / sqrtf((float)hp->head_dim_mla);
}

int model_dsa_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, R = hp->n_lora_q, IH = hp->idx_n_head, ID = hp->idx_head_dim;
    int rc;
    const int full = s_is_full(f, hp, il);
    if (full < 0) return coli_fail(COLI_EFORMAT, "%s: cannot read attention.indexer.types", hp->arch_name);
    if (!full) return 0;
    if ((rc = model_blk(f, il, "indexer.attn_q_b.weight", 2, R, IH * ID, 1, MASK_MATRIX, 0, &l->idx_wq_b)) < 0 ||
        (rc = model_blk(f, il, "indexer.attn_k.weight", 2, E, ID, 1, MASK_MATRIX, 0, &l->idx_wk)) < 0 ||
        (rc = model_blk(f, il, "indexer.k_norm.weight", 1, ID, 1, 1, MASK_F32, 0, &l->idx_k_norm)) < 0 ||
        (rc = model_blk(f, il, "indexer.k_norm.bias", 1, ID, 1, 1, MASK_F32, 0, &l->idx_k_norm_b)) < 0 ||
        (rc = model_blk(f, il, "indexer.proj.weight", 2, E, IH, 1, MASK_MATRIX, 0, &l->idx_proj)) < 0)
        return rc;
    return 0;
}
