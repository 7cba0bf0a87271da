/*
 * model_impl.h - what the parts of the model loader share (model.c,
 * model_dsa.c); not part of the engine's interface.
 */
#ifndef COLI_COORD_MODEL_IMPL_H
#define COLI_COORD_MODEL_IMPL_H

#include "coordinator/model.h"

/* Weight types the matmul kernels take; norms and biases must be F32. */
#define MASK_F32 ((uint64_t)1 << COLI_F32)
#define MASK_MATRIX coli_dtype_weight_mask()

/* blk.<il>.<suffix> with n_dims dims (ne0, ne1, ne2) and a type in mask;
 * optional: absent gives *out = NULL. Returns 0 or the one-line refusal. */
int model_blk(const gguf_file *f, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
              uint64_t mask, int optional, const coli_tensor **out);

/* "<arch>.<suffix>" as an integer in 0..max, def when absent. */
int model_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t def, int64_t max,
                  int64_t *out);

/* Sparse attention (deepseek32, glm-dsa; model_dsa.c): the indexer's keys
 * and the checks of the latent-attention keys it relies on, after the
 * deepseek2 ones were read. Returns 0 or a one-line refusal naming the key. */
int model_dsa_read(const gguf_file *f, model_hparams *hp);
/* Its q.k multiplier and rope magnitude under YaRN (yarn: the scaling is
 * yarn), where llama.cpp's context setup differs from deepseek2's. */
void model_dsa_yarn(model_hparams *hp, int yarn, float attn_factor, float log_mul);
/* Layer il's indexer tensors (none on a glm-dsa shared layer). */
int model_dsa_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

#endif
