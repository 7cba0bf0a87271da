/*
 * model_ds4.h - what DeepSeek-V4 (deepseek4) keeps beyond model.h's common
 * fields: loaded by model_ds4.c, run by forward_ds4.c. The common fields
 * of m->layers[il] it fills: attn_norm, sinks, wq_a, q_a_norm, wq_b,
 * ffn_norm, router, exp_probs_b, shexp (clamped SwiGLU) and n_swa.
 */
#ifndef COLI_COORD_MODEL_DS4_H
#define COLI_COORD_MODEL_DS4_H

#include "coordinator/model.h"

#define DS4_CSA_RATIO 4   /* compressed with overlap, chosen by the lightning indexer */
#define DS4_HCA_RATIO 128 /* compressed without overlap, every block attended */

typedef struct ds4_layer {
    int ratio;                        /* attention.compress_ratios[il]: 0, 4 or 128 */
    const coli_tensor *wkv, *kv_norm; /* attn_kv (E, D), attn_kv_a_norm (D): the one key = value */
    const coli_tensor *wo_a, *wo_b;   /* (H D / G, G o_lora) per group, (G o_lora, E) */
    const coli_tensor *hc_fn[2];      /* hc_attn_fn, hc_ffn_fn: (hc E, (2 + hc) hc) */
    const coli_tensor *hc_base[2];    /* ((2 + hc) hc) F32 */
    const coli_tensor *hc_scale[2];   /* (3) F32: pre, post, comb multipliers */
    const coli_tensor *comp_wkv;      /* attn_compressor_kv (E, c D), c = 2 at ratio 4, else 1 */
    const coli_tensor *comp_wgate;    /* attn_compressor_gate (E, c D) */
    const coli_tensor *comp_ape;      /* attn_compressor_ape (c D, ratio), any weight type: rows dequantized */
    const coli_tensor *comp_norm;     /* attn_compressor_norm (D) F32 */
    const coli_tensor *idx_proj;      /* ratio 4: indexer.proj (E, idx heads) */
    const coli_tensor *idx_wq_b;      /* indexer.attn_q_b (q_lora, idx heads * I) */
    const coli_tensor *idx_wkv, *idx_wgate, *idx_ape, *idx_norm; /* indexer_compressor_*: 2 I wide */
    const int32_t *tid2eid; /* hash-routed layer (il < hash_layer_count): (n_vocab, n_expert_used) experts
                               of each token id, checked < n_expert; else NULL (router + exp_probs_b) */
} ds4_layer;

typedef struct ds4_model {
    int n_swa;               /* attention.sliding_window: raw positions a query sees */
    int n_groups, o_lora;    /* attention.output_group_count / output_lora_rank */
    int hc, sinkhorn;        /* hyper_connection.count (4) / sinkhorn_iterations */
    float hc_eps;            /* hyper_connection.epsilon */
    int idx_n_head, idx_dim; /* attention.indexer.head_count / key_length */
    int n_hash;              /* hash_layer_count: the leading layers routed by token id */
    int idx_top_k;           /* attention.indexer.top_k: compressed blocks a CSA query attends */
    rope_params rope_comp;   /* compressed layers: compress_rope_freq_base with the file's scaling */
    const coli_tensor *hc_head_fn, *hc_head_base, *hc_head_scale; /* (hc E, hc), (hc), (1) */
    ds4_layer *layers; /* n_layer + n_layer_nextn (the MTP blocks: loaded, not run) */
} ds4_model;

/* Offsets (floats) in a deepseek4 cache row of width model_ds4_row: each
 * position keeps its raw key, its compressor rows and, at the last
 * position of a block, the block's compressed key (forward_ds4.c). */
typedef struct ds4_row {
    int64_t raw, ckv, csc, comp, lkv, lsc, lcomp, width;
} ds4_row;
ds4_row model_ds4_row_layout(const model *m);

#endif
