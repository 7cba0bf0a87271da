/*
 * model.h - a validated view of a GGUF language model: hyper-parameters read
 * from the metadata and tensor views that point into the mapped file.
 *
 * model_open maps the file (core/gguf/gguf.h does the file-level checks) and then
 * checks what only a model loader can know: the architecture is one we run,
 * every tensor it needs is present, each shape agrees with the metadata and
 * each dtype is one the forward pass can use. Every refusal is one line that
 * names the tensor or key, the expected and the found value.
 *
 * Supported architectures:
 *   llama    - Mixtral (ffn_gate_inp + 3-D ffn_*_exps) or dense (2-D ffn_*),
 *              GQA, NORM rope (adjacent pairs), top-k weights renormalised.
 *   olmoe    - q_norm/k_norm over the whole projected q and k, NEOX rope,
 *              raw softmax weights.
 *   qwen2moe - q/k/v biases, shared expert with a sigmoid gate, NEOX rope,
 *              raw softmax weights.
 *   qwen3moe - per-head RMS q_norm/k_norm, head width key_length (may differ
 *              from n_embd / n_head), NEOX rope, top-k weights renormalised.
 *   deepseek2 - multi-head latent attention (coordinator/forward_mla.c),
 *              leading dense blocks, ungated shared experts, softmax or
 *              sigmoid routing with an optional selection bias, normalised
 *              and scaled top-k weights, YaRN rope on the rope dims only.
 *   glm4moe  - GLM-4.5/4.6/4.7 (model_glm4moe.c): q/k/v biases, optional per-head
 *              q/k norm, NEOX rope on the leading rope.dimension_count dims,
 *              leading dense blocks, sigmoid routing with a selection bias,
 *              one ungated shared expert; NextN blocks loaded, not run.
 *   minimax-m2 - MiniMax-M2 (model_minimax_m2.c): q_norm/k_norm over the
 *              whole q and k, NEOX rope on the leading dims, sigmoid
 *              routing with a selection bias, weights renormalised.
 *   gpt-oss  - attention sinks, sliding-window attention on some layers,
 *              q/k/v/o biases, router bias, softmax over the chosen top-k,
 *              biased experts with the clamped SwiGLU (model_gptoss.c).
 *   deepseek32, glm-dsa - deepseek2's latent attention (newer file layout
 *              only) restricted to the top-k positions a lightning indexer
 *              picks (coordinator/model_dsa.c, forward_dsa.c).
 *   qwen3next, qwen35moe - hybrid: Gated DeltaNet layers (a recurrent
 *              state, coordinator/forward_hybrid.c, loaded by model_hybrid.c)
 *              and every few layers gated attention (sigmoid output gate
 *              per head from attn_q, per-head q/k norms, partial NEOX rope);
 *              qwen2moe's gated shared expert, top-k weights renormalised.
 *   deepseek4 - DeepSeek-V4 (model_ds4.c, forward_ds4.c): sliding-window MQA
 *              plus compressed past blocks (CSA with a lightning indexer,
 *              HCA), grouped low-rank output, four residual streams mixed
 *              by hyper-connections, sqrt(softplus) routing, clamped SwiGLU.
 *   llama4   - Llama-4 Scout/Maverick (model_llama4.c): chunked attention
 *              on most layers, NoPE layers with attention temperature, L2
 *              q/k norm after rope, MoE on interleaved layers, sigmoid
 *              top-1 router weighting the expert input, a shared expert.
 *   kimi-k3  - Kimi K3 (model_kimi.c): Kimi Delta Attention layers (forward_hybrid.c)
 *              and latent attention without rope and with an output gate,
 *              experts at a reduced (latent) width, the situ activation,
 *              cross-layer residual attention (forward_kimi.c).
 *   kimi-linear - Kimi-Linear: the same KDA and rope-less latent attention
 *              layers with a low-rank KDA output gate, a plain SwiGLU MoE.
 * Rope scaling (none / linear / yarn) is read for every architecture.
 */
#ifndef COLI_COORD_MODEL_H
#define COLI_COORD_MODEL_H

#include <stdint.h>

