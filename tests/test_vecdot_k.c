/*
 * test_vecdot_k.c - the K-quant and IQ4_XS dot products (vecdot_k.c,
 * vecdot_k_avx2.c, vecdot_k_avx512.c) and the Q8_K activation quantizer,
 * every path of each: the AVX-512 ones must give the AVX2 ones' bits.
 *
 * Weights: random quant bytes with sane fp16 scales (quant_util.h), and
 * constant bytes against constant activations (extreme quants, all -127).
 * Reference: the weight row dequantized by coli_dequantize_row (written
 * from ggml's dequantize_row_*, independently of the dot products) times
 * the Q8_K row read as d*q, summed in float64. Tolerances are relative to
 * the largest magnitude a term can have in each block (its fp16 scales
 * times the format's largest scale and quant), times sum |x|: each kernel
 * rounds a handful of times per block, so a wrong bit, scale or sub-block
 * is far outside them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"
#include "tests/quant_util.h"
#include "core/kernels/vecdot.h"
#include "core/kernels/vecdot_k_impl.h"

typedef struct ktype {
    const char *name;
    coli_dtype t;
    size_t block_bytes;
    coli_vec_dot_fn portable, avx2;
    coli_vec_dot_tokens_fn avx2_tokens;
} ktype;

static const ktype k_types[] = {
    {"Q2_K", COLI_Q2_K, sizeof(block_q2_K), coli_vec_dot_q2_K_q8_K, coli_vec_dot_q2_K_q8_K_avx2,
     coli_vec_dot_q2_K_q8_K_avx2_tokens},
    {"Q3_K", COLI_Q3_K, sizeof(block_q3_K), coli_vec_dot_q3_K_q8_K, coli_vec_dot_q3_K_q8_K_avx2,
     coli_vec_dot_q3_K_q8_K_avx2_tokens},
    {"Q4_K", COLI_Q4_K, sizeof(block_q4_K), coli_vec_dot_q4_K_q8_K, coli_vec_dot_q4_K_q8_K_avx2,
     coli_vec_dot_q4_K_q8_K_avx2_tokens},
    {"Q5_K", COLI_Q5_K, sizeof(block_q5_K), coli_vec_dot_q5_K_q8_K, coli_vec_dot_q5_K_q8_K_avx2,
     coli_vec_dot_q5_K_q8_K_avx2_tokens},
    {"Q6_K", COLI_Q6_K, sizeof(block_q6_K), coli_vec_dot_q6_K_q8_K, coli_vec_dot_q6_K_q8_K_avx2,
     coli_vec_dot_q6_K_q8_K_avx2_tokens},
    {"IQ4_XS", COLI_IQ4_XS, sizeof(block_iq4_xs), coli_vec_dot_iq4_xs_q8_K, coli_vec_dot_iq4_xs_q8_K_avx2,
     coli_vec_dot_iq4_xs_q8_K_avx2_tokens},
    /* TQ1_0, TQ2_0: no several-token kernels (matmul calls the dot per token) */
    {"TQ1_0", COLI_TQ1_0, sizeof(block_tq1_0), coli_vec_dot_tq1_0_q8_K, coli_vec_dot_tq1_0_q8_K_avx2, NULL},
    {"TQ2_0", COLI_TQ2_0, sizeof(block_tq2_0), coli_vec_dot_tq2_0_q8_K, coli_vec_dot_tq2_0_q8_K_avx2, NULL},
    {"IQ2_XXS", COLI_IQ2_XXS, sizeof(block_iq2_xxs), coli_vec_dot_iq2_xxs_q8_K, coli_vec_dot_iq2_xxs_q8_K_avx2,
     coli_vec_dot_iq2_xxs_q8_K_avx2_tokens},
    {"IQ3_XXS", COLI_IQ3_XXS, sizeof(block_iq3_xxs), coli_vec_dot_iq3_xxs_q8_K, coli_vec_dot_iq3_xxs_q8_K_avx2,
     coli_vec_dot_iq3_xxs_q8_K_avx2_tokens},
    {"IQ1_M", COLI_IQ1_M, sizeof(block_iq1_m), coli_vec_dot_iq1_m_q8_K, coli_vec_dot_iq1_m_q8_K_avx2,
     coli_vec_dot_iq1_m_q8_K_avx2_tokens},
    {"IQ1_S", COLI_IQ1_S, sizeof(block_iq1_s), coli_vec_dot_iq1_s_q8_K, coli_vec_dot_iq1_s_q8_K_avx2,
     coli_vec_dot_iq1_s_q8_K_avx2_tokens},
    {"IQ2_S", COLI_IQ2_S, sizeof(block_iq2_s), coli_vec_dot_iq2_s_q8_K, coli_vec_dot_iq2_s_q8_K_avx2,
     coli_vec_dot_iq2_s_q8_K_avx2_tokens},
    {"IQ3_S", COLI_IQ3_S, sizeof(block_iq3_s), coli_vec_dot_iq3_s_q8_K, coli_vec_dot_iq3_s_q8_K_avx2,
     coli_vec_dot_iq3_s_q8_K_avx2_tokens},
    {"IQ2_XS", COLI_IQ2_XS, sizeof(block_iq2_xs), coli_vec_dot_iq2_xs_q8_K, coli_vec_dot_iq2_xs_q8_K_avx2,
     coli_vec_dot_iq2_xs_q8_K_avx2_tokens},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static const int64_t k_lengths[] = {256, 768, 4096};
