/*
 * forward_impl.h - what the parts of the forward pass share (forward.c,
 * forward_mla.c, forward_hybrid.c, forward_kimi.c); not part of the engine's interface.
 */
#ifndef COLI_COORD_FORWARD_IMPL_H
#define COLI_COORD_FORWARD_IMPL_H

#include "coordinator/forward.h"

/* Where each row of a batch lives: rows of one sequence (kv, positions
 * pos, pos + 1, ...) or one row of each of several (kvs[t] at poss[t]). */
typedef struct fwd_rows {
    kv_cache *kv;
    int pos;
    kv_cache *const *kvs; /* NULL: one sequence */
    const int *poss;
} fwd_rows;

static inline kv_cache *fwd_row_kv(const fwd_rows *r, int t) { return r->kvs ? r->kvs[t] : r->kv; }
static inline int fwd_row_pos(const fwd_rows *r, int t) { return r->poss ? r->poss[t] : r->pos + t; }

/* RMSNorm of each of n rows of width cols (o may be x): x / sqrt(mean(x^2)
 * + eps) * w, the sum of squares in double as ggml. w: (cols) F32. */
void fwd_rmsnorm_rows(float *o, const float *x, const coli_tensor *w, int n, int64_t cols, float eps);

/* Softmax of n values in place: exp(x - max) / sum (the sum in double). */
void fwd_softmax(float *x, int64_t n);

/* The same with an extra logit *sink (NULL: none) in the maximum and the
 * sum, whose probability is dropped (gpt-oss's attention sinks). */
void fwd_softmax_sink(float *x, int64_t n, const float *sink);

/* y (n, W->ne[1]) = x (n, W->ne[0]) W^T through coli_matmul on the state's
 * pool and scratch. Returns 0 or the matmul's error. */
int fwd_matmul(forward_state *s, const coli_tensor *W, const float *x, int n, float *y);

/* The op y = W x for coli_matmul_many (several matrices, one pool job). */
coli_matmul_op fwd_op_of(const coli_tensor *W, const float *x, int n, float *y);

/* deepseek2's multi-head latent attention up to the cache: from s->xb
 * (n, n_embd) fill s->q, s->k, s->v as the attention of forward.c reads
 * them (hp->head_dim / head_dim_v per head, n_head_kv KV heads): older
 * files every head's [k_nope | rope(k_pe)] and v, mla_absorbed files the
 * latent [c_kv | rope(k_pe)] (one KV head, values inside it) and queries
 * [Wk_b q_nope | rope(q_pe)]. Positions: s->rope. Returns 0 or a matmul
 * error. */
int forward_mla_qkv(forward_state *s, const layer_weights *l, int n);

/* attn_output's input from the attention output s->attn: s->attn itself,
 * or for mla_absorbed files each head's latent output times attn_v_b[h]
 * (n, n_head * head_dim_v_mla, in s->mla). *rc: 0 or a matmul error (then
 * NULL is returned). */
const float *forward_mla_values(forward_state *s, const layer_weights *l, int n, int *rc);

/* Floats per token of s->mla (0 unless latent attention). forward_mla_qkv
 * leaves the normalised q latent rmsnorm(attn_q_a x) * attn_q_a_norm at
 * its start, (n, n_lora_q): the sparse-attention indexer's input. */
size_t forward_mla_floats(const model_hparams *hp);

/* DeepSeek Sparse Attention (forward_dsa.c). The state lives in s->dsa
 * (NULL for other families). */
int forward_dsa_init(forward_state *s);
void forward_dsa_free(forward_state *s);
/* The lightning indexer of layer l for the n new rows: its key into each
 * row of s->k after the latent (cached with it), its queries and head
 * weights kept for forward_dsa_select. Nothing on a shared layer. */
int forward_dsa_index(forward_state *s, const layer_weights *l, int n);
/* After the rows were cached: the positions each row attends to, the
 * top-k indexer scores among 0..pos (a shared layer keeps the previous
 * layer's choice). Returns 0. */
int forward_dsa_select(forward_state *s, const layer_weights *l, const fwd_rows *rows, int il, int n);
/* The k (1 <= k <= n) of positions 0..n-1 that ggml's CPU top_k keeps
 * for scores sc (std::partial_sort by sc[a] > sc[b], libstdc++'s heap
 * deciding among equal scores), into out in ascending order. */
void forward_dsa_top_k(const float *sc, int n, int k, int32_t *out);
/* Row t's chosen positions in ascending order and their count, or NULL
 * when it attends to every position 0..pos (sequence not past top-k). */
const int32_t *forward_dsa_positions(const forward_state *s, int t, int *n_pos);

/* kimi-k3 (forward_kimi.c): its buffers in s->kimi (nothing for other
 * families; COLI_ENOMEM); a batch's empty checkpoint stack; the residual
 * mix with weights score as the next sub-block's input (s->res_in), h
 * banked first when bank (h then restarts from 0); the latent experts'
 * input routed_down x (*rc: 0 or a matmul error); s->delta's latent rows
 * normalised and projected back to n_embd in place. */
int forward_kimi_init(forward_state *s);
void forward_kimi_free(forward_state *s);
void forward_kimi_begin(forward_state *s);
void forward_kimi_mix(forward_state *s, const coli_tensor *score, int n, int bank);
const float *forward_kimi_latent_in(forward_state *s, const layer_weights *l, int n, int *rc);
int forward_kimi_latent_out(forward_state *s, const layer_weights *l, int n);

/* The input of a sub-block's norm: h, or kimi-k3's residual mix. */
static inline const float *fwd_block_in(const forward_state *s) { return s->res_in ? s->res_in : s->h; }

/* Floats of s->gdn for batches of max_batch rows and n_workers threads (0
 * without Gated DeltaNet layers). */
size_t forward_gdn_floats(const model_hparams *hp, int max_batch, int n_workers);

/* Gated DeltaNet layer il over the n rows (forward_hybrid.c): h += its
 * output; each row's sequence state advances. Returns 0 or a matmul error. */
int forward_gdn_block(forward_state *s, const fwd_rows *rows, int il, int n);

/* Gated attention (hp->attn_gate): s->q from attn_q's [q | gate] rows in
 * s->qgate; then s->attn times sigmoid(gate). */
void forward_gate_split(forward_state *s, int n);
void forward_gate_apply(forward_state *s, int n);

/* The routed experts (+ shared expert) of MoE layer il on s->xb into
 * s->delta (forward.c's MoE block; deepseek4 calls it between its
 * hyper-connections); routed: s->sel and s->sel_w hold the choice already
 * (deepseek4's hash-routed layers), else the router makes it. Returns 0
 * or the executor's error. */
int fwd_moe_block(forward_state *s, const layer_weights *l, int il, int n, int routed);

/* llama.cpp's rotation (ggml_gen_hadamard) of width n, a power of two from
 * 64: Sylvester's matrix over 1/sqrt(n), row-major; malloc'd (NULL: out of
 * memory or another width). */
float *forward_hadamard(int n);

/* DeepSeek-V4 (forward_ds4.c): its state in s->ds4 (NULL for other
 * families); the layers and logits after forward.c put the embeddings in
 * s->h and the (unscaled) rope angles in s->rope. */
int forward_ds4_init(forward_state *s);
void forward_ds4_free(forward_state *s);
int forward_ds4_layers(forward_state *s, const fwd_rows *rows, const int32_t *ids, int n, float *logits,
                       int logits_all);

#endif
