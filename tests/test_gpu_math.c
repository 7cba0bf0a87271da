/*
 * test_gpu_math.c - the GPU kernels' per-element math (plugins/gpu/gpu_math.h,
 * gpu_blocks.h), built by the host compiler and checked against core/quant/quant.h
 * (dequantization, bit for bit), llama.cpp's activation quantization rules,
 * core/kernels/matmul.h and the cpu plugin, for every weight type. No device needed:
 * this is where most kernel bugs are caught.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/matmul.h"
#include "core/quant/quant.h"
#include "core/kernels/vecdot.h"
#include "tests/gpu_test_util.h"
#include "plugins/gpu/gpu_math.h"
#include "tests/gpu_test_model.h"

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
    const float specials[] = {0.0f,
                              -0.0f,
                              INFINITY,
                              -INFINITY,
                              NAN,
                              65504.0f,
                              65519.99f,
                              65520.0f,
                              1e-8f,
                              2.9802322e-8f,
                              5.9604645e-8f,
                              6.1035156e-5f,
                              1e30f,
                              -1e-30f,
                              from_bits(0x7f800001u),
                              from_bits(0xffc00123u),
                              from_bits(1u)};
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
        if (trial % 7 == 0) memset(x, 0, sizeof x);      /* amax 0: id 0 */
        if (trial % 11 == 0) x[trial % GPU_QK] = 127.0f; /* id 1: x = k + 0.5 are ties */
        if (trial % 11 == 0)
            for (int j = 0; j < 8; j++) x[j] = (float)j - 3.5f;
        if (trial == 5) x[3] = INFINITY;
        if (trial == 6) x[9] = NAN;
        gpu_quantize_act_block(x, mine);
        coli_quantize_act_q8_0(x, &ref, GPU_QK);
        cr_assert_eq(memcmp(mine, &ref, GPU_Q8_0_BYTES), 0, "trial %d: Q8_0 activation block differs", trial);
    }
}

/* 32 activations that exercise the rounding: random of varying scale, all
 * zero, exact ties, infinities and NaN. */
static void act_trial_values(float *x, int n, int trial) {
    const float scale = powf(10.0f, (float)(trial % 13) - 6.0f);
    test_rand_rows(x, n, scale, (uint64_t)trial);
    if (trial % 7 == 0) memset(x, 0, (size_t)n * sizeof *x); /* amax 0 */
    if (trial % 11 == 0) x[trial % n] = 127.0f;              /* scale 1: x = k + 0.5 are ties */
    if (trial % 11 == 0)
        for (int j = 0; j < 8; j++) x[j] = (float)j - 3.5f;
    if (trial % 13 == 1) x[(trial / 13) % n] = -127.0f; /* negative max: iscale > 0 */
    if (trial == 5) x[3] = INFINITY;
    if (trial == 6) x[9] = NAN;
}

Test(gpu_math, q8_1_activation_is_q8_0_plus_the_fp16_sum) {
    float x[GPU_QK];
    unsigned char mine[36];
    block_q8_0 ref;
    for (int trial = 0; trial < 20000; trial++) {
        act_trial_values(x, GPU_QK, trial);
        gpu_quantize_act(COLI_Q8_1, x, mine);
        coli_quantize_act_q8_0(x, &ref, GPU_QK);
        /* llama.cpp's AVX2 quantize_row_q8_1: d and q as Q8_0's, s = fp16(amax/127 * sum q) */
        cr_assert_eq(memcmp(mine, &ref.d, 2), 0, "trial %d: d", trial);
        cr_assert_eq(memcmp(mine + 4, ref.qs, GPU_QK), 0, "trial %d: q", trial);
        float amax = 0.0f;
        int sum = 0;
        for (int j = 0; j < GPU_QK; j++) amax = fmaxf(amax, fabsf(x[j])), sum += ref.qs[j];
        const uint16_t s = coli_fp32_to_fp16(amax / 127.0f * (float)sum);
        cr_assert_eq(memcmp(mine + 2, &s, 2), 0, "trial %d: s", trial);
        block_q8_1 cpu;
        coli_quantize_act_q8_1(x, &cpu, GPU_QK);
        cr_assert_eq(memcmp(mine, &cpu, sizeof cpu), 0, "trial %d: differs from the CPU's Q8_1", trial);
    }
}

/* llama.cpp's nearest_int and quantize_row_q8_K_ref, as written there
 * (iscale -127/max since January 2024; -128/max before: old_rule). */
static int ref_nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