#define N_LENGTHS (sizeof k_lengths / sizeof k_lengths[0])

static float frand(unsigned *s) { return (float)qu_next(s) / 8388608.0f - 1.0f; }

static float fp16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return coli_fp16_to_fp32(h);
}

/* largest |value| one weight of the block can take: its d (and dmin)
 * times the format's largest scale and |quant| (and largest min) */
static double term_bound(const ktype *k, const uint8_t *blk) {
    int od, om;
    qu_scale_offsets(k->t, &od, &om);
    double ad = fabs(coli_fp16_to_fp32(qu_get_d(k->t, blk, od))), am = om >= 0 ? fabs(fp16_at(blk + om)) : 0.0;
    switch (k->t) {
    case COLI_Q2_K: return ad * 15 * 3 + am * 15;
    case COLI_Q3_K: return ad * 32 * 4;
    case COLI_Q4_K: return ad * 63 * 15 + am * 63;
    case COLI_Q5_K: return ad * 63 * 31 + am * 63;
    case COLI_Q6_K: return ad * 128 * 32;
    case COLI_TQ1_0:
    case COLI_TQ2_0: return ad * 2; /* TQ1_0's bytes above 242 decode to 1; TQ2_0's code 3 to 2 */
    case COLI_IQ2_XXS:
    case COLI_IQ2_XS: return ad * 15.5 / 4 * 43;
    case COLI_IQ3_XXS: return ad * 15.5 / 2 * 62;
    case COLI_IQ3_S: return ad * 31 * 15;
    case COLI_IQ2_S: return ad * 15.5 / 4 * 43;
    case COLI_IQ1_S: return ad * 15 * 1.125;
    case COLI_IQ1_M: return ad * 15 * 1.125;
    default: return ad * 32 * 127;
    }
}

/* n/256 weight blocks: quant_util.h's random blocks, or every byte `fill`
 * (fill >= 0) with scales d = -0.01, dmin = 0.004 */
static uint8_t *make_weights(const ktype *k, int64_t n, unsigned seed, int fill) {
    int64_t nb = n / COLI_QK_K;
    uint8_t *w = malloc(k->block_bytes * (size_t)nb);
    cr_assert(w);
    if (fill < 0) {
        qu_random_blocks(k->t, w, nb, &seed);
        return w;
    }
    memset(w, fill, k->block_bytes * (size_t)nb);
    int od, om;
    qu_scale_offsets(k->t, &od, &om);
    uint16_t d = coli_fp32_to_fp16(-0.01f), dmin = coli_fp32_to_fp16(0.004f);
    for (int64_t b = 0; b < nb; b++) {
        qu_put_d(k->t, w + (size_t)b * k->block_bytes, od, d);
        if (om >= 0) memcpy(w + (size_t)b * k->block_bytes + om, &dmin, 2);
    }
    return w;
}

