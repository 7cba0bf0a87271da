/*
 * test_gpu_emu.cpp - the GPU kernels themselves (gpu_kernels.cuh), executed
 * on the host by the emulator of gpu_emu.h (one coroutine per GPU thread,
 * real barriers, shared memory), launched with the plugin's own geometry:
 * bit for bit equal to the host model of gpu_test_model.h (so the decode
 * and the tiled kernel give a row the same bits: the determinism contract),
 * and within tolerance of the cpu plugin where the CPU path computes the
 * weight types. Every weight type, decode (1-8 rows) and prefill shapes,
 * tiles cut at the edges, rows of more than 32 groups, mixed weight types.
 * No device needed.
 * Built by plugins/gpu/gpu.mk with the C++ compiler (the kernels are
 * templates).
 */
#include <criterion/criterion.h>

/* The C headers first, with C linkage (core/tensor.h has no extern "C"). */
#define _Static_assert static_assert /* core/quant/quant.h is C11 */
extern "C" {
#include "tests/gpu_test_util.h"
}

#define COLI_GPU_EMULATE 1
#include "plugins/gpu/gpu_compat.h"
#include "plugins/gpu/gpu_math.h"
#include "plugins/gpu/gpu_kernels.cuh"
#include "tests/gpu_test_model.h"

/* ---- the plugin's launch sequence, on the emulator ------------------------------ */

template <int A> static void emu_prep_t(const float *x, int64_t n_rows, int64_t n, unsigned char *out) {
    int rc = gpu_emu_launch(dim3(gpu_prep_blocks(A, n_rows, n)), dim3(GPU_PREP_THREADS),
                            [&] { k_prep<A>(x, n_rows, n, out); });
    cr_assert_eq(rc, 0, "k_prep<%d>: launch %d", A, rc);
}

template <int T>
static void emu_matmul_t(const unsigned char *W, int64_t n_in, int64_t n_out, const unsigned char *xp, int64_t n_rows,
                         float *y) {
    int rc;
    if (gpu_use_decode(n_rows))
        rc = gpu_emu_launch(dim3(gpu_decode_blocks(n_out)), dim3(GPU_DECODE_THREADS),
                            [&] { k_mm_decode<T>(W, n_in, n_out, xp, (int)n_rows, y); });
    else
        rc = gpu_emu_launch(gpu_tiled_grid(n_out, n_rows), dim3(GPU_TILED_THREADS),
                            [&] { k_mm_tiled<T>(W, n_in, n_out, xp, n_rows, y); });
    cr_assert_eq(rc, 0, "matmul<%d> (%lld rows): launch %d", T, (long long)n_rows, rc);
}

static void emu_prep(int t, const float *x, int64_t n_rows, int64_t n, unsigned char *out) {
    switch (gpu_act_type(t)) {
    case COLI_F32: emu_prep_t<COLI_F32>(x, n_rows, n, out); break;
    case COLI_F16: emu_prep_t<COLI_F16>(x, n_rows, n, out); break;
    case COLI_BF16: emu_prep_t<COLI_BF16>(x, n_rows, n, out); break;
    case COLI_Q8_0: emu_prep_t<COLI_Q8_0>(x, n_rows, n, out); break;
    case COLI_Q8_1: emu_prep_t<COLI_Q8_1>(x, n_rows, n, out); break;
    case COLI_Q8_K: emu_prep_t<COLI_Q8_K>(x, n_rows, n, out); break;
    default: cr_assert_fail("prep type %d", t);
    }
}

