/*
 * test_matmul.c - coli_matmul for every weight type against a float64
 * reference (dequantized weights, inputs rounded as llama.cpp does), the
 * AVX2 and portable paths against each other, and the determinism
 * contract of matmul.h: a row alone, in a batch, on 1 or 2 threads gives
 * the same bits.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/cpu_features.h"
#include "core/kernels/matmul.h"
#include "core/kernels/matmul_dispatch.h"
#include "core/quant/quant.h"
#include "tests/quant_util.h"
#include "core/kernels/vecdot.h"

static const coli_dtype k_types[] = {
    COLI_F32,     COLI_F16,     COLI_BF16,   COLI_Q8_0,  COLI_Q4_0,  COLI_Q4_1,   COLI_Q5_0,  COLI_Q5_1,  COLI_IQ4_NL,
    COLI_Q2_K,    COLI_Q3_K,    COLI_Q4_K,   COLI_Q5_K,  COLI_Q6_K,  COLI_IQ4_XS, COLI_MXFP4, COLI_TQ1_0, COLI_TQ2_0,
    COLI_IQ2_XXS, COLI_IQ3_XXS, COLI_IQ2_XS, COLI_IQ3_S, COLI_IQ2_S, COLI_IQ1_S,  COLI_IQ1_M};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/* Types we cannot quantize here (no weight quantizer in core): random
 * blocks with sane scales instead. */
static int random_weights(coli_dtype t) { return coli_dtype_block_elems(t) > 1 && t != COLI_Q8_0 && t != COLI_Q4_0; }

/* A row length of whole blocks for t: `small` for the 32-value types (and
 * the float ones), the next multiple of 256 for the 256-value types. */
static int64_t row_len(coli_dtype t, int64_t small) {
    const int64_t b = coli_dtype_block_elems(t);
    return b == COLI_QK_K ? (small + b - 1) / b * b : small;
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

typedef struct problem {
    coli_dtype t;
    int64_t n_in, n_out, n_tok;
    uint8_t *w; /* quantized weights */
    float *x;   /* (n_tok, n_in) */
} problem;

static problem make_problem(coli_dtype t, int64_t n_in, int64_t n_out, int64_t n_tok, unsigned seed) {
    problem p = {t, n_in, n_out, n_tok, NULL, NULL};
    size_t rb = coli_row_bytes(t, n_in);
    p.w = malloc(rb * (size_t)n_out);
    p.x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    cr_assert(p.w && p.x && row);
    for (int64_t r = 0; r < n_out; r++) {
        if (random_weights(t)) {
            qu_random_blocks(t, p.w + (size_t)r * rb, n_in / coli_dtype_block_elems(t), &seed);
            continue;
        }
        for (int64_t k = 0; k < n_in; k++) row[k] = frand(&seed) * (1.0f + (float)(r % 3));
        coli_quantize_row(t, row, p.w + (size_t)r * rb, n_in);
    }
    for (int64_t i = 0; i < n_in * n_tok; i++) p.x[i] = frand(&seed) * (i % 7 == 0 ? 4.0f : 1.0f);
    free(row);
    return p;
}

static void free_problem(problem *p) {
    free(p->w);
    free(p->x);
}

/* x as the kernels see it: rounded to the weight type's input format.
 * For Q8_1 inputs, s_err[b] = fp16(s) - d * sum(q) of block b: the dot
 * products use the stored s for the weights' minimum term. */
static void rounded_input(coli_dtype t, const float *x, int64_t n, double *out, double *s_err) {
    if (t == COLI_F32) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i];
        return;
    }
    if (t == COLI_F16) {
        for (int64_t i = 0; i < n; i++) out[i] = coli_fp16_to_fp32(coli_fp32_to_fp16(x[i]));
        return;
    }
    if (t == COLI_BF16) {
        for (int64_t i = 0; i < n; i++) out[i] = coli_bf16_to_fp32(coli_fp32_to_bf16(x[i]));
        return;
    }
    if (qu_act_type(t) == COLI_Q8_K) {
        block_q8_K *b = malloc(sizeof(block_q8_K) * (size_t)(n / COLI_QK_K));
        coli_quantize_act_q8_K(x, b, n);
        for (int64_t i = 0; i < n; i++) out[i] = (double)b[i / COLI_QK_K].d * b[i / COLI_QK_K].qs[i % COLI_QK_K];
        free(b);
        return;
    }
    if (qu_act_type(t) == COLI_Q8_1) {
        block_q8_1 *b = malloc(sizeof(block_q8_1) * (size_t)(n / COLI_QK));
        coli_quantize_act_q8_1(x, b, n);
        for (int64_t k = 0; k < n / COLI_QK; k++) {
            const double d = coli_fp16_to_fp32(b[k].d);
            double qsum = 0;
            for (int j = 0; j < COLI_QK; j++) {
                out[k * COLI_QK + j] = d * b[k].qs[j];
                qsum += b[k].qs[j];
            }
            s_err[k] = coli_fp16_to_fp32(b[k].s) - d * qsum;
        }
        free(b);
        return;
    }
    block_q8_0 *b = malloc(sizeof(block_q8_0) * (size_t)(n / COLI_QK));
    coli_quantize_act_q8_0(x, b, n);
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)coli_fp16_to_fp32(b[i / COLI_QK].d) * b[i / COLI_QK].qs[i % COLI_QK];
    free(b);
}

