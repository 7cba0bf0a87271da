/*
 * vecdot_k.c - portable dot products of K-quant and IQ4_XS weight rows with
 * Q8_K activation rows, and the Q8_K activation quantizer (vecdot.h).
 *
 * The math is ggml's reference (generic) ggml_vec_dot_*_q8_K: per 256-value
 * super-block, an exact integer sum of weight quant x activation quant over
 * each sub-block, weighted by the sub-block's integer scale; the sub-block
 * minimums of Q2_K/Q4_K/Q5_K (and the constant offsets of Q3_K/Q6_K, which
 * ggml folds into the quants) are applied through Q8_K's bsums, the sums of
 * each 16 activation quants. One float step per super-block:
 *   sum += fp16(w.d) * x.d * isum - fp16(w.dmin) * x.d * msum.
 * Every integer sum fits int32 (worst case Q5_K: 31*128*32*63*8 < 2^27).
 */
#include <math.h>
#include <string.h>

#include "core/cpu_features.h"
#include "core/kernels/vecdot.h"
#include "core/kernels/vecdot_k_impl.h"

#define QK_K COLI_QK_K

/* ggml's s_nearest_int: round half to even by adding 1.5 * 2^23, valid for
 * |v| < 2^22 (here |v| <= 127.5). Same bits as llama.cpp for every finite
 * v. NaN (from NaN or Inf inputs) gives 0 here: what ggml's reference gives
 * for the default quiet NaN (its result depends on the NaN's payload), and
 * what the AVX2 quantizer (which zeroes NaN lanes) and the GPU plugin write,
 * so every path holds the same bytes.
 * (If this file were built with FMA enabled, the compiler could fuse the
 * caller's product into the add and round ties differently in rare cases;
 * the default x86-64 build has no FMA here.) */
static int s_nearest_int(float v) {
    if (v != v) return 0;
    float shifted = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* max |x| of a block, NaN ignored (never compares greater); 8 running
 * maxima, not one, so the compare-select chain is not the bottleneck */
static float s_block_amax(const float *x) {
    float part[8] = {0};
    for (int j = 0; j < QK_K; j += 8)
        for (int k = 0; k < 8; k++) {
            float ax = fabsf(x[j + k]);
            part[k] = ax > part[k] ? ax : part[k];
        }
    float amax = 0.0f;
    for (int k = 0; k < 8; k++) amax = part[k] > amax ? part[k] : amax;
    return amax;
}

/* the first value with |x| == amax: the one ggml's single running max
 * keeps (it replaces only on strictly greater) */
static float s_first_with_magnitude(const float *x, float amax) {
    for (int j = 0; j < QK_K; j++)
        if (fabsf(x[j]) == amax) return x[j];
    return 0.0f; /* not reached: amax is one of the |x| */
}

/* llama.cpp's quantize_row_q8_K_ref: per block, max = the value of largest
 * magnitude (the first one, sign kept); it maps to -127: iscale = -127/max
 * (not -128: llama.cpp changed it "for IQ2_XXS", and its K-quant results
 * follow), q = s_nearest_int(iscale * x) capped at 127, d = 1/iscale; bsums
 * = sums of each 16 q. An all-zero block gets d = 0, q = 0, bsums = 0. */
void coli_quantize_act_q8_K_portable(const float *restrict x, block_q8_K *restrict y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        block_q8_K *out = &y[b];
        const float amax = s_block_amax(x);
        if (amax == 0.0f) {
            memset(out, 0, sizeof *out);
            continue;
        }
        const float iscale = -127.0f / s_first_with_magnitude(x, amax);
        for (int j = 0; j < QK_K; j++) {
            int q = s_nearest_int(iscale * x[j]);
            out->qs[j] = (int8_t)(q < 127 ? q : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += out->qs[16 * g + l];
            out->bsums[g] = (int16_t)sum;
        }
        out->d = 1.0f / iscale;
    }
}

void coli_quantize_act_q8_K(const float *x, block_q8_K *y, int64_t n) {
    if (coli_cpu_avx2())
        coli_quantize_act_q8_K_avx2(x, y, n);
    else
        coli_quantize_act_q8_K_portable(x, y, n);
}

/* sum of q8[l] * q[l] over l < len, q unsigned (already unpacked) */
static int32_t s_dot_u8_s8(const uint8_t *q, const int8_t *q8, int len) {
    int32_t s = 0;
    for (int l = 0; l < len; l++) s += (int32_t)q[l] * q8[l];
    return s;
}

/* sum over sub-blocks s of mins[s] * (sum of their activation quants); a
 * sub-block of size 16 * per is `per` consecutive bsums */
static int32_t s_mins_dot_bsums(const uint8_t *mins, int n_sub, const int16_t *bsums, int per) {
    int32_t s = 0;
    for (int i = 0; i < n_sub; i++)
        for (int k = 0; k < per; k++) s += (int32_t)mins[i] * bsums[per * i + k];
    return s;
}

/* Q2_K: 16 sub-blocks of 16; value = d*(sc&15)*q - dmin*(sc>>4), q 2 bits.
 * In each half (128 values) byte l of the 32 qs bytes holds values
 * l, 32+l, 64+l, 96+l at bit 0, 2, 4, 6. */
float coli_vec_dot_q2_K_q8_K(int64_t n, const void *w, const void *x) {
    const block_q2_K *wb = w;
    const block_q8_K *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const int8_t *q8 = xb[b].qs;
        uint8_t q[32], mins[16];
        int32_t isum = 0;
        for (int s = 0; s < 16; s++) mins[s] = wb[b].scales[s] >> 4;
        for (int half = 0; half < 2; half++) {
            const uint8_t *qs = wb[b].qs + 32 * half;
            for (int k = 0; k < 4; k++, q8 += 32) {
                const uint8_t *sc = wb[b].scales + 8 * half + 2 * k;
                for (int l = 0; l < 32; l++) q[l] = (qs[l] >> (2 * k)) & 3;
                isum += (sc[0] & 15) * s_dot_u8_s8(q, q8, 16) + (sc[1] & 15) * s_dot_u8_s8(q + 16, q8 + 16, 16);
            }
        }
        int32_t msum = s_mins_dot_bsums(mins, 16, xb[b].bsums, 1);
        float d = coli_fp16_to_fp32(wb[b].d) * xb[b].d, dmin = coli_fp16_to_fp32(wb[b].dmin) * xb[b].d;
        sum += d * (float)isum - dmin * (float)msum;
    }
    return sum;
}