static void emu_matmul(int t, const void *W, int64_t n_in, int64_t n_out, const unsigned char *xp, int64_t n_rows,
                       float *y) {
    const unsigned char *w = (const unsigned char *)W;
    switch (t) {
    case COLI_F32: emu_matmul_t<COLI_F32>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_F16: emu_matmul_t<COLI_F16>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_BF16: emu_matmul_t<COLI_BF16>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q8_0: emu_matmul_t<COLI_Q8_0>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q4_0: emu_matmul_t<COLI_Q4_0>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q4_1: emu_matmul_t<COLI_Q4_1>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q5_0: emu_matmul_t<COLI_Q5_0>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q5_1: emu_matmul_t<COLI_Q5_1>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ4_NL: emu_matmul_t<COLI_IQ4_NL>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q2_K: emu_matmul_t<COLI_Q2_K>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q3_K: emu_matmul_t<COLI_Q3_K>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q4_K: emu_matmul_t<COLI_Q4_K>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q5_K: emu_matmul_t<COLI_Q5_K>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q6_K: emu_matmul_t<COLI_Q6_K>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ4_XS: emu_matmul_t<COLI_IQ4_XS>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_MXFP4: emu_matmul_t<COLI_MXFP4>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_TQ1_0: emu_matmul_t<COLI_TQ1_0>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_TQ2_0: emu_matmul_t<COLI_TQ2_0>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ2_XXS: emu_matmul_t<COLI_IQ2_XXS>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ2_XS: emu_matmul_t<COLI_IQ2_XS>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ2_S: emu_matmul_t<COLI_IQ2_S>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ3_XXS: emu_matmul_t<COLI_IQ3_XXS>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ3_S: emu_matmul_t<COLI_IQ3_S>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ1_S: emu_matmul_t<COLI_IQ1_S>(w, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ1_M: emu_matmul_t<COLI_IQ1_M>(w, n_in, n_out, xp, n_rows, y); break;
    default: cr_assert_fail("matmul type %d", t);
    }
}

/* The sequence of gpu_experts.cu's s_run_group, host memory standing in for
 * device memory. */
static void emu_expert(const moe_expert_desc *e, const float *x, int64_t n_rows, float *out) {
    const int64_t n_embd = e->n_embd, n_ff = e->n_ff, wide = n_ff > n_embd ? n_ff : n_embd;
    std::vector<unsigned char> prep((size_t)(n_rows * wide) * sizeof(float));
    std::vector<float> g((size_t)(n_rows * n_ff)), u((size_t)(n_rows * n_ff));
    emu_prep(e->gate_type, x, n_rows, n_embd, prep.data());
    emu_matmul(e->gate_type, e->gate, n_embd, n_ff, prep.data(), n_rows, g.data());
    if (gpu_act_type(e->up_type) != gpu_act_type(e->gate_type)) emu_prep(e->up_type, x, n_rows, n_embd, prep.data());
    emu_matmul(e->up_type, e->up, n_embd, n_ff, prep.data(), n_rows, u.data());
    const int64_t n_hidden = n_rows * n_ff;
    float *gp = g.data();
    const float *up = u.data();
    const gpu_act_params act = gpu_act_params_make(e->act, e->act_alpha, e->act_limit, e->gate_bias, e->up_bias, n_ff);
    cr_assert_eq(
        gpu_emu_launch(dim3(gpu_elem_blocks(n_hidden)), dim3(GPU_ELEM_THREADS), [&] { k_act(gp, up, n_hidden, act); }),
        0);
    emu_prep(e->down_type, g.data(), n_rows, n_ff, prep.data());
    emu_matmul(e->down_type, e->down, n_ff, n_embd, prep.data(), n_rows, out);
    if (!e->down_bias) return;
    cr_assert_eq(gpu_emu_launch(dim3(gpu_elem_blocks(n_rows * n_embd)), dim3(GPU_ELEM_THREADS),
                                [&] { k_add_bias(out, e->down_bias, n_rows, n_embd); }),
                 0);
}

/* ---- against the host model and the cpu plugin ----------------------------------------- */

static void check(const test_expert *te, const char *what, int64_t n_rows, float rel_tol) {
    const int64_t n = n_rows * te->desc.n_embd;
    std::vector<float> x((size_t)n), out((size_t)n, NAN), model((size_t)n), ref((size_t)n);
    test_rand_rows(x.data(), n, 2.0f, (uint64_t)n_rows * 31 + 7);
    emu_expert(&te->desc, x.data(), n_rows, out.data());
    cr_assert_eq(test_host_expert(&te->desc, x.data(), n_rows, model.data()), 0);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(memcmp(&out[(size_t)i], &model[(size_t)i], sizeof(float)), 0,
                     "%s, %lld rows (%s kernel), "
                     "output %lld: %.9g, host model %.9g: not the order of gpu_row_dot",
                     what, (long long)n_rows, gpu_use_decode(n_rows) ? "decode" : "tiled", (long long)i, out[(size_t)i],
                     model[(size_t)i]);
    if (!test_cpu_computes(&te->desc)) {
        cr_log_info("%s, %lld rows: equal to the host model (no CPU path for the type yet)", what, (long long)n_rows);
        return;
    }
    char err[256] = "";
    cr_assert_eq(test_cpu_expert(te, x.data(), n_rows, ref.data(), err, sizeof err), 0, "cpu plugin: %s", err);
    const float scale = test_max_abs(ref.data(), n), diff = test_max_diff(out.data(), ref.data(), n);
    cr_log_info("%s, %lld rows (%s kernel): max |emulated gpu - cpu plugin| = %.3g of %.3g", what, (long long)n_rows,
                gpu_use_decode(n_rows) ? "decode" : "tiled", diff, scale);
    cr_assert(scale > 0.05f, "%s: degenerate expert", what);
    cr_assert(diff <= rel_tol * scale, "%s, %lld rows: max diff %g > %g", what, (long long)n_rows, diff,
              rel_tol * scale);
}

/* 32-value types: n_embd 96 and n_ff 160 are not multiples of the 64-wide
 * tiles, so edges are cut; super-block types: 256 x 512 (70 rows cut the
 * tiles' row edge). */
Test(gpu_emu, kernels_match_cpu_plugin_for_every_type_and_batch_shape) {
    const int64_t rows[] = {1, 3, 8, 9, 70};
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) {
        const coli_dtype t = gpu_test_dtypes[i];
        const int super = gpu_block_elems(t) == 256;
        test_expert te;
        cr_assert_eq(test_expert_make(&te, 0, i, t, super ? 256 : 96, super ? 512 : 160, 300 + (uint64_t)i), 0);
        for (int r = 0; r < 5; r++) check(&te, coli_dtype_name(t), rows[r], test_tolerance(t));
        test_expert_free(&te);
    }
}

