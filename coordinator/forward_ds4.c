/*
 * forward_ds4.c - DeepSeek-V4's forward pass (deepseek4; llama.cpp
 * de3ff815 src/models/deepseek4.cpp and llama-kv-cache-dsv4.cpp, written
 * out as loops). docs/architectures.md has the whole picture; in short:
 *
 *   X = hc copies of token_embd[id]                        (hc = 4 streams of n_embd)
 *   per layer, for the attention and then the FFN sub-block:
 *     m = hc_fn rmsnorm(X flattened)                       ((2 + hc) hc mixes)
 *     pre = sigmoid(m[0:hc] s0 + b) + eps, post = 2 sigmoid(m[hc:2hc] s1 + b)
 *     C = Sinkhorn(m[2hc:] s2 + b)                         (hc x hc, rows then columns)
 *     x = rmsnorm(sum_h pre_h X_h) * norm;  y = sub-block(x)
 *     X'_dst = post_dst y + sum_src C[src][dst] X_src
 *   logits = output rmsnorm(sum_h pre_h X_h) * output_norm (pre from output_hc_*)
 *
 * Attention: q = rope(rmsnorm_per_head(Wq_b rmsnorm(Wq_a x))), one key
 * k = rope(rmsnorm(Wkv x)) per position that is also the value; rope on
 * the last n_rot dims (adjacent pairs). A query attends (with a sink per
 * head) to the raw keys of the last sliding_window positions plus
 * compressed keys of past blocks: every complete block of 128 (HCA
 * layers), or the indexer's top-k of the complete blocks of 4 (CSA
 * layers). A block's key: per channel the softmax(score)-weighted sum of
 * the compressor values of its positions (CSA: and of the previous block,
 * overlap), RMS-normed and roped at the block's first position. The
 * output is un-roped at the query's position and projected by groups
 * (attn_output_a per group of heads, then attn_output_b).
 *
 * The cache row of a position (model_ds4.h: ds4_row) keeps its raw key,
 * its compressor rows and, at a block's last position, the block's keys,
 * so a prefix of rows is the whole state of a prefix.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/forward_impl.h"
#include "coordinator/model_ds4.h"
#include "coordinator/router.h"
#include "core/error.h"
#include "core/quant/quant.h"

typedef struct fwd_ds4 {
    ds4_row L;          /* cache row layout */
    float *x, *x2;      /* (B, hc E) the residual streams; the next ones (and scratch) */
    float *mix;         /* (B, (2 + hc) hc) */
    float *pre;         /* (B, hc) */
    float *post;        /* (B, hc) */
    float *comb;        /* (B, hc hc) [src][dst] */
    float *qr;          /* (B, q_lora) */
    float *q;           /* (B, H D) */
    float *row;         /* (B, row width) the new cache rows */
    float *tmp;         /* (B, max(2 D, 2 I, H D)) matmul outputs before scattering */
    float *cs;          /* (B, n_rot) each token's angles of the compressed layers' rope */
    float *out;         /* (B, H D) attention output */
    float *oa;          /* (B, G o_lora) */
    float *og;          /* (B, o_lora) one group's projection */
    float *iq;          /* (B, idx heads * I) */
    float *iw;          /* (B, idx heads) */
    float *sc;          /* (n_workers, s_keys_max) one head's scores */
    const float **keys; /* (n_workers, s_keys_max) the keys one query attends to */
    float *isc;         /* (n_workers, s_keys_max) indexer scores */
    int32_t *sel;       /* (n_workers, s_sel_max) */
    float *rot;         /* (I, I) Walsh-Hadamard matrix */
    float *vec;         /* (max(D, I)) a vector before its rotation / norm */
    float *gv, *gs;     /* (2 * 128) one channel's values and scores of a block */
    float *cb, *ct;     /* (n_rot) a block's angles; negated angles */
    float *arow;        /* (max(2 D, 2 I)) one ape row dequantized */
} fwd_ds4;

static size_t s_max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* Keys one query attends to, at most: every raw position (a window as
 * long as the context) plus a quarter of them compressed (CSA; HCA fewer). */
static size_t s_keys_max(const forward_state *s) { return (size_t)s->n_ctx + (size_t)s->n_ctx / 4 + 2; }

