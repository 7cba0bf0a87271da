/*
 * forward_mla.c - deepseek2's multi-head latent attention around the
 * attention proper (llama.cpp's build_deepseek2, as loops):
 *
 *   q      = attn_q x, or attn_q_b (rmsnorm(attn_q_a x) * attn_q_a_norm)
 *            per head [q_nope (nope) | q_pe (n_rot)]
 *   c      = attn_kv_a_mqa x = [c_kv (kv_lora_rank) | k_pe (n_rot)]
 *   c_kv   = rmsnorm(c_kv) * attn_kv_a_norm;   q_pe, k_pe = rope(...) (NORM, YaRN)
 *
 * Older files (attn_kv_b, llama.cpp c392e50): every head's key and value
 * are decompressed and cached, attention is plain multi-head:
 *   [k_nope | v] per head = attn_kv_b c_kv,  k = [k_nope | k_pe],  q = [q_nope | q_pe]
 *
 * Newer files (attn_k_b, attn_v_b, mla_absorbed): the cache holds the
 * latent [c_kv | k_pe] once per position and attention is MQA on it:
 *   q = [attn_k_b[h] q_nope | q_pe] per head  (the key decompression absorbed)
 *   o_h = softmax(q_h . [c_kv | k_pe]) c_kv,  out_h = attn_v_b[h] o_h
 * which is the same function (q . k_h = q_nope . Wk_h c_kv + q_pe . k_pe).
 *
 * kimi-k3 (hp->mla_nope): no rope, q_pe and k_pe join q . k unrotated; the
 * output is gated before attn_output: out *= sigmoid(attn_gate x).
 */
#include <math.h>
#include <string.h>

#include "coordinator/forward_impl.h"

/* Per-token floats of the intermediates below, one layout per variant. */
size_t forward_mla_floats(const model_hparams *hp) {
    const size_t H = (size_t)hp->n_head, C = (size_t)hp->n_lora_kv, P = (size_t)hp->n_rot;
    const size_t NOPE = (size_t)(hp->head_dim_mla - hp->n_rot), VM = (size_t)hp->head_dim_v_mla;
    if (!model_is_mla(hp)) return 0;
    /* q_a, [c_kv | k_pe], normalised c_kv */
    size_t n = (size_t)hp->n_lora_q + (C + P) + C;
    if (!hp->mla_absorbed) return n + H * (NOPE + VM); /* + decompressed heads */
    /* + projected q, per-head q_nope and latent rows, per-head values twice
     * (head-major, then token-major for attn_output) */
    /* (+ kimi-k3's output gate logits) */
    return n + H * (size_t)hp->head_dim_mla + H * NOPE + H * C + (hp->mla_nope ? 3 : 2) * H * VM;
}

typedef struct mla_bufs {
    float *qa, *c, *cn; /* (n, R), (n, C + P), (n, C) */
    float *kvb;         /* older: (n, H * (NOPE + VM)) */
    float *qp;          /* absorbed: (n, H * head_dim_mla) projected q */
    float *xg, *yg;     /* absorbed: (H, n, NOPE) and (H, n, C) per-head rows */
    float *vg;          /* absorbed: (H, n, VM) per-head values */
    float *out;         /* absorbed: (n, H * VM) the same token-major, attn_output's input */
    float *gate;        /* kimi-k3: (n, H * VM) output gate logits */
} mla_bufs;

static mla_bufs s_bufs(forward_state *s, int n) {
    const model_hparams *hp = &s->m->hp;
    const size_t N = (size_t)n, H = (size_t)hp->n_head, C = (size_t)hp->n_lora_kv, P = (size_t)hp->n_rot;
    const size_t NOPE = (size_t)(hp->head_dim_mla - hp->n_rot), VM = (size_t)hp->head_dim_v_mla;
    mla_bufs b;
    b.qa = s->mla;
    b.c = b.qa + N * (size_t)hp->n_lora_q;
    b.cn = b.c + N * (C + P);
    b.kvb = b.qp = b.cn + N * C;
    b.xg = b.qp + N * H * (size_t)hp->head_dim_mla;
    b.yg = b.xg + N * H * NOPE;
    b.vg = b.yg + N * H * C;
    b.out = b.vg + N * H * VM;
    b.gate = b.out + N * H * VM;
    return b;
}

