/*
 * model_gptoss.c - the gpt-oss keys and tensors (OpenAI gpt-oss-20b/120b;
 * llama.cpp's LLM_ARCH_OPENAI_MOE), on top of model.c's common ones.
 *
 * What llama.cpp de3ff815 reads for this family and how we read it:
 *   attention.sliding_window          required: the window of the SWA layers
 *   attention.sliding_window_pattern  an integer n (default 2: layer il is
 *                                     SWA when n == 0 or il % n < n - 1) or an
 *                                     array of block_count flags
 *   rope.freq_base_swa                refused when it differs from
 *                                     rope.freq_base (one rope for all layers)
 *   expert_feed_forward_length        required
 *   key_length = value_length = rope.dimension_count: llama.cpp sizes q, k,
 *   v by the rope dims and scales by 1/sqrt(rope dims), so other values are
 *   refused by name. Routing is always a softmax over the top-k logits
 *   (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT), never renormalised or
 *   scaled; the experts' activation is in core/kernels/expert_ffn.c.
 */
#include <stdio.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

#define GPTOSS_MAX_WINDOW (1 << 24)

/* "gpt-oss.<suffix>" into buf. */
static const char *s_key(const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "gpt-oss.%s", suffix);
    return buf;
}

/* One rope for every layer: a different base for the SWA layers is refused. */
static int s_check_swa_rope(const gguf_file *f) {
    char key[96], base_key[96];
    float swa = 0.0f, base = 10000.0f;
    int rc;
    if (gguf_find_key(f, s_key("rope.freq_base_swa", key, sizeof key)) < 0) return 0;
    if ((rc = gguf_get_f32(f, key, &swa)) < 0) return rc;
    if (gguf_find_key(f, s_key("rope.freq_base", base_key, sizeof base_key)) >= 0 &&
        (rc = gguf_get_f32(f, base_key, &base)) < 0)
        return rc;
    if (swa != base)
        return coli_fail(COLI_EUNSUPPORTED,
                         "metadata '%s' = %g: a rope base of its own for the sliding-window layers "
                         "is not supported (rope.freq_base %g)",
                         key, (double)swa, (double)base);
    return 0;
}

/* The pattern key as an array: block_count integer or bool flags. */
static int s_check_pattern_array(const gguf_file *f, const char *key, int n_layer_all) {
    gguf_type et;
    uint64_t n;
    const void *data;
    int rc = gguf_get_arr(f, key, &et, &n, &data);
    if (rc < 0) return rc;
    if (et != GGUF_BOOL && et != GGUF_INT32 && et != GGUF_UINT32)
        return coli_fail(COLI_EFORMAT, "metadata '%s': array of type %d, expected bool/int32/uint32 flags", key,
                         (int)et);
    if (n != (uint64_t)n_layer_all)
        return coli_fail(COLI_EFORMAT, "metadata '%s': %llu flags, expected block_count %d", key, (unsigned long long)n,
                         n_layer_all);
    return 0;
}

int model_gptoss_hparams(const gguf_file *f, model_hparams *hp) {
    char key[96];
    int64_t v;
    int rc;
    if ((rc = model_opt_int(f, hp, "attention.sliding_window", 0, GPTOSS_MAX_WINDOW, &v)) < 0) return rc;
    if (v <= 0)
        return coli_fail(COLI_EFORMAT, "gpt-oss: metadata '%s' missing or 0: expected the sliding window (1..%d)",
                         s_key("attention.sliding_window", key, sizeof key), GPTOSS_MAX_WINDOW);
    hp->n_swa = (int)v;
    if (gguf_find_key(f, s_key("expert_feed_forward_length", key, sizeof key)) < 0)
        return coli_fail(COLI_EFORMAT, "gpt-oss: metadata '%s' missing", key);
    if (hp->head_dim != hp->n_rot || hp->head_dim_v != hp->n_rot)
        return coli_fail(COLI_EFORMAT,
                         "gpt-oss: metadata 'gpt-oss.attention.key_length' %d / 'value_length' %d: expected "
                         "'gpt-oss.rope.dimension_count' %d (llama.cpp sizes every head by the rope dims)",
                         hp->head_dim, hp->head_dim_v, hp->n_rot);
    if ((rc = model_swa_pattern_check(f, hp)) < 0) return rc;
    if ((rc = s_check_swa_rope(f)) < 0) return rc;
    hp->gating = GATING_SOFTMAX_WEIGHT;
    hp->renorm_topk = 0;
    hp->expert_weights_scale = 1.0f;
    return 0;
}

/* 1 when layer il attends through the window (llama.cpp's set_swa_pattern,
 * dense_first false, default n: il % n < n - 1; or the array's flag). */