/* y_ref in float64, and the magnitude sum |w||x| each y may err by a
 * relative few float ulps of. */
static void reference(const problem *p, double *y, double *mag) {
    size_t rb = coli_row_bytes(p->t, p->n_in);
    float *w = malloc(sizeof(float) * (size_t)p->n_in);
    double *xr = malloc(sizeof(double) * (size_t)p->n_in);
    double *s_err = calloc((size_t)(p->n_in / COLI_QK), sizeof(double));
    for (int64_t t = 0; t < p->n_tok; t++) {
        rounded_input(p->t, p->x + t * p->n_in, p->n_in, xr, s_err);
        for (int64_t o = 0; o < p->n_out; o++) {
            coli_dequantize_row(p->t, p->w + (size_t)o * rb, w, p->n_in);
            double s = 0, m = 0;
            for (int64_t k = 0; k < p->n_in; k++) {
                s += (double)w[k] * xr[k];
                m += fabs((double)w[k] * xr[k]);
            }
            if (qu_act_type(p->t) == COLI_Q8_1 && coli_dtype_block_elems(p->t) == COLI_QK)
                for (int64_t k = 0; k < p->n_in / COLI_QK; k++) { /* Q4_1/Q5_1: minimum m times s */
                    uint16_t mh;
                    memcpy(&mh, p->w + (size_t)o * rb + (size_t)k * coli_dtype_block_bytes(p->t) + 2, 2);
                    s += coli_fp16_to_fp32(mh) * s_err[k];
                }
            y[t * p->n_out + o] = s;
            mag[t * p->n_out + o] = m;
        }
    }
    free(w);
    free(xr);
    free(s_err);
}

static float *run(const problem *p, coli_pool *pool, coli_scratch *s) {
    float *y = malloc(sizeof(float) * (size_t)(p->n_out * p->n_tok));
    int rc = coli_matmul(pool, s, p->w, p->t, p->n_in, p->n_out, p->x, p->n_tok, y);
    cr_assert_eq(rc, 0, "%s: %s", coli_dtype_name(p->t), coli_last_error());
    return y;
}

static void check_against_reference(int portable) {
    if (!portable && !coli_cpu_avx2()) cr_skip_test("no AVX2 on this CPU");
    coli_matmul_force_portable(portable);
    cr_assert_eq(strncmp(coli_matmul_impl(), portable ? "portable" : "avx2", portable ? 9 : 4), 0, "impl %s",
                 coli_matmul_impl());
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    for (int i = 0; i < N_TYPES; i++) {
        coli_dtype t = k_types[i];
        /* float types get an n_in that is not a multiple of 8 (tails); the
         * 32-value types 5 blocks (odd: IQ4_NL's pairs have a tail), the
         * 256-value ones 3 */
        int64_t n_in = coli_dtype_block_elems(t) == 1 ? 101 : row_len(t, 160) == 160 ? 160 : 768;
        problem p = make_problem(t, n_in, 37, 9, 100u + (unsigned)i);
        double *yr = malloc(sizeof(double) * 37 * 9), *mag = malloc(sizeof(double) * 37 * 9);
        reference(&p, yr, mag);
        float *y = run(&p, pool, &s);
        for (int64_t j = 0; j < 37 * 9; j++)
            cr_assert_leq(fabs((double)y[j] - yr[j]), 1e-6 * mag[j] + 1e-30, "%s %s: y[%lld] = %.9g, reference %.9g",
                          coli_matmul_impl(), coli_dtype_name(t), (long long)j, y[j], yr[j]);
        free(y);
        free(yr);
        free(mag);
        free_problem(&p);
    }
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
    coli_matmul_force_portable(0);
}

Test(matmul, avx2_matches_float64_reference) { check_against_reference(0); }
Test(matmul, portable_matches_float64_reference) { check_against_reference(1); }