/* activations: random, with outliers; or constant `c` if c != 0 */
static block_q8_K *make_acts(int64_t n, unsigned seed, float c) {
    float *x = malloc(sizeof(float) * (size_t)n);
    block_q8_K *q = malloc(sizeof(block_q8_K) * (size_t)(n / COLI_QK_K));
    cr_assert(x && q);
    for (int64_t i = 0; i < n; i++) x[i] = c != 0.0f ? c : frand(&seed) * (i % 37 == 0 ? 8.0f : 1.0f);
    coli_quantize_act_q8_K(x, q, n);
    free(x);
    return q;
}

/* float64 dot of the dequantized weights and d*q activations; *mag = sum
 * over blocks of term_bound * sum |activation| */
static double reference_dot(const ktype *k, const uint8_t *w, const block_q8_K *x, int64_t n, double *mag) {
    float *wf = malloc(sizeof(float) * (size_t)n);
    cr_assert(wf);
    coli_dequantize_row(k->t, w, wf, n);
    double dot = 0.0;
    *mag = 0.0;
    for (int64_t b = 0; b < n / COLI_QK_K; b++) {
        double xsum = 0.0;
        for (int l = 0; l < COLI_QK_K; l++) {
            double xv = (double)x[b].d * x[b].qs[l];
            dot += (double)wf[b * COLI_QK_K + l] * xv;
            xsum += fabs(xv);
        }
        *mag += term_bound(k, w + (size_t)b * k->block_bytes) * xsum;
    }
    free(wf);
    return dot;
}

/* (weight fill, activation constant) patterns besides random: extreme
 * quants against all -127 activations (x constant negative) and +127 */
static const struct {
    int fill;
    float c;
} k_patterns[] = {
    {-1, 0.0f}, {0xff, -1.0f}, {0x00, -1.0f}, {0xff, 1.0f}, {0x00, 0.5f}, {0x55, 0.0f}, {0xaa, -3.0f},
};
#define N_PATTERNS (sizeof k_patterns / sizeof k_patterns[0])

Test(vecdot_k, portable_matches_dequantized_reference) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const ktype *k = &k_types[ti];
        for (size_t li = 0; li < N_LENGTHS; li++) {
            for (size_t pi = 0; pi < N_PATTERNS; pi++) {
                int64_t n = k_lengths[li];
                unsigned seed = (unsigned)(1000 * ti + 10 * li + pi + 1);
                uint8_t *w = make_weights(k, n, seed, k_patterns[pi].fill);
                block_q8_K *x = make_acts(n, seed * 7u, k_patterns[pi].c);
                double mag, want = reference_dot(k, w, x, n, &mag);
                double got = k->portable(n, w, x);
                cr_assert(fabs(got - want) <= 1e-6 * mag,
                          "%s n=%lld pattern %zu: portable %.9g, reference %.9g (scale of terms %.3g)", k->name,
                          (long long)n, pi, got, want, mag);
                free(w);
                free(x);
            }
        }
    }
}

Test(vecdot_k, avx2_matches_portable) {
    if (!coli_cpu_avx2()) cr_skip_test("CPU lacks AVX2/FMA/F16C");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const ktype *k = &k_types[ti];
        for (size_t li = 0; li < N_LENGTHS; li++) {
            for (size_t pi = 0; pi < N_PATTERNS; pi++) {
                int64_t n = k_lengths[li];
                unsigned seed = (unsigned)(5000 + 1000 * ti + 10 * li + pi);
                uint8_t *w = make_weights(k, n, seed, k_patterns[pi].fill);
                block_q8_K *x = make_acts(n, seed * 3u, k_patterns[pi].c);
                double mag;
                (void)reference_dot(k, w, x, n, &mag);
                float port = k->portable(n, w, x), fast = k->avx2(n, w, x);
                cr_assert(fabs((double)fast - port) <= 1e-6 * mag,
                          "%s n=%lld pattern %zu: avx2 %.9g, portable %.9g (scale of terms %.3g)", k->name,
                          (long long)n, pi, fast, port, mag);
                free(w);
                free(x);
            }
        }
    }
}

