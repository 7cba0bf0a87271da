/*
 * quant_blocks.h - the block layouts of every quantized GGML type we read,
 * byte for byte as ggml-common.h lays them out (a GGUF file stores these
 * blocks along ne[0]). Scales are fp16 bit patterns (coli_fp16_to_fp32)
 * except Q8_K's, which is a float.
 *
 * 32-value blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, MXFP4.
 * 256-value super-blocks (COLI_QK_K): Q2_K..Q6_K, Q8_K, IQ4_XS, TQ1_0, TQ2_0,
 * IQ2_XXS, IQ3_XXS, IQ2_XS, IQ3_S, IQ2_S, IQ1_S, IQ1_M.
 */
#ifndef COLI_CORE_QUANT_BLOCKS_H
#define COLI_CORE_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "core/tensor.h"

#define COLI_K_SCALE_SIZE 12 /* packed 6-bit scales/mins of Q4_K, Q5_K */

typedef struct block_q4_1 {
    uint16_t d, m;           /* scale and minimum, fp16: value = d*nib + m */
    uint8_t qs[COLI_QK / 2]; /* as Q4_0: element j low nibble, j+16 high */
} block_q4_1;

typedef struct block_q5_0 {
    uint16_t d;              /* fp16: value = d*(q - 16), q 5 bits */
    uint8_t qh[4];           /* bit j: 5th bit of element j */
    uint8_t qs[COLI_QK / 2]; /* low 4 bits as Q4_0 */
} block_q5_0;

typedef struct block_q5_1 {
    uint16_t d, m; /* fp16: value = d*q + m */
    uint8_t qh[4];
    uint8_t qs[COLI_QK / 2];
} block_q5_1;

typedef struct block_q8_1 {
    uint16_t d; /* fp16 scale */
    uint16_t s; /* fp16 of d * sum(qs) */
    int8_t qs[COLI_QK];
} block_q8_1;

typedef struct block_iq4_nl {
    uint16_t d;              /* fp16: value = d * kvalues_iq4nl[nib] */
    uint8_t qs[COLI_QK / 2]; /* as Q4_0 */
} block_iq4_nl;

typedef struct block_q2_K {
    uint8_t scales[COLI_QK_K / 16]; /* per 16 values: low nibble scale, high nibble min */
    uint8_t qs[COLI_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;               /* fp16 super-block scales of scales and mins */
} block_q2_K;

typedef struct block_q3_K {
    uint8_t hmask[COLI_QK_K / 8]; /* high bit of each 3-bit quant */
    uint8_t qs[COLI_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];           /* 16 6-bit scales, packed */
    uint16_t d;                   /* fp16 super-block scale */
} block_q3_K;

typedef struct block_q4_K {
    uint16_t d, dmin;                  /* fp16 super-block scales */
    uint8_t scales[COLI_K_SCALE_SIZE]; /* 8 6-bit scales and 8 6-bit mins, packed */
    uint8_t qs[COLI_QK_K / 2];         /* 4-bit quants */
} block_q4_K;

typedef struct block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[COLI_K_SCALE_SIZE];
    uint8_t qh[COLI_QK_K / 8]; /* 5th bits */
    uint8_t qs[COLI_QK_K / 2]; /* low 4 bits */
} block_q5_K;

typedef struct block_q6_K {
    uint8_t ql[COLI_QK_K / 2];     /* low 4 bits */
    uint8_t qh[COLI_QK_K / 4];     /* high 2 bits */
    int8_t scales[COLI_QK_K / 16]; /* 8-bit scales */
    uint16_t d;                    /* fp16 super-block scale */
} block_q6_K;

typedef struct block_q8_K {
    float d; /* scale (a float, not fp16) */
    int8_t qs[COLI_QK_K];
    int16_t bsums[COLI_QK_K / 16]; /* sum of each 16 quants */
} block_q8_K;

typedef struct block_iq4_xs {
    uint16_t d;                       /* fp16 super-block scale */
    uint16_t scales_h;                /* high 2 bits of 8 6-bit scales */
    uint8_t scales_l[COLI_QK_K / 64]; /* low 4 bits of 8 scales */
    uint8_t qs[COLI_QK_K / 2];        /* 4-bit indices into kvalues_iq4nl */
} block_iq4_xs;

/* MXFP4 (OCP microscaling FP4): 32 E2M1 values sharing one E8M0 scale.
 * value = 2^(e - 127) * fp4(nib); the levels are kept doubled as integers
 * (coli_kvalues_mxfp4), so value = 2^(e - 128) * level (coli_e8m0_half). */