#include "core/kernels/expert_ffn.h"
#include "core/gguf/gguf.h"
#include "core/tensor.h"
#include "coordinator/kv_cache.h"
#include "coordinator/rope.h"

typedef enum model_arch {
    ARCH_LLAMA,
    ARCH_OLMOE,
    ARCH_QWEN2MOE,
    ARCH_QWEN3MOE,
    ARCH_DEEPSEEK2,
    ARCH_GLM4MOE,
    ARCH_MINIMAX_M2,
    ARCH_GPTOSS,
    ARCH_DEEPSEEK32, /* deepseek2's latent attention + the sparse-attention indexer (model_dsa.c) */
    ARCH_GLM_DSA,    /* the same with per-layer full / shared indexers (GLM-5) */
    ARCH_QWEN3NEXT,
    ARCH_QWEN35MOE,
    ARCH_LLAMA4,
    ARCH_KIMI_K3,     /* KDA + MLA hybrid, latent MoE, situ, attention residuals (model_kimi.c) */
    ARCH_KIMI_LINEAR, /* KDA + MLA hybrid, plain MoE (model_kimi.c) */
    ARCH_DEEPSEEK4,   /* DeepSeek-V4: compressed attention, hyper-connections (model_ds4.c, forward_ds4.c) */
} model_arch;

typedef enum expert_gating {
    GATING_SOFTMAX,        /* expert_gating_func 1 (or absent) */
    GATING_SIGMOID,        /* expert_gating_func 2 (DeepSeek-V3) */
    GATING_SOFTMAX_WEIGHT, /* gpt-oss: top-k of the logits, softmax over those k only */
    GATING_SQRT_SOFTPLUS,  /* expert_gating_func 4 (DeepSeek-V4): sqrt(softplus(logits)) */
} expert_gating;

