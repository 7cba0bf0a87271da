/*
 * vecdot_fp4_ternary.c - portable dot products of MXFP4 rows with Q8_0
 * activations and of TQ1_0 / TQ2_0 rows with Q8_K activations (vecdot.h).
 * The arithmetic is ggml's generic ggml_vec_dot_*: exact int32 sums per
 * block (32 values for MXFP4, 256 for the ternary types), then one float
 * multiply and add per block in block order; test_vecdot_legacy checks the
 * bits against ggml's recorded results.
 */
#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

float coli_vec_dot_mxfp4_q8_0(int64_t n, const void *vw, const void *vx) {
    const block_mxfp4 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        const float d = coli_fp16_to_fp32(x[b].d) * coli_e8m0_half(w[b].e);
        int s = 0;
        for (int j = 0; j < COLI_QK / 2; j++)
            s += coli_kvalues_mxfp4[w[b].qs[j] & 0x0f] * x[b].qs[j] +
                 coli_kvalues_mxfp4[w[b].qs[j] >> 4] * x[b].qs[j + COLI_QK / 2];
        sum += d * (float)s;
    }
    return sum;
}

/* sum of trit * activation over len bytes of `trits` trits each, in the
 * block's order (quant_blocks.h); x the activations of the run's values */
static int s_tq1_run(const uint8_t *b, int len, int trits, const int8_t *x) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    int s = 0;
    for (int k = 0; k < trits; k++)
        for (int m = 0; m < len; m++) {
            const uint8_t q = (uint8_t)(b[m] * pow3[k]);
            s += ((((uint16_t)q * 3) >> 8) - 1) * x[k * len + m];
        }
    return s;
}

static int s_tq1_isum(const block_tq1_0 *w, const int8_t *x) {
    return s_tq1_run(w->qs, 32, 5, x) + s_tq1_run(w->qs + 32, 16, 5, x + 160) + s_tq1_run(w->qh, 4, 4, x + 240);
}

float coli_vec_dot_tq1_0_q8_K(int64_t n, const void *vw, const void *vx) {
    const block_tq1_0 *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++)
        sum += (float)s_tq1_isum(&w[b], x[b].qs) * (coli_fp16_to_fp32(w[b].d) * x[b].d);
    return sum;
}

float coli_vec_dot_tq2_0_q8_K(int64_t n, const void *vw, const void *vx) {
    const block_tq2_0 *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++) {
        int s = 0;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++)
                    s += (((w[b].qs[32 * c + m] >> (2 * k)) & 3) - 1) * x[b].qs[128 * c + 32 * k + m];
        sum += (float)s * (x[b].d * coli_fp16_to_fp32(w[b].d));
    }
    return sum;
}
