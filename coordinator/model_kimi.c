/*
 * model_kimi.c - the kimi-k3 and kimi-linear parts of a file (names and
 * shapes as llama.cpp de3ff815 reads them, src/models/kimi-k3.cpp and
 * kimi-linear.cpp; model_impl.h):
 *
 * - attention.head_count_kv is a list: 0 marks a Kimi Delta Attention (KDA)
 *   layer, 1 a latent-attention (MLA, as deepseek2's newer files) layer;
 * - a KDA layer: attn_q/k/v, one short causal conv per q/k/v (ssm_conv1d_*),
 *   the decay gate ssm_f_b (ssm_f_a x) per channel, beta per head, the
 *   full-rank output gate ssm_g, ssm_norm per head, attn_output;
 * - an MLA layer has no rope and a sigmoid output gate attn_gate;
 * - layers past leading_dense_block_count: a latent MoE (the routed experts
 *   run at expert_latent_length between ffn_routed_down and ffn_routed_up)
 *   and shared experts at full width; every FFN uses the situ activation;
 * - attn_res_score, ffn_res_score and output_res_score weight the
 *   cross-layer residual attention (forward_kimi.c).
 * kimi-linear has the same layer kinds without what K3 adds: a low-rank KDA
 * output gate ssm_g_b (ssm_g_a x), ssm_a as [1, n_head(, 1, 1)], the decay
 * always softplus(f) ssm_a, no MLA gate, plain SwiGLU experts at full
 * width, no residual attention.
 *
 * A KDA layer's state (kv_cache.h, rec_floats F32) is the conv tail,
 * (conv_kernel - 1) rows of [q | k | v] (3 d_inner), then per head its
 * delta-rule matrix S[v][k] (head_dim x head_dim), as Gated DeltaNet's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

/* An F32 key that must be present. */
static int s_req_f32(const gguf_file *f, const model_hparams *hp, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    if (gguf_find_key(f, key) < 0) return coli_fail(COLI_EFORMAT, "%s: metadata '%s' missing", hp->arch_name, key);
    return gguf_get_f32(f, key, out);
}

int kimi_head_count_kv(const gguf_file *f, model_hparams *hp, uint8_t *recurrent) {
    char key[128];
    gguf_type et;
    uint64_t n;
    const void *data;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", hp->arch_name);
    if (gguf_find_key(f, key) < 0) return coli_fail(COLI_EFORMAT, "%s: metadata '%s' missing", hp->arch_name, key);
    int rc = gguf_get_arr(f, key, &et, &n, &data);
    if (rc < 0) return rc;
    if ((et != GGUF_UINT32 && et != GGUF_INT32) || n != (uint64_t)hp->n_layer)
        return coli_fail(COLI_EFORMAT, "metadata '%s': expected %d integers (0: KDA layer, 1: MLA layer), found %llu",
                         key, hp->n_layer, (unsigned long long)n);
    for (int l = 0; l < hp->n_layer; l++) {
        uint32_t v;
        memcpy(&v, (const char *)data + 4 * (size_t)l,
               sizeof v); /* array elements need not be aligned in the mapping */
        if (v > 1)
            return coli_fail(COLI_EFORMAT, "metadata '%s'[%d] = %u: expected 0 (KDA) or 1 (MLA)", key, l, (unsigned)v);
        if (recurrent) recurrent[l] = v == 0;
    }
    hp->n_head_kv = 1;
    return 0;
}

/* kimi-k3's keys: the latent width, the residual blocks, situ's betas, the
 * decay's lower bound (kimi-linear reads none of them). */
