/*
 * gpu_blocks.h - the quantized block formats, read one 32-value group at a
 * time, as small host+device functions (included by gpu_math.h, which
 * defines COLI_HD and the fp16 decoding first).
 *
 * Every weight type is read in groups of 32 values: the 32-value types
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) are one group per block, the
 * 256-value super-blocks (Q2_K..Q6_K, IQ4_XS, TQ1_0, TQ2_0, the IQ grid
 * types of gpu_blocks_iq.h) eight groups per block, and
 * no group straddles a block. Two views of a group:
 *
 *   exact values   gpu_dequant(t, blk, sub, j): element j of group sub, the
 *                  float ggml's dequantize_row_<type> gives, operation for
 *                  operation (tests compare it bit for bit with the CPU's).
 *   integer form   value(j) = d * q(j) + m(half), half = j / 16:
 *                  q an integer that already carries the sub-block scale
 *                  (|q| <= 4096), d the block's fp16 scale, m the additive
 *                  term of each 16-value half (0 for types without a
 *                  minimum). The dot products use this form: with int8
 *                  activations every group sum is an exact integer, as in
 *                  llama.cpp's vec_dot kernels.
 *
 * Layouts are ggml's (core/quant/quant_blocks.h has the structs; fields are read
 * bytewise here because blocks are only 2-byte aligned inside a row).
 */
#ifndef COLI_GPU_BLOCKS_H
#define COLI_GPU_BLOCKS_H

#include "plugins/gpu/gpu_blocks_iq.h" /* MXFP4, TQ1_0, TQ2_0, the IQ grid types */

// ----------------------------------------------------------------------------
// shape

/* Values per block of type t: 1 (F32/F16/BF16), 32, 256; 0 if not a GPU type.
 * Q8_1 and Q8_K are activation formats only. */
static inline COLI_HD int gpu_block_elems(int t) {
    switch (t) {
    case COLI_F32:
    case COLI_F16:
    case COLI_BF16: return 1;
    case COLI_Q8_0:
    case COLI_Q4_0:
    case COLI_Q4_1:
    case COLI_Q5_0:
    case COLI_Q5_1:
    case COLI_IQ4_NL:
    case COLI_MXFP4:
    case COLI_Q8_1: return 32;
    case COLI_Q2_K:
    case COLI_Q3_K:
    case COLI_Q4_K:
    case COLI_Q5_K:
    case COLI_Q6_K:
    case COLI_IQ4_XS:
    case COLI_Q8_K: return 256;
    default: return gpu_is_low_bit(t) ? 256 : 0;
    }
}

static inline COLI_HD size_t gpu_block_bytes(int t) {
    switch (t) {
    case COLI_F32: return 4;
    case COLI_F16:
    case COLI_BF16: return 2;
    case COLI_Q8_0: return 34;
    case COLI_Q4_0:
    case COLI_IQ4_NL: return 18;
    case COLI_Q4_1: return 20;
    case COLI_Q5_0: return 22;
    case COLI_Q5_1: return 24;
    case COLI_Q8_1: return 36;
    case COLI_Q2_K: return 84;
    case COLI_Q3_K: return 110;
    case COLI_Q4_K: return 144;
    case COLI_Q5_K: return 176;
    case COLI_Q6_K: return 210;
    case COLI_IQ4_XS: return 136;
    case COLI_Q8_K: return 292;
    default: return gpu_low_bit_block_bytes(t);
    }
}

/* The block holding 32-value group g of a row of type t (a quantized type);
 * *sub = g's index inside that block (0 for the 32-value types). Computes a
 * pointer only: nothing is read. */
static inline COLI_HD const unsigned char *gpu_group_block(int t, const unsigned char *row, int64_t g, int *sub) {
    const int per = gpu_block_elems(t) / 32;
    *sub = (int)(g % per);
    return row + (size_t)(g / per) * gpu_block_bytes(t);
}

/* Types whose values carry an additive minimum (value = d*q + m). */
static inline COLI_HD int gpu_dtype_has_min(int t) {
    return t == COLI_Q4_1 || t == COLI_Q5_1 || t == COLI_Q2_K || t == COLI_Q4_K || t == COLI_Q5_K;
}

// ----------------------------------------------------------------------------
// field helpers

/* ggml's kvalues_iq4nl, packed 8 per 64-bit constant (a table in constant
 * memory would need a vendor-specific declaration): level i is byte i%8 of
 * the lo (i < 8) or hi constant, as int8. */
static inline COLI_HD int gpu_iq4nl_level(int i) {
    const uint64_t lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
    return (int)(int8_t)(uint8_t)((i < 8 ? lo : hi) >> (8 * (i & 7)));
}

