/*
 * forward_hybrid.c - the Gated DeltaNet layers of qwen3next / qwen35moe and
 * the output gate of their attention layers (llama.cpp's qwen3next.cpp,
 * qwen35moe.cpp and delta-net-base.cpp, written out as loops).
 *
 * For the n rows of a batch, one linear-attention layer:
 *
 *   x = rmsnorm(h) * attn_norm
 *   mix = Wqkv x, z = Wz x, beta_raw, alpha_raw = Wba x (or Wbeta x, Walpha x)
 *   c = silu(causal conv1d over [tail | mix], kernel conv_kernel)   per channel
 *   q, k, v = c split; q, k L2-normalised per key head; q /= sqrt(head_dim)
 *   beta = sigmoid(beta_raw), g = softplus(alpha_raw + dt_bias) * ssm_a  (g <= 0)
 *   per value head h (key head h / (v/k), qwen35moe: h % k):
 *     S = exp(g) S + beta (v - exp(g) S k) k^T,  o = S q        (S: head_dim x head_dim)
 *   o = rmsnorm(o) * ssm_norm * silu(z)   per head
 *   h += ssm_out o
 *
 * The recurrence runs on the chunks [j C, (j + 1) C) of positions (C =
 * FORWARD_REC_CHUNK): a chunk of one token takes the step above, a longer
 * one the chunked (WY) form, which gives the same values up to rounding:
 * within a chunk, with G_i the cumulative sum of g and T = (I - A)^-1 for
 * the strictly lower A[i][j] = -beta_i (k_i . k_j) exp(G_i - G_j),
 *   u = T (beta v),  w = T (beta exp(G) k)
 *   v_new = u - w S^T
 *   o_i = exp(G_i) S q_i + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) v_new_j
 *   S = exp(G_last) S + sum_i exp(G_last - G_i) v_new_i k_i^T
 * Sequences are independent: each row of a continuous-batching step is a
 * one-token chunk of its own state.
 *
 * Kimi Delta Attention (kimi-k3, hp->kda; llama.cpp's kimi-k3.cpp) is the
 * same recurrence with a decay per key channel, g (D) per head and token:
 *   mix = [Wq x | Wk x | Wv x], one causal conv per part (the same tail)
 *   beta = sigmoid(Wbeta x) per head; f = ssm_f_b (ssm_f_a x) + dt_bias
 *   g = lb sigmoid(-(f ssm_a[h]))  (kda.gate_lower_bound lb; without it
 *       softplus(f) ssm_a[h])
 *   S[v][k] *= exp(g[k]) in place of exp(g); the chunked form's exp(G_i -
 *   G_j) factors become per channel (s_kda_chunk)
 *   o = rmsnorm(o) * ssm_norm * sigmoid(ssm_g x) per head; h += attn_output o
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/attn_simd.h"
#include "coordinator/forward_impl.h"
#include "core/error.h"

/* Widths of the layer, from the hyper-parameters. */
typedef struct gdn_dims {
    int D;                  /* head width (keys and values) */
    int HK, HV;             /* key / value heads */
    int K;                  /* conv kernel */
    int64_t key, value, cd; /* key_dim, value_dim, conv_dim = 2 key + value */
    int64_t tail;           /* floats of the conv tail: (K - 1) cd */
    int gw;                 /* gate values per head and token: 1, or D (KDA) */
} gdn_dims;

static gdn_dims s_dims(const model_hparams *hp) {
    gdn_dims d = {.D = hp->ssm_head_dim, .HK = hp->ssm_k_heads, .HV = hp->ssm_v_heads, .K = hp->ssm_conv};
    d.key = (int64_t)d.HK * d.D;
    d.value = (int64_t)d.HV * d.D;
    d.cd = 2 * d.key + d.value;
    d.tail = (int64_t)(d.K - 1) * d.cd;
    d.gw = hp->kda ? d.D : 1;
    return d;
}

/* Scratch floats of one worker for one chunk of one head (G: C gw). */
static size_t s_chunk_floats(int D, int gw) {
    const size_t C = FORWARD_REC_CHUNK;
    return 2 * C * C + 4 * C * (size_t)D + C * (size_t)gw + 3 * (size_t)D;
}