Test(matmul, avx2_and_portable_agree) {
    if (!coli_cpu_avx2()) cr_skip_test("no AVX2 on this CPU");
    coli_scratch s = {0};
    for (int i = 0; i < N_TYPES; i++) {
        problem p = make_problem(k_types[i], 1024, 70, 5, 7u + (unsigned)i);
        coli_matmul_force_portable(0);
        float *a = run(&p, NULL, &s);
        coli_matmul_force_portable(1);
        float *b = run(&p, NULL, &s);
        coli_matmul_force_portable(0);
        for (int64_t j = 0; j < 70 * 5; j++) {
            float tol = 2e-5f * (fabsf(a[j]) + 1.0f) * 32.0f;
            cr_assert_leq(fabsf(a[j] - b[j]), tol, "%s y[%lld]: avx2 %.9g portable %.9g", coli_dtype_name(k_types[i]),
                          (long long)j, a[j], b[j]);
        }
        free(a);
        free(b);
        free_problem(&p);
    }
    coli_scratch_free(&s);
}

/* Each token alone == the same token in a batch of 7, with 1 and 2
 * threads, bit for bit (matmul.h's contract). */
static void check_determinism(int portable) {
    if (!portable && !coli_cpu_avx2()) cr_skip_test("no AVX2 on this CPU");
    coli_matmul_force_portable(portable);
    coli_pool *p1 = coli_pool_new(1), *p2 = coli_pool_new(2);
    coli_scratch s = {0};
    for (int i = 0; i < N_TYPES; i++) {
        const int64_t n_out = 301, n_tok = 7; /* odd rows: partial tiles and chunks */
        problem p = make_problem(k_types[i], row_len(k_types[i], 96), n_out, n_tok, 55u + (unsigned)i);
        float *batch1 = run(&p, p1, &s), *batch2 = run(&p, p2, &s);
        cr_assert_eq(memcmp(batch1, batch2, sizeof(float) * (size_t)(n_out * n_tok)), 0, "%s: 1 vs 2 threads differ",
                     coli_dtype_name(k_types[i]));
        float alone[301];
        for (int64_t t = 0; t < n_tok; t++) {
            int rc = coli_matmul(t % 2 ? p2 : p1, &s, p.w, p.t, p.n_in, n_out, p.x + t * p.n_in, 1, alone);
            cr_assert_eq(rc, 0);
            cr_assert_eq(memcmp(alone, batch1 + t * n_out, sizeof alone), 0,
                         "%s %s: token %lld alone differs from the batch", coli_matmul_impl(),
                         coli_dtype_name(k_types[i]), (long long)t);
        }
        /* and a sub-batch (tokens 2..4) shifted to the front */
        float sub[3 * 301];
        cr_assert_eq(coli_matmul(p2, &s, p.w, p.t, p.n_in, n_out, p.x + 2 * p.n_in, 3, sub), 0);
        cr_assert_eq(memcmp(sub, batch1 + 2 * n_out, sizeof sub), 0, "%s: sub-batch differs",
                     coli_dtype_name(k_types[i]));
        free(batch1);
        free(batch2);
        free_problem(&p);
    }
    coli_scratch_free(&s);
    coli_pool_destroy(&p1);
    coli_pool_destroy(&p2);
    coli_matmul_force_portable(0);
}

Test(matmul, avx2_row_alone_equals_row_in_batch) { check_determinism(0); }
Test(matmul, portable_row_alone_equals_row_in_batch) { check_determinism(1); }

Test(matmul, large_batch_crosses_token_blocks) {
    /* 130 tokens: more than one block of 64 tokens per chunk */
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    problem p = make_problem(COLI_Q8_0, 256, 40, 130, 3);
    float *y = run(&p, pool, &s);
    float alone[40];
    for (int64_t t = 0; t < 130; t += 43) {
        cr_assert_eq(coli_matmul(pool, &s, p.w, p.t, 256, 40, p.x + t * 256, 1, alone), 0);
        cr_assert_eq(memcmp(alone, y + t * 40, sizeof alone), 0, "token %lld", (long long)t);
    }
    free(y);
    free_problem(&p);
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
}

/* Rows longer than MM_PREFETCH_LINEAR_MAX are prefetched along the rows
 * (matmul_avx2.c's PF_ROWS, the K-quants a fixed distance ahead): the same
 * results as every other way, token alone (non-temporal) or in a batch of 10
 * (T0 on the first token tile, none on the others), with 1 and 2 threads,
 * odd rows (a partial tile); within float error of the portable path. */