typedef struct model_hparams {
    model_arch arch;
    char arch_name[16]; /* "llama", "olmoe", ..., "deepseek32", "glm-dsa" (s_read_arch's table) */
    int n_vocab;
    int n_ctx_train; /* <arch>.context_length */
    int n_embd;      /* width of the residual stream */
    int n_layer;     /* blocks of the forward pass: block_count - nextn_predict_layers */
    int n_head, n_head_kv;
    int head_dim;                /* query/key head width: key_length (default n_embd / n_head) */
    int head_dim_v;              /* value head width: value_length (default head_dim) */
    int n_rot;                   /* rope.dimension_count: dims of a head that rotate (deepseek2:
                               the trailing rope part of q/k, else the leading dims) */
    int64_t n_ff;                /* dense FFN length (0 for a MoE model) */
    int64_t n_ff_exp;            /* routed expert FFN length (0 for a dense model) */
    int64_t n_ff_shexp;          /* shared expert FFN length (0 when absent) */
    int n_expert, n_expert_used; /* 0, 0 for a dense model */
    int n_layer_dense_lead;      /* deepseek2: leading layers with a dense FFN (n_ff) */
    int n_expert_shared;         /* deepseek2: shared experts, one FFN of n_ff_shexp */
    int n_layer_nextn;           /* nextn_predict_layers: multi-token-prediction blocks after n_layer */
    float rms_eps;
    rope_params rope;           /* base, layout, scaling (rope.h) */
    float attn_scale;           /* q.k multiplier: 1/sqrt(head_dim) (deepseek2: mscale^2/sqrt(head_dim)) */
    int renorm_topk;            /* 1: top-k weights renormalised to sum to 1 (Mixtral, qwen3moe, V3) */
    expert_gating gating;       /* router scores: softmax or sigmoid */
    float expert_weights_scale; /* top-k weights multiplied by it (1 except deepseek2) */
    int n_expert_group;         /* expert_group_count: groups of the group-limited router (0: none) */
    int n_expert_group_used;    /* expert_group_used_count: groups a token may pick from */
    int n_lora_q;               /* deepseek2: q_lora_rank (0: attn_q directly) */
    int n_lora_kv;              /* deepseek2: kv_lora_rank */
    int mla_absorbed;           /* deepseek2 file with attn_k_b/attn_v_b (key_length_mla): attention
                               runs on the latent as MQA, head_dim = kv_lora_rank + n_rot,
                               head_dim_v = kv_lora_rank, n_head_kv = 1 */
    int head_dim_mla;           /* deepseek2: per-head q/k width nope + n_rot (key_length_mla, or
                               key_length in the older attn_kv_b files) */
    int head_dim_v_mla;         /* deepseek2: per-head value width (value_length_mla / value_length) */
    int n_swa;                  /* gpt-oss: attention.sliding_window (layer_weights.n_swa says where) */
    /* DeepSeek Sparse Attention (deepseek32, glm-dsa; 0 otherwise): the lightning indexer */
    int idx_n_head;        /* attention.indexer.head_count */
    int idx_head_dim;      /* attention.indexer.key_length: one key per position, cached after the latent */
    int idx_top_k;         /* attention.indexer.top_k: positions each query attends to */
    int idx_neox;          /* its rope pairs: NEOX (deepseek32) or adjacent (glm-dsa), first n_rot dims */
    float idx_norm_eps;    /* eps of its key LayerNorm (llama.cpp: 1e-6 deepseek32, 0 glm-dsa) */
    int64_t rec_floats;    /* hybrid models: F32 state of one linear-attention layer (0: none) */
    int attn_gate;         /* qwen3next, qwen35moe: attn_q gives [q | gate] per head, the
                               attention output is multiplied by sigmoid(gate) */
    int ssm_conv;          /* Gated DeltaNet: causal conv kernel width (ssm.conv_kernel) */
    int ssm_head_dim;      /* its key and value head width (ssm.state_size) */
    int ssm_k_heads;       /* key heads (ssm.group_count) */
    int ssm_v_heads;       /* value heads (ssm.time_step_rank), a multiple of ssm_k_heads */
    int ssm_k_tiled;       /* 1: value head h reads key head h % k_heads (qwen35moe); 0: h / (v/k) */
    int n_moe_step;        /* llama4: interleave_moe_layer_step (layer il MoE when (il+1) % it == 0) */
    int attn_temp_floor;   /* llama4 NoPE layers: q *= 1 + log(floor((pos + offset) / floor) + 1) * */
    float attn_temp_scale; /* scale (0: no temperature tuning) */
    float attn_temp_offset;
    /* kimi-k3 (model_kimi.c); 0 otherwise */
    int kda;                /* the linear layers are Kimi Delta Attention: a decay per key channel,
                               separate q/k/v convolutions, a sigmoid output gate */
    float kda_gate_lb;      /* kda.gate_lower_bound: g = lb sigmoid(-a (f + dt)); -INFINITY: softplus form */
    int mla_nope;           /* latent attention without rope (the rope dims join q.k unrotated) */
    int attn_res_bs;        /* attn_res.block_size: residual checkpoints every this many layers */
    int n_embd_latent;      /* expert_latent_length: the routed experts' width (0: n_embd) */
    float situ_beta;        /* situ(g, u) = beta tanh(g / beta) sigmoid(g) lin tanh(u / lin) */
    float situ_linear_beta; /* lin (<= 0: u unchanged) */
} model_hparams;