static int s_read_k3(const gguf_file *f, model_hparams *hp) {
    int64_t latent, bs;
    int rc;
    char key[128];
    if ((rc = model_opt_int(f, hp, "expert_latent_length", 0, MAX_WIDTH, &latent)) < 0 ||
        (rc = model_req_int(f, hp, "attn_res.block_size", MAX_LAYERS, &bs)) < 0 ||
        (rc = s_req_f32(f, hp, "activation.situ_beta", &hp->situ_beta)) < 0 ||
        (rc = s_req_f32(f, hp, "activation.situ_linear_beta", &hp->situ_linear_beta)) < 0)
        return rc;
    if (!(hp->situ_beta > 0.0f) || !isfinite(hp->situ_beta) || !isfinite(hp->situ_linear_beta))
        return coli_fail(COLI_EFORMAT, "%s: activation.situ_beta %g / situ_linear_beta %g: expected finite, beta > 0",
                         hp->arch_name, (double)hp->situ_beta, (double)hp->situ_linear_beta);
    snprintf(key, sizeof key, "%s.kda.gate_lower_bound", hp->arch_name);
    if (gguf_find_key(f, key) >= 0 && (rc = gguf_get_f32(f, key, &hp->kda_gate_lb)) < 0) return rc;
    if (isnan(hp->kda_gate_lb) || hp->kda_gate_lb == INFINITY)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected a finite number", key, (double)hp->kda_gate_lb);
    hp->attn_res_bs = (int)bs;
    hp->n_embd_latent = (int)latent;
    return 0;
}

int kimi_read_hparams(const gguf_file *f, model_hparams *hp) {
    int64_t conv, dim, gating;
    int rc;
    /* llama.cpp reads expert_gating_func without a default for both */
    if ((rc = model_req_int(f, hp, "ssm.conv_kernel", 64, &conv)) < 0 ||
        (rc = model_req_int(f, hp, "kda.head_dim", MAX_WIDTH, &dim)) < 0 ||
        (rc = model_req_int(f, hp, "expert_gating_func", 16, &gating)) < 0)
        return rc;
    if (conv < 2 || !hp->mla_absorbed)
        return coli_fail(COLI_EFORMAT,
                         "%s: ssm.conv_kernel %lld must be >= 2, and the latent attention needs "
                         "attention.key_length_mla (attn_k_b / attn_v_b files)",
                         hp->arch_name, (long long)conv);
    hp->kda = 1;
    hp->kda_gate_lb = -INFINITY;
    hp->mla_nope = 1;
    /* kimi-linear's graph renormalises the top-k weights whatever the file says */
    if (hp->arch == ARCH_KIMI_LINEAR) hp->renorm_topk = 1;
    if (hp->arch == ARCH_KIMI_K3 && (rc = s_read_k3(f, hp)) < 0) return rc;
    hp->ssm_conv = (int)conv;
    hp->ssm_head_dim = (int)dim;
    hp->ssm_k_heads = hp->ssm_v_heads = hp->n_head;
    const int64_t d_inner = (int64_t)hp->n_head * dim;
    hp->rec_floats = (conv - 1) * 3 * d_inner + (int64_t)hp->n_head * dim * dim;
    /* shared experts: expert_shared_count of them as one FFN (deepseek2's keys) */
    return 0;
}

int kimi_read_layers(const gguf_file *f, model *m) {
    if (!(m->recurrent = calloc((size_t)m->hp.n_layer, 1))) return coli_fail(COLI_ENOMEM, "model: out of memory");
    int rc = kimi_head_count_kv(f, &m->hp, m->recurrent);
    if (rc < 0 || m->hp.arch != ARCH_KIMI_K3) return rc;
    const coli_tensor *t = gguf_find_tensor(f, "output_res_score.weight");
    if (!t) return coli_fail(COLI_EFORMAT, "missing required tensor 'output_res_score.weight'");
    if (t->n_dims != 1 || t->ne[0] != m->hp.n_embd || t->type != COLI_F32)
        return coli_fail(COLI_EFORMAT, "tensor 'output_res_score.weight': expected F32 [%d]", m->hp.n_embd);
    m->output_res = t;
    return 0;
}

