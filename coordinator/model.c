/*
 * model.c - read hyper-parameters from GGUF metadata and validate every
 * tensor the forward pass will touch; see model.h.
 */
#include "coordinator/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

// ---------------------------------------------------------------------------
// metadata

/* "<arch>.<suffix>" into buf. */
static const char *s_key(const model_hparams *hp, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", hp->arch_name, suffix);
    return buf;
}

/* A positive integer key that must be present and at most max. */
static int s_req_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t max, int64_t *out) {
    char key[128];
    s_key(hp, suffix, key, sizeof key);
    int rc = gguf_get_i64(f, key, out);
    if (rc < 0) return rc;
    if (*out <= 0 || *out > max)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected 1..%lld", key, (long long)*out, (long long)max);
    return 0;
}

/* An optional integer key: def when absent. */
static int s_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t def, int64_t max,
                     int64_t *out) {
    char key[128];
    if (gguf_find_key(f, s_key(hp, suffix, key, sizeof key)) < 0) {
        *out = def;
        return 0;
    }
    int rc = gguf_get_i64(f, key, out);
    if (rc < 0) return rc;
    if (*out < 0 || *out > max)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected 0..%lld", key, (long long)*out, (long long)max);
    return 0;
}

/* An optional float key: def when absent. */
static int s_opt_f32(const gguf_file *f, const model_hparams *hp, const char *suffix, float def, float *out) {
    char key[128];
    *out = def;
    if (gguf_find_key(f, s_key(hp, suffix, key, sizeof key)) < 0) return 0;
    int rc = gguf_get_f32(f, key, out);
    if (rc < 0) return rc;
    if (!isfinite(*out))
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected a finite number", key, (double)*out);
    return 0;
}

/* An optional bool key: def when absent. */
static int s_opt_bool(const gguf_file *f, const model_hparams *hp, const char *suffix, int def, int *out) {
    char key[128];
    *out = def;
    if (gguf_find_key(f, s_key(hp, suffix, key, sizeof key)) < 0) return 0;
    return gguf_get_bool(f, key, out);
}

static int s_read_arch(const gguf_file *f, model_hparams *hp) {
    gguf_str s;
    int rc = gguf_get_str(f, "general.architecture", &s);
    if (rc < 0) return rc;
    static const struct {
        const char *name;
        model_arch arch;
    } known[] = {
        {"llama", ARCH_LLAMA},           {"olmoe", ARCH_OLMOE},         {"qwen2moe", ARCH_QWEN2MOE},
        {"qwen3moe", ARCH_QWEN3MOE},     {"deepseek2", ARCH_DEEPSEEK2}, {"glm4moe", ARCH_GLM4MOE},
        {"minimax-m2", ARCH_MINIMAX_M2}, {"gpt-oss", ARCH_GPTOSS},      {"deepseek32", ARCH_DEEPSEEK32},
        {"glm-dsa", ARCH_GLM_DSA},       {"qwen3next", ARCH_QWEN3NEXT}, {"qwen35moe", ARCH_QWEN35MOE},
        {"llama4", ARCH_LLAMA4},         {"kimi-k3", ARCH_KIMI_K3},     {"kimi-linear", ARCH_KIMI_LINEAR},
        {"deepseek4", ARCH_DEEPSEEK4},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (s.len == strlen(known[i].name) && memcmp(s.ptr, known[i].name, s.len) == 0) {
            hp->arch = known[i].arch;
            snprintf(hp->arch_name, sizeof hp->arch_name, "%s", known[i].name);
            return 0;
        }
    }
    return coli_fail(COLI_EUNSUPPORTED,
                     "general.architecture '%.*s': unknown architecture "
                     "(supported: llama, olmoe, qwen2moe, qwen3moe, deepseek2, glm4moe, minimax-m2, gpt-oss, "
                     "deepseek32, glm-dsa, qwen3next, qwen35moe, llama4, kimi-k3, kimi-linear, deepseek4)",
                     (int)(s.len > 64 ? 64 : s.len), s.ptr);
}

/* A width key (key_length / value_length) defaulting to def. */
static int s_head_width(const gguf_file *f, model_hparams *hp, const char *suffix, int def, int *out) {
    int64_t v;
    int rc = s_opt_int(f, hp, suffix, def, MAX_WIDTH, &v);
    if (rc < 0) return rc;
    if (v <= 0) {
        char key[128];
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected 1..%d", s_key(hp, suffix, key, sizeof key),
                         (long long)v, MAX_WIDTH);
    }
    *out = (int)v;
    return 0;
}

/* deepseek2's two layouts: older files (attn_kv_b) give the per-head widths
 * as key_length / value_length and head_count_kv = head_count; newer ones
 * (attn_k_b / attn_v_b, llama.cpp's MLA cache) give them as *_mla and
 * describe the latent MQA: head_count_kv 1, key_length = kv_lora_rank +
 * rope dims (checked with the rope), value_length = kv_lora_rank. */
