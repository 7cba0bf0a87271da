/*
 * model_impl.h - what model.c shares with the loaders of single families
 * (model_gptoss.c); not part of the engine's interface.
 */
#ifndef COLI_COORD_MODEL_IMPL_H
#define COLI_COORD_MODEL_IMPL_H

#include "coordinator/model.h"

/* blk.<il>.<suffix>, required, with the dims ne0..ne2 (n_dims of them) and
 * F32 (f32) or a matmul weight type. 0 or a one-line error naming it. */
int model_blk(const gguf_file *f, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
              int f32, const coli_tensor **out);

/* The optional integer key "<arch>.<suffix>": def when absent, else 0..max. */
int model_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix, int64_t def, int64_t max,
                  int64_t *out);

/* gpt-oss (model_gptoss.c): its keys on top of the common ones, and one
 * layer's tensors. */
int model_gptoss_hparams(const gguf_file *f, model_hparams *hp);
int model_gptoss_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l);

#endif