/* Blocks the indexer chooses, at most: top_k, or every visible block. */
static size_t s_sel_max(const forward_state *s) {
    const size_t k = (size_t)s->m->ds4->idx_top_k, blocks = (size_t)s->n_ctx / 4 + 1;
    return k < blocks ? k : blocks;
}

int forward_ds4_init(forward_state *s) {
    const model *m = s->m;
    if (!m->ds4) return 0;
    const model_hparams *hp = &m->hp;
    const ds4_model *d4 = m->ds4;
    const size_t B = (size_t)s->max_batch, E = (size_t)hp->n_embd, HC = (size_t)d4->hc, D = (size_t)hp->head_dim;
    const size_t HD = (size_t)hp->n_head * D, I = (size_t)d4->idx_dim, N = s_keys_max(s);
    fwd_ds4 *d = calloc(1, sizeof *d);
    if (!d) return coli_fail(COLI_ENOMEM, "deepseek4: out of memory");
    s->ds4 = d;
    d->L = model_ds4_row_layout(m);
    d->x = malloc(B * HC * E * sizeof(float));
    d->x2 = malloc(B * HC * E * sizeof(float));
    d->mix = malloc(B * (2 + HC) * HC * sizeof(float));
    d->pre = malloc(B * HC * sizeof(float));
    d->post = malloc(B * HC * sizeof(float));
    d->comb = malloc(B * HC * HC * sizeof(float));
    d->qr = malloc(B * (size_t)hp->n_lora_q * sizeof(float));
    d->q = malloc(B * HD * sizeof(float));
    d->row = calloc(B * (size_t)d->L.width, sizeof(float));
    d->tmp = malloc(B * s_max3(2 * D, 2 * I, HD) * sizeof(float));
    d->cs = malloc(B * (size_t)hp->n_rot * sizeof(float));
    d->out = malloc(B * HD * sizeof(float));
    d->oa = malloc(B * (size_t)(d4->n_groups * d4->o_lora) * sizeof(float));
    d->og = malloc(B * (size_t)d4->o_lora * sizeof(float));
    d->iq = malloc(B * (size_t)d4->idx_n_head * I * sizeof(float));
    d->iw = malloc(B * (size_t)d4->idx_n_head * sizeof(float));
    const size_t W = (size_t)s->n_workers; /* attention's scratch: one set per thread */
    d->sc = malloc(W * N * sizeof(float));
    d->keys = malloc(W * N * sizeof(float *));
    d->isc = malloc(W * N * sizeof(float));
    d->sel = malloc(W * s_sel_max(s) * sizeof(int32_t));
    d->rot = forward_hadamard((int)I);
    d->vec = malloc((D > I ? D : I) * sizeof(float));
    d->gv = malloc(2 * DS4_HCA_RATIO * sizeof(float));
    d->gs = malloc(2 * DS4_HCA_RATIO * sizeof(float));
    d->cb = malloc((size_t)hp->n_rot * sizeof(float));
    d->arow = malloc(s_max3(2 * D, 2 * I, 1) * sizeof(float));
    d->ct = malloc((size_t)hp->n_rot * sizeof(float));
    if (!d->cb || !d->ct || !d->og || !d->arow || !d->x || !d->x2 || !d->mix || !d->pre || !d->post || !d->comb ||
        !d->qr || !d->q || !d->row || !d->tmp || !d->cs || !d->out || !d->oa || !d->iq || !d->iw || !d->sc ||
        !d->keys || !d->isc || !d->sel || !d->rot || !d->vec || !d->gv || !d->gs)
        return coli_fail(COLI_ENOMEM, "deepseek4: cannot allocate the buffers for a batch of %d", s->max_batch);
    return 0;
}

void forward_ds4_free(forward_state *s) {
    fwd_ds4 *d = s->ds4;
    if (!d) return;
    void *bufs[] = {d->x,   d->x2,  d->mix, d->pre, d->post, d->comb, d->qr, d->q,    d->row,
                    d->tmp, d->cs,  d->out, d->oa,  d->iq,   d->iw,   d->sc, d->keys, d->isc,
                    d->sel, d->rot, d->vec, d->gv,  d->gs,   d->cb,   d->ct, d->og,   d->arow};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(d);
    s->ds4 = NULL;
}

