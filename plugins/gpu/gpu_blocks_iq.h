/*
 * gpu_blocks_iq.h - the sub-4-bit weight types as host+device functions:
 * MXFP4 (32 values per block), TQ1_0, TQ2_0 and the IQ grid types IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (256 per super-block, read
 * as eight 32-value groups). Included by gpu_blocks.h; the same two views
 * as there:
 *
 *   exact values   gpu_iq_value(t, blk, sub, j): ggml's dequantize_row_<type>
 *                  expression, operation for operation (core/quant/
 *                  quant_dequant.c and quant_dequant_iq.c give the same bits).
 *   integer form   value = gpu_iq_d(t, blk) * gpu_iq_q(t, blk, sub, j), no
 *                  minimum. The grid types fold their sub-scale into q:
 *                  IQ2 d·(0.5+s)/4·g = (d/8)·((2s+1)·g), IQ3_XXS (d/4)·((2s+1)·g),
 *                  IQ3_S d·((2s+1)·g), IQ1 d·(2s+1)·(g±1/8) = (d/8)·((2s+1)·(8g±1)):
 *                  |q| <= 31·62, so the int8-activation group sums stay exact
 *                  integers. Activations: Q8_0 for MXFP4, Q8_K for the others
 *                  (llama.cpp's vec_dot_type).
 *
 * Grids: the IQ types index codebooks of up to 2048 x 8 bytes
 * (core/quant/quant_tables_iq*.c, the one copy of that data). Device code
 * reads them through gpu_grid_tables, a struct of six pointers: on the host
 * (C tests, the emulator) it points at core's tables; in the plugin it is a
 * __device__ variable (COLI_DEVICE_VAR, gpu_compat.h; read through
 * COLI_DEVICE_READ, which keeps the host pass of the COLI_HD functions off
 * it) that the plugin fills at open with the addresses of one device-memory
 * copy (k_set_grids in gpu_experts.cu). Device
 * memory rather than constant memory: a warp's 32 lanes look up 32 unrelated
 * grid points, which constant memory serialises (it broadcasts one address
 * per access), while global loads of a 33 KiB table stay in L1/L2.
 */
#ifndef COLI_GPU_BLOCKS_IQ_H
#define COLI_GPU_BLOCKS_IQ_H

/* The codebooks, in the order the plugin uploads them (gpu_host.c,
 * gpu_grid_sources). */
typedef struct gpu_grids {
    const uint64_t *iq2xxs; /* 256 points, 8 magnitudes (8, 25, 43) */
    const uint64_t *iq2xs;  /* 512 */
    const uint64_t *iq2s;   /* 1024 */
    const uint64_t *iq1s;   /* 2048 points, 8 int8 values -1, 0, 1 */
    const uint32_t *iq3xxs; /* 256 points, 4 magnitudes */
    const uint32_t *iq3s;   /* 512 */
} gpu_grids;
#define GPU_GRID_TABLES 6

#ifdef COLI_DEVICE_VAR
/* Device code (CUDA, HIP): set once per device by the plugin at open. */
static COLI_DEVICE_VAR gpu_grids gpu_grid_tables;
#else
/* Host code (tests, emulator): core's tables themselves. */
#include "core/quant/quant_blocks.h"
static const gpu_grids gpu_grid_tables __attribute__((unused)) = {coli_iq2xxs_grid, coli_iq2xs_grid,  coli_iq2s_grid,
                                                                  coli_iq1s_grid,   coli_iq3xxs_grid, coli_iq3s_grid};
#define COLI_DEVICE_READ(v) (v)
#endif

/* Table `name` of gpu_grid_tables. */
#define GPU_GRID(name) COLI_DEVICE_READ(gpu_grid_tables.name)

// ----------------------------------------------------------------------------
// shape

static inline COLI_HD int gpu_is_iq_grid(int t) {
    return t == COLI_IQ2_XXS || t == COLI_IQ2_XS || t == COLI_IQ2_S || t == COLI_IQ3_XXS || t == COLI_IQ3_S ||
           t == COLI_IQ1_S || t == COLI_IQ1_M;
}

