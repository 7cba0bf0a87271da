/*
 * vecdot_iq.c - portable dot products of the IQ grid types' rows with Q8_K
 * activations (vecdot.h), the arithmetic of ggml's generic
 * ggml_vec_dot_<type>_q8_K (ggml-cpu/quants.c): per group of 32 values
 * (16 for a type with two scales per 32) the exact integer sum of grid
 * magnitude * sign * activation, times its odd scale 2s + 1, summed per
 * super-block; then d_w d_x times that sum per super-block in block order,
 * and the row's sum times the type's constant (IQ2: 1/8, IQ3_XXS: 1/4,
 * IQ3_S: 1). The IQ1 types add their shifts: +-1/8 times the scaled sums
 * of the activations (Q8_K's bsums), as ggml (sum + 1/8 * shift sum in
 * float).
 */
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

/* sum over 8 values of magnitude byte j of g * x[j], negated where bit j
 * of signs is set */
static int32_t s_dot8(uint64_t g, uint8_t signs, const int8_t *x) {
    int32_t s = 0;
    for (int j = 0; j < 8; j++) {
        const int v = (uint8_t)(g >> 8 * j) * x[j];
        s += signs >> j & 1 ? -v : v;
    }
    return s;
}

/* sum over 8 values of the int8 grid values of g times x[j] (IQ1) */
static int32_t s_dot8_i8(uint64_t g, const int8_t *x) {
    int32_t s = 0;
    for (int j = 0; j < 8; j++) s += (int8_t)(g >> 8 * j) * x[j];
    return s;
}

/* The integer sum of one IQ2_XXS super-block with its 256 activations. */
static int32_t s_iq2_xxs_isum(const block_iq2_xxs *w, const int8_t *x) {
    const uint8_t *q = (const uint8_t *)w->qs;
    int32_t sum = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++, q += 8) {
        uint32_t aux;
        memcpy(&aux, q + 4, 4);
        int32_t s = 0;
        for (int l = 0; l < 4; l++, x += 8)
            s += s_dot8(coli_iq2xxs_grid[q[l]], coli_iq2_signs((aux >> 7 * l) & 127), x);
        sum += s * (int32_t)(2 * (aux >> 28) + 1);
    }
    return sum;
}

/* The integer sum of one IQ3_XXS super-block: two grid points per 8. */
static int32_t s_iq3_xxs_isum(const block_iq3_xxs *w, const int8_t *x) {
    const uint8_t *q = w->qs;
    int32_t sum = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++, q += 8) {
        uint32_t aux;
        memcpy(&aux, w->qs + COLI_QK_K / 4 + 4 * ib, 4);
        int32_t s = 0;
        for (int l = 0; l < 4; l++, x += 8) {
            const uint64_t g = coli_iq3xxs_grid[q[2 * l]] | (uint64_t)coli_iq3xxs_grid[q[2 * l + 1]] << 32;
            s += s_dot8(g, coli_iq2_signs((aux >> 7 * l) & 127), x);
        }
        sum += s * (int32_t)(2 * (aux >> 28) + 1);
    }
    return sum;
}

/* The integer sum of one IQ2_XS super-block: per 32 values two halves of
 * 16, each times its own scale. */
static int32_t s_iq2_xs_isum(const block_iq2_xs *w, const int8_t *x) {
    int32_t sum = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
        for (int h = 0; h < 2; h++) {
            int32_t s = 0;
            for (int l = 2 * h; l < 2 * h + 2; l++, x += 8) {
                const uint16_t q = w->qs[4 * ib + l];
                s += s_dot8(coli_iq2xs_grid[q & 511], coli_iq2_signs(q >> 9), x);
            }
            sum += s * (int32_t)(2 * (w->scales[ib] >> 4 * h & 0xf) + 1);
        }
    }
    return sum;
}

/* The integer sum of one IQ3_S super-block (grid points as dequantization
 * reads them, quant_blocks.h). */
static int32_t s_iq3_s_isum(const block_iq3_s *w, const int8_t *x) {
    int32_t sum = 0;
    for (int g = 0; g < COLI_QK_K / 32; g++) {
        int32_t s = 0;
        for (int l = 0; l < 4; l++, x += 8) s += s_dot8(coli_iq3_s_pair(w, g, l), w->signs[4 * g + l], x);
        sum += s * (int32_t)(2 * (w->scales[g / 2] >> 4 * (g % 2) & 0xf) + 1);
    }
    return sum;
}