size_t forward_gdn_floats(const model_hparams *hp, int max_batch, int n_workers) {
    if (!hp->rec_floats) return 0;
    const gdn_dims d = s_dims(hp);
    const size_t B = (size_t)max_batch;
    return B * (2 * (size_t)d.cd + 2 * (size_t)d.value + 3 * (size_t)d.HV + (size_t)d.HV * (size_t)d.gw) +
           (hp->kda ? 2 * B * (size_t)d.D : 0) + (size_t)n_workers * s_chunk_floats(d.D, d.gw);
}

/* The per-batch buffers inside s->gdn. */
typedef struct gdn_bufs {
    float *mix, *conv, *z, *o; /* (B, cd), (B, cd), (B, value), (B, value) */
    float *braw, *beta, *g;    /* (B, 2 HV): raw beta | alpha; (B, HV); (B, HV gw) */
    float *fa, *ga;            /* KDA: (B, D) ssm_f_a x, kimi-linear's ssm_g_a x */
    float *scratch;            /* n_workers chunk scratches */
} gdn_bufs;

static gdn_bufs s_bufs(const forward_state *s, const gdn_dims *d) {
    const size_t B = (size_t)s->max_batch;
    gdn_bufs b;
    b.mix = s->gdn;
    b.conv = b.mix + B * (size_t)d->cd;
    b.z = b.conv + B * (size_t)d->cd;
    b.o = b.z + B * (size_t)d->value;
    b.braw = b.o + B * (size_t)d->value;
    b.beta = b.braw + B * 2 * (size_t)d->HV;
    b.g = b.beta + B * (size_t)d->HV;
    b.fa = b.g + B * (size_t)d->HV * (size_t)d->gw;
    b.ga = b.fa + (d->gw > 1 ? B * (size_t)d->D : 0);
    b.scratch = b.ga + (d->gw > 1 ? B * (size_t)d->D : 0);
    return b;
}

static float s_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float s_silu(float x) { return x / (1.0f + expf(-x)); }
static float s_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// ---------------------------------------------------------------------------
// per row: projections, gates, conv, norms

/* KDA: q, k, v into mix rows [q | k | v] (through conv, free until the
 * conv), z = ssm_g x, raw beta, the raw decay f = ssm_f_b (ssm_f_a x) in g. */
static int s_project_kda(forward_state *s, const layer_weights *l, const gdn_dims *d, const gdn_bufs *b, int n) {
    const size_t DI = (size_t)d->value, N = (size_t)n;
    float *q = b->conv, *k = q + N * DI, *v = k + N * DI;
    /* the gate: K3's ssm_g x, kimi-linear's ssm_g_b (ssm_g_a x) */
    const coli_matmul_op gate = l->wg_a ? fwd_op_of(l->wg_a, s->xb, n, b->ga) : fwd_op_of(l->wz, s->xb, n, b->z);
    const coli_matmul_op ops[6] = {fwd_op_of(l->wq, s->xb, n, q),          fwd_op_of(l->wk, s->xb, n, k),
                                   fwd_op_of(l->wv, s->xb, n, v),          gate,
                                   fwd_op_of(l->wbeta, s->xb, n, b->beta), fwd_op_of(l->wf_a, s->xb, n, b->fa)};
    int rc = coli_matmul_many(s->pool, &s->scratch, ops, 6);
    if (rc < 0 || (rc = fwd_matmul(s, l->wf_b, b->fa, n, b->g)) < 0) return rc;
    if (l->wg_a && (rc = fwd_matmul(s, l->wz, b->ga, n, b->z)) < 0) return rc;
    for (size_t t = 0; t < N; t++) {
        float *r = b->mix + t * (size_t)d->cd;
        memcpy(r, q + t * DI, DI * sizeof(float));
        memcpy(r + DI, k + t * DI, DI * sizeof(float));
        memcpy(r + 2 * DI, v + t * DI, DI * sizeof(float));
    }
    return 0;
}

