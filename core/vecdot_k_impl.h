/*
 * vecdot_k_impl.h - internals shared by the portable and AVX2 K-quant code
 * (vecdot_k.c, vecdot_k_avx2.c): the packed sub-block scales of the
 * K-quants and IQ4_XS unpacked into plain integers, so both read the
 * formats the same way (layouts as ggml-common.h defines them, see
 * quant_blocks.h), and the AVX2 Q8_K quantizer.
 */
#ifndef COLI_CORE_VECDOT_K_IMPL_H
#define COLI_CORE_VECDOT_K_IMPL_H

#include <stdint.h>
#include <string.h>

#include "core/quant_blocks.h"

/* Q4_K / Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes. Scale j < 4 is
 * the low 6 bits of byte j, min j < 4 those of byte j+4; for j >= 4 the
 * low 4 bits sit in byte j+4 (scale: low nibble, min: high nibble) and the
 * top 2 bits in the spare top bits of bytes j-4 (scale) and j (min).
 * Unpacked four at a time into words whose little-endian bytes are scales
 * 0..7 (u[0], u[1]) and mins 0..7 (u[2], u[3]), each 0..63. (Words, not
 * bytes, so that SIMD code can build a register from them directly.) */
static inline void coli_q4k_scale_words(const uint8_t packed[COLI_K_SCALE_SIZE], uint32_t u[4]) {
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t p[3];
    memcpy(p, packed, sizeof p);
    u[0] = p[0] & low6;                                        /* scales 0..3 */
    u[1] = (p[2] & low4) | (((p[0] >> 6) & low2) << 4);        /* scales 4..7 */
    u[2] = p[1] & low6;                                        /* mins 0..3 */
    u[3] = ((p[2] >> 4) & low4) | (((p[1] >> 6) & low2) << 4); /* mins 4..7 */
}

/* out[0..8) = scales, out[8..16) = mins */
static inline void coli_q4k_scales_mins(const uint8_t packed[COLI_K_SCALE_SIZE], uint8_t out[16]) {
    uint32_t u[4];
    coli_q4k_scale_words(packed, u);
    memcpy(out, u, sizeof u);
}

/* Q3_K: 16 scales of 6 bits in 12 bytes, stored with a bias of 32. Scale j
 * has its low 4 bits in byte j (j < 8, low nibble) or j-8 (high nibble),
 * and its top 2 bits at bit 2*(j/4) of byte 8 + j%4. Unpacked into words
 * whose little-endian bytes are the biased scales 0..15 (0..63). */
static inline void coli_q3k_scale_words(const uint8_t packed[12], uint32_t u[4]) {
    const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t p[3];
    memcpy(p, packed, sizeof p);
    u[0] = (p[0] & low4) | (((p[2] >> 0) & low2) << 4);
    u[1] = (p[1] & low4) | (((p[2] >> 2) & low2) << 4);
    u[2] = ((p[0] >> 4) & low4) | (((p[2] >> 4) & low2) << 4);
    u[3] = ((p[1] >> 4) & low4) | (((p[2] >> 6) & low2) << 4);
}

/* out[j] = scale j - 32, in -32..31 */
static inline void coli_q3k_scales(const uint8_t packed[12], int8_t out[16]) {
    uint32_t u[4];
    coli_q3k_scale_words(packed, u);
    memcpy(out, u, sizeof u);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(out[j] - 32);
}

/* IQ4_XS: scale of sub-block ib (0..7, 32 values each), 6 bits split into
 * a nibble of scales_l and 2 bits of scales_h, biased by 32: -32..31. */
static inline int coli_iq4xs_scale(const block_iq4_xs *b, int ib) {
    int low = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
    int high = (b->scales_h >> (2 * ib)) & 3;
    return (low | (high << 4)) - 32;
}

/* The two implementations of coli_quantize_act_q8_K (vecdot.h), which
 * calls the AVX2 one when coli_cpu_avx2(): the same bytes for every input
 * (vecdot_k.c states the rules), the AVX2 one several times faster. */
void coli_quantize_act_q8_K_portable(const float *x, block_q8_K *y, int64_t n);
void coli_quantize_act_q8_K_avx2(const float *x, block_q8_K *y, int64_t n);

#endif
