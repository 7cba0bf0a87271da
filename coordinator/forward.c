/*
 * forward.c - the forward pass, top to bottom; see forward.h.
 *
 * For a batch of n tokens at positions pos..pos+n-1 (llama.cpp's graph,
 * written out as loops):
 *
 *   h = token_embd[ids]
 *   for each layer:
 *     x = s_rmsnorm(h) * attn_norm
 *     q, k, v = Wq x (+bq), Wk x (+bk), Wv x (+bv)   (deepseek2: forward_mla.c)
 *     (olmoe) q = s_rmsnorm(q) * q_norm, k = s_rmsnorm(k) * k_norm
 *     (qwen3moe, glm4moe) the same per head
 *     q, k = rope(q), rope(k);  cache k, v
 *     h += Wo * softmax(q K^T * attn_scale + causal mask) V
 *     x = s_rmsnorm(h) * ffn_norm
 *     h += FFN(x)  (dense) or  sum_s w_s expert_{e_s}(x) (+ shared expert)
 *   logits = output * (s_rmsnorm(h) * output_norm)
 *
 * Matmuls go through coli_matmul, which rounds the input per weight type as
 * llama.cpp does; everything else (norms, rope, softmax, attention) is F32.
 */
#include "coordinator/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/attn_simd.h"
#include "coordinator/forward_impl.h"
#include "coordinator/router.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "core/quant/quant.h"

// ---------------------------------------------------------------------------
// run state

/* Query heads one F32-cache attention task takes together: GQA groups (<= 8)
 * stay whole; MQA over many heads (deepseek2's latent attention, 128 heads
 * on one KV head) is split so that decode still spreads over the threads. */
#define ATTN_MAX_HEADS_PER_TASK 8

/* Query heads of one attention task: score rows a thread needs. */
static int s_heads_per_task(const model_hparams *hp) {
    const int group = hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 1;
    return group < ATTN_MAX_HEADS_PER_TASK ? group : ATTN_MAX_HEADS_PER_TASK;
}

int forward_state_init(forward_state *s, const model *m, moe_exec *moe, coli_pool *pool, int max_batch, int n_ctx) {
    const model_hparams *hp = &m->hp;
    const size_t B = (size_t)max_batch, E = (size_t)hp->n_embd;
    const size_t Q = (size_t)model_q_dim(hp), KD = (size_t)model_k_dim(hp), VD = (size_t)model_v_dim(hp);
    const size_t X = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used, M = forward_mla_floats(hp);
    memset(s, 0, sizeof *s);
    s->m = m;
    s->moe = moe;
    s->pool = pool;
    s->max_batch = max_batch;
    s->n_ctx = n_ctx;
    s->n_workers = pool ? coli_pool_size(pool) : 1;
    if (s->n_workers < 1) s->n_workers = 1;
    s->h = malloc(B * E * sizeof(float));
    s->xb = malloc(B * E * sizeof(float));
    s->q = malloc(B * Q * sizeof(float));
    s->k = malloc(B * KD * sizeof(float));
    s->v = malloc(B * VD * sizeof(float));
    s->attn = malloc(B * (size_t)model_attn_dim(hp) * sizeof(float));
    s->mla = M ? malloc(B * M * sizeof(float)) : NULL;
    s->delta = malloc(B * E * sizeof(float));
    s->rope = malloc(B * (size_t)hp->n_rot * sizeof(float));
    s->scores = malloc((size_t)s->n_workers * (size_t)s_heads_per_task(hp) * (size_t)n_ctx * sizeof(float));
    s->router = malloc(B * (X ? X : 1) * sizeof(float));
    s->choice = malloc((X ? 2 * X : 1) * sizeof(float)); /* choice values + group scores */
    s->sel = malloc(B * (K ? K : 1) * sizeof(int32_t));
    s->sel_w = malloc(B * (K ? K : 1) * sizeof(float));
    s->moe_y = malloc(B * (K ? K : 1) * E * sizeof(float));
    s->shexp = malloc(B * E * sizeof(float));
    s->shexp_gate = malloc(B * sizeof(float));
    const size_t G = forward_gdn_floats(hp, max_batch, s->n_workers), QG = hp->attn_gate ? 2 * Q : 0;
    s->qgate = QG ? malloc(B * QG * sizeof(float)) : NULL;
    s->gdn = G ? malloc(G * sizeof(float)) : NULL;
    if (!s->h || !s->xb || !s->q || !s->k || !s->v || !s->attn || (M && !s->mla) || !s->delta || !s->rope ||
        !s->scores || !s->router || !s->choice || !s->sel || !s->sel_w || !s->moe_y || !s->shexp || !s->shexp_gate ||
        forward_dsa_init(s) < 0 || forward_kimi_init(s) < 0 || forward_ds4_init(s) < 0 || (QG && !s->qgate) ||
        (G && !s->gdn)) {
        forward_state_free(s);
        return coli_fail(COLI_ENOMEM, "forward pass: cannot allocate buffers for a batch of %d", max_batch);
    }
    return 0;
}

