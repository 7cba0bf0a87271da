/*
 * quantize_iq.c - weight quantizers of the IQ grid types, guided by an
 * importance matrix as llama-quantize runs them (ggml-quants.c
 * quantize_row_iq2_xxs_impl, quantize_row_iq3_xxs_impl; llama.cpp
 * de3ff815), with the same float operations in the same order:
 *
 * Per 32 values, with weights w = imatrix * sqrt(sigma2 + x^2) (sigma2 the
 * mean square of the 256-value block, twice that for IQ3_XXS):
 *  - magnitudes |x|; in each group of 8 the sign of the least important
 *    value is flipped when the count of negatives is odd (the format keeps
 *    7 sign bits, the 8th is the parity);
 *  - a scale search: for each trial scale the values round to levels
 *    l = round((x / scale - 1) / 2), each group of levels goes to its grid
 *    point or, off the grid, to the nearest neighbour by weighted error;
 *    the trial with the best weighted fit sum(w x q)^2 / sum(w q^2) wins;
 *  - (IQ2_XXS: then every group, IQ3_XXS: the groups that were off the
 *    grid) re-rounded at the winning scale, and the scale refitted;
 *  - the 8 sub-block scales go to 4 bits under one fp16 scale (max / 31;
 *    IQ3_XXS stores it times 1.0125).
 */
#include <math.h>
#include <string.h>

#include "core/quant/quantize_impl.h"
#include "core/quant/quantize_iq_grid.h"
#include "core/quant/quant.h"
#include "core/quant/quantize_rows.h"

/* ggml's GROUP_MAX_EPS_IQ3_XXS */
#define IQ3_GROUP_EPS 1e-8f

static inline int s_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
static inline int s_min(int a, int b) { return a < b ? a : b; }

/* Least-squares fit of the non-negative x to codes 0..nmax under weights w
 * (ggml's make_qp_quants): a scale from max / nmax, tried at 8 neighbouring
 * scales, then up to 5 passes moving single codes while the fit improves.
 * Returns the scale; L the codes. */
static float s_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < COLI_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = nmax / max, scale = 1 / iscale, best_mse = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)coli_nearest_int(iscale * x[i]);
        const float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            const int l = s_min(coli_nearest_int(iscale_is * x[i]), nmax);
            const float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) best_mse = mse, iscale = iscale_is;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = s_min(coli_nearest_int(iscale * x[i]), nmax);
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            const int nl = s_min(coli_nearest_int(x[i] * sl2 / slx), nmax);
            if (nl == L[i]) continue;
            slx += w[i] * x[i] * nl;
            sl2 += w[i] * nl * nl;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)nl, sumlx = slx, suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Magnitudes of n values into xval and n / 8 7-bit sign masks: a group of 8
 * with an odd count of negatives flips its least important value. */
static void s_signs(int n, const float *xb, const float *weight, float *xval, uint8_t *signs) {
    for (int k = 0; k < n / 8; k++) {
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) {
            const float v = xb[8 * k + i];
            xval[8 * k + i] = v >= 0 ? v : -v;
            if (v < 0) nflip++, s |= (uint8_t)(1 << i);
        }
        if (nflip % 2) {
            int imin = 0;
            float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
            for (int i = 1; i < 8; i++) {
                const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if (ax < min) min = ax, imin = i;
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = s & 127;
    }
}

/* Weights of one 32-value sub-block: qw * sqrt(sigma2 + x^2), or x^2
 * without an importance matrix (IQ3_XXS's reference quantizer). */
static void s_weights(int n, const float *xb, const float *qw, float sigma2, float *weight, float *waux) {
    for (int i = 0; i < n; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    for (int i = 0; i < n; i++) waux[i] = sqrtf(weight[i]);
}

static float s_max(int n, const float *x) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = max > x[i] ? max : x[i];
    return max;
}

/* Magnitudes of n values into xval and their sign bits, 8 per byte (the
 * types that keep every sign). */
static void s_all_signs(int n, const float *xb, float *xval, uint8_t *signs) {
    for (int k = 0; k < n / 8; k++) {
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) {
            const float v = xb[8 * k + i];
            xval[8 * k + i] = v >= 0 ? v : -v;
            if (v < 0) s |= (uint8_t)(1 << i);
        }
        signs[k] = s;
    }
}