// ---------------------------------------------------------------------------
// hyper-connections

static float s_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* comb (hc x hc, [src][dst]) made doubly stochastic as llama.cpp's
 * build_hc_sinkhorn: softmax over dst per src, + eps, columns
 * normalised, then iters - 1 times rows and columns (sums in double, each
 * + eps). */
static void s_sinkhorn(float *c, int hc, int iters, float eps) {
    for (int src = 0; src < hc; src++) {
        fwd_softmax(c + src * hc, hc);
        for (int dst = 0; dst < hc; dst++) c[src * hc + dst] += eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int src = 0; src < hc; src++) {
                double sum = 0.0;
                for (int dst = 0; dst < hc; dst++) sum += (double)c[src * hc + dst];
                const float z = (float)sum + eps;
                for (int dst = 0; dst < hc; dst++) c[src * hc + dst] /= z;
            }
        for (int dst = 0; dst < hc; dst++) {
            double sum = 0.0;
            for (int src = 0; src < hc; src++) sum += (double)c[src * hc + dst];
            const float z = (float)sum + eps;
            for (int src = 0; src < hc; src++) c[src * hc + dst] /= z;
        }
    }
}

/* mix (n, cols) = fn rmsnorm(X) per token (no weight; X flattened). */
static int s_hc_mixes(forward_state *s, const coli_tensor *fn, int n) {
    fwd_ds4 *d = s->ds4;
    const int64_t W = (int64_t)s->m->ds4->hc * s->m->hp.n_embd;
    fwd_rmsnorm_rows(d->x2, d->x, NULL, n, W, s->m->hp.rms_eps);
    return fwd_matmul(s, fn, d->x2, n, d->mix);
}

/* xb (n, E) = sum_h pre_h X_h, the streams weighted in order. */
static void s_hc_collapse(forward_state *s, int n) {
    const fwd_ds4 *d = s->ds4;
    const int hc = s->m->ds4->hc;
    const size_t E = (size_t)s->m->hp.n_embd;
    for (int t = 0; t < n; t++) {
        const float *x = d->x + (size_t)t * hc * E, *pre = d->pre + (size_t)t * hc;
        float *o = s->xb + (size_t)t * E;
        for (size_t i = 0; i < E; i++) o[i] = x[i] * pre[0];
        for (int h = 1; h < hc; h++)
            for (size_t i = 0; i < E; i++) o[i] += x[(size_t)h * E + i] * pre[h];
    }
}

/* Sub-block part's pre, post and comb from X; xb = its normalised input. */
static int s_hc_pre(forward_state *s, const ds4_layer *dl, int part, const coli_tensor *norm, int n) {
    fwd_ds4 *d = s->ds4;
    const ds4_model *d4 = s->m->ds4;
    const int hc = d4->hc, M = (2 + hc) * hc;
    int rc = s_hc_mixes(s, dl->hc_fn[part], n);
    if (rc < 0) return rc;
    const float *sc = (const float *)dl->hc_scale[part]->data, *b = (const float *)dl->hc_base[part]->data;
    for (int t = 0; t < n; t++) {
        const float *m = d->mix + (size_t)t * M;
        float *pre = d->pre + (size_t)t * hc, *post = d->post + (size_t)t * hc, *c = d->comb + (size_t)t * hc * hc;
        for (int h = 0; h < hc; h++) {
            pre[h] = s_sigmoid(m[h] * sc[0] + b[h]) + d4->hc_eps;
            post[h] = s_sigmoid(m[hc + h] * sc[1] + b[hc + h]) * 2.0f;
        }
        for (int i = 0; i < hc * hc; i++) c[i] = m[2 * hc + i] * sc[2] + b[2 * hc + i];
        s_sinkhorn(c, hc, d4->sinkhorn, d4->hc_eps);
    }
    s_hc_collapse(s, n);
    fwd_rmsnorm_rows(s->xb, s->xb, norm, n, s->m->hp.n_embd, s->m->hp.rms_eps);
    return 0;
}