Test(matmul, long_rows_prefetched_along_them_keep_the_bits) {
    static const coli_dtype types[] = {COLI_Q8_0, COLI_Q4_0, COLI_Q4_K};
    const int64_t n_in = 4608, n_out = 45, n_tok = 10; /* Q4_0: 2592-byte rows */
    coli_pool *p1 = coli_pool_new(1), *p2 = coli_pool_new(2);
    coli_scratch s = {0};
    for (int i = 0; i < 3; i++) {
        cr_assert_gt(coli_row_bytes(types[i], n_in), MM_PREFETCH_LINEAR_MAX);
        problem p = make_problem(types[i], n_in, n_out, n_tok, 4242u + (unsigned)i);
        float *batch = run(&p, p2, &s), *alone = malloc(sizeof(float) * (size_t)n_out);
        for (int64_t t = 0; t < n_tok; t++) {
            cr_assert_eq(coli_matmul(t % 2 ? p1 : p2, &s, p.w, p.t, n_in, n_out, p.x + t * n_in, 1, alone), 0);
            cr_assert_eq(memcmp(alone, batch + t * n_out, sizeof(float) * (size_t)n_out), 0, "%s token %lld",
                         coli_dtype_name(types[i]), (long long)t);
        }
        coli_matmul_force_portable(1);
        float *ref = run(&p, p1, &s);
        coli_matmul_force_portable(0);
        for (int64_t j = 0; j < n_out * n_tok; j++)
            cr_assert_leq(fabsf(batch[j] - ref[j]), 2e-5f * (fabsf(ref[j]) + 1.0f) * 64.0f, "%s y[%lld]: %.9g vs %.9g",
                          coli_dtype_name(types[i]), (long long)j, batch[j], ref[j]);
        free(batch);
        free(alone);
        free(ref);
        free_problem(&p);
    }
    coli_scratch_free(&s);
    coli_pool_destroy(&p1);
    coli_pool_destroy(&p2);
}

Test(matmul, bad_arguments_fail_with_a_reason) {
    float x[64] = {0}, y[4];
    uint8_t w[4 * 68] = {0};
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_Q8_0, 48, 2, x, 1, y), COLI_EINVAL);
    cr_assert(strstr(coli_last_error(), "multiple of 32"), "%s", coli_last_error());
    cr_assert_eq(coli_matmul(NULL, NULL, w, (coli_dtype)24, 32, 2, x, 1, y), COLI_EUNSUPPORTED);
    cr_assert(strstr(coli_last_error(), "type 24"), "%s", coli_last_error());
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_F32, 0, 2, x, 1, y), COLI_EINVAL);
    cr_assert_eq(coli_matmul(NULL, NULL, NULL, COLI_F32, 8, 2, x, 1, y), COLI_EINVAL);
    /* nothing to do is not an error */
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_F32, 8, 2, x, 0, y), 0);
    /* without a scratch (allocated and freed inside) */
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_Q4_0, 64, 2, x, 1, y), 0);
    cr_assert(y[0] == 0.0f && y[1] == 0.0f);
}

Test(matmul, scratch_is_reused) {
    coli_scratch s = {0};
    problem p = make_problem(COLI_F16, 64, 8, 4, 1);
    float *y = run(&p, NULL, &s);
    void *buf = s.buf;
    size_t cap = s.cap;
    cr_assert_not_null(buf);
    cr_assert_geq(cap, coli_matmul_scratch_bytes(COLI_F16, 64, 4));
    free(y);
    y = run(&p, NULL, &s);
    cr_assert_eq(s.buf, buf, "steady state must not reallocate");
    free(y);
    free_problem(&p);
    coli_scratch_free(&s);
    cr_assert_null(s.buf);
    coli_scratch_free(NULL);
    cr_assert_eq(coli_matmul_scratch_bytes(COLI_F32, 64, 4), 0);
}

/* coli_matmul_many over types that share an activation format (Q4_K/Q6_K/
 * IQ4_XS/TQ2_0: Q8_K; Q4_1/Q5_1: Q8_1; Q5_0/IQ4_NL/MXFP4: Q8_0 blocks) and Q8_0 (its
 * own split format): each op gives the bits of coli_matmul on it alone,
 * and each shared input is counted once in the scratch. */
