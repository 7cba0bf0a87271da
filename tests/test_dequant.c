/*
 * test_dequant.c - dequantization of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K,
 * IQ4_XS, MXFP4, TQ1_0, TQ2_0 and the IQ grid types (core/quant/quant_dequant.c,
 * core/quant/quant_dequant_iq.c).
 *
 * Block level: each block is packed here from chosen logical values
 * (scales, mins, quants) following the ggml format definition element by
 * element (the inverse direction of the code under test), and the values
 * the definition gives are compared with what coli_dequantize_row returns.
 * File level: every tensor of llama.cpp's shipped tiny-kquant-*.gguf is
 * dequantized and compared with the F32 source model it was quantized from.
 * ggml level (MXFP4, TQ1_0, TQ2_0, the IQ types): dequantization of raw blocks and our
 * quantizers' bytes against ggml's recorded answers for the same inputs
 * (tests/fixtures/ggml-ref, tests/ggml_ref_input.h), bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"
#include "core/quant/quantize_rows.h"
#include "tests/ggml_ref_input.h"
#include "tests/ref_models.h"

/* ggml's kvalues_iq4nl, written out from the format definition. */
static const int k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static uint64_t s_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (uint32_t)(s_rng % n);
}

/* A random fp16 scale of either sign around 1/64; its value in *v. */
static uint16_t rnd_half(float *v, int allow_negative) {
    float f = (0.5f + (float)rnd(1000) / 1000.0f) / 64.0f;
    if (allow_negative && rnd(2)) f = -f;
    uint16_t h = coli_fp32_to_fp16(f);
    *v = coli_fp16_to_fp32(h);
    return h;
}

/* Dequantize one block of type t and compare with want[0..n). */
static void check_block(coli_dtype t, const void *blk, const double *want, int n) {
    float got[COLI_QK_K];
    coli_dequantize_row(t, blk, got, n);
    for (int i = 0; i < n; i++)
        cr_assert(fabs((double)got[i] - want[i]) <= 1e-6 * (1.0 + fabs(want[i])),
                  "%s element %d: got %.9g, the format definition gives %.9g", coli_dtype_name(t), i, (double)got[i],
                  want[i]);
}

/* ---- 32-value blocks ---------------------------------------------------- */

/* qs byte j: element j low nibble, element j+16 high nibble; qh bit j: the
 * 5th bit of element j (q5 types). */
static void pack_nibbles(const int *q, uint8_t *qs, uint8_t *qh) {
    memset(qs, 0, 16);
    if (qh) memset(qh, 0, 4);
    for (int e = 0; e < 32; e++) {
        qs[e % 16] |= (uint8_t)((q[e] & 15) << (e < 16 ? 0 : 4));
        if (qh) qh[e / 8] |= (uint8_t)(((q[e] >> 4) & 1) << (e % 8));
    }
}

Test(dequant_block, q4_1_q5_0_q5_1_iq4_nl) {
    for (int rep = 0; rep < 50; rep++) {
        int q[32];
        double want[32];
        float d, m;
        block_q4_1 b41;
        block_q5_0 b50;
        block_q5_1 b51;
        block_iq4_nl bnl;

        for (int e = 0; e < 32; e++) q[e] = (int)rnd(16);
        b41.d = rnd_half(&d, 1);
        b41.m = rnd_half(&m, 1);
        pack_nibbles(q, b41.qs, NULL);
        for (int e = 0; e < 32; e++) want[e] = (double)d * q[e] + m;
        check_block(COLI_Q4_1, &b41, want, 32);

        bnl.d = rnd_half(&d, 1);
        pack_nibbles(q, bnl.qs, NULL);
        for (int e = 0; e < 32; e++) want[e] = (double)d * k_iq4nl[q[e]];
        check_block(COLI_IQ4_NL, &bnl, want, 32);

        for (int e = 0; e < 32; e++) q[e] = (int)rnd(32);
        b50.d = rnd_half(&d, 1);
        pack_nibbles(q, b50.qs, b50.qh);
        for (int e = 0; e < 32; e++) want[e] = (double)d * (q[e] - 16);
        check_block(COLI_Q5_0, &b50, want, 32);

        b51.d = rnd_half(&d, 1);
        b51.m = rnd_half(&m, 1);
        pack_nibbles(q, b51.qs, b51.qh);
        for (int e = 0; e < 32; e++) want[e] = (double)d * q[e] + m;
        check_block(COLI_Q5_1, &b51, want, 32);
    }
}

