/*
 * test_quant.c - number formats: fp16/bf16 conversions against independent
 * references (and the F16C instructions), llama.cpp's rounding rules, and
 * our Q8_0/Q4_0 weight quantization against the shipped llama-quantize
 * files byte for byte.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "colibri.h"
#include "core/cpu_features.h"
#include "core/gguf/gguf.h"
#include "core/kernels/matmul_impl.h"
#include "core/quant/quant.h"

#if COLI_X86
#include <immintrin.h>
#endif

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- fp16 -------------------------------------------------------------- */

/* The value of a finite half, computed in double from the definition. */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

Test(dtype, names_round_trip_and_unknown_types_say_their_number) {
    static const coli_dtype all[] = {COLI_F32, COLI_F16, COLI_BF16, COLI_Q8_0, COLI_Q4_0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        coli_dtype back;
        cr_assert_eq(coli_dtype_from_name(coli_dtype_name(all[i]), &back), 0, "%s", coli_dtype_name(all[i]));
        cr_expect_eq(back, all[i]);
    }
    cr_expect_str_eq(coli_dtype_name(24), "type 24"); /* GGML's I8 */
    cr_expect_str_eq(coli_dtype_name(4294967295u), "type 4294967295");
    coli_dtype t;
    cr_expect_eq(coli_dtype_from_name("I8", &t), -1);
    /* the IQ types by GGML's names and ids */
    static const struct {
        const char *name;
        coli_dtype t;
        uint32_t id;
    } iq[] = {{"IQ2_XXS", COLI_IQ2_XXS, 16}, {"IQ2_XS", COLI_IQ2_XS, 17}, {"IQ3_XXS", COLI_IQ3_XXS, 18},
              {"IQ1_S", COLI_IQ1_S, 19},     {"IQ3_S", COLI_IQ3_S, 21},   {"IQ2_S", COLI_IQ2_S, 22},
              {"IQ1_M", COLI_IQ1_M, 29}};
    for (size_t i = 0; i < sizeof iq / sizeof iq[0]; i++) {
        cr_expect_eq(coli_dtype_from_name(iq[i].name, &t), 0, "%s", iq[i].name);
        cr_expect_eq(t, iq[i].t);
        cr_expect_eq((uint32_t)iq[i].t, iq[i].id);
        cr_expect_str_eq(coli_dtype_name(iq[i].id), iq[i].name);
        cr_expect(coli_dtype_valid(iq[i].id), "%s is a weight type", iq[i].name);
    }
}

Test(fp16, to_fp32_matches_definition_for_all_halves) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = coli_fp16_to_fp32((uint16_t)h);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 31 && m) {
            cr_assert(isnan(f), "half %04x: NaN expected", h);
            /* quieted, payload kept in the top mantissa bits */
            cr_assert_eq(fbits(f), ((h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)m << 13), "half %04x", h);
        } else if (e == 31) {
            cr_assert(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0), "half %04x: Inf", h);
        } else {
            cr_assert_eq((double)f, half_value((uint16_t)h), "half %04x", h);
            cr_assert_eq(signbit(f) != 0, (h & 0x8000) != 0, "half %04x sign", h);
        }
    }
}

/* Nearest half to a finite float, ties to even, by searching the ordered
 * positive halves (0x0000..0x7bff); >= 65520 overflows to Inf. */