Test(matmul, many_shares_prepared_inputs_per_activation_type) {
    static const coli_dtype types[] = {COLI_Q4_K,   COLI_Q6_K, COLI_IQ4_XS, COLI_Q4_1,  COLI_Q5_1, COLI_Q5_0,
                                       COLI_IQ4_NL, COLI_Q8_0, COLI_Q2_K,   COLI_MXFP4, COLI_TQ2_0};
    enum {
        N = sizeof types / sizeof types[0],
        N_IN = 512,
        N_OUT = 19,
        N_TOK = 3
    };
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    problem p[N];
    coli_matmul_op ops[N];
    float *y[N];
    for (int i = 0; i < N; i++) {
        p[i] = make_problem(types[i], N_IN, N_OUT, N_TOK, 900u + (unsigned)i);
        memcpy(p[i].x, p[0].x, sizeof(float) * N_IN * N_TOK); /* one input for all */
        y[i] = malloc(sizeof(float) * N_OUT * N_TOK);
        ops[i] = (coli_matmul_op){p[i].w, types[i], N_IN, N_OUT, p[0].x, N_TOK, y[i]};
    }
    const size_t q8k = coli_matmul_scratch_bytes(COLI_Q4_K, N_IN, N_TOK);
    const size_t q81 = coli_matmul_scratch_bytes(COLI_Q4_1, N_IN, N_TOK);
    const size_t q80b = coli_matmul_scratch_bytes(COLI_Q5_0, N_IN, N_TOK);
    const size_t q80 = coli_matmul_scratch_bytes(COLI_Q8_0, N_IN, N_TOK);
    cr_assert_eq(coli_matmul_scratch_bytes(COLI_Q6_K, N_IN, N_TOK), q8k);
    cr_assert_geq(q8k, (size_t)N_TOK * 2 * sizeof(block_q8_K));
    cr_assert_geq(q81, (size_t)N_TOK * 16 * sizeof(block_q8_1));
    const size_t want = ((q8k + 63) & ~(size_t)63) + ((q81 + 63) & ~(size_t)63) + ((q80b + 63) & ~(size_t)63) +
                        ((q80 + 63) & ~(size_t)63);
    cr_assert_eq(coli_matmul_many_scratch_bytes(ops, N), want, "shared inputs counted once");
    cr_assert_eq(coli_matmul_many(pool, &s, ops, N), 0, "%s", coli_last_error());
    for (int i = 0; i < N; i++) {
        float alone[N_OUT * N_TOK];
        cr_assert_eq(coli_matmul(NULL, NULL, p[i].w, types[i], N_IN, N_OUT, p[0].x, N_TOK, alone), 0);
        cr_assert_eq(memcmp(alone, y[i], sizeof alone), 0, "%s: many differs from alone", coli_dtype_name(types[i]));
    }
    for (int i = 0; i < N; i++) { /* p[0].x is every op's input: freed last */
        free(y[i]);
        free_problem(&p[i]);
    }
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
}

Test(matmul, k_quant_rows_must_be_whole_super_blocks) {
    float x[512] = {0}, y[2];
    uint8_t w[2 * 210] = {0};
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_Q6_K, 128, 2, x, 1, y), COLI_EINVAL);
    cr_assert(strstr(coli_last_error(), "multiple of 256"), "%s", coli_last_error());
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_Q6_K, 256, 2, x, 1, y), 0, "%s", coli_last_error());
    cr_assert(y[0] == 0.0f && y[1] == 0.0f);
    cr_assert_eq(coli_matmul(NULL, NULL, w, COLI_Q8_K, 256, 1, x, 1, y), COLI_EUNSUPPORTED,
                 "Q8_K is an activation format");
}

/* The several-token AVX2 kernels give each token the bits of the
 * single-token dot product, for every group size 1..4 and start token. */
