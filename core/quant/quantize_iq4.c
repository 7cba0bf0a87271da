/*
 * quantize_iq4.c - IQ4_NL and IQ4_XS weight quantization: 4-bit indices into
 * the 16 non-linear levels coli_kvalues_iq4nl (-127..113), one fp16 scale per
 * 32 values (IQ4_NL), or per 256 values with a 6-bit scale per 32 (IQ4_XS).
 *
 * llama.cpp's quantize_row_iq4_nl_impl as llama-quantize runs it without an
 * importance matrix (weights x^2, ntry 7):
 *  1. per 32-value block, start from d = m / 127 (m the value of largest
 *     magnitude), map each x/d to its nearest level, take the least-squares
 *     scale sum(w q x) / sum(w q^2); then try the 15 scales
 *     m / (level0 + t), t = -7..7, and keep the one with the best fit;
 *  2. IQ4_NL: store that scale, re-map the block with it;
 *     IQ4_XS: super-scale d = -max_scale / 32, each block's scale rounded to
 *     l in [-32, 31] (stored l + 32 as 4 low + 2 high bits), re-map the block
 *     with d * l.
 * With an importance matrix (quantize_iq4_nl / quantize_iq4_xs given one)
 * the weights are qw sqrt(sigma2 + x^2), sigma2 twice the mean square of the
 * super-block (the 32 values for IQ4_NL, 256 for IQ4_XS).
 */
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quantize_impl.h"
#include "core/quant/quantize_rows.h"

#define IQ4_NTRY 7

/* Index of the level nearest to v in the ascending levels[16]; on a tie
 * the upper one (the comparison llama.cpp's best_index_int8 makes). */
static int s_nearest_level(const int8_t *levels, float v) {
    if (v <= levels[0]) return 0;
    if (v >= levels[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < levels[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - levels[hi - 1] < levels[hi] - v ? hi - 1 : hi;
}

/* Weighted fit of the 32 values xb to levels at inverse scale id:
 * returns sum(w q x) and writes sum(w q^2); codes to L when not NULL. */
static float s_fit(const float *xb, const float *w, float id, float *sumq2_out, uint8_t *L) {
    const int8_t *levels = coli_kvalues_iq4nl;
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < COLI_QK; j++) {
        const int l = s_nearest_level(levels, id * xb[j]);
        if (L) L[j] = (uint8_t)l;
        const float q = levels[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    *sumq2_out = sumq2;
    return sumqx;
}

/* Twice the mean square of n values (the imatrix weights' sigma2). */
static float s_sigma2(const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s * (2.f / n);
}

/* Step 1 for one 32-value block: its scale (0 for an all-zero block, whose
 * codes L are then left to the caller's re-mapping); qw NULL: weights x^2. */
static float s_block_scale(const float *xb, const float *qw, float sigma2, uint8_t *L) {
    float w[COLI_QK], amax = 0.0f, max = 0.0f;
    for (int j = 0; j < COLI_QK; j++) {
        w[j] = qw ? qw[j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            max = xb[j];
        }
    }
    if (amax < COLI_GROUP_EPS) return 0.0f;
    const int8_t level0 = coli_kvalues_iq4nl[0];
    float sumq2;
    float sumqx = s_fit(xb, w, 1.0f / (-max / level0), &sumq2, L);
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f, best = d * sumqx;
    for (int t = -IQ4_NTRY; t <= IQ4_NTRY; t++) {
        sumqx = s_fit(xb, w, (float)(t + level0) / max, &sumq2, NULL);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Codes of n values at inverse scale id. */
static void s_map(const float *x, int n, float id, uint8_t *L) {
    for (int j = 0; j < n; j++) L[j] = (uint8_t)s_nearest_level(coli_kvalues_iq4nl, id * x[j]);
}

/* 32 codes into 16 bytes: byte j holds code j (low nibble) and j+16 (high). */
static void s_pack(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < COLI_QK / 2; j++) qs[j] = (uint8_t)(L[j] | (L[j + COLI_QK / 2] << 4));
}

void coli_quantize_row_iq4_nl(const float *x, block_iq4_nl *y, int64_t n, const float *qw) {
    uint8_t L[COLI_QK];
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        const float d = s_block_scale(x, qw ? qw + b * COLI_QK : NULL, qw ? s_sigma2(x, COLI_QK) : 0, L);
        y[b].d = coli_fp32_to_fp16(d);
        s_map(x, COLI_QK, d != 0.0f ? 1.0f / d : 0.0f, L);
        s_pack(L, y[b].qs);
    }
}

/* One IQ4_XS super-block: 8 block scales, then the 6-bit requantization. */
static void s_iq4_xs_block(const float *x, const float *qw, block_iq4_xs *y) {
    enum {
        NSUB = COLI_QK_K / COLI_QK
    };
    float scales[NSUB], max_scale = 0.0f, amax_scale = 0.0f;
    uint8_t L[COLI_QK];
    const float sigma2 = qw ? s_sigma2(x, COLI_QK_K) : 0;
    for (int ib = 0; ib < NSUB; ib++) {
        scales[ib] = s_block_scale(x + ib * COLI_QK, qw ? qw + ib * COLI_QK : NULL, sigma2, L);
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    const float d = -max_scale / 32.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = coli_fp32_to_fp16(d);
    y->scales_h = 0;
    memset(y->scales_l, 0, sizeof y->scales_l);
    for (int ib = 0; ib < NSUB; ib++) {
        int l = coli_nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : (l > 31 ? 31 : l);
        const float dl = d * (float)l;
        s_map(x + ib * COLI_QK, COLI_QK, dl != 0.0f ? 1.0f / dl : 0.0f, L);
        s_pack(L, y->qs + ib * (COLI_QK / 2));
        l += 32;
        y->scales_l[ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
        y->scales_h |= (uint16_t)((l >> 4) << (2 * ib));
    }
}

void coli_quantize_row_iq4_xs(const float *x, block_iq4_xs *y, int64_t n, const float *qw) {
    for (int64_t b = 0; b < n / COLI_QK_K; b++)
        s_iq4_xs_block(x + b * COLI_QK_K, qw ? qw + b * COLI_QK_K : NULL, &y[b]);
}