static uint16_t half_reference(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff;
    while (lo < hi) { /* largest half <= a */
        uint32_t mid = (lo + hi + 1) / 2;
        if (half_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7bff) return sign | 0x7bff;
    double dl = a - half_value((uint16_t)lo), du = half_value((uint16_t)(lo + 1)) - a;
    uint16_t r = (dl < du || (dl == du && !(lo & 1))) ? (uint16_t)lo : (uint16_t)(lo + 1);
    return sign | r;
}

Test(fp16, from_fp32_rounds_to_nearest_even) {
    /* exact ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    cr_assert_eq(coli_fp32_to_fp16(1.0f + ldexpf(1, -11)), 0x3c00);
    cr_assert_eq(coli_fp32_to_fp16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
    cr_assert_eq(coli_fp32_to_fp16(65504.0f), 0x7bff);
    cr_assert_eq(coli_fp32_to_fp16(65519.99f), 0x7bff);
    cr_assert_eq(coli_fp32_to_fp16(65520.0f), 0x7c00);
    cr_assert_eq(coli_fp32_to_fp16(-INFINITY), 0xfc00);
    cr_assert_eq(coli_fp32_to_fp16(ldexpf(1, -24)), 0x0001); /* smallest subnormal */
    cr_assert_eq(coli_fp32_to_fp16(ldexpf(1, -25)), 0x0000); /* tie to even: 0 */
    cr_assert_eq(coli_fp32_to_fp16(ldexpf(3, -25)), 0x0002); /* 1.5 ulp -> 2 */
    cr_assert_eq(coli_fp32_to_fp16(-0.0f), 0x8000);
    uint16_t n = coli_fp32_to_fp16(NAN);
    cr_assert((n & 0x7c00) == 0x7c00 && (n & 0x3ff), "NaN stays NaN: %04x", n);
    /* every bit pattern class, sampled: finite values against the search */
    for (uint64_t u = 0; u < 0x100000000ull; u += 40009) {
        float f = bitsf((uint32_t)u);
        if (isnan(f)) continue;
        cr_assert_eq(coli_fp32_to_fp16(f), half_reference(f), "float %08x", (uint32_t)u);
    }
}

#if COLI_X86
COLI_TARGET_AVX2 static uint16_t f16c_from_f32(float f) {
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT), 0);
}
COLI_TARGET_AVX2 static float f16c_to_f32(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h))); }
#endif

Test(fp16, scalar_matches_f16c_bit_for_bit) {
#if COLI_X86
    if (!coli_cpu_avx2()) cr_skip_test("no F16C on this CPU");
    for (uint64_t u = 0; u < 0x100000000ull; u += 4099) {
        float f = bitsf((uint32_t)u);
        cr_assert_eq(coli_fp32_to_fp16(f), f16c_from_f32(f), "float %08x", (uint32_t)u);
    }
    for (uint32_t h = 0; h < 65536; h++)
        cr_assert_eq(fbits(coli_fp16_to_fp32((uint16_t)h)), fbits(f16c_to_f32((uint16_t)h)), "half %04x", h);
#else
    cr_skip_test("not x86");
#endif
}

Test(fp16, bulk_rows_equal_scalar) {
    enum {
        N = 1003
    };
    float src[N], back[N];
    uint16_t h[N];
    unsigned s = 1;
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        src[i] = bitsf(s & 0x8fffffffu);
    }
    src[0] = NAN;
    src[1] = INFINITY;
    src[2] = 1e-8f;
    src[3] = 70000.0f;
    coli_quantize_row(COLI_F16, src, h, N);
    coli_dequantize_row(COLI_F16, h, back, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(h[i], coli_fp32_to_fp16(src[i]), "element %d", i);
        cr_assert_eq(fbits(back[i]), fbits(coli_fp16_to_fp32(h[i])), "element %d", i);
    }
}

/* ---- bf16 -------------------------------------------------------------- */

static double bf16_value(uint32_t bits) {
    if ((bits & 0x7fffffffu) == 0x7f800000u) return (bits >> 31) ? -ldexp(1, 128) : ldexp(1, 128);
    return (double)bitsf(bits);
}