/* ssm_conv1d_<x>.weight: [conv, 1, d_inner] or the converter's [conv, 1, d_inner, 1], F32. */
static int s_conv(const gguf_file *f, const model_hparams *hp, int il, const char *x, const coli_tensor **out) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ssm_conv1d_%s.weight", il, x);
    const coli_tensor *t = gguf_find_tensor(f, name);
    const int64_t di = (int64_t)hp->n_head * hp->ssm_head_dim;
    if (!t) return coli_fail(COLI_EFORMAT, "missing required tensor '%s'", name);
    if (t->n_dims < 3 || t->n_dims > 4 || t->ne[0] != hp->ssm_conv || t->ne[1] != 1 || t->ne[2] != di ||
        (t->n_dims == 4 && t->ne[3] != 1) || t->type != COLI_F32)
        return coli_fail(COLI_EFORMAT, "tensor '%s': expected F32 [%d, 1, %lld(, 1)]", name, hp->ssm_conv,
                         (long long)di);
    *out = t;
    return 0;
}

/* ssm_a, -exp(A_log) per head, F32: K3's [n_head]; kimi-linear's
 * [1, n_head, 1, 1] or [1, n_head]. */
static int s_ssm_a(const gguf_file *f, const model_hparams *hp, int il, const coli_tensor **out) {
    char name[64];
    if (hp->arch == ARCH_KIMI_K3) return model_blk(f, il, "ssm_a", 1, hp->n_head, 1, 1, MASK_F32, 0, out);
    snprintf(name, sizeof name, "blk.%d.ssm_a", il);
    const coli_tensor *t = gguf_find_tensor(f, name);
    if (!t) return coli_fail(COLI_EFORMAT, "missing required tensor '%s'", name);
    if ((t->n_dims != 2 && t->n_dims != 4) || t->ne[0] != 1 || t->ne[1] != hp->n_head ||
        (t->n_dims == 4 && (t->ne[2] != 1 || t->ne[3] != 1)) || t->type != COLI_F32)
        return coli_fail(COLI_EFORMAT, "tensor '%s': expected F32 [1, %d(, 1, 1)]", name, hp->n_head);
    *out = t;
    return 0;
}

static int s_load_kda(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, H = hp->n_head, D = hp->ssm_head_dim, DI = H * D;
    int rc;
    if ((rc = model_blk(f, il, "attn_q.weight", 2, E, DI, 1, MASK_MATRIX, 0, &l->wq)) < 0 ||
        (rc = model_blk(f, il, "attn_k.weight", 2, E, DI, 1, MASK_MATRIX, 0, &l->wk)) < 0 ||
        (rc = model_blk(f, il, "attn_v.weight", 2, E, DI, 1, MASK_MATRIX, 0, &l->wv)) < 0 ||
        (rc = s_conv(f, hp, il, "q", &l->conv_q)) < 0 || (rc = s_conv(f, hp, il, "k", &l->conv_k)) < 0 ||
        (rc = s_conv(f, hp, il, "v", &l->conv_v)) < 0 ||
        (rc = model_blk(f, il, "ssm_f_a.weight", 2, E, D, 1, MASK_MATRIX, 0, &l->wf_a)) < 0 ||
        (rc = model_blk(f, il, "ssm_f_b.weight", 2, D, DI, 1, MASK_MATRIX, 0, &l->wf_b)) < 0 ||
        (rc = model_blk(f, il, "ssm_beta.weight", 2, E, H, 1, MASK_MATRIX, 0, &l->wbeta)) < 0 ||
        (rc = s_ssm_a(f, hp, il, &l->ssm_a)) < 0 ||
        (rc = model_blk(f, il, "ssm_dt.bias", 1, DI, 1, 1, MASK_F32, 0, &l->dt_bias)) < 0 ||
        (rc = model_blk(f, il, "ssm_norm.weight", 1, D, 1, 1, MASK_F32, 0, &l->ssm_norm)) < 0)
        return rc;
    /* the output gate: K3's full-rank ssm_g, kimi-linear's ssm_g_b (ssm_g_a x) */
    if (hp->arch == ARCH_KIMI_K3) rc = model_blk(f, il, "ssm_g.weight", 2, E, DI, 1, MASK_MATRIX, 0, &l->wz);
    if (hp->arch != ARCH_KIMI_K3 &&
        (rc = model_blk(f, il, "ssm_g_a.weight", 2, E, D, 1, MASK_MATRIX, 0, &l->wg_a)) == 0)
        rc = model_blk(f, il, "ssm_g_b.weight", 2, D, DI, 1, MASK_MATRIX, 0, &l->wz);
    if (rc < 0) return rc;
    return model_blk(f, il, "attn_output.weight", 2, DI, E, 1, MASK_MATRIX, 0, &l->ssm_out);
}