/* deepseek4's clamped SwiGLU (MOE_ACT_SWIGLU_CLAMP, a limit small enough
 * that gate and up clamp): the host model's bits and the cpu plugin's
 * values, both kernels. */
Test(gpu_emu, clamped_swiglu_matches_cpu_plugin) {
    const coli_dtype types[] = {COLI_F32, COLI_Q8_0, COLI_Q4_K};
    for (int i = 0; i < 3; i++) {
        const int super = gpu_block_elems(types[i]) == 256;
        test_expert te;
        cr_assert_eq(test_expert_make(&te, 0, i, types[i], super ? 256 : 96, super ? 512 : 160, 900 + (uint64_t)i), 0);
        te.desc.act = MOE_ACT_SWIGLU_CLAMP;
        te.desc.act_limit = 0.25f;
        check(&te, coli_dtype_name(types[i]), 3, test_tolerance(types[i]));
        check(&te, coli_dtype_name(types[i]), 70, test_tolerance(types[i]));
        test_expert_free(&te);
    }
}

/* gate of type g, up of type u, down of type d: each input prepared for its
 * own type (shared by gate and up only when their activation types agree). */
static void check_mix(coli_dtype g, coli_dtype u, coli_dtype d, int64_t n_embd, int64_t n_ff) {
    test_expert a, b, c;
    cr_assert_eq(test_expert_make(&a, 0, 0, g, n_embd, n_ff, 1), 0);
    cr_assert_eq(test_expert_make(&b, 0, 0, u, n_embd, n_ff, 2), 0);
    cr_assert_eq(test_expert_make(&c, 0, 0, d, n_embd, n_ff, 3), 0);
    test_expert mix = a; /* owns nothing */
    mix.desc.up = b.desc.up;
    mix.desc.up_type = b.desc.up_type;
    mix.desc.up_bytes = b.desc.up_bytes;
    mix.desc.down = c.desc.down;
    mix.desc.down_type = c.desc.down_type;
    mix.desc.down_bytes = c.desc.down_bytes;
    char what[64];
    snprintf(what, sizeof what, "%s/%s/%s", coli_dtype_name(g), coli_dtype_name(u), coli_dtype_name(d));
    const float tol = test_tolerance(d) > test_tolerance(g) ? test_tolerance(d) : test_tolerance(g);
    check(&mix, what, 2, tol);
    check(&mix, what, 33, tol);
    test_expert_free(&a);
    test_expert_free(&b);
    test_expert_free(&c);
}

/* Rows of more than 32 groups (down: n_ff / 32 = 37 or 40 groups): lanes
 * take several groups, the tiled kernel visits them in the lanes' order. */
Test(gpu_emu, long_rows_keep_the_one_summation_order) {
    const coli_dtype types[] = {COLI_F16, COLI_Q4_1, COLI_Q4_K, COLI_Q6_K, COLI_IQ2_XXS};
    for (int i = 0; i < 5; i++) {
        const int super = gpu_block_elems(types[i]) == 256;
        test_expert te;
        cr_assert_eq(test_expert_make(&te, 0, i, types[i], super ? 256 : 96, super ? 1280 : 1184, 700 + (uint64_t)i),
                     0);
        check(&te, coli_dtype_name(types[i]), 2, test_tolerance(types[i]));
        check(&te, coli_dtype_name(types[i]), 11, test_tolerance(types[i]));
        test_expert_free(&te);
    }
}

