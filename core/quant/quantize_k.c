/*
 * quantize_k.c - K-quant weight quantization (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K):
 * 256-value super-blocks of 16- or 32-value groups, each group with its own
 * quantized scale (and minimum for Q2_K/Q4_K/Q5_K) relative to fp16
 * super-block scales.
 *
 * The algorithms of llama.cpp's quantize_row_q*_K_ref, which llama-quantize
 * runs when it has no importance matrix:
 *  - Q2_K, Q4_K, Q5_K (asymmetric, value = d*sc*q - dmin*m): per group
 *    s_fit_scale_min (ggml's make_qkx2_quants) searches a scale and minimum;
 *    scales and minimums are then quantized against their largest value
 *    (4 bits for Q2_K, 6 bits packed for Q4_K/Q5_K) and the group re-mapped
 *    with the stored ones.
 *  - Q3_K (symmetric, 3 bits): s_fit_signed_iter (make_q3_quants) per 16
 *    values, 6-bit signed group scales against the largest.
 *  - Q6_K (symmetric, 6 bits): s_fit_signed_search (make_qx_quants with
 *    weights x^2) per 16 values, 8-bit group scales.
 * With an importance matrix (qw) each type follows quantize_row_q*_K_impl
 * instead: weights qw sqrt(sigma2 + x^2), finer searches, and the group
 * scales themselves fitted by weighted least squares (s_fit_positive,
 * make_qp_quants; Q3_K: s_fit_signed_search).
 * The float operations keep ggml's order so the bytes match llama-quantize's.
 */
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quantize_impl.h"
#include "core/quant/quantize_rows.h"

static inline int s_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* Value of largest magnitude, sign kept (first on ties); its |.| to *amax. */
static float s_signed_max(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    *amax_out = amax;
    return max;
}

// ----------------------------------------------------------------------------
// group fits

/* Weighted error of x against scale*L + min (|.| if use_mad, else squared). */
static float s_fit_error(const float *x, const float *w, const uint8_t *L, int n, float scale, float min, int use_mad) {
    float err = 0.0f;
    for (int i = 0; i < n; i++) {
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        err += w[i] * diff;
    }
    return err;
}

/* Asymmetric fit of n values to codes 0..nmax (ggml's make_qkx2_quants):
 * start from the range [min(0, min x), max x], then try nstep+1 inverse
 * scales (nmax + rmin + rdelta*is) / range, each with the weighted
 * least-squares scale and minimum of its codes, keeping the smallest error.
 * Returns the scale, writes -minimum to *neg_min and the codes to L. */