/* One transformer block. Matrices are GGML-shaped (ne[0] = input width). */
typedef struct layer_weights {
    const coli_tensor *attn_norm;         /* (n_embd) F32 */
    const coli_tensor *wq, *wk, *wv, *wo; /* (n_embd, q_dim), (n_embd, k_dim), (n_embd, v_dim), (attn_dim, n_embd) */
    const coli_tensor *bq, *bk, *bv;      /* qwen2moe, gpt-oss: (q_dim), (k_dim), (v_dim) F32; else NULL */
    const coli_tensor *bo;                /* gpt-oss: attn_output.bias (n_embd) F32; else NULL */
    const coli_tensor *sinks;             /* gpt-oss: attn_sinks (n_head) F32, a logit per head that
                                             joins each softmax without a value; else NULL */
    int n_swa;                            /* > 0: a position sees only the last n_swa positions */
    int n_chunk;                          /* llama4: > 0: a position sees only its own n_chunk-aligned chunk */
    int no_rope;                          /* llama4 NoPE layer: no rope, q scaled by the temperature */
    int l2_qk_norm;                       /* llama4: q and k RMS-normalised per head after rope, no weight */
    int moe_weight_in;                    /* llama4: the router weight scales the expert's input (top-1) */
    const coli_tensor *q_norm, *k_norm;   /* olmoe: (q_dim), (k_dim); qwen3moe: (head_dim) per head
                                                (qk_norm_per_head); F32; else NULL */
    int qk_norm_per_head;
    /* deepseek2 MLA (wq is attn_q when n_lora_q == 0; wk, wv are NULL; q outputs
     * n_head * head_dim_mla, wo takes n_head * head_dim_v_mla) */
    const coli_tensor *wq_a, *q_a_norm, *wq_b; /* (n_embd, n_lora_q), (n_lora_q), (n_lora_q, q out) */
    const coli_tensor *wkv_a, *kv_a_norm;      /* (n_embd, n_lora_kv + n_rot), (n_lora_kv) */
    const coli_tensor *wkv_b;                  /* older files: (n_lora_kv, n_head * (nope + head_dim_v_mla)) */
    const coli_tensor *wk_b, *wv_b;            /* mla_absorbed: (nope, n_lora_kv, n_head), (n_lora_kv,
                                                head_dim_v_mla, n_head); nope = head_dim_mla - n_rot */
    int recurrent;                             /* a Gated DeltaNet layer: the fields below, no attention */
    const coli_tensor *wqkv_mix;               /* attn_qkv (n_embd, 2 key_dim + value_dim): conv input */
    const coli_tensor *wz;                     /* attn_gate (n_embd, value_dim): output gate z */
    const coli_tensor *wba;                    /* qwen3next ssm_ba (n_embd, 2 v_heads): per key head its
                                                  value heads' beta, then alpha logits */
    const coli_tensor *wbeta, *walpha;         /* qwen35moe ssm_beta / ssm_alpha (n_embd, v_heads) */
    const coli_tensor *conv1d;                 /* ssm_conv1d (conv_kernel, conv_dim) F32 */
    const coli_tensor *dt_bias, *ssm_a;        /* (v_heads) F32: alpha bias, -exp(A_log) */
    const coli_tensor *ssm_norm;               /* (head_dim) F32: the gated RMSNorm of each head */
    const coli_tensor *ssm_out;                /* (value_dim, n_embd) (KDA: attn_output) */
    const coli_tensor *ffn_norm;               /* (n_embd) F32 (gpt-oss, hybrids: post_attention_norm) */
    const coli_tensor *router;                 /* MoE: (n_embd, n_expert); NULL for a dense layer */
    const coli_tensor *router_b;               /* gpt-oss: (n_expert) F32 added to the logits; else NULL */
    const coli_tensor *exp_probs_b;            /* deepseek2: (n_expert) F32 selection bias, or NULL */
    expert_weights dense;                      /* dense FFN (valid when router == NULL) */
    const coli_tensor *shexp_gate;             /* qwen2moe: (n_embd) F32 sigmoid gate; else NULL */
    int has_shexp;                             /* shexp holds a shared expert (qwen2moe, deepseek2) */
    expert_weights shexp;                      /* shared expert(s) as one FFN */
    /* DSA lightning indexer (model_dsa.c); all NULL on a glm-dsa "shared" layer, which
     * reuses the choice of the full layer before it */
    const coli_tensor *idx_wq_b;     /* (n_lora_q, idx_n_head * idx_head_dim) */
    const coli_tensor *idx_wk;       /* (n_embd, idx_head_dim) */
    const coli_tensor *idx_k_norm;   /* (idx_head_dim) F32 LayerNorm weight */
    const coli_tensor *idx_k_norm_b; /* (idx_head_dim) F32 LayerNorm bias */
    const coli_tensor *idx_proj;     /* (n_embd, idx_n_head) per-head weights */
    /* kimi-k3's Kimi Delta Attention (wq/wk/wv: attn_q/k/v, wbeta, ssm_a, dt_bias
     * (d_inner), wz: ssm_g, ssm_norm and ssm_out as above) and its other tensors */
    const coli_tensor *conv_q, *conv_k, *conv_v; /* ssm_conv1d_q/k/v (conv_kernel, 1, d_inner) F32 */
    const coli_tensor *wf_a, *wf_b;              /* ssm_f_a (n_embd, head_dim), ssm_f_b (head_dim, d_inner) */
    const coli_tensor *wg_a;                     /* kimi-linear ssm_g_a (n_embd, head_dim); wz is then
                                                    ssm_g_b (head_dim, d_inner); K3: NULL */
    const coli_tensor *mla_gate;                 /* attn_gate (n_embd, n_head * head_dim_v_mla): sigmoid
                                                    gate of the latent attention's output */
    const coli_tensor *attn_res, *ffn_res;       /* attn_res_score, ffn_res_score (n_embd) F32 */
    const coli_tensor *routed_down, *routed_up;  /* latent MoE: (n_embd, latent), (latent, n_embd) */
    const coli_tensor *routed_norm;              /* (latent) F32 or NULL */
} layer_weights;

