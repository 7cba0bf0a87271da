/*
 * model_ds4.c - DeepSeek-V4 (deepseek4) in the file, read as llama.cpp
 * de3ff815 reads it (src/models/deepseek4.cpp, load_arch_hparams and
 * load_arch_tensors). Keys on top of the common ones (model.c):
 *
 *   attention.q_lora_rank, attention.sliding_window, attention.output_group_count,
 *   attention.output_lora_rank, attention.compress_ratios (per block: 0, 4 or 128),
 *   attention.compress_rope_freq_base, attention.indexer.head_count / key_length /
 *   top_k, hyper_connection.count (4) / sinkhorn_iterations / epsilon,
 *   expert_shared_count, expert_weights_scale, expert_weights_norm,
 *   expert_gating_func (4: sqrt(softplus)), swiglu_clamp_exp / swiglu_clamp_shexp,
 *   hash_layer_count (the leading layers route by token id: ffn_gate_tid2eid,
 *   an I32 table of n_expert_used experts per token, instead of exp_probs_b)
 *
 * The MTP blocks after the trunk (nextn_predict_layers; llama.cpp's
 * converter writes them only into a separate MTP file) are loaded and
 * validated, not run.
 */
#include "coordinator/model_ds4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

/* A key llama.cpp requires: a positive integer up to max. */
static int s_req(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t max, int *out) {
    int64_t v;
    int rc = model_req_int(f, hp, suffix, max, &v);
    if (rc < 0) return rc;
    *out = (int)v;
    return 0;
}

/* A required float key "deepseek4.<suffix>". */
static int s_req_f32(const gguf_file *f, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "deepseek4.%s", suffix);
    if (gguf_find_key(f, key) < 0)
        return coli_fail(COLI_EFORMAT, "metadata '%s' missing (required for deepseek4)", key);
    int rc = gguf_get_f32(f, key, out);
    if (rc < 0) return rc;
    if (!isfinite(*out))
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected a finite number", key, (double)*out);
    return 0;
}

/* The attention shape llama.cpp asserts: one key/value head as wide as a
 * query head, the rope dims inside it. */
static int s_check_heads(const model_hparams *hp) {
    if (hp->n_head_kv != 1 || hp->head_dim_v != hp->head_dim)
        return coli_fail(COLI_EFORMAT,
                         "deepseek4: head_count_kv %d, value_length %d: expected 1 and key_length %d (one key = value "
                         "head)",
                         hp->n_head_kv, hp->head_dim_v, hp->head_dim);
    if (hp->n_rot >= hp->head_dim)
        return coli_fail(COLI_EFORMAT, "metadata 'deepseek4.rope.dimension_count' = %d: expected < key_length %d",
                         hp->n_rot, hp->head_dim);
    return 0;
}