static float s_fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                             float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)s_clamp(coli_nearest_int(iscale * (x[i] - min)), 0, nmax);
    float best_error = s_fit_error(x, w, L, n, scale, min, use_mad);
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = s_clamp(coli_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float err = s_fit_error(x, w, Laux, n, this_scale, this_min, use_mad);
        if (err < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Symmetric fit to codes -nmax..nmax-1 with weights x^2 (ggml's
 * make_q3_quants with rmse): round at scale m / -nmax, then up to 5 passes
 * moving single codes while the weighted least-squares fit improves.
 * Codes go to L offset by +nmax; returns the scale (0 for an all-zero group). */
static float s_fit_signed_iter(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = s_signed_max(x, n, &amax);
    if (amax < COLI_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = s_clamp(coli_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            const int new_l = s_clamp(coli_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Sums of the weighted (w = qw, or x^2 without) fit of x at inverse scale
 * iscale; the codes (offset +nmax) go to L when not NULL. Returns
 * sum(w x l), *suml2 sum(w l^2). */
static float s_signed_sums(int n, int nmax, const float *x, const float *qw, float iscale, int8_t *L, float *suml2) {
    float sumlx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = s_clamp(coli_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        if (L) L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        sl2 += w * l * l;
    }
    *suml2 = sl2;
    return sumlx;
}

/* Symmetric fit to codes -nmax..nmax-1 with weights qw, or x^2 without (ggml's
 * make_qx_quants, rmse_type 1): the least-squares scale of the rounding at
 * m / -nmax, then 18 nearby inverse scales -(nmax + 0.1 is) / m, keeping the
 * best fit. Codes to L offset by +nmax; returns the scale. */
static float s_fit_signed_search(int n, int nmax, const float *x, const float *qw, int8_t *L) {
    float amax;
    const float max = s_signed_max(x, n, &amax);
    if (amax < COLI_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float suml2;
    float sumlx = s_signed_sums(n, nmax, x, qw, -nmax / max, L, &suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        const float iscale = -(nmax + 0.1f * is) / max;
        sumlx = s_signed_sums(n, nmax, x, qw, iscale, NULL, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            s_signed_sums(n, nmax, x, qw, iscale, L, &suml2);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Codes 0..nmax of n positive values x under one scale (ggml's
 * make_qp_quants): the best of 9 inverse scales (nmax + 0.1 is) / max by
 * weighted error, then up to 5 passes moving single codes while the
 * least-squares fit improves. Returns that fit's scale. */
static float s_fit_positive(int n, int nmax, const float *x, const float *w, uint8_t *L) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < COLI_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = nmax / max, best = 0;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)coli_nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * L[i];
        best += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            const int l = s_clamp(coli_nearest_int(iscale_is * x[i]), INT32_MIN, nmax);
            const float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best) best = mse, iscale = iscale_is;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = s_clamp(coli_nearest_int(iscale * x[i]), INT32_MIN, nmax);
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            const int l = s_clamp(coli_nearest_int(x[i] * sl2 / slx), INT32_MIN, nmax);
            if (l == L[i]) continue;
            slx += w[i] * x[i] * l;
            sl2 += w[i] * l * l;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)l, sumlx = slx, suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ----------------------------------------------------------------------------
// Q2_K

/* 256 codes of 2 bits: byte l of each 32-byte half holds codes l, l+32,
 * l+64, l+96 of its 128 values in bits 0-1, 2-3, 4-5, 6-7. */
static void s_pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < COLI_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* With an importance matrix (quantize_row_q2_K_impl): per 16 values the
 * weights qw sqrt(sigma2 + x^2) (sigma2 the block's mean square) in the
 * finer scale/min search, then the 4-bit scales and mins by s_fit_positive
 * weighted by the groups' weight sums. */
static void s_q2_K_weighed_scales(const float *x, const float *qw, uint8_t *L, block_q2_K *y) {
    float w[16], sw[COLI_QK_K / 16], mins[COLI_QK_K / 16], scales[COLI_QK_K / 16], sumx2 = 0;
    uint8_t ls[COLI_QK_K / 16], lm[COLI_QK_K / 16];
    for (int j = 0; j < COLI_QK_K; j++) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / COLI_QK_K;
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        sw[j] = 0;
        for (int l = 0; l < 16; l++) w[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        for (int l = 0; l < 16; l++) sw[j] += w[l];
        scales[j] = s_fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, 0);
    }
    y->d = coli_fp32_to_fp16(s_fit_positive(COLI_QK_K / 16, 15, scales, sw, ls));
    y->dmin = coli_fp32_to_fp16(s_fit_positive(COLI_QK_K / 16, 15, mins, sw, lm));
    for (int j = 0; j < COLI_QK_K / 16; j++) y->scales[j] = (uint8_t)(ls[j] | (lm[j] << 4));
}

/* Without one (quantize_row_q2_K_ref): weights |x|, the 4-bit scales and
 * mins against their largest. */
static void s_q2_K_ref_scales(const float *x, uint8_t *L, block_q2_K *y) {
    float w[16], mins[COLI_QK_K / 16], scales[COLI_QK_K / 16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = s_fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    memset(y->scales, 0, sizeof y->scales);
    y->d = coli_fp32_to_fp16(max_scale > 0 ? max_scale / 15.0f : 0.0f);
    y->dmin = coli_fp32_to_fp16(max_min > 0 ? max_min / 15.0f : 0.0f);
    if (max_scale > 0) {
        const float iscale = 15.0f / max_scale;
        for (int j = 0; j < COLI_QK_K / 16; j++) y->scales[j] = (uint8_t)coli_nearest_int(iscale * scales[j]);
    }
    if (max_min > 0) {
        const float iscale = 15.0f / max_min;
        for (int j = 0; j < COLI_QK_K / 16; j++) y->scales[j] |= (uint8_t)(coli_nearest_int(iscale * mins[j]) << 4);
    }
}

static void s_q2_K_block(const float *x, const float *qw, block_q2_K *y) {
    uint8_t L[COLI_QK_K];
    if (qw)
        s_q2_K_weighed_scales(x, qw, L, y);
    else
        s_q2_K_ref_scales(x, L, y);
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        const float d = coli_fp16_to_fp32(y->d) * (y->scales[j] & 0xf);
        if (d == 0.0f) continue;
        const float dm = coli_fp16_to_fp32(y->dmin) * (y->scales[j] >> 4);
        for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)s_clamp(coli_nearest_int((x[16 * j + i] + dm) / d), 0, 3);
    }
    s_pack_2bit(L, y->qs);
}

void coli_quantize_row_q2_K(const float *x, block_q2_K *y, int64_t n, const float *qw) {
    for (int64_t b = 0; b < n / COLI_QK_K; b++) s_q2_K_block(x + b * COLI_QK_K, qw ? qw + b * COLI_QK_K : NULL, &y[b]);
}

// ----------------------------------------------------------------------------
// Q3_K

/* Signed 6-bit scale j (stored +32) of a Q3_K block: low 4 bits in
 * scales[j % 8] (nibble j / 8), high 2 bits in scales[8 + j % 4]. */
static int s_q3_scale(const uint8_t *scales, int j) {
    const int lo = j < 8 ? scales[j] & 0xf : scales[j - 8] >> 4;
    return (lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/* Group j's 6-bit scale code l (0..63) into the packed scales. */
static void s_q3_K_put_scale(block_q3_K *y, int j, int l) {
    if (j < 8)
        y->scales[j] |= (uint8_t)(l & 0xf);
    else
        y->scales[j - 8] |= (uint8_t)((l & 0xf) << 4);
    y->scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
}

/* With an importance matrix (quantize_row_q3_K_impl): per 16 values the
 * weights qw sqrt(sigma2 + x^2) in make_qx_quants, then the 16 group
 * scales themselves by make_qx_quants weighted by the groups' weight sums. */
static void s_q3_K_weighed_scales(const float *x, const float *qw, int8_t *L, block_q3_K *y) {
    float scales[COLI_QK_K / 16], sw[COLI_QK_K / 16], w[16], sumx2 = 0;
    int8_t ls[COLI_QK_K / 16];
    for (int j = 0; j < COLI_QK_K; j++) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / COLI_QK_K;
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        sw[j] = 0;
        for (int l = 0; l < 16; l++) w[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        for (int l = 0; l < 16; l++) sw[j] += w[l];
        scales[j] = s_fit_signed_search(16, 4, x + 16 * j, w, L + 16 * j);
    }
    memset(y->scales, 0, sizeof y->scales);
    const float d = s_fit_signed_search(COLI_QK_K / 16, 32, scales, sw, ls);
    for (int j = 0; j < COLI_QK_K / 16; j++) s_q3_K_put_scale(y, j, ls[j]);
    y->d = coli_fp32_to_fp16(d);
}

static void s_q3_K_pack_scales(const float *scales, float max_scale, block_q3_K *y) {
    memset(y->scales, 0, sizeof y->scales);
    if (max_scale == 0.0f) {
        y->d = coli_fp32_to_fp16(0.0f);
        return;
    }
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        const int l = s_clamp((int8_t)coli_nearest_int(iscale * scales[j]), -32, 31) + 32;
        s_q3_K_put_scale(y, j, l);
    }
    y->d = coli_fp32_to_fp16(1 / iscale);
}

static void s_q3_K_block(const float *x, const float *qw, block_q3_K *y) {
    int8_t L[COLI_QK_K];
    float scales[COLI_QK_K / 16], max_scale = 0, amax = 0;
    for (int j = 0; !qw && j < COLI_QK_K / 16; j++) {
        scales[j] = s_fit_signed_iter(16, 4, x + 16 * j, L + 16 * j);
        if (fabsf(scales[j]) > amax) {
            amax = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    if (qw)
        s_q3_K_weighed_scales(x, qw, L, y);
    else
        s_q3_K_pack_scales(scales, max_scale, y);
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        const float d = coli_fp16_to_fp32(y->d) * s_q3_scale(y->scales, j);
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(s_clamp(coli_nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    /* the high bit of code j goes to hmask[j % 32], bit j / 32 */
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t low[COLI_QK_K];
    for (int j = 0; j < COLI_QK_K; j++) {
        if (L[j] > 3) y->hmask[j % 32] |= (uint8_t)(1u << (j / 32));
        low[j] = (uint8_t)(L[j] > 3 ? L[j] - 4 : L[j]);
    }
    s_pack_2bit(low, y->qs);
}

void coli_quantize_row_q3_K(const float *x, block_q3_K *y, int64_t n, const float *qw) {
    for (int64_t b = 0; b < n / COLI_QK_K; b++) s_q3_K_block(x + b * COLI_QK_K, qw ? qw + b * COLI_QK_K : NULL, &y[b]);
}

// ----------------------------------------------------------------------------
// Q4_K / Q5_K

/* 6-bit scale and minimum of group j of a Q4_K/Q5_K block (ggml's
 * get_scale_min_k4): groups 0-3 in the low 6 bits of bytes j and j+4,
 * groups 4-7 in the nibbles of byte j+4 plus the top 2 bits of j-4 and j. */
static void s_k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The 8 groups of 32 of a Q4_K/Q5_K block fitted: without an importance
 * matrix (llama.cpp's _ref) weights av + |x|, av the group's RMS, and the
 * 6-bit scales/minimums against their largest; with one (_impl) weights
 * qw sqrt(sigma2 + x^2), sigma2 twice the block's mean square, a finer scale
 * search, and the 6-bit codes by s_fit_positive weighted by the groups'
 * weight sums. Codes to ls/lm, the super-scales to *d / *dmin. */
static void s_k4_fit_groups(const float *x, const float *qw, int nmax, uint8_t *L, uint8_t *ls, uint8_t *lm, float *d,
                            float *dmin) {
    float w[32], sw[COLI_QK_K / 32], mins[COLI_QK_K / 32], scales[COLI_QK_K / 32], max_scale = 0, max_min = 0,
                                                                                   sum_x2 = 0;
    for (int l = 0; qw && l < COLI_QK_K; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / COLI_QK_K;
    for (int j = 0; j < COLI_QK_K / 32; j++) {
        const float *xg = x + 32 * j;
        if (qw) {
            sw[j] = 0;
            for (int l = 0; l < 32; l++) w[l] = qw[32 * j + l] * sqrtf(sigma2 + xg[l] * xg[l]);
            for (int l = 0; l < 32; l++) sw[j] += w[l];
            scales[j] = s_fit_scale_min(32, nmax, xg, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, 0);
            continue;
        }
        float sum_g2 = 0;
        for (int l = 0; l < 32; l++) sum_g2 += xg[l] * xg[l];
        const float av_x = sqrtf(sum_g2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xg[l]);
        scales[j] = nmax == 15 ? s_fit_scale_min(32, nmax, xg, w, L + 32 * j, &mins[j], -1.0f, 0.1f, 20, 0)
                               : s_fit_scale_min(32, nmax, xg, w, L + 32 * j, &mins[j], -0.5f, 0.1f, 15, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (qw) {
        *d = s_fit_positive(COLI_QK_K / 32, 63, scales, sw, ls);
        *dmin = s_fit_positive(COLI_QK_K / 32, 63, mins, sw, lm);
        return;
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < COLI_QK_K / 32; j++) {
        ls[j] = (uint8_t)coli_nearest_int(inv_scale * scales[j]);
        lm[j] = (uint8_t)coli_nearest_int(inv_min * mins[j]);
    }
    *d = max_scale / 63.0f;
    *dmin = max_min / 63.0f;
}

/* Fit the block (s_k4_fit_groups), store the 6-bit scales/minimums and the
 * fp16 super-scales, then re-map each group with the stored values: codes
 * 0..nmax to L. */
static void s_k4_fit_block(const float *x, const float *qw, int nmax, uint8_t *L, uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t *packed) {
    uint8_t lss[COLI_QK_K / 32], lms[COLI_QK_K / 32];
    float dd, dm;
    s_k4_fit_groups(x, qw, nmax, L, lss, lms, &dd, &dm);
    memset(packed, 0, COLI_K_SCALE_SIZE);
    for (int j = 0; j < COLI_QK_K / 32; j++) {
        const uint8_t ls = lss[j] > 63 ? 63 : lss[j], lm = lms[j] > 63 ? 63 : lms[j];
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = coli_fp32_to_fp16(dd);
    *dmin_out = coli_fp32_to_fp16(dm);
    for (int j = 0; j < COLI_QK_K / 32; j++) {
        int sc, m;
        s_k4_scale_min(packed, j, &sc, &m);
        const float d = coli_fp16_to_fp32(*d_out) * sc;
        if (d == 0.0f) continue;
        const float dm = coli_fp16_to_fp32(*dmin_out) * m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)s_clamp(coli_nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

void coli_quantize_row_q4_K(const float *x, block_q4_K *y, int64_t n, const float *qw) {
    uint8_t L[COLI_QK_K];
    for (int64_t b = 0; b < n / COLI_QK_K; b++, x += COLI_QK_K) {
        s_k4_fit_block(x, qw ? qw + b * COLI_QK_K : NULL, 15, L, &y[b].d, &y[b].dmin, y[b].scales);
        /* byte l of each 32-byte quarter: code l (low nibble), l+32 (high) of its 64 values */
        for (int j = 0; j < COLI_QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[b].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void coli_quantize_row_q5_K(const float *x, block_q5_K *y, int64_t n, const float *qw) {
    uint8_t L[COLI_QK_K];
    for (int64_t b = 0; b < n / COLI_QK_K; b++, x += COLI_QK_K) {
        s_k4_fit_block(x, qw ? qw + b * COLI_QK_K : NULL, 31, L, &y[b].d, &y[b].dmin, y[b].scales);
        /* low nibbles as Q4_K; the 5th bit of codes l and l+32 of the k-th
         * 64 values in qh[l], bits 2k and 2k+1 */
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int j = 0, k = 0; j < COLI_QK_K; j += 64, k++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[j + l], hi = L[j + l + 32];
                y[b].qh[l] |= (uint8_t)(((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1)));
                y[b].qs[j / 2 + l] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
            }
        }
    }
}

// ----------------------------------------------------------------------------
// Q6_K

/* qw: the block's importance (llama.cpp's quantize_row_q6_K_impl passes it
 * to make_qx_quants as the weights), or NULL */
static void s_q6_K_block(const float *x, const float *qw, block_q6_K *y) {
    int8_t L[COLI_QK_K];
    float scales[COLI_QK_K / 16], max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < COLI_QK_K / 16; ib++) {
        scales[ib] = s_fit_signed_search(16, 32, x + 16 * ib, qw ? qw + 16 * ib : NULL, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs_scale) {
            max_abs_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < COLI_GROUP_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -128.0f / max_scale;
    y->d = coli_fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < COLI_QK_K / 16; ib++) {
        const int s = coli_nearest_int(iscale * scales[ib]);
        y->scales[ib] = (int8_t)(s < 127 ? s : 127);
    }
    for (int j = 0; j < COLI_QK_K / 16; j++) {
        const float d = coli_fp16_to_fp32(y->d) * y->scales[j];
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(s_clamp(coli_nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
    /* per 128 values: ql byte l holds codes l (low) and l+64 (high), byte
     * l+32 codes l+32 and l+96; qh byte l their top 2 bits, 2 per code */
    for (int j = 0; j < COLI_QK_K; j += 128) {
        uint8_t *ql = y->ql + j / 2, *qh = y->qh + j / 4;
        for (int l = 0; l < 32; l++) {
            const uint8_t *c = (const uint8_t *)L + j + l;
            ql[l] = (uint8_t)((c[0] & 0xf) | ((c[64] & 0xf) << 4));
            ql[l + 32] = (uint8_t)((c[32] & 0xf) | ((c[96] & 0xf) << 4));
            qh[l] = (uint8_t)((c[0] >> 4) | ((c[32] >> 4) << 2) | ((c[64] >> 4) << 4) | ((c[96] >> 4) << 6));
        }
    }
}

void coli_quantize_row_q6_K(const float *x, block_q6_K *y, int64_t n, const float *qw) {
    for (int64_t b = 0; b < n / COLI_QK_K; b++) s_q6_K_block(x + b * COLI_QK_K, qw ? qw + b * COLI_QK_K : NULL, &y[b]);
}

float coli_fit_weighted_signed(int n, int nmax, const float *x, const float *w, int8_t *L) {
    return s_fit_signed_search(n, nmax, x, w, L);
}

float coli_fit_weighted_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min) {
    return s_fit_scale_min(n, nmax, x, w, L, neg_min, -0.9f, 0.05f, 36, 0);
}