static int s_read_mla_widths(const gguf_file *f, model_hparams *hp) {
    char key[128];
    int rc;
    /* the Kimi converters may write no value_length: the latent's width (llama.cpp) */
    if (model_is_kimi(hp) && gguf_find_key(f, s_key(hp, "attention.value_length", key, sizeof key)) < 0)
        hp->head_dim_v = hp->n_lora_kv;
    hp->mla_absorbed = gguf_find_key(f, s_key(hp, "attention.key_length_mla", key, sizeof key)) >= 0;
    if (!hp->mla_absorbed) {
        if (hp->n_head_kv != hp->n_head)
            return coli_fail(COLI_EFORMAT,
                             "%s: head_count_kv %d: multi-head latent attention "
                             "without key_length_mla needs head_count %d",
                             hp->arch_name, hp->n_head_kv, hp->n_head);
        hp->head_dim_mla = hp->head_dim;
        hp->head_dim_v_mla = hp->head_dim_v;
        return 0;
    }
    if ((rc = s_head_width(f, hp, "attention.key_length_mla", 0, &hp->head_dim_mla)) < 0) return rc;
    if ((rc = s_head_width(f, hp, "attention.value_length_mla", 0, &hp->head_dim_v_mla)) < 0) return rc;
    if (hp->n_head_kv != 1 || hp->head_dim_v != hp->n_lora_kv)
        return coli_fail(COLI_EFORMAT,
                         "%s: key_length_mla present, so head_count_kv %d and value_length "
                         "%d must be 1 and kv_lora_rank %d",
                         hp->arch_name, hp->n_head_kv, hp->head_dim_v, hp->n_lora_kv);
    return 0;
}

static int s_read_attention(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    char key[128];
    if ((rc = s_req_int(f, hp, "attention.head_count", MAX_WIDTH, &v)) < 0) return rc;
    hp->n_head = (int)v;
    /* kimi-k3: a list, 0 on its linear layers (model_kimi.c) */
    if (model_is_kimi(hp) && (rc = kimi_head_count_kv(f, hp, NULL)) < 0) return rc;
    if (!model_is_kimi(hp) && (rc = s_opt_int(f, hp, "attention.head_count_kv", hp->n_head, MAX_WIDTH, &v)) < 0)
        return rc;
    if (!model_is_kimi(hp)) hp->n_head_kv = (int)v;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return coli_fail(COLI_EFORMAT, "%s: head_count_kv %d does not divide head_count %d", hp->arch_name,
                         hp->n_head_kv, hp->n_head);
    /* the head width is key_length; without it n_embd / n_head */
    if (gguf_find_key(f, s_key(hp, "attention.key_length", key, sizeof key)) < 0 && hp->n_embd % hp->n_head != 0)
        return coli_fail(COLI_EFORMAT, "%s: head_count %d does not divide embedding_length %d", hp->arch_name,
                         hp->n_head, hp->n_embd);
    if ((rc = s_head_width(f, hp, "attention.key_length", hp->n_embd / hp->n_head, &hp->head_dim)) < 0) return rc;
    if ((rc = s_head_width(f, hp, "attention.value_length", hp->head_dim, &hp->head_dim_v)) < 0) return rc;
    if ((rc = gguf_get_f32(f, s_key(hp, "attention.layer_norm_rms_epsilon", key, sizeof key), &hp->rms_eps)) < 0)
        return rc;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected a small positive number", key,
                         (double)hp->rms_eps);
    if (!model_is_mla(hp)) return 0;
    if ((rc = s_opt_int(f, hp, "attention.q_lora_rank", 0, MAX_WIDTH, &v)) < 0) return rc;
    hp->n_lora_q = (int)v;
    if ((rc = s_req_int(f, hp, "attention.kv_lora_rank", MAX_WIDTH, &v)) < 0) return rc;
    hp->n_lora_kv = (int)v;
    return s_read_mla_widths(f, hp);
}

/* rope.scaling.type: absent means linear when a factor is given (llama.cpp's
 * default), i.e. none without one. */