int model_ds4_hparams(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    if ((rc = s_check_heads(hp)) < 0) return rc;
    if ((rc = s_req(f, hp, "attention.q_lora_rank", MAX_WIDTH, &hp->n_lora_q)) < 0) return rc;
    if ((rc = s_req(f, hp, "attention.sliding_window", 1 << 24, &hp->n_swa)) < 0) return rc;
    if ((rc = model_opt_int(f, hp, "expert_shared_count", 0, MAX_EXPERTS, &v)) < 0) return rc;
    hp->n_expert_shared = (int)v;
    hp->n_ff_shexp = hp->n_ff_exp * hp->n_expert_shared;
    if ((rc = s_req_f32(f, "expert_weights_scale", &hp->expert_weights_scale)) < 0) return rc;
    char key[] = "deepseek4.expert_weights_norm";
    if (gguf_find_key(f, key) < 0)
        return coli_fail(COLI_EFORMAT, "metadata '%s' missing (required for deepseek4)", key);
    if ((rc = gguf_get_bool(f, key, &hp->renorm_topk)) < 0) return rc;
    if ((rc = model_opt_int(f, hp, "expert_gating_func", 0, 16, &v)) < 0) return rc;
    if (v != 4)
        return coli_fail(COLI_EUNSUPPORTED,
                         "metadata 'deepseek4.expert_gating_func' = %lld: expected 4 (sqrtsoftplus), as llama.cpp",
                         (long long)v);
    hp->gating = GATING_SQRT_SOFTPLUS;
    /* as llama.cpp: without the first MTP block's eh_proj the blocks are trunk layers */
    char name[64];
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", hp->n_layer);
    if (hp->n_layer_nextn > 0 && !gguf_find_tensor(f, name)) {
        hp->n_layer += hp->n_layer_nextn;
        hp->n_layer_nextn = 0;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// the family's keys

/* compress_ratios: one integer per block (at least block_count), each 0, 4
 * or 128 (llama.cpp's loader refuses others). */
static int s_read_ratios(const gguf_file *f, const model *m) {
    const char *key = "deepseek4.attention.compress_ratios";
    gguf_type et;
    uint64_t n;
    const void *data;
    if (gguf_find_key(f, key) < 0)
        return coli_fail(COLI_EFORMAT, "metadata '%s' missing (required for deepseek4)", key);
    if (gguf_get_arr(f, key, &et, &n, &data) < 0) return COLI_EFORMAT;
    const int n_blocks = m->hp.n_layer + m->hp.n_layer_nextn;
    if ((et != GGUF_UINT32 && et != GGUF_INT32) || n < (uint64_t)n_blocks)
        return coli_fail(COLI_EFORMAT, "metadata '%s': expected %d 32-bit integers (one per block), got %llu", key,
                         n_blocks, (unsigned long long)n);
    for (int il = 0; il < n_blocks; il++) {
        int32_t r;
        memcpy(&r, (const char *)data + 4 * (size_t)il, sizeof r);
        if (r != 0 && r != DS4_CSA_RATIO && r != DS4_HCA_RATIO)
            return coli_fail(COLI_EUNSUPPORTED, "metadata '%s': block %d: ratio %d, expected 0, 4 or 128", key, il, r);
        m->ds4->layers[il].ratio = r;
    }
    return 0;
}

/* The rope of the compressed layers: their own base, the file's scaling
 * (llama.cpp: attn_factor 1 / (1 + 0.1 ln(1 / freq_scale)) under YaRN, so
 * that the magnitude stays 1); the other layers rotate without scaling. */
static int s_read_ropes(const gguf_file *f, model *m) {
    model_hparams *hp = &m->hp;
    float base;
    int64_t orig;
    int rc;
    if ((rc = s_req_f32(f, "attention.compress_rope_freq_base", &base)) < 0) return rc;
    if (!(base > 0.0f))
        return coli_fail(COLI_EFORMAT, "metadata 'deepseek4.attention.compress_rope_freq_base' = %g: expected > 0",
                         (double)base);
    if ((rc = model_opt_int(f, hp, "rope.scaling.original_context_length", hp->n_ctx_train, 1 << 24, &orig)) < 0)
        return rc;
    const rope_params file = hp->rope;
    const float factor = 1.0f / file.freq_scale, yarn = file.scaling == ROPE_SCALING_YARN;
    rope_params_init(&m->ds4->rope_comp, hp->n_rot, 0, base, file.scaling, factor, (int)orig,
                     yarn ? 1.0f / (1.0f + 0.1f * logf(factor)) : 1.0f, 32.0f, 1.0f);
    rope_params_init(&hp->rope, hp->n_rot, 0, file.base, ROPE_SCALING_NONE, 1.0f, 0, 1.0f, 32.0f, 1.0f);
    return 0;
}

static int s_read_keys(const gguf_file *f, model *m) {
    ds4_model *d = m->ds4;
    const model_hparams *hp = &m->hp;
    int rc;
    if ((rc = s_req(f, hp, "attention.output_group_count", MAX_WIDTH, &d->n_groups)) < 0 ||
        (rc = s_req(f, hp, "attention.output_lora_rank", MAX_WIDTH, &d->o_lora)) < 0 ||
        (rc = s_req(f, hp, "hyper_connection.count", 64, &d->hc)) < 0 ||
        (rc = s_req(f, hp, "hyper_connection.sinkhorn_iterations", 1000, &d->sinkhorn)) < 0 ||
        (rc = s_req_f32(f, "hyper_connection.epsilon", &d->hc_eps)) < 0 ||
        (rc = s_req(f, hp, "attention.indexer.head_count", MAX_WIDTH, &d->idx_n_head)) < 0 ||
        (rc = s_req(f, hp, "attention.indexer.key_length", MAX_WIDTH, &d->idx_dim)) < 0 ||
        (rc = s_req(f, hp, "attention.indexer.top_k", 1 << 24, &d->idx_top_k)) < 0)
        return rc;
    int64_t v;
    if ((rc = model_opt_int(f, hp, "hash_layer_count", 0, hp->n_layer, &v)) < 0) return rc;
    d->n_hash = (int)v;
    d->n_swa = hp->n_swa;
    if (d->hc != 4)
        return coli_fail(COLI_EUNSUPPORTED, "metadata 'deepseek4.hyper_connection.count' = %d: expected 4 (llama.cpp)",
                         d->hc);
    if (hp->n_head % d->n_groups != 0)
        return coli_fail(COLI_EFORMAT,
                         "metadata 'deepseek4.attention.output_group_count' = %d: does not divide %d heads",
                         d->n_groups, hp->n_head);
    /* the indexer's rotation is a Walsh-Hadamard matrix of its width */
    if (d->idx_dim < 64 || (d->idx_dim & (d->idx_dim - 1)) != 0 || d->idx_dim <= hp->n_rot)
        return coli_fail(COLI_EFORMAT,
                         "metadata 'deepseek4.attention.indexer.key_length' = %d: expected a power of two >= 64 and "
                         "> rope dims %d",
                         d->idx_dim, hp->n_rot);
    if ((rc = s_read_ratios(f, m)) < 0) return rc;
    return s_read_ropes(f, m);
}

// ---------------------------------------------------------------------------
// tensors

/* The hyper-connection mixers of one sub-block (part 0: attention, 1: FFN). */
static int s_load_hc(const gguf_file *f, const model *m, int il, int part, ds4_layer *dl) {
    const int64_t hc = m->ds4->hc, E = m->hp.n_embd, mix = (2 + hc) * hc;
    const char *name = part ? "ffn" : "attn";
    char s[64];
    int rc;
    snprintf(s, sizeof s, "hc_%s_fn.weight", name);
    if ((rc = model_blk(f, il, s, 2, hc * E, mix, 1, MASK_MATRIX, 0, &dl->hc_fn[part])) < 0) return rc;
    snprintf(s, sizeof s, "hc_%s_base.weight", name);
    if ((rc = model_blk(f, il, s, 1, mix, 1, 1, MASK_F32, 0, &dl->hc_base[part])) < 0) return rc;
    snprintf(s, sizeof s, "hc_%s_scale.weight", name);
    return model_blk(f, il, s, 1, 3, 1, 1, MASK_F32, 0, &dl->hc_scale[part]);
}

/* The compressor (and at ratio 4 the lightning indexer) of layer il. */
static int s_load_compressor(const gguf_file *f, const model *m, int il, ds4_layer *dl) {
    const ds4_model *d = m->ds4;
    const int64_t E = m->hp.n_embd, D = m->hp.head_dim, r = dl->ratio, c = r == DS4_CSA_RATIO ? 2 : 1;
    const int64_t I = d->idx_dim, R = m->hp.n_lora_q;
    int rc;
    if (r == 0) return 0;
    if ((rc = model_blk(f, il, "attn_compressor_kv.weight", 2, E, c * D, 1, MASK_MATRIX, 0, &dl->comp_wkv)) < 0 ||
        (rc = model_blk(f, il, "attn_compressor_gate.weight", 2, E, c * D, 1, MASK_MATRIX, 0, &dl->comp_wgate)) < 0 ||
        (rc = model_blk(f, il, "attn_compressor_ape.weight", 2, c * D, r, 1, MASK_MATRIX, 0, &dl->comp_ape)) < 0 ||
        (rc = model_blk(f, il, "attn_compressor_norm.weight", 1, D, 1, 1, MASK_F32, 0, &dl->comp_norm)) < 0)
        return rc;
    if (r != DS4_CSA_RATIO) return 0;
    if ((rc = model_blk(f, il, "indexer.proj.weight", 2, E, d->idx_n_head, 1, MASK_MATRIX, 0, &dl->idx_proj)) < 0 ||
        (rc = model_blk(f, il, "indexer.attn_q_b.weight", 2, R, d->idx_n_head * I, 1, MASK_MATRIX, 0, &dl->idx_wq_b)) <
            0 ||
        (rc = model_blk(f, il, "indexer_compressor_kv.weight", 2, E, 2 * I, 1, MASK_MATRIX, 0, &dl->idx_wkv)) < 0 ||
        (rc = model_blk(f, il, "indexer_compressor_gate.weight", 2, E, 2 * I, 1, MASK_MATRIX, 0, &dl->idx_wgate)) < 0 ||
        (rc = model_blk(f, il, "indexer_compressor_ape.weight", 2, 2 * I, r, 1, MASK_MATRIX, 0, &dl->idx_ape)) < 0)
        return rc;
    return model_blk(f, il, "indexer_compressor_norm.weight", 1, I, 1, 1, MASK_F32, 0, &dl->idx_norm);
}

/* The layer_weights part of block il, which the common fields hold and
 * which only needs hp (model_load_nextn's block loader too): attention
 * input, sinks, the q path; ffn_norm, router, experts, shared expert. */
static int s_load_common(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, R = hp->n_lora_q;
    int rc;
    if ((rc = model_blk(f, il, "attn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_norm)) < 0 ||
        (rc = model_blk(f, il, "attn_sinks.weight", 1, H, 1, 1, MASK_F32, 0, &l->sinks)) < 0 ||
        (rc = model_blk(f, il, "attn_q_a.weight", 2, E, R, 1, MASK_MATRIX, 0, &l->wq_a)) < 0 ||
        (rc = model_blk(f, il, "attn_q_a_norm.weight", 1, R, 1, 1, MASK_F32, 0, &l->q_a_norm)) < 0 ||
        (rc = model_blk(f, il, "attn_q_b.weight", 2, R, H * D, 1, MASK_MATRIX, 0, &l->wq_b)) < 0 ||
        (rc = model_blk(f, il, "ffn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0 ||
        (rc = model_blk_moe(f, hp, il, l)) < 0)
        return rc;
    l->n_swa = hp->n_swa;
    /* the routed experts' activation comes with them (expert_weights_from_gguf) */
    if (hp->n_expert_shared == 0) return 0;
    l->has_shexp = 1;
    if ((rc = model_blk_ffn(f, il, "_shexp", E, hp->n_ff_shexp, &l->shexp)) < 0) return rc;
    return expert_weights_ds4_clamp(f, "swiglu_clamp_shexp", il, &l->shexp);
}

/* A hash-routed layer's table: I32 (n_expert_used, n_vocab), every entry
 * an expert (a hostile one would index past the router's experts). */
static int s_load_hash(const gguf_file *f, const model *m, int il, ds4_layer *dl) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_tid2eid.weight", il);
    const coli_tensor *t = gguf_find_tensor(f, name);
    const int64_t K = m->hp.n_expert_used, V = m->hp.n_vocab;
    if (!t) return coli_fail(COLI_EFORMAT, "missing required tensor '%s' (layer %d < hash_layer_count)", name, il);
    if (t->type != COLI_I32 || t->n_dims != 2 || t->ne[0] != K || t->ne[1] != V)
        return coli_fail(COLI_EFORMAT, "tensor '%s': %s [%lld, %lld], expected I32 [n_expert_used %lld, n_vocab %lld]",
                         name, coli_dtype_name(t->type), (long long)t->ne[0], (long long)t->ne[1], (long long)K,
                         (long long)V);
    const int32_t *e = (const int32_t *)t->data;
    for (int64_t i = 0; i < K * V; i++)
        if (e[i] < 0 || e[i] >= m->hp.n_expert)
            return coli_fail(COLI_EFORMAT, "tensor '%s': token %lld: expert %d out of range [0, %d)", name,
                             (long long)(i / K), e[i], m->hp.n_expert);
    dl->tid2eid = e;
    return 0;
}

/* The family's own part of block il: the key / value and output
 * projections, the compressors, the hyper-connections, and the routing's
 * bias or (hash-routed layer) table. */
static int s_load_own(const gguf_file *f, const model *m, int il, layer_weights *l, ds4_layer *dl) {
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head;
    const int64_t G = m->ds4->n_groups, OL = m->ds4->o_lora;
    int rc;
    if ((rc = model_blk(f, il, "attn_kv.weight", 2, E, D, 1, MASK_MATRIX, 0, &dl->wkv)) < 0 ||
        (rc = model_blk(f, il, "attn_kv_a_norm.weight", 1, D, 1, 1, MASK_F32, 0, &dl->kv_norm)) < 0 ||
        (rc = model_blk(f, il, "attn_output_a.weight", 2, H * D / G, G * OL, 1, MASK_MATRIX, 0, &dl->wo_a)) < 0 ||
        (rc = model_blk(f, il, "attn_output_b.weight", 2, G * OL, E, 1, MASK_MATRIX, 0, &dl->wo_b)) < 0 ||
        (rc = s_load_compressor(f, m, il, dl)) < 0 || (rc = s_load_hc(f, m, il, 0, dl)) < 0 ||
        (rc = s_load_hc(f, m, il, 1, dl)) < 0)
        return rc;
    if (il < m->ds4->n_hash) return s_load_hash(f, m, il, dl);
    return model_blk(f, il, "exp_probs_b.bias", 1, hp->n_expert, 1, 1, MASK_F32, 0, &l->exp_probs_b);
}

/* Block il into l and dl (a trunk layer, or an MTP block's layer). */
static int s_load_head(const gguf_file *f, model *m) {
    const int64_t hc = m->ds4->hc, E = m->hp.n_embd;
    const struct {
        const char *name;
        int n_dims;
        int64_t ne0, ne1;
        uint64_t mask;
        const coli_tensor **out;
    } t[] = {
        {"output_hc_fn.weight", 2, hc * E, hc, MASK_MATRIX, &m->ds4->hc_head_fn},
        {"output_hc_base.weight", 1, hc, 1, MASK_F32, &m->ds4->hc_head_base},
        {"output_hc_scale.weight", 1, 1, 1, MASK_F32, &m->ds4->hc_head_scale},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const coli_tensor *x = gguf_find_tensor(f, t[i].name);
        if (!x) return coli_fail(COLI_EFORMAT, "missing required tensor '%s'", t[i].name);
        if (x->n_dims != t[i].n_dims || x->ne[0] != t[i].ne0 || (t[i].n_dims == 2 && x->ne[1] != t[i].ne1))
            return coli_fail(COLI_EFORMAT,
                             "tensor '%s': shape [%lld, ...] disagrees with the metadata, expected [%lld%s]", t[i].name,
                             (long long)x->ne[0], (long long)t[i].ne0, t[i].n_dims == 2 ? ", hc" : "");
        if (x->type >= 64 || !(t[i].mask & ((uint64_t)1 << x->type)))
            return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': dtype %s is not supported here", t[i].name,
                             coli_dtype_name(x->type));
        *t[i].out = x;
    }
    return 0;
}

/* The multi-token-prediction blocks after the trunk: the common part and
 * the NextN projections and norms by model_nextn.c, then the family's own
 * part; validated as llama.cpp loads them and not run (the draft head of
 * speculative decoding). */
static int s_load_mtp(const gguf_file *f, model *m) {
    int rc = model_load_nextn(f, m, s_load_common);
    for (int i = 0; rc == 0 && i < m->n_nextn; i++) {
        const int il = m->hp.n_layer + i;
        rc = s_load_own(f, m, il, &m->nextn[i].layer, &m->ds4->layers[il]);
    }
    return rc;
}

int model_ds4_load(const gguf_file *f, model *m) {
    const int n_blocks = m->hp.n_layer + m->hp.n_layer_nextn;
    int rc;
    m->ds4 = calloc(1, sizeof *m->ds4);
    if (!m->ds4 || !(m->ds4->layers = calloc((size_t)n_blocks, sizeof *m->ds4->layers)))
        return coli_fail(COLI_ENOMEM, "deepseek4: out of memory");
    if ((rc = s_read_keys(f, m)) < 0 || (rc = s_load_head(f, m)) < 0) return rc;
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((rc = s_load_common(f, &m->hp, il, &m->layers[il])) < 0 ||
            (rc = s_load_own(f, m, il, &m->layers[il], &m->ds4->layers[il])) < 0)
            return rc;
    return s_load_mtp(f, m);
}

void model_ds4_free(model *m) {
    if (!m->ds4) return;
    free(m->ds4->layers);
    free(m->ds4);
    m->ds4 = NULL;
}

ds4_row model_ds4_row_layout(const model *m) {
    const int64_t D = m->hp.head_dim, I = m->ds4->idx_dim;
    ds4_row r;
    r.raw = 0;               /* the position's key (= value), roped */
    r.ckv = D;               /* compressor values, 2 D (overlap: [previous-block half | own half]) */
    r.csc = 3 * D;           /* compressor scores + ape, 2 D */
    r.comp = 5 * D;          /* the last position of a block: the block's compressed key */
    r.lkv = 6 * D;           /* indexer compressor values, 2 I */
    r.lsc = 6 * D + 2 * I;   /* its scores, 2 I */
    r.lcomp = 6 * D + 4 * I; /* the block's indexer key, rotated */
    r.width = 6 * D + 5 * I;
    return r;
}

int64_t model_ds4_row(const model *m) { return model_ds4_row_layout(m).width; }