/* mix, z and the raw gates of the n rows (one pool job over the matrices). */
static int s_project(forward_state *s, const layer_weights *l, const gdn_dims *d, const gdn_bufs *b, int n) {
    const int HV = d->HV;
    int rc;
    if (l->wf_a) return s_project_kda(s, l, d, b, n);
    if (l->wba) {
        const coli_matmul_op ops[3] = {fwd_op_of(l->wqkv_mix, s->xb, n, b->mix), fwd_op_of(l->wz, s->xb, n, b->z),
                                       fwd_op_of(l->wba, s->xb, n, b->braw)};
        if ((rc = coli_matmul_many(s->pool, &s->scratch, ops, 3)) < 0) return rc;
        /* qwen3next: per key head its value heads' beta logits, then their alpha logits */
        const int per = HV / d->HK;
        float *tmp = b->beta; /* free until the gates are computed below */
        for (int t = 0; t < n; t++) {
            float *r = b->braw + (size_t)t * 2 * (size_t)HV;
            for (int kh = 0; kh < d->HK; kh++)
                for (int j = 0; j < per; j++) {
                    tmp[kh * per + j] = r[kh * 2 * per + j];
                    tmp[HV + kh * per + j] = r[kh * 2 * per + per + j];
                }
            memcpy(r, tmp, 2 * (size_t)HV * sizeof(float));
        }
        return 0;
    }
    /* qwen35moe: beta and alpha logits from two matrices, into the two halves of each row */
    const coli_matmul_op ops[4] = {fwd_op_of(l->wqkv_mix, s->xb, n, b->mix), fwd_op_of(l->wz, s->xb, n, b->z),
                                   fwd_op_of(l->wbeta, s->xb, n, b->beta), fwd_op_of(l->walpha, s->xb, n, b->g)};
    if ((rc = coli_matmul_many(s->pool, &s->scratch, ops, 4)) < 0) return rc;
    for (int t = 0; t < n; t++) {
        float *r = b->braw + (size_t)t * 2 * (size_t)HV;
        memcpy(r, b->beta + (size_t)t * (size_t)HV, (size_t)HV * sizeof(float));
        memcpy(r + HV, b->g + (size_t)t * (size_t)HV, (size_t)HV * sizeof(float));
    }
    return 0;
}

/* KDA: beta = sigmoid(beta), g per channel from f + dt_bias (ggml's ops:
 * times ssm_a, negated, sigmoid, times lb; or softplus, times ssm_a). */
static void s_gates_kda(const model_hparams *hp, const layer_weights *l, const gdn_dims *d, const gdn_bufs *b, int n) {
    const float *dt = (const float *)l->dt_bias->data, *a = (const float *)l->ssm_a->data, lb = hp->kda_gate_lb;
    for (size_t i = 0; i < (size_t)n * (size_t)d->HV; i++) b->beta[i] = s_sigmoid(b->beta[i]);
    for (int t = 0; t < n; t++)
        for (int64_t c = 0; c < d->value; c++) {
            float *g = b->g + (size_t)t * (size_t)d->value + (size_t)c;
            const float f = *g + dt[c], ah = a[c / d->D];
            *g = isinf(lb) ? s_softplus(f) * ah : s_sigmoid(-(f * ah)) * lb;
        }
}

/* beta = sigmoid(beta_raw), g = softplus(alpha_raw + dt_bias) * ssm_a. */
static void s_gates(const model_hparams *hp, const layer_weights *l, const gdn_dims *d, const gdn_bufs *b, int n) {
    if (hp->kda) {
        s_gates_kda(hp, l, d, b, n);
        return;
    }
    const float *dt = (const float *)l->dt_bias->data, *a = (const float *)l->ssm_a->data;
    for (int t = 0; t < n; t++) {
        const float *r = b->braw + (size_t)t * 2 * (size_t)d->HV;
        for (int h = 0; h < d->HV; h++) {
            b->beta[(size_t)t * (size_t)d->HV + h] = s_sigmoid(r[h]);
            b->g[(size_t)t * (size_t)d->HV + h] = s_softplus(r[d->HV + h] + dt[h]) * a[h];
        }
    }
}

/* Channel c's K taps: ssm_conv1d (cd, K), or KDA's q, k, v convolutions
 * (d_inner, K) each. */
