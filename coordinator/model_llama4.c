/*
 * model_llama4.c - the llama4 family (Llama-4 Scout 17B-16E, Maverick
 * 17B-128E) as llama.cpp de3ff815's llama_model_llama4 reads it: its keys
 * and its tensors.
 *
 * What llama.cpp reads for this family and how we read it:
 *   interleave_moe_layer_step    required (1..block_count): layer il is MoE
 *                                when (il + 1) % step == 0, else dense (n_ff)
 *   expert_feed_forward_length   required (a single value; the per-layer
 *                                array form is refused by name)
 *   attention.sliding_window     absent or non-zero: chunked attention with
 *                                llama.cpp's fixed chunk of 8192 positions
 *                                (the value itself is not used: llama.cpp
 *                                overrides it, the converter never writes
 *                                one); 0 (MobileLLM) is refused: llama.cpp
 *                                aborts on such files (no temperature)
 *   attention.sliding_window_pattern  which layers are chunked (default 4:
 *                                il % 4 < 3), the gpt-oss helper's reading
 *   rope.freq_base_swa           refused when it differs from freq_base
 * Fixed by llama.cpp, not metadata: layer il skips rope (NoPE) when
 * (il + 1) % 4 == 0 and then scales q by the attention temperature
 * 1 + 0.1 * log(floor((pos + 1) / 8192) + 1); rope layers RMS-normalise q
 * and k per head after rope (no weight) unless the model has 128 experts
 * (Maverick). Routing: top-1 by the router logit, weight sigmoid(logit),
 * which multiplies the expert's INPUT (forward.c), plus one shared expert
 * of expert_feed_forward_length on the same normalised input.
 */
#include <stdio.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

#define LLAMA4_CHUNK 8192
#define LLAMA4_NOPE_STEP 4
#define LLAMA4_TEMP_FLOOR 8192
#define LLAMA4_TEMP_SCALE 0.1f
#define LLAMA4_TEMP_OFFSET 1.0f
#define LLAMA4_MAVERICK_EXPERTS 128

/* required by llama.cpp for this family, where model.c has defaults */
const char *const llama4_required_keys[] = {"expert_count", "expert_used_count", "expert_feed_forward_length",
                                            "interleave_moe_layer_step", NULL};

/* The one-value float key "llama4.<suffix>" equal to base when present. */
static int s_same_f32(const gguf_file *f, const char *key, float base, const char *what) {
    float v;
    int rc;
    if (gguf_find_key(f, key) < 0) return 0;
    if ((rc = gguf_get_f32(f, key, &v)) < 0) return rc;
    if (v != base)
        return coli_fail(COLI_EUNSUPPORTED, "llama4: metadata '%s' = %g: expected %s %g (one rope for all layers)", key,
                         (double)v, what, (double)base);
    return 0;
}

/* The chunked-attention keys: the window key absent or non-zero. */
static int s_read_chunking(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    if (gguf_find_key(f, "llama4.attention.sliding_window") >= 0) {
        if ((rc = model_opt_int(f, hp, "attention.sliding_window", 0, 1 << 30, &v)) < 0) return rc;
        if (v == 0)
            return coli_fail(COLI_EUNSUPPORTED,
                             "llama4: metadata 'llama4.attention.sliding_window' = 0 (no chunked attention, "
                             "MobileLLM): not supported (llama.cpp de3ff815 aborts on it)");
    }
    hp->n_swa = LLAMA4_CHUNK;
    if ((rc = model_swa_pattern_check(f, hp)) < 0) return rc;
    return s_same_f32(f, "llama4.rope.freq_base_swa", hp->rope.base, "rope.freq_base");
}

int llama4_read_hparams(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    if (gguf_kv_type(f, gguf_find_key(f, "llama4.expert_feed_forward_length")) == GGUF_ARRAY)
        return coli_fail(COLI_EUNSUPPORTED,
                         "llama4: metadata 'llama4.expert_feed_forward_length': a per-layer array is not supported");
    if ((rc = model_opt_int(f, hp, "interleave_moe_layer_step", 0, hp->n_layer, &v)) < 0) return rc;
    if (v < 1)
        return coli_fail(COLI_EFORMAT, "llama4: metadata 'llama4.interleave_moe_layer_step' = %lld: expected 1..%d",
                         (long long)v, hp->n_layer);
    hp->n_moe_step = (int)v;
    if ((rc = model_opt_int(f, hp, "feed_forward_length", 0, 1 << 30, &hp->n_ff)) < 0) return rc;
    if (hp->n_expert_used != 1)
        return coli_fail(COLI_EUNSUPPORTED,
                         "llama4: metadata 'llama4.expert_used_count' = %d: only top-1 routing is supported (the "
                         "router weight scales the expert's input)",
                         hp->n_expert_used);
    if (hp->head_dim != hp->head_dim_v || hp->head_dim != hp->n_rot)
        return coli_fail(COLI_EFORMAT,
                         "llama4: metadata 'llama4.rope.dimension_count' = %d: expected key_length = "
                         "value_length = %d (llama.cpp rotates whole heads)",
                         hp->n_rot, hp->head_dim);
    hp->gating = GATING_SIGMOID;
    hp->renorm_topk = 0;
    hp->expert_weights_scale = 1.0f;
    hp->n_ff_shexp = hp->n_ff_exp;
    hp->attn_temp_floor = LLAMA4_TEMP_FLOOR;
    hp->attn_temp_scale = LLAMA4_TEMP_SCALE;
    hp->attn_temp_offset = LLAMA4_TEMP_OFFSET;
    return s_read_chunking(f, hp);
}

int llama4_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd;
    int rc;
    if ((rc = model_blk_attention(f, hp, il, l)) < 0 ||
        (rc = model_blk(f, il, "ffn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0)
        return rc;
    l->n_chunk = model_swa_layer(f, hp, il, 4) ? hp->n_swa : 0;
    l->no_rope = (il + 1) % LLAMA4_NOPE_STEP == 0;
    l->l2_qk_norm = !l->no_rope && hp->n_expert != LLAMA4_MAVERICK_EXPERTS;
    if ((il + 1) % hp->n_moe_step != 0) return model_blk_ffn(f, il, "", E, hp->n_ff, &l->dense);
    if ((rc = model_blk_moe(f, hp, il, l)) < 0) return rc;
    l->moe_weight_in = 1;
    l->has_shexp = 1;
    return model_blk_ffn(f, il, "_shexp", E, hp->n_ff_shexp, &l->shexp);
}