/* X'_dst = post_dst delta + sum_src comb[src][dst] X_src (in this order). */
static void s_hc_post(forward_state *s, int n) {
    fwd_ds4 *d = s->ds4;
    const int hc = s->m->ds4->hc;
    const size_t E = (size_t)s->m->hp.n_embd;
    for (int t = 0; t < n; t++) {
        const float *x = d->x + (size_t)t * hc * E, *y = s->delta + (size_t)t * E;
        const float *post = d->post + (size_t)t * hc, *c = d->comb + (size_t)t * hc * hc;
        float *o = d->x2 + (size_t)t * hc * E;
        for (int dst = 0; dst < hc; dst++) {
            float *od = o + (size_t)dst * E;
            for (size_t i = 0; i < E; i++) od[i] = y[i] * post[dst];
            for (int src = 0; src < hc; src++)
                for (size_t i = 0; i < E; i++) od[i] += x[(size_t)src * E + i] * c[src * hc + dst];
        }
    }
    memcpy(d->x, d->x2, (size_t)n * hc * E * sizeof(float));
}

// ---------------------------------------------------------------------------
// the cache rows and the compressed blocks

static float *s_row(const fwd_rows *rows, int t, int il, int pos) {
    return (float *)kv_cache_k(fwd_row_kv(rows, t), il, pos); /* our own rows: written in place */
}

/* y (n, cols) = W x, then scattered into the new rows at off (+ ape row
 * pos % ratio when ape is given). */
static int s_to_rows(forward_state *s, const fwd_rows *rows, const coli_tensor *W, const float *x, int n, int64_t off,
                     const coli_tensor *ape, int ratio) {
    fwd_ds4 *d = s->ds4;
    const int64_t C = W->ne[1];
    int rc = fwd_matmul(s, W, x, n, d->tmp);
    if (rc < 0) return rc;
    for (int t = 0; t < n; t++) {
        float *r = d->row + (size_t)t * (size_t)d->L.width + off;
        const float *y = d->tmp + (size_t)t * (size_t)C;
        if (ape) /* ggml_get_rows: the row of pos % ratio, dequantized (llama-quantize quantizes it) */
            coli_dequantize_row(ape->type,
                                (const char *)ape->data +
                                    (size_t)(fwd_row_pos(rows, t) % ratio) * coli_row_bytes(ape->type, C),
                                d->arow, C);
        for (int64_t i = 0; i < C; i++) r[i] = ape ? y[i] + d->arow[i] : y[i];
    }
    return 0;
}

/* Rotate the last n_rot dims of each of n_heads heads of width w by cs;
 * inverse: by the negated angles (ggml_rope_ext_back). */
static void s_rope_tail(float *x, const float *cs, int n_heads, int w, int n_rot, int inverse, float *tmp) {
    const float *a = cs;
    if (inverse) {
        for (int i = 0; i < n_rot; i += 2) {
            tmp[i] = cs[i];
            tmp[i + 1] = -cs[i + 1];
        }
        a = tmp;
    }
    rope_apply(x + (w - n_rot), a, n_heads, w, n_rot, 0);
}

/* x (n) = rot x, in place through d->vec. */
static void s_rotate(fwd_ds4 *d, float *x, int n) {
    memcpy(d->vec, x, (size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int j = 0; j < n; j++) acc += d->rot[(size_t)i * (size_t)n + j] * d->vec[j];
        x[i] = acc;
    }
}

/* One compressor: value / score offsets in the row, width w, norm weight. */
typedef struct comp_src {
    int64_t kv, sc, w;
    const coli_tensor *norm;
    int overlap;
} comp_src;

/* out (w) = the compressed key of block b (ratio r) of row t's sequence:
 * per channel the softmax over the block's scores (overlap: the previous
 * block's first halves first, zero / -inf before the start) weighting its
 * values; then RMS-normed and roped at the block's first position. */