void forward_state_free(forward_state *s) {
    free(s->h);
    free(s->xb);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->attn);
    free(s->mla);
    free(s->delta);
    free(s->rope);
    free(s->scores);
    free(s->router);
    free(s->choice);
    free(s->sel);
    free(s->sel_w);
    free(s->moe_y);
    free(s->shexp);
    free(s->shexp_gate);
    forward_dsa_free(s);
    forward_kimi_free(s);
    forward_ds4_free(s);
    free(s->qgate);
    free(s->gdn);
    coli_scratch_free(&s->scratch);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------
// neural net blocks

/* o = x / sqrt(mean(x^2) + eps) * w over n values (sum in double, as ggml;
 * w NULL: no weight, llama4's L2 q/k norm). */
static void s_rmsnorm(float *o, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) o[i] = (x[i] * scale) * (w ? w[i] : 1.0f);
}

void fwd_rmsnorm_rows(float *o, const float *x, const coli_tensor *w, int n, int64_t cols, float eps) {
    for (int t = 0; t < n; t++)
        s_rmsnorm(o + (size_t)t * (size_t)cols, x + (size_t)t * (size_t)cols, w ? (const float *)w->data : NULL, cols,
                  eps);
}

void fwd_softmax(float *x, int64_t n) { fwd_softmax_sink(x, n, NULL); }

void fwd_softmax_sink(float *x, int64_t n, const float *sink) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    if (sink && *sink > max) max = *sink;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    if (sink) sum += (double)expf(*sink - max); /* ggml's soft_max with sinks */
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

int fwd_matmul(forward_state *s, const coli_tensor *W, const float *x, int n, float *y) {
    return coli_matmul(s->pool, &s->scratch, W->data, W->type, W->ne[0], W->ne[1], x, n, y);
}

coli_matmul_op fwd_op_of(const coli_tensor *W, const float *x, int n, float *y) {
    return (coli_matmul_op){W->data, W->type, W->ne[0], W->ne[1], x, n, y};
}

static void s_add_bias(float *y, const coli_tensor *b, int n, int64_t cols) {
    const float *bv = (const float *)b->data;
    for (int t = 0; t < n; t++)
        for (int64_t i = 0; i < cols; i++) y[(size_t)t * (size_t)cols + i] += bv[i];
}

static void s_add_rows(float *h, const float *d, int n, int64_t cols) {
    for (size_t i = 0; i < (size_t)n * (size_t)cols; i++) h[i] += d[i];
}

// ---------------------------------------------------------------------------
// attention

/* Multiply-adds below which attention runs on the calling thread. */
#define ATTN_MIN_PARALLEL_WORK (1 << 17)

typedef struct attn_job {
    forward_state *s;
    const fwd_rows *rows;
    int layer, n, f16;
} attn_job;

static float s_fp16_round(float x) { return coli_fp16_to_fp32(coli_fp32_to_fp16(x)); }

/* Widths of one head, the q.k multiplier and the layer's sinks. */
typedef struct head_dims {
    int k, v;           /* query/key and value head widths */
    float scale;        /* hp->attn_scale */
    const float *sinks; /* gpt-oss: one logit per query head joining its softmax; NULL: none */
} head_dims;

/* The sink of query head h, or NULL. */
static const float *s_sink(head_dims hd, int h) { return hd.sinks ? hd.sinks + h : NULL; }

/* Positions a row attends to: first..first+n-1 (all of them, or a sliding
 * window's), or pos[0..n) (sparse attention, ascending, so the sums run in
 * the order of the dense loop). */