static const float *s_taps(const layer_weights *l, const gdn_dims *d, int64_t c) {
    if (!l->conv_q) return (const float *)l->conv1d->data + (size_t)c * (size_t)d->K;
    const coli_tensor *w = c < d->value ? l->conv_q : c < 2 * d->value ? l->conv_k : l->conv_v;
    return (const float *)w->data + (size_t)(c % d->value) * (size_t)d->K;
}

/* out rows = silu(conv over [tail | mix rows]) for the L rows of one
 * sequence; the tail becomes the last K - 1 inputs. */
static void s_conv_seq(const layer_weights *l, const gdn_dims *d, float *tail, const float *mix, float *out, int L) {
    const int K = d->K;
    const int64_t cd = d->cd;
    for (int t = 0; t < L; t++)
        for (int64_t c = 0; c < cd; c++) {
            const float *w = s_taps(l, d, c);
            float sum = 0.0f;
            for (int i = 0; i < K; i++) {
                const int src = t - (K - 1) + i; /* < 0: the tail */
                const float x = src < 0 ? tail[(size_t)(K - 1 + src) * (size_t)cd + (size_t)c]
                                        : mix[(size_t)src * (size_t)cd + (size_t)c];
                sum += x * w[i];
            }
            out[(size_t)t * (size_t)cd + (size_t)c] = s_silu(sum);
        }
    /* the last K - 1 inputs of [tail | mix] */
    for (int j = 0; j < K - 1; j++) {
        const int src = L - (K - 1) + j;
        float *dst = tail + (size_t)j * (size_t)cd;
        if (src < 0)
            memmove(dst, tail + (size_t)(K - 1 + src) * (size_t)cd, (size_t)cd * sizeof(float));
        else
            memcpy(dst, mix + (size_t)src * (size_t)cd, (size_t)cd * sizeof(float));
    }
}

/* x / sqrt(sum x^2 + eps) as ggml builds it (rms_norm with eps / n, then
 * 1 / sqrt(n)), times extra. */
static void s_l2norm(float *x, int n, float eps, float extra) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps / (float)n), post = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] = x[i] * scale * post * extra;
}

/* q, k of every row L2-normalised per key head, q also by 1/sqrt(D). */
static void s_qk_norms(const model_hparams *hp, const gdn_dims *d, const gdn_bufs *b, int n) {
    const float qscale = 1.0f / sqrtf((float)d->D);
    for (int t = 0; t < n; t++) {
        float *r = b->conv + (size_t)t * (size_t)d->cd;
        for (int kh = 0; kh < d->HK; kh++) {
            s_l2norm(r + (size_t)kh * (size_t)d->D, d->D, hp->rms_eps, qscale);
            s_l2norm(r + d->key + (size_t)kh * (size_t)d->D, d->D, hp->rms_eps, 1.0f);
        }
    }
}

// ---------------------------------------------------------------------------
// the delta rule of one head over one chunk

/* One head's inputs for the rows of a chunk: row i at base + i * stride. */
typedef struct head_rows {
    const float *q, *k, *v; /* (L, *) rows, stride cd */
    const float *beta, *g;  /* strides HV and gs */
    float *o;               /* stride value */
    int64_t cd, hv, vd, gs; /* gs = HV gw */
    int gw;                 /* g values per row: 1 or D (KDA) */
} head_rows;

/* out[i] = rows[i] . x for n_rows rows of n, stride apart (attn_simd: the
 * same bits on every CPU). */
static void s_matvec(const float *rows, int64_t stride, int n_rows, const float *x, int n, float *out) {
    attn_dots_f32(rows, (long)stride, n_rows, x, n, out, 1);
}

/* The recurrent update for one token: S *= exp(g); d = (v - S k) beta;
 * S += d k^T; o = S q. S: (D, D), S[v][k]. */