/* 1..4 activation rows at once: each output has the single call's bits */
Test(vecdot_k, tokens_equal_single_calls) {
    if (!coli_cpu_avx2()) cr_skip_test("CPU lacks AVX2/FMA/F16C");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const ktype *k = &k_types[ti];
        if (!k->avx2_tokens) continue;
        for (size_t li = 0; li < N_LENGTHS; li++) {
            int64_t n = k_lengths[li];
            size_t row = sizeof(block_q8_K) * (size_t)(n / COLI_QK_K), stride = row + 4 * li;
            uint8_t *w = make_weights(k, n, (unsigned)(300 + 10 * ti + li), -1);
            uint8_t *xs = malloc(4 * stride);
            cr_assert(xs);
            for (int t = 0; t < 4; t++) {
                block_q8_K *x = make_acts(n, (unsigned)(700 + 10 * ti + t), t == 3 ? -2.0f : 0.0f);
                memcpy(xs + t * stride, x, row);
                free(x);
            }
            for (int nt = 1; nt <= COLI_VEC_DOT_MAX_TOKENS; nt++) {
                float out[COLI_VEC_DOT_MAX_TOKENS];
                k->avx2_tokens(n, w, xs, stride, out, nt);
                for (int t = 0; t < nt; t++) {
                    float one = k->avx2(n, w, xs + t * stride);
                    cr_assert(memcmp(&one, &out[t], sizeof one) == 0, "%s n=%lld %d rows, row %d: %.9g, single %.9g",
                              k->name, (long long)n, nt, t, out[t], one);
                }
            }
            free(w);
            free(xs);
        }
    }
}

/* same inputs, same bits: repeated calls, and the same rows at addresses
 * off the 32-byte grid (still aligned for their fp16/float fields, as
 * rows in a file and the matmul scratch are): no alignment-dependent path */
/* TQ1_0/TQ2_0 and the IQ types: AVX2 sums each super-block exactly and
 * takes the portable float steps, so the bits are the same */
Test(vecdot_k, exact_sum_avx2_equals_portable_bits) {
    if (!coli_cpu_avx2()) cr_skip_test("CPU lacks AVX2/FMA/F16C");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const ktype *k = &k_types[ti];
        if (k->t < COLI_IQ2_XXS || k->t == COLI_IQ4_XS) continue; /* the K-quants: their own float steps */
        for (size_t li = 0; li < N_LENGTHS; li++)
            for (size_t pi = 0; pi < N_PATTERNS; pi++) {
                const int64_t n = k_lengths[li];
                const unsigned seed = (unsigned)(9000 + 100 * ti + 10 * li + pi);
                uint8_t *w = make_weights(k, n, seed, k_patterns[pi].fill);
                block_q8_K *x = make_acts(n, seed * 5u, k_patterns[pi].c);
                const float port = k->portable(n, w, x), fast = k->avx2(n, w, x);
                cr_assert(memcmp(&port, &fast, sizeof port) == 0, "%s n=%lld pattern %zu: avx2 %.9g, portable %.9g",
                          k->name, (long long)n, pi, fast, port);
                free(w);
                free(x);
            }
    }
}

Test(vecdot_k, deterministic) {
    const int64_t n = 1024;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const ktype *k = &k_types[ti];
        size_t wbytes = k->block_bytes * (size_t)(n / COLI_QK_K), xbytes = sizeof(block_q8_K) * (size_t)(n / COLI_QK_K);
        uint8_t *w = make_weights(k, n, (unsigned)(77 + ti), -1);
        block_q8_K *x = make_acts(n, (unsigned)(91 + ti), 0.0f);
        uint8_t *w2 = malloc(wbytes + 2), *x2 = malloc(xbytes + 4);
        cr_assert(w2 && x2);
        memcpy(w2 + 2, w, wbytes);
        memcpy(x2 + 4, x, xbytes);
        coli_vec_dot_fn fns[2] = {k->portable, coli_cpu_avx2() ? k->avx2 : k->portable};
        for (int f = 0; f < 2; f++) {
            float a = fns[f](n, w, x), b = fns[f](n, w, x), c = fns[f](n, w2 + 2, x2 + 4);
            cr_assert(memcmp(&a, &b, sizeof a) == 0 && memcmp(&a, &c, sizeof a) == 0, "%s path %d: %.9g %.9g %.9g",
                      k->name, f, a, b, c);
        }
        free(w);
        free(x);
        free(w2);
        free(x2);
    }
}