static void s_compress(forward_state *s, const fwd_rows *rows, int t, int il, int b, int r, comp_src c, float *out) {
    fwd_ds4 *d = s->ds4;
    const model_hparams *hp = &s->m->hp;
    for (int64_t ch = 0; ch < c.w; ch++) {
        int m = 0;
        for (int j = 0; c.overlap && j < r; j++, m++) {
            const int p = (b - 1) * r + j;
            const float *row = p >= 0 ? s_row(rows, t, il, p) : NULL;
            d->gv[m] = row ? row[c.kv + ch] : 0.0f;
            d->gs[m] = row ? row[c.sc + ch] : -INFINITY;
        }
        const int64_t half = c.overlap ? c.w : 0;
        for (int j = 0; j < r; j++, m++) {
            const float *row = s_row(rows, t, il, b * r + j);
            d->gv[m] = row[c.kv + half + ch];
            d->gs[m] = row[c.sc + half + ch];
        }
        fwd_softmax(d->gs, m);
        double acc = 0.0;
        for (int j = 0; j < m; j++) acc += (double)(d->gv[j] * d->gs[j]);
        out[ch] = (float)acc;
    }
    fwd_rmsnorm_rows(out, out, c.norm, 1, c.w, hp->rms_eps);
    rope_angles(&s->m->ds4->rope_comp, b * r, d->cb);
    s_rope_tail(out, d->cb, 1, (int)c.w, hp->n_rot, 0, d->ct);
}

/* Every block that the new rows complete gets its keys (in row order, so
 * a later row's attention finds them). */
static void s_compress_blocks(forward_state *s, const fwd_rows *rows, int il, int n) {
    fwd_ds4 *d = s->ds4;
    const ds4_layer *dl = &s->m->ds4->layers[il];
    const int r = dl->ratio;
    const comp_src attn = {d->L.ckv, d->L.csc, s->m->hp.head_dim, dl->comp_norm, r == DS4_CSA_RATIO};
    const comp_src idx = {d->L.lkv, d->L.lsc, s->m->ds4->idx_dim, dl->idx_norm, 1};
    for (int t = 0; t < n; t++) {
        const int pos = fwd_row_pos(rows, t);
        if (r == 0 || (pos + 1) % r != 0) continue;
        float *row = s_row(rows, t, il, pos);
        s_compress(s, rows, t, il, pos / r, r, attn, row + d->L.comp);
        if (r != DS4_CSA_RATIO) continue;
        s_compress(s, rows, t, il, pos / r, r, idx, row + d->L.lcomp);
        s_rotate(d, row + d->L.lcomp, (int)idx.w);
    }
}

// ---------------------------------------------------------------------------
// attention

/* q (n, H D) and the new rows' raw keys and compressor rows from xb; the
 * rows go to the cache(s). */
static int s_qkv(forward_state *s, const fwd_rows *rows, int il, int n) {
    fwd_ds4 *d = s->ds4;
    const model_hparams *hp = &s->m->hp;
    const layer_weights *l = &s->m->layers[il];
    const ds4_layer *dl = &s->m->ds4->layers[il];
    const int D = hp->head_dim, R = hp->n_rot;
    int rc;
    if ((rc = fwd_matmul(s, l->wq_a, s->xb, n, d->qr)) < 0) return rc;
    fwd_rmsnorm_rows(d->qr, d->qr, l->q_a_norm, n, hp->n_lora_q, hp->rms_eps);
    if ((rc = fwd_matmul(s, l->wq_b, d->qr, n, d->q)) < 0) return rc;
    fwd_rmsnorm_rows(d->q, d->q, NULL, n * hp->n_head, D, hp->rms_eps);
    if ((rc = s_to_rows(s, rows, dl->wkv, s->xb, n, d->L.raw, NULL, 1)) < 0) return rc;
    for (int t = 0; t < n; t++) {
        float *k = d->row + (size_t)t * (size_t)d->L.width + d->L.raw;
        const float *cs = dl->ratio ? d->cs + (size_t)t * R : s->rope + (size_t)t * R;
        fwd_rmsnorm_rows(k, k, dl->kv_norm, 1, D, hp->rms_eps);
        s_rope_tail(k, cs, 1, D, R, 0, d->ct);
        s_rope_tail(d->q + (size_t)t * hp->n_head * D, cs, hp->n_head, D, R, 0, d->ct);
    }
    if (dl->ratio && ((rc = s_to_rows(s, rows, dl->comp_wkv, s->xb, n, d->L.ckv, NULL, 1)) < 0 ||
                      (rc = s_to_rows(s, rows, dl->comp_wgate, s->xb, n, d->L.csc, dl->comp_ape, dl->ratio)) < 0))
        return rc;
    if (dl->ratio == DS4_CSA_RATIO &&
        ((rc = s_to_rows(s, rows, dl->idx_wkv, s->xb, n, d->L.lkv, NULL, 1)) < 0 ||
         (rc = s_to_rows(s, rows, dl->idx_wgate, s->xb, n, d->L.lsc, dl->idx_ape, dl->ratio)) < 0))
        return rc;
    for (int t = 0; t < n; t++)
        kv_cache_store(fwd_row_kv(rows, t), il, fwd_row_pos(rows, t), 1, d->row + (size_t)t * (size_t)d->L.width, NULL);
    return 0;
}

