/*
 * test_vecdot_legacy.c - the Q8_1 activation quantizer and the Q4_1,
 * Q5_0, Q5_1, IQ4_NL dot products (core/vecdot_legacy*.c) against a
 * float64 reference built from coli_dequantize_row (test_dequant checks
 * it against the format definition), portable and AVX2.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "tests/quant_util.h"
#include "core/vecdot.h"

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
    uint8_t w[24 * 16];
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
