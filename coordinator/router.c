/* router.c - one token's expert choice; see router.h. */
#include "coordinator/router.h"

#include <math.h>

#include "coordinator/forward_impl.h"

router_params router_params_of(const model_hparams *hp) {
    return (router_params){hp->n_expert,           hp->n_expert_used,        hp->gating,
                           hp->renorm_topk,        hp->expert_weights_scale, hp->n_expert_group,
                           hp->n_expert_group_used};
}

/* The k largest of v[0..n) (not -inf-masked ones first) into sel, best first;
 * on equal values the lower index wins (strict > while scanning up). */
static void s_top_k(const float *v, int n, int k, int32_t *sel) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            int taken = 0;
            for (int j = 0; j < s; j++) taken |= sel[j] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        sel[s] = best;
    }
}

/* Keep the n_group_used groups whose two best choice values sum highest;
 * the others' experts get -inf (never chosen while k fits the kept ones). */
static void s_limit_groups(const router_params *rp, float *choice, float *group_score) {
    const int per = rp->n_expert / rp->n_group;
    int32_t best2[2], kept[64];
    for (int g = 0; g < rp->n_group; g++) {
        s_top_k(choice + g * per, per, 2, best2);
        group_score[g] = choice[g * per + best2[0]] + choice[g * per + best2[1]];
    }
    int n_kept = rp->n_group_used < 64 ? rp->n_group_used : 64;
    s_top_k(group_score, rp->n_group, n_kept, kept);
    for (int g = 0; g < rp->n_group; g++) {
        int keep = 0;
        for (int j = 0; j < n_kept; j++) keep |= kept[j] == g;
        if (!keep)
            for (int e = g * per; e < (g + 1) * per; e++) choice[e] = -INFINITY;
    }
}

void router_select(const router_params *rp, float *p, const float *bias, float *scratch, int32_t *sel, float *w) {
    const int X = rp->n_expert, K = rp->n_used;
    if (rp->gating == GATING_SIGMOID)
        for (int e = 0; e < X; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
    else if (rp->gating == GATING_SOFTMAX)
        fwd_softmax(p, X);                       /* GATING_SOFTMAX_WEIGHT chooses by the logits themselves */
    else if (rp->gating == GATING_SQRT_SOFTPLUS) /* ggml's softplus: x itself past 20 */
        for (int e = 0; e < X; e++) p[e] = sqrtf(p[e] > 20.0f ? p[e] : logf(1.0f + expf(p[e])));
    const float *choice = p;
    if (bias || rp->n_group > 1) {
        for (int e = 0; e < X; e++) scratch[e] = bias ? p[e] + bias[e] : p[e];
        if (rp->n_group > 1) s_limit_groups(rp, scratch, scratch + X);
        choice = scratch;
    }
    s_top_k(choice, X, K, sel);
    float sum = 0.0f;
    for (int j = 0; j < K; j++) {
        w[j] = p[sel[j]];
        sum += w[j];
    }
    if (rp->gating == GATING_SOFTMAX_WEIGHT) { /* gpt-oss: the weights are a softmax over the k */
        fwd_softmax(w, K);
        sum = 0.0f;
        for (int j = 0; j < K; j++) sum += w[j];
    }
    if (rp->renorm)
        for (int j = 0; j < K; j++) w[j] /= sum;
    if (rp->scale != 1.0f)
        for (int j = 0; j < K; j++) w[j] *= rp->scale;
}