static void s_delta_step(float *S, const head_rows *r, int D, float *dv) {
    const float eg = expf(r->g[0]), beta = r->beta[0];
    if (r->gw > 1) {
        /* KDA: column k of S (key channel k) decays by exp(g[k]) */
        for (int k = 0; k < D; k++) dv[k] = expf(r->g[k]);
        for (int v = 0; v < D; v++)
            for (int k = 0; k < D; k++) S[(size_t)v * D + k] *= dv[k];
    } else {
        for (int i = 0; i < D * D; i++) S[i] *= eg;
    }
    s_matvec(S, D, D, r->k, D, dv);
    for (int v = 0; v < D; v++) dv[v] = (r->v[v] - dv[v]) * beta;
    for (int v = 0; v < D; v++) attn_axpy_f32(S + (size_t)v * D, dv[v], r->k, D);
    s_matvec(S, D, D, r->q, D, r->o);
}

#define ROW(p, i, stride) ((p) + (size_t)(i) * (size_t)(stride))

/* Row i of T = (I - A)^-1 from row i of A in T[i][0..i) (rows < i done):
 * A[i][j] + sum_{j<m<i} A[i][m] T[m][j], unit diagonal. */
static void s_wy_row(float *T, int i) {
    const int C = FORWARD_REC_CHUNK;
    float *Ti = T + (size_t)i * C;
    for (int j = 0; j < i; j++) {
        float acc = Ti[j];
        for (int m = j + 1; m < i; m++) acc += Ti[m] * T[(size_t)m * C + j];
        Ti[j] = acc; /* T[i][m] for m > j still holds A[i][m]: j runs upwards */
    }
    Ti[i] = 1.0f;
}

/* T = (I - A)^-1 for A[i][j] = -beta_i (k_i . k_j) exp(G_i - G_j), j < i,
 * by forward substitution row by row (T: (L, C), lower, unit diagonal). */
static void s_wy_inverse(const head_rows *r, int L, int D, const float *G, float *T) {
    const int C = FORWARD_REC_CHUNK;
    for (int i = 0; i < L; i++) {
        float *Ti = T + (size_t)i * C;
        s_matvec(r->k, r->cd, i, ROW(r->k, i, r->cd), D, Ti);
        for (int j = 0; j < i; j++) Ti[j] = -r->beta[(size_t)i * r->hv] * Ti[j] * expf(G[i] - G[j]);
        s_wy_row(T, i);
    }
}

/* The chunked form over L > 1 tokens; S updated. sc: s_chunk_floats. */
static void s_delta_chunk(float *S, const head_rows *r, int L, int D, float *sc) {
    const int C = FORWARD_REC_CHUNK;
    float *T = sc, *QK = T + (size_t)C * C, *U = QK + (size_t)C * C, *W = U + (size_t)C * D;
    float *VN = W + (size_t)C * D, *KG = VN + (size_t)C * D, *G = KG + (size_t)C * D, *tmp = G + C;
    G[0] = r->g[0];
    for (int i = 1; i < L; i++) G[i] = G[i - 1] + r->g[(size_t)i * r->gs];
    s_wy_inverse(r, L, D, G, T);
    /* u = T (beta v), w = T (beta exp(G) k) */
    for (int i = 0; i < L; i++) {
        float *u = U + (size_t)i * D, *w = W + (size_t)i * D;
        memset(u, 0, (size_t)D * sizeof(float));
        memset(w, 0, (size_t)D * sizeof(float));
        for (int j = 0; j <= i; j++) {
            const float bj = r->beta[(size_t)j * r->hv], tu = T[(size_t)i * C + j] * bj;
            const float tw = tu * expf(G[j]);
            attn_axpy_f32(u, tu, ROW(r->v, j, r->cd), D);
            attn_axpy_f32(w, tw, ROW(r->k, j, r->cd), D);
        }
    }
    /* v_new = u - w S^T; o_i = exp(G_i) S q_i + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) v_new_j */
    for (int i = 0; i < L; i++) {
        const float *qi = ROW(r->q, i, r->cd);
        float *vn = VN + (size_t)i * D, *oi = ROW(r->o, i, r->vd);
        const float egi = expf(G[i]);
        s_matvec(S, D, D, W + (size_t)i * D, D, vn);
        for (int v = 0; v < D; v++) vn[v] = U[(size_t)i * D + v] - vn[v];
        s_matvec(S, D, D, qi, D, tmp);
        for (int v = 0; v < D; v++) oi[v] = egi * tmp[v];
        s_matvec(r->k, r->cd, i + 1, qi, D, QK + (size_t)i * C);
        for (int j = 0; j <= i; j++) QK[(size_t)i * C + j] *= expf(G[i] - G[j]);
    }
    for (int i = 0; i < L; i++) {
        float *oi = ROW(r->o, i, r->vd);
        for (int j = 0; j <= i; j++) attn_axpy_f32(oi, QK[(size_t)i * C + j], VN + (size_t)j * D, D);
    }
    /* S = exp(G_last) S + sum_i exp(G_last - G_i) v_new_i k_i^T */
    const float gl = G[L - 1], egl = expf(gl);
    for (int i = 0; i < L; i++) {
        const float e = expf(gl - G[i]), *ki = ROW(r->k, i, r->cd);
        for (int k = 0; k < D; k++) KG[(size_t)i * D + k] = e * ki[k];
    }
    for (int v = 0; v < D; v++) {
        float *Sv = S + (size_t)v * D;
        for (int k = 0; k < D; k++) Sv[k] *= egl;
        for (int i = 0; i < L; i++) attn_axpy_f32(Sv, VN[(size_t)i * D + v], KG + (size_t)i * D, D);
    }
}

