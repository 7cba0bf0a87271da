/*
 * expert_ffn.h - one gated FFN expert, the unit of work the scheduler moves.
 *
 *   out = W_down · (silu(W_gate · x) ⊙ (W_up · x))
 *
 * gpt-oss experts (EXPERT_ACT_SWIGLU_OAI) add a bias after each matrix and
 * clamp the gated product (llama.cpp's ggml_swiglu_oai):
 *
 *   g = W_gate · x + b_gate, u = W_up · x + b_up
 *   h = min(g, limit) · sigmoid(alpha · min(g, limit)) · (clamp(u, ±limit) + 1)
 *   out = W_down · h + b_down
 *
 * kimi-k3 experts (EXPERT_ACT_SITU, llama.cpp's situ; alpha = situ_beta,
 * limit = situ_linear_beta from the file, limit <= 0: u unchanged):
 *
 *   h = alpha tanh(g / alpha) sigmoid(g) * limit tanh(u / limit)
 *
 * The same function serves the dense llama FFN, Qwen2-MoE's shared expert,
 * the cpu plugin and the coordinator's in-process path, so a CPU fallback
 * computes exactly what the primary CPU path would have.
 */
#ifndef COLI_CORE_EXPERT_FFN_H
#define COLI_CORE_EXPERT_FFN_H

#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/kernels/matmul.h"
#include "core/tensor.h"

/* The gated activation of an expert (the plugin ABI's moe_expert_desc.act). */
typedef enum expert_act {
    EXPERT_ACT_SILU = 0,         /* silu(g) * u: every family but gpt-oss */
    EXPERT_ACT_SWIGLU_OAI = 1,   /* gpt-oss: clamped, alpha-scaled, (u + 1); with biases */
    EXPERT_ACT_SITU = 2,         /* kimi-k3: situ with alpha = situ_beta, limit = situ_linear_beta */
    EXPERT_ACT_SWIGLU_CLAMP = 3, /* deepseek4: silu(min(g, limit)) * clamp(u, ±limit) (ggml_swiglu_clamp) */
} expert_act;

/* llama.cpp's constants for gpt-oss (build_moe_ffn: no metadata key carries them). */
#define EXPERT_OAI_ALPHA 1.702f
#define EXPERT_OAI_LIMIT 7.0f

typedef struct expert_weights {
    const void *gate; /* (n_ff rows, n_embd) */
    const void *up;   /* (n_ff rows, n_embd) */
    const void *down; /* (n_embd rows, n_ff) */
    coli_dtype gate_type, up_type, down_type;
    int64_t n_embd, n_ff;
    expert_act act;                               /* EXPERT_ACT_SILU when zeroed */
    float alpha, limit;                           /* EXPERT_ACT_SWIGLU_OAI's / SITU's constants; SWIGLU_CLAMP's limit */
    const float *gate_bias, *up_bias, *down_bias; /* (n_ff), (n_ff), (n_embd) F32, or NULL */
} expert_weights;

/* Bytes of each matrix: gate and up are n_ff rows of n_embd values, down
 * n_embd rows of n_ff. */
typedef struct expert_part_bytes {
    size_t gate, up, down;
} expert_part_bytes;
expert_part_bytes expert_parts_bytes(const expert_weights *w);

/* Bytes of the three matrices (what a device must hold for this expert). */
size_t expert_weights_bytes(const expert_weights *w);

/* 1 when layer l of f has routed experts (blk.l.ffn_gate_exps.weight is
 * present), 0 for a dense layer (deepseek2's leading blocks): executors and
 * placement skip those. */
int expert_layer_present(const gguf_file *f, int layer);

/* Expert e of layer l of a MoE file: slices of blk.l.ffn_{gate,up,down}_exps.
 * Validates the tensors' presence, types and shapes (3-D, consistent
 * n_embd/n_ff, e < n_expert). The optional biases blk.l.ffn_*_exps.bias
 * ((n_ff or n_embd, n_expert) F32) are sliced the same way; the activation
 * is the file's (expert_act_of_gguf). */
int expert_weights_from_gguf(const gguf_file *f, int layer, int expert, expert_weights *out);

/* The activation of every routed expert of f: EXPERT_ACT_SWIGLU_OAI for
 * general.architecture "gpt-oss", EXPERT_ACT_SITU for "kimi-k3", else
 * EXPERT_ACT_SILU. */
expert_act expert_act_of_gguf(const gguf_file *f);

/* Set w's activation; SWIGLU_OAI takes llama.cpp's alpha and limit. */
void expert_weights_set_act(expert_weights *w, expert_act act);

/* Set w's activation to f's (SITU: its <arch>.activation.situ_beta and
 * situ_linear_beta, required). Returns 0 or COLI_EFORMAT naming the key. */
int expert_weights_act_of_gguf(const gguf_file *f, expert_weights *w);

/* deepseek4: layer's limit of the clamped SwiGLU from "deepseek4.<key>"
 * (swiglu_clamp_exp / swiglu_clamp_shexp: an array over the blocks or one
 * number); w gets SWIGLU_CLAMP with it, or SILU when it is <= 1e-6 (as
 * llama.cpp). Returns 0 or COLI_EFORMAT naming the key. */
int expert_weights_ds4_clamp(const gguf_file *f, const char *key, int layer, expert_weights *w);

/* out (n_rows, n_embd) = expert(x (n_rows, n_embd)). Row r of out depends
 * only on row r of x (see matmul.h). Returns 0 or COLI_ENOMEM. */
int expert_ffn(coli_pool *pool, coli_scratch *scratch, const expert_weights *w, const float *x, int64_t n_rows,
               float *out);

/* One expert applied to a block of rows, for expert_ffn_many. */
typedef struct expert_ffn_task {
    const expert_weights *w;
    const float *x; /* (n_rows, n_embd) */
    float *out;     /* (n_rows, n_embd) */
    int64_t n_rows;
} expert_ffn_task;

/* Experts run together per step of the FFN: the gate and up matrices of
 * up to EXPERT_FFN_MANY_MAX experts as one pool job, then their down
 * matrices as one, instead of three jobs per expert (decode wakes the pool
 * 2 times per layer instead of 3 k). Each out is bit-identical to
 * expert_ffn on its task alone. Returns 0, COLI_EINVAL or COLI_ENOMEM. */
#define EXPERT_FFN_MANY_MAX 16
int expert_ffn_many(coli_pool *pool, coli_scratch *scratch, const expert_ffn_task *tasks, int n);

#endif