Test(matmul, avx2_token_groups_equal_single_tokens) {
    if (!coli_cpu_avx2()) cr_skip_test("no AVX2 on this CPU");
    static const struct {
        coli_dtype t;
        coli_vec_dot_fn one;
        coli_vec_dot_tokens_fn many;
    } k[] = {
        {COLI_Q4_K, coli_vec_dot_q4_K_q8_K_avx2, coli_vec_dot_q4_K_q8_K_avx2_tokens},
        {COLI_Q6_K, coli_vec_dot_q6_K_q8_K_avx2, coli_vec_dot_q6_K_q8_K_avx2_tokens},
        {COLI_Q2_K, coli_vec_dot_q2_K_q8_K_avx2, coli_vec_dot_q2_K_q8_K_avx2_tokens},
        {COLI_Q3_K, coli_vec_dot_q3_K_q8_K_avx2, coli_vec_dot_q3_K_q8_K_avx2_tokens},
        {COLI_Q5_K, coli_vec_dot_q5_K_q8_K_avx2, coli_vec_dot_q5_K_q8_K_avx2_tokens},
        {COLI_IQ4_XS, coli_vec_dot_iq4_xs_q8_K_avx2, coli_vec_dot_iq4_xs_q8_K_avx2_tokens},
        {COLI_Q4_1, coli_vec_dot_q4_1_q8_1_avx2, coli_vec_dot_q4_1_q8_1_avx2_tokens},
        {COLI_Q5_0, coli_vec_dot_q5_0_q8_0_avx2, coli_vec_dot_q5_0_q8_0_avx2_tokens},
        {COLI_Q5_1, coli_vec_dot_q5_1_q8_1_avx2, coli_vec_dot_q5_1_q8_1_avx2_tokens},
        {COLI_IQ4_NL, coli_vec_dot_iq4_nl_q8_0_avx2, coli_vec_dot_iq4_nl_q8_0_avx2_tokens},
        {COLI_MXFP4, coli_vec_dot_mxfp4_q8_0_avx2, coli_vec_dot_mxfp4_q8_0_avx2_tokens},
    };
    enum {
        NT = 4
    };
    unsigned seed = 31;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        /* 3 super-blocks, or 7 blocks of 32 (odd: IQ4_NL's tail) */
        const int64_t n = coli_dtype_block_elems(k[i].t) == COLI_QK_K ? 768 : 224;
        const coli_dtype act = qu_act_type(k[i].t);
        const size_t stride = coli_row_bytes(act, n) + 4; /* rows not packed: the stride is honoured */
        uint8_t *x = calloc(NT, stride), *w = malloc(coli_row_bytes(k[i].t, n));
        float xf[768];
        cr_assert(x && w);
        for (int t = 0; t < NT; t++) {
            for (int64_t e = 0; e < n; e++) xf[e] = frand(&seed) * (float)(t + 1);
            void *row = x + (size_t)t * stride;
            if (act == COLI_Q8_K)
                coli_quantize_act_q8_K(xf, row, n);
            else if (act == COLI_Q8_1)
                coli_quantize_act_q8_1(xf, row, n);
            else
                coli_quantize_act_q8_0(xf, row, n);
        }
        qu_random_blocks(k[i].t, w, n / coli_dtype_block_elems(k[i].t), &seed);
        for (int nt = 1; nt <= NT; nt++)
            for (int first = 0; first + nt <= NT; first++) {
                float out[NT];
                k[i].many(n, w, x + (size_t)first * stride, stride, out, nt);
                for (int t = 0; t < nt; t++) {
                    const float one = k[i].one(n, w, x + (size_t)(first + t) * stride);
                    cr_assert_eq(memcmp(&out[t], &one, sizeof one), 0, "%s: group of %d, token %d: %.9g vs %.9g",
                                 coli_dtype_name(k[i].t), nt, t, out[t], one);
                }
            }
        free(x);
        free(w);
    }
}

/* Q8_0 / Q4_0 with each VNNI integer dot the CPU has, and the 512-bit
 * tiles, give the bits of the AVX2 maddubs path: the same exact integer
 * lanes, the same float steps per block. Odd shapes (partial tiles), an odd
 * and an even number of blocks per row (the 512-bit tiles take blocks in
 * pairs), short rows and long ones (prefetched another way), 1..9 tokens and 130 (more than two token blocks), 2 threads;
 * Q8_0 weights include -128 bytes (the largest magnitude the unsigned
 * operand sees) and zeros. */
static void check_vnni_variant(int skip, const char *name) {
    static const coli_dtype types[] = {COLI_Q8_0, COLI_Q4_0};
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    /* 4640: rows longer than MM_PREFETCH_LINEAR_MAX, prefetched along the rows */
    static const int64_t tokens[] = {1, 5, 9, 130}, widths[] = {352, 384, 4640};
    for (int i = 0; i < 2; i++)
        for (int n = 0; n < 12; n++) {
            const int64_t n_tok = tokens[n % 4], n_in = widths[n / 4];
            problem p = make_problem(types[i], n_in, 45, n_tok, 900u + (unsigned)(i * 16 + n * 131));
            if (types[i] == COLI_Q8_0)
                for (int64_t r = 0; r < p.n_out; r += 3) {
                    p.w[(size_t)r * coli_row_bytes(p.t, p.n_in) + 2 + r % 32] = 0x80;
                    p.w[(size_t)r * coli_row_bytes(p.t, p.n_in) + 40 + r % 30] = 0;
                }
            mm_skip_vnni(MM_SKIP_ALL_VNNI);
            float *a = run(&p, pool, &s);
            mm_skip_vnni(skip);
            float *b = run(&p, pool, &s);
            mm_skip_vnni(0);
            cr_assert_eq(memcmp(a, b, sizeof(float) * (size_t)(p.n_out * n_tok)), 0,
                         "%s, %lld x %lld tokens: %s differs", coli_dtype_name(types[i]), (long long)n_in,
                         (long long)n_tok, name);
            free(a);
            free(b);
            free_problem(&p);
        }
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
}