static void ref_quantize_q8_K(const float *x, block_q8_K *y, int old_rule) {
    memset(y, 0, sizeof *y);
    float max = 0, amax = 0;
    for (int j = 0; j < COLI_QK_K; ++j) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (!amax) return;
    const float iscale = (old_rule ? -128.f : -127.f) / max;
    for (int j = 0; j < COLI_QK_K; ++j) {
        int v = ref_nearest_int(iscale * x[j]);
        y->qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < COLI_QK_K / 16; ++j) {
        int sum = 0;
        for (int ii = 0; ii < 16; ++ii) sum += y->qs[j * 16 + ii];
        y->bsums[j] = (int16_t)sum;
    }
    y->d = 1 / iscale;
}

Test(gpu_math, q8_K_activation_is_llama_cpp_reference_byte_for_byte) {
    float x[COLI_QK_K];
    unsigned char mine[292];
    block_q8_K ref;
    for (int trial = 0; trial < 5000; trial++) {
        act_trial_values(x, COLI_QK_K, trial);
        gpu_quantize_act(COLI_Q8_K, x, mine);
        ref_quantize_q8_K(x, &ref, 0);
        cr_assert_eq(memcmp(mine, &ref, sizeof ref), 0, "trial %d: Q8_K block differs", trial);
    }
}

/* GPU and CPU must prepare the same Q8_K blocks. A CPU quantizer that
 * follows the pre-2024 rule (-128/max) is a known, named disagreement
 * (core/kernels/vecdot_k.c to fix), reported as a skip; any other difference fails. */
Test(gpu_math, q8_K_activation_equals_the_cpu_quantizer) {
    float x[COLI_QK_K];
    unsigned char mine[292];
    block_q8_K cpu, old;
    int old_rule = 0;
    for (int trial = 0; trial < 5000; trial++) {
        act_trial_values(x, COLI_QK_K, trial);
        gpu_quantize_act(COLI_Q8_K, x, mine);
        coli_quantize_act_q8_K(x, &cpu, COLI_QK_K);
        if (memcmp(mine, &cpu, sizeof cpu) == 0) continue;
        ref_quantize_q8_K(x, &old, 1);
        cr_assert_eq(memcmp(&cpu, &old, sizeof cpu), 0,
                     "trial %d: the CPU's Q8_K block differs from the GPU's "
                     "and from both llama.cpp rules",
                     trial);
        old_rule++;
    }
    if (old_rule)
        cr_skip_test("skipped: the CPU's Q8_K quantizer (coli_quantize_act_q8_K) uses iscale = -128/max, "
                     "llama.cpp (and the GPU) -127/max since January 2024: %d of 5000 blocks differ",
                     old_rule);
}

Test(gpu_math, iq4_nl_levels_are_the_table) {
    for (int i = 0; i < 16; i++) cr_assert_eq(gpu_iq4nl_level(i), coli_kvalues_iq4nl[i], "level %d", i);
}

Test(gpu_math, block_shapes_match_core_for_every_type) {
    const coli_dtype extra[] = {COLI_Q8_1, COLI_Q8_K};
    for (int i = 0; i < GPU_TEST_N_DTYPES + 2; i++) {
        const coli_dtype t = i < GPU_TEST_N_DTYPES ? gpu_test_dtypes[i] : extra[i - GPU_TEST_N_DTYPES];
        cr_assert_eq(gpu_block_elems(t), coli_dtype_block_elems(t), "%s", coli_dtype_name(t));
        cr_assert_eq(gpu_block_bytes(t), coli_dtype_block_bytes(t), "%s", coli_dtype_name(t));
        cr_assert_eq(gpu_row_bytes(t, 512), coli_row_bytes(t, 512), "%s", coli_dtype_name(t));
        cr_assert_eq(gpu_dtype_supported(t), i < GPU_TEST_N_DTYPES, "%s", coli_dtype_name(t));
    }
    cr_assert(!gpu_dtype_supported(24) && !gpu_dtype_supported(36) && !gpu_dtype_supported(99), "unknown types");
}

/* Every element, bit for bit: what gpu_weight_value gives (the kernels'
 * exact decoding) is what coli_dequantize_row gives. */