/* ---- 256-value super-blocks --------------------------------------------- */

/* Q2_K/Q3_K 2-bit field of element e: 128-value halves use 32 bytes each;
 * within a half, the 32-value group g sits at bit 2g of byte e % 32. */
static void put_2bit(uint8_t *qs, int e, int v) {
    qs[32 * (e / 128) + e % 32] |= (uint8_t)((v & 3) << (2 * ((e % 128) / 32)));
}

Test(dequant_block, q2_K) {
    for (int rep = 0; rep < 20; rep++) {
        block_q2_K b = {0};
        int sc[16], mn[16], q[256];
        float d, dmin;
        double want[256];
        b.d = rnd_half(&d, 1);
        b.dmin = rnd_half(&dmin, 1);
        for (int k = 0; k < 16; k++) {
            sc[k] = (int)rnd(16);
            mn[k] = (int)rnd(16);
            b.scales[k] = (uint8_t)(sc[k] | mn[k] << 4);
        }
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(4);
            put_2bit(b.qs, e, q[e]);
        }
        for (int e = 0; e < 256; e++) want[e] = (double)d * sc[e / 16] * q[e] - (double)dmin * mn[e / 16];
        check_block(COLI_Q2_K, &b, want, 256);
    }
}

Test(dequant_block, q3_K) {
    for (int rep = 0; rep < 20; rep++) {
        block_q3_K b = {0};
        int s[16], v[256];
        float d;
        double want[256];
        b.d = rnd_half(&d, 1);
        /* 16 6-bit scales stored as s+32: low 4 bits in bytes 0..7 (k < 8
         * low nibble of byte k, else high nibble of byte k-8), high 2 bits
         * in byte 8 + k%4 at bit 2*(k/4) */
        for (int k = 0; k < 16; k++) {
            s[k] = (int)rnd(64) - 32;
            const int u = s[k] + 32;
            b.scales[k % 8] |= (uint8_t)((u & 15) << (k < 8 ? 0 : 4));
            b.scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
        }
        /* value v in -4..3 stored as u = v + 4: low 2 bits in qs, bit 2 in
         * hmask byte e % 32, bit (e / 32) */
        for (int e = 0; e < 256; e++) {
            v[e] = (int)rnd(8) - 4;
            const int u = v[e] + 4;
            put_2bit(b.qs, e, u);
            b.hmask[e % 32] |= (uint8_t)((u >> 2) << (e / 32));
        }
        for (int e = 0; e < 256; e++) want[e] = (double)d * s[e / 16] * v[e];
        check_block(COLI_Q3_K, &b, want, 256);
    }
}

/* Q4_K/Q5_K: 8 6-bit scales and mins in 12 bytes. j < 4: scales[j] and
 * scales[j+4] hold sc[j], mn[j] in their low 6 bits; j >= 4: low 4 bits in
 * scales[j+4] (sc low nibble, mn high nibble), high 2 bits in the top bits
 * of scales[j-4] (sc) and scales[j] (mn). */
