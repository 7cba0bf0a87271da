/*
 * model.h - a validated view of a GGUF language model: hyper-parameters read
 * from the metadata and tensor views that point into the mapped file.
 *
 * model_open maps the file (core/gguf.h does the file-level checks) and then
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
 */
#ifndef COLI_COORD_MODEL_H
#define COLI_COORD_MODEL_H

#include <stdint.h>

#include "expert_ffn.h"
#include "gguf.h"
#include "tensor.h"

typedef enum model_arch {
    ARCH_LLAMA,
    ARCH_OLMOE,
    ARCH_QWEN2MOE,
} model_arch;

typedef struct model_hparams {
    model_arch arch;
    char arch_name[16];     /* "llama", "olmoe", "qwen2moe" */
    int n_vocab;
    int n_ctx_train;        /* <arch>.context_length */
    int n_embd;             /* width of the residual stream */
    int n_layer;
    int n_head, n_head_kv;
    int head_dim;           /* n_embd / n_head */
    int n_rot;              /* rope.dimension_count: leading dims of a head that rotate */
    int64_t n_ff;           /* dense FFN length (0 for a MoE model) */
    int64_t n_ff_exp;       /* routed expert FFN length (0 for a dense model) */
    int64_t n_ff_shexp;     /* shared expert FFN length (0 when absent) */
    int n_expert, n_expert_used; /* 0, 0 for a dense model */
    float rms_eps;
    float rope_base;        /* theta */
    int rope_neox;          /* 1: rotate (i, i + n_rot/2); 0: adjacent pairs (2i, 2i+1) */
    int renorm_topk;        /* 1: top-k weights renormalised to sum to 1 (Mixtral) */
} model_hparams;

/* One transformer block. Matrices are GGML-shaped (ne[0] = input width). */
typedef struct layer_weights {
    const coli_tensor *attn_norm;            /* (n_embd) F32 */
    const coli_tensor *wq, *wk, *wv, *wo;    /* (n_embd, q_dim), (n_embd, kv_dim) x2, (q_dim, n_embd) */
    const coli_tensor *bq, *bk, *bv;         /* qwen2moe: (q_dim), (kv_dim), (kv_dim) F32; else NULL */
    const coli_tensor *q_norm, *k_norm;      /* olmoe: (q_dim), (kv_dim) F32; else NULL */
    const coli_tensor *ffn_norm;             /* (n_embd) F32 */
    const coli_tensor *router;               /* MoE: (n_embd, n_expert); NULL when dense */
    expert_weights dense;                    /* dense llama FFN (valid when n_expert == 0) */
    const coli_tensor *shexp_gate;           /* qwen2moe: (n_embd) F32 sigmoid gate; else NULL */
    expert_weights shexp;                    /* qwen2moe shared expert (valid when shexp_gate) */
} layer_weights;

typedef struct model {
    gguf_file *gguf;            /* owns the mapping */
    model_hparams hp;
    const coli_tensor *tok_embd;    /* (n_embd, n_vocab), rows dequantized per token */
    const coli_tensor *output_norm; /* (n_embd) F32 */
    const coli_tensor *output;      /* (n_embd, n_vocab); token_embd when the file ties them */
    layer_weights *layers;          /* n_layer entries */
    int64_t n_params;
} model;

/* Map path and validate it as a model. On failure returns a negative
 * coli_status, *out stays NULL and coli_last_error() names the problem. */
int  model_open(const char *path, model **out);
/* Same on a gguf_file already open; the model takes ownership of f (also
 * on failure, where f is closed). */
int  model_from_gguf(gguf_file *f, model **out);
void model_close(model **m);

/* q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim. */
int64_t model_q_dim(const model_hparams *hp);
int64_t model_kv_dim(const model_hparams *hp);

#endif