Test(gpu_math, weight_values_equal_core_dequantization_for_every_type) {
    const int64_t n = 512;
    float *src = malloc(n * sizeof *src), *ref = malloc(n * sizeof *ref);
    cr_assert(src && ref);
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        cr_assert_eq(gpu_row_bytes(t, n), coli_row_bytes(t, n), "%s row bytes", coli_dtype_name(t));
        for (uint64_t seed = 1; seed <= 50; seed++) {
            size_t bytes = 0;
            unsigned char *row = test_matrix(t, 1, n, seed * 7 + (seed % 2 ? 0 : 1000), &bytes);
            cr_assert(row);
            for (int64_t k = 0; k < n; k++) ref[k] = NAN;
            coli_dequantize_row(t, row, ref, n);
            for (int64_t k = 0; k < n; k++)
                cr_assert_eq(bits(gpu_weight_value(t, row, k)), bits(ref[k]), "%s element %lld: %.9g vs %.9g",
                             coli_dtype_name(t), (long long)k, gpu_weight_value(t, row, k), ref[k]);
            free(row);
        }
    }
    free(src), free(ref);
}

/* The integer form the dot products use, d * q + m(half), gives the exact
 * values up to float rounding (relative to the block's largest term). */
Test(gpu_math, integer_form_reproduces_the_values) {
    const int64_t n = 1024;
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        if (!gpu_dtype_is_quant(t)) continue;
        size_t bytes = 0;
        unsigned char *row = test_matrix(t, 1, n, 900 + (uint64_t)i, &bytes);
        cr_assert(row);
        for (int64_t g = 0; g < n / GPU_QK; g++) {
            int sub;
            const unsigned char *blk = gpu_group_block(t, row, g, &sub);
            const float d = gpu_quant_d(t, blk);
            for (int j = 0; j < GPU_QK; j++) {
                const int q = gpu_quant_q(t, blk, sub, j);
                const float m = gpu_quant_m(t, blk, sub, j / 16), exact = gpu_dequant(t, blk, sub, j);
                cr_assert(q >= -4096 && q <= 4096, "%s: |q| %d exceeds the exact-sum bound", coli_dtype_name(t), q);
                const double mine = (double)d * q + m, mag = fabs((double)d * q) + fabs(m);
                cr_assert(fabs(mine - exact) <= 1e-6 * mag + 1e-30, "%s group %lld element %d: d*q+m %.9g, value %.9g",
                          coli_dtype_name(t), (long long)g, j, mine, exact);
            }
        }
        free(row);
    }
}

Test(gpu_math, swiglu_is_core_formula) {
    for (int i = -2000; i <= 2000; i++) {
        const float g = (float)i * 0.0625f, u = 1.5f - (float)i * 0.001f;
        const float ref = g / (1.0f + expf(-g)) * u;
        cr_assert_eq(bits(gpu_swiglu(g, u)), bits(ref), "g %g u %g", g, u);
    }
}

/* ---- the activations against core/kernels/expert_ffn.c -------------------------------- */

/* gpu_act_at against expert_ffn.c's own code, run by the cpu plugin on F32
 * selector experts of 32 x 32: gate row f picks x[f], up row f picks
 * x[(f + 5) % 32] times 1.5 (sums of one exact product and zeros), down is
 * the identity, so the plugin's output f is act(x[f] + gate bias,
 * 1.5 x[f + 5] + up bias) + down bias, which must be gpu_act_at's value bit
 * for bit (same float operations in the same order). 64 rows sweep x over
 * [-12, 12]: both saturations, the clamps and the sigmoid's tails. */
static void check_act_bits(int act, float alpha, float limit, int biases) {
    enum {
        N = 32,
        ROWS = 64
    };
    static float gate[N * N], up[N * N], down[N * N], x[ROWS * N], out[ROWS * N];
    memset(gate, 0, sizeof gate), memset(up, 0, sizeof up), memset(down, 0, sizeof down);
    for (int f = 0; f < N; f++) {
        gate[f * N + f] = 1.0f;
        up[f * N + (f + 5) % N] = 1.5f;
        down[f * N + f] = 1.0f;
    }
    for (int i = 0; i < ROWS * N; i++) x[i] = -12.0f + 24.0f * ((float)((i * 37) % (ROWS * N)) + 0.5f) / (ROWS * N);
    test_expert te;
    memset(&te, 0, sizeof te);
    te.desc.n_embd = te.desc.n_ff = N;
    te.desc.gate = gate, te.desc.up = up, te.desc.down = down;
    te.desc.gate_bytes = te.desc.up_bytes = te.desc.down_bytes = sizeof gate;
    cr_assert_eq(test_expert_set_act(&te, act, alpha, limit, biases, 3), 0);
    char err[256] = "";
    cr_assert_eq(test_cpu_expert(&te, x, ROWS, out, err, sizeof err), 0, "cpu plugin: %s", err);
    const gpu_act_params p = gpu_act_params_make(act, alpha, limit, te.bias[0], te.bias[1], N);
    for (int r = 0; r < ROWS; r++)
        for (int f = 0; f < N; f++) {
            float mine = gpu_act_at(&p, x[r * N + f], 1.5f * x[r * N + (f + 5) % N], f);
            if (biases) mine += te.bias[2][f];
            cr_assert(mine == out[r * N + f],
                      "act %d (alpha %g, limit %g%s) row %d value %d: gpu %.9g, expert_ffn %.9g", act, alpha, limit,
                      biases ? ", biases" : "", r, f, mine, out[r * N + f]);
        }
    for (int i = 0; i < 3; i++) free(te.bias[i]);
}