/* ---- AVX-512 kernels: the bits of the AVX2 ones --------------------------- */

static const struct {
    size_t avx2; /* index in k_types */
    coli_vec_dot_fn one;
    coli_vec_dot_tokens_fn many;
} k_avx512[] = {
    {0, coli_vec_dot_q2_K_q8_K_avx512, coli_vec_dot_q2_K_q8_K_avx512_tokens},
    {1, coli_vec_dot_q3_K_q8_K_avx512, coli_vec_dot_q3_K_q8_K_avx512_tokens},
    {2, coli_vec_dot_q4_K_q8_K_avx512, coli_vec_dot_q4_K_q8_K_avx512_tokens},
    {3, coli_vec_dot_q5_K_q8_K_avx512, coli_vec_dot_q5_K_q8_K_avx512_tokens},
    {4, coli_vec_dot_q6_K_q8_K_avx512, coli_vec_dot_q6_K_q8_K_avx512_tokens},
    {5, coli_vec_dot_iq4_xs_q8_K_avx512, coli_vec_dot_iq4_xs_q8_K_avx512_tokens},
};

/* d (and dmin) of every block of the row set to extreme fp16 values: the
 * largest finite, the smallest subnormal, or 0 */
static void set_scales(const ktype *k, uint8_t *w, int64_t nb, float d, float dmin) {
    int od, om;
    qu_scale_offsets(k->t, &od, &om);
    uint16_t hd = coli_fp32_to_fp16(d), hm = coli_fp32_to_fp16(dmin);
    for (int64_t b = 0; b < nb; b++) {
        qu_put_d(k->t, w + (size_t)b * k->block_bytes, od, hd);
        if (om >= 0) memcpy(w + (size_t)b * k->block_bytes + om, &hm, 2);
    }
}

/* weight variants: random blocks, constant bytes, random blocks with
 * extreme scales (largest fp16, subnormal d, zero d with a large dmin) */
static uint8_t *variant_weights(const ktype *k, int64_t n, int v, unsigned seed) {
    static const int fills[] = {-1, 0xff, 0x00, 0x55, -1, -1, -1};
    uint8_t *w = make_weights(k, n, seed, fills[v]);
    const int64_t nb = n / COLI_QK_K;
    if (v == 4) set_scales(k, w, nb, 65504.0f, 65504.0f);
    if (v == 5) set_scales(k, w, nb, -5.96e-8f, 5.96e-8f);
    if (v == 6) set_scales(k, w, nb, 0.0f, -1000.0f);
    return w;
}
#define N_VARIANTS 7

/* one weight row against 4 activation rows (random with outliers, then
 * all -127, then random): every group of 1..4 rows and every single call
 * of the 512-bit kernel has the bits of the AVX2 single call */
static void check_avx512_row(size_t i, int64_t n, int v) {
    const ktype *k = &k_types[k_avx512[i].avx2];
    const size_t row = sizeof(block_q8_K) * (size_t)(n / COLI_QK_K), stride = row + 16;
    uint8_t *w = variant_weights(k, n, v, (unsigned)(900 + 31 * i + 7 * v + n));
    uint8_t *xs = malloc(4 * stride);
    cr_assert(xs);
    for (int t = 0; t < 4; t++) {
        block_q8_K *x = make_acts(n, (unsigned)(1300 + 10 * i + t + n), t == 1 ? -1.0f : 0.0f);
        memcpy(xs + t * stride, x, row);
        free(x);
    }
    float want[4];
    for (int t = 0; t < 4; t++) want[t] = k->avx2(n, w, xs + t * stride);
    for (int t = 0; t < 4; t++) {
        float one = k_avx512[i].one(n, w, xs + t * stride);
        cr_assert(memcmp(&one, &want[t], sizeof one) == 0, "%s n=%lld variant %d row %d: avx512 %.9g, avx2 %.9g",
                  k->name, (long long)n, v, t, one, want[t]);
    }
    for (int nt = 1; nt <= COLI_VEC_DOT_MAX_TOKENS; nt++)
        for (int first = 0; first + nt <= 4; first++) {
            float out[COLI_VEC_DOT_MAX_TOKENS];
            k_avx512[i].many(n, w, xs + first * stride, stride, out, nt);
            for (int t = 0; t < nt; t++)
                cr_assert(memcmp(&out[t], &want[first + t], sizeof out[t]) == 0,
                          "%s n=%lld variant %d, %d rows from %d, row %d: avx512 %.9g, avx2 %.9g", k->name,
                          (long long)n, v, nt, first, t, out[t], want[first + t]);
        }
    free(w);
    free(xs);
}