/* The types of this file. */
static inline COLI_HD int gpu_is_low_bit(int t) {
    return t == COLI_MXFP4 || t == COLI_TQ1_0 || t == COLI_TQ2_0 || gpu_is_iq_grid(t);
}

static inline COLI_HD size_t gpu_low_bit_block_bytes(int t) {
    switch (t) {
    case COLI_MXFP4: return 17;
    case COLI_TQ1_0: return 54;
    case COLI_TQ2_0: return 66;
    case COLI_IQ2_XXS: return 66;
    case COLI_IQ2_XS: return 74;
    case COLI_IQ2_S: return 82;
    case COLI_IQ3_XXS: return 98;
    case COLI_IQ3_S: return 110;
    case COLI_IQ1_S: return 50;
    case COLI_IQ1_M: return 56;
    default: return 0;
    }
}

// ----------------------------------------------------------------------------
// field helpers

/* MXFP4's E2M1 levels doubled (ggml's kvalues_mxfp4), packed as
 * gpu_iq4nl_level's: level i is int8 byte i%8 of lo (i < 8) or hi. */
static inline COLI_HD int gpu_mxfp4_level(int i) {
    const uint64_t lo = 0x0C08060403020100ull, hi = 0xF4F8FAFCFDFEFF00ull;
    return (int)(int8_t)(uint8_t)((i < 8 ? lo : hi) >> (8 * (i & 7)));
}