Test(gpu_math, activations_are_expert_ffns_bit_for_bit) {
    check_act_bits(MOE_ACT_SILU, 0.0f, 0.0f, 0);
    check_act_bits(MOE_ACT_SILU, 0.0f, 0.0f, 1);
    check_act_bits(MOE_ACT_SWIGLU_OAI, 1.702f, 7.0f, 1); /* gpt-oss */
    check_act_bits(MOE_ACT_SWIGLU_OAI, 1.702f, 1.5f, 0);
    check_act_bits(MOE_ACT_SITU, 1.5f, 2.0f, 0);          /* the tiny kimi-k3's situ_beta, situ_linear_beta */
    check_act_bits(MOE_ACT_SITU, 0.75f, 0.0f, 1);         /* linear up branch */
    check_act_bits(MOE_ACT_SWIGLU_CLAMP, 0.0f, 1.25f, 0); /* deepseek4 */
}

Test(gpu_math, act_mask_has_the_computed_activations_and_biases) {
    cr_assert_eq(gpu_act_mask(),
                 (1u << MOE_ACT_SWIGLU_OAI) | (1u << MOE_ACT_SITU) | (1u << MOE_ACT_SWIGLU_CLAMP) | MOE_ACT_BIASES);
    cr_assert_eq(gpu_act_mask() & ~MOE_ACT_KNOWN, 0u, "bits outside the ABI");
    cr_assert(gpu_act_supported(MOE_ACT_SILU) && !gpu_act_supported(-1) && !gpu_act_supported(31));
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

Test(gpu_math, row_dot_matches_cpu_matmul_for_every_type_the_cpu_computes) {
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        if (!coli_dtype_valid(gpu_test_dtypes[i])) {
            cr_log_info("%s: not computed by the CPU path yet: compared with the double-precision "
                        "reference only",
                        coli_dtype_name(gpu_test_dtypes[i]));
            continue;
        }
        const int64_t big = gpu_block_elems(gpu_test_dtypes[i]) == 256 ? 512 : 96;
        check_matmul(gpu_test_dtypes[i], 256, 40, 3, 10 + (uint64_t)i);
        check_matmul(gpu_test_dtypes[i], big, 7, 9, 20 + (uint64_t)i);
    }
}

/* The activation values the prepared row stands for (d * q), read through
 * core's block structs, and the Q8_1 sums s. */
static void prepared_values(coli_dtype a, const unsigned char *prep, int64_t n, double *x, double *s) {
    for (int64_t b = 0; b < n / gpu_block_elems(a); b++) {
        if (a == COLI_Q8_K) {
            const block_q8_K *blk = (const block_q8_K *)(prep + (size_t)b * sizeof(block_q8_K));
            for (int j = 0; j < COLI_QK_K; j++) x[b * COLI_QK_K + j] = (double)blk->d * blk->qs[j];
        } else if (a == COLI_Q8_1) {
            const block_q8_1 *blk = (const block_q8_1 *)(prep + (size_t)b * sizeof(block_q8_1));
            for (int j = 0; j < COLI_QK; j++) x[b * COLI_QK + j] = (double)coli_fp16_to_fp32(blk->d) * blk->qs[j];
            s[b] = coli_fp16_to_fp32(blk->s);
        } else {
            const block_q8_0 *blk = (const block_q8_0 *)(prep + (size_t)b * sizeof(block_q8_0));
            for (int j = 0; j < COLI_QK; j++) x[b * COLI_QK + j] = (double)coli_fp16_to_fp32(blk->d) * blk->qs[j];
        }
    }
}

/* The Q4_1 / Q5_1 minimum m of block b of a row (value = d*q + m). */
static double legacy_min(coli_dtype t, const unsigned char *row, int64_t b) {
    if (t == COLI_Q4_1) return coli_fp16_to_fp32(((const block_q4_1 *)row)[b].m);
    return coli_fp16_to_fp32(((const block_q5_1 *)row)[b].m);
}

