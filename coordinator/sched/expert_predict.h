/*
 * expert_predict.h - which experts the next layer will likely want: layer
 * l+1's router applied to layer l's MoE input (what layer l's router saw),
 * before the attention of l+1 runs. A softmax keeps the order of logits,
 * so each token's top k logits are its choice (selection biases and expert
 * groups, where a model has them, are left out of the prediction). Used by
 * the live caches' prefetch (cache_link.c) and the disk tier (disk_tier.c).
 */
#ifndef COLI_COORD_SCHED_EXPERT_PREDICT_H
#define COLI_COORD_SCHED_EXPERT_PREDICT_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/matmul.h"

struct gguf_file;

typedef struct expert_predictor {
    const struct gguf_file *gguf; /* the routers: blk.L.ffn_gate_inp.weight */
    int64_t n_embd;
    int n_expert, k;
    coli_scratch scratch;
    float *logits; /* (n_tok, n_expert) */
    size_t cap_logits;
} expert_predictor;

void expert_predictor_free(expert_predictor *p);
/* The slots (layer * n_expert + e) that x's n_tok rows would choose at layer,
 * most often predicted first, then in expert order; returns how many (at most
 * n_expert), 0 when the layer has no usable router or n_expert > 1024. */
int expert_predict(expert_predictor *p, int layer, const float *x, int64_t n_tok, int64_t *cand);

#endif