/* KDA's decayed dot products of rows i and j <= i, sharing the D exps:
 * *kk = sum_k k_i k_j e^(G_i - G_j), *qk = the same with q_i. */
static void s_decay_dots(const float *ki, const float *qi, const float *kj, const float *Gi, const float *Gj, int D,
                         float *kk, float *qk) {
    float a = 0.0f, b = 0.0f;
    for (int k = 0; k < D; k++) {
        const float e = expf(Gi[k] - Gj[k]) * kj[k];
        a += ki[k] * e;
        b += qi[k] * e;
    }
    *kk = a;
    *qk = b;
}

/* s_delta_chunk with a decay per key channel (KDA): G_i, exp(G_i - G_j)
 * and exp(G_last - G_i) are vectors over the key channels. */
static void s_kda_chunk(float *S, const head_rows *r, int L, int D, float *sc) {
    const int C = FORWARD_REC_CHUNK;
    float *T = sc, *QK = T + (size_t)C * C, *U = QK + (size_t)C * C, *W = U + (size_t)C * D;
    float *VN = W + (size_t)C * D, *KG = VN + (size_t)C * D, *G = KG + (size_t)C * D, *tmp = G + (size_t)C * D;
    float *e = tmp + D;
    for (int i = 0; i < L; i++)
        for (int k = 0; k < D; k++)
            G[(size_t)i * D + k] = (i ? G[(size_t)(i - 1) * D + k] : 0.0f) + r->g[(size_t)i * r->gs + k];
    /* T = (I - A)^-1, A[i][j] = -beta_i sum_k k_i k_j exp(G_i - G_j); QK[i][j] the same
     * with q_i (j <= i); KG holds exp(G) until the state update */
    for (int i = 0; i < L; i++) {
        const float bi = r->beta[(size_t)i * r->hv], *Gi = G + (size_t)i * D;
        for (int j = 0; j <= i; j++) {
            float kk;
            s_decay_dots(ROW(r->k, i, r->cd), ROW(r->q, i, r->cd), ROW(r->k, j, r->cd), Gi, G + (size_t)j * D, D, &kk,
                         QK + (size_t)i * C + j);
            if (j < i) T[(size_t)i * C + j] = -bi * kk;
        }
        s_wy_row(T, i);
        for (int k = 0; k < D; k++) KG[(size_t)i * D + k] = expf(Gi[k]);
    }
    /* u = T (beta v), w = T (beta exp(G) k) */
    for (int i = 0; i < L; i++) {
        float *u = U + (size_t)i * D, *w = W + (size_t)i * D;
        memset(u, 0, (size_t)D * sizeof(float));
        memset(w, 0, (size_t)D * sizeof(float));
        for (int j = 0; j <= i; j++) {
            const float tu = T[(size_t)i * C + j] * r->beta[(size_t)j * r->hv], *kj = ROW(r->k, j, r->cd);
            attn_axpy_f32(u, tu, ROW(r->v, j, r->cd), D);
            for (int k = 0; k < D; k++) w[k] += tu * KG[(size_t)j * D + k] * kj[k];
        }
    }
    /* v_new = u - w S^T; o_i = S (exp(G_i) q_i) + sum_{j<=i} (q_i . k_j)_{G_i - G_j} v_new_j */
    for (int i = 0; i < L; i++) {
        const float *qi = ROW(r->q, i, r->cd);
        float *vn = VN + (size_t)i * D, *oi = ROW(r->o, i, r->vd);
        s_matvec(S, D, D, W + (size_t)i * D, D, vn);
        for (int v = 0; v < D; v++) vn[v] = U[(size_t)i * D + v] - vn[v];
        for (int k = 0; k < D; k++) e[k] = KG[(size_t)i * D + k] * qi[k];
        s_matvec(S, D, D, e, D, oi);
    }
    for (int i = 0; i < L; i++) {
        float *oi = ROW(r->o, i, r->vd);
        for (int j = 0; j <= i; j++) attn_axpy_f32(oi, QK[(size_t)i * C + j], VN + (size_t)j * D, D);
    }
    /* S = exp(G_last) S (per column) + sum_i v_new_i (exp(G_last - G_i) k_i)^T */
    const float *Gl = G + (size_t)(L - 1) * D;
    for (int i = 0; i < L; i++) {
        const float *ki = ROW(r->k, i, r->cd);
        for (int k = 0; k < D; k++) KG[(size_t)i * D + k] = expf(Gl[k] - G[(size_t)i * D + k]) * ki[k];
    }
    for (int k = 0; k < D; k++) e[k] = expf(Gl[k]);
    for (int v = 0; v < D; v++) {
        float *Sv = S + (size_t)v * D;
        for (int k = 0; k < D; k++) Sv[k] *= e[k];
        for (int i = 0; i < L; i++) attn_axpy_f32(Sv, VN[(size_t)i * D + v], KG + (size_t)i * D, D);
    }
}

