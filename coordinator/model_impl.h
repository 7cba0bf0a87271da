/*
 * model_impl.h - what the model loaders share (model.c, model_hybrid.c);
 * not part of the engine's interface.
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

/* "<arch>.<suffix>": a positive integer at most max that must be present
 * (model_req_int), or 0..max with def when absent (model_opt_int). */
int model_req_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t max, int64_t *out);
int model_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t def, int64_t max,
                  int64_t *out);

/* blk.<il>.<suffix> with the expected shape (ne[i] for i < n_dims) and a
 * type in mask; optional: a missing tensor gives *out = NULL. */
int model_blk(const gguf_file *f, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
              uint64_t mask, int optional, const coli_tensor **out);

/* qwen3next / qwen35moe (model_hybrid.c): the Gated DeltaNet keys, which
 * layers are recurrent (m->recurrent) and their state size. */
int model_hybrid_read(const gguf_file *f, model *m);
/* The tensors of Gated DeltaNet layer il. */
int model_hybrid_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);
/* 1 for the hybrid architectures. */
int model_is_hybrid(const model_hparams *hp);

#endif