/* Levels of the n values at inverse scale id (clamped to 0..kmax-1), each
 * group of g->group mapped onto the grid at scale (neighbour search);
 * on_grid[k] says which groups were already on it. */
static void s_round_to_grid(const iq_grid *g, int n, int kmax, float id, float scale, const float *xval,
                            const float *waux, int8_t *L, uint8_t *on_grid) {
    for (int k = 0; k < n / g->group; k++) {
        int8_t *Lk = L + g->group * k;
        for (int i = 0; i < g->group; i++)
            Lk[i] = (int8_t)s_clamp(coli_nearest_int(0.5f * (id * xval[g->group * k + i] - 1)), 0, kmax - 1);
        on_grid[k] = iq_grid_lookup(g, Lk) >= 0;
        iq_grid_point(g, Lk, xval + g->group * k, waux + g->group * k, scale);
    }
}

/* sum w x q and sum w q^2 over n values, q = 2 l + 1. */
static void s_fit_sums(int n, const float *weight, const float *xval, const int8_t *L, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        const float q = 2 * L[i] + 1;
        a += weight[i] * xval[i] * q;
        b += weight[i] * q * q;
    }
    *sumqx = a;
    *sumq2 = b;
}

/* The scale search over trial inverse scales (base + step * is) / max_ref
 * for is in [-n_try, n_try]: L gets the winner's levels, on_grid its
 * groups' state. Returns the scale (init when no trial fits). */
static float s_search(const iq_grid *g, int n, int kmax, float base, float step, int n_try, float max_ref, float init,
                      const float *weight, const float *xval, const float *waux, int8_t *L, uint8_t *on_grid) {
    int8_t Laux[32];
    uint8_t aux_on[8];
    float best = 0, scale = init;
    for (int is = -n_try; is <= n_try; is++) {
        const float id = (base + is * step) / max_ref, this_scale = 1 / id;
        s_round_to_grid(g, n, kmax, id, this_scale, xval, waux, Laux, aux_on);
        float sumqx, sumq2;
        s_fit_sums(n, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, (size_t)n);
            memcpy(on_grid, aux_on, (size_t)(n / g->group));
        }
    }
    return scale;
}

/* Re-round the groups (all, or those off the grid) at scale and refit. */
static float s_refine(const iq_grid *g, int n, int kmax, float scale, int all, const float *weight, const float *xval,
                      const float *waux, int8_t *L, const uint8_t *on_grid) {
    const float id = 1 / scale;
    for (int k = 0; k < n / g->group; k++) {
        if (!all && on_grid[k]) continue;
        int8_t *Lk = L + g->group * k;
        for (int i = 0; i < g->group; i++)
            Lk[i] = (int8_t)s_clamp(coli_nearest_int(0.5f * (id * xval[g->group * k + i] - 1)), 0, kmax - 1);
        iq_grid_point(g, Lk, xval + g->group * k, waux + g->group * k, scale);
    }
    float sumqx, sumq2;
    s_fit_sums(n, weight, xval, L, &sumqx, &sumq2);
    return sumq2 > 0 ? sumqx / sumq2 : scale;
}

static int s_any_off(const uint8_t *on_grid, int n) {
    for (int k = 0; k < n; k++)
        if (!on_grid[k]) return 1;
    return 0;
}

/* The 4-bit sub-block scale of s under the block scale d = max / 31. */
/* ggml's grid fit of one sub-block of n values from its largest value max:
 * the scale search (n_try steps of `step`), the refinement when a point fell
 * off the grid (all: refine every point), and a negative scale folded into
 * the n_sign sign bytes (mask: the bits a sign byte keeps). L gets the grid
 * points; returns the scale, >= 0. */
static float s_fit_grid(const iq_grid *g, int n, int kmax, float step, int n_try, int all, float max,
                        const float *weight, const float *xval, const float *waux, int8_t *L, uint8_t *on_grid,
                        uint8_t *signs, int n_sign, uint8_t mask) {
    float scale =
        s_search(g, n, kmax, 2 * kmax - 1, step, n_try, max, max / (2 * kmax - 1), weight, xval, waux, L, on_grid);
    if (s_any_off(on_grid, n / g->group) && scale > 0)
        scale = s_refine(g, n, kmax, scale, all, weight, xval, waux, L, on_grid);
    if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < n_sign; k++) signs[k] = (uint8_t)(~signs[k] & mask);
    }
    return scale;
}

