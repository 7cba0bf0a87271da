/*
 * test_vecdot_legacy.c - the Q8_1 activation quantizer and the Q4_1,
 * Q5_0, Q5_1, IQ4_NL, MXFP4 dot products (core/kernels/vecdot_legacy*.c,
 * core/kernels/vecdot_fp4_ternary.c) against a float64 reference built from
 * coli_dequantize_row (test_dequant checks it against the format
 * definition), portable and AVX2. The ggml_ref suite: MXFP4, TQ1_0 and
 * TQ2_0 against ggml's recorded dot products (tests/fixtures/ggml-ref) and
 * within the error bound of ggml's test-quantize-fns.
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
#include "tests/ggml_ref_input.h"

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (uint32_t)(s_rng % n);
}
static float rnd_gauss(void) {
    float s = 0.0f;
    for (int i = 0; i < 12; i++) s += (float)rnd(1u << 20) / (float)(1u << 20);
    return s - 6.0f;
}

/* ---- Q8_1 activations --------------------------------------------------- */

Test(act_q8_1, follows_the_definition_and_matches_q8_0_values) {
    for (int rep = 0; rep < 200; rep++) {
        float x[64];
        const float scale = rep % 3 == 0 ? 1e-3f : (rep % 3 == 1 ? 1.0f : 300.0f);
        for (int i = 0; i < 64; i++) x[i] = rnd_gauss() * scale;
        if (rep == 0) memset(x, 0, sizeof x); /* all zero: d = 0, q = 0 */
        if (rep == 1) {                       /* amax 127: q = x, halves round to even */
            memset(x, 0, sizeof x);
            x[0] = 127.0f;
            x[1] = 0.5f;
            x[2] = 1.5f;
            x[3] = 2.5f;
            x[4] = -2.5f;
        }
        block_q8_1 y[2];
        block_q8_0 ref[2];
        coli_quantize_act_q8_1(x, y, 64);
        coli_quantize_act_q8_0(x, ref, 64);
        for (int b = 0; b < 2; b++) {
            double amax = 0.0;
            for (int j = 0; j < 32; j++) amax = fmax(amax, fabs((double)x[32 * b + j]));
            cr_assert_eq(y[b].d, coli_fp32_to_fp16((float)amax / 127.0f), "block %d scale", b);
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                /* round half to even of x * 127/amax (the same values as Q8_0's) */
                cr_assert_eq(y[b].qs[j], ref[b].qs[j], "rep %d block %d value %d", rep, b, j);
                const double exact = amax > 0 ? (double)x[32 * b + j] * 127.0 / amax : 0.0;
                cr_assert(fabs(y[b].qs[j] - exact) <= 0.5 + 1e-4, "value %d: %d for %g", j, y[b].qs[j], exact);
                sum += y[b].qs[j];
            }
            cr_assert_eq(y[b].d, ref[b].d);
            if (rep == 1 && b == 0)
                cr_assert(y[0].qs[1] == 0 && y[0].qs[2] == 2 && y[0].qs[3] == 2 && y[0].qs[4] == -2,
                          "ties: %d %d %d %d", y[0].qs[1], y[0].qs[2], y[0].qs[3], y[0].qs[4]);
            cr_assert_eq(y[b].s, coli_fp32_to_fp16((float)amax / 127.0f * (float)sum), "block %d sum", b);
        }
    }
}

/* ---- dot products ------------------------------------------------------- */

typedef struct legacy_case {
    coli_dtype wtype;
    int act_q8_1; /* activations Q8_1 (else Q8_0) */
    coli_vec_dot_fn portable, avx2;
} legacy_case;

static const legacy_case k_cases[] = {
    {COLI_Q4_1, 1, coli_vec_dot_q4_1_q8_1, coli_vec_dot_q4_1_q8_1_avx2},
    {COLI_Q5_0, 0, coli_vec_dot_q5_0_q8_0, coli_vec_dot_q5_0_q8_0_avx2},
    {COLI_Q5_1, 1, coli_vec_dot_q5_1_q8_1, coli_vec_dot_q5_1_q8_1_avx2},
    {COLI_IQ4_NL, 0, coli_vec_dot_iq4_nl_q8_0, coli_vec_dot_iq4_nl_q8_0_avx2},
    {COLI_MXFP4, 0, coli_vec_dot_mxfp4_q8_0, coli_vec_dot_mxfp4_q8_0_avx2},
};

static unsigned s_wseed = 12345u;