static void pack_scale_min_k4(uint8_t *p, const int *sc, const int *mn) {
    memset(p, 0, 12);
    for (int j = 0; j < 4; j++) {
        p[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        p[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        p[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

/* Element e of a Q4_K/Q5_K block: 64-value group g = e/64 uses qs bytes
 * 32g..32g+31, its first 32 values in low nibbles, the next 32 high. */
static void put_k_nibble(uint8_t *qs, int e, int v) {
    const int g = e / 64, hi = (e % 64) / 32;
    qs[32 * g + e % 32] |= (uint8_t)((v & 15) << (4 * hi));
}

static void test_q45_K(int five_bits) {
    for (int rep = 0; rep < 20; rep++) {
        block_q4_K b4 = {0};
        block_q5_K b5 = {0};
        int sc[8], mn[8], q[256];
        float d, dmin;
        double want[256];
        uint16_t hd = rnd_half(&d, 1), hm = rnd_half(&dmin, 1);
        for (int j = 0; j < 8; j++) {
            sc[j] = (int)rnd(64);
            mn[j] = (int)rnd(64);
        }
        for (int e = 0; e < 256; e++) q[e] = (int)rnd(five_bits ? 32 : 16);
        b4.d = b5.d = hd;
        b4.dmin = b5.dmin = hm;
        pack_scale_min_k4(five_bits ? b5.scales : b4.scales, sc, mn);
        for (int e = 0; e < 256; e++) {
            put_k_nibble(five_bits ? b5.qs : b4.qs, e, q[e]);
            /* Q5_K: 5th bit of element e in qh[e % 32], bit e / 32 */
            if (five_bits) b5.qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
        }
        for (int e = 0; e < 256; e++) want[e] = (double)d * sc[e / 32] * q[e] - (double)dmin * mn[e / 32];
        if (five_bits)
            check_block(COLI_Q5_K, &b5, want, 256);
        else
            check_block(COLI_Q4_K, &b4, want, 256);
    }
}

Test(dequant_block, q4_K) { test_q45_K(0); }
Test(dequant_block, q5_K) { test_q45_K(1); }

Test(dequant_block, q6_K) {
    for (int rep = 0; rep < 20; rep++) {
        block_q6_K b = {0};
        int q[256];
        float d;
        double want[256];
        b.d = rnd_half(&d, 1);
        for (int k = 0; k < 16; k++) b.scales[k] = (int8_t)((int)rnd(256) - 128);
        /* per 128 values n: quarter k = (e%128)/32, l = e%32; low 4 bits in
         * ql[64n + l + 32*(k&1)] (low nibble for k < 2, high for k >= 2),
         * high 2 bits in qh[32n + l] at bit 2k; value = d*scale*(q - 32) */
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(64);
            const int n = e / 128, k = (e % 128) / 32, l = e % 32;
            b.ql[64 * n + l + 32 * (k & 1)] |= (uint8_t)((q[e] & 15) << (k >= 2 ? 4 : 0));
            b.qh[32 * n + l] |= (uint8_t)((q[e] >> 4) << (2 * k));
        }
        for (int e = 0; e < 256; e++) want[e] = (double)d * b.scales[e / 16] * (q[e] - 32);
        check_block(COLI_Q6_K, &b, want, 256);
    }
}

Test(dequant_block, iq4_xs) {
    for (int rep = 0; rep < 20; rep++) {
        block_iq4_xs b = {0};
        int ls[8], idx[256];
        float d;
        double want[256];
        b.d = rnd_half(&d, 1);
        /* 6-bit scale of 32-value block ib: low 4 bits in nibble ib%2 of
         * scales_l[ib/2], high 2 bits at bit 2*ib of scales_h */
        for (int ib = 0; ib < 8; ib++) {
            ls[ib] = (int)rnd(64);
            b.scales_l[ib / 2] |= (uint8_t)((ls[ib] & 15) << (4 * (ib % 2)));
            b.scales_h |= (uint16_t)((ls[ib] >> 4) << (2 * ib));
        }
        for (int e = 0; e < 256; e++) {
            idx[e] = (int)rnd(16);
            const int ib = e / 32, j = e % 32;
            b.qs[16 * ib + j % 16] |= (uint8_t)(idx[e] << (j < 16 ? 0 : 4));
        }
        for (int e = 0; e < 256; e++) want[e] = (double)d * (ls[e / 32] - 32) * k_iq4nl[idx[e]];
        check_block(COLI_IQ4_XS, &b, want, 256);
    }
}

/* An E2M1 code's value from its bits: sign, 2 exponent bits (bias 1; 0 is
 * subnormal), 1 mantissa bit. */
static double e2m1(int code) {
    const int sign = code >> 3, ex = (code >> 1) & 3, man = code & 1;
    const double v = ex == 0 ? 0.5 * man : ldexp(1.0 + 0.5 * man, ex - 1);
    return sign ? -v : v;
}

Test(dequant_block, mxfp4) {
    for (int rep = 0; rep < 40; rep++) {
        block_mxfp4 b = {0};
        int code[32];
        b.e = (uint8_t)(100 + rep); /* scale 2^(e - 127) */
        for (int j = 0; j < 32; j++) {
            code[j] = (int)rnd(16);
            b.qs[j % 16] |= (uint8_t)(code[j] << (j < 16 ? 0 : 4));
        }
        double want[32];
        for (int j = 0; j < 32; j++) want[j] = ldexp(e2m1(code[j]), b.e - 127);
        check_block(COLI_MXFP4, &b, want, 32);
    }
}

/* TQ1_0 byte of base-3 digits t[0] (most significant) .. t[n-1], padded
 * to 5 digits: ceil(N * 256 / 243). */
static uint8_t tq1_pack(const int *t, int stride, int n) {
    int num = 0;
    for (int k = 0; k < 5; k++) num = num * 3 + (k < n ? t[k * stride] + 1 : 0);
    return (uint8_t)((num * 256 + 242) / 243);
}

Test(dequant_block, tq1_0_and_tq2_0) {
    for (int rep = 0; rep < 20; rep++) {
        int t[256];
        float d;
        double want[256];
        for (int e = 0; e < 256; e++) t[e] = (int)rnd(3) - 1;
        block_tq1_0 b1;
        block_tq2_0 b2 = {0};
        b1.d = b2.d = rnd_half(&d, 1);
        /* TQ1_0: bytes m < 32 hold values m + 32k, bytes 32 + m values
         * 160 + m + 16k, qh[m] values 240 + m + 4k */
        for (int m = 0; m < 32; m++) b1.qs[m] = tq1_pack(t + m, 32, 5);
        for (int m = 0; m < 16; m++) b1.qs[32 + m] = tq1_pack(t + 160 + m, 16, 5);
        for (int m = 0; m < 4; m++) b1.qh[m] = tq1_pack(t + 240 + m, 4, 4);
        /* TQ2_0: value 128c + 32k + m at bits 2k of byte 32c + m */
        for (int e = 0; e < 256; e++) b2.qs[32 * (e / 128) + e % 32] |= (uint8_t)((t[e] + 1) << (2 * ((e % 128) / 32)));
        for (int e = 0; e < 256; e++) want[e] = (double)d * t[e];
        check_block(COLI_TQ1_0, &b1, want, 256);
        check_block(COLI_TQ2_0, &b2, want, 256);
    }
}

/* The grid's shape (what the format says of it: 256 points of 8
 * magnitudes 8, 25 or 43; ggml lists them ascending) and the sign rule:
 * 7 stored bits, the 8th makes the count of negatives even. */
Test(dequant_block, iq2_xxs_tables) {
    for (int i = 0; i < 256; i++) {
        if (i) cr_assert_gt(coli_iq2xxs_grid[i], coli_iq2xxs_grid[i - 1], "entry %d", i);
        for (int j = 0; j < 8; j++) {
            const int m = (int)(coli_iq2xxs_grid[i] >> 8 * j) & 0xff;
            cr_assert(m == 8 || m == 25 || m == 43, "entry %d byte %d: %d", i, j, m);
        }
    }
    for (unsigned i = 0; i < 128; i++) {
        const uint8_t s = coli_iq2_signs(i);
        cr_assert_eq(s & 127, i);
        cr_assert_eq(__builtin_popcount(s) % 2, 0, "signs of %u: %#x", i, s);
    }
}

Test(dequant_block, iq2_xxs) {
    for (int rep = 0; rep < 20; rep++) {
        block_iq2_xxs b;
        float d;
        double want[256];
        b.d = rnd_half(&d, 1);
        uint8_t *q = (uint8_t *)b.qs;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t ls = rnd(16);
            uint32_t aux = ls << 28;
            for (int l = 0; l < 4; l++) {
                const int idx = (int)rnd(256);
                unsigned neg = rnd(256);
                if (__builtin_popcount(neg) % 2) neg ^= 0x80; /* an even count: bit 7 follows from 0..6 */
                q[8 * ib + l] = (uint8_t)idx;
                aux |= (neg & 127) << 7 * l;
                for (int j = 0; j < 8; j++) {
                    const int m = (int)(coli_iq2xxs_grid[idx] >> 8 * j) & 0xff;
                    want[32 * ib + 8 * l + j] = (double)d * (0.5 + ls) / 4 * m * (neg >> j & 1 ? -1 : 1);
                }
            }
            memcpy(q + 8 * ib + 4, &aux, 4);
        }
        check_block(COLI_IQ2_XXS, &b, want, 256);
    }
}

/* The grids of the other IQ types: what the format says of each (its entry
 * count, the element values it allows, distinct points in ascending order;
 * IQ1_S's int8 elements -1, 0, 1 ascend with the last element most
 * significant, i.e. with 1 added to every byte) and byte for byte the table
 * ggml de3ff815 holds (fixtures/ggml-ref/<file>.grid). */
typedef struct iq_grid {
    const char *file;
    const void *tab;
    int n, want_n, width; /* entries (ours, the format's), bytes per entry */
    uint8_t values[8];    /* the allowed element bytes */
    int n_values;
    uint8_t bias; /* added to each byte before the order check */
} iq_grid;
#define IQ_GRID(file, tab, want_n, bias, ...)                                                    \
    {                                                                                            \
        file, tab, (int)(sizeof tab / sizeof tab[0]), want_n, (int)sizeof tab[0], {__VA_ARGS__}, \
            (int)sizeof((uint8_t[]){__VA_ARGS__}), bias                                          \
    }
static const iq_grid k_iq_grids[] = {
    IQ_GRID("iq3_xxs", coli_iq3xxs_grid, 256, 0, 4, 12, 20, 28, 36, 44, 52, 62),
    IQ_GRID("iq2_xs", coli_iq2xs_grid, 512, 0, 8, 25, 43),
    IQ_GRID("iq2_s", coli_iq2s_grid, 1024, 0, 8, 25, 43),
    IQ_GRID("iq1_s", coli_iq1s_grid, 2048, 1, 0xff, 0, 1),
    IQ_GRID("iq3_s", coli_iq3s_grid, 512, 0, 1, 3, 5, 7, 9, 11, 13, 15),
};

static uint64_t s_grid_entry(const iq_grid *g, int i, uint8_t bias) {
    uint64_t e = 0;
    memcpy(&e, (const uint8_t *)g->tab + (size_t)i * (size_t)g->width, (size_t)g->width);
    for (int j = 0; j < g->width; j++)
        e = (e & ~((uint64_t)0xff << 8 * j)) | (uint64_t)(uint8_t)((e >> 8 * j) + bias) << 8 * j;
    return e;
}

static void read_fixture(const char *name, void *dst, size_t n);

Test(dequant_block, iq_grids_shape_and_ggml_tables) {
    static uint8_t want[2048 * 8];
    for (size_t gi = 0; gi < sizeof k_iq_grids / sizeof k_iq_grids[0]; gi++) {
        const iq_grid *g = &k_iq_grids[gi];
        cr_assert_eq(g->n, g->want_n, "%s: %d entries", g->file, g->n);
        for (int i = 0; i < g->n; i++) {
            if (i)
                cr_assert_gt(s_grid_entry(g, i, g->bias), s_grid_entry(g, i - 1, g->bias), "%s entry %d", g->file, i);
            const uint64_t e = s_grid_entry(g, i, 0);
            for (int j = 0; j < g->width; j++) {
                const uint8_t m = (uint8_t)(e >> 8 * j);
                cr_assert(memchr(g->values, m, (size_t)g->n_values), "%s entry %d byte %d: %#x", g->file, i, j, m);
            }
        }
        char name[64];
        snprintf(name, sizeof name, "%s.grid", g->file);
        read_fixture(name, want, (size_t)g->n * (size_t)g->width);
        cr_assert(memcmp(g->tab, want, (size_t)g->n * (size_t)g->width) == 0, "%s: not ggml's table", g->file);
    }
}

Test(dequant_block, rows_of_several_blocks_are_blockwise) {
    /* a row of 3 Q6_K blocks dequantizes to the 3 blocks one after another */
    block_q6_K row[3];
    for (size_t i = 0; i < sizeof row; i++) ((uint8_t *)row)[i] = (uint8_t)rnd(256);
    for (int k = 0; k < 3; k++) row[k].d = coli_fp32_to_fp16(0.01f * (float)(k + 1));
    float whole[768], one[256];
    coli_dequantize_row(COLI_Q6_K, row, whole, 768);
    for (int k = 0; k < 3; k++) {
        coli_dequantize_row(COLI_Q6_K, &row[k], one, 256);
        cr_assert_eq(memcmp(one, whole + 256 * k, sizeof one), 0, "block %d", k);
    }
}

/* ---- the shipped llama.cpp files against their F32 source -------------- */

/* Relative RMSE bound per type: about 1.5 times what a b-bit quantizer of
 * Gaussian data typically reaches (Q2_K ~0.3, Q3_K ~0.15, 4 bits ~0.08,
 * 5 bits ~0.04, Q6_K ~0.02), far below the ~1.0-1.4 of a wrong layout
 * (swapped nibbles or scales give values of the right size at the wrong
 * places). */
static double rel_rmse_bound(coli_dtype t) {
    switch (t) {
    case COLI_Q2_K: return 0.45;
    case COLI_Q3_K: return 0.23;
    case COLI_Q4_K:
    case COLI_Q4_1:
    case COLI_IQ4_NL:
    case COLI_IQ4_XS: return 0.12;
    case COLI_Q5_K:
    case COLI_Q5_0:
    case COLI_Q5_1: return 0.06;
    case COLI_Q6_K: return 0.03;
    default: return 0.0; /* F32: identical */
    }
}

static void check_file_against_f32(const char *qfile) {
    s_require_shared();
    char f32path[4096], qpath[4096];
    s_ref_model("tiny-kquant-f32.gguf", f32path, sizeof f32path);
    snprintf(qpath, sizeof qpath, "%s/reference/models/%s", s_shared(), qfile);
    gguf_file *fq = NULL, *fs = NULL;
    cr_assert_eq(gguf_open(qpath, &fq), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_open(f32path, &fs), 0, "%s", coli_last_error());
    int n_new = 0;
    for (int64_t i = 0; i < gguf_n_tensors(fq); i++) {
        const coli_tensor *tq = gguf_tensor(fq, i);
        const coli_tensor *ts = gguf_find_tensor(fs, tq->name);
        cr_assert(ts && ts->type == COLI_F32, "%s: no F32 source tensor", tq->name);
        const int64_t n = coli_tensor_nelems(tq);
        cr_assert_eq(n, coli_tensor_nelems(ts), "%s: element count", tq->name);
        float *v = malloc((size_t)n * sizeof(float));
        cr_assert(v);
        coli_dequantize_row(tq->type, tq->data, v, n);
        const float *src = ts->data;
        double err2 = 0.0, ref2 = 0.0;
        for (int64_t k = 0; k < n; k++) {
            double e = (double)v[k] - src[k];
            err2 += e * e;
            ref2 += (double)src[k] * src[k];
        }
        free(v);
        const double rel = sqrt(err2 / ref2);
        if (tq->type != COLI_F32) n_new++;
        cr_log_info("%s %-28s %-6s rel rmse %.4f", qfile, tq->name, coli_dtype_name(tq->type), rel);
        cr_expect(rel <= rel_rmse_bound(tq->type), "%s %s (%s): relative RMSE %.4f > %.2f", qfile, tq->name,
                  coli_dtype_name(tq->type), rel, rel_rmse_bound(tq->type));
    }
    cr_expect_gt(n_new, 0, "%s has no quantized tensors", qfile);
    gguf_close(&fq);
    gguf_close(&fs);
}

Test(dequant_file, q3_k_m, .timeout = 120) { check_file_against_f32("tiny-kquant-q3_k_m.gguf"); }
Test(dequant_file, iq4_xs, .timeout = 120) { check_file_against_f32("tiny-kquant-iq4_xs.gguf"); }
Test(dequant_file, q4_1, .timeout = 120) { check_file_against_f32("tiny-kquant-q4_1.gguf"); }
Test(dequant_file, q5_1, .timeout = 120) { check_file_against_f32("tiny-kquant-q5_1.gguf"); }

/* ---- ggml's recorded answers (tests/fixtures/ggml-ref) ------------------- */

typedef struct ref_type {
    coli_dtype t;
    const char *file;      /* fixtures/ggml-ref/<file>.q, .deq */
    int group;             /* gri_floats group: the block size */
    uint32_t qseed, dseed; /* qseed 0: no quantizer (IQ2_XXS needs an imatrix) */
    int scale_off, e8m0;   /* gri_blocks: where the scale is */
} ref_type;

static const ref_type k_ref_types[] = {
    {COLI_MXFP4, "mxfp4", 32, 1, 2, 0, 1},
    {COLI_TQ1_0, "tq1_0", 256, 3, 4, (int)offsetof(block_tq1_0, d), 0},
    {COLI_TQ2_0, "tq2_0", 256, 5, 6, (int)offsetof(block_tq2_0, d), 0},
    {COLI_IQ2_XXS, "iq2_xxs", 256, 0, 9, 0, 0},
    {COLI_IQ3_XXS, "iq3_xxs", 256, 0, 11, 0, 0},
    {COLI_IQ1_M, "iq1_m", 256, 0, 21, 0, 0},
    {COLI_IQ1_S, "iq1_s", 256, 0, 19, 0, 0},
    {COLI_IQ2_S, "iq2_s", 256, 0, 17, 0, 0},
    {COLI_IQ3_S, "iq3_s", 256, 0, 15, 0, 0},
    {COLI_IQ2_XS, "iq2_xs", 256, 0, 13, 0, 0},
};

static void read_fixture(const char *name, void *dst, size_t n) {
    cr_assert_eq(gri_read_fixture(name, dst, n), 0, "tests/fixtures/ggml-ref/%s: missing or not %zu bytes", name, n);
}

static void first_difference(const void *a, const void *b, size_t n, size_t unit, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (((const uint8_t *)a)[i] != ((const uint8_t *)b)[i])
            cr_assert_fail("%s: first difference in element %zu (byte %zu)", what, i / unit, i);
}

Test(ggml_ref, dequantize_bit_for_bit) {
    static uint8_t raw[GRI_N_DEQUANT * 2];
    static float got[GRI_N_DEQUANT], want[GRI_N_DEQUANT];
    for (size_t i = 0; i < sizeof k_ref_types / sizeof k_ref_types[0]; i++) {
        const ref_type *r = &k_ref_types[i];
        char name[64];
        snprintf(name, sizeof name, "%s.deq", r->file);
        read_fixture(name, want, sizeof want);
        if (r->t == COLI_IQ1_M) /* its d is spread over the scale words */
            gri_blocks_iq1_m(raw, GRI_N_DEQUANT / r->group, r->dseed);
        else
            gri_blocks(raw, GRI_N_DEQUANT / r->group, (int)coli_dtype_block_bytes(r->t), r->scale_off, r->e8m0,
                       r->dseed);
        coli_dequantize_row(r->t, raw, got, GRI_N_DEQUANT);
        first_difference(got, want, sizeof got, sizeof(float), coli_dtype_name(r->t));
    }
}

Test(ggml_ref, quantize_bytes_equal_ggml_ref_quantizer) {
    static float x[GRI_N_QUANT];
    static uint8_t got[GRI_N_QUANT], want[GRI_N_QUANT];
    for (size_t i = 0; i < sizeof k_ref_types / sizeof k_ref_types[0]; i++) {
        const ref_type *r = &k_ref_types[i];
        if (!r->qseed) continue;
        const size_t n = coli_row_bytes(r->t, GRI_N_QUANT);
        char name[64];
        snprintf(name, sizeof name, "%s.q", r->file);
        read_fixture(name, want, n);
        gri_floats(x, GRI_N_QUANT, r->group, r->qseed);
        coli_quantize_row(r->t, x, got, GRI_N_QUANT);
        first_difference(got, want, n, coli_dtype_block_bytes(r->t), coli_dtype_name(r->t));
    }
}

Test(ggml_ref, quantizers_survive_extreme_rows) {
    /* no crash and a defined scale for what ggml leaves undefined: a block
     * below 2^-125, one with an infinity, one with a NaN */
    float x[256] = {0};
    uint8_t out[256];
    x[0] = 0x1p-140f;
    coli_quantize_row(COLI_MXFP4, x, out, 32);
    cr_assert_eq(out[0], 0, "MXFP4 exponent of a 2^-140 block");
    x[0] = INFINITY;
    coli_quantize_row(COLI_MXFP4, x, out, 32);
    cr_assert_eq(out[0], 255);
    x[1] = NAN;
    coli_quantize_row(COLI_TQ1_0, x, out, 256);
    coli_quantize_row(COLI_TQ2_0, x, out, 256);
}