typedef struct attn_span {
    int first; /* used when pos is NULL */
    int n;
    const int32_t *pos;
} attn_span;

static int s_span_at(attn_span sp, int i) { return sp.pos ? sp.pos[i] : sp.first + i; }

/* out (hd.v) = softmax(q . K[span] * scale) V for query head h
 * reading KV head kvh of an fp16 cache: q arrives fp16-rounded and the
 * probabilities are rounded to fp16 before the product with V (llama.cpp). */
static void s_attend_one_f16(const kv_cache *kv, int layer, attn_span sp, int kvh, int h, head_dims hd, const float *q,
                             float *scores, float *out) {
    const int n_kv = sp.n;
    const float *h2f = kv_fp16_table();
    const size_t koff = (size_t)kvh * (size_t)hd.k, voff = (size_t)kvh * (size_t)hd.v;
    for (int j = 0; j < n_kv; j++) {
        float dot = 0.0f;
        const uint16_t *kj = (const uint16_t *)kv_cache_k(kv, layer, s_span_at(sp, j)) + koff;
        for (int d = 0; d < hd.k; d++) dot += q[d] * h2f[kj[d]];
        scores[j] = dot * hd.scale;
    }
    fwd_softmax_sink(scores, n_kv, s_sink(hd, h));
    memset(out, 0, (size_t)hd.v * sizeof(float));
    for (int j = 0; j < n_kv; j++) {
        const float p = s_fp16_round(scores[j]);
        const uint16_t *vj = (const uint16_t *)kv_cache_v(kv, layer, s_span_at(sp, j)) + voff;
        for (int d = 0; d < hd.v; d++) out[d] += p * h2f[vj[d]];
    }
}

/* The same for the group query heads first.. of KV head kvh (q: group
 * heads of hd.k, out: group heads of hd.v, contiguous) over an F32 cache:
 * each cached key is read once for all of them; scores: group rows,
 * score_stride apart. Each head gets the bits it would get alone. */
static void s_attend_group_f32(const kv_cache *kv, int layer, attn_span sp, int kvh, int first, int group, head_dims hd,
                               const float *q, float *scores, long score_stride, float *out) {
    const int n_kv = sp.n;
    const size_t koff = (size_t)kvh * (size_t)hd.k, voff = (size_t)kvh * (size_t)hd.v;
    for (int j = 0; j < n_kv; j++)
        attn_dots_f32(q, hd.k, group, (const float *)kv_cache_k(kv, layer, s_span_at(sp, j)) + koff, hd.k, scores + j,
                      score_stride);
    for (int g = 0; g < group; g++) {
        float *sg = scores + g * score_stride;
        for (int j = 0; j < n_kv; j++) sg[j] *= hd.scale;
        fwd_softmax_sink(sg, n_kv, s_sink(hd, first + g));
    }
    memset(out, 0, (size_t)group * (size_t)hd.v * sizeof(float));
    for (int j = 0; j < n_kv; j++) {
        const float *vj = (const float *)kv_cache_v(kv, layer, s_span_at(sp, j)) + voff;
        for (int g = 0; g < group; g++)
            attn_axpy_f32(out + (size_t)g * (size_t)hd.v, scores[g * score_stride + j], vj, hd.v);
    }
}

/* The first cached position a query at n_kv - 1 sees: 0 (causal), the last
 * n_swa (sliding window: llama.cpp masks p - j >= n_swa) or the start of
 * its chunk (llama4: llama.cpp masks j < (p / n_chunk) * n_chunk). A
 * function of the absolute position only, so batching and reused prefixes
 * mask alike. */
static int s_window_start(const layer_weights *l, int n_kv) {
    if (l->n_chunk > 0) return (n_kv - 1) / l->n_chunk * l->n_chunk;
    return l->n_swa > 0 && n_kv > l->n_swa ? n_kv - l->n_swa : 0;
}

/* F32 cache: thread ith takes tasks ith, ith + nth, ...: a (token, KV head,
 * chunk of its query heads); fp16 cache: (token, head) pairs. Token t sees
 * positions 0..pos+t (the causal mask), in a sliding-window layer only the
 * last n_swa of them (llama.cpp masks p - j >= n_swa). */