/* The indexer's queries (roped, rotated) and head weights of the n rows. */
static int s_index_queries(forward_state *s, const ds4_layer *dl, int n) {
    fwd_ds4 *d = s->ds4;
    const ds4_model *d4 = s->m->ds4;
    const int I = d4->idx_dim, IH = d4->idx_n_head, R = s->m->hp.n_rot;
    int rc;
    if ((rc = fwd_matmul(s, dl->idx_wq_b, d->qr, n, d->iq)) < 0) return rc;
    if ((rc = fwd_matmul(s, dl->idx_proj, s->xb, n, d->iw)) < 0) return rc;
    const float w_scale = 1.0f / sqrtf((float)(I * IH));
    for (int t = 0; t < n; t++) {
        float *q = d->iq + (size_t)t * IH * I;
        s_rope_tail(q, d->cs + (size_t)t * R, IH, I, R, 0, d->ct);
        for (int h = 0; h < IH; h++) s_rotate(d, q + (size_t)h * I, I);
        for (int h = 0; h < IH; h++) d->iw[(size_t)t * IH + h] *= w_scale;
    }
    return 0;
}

/* One thread's scratch of the attention. */
typedef struct attn_scratch {
    float *sc, *isc;
    const float **keys;
    int32_t *sel;
} attn_scratch;

/* Row t's compressed keys into keys[*nk...]: HCA every complete block;
 * CSA the indexer's top-k of them by sum_h relu(q_h . k_b) w_h (all when
 * there are at most top_k), chosen as ggml's CPU top_k, ascending. */
static void s_comp_keys(forward_state *s, const fwd_rows *rows, int il, int t, attn_scratch *x, int *nk) {
    const fwd_ds4 *d = s->ds4;
    const ds4_model *d4 = s->m->ds4;
    const int r = d4->layers[il].ratio, pos = fwd_row_pos(rows, t), n_vis = r ? (pos + 1) / r : 0;
    const int I = d4->idx_dim, IH = d4->idx_n_head, K = d4->idx_top_k;
    if (n_vis == 0) return;
    if (r == DS4_HCA_RATIO || n_vis <= K) {
        for (int b = 0; b < n_vis; b++) x->keys[(*nk)++] = s_row(rows, t, il, b * r + r - 1) + d->L.comp;
        return;
    }
    const float *q = d->iq + (size_t)t * IH * I, *w = d->iw + (size_t)t * IH;
    for (int b = 0; b < n_vis; b++) {
        const float *k = s_row(rows, t, il, b * r + r - 1) + d->L.lcomp;
        double acc = 0.0;
        for (int h = 0; h < IH; h++) {
            float dot = 0.0f;
            for (int i = 0; i < I; i++) dot += q[(size_t)h * I + i] * k[i];
            acc += (double)((dot > 0.0f ? dot : 0.0f) * w[h]);
        }
        x->isc[b] = (float)acc;
    }
    forward_dsa_top_k(x->isc, n_vis, K, x->sel);
    for (int j = 0; j < K; j++) x->keys[(*nk)++] = s_row(rows, t, il, x->sel[j] * r + r - 1) + d->L.comp;
}