static void random_weights(coli_dtype t, uint8_t *w, int nb) { qu_random_blocks(t, w, nb, &s_wseed); }

/* Reference: sum of w * x in float64 over the dequantized rows; the
 * tolerance covers float rounding of the block sums, and, for Q8_1, the
 * fp16 rounding of s = d * sum(q) that the dot uses for the minimum term. */
static double reference(const legacy_case *c, const uint8_t *w, const void *xq, int n, double *tol) {
    float wf[512];
    coli_dequantize_row(c->wtype, w, wf, n);
    double sum = 0.0, mag = 0.0;
    *tol = 0.0;
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *xb = (const uint8_t *)xq + (size_t)b * (c->act_q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0));
        uint16_t dh;
        memcpy(&dh, xb, 2);
        const double dx = coli_fp16_to_fp32(dh);
        const int8_t *q = (const int8_t *)(xb + (c->act_q8_1 ? 4 : 2));
        double qsum = 0.0;
        for (int j = 0; j < 32; j++) {
            sum += (double)wf[32 * b + j] * dx * q[j];
            mag += fabs((double)wf[32 * b + j] * dx * q[j]);
            qsum += q[j];
        }
        if (c->act_q8_1) {
            uint16_t sh, mh;
            memcpy(&sh, xb + 2, 2);
            memcpy(&mh, w + (size_t)b * coli_dtype_block_bytes(c->wtype) + 2, 2);
            *tol += fabs((double)coli_fp16_to_fp32(mh)) * fabs(coli_fp16_to_fp32(sh) - dx * qsum);
        }
    }
    *tol += 1e-5 * (mag + 1e-30);
    return sum;
}

static void check_case(const legacy_case *c, int n) {
    uint8_t w[24 * 16]; /* 16 blocks of the largest type */
    float x[512];
    uint8_t xq[36 * 16];
    const int nb = n / 32;
    random_weights(c->wtype, w, nb);
    for (int i = 0; i < n; i++) x[i] = rnd_gauss();
    if (c->act_q8_1)
        coli_quantize_act_q8_1(x, (block_q8_1 *)xq, n);
    else
        coli_quantize_act_q8_0(x, (block_q8_0 *)xq, n);
    double tol;
    const double want = reference(c, w, xq, n, &tol);
    const float got = c->portable(n, w, xq);
    cr_assert(fabs((double)got - want) <= tol, "%s n %d portable: %.9g, reference %.9g (tol %.3g)",
              coli_dtype_name(c->wtype), n, (double)got, want, tol);
    if (!coli_cpu_avx2()) return;
    const float got2 = c->avx2(n, w, xq);
    cr_assert(fabs((double)got2 - want) <= tol, "%s n %d avx2: %.9g, reference %.9g (tol %.3g)",
              coli_dtype_name(c->wtype), n, (double)got2, want, tol);
}

Test(vecdot_legacy, portable_and_avx2_match_float64_reference) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        for (int nb = 1; nb <= 16; nb++) /* odd counts: IQ4_NL's tail block */
            for (int rep = 0; rep < 10; rep++) check_case(&k_cases[i], 32 * nb);
}

Test(vecdot_legacy, zero_activations_give_zero) {
    uint8_t w[24 * 4];
    float x[128] = {0};
    uint8_t xq[36 * 4];
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const legacy_case *c = &k_cases[i];
        random_weights(c->wtype, w, 4);
        if (c->act_q8_1)
            coli_quantize_act_q8_1(x, (block_q8_1 *)xq, 128);
        else
            coli_quantize_act_q8_0(x, (block_q8_0 *)xq, 128);
        cr_expect_eq(c->portable(128, w, xq), 0.0f, "%s", coli_dtype_name(c->wtype));
        if (coli_cpu_avx2()) cr_expect_eq(c->avx2(128, w, xq), 0.0f, "%s avx2", coli_dtype_name(c->wtype));
    }
}

/* ---- ggml's recorded dot products and error bound ------------------------ */

typedef struct ref_dot {
    coli_dtype t;
    const char *file, *act_file;
    coli_vec_dot_fn portable, avx2;
    int ggml_avx2_same; /* our AVX2 takes llama.cpp's AVX2 steps: its bits too */
    uint32_t wseed;     /* weights: gri_blocks of this seed (no quantizer), or 0: <file>.q */
} ref_dot;

