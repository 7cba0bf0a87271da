/*
 * forward_dsa.c - DeepSeek Sparse Attention (deepseek32, glm-dsa): a small
 * "lightning indexer" scores every visible position and each query attends
 * only to the top-k of them (llama.cpp de3ff815, src/models/deepseek32.cpp,
 * as loops). Per layer with an indexer, for the block input x and the
 * normalised q latent qr (forward_mla.c):
 *
 *   q_i = rope(indexer.attn_q_b qr)            (idx_n_head heads of idx_head_dim)
 *   k   = rope(LayerNorm(indexer.attn_k x) * k_norm + k_norm_b)   (one per position, cached)
 *   w   = indexer.proj x / sqrt(idx_head_dim * idx_n_head)
 *   score(j) = sum_h relu(q_h . k_j) w_h       for the visible positions j <= pos
 *
 * rope: the first n_rot dims of each head, NEOX pairs (deepseek32) or
 * adjacent pairs (glm-dsa), the angles of the latent attention. Then q and
 * k are rotated by the orthonormal Walsh-Hadamard matrix of their width,
 * as llama.cpp does (q . k is unchanged but for rounding; the rotated key
 * is what an F16 cache rounds, so its choices follow llama.cpp's).
 * A row with at most top_k visible positions attends to all of them (dense
 * latent attention); past that to the top_k positions chosen exactly as
 * ggml's CPU top_k does (std::partial_sort by score, libstdc++'s heap: on
 * equal scores the heap decides, reproduced below), in ascending order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/attn_simd.h"
#include "coordinator/forward_impl.h"
#include "core/error.h"

typedef struct fwd_dsa {
    float *q;      /* (B, idx_n_head * idx_head_dim) queries of the current layer */
    float *k;      /* (B, idx_head_dim) keys before their norm */
    float *w;      /* (B, idx_n_head) head weights, pre-scaled */
    float *scores; /* (n_workers, n_ctx) one row per token of a group */
    float *krow;   /* (n_workers, idx_head_dim) an fp16 key converted */
    float *dots;   /* (n_workers, idx_n_head) one position's q_h . k */
    float *rot;    /* (idx_head_dim, idx_head_dim) Walsh-Hadamard matrix, or NULL */
    float *tmp;    /* (idx_head_dim) a row before its rotation */
    int32_t *sel;  /* (B, top_k) chosen positions, ascending */
    int *n_sel;    /* (B) their count; pos + 1 (all) when not past top_k */
    int *dense;    /* (B) 1: row attends to every position */
    int group;     /* tokens scored per pool job: rows of scores */
} fwd_dsa;

float *forward_hadamard(int n) {
    if (n < 64 || (n & (n - 1)) != 0) return NULL;
    float *h = malloc((size_t)n * (size_t)n * sizeof(float));
    if (!h) return NULL;
    h[0] = (float)(1.0 / sqrtf((float)n));
    for (int sz = 1; sz < n; sz *= 2)
        for (int i = 0; i < sz; i++)
            for (int j = 0; j < sz; j++) {
                const float v = h[i * n + j];
                h[(i + sz) * n + j] = v;
                h[i * n + j + sz] = v;
                h[(i + sz) * n + j + sz] = -v;
            }
    return h;
}

/* The indexer's rotation when its width has one (forward_hadamard). */
static int s_hadamard(fwd_dsa *d, int n) {
    if (n < 64 || (n & (n - 1)) != 0) return 0;
    d->rot = forward_hadamard(n);
    return d->rot ? 0 : COLI_ENOMEM;
}