static void s_attention_worker(void *arg, int ith, int nth) {
    const attn_job *job = arg;
    forward_state *s = job->s;
    const model_hparams *hp = &s->m->hp;
    const int group = hp->n_head / hp->n_head_kv, f16 = job->f16, chunk = s_heads_per_task(hp);
    const int n_chunks = (group + chunk - 1) / chunk;
    const layer_weights *l = &s->m->layers[job->layer];
    const head_dims hd = {hp->head_dim, hp->head_dim_v, hp->attn_scale,
                          l->sinks ? (const float *)l->sinks->data : NULL};
    const int per_tok = f16 ? hp->n_head : hp->n_head_kv * n_chunks;
    const size_t q_dim = (size_t)model_q_dim(hp), o_dim = (size_t)model_attn_dim(hp);
    float *scores = s->scores + (size_t)ith * (size_t)chunk * (size_t)s->n_ctx;
    for (int task = ith; task < job->n * per_tok; task += nth) {
        const int t = task / per_tok, h = task % per_tok, n_kv = fwd_row_pos(job->rows, t) + 1;
        const int j0 = s_window_start(l, n_kv);
        attn_span sp = {j0, n_kv - j0, NULL};
        if (s->dsa) sp.pos = forward_dsa_positions(s, t, &sp.n);
        const kv_cache *kv = fwd_row_kv(job->rows, t);
        const int kvh = f16 ? h / group : h / n_chunks;
        const int first = f16 ? h : kvh * group + (h % n_chunks) * chunk; /* first query head */
        const int heads = f16 ? 1 : (group - (first - kvh * group) < chunk ? group - (first - kvh * group) : chunk);
        const float *q = s->q + (size_t)t * q_dim + (size_t)first * (size_t)hd.k;
        float *out = s->attn + (size_t)t * o_dim + (size_t)first * (size_t)hd.v;
        if (f16)
            s_attend_one_f16(kv, job->layer, sp, kvh, first, hd, q, scores, out);
        else
            s_attend_group_f32(kv, job->layer, sp, kvh, first, heads, hd, q, scores, s->n_ctx, out);
    }
}

/* llama4's NoPE layers: q of token t times the attention temperature of
 * its position (llama.cpp's llm_graph_input_attn_temp, in its precisions). */
static void s_attn_temperature(forward_state *s, const fwd_rows *rows, int n) {
    const model_hparams *hp = &s->m->hp;
    const size_t Q = (size_t)model_q_dim(hp);
    for (int t = 0; t < n; t++) {
        const float p = (float)fwd_row_pos(rows, t);
        const double f = floor((double)((p + hp->attn_temp_offset) / (float)hp->attn_temp_floor));
        const float scale = (float)(log(f + 1.0) * hp->attn_temp_scale + 1.0);
        for (size_t i = 0; i < Q; i++) s->q[(size_t)t * Q + i] *= scale;
    }
}

/* q, k, v of the standard block: projections (+ biases), q/k norms, rope
 * (llama4: none in a NoPE layer, the temperature instead; then the L2 norm). */
