/*
 * forward_mla.c - deepseek2's multi-head latent attention, the part before
 * the KV cache (llama.cpp's build_deepseek2 at c392e50, as loops):
 *
 *   q      = attn_q x, or attn_q_b (rmsnorm(attn_q_a x) * attn_q_a_norm)
 *            per head [q_nope (head_dim - n_rot) | q_pe (n_rot)]
 *   c      = attn_kv_a_mqa x = [c_kv (kv_lora_rank) | k_pe (n_rot)]
 *   kv     = attn_kv_b (rmsnorm(c_kv) * attn_kv_a_norm)
 *            per head [k_nope (head_dim - n_rot) | v (head_dim_v)]
 *   q_pe, k_pe = rope(q_pe), rope(k_pe)       NORM layout, YaRN from metadata
 *   k      = per head [k_nope | k_pe],  v per head
 *
 * The cache then holds every head's decompressed key and value, as
 * llama.cpp's version does (docs/models.md says why and what it costs);
 * attention itself is forward.c's, with hp->attn_scale = mscale^2/sqrt(head_dim).
 */
#include <string.h>

#include "coordinator/forward_impl.h"

int forward_mla_qkv(forward_state *s, const layer_weights *l, int n) {
    const model_hparams *hp = &s->m->hp;
    const int H = hp->n_head, R = hp->n_lora_q, C = hp->n_lora_kv, P = hp->n_rot;
    const int HK = hp->head_dim, NOPE = HK - P, DV = hp->head_dim_v;
    const size_t Q = (size_t)model_q_dim(hp), KVB = (size_t)H * (size_t)(NOPE + DV);
    float *qa = s->mla;                          /* (n, R) */
    float *c = qa + (size_t)n * (size_t)R;       /* (n, C + P) [c_kv | k_pe] */
    float *cn = c + (size_t)n * (size_t)(C + P); /* (n, C) normalised c_kv */
    float *kvb = cn + (size_t)n * (size_t)C;     /* (n, KVB) */
    int rc;
    // the q projection (or its first half) and the latent share one prepared x
    const coli_matmul_op first[2] = {l->wq_a ? fwd_op_of(l->wq_a, s->xb, n, qa) : fwd_op_of(l->wq, s->xb, n, s->q),
                                     fwd_op_of(l->wkv_a, s->xb, n, c)};
    if ((rc = coli_matmul_many(s->pool, &s->scratch, first, 2)) < 0) return rc;
    if (l->wq_a) {
        fwd_rmsnorm_rows(qa, qa, l->q_a_norm, n, R, hp->rms_eps);
        if ((rc = fwd_matmul(s, l->wq_b, qa, n, s->q)) < 0) return rc;
    }
    // c_kv normalised, then decompressed into every head's k_nope and v
    for (int t = 0; t < n; t++)
        fwd_rmsnorm_rows(cn + (size_t)t * (size_t)C, c + (size_t)t * (size_t)(C + P), l->kv_a_norm, 1, C,
                         hp->rms_eps);
    if ((rc = fwd_matmul(s, l->wkv_b, cn, n, kvb)) < 0) return rc;
    for (int t = 0; t < n; t++) {
        const float *cs = s->rope + (size_t)t * (size_t)P;
        float *k_pe = c + (size_t)t * (size_t)(C + P) + C;
        rope_apply(s->q + (size_t)t * Q + NOPE, cs, H, HK, P, hp->rope.neox);
        rope_apply(k_pe, cs, 1, P, P, hp->rope.neox);
        for (int h = 0; h < H; h++) {
            const float *src = kvb + (size_t)t * KVB + (size_t)h * (size_t)(NOPE + DV);
            float *k = s->k + (size_t)t * Q + (size_t)h * (size_t)HK;
            memcpy(k, src, (size_t)NOPE * sizeof(float));
            memcpy(k + NOPE, k_pe, (size_t)P * sizeof(float));
            memcpy(s->v + ((size_t)t * (size_t)H + (size_t)h) * (size_t)DV, src + NOPE, (size_t)DV * sizeof(float));
        }
    }
    return 0;
}