/* Q3_K: 16 sub-blocks of 16; value = d*sc*(q - 4*(1 - h)), q the 2 low bits
 * (laid out as Q2_K's), h bit half*4 + k of hmask[l] for value
 * 128*half + 32*k + l. Computed as d*sc*(q + 4h) - 4*d*sc via bsums. */
float coli_vec_dot_q3_K_q8_K(int64_t n, const void *w, const void *x) {
    const block_q3_K *wb = w;
    const block_q8_K *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const int8_t *q8 = xb[b].qs;
        int8_t sc[16];
        uint8_t q[32];
        int32_t isum = 0, offset = 0;
        coli_q3k_scales(wb[b].scales, sc);
        for (int half = 0; half < 2; half++) {
            const uint8_t *qs = wb[b].qs + 32 * half;
            for (int k = 0; k < 4; k++, q8 += 32) {
                int hbit = 4 * half + k, s = 8 * half + 2 * k;
                for (int l = 0; l < 32; l++)
                    q[l] = (uint8_t)(((qs[l] >> (2 * k)) & 3) | (((wb[b].hmask[l] >> hbit) & 1) << 2));
                isum += sc[s] * s_dot_u8_s8(q, q8, 16) + sc[s + 1] * s_dot_u8_s8(q + 16, q8 + 16, 16);
            }
        }
        for (int s = 0; s < 16; s++) offset += sc[s] * xb[b].bsums[s];
        sum += coli_fp16_to_fp32(wb[b].d) * xb[b].d * (float)(isum - 4 * offset);
    }
    return sum;
}

/* Q4_K: 8 sub-blocks of 32; value = d*sc*q - dmin*m, q 4 bits. Per 64
 * values, 32 qs bytes: low nibbles are sub-block 2j, high ones 2j+1. */
float coli_vec_dot_q4_K_q8_K(int64_t n, const void *w, const void *x) {
    const block_q4_K *wb = w;
    const block_q8_K *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const int8_t *q8 = xb[b].qs;
        const uint8_t *qs = wb[b].qs;
        uint8_t sm[16], lo[32], hi[32];
        int32_t isum = 0;
        coli_q4k_scales_mins(wb[b].scales, sm);
        for (int j = 0; j < 4; j++, qs += 32, q8 += 64) {
            for (int l = 0; l < 32; l++) {
                lo[l] = qs[l] & 15;
                hi[l] = qs[l] >> 4;
            }
            isum += sm[2 * j] * s_dot_u8_s8(lo, q8, 32) + sm[2 * j + 1] * s_dot_u8_s8(hi, q8 + 32, 32);
        }
        int32_t msum = s_mins_dot_bsums(sm + 8, 8, xb[b].bsums, 2);
        float d = coli_fp16_to_fp32(wb[b].d) * xb[b].d, dmin = coli_fp16_to_fp32(wb[b].dmin) * xb[b].d;
        sum += d * (float)isum - dmin * (float)msum;
    }
    return sum;
}