Test(matmul, avxvnni_equals_avx2_bits) {
    if (!coli_cpu_avxvnni()) cr_skip_test("no AVX-VNNI on this CPU");
    check_vnni_variant(MM_SKIP_ALL_VNNI & ~MM_SKIP_AVXVNNI, "AVX-VNNI");
}

Test(matmul, avx512vnni_equals_avx2_bits) {
    if (!coli_cpu_avx512vnni()) cr_skip_test("no AVX512-VNNI on this CPU");
    check_vnni_variant(MM_SKIP_ALL_VNNI & ~MM_SKIP_AVX512VNNI, "AVX512-VNNI");
}

Test(matmul, avx512_tiles_equal_avx2_bits) {
    if (!coli_cpu_avx512()) cr_skip_test("no AVX-512 BW/DQ/VNNI on this CPU");
    check_vnni_variant(MM_SKIP_ALL_VNNI & ~MM_SKIP_AVX512, "512-bit tiles");
}

/* the K-quants (Q2_K..Q6_K) and IQ4_XS through coli_matmul with their AVX-512 dot products
 * give the bits of the AVX2 ones (mm_skip_vnni's MM_SKIP_AVX512 also
 * skips them): 1, 2 and 5 super-blocks per row, 1, 3 and 130 tokens (token
 * groups of 4 and a partial one, more than two token blocks), 2 threads. */
Test(matmul, avx512_k_quants_equal_avx2_bits) {
    if (!coli_cpu_avx512()) cr_skip_test("no AVX-512 BW/DQ/VNNI on this CPU");
    static const coli_dtype types[] = {COLI_Q2_K, COLI_Q3_K, COLI_Q4_K, COLI_Q5_K, COLI_Q6_K, COLI_IQ4_XS};
    static const int64_t tokens[] = {1, 3, 130}, widths[] = {256, 512, 1280};
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int n = 0; n < 9; n++) {
            const int64_t n_tok = tokens[n % 3], n_in = widths[n / 3];
            problem p = make_problem(types[i], n_in, 37, n_tok, 4000u + (unsigned)(i * 16 + n * 131));
            mm_skip_vnni(MM_SKIP_AVX512);
            float *a = run(&p, pool, &s);
            mm_skip_vnni(0);
            float *b = run(&p, pool, &s);
            cr_assert_eq(memcmp(a, b, sizeof(float) * (size_t)(p.n_out * n_tok)), 0,
                         "%s, %lld x %lld tokens: the AVX-512 dot products differ", coli_dtype_name(types[i]),
                         (long long)n_in, (long long)n_tok);
            free(a);
            free(b);
            free_problem(&p);
        }
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
}

/* p as one batch of n_tok tokens gives each token the bits it gets alone
 * (skip: the ISA levels left out, for the message). */
static void s_expect_batch_equals_alone(const problem *p, int64_t n_in, int64_t n_out, int64_t n_tok, coli_pool *pool,
                                        coli_scratch *s, int skip) {
    float *batch = run(p, pool, s), *alone = malloc((size_t)n_out * sizeof *alone);
    cr_assert_not_null(alone);
    for (int64_t t = 0; t < n_tok; t++) {
        cr_assert_eq(coli_matmul(pool, s, p->w, p->t, n_in, n_out, p->x + t * n_in, 1, alone), 0);
        cr_assert_eq(memcmp(alone, batch + t * n_out, (size_t)n_out * sizeof *alone), 0,
                     "%s, %lld values, token %lld of %lld (skip %d): the batch differs from alone",
                     coli_dtype_name(p->t), (long long)n_in, (long long)t, (long long)n_tok, skip);
    }
    free(alone);
    free(batch);
}

/* The IQ grid types' decoded-row path (more than 4 tokens: each row's
 * groups decoded once per token block, matmul_vecdot.c) gives every token
 * the bits it gets alone (the single-token AVX2 kernel), in 256-bit and
 * 512-bit registers: 1, 3 and 17 super-blocks per row (17: two decoded
 * stretches, each token's sum carried across), 5, 9, 70 and 130 tokens
 * (partial groups of 8, more than one token block), 2 threads. */
