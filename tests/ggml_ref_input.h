/*
 * ggml_ref_input.h - the inputs behind tests/fixtures/ggml-ref/: a row of
 * floats to quantize and a row of raw blocks to dequantize, per block type,
 * from a fixed 32-bit LCG. The program that recorded ggml's answers
 * (tests/fixtures/ggml-ref/README) includes this header, so the test and
 * the recording see the same bytes. Plain C, no project headers.
 *
 * The float rows mix, per 32 values (MXFP4) or per 256 (TQ1_0/TQ2_0), the
 * cases a rounding rule can get wrong: uniform values at several
 * magnitudes, a grid of quarter steps (exact ties between two levels), all
 * zeros, tiny normal values, one spike among small values, exact halves of
 * the largest value (lroundf's ties) and ternary-looking values.
 */
#ifndef COLI_TESTS_GGML_REF_INPUT_H
#define COLI_TESTS_GGML_REF_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define GRI_N_QUANT 2048   /* floats quantized per type */
#define GRI_N_DEQUANT 1024 /* values dequantized per type */

static inline uint32_t gri_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8; /* 24 bits */
}

/* uniform in [-1, 1) in steps of 2^-23 */
static inline float gri_uniform(uint32_t *s) { return (float)(int32_t)gri_next(s) / 8388608.0f - 1.0f; }

/* n floats (a multiple of group) in groups of `group` values, each group of
 * the kind its index selects. */
static inline void gri_floats(float *x, int n, int group, uint32_t seed) {
    uint32_t s = seed;
    for (int g = 0; g < n / group; g++) {
        float *v = x + g * group;
        const int kind = g % 8;
        for (int j = 0; j < group; j++) {
            const float u = gri_uniform(&s);
            switch (kind) {
            case 0: v[j] = u; break;
            case 1: v[j] = u * 1e-3f; break;
            case 2: v[j] = u * 300.0f; break;
            case 3: v[j] = (float)((int)(gri_next(&s) % 25) - 12) * 0.25f; break; /* ties */
            case 4: v[j] = 0.0f; break;
            case 5: v[j] = u * 0x1p-100f; break;
            case 6: v[j] = j == group / 3 ? -50.0f : u * 0.01f; break;
            default: v[j] = (float)((int)(gri_next(&s) % 5) - 2) * 0.5f + u * 0.01f * (float)(j % 2); break;
            }
        }
    }
}

/* nb raw blocks of block_bytes bytes: random bytes, then the scale made
 * sane. scale_off: offset of the scale; e8m0: the scale is MXFP4's one-byte
 * exponent (0, 1, 2, 254, 255, 127 first, then 7b + 3), else an
 * fp16 in +-[2^-7, 2^-6) written from its bits (no fp16 helper needed), 0.0
 * in the last block. */
static inline void gri_blocks(uint8_t *dst, int nb, int block_bytes, int scale_off, int e8m0, uint32_t seed) {
    static const uint8_t k_edges[] = {0, 1, 2, 254, 255, 127};
    uint32_t s = seed;
    for (int b = 0; b < nb; b++) {
        uint8_t *blk = dst + b * block_bytes;
        for (int i = 0; i < block_bytes; i++) blk[i] = (uint8_t)gri_next(&s);
        if (e8m0) {
            blk[scale_off] = b < 6 ? k_edges[b] : (uint8_t)(b * 7 + 3);
        } else {
            /* sign, exponent 8 (2^-7), random mantissa */
            uint16_t h = (uint16_t)((gri_next(&s) & 1) << 15 | 8 << 10 | (gri_next(&s) & 0x3ff));
            if (b == nb - 1) h = 0;
            memcpy(blk + scale_off, &h, 2);
        }
    }
}

/* IQ1_M keeps its fp16 scale in the top 4 bits of its four 16-bit block
 * scales (bytes 48..55, nibble k of the half in scale word k): nb blocks
 * of gri_blocks with the sane half written at offset 0 (the first two
 * index bytes, random anyway) and moved there. */
static inline void gri_blocks_iq1_m(uint8_t *dst, int nb, uint32_t seed) {
    gri_blocks(dst, nb, 56, 0, 0, seed);
    for (int b = 0; b < nb; b++) {
        uint8_t *blk = dst + b * 56;
        const unsigned h = (unsigned)blk[0] | (unsigned)blk[1] << 8;
        for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0f) | ((h >> 4 * k) & 15) << 4);
    }
}

/* tests/fixtures/ggml-ref/<name> into dst, which it must fill exactly:
 * 0, or -1 (missing, short or long). Run from the repository root. */
static inline int gri_read_fixture(const char *name, void *dst, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/ggml-ref/%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    const size_t got = fread(dst, 1, n, f);
    const int extra = fgetc(f) != EOF;
    fclose(f);
    return got == n && !extra ? 0 : -1;
}

#endif