/* 2 / QK_K (mul 2) or 1 / QK_K (mul 1) times the super-block's sum of squares:
 * the sigma2 of ggml's weights. */
static float s_sigma2(const float *xbl, float mul) {
    float sumx2 = 0;
    for (int i = 0; i < COLI_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    return mul * sumx2 / COLI_QK_K;
}

static uint32_t s_scale4(float id, float s) { return (uint32_t)s_clamp(coli_nearest_int(0.5f * (id * s - 1)), 0, 15); }

// ---------------------------------------------------------------------------
// IQ2_XXS

/* One 32-value sub-block: grid indices and signs into q2[0..1]; returns its
 * scale (0 for an all-zero sub-block). */
static float s_iq2_xxs_sub(const iq_grid *g, const float *xb, const float *qw, float sigma2, uint32_t *q2) {
    const int kmax = 3;
    float weight[32], waux[32], xval[32];
    int8_t L[32];
    uint8_t signs[4], on_grid[8];
    s_weights(32, xb, qw, sigma2, weight, waux);
    s_signs(32, xb, weight, xval, signs);
    if (s_max(32, xval) < COLI_GROUP_EPS) return 0;
    float scale = s_fit_positive(32, kmax + 1, xval, (uint8_t *)L, weight);
    const float eff_max = scale * kmax;
    if (eff_max <= 0) return 0;
    scale = s_search(g, 32, kmax, 2 * kmax - 1, 0.1f, 6, eff_max, scale, weight, xval, waux, L, on_grid);
    if (scale > 0) scale = s_refine(g, 32, kmax, scale, 1, weight, xval, waux, L, on_grid);
    if (scale < 0) { /* never in practice; the stored scale is unsigned */
        scale = -scale;
        for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
    }
    for (int k = 0; k < 4; k++) {
        q2[0] |= (uint32_t)iq_grid_lookup(g, L + 8 * k) << (8 * k);
        q2[1] |= (uint32_t)signs[k] << (7 * k);
    }
    return scale;
}

void coli_quantize_row_iq2_xxs(const float *x, block_iq2_xxs *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_2XXS);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl;
        uint32_t q2[16] = {0};
        float scales[8], max_scale = 0;
        const float sigma2 = s_sigma2(xbl, 1);
        y[ibl].d = coli_fp32_to_fp16(0.0f);
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] =
                s_iq2_xxs_sub(g, xbl + 32 * ib, qw ? qw + COLI_QK_K * ibl + 32 * ib : NULL, sigma2, q2 + 2 * ib);
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale == 0) {
            memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31, id = 1 / d;
        y[ibl].d = coli_fp32_to_fp16(d);
        for (int ib = 0; ib < 8; ib++) q2[2 * ib + 1] |= s_scale4(id, scales[ib]) << 28;
        memcpy(y[ibl].qs, q2, sizeof q2);
    }
}

// ---------------------------------------------------------------------------
// IQ3_XXS

/* One 32-value sub-block: 8 grid indices into idx, the signs word into *ss;
 * returns its scale. */
static float s_iq3_xxs_sub(const iq_grid *g, const float *xb, const float *qw, float sigma2, uint8_t *idx,
                           uint32_t *ss) {
    const int kmax = 8;
    float weight[32], waux[32], xval[32];
    int8_t L[32] = {0};
    uint8_t signs[4], on_grid[8];
    s_weights(32, xb, qw, sigma2, weight, waux);
    s_signs(32, xb, weight, xval, signs);
    const float max = s_max(32, xval);
    if (max < IQ3_GROUP_EPS) return 0;
    memset(on_grid, 1, sizeof on_grid);
    const float scale = s_fit_grid(g, 32, kmax, 0.2f, 15, 0, max, weight, xval, waux, L, on_grid, signs, 4, 127);
    for (int k = 0; k < 8; k++) idx[k] = (uint8_t)iq_grid_lookup(g, L + 4 * k);
    *ss = signs[0] | ((uint32_t)signs[1] << 7) | ((uint32_t)signs[2] << 14) | ((uint32_t)signs[3] << 21);
    return scale;
}

