/*
 * quant_dequant_iq.c - dequantization of the IQ grid types (quant_blocks.h):
 * IQ2_XXS, IQ3_XXS, IQ2_XS, IQ3_S, IQ2_S, IQ1_S and IQ1_M, value for value as ggml's dequantize_row_*
 * (ggml-quants.c): 8 values at a time from grid magnitudes, 8 sign bits
 * and the group's float scale, in ggml's float expression
 * (scale * magnitude, then the sign; IQ1: scale * (grid value + shift)).
 * coli_dequantize_row_blocks
 * (quant_dequant.c) dispatches here.
 */
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"

/* y[0..8) = db * byte j of the magnitudes g, negated where bit j of signs */
static void s_put8(float *y, float db, uint64_t g, uint8_t signs) {
    for (int j = 0; j < 8; j++) y[j] = db * (float)(uint8_t)(g >> 8 * j) * (signs >> j & 1 ? -1.0f : 1.0f);
}

/* y[0..8) = dl * (int8 byte j of the grid point g + delta) (the IQ1 types) */
static void s_put8_iq1(float *y, float dl, uint64_t g, float delta) {
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)(g >> 8 * j) + delta);
}

/* IQ2_XXS: per 32 values, 4 grid indexes and a word of 4 sign indexes
 * plus the 4-bit scale. */
static void s_iq2_xxs(const block_iq2_xxs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(x[i].d);
        const uint8_t *q = (const uint8_t *)x[i].qs;
        for (int ib = 0; ib < COLI_QK_K / 32; ib++, q += 8) {
            uint32_t aux;
            memcpy(&aux, q + 4, 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8)
                s_put8(y, db, coli_iq2xxs_grid[q[l]], coli_iq2_signs((aux >> 7 * l) & 127));
        }
    }
}

/* IQ3_XXS: two 4-magnitude grid points per 8 values, the sign and scale
 * words after the 64 indexes. */
static void s_iq3_xxs(const block_iq3_xxs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(x[i].d);
        const uint8_t *q = x[i].qs;
        for (int ib = 0; ib < COLI_QK_K / 32; ib++, q += 8) {
            uint32_t aux;
            memcpy(&aux, x[i].qs + COLI_QK_K / 4 + 4 * ib, 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = coli_iq3xxs_grid[q[2 * l]] | (uint64_t)coli_iq3xxs_grid[q[2 * l + 1]] << 32;
                s_put8(y, db, g, coli_iq2_signs((aux >> 7 * l) & 127));
            }
        }
    }
}

/* IQ2_XS: a 9-bit grid index and a 7-bit sign index per 8 values, two
 * 4-bit scales per 32. */
static void s_iq2_xs(const block_iq2_xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t q = x[i].qs[4 * ib + l];
                s_put8(y, db[l / 2], coli_iq2xs_grid[q & 511], coli_iq2_signs(q >> 9));
            }
        }
    }
}

/* IQ3_S: 8 grid indexes of 9 bits, 4 sign bytes and a 4-bit scale per 32 */
static void s_iq3_s(const block_iq3_s *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(x[i].d);
        for (int g = 0; g < COLI_QK_K / 32; g++) {
            const float db = d * (float)(1 + 2 * (x[i].scales[g / 2] >> 4 * (g % 2) & 0xf));
            for (int l = 0; l < 4; l++, y += 8) s_put8(y, db, coli_iq3_s_pair(&x[i], g, l), x[i].signs[4 * g + l]);
        }
    }
}

/* IQ2_S: 10-bit grid indexes, a sign byte per 8 values, scales as IQ2_XS */
static void s_iq2_s(const block_iq2_s *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8)
                s_put8(y, db[l / 2], coli_iq2_s_point(&x[i], ib, l), x[i].qs[COLI_QK_K / 8 + 4 * ib + l]);
        }
    }
}

/* IQ1_S: 11-bit grid indexes, per 32 values a 3-bit scale and the shift's
 * sign in qh */
static void s_iq1_s(const block_iq1_s *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
            const float dl = d * (float)(2 * (x[i].qh[ib] >> 12 & 7) + 1);
            const float delta = x[i].qh[ib] & 0x8000 ? -COLI_IQ1_DELTA : COLI_IQ1_DELTA;
            for (int l = 0; l < 4; l++, y += 8) s_put8_iq1(y, dl, coli_iq1_s_point(&x[i], ib, l), delta);
        }
    }
}

/* IQ1_M: IQ1_S's grid, a scale per 16 values, a shift sign per 8 */
static void s_iq1_m(const block_iq1_m *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = coli_fp16_to_fp32(coli_iq1_m_half(&x[i]));
        for (int ib = 0; ib < COLI_QK_K / 32; ib++)
            for (int l = 0; l < 4; l++, y += 8) {
                const float dl = d * (float)(2 * coli_iq1_m_scale(&x[i], ib, l / 2) + 1);
                const float delta = coli_iq1_m_neg(&x[i], ib, l) ? -COLI_IQ1_DELTA : COLI_IQ1_DELTA;
                s_put8_iq1(y, dl, coli_iq1_m_point(&x[i], ib, l), delta);
            }
    }
}

int coli_dequantize_row_iq(coli_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case COLI_IQ2_XXS: s_iq2_xxs(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ3_XXS: s_iq3_xxs(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ2_XS: s_iq2_xs(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ3_S: s_iq3_s(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ2_S: s_iq2_s(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ1_S: s_iq1_s(src, dst, n / COLI_QK_K); return 0;
    case COLI_IQ1_M: s_iq1_m(src, dst, n / COLI_QK_K); return 0;
    default: return -1;
    }
}