// ---------------------------------------------------------------------------
// the layer

typedef struct gdn_job {
    forward_state *s;
    const fwd_rows *rows;
    const gdn_dims *d;
    const gdn_bufs *b;
    int layer, n, n_seq; /* n_seq: 1 (rows of one sequence) or n (one row each) */
} gdn_job;

/* One (sequence, value head): its rows in chunks [j C, (j + 1) C). */
static void s_head_task(const gdn_job *job, int seq, int h, float *sc) {
    const gdn_dims *d = job->d;
    const gdn_bufs *b = job->b;
    const int first = job->n_seq == 1 ? 0 : seq, count = job->n_seq == 1 ? job->n : 1;
    const kv_cache *kv = fwd_row_kv(job->rows, first);
    float *S = kv_cache_rec(kv, job->layer) + d->tail + (size_t)h * (size_t)d->D * (size_t)d->D;
    const model_hparams *hp = &job->s->m->hp;
    const int kh = hp->ssm_k_tiled ? h % d->HK : h / (d->HV / d->HK);
    for (int t = 0; t < count;) {
        const int pos = fwd_row_pos(job->rows, first + t);
        int L = FORWARD_REC_CHUNK - pos % FORWARD_REC_CHUNK;
        if (L > count - t) L = count - t;
        const size_t row = (size_t)(first + t);
        const head_rows r = {
            .q = b->conv + row * (size_t)d->cd + (size_t)kh * (size_t)d->D,
            .k = b->conv + row * (size_t)d->cd + (size_t)d->key + (size_t)kh * (size_t)d->D,
            .v = b->conv + row * (size_t)d->cd + (size_t)(2 * d->key) + (size_t)h * (size_t)d->D,
            .beta = b->beta + row * (size_t)d->HV + (size_t)h,
            .g = b->g + (row * (size_t)d->HV + (size_t)h) * (size_t)d->gw,
            .o = b->o + row * (size_t)d->value + (size_t)h * (size_t)d->D,
            .cd = d->cd,
            .hv = d->HV,
            .vd = d->value,
            .gs = (int64_t)d->HV * d->gw,
            .gw = d->gw,
        };
        if (L == 1)
            s_delta_step(S, &r, d->D, sc);
        else if (d->gw > 1)
            s_kda_chunk(S, &r, L, d->D, sc);
        else
            s_delta_chunk(S, &r, L, d->D, sc);
        t += L;
    }
}