static int s_qkv_block(forward_state *s, const fwd_rows *rows, const layer_weights *l, int n) {
    const model_hparams *hp = &s->m->hp;
    const int64_t Q = model_q_dim(hp), K = model_k_dim(hp), V = model_v_dim(hp);
    int rc;
    // q = Wq x (+ bq), k = Wk x (+ bk), v = Wv x (+ bv)
    // as one pool job over the three matrices' rows, sharing one prepared x
    // (the hybrids: q and each head's output gate, split below)
    const coli_matmul_op qkv[3] = {fwd_op_of(l->wq, s->xb, n, hp->attn_gate ? s->qgate : s->q),
                                   fwd_op_of(l->wk, s->xb, n, s->k), fwd_op_of(l->wv, s->xb, n, s->v)};
    if ((rc = coli_matmul_many(s->pool, &s->scratch, qkv, 3)) < 0) return rc;
    if (hp->attn_gate) forward_gate_split(s, n);
    if (l->bq) s_add_bias(s->q, l->bq, n, Q);
    if (l->bk) s_add_bias(s->k, l->bk, n, K);
    if (l->bv) s_add_bias(s->v, l->bv, n, V);
    // OLMoE: RMSNorm over the whole projected q and k vectors, before rope;
    // Qwen3-MoE: over each head (rows of head_dim)
    if (l->q_norm && l->qk_norm_per_head) {
        fwd_rmsnorm_rows(s->q, s->q, l->q_norm, n * hp->n_head, hp->head_dim, hp->rms_eps);
        fwd_rmsnorm_rows(s->k, s->k, l->k_norm, n * hp->n_head_kv, hp->head_dim, hp->rms_eps);
    } else if (l->q_norm) {
        fwd_rmsnorm_rows(s->q, s->q, l->q_norm, n, Q, hp->rms_eps);
        fwd_rmsnorm_rows(s->k, s->k, l->k_norm, n, K, hp->rms_eps);
    }
    if (l->no_rope) {
        if (hp->attn_temp_scale != 0.0f) s_attn_temperature(s, rows, n);
        return 0;
    }
    // rotate q and k by their positions
    for (int t = 0; t < n; t++) {
        const float *cs = s->rope + (size_t)t * (size_t)hp->n_rot;
        rope_apply(s->q + (size_t)t * (size_t)Q, cs, hp->n_head, hp->head_dim, hp->n_rot, hp->rope.neox);
        rope_apply(s->k + (size_t)t * (size_t)K, cs, hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope.neox);
    }
    // llama4 (Llama4TextL2Norm): each rotated head RMS-normalised, no weight
    if (l->l2_qk_norm) {
        fwd_rmsnorm_rows(s->q, s->q, NULL, n * hp->n_head, hp->head_dim, hp->rms_eps);
        fwd_rmsnorm_rows(s->k, s->k, NULL, n * hp->n_head_kv, hp->head_dim, hp->rms_eps);
    }
    return 0;
}

static int s_attention_block(forward_state *s, const fwd_rows *rows, int il, int n) {
    const model_hparams *hp = &s->m->hp;
    const layer_weights *l = &s->m->layers[il];
    const int64_t E = hp->n_embd, Q = model_q_dim(hp);
    int rc;
    // x = s_rmsnorm(h) * attn_norm
    fwd_rmsnorm_rows(s->xb, fwd_block_in(s), l->attn_norm, n, E, hp->rms_eps);
    // q, k, v with rope applied: one head per KV head (deepseek2: every
    // head's decompressed key and value, forward_mla.c)
    rc = model_is_mla(hp) ? forward_mla_qkv(s, l, n) : s_qkv_block(s, rows, l, n);
    // sparse attention: the indexer's key joins each cached row
    if (rc == 0 && s->dsa) rc = forward_dsa_index(s, l, n);
    if (rc < 0) return rc;
    // append k, v to the cache(s); attention then reads the new rows from it too
    const int64_t KD = model_k_dim(hp), VD = model_v_dim(hp);
    kv_cache *kv = fwd_row_kv(rows, 0);
    if (!rows->kvs)
        kv_cache_store(kv, il, rows->pos, n, s->k, s->v);
    else
        for (int t = 0; t < n; t++)
            kv_cache_store(rows->kvs[t], il, rows->poss[t], 1, s->k + (size_t)t * (size_t)KD,
                           s->v + (size_t)t * (size_t)VD);
    // sparse attention: each row's top-k positions by the indexer's scores
    if (s->dsa) forward_dsa_select(s, l, rows, il, n);
    // an fp16 cache multiplies with fp16-rounded queries (llama.cpp's path),
    // the latent cache (v_in_k) too: llama.cpp's deepseek32 F16 run picks
    // other sparse positions at a near-tie of the indexer with F32 ones
    if (kv->f16)
        for (size_t i = 0; i < (size_t)n * (size_t)Q; i++) s->q[i] = s_fp16_round(s->q[i]);
    // attn = softmax(q K^T * attn_scale) V, heads in parallel unless the
    // work is too small to pay for waking the pool (short-context decode)
    attn_job job = {s, rows, il, n, kv->f16};
    int64_t work = 0;
    for (int t = 0; t < n; t++) work += (int64_t)(fwd_row_pos(rows, t) + 1) * Q;
    if (work < ATTN_MIN_PARALLEL_WORK)
        s_attention_worker(&job, 0, 1);
    else
        coli_pool_run(s->pool, s_attention_worker, &job);
    // the hybrids: attn *= sigmoid(gate), per head
    if (hp->attn_gate) forward_gate_apply(s, n);
    // h += Wo attn (deepseek2's latent attention: the heads' values first)
    const float *o = model_is_mla(hp) ? forward_mla_values(s, l, n, &rc) : s->attn;
    if (rc < 0 || (rc = fwd_matmul(s, l->wo, o, n, s->delta)) < 0) return rc;
    if (l->bo) s_add_bias(s->delta, l->bo, n, E);
    s_add_rows(s->h, s->delta, n, E);
    return 0;
}