/* gpu_row_dot against sum w[k] * x[k] in double, w from coli_dequantize_row
 * and x the values the prepared activation blocks stand for. Q4_1/Q5_1:
 * the minimum multiplies the block's fp16 sum s (llama.cpp's vec_dot), so
 * the reference is sum (w - m) * x + m * s per block. Tolerance: 1e-5 of
 * the sum of |terms| (the minimum terms counted on their own). */
static void check_row_dot_double(coli_dtype t, int64_t n, uint64_t seed) {
    const int a = gpu_act_type(t);
    size_t bytes = 0;
    unsigned char *row = test_matrix(t, 1, n, seed, &bytes), *prep = malloc(gpu_prep_row_bytes(t, n));
    float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    double *xv = malloc((size_t)n * sizeof *xv), *sv = calloc((size_t)(n / GPU_QK), sizeof *sv);
    cr_assert(row && prep && x && w && xv && sv);
    test_rand_rows(x, n, 1.5f, seed + 5);
    gpu_prep_row(t, x, n, prep);
    prepared_values(a, prep, n, xv, sv);
    coli_dequantize_row(t, row, w, n);
    double ref = 0, mag = 0;
    for (int64_t b = 0; b < n / GPU_QK; b++) {
        const double m = a == COLI_Q8_1 ? legacy_min(t, row, b) : 0.0;
        for (int64_t k = b * GPU_QK; k < (b + 1) * GPU_QK; k++) {
            int sub;
            const unsigned char *blk = gpu_group_block(t, row, k / GPU_QK, &sub);
            ref += (w[k] - m) * xv[k];
            mag += fabs((w[k] - m) * xv[k]) + fabs(gpu_quant_m(t, blk, sub, (int)(k % GPU_QK) / 16) * xv[k]);
        }
        ref += m * sv[b];
        mag += fabs(m * sv[b]);
    }
    const float mine = gpu_row_dot(t, row, prep, n);
    cr_assert(fabs(mine - ref) <= 1e-5 * mag + 1e-9, "%s seed %llu: gpu row dot %.9g, reference %.9g (terms %.3g)",
              coli_dtype_name(t), (unsigned long long)seed, mine, ref, mag);
    free(row), free(prep), free(x), free(w), free(xv), free(sv);
}

Test(gpu_math, row_dot_matches_double_reference_for_every_quant_type) {
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        if (!gpu_dtype_is_quant(t)) continue;
        for (uint64_t seed = 1; seed <= 40; seed++)
            check_row_dot_double(t, seed % 2 ? 256 : 1024, seed * 31 + (uint64_t)i);
    }
}

/* ---- the whole expert against the cpu plugin ----------------------------------------- */

Test(gpu_math, expert_pipeline_matches_cpu_plugin_for_every_type_the_cpu_computes) {
    const int64_t n_embd = 256, n_ff = 512, n_rows = 12;
    float *x = malloc((size_t)(n_rows * n_embd) * sizeof *x);
    float *ref = malloc((size_t)(n_rows * n_embd) * sizeof *ref),
          *mine = malloc((size_t)(n_rows * n_embd) * sizeof *mine);
    cr_assert(x && ref && mine);
    test_rand_rows(x, n_rows * n_embd, 2.0f, 99);
    char err[256] = "";
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        if (!coli_dtype_valid(t)) {
            cr_log_info("%s: no CPU path yet: pipeline checked by test_gpu_emu against the host model",
                        coli_dtype_name(t));
            continue;
        }
        test_expert te;
        cr_assert_eq(test_expert_make(&te, 1, i, t, n_embd, n_ff, 500 + (uint64_t)i), 0);
        cr_assert_eq(test_cpu_expert(&te, x, n_rows, ref, err, sizeof err), 0, "cpu plugin: %s", err);
        cr_assert_eq(test_host_expert(&te.desc, x, n_rows, mine), 0);
        const float scale = test_max_abs(ref, n_rows * n_embd), diff = test_max_diff(mine, ref, n_rows * n_embd);
        const float tol = test_tolerance(t) * scale; /* see gpu_test_util.h */
        cr_log_info("%s: max |gpu math - cpu plugin| = %.3g (outputs up to %.3g)", coli_dtype_name(t), diff, scale);
        cr_assert(scale > 0.05f, "%s: degenerate test expert (outputs up to %g)", coli_dtype_name(t), scale);
        cr_assert(diff <= tol, "%s: max diff %g > %g", coli_dtype_name(t), diff, tol);
        test_expert_free(&te);
    }
    free(x), free(ref), free(mine);
}