/* out[t] = per head softmax(q . keys * scale, sink) keys (keys are values). */
static void s_attend(forward_state *s, const fwd_rows *rows, int il, int t, attn_scratch *x) {
    const fwd_ds4 *d = s->ds4;
    const model_hparams *hp = &s->m->hp;
    const int D = hp->head_dim, H = hp->n_head, pos = fwd_row_pos(rows, t);
    const int first = pos - s->m->ds4->n_swa + 1 > 0 ? pos - s->m->ds4->n_swa + 1 : 0;
    const float scale = 1.0f / sqrtf((float)D), *sinks = (const float *)s->m->layers[il].sinks->data;
    int nk = 0;
    for (int p = first; p <= pos; p++) x->keys[nk++] = s_row(rows, t, il, p) + d->L.raw;
    s_comp_keys(s, rows, il, t, x, &nk);
    for (int h = 0; h < H; h++) {
        const float *q = d->q + ((size_t)t * H + h) * D;
        float *o = d->out + ((size_t)t * H + h) * D;
        for (int j = 0; j < nk; j++) {
            float dot = 0.0f;
            for (int i = 0; i < D; i++) dot += q[i] * x->keys[j][i];
            x->sc[j] = dot * scale;
        }
        fwd_softmax_sink(x->sc, nk, sinks + h);
        memset(o, 0, (size_t)D * sizeof(float));
        for (int j = 0; j < nk; j++)
            for (int i = 0; i < D; i++) o[i] += x->sc[j] * x->keys[j][i];
    }
}

typedef struct attn_job {
    forward_state *s;
    const fwd_rows *rows;
    int il, n;
} attn_job;

/* Thread ith takes rows ith, ith + nth, ... with its own scratch: each
 * row's bits are those it gets alone. */
static void s_attend_worker(void *arg, int ith, int nth) {
    const attn_job *job = arg;
    const fwd_ds4 *d = job->s->ds4;
    const size_t N = s_keys_max(job->s), K = s_sel_max(job->s);
    attn_scratch x = {d->sc + ith * N, d->isc + ith * N, d->keys + ith * N, d->sel + ith * K};
    for (int t = ith; t < job->n; t += nth) s_attend(job->s, job->rows, job->il, t, &x);
}

/* delta = attn_output_b (per group g: attn_output_a_g out_g), out un-roped. */
static int s_output(forward_state *s, int il, int n) {
    fwd_ds4 *d = s->ds4;
    const model_hparams *hp = &s->m->hp;
    const ds4_model *d4 = s->m->ds4;
    const ds4_layer *dl = &d4->layers[il];
    const int D = hp->head_dim, H = hp->n_head, R = hp->n_rot, G = d4->n_groups, OL = d4->o_lora;
    const int64_t GD = (int64_t)H * D / G;
    const size_t rows_bytes = coli_row_bytes(dl->wo_a->type, GD) * (size_t)OL;
    int rc;
    for (int t = 0; t < n; t++) {
        const float *cs = dl->ratio ? d->cs + (size_t)t * R : s->rope + (size_t)t * R;
        s_rope_tail(d->out + (size_t)t * H * D, cs, H, D, R, 1, d->ct);
    }
    for (int g = 0; g < G; g++) {
        for (int t = 0; t < n; t++)
            memcpy(d->tmp + (size_t)t * GD, d->out + (size_t)t * H * D + (size_t)g * GD, (size_t)GD * sizeof(float));
        const void *wg = (const char *)dl->wo_a->data + (size_t)g * rows_bytes;
        if ((rc = coli_matmul(s->pool, &s->scratch, wg, dl->wo_a->type, GD, OL, d->tmp, n, d->og)) < 0) return rc;
        for (int t = 0; t < n; t++)
            memcpy(d->oa + ((size_t)t * G + g) * OL, d->og + (size_t)t * OL, (size_t)OL * sizeof(float));
    }
    return fwd_matmul(s, dl->wo_b, d->oa, n, s->delta);
}