Test(gpu_emu, mixed_weight_types_prepare_each_input_for_its_own_type) {
    check_mix(COLI_F16, COLI_Q4_0, COLI_BF16, 64, 96);
    check_mix(COLI_Q3_K, COLI_Q3_K, COLI_Q4_K, 256, 512);          /* llama.cpp's Q3_K_M experts */
    check_mix(COLI_Q4_K, COLI_Q6_K, COLI_Q5_0, 256, 256);          /* Q8_K input shared, Q8_0 hidden */
    check_mix(COLI_IQ4_NL, COLI_Q4_1, COLI_IQ4_XS, 256, 512);      /* Q8_0 then Q8_1 input, Q8_K hidden */
    check_mix(COLI_IQ2_XXS, COLI_IQ2_XXS, COLI_IQ3_XXS, 256, 512); /* a low-bit "UD" mix: grids of two types */
    check_mix(COLI_MXFP4, COLI_IQ1_M, COLI_TQ2_0, 256, 512);       /* Q8_0 then Q8_K input, Q8_K hidden */
}

/* One activation (with or without the three biases) over a few weight
 * types, decode and prefill shapes: the kernels bit for bit the host model,
 * and within the type's tolerance of the cpu plugin (core/kernels/
 * expert_ffn.c's activations). The small limits make the clamps bite: the
 * gate values reach about 4. */
static void check_act(int act, float alpha, float limit, int biases, const char *name) {
    const coli_dtype types[] = {COLI_F32, COLI_F16, COLI_Q8_0, COLI_Q4_K, COLI_MXFP4};
    const int64_t rows[] = {1, 8, 9, 70};
    for (int i = 0; i < 5; i++) {
        const int super = gpu_block_elems(types[i]) == 256;
        test_expert te;
        cr_assert_eq(test_expert_make(&te, 0, i, types[i], super ? 256 : 96, super ? 512 : 160, 900 + (uint64_t)i), 0);
        cr_assert_eq(test_expert_set_act(&te, act, alpha, limit, biases, 40 + (uint64_t)i), 0);
        char what[96];
        snprintf(what, sizeof what, "%s%s, %s", name, biases ? " + biases" : "", coli_dtype_name(types[i]));
        for (int r = 0; r < 4; r++) check(&te, what, rows[r], test_tolerance(types[i]));
        test_expert_free(&te);
    }
}

Test(gpu_emu, swiglu_oai_with_biases_matches_cpu_plugin) {
    check_act(MOE_ACT_SWIGLU_OAI, 1.702f, 1.5f, 1, "swiglu_oai");
    check_act(MOE_ACT_SWIGLU_OAI, 1.702f, 7.0f, 0, "swiglu_oai (gpt-oss's limit)");
}

Test(gpu_emu, situ_matches_cpu_plugin) {
    check_act(MOE_ACT_SITU, 1.5f, 2.0f, 0, "situ");
    check_act(MOE_ACT_SITU, 0.75f, 0.0f, 0, "situ (linear up)");
    check_act(MOE_ACT_SITU, 1.5f, 2.0f, 1, "situ");
}

/* Act value 3 (deepseek4, not yet in plugin_abi.h): the kernel against the
 * host model only (no CPU path yet); load_expert does not take it yet. */
Test(gpu_emu, swiglu_clamp_kernel_matches_the_host_model) {
    cr_assert(gpu_act_supported(MOE_ACT_SWIGLU_CLAMP));
    check_act(MOE_ACT_SWIGLU_CLAMP, 0.0f, 1.5f, 0, "swiglu_clamp");
}

Test(gpu_emu, emulator_refuses_what_the_hardware_refuses) {
    cr_assert_eq(gpu_emu_launch(dim3(1), dim3(0), [] {}), -1, "zero-thread block");
    cr_assert_eq(gpu_emu_launch(dim3(1), dim3(2048), [] {}), -1, "2048-thread block");
    /* half the block skips the barrier: divergence */
    cr_assert_eq(gpu_emu_launch(dim3(1), dim3(64),
                                [] {
                                    if (threadIdx.x < 32) __syncthreads();
                                }),
                 -2);
    /* every thread passes the barrier and sees what the others wrote before it */
    static int seen[64];
    int ok = gpu_emu_launch(dim3(2), dim3(64), [] {
        __shared__ int slot[64];
        slot[threadIdx.x] = (int)(threadIdx.x + 100 * blockIdx.x);
        __syncthreads();
        seen[threadIdx.x] = slot[63 - threadIdx.x];
    });
    cr_assert_eq(ok, 0);
    for (int i = 0; i < 64; i++) cr_assert_eq(seen[i], 63 - i + 100, "thread %d", i);
}
