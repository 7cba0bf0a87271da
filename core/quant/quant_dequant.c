/*
 * quant_dequant.c - dequantization of the block types of quant_blocks.h
 * (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and the 256-value K-quants, IQ4_XS,
 * TQ1_0 and TQ2_0), value
 * for value as ggml's dequantize_row_* (ggml-quants.c) computes them: the
 * same unpacking of nibbles, high bits and packed 6-bit scales, the same
 * float expressions. coli_dequantize_row (quant.c) dispatches here.
 */
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"

#define HALF(h) coli_fp16_to_fp32(h)

// ----------------------------------------------------------------------------
// 32-value blocks

/* Byte j of qs holds element j (low nibble) and element j+16 (high). */
static void s_dequant_q4_1(const block_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += COLI_QK) {
        const float d = HALF(x[i].d), m = HALF(x[i].m);
        for (int j = 0; j < COLI_QK / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0f) * d + m;
            y[j + COLI_QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* qh (little-endian 32 bits): bit j is the 5th bit of element j. */
static uint32_t s_load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void s_dequant_q5_0(const block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += COLI_QK) {
        const float d = HALF(x[i].d);
        const uint32_t qh = s_load_qh(x[i].qh);
        for (int j = 0; j < COLI_QK / 2; j++) {
            const uint8_t h0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t h1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            y[j] = (float)(((x[i].qs[j] & 0x0f) | h0) - 16) * d;
            y[j + COLI_QK / 2] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void s_dequant_q5_1(const block_q5_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += COLI_QK) {
        const float d = HALF(x[i].d), m = HALF(x[i].m);
        const uint32_t qh = s_load_qh(x[i].qh);
        for (int j = 0; j < COLI_QK / 2; j++) {
            const uint8_t h0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t h1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            y[j] = (float)((x[i].qs[j] & 0x0f) | h0) * d + m;
            y[j + COLI_QK / 2] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void s_dequant_iq4_nl(const block_iq4_nl *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += COLI_QK) {
        const float d = HALF(x[i].d);
        for (int j = 0; j < COLI_QK / 2; j++) {
            y[j] = d * (float)coli_kvalues_iq4nl[x[i].qs[j] & 0x0f];
            y[j + COLI_QK / 2] = d * (float)coli_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

// ----------------------------------------------------------------------------
// 256-value super-blocks

/* Q2_K: 16 sub-blocks of 16; scales[k] low nibble = scale, high = min.
 * Each 32-byte group of qs serves 128 values, 2 bits at shifts 0,2,4,6. */
static void s_dequant_q2_K(const block_q2_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d), dmin = HALF(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n = 0; n < COLI_QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K's 16 6-bit scales: low 4 bits in bytes 0..7 (two per byte), high 2
 * bits in bytes 8..11; as ggml's kmask1/kmask2 unpacking. Returns s - 32. */
static void s_q3_K_scales(const uint8_t packed[12], int8_t out[16]) {
    for (int k = 0; k < 16; k++) {
        const int low = (k < 8 ? packed[k] : packed[k - 8] >> 4) & 0x0f;
        const int high = (packed[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
        out[k] = (int8_t)((low | high << 4) - 32);
    }
}

/* Q3_K: as Q2_K's layout of 2-bit values, plus hmask: bit b of hmask[l]
 * set means the value is q, clear means q - 4 (b = the 2-bit group). */
static void s_dequant_q3_K(const block_q3_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d_all = HALF(x[i].d);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        int8_t scales[16];
        s_q3_K_scales(x[i].scales, scales);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < COLI_QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (float)scales[is++];
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (float)((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

/* ggml's get_scale_min_k4: scale and min j (0..7) of Q4_K/Q5_K's 12 bytes. */
static void s_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K: 8 sub-blocks of 32; each 32-byte group of qs holds sub-block 2k
 * in its low nibbles and 2k+1 in its high nibbles. value = d*sc*q - dmin*m. */
static void s_dequant_q4_K(const block_q4_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d), dmin = HALF(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, mn;
            s_scale_min_k4(is, x[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            s_scale_min_k4(is + 1, x[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: Q4_K plus qh: bit 2k of qh[l] is the 5th bit of sub-block 2k's
 * value l, bit 2k+1 that of sub-block 2k+1. */
static void s_dequant_q5_K(const block_q5_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d), dmin = HALF(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 = (uint8_t)(u1 << 2), u2 = (uint8_t)(u2 << 2)) {
            uint8_t sc, mn;
            s_scale_min_k4(is, x[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            s_scale_min_k4(is + 1, x[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K: per 128 values, 64 bytes of ql (low 4 bits) and 32 of qh (2 high
 * bits each for 4 values); 16 int8 scales, one per 16 values. */
static void s_dequant_q6_K(const block_q6_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < COLI_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l,
 * high 2 in scales_h), values from the IQ4_NL table as in IQ4_NL blocks. */
static void s_dequant_iq4_xs(const block_iq4_xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < COLI_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0x0f) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)coli_kvalues_iq4nl[qs[j] & 0x0f];
                y[j + 16] = dl * (float)coli_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// MXFP4 and the ternary types

static void s_dequant_mxfp4(const block_mxfp4 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += COLI_QK) {
        const float d = coli_e8m0_half(x[i].e); /* the levels are doubled */
        for (int j = 0; j < COLI_QK / 2; j++) {
            y[j] = (float)coli_kvalues_mxfp4[x[i].qs[j] & 0x0f] * d;
            y[j + COLI_QK / 2] = (float)coli_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

/* Trit k (0 = most significant) of a TQ1_0 byte, as -1, 0 or 1: the byte
 * is ceil(N * 256 / 243) of the 5-digit base-3 number N, so multiplying by
 * 3^k modulo 256 brings digit k to the top, where * 3 >> 8 reads it. */
static int s_tq1_trit(uint8_t b, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(b * pow3[k]);
    return (((uint16_t)q * 3) >> 8) - 1;
}

/* len bytes of `trits` trits each, trit-major (all bytes' first trit,
 * then all second ones: the block's order, quant_blocks.h). */
static float *s_tq1_run(const uint8_t *b, int len, int trits, float d, float *y) {
    for (int k = 0; k < trits; k++)
        for (int m = 0; m < len; m++) *y++ = (float)s_tq1_trit(b[m], k) * d;
    return y;
}

static void s_dequant_tq1_0(const block_tq1_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d);
        y = s_tq1_run(x[i].qs, 32, 5, d, y);
        y = s_tq1_run(x[i].qs + 32, 16, 5, d, y);
        y = s_tq1_run(x[i].qh, 4, 4, d, y);
    }
}

static void s_dequant_tq2_0(const block_tq2_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = HALF(x[i].d);
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++) *y++ = (float)(((x[i].qs[32 * c + m] >> (2 * k)) & 3) - 1) * d;
    }
}

int coli_dequantize_row_blocks(coli_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case COLI_Q4_1: s_dequant_q4_1(src, dst, n / COLI_QK); return 0;
    case COLI_Q5_0: s_dequant_q5_0(src, dst, n / COLI_QK); return 0;
    case COLI_Q5_1: s_dequant_q5_1(src, dst, n / COLI_QK); return 0;
    case COLI_IQ4_NL: s_dequant_iq4_nl(src, dst, n / COLI_QK); return 0;
    case COLI_Q2_K: s_dequant_q2_K(src, dst, n / COLI_QK_K); return 0;
    case COLI_Q3_K: s_dequant_q3_K(src, dst, n / COLI_QK_K); return 0;
    case COLI_Q4_K: s_dequant_q4_K(src, dst, n / COLI_QK_K); return 0;
    case COLI_Q5_K: s_dequant_q5_K(src, dst, n / COLI_QK_K); return 0;
    case COLI_Q6_K: s_dequant_q6_K(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ4_XS: s_dequant_iq4_xs(src, dst, n / COLI_QK_K); return 0;
    case COLI_TQ1_0: s_dequant_tq1_0(src, dst, n / COLI_QK_K); return 0;
    case COLI_TQ2_0: s_dequant_tq2_0(src, dst, n / COLI_QK_K); return 0;
    case COLI_MXFP4: s_dequant_mxfp4(src, dst, n / COLI_QK); return 0;
    default: return coli_dequantize_row_iq(t, src, dst, n);
    }
}