static int s_attention(forward_state *s, const fwd_rows *rows, int il, int n) {
    const ds4_layer *dl = &s->m->ds4->layers[il];
    int rc;
    if ((rc = s_qkv(s, rows, il, n)) < 0) return rc;
    s_compress_blocks(s, rows, il, n);
    if (dl->ratio == DS4_CSA_RATIO && (rc = s_index_queries(s, dl, n)) < 0) return rc;
    attn_job job = {s, rows, il, n};
    if (n == 1 || !s->pool)
        s_attend_worker(&job, 0, 1);
    else
        coli_pool_run(s->pool, s_attend_worker, &job);
    return s_output(s, il, n);
}

// ---------------------------------------------------------------------------
// the pass

/* logits of the last row or every row: the head's collapse of the streams. */
static int s_logits(forward_state *s, int n, float *logits, int logits_all) {
    fwd_ds4 *d = s->ds4;
    const model *m = s->m;
    const ds4_model *d4 = m->ds4;
    const int hc = d4->hc;
    const float sc = *(const float *)d4->hc_head_scale->data, *b = (const float *)d4->hc_head_base->data;
    int rc = s_hc_mixes(s, d4->hc_head_fn, n);
    if (rc < 0) return rc;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < hc; h++)
            d->pre[(size_t)t * hc + h] = s_sigmoid(d->mix[(size_t)t * hc + h] * sc + b[h]) + d4->hc_eps;
    s_hc_collapse(s, n);
    const int first = logits_all ? 0 : n - 1;
    float *x = s->xb + (size_t)first * (size_t)m->hp.n_embd;
    fwd_rmsnorm_rows(x, x, m->output_norm, n - first, m->hp.n_embd, m->hp.rms_eps);
    return fwd_matmul(s, m->output, x, n - first, logits);
}

/* A hash-routed layer: token ids[t] takes the experts of its table row,
 * weighted by their sqrt(softplus) scores (renormalised, sum clamped at
 * 2^-14 as llama.cpp, and scaled), into s->sel / s->sel_w. */
static int s_hash_route(forward_state *s, const layer_weights *l, const ds4_layer *dl, const int32_t *ids, int n) {
    const model_hparams *hp = &s->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    const router_params rp = router_params_of(hp);
    int rc = fwd_matmul(s, l->router, s->xb, n, s->router);
    if (rc < 0) return rc;
    for (int t = 0; t < n; t++) {
        float *p = s->router + (size_t)t * X, *w = s->sel_w + (size_t)t * K;
        int32_t *sel = s->sel + (size_t)t * K;
        router_select(&rp, p, NULL, s->choice, sel, w); /* p: the scores; its choice is replaced */
        float sum = 0.0f;
        for (int j = 0; j < K; j++) {
            sel[j] = dl->tid2eid[(size_t)ids[t] * K + j];
            w[j] = p[sel[j]];
            sum += w[j];
        }
        if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
        for (int j = 0; j < K; j++) w[j] = (hp->renorm_topk ? w[j] / sum : w[j]) * hp->expert_weights_scale;
    }
    return 0;
}

int forward_ds4_layers(forward_state *s, const fwd_rows *rows, const int32_t *ids, int n, float *logits,
                       int logits_all) {
    fwd_ds4 *d = s->ds4;
    const model *m = s->m;
    const int hc = m->ds4->hc, R = m->hp.n_rot;
    const size_t E = (size_t)m->hp.n_embd;
    int rc;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < hc; h++) memcpy(d->x + ((size_t)t * hc + h) * E, s->h + (size_t)t * E, E * sizeof(float));
        rope_angles(&m->ds4->rope_comp, fwd_row_pos(rows, t), d->cs + (size_t)t * R);
    }
    for (int il = 0; il < m->hp.n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        const ds4_layer *dl = &m->ds4->layers[il];
        if ((rc = s_hc_pre(s, dl, 0, l->attn_norm, n)) < 0 || (rc = s_attention(s, rows, il, n)) < 0) return rc;
        s_hc_post(s, n);
        if ((rc = s_hc_pre(s, dl, 1, l->ffn_norm, n)) < 0) return rc;
        if (dl->tid2eid && (rc = s_hash_route(s, l, dl, ids, n)) < 0) return rc;
        if ((rc = fwd_moe_block(s, l, il, n, dl->tid2eid != NULL)) < 0) return rc;
        s_hc_post(s, n);
    }
    return logits ? s_logits(s, n, logits, logits_all) : 0;
}