Test(vecdot_k, avx512_equals_avx2_bits) {
    if (!coli_cpu_avx512()) cr_skip_test("no AVX-512 BW/DQ/VNNI on this CPU");
    static const int64_t blocks[] = {1, 2, 5};
    for (size_t i = 0; i < sizeof k_avx512 / sizeof k_avx512[0]; i++)
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
            for (int v = 0; v < N_VARIANTS; v++) check_avx512_row(i, blocks[b] * COLI_QK_K, v);
}

/* ---- Q8_K quantizer -------------------------------------------------------- */

typedef void (*q8k_fn)(const float *x, block_q8_K *y, int64_t n);

/* the Q8_K quantizers this CPU can run; returns how many */
static int q8k_paths(q8k_fn fns[2]) {
    fns[0] = coli_quantize_act_q8_K_portable;
    fns[1] = coli_quantize_act_q8_K_avx2;
    return coli_cpu_avx2() ? 2 : 1;
}

static void check_bsums(const block_q8_K *b) {
    for (int g = 0; g < COLI_QK_K / 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b->qs[16 * g + l];
        cr_assert_eq(b->bsums[g], s, "bsums[%d] = %d, sum of its quants %d", g, b->bsums[g], s);
    }
}

Test(vecdot_k, q8_K_zero_block) {
    float x[2 * COLI_QK_K] = {0};
    block_q8_K y[2];
    x[COLI_QK_K + 3] = 1.0f; /* second block not zero */
    q8k_fn fns[2];
    for (int f = 0; f < q8k_paths(fns); f++) {
        memset(y, 0x5a, sizeof y);
        fns[f](x, y, 2 * COLI_QK_K);
        cr_assert_eq(y[0].d, 0.0f);
        for (int j = 0; j < COLI_QK_K; j++) cr_assert_eq(y[0].qs[j], 0);
        for (int g = 0; g < COLI_QK_K / 16; g++) cr_assert_eq(y[0].bsums[g], 0);
        /* the only nonzero value is the max: iscale = -127/1, d = 1/iscale */
        cr_assert_eq(y[1].qs[3], -127);
        cr_assert_eq(y[1].d, 1.0f / -127.0f);
        cr_assert_eq(y[1].bsums[0], -127);
    }
}

/* the first value of largest |x| keeps its sign and maps to -127
 * (llama.cpp's iscale = -127/max, "for IQ2_XXS"), the opposite one to +127 */
Test(vecdot_k, q8_K_max_sign_and_cap) {
    float x[COLI_QK_K];
    for (int j = 0; j < COLI_QK_K; j++) x[j] = (float)((j % 5) - 2) * 0.25f; /* |x| <= 0.5 */
    x[20] = -2.0f;
    x[40] = 2.0f; /* same |x|, later: not the max */
    block_q8_K y;
    q8k_fn fns[2];
    for (int f = 0; f < q8k_paths(fns); f++) {
        fns[f](x, &y, COLI_QK_K);
        cr_assert_eq(y.d, 1.0f / 63.5f, "d = 1/iscale = max/-127: %g", y.d);
        cr_assert_eq(y.qs[20], -127);
        cr_assert_eq(y.qs[40], 127, "%d", y.qs[40]);
        /* iscale = 63.5: x = 0.25 -> 15.875 -> 16, -0.5 -> -31.75 -> -32 */
        cr_assert_eq(y.qs[3], 16);
        cr_assert_eq(y.qs[0], -32);
        check_bsums(&y);
    }
}