void coli_quantize_row_iq3_xxs(const float *x, block_iq3_xxs *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_3XXS);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl;
        uint8_t q3[3 * COLI_QK_K / 8] = {0};
        uint32_t ss[8] = {0};
        float scales[8], max_scale = 0;
        const float sigma2 = s_sigma2(xbl, 2);
        y[ibl].d = coli_fp32_to_fp16(0.0f);
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] = s_iq3_xxs_sub(g, xbl + 32 * ib, qw ? qw + COLI_QK_K * ibl + 32 * ib : NULL, sigma2,
                                       q3 + 8 * ib, &ss[ib]);
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale == 0) {
            memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31, id = 1 / d;
        y[ibl].d = coli_fp32_to_fp16(d * 1.0125f); /* llama.cpp's fudge factor */
        for (int ib = 0; ib < 8; ib++) ss[ib] |= s_scale4(id, scales[ib]) << 28;
        memcpy(q3 + COLI_QK_K / 4, ss, sizeof ss);
        memcpy(y[ibl].qs, q3, sizeof q3);
    }
}

// ---------------------------------------------------------------------------
// IQ3_S: every sign kept, 512 points with 9-bit indices, d stored x 1.033

/* One 32-value sub-block: 8 9-bit grid indices and 4 sign bytes; returns
 * its scale, or -1 when the sub-block is all zero (nothing written: ggml
 * also skips its pointers there, a layout slip of llama.cpp's that only an
 * all-zero sub-block of 32 shows; we keep every sub-block in its place). */
static float s_iq3_s_sub(const iq_grid *g, const float *xb, const float *qw, float sigma2, uint16_t *idx,
                         uint8_t *signs) {
    const int kmax = 8;
    float weight[32], waux[32], xval[32];
    int8_t L[32] = {0};
    uint8_t on_grid[8] = {0};
    s_weights(32, xb, qw, sigma2, weight, waux);
    s_all_signs(32, xb, xval, signs);
    const float max = s_max(32, xval);
    if (max == 0) return -1;
    const float scale = s_fit_grid(g, 32, kmax, 0.2f, 9, 1, max, weight, xval, waux, L, on_grid, signs, 4, 255);
    for (int k = 0; k < 8; k++) idx[k] = (uint16_t)iq_grid_lookup(g, L + 4 * k);
    return scale;
}

void coli_quantize_row_iq3_s(const float *x, block_iq3_s *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_3S);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl;
        block_iq3_s *b = &y[ibl];
        float scales[8], max_scale = 0;
        memset(b, 0, sizeof *b);
        const float sigma2 = s_sigma2(xbl, 2);
        for (int ib = 0; ib < 8; ib++) {
            uint16_t idx[8];
            uint8_t signs[4];
            scales[ib] = s_iq3_s_sub(g, xbl + 32 * ib, qw ? qw + COLI_QK_K * ibl + 32 * ib : NULL, sigma2, idx, signs);
            if (scales[ib] < 0) {
                scales[ib] = 0;
                continue;
            }
            for (int k = 0; k < 8; k++) {
                b->qs[8 * ib + k] = (uint8_t)(idx[k] & 255);
                b->qh[ib] |= (uint8_t)((idx[k] >> 8) << k);
            }
            memcpy(b->signs + 4 * ib, signs, 4);
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale == 0) continue;
        const float d = max_scale / 31, id = 1 / d;
        b->d = coli_fp32_to_fp16(d * 1.033f);
        for (int ib = 0; ib < 8; ib += 2)
            b->scales[ib / 2] = (uint8_t)(s_scale4(id, scales[ib]) | (s_scale4(id, scales[ib + 1]) << 4));
    }
}

// ---------------------------------------------------------------------------
// IQ2_S: 16-value sub-blocks, every sign kept, 1024 points with 10-bit
// indices, d stored x 0.9875

/* ggml's GROUP_MAX_EPS_IQ2_S */
#define IQ2_S_GROUP_EPS 1e-8f

/* One 16-value sub-block: 2 grid indices and 2 sign bytes; returns its
 * scale, or -1 when it is (near) zero and nothing is written. */