/* The integer sum of one IQ2_S super-block: scales as IQ2_XS's. */
static int32_t s_iq2_s_isum(const block_iq2_s *w, const int8_t *x) {
    int32_t sum = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
        for (int h = 0; h < 2; h++) {
            int32_t s = 0;
            for (int l = 2 * h; l < 2 * h + 2; l++, x += 8)
                s += s_dot8(coli_iq2_s_point(w, ib, l), w->qs[COLI_QK_K / 8 + 4 * ib + l], x);
            sum += s * (int32_t)(2 * (w->scales[ib] >> 4 * h & 0xf) + 1);
        }
    }
    return sum;
}

/* One IQ1_S super-block's grid sum plus 1/8 of its shift sum, in float as
 * ggml adds them. */
static float s_iq1_s_sum(const block_iq1_s *w, const block_q8_K *x) {
    const int8_t *q8 = x->qs;
    int32_t sumi = 0, sumi1 = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
        const int ls = 2 * (w->qh[ib] >> 12 & 7) + 1, delta = w->qh[ib] & 0x8000 ? -1 : 1;
        int32_t lsum = 0;
        for (int l = 0; l < 4; l++, q8 += 8) lsum += s_dot8_i8(coli_iq1_s_point(w, ib, l), q8);
        sumi += ls * lsum;
        sumi1 += ls * delta * (x->bsums[2 * ib] + x->bsums[2 * ib + 1]);
    }
    return (float)sumi + COLI_IQ1_DELTA * (float)sumi1;
}

/* The same for IQ1_M: scales per 16 values, shift signs per 8 (the shift
 * sums from the activations themselves). */
static float s_iq1_m_sum(const block_iq1_m *w, const block_q8_K *x) {
    const int8_t *q8 = x->qs;
    int32_t sumi1 = 0, sumi2 = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++)
        for (int h = 0; h < 2; h++) {
            const int ls = 2 * coli_iq1_m_scale(w, ib, h) + 1;
            int32_t s1 = 0, s2 = 0;
            for (int l = 2 * h; l < 2 * h + 2; l++, q8 += 8) {
                s1 += s_dot8_i8(coli_iq1_m_point(w, ib, l), q8);
                int32_t xs = 0;
                for (int j = 0; j < 8; j++) xs += q8[j];
                s2 += coli_iq1_m_neg(w, ib, l) ? -xs : xs;
            }
            sumi1 += s1 * ls;
            sumi2 += s2 * ls;
        }
    return (float)sumi1 + COLI_IQ1_DELTA * (float)sumi2;
}

/* The Q8_K dot of a grid type whose block sum is an integer (s_T_isum): per block
 * d * x.d * isum in float, then the type's constant factor, in ggml's order. */
#define S_IQ_ISUM_DOT(T, FACTOR)                                                             \
    float coli_vec_dot_##T##_q8_K(int64_t n, const void *vw, const void *vx) {               \
        const block_##T *w = vw;                                                             \
        const block_q8_K *x = vx;                                                            \
        float sum = 0.0f;                                                                    \
        for (int64_t b = 0; b < n / COLI_QK_K; b++)                                          \
            sum += coli_fp16_to_fp32(w[b].d) * x[b].d * (float)s_##T##_isum(&w[b], x[b].qs); \
        return FACTOR * sum;                                                                 \
    }

float coli_vec_dot_iq1_m_q8_K(int64_t n, const void *vw, const void *vx) {
    const block_iq1_m *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++)
        sum += coli_fp16_to_fp32(coli_iq1_m_half(&w[b])) * x[b].d * s_iq1_m_sum(&w[b], &x[b]);
    return sum;
}

float coli_vec_dot_iq1_s_q8_K(int64_t n, const void *vw, const void *vx) {
    const block_iq1_s *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++) sum += coli_fp16_to_fp32(w[b].d) * x[b].d * s_iq1_s_sum(&w[b], &x[b]);
    return sum;
}

S_IQ_ISUM_DOT(iq2_xxs, 0.125f)
S_IQ_ISUM_DOT(iq2_s, 0.125f)
S_IQ_ISUM_DOT(iq3_s, 1.0f)
S_IQ_ISUM_DOT(iq3_xxs, 0.25f)
S_IQ_ISUM_DOT(iq2_xs, 0.125f)