/* Half an E8M0 scale, 2^(e - 128) (subnormal for e < 2), as ggml. */
static inline COLI_HD float gpu_e8m0_half(int e) {
    return gpu_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* Trit k (0 = most significant) of a TQ1_0 byte, as -1, 0 or 1. */
static inline COLI_HD int gpu_tq1_trit(int b, int k) {
    int p = 1;
    for (int i = 0; i < k; i++) p *= 3;
    return ((((b * p) & 255) * 3) >> 8) - 1;
}

/* TQ1_0 element v (0..255): qs[0..31] hold v < 160 (trit v/32), qs[32..47]
 * v < 240 (trit (v-160)/16), qh[0..3] the rest (trit (v-240)/4). */
static inline COLI_HD int gpu_tq1_q(const unsigned char *blk, int v) {
    if (v < 160) return gpu_tq1_trit(blk[v & 31], v >> 5);
    if (v < 240) return gpu_tq1_trit(blk[32 + ((v - 160) & 15)], (v - 160) >> 4);
    return gpu_tq1_trit(blk[48 + ((v - 240) & 3)], (v - 240) >> 2);
}

/* The 8 sign bits of a 7-bit IQ2 sign index: bit 7 makes the count of
 * negatives even (ggml's ksigns_iq2xs). */
static inline COLI_HD int gpu_iq2_signs(int i7) {
    int par = 0;
    for (int b = 0; b < 7; b++) par ^= (i7 >> b) & 1;
    return i7 | (par << 7);
}

static inline COLI_HD uint32_t gpu_load_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* One decoded element of a grid type: magnitude or grid value g, negative
 * sign (IQ2/IQ3) or negative shift (IQ1), and the sub-scale s. */
typedef struct gpu_iq_elem {
    int g, neg, s;
} gpu_iq_elem;

/* The 4-bit IQ2_XS / IQ2_S scale of half h of group sub (bytes at off). */
static inline COLI_HD int gpu_iq2_scale(const unsigned char *blk, int off, int sub, int h) {
    return (blk[off + sub] >> (4 * h)) & 15;
}

/* IQ2_XXS, IQ3_XXS: 8 bytes of indexes (IQ2) or 8 of the 64 index bytes
 * (IQ3), the sign/scale word. */
static inline COLI_HD gpu_iq_elem gpu_iq_xxs_elem(int t, const unsigned char *blk, int sub, int j) {
    gpu_iq_elem e;
    const int l = j >> 3, jj = j & 7;
    const uint32_t aux = gpu_load_u32(t == COLI_IQ2_XXS ? blk + 2 + 8 * sub + 4 : blk + 2 + 64 + 4 * sub);
    if (t == COLI_IQ2_XXS)
        e.g = (int)((GPU_GRID(iq2xxs)[blk[2 + 8 * sub + l]] >> (8 * jj)) & 255);
    else
        e.g = (int)((GPU_GRID(iq3xxs)[blk[2 + 8 * sub + 2 * l + (jj >> 2)]] >> (8 * (jj & 3))) & 255);
    e.neg = (gpu_iq2_signs((int)((aux >> (7 * l)) & 127)) >> jj) & 1;
    e.s = (int)(aux >> 28);
    return e;
}

/* IQ2_XS, IQ2_S, IQ3_S */
static inline COLI_HD gpu_iq_elem gpu_iq_s_elem(int t, const unsigned char *blk, int sub, int j) {
    gpu_iq_elem e;
    const int l = j >> 3, jj = j & 7;
    if (t == COLI_IQ2_XS) { /* qs words at 2, scales at 66 */
        const int w = gpu_load_u16(blk + 2 + 2 * (4 * sub + l));
        e.g = (int)((GPU_GRID(iq2xs)[w & 511] >> (8 * jj)) & 255);
        e.neg = (gpu_iq2_signs(w >> 9) >> jj) & 1;
        e.s = gpu_iq2_scale(blk, 66, sub, l >> 1);
    } else if (t == COLI_IQ2_S) { /* qs at 2, signs at 34, qh at 66, scales at 74 */
        const int idx = blk[2 + 4 * sub + l] | (((blk[66 + sub] >> (2 * l)) & 3) << 8);
        e.g = (int)((GPU_GRID(iq2s)[idx] >> (8 * jj)) & 255);
        e.neg = (blk[34 + 4 * sub + l] >> jj) & 1;
        e.s = gpu_iq2_scale(blk, 74, sub, l >> 1);
    } else { /* IQ3_S: qs at 2, qh at 66, signs at 74, scales at 106 */
        const int p = 2 * l + (jj >> 2);
        const int idx = blk[2 + 8 * sub + p] | (((blk[66 + sub] >> p) & 1) << 8);
        e.g = (int)((GPU_GRID(iq3s)[idx] >> (8 * (jj & 3))) & 255);
        e.neg = (blk[74 + 4 * sub + l] >> jj) & 1;
        e.s = (blk[106 + sub / 2] >> (4 * (sub & 1))) & 15;
    }
    return e;
}

/* IQ1_S (qs at 2, qh words at 34), IQ1_M (qs at 0, qh at 32, scales at 48). */
static inline COLI_HD gpu_iq_elem gpu_iq1_elem(int t, const unsigned char *blk, int sub, int j) {
    gpu_iq_elem e;
    const int l = j >> 3, jj = j & 7;
    int idx;
    if (t == COLI_IQ1_S) {
        const int qh = gpu_load_u16(blk + 34 + 2 * sub);
        idx = blk[2 + 4 * sub + l] | (((qh >> (3 * l)) & 7) << 8);
        e.neg = (qh >> 15) & 1;
        e.s = (qh >> 12) & 7;
    } else {
        const int qh = blk[32 + 2 * sub + l / 2] >> (4 * (l & 1));
        idx = blk[4 * sub + l] | ((qh & 7) << 8);
        e.neg = (qh >> 3) & 1;
        e.s = (gpu_load_u16(blk + 48 + 2 * (sub / 2)) >> (6 * (sub & 1) + 3 * (l >> 1))) & 7;
    }
    e.g = (int)(int8_t)(uint8_t)(GPU_GRID(iq1s)[idx] >> (8 * jj));
    return e;
}

static inline COLI_HD gpu_iq_elem gpu_iq_elem_of(int t, const unsigned char *blk, int sub, int j) {
    if (t == COLI_IQ2_XXS || t == COLI_IQ3_XXS) return gpu_iq_xxs_elem(t, blk, sub, j);
    if (t == COLI_IQ1_S || t == COLI_IQ1_M) return gpu_iq1_elem(t, blk, sub, j);
    return gpu_iq_s_elem(t, blk, sub, j);
}

/* IQ1_M's fp16 d, gathered from the top nibbles of its four scale words. */
static inline COLI_HD uint16_t gpu_iq1m_half(const unsigned char *blk) {
    const unsigned char *sc = blk + 48;
    return (uint16_t)((gpu_load_u16(sc) >> 12) | ((gpu_load_u16(sc + 2) >> 8) & 0x00f0) |
                      ((gpu_load_u16(sc + 4) >> 4) & 0x0f00) | (gpu_load_u16(sc + 6) & 0xf000));
}

/* The block's fp16 (MXFP4: E8M0) scale as ggml reads it. */
static inline COLI_HD float gpu_iq_block_d(int t, const unsigned char *blk) {
    switch (t) {
    case COLI_MXFP4: return gpu_e8m0_half(blk[0]);
    case COLI_TQ1_0: return gpu_fp16_to_f32(gpu_load_u16(blk + 52));
    case COLI_TQ2_0: return gpu_fp16_to_f32(gpu_load_u16(blk + 64));
    case COLI_IQ1_M: return gpu_fp16_to_f32(gpu_iq1m_half(blk));
    default: return gpu_fp16_to_f32(gpu_load_u16(blk));
    }
}

// ----------------------------------------------------------------------------
// integer form

/* d of the integer form: the block scale times the power of two the type's
 * sub-scale formula leaves over (exact). */
static inline COLI_HD float gpu_iq_d(int t, const unsigned char *blk) {
    const float d = gpu_iq_block_d(t, blk);
    switch (t) {
    case COLI_IQ2_XXS:
    case COLI_IQ2_XS:
    case COLI_IQ2_S:
    case COLI_IQ1_S:
    case COLI_IQ1_M: return d * 0.125f;
    case COLI_IQ3_XXS: return d * 0.25f;
    default: return d;
    }
}

static inline COLI_HD int gpu_iq_q(int t, const unsigned char *blk, int sub, int j) {
    switch (t) {
    case COLI_MXFP4: return gpu_mxfp4_level(j < 16 ? (blk[1 + j] & 15) : (blk[1 + j - 16] >> 4));
    case COLI_TQ1_0: return gpu_tq1_q(blk, 32 * sub + j);
    case COLI_TQ2_0: return ((blk[32 * (sub >> 2) + j] >> (2 * (sub & 3))) & 3) - 1;
    default: break;
    }
    const gpu_iq_elem e = gpu_iq_elem_of(t, blk, sub, j);
    if (t == COLI_IQ1_S || t == COLI_IQ1_M) return (2 * e.s + 1) * (8 * e.g + (e.neg ? -1 : 1));
    return (2 * e.s + 1) * (e.neg ? -e.g : e.g);
}

// ----------------------------------------------------------------------------
// exact values

static inline COLI_HD float gpu_iq_value(int t, const unsigned char *blk, int sub, int j) {
    const float d = gpu_iq_block_d(t, blk);
    switch (t) {
    case COLI_MXFP4:
    case COLI_TQ1_0:
    case COLI_TQ2_0: return (float)gpu_iq_q(t, blk, sub, j) * d;
    default: break;
    }
    const gpu_iq_elem e = gpu_iq_elem_of(t, blk, sub, j);
    if (t == COLI_IQ1_S || t == COLI_IQ1_M) {
        const float dl = d * (float)(2 * e.s + 1), delta = e.neg ? -0.125f : 0.125f;
        return dl * ((float)e.g + delta);
    }
    float db;
    if (t == COLI_IQ3_S)
        db = d * (float)(1 + 2 * e.s);
    else
        db = d * (0.5f + (float)e.s) * (t == COLI_IQ3_XXS ? 0.5f : 0.25f);
    return db * (float)e.g * (e.neg ? -1.0f : 1.0f);
}

#endif /* COLI_GPU_BLOCKS_IQ_H */