/* Nibble j (0..31) of 16 bytes laid out as Q4_0: byte j%16, low nibble for
 * j < 16, high for j >= 16. */
static inline COLI_HD int gpu_nibble(const unsigned char *qs, int j) {
    const int b = qs[j & 15];
    return j < 16 ? (b & 15) : (b >> 4);
}

/* The fifth bit of element j of Q5_0/Q5_1 (qh, 4 bytes little-endian). */
static inline COLI_HD int gpu_q5_high(const unsigned char *qh, int j) { return (qh[j >> 3] >> (j & 7)) & 1; }

/* Q4_K/Q5_K: the 6-bit scale (want_min 0) or minimum (1) of sub-block s
 * (0..7) from the 12 packed bytes (ggml's get_scale_min_k4). */
static inline COLI_HD int gpu_k4_scale(const unsigned char *sc, int s, int want_min) {
    if (s < 4) return want_min ? (sc[s + 4] & 63) : (sc[s] & 63);
    return want_min ? ((sc[s + 4] >> 4) | ((sc[s] >> 6) << 4)) : ((sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4));
}

/* Q3_K: the 6-bit scale k (0..15), unpacked as ggml's kmask shuffle does,
 * minus 32. */
static inline COLI_HD int gpu_q3k_scale(const unsigned char *sc, int k) {
    const int low = k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4);
    const int high = (sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (low | (high << 4)) - 32;
}

/* IQ4_XS: the 6-bit scale of sub-block s (0..7), minus 32. */
static inline COLI_HD int gpu_iq4xs_scale(const unsigned char *blk, int s) {
    const int low = (blk[4 + s / 2] >> (4 * (s & 1))) & 15;
    const int high = (gpu_load_u16(blk + 2) >> (2 * s)) & 3;
    return (low | (high << 4)) - 32;
}

/* ---- the raw quant of one element ---------------------------------------------------------
 * Element j of group sub, before any scale: Q2_K 0..3, Q3_K -4..3, Q4_K
 * 0..15, Q5_K 0..31, Q6_K -32..31, IQ4_XS the non-linear level. */
static inline COLI_HD int gpu_kquant_raw(int t, const unsigned char *blk, int sub, int j) {
    switch (t) {
    case COLI_Q2_K: /* qs at 16: 128-value halves of 32 bytes, 2 bits per element, shift 2*(sub%4) */
        return (blk[16 + 32 * (sub >> 2) + j] >> (2 * (sub & 3))) & 3;
    case COLI_Q3_K: { /* hmask at 0 (bit sub of byte j), qs at 32 as Q2_K */
        const int lo = (blk[32 + 32 * (sub >> 2) + j] >> (2 * (sub & 3))) & 3;
        return lo - (((blk[j] >> sub) & 1) ? 0 : 4);
    }
    case COLI_Q4_K: { /* qs at 16: 64-value pairs of 32 bytes, low nibble then high */
        const int b = blk[16 + 32 * (sub >> 1) + j];
        return (sub & 1) ? (b >> 4) : (b & 15);
    }
    case COLI_Q5_K: { /* qh at 16 (bit sub of byte j), qs at 48 as Q4_K */
        const int b = blk[48 + 32 * (sub >> 1) + j];
        return ((sub & 1) ? (b >> 4) : (b & 15)) | (((blk[16 + j] >> sub) & 1) << 4);
    }
    case COLI_Q6_K: { /* ql at 0, qh at 128, per 128-value half h: quarter c = sub%4 */
        const int h = sub >> 2, c = sub & 3;
        const int ql = blk[64 * h + 32 * (c & 1) + j];
        const int lo = c >= 2 ? (ql >> 4) : (ql & 15);
        return (lo | (((blk[128 + 32 * h + j] >> (2 * c)) & 3) << 4)) - 32;
    }
    default: /* COLI_IQ4_XS: qs at 8, 16 bytes per group as Q4_0 */
        return gpu_iq4nl_level(gpu_nibble(blk + 8 + 16 * sub, j));
    }
}

/* The scale of half (j/16) of group sub of a super-block type. */
static inline COLI_HD int gpu_kquant_scale(int t, const unsigned char *blk, int sub, int half) {
    switch (t) {
    case COLI_Q2_K: return blk[2 * sub + half] & 15;
    case COLI_Q3_K: return gpu_q3k_scale(blk + 96, 2 * sub + half);
    case COLI_Q4_K:
    case COLI_Q5_K: return gpu_k4_scale(blk + 4, sub, 0);
    case COLI_Q6_K: return (int)(int8_t)blk[192 + 2 * sub + half];
    default: return gpu_iq4xs_scale(blk, sub); /* COLI_IQ4_XS */
    }
}

