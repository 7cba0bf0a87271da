/*
 * router.h - one token's expert choice from its router logits, for every
 * family (llama.cpp's build_moe_ffn):
 *
 *   scores  = softmax(logits) or sigmoid(logits) or sqrt(softplus(logits))
 *             (deepseek4), or the logits themselves
 *             (gpt-oss, GATING_SOFTMAX_WEIGHT: w = softmax of the k chosen)
 *   choice  = scores (+ exp_probs_b, the bias only chooses)
 *   groups  (n_group > 1, DeepSeek-V3): group score = sum of its two best
 *           choice values; only the n_group_used best groups stay eligible
 *   sel     = the n_used best eligible experts by choice, best first; ties go
 *             to the lower index, so routing is deterministic
 *   w       = scores[sel], / their sum if renorm, * scale
 */
#ifndef COLI_COORD_ROUTER_H
#define COLI_COORD_ROUTER_H

#include <stdint.h>

#include "coordinator/model.h"

typedef struct router_params {
    int n_expert, n_used;
    expert_gating gating;
    int renorm;       /* weights divided by their sum */
    float scale;      /* weights multiplied by it (1: unchanged) */
    int n_group;      /* expert groups (<= 1: none) */
    int n_group_used; /* groups kept eligible when n_group > 1 */
} router_params;

/* The parameters of a model's MoE layers. */
router_params router_params_of(const model_hparams *hp);

/* p: n_expert router logits, replaced by the scores; bias: NULL or
 * n_expert selection biases; scratch: room for n_expert + n_group floats;
 * sel, w: n_used chosen experts and their weights. */
void router_select(const router_params *rp, float *p, const float *bias, float *scratch, int32_t *sel, float *w);

#endif