/* A multi-token-prediction (NextN) block of glm4moe, qwen3next, qwen35moe:
 * loaded and validated, not run (the draft model of speculative decoding,
 * later). */
typedef struct nextn_weights {
    layer_weights layer;                                /* a full MoE block (hybrids: an attention one) */
    const coli_tensor *eh_proj, *enorm, *hnorm;         /* (2 n_embd, n_embd), (n_embd), (n_embd) */
    const coli_tensor *embed_tokens, *head, *head_norm; /* optional: (n_embd, n_vocab) x 2, (n_embd) */
} nextn_weights;

typedef struct model {
    gguf_file *gguf; /* owns the mapping */
    model_hparams hp;
    const coli_tensor *tok_embd;    /* (n_embd, n_vocab), rows dequantized per token */
    const coli_tensor *output_norm; /* (n_embd) F32 */
    const coli_tensor *output;      /* (n_embd, n_vocab); token_embd when the file ties them */
    layer_weights *layers;          /* n_layer entries */
    nextn_weights *nextn;           /* n_nextn entries (files that carry them, model_nextn.c), else NULL */
    int n_nextn;
    uint8_t *recurrent;    /* hybrid models: (n_layer) 1 for a linear-attention layer; else NULL */
    struct ds4_model *ds4; /* deepseek4: its own hyper-parameters and tensors (model_ds4.h); else NULL */
    int64_t n_params;
    /* kimi-k3: output_res_score (n_embd) F32; else NULL */
    const coli_tensor *output_res;
} model;

/* Map path and validate it as a model. On failure returns a negative
 * coli_status, *out stays NULL and coli_last_error() names the problem. */
int model_open(const char *path, model **out);
/* Same on a gguf_file already open; the model takes ownership of f (also
 * on failure, where f is closed). */
int model_from_gguf(gguf_file *f, model **out);
void model_close(model **m);

/* 1 for the families with deepseek2's multi-head latent attention. */
static inline int model_is_mla(const model_hparams *hp) {
    return hp->arch == ARCH_DEEPSEEK2 || hp->arch == ARCH_DEEPSEEK32 || hp->arch == ARCH_GLM_DSA ||
           hp->arch == ARCH_KIMI_K3 || hp->arch == ARCH_KIMI_LINEAR;
}

/* 1 for the Kimi hybrids (Kimi Delta Attention + latent attention). */
static inline int model_is_kimi(const model_hparams *hp) {
    return hp->arch == ARCH_KIMI_K3 || hp->arch == ARCH_KIMI_LINEAR;
}

/* q_dim = n_head * head_dim (queries), k_dim = n_head_kv * head_dim (keys
 * per position; sparse attention: + idx_head_dim, the indexer's key after
 * the latent, so every copy of a cache row carries it), v_dim = n_head_kv
 * * head_dim_v (values per position), attn_dim = n_head * head_dim_v (attention output, attn_output's input). */
int64_t model_q_dim(const model_hparams *hp);
int64_t model_k_dim(const model_hparams *hp);
int64_t model_v_dim(const model_hparams *hp);
int64_t model_attn_dim(const model_hparams *hp);

/* What one sequence of m keeps per layer (kv_cache.h); f16: an fp16 KV cache. */
void model_kv_shape(const model *m, int f16, kv_shape *out);

#endif