typedef struct block_mxfp4 {
    uint8_t e;               /* E8M0 exponent, bias 127 */
    uint8_t qs[COLI_QK / 2]; /* as Q4_0: element j low nibble, j+16 high */
} block_mxfp4;

/* TQ1_0: ternary values {-1, 0, 1} * d, as base-3 digits (trits) packed 5
 * per byte (4 in qh), each byte b holding the digits' number N < 243 as
 * ceil(N * 256 / 243): digit k (most significant first) is
 * ((uint8_t)(b * 3^k) * 3) >> 8, minus 1. Value order: qs[0..31] hold
 * values m + 32 k (k = 0..4) of the first 160, qs[32..47] values
 * 160 + m + 16 k, qh[0..3] values 240 + m + 4 k (k = 0..3). */
typedef struct block_tq1_0 {
    uint8_t qs[(COLI_QK_K - 4 * COLI_QK_K / 64) / 5]; /* 48 bytes, 5 trits each */
    uint8_t qh[COLI_QK_K / 64];                       /* 4 bytes, 4 trits each */
    uint16_t d;                                       /* fp16 scale */
} block_tq1_0;

/* TQ2_0: ternary values as 2-bit codes q in 0..2, value = (q - 1) * d;
 * byte j + 32 c (c = 0..1) holds values 128 c + j + 32 k at bits 2k. */
typedef struct block_tq2_0 {
    uint8_t qs[COLI_QK_K / 4];
    uint16_t d; /* fp16 scale */
} block_tq2_0;

/* IQ2_XXS: per 32 values 8 bytes (qs[4 ib .. 4 ib + 3] as little-endian
 * bytes): bytes 0..3 index coli_iq2xxs_grid (8 magnitudes each, in order),
 * the last 32 bits hold four 7-bit sign indices (bits 7l..7l+6 for grid
 * entry l, coli_iq2_signs) and the 4-bit scale s (bits 28..31); value =
 * d * (0.5 + s) / 4 * grid byte * sign. */
typedef struct block_iq2_xxs {
    uint16_t d; /* fp16 */
    uint16_t qs[COLI_QK_K / 8];
} block_iq2_xxs;

/* IQ3_XXS: qs[0..63] index coli_iq3xxs_grid (4 magnitudes each), two per
 * 8 values; then per 32 values a little-endian word at 64 + 4 ib as
 * IQ2_XXS's (four 7-bit sign indices, scale s in bits 28..31); value =
 * d * (0.5 + s) / 2 * grid byte * sign. */
typedef struct block_iq3_xxs {
    uint16_t d; /* fp16 */
    uint8_t qs[3 * COLI_QK_K / 8];
} block_iq3_xxs;

/* IQ2_XS: per 8 values a 16-bit word qs[k]: bits 0..8 index coli_iq2xs_grid
 * (8 magnitudes), bits 9..15 a 7-bit sign index (coli_iq2_signs); per 32
 * values a byte of scales, the low nibble s for its first 16 values, the
 * high for the last 16; value = d * (0.5 + s) / 4 * grid byte * sign. */
typedef struct block_iq2_xs {
    uint16_t d; /* fp16 */
    uint16_t qs[COLI_QK_K / 8];
    uint8_t scales[COLI_QK_K / 32];
} block_iq2_xs;

/* IQ3_S: per 32 values (group g) 8 grid indexes of 9 bits, qs[8 g + k]
 * with bit k of qh[g] as bit 8, into coli_iq3s_grid (4 magnitudes each,
 * two points per 8 values); signs[4 g .. 4 g + 3] one byte of 8 sign bits
 * per 8 values (all 8 stored); scales[g / 2] nibble g % 2 the 4-bit scale
 * s; value = d * (1 + 2 s) * grid byte * sign. */
typedef struct block_iq3_s {
    uint16_t d; /* fp16 */
    uint8_t qs[COLI_QK_K / 4];
    uint8_t qh[COLI_QK_K / 32];
    uint8_t signs[COLI_QK_K / 8];
    uint8_t scales[COLI_QK_K / 64];
} block_iq3_s;

/* IQ2_S: per 8 values (point k = 4 ib + l of group ib) a 10-bit index
 * into coli_iq2s_grid (8 magnitudes), qs[k] with bits 2l..2l+1 of qh[ib]
 * as bits 8..9, and a byte of 8 sign bits qs[32 + k]; two 4-bit scales
 * per 32 values as IQ2_XS's; value = d * (0.5 + s) / 4 * grid byte * sign. */
