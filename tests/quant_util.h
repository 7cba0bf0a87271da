/*
 * quant_util.h - tests' weight rows of any quantized block type without a
 * quantizer: random quant bytes with sane fp16 scales, and the activation
 * format llama.cpp pairs with each weight type (its vec_dot_type), written
 * out here independently of core/kernels/matmul_vecdot.c's table.
 * Static functions: include from one test file each.
 */
#ifndef COLI_TESTS_QUANT_UTIL_H
#define COLI_TESTS_QUANT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"

static inline unsigned qu_next(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Byte offsets of a block's fp16 scale d and minimum dmin / m (-1: none). */
static inline void qu_scale_offsets(coli_dtype t, int *d, int *dmin) {
    *dmin = -1;
    switch (t) {
    case COLI_Q4_1:
    case COLI_Q5_1:
        *d = 0;
        *dmin = 2;
        break;
    case COLI_Q2_K:
        *d = (int)offsetof(block_q2_K, d);
        *dmin = (int)offsetof(block_q2_K, dmin);
        break;
    case COLI_Q3_K: *d = (int)offsetof(block_q3_K, d); break;
    case COLI_Q4_K:
    case COLI_Q5_K:
        *d = 0;
        *dmin = 2;
        break;
    case COLI_Q6_K: *d = (int)offsetof(block_q6_K, d); break;
    case COLI_TQ1_0: *d = (int)offsetof(block_tq1_0, d); break;
    case COLI_TQ2_0: *d = (int)offsetof(block_tq2_0, d); break;
    default: *d = 0; break; /* Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS: d first; MXFP4: its exponent */
    }
}

/* A block's fp16 d: at byte od, or (IQ1_M) in the top nibbles of its four
 * 16-bit scale words. */
static inline void qu_put_d(coli_dtype t, uint8_t *blk, int od, uint16_t h) {
    if (t != COLI_IQ1_M) {
        memcpy(blk + od, &h, 2);
        return;
    }
    uint8_t *hi = blk + offsetof(block_iq1_m, scales) + 1;
    for (int k = 0; k < 4; k++) hi[2 * k] = (uint8_t)((hi[2 * k] & 0x0f) | (h >> 4 * k & 15) << 4);
}
static inline uint16_t qu_get_d(coli_dtype t, const uint8_t *blk, int od) {
    uint16_t h;
    if (t == COLI_IQ1_M) return coli_iq1_m_half((const block_iq1_m *)blk);
    memcpy(&h, blk + od, 2);
    return h;
}

/* nb random blocks of type t (a quantized type): random quant bytes, d in
 * +-[0.005, 0.015) and a minimum in [-0.1, 0.1) where the type has one
 * (K-quants: dmin > 0, as llama.cpp's quantizer writes it). */
static inline void qu_random_blocks(coli_dtype t, uint8_t *dst, int64_t nb, unsigned *seed) {
    const size_t bb = coli_dtype_block_bytes(t);
    int od, om;
    qu_scale_offsets(t, &od, &om);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = dst + (size_t)b * bb;
        for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)qu_next(seed);
        if (t == COLI_MXFP4) { /* E8M0 scale 2^-9..2^-3 (levels up to 6: values below 1) */
            blk[0] = (uint8_t)(118 + qu_next(seed) % 7);
            continue;
        }
        float d = 0.005f + (float)(qu_next(seed) % 1000) / 100000.0f;
        if (qu_next(seed) & 1) d = -d;
        uint16_t h = coli_fp32_to_fp16(d);
        qu_put_d(t, blk, od, h);
        if (om >= 0) {
            const int kq = coli_dtype_block_elems(t) == COLI_QK_K;
            float m = kq ? 0.001f + (float)(qu_next(seed) % 1000) / 100000.0f
                         : -0.1f + (float)(qu_next(seed) % 1000) / 5000.0f;
            h = coli_fp32_to_fp16(m);
            memcpy(blk + om, &h, 2);
        }
    }
}

/* llama.cpp's vec_dot_type of weight type t: Q8_0 (also MXFP4's), Q8_1 or
 * Q8_K. */
static inline coli_dtype qu_act_type(coli_dtype t) {
    switch (t) {
    case COLI_Q4_1:
    case COLI_Q5_1: return COLI_Q8_1;
    case COLI_Q2_K:
    case COLI_Q3_K:
    case COLI_Q4_K:
    case COLI_Q5_K:
    case COLI_Q6_K:
    case COLI_IQ4_XS:
    case COLI_TQ1_0:
    case COLI_TQ2_0:
    case COLI_IQ2_XXS:
    case COLI_IQ3_XXS:
    case COLI_IQ2_XS:
    case COLI_IQ3_S:
    case COLI_IQ2_S:
    case COLI_IQ1_S:
    case COLI_IQ1_M: return COLI_Q8_K;
    default: return COLI_Q8_0;
    }
}

#endif