static float s_iq2_s_sub(const iq_grid *g, const float *xb, const float *qw, float sigma2, uint16_t *idx,
                         uint8_t *signs) {
    const int kmax = 3;
    float weight[16], waux[16], xval[16];
    int8_t L[16] = {0};
    uint8_t on_grid[2] = {1, 1};
    if (qw) {
        s_weights(16, xb, qw, sigma2, weight, waux);
    } else { /* ggml's weights without an imatrix */
        for (int i = 0; i < 16; i++) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
        for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
    }
    s_all_signs(16, xb, xval, signs);
    const float max = s_max(16, xval);
    if (max < IQ2_S_GROUP_EPS) return -1;
    const float scale = s_fit_grid(g, 16, kmax, 0.1f, 9, 0, max, weight, xval, waux, L, on_grid, signs, 2, 255);
    for (int k = 0; k < 2; k++) idx[k] = (uint16_t)iq_grid_lookup(g, L + 8 * k);
    return scale;
}

void coli_quantize_row_iq2_s(const float *x, block_iq2_s *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_2S);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl;
        block_iq2_s *b = &y[ibl];
        float scales[16], max_scale = 0;
        memset(b, 0, sizeof *b);
        const float sigma2 = s_sigma2(xbl, 2);
        for (int ib = 0; ib < 16; ib++) {
            uint16_t idx[2];
            uint8_t signs[2];
            scales[ib] = s_iq2_s_sub(g, xbl + 16 * ib, qw ? qw + COLI_QK_K * ibl + 16 * ib : NULL, sigma2, idx, signs);
            if (scales[ib] < 0) {
                scales[ib] = 0;
                continue;
            }
            for (int k = 0; k < 2; k++) {
                const int i8 = 2 * ib + k;
                b->qs[i8] = (uint8_t)(idx[k] & 255);
                b->qh[i8 / 4] |= (uint8_t)((idx[k] >> 8) << (2 * (i8 % 4)));
                b->qs[COLI_QK_K / 8 + i8] = signs[k];
            }
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale == 0) continue;
        const float d = max_scale / 31, id = 1 / d;
        b->d = coli_fp32_to_fp16(d * 0.9875f);
        for (int ib = 0; ib < 16; ib++) b->scales[ib / 2] |= (uint8_t)(s_scale4(id, scales[ib]) << (4 * (ib % 2)));
    }
}

// ---------------------------------------------------------------------------
// IQ2_XS: IQ2_XXS's sign parity on 16-value sub-blocks, 512 points, per 8
// values a 16-bit word (9-bit index, 7 sign bits)

/* One 16-value sub-block: its two words into q2; returns its scale (0 for
 * an all-zero sub-block, nothing written). */
static float s_iq2_xs_sub(const iq_grid *g, const float *xb, const float *qw, float sigma2, uint16_t *q2) {
    const int kmax = 3;
    float weight[16], waux[16], xval[16];
    int8_t L[16] = {0};
    uint8_t signs[2], on_grid[2] = {1, 1};
    s_weights(16, xb, qw, sigma2, weight, waux);
    s_signs(16, xb, weight, xval, signs);
    const float max = s_max(16, xval);
    if (max < COLI_GROUP_EPS) return 0;
    const float scale = s_fit_grid(g, 16, kmax, 0.1f, 9, 0, max, weight, xval, waux, L, on_grid, signs, 2, 127);
    for (int k = 0; k < 2; k++) q2[k] = (uint16_t)(iq_grid_lookup(g, L + 8 * k) | (signs[k] << 9));
    return scale;
}

void coli_quantize_row_iq2_xs(const float *x, block_iq2_xs *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_2XS);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl;
        uint16_t q2[32] = {0};
        float scales[16], max_scale = 0;
        y[ibl].d = coli_fp32_to_fp16(0.0f);
        memset(y[ibl].scales, 0, sizeof y[ibl].scales);
        const float sigma2 = s_sigma2(xbl, 1);
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] =
                s_iq2_xs_sub(g, xbl + 16 * ib, qw ? qw + COLI_QK_K * ibl + 16 * ib : NULL, sigma2, q2 + 2 * ib);
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale == 0) {
            memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31, id = 1 / d;
        y[ibl].d = coli_fp32_to_fp16(d);
        for (int ib = 0; ib < 16; ib++) y[ibl].scales[ib / 2] |= (uint8_t)(s_scale4(id, scales[ib]) << (4 * (ib % 2)));
        memcpy(y[ibl].qs, q2, sizeof q2);
    }
}