Test(matmul, iq_decoded_rows_equal_one_token_bits) {
    if (!coli_cpu_avx2()) cr_skip_test("no AVX2 on this CPU");
    static const coli_dtype types[] = {COLI_IQ2_XXS, COLI_IQ3_XXS, COLI_IQ2_XS, COLI_IQ2_S, COLI_IQ3_S};
    static const int64_t tokens[] = {5, 9, 70, 130}, widths[] = {256, 768, 17 * 256};
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    for (int skip = 0; skip <= MM_SKIP_AVX512; skip += MM_SKIP_AVX512) {
        mm_skip_vnni(skip);
        cr_assert_not_null(mm_kernel_for(COLI_IQ2_XXS)->iq_dots, "no decoded path for IQ2_XXS");
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            for (int n = 0; n < 12; n++) {
                const int64_t n_tok = tokens[n % 4], n_in = widths[n / 4], n_out = 19;
                problem p = make_problem(types[i], n_in, n_out, n_tok, 7000u + (unsigned)(i * 16 + n * 131));
                s_expect_batch_equals_alone(&p, n_in, n_out, n_tok, pool, &s, skip);
                free_problem(&p);
            }
    }
    mm_skip_vnni(0);
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
}

/* F16 / BF16 prefills (more than 8 tokens) convert 4-row slabs to F32 once
 * per token block (matmul_avx2.c): every token gets the bits it gets alone.
 * Rows of 101 (a tail past the last 8), 1030 and 2309 values (slabs of 1024
 * carried over, a partial last slab), 37 rows (a partial row tile), 9, 64,
 * 70 and 130 tokens (token tiles of 3 and their remainders, more than one
 * token block), 2 threads. */
Test(matmul, half_float_slabs_equal_one_token_bits) {
    if (!coli_cpu_avx2()) cr_skip_test("no AVX2 on this CPU");
    static const coli_dtype types[] = {COLI_F16, COLI_BF16};
    static const int64_t tokens[] = {9, 64, 70, 130}, widths[] = {101, 1030, 2309};
    coli_pool *pool = coli_pool_new(2);
    coli_scratch s = {0};
    for (int i = 0; i < 2; i++)
        for (int n = 0; n < 12; n++) {
            const int64_t n_tok = tokens[n % 4], n_in = widths[n / 4], n_out = 37;
            problem p = make_problem(types[i], n_in, n_out, n_tok, 8100u + (unsigned)(i * 16 + n * 131));
            s_expect_batch_equals_alone(&p, n_in, n_out, n_tok, pool, &s, 0);
            free_problem(&p);
        }
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
}

/* The kernel table (matmul_dispatch.c): every weight type has a row
 * kernel on every path, the block types a dot product, and the switches
 * pick the entry they name: portable gives the portable dot, AVX2 the
 * 512-bit one where the CPU has it unless MM_SKIP_AVX512 says otherwise. */
Test(matmul, kernel_table_follows_the_switches) {
    for (int portable = 0; portable < 2; portable++)
        for (int mask = 0; mask <= MM_SKIP_ALL_VNNI; mask++) {
            coli_matmul_force_portable(portable);
            mm_skip_vnni(mask);
            for (int i = 0; i < N_TYPES; i++) {
                const mm_kernel *k = mm_kernel_for(k_types[i]);
                cr_assert_not_null(k->rows, "%s: no row kernel", coli_dtype_name(k_types[i]));
                cr_assert(k->input != MM_IN_BLOCKS || k->dot, "%s: no dot product", coli_dtype_name(k_types[i]));
                cr_assert_eq(k->input == MM_IN_F32, k_types[i] == COLI_F32, "%s: input form %d",
                             coli_dtype_name(k_types[i]), (int)k->input);
            }
            const coli_vec_dot_fn dot = mm_kernel_for(COLI_Q4_K)->dot;
            if (portable || !coli_cpu_avx2())
                cr_assert(dot == coli_vec_dot_q4_K_q8_K, "portable path: not the portable dot");
            else if (coli_cpu_avx512() && !(mask & MM_SKIP_AVX512))
                cr_assert(dot == coli_vec_dot_q4_K_q8_K_avx512, "mask %d: not the 512-bit dot", mask);
            else
                cr_assert(dot == coli_vec_dot_q4_K_q8_K_avx2, "mask %d: not the AVX2 dot", mask);
            if (!portable && coli_cpu_avx2() && mask == MM_SKIP_ALL_VNNI) cr_assert_str_eq(coli_matmul_impl(), "avx2");
        }
    coli_matmul_force_portable(0);
    mm_skip_vnni(0);
}