Test(bf16, rounds_to_nearest_even_and_keeps_nan) {
    for (uint64_t u = 0; u < 0x100000000ull; u += 30011) {
        float f = bitsf((uint32_t)u);
        uint16_t b = coli_fp32_to_bf16(f);
        if (isnan(f)) {
            cr_assert(isnan(coli_bf16_to_fp32(b)), "float %08x: NaN kept", (uint32_t)u);
            cr_assert(b & 0x40, "float %08x: quiet", (uint32_t)u);
            continue;
        }
        /* reference: the nearer of the two bf16 neighbours, ties to the
         * even one; Inf counts as 2^128 (the next value up the scale) */
        uint32_t lo = (uint32_t)u & 0xffff0000u, up = lo + 0x10000u;
        double dl = fabs((double)f - bf16_value(lo)), du = fabs(bf16_value(up) - (double)f);
        uint32_t want = (dl < du || (dl == du && !((lo >> 16) & 1))) ? lo : up;
        cr_assert_eq(b, (uint16_t)(want >> 16), "float %08x", (uint32_t)u);
        cr_assert_eq(fbits(coli_bf16_to_fp32(b)), want, "float %08x back", (uint32_t)u);
    }
    cr_assert_eq(coli_fp32_to_bf16(INFINITY), 0x7f80);
    cr_assert_eq(coli_fp32_to_bf16(-0.0f), 0x8000);
    cr_assert_eq(coli_fp32_to_bf16(bitsf(0x00008000u)), 0x0000); /* subnormal tie -> even */
    cr_assert_eq(coli_fp32_to_bf16(bitsf(0x00018000u)), 0x0002);
}

/* ---- rounding rules of llama.cpp --------------------------------------- */

static void block_with(float *x, float amax_elem, const float *vals, int n) {
    memset(x, 0, COLI_QK * sizeof(float));
    x[COLI_QK - 1] = amax_elem;
    memcpy(x, vals, (size_t)n * sizeof(float));
}

Test(rounding, weights_round_half_away_activations_half_even) {
    float x[COLI_QK];
    const float vals[] = {2.5f, -2.5f, 3.5f, 0.5f, -0.5f, 1.49f};
    block_with(x, 127.0f, vals, 6); /* amax 127: d = 1, id = 1 */
    block_q8_0 w, a;
    coli_quantize_row_q8_0(x, &w, COLI_QK);
    coli_quantize_act_q8_0(x, &a, COLI_QK);
    const int8_t want_w[] = {3, -3, 4, 1, -1, 1}, want_a[] = {2, -2, 4, 0, 0, 1};
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(w.qs[i], want_w[i], "weight %g -> %d", vals[i], w.qs[i]);
        cr_assert_eq(a.qs[i], want_a[i], "activation %g -> %d", vals[i], a.qs[i]);
    }
    cr_assert_eq(w.qs[COLI_QK - 1], 127);
    cr_assert_eq(w.d, coli_fp32_to_fp16(1.0f));
    cr_assert_eq(a.d, coli_fp32_to_fp16(1.0f));
    /* all zero: d = 0, q = 0 */
    memset(x, 0, sizeof x);
    coli_quantize_act_q8_0(x, &a, COLI_QK);
    coli_quantize_row_q8_0(x, &w, COLI_QK);
    cr_assert(a.d == 0 && w.d == 0 && a.qs[5] == 0 && w.qs[5] == 0);
}

Test(rounding, q4_0_uses_signed_max_and_truncation) {
    float x[COLI_QK] = {0};
    x[3] = -8.0f; /* largest |x|, negative: d = -8 / -8 = 1 */
    x[0] = 7.9f;
    x[1] = 7.95f; /* 7.9 + 8.5 = 16.4 -> 16 -> clamped 15 */
    x[2] = -0.6f; /* -0.6 + 8.5 = 7.9 -> 7 (truncation) */
    x[16] = 0.5f; /* 9.0 -> 9, in the high nibble of byte 0 */
    block_q4_0 b;
    coli_quantize_row_q4_0(x, &b, COLI_QK);
    cr_assert_eq(b.d, coli_fp32_to_fp16(1.0f));
    cr_assert_eq(b.qs[0] & 0xf, 15);
    cr_assert_eq(b.qs[0] >> 4, 9);
    cr_assert_eq(b.qs[1] & 0xf, 15);
    cr_assert_eq(b.qs[2] & 0xf, 7);
    cr_assert_eq(b.qs[3] & 0xf, 0);
    /* ties on |x|: the first one wins, with its sign */
    memset(x, 0, sizeof x);
    x[4] = 2.0f;
    x[9] = -2.0f;
    coli_quantize_row_q4_0(x, &b, COLI_QK);
    cr_assert_eq(b.d, coli_fp32_to_fp16(-0.25f));
}

