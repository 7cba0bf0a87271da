/*
 * model_minimax_m2.c - the minimax-m2 family (MiniMax-M2, M2.1) as
 * llama.cpp's llama_model_minimax_m2 reads it: its keys and its tensors.
 *
 * The forward pass is forward.c's common one: q/k/v (biases if present),
 * RMS norms over the whole projected q and k (attn_q_norm has n_head *
 * head_dim entries, attn_k_norm n_head_kv * head_dim, as OLMoE's), NEOX
 * rope on the first rope.dimension_count dims of each head, then in every
 * block the router: expert_gating_func (sigmoid for MiniMax-M2) scores,
 * top-k by score + exp_probs_b, the chosen scores always renormalised and
 * never scaled (llama.cpp reads no expert_weights_scale for this family).
 * No shared expert, no dense block.
 */
#include <stdio.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

/* required by llama.cpp for this family (the gating function too: without
 * it llama.cpp's graph aborts), where model.c has defaults */
const char *const minimax_m2_required_keys[] = {"expert_count", "expert_used_count", "expert_feed_forward_length",
                                                "expert_gating_func", NULL};

int minimax_m2_read_hparams(const gguf_file *f, model_hparams *hp) {
    int64_t v, n_ff;
    int rc;
    if ((rc = gguf_get_i64(f, "minimax-m2.feed_forward_length", &n_ff)) < 0 ||
        (rc = gguf_get_i64(f, "minimax-m2.expert_gating_func", &v)) < 0)
        return rc;
    if (v != 1 && v != 2)
        return coli_fail(COLI_EUNSUPPORTED,
                         "minimax-m2: metadata 'minimax-m2.expert_gating_func' = %lld: expected 1 (softmax) or 2 "
                         "(sigmoid)",
                         (long long)v);
    hp->gating = v == 2 ? GATING_SIGMOID : GATING_SOFTMAX;
    hp->renorm_topk = 1;
    hp->expert_weights_scale = 1.0f;
    /* llama.cpp shapes the experts by feed_forward_length and requires
     * expert_feed_forward_length: the converter writes both the same */
    if (hp->n_ff_exp != n_ff)
        return coli_fail(COLI_EFORMAT,
                         "minimax-m2: metadata 'minimax-m2.expert_feed_forward_length' = %lld: expected "
                         "feed_forward_length %lld",
                         (long long)hp->n_ff_exp, (long long)n_ff);
    if (hp->head_dim_v != hp->head_dim)
        return coli_fail(COLI_EFORMAT,
                         "minimax-m2: metadata 'minimax-m2.attention.value_length' = %d: expected "
                         "key_length %d",
                         hp->head_dim_v, hp->head_dim);
    return 0;
}

int minimax_m2_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd;
    int rc;
    if ((rc = model_blk_attention(f, hp, il, l)) < 0 ||
        (rc = model_blk(f, il, "attn_q_norm.weight", 1, model_q_dim(hp), 1, 1, MASK_F32, 0, &l->q_norm)) < 0 ||
        (rc = model_blk(f, il, "attn_k_norm.weight", 1, model_k_dim(hp), 1, 1, MASK_F32, 0, &l->k_norm)) < 0 ||
        (rc = model_blk(f, il, "ffn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0 ||
        (rc = model_blk_moe(f, hp, il, l)) < 0)
        return rc;
    return model_blk(f, il, "exp_probs_b.bias", 1, hp->n_expert, 1, 1, MASK_F32, 0, &l->exp_probs_b);
}