// ---------------------------------------------------------------------------
// feed-forward: dense, or routed experts (+ shared expert)

/* Router logits of the n tokens, then each token's experts and weights
 * (router.h: scores, selection bias, groups, renormalisation, scale). */
static int s_route(forward_state *s, const layer_weights *l, int n) {
    const model_hparams *hp = &s->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    const router_params rp = router_params_of(hp);
    const float *bias = l->exp_probs_b ? (const float *)l->exp_probs_b->data : NULL;
    int rc = fwd_matmul(s, l->router, s->xb, n, s->router);
    if (rc < 0) return rc;
    if (l->router_b) s_add_bias(s->router, l->router_b, n, X);
    for (int t = 0; t < n; t++)
        router_select(&rp, s->router + (size_t)t * (size_t)X, bias, s->choice, s->sel + (size_t)t * (size_t)K,
                      s->sel_w + (size_t)t * (size_t)K);
    return 0;
}

/* The rows the routed experts take: x, or (llama4, top-1) w[t] * x[t] in
 * s->delta, free until the experts' outputs are summed (unweighted then).
 * Scaled here, before any executor, so workers and in-process experts see
 * the same bytes. */
static const float *s_expert_input(forward_state *s, const layer_weights *l, int n) {
    const size_t E = (size_t)s->m->hp.n_embd;
    if (!l->moe_weight_in) return s->xb;
    for (int t = 0; t < n; t++)
        for (size_t i = 0; i < E; i++) s->delta[(size_t)t * E + i] = s->xb[(size_t)t * E + i] * s->sel_w[t];
    return s->delta;
}

/* The shared expert(s) of a layer into s->shexp (and its gate's logits):
 * nothing in it waits for the routed experts, so a scheduler runs it while
 * they compute on workers or hosts (moe_exec.side). */
typedef struct shexp_job {
    forward_state *s;
    const layer_weights *l;
    int n, done, rc;
} shexp_job;

static void s_shexp(void *arg) {
    shexp_job *j = arg;
    forward_state *s = j->s;
    j->done = 1;
    j->rc = expert_ffn(s->pool, &s->scratch, &j->l->shexp, s->xb, j->n, s->shexp);
    if (j->rc >= 0 && j->l->shexp_gate) j->rc = fwd_matmul(s, j->l->shexp_gate, s->xb, j->n, s->shexp_gate);
}

/* delta[t] = sum_s w[t][s] * y[t][s] in slot order, + the shared expert(s)
 * (Qwen2-MoE: times sigmoid(g . x); DeepSeek: ungated), computed here in the
 * coordinator so that placement never changes the sum (when it is computed
 * does not change it either: it is added after the routed sum). */