Test(rounding, avx2_activation_quantizer_equals_portable) {
    if (!coli_cpu_avx2()) cr_skip_test("no AVX2");
    enum {
        N = 1024,
        T = 3
    };
    static float x[T * N];
    static int8_t qa[T * N], qp[T * N];
    static float da[T * N / COLI_QK], dp[T * N / COLI_QK];
    unsigned s = 5;
    for (int i = 0; i < T * N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 9) / 8388608.0f - 1.0f) * (float)(1 + (i / 32) % 5);
    }
    for (int i = 64; i < 96; i++) x[i] = 0.0f;                      /* an all-zero block */
    for (int i = 128; i < 160; i++) x[i] = (float)(i - 144) * 0.5f; /* exact .5 ties */
    mm_avx2_quantize_rows(x, T, N, qa, da);
    mm_portable_quantize_rows(x, T, N, qp, dp);
    cr_assert_eq(memcmp(qa, qp, sizeof qa), 0, "int8 values differ");
    cr_assert_eq(memcmp(da, dp, sizeof da), 0, "scales differ");
    /* and the public block quantizer agrees with both */
    block_q8_0 blk[N / COLI_QK];
    coli_quantize_act_q8_0(x, blk, N);
    for (int b = 0; b < N / COLI_QK; b++) {
        cr_assert_eq(memcmp(blk[b].qs, qp + b * COLI_QK, COLI_QK), 0, "block %d", b);
        cr_assert_eq(fbits(coli_fp16_to_fp32(blk[b].d)), fbits(dp[b]), "block %d scale", b);
    }
}

/* ---- dequantize(quantize(x)) error bounds ------------------------------- */

/* dequantize(quantize(x)) of type t: every element within tol steps (+ slack)
 * of x, a step being its block's amax / levels. q: room for the blocks, y: n floats. */
static void s_expect_block_roundtrip(coli_dtype t, const float *x, void *q, float *y, int n, float levels, float tol,
                                     float slack) {
    coli_quantize_row(t, x, q, n);
    coli_dequantize_row(t, q, y, n);
    for (int b = 0; b < n / COLI_QK; b++) {
        float amax = 0;
        for (int j = 0; j < COLI_QK; j++) amax = fmaxf(amax, fabsf(x[b * COLI_QK + j]));
        const float d = amax / levels;
        for (int j = 0; j < COLI_QK; j++) {
            int i = b * COLI_QK + j;
            cr_assert_leq(fabsf(y[i] - x[i]), tol * d + slack, "%s element %d: %g vs %g", coli_dtype_name(t), i, y[i],
                          x[i]);
        }
    }
}

Test(roundtrip, q8_0_and_q4_0_error_bounds) {
    enum {
        N = 32 * 64
    };
    static float x[N], y[N];
    static block_q8_0 q8[N / COLI_QK];
    static block_q4_0 q4[N / COLI_QK];
    unsigned s = 9;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 9) / 8388608.0f - 1.0f) * ldexpf(1, (i / 32) % 13 - 6);
    }
    /* q8_0: half a step of amax/127; q4_0: half a step of amax/8, except the
     * top of the range clamps at nibble 15 (one step) */
    s_expect_block_roundtrip(COLI_Q8_0, x, q8, y, N, 127.0f, 0.57f, 1e-30f);
    s_expect_block_roundtrip(COLI_Q4_0, x, q4, y, N, 8.0f, 1.01f, 0.0f);
    /* F32 copies, BF16 within half a bf16 ulp */
    coli_quantize_row(COLI_F32, x, y, N);
    cr_assert_eq(memcmp(x, y, sizeof x), 0);
    static uint16_t b16[N];
    coli_quantize_row(COLI_BF16, x, b16, N);
    coli_dequantize_row(COLI_BF16, b16, y, N);
    for (int i = 0; i < N; i++) cr_assert_leq(fabsf(y[i] - x[i]), fabsf(x[i]) * ldexpf(1, -8));
}