static int s_read_scaling_type(const gguf_file *f, const model_hparams *hp, float factor, rope_scaling *out) {
    char key[128];
    gguf_str s;
    *out = factor > 0.0f && factor != 1.0f ? ROPE_SCALING_LINEAR : ROPE_SCALING_NONE;
    if (gguf_find_key(f, s_key(hp, "rope.scaling.type", key, sizeof key)) < 0) return 0;
    if (gguf_get_str(f, key, &s) < 0) return COLI_EFORMAT;
    static const struct {
        const char *name;
        rope_scaling type;
    } known[] = {
        {"none", ROPE_SCALING_NONE},
        {"linear", ROPE_SCALING_LINEAR},
        {"yarn", ROPE_SCALING_YARN},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (s.len == strlen(known[i].name) && memcmp(s.ptr, known[i].name, s.len) == 0) {
            *out = known[i].type;
            return 0;
        }
    return coli_fail(COLI_EUNSUPPORTED,
                     "metadata '%s' = '%.*s': rope scaling is not supported "
                     "(supported: none, linear, yarn)",
                     key, (int)(s.len > 32 ? 32 : s.len), s.ptr);
}

/* The rope scaling keys (llama.cpp's names and defaults): factor, original
 * context, YaRN's attention factor and log multiplier, ramp bounds. */
static int s_read_rope_scaling(const gguf_file *f, model_hparams *hp, float base, int neox) {
    float factor, attn_factor, log_mul, beta_fast, beta_slow;
    rope_scaling type;
    int64_t n_orig;
    int rc;
    char key[128];
    if ((rc = s_opt_f32(f, hp, "rope.scaling.factor", 0.0f, &factor)) < 0) return rc;
    if (factor == 0.0f && (rc = s_opt_f32(f, hp, "rope.scale_linear", 0.0f, &factor)) < 0) return rc;
    if (factor < 0.0f)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected > 0",
                         s_key(hp, "rope.scaling.factor", key, sizeof key), (double)factor);
    if ((rc = s_read_scaling_type(f, hp, factor, &type)) < 0) return rc;
    if ((rc = s_opt_int(f, hp, "rope.scaling.original_context_length", hp->n_ctx_train, 1 << 24, &n_orig)) < 0 ||
        (rc = s_opt_f32(f, hp, "rope.scaling.attn_factor", 1.0f, &attn_factor)) < 0 ||
        (rc = s_opt_f32(f, hp, "rope.scaling.yarn_log_multiplier", 0.0f, &log_mul)) < 0 ||
        (rc = s_opt_f32(f, hp, "rope.scaling.yarn_beta_fast", 32.0f, &beta_fast)) < 0 ||
        (rc = s_opt_f32(f, hp, "rope.scaling.yarn_beta_slow", 1.0f, &beta_slow)) < 0)
        return rc;
    if (n_orig <= 0) n_orig = hp->n_ctx_train;
    rope_params_init(&hp->rope, hp->n_rot, neox, base, type, factor, (int)n_orig, attn_factor, beta_fast, beta_slow);
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (model_is_mla(hp)) {
        /* llama.cpp's deepseek2 graph: q.k scaled by mscale^2 and rope's
         * own YaRN magnitude correction cancelled through its attn_factor */
        const float inv_fs = 1.0f / hp->rope.freq_scale;
        const float mscale = attn_factor * (1.0f + log_mul * logf(inv_fs));
        hp->attn_scale = mscale * mscale / sqrtf((float)hp->head_dim_mla);
        hp->rope.attn_factor = 1.0f / (1.0f + 0.1f * logf(inv_fs));
        if (hp->arch == ARCH_DEEPSEEK32 || hp->arch == ARCH_GLM_DSA)
            model_dsa_yarn(hp, type == ROPE_SCALING_YARN, attn_factor, log_mul);
    }
    return 0;
}

static int s_read_rope(const gguf_file *f, model_hparams *hp) {
    char key[128];
    int64_t v;
    int rc;
    float base = 10000.0f;
    if (gguf_find_key(f, s_key(hp, "rope.freq_base", key, sizeof key)) >= 0 && (rc = gguf_get_f32(f, key, &base)) < 0)
        return rc;
    if (!(base > 0.0f)) return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected > 0", key, (double)base);
    if ((rc = s_opt_int(f, hp, "rope.dimension_count", hp->head_dim, MAX_WIDTH, &v)) < 0) return rc;
    /* deepseek2 rotates the trailing rope part of each head and needs a nope part */
    const int max = model_is_mla(hp) ? hp->head_dim_mla - 1 : hp->head_dim;
    if (v <= 0 || v > max || v % 2 != 0)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected an even number in 2..%d",
                         s_key(hp, "rope.dimension_count", key, sizeof key), (long long)v, max);
    hp->n_rot = (int)v;
    if (hp->mla_absorbed && hp->head_dim != hp->n_lora_kv + hp->n_rot)
        return coli_fail(COLI_EFORMAT,
                         "%s: key_length %d: expected kv_lora_rank %d + rope dims %d "
                         "(the latent MQA of key_length_mla files)",
                         hp->arch_name, hp->head_dim, hp->n_lora_kv, hp->n_rot);
    return s_read_rope_scaling(f, hp, base,
                               hp->arch != ARCH_LLAMA && hp->arch != ARCH_LLAMA4 && hp->arch != ARCH_DEEPSEEK4 &&
                                   !model_is_mla(hp));
}

/* deepseek2's (and glm4moe's) routing and shared-expert keys. */
static int s_read_deepseek2_ffn(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    char key[128];
    if ((rc = s_opt_int(f, hp, "leading_dense_block_count", 0, hp->n_layer, &v)) < 0) return rc;
    hp->n_layer_dense_lead = (int)v;
    if ((rc = s_opt_int(f, hp, "expert_shared_count", 0, MAX_EXPERTS, &v)) < 0) return rc;
    hp->n_expert_shared = (int)v;
    hp->n_ff_shexp = hp->n_ff_exp * hp->n_expert_shared;
    if ((rc = s_opt_f32(f, hp, "expert_weights_scale", 1.0f, &hp->expert_weights_scale)) < 0) return rc;
    if ((rc = s_opt_bool(f, hp, "expert_weights_norm", 0, &hp->renorm_topk)) < 0) return rc;
    /* glm-dsa: sigmoid when absent or 0 (llama.cpp) */
    if ((rc = s_opt_int(f, hp, "expert_gating_func", hp->arch == ARCH_GLM_DSA ? 2 : 1, 16, &v)) < 0) return rc;
    if (v == 0 && hp->arch == ARCH_GLM_DSA) v = 2;
    if (v != 0 && v != 1 && v != 2)
        return coli_fail(COLI_EUNSUPPORTED, "metadata '%s' = %lld: expected 1 (softmax) or 2 (sigmoid)",
                         s_key(hp, "expert_gating_func", key, sizeof key), (long long)v);
    hp->gating = v == 2 ? GATING_SIGMOID : GATING_SOFTMAX;
    return 0;
}

