/*
 * quantize_legacy.c - Q4_1, Q5_0 and Q5_1 weight quantization (32-value
 * blocks), the rules of llama.cpp's reference quantizers (what
 * llama-quantize runs without an importance matrix):
 *
 *  - Q4_1 / Q5_1: the block's range [min, max] in 15 / 31 steps,
 *    d = (max - min) / steps, q = trunc((x - min) / d + 0.5); value d*q + m.
 *  - Q5_0: like Q4_0 with 5 bits: d = m / -16 where m is the value of
 *    largest magnitude (sign kept), q = min(31, trunc(x / d + 16.5)).
 *
 * The 5th bits of Q5_x go to qh: bit j holds element j's (j < 32), with the
 * low nibbles laid out as Q4_0's (byte j: element j low, element j+16 high).
 *
 * With an importance matrix (llama.cpp's quantize_row_q4_0_impl ..
 * q5_1_impl) each value weighs qw sqrt(sigma2 + x^2), sigma2 the row's mean
 * square: Q4_0 / Q5_0 fit by make_qx_quants, Q4_1 / Q5_1 by
 * make_qkx3_quants (quantize_k.c's fits).
 */
#include <float.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quantize_impl.h"
#include "core/quant/quantize_rows.h"

/* The affine fit of Q4_1 / Q5_1 to one 32-value block: codes 0..levels from the block's
 * smallest value (*min) at step d = (max - min) / levels; stores d and min (fp16) and returns
 * the inverse step (0 for a constant block). */
static float s_block_affine(const float *x, float levels, uint16_t *d_out, uint16_t *m_out, float *min_out) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < COLI_QK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / levels;
    *d_out = coli_fp32_to_fp16(d);
    *m_out = coli_fp32_to_fp16(min);
    *min_out = min;
    return d != 0.0f ? 1.0f / d : 0.0f;
}

/* The value of largest magnitude, sign kept; the first one on ties. */
static float s_block_signed_max(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < COLI_QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* Low nibbles into qs (Q4_0 layout) and the 5th bits into qh, from 32 codes. */
static void s_pack_5bit(const uint8_t *q, uint8_t qs[COLI_QK / 2], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < COLI_QK / 2; j++) {
        const uint8_t lo = q[j], hi = q[j + COLI_QK / 2];
        qs[j] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
        qh |= (uint32_t)((lo & 0x10u) >> 4) << j;
        qh |= (uint32_t)((hi & 0x10u) >> 4) << (j + COLI_QK / 2);
    }
    memcpy(qh_out, &qh, sizeof qh); /* little-endian as ggml stores it */
}

/* The row's mean square, as the imatrix weights use it. */
static float s_row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

static void s_block_weights(const float *xb, const float *qw, float sigma2, float *w) {
    for (int j = 0; j < COLI_QK; j++) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

/* Q4_0 / Q5_0 weighed: symmetric codes 0..2 nmax - 1 of block b to L, d stored. */
static void s_signed_weighed(const float *x, const float *qw, float sigma2, int nmax, uint16_t *d, uint8_t *L) {
    float w[COLI_QK];
    int8_t l[COLI_QK];
    s_block_weights(x, qw, sigma2, w);
    *d = coli_fp32_to_fp16(coli_fit_weighted_signed(COLI_QK, nmax, x, w, l));
    for (int j = 0; j < COLI_QK; j++) L[j] = (uint8_t)l[j];
}

/* Q4_1 / Q5_1 weighed: codes 0..nmax to L, d and m stored. */
static void s_affine_weighed(const float *x, const float *qw, float sigma2, int nmax, uint16_t *d, uint16_t *m,
                             uint8_t *L) {
    float w[COLI_QK], neg_min;
    s_block_weights(x, qw, sigma2, w);
    *d = coli_fp32_to_fp16(coli_fit_weighted_affine(COLI_QK, nmax, x, w, L, &neg_min));
    *m = coli_fp32_to_fp16(-neg_min);
}

void coli_quantize_row_q4_0_imatrix(const float *x, block_q4_0 *y, int64_t n, const float *qw) {
    const float sigma2 = s_row_sigma2(x, n);
    uint8_t L[COLI_QK];
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        s_signed_weighed(x + b * COLI_QK, qw + b * COLI_QK, sigma2, 8, &y[b].d, L);
        for (int j = 0; j < COLI_QK / 2; j++) y[b].qs[j] = (uint8_t)(L[j] | (L[j + COLI_QK / 2] << 4));
    }
}

void coli_quantize_row_q4_1(const float *x, block_q4_1 *y, int64_t n, const float *qw) {
    if (qw) {
        const float sigma2 = s_row_sigma2(x, n);
        uint8_t L[COLI_QK];
        for (int64_t b = 0; b < n / COLI_QK; b++) {
            s_affine_weighed(x + b * COLI_QK, qw + b * COLI_QK, sigma2, 15, &y[b].d, &y[b].m, L);
            for (int j = 0; j < COLI_QK / 2; j++) y[b].qs[j] = (uint8_t)(L[j] | (L[j + COLI_QK / 2] << 4));
        }
        return;
    }
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        float min;
        const float id = s_block_affine(x, 15.0f, &y[b].d, &y[b].m, &min);
        for (int j = 0; j < COLI_QK / 2; j++) {
            const int lo = coli_trunc_clamp((x[j] - min) * id + 0.5f, 15);
            const int hi = coli_trunc_clamp((x[j + COLI_QK / 2] - min) * id + 0.5f, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void coli_quantize_row_q5_0(const float *x, block_q5_0 *y, int64_t n, const float *qw) {
    uint8_t q[COLI_QK];
    if (qw) {
        const float sigma2 = s_row_sigma2(x, n);
        for (int64_t b = 0; b < n / COLI_QK; b++) {
            s_signed_weighed(x + b * COLI_QK, qw + b * COLI_QK, sigma2, 16, &y[b].d, q);
            s_pack_5bit(q, y[b].qs, y[b].qh);
        }
        return;
    }
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        const float d = s_block_signed_max(x) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = coli_fp32_to_fp16(d);
        for (int j = 0; j < COLI_QK; j++) q[j] = (uint8_t)coli_trunc_clamp(x[j] * id + 16.5f, 31);
        s_pack_5bit(q, y[b].qs, y[b].qh);
    }
}

void coli_quantize_row_q5_1(const float *x, block_q5_1 *y, int64_t n, const float *qw) {
    uint8_t q[COLI_QK];
    if (qw) {
        const float sigma2 = s_row_sigma2(x, n);
        for (int64_t b = 0; b < n / COLI_QK; b++) {
            s_affine_weighed(x + b * COLI_QK, qw + b * COLI_QK, sigma2, 31, &y[b].d, &y[b].m, q);
            s_pack_5bit(q, y[b].qs, y[b].qh);
        }
        return;
    }
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        float min;
        const float id = s_block_affine(x, 31.0f, &y[b].d, &y[b].m, &min);
        for (int j = 0; j < COLI_QK; j++) q[j] = (uint8_t)coli_trunc_clamp((x[j] - min) * id + 0.5f, 31);
        s_pack_5bit(q, y[b].qs, y[b].qh);
    }
}