/* Q5_K: Q4_K plus a 5th bit: for value 64*j + l (l < 32) bit 2j of qh[l],
 * for 64*j + 32 + l bit 2j+1. */
float coli_vec_dot_q5_K_q8_K(int64_t n, const void *w, const void *x) {
    const block_q5_K *wb = w;
    const block_q8_K *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const int8_t *q8 = xb[b].qs;
        const uint8_t *qs = wb[b].qs, *qh = wb[b].qh;
        uint8_t sm[16], lo[32], hi[32];
        int32_t isum = 0;
        coli_q4k_scales_mins(wb[b].scales, sm);
        for (int j = 0; j < 4; j++, qs += 32, q8 += 64) {
            for (int l = 0; l < 32; l++) {
                lo[l] = (uint8_t)((qs[l] & 15) | (((qh[l] >> (2 * j)) & 1) << 4));
                hi[l] = (uint8_t)((qs[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4));
            }
            isum += sm[2 * j] * s_dot_u8_s8(lo, q8, 32) + sm[2 * j + 1] * s_dot_u8_s8(hi, q8 + 32, 32);
        }
        int32_t msum = s_mins_dot_bsums(sm + 8, 8, xb[b].bsums, 2);
        float d = coli_fp16_to_fp32(wb[b].d) * xb[b].d, dmin = coli_fp16_to_fp32(wb[b].dmin) * xb[b].d;
        sum += d * (float)isum - dmin * (float)msum;
    }
    return sum;
}

/* Q6_K: 16 sub-blocks of 16, signed 8-bit scales; value = d*sc*(q - 32),
 * q 6 bits. Per 128 values: 64 ql bytes (low nibbles: values 0..63, high:
 * 64..127) and 32 qh bytes (bits 2k..2k+1 of qh[l]: value 32k + l). The
 * -32 is applied through bsums. */
float coli_vec_dot_q6_K_q8_K(int64_t n, const void *w, const void *x) {
    const block_q6_K *wb = w;
    const block_q8_K *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const int8_t *q8 = xb[b].qs, *sc = wb[b].scales;
        uint8_t q[32];
        int32_t isum = 0, offset = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = wb[b].ql + 64 * half, *qh = wb[b].qh + 32 * half;
            for (int k = 0; k < 4; k++, q8 += 32) {
                int s = 8 * half + 2 * k;
                const uint8_t *low = ql + 32 * (k & 1);
                for (int l = 0; l < 32; l++)
                    q[l] = (uint8_t)(((low[l] >> (4 * (k >> 1))) & 15) | (((qh[l] >> (2 * k)) & 3) << 4));
                isum += sc[s] * s_dot_u8_s8(q, q8, 16) + sc[s + 1] * s_dot_u8_s8(q + 16, q8 + 16, 16);
            }
        }
        for (int s = 0; s < 16; s++) offset += sc[s] * xb[b].bsums[s];
        sum += coli_fp16_to_fp32(wb[b].d) * xb[b].d * (float)(isum - 32 * offset);
    }
    return sum;
}

/* IQ4_XS: 8 sub-blocks of 32; value = d*(ls-32)*kvalues[nib]. Per
 * sub-block, 16 qs bytes: low nibbles are values 0..15, high 16..31. */
float coli_vec_dot_iq4_xs_q8_K(int64_t n, const void *w, const void *x) {
    const block_iq4_xs *wb = w;
    const block_q8_K *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const int8_t *q8 = xb[b].qs;
        const uint8_t *qs = wb[b].qs;
        int32_t isum = 0;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, q8 += 32) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++)
                s += q8[l] * coli_kvalues_iq4nl[qs[l] & 15] + q8[l + 16] * coli_kvalues_iq4nl[qs[l] >> 4];
            isum += coli_iq4xs_scale(&wb[b], ib) * s;
        }
        sum += coli_fp16_to_fp32(wb[b].d) * xb[b].d * (float)isum;
    }
    return sum;
}