static const ref_dot k_ref_dots[] = {
    {COLI_MXFP4, "mxfp4", "act_q8_0", coli_vec_dot_mxfp4_q8_0, coli_vec_dot_mxfp4_q8_0_avx2, 1, 0},
    {COLI_TQ1_0, "tq1_0", "act_q8_K", coli_vec_dot_tq1_0_q8_K, coli_vec_dot_tq1_0_q8_K_avx2, 0, 0},
    {COLI_TQ2_0, "tq2_0", "act_q8_K", coli_vec_dot_tq2_0_q8_K, coli_vec_dot_tq2_0_q8_K_avx2, 0, 0},
    {COLI_IQ2_XXS, "iq2_xxs", "act_q8_K", coli_vec_dot_iq2_xxs_q8_K, coli_vec_dot_iq2_xxs_q8_K_avx2, 0, 10},
    {COLI_IQ3_XXS, "iq3_xxs", "act_q8_K", coli_vec_dot_iq3_xxs_q8_K, coli_vec_dot_iq3_xxs_q8_K_avx2, 0, 12},
    {COLI_IQ1_M, "iq1_m", "act_q8_K", coli_vec_dot_iq1_m_q8_K, coli_vec_dot_iq1_m_q8_K_avx2, 0, 22},
    {COLI_IQ1_S, "iq1_s", "act_q8_K", coli_vec_dot_iq1_s_q8_K, coli_vec_dot_iq1_s_q8_K_avx2, 0, 20},
    {COLI_IQ2_S, "iq2_s", "act_q8_K", coli_vec_dot_iq2_s_q8_K, coli_vec_dot_iq2_s_q8_K_avx2, 0, 18},
    {COLI_IQ3_S, "iq3_s", "act_q8_K", coli_vec_dot_iq3_s_q8_K, coli_vec_dot_iq3_s_q8_K_avx2, 0, 16},
    {COLI_IQ2_XS, "iq2_xs", "act_q8_K", coli_vec_dot_iq2_xs_q8_K, coli_vec_dot_iq2_xs_q8_K_avx2, 0, 14},
};
#define N_REF_DOTS (sizeof k_ref_dots / sizeof k_ref_dots[0])

static void read_fixture(const char *name, const char *ext, void *dst, size_t n) {
    char file[64];
    snprintf(file, sizeof file, "%s%s", name, ext);
    cr_assert_eq(gri_read_fixture(file, dst, n), 0, "tests/fixtures/ggml-ref/%s: missing or not %zu bytes", file, n);
}

/* The dot product of the first k blocks, k = 1.. (as the fixture holds
 * them), against ggml's: the portable one against the generic C, the AVX2
 * one against ggml's AVX2 where it takes its steps, else the portable. */
Test(ggml_ref, dot_products_bit_for_bit) {
    static uint8_t w[GRI_N_QUANT], act[GRI_N_QUANT * 2];
    static float want[GRI_N_QUANT / 32], want_avx2[GRI_N_QUANT / 32];
    for (size_t i = 0; i < N_REF_DOTS; i++) {
        const ref_dot *r = &k_ref_dots[i];
        const int64_t blk = coli_dtype_block_elems(r->t), nk = GRI_N_QUANT / blk;
        const coli_dtype at = blk == 32 ? COLI_Q8_0 : COLI_Q8_K;
        if (r->t == COLI_IQ1_M) /* its d is spread over the scale words */
            gri_blocks_iq1_m(w, (int)nk, r->wseed);
        else if (r->wseed)
            gri_blocks(w, (int)nk, (int)coli_dtype_block_bytes(r->t), 0, 0, r->wseed);
        else
            read_fixture(r->file, ".q", w, coli_row_bytes(r->t, GRI_N_QUANT));
        read_fixture(r->act_file, "", act, coli_row_bytes(at, GRI_N_QUANT));
        read_fixture(r->file, ".dot", want, (size_t)nk * sizeof(float));
        read_fixture(r->file, ".dot_avx2", want_avx2, (size_t)nk * sizeof(float));
        for (int64_t k = 1; k <= nk; k++) {
            const float got = r->portable(k * blk, w, act);
            cr_assert(memcmp(&got, &want[k - 1], sizeof got) == 0, "%s, %lld blocks: portable %.9g, ggml %.9g",
                      coli_dtype_name(r->t), (long long)k, got, want[k - 1]);
            if (!coli_cpu_avx2()) continue;
            const float fast = r->avx2(k * blk, w, act);
            const float *ref = r->ggml_avx2_same ? &want_avx2[k - 1] : &got;
            cr_assert(memcmp(&fast, ref, sizeof fast) == 0, "%s, %lld blocks: avx2 %.9g, expected %.9g",
                      coli_dtype_name(r->t), (long long)k, fast, *ref);
            if (r->t != COLI_MXFP4 || !coli_cpu_avx512()) continue;
            const float wide = coli_vec_dot_mxfp4_q8_0_avx512(k * blk, w, act);
            cr_assert(memcmp(&wide, ref, sizeof wide) == 0, "%s, %lld blocks: avx512 %.9g, expected %.9g",
                      coli_dtype_name(r->t), (long long)k, wide, *ref);
        }
    }
}

