/*
 * forward_kimi.c - what kimi-k3 adds around the blocks of forward.c
 * (llama.cpp's kimi-k3.cpp, as loops): the cross-layer residual attention
 * and the projections of its latent MoE. Its KDA layers are in
 * forward_hybrid.c, its gated latent attention in forward_mla.c, its situ
 * activation in core/kernels/expert_ffn.c.
 *
 * Residual attention, per row: a stack of checkpoints c_1..c_m (the raw
 * residual stream h at every attn_res.block_size-th layer's input). Each
 * sub-block (attention, FFN, the output norm) reads, instead of h,
 *
 *   s_j = sum(rmsnorm(c_j) * w),  s_h = sum(rmsnorm(h) * w)   (w: its score)
 *   p = softmax(s_1..s_m, s_h),   x = sum_j p_j c_j + p_h h
 *
 * (x = h while the stack is empty). A layer that banks h restarts the
 * stream: h = its attention output (not h + it).
 *
 * Latent MoE: the routed experts take routed_down x (expert_latent_length
 * wide); their weighted sum is normalised (routed_norm) and projected back
 * by routed_up; the router and the shared experts read the full-width x.
 * The executors see plain experts of the latent width, so workers and
 * in-process give the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "coordinator/forward_impl.h"
#include "core/error.h"

struct fwd_kimi {
    float *stack; /* (max_ckpt, B, E) banked residual streams */
    int n_ckpt, max_ckpt;
    float *mix;        /* (B, E) the current sub-block's input */
    float *scores;     /* (max_ckpt + 1) one row's scores, then weights */
    float *row;        /* (E) one normalised row */
    float *lat, *lat2; /* (B, latent) expert inputs; the normalised sum */
};

int forward_kimi_init(forward_state *s) {
    const model_hparams *hp = &s->m->hp;
    if (hp->arch != ARCH_KIMI_K3) return 0;
    const size_t B = (size_t)s->max_batch, E = (size_t)hp->n_embd, W = (size_t)hp->n_embd_latent;
    struct fwd_kimi *k = calloc(1, sizeof *k);
    if (!k) return COLI_ENOMEM;
    s->kimi = k;
    k->max_ckpt = hp->attn_res_bs > 0 ? (hp->n_layer + hp->attn_res_bs - 1) / hp->attn_res_bs : 0;
    k->stack = malloc(((size_t)k->max_ckpt + 1) * B * E * sizeof(float));
    k->mix = malloc(B * E * sizeof(float));
    k->scores = malloc(((size_t)k->max_ckpt + 1) * sizeof(float));
    k->row = malloc(E * sizeof(float));
    k->lat = malloc((B * W + 1) * sizeof(float));
    k->lat2 = malloc((B * W + 1) * sizeof(float));
    if (!k->stack || !k->mix || !k->scores || !k->row || !k->lat || !k->lat2) return COLI_ENOMEM;
    return 0;
}

void forward_kimi_free(forward_state *s) {
    struct fwd_kimi *k = s->kimi;
    if (!k) return;
    free(k->stack);
    free(k->mix);
    free(k->scores);
    free(k->row);
    free(k->lat);
    free(k->lat2);
    free(k);
    s->kimi = NULL;
}

void forward_kimi_begin(forward_state *s) {
    if (s->kimi) s->kimi->n_ckpt = 0;
    s->res_in = NULL;
}

/* sum(rmsnorm(x) * w), the sum in double as ggml's sum_rows. */
static float s_score(struct fwd_kimi *k, const float *x, const coli_tensor *w, int64_t E, float eps) {
    double sum = 0.0;
    fwd_rmsnorm_rows(k->row, x, w, 1, E, eps);
    for (int64_t i = 0; i < E; i++) sum += (double)k->row[i];
    return (float)sum;
}

/* Row t of the mix: the checkpoints in order (one float sum, ggml's
 * dsv4_hc_pre), then + h p_h. */
static void s_mix_row(struct fwd_kimi *k, const float *h, const coli_tensor *w, int t, int B, int64_t E, float eps) {
    const int m = k->n_ckpt;
    const size_t plane = (size_t)B * (size_t)E, off = (size_t)t * (size_t)E;
    for (int j = 0; j < m; j++) k->scores[j] = s_score(k, k->stack + (size_t)j * plane + off, w, E, eps);
    k->scores[m] = s_score(k, h + off, w, E, eps);
    fwd_softmax(k->scores, m + 1);
    for (int64_t i = 0; i < E; i++) {
        float sum = 0.0f;
        for (int j = 0; j < m; j++) sum += k->stack[(size_t)j * plane + off + (size_t)i] * k->scores[j];
        k->mix[off + (size_t)i] = sum + h[off + (size_t)i] * k->scores[m];
    }
}

void forward_kimi_mix(forward_state *s, const coli_tensor *score, int n, int bank) {
    struct fwd_kimi *k = s->kimi;
    const model_hparams *hp = &s->m->hp;
    const int64_t E = hp->n_embd;
    const size_t rows = (size_t)n * (size_t)E;
    if (!k || hp->attn_res_bs <= 0) return;
    if (k->n_ckpt == 0)
        memcpy(k->mix, s->h, rows * sizeof(float));
    else
        for (int t = 0; t < n; t++) s_mix_row(k, s->h, score, t, s->max_batch, E, hp->rms_eps);
    s->res_in = k->mix;
    if (!bank || k->n_ckpt >= k->max_ckpt) return;
    // bank the raw stream; the sub-block's output then starts it afresh
    memcpy(k->stack + (size_t)k->n_ckpt * (size_t)s->max_batch * (size_t)E, s->h, rows * sizeof(float));
    k->n_ckpt++;
    memset(s->h, 0, rows * sizeof(float));
}

const float *forward_kimi_latent_in(forward_state *s, const layer_weights *l, int n, int *rc) {
    *rc = fwd_matmul(s, l->routed_down, s->xb, n, s->kimi->lat);
    return *rc < 0 ? NULL : s->kimi->lat;
}

int forward_kimi_latent_out(forward_state *s, const layer_weights *l, int n) {
    const model_hparams *hp = &s->m->hp;
    const int64_t W = hp->n_embd_latent;
    float *x = s->kimi->lat2;
    if (l->routed_norm)
        fwd_rmsnorm_rows(x, s->delta, l->routed_norm, n, W, hp->rms_eps);
    else
        memcpy(x, s->delta, (size_t)n * (size_t)W * sizeof(float));
    return fwd_matmul(s, l->routed_up, x, n, s->delta);
}
