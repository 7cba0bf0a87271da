/*
 * test_gpu_math.c - the GPU kernels' per-element math (plugins/gpu/gpu_math.h),
 * built by the host compiler and checked against core/quant.h, core/matmul.h
 * and the cpu plugin, for every weight type. No device needed: this is where
 * most kernel bugs are caught.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/matmul.h"
#include "core/quant.h"
#include "gpu_test_util.h"
#include "plugins/gpu/gpu_math.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- number formats ---------------------------------------------------------- */

Test(gpu_math, fp16_decode_matches_core_for_all_65536_values) {
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = gpu_fp16_to_f32((uint16_t)h), b = coli_fp16_to_fp32((uint16_t)h);
        cr_assert_eq(bits(a), bits(b), "fp16 0x%04x: gpu %08x, core %08x", h, bits(a), bits(b));
    }
}

static void check_encode(float f) {
    const uint16_t a = gpu_f32_to_fp16(f), b = coli_fp32_to_fp16(f);
    cr_assert_eq(a, b, "fp16 of %a (%08x): gpu %04x, core %04x", (double)f, bits(f), a, b);
    const uint16_t c = gpu_f32_to_bf16(f), d = coli_fp32_to_bf16(f);
    cr_assert_eq(c, d, "bf16 of %a (%08x): gpu %04x, core %04x", (double)f, bits(f), c, d);
}

Test(gpu_math, fp16_bf16_encode_match_core_on_ties_edges_and_random_bits) {
    /* every half value, the midpoints to its neighbours (ties) and one ulp off them */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const float lo = coli_fp16_to_fp32((uint16_t)h), hi = coli_fp16_to_fp32((uint16_t)(h + 1));
        const float mid = lo + (hi - lo) * 0.5f;
        const float probes[] = {lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int i = 0; i < 4; i++) {
            check_encode(probes[i]);
            check_encode(-probes[i]);
        }
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f,
                              1e-8f, 2.9802322e-8f, 5.9604645e-8f, 6.1035156e-5f, 1e30f, -1e-30f,
                              from_bits(0x7f800001u), from_bits(0xffc00123u), from_bits(1u)};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) check_encode(specials[i]);
    uint64_t s = 12345;
    for (int i = 0; i < 2000000; i++) {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        check_encode(from_bits((uint32_t)((s * 0x2545f4914f6cdd1dull) >> 32)));
    }
}

Test(gpu_math, bf16_decode_matches_core) {
    for (uint32_t h = 0; h < 65536; h++)
        cr_assert_eq(bits(gpu_bf16_to_f32((uint16_t)h)), bits(coli_bf16_to_fp32((uint16_t)h)), "bf16 %04x", h);
}

/* ---- blocks ---------------------------------------------------------------------- */

Test(gpu_math, q8_0_activation_quantization_is_byte_identical_to_core) {
    float x[GPU_QK];
    unsigned char mine[GPU_Q8_0_BYTES];
    block_q8_0 ref;
    for (int trial = 0; trial < 20000; trial++) {
        const float scale = powf(10.0f, (float)(trial % 13) - 6.0f);
        test_rand_rows(x, GPU_QK, scale, (uint64_t)trial);
        if (trial % 7 == 0) memset(x, 0, sizeof x);            /* amax 0: id 0 */
        if (trial % 11 == 0) x[trial % GPU_QK] = 127.0f;          /* id 1: x = k + 0.5 are ties */
        if (trial % 11 == 0) for (int j = 0; j < 8; j++) x[j] = (float)j - 3.5f;
        if (trial == 5) x[3] = INFINITY;
        if (trial == 6) x[9] = NAN;
        gpu_quantize_act_block(x, mine);
        coli_quantize_act_q8_0(x, &ref, GPU_QK);
        cr_assert_eq(memcmp(mine, &ref, GPU_Q8_0_BYTES), 0, "trial %d: Q8_0 activation block differs", trial);
    }
}

Test(gpu_math, weight_values_equal_core_dequantization_for_every_type) {
    const int64_t n = 256;
    float *src = malloc(n * sizeof *src), *ref = malloc(n * sizeof *ref);
    unsigned char *row = malloc(coli_row_bytes(COLI_F32, n));
    cr_assert(src && ref && row);
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        for (uint64_t seed = 1; seed <= 50; seed++) {
            test_rand_rows(src, n, seed % 2 ? 3.0f : 0.01f, seed);
            coli_quantize_row(t, src, row, n);
            coli_dequantize_row(t, row, ref, n);
            cr_assert_eq(gpu_row_bytes(t, n), coli_row_bytes(t, n), "%s row bytes", coli_dtype_name(t));
            for (int64_t k = 0; k < n; k++)
                cr_assert_eq(bits(gpu_weight_value(t, row, k)), bits(ref[k]), "%s element %lld: %g vs %g",
                             coli_dtype_name(t), (long long)k, gpu_weight_value(t, row, k), ref[k]);
        }
    }
    free(src), free(ref), free(row);
}

Test(gpu_math, swiglu_is_core_formula) {
    for (int i = -2000; i <= 2000; i++) {
        const float g = (float)i * 0.0625f, u = 1.5f - (float)i * 0.001f;
        const float ref = g / (1.0f + expf(-g)) * u;
        cr_assert_eq(bits(gpu_swiglu(g, u)), bits(ref), "g %g u %g", g, u);
    }
}

/* ---- dot products against coli_matmul ------------------------------------------------ */

/* |gpu_row_dot - coli_matmul| within float rounding of a reordered sum:
 * 1e-5 of sum |terms| (the inputs are the same: same rounding, same Q8_0
 * blocks, same integer block sums). */