/* y[h] (n, W ne[1]) = x[h] (n, W ne[0]) times head h's slice of the 3-D
 * per-head matrix W, for every head, COLI_MATMUL_MANY_MAX heads per job. */
static int s_per_head(forward_state *s, const coli_tensor *W, const float *x, int n, float *y) {
    const int64_t in = W->ne[0], out = W->ne[1], H = W->ne[2];
    const size_t slice = coli_row_bytes(W->type, in) * (size_t)out;
    coli_matmul_op ops[COLI_MATMUL_MANY_MAX];
    for (int64_t h0 = 0; h0 < H; h0 += COLI_MATMUL_MANY_MAX) {
        int k = 0;
        for (int64_t h = h0; h < H && k < COLI_MATMUL_MANY_MAX; h++, k++)
            ops[k] = (coli_matmul_op){
                (const char *)W->data + (size_t)h * slice, W->type, in, out, x + (size_t)h * (size_t)n * (size_t)in, n,
                y + (size_t)h * (size_t)n * (size_t)out};
        int rc = coli_matmul_many(s->pool, &s->scratch, ops, k);
        if (rc < 0) return rc;
    }
    return 0;
}

/* q (into dst, n rows of H * head_dim_mla) and the latent c; c_kv normalised
 * into cn, k_pe and q_pe rotated in place. */
static int s_project(forward_state *s, const layer_weights *l, int n, const mla_bufs *b, float *q) {
    const model_hparams *hp = &s->m->hp;
    const int H = hp->n_head, R = hp->n_lora_q, C = hp->n_lora_kv, P = hp->n_rot, HK = hp->head_dim_mla;
    int rc;
    // the q projection (or its first half) and the latent share one prepared x
    const coli_matmul_op first[2] = {l->wq_a ? fwd_op_of(l->wq_a, s->xb, n, b->qa) : fwd_op_of(l->wq, s->xb, n, q),
                                     fwd_op_of(l->wkv_a, s->xb, n, b->c)};
    if ((rc = coli_matmul_many(s->pool, &s->scratch, first, 2)) < 0) return rc;
    if (l->wq_a) {
        fwd_rmsnorm_rows(b->qa, b->qa, l->q_a_norm, n, R, hp->rms_eps);
        if ((rc = fwd_matmul(s, l->wq_b, b->qa, n, q)) < 0) return rc;
    }
    for (int t = 0; t < n; t++) {
        const float *cs = s->rope + (size_t)t * (size_t)P;
        float *ct = b->c + (size_t)t * (size_t)(C + P);
        fwd_rmsnorm_rows(b->cn + (size_t)t * (size_t)C, ct, l->kv_a_norm, 1, C, hp->rms_eps);
        if (hp->mla_nope) continue;
        rope_apply(ct + C, cs, 1, P, P, hp->rope.neox);
        rope_apply(q + (size_t)t * (size_t)H * (size_t)HK + (HK - P), cs, H, HK, P, hp->rope.neox);
    }
    return 0;
}

/* Older files: every head's k = [k_nope | k_pe] and v decompressed. */
static int s_decompressed_qkv(forward_state *s, const layer_weights *l, int n, const mla_bufs *b) {
    const model_hparams *hp = &s->m->hp;
    const int H = hp->n_head, C = hp->n_lora_kv, P = hp->n_rot, HK = hp->head_dim, DV = hp->head_dim_v;
    const int NOPE = HK - P;
    const size_t Q = (size_t)H * (size_t)HK, KVB = (size_t)H * (size_t)(NOPE + DV);
    int rc;
    if ((rc = s_project(s, l, n, b, s->q)) < 0) return rc;
    if ((rc = fwd_matmul(s, l->wkv_b, b->cn, n, b->kvb)) < 0) return rc;
    for (int t = 0; t < n; t++) {
        const float *k_pe = b->c + (size_t)t * (size_t)(C + P) + C;
        for (int h = 0; h < H; h++) {
            const float *src = b->kvb + (size_t)t * KVB + (size_t)h * (size_t)(NOPE + DV);
            float *k = s->k + (size_t)t * Q + (size_t)h * (size_t)HK;
            memcpy(k, src, (size_t)NOPE * sizeof(float));
            memcpy(k + NOPE, k_pe, (size_t)P * sizeof(float));
            memcpy(s->v + ((size_t)t * (size_t)H + (size_t)h) * (size_t)DV, src + NOPE, (size_t)DV * sizeof(float));
        }
    }
    return 0;
}