int fwd_moe_block(forward_state *s, const layer_weights *l, int il, int n, int routed) {
    const model_hparams *hp = &s->m->hp;
    const int K = hp->n_expert_used;
    /* kimi-k3's latent MoE: the experts' rows are routed_down x (forward_kimi.c) */
    const size_t E = l->routed_down ? (size_t)hp->n_embd_latent : (size_t)hp->n_embd;
    int rc = 0;
    if (!routed && (rc = s_route(s, l, n)) < 0) return rc;
    const float *x = l->routed_down ? forward_kimi_latent_in(s, l, n, &rc) : s_expert_input(s, l, n);
    if (rc < 0) return rc;
    shexp_job job = {s, l, n, 0, 0};
    s->moe->side = l->has_shexp ? s_shexp : NULL;
    s->moe->side_arg = &job;
    rc = s->moe->run_layer(s->moe, il, x, n, K, s->sel, s->moe_y);
    s->moe->side = NULL;
    s->moe->side_arg = NULL;
    if (rc < 0) return coli_fail_prefix(rc, "layer %d experts", il);
    if (s->route_hook) s->route_hook(s->route_user, il, s->pos0, n, K, s->sel, s->sel_w);
    for (int t = 0; t < n; t++) {
        float *d = s->delta + (size_t)t * E;
        const float *w = s->sel_w + (size_t)t * (size_t)K;
        const float *y = s->moe_y + (size_t)t * (size_t)K * E;
        for (size_t i = 0; i < E; i++) d[i] = l->moe_weight_in ? y[i] : w[0] * y[i];
        for (int j = 1; j < K; j++)
            for (size_t i = 0; i < E; i++) d[i] += w[j] * y[(size_t)j * E + i];
    }
    if (l->routed_up && (rc = forward_kimi_latent_out(s, l, n)) < 0) return rc;
    if (!l->has_shexp) return 0;
    if (!job.done) s_shexp(&job);
    if (job.rc < 0) return job.rc;
    if (!l->shexp_gate) {
        s_add_rows(s->delta, s->shexp, n, hp->n_embd);
        return 0;
    }
    for (int t = 0; t < n; t++) {
        const float g = 1.0f / (1.0f + expf(-s->shexp_gate[t]));
        float *d = s->delta + (size_t)t * (size_t)hp->n_embd; /* full width again after routed_up */
        for (int64_t i = 0; i < hp->n_embd; i++) d[i] += g * s->shexp[(size_t)t * (size_t)hp->n_embd + (size_t)i];
    }
    return 0;
}

static int s_ffn_block(forward_state *s, int il, int n) {
    const model_hparams *hp = &s->m->hp;
    const layer_weights *l = &s->m->layers[il];
    int rc;
    // x = s_rmsnorm(h) * ffn_norm
    fwd_rmsnorm_rows(s->xb, fwd_block_in(s), l->ffn_norm, n, hp->n_embd, hp->rms_eps);
    // FFN: W_down (silu(W_gate x) * W_up x), one dense one (dense models,
    // deepseek2's leading blocks) or k routed ones
    if (!l->router)
        rc = expert_ffn(s->pool, &s->scratch, &l->dense, s->xb, n, s->delta);
    else
        rc = fwd_moe_block(s, l, il, n, 0);
    if (rc < 0) return rc;
    // h += FFN(x)
    s_add_rows(s->h, s->delta, n, hp->n_embd);
    return 0;
}

// ---------------------------------------------------------------------------
// the whole pass

/* logits = output (s_rmsnorm(h) * output_norm) for the last row or every row. */
static int s_output_logits(forward_state *s, int n, float *logits, int logits_all) {
    const model_hparams *hp = &s->m->hp;
    const int first = logits_all ? 0 : n - 1, rows = n - first;
    float *x = s->xb + (size_t)first * (size_t)hp->n_embd;
    fwd_rmsnorm_rows(x, fwd_block_in(s) + (size_t)first * (size_t)hp->n_embd, s->m->output_norm, rows, hp->n_embd,
                     hp->rms_eps);
    return fwd_matmul(s, s->m->output, x, rows, logits);
}

/* One batch of n <= max_batch tokens. */
static int s_forward_batch(forward_state *s, const fwd_rows *rows, const int32_t *ids, int n, float *logits,
                           int logits_all) {
    const model *m = s->m;
    const model_hparams *hp = &m->hp;
    const size_t row = coli_row_bytes(m->tok_embd->type, hp->n_embd);
    int rc;
    s->pos0 = fwd_row_pos(rows, 0); /* for one-sequence states; batch.c's hook reads each row's */
    // h = token_embd[ids], dequantized exactly; rope angles of each position
    for (int t = 0; t < n; t++) {
        const char *src = (const char *)m->tok_embd->data + (size_t)ids[t] * row;
        coli_dequantize_row(m->tok_embd->type, src, s->h + (size_t)t * (size_t)hp->n_embd, hp->n_embd);
        rope_angles(&hp->rope, fwd_row_pos(rows, t), s->rope + (size_t)t * (size_t)hp->n_rot);
    }
    if (s->ds4) return forward_ds4_layers(s, rows, ids, n, logits, logits_all); /* hyper-connections: forward_ds4.c */
    forward_kimi_begin(s);
    for (int il = 0; il < hp->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        // kimi-k3: each sub-block reads the residual mix (forward_kimi.c)
        if (s->kimi) forward_kimi_mix(s, l->attn_res, n, il % hp->attn_res_bs == 0);
        // attention, or a linear-attention layer of a hybrid (forward_hybrid.c)
        rc = l->recurrent ? forward_gdn_block(s, rows, il, n) : s_attention_block(s, rows, il, n);
        if (rc < 0) return rc;
        if (s->kimi) forward_kimi_mix(s, l->ffn_res, n, 0);
        if ((rc = s_ffn_block(s, il, n)) < 0) return rc;
    }
    if (s->kimi) forward_kimi_mix(s, m->output_res, n, 0);
    return logits ? s_output_logits(s, n, logits, logits_all) : 0;
}