typedef struct block_iq2_s {
    uint16_t d;                /* fp16 */
    uint8_t qs[COLI_QK_K / 4]; /* 32 index bytes, then 32 sign bytes */
    uint8_t qh[COLI_QK_K / 32];
    uint8_t scales[COLI_QK_K / 32];
} block_iq2_s;

/* IQ1_S: per 8 values (point k = 4 ib + l of group ib) an 11-bit index into
 * coli_iq1s_grid (8 values -1, 0, 1), qs[k] with bits 3l..3l+2 of qh[ib]
 * as bits 8..10; qh[ib] bits 12..14 the group's 3-bit scale s, bit 15 the
 * sign of its shift delta = -+1/8; value = d * (2 s + 1) * (grid + delta). */
typedef struct block_iq1_s {
    uint16_t d; /* fp16 */
    uint8_t qs[COLI_QK_K / 8];
    uint16_t qh[COLI_QK_K / 32];
} block_iq1_s;

/* IQ1_M: no d field. Per 8 values (point l of group ib) an 11-bit index
 * into coli_iq1s_grid, qs[4 ib + l] with bits 0..2 (l even) or 4..6 (l odd)
 * of qh[2 ib + l / 2] as bits 8..10, the next bit (3 or 7) the sign of the
 * shift delta = -+1/8; the scales as four little-endian 16-bit words:
 * word ib / 2, bits 6 (ib % 2) + 3 h .. + 2, the 3-bit scale s of half h
 * (16 values) of group ib; the top nibbles of words 0..3, nibbles 0..3 of
 * the fp16 d; value = d * (2 s + 1) * (grid + delta). */
typedef struct block_iq1_m {
    uint8_t qs[COLI_QK_K / 8];
    uint8_t qh[COLI_QK_K / 16];
    uint8_t scales[COLI_QK_K / 32];
} block_iq1_m;