static void s_delta_worker(void *arg, int ith, int nth) {
    const gdn_job *job = arg;
    float *sc = job->b->scratch + (size_t)ith * s_chunk_floats(job->d->D, job->d->gw);
    for (int task = ith; task < job->n_seq * job->d->HV; task += nth)
        s_head_task(job, task / job->d->HV, task % job->d->HV, sc);
}

/* o = rmsnorm(o) * ssm_norm * silu(z) (KDA: sigmoid(z)), per head of every row. */
static void s_gated_norm(const model_hparams *hp, const layer_weights *l, const gdn_dims *d, const gdn_bufs *b, int n) {
    fwd_rmsnorm_rows(b->o, b->o, l->ssm_norm, n * d->HV, d->D, hp->rms_eps);
    for (size_t i = 0; i < (size_t)n * (size_t)d->value; i++) b->o[i] *= hp->kda ? s_sigmoid(b->z[i]) : s_silu(b->z[i]);
}

int forward_gdn_block(forward_state *s, const fwd_rows *rows, int il, int n) {
    const model_hparams *hp = &s->m->hp;
    const layer_weights *l = &s->m->layers[il];
    const gdn_dims d = s_dims(hp);
    const gdn_bufs b = s_bufs(s, &d);
    int rc;
    // x = rmsnorm(h) * attn_norm; projections and gates
    fwd_rmsnorm_rows(s->xb, fwd_block_in(s), l->attn_norm, n, hp->n_embd, hp->rms_eps);
    if ((rc = s_project(s, l, &d, &b, n)) < 0) return rc;
    s_gates(hp, l, &d, &b, n);
    // causal conv per sequence (its tail in the state), silu, q/k norms
    const int n_seq = rows->kvs ? n : 1;
    for (int q = 0; q < n_seq; q++) {
        const int first = rows->kvs ? q : 0, count = rows->kvs ? 1 : n;
        float *tail = kv_cache_rec(fwd_row_kv(rows, first), il);
        s_conv_seq(l, &d, tail, b.mix + (size_t)first * (size_t)d.cd, b.conv + (size_t)first * (size_t)d.cd, count);
    }
    s_qk_norms(hp, &d, &b, n);
    // the delta rule, (sequence, head) pairs in parallel
    gdn_job job = {s, rows, &d, &b, il, n, n_seq};
    coli_pool_run(s->pool, s_delta_worker, &job);
    // h += ssm_out (rmsnorm(o) * ssm_norm * silu(z))
    s_gated_norm(hp, l, &d, &b, n);
    if ((rc = fwd_matmul(s, l->ssm_out, b.o, n, s->delta)) < 0) return rc;
    for (size_t i = 0; i < (size_t)n * (size_t)hp->n_embd; i++) s->h[i] += s->delta[i];
    return 0;
}

// ---------------------------------------------------------------------------
// gated attention

void forward_gate_split(forward_state *s, int n) {
    const model_hparams *hp = &s->m->hp;
    const size_t hd = (size_t)hp->head_dim, Q = (size_t)model_q_dim(hp);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < hp->n_head; h++)
            memcpy(s->q + (size_t)t * Q + (size_t)h * hd, s->qgate + (size_t)t * 2 * Q + (size_t)h * 2 * hd,
                   hd * sizeof(float));
}

void forward_gate_apply(forward_state *s, int n) {
    const model_hparams *hp = &s->m->hp;
    const size_t hd = (size_t)hp->head_dim, Q = (size_t)model_q_dim(hp);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < hp->n_head; h++) {
            const float *g = s->qgate + (size_t)t * 2 * Q + (size_t)h * 2 * hd + hd;
            float *o = s->attn + (size_t)t * Q + (size_t)h * hd;
            for (size_t i = 0; i < hd; i++) o[i] *= s_sigmoid(g[i]);
        }
}
