/*
 * model_hybrid.c - the Gated DeltaNet part of qwen3next / qwen35moe files:
 * the ssm.* keys, which layers are linear attention, and their tensors
 * (names and shapes as llama.cpp de3ff815 reads them; model_impl.h).
 *
 * A linear layer's state (kv_cache.h: rec_floats F32) is its causal-conv
 * tail, (conv_kernel - 1) rows of conv_dim = 2 key_dim + value_dim, then
 * per value head the delta-rule matrix S[v][k] (head_dim x head_dim).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

int model_is_hybrid(const model_hparams *hp) { return hp->arch == ARCH_QWEN3NEXT || hp->arch == ARCH_QWEN35MOE; }

/* attention.recurrent_layers (one bool or integer per block), else every
 * full_attention_interval-th layer is attention (llama.cpp's default 4). */
static int s_read_layer_kinds(const gguf_file *f, model *m) {
    model_hparams *hp = &m->hp;
    char key[128];
    int64_t every;
    gguf_type et;
    uint64_t n;
    const void *data;
    if (!(m->recurrent = calloc((size_t)hp->n_layer, 1))) return coli_fail(COLI_ENOMEM, "model: out of memory");
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", hp->arch_name);
    if (gguf_find_key(f, key) >= 0) {
        int rc = gguf_get_arr(f, key, &et, &n, &data);
        if (rc < 0) return rc;
        if ((et != GGUF_BOOL && et != GGUF_UINT8 && et != GGUF_INT8) || n < (uint64_t)hp->n_layer)
            return coli_fail(COLI_EFORMAT, "metadata '%s': expected %d bools, found %llu of type %d", key, hp->n_layer,
                             (unsigned long long)n, (int)et);
        for (int l = 0; l < hp->n_layer; l++) m->recurrent[l] = ((const uint8_t *)data)[l] != 0;
        return 0;
    }
    int rc = model_opt_int(f, hp, "full_attention_interval", 4, MAX_LAYERS, &every);
    if (rc < 0) return rc;
    if (every < 1) return coli_fail(COLI_EFORMAT, "metadata '%s.full_attention_interval' = 0", hp->arch_name);
    for (int l = 0; l < hp->n_layer; l++) m->recurrent[l] = (l + 1) % every != 0;
    return 0;
}

int model_hybrid_read(const gguf_file *f, model *m) {
    model_hparams *hp = &m->hp;
    int64_t conv, state, groups, rank, inner;
    int rc;
    if ((rc = model_req_int(f, hp, "ssm.conv_kernel", 64, &conv)) < 0 ||
        (rc = model_req_int(f, hp, "ssm.state_size", MAX_WIDTH, &state)) < 0 ||
        (rc = model_req_int(f, hp, "ssm.group_count", MAX_WIDTH, &groups)) < 0 ||
        (rc = model_req_int(f, hp, "ssm.time_step_rank", MAX_WIDTH, &rank)) < 0 ||
        (rc = model_req_int(f, hp, "ssm.inner_size", MAX_WIDTH, &inner)) < 0)
        return rc;
    if (rank % groups != 0 || inner != rank * state || conv < 2)
        return coli_fail(COLI_EFORMAT,
                         "%s: ssm.time_step_rank %lld (value heads) must be a multiple of ssm.group_count %lld, "
                         "ssm.inner_size %lld = heads x ssm.state_size %lld, ssm.conv_kernel %lld >= 2",
                         hp->arch_name, (long long)rank, (long long)groups, (long long)inner, (long long)state,
                         (long long)conv);
    hp->ssm_conv = (int)conv;
    hp->ssm_head_dim = (int)state;
    hp->ssm_k_heads = (int)groups;
    hp->ssm_v_heads = (int)rank;
    /* qwen35moe files keep value heads tiled over the key heads (the converter reorders them) */
    hp->ssm_k_tiled = hp->arch == ARCH_QWEN35MOE;
    hp->attn_gate = 1;
    if (hp->head_dim_v != hp->head_dim)
        return coli_fail(COLI_EFORMAT, "%s: value_length %d: the gated attention needs key_length %d", hp->arch_name,
                         hp->head_dim_v, hp->head_dim);
    const int64_t conv_dim = 2 * groups * state + inner;
    hp->rec_floats = (conv - 1) * conv_dim + rank * state * state;
    return s_read_layer_kinds(f, m);
}

/* Beta and alpha logits: one fused matrix (qwen3next) or two (qwen35moe). */
static int s_load_gates(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, HV = hp->ssm_v_heads;
    int rc;
    if (hp->arch == ARCH_QWEN3NEXT) return model_blk(f, il, "ssm_ba.weight", 2, E, 2 * HV, 1, MASK_MATRIX, 0, &l->wba);
    if ((rc = model_blk(f, il, "ssm_beta.weight", 2, E, HV, 1, MASK_MATRIX, 0, &l->wbeta)) < 0) return rc;
    return model_blk(f, il, "ssm_alpha.weight", 2, E, HV, 1, MASK_MATRIX, 0, &l->walpha);
}

int model_hybrid_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, D = hp->ssm_head_dim, HV = hp->ssm_v_heads;
    const int64_t key_dim = hp->ssm_k_heads * D, value_dim = HV * D, conv_dim = 2 * key_dim + value_dim;
    const coli_tensor *legacy = NULL;
    int rc;
    if ((rc = model_blk(f, il, "ssm_in.weight", 2, E, conv_dim + value_dim, 1, MASK_MATRIX, 1, &legacy)) < 0) return rc;
    if (legacy)
        return coli_fail(COLI_EUNSUPPORTED,
                         "tensor 'blk.%d.ssm_in.weight': the fused q/k/v/z projection of older qwen3next files is "
                         "not supported (convert again: attn_qkv + attn_gate)",
                         il);
    if ((rc = model_blk(f, il, "attn_qkv.weight", 2, E, conv_dim, 1, MASK_MATRIX, 0, &l->wqkv_mix)) < 0 ||
        (rc = model_blk(f, il, "attn_gate.weight", 2, E, value_dim, 1, MASK_MATRIX, 0, &l->wz)) < 0 ||
        (rc = s_load_gates(f, hp, il, l)) < 0 ||
        (rc = model_blk(f, il, "ssm_conv1d.weight", 2, hp->ssm_conv, conv_dim, 1, MASK_F32, 0, &l->conv1d)) < 0 ||
        (rc = model_blk(f, il, "ssm_dt.bias", 1, HV, 1, 1, MASK_F32, 0, &l->dt_bias)) < 0 ||
        (rc = model_blk(f, il, "ssm_a", 1, HV, 1, 1, MASK_F32, 0, &l->ssm_a)) < 0 ||
        (rc = model_blk(f, il, "ssm_norm.weight", 1, D, 1, 1, MASK_F32, 0, &l->ssm_norm)) < 0)
        return rc;
    return model_blk(f, il, "ssm_out.weight", 2, value_dim, E, 1, MASK_MATRIX, 0, &l->ssm_out);
}