static void check_matmul(coli_dtype t, int64_t n_in, int64_t n_out, int64_t n_tok, uint64_t seed) {
    size_t wbytes = 0;
    unsigned char *W = test_matrix(t, n_out, n_in, seed, &wbytes);
    float *x = malloc((size_t)(n_tok * n_in) * sizeof *x), *y = malloc((size_t)(n_tok * n_out) * sizeof *y);
    float *wf = malloc((size_t)n_in * sizeof *wf), *xr = malloc((size_t)n_in * sizeof *xr);
    unsigned char *prep = malloc(gpu_prep_row_bytes(t, n_in));
    cr_assert(W && x && y && wf && xr && prep);
    test_rand_rows(x, n_tok * n_in, 1.5f, seed + 77);
    coli_scratch sc = {0};
    cr_assert_eq(coli_matmul(NULL, &sc, W, t, n_in, n_out, x, n_tok, y), 0);
    const size_t rb = gpu_row_bytes(t, n_in);
    for (int64_t r = 0; r < n_tok; r++) {
        gpu_prep_row(t, x + r * n_in, n_in, prep);
        for (int64_t o = 0; o < n_out; o++) {
            const float mine = gpu_row_dot(t, W + (size_t)o * rb, prep, n_in);
            coli_dequantize_row(t, W + (size_t)o * rb, wf, n_in);
            double mag = 0;
            for (int64_t k = 0; k < n_in; k++) mag += fabs((double)wf[k] * x[r * n_in + k]);
            const double tol = 1e-5 * mag + 1e-7;
            cr_assert(fabs(mine - y[r * n_out + o]) <= tol, "%s tok %lld out %lld: gpu math %.9g, cpu %.9g",
                      coli_dtype_name(t), (long long)r, (long long)o, mine, y[r * n_out + o]);
        }
    }
    coli_scratch_free(&sc);
    free(W), free(x), free(y), free(wf), free(xr), free(prep);
}

Test(gpu_math, row_dot_matches_cpu_matmul_for_every_type) {
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        check_matmul(gpu_test_dtypes[i], 256, 40, 3, 10 + (uint64_t)i);
        check_matmul(gpu_test_dtypes[i], 96, 7, 9, 20 + (uint64_t)i);
    }
}

/* ---- the whole expert against the cpu plugin ----------------------------------------- */

/* What the kernels compute, row by row, with the reference dot (gpu_row_dot). */
static void host_gpu_expert(const moe_expert_desc *e, const float *x, int64_t n_rows, float *out) {
    const int64_t n_embd = e->n_embd, n_ff = e->n_ff;
    unsigned char *prep = malloc(gpu_prep_row_bytes(COLI_F32, n_embd > n_ff ? n_embd : n_ff));
    float *g = malloc((size_t)n_ff * sizeof *g), *u = malloc((size_t)n_ff * sizeof *u);
    cr_assert(prep && g && u);
    const size_t rg = gpu_row_bytes(e->gate_type, n_embd), ru = gpu_row_bytes(e->up_type, n_embd);
    const size_t rd = gpu_row_bytes(e->down_type, n_ff);
    for (int64_t r = 0; r < n_rows; r++) {
        gpu_prep_row(e->gate_type, x + r * n_embd, n_embd, prep);
        for (int64_t f = 0; f < n_ff; f++)
            g[f] = gpu_row_dot(e->gate_type, (const unsigned char *)e->gate + f * rg, prep, n_embd);
        gpu_prep_row(e->up_type, x + r * n_embd, n_embd, prep);
        for (int64_t f = 0; f < n_ff; f++)
            u[f] = gpu_row_dot(e->up_type, (const unsigned char *)e->up + f * ru, prep, n_embd);
        for (int64_t f = 0; f < n_ff; f++) g[f] = gpu_swiglu(g[f], u[f]);
        gpu_prep_row(e->down_type, g, n_ff, prep);
        for (int64_t o = 0; o < n_embd; o++)
            out[r * n_embd + o] = gpu_row_dot(e->down_type, (const unsigned char *)e->down + o * rd, prep, n_ff);
    }
    free(prep), free(g), free(u);
}

Test(gpu_math, expert_pipeline_matches_cpu_plugin_for_every_type) {
    const int64_t n_embd = 128, n_ff = 224, n_rows = 12;
    float *x = malloc((size_t)(n_rows * n_embd) * sizeof *x);
    float *ref = malloc((size_t)(n_rows * n_embd) * sizeof *ref), *mine = malloc((size_t)(n_rows * n_embd) * sizeof *mine);
    cr_assert(x && ref && mine);
    test_rand_rows(x, n_rows * n_embd, 2.0f, 99);
    char err[256] = "";
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        test_expert te;
        cr_assert_eq(test_expert_make(&te, 1, i, t, n_embd, n_ff, 500 + (uint64_t)i), 0);
        cr_assert_eq(test_cpu_expert(&te, x, n_rows, ref, err, sizeof err), 0, "cpu plugin: %s", err);
        host_gpu_expert(&te.desc, x, n_rows, mine);
        const float scale = test_max_abs(ref, n_rows * n_embd), diff = test_max_diff(mine, ref, n_rows * n_embd);
        const float tol = test_tolerance(t) * scale; /* see gpu_test_util.h */
        cr_log_info("%s: max |gpu math - cpu plugin| = %.3g (outputs up to %.3g)", coli_dtype_name(t), diff, scale);
        cr_assert(scale > 0.05f, "%s: degenerate test expert (outputs up to %g)", coli_dtype_name(t), scale);
        cr_assert(diff <= tol, "%s: max diff %g > %g", coli_dtype_name(t), diff, tol);
        test_expert_free(&te);
    }
    free(x), free(ref), free(mine);
}