/* ---- against the shipped llama-quantize files --------------------------- */

static const char *shared_dir(void) {
    const char *s = getenv("COLI_SHARED");
    return s && *s ? s : "../shared";
}

/* Path of tiny-mixtral-f32.gguf: found under $COLI_BUILD/refmodels, else
 * generated there by make_models.py (atomically, tests run in parallel). */
static int find_f32_model(char *path, size_t len) {
    const char *build = getenv("COLI_BUILD");
    char dir[512], tmp[600], cmd[2048];
    if (!build || !*build) build = "build";
    if (snprintf(dir, sizeof dir, "%s/refmodels", build) >= (int)sizeof dir ||
        snprintf(path, len, "%s/tiny-mixtral-f32.gguf", dir) >= (int)len)
        return -1;
    if (access(path, R_OK) == 0) return 0;
    mkdir(build, 0755);
    mkdir(dir, 0755);
    if (snprintf(tmp, sizeof tmp, "%s/gen-%d", dir, (int)getpid()) >= (int)sizeof tmp ||
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import numpy' 2>/dev/null && "
                 "/usr/bin/python3 '%s/reference/gen/make_models.py' '%s' --no-bench "
                 "--only tiny-mixtral >/dev/null 2>&1 && mv '%s/tiny-mixtral-f32.gguf' '%s'; "
                 "rm -rf '%s'",
                 shared_dir(), tmp, tmp, path, tmp) >= (int)sizeof cmd)
        return -1;
    if (system(cmd) != 0 || access(path, R_OK) != 0) return -1;
    return 0;
}

static void check_against_shipped(const char *file, coli_dtype type) {
    char ref[512], f32_path[600];
    if (snprintf(ref, sizeof ref, "%s/reference/models/%s", shared_dir(), file) >= (int)sizeof ref ||
        access(ref, R_OK) != 0)
        cr_skip_test("../shared not found: %s", ref);
    if (find_f32_model(f32_path, sizeof f32_path) != 0)
        cr_skip_test("cannot generate tiny-mixtral-f32.gguf (needs /usr/bin/python3 with numpy)");
    gguf_file *q = NULL, *f = NULL;
    cr_assert_eq(gguf_open(ref, &q), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_open(f32_path, &f), 0, "%s", coli_last_error());
    int64_t checked = 0;
    for (int64_t i = 0; i < gguf_n_tensors(q); i++) {
        const coli_tensor *tq = gguf_tensor(q, i);
        if (tq->type != type) continue;
        const coli_tensor *tf = gguf_find_tensor(f, tq->name);
        cr_assert_not_null(tf, "%s missing in the F32 model", tq->name);
        cr_assert_eq(tf->type, COLI_F32, "%s", tq->name);
        cr_assert_eq(coli_tensor_nelems(tf), coli_tensor_nelems(tq), "%s", tq->name);
        const int64_t n_row = tq->ne[0], rows = coli_tensor_nelems(tq) / n_row;
        const size_t rb = coli_row_bytes(type, n_row);
        uint8_t *buf = malloc(rb);
        for (int64_t r = 0; r < rows; r++) {
            coli_quantize_row(type, (const float *)tf->data + r * n_row, buf, n_row);
            cr_assert_eq(memcmp(buf, (const uint8_t *)tq->data + (size_t)r * rb, rb), 0,
                         "%s row %lld differs from llama-quantize", tq->name, (long long)r);
        }
        free(buf);
        checked++;
    }
    cr_assert_geq(checked, 30, "only %lld %s tensors checked", (long long)checked, coli_dtype_name(type));
    gguf_close(&q);
    gguf_close(&f);
}

Test(shipped, q8_0_file_byte_identical, .timeout = 120) { check_against_shipped("tiny-mixtral-q8_0.gguf", COLI_Q8_0); }

Test(shipped, q4_0_file_byte_identical, .timeout = 120) { check_against_shipped("tiny-mixtral-q4_0.gguf", COLI_Q4_0); }
