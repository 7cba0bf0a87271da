/*
 * model_glm4moe.c - the glm4moe family (GLM-4.5, 4.5-Air, 4.6, 4.7) as
 * llama.cpp's llama_model_glm4_moe reads it: its keys and its tensors.
 *
 * The forward pass is forward.c's common one: q/k/v with biases, per-head
 * RMS q/k norm when the file has it, NEOX rope on the first
 * rope.dimension_count dims of each head (the rest pass through), the FFN
 * norm stored as post_attention_norm, a dense FFN on the leading
 * leading_dense_block_count blocks, then sigmoid routing with the
 * exp_probs_b selection bias, top-k weights renormalised and scaled, plus
 * one ungated shared expert (router.c, as deepseek2).
 *
 * The NextN (multi-token prediction) blocks that follow the trunk
 * (nextn_predict_layers) are loaded and validated, never run
 * (model_nextn.c). Files with only them (llama.cpp's MTP-only export) are
 * refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

/* "glm4moe.<suffix>" into buf. */
static const char *s_key(const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "glm4moe.%s", suffix);
    return buf;
}

/* M-RoPE sections (the vision variants' rope.dimension_sections): llama.cpp
 * switches to multi-axis rope when the first two are positive. */
static int s_refuse_mrope(const gguf_file *f) {
    char key[128];
    gguf_type et;
    uint64_t n;
    const void *data;
    if (gguf_find_key(f, s_key("rope.dimension_sections", key, sizeof key)) < 0) return 0;
    int rc = gguf_get_arr(f, key, &et, &n, &data);
    if (rc < 0) return rc;
    if (n < 2 || (et != GGUF_INT32 && et != GGUF_UINT32)) return 0;
    int32_t sec[2];
    memcpy(sec, data, sizeof sec); /* array elements need not be aligned in the mapping */
    if (sec[0] > 0 && sec[1] > 0)
        return coli_fail(COLI_EUNSUPPORTED,
                         "glm4moe: metadata '%s' = [%d, %d, ...]: multi-axis rope (M-RoPE, the vision "
                         "variants) is not supported",
                         key, (int)sec[0], (int)sec[1]);
    return 0;
}

/* required by llama.cpp for this family, where model.c has defaults */
const char *const glm4moe_required_keys[] = {"expert_count", "expert_used_count", "expert_feed_forward_length",
                                             "expert_shared_count", NULL};

int glm4moe_read_hparams(const gguf_file *f, model_hparams *hp) {
    char key[128];
    int64_t v;
    int rc;
    if (hp->n_expert_shared < 1)
        return coli_fail(COLI_EFORMAT,
                         "glm4moe: metadata '%s' = 0: expected >= 1 (every MoE block has its shared expert)",
                         s_key("expert_shared_count", key, sizeof key));
    if (hp->head_dim_v != hp->head_dim)
        return coli_fail(COLI_EFORMAT, "glm4moe: metadata '%s' = %d: expected key_length %d",
                         s_key("attention.value_length", key, sizeof key), hp->head_dim_v, hp->head_dim);
    /* the gating key absent or 0 (none) means sigmoid for this family */
    hp->gating = GATING_SIGMOID;
    if (gguf_find_key(f, s_key("expert_gating_func", key, sizeof key)) >= 0) {
        if ((rc = gguf_get_i64(f, key, &v)) < 0) return rc;
        if (v == 1) hp->gating = GATING_SOFTMAX;
    }
    /* llama.cpp scales the weights only when the factor is neither 0 nor 1 */
    if (hp->expert_weights_scale == 0.0f) hp->expert_weights_scale = 1.0f;
    return s_refuse_mrope(f);
}

/* q/k/v/o with their optional biases, and the optional per-head q/k norms
 * (both or neither: the forward pass normalises q and k together). */
static int s_load_attention(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    int rc;
    if ((rc = model_blk_attention(f, hp, il, l)) < 0 ||
        (rc = model_blk(f, il, "attn_q_norm.weight", 1, hp->head_dim, 1, 1, MASK_F32, 1, &l->q_norm)) < 0 ||
        (rc = model_blk(f, il, "attn_k_norm.weight", 1, hp->head_dim, 1, 1, MASK_F32, 1, &l->k_norm)) < 0)
        return rc;
    if (!l->q_norm != !l->k_norm)
        return coli_fail(COLI_EFORMAT, "glm4moe: tensor 'blk.%d.%s' missing while '%s' is present", il,
                         l->q_norm ? "attn_k_norm.weight" : "attn_q_norm.weight",
                         l->q_norm ? "attn_q_norm.weight" : "attn_k_norm.weight");
    l->qk_norm_per_head = 1;
    return 0;
}

/* A file written by llama.cpp's MTP-only export: the NextN block without
 * the trunk (blk.0.attn_norm absent, the first NextN block present). */
static int s_mtp_only(const gguf_file *f, const model_hparams *hp) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", hp->n_layer);
    return hp->n_layer_nextn > 0 && !gguf_find_tensor(f, "blk.0.attn_norm.weight") && gguf_find_tensor(f, name);
}

int glm4moe_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, X = hp->n_expert;
    int rc;
    if (il == 0 && s_mtp_only(f, hp))
        return coli_fail(COLI_EUNSUPPORTED,
                         "glm4moe: the file holds only the NextN (multi-token prediction) block, a draft "
                         "model: 'blk.0.attn_norm.weight' missing");
    if ((rc = s_load_attention(f, hp, il, l)) < 0) return rc;
    if ((rc = model_blk(f, il, "post_attention_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0) return rc;
    if (il < hp->n_layer_dense_lead) return model_blk_ffn(f, il, "", E, hp->n_ff, &l->dense);
    if ((rc = model_blk_moe(f, hp, il, l)) < 0) return rc;
    if ((rc = model_blk(f, il, "exp_probs_b.bias", 1, X, 1, 1, MASK_F32, 0, &l->exp_probs_b)) < 0) return rc;
    l->has_shexp = 1;
    return model_blk_ffn(f, il, "_shexp", E, hp->n_ff_shexp, &l->shexp);
}
