/*
 * vecdot_legacy.c - portable dot products of the 32-value block types
 * Q4_1, Q5_0, Q5_1, IQ4_NL with their activation blocks (Q8_1 or Q8_0),
 * and the Q8_1 activation quantizer; see vecdot.h. The arithmetic is
 * llama.cpp's generic ggml_vec_dot_*: exact int32 sums per block, then
 * one float multiply-add per block in block order.
 */
#include <math.h>
#include <string.h>

#include "core/quant/quant.h" /* coli_act_round_i8: llama.cpp's AVX2 rounding */
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

#define HALF(h) coli_fp16_to_fp32(h)

/* llama.cpp's quantize_row_q8_1 (AVX2 branch): d = amax/127, q = round half
 * to even of x * 127/amax, s = d * sum(q); d and s stored as fp16. */
void coli_quantize_act_q8_1(const float *x, block_q8_1 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        float amax = 0.0f;
        for (int j = 0; j < COLI_QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < COLI_QK; j++) {
            y[b].qs[j] = coli_act_round_i8(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].d = coli_fp32_to_fp16(d);
        y[b].s = coli_fp32_to_fp16(d * (float)sum);
    }
}

/* The 5th bits of a Q5 block: bit j belongs to element j. */
static uint32_t s_q5_high_bits(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

float coli_vec_dot_q4_1_q8_1(int64_t n, const void *vw, const void *vx) {
    const block_q4_1 *w = vw;
    const block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < COLI_QK / 2; j++) {
            s0 += (w[b].qs[j] & 0x0f) * x[b].qs[j];
            s1 += (w[b].qs[j] >> 4) * x[b].qs[j + COLI_QK / 2];
        }
        sum += (HALF(w[b].d) * HALF(x[b].d)) * (float)(s0 + s1) + HALF(w[b].m) * HALF(x[b].s);
    }
    return sum;
}

/* The exact integer sum of one Q5_0/Q5_1 block times its Q8 activations:
 * 5-bit quants (low nibble from qs, 5th bit from qh) minus offset (16 for
 * Q5_0's signed form, 0 for Q5_1, whose minimum is added by the caller). */
static int s_q5_block_isum(const uint8_t *qs, const uint8_t qh_bytes[4], const int8_t *xq, int offset) {
    const uint32_t qh = s_q5_high_bits(qh_bytes);
    int s0 = 0, s1 = 0;
    for (int j = 0; j < COLI_QK / 2; j++) {
        const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
        s0 += (((qs[j] & 0x0f) | h0) - offset) * xq[j];
        s1 += (((qs[j] >> 4) | h1) - offset) * xq[j + COLI_QK / 2];
    }
    return s0 + s1;
}

float coli_vec_dot_q5_0_q8_0(int64_t n, const void *vw, const void *vx) {
    const block_q5_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        const int isum = s_q5_block_isum(w[b].qs, w[b].qh, x[b].qs, 16);
        sum += (HALF(w[b].d) * HALF(x[b].d)) * (float)isum;
    }
    return sum;
}

float coli_vec_dot_q5_1_q8_1(int64_t n, const void *vw, const void *vx) {
    const block_q5_1 *w = vw;
    const block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        const int isum = s_q5_block_isum(w[b].qs, w[b].qh, x[b].qs, 0);
        sum += (HALF(w[b].d) * HALF(x[b].d)) * (float)isum + HALF(w[b].m) * HALF(x[b].s);
    }
    return sum;
}

float coli_vec_dot_iq4_nl_q8_0(int64_t n, const void *vw, const void *vx) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < COLI_QK / 2; j++) {
            s0 += coli_kvalues_iq4nl[w[b].qs[j] & 0x0f] * x[b].qs[j];
            s1 += coli_kvalues_iq4nl[w[b].qs[j] >> 4] * x[b].qs[j + COLI_QK / 2];
        }
        sum += (HALF(x[b].d) * HALF(w[b].d)) * (float)(s0 + s1);
    }
    return sum;
}