/* Newer files: q absorbed into the latent per head, k = [c_kv | k_pe]. */
static int s_absorbed_qkv(forward_state *s, const layer_weights *l, int n, const mla_bufs *b) {
    const model_hparams *hp = &s->m->hp;
    const int H = hp->n_head, C = hp->n_lora_kv, P = hp->n_rot, HK = hp->head_dim_mla, NOPE = HK - P;
    const size_t N = (size_t)n, QA = (size_t)H * (size_t)hp->head_dim; /* absorbed q row: H * (C + P) */
    int rc;
    if ((rc = s_project(s, l, n, b, b->qp)) < 0) return rc;
    for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++)
            memcpy(b->xg + ((size_t)h * N + (size_t)t) * (size_t)NOPE,
                   b->qp + ((size_t)t * (size_t)H + (size_t)h) * (size_t)HK, (size_t)NOPE * sizeof(float));
    if ((rc = s_per_head(s, l->wk_b, b->xg, n, b->yg)) < 0) return rc;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < H; h++) {
            float *q = s->q + (size_t)t * QA + (size_t)h * (size_t)(C + P);
            memcpy(q, b->yg + ((size_t)h * N + (size_t)t) * (size_t)C, (size_t)C * sizeof(float));
            memcpy(q + C, b->qp + ((size_t)t * (size_t)H + (size_t)h) * (size_t)HK + NOPE, (size_t)P * sizeof(float));
        }
        float *k = s->k + (size_t)t * (size_t)model_k_dim(hp); /* + the indexer's key (forward_dsa.c) */
        memcpy(k, b->cn + (size_t)t * (size_t)C, (size_t)C * sizeof(float));
        memcpy(k + C, b->c + (size_t)t * (size_t)(C + P) + C, (size_t)P * sizeof(float));
    }
    return 0;
}

int forward_mla_qkv(forward_state *s, const layer_weights *l, int n) {
    const mla_bufs b = s_bufs(s, n);
    return s->m->hp.mla_absorbed ? s_absorbed_qkv(s, l, n, &b) : s_decompressed_qkv(s, l, n, &b);
}

const float *forward_mla_values(forward_state *s, const layer_weights *l, int n, int *rc) {
    const model_hparams *hp = &s->m->hp;
    *rc = 0;
    if (!hp->mla_absorbed) return s->attn;
    const mla_bufs b = s_bufs(s, n);
    const int H = hp->n_head, C = hp->n_lora_kv, VM = hp->head_dim_v_mla;
    const size_t N = (size_t)n;
    // per head: its latent outputs of every token as rows, times attn_v_b[h]
    for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++)
            memcpy(b.yg + ((size_t)h * N + (size_t)t) * (size_t)C,
                   s->attn + ((size_t)t * (size_t)H + (size_t)h) * (size_t)C, (size_t)C * sizeof(float));
    if ((*rc = s_per_head(s, l->wv_b, b.yg, n, b.vg)) < 0) return NULL;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++)
            memcpy(b.out + ((size_t)t * (size_t)H + (size_t)h) * (size_t)VM,
                   b.vg + ((size_t)h * N + (size_t)t) * (size_t)VM, (size_t)VM * sizeof(float));
    if (!l->mla_gate) return b.out;
    // kimi-k3: out *= sigmoid(attn_gate x), x the layer's normalised input
    if ((*rc = fwd_matmul(s, l->mla_gate, s->xb, n, b.gate)) < 0) return NULL;
    for (size_t i = 0; i < N * (size_t)H * (size_t)VM; i++) b.out[i] *= 1.0f / (1.0f + expf(-b.gate[i]));
    return b.out;
}