_Static_assert(sizeof(block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(block_q8_1) == 36, "Q8_1 block is 36 bytes");
_Static_assert(sizeof(block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(block_q2_K) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(block_q3_K) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(block_q8_K) == 292, "Q8_K block is 292 bytes");
_Static_assert(sizeof(block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");
_Static_assert(sizeof(block_mxfp4) == 17, "MXFP4 block is 17 bytes");
_Static_assert(sizeof(block_tq1_0) == 54, "TQ1_0 block is 54 bytes");
_Static_assert(sizeof(block_tq2_0) == 66, "TQ2_0 block is 66 bytes");
_Static_assert(sizeof(block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");
_Static_assert(sizeof(block_iq3_xxs) == 98, "IQ3_XXS block is 98 bytes");
_Static_assert(sizeof(block_iq2_xs) == 74, "IQ2_XS block is 74 bytes");
_Static_assert(sizeof(block_iq3_s) == 110, "IQ3_S block is 110 bytes");
_Static_assert(sizeof(block_iq2_s) == 82, "IQ2_S block is 82 bytes");
_Static_assert(sizeof(block_iq1_s) == 50, "IQ1_S block is 50 bytes");
_Static_assert(sizeof(block_iq1_m) == 56, "IQ1_M block is 56 bytes");

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t coli_kvalues_iq4nl[16];

/* The 16 E2M1 values of MXFP4 doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * their negatives, times 2), indexed by the 4-bit code. */
extern const int8_t coli_kvalues_mxfp4[16];

/* IQ2_XXS's 256 grid points: 8 magnitudes (bytes 8, 25 or 43, element j in
 * byte j) each (ggml's iq2xxs_grid; quant_tables_iq2.c). */
extern const uint64_t coli_iq2xxs_grid[256];

/* IQ2_XS's 512 grid points, bytes 8, 25 or 43 as IQ2_XXS's (ggml's
 * iq2xs_grid; quant_tables_iq2.c). */
extern const uint64_t coli_iq2xs_grid[512];

/* IQ2_S's 1024 grid points, bytes 8, 25 or 43 (ggml's iq2s_grid;
 * quant_tables_iq2.c). */
extern const uint64_t coli_iq2s_grid[1024];

/* IQ1_S's (and IQ1_M's) 2048 grid points: 8 int8 values -1, 0 or 1,
 * element j in byte j (ggml's iq1s_grid; quant_tables_iq1.c). */
extern const uint64_t coli_iq1s_grid[2048];

/* IQ3_XXS's 256 grid points: 4 magnitudes (bytes 4, 12, ..., 52 and 62,
 * element j in byte j) each (ggml's iq3xxs_grid; quant_tables_iq3.c). */
extern const uint32_t coli_iq3xxs_grid[256];

/* IQ3_S's 512 grid points: 4 magnitudes (odd bytes 1..15) each (ggml's
 * iq3s_grid; quant_tables_iq3.c). */
extern const uint32_t coli_iq3s_grid[512];

/* IQ3_S: the magnitudes of values 8 l .. 8 l + 7 of group g (32 values),
 * the two grid points of their 9-bit indexes as one word */
static inline uint64_t coli_iq3_s_pair(const block_iq3_s *x, int g, int l) {
    const uint8_t *q = x->qs + 8 * g + 2 * l;
    const unsigned h = x->qh[g] >> 2 * l;
    return coli_iq3s_grid[q[0] | (h & 1) << 8] | (uint64_t)coli_iq3s_grid[q[1] | (h & 2) << 7] << 32;
}

/* IQ2_S: the magnitudes of point l (values 8 l .. 8 l + 7) of group ib */
static inline uint64_t coli_iq2_s_point(const block_iq2_s *x, int ib, int l) {
    return coli_iq2s_grid[x->qs[4 * ib + l] | (x->qh[ib] >> 2 * l & 3) << 8];
}

/* The IQ1 types' shift of every grid value, +-1/8 (ggml's IQ1S_DELTA) */
#define COLI_IQ1_DELTA 0.125f

/* IQ1_S: the grid point of values 8 l .. 8 l + 7 of group ib */
static inline uint64_t coli_iq1_s_point(const block_iq1_s *x, int ib, int l) {
    return coli_iq1s_grid[x->qs[4 * ib + l] | (x->qh[ib] >> 3 * l & 7) << 8];
}

/* IQ1_M's fp16 d, gathered from the top nibbles of its scale words */
static inline uint16_t coli_iq1_m_half(const block_iq1_m *x) {
    uint16_t sc[4];
    memcpy(sc, x->scales, sizeof sc);
    return (uint16_t)(sc[0] >> 12 | (sc[1] >> 8 & 0x00f0) | (sc[2] >> 4 & 0x0f00) | (sc[3] & 0xf000));
}

/* IQ1_M: the 3-bit scale of half h of group ib */
static inline int coli_iq1_m_scale(const block_iq1_m *x, int ib, int h) {
    uint16_t sc;
    memcpy(&sc, x->scales + 2 * (ib / 2), sizeof sc);
    return sc >> (6 * (ib % 2) + 3 * h) & 7;
}

/* IQ1_M: the grid point of values 8 l .. 8 l + 7 of group ib, and whether
 * their shift is negative */
static inline uint64_t coli_iq1_m_point(const block_iq1_m *x, int ib, int l) {
    return coli_iq1s_grid[x->qs[4 * ib + l] | (x->qh[2 * ib + l / 2] >> 4 * (l % 2) & 7) << 8];
}
static inline int coli_iq1_m_neg(const block_iq1_m *x, int ib, int l) {
    return x->qh[2 * ib + l / 2] >> (4 * (l % 2) + 3) & 1;
}

/* The 8 sign bits of a 7-bit sign index: bit j set = element j negative;
 * bit 7 makes the count of negatives even (ggml's ksigns_iq2xs). */
static inline uint8_t coli_iq2_signs(unsigned i7) {
    return (uint8_t)(i7 | (unsigned)(__builtin_popcount(i7) & 1) << 7);
}

/* Half the value of an E8M0 scale, 2^(e - 128), as a float (2^-128 and
 * 2^-127 are subnormal; e = 255 gives 2^127, not NaN, as ggml): for e < 2
 * the subnormal bit 21 + e, else the biased exponent e - 1, mantissa 0.
 * Inline: the dot products read one per 32 values. */
static inline float coli_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* dst[0..n) = the values of a row of n values of type t, one of Q4_1, Q5_0,
 * Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS, TQ1_0, TQ2_0, MXFP4 and the IQ grid
 * types (n a multiple of its block size), as ggml's dequantize_row_*
 * computes them (quant_dequant.c). Returns 0, or -1 if t is not one of
 * these types (dst untouched). coli_dequantize_row (quant.h) calls it for
 * these types. */
int coli_dequantize_row_blocks(coli_dtype t, const void *src, float *dst, int64_t n);

/* The same for the IQ grid types (IQ2_XXS, IQ3_XXS, IQ2_XS, IQ3_S, IQ2_S,
 * IQ1_S, IQ1_M; quant_dequant_iq.c).. */
int coli_dequantize_row_iq(coli_dtype t, const void *src, float *dst, int64_t n);

#endif