/* Every id in the vocabulary: 0 or COLI_ERANGE naming the first that is not. */
static int s_check_ids(const forward_state *s, const int32_t *ids, int n) {
    const int n_vocab = s->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return coli_fail(COLI_ERANGE, "eval: token id %d at index %d out of range [0, %d)", ids[i], i, n_vocab);
    return 0;
}

int forward_split(const model *m, int pos, int end, int most) {
    const int stop = end - pos < most ? end : pos + most, C = FORWARD_REC_CHUNK;
    if (!m->recurrent || stop == end) return stop;
    if (stop / C * C > pos) return stop / C * C;
    /* no chunk boundary within most: go on to the next one (a cut inside a
     * chunk would change the chunk's bits) */
    return (pos / C + 1) * C < end ? (pos / C + 1) * C : end;
}

int forward_eval_rows(forward_state *s, kv_cache *const *kvs, const int *pos, const int32_t *ids, int n,
                      float *logits) {
    if (n <= 0 || n > s->max_batch)
        return coli_fail(COLI_EINVAL, "eval: %d sequences, expected 1..%d", n, s->max_batch);
    int rc = s_check_ids(s, ids, n);
    if (rc < 0) return rc;
    for (int t = 0; t < n; t++) {
        if (pos[t] < 0 || pos[t] + 1 > kvs[t]->n_ctx || kvs[t]->n_ctx > s->n_ctx)
            return coli_fail(COLI_ERANGE, "eval: sequence %d: context full: %d tokens in the cache + 1 > n_ctx %d", t,
                             pos[t], kvs[t]->n_ctx);
        for (int u = 0; u < t; u++)
            if (kvs[u] == kvs[t]) return coli_fail(COLI_EINVAL, "eval: sequences %d and %d share a KV cache", u, t);
    }
    for (int t = 0; t < n; t++) kv_cache_rewind(kvs[t], pos[t]);
    const fwd_rows rows = {.kv = kvs[0], .kvs = kvs, .poss = pos};
    return s_forward_batch(s, &rows, ids, n, logits, 1);
}

int forward_eval(forward_state *s, kv_cache *kv, const int32_t *ids, int n, int pos, float *logits, int logits_all) {
    const int n_vocab = s->m->hp.n_vocab;
    if (n <= 0) return coli_fail(COLI_EINVAL, "eval: n = %d tokens, expected > 0", n);
    int rc = s_check_ids(s, ids, n);
    if (rc < 0) return rc;
    if (pos < 0 || (int64_t)pos + n > kv->n_ctx || kv->n_ctx > s->n_ctx)
        return coli_fail(COLI_ERANGE, "eval: context full: %d tokens in the cache + %d new > n_ctx %d", pos, n,
                         kv->n_ctx);
    kv_cache_rewind(kv, pos);
    for (int done = 0; done < n;) {
        const int chunk = forward_split(s->m, pos + done, pos + n, s->max_batch) - (pos + done);
        const int last = done + chunk == n;
        float *out = NULL;
        if (logits && logits_all)
            out = logits + (size_t)done * (size_t)n_vocab;
        else if (logits && last)
            out = logits;
        const fwd_rows rows = {.kv = kv, .pos = pos + done};
        rc = s_forward_batch(s, &rows, ids + done, chunk, out, logits_all);
        if (rc < 0) return rc;
        done += chunk;
    }
    return 0;
}