// ----------------------------------------------------------------------------
// integer form: value = d * q + m(half)

/* Offset of the fp16 scale d in a block of type t. */
static inline COLI_HD int gpu_d_offset(int t) {
    switch (t) {
    case COLI_Q2_K: return 80;
    case COLI_Q3_K: return 108;
    case COLI_Q6_K: return 208;
    default: return 0;
    }
}

static inline COLI_HD float gpu_quant_d(int t, const unsigned char *blk) {
    if (gpu_is_low_bit(t)) return gpu_iq_d(t, blk);
    return gpu_fp16_to_f32(gpu_load_u16(blk + gpu_d_offset(t)));
}

/* The integer q of element j (0..31) of group sub. */
static inline COLI_HD int gpu_quant_q(int t, const unsigned char *blk, int sub, int j) {
    if (gpu_is_low_bit(t)) return gpu_iq_q(t, blk, sub, j);
    switch (t) {
    case COLI_Q8_0: return (int)(int8_t)blk[2 + j];
    case COLI_Q4_0: return gpu_nibble(blk + 2, j) - 8;
    case COLI_IQ4_NL: return gpu_iq4nl_level(gpu_nibble(blk + 2, j));
    case COLI_Q4_1: return gpu_nibble(blk + 4, j);
    case COLI_Q5_0: return (gpu_nibble(blk + 6, j) | (gpu_q5_high(blk + 2, j) << 4)) - 16;
    case COLI_Q5_1: return gpu_nibble(blk + 8, j) | (gpu_q5_high(blk + 4, j) << 4);
    default: return gpu_kquant_scale(t, blk, sub, j >> 4) * gpu_kquant_raw(t, blk, sub, j);
    }
}

/* The additive term of half (0: elements 0-15, 1: 16-31) of group sub; 0
 * for types without a minimum. */
static inline COLI_HD float gpu_quant_m(int t, const unsigned char *blk, int sub, int half) {
    switch (t) {
    case COLI_Q4_1:
    case COLI_Q5_1: return gpu_fp16_to_f32(gpu_load_u16(blk + 2));
    case COLI_Q2_K: return -(gpu_fp16_to_f32(gpu_load_u16(blk + 82)) * (float)(blk[2 * sub + half] >> 4));
    case COLI_Q4_K:
    case COLI_Q5_K: return -(gpu_fp16_to_f32(gpu_load_u16(blk + 2)) * (float)gpu_k4_scale(blk + 4, sub, 1));
    default: return 0.0f;
    }
}

// ----------------------------------------------------------------------------
// exact values (ggml's dequantize_row_<type>)

static inline COLI_HD float gpu_dequant_kquant(int t, const unsigned char *blk, int sub, int j) {
    const float d = gpu_quant_d(t, blk);
    const int raw = gpu_kquant_raw(t, blk, sub, j), half = j >> 4;
    switch (t) {
    case COLI_Q2_K: {
        const int sc = blk[2 * sub + half];
        const float dl = d * (float)(sc & 15), ml = gpu_fp16_to_f32(gpu_load_u16(blk + 82)) * (float)(sc >> 4);
        return dl * (float)raw - ml;
    }
    case COLI_Q4_K:
    case COLI_Q5_K: {
        const float d1 = d * (float)gpu_k4_scale(blk + 4, sub, 0);
        const float m1 = gpu_fp16_to_f32(gpu_load_u16(blk + 2)) * (float)gpu_k4_scale(blk + 4, sub, 1);
        return d1 * (float)raw - m1;
    }
    default: /* Q3_K, Q6_K, IQ4_XS: (d * scale) * raw */
        return d * (float)gpu_kquant_scale(t, blk, sub, half) * (float)raw;
    }
}

/* Element j (0..31) of group sub of a block of quantized type t. */
static inline COLI_HD float gpu_dequant(int t, const unsigned char *blk, int sub, int j) {
    if (gpu_is_low_bit(t)) return gpu_iq_value(t, blk, sub, j);
    switch (t) {
    case COLI_Q8_0:
    case COLI_Q4_0:
    case COLI_Q5_0:
    case COLI_IQ4_NL: return gpu_quant_d(t, blk) * (float)gpu_quant_q(t, blk, sub, j);
    case COLI_Q4_1:
    case COLI_Q5_1: return (float)gpu_quant_q(t, blk, sub, j) * gpu_quant_d(t, blk) + gpu_quant_m(t, blk, sub, 0);
    default: return gpu_dequant_kquant(t, blk, sub, j);
    }
}

#endif /* COLI_GPU_BLOCKS_H */