/* DeepSeek-V3's group-limited routing (expert_group_count > 1): equal groups
 * of at least two experts (a group scores by its two best), some kept. */
static int s_read_expert_groups(const gguf_file *f, model_hparams *hp) {
    int64_t g, used;
    int rc;
    if ((rc = s_opt_int(f, hp, "expert_group_count", 0, MAX_EXPERTS, &g)) < 0 ||
        (rc = s_opt_int(f, hp, "expert_group_used_count", 0, MAX_EXPERTS, &used)) < 0)
        return rc;
    if (g <= 1) return 0;
    if (hp->n_expert % g != 0 || hp->n_expert / g < 2 || used < 1 || used >= g || used > 64)
        return coli_fail(COLI_EFORMAT,
                         "%s: expert_group_count %lld / expert_group_used_count %lld: expected "
                         "groups of >= 2 of the %d experts and 1..min(groups - 1, 64) used",
                         hp->arch_name, (long long)g, (long long)used, hp->n_expert);
    hp->n_expert_group = (int)g;
    hp->n_expert_group_used = (int)used;
    return 0;
}

/* Keys a family needs where model.c has defaults for the others (listed
 * in the family's file). */
static int s_family_required(const gguf_file *f, const model_hparams *hp) {
    const char *const *keys = hp->arch == ARCH_GLM4MOE      ? glm4moe_required_keys
                              : hp->arch == ARCH_MINIMAX_M2 ? minimax_m2_required_keys
                              : hp->arch == ARCH_LLAMA4     ? llama4_required_keys
                                                            : NULL;
    char key[128];
    for (; keys && *keys; keys++)
        if (gguf_find_key(f, s_key(hp, *keys, key, sizeof key)) < 0)
            return coli_fail(COLI_EFORMAT, "%s: metadata '%s' missing", hp->arch_name, key);
    return 0;
}

static int s_read_ffn(const gguf_file *f, model_hparams *hp) {
    int64_t n_ff, v;
    int rc;
    if ((rc = s_family_required(f, hp)) < 0) return rc;
    if ((rc = s_opt_int(f, hp, "expert_count", 0, MAX_EXPERTS, &v)) < 0) return rc;
    hp->n_expert = (int)v;
    if ((rc = s_opt_int(f, hp, "expert_used_count", 0, MAX_EXPERTS, &v)) < 0) return rc;
    hp->n_expert_used = (int)v;
    if (hp->n_expert == 0 && hp->arch != ARCH_LLAMA)
        return coli_fail(COLI_EFORMAT, "%s: metadata '%s.expert_count' missing or 0 (a MoE architecture)",
                         hp->arch_name, hp->arch_name);
    if (hp->n_expert > 0 && (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert))
        return coli_fail(COLI_EFORMAT, "%s: expert_used_count %d: expected 1..expert_count %d", hp->arch_name,
                         hp->n_expert_used, hp->n_expert);
    if (hp->n_expert == 0 && hp->n_expert_used != 0)
        return coli_fail(COLI_EFORMAT, "%s: expert_used_count %d without experts", hp->arch_name, hp->n_expert_used);
    /* deepseek4 files need not carry it (all layers are MoE) */
    if ((rc = hp->arch == ARCH_DEEPSEEK4 ? s_opt_int(f, hp, "feed_forward_length", 0, MAX_WIDTH, &n_ff)
                                         : s_req_int(f, hp, "feed_forward_length", MAX_WIDTH, &n_ff)) < 0)
        return rc;
    hp->expert_weights_scale = 1.0f;
    hp->gating = GATING_SOFTMAX;
    if (hp->n_expert == 0) {
        hp->n_ff = n_ff;
        return 0;
    }
    if ((rc = s_opt_int(f, hp, "expert_feed_forward_length", n_ff, MAX_WIDTH, &hp->n_ff_exp)) < 0) return rc;
    if ((hp->arch == ARCH_QWEN2MOE || model_is_hybrid(hp)) &&
        (rc = s_opt_int(f, hp, "expert_shared_feed_forward_length", hp->n_ff_exp, MAX_WIDTH, &hp->n_ff_shexp)) < 0)
        return rc;
    /* llama.cpp renormalises for Mixtral, Qwen3-MoE and the hybrids, never for OLMoE and Qwen2-MoE */
    hp->renorm_topk = hp->arch == ARCH_LLAMA || hp->arch == ARCH_QWEN3MOE || model_is_hybrid(hp);
    if (hp->arch == ARCH_QWEN3MOE && (rc = s_opt_bool(f, hp, "expert_weights_norm", 1, &hp->renorm_topk)) < 0)
        return rc;
    if ((rc = s_read_expert_groups(f, hp)) < 0) return rc;
    if (hp->arch == ARCH_MINIMAX_M2) return minimax_m2_read_hparams(f, hp);
    if (!model_is_mla(hp) && hp->arch != ARCH_GLM4MOE) return 0;
    hp->n_ff = n_ff; /* the leading dense blocks' width */
    if ((rc = s_read_deepseek2_ffn(f, hp)) < 0) return rc;
    return hp->arch == ARCH_GLM4MOE ? glm4moe_read_hparams(f, hp) : 0;
}