int model_swa_layer(const gguf_file *f, const model_hparams *hp, int il, int64_t n) {
    char key[96];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch_name);
    const int64_t i = gguf_find_key(f, key);
    if (i >= 0 && gguf_kv_type(f, i) == GGUF_ARRAY) {
        gguf_type et;
        uint64_t cnt;
        const void *data;
        if (gguf_get_arr(f, key, &et, &cnt, &data) < 0 || (uint64_t)il >= cnt) return 0;
        if (et == GGUF_BOOL) return ((const uint8_t *)data)[il] != 0;
        int32_t v; /* array elements need not be aligned in the mapping */
        memcpy(&v, (const char *)data + 4 * (size_t)il, sizeof v);
        return v != 0;
    }
    if (i >= 0 && model_opt_int(f, hp, "attention.sliding_window_pattern", n, 1 << 16, &n) < 0) return 0;
    return n == 0 || il % n < n - 1;
}

/* The pattern key, when present: block_count flags or an integer. */
int model_swa_pattern_check(const gguf_file *f, const model_hparams *hp) {
    char key[96];
    int64_t v;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch_name);
    const int64_t i = gguf_find_key(f, key);
    if (i < 0) return 0;
    if (gguf_kv_type(f, i) == GGUF_ARRAY) return s_check_pattern_array(f, key, hp->n_layer);
    return model_opt_int(f, hp, "attention.sliding_window_pattern", 2, 1 << 16, &v);
}

static int s_load_attention(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, Q = model_q_dim(hp), K = model_k_dim(hp), V = model_v_dim(hp);
    int rc;
    if ((rc = model_blk(f, il, "attn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_norm)) < 0 ||
        (rc = model_blk(f, il, "attn_q.weight", 2, E, Q, 1, MASK_MATRIX, 0, &l->wq)) < 0 ||
        (rc = model_blk(f, il, "attn_k.weight", 2, E, K, 1, MASK_MATRIX, 0, &l->wk)) < 0 ||
        (rc = model_blk(f, il, "attn_v.weight", 2, E, V, 1, MASK_MATRIX, 0, &l->wv)) < 0 ||
        (rc = model_blk(f, il, "attn_output.weight", 2, model_attn_dim(hp), E, 1, MASK_MATRIX, 0, &l->wo)) < 0 ||
        (rc = model_blk(f, il, "attn_q.bias", 1, Q, 1, 1, MASK_F32, 0, &l->bq)) < 0 ||
        (rc = model_blk(f, il, "attn_k.bias", 1, K, 1, 1, MASK_F32, 0, &l->bk)) < 0 ||
        (rc = model_blk(f, il, "attn_v.bias", 1, V, 1, 1, MASK_F32, 0, &l->bv)) < 0 ||
        (rc = model_blk(f, il, "attn_output.bias", 1, E, 1, 1, MASK_F32, 0, &l->bo)) < 0 ||
        (rc = model_blk(f, il, "attn_sinks.weight", 1, hp->n_head, 1, 1, MASK_F32, 0, &l->sinks)) < 0)
        return rc;
    l->n_swa = model_swa_layer(f, hp, il, 2) ? hp->n_swa : 0;
    return 0;
}

/* The router and its bias; the experts' matrices and biases are checked
 * here too, though the executors read them (expert_weights_from_gguf). */
static int s_load_moe(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    const coli_tensor *t;
    int rc;
    if ((rc = model_blk(f, il, "post_attention_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0 ||
        (rc = model_blk(f, il, "ffn_gate_inp.weight", 2, E, X, 1, MASK_MATRIX, 0, &l->router)) < 0 ||
        (rc = model_blk(f, il, "ffn_gate_inp.bias", 1, X, 1, 1, MASK_F32, 0, &l->router_b)) < 0 ||
        (rc = model_blk(f, il, "ffn_gate_exps.weight", 3, E, F, X, MASK_MATRIX, 0, &t)) < 0 ||
        (rc = model_blk(f, il, "ffn_up_exps.weight", 3, E, F, X, MASK_MATRIX, 0, &t)) < 0 ||
        (rc = model_blk(f, il, "ffn_down_exps.weight", 3, F, E, X, MASK_MATRIX, 0, &t)) < 0 ||
        (rc = model_blk(f, il, "ffn_gate_exps.bias", 2, F, X, 1, MASK_F32, 0, &t)) < 0 ||
        (rc = model_blk(f, il, "ffn_up_exps.bias", 2, F, X, 1, MASK_F32, 0, &t)) < 0 ||
        (rc = model_blk(f, il, "ffn_down_exps.bias", 2, E, X, 1, MASK_F32, 0, &t)) < 0)
        return rc;
    return 0;
}

int model_gptoss_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    int rc = s_load_attention(f, hp, il, l);
    return rc < 0 ? rc : s_load_moe(f, hp, il, l);
}