/* iscale*x exactly half-way rounds to even, as ggml's nearest_int does */
Test(vecdot_k, q8_K_rounds_half_to_even) {
    float x[COLI_QK_K] = {0};
    x[0] = -127.0f; /* max: iscale = 1, d = 1 */
    const float in[] = {0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 126.5f, -126.5f, 3.4999f};
    const int want[] = {0, 2, 2, -2, 0, 126, -126, 3};
    for (int i = 0; i < 8; i++) x[1 + i] = in[i];
    block_q8_K y;
    q8k_fn fns[2];
    for (int f = 0; f < q8k_paths(fns); f++) {
        fns[f](x, &y, COLI_QK_K);
        cr_assert_eq(y.d, 1.0f);
        for (int i = 0; i < 8; i++)
            cr_assert_eq(y.qs[1 + i], want[i], "path %d: x=%g -> %d, want %d", f, in[i], y.qs[1 + i], want[i]);
        check_bsums(&y);
    }
}

Test(vecdot_k, q8_K_random_bsums_and_error) {
    unsigned seed = 4242;
    float x[4 * COLI_QK_K];
    for (int i = 0; i < 4 * COLI_QK_K; i++) x[i] = frand(&seed) * (float)(1 + i / COLI_QK_K);
    block_q8_K y[4];
    q8k_fn fns[2];
    for (int f = 0; f < q8k_paths(fns); f++) {
        fns[f](x, y, 4 * COLI_QK_K);
        for (int b = 0; b < 4; b++) {
            check_bsums(&y[b]);
            for (int j = 0; j < COLI_QK_K; j++) {
                /* at most half a step (nothing is capped: |iscale * x| <= 127) */
                double err = fabs((double)y[b].d * y[b].qs[j] - x[b * COLI_QK_K + j]);
                cr_assert(err <= 0.5 * fabs(y[b].d) * 1.0001, "block %d value %d: error %g, step %g", b, j, err,
                          y[b].d);
            }
        }
    }
}

/* the AVX2 quantizer writes the portable one's bytes: random rows, exact
 * half-way products, ties for the max, zeros, NaN and Inf */
Test(vecdot_k, q8_K_avx2_same_bytes) {
    if (!coli_cpu_avx2()) cr_skip_test("CPU lacks AVX2/FMA/F16C");
    enum {
        NB = 12,
        N = NB * COLI_QK_K
    };
    static float x[N];
    unsigned seed = 31337;
    for (int i = 0; i < N; i++) x[i] = frand(&seed) * (float)(1 + i % 5);
    for (int i = 0; i < COLI_QK_K; i++) x[COLI_QK_K + i] = (float)(i % 254 - 127) + 0.5f; /* halves */
    x[COLI_QK_K + 255] = -127.0f;                                                         /* the max: iscale 1 */
    for (int i = 0; i < COLI_QK_K; i++) x[2 * COLI_QK_K + i] = (i % 2 ? 3.0f : -3.0f);    /* ties for the max */
    memset(x + 3 * COLI_QK_K, 0, sizeof(float) * COLI_QK_K);
    x[4 * COLI_QK_K + 9] = NAN;
    x[5 * COLI_QK_K + 200] = INFINITY;
    x[6 * COLI_QK_K + 17] = -INFINITY;
    x[7 * COLI_QK_K + 255] = 1e30f;
    x[8 * COLI_QK_K] = -1e-30f; /* subnormal-range scales */
    for (int i = 1; i < COLI_QK_K; i++) x[8 * COLI_QK_K + i] = 1e-31f * (float)(i % 7);
    block_q8_K a[NB], b[NB];
    memset(a, 0x11, sizeof a);
    memset(b, 0x22, sizeof b);
    coli_quantize_act_q8_K_portable(x, a, N);
    coli_quantize_act_q8_K_avx2(x, b, N);
    for (int k = 0; k < NB; k++)
        cr_assert(memcmp(&a[k], &b[k], sizeof a[k]) == 0, "block %d differs (d %g vs %g)", k, a[k].d, b[k].d);
    /* and the public entry point is one of them */
    coli_quantize_act_q8_K(x, b, N);
    cr_assert(memcmp(a, b, sizeof a) == 0);
}