static int s_read_hparams(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    memset(hp, 0, sizeof *hp);
    if ((rc = s_read_arch(f, hp)) < 0) return rc;
    if ((rc = s_req_int(f, hp, "block_count", MAX_LAYERS, &v)) < 0) return rc;
    hp->n_layer = (int)v;
    /* multi-token-prediction blocks come last and are not part of the
     * forward pass (llama.cpp: n_layer = block_count - nextn_predict_layers) */
    if ((rc = s_opt_int(f, hp, "nextn_predict_layers", 0, hp->n_layer - 1, &v)) < 0) return rc;
    hp->n_layer -= (int)v;
    hp->n_layer_nextn = (int)v;
    if ((rc = s_req_int(f, hp, "embedding_length", MAX_WIDTH, &v)) < 0) return rc;
    hp->n_embd = (int)v;
    if ((rc = s_req_int(f, hp, "context_length", 1 << 24, &v)) < 0) return rc;
    hp->n_ctx_train = (int)v;
    if ((rc = s_read_attention(f, hp)) < 0) return rc;
    if ((rc = s_read_rope(f, hp)) < 0) return rc;
    if ((rc = s_read_ffn(f, hp)) < 0) return rc;
    if (hp->arch == ARCH_LLAMA4) return llama4_read_hparams(f, hp);
    if (hp->arch == ARCH_GPTOSS) return model_gptoss_hparams(f, hp);
    if (model_is_kimi(hp)) return kimi_read_hparams(f, hp);
    if (hp->arch == ARCH_DEEPSEEK4) return model_ds4_hparams(f, hp);
    return model_is_mla(hp) && hp->arch != ARCH_DEEPSEEK2 ? model_dsa_read(f, hp) : 0;
}

// ---------------------------------------------------------------------------
// tensors

/* Find name and check its dims (ne[i] for i < n_dims) and type. optional:
 * a missing tensor gives *out = NULL instead of an error. */
static int s_tensor(const gguf_file *f, const char *name, int n_dims, const int64_t *ne, uint64_t type_mask,
                    int optional, const coli_tensor **out) {
    const coli_tensor *t = gguf_find_tensor(f, name);
    *out = NULL;
    if (!t) {
        if (optional) return 0;
        return coli_fail(COLI_EFORMAT, "missing required tensor '%s'", name);
    }
    int same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->ne[i] == ne[i];
    if (!same) {
        char want[96], got[96];
        int a = 0, b = 0;
        for (int i = 0; i < n_dims; i++)
            a += snprintf(want + a, sizeof want - (size_t)a, "%s%lld", i ? ", " : "", (long long)ne[i]);
        for (int i = 0; i < t->n_dims; i++)
            b += snprintf(got + b, sizeof got - (size_t)b, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
        return coli_fail(COLI_EFORMAT, "tensor '%s': shape [%s] disagrees with the metadata, expected [%s]", name, got,
                         want);
    }
    if (t->type >= 64 || !(type_mask & ((uint64_t)1 << t->type)))
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': dtype %s is not supported here%s", name,
                         coli_dtype_name(t->type), type_mask == MASK_F32 ? " (expected F32)" : "");
    *out = t;
    return 0;
}

/* blk.<il>.<suffix> with the expected shape. */
static int s_blk(const gguf_file *f, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                 uint64_t mask, int optional, const coli_tensor **out) {
    char name[128];
    const int64_t ne[3] = {ne0, ne1, ne2};
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return s_tensor(f, name, n_dims, ne, mask, optional, out);
}

static void s_ffn_view(const coli_tensor *g, const coli_tensor *u, const coli_tensor *d, int64_t n_embd, int64_t n_ff,
                       expert_weights *out) {
    out->gate = g->data;
    out->gate_type = g->type;
    out->up = u->data;
    out->up_type = u->type;
    out->down = d->data;
    out->down_type = d->type;
    out->n_embd = n_embd;
    out->n_ff = n_ff;
}