/* The FFN blk.il.ffn_{gate,up,down}<suffix> of width F (in and out E):
 * K3's situ, kimi-linear's SwiGLU. */
static int s_ffn(const gguf_file *f, const model_hparams *hp, int il, const char *suffix, int64_t E, int64_t F,
                 expert_weights *w) {
    int rc = model_blk_ffn(f, il, suffix, E, F, w);
    if (rc < 0 || hp->arch != ARCH_KIMI_K3) return rc;
    expert_weights_set_act(w, EXPERT_ACT_SITU);
    w->alpha = hp->situ_beta;
    w->limit = hp->situ_linear_beta;
    return 0;
}

/* Router, selection bias, the routed experts over the latent width and its
 * projections, the shared experts at full width. */
static int s_load_latent_moe(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, X = hp->n_expert, F = hp->n_ff_exp;
    const int64_t W = hp->n_embd_latent ? hp->n_embd_latent : E;
    const coli_tensor *g;
    int rc;
    if ((rc = model_blk(f, il, "ffn_gate_inp.weight", 2, E, X, 1, MASK_MATRIX, 0, &l->router)) < 0 ||
        (rc = model_blk(f, il, "exp_probs_b.bias", 1, X, 1, 1, MASK_F32, 0, &l->exp_probs_b)) < 0 ||
        (rc = model_blk(f, il, "ffn_gate_exps.weight", 3, W, F, X, MASK_MATRIX, 0, &g)) < 0 ||
        (rc = model_blk(f, il, "ffn_up_exps.weight", 3, W, F, X, MASK_MATRIX, 0, &g)) < 0 ||
        (rc = model_blk(f, il, "ffn_down_exps.weight", 3, F, W, X, MASK_MATRIX, 0, &g)) < 0)
        return rc;
    if (hp->n_embd_latent &&
        ((rc = model_blk(f, il, "ffn_routed_down.weight", 2, E, W, 1, MASK_MATRIX, 0, &l->routed_down)) < 0 ||
         (rc = model_blk(f, il, "ffn_routed_up.weight", 2, W, E, 1, MASK_MATRIX, 0, &l->routed_up)) < 0 ||
         (rc = model_blk(f, il, "ffn_routed_norm.weight", 1, W, 1, 1, MASK_F32, 1, &l->routed_norm)) < 0))
        return rc;
    if (hp->n_expert_shared == 0) return 0;
    l->has_shexp = 1;
    return s_ffn(f, hp, il, "_shexp", E, hp->n_ff_shexp, &l->shexp);
}

int kimi_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd;
    int rc;
    if ((rc = model_blk(f, il, "attn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_norm)) < 0 ||
        (rc = model_blk(f, il, "ffn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0)
        return rc;
    if (hp->arch == ARCH_KIMI_K3 &&
        ((rc = model_blk(f, il, "attn_res_score.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_res)) < 0 ||
         (rc = model_blk(f, il, "ffn_res_score.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_res)) < 0))
        return rc;
    if (l->recurrent)
        rc = s_load_kda(f, hp, il, l);
    else if ((rc = model_blk_mla(f, hp, il, l)) == 0 && hp->arch == ARCH_KIMI_K3)
        rc = model_blk(f, il, "attn_gate.weight", 2, E, (int64_t)hp->n_head * hp->head_dim_v_mla, 1, MASK_MATRIX, 1,
                       &l->mla_gate);
    if (rc < 0) return rc;
    if (il >= hp->n_layer_dense_lead) return s_load_latent_moe(f, hp, il, l);
    return s_ffn(f, hp, il, "", E, hp->n_ff, &l->dense);
}
