/*
 * model_impl.h - what model.c shares with the loaders of single families
 * (model_glm4moe.c, model_minimax_m2.c, model_gptoss.c, model_dsa.c,
 * model_hybrid.c, model_llama4.c, model_kimi.c); not part of the engine's interface.
 */
#ifndef COLI_COORD_MODEL_IMPL_H
#define COLI_COORD_MODEL_IMPL_H

#include "coordinator/model.h"

/* Weight types the matmul kernels take; norms and biases must be F32. */
#define MASK_F32 ((uint64_t)1 << COLI_F32)
#define MASK_MATRIX coli_dtype_weight_mask()

/* Sane upper bounds; a file past them is hostile or not a model we run. */
#define MAX_LAYERS 4096
#define MAX_EXPERTS 4096
#define MAX_WIDTH (1 << 20)

/* blk.<il>.<suffix> with the expected shape (ne[i] for i < n_dims) and a
 * type in mask; optional: a missing tensor gives *out = NULL, not an error. */
int model_blk(const gguf_file *f, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
              uint64_t mask, int optional, const coli_tensor **out);

/* The dense gated FFN blk.il.ffn_{gate,up,down}<suffix>.weight, width F. */
int model_blk_ffn(const gguf_file *f, int il, const char *suffix, int64_t E, int64_t F, expert_weights *out);

/* deepseek2's latent attention tensors of blk.il (q, the latent, attn_output). */
int model_blk_mla(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* The router and the routed experts of blk.il (plus what the family's own
 * branch of model.c loads with them). */
int model_blk_moe(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* attn_norm, attn_q/k/v/output of blk.il (widths from hp) and the
 * optional attn_q/k/v.bias. */
int model_blk_attention(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* glm4moe (model_glm4moe.c): the keys the family requires (NULL-ended,
 * checked before model.c reads them with defaults); the family's keys
 * after the deepseek2-style FFN keys were read (defaults, consistency);
 * one block's tensors. */
extern const char *const glm4moe_required_keys[];
int glm4moe_read_hparams(const gguf_file *f, model_hparams *hp);
int glm4moe_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* One block's tensors, as the family loads them (model.c's s_load_layer). */
typedef int (*model_layer_fn)(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);
/* The NextN (multi-token prediction) blocks after the trunk of glm4moe,
 * qwen3next and qwen35moe files (model_nextn.c): when the file carries
 * them, each is a block as load_layer reads it (an attention block for
 * the hybrids) plus its NextN tensors, validated into m->nextn and never
 * run or placed. */
int model_load_nextn(const gguf_file *f, model *m, model_layer_fn load_layer);

/* minimax-m2 (model_minimax_m2.c): the same for MiniMax-M2 (no NextN). */
extern const char *const minimax_m2_required_keys[];
int minimax_m2_read_hparams(const gguf_file *f, model_hparams *hp);
int minimax_m2_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);
/* The optional integer key "<arch>.<suffix>": def when absent, else 0..max. */
int model_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t def, int64_t max,
                  int64_t *out);

/* gpt-oss (model_gptoss.c): its keys on top of the common ones, and one
 * layer's tensors. */
int model_gptoss_hparams(const gguf_file *f, model_hparams *hp);
int model_gptoss_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);
/* Shared with llama4's chunked layers: "<arch>.attention.sliding_window_pattern"
 * checked (block_count flags or an integer), and whether layer il is a
 * windowed one (n: llama.cpp's default period when the key is absent). */
int model_swa_pattern_check(const gguf_file *f, const model_hparams *hp);
int model_swa_layer(const gguf_file *f, const model_hparams *hp, int il, int64_t n);

/* llama4 (model_llama4.c): its required keys, its hparams, one layer. */
extern const char *const llama4_required_keys[];
int llama4_read_hparams(const gguf_file *f, model_hparams *hp);
int llama4_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* Sparse attention (deepseek32, glm-dsa; model_dsa.c): the indexer's keys
 * and the checks of the latent-attention keys it relies on, after the
 * deepseek2 ones were read. Returns 0 or a one-line refusal naming the key. */
int model_dsa_read(const gguf_file *f, model_hparams *hp);
/* Its q.k multiplier and rope magnitude under YaRN (yarn: the scaling is
 * yarn), where llama.cpp's context setup differs from deepseek2's. */
void model_dsa_yarn(model_hparams *hp, int yarn, float attn_factor, float log_mul);
/* Layer il's indexer tensors (none on a glm-dsa shared layer). */
int model_dsa_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* "<arch>.<suffix>": a positive integer at most max that must be present. */
int model_req_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t max, int64_t *out);

/* qwen3next / qwen35moe (model_hybrid.c): the Gated DeltaNet keys, which
 * layers are recurrent (m->recurrent) and their state size. */
int model_hybrid_read(const gguf_file *f, model *m);
/* The tensors of Gated DeltaNet layer il. */
int model_hybrid_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);
/* 1 for the hybrid architectures. */
int model_is_hybrid(const model_hparams *hp);

/* kimi-k3 (model_kimi.c): attention.head_count_kv's list (recurrent, when
 * not NULL: 1 for each KDA layer; n_head_kv becomes 1); the family's keys
 * after the deepseek2 ones were read; the KDA flags and output_res_score;
 * one block's tensors. */
int kimi_head_count_kv(const gguf_file *f, model_hparams *hp, uint8_t *recurrent);
int kimi_read_hparams(const gguf_file *f, model_hparams *hp);
int kimi_read_layers(const gguf_file *f, model *m);
int kimi_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

/* deepseek4 (model_ds4.c): its keys after the common ones (s_read_hparams);
 * every layer's tensors into m->ds4 and m->layers (instead of model.c's
 * loop); the F32 floats of one cache row (per position and layer); free. */
int model_ds4_hparams(const gguf_file *f, model_hparams *hp);
int model_ds4_load(const gguf_file *f, model *m);
int64_t model_ds4_row(const model *m);
void model_ds4_free(model *m);

#endif