/* deepseek2: q through attn_q or the q_lora pair, k/v through the latent. */
static int s_load_mla(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->n_lora_q, C = hp->n_lora_kv;
    const int64_t Q = H * hp->head_dim_mla, NOPE = hp->head_dim_mla - hp->n_rot, VM = hp->head_dim_v_mla;
    int rc;
    if (R > 0) {
        if ((rc = s_blk(f, il, "attn_q_a.weight", 2, E, R, 1, MASK_MATRIX, 0, &l->wq_a)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_q_a_norm.weight", 1, R, 1, 1, MASK_F32, 0, &l->q_a_norm)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_q_b.weight", 2, R, Q, 1, MASK_MATRIX, 0, &l->wq_b)) < 0) return rc;
    } else if ((rc = s_blk(f, il, "attn_q.weight", 2, E, Q, 1, MASK_MATRIX, 0, &l->wq)) < 0) {
        return rc;
    }
    if ((rc = s_blk(f, il, "attn_kv_a_mqa.weight", 2, E, C + hp->n_rot, 1, MASK_MATRIX, 0, &l->wkv_a)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_kv_a_norm.weight", 1, C, 1, 1, MASK_F32, 0, &l->kv_a_norm)) < 0) return rc;
    if (hp->mla_absorbed) {
        if ((rc = s_blk(f, il, "attn_k_b.weight", 3, NOPE, C, H, MASK_MATRIX, 0, &l->wk_b)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_v_b.weight", 3, C, VM, H, MASK_MATRIX, 0, &l->wv_b)) < 0) return rc;
    } else if ((rc = s_blk(f, il, "attn_kv_b.weight", 2, C, H * (NOPE + VM), 1, MASK_MATRIX, 0, &l->wkv_b)) < 0) {
        return rc;
    }
    return s_blk(f, il, "attn_output.weight", 2, H * VM, E, 1, MASK_MATRIX, 0, &l->wo);
}

static int s_load_attention(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, Q = model_q_dim(hp), K = model_k_dim(hp), V = model_v_dim(hp);
    int rc, bias = hp->arch == ARCH_QWEN2MOE;
    if ((rc = s_blk(f, il, "attn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_norm)) < 0) return rc;
    if (model_is_mla(hp) && (rc = s_load_mla(f, hp, il, l)) < 0) return rc;
    if (model_is_mla(hp)) return hp->arch == ARCH_DEEPSEEK2 ? 0 : model_dsa_load_layer(f, hp, il, l);
    if (l->recurrent) return model_hybrid_load_layer(f, hp, il, l);
    /* the hybrids' attn_q gives each head's query and then its output gate */
    const int64_t QW = hp->attn_gate ? 2 * Q : Q;
    if ((rc = s_blk(f, il, "attn_q.weight", 2, E, QW, 1, MASK_MATRIX, 0, &l->wq)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_k.weight", 2, E, K, 1, MASK_MATRIX, 0, &l->wk)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_v.weight", 2, E, V, 1, MASK_MATRIX, 0, &l->wv)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_output.weight", 2, model_attn_dim(hp), E, 1, MASK_MATRIX, 0, &l->wo)) < 0) return rc;
    if (bias) {
        if ((rc = s_blk(f, il, "attn_q.bias", 1, Q, 1, 1, MASK_F32, 0, &l->bq)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_k.bias", 1, K, 1, 1, MASK_F32, 0, &l->bk)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_v.bias", 1, V, 1, 1, MASK_F32, 0, &l->bv)) < 0) return rc;
    }
    if (hp->arch == ARCH_OLMOE || hp->arch == ARCH_QWEN3MOE || model_is_hybrid(hp)) {
        /* OLMoE normalises the whole projected q and k; Qwen3-MoE and the hybrids each head */
        l->qk_norm_per_head = hp->arch != ARCH_OLMOE;
        const int64_t nq = l->qk_norm_per_head ? hp->head_dim : Q, nk = l->qk_norm_per_head ? hp->head_dim : K;
        if ((rc = s_blk(f, il, "attn_q_norm.weight", 1, nq, 1, 1, MASK_F32, 0, &l->q_norm)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_k_norm.weight", 1, nk, 1, 1, MASK_F32, 0, &l->k_norm)) < 0) return rc;
    }
    return 0;
}

/* A dense gated FFN blk.il.<prefix>{gate,up,down}<suffix> of width F. */
static int s_load_ffn(const gguf_file *f, int il, const char *suffix, int64_t E, int64_t F, expert_weights *out) {
    const coli_tensor *g, *u, *d;
    char name[64];
    int rc;
    snprintf(name, sizeof name, "ffn_gate%s.weight", suffix);
    if ((rc = s_blk(f, il, name, 2, E, F, 1, MASK_MATRIX, 0, &g)) < 0) return rc;
    snprintf(name, sizeof name, "ffn_up%s.weight", suffix);
    if ((rc = s_blk(f, il, name, 2, E, F, 1, MASK_MATRIX, 0, &u)) < 0) return rc;
    snprintf(name, sizeof name, "ffn_down%s.weight", suffix);
    if ((rc = s_blk(f, il, name, 2, F, E, 1, MASK_MATRIX, 0, &d)) < 0) return rc;
    s_ffn_view(g, u, d, E, F, out);
    return 0;
}

static int s_load_moe(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    const coli_tensor *g, *u, *d;
    int rc;
    if ((rc = s_blk(f, il, "ffn_gate_inp.weight", 2, E, X, 1, MASK_MATRIX, 0, &l->router)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_gate_exps.weight", 3, E, F, X, MASK_MATRIX, 0, &g)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_up_exps.weight", 3, E, F, X, MASK_MATRIX, 0, &u)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_down_exps.weight", 3, F, E, X, MASK_MATRIX, 0, &d)) < 0) return rc;
    if (model_is_mla(hp)) {
        if ((rc = s_blk(f, il, "exp_probs_b.bias", 1, X, 1, 1, MASK_F32, 1, &l->exp_probs_b)) < 0) return rc;
        if (hp->n_expert_shared == 0) return 0;
        l->has_shexp = 1;
        return s_load_ffn(f, il, "_shexp", E, hp->n_ff_shexp, &l->shexp);
    }
    if (hp->arch != ARCH_QWEN2MOE && !model_is_hybrid(hp)) return 0;
    if ((rc = s_blk(f, il, "ffn_gate_inp_shexp.weight", 1, E, 1, 1, MASK_F32, 0, &l->shexp_gate)) < 0) return rc;
    l->has_shexp = 1;
    return s_load_ffn(f, il, "_shexp", E, hp->n_ff_shexp, &l->shexp);
}

static int s_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd;
    int rc;
    if (hp->arch == ARCH_GLM4MOE) return glm4moe_load_layer(f, hp, il, l);
    if (hp->arch == ARCH_MINIMAX_M2) return minimax_m2_load_layer(f, hp, il, l);
    if (hp->arch == ARCH_GPTOSS) return model_gptoss_layer(f, hp, il, l);
    if (hp->arch == ARCH_LLAMA4) return llama4_load_layer(f, hp, il, l);
    if (model_is_kimi(hp)) return kimi_load_layer(f, hp, il, l);
    if ((rc = s_load_attention(f, hp, il, l)) < 0) return rc;
    /* the hybrids' FFN input norm is named after the attention it follows */
    const char *ffn_norm = model_is_hybrid(hp) ? "post_attention_norm.weight" : "ffn_norm.weight";
    if ((rc = s_blk(f, il, ffn_norm, 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0) return rc;
    if (hp->n_expert > 0 && il >= hp->n_layer_dense_lead) return s_load_moe(f, hp, il, l);
    return s_load_ffn(f, il, "", E, hp->n_ff, &l->dense);
}

/* rope_freqs.weight (Llama-3.1-style files): n_rot/2 positive divisors of
 * each pair's angle, kept as a view into the mapping. */
static int s_load_rope_freqs(const gguf_file *f, model_hparams *hp) {
    const int64_t ne[1] = {hp->n_rot / 2};
    const coli_tensor *t = NULL;
    int rc = s_tensor(f, "rope_freqs.weight", 1, ne, MASK_F32, 1, &t);
    if (rc < 0 || !t) return rc;
    const float *ff = (const float *)t->data;
    for (int i = 0; i < hp->n_rot / 2; i++)
        if (!(ff[i] > 0.0f) || !isfinite(ff[i]))
            return coli_fail(COLI_EFORMAT, "tensor 'rope_freqs.weight': entry %d = %g, expected a positive number", i,
                             (double)ff[i]);
    hp->rope.freq_factors = ff;
    return 0;
}

/* token_embd fixes n_vocab; the vocabulary and <arch>.vocab_size must agree. */
static int s_load_globals(const gguf_file *f, model *m) {
    model_hparams *hp = &m->hp;
    const coli_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    int rc;
    if (!te) return coli_fail(COLI_EFORMAT, "missing required tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] > INT32_MAX)
        return coli_fail(COLI_EFORMAT,
                         "tensor 'token_embd.weight': %d-D shape [%lld, %lld, ...] disagrees "
                         "with the metadata, expected [%d, n_vocab]",
                         te->n_dims, (long long)te->ne[0], (long long)te->ne[1], hp->n_embd);
    hp->n_vocab = (int)te->ne[1];
    const int64_t ne_vocab[2] = {hp->n_embd, hp->n_vocab}, ne_norm[1] = {hp->n_embd};
    if ((rc = s_tensor(f, "token_embd.weight", 2, ne_vocab, MASK_MATRIX, 0, &m->tok_embd)) < 0) return rc;
    if ((rc = s_tensor(f, "output_norm.weight", 1, ne_norm, MASK_F32, 0, &m->output_norm)) < 0) return rc;
    if ((rc = s_tensor(f, "output.weight", 2, ne_vocab, MASK_MATRIX, 1, &m->output)) < 0) return rc;
    if ((rc = s_load_rope_freqs(f, hp)) < 0) return rc;
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */
    gguf_type et;
    uint64_t n_tokens;
    const void *unused;
    if (gguf_find_key(f, "tokenizer.ggml.tokens") >= 0 &&
        gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_tokens, &unused) == 0 && n_tokens != (uint64_t)hp->n_vocab)
        return coli_fail(COLI_EFORMAT, "tokenizer.ggml.tokens has %llu entries but token_embd.weight has %d rows",
                         (unsigned long long)n_tokens, hp->n_vocab);
    return 0;
}

int model_req_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t max, int64_t *out) {
    return s_req_int(f, hp, suffix, max, out);
}

int model_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t def, int64_t max,
                  int64_t *out) {
    return s_opt_int(f, hp, suffix, def, max, out);
}

int64_t model_q_dim(const model_hparams *hp) { return (int64_t)hp->n_head * hp->head_dim; }
int64_t model_k_dim(const model_hparams *hp) { return (int64_t)hp->n_head_kv * hp->head_dim + hp->idx_head_dim; }
int64_t model_v_dim(const model_hparams *hp) { return (int64_t)hp->n_head_kv * hp->head_dim_v; }
int64_t model_attn_dim(const model_hparams *hp) { return (int64_t)hp->n_head * hp->head_dim_v; }

void model_kv_shape(const model *m, int f16, kv_shape *out) {
    const model_hparams *hp = &m->hp;
    *out = (kv_shape){.n_layer = hp->n_layer,
                      .k_dim = m->ds4 ? model_ds4_row(m) : model_k_dim(hp),
                      .v_dim = model_v_dim(hp),
                      .v_in_k = hp->mla_absorbed || m->ds4,
                      .f16 = f16 && !m->ds4, /* deepseek4 rows hold compressor state too: F32 */
                      .recurrent = m->recurrent,
                      .rec_floats = hp->rec_floats};
}

int model_from_gguf(gguf_file *f, model **out) {
    int rc;
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(&f);
        return coli_fail(COLI_ENOMEM, "model: out of memory");
    }
    m->gguf = f;
    if ((rc = s_read_hparams(f, &m->hp)) < 0) goto fail;
    if (model_is_hybrid(&m->hp) && (rc = model_hybrid_read(f, m)) < 0) goto fail;
    if (model_is_kimi(&m->hp) && (rc = kimi_read_layers(f, m)) < 0) goto fail;
    if ((rc = s_load_globals(f, m)) < 0) goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = coli_fail(COLI_ENOMEM, "model: out of memory for %d layers", m->hp.n_layer);
        goto fail;
    }
    if (m->hp.arch == ARCH_DEEPSEEK4 && (rc = model_ds4_load(f, m)) < 0) goto fail;
    for (int il = 0; il < m->hp.n_layer && !m->ds4; il++) {
        m->layers[il].recurrent = m->recurrent && m->recurrent[il];
        if ((rc = s_load_layer(f, &m->hp, il, &m->layers[il])) < 0) goto fail;
    }
    if ((m->hp.arch == ARCH_GLM4MOE || model_is_hybrid(&m->hp)) && (rc = model_load_nextn(f, m, s_load_layer)) < 0)
        goto fail;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) m->n_params += coli_tensor_nelems(gguf_tensor(f, i));
    *out = m;
    return 0;
fail:
    model_close(&m);
    return rc;
}

int model_open(const char *path, model **out) {
    gguf_file *f = NULL;
    *out = NULL;
    int rc = gguf_open(path, &f);
    if (rc < 0) return rc;
    rc = model_from_gguf(f, out);
    if (rc < 0) return coli_fail_prefix(rc, "%s", path);
    return 0;
}

void model_close(model **pm) {
    if (!pm || !*pm) return;
    model *m = *pm;
    gguf_close(&m->gguf);
    model_ds4_free(m);
    free(m->layers);
    free(m->nextn);
    free(m->recurrent);
    free(m);
    *pm = NULL;
}

// ---------------------------------------------------------------------------
// for the family loaders (model_impl.h)

int model_blk(const gguf_file *f, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
              uint64_t mask, int optional, const coli_tensor **out) {
    return s_blk(f, il, suffix, n_dims, ne0, ne1, ne2, mask, optional, out);
}

int model_blk_ffn(const gguf_file *f, int il, const char *suffix, int64_t E, int64_t F, expert_weights *out) {
    return s_load_ffn(f, il, suffix, E, F, out);
}

int model_blk_mla(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    return s_load_mla(f, hp, il, l);
}

int model_blk_moe(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    return s_load_moe(f, hp, il, l);
}

int model_blk_attention(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, Q = model_q_dim(hp), K = model_k_dim(hp), V = model_v_dim(hp);
    int rc;
    if ((rc = s_blk(f, il, "attn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_norm)) < 0 ||
        (rc = s_blk(f, il, "attn_q.weight", 2, E, Q, 1, MASK_MATRIX, 0, &l->wq)) < 0 ||
        (rc = s_blk(f, il, "attn_k.weight", 2, E, K, 1, MASK_MATRIX, 0, &l->wk)) < 0 ||
        (rc = s_blk(f, il, "attn_v.weight", 2, E, V, 1, MASK_MATRIX, 0, &l->wv)) < 0 ||
        (rc = s_blk(f, il, "attn_output.weight", 2, model_attn_dim(hp), E, 1, MASK_MATRIX, 0, &l->wo)) < 0 ||
        (rc = s_blk(f, il, "attn_q.bias", 1, Q, 1, 1, MASK_F32, 1, &l->bq)) < 0 ||
        (rc = s_blk(f, il, "attn_k.bias", 1, K, 1, 1, MASK_F32, 1, &l->bk)) < 0)
        return rc;
    return s_blk(f, il, "attn_v.bias", 1, V, 1, 1, MASK_F32, 1, &l->bv);
}
