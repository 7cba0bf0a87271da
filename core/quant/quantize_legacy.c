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

void coli_quantize_row_q4_1(const float *x, block_q4_1 *y, int64_t n) {
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

void coli_quantize_row_q5_0(const float *x, block_q5_0 *y, int64_t n) {
    uint8_t q[COLI_QK];
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        const float d = s_block_signed_max(x) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = coli_fp32_to_fp16(d);
        for (int j = 0; j < COLI_QK; j++) q[j] = (uint8_t)coli_trunc_clamp(x[j] * id + 16.5f, 31);
        s_pack_5bit(q, y[b].qs, y[b].qh);
    }
}

void coli_quantize_row_q5_1(const float *x, block_q5_1 *y, int64_t n) {
    uint8_t q[COLI_QK];
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        float min;
        const float id = s_block_affine(x, 31.0f, &y[b].d, &y[b].m, &min);
        for (int j = 0; j < COLI_QK; j++) q[j] = (uint8_t)coli_trunc_clamp((x[j] - min) * id + 0.5f, 31);
        s_pack_5bit(q, y[b].qs, y[b].qh);
    }
}