/* x (n) = rot x, in place through tmp. */
static void s_rotate(const fwd_dsa *d, float *x, int n) {
    memcpy(d->tmp, x, (size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = attn_dot_f32(d->rot + (size_t)i * (size_t)n, d->tmp, n);
}

int forward_dsa_init(forward_state *s) {
    const model_hparams *hp = &s->m->hp;
    if (hp->idx_top_k <= 0) return 0;
    const size_t B = (size_t)s->max_batch, W = (size_t)s->n_workers, K = (size_t)hp->idx_top_k;
    fwd_dsa *d = calloc(1, sizeof *d);
    if (!d) return coli_fail(COLI_ENOMEM, "sparse attention: out of memory");
    s->dsa = d;
    d->group = s->n_workers;
    d->q = malloc(B * (size_t)hp->idx_n_head * (size_t)hp->idx_head_dim * sizeof(float));
    d->k = malloc(B * (size_t)hp->idx_head_dim * sizeof(float));
    d->w = malloc(B * (size_t)hp->idx_n_head * sizeof(float));
    d->scores = malloc(W * (size_t)s->n_ctx * sizeof(float));
    d->krow = malloc(W * (size_t)hp->idx_head_dim * sizeof(float));
    d->dots = malloc(W * (size_t)hp->idx_n_head * sizeof(float));
    d->tmp = malloc((size_t)hp->idx_head_dim * sizeof(float));
    if (d->tmp && s_hadamard(d, hp->idx_head_dim) < 0) return coli_fail(COLI_ENOMEM, "sparse attention: out of memory");
    d->sel = malloc(B * K * sizeof(int32_t));
    d->n_sel = calloc(B, sizeof(int));
    d->dense = calloc(B, sizeof(int));
    if (!d->q || !d->k || !d->w || !d->scores || !d->krow || !d->dots || !d->tmp || !d->sel || !d->n_sel || !d->dense)
        return coli_fail(COLI_ENOMEM, "sparse attention: cannot allocate the indexer's buffers");
    return 0;
}

void forward_dsa_free(forward_state *s) {
    fwd_dsa *d = s->dsa;
    if (!d) return;
    free(d->q);
    free(d->k);
    free(d->w);
    free(d->scores);
    free(d->krow);
    free(d->dots);
    free(d->rot);
    free(d->tmp);
    free(d->sel);
    free(d->n_sel);
    free(d->dense);
    free(d);
    s->dsa = NULL;
}

// ---------------------------------------------------------------------------
// the indexer's queries, keys and weights

/* o = (x - mean) / sqrt(var + eps) * w + b over n values (ggml_norm, then
 * the weight and the bias as separate products; sums in double). */
static void s_layernorm(float *o, const float *x, const float *w, const float *b, int n, float eps) {
    double sum = 0.0, sum2 = 0.0;
    for (int i = 0; i < n; i++) sum += (double)x[i];
    const float mean = (float)(sum / n);
    for (int i = 0; i < n; i++) {
        const float v = x[i] - mean;
        o[i] = v;
        sum2 += (double)(v * v);
    }
    const float scale = 1.0f / sqrtf((float)(sum2 / n) + eps);
    for (int i = 0; i < n; i++) o[i] = o[i] * scale * w[i] + b[i];
}

int forward_dsa_index(forward_state *s, const layer_weights *l, int n) {
    const model_hparams *hp = &s->m->hp;
    fwd_dsa *d = s->dsa;
    const int IH = hp->idx_n_head, ID = hp->idx_head_dim, P = hp->n_rot;
    const size_t KD = (size_t)model_k_dim(hp), LAT = KD - (size_t)ID; /* the latent's part of a row */
    int rc;
    if (!l->idx_wq_b) { /* shared layer: no key of its own; keep the cached rows deterministic */
        for (int t = 0; t < n; t++) memset(s->k + (size_t)t * KD + LAT, 0, (size_t)ID * sizeof(float));
        return 0;
    }
    // k (into the rows' tail) and w share the block input; q from the q latent
    float *kt = d->k;
    const coli_matmul_op ops[2] = {fwd_op_of(l->idx_wk, s->xb, n, kt), fwd_op_of(l->idx_proj, s->xb, n, d->w)};
    if ((rc = coli_matmul_many(s->pool, &s->scratch, ops, 2)) < 0) return rc;
    if ((rc = fwd_matmul(s, l->idx_wq_b, s->mla, n, d->q)) < 0) return rc;
    const float wscale = 1.0f / sqrtf((float)ID * (float)IH);
    for (int t = 0; t < n; t++) {
        const float *cs = s->rope + (size_t)t * (size_t)P;
        float *k = s->k + (size_t)t * KD + LAT;
        s_layernorm(k, kt + (size_t)t * (size_t)ID, (const float *)l->idx_k_norm->data,
                    (const float *)l->idx_k_norm_b->data, ID, hp->idx_norm_eps);
        rope_apply(k, cs, 1, ID, P, hp->idx_neox);
        rope_apply(d->q + (size_t)t * (size_t)IH * (size_t)ID, cs, IH, ID, P, hp->idx_neox);
        if (d->rot) {
            s_rotate(d, k, ID);
            for (int h = 0; h < IH; h++) s_rotate(d, d->q + ((size_t)t * (size_t)IH + (size_t)h) * (size_t)ID, ID);
        }
        for (int h = 0; h < IH; h++) d->w[(size_t)t * (size_t)IH + h] *= wscale;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// scores

typedef struct score_job {
    forward_state *s;
    const fwd_rows *rows;
    int layer, t0, n_tok; /* the group: rows t0 .. t0 + n_tok - 1 */
} score_job;

/* Score of one cached position j for row t (float sums in head order, as
 * ggml's fused lightning indexer); krow, dots: the thread's scratch. */
static float s_score(const forward_state *s, const kv_cache *kv, int layer, int j, int t, float *krow, float *dots) {
    const model_hparams *hp = &s->m->hp;
    const int IH = hp->idx_n_head, ID = hp->idx_head_dim;
    const size_t LAT = (size_t)model_k_dim(hp) - (size_t)ID;
    const float *k;
    if (kv->f16) {
        const float *h2f = kv_fp16_table();
        const uint16_t *k16 = (const uint16_t *)kv_cache_k(kv, layer, j) + LAT;
        for (int d = 0; d < ID; d++) krow[d] = h2f[k16[d]];
        k = krow;
    } else {
        k = (const float *)kv_cache_k(kv, layer, j) + LAT;
    }
    const float *q = s->dsa->q + (size_t)t * (size_t)IH * (size_t)ID, *w = s->dsa->w + (size_t)t * (size_t)IH;
    attn_dots_f32(q, ID, IH, k, ID, dots, 1); /* every head against one key, each load shared */
    float score = 0.0f;
    for (int h = 0; h < IH; h++) score += (dots[h] > 0.0f ? dots[h] : 0.0f) * w[h];
    return score;
}

/* Thread ith of nth scores its share of every sparse row of the group. */
static void s_score_worker(void *arg, int ith, int nth) {
    const score_job *job = arg;
    forward_state *s = job->s;
    fwd_dsa *d = s->dsa;
    float *krow = d->krow + (size_t)ith * (size_t)s->m->hp.idx_head_dim;
    float *dots = d->dots + (size_t)ith * (size_t)s->m->hp.idx_n_head;
    for (int g = 0; g < job->n_tok; g++) {
        const int t = job->t0 + g;
        if (d->dense[t]) continue;
        const int n_kv = fwd_row_pos(job->rows, t) + 1;
        const kv_cache *kv = fwd_row_kv(job->rows, t);
        const int per = (n_kv + nth - 1) / nth, j1 = (ith + 1) * per < n_kv ? (ith + 1) * per : n_kv;
        float *sc = d->scores + (size_t)g * (size_t)s->n_ctx;
        for (int j = ith * per; j < j1; j++) sc[j] = s_score(s, kv, job->layer, j, t, krow, dots);
    }
}

// ---------------------------------------------------------------------------
// top-k: std::partial_sort(idx, idx + k, idx + n, score[a] > score[b]) of
// libstdc++ keeps the k first of a heap scan; the set it keeps on equal
// scores is the heap's, so its steps are reproduced here one for one.

/* comp(a, b) of ggml's top_k: a sorts before b. */
static int s_before(const float *sc, int32_t a, int32_t b) { return sc[a] > sc[b]; }

/* std::__push_heap */
static void s_push_heap(int32_t *h, long hole, long top, int32_t v, const float *sc) {
    long parent = (hole - 1) / 2;
    while (hole > top && s_before(sc, h[parent], v)) {
        h[hole] = h[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    h[hole] = v;
}

/* std::__adjust_heap */
static void s_adjust_heap(int32_t *h, long hole, long len, int32_t v, const float *sc) {
    const long top = hole;
    long child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (s_before(sc, h[child], h[child - 1])) child--;
        h[hole] = h[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    s_push_heap(h, hole, top, v, sc);
}

static int s_cmp_pos(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void forward_dsa_top_k(const float *sc, int n, int k, int32_t *out) {
    for (int i = 0; i < k; i++) out[i] = i;
    if (k >= 2)
        for (long parent = (k - 2) / 2;; parent--) { /* std::__make_heap */
            s_adjust_heap(out, parent, k, out[parent], sc);
            if (parent == 0) break;
        }
    for (int i = k; i < n; i++)
        if (s_before(sc, i, out[0])) s_adjust_heap(out, 0, k, i, sc); /* std::__pop_heap */
    qsort(out, (size_t)k, sizeof *out, s_cmp_pos);
}

static void s_select_worker(void *arg, int ith, int nth) {
    const score_job *job = arg;
    fwd_dsa *d = job->s->dsa;
    const int K = job->s->m->hp.idx_top_k;
    for (int g = ith; g < job->n_tok; g += nth) {
        const int t = job->t0 + g;
        if (!d->dense[t])
            forward_dsa_top_k(d->scores + (size_t)g * (size_t)job->s->n_ctx, d->n_sel[t], K,
                              d->sel + (size_t)t * (size_t)K);
    }
}

int forward_dsa_select(forward_state *s, const layer_weights *l, const fwd_rows *rows, int il, int n) {
    fwd_dsa *d = s->dsa;
    const model_hparams *hp = &s->m->hp;
    if (!l->idx_wq_b) return 0; /* shared layer: the previous full layer's choice */
    int64_t work = 0;
    for (int t = 0; t < n; t++) {
        d->n_sel[t] = fwd_row_pos(rows, t) + 1;
        d->dense[t] = d->n_sel[t] <= hp->idx_top_k;
        if (!d->dense[t]) work += d->n_sel[t];
    }
    if (work == 0) return 0;
    for (int t0 = 0; t0 < n; t0 += d->group) {
        score_job job = {s, rows, il, t0, n - t0 < d->group ? n - t0 : d->group};
        coli_pool_run(s->pool, s_score_worker, &job);
        coli_pool_run(s->pool, s_select_worker, &job);
    }
    for (int t = 0; t < n; t++)
        if (!d->dense[t]) d->n_sel[t] = hp->idx_top_k;
    return 0;
}

const int32_t *forward_dsa_positions(const forward_state *s, int t, int *n_pos) {
    const fwd_dsa *d = s->dsa;
    if (d->dense[t]) return NULL;
    *n_pos = d->n_sel[t];
    return d->sel + (size_t)t * (size_t)s->m->hp.idx_top_k;
}