/* ggml's test-quantize-fns: weights 0.1 + 2 cos(i), activations
 * 0.1 + 2 cos(i + 1), 4096 of each, quantized (weights by our quantizer,
 * activations by the activation format's); |dot - float dot| / n below
 * 0.02 for MXFP4 (MAX_DOT_PRODUCT_ERROR) and 0.15 for the ternary types
 * (MAX_DOT_PRODUCT_ERROR_TERNARY). */
Test(ggml_ref, dot_error_within_test_quantize_fns_bound) {
    enum {
        N = 32 * 128
    };
    static float a[N], b[N];
    static uint8_t wq[N], xq[N * 2];
    for (int i = 0; i < N; i++) {
        a[i] = 0.1f + 2.0f * cosf((float)i);
        b[i] = 0.1f + 2.0f * cosf((float)i + 1.0f);
    }
    double ref = 0.0;
    for (int i = 0; i < N; i++) ref += a[i] * b[i];
    for (size_t i = 0; i < N_REF_DOTS; i++) {
        const ref_dot *r = &k_ref_dots[i];
        if (r->wseed) continue; /* no quantizer */
        coli_quantize_row(r->t, a, wq, N);
        if (r->t == COLI_MXFP4)
            coli_quantize_act_q8_0(b, (block_q8_0 *)xq, N);
        else
            coli_quantize_act_q8_K(b, (block_q8_K *)xq, N);
        const double bound = r->t == COLI_MXFP4 ? 0.02 : 0.15;
        const double e1 = fabs(r->portable(N, wq, xq) - ref) / N;
        cr_assert(e1 < bound, "%s portable: error %.6f, bound %.2f", coli_dtype_name(r->t), e1, bound);
        if (!coli_cpu_avx2()) continue;
        const double e2 = fabs(r->avx2(N, wq, xq) - ref) / N;
        cr_assert(e2 < bound, "%s avx2: error %.6f, bound %.2f", coli_dtype_name(r->t), e2, bound);
    }
}

/* MXFP4's 512-bit kernel: the AVX2 kernel's bits, one token and 1..4 at
 * once, for odd and even block counts and extreme scales */
Test(vecdot_legacy, mxfp4_avx512_equals_avx2_bits) {
    if (!coli_cpu_avx512()) cr_skip_test("CPU lacks AVX-512 BW/DQ/VNNI");
    enum {
        NB = 19
    };
    static block_mxfp4 w[NB];
    static block_q8_0 x[4][NB];
    unsigned seed = 77;
    for (int rep = 0; rep < 20; rep++) {
        qu_random_blocks(COLI_MXFP4, (uint8_t *)w, NB, &seed);
        if (rep == 1) w[0].e = 254; /* 2^126: products overflow to inf */
        if (rep == 2) w[1].e = 0;   /* subnormal scale */
        for (int t = 0; t < 4; t++) {
            float xf[NB * 32];
            for (int i = 0; i < NB * 32; i++) xf[i] = rnd_gauss();
            coli_quantize_act_q8_0(xf, x[t], NB * 32);
        }
        for (int nb = 1; nb <= NB; nb++) {
            float a[4], b[4];
            coli_vec_dot_mxfp4_q8_0_avx2_tokens(nb * 32, w, x, sizeof x[0], a, 4);
            for (int nt = 1; nt <= 4; nt++) {
                coli_vec_dot_mxfp4_q8_0_avx512_tokens(nb * 32, w, x, sizeof x[0], b, nt);
                for (int t = 0; t < nt; t++)
                    cr_assert(memcmp(&a[t], &b[t], sizeof a[t]) == 0,
                              "rep %d, %d blocks, %d tokens, token %d: %.9g vs %.9g", rep, nb, nt, t, b[t], a[t]);
            }
            const float one = coli_vec_dot_mxfp4_q8_0_avx512(nb * 32, w, x[0]);
            cr_assert(memcmp(&one, &a[0], sizeof one) == 0, "rep %d, %d blocks: %.9g vs %.9g", rep, nb, one, a[0]);
        }
    }
}
