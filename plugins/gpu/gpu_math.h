/*
 * gpu_math.h - the per-element math of the GPU kernels, as small functions
 * that the host C compiler builds too.
 *
 * Every number a kernel produces goes through these functions: fp16/bf16
 * decoding, Q8_0/Q4_0 block dequantization, activation rounding (fp16/bf16
 * round trip, Q8_0 quantization of the input as llama.cpp's AVX2 path does
 * it), the integer block dot product and the gated activation. The host
 * tests (tests/test_gpu_math.c) check them against core/quant.h and the cpu
 * plugin, so most kernel bugs are caught on a machine without a GPU.
 *
 * Compiled three ways: as C by the host compiler (COLI_HD empty), as CUDA by
 * nvcc and as HIP by hipcc (COLI_HD from gpu_compat.h, which must be
 * included first). Hence only C that is also valid C++: explicit casts, no
 * designated initializers, no vendor intrinsics.
 *
 * Layouts (GGML): Q8_0 block = fp16 d, 32 x int8 q (34 bytes); Q4_0 block =
 * fp16 d, 16 bytes, byte j = element j (low nibble) and j+16 (high nibble),
 * value d * (nibble - 8) (18 bytes). Blocks are read bytewise: they are
 * only 2-byte aligned inside a row.
 */
#ifndef COLI_GPU_MATH_H
#define COLI_GPU_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

#ifndef COLI_HD
#define COLI_HD   /* host compiler: plain static inline functions */
#endif

#define GPU_QK 32             /* values per quantized block (COLI_QK) */
#define GPU_Q8_0_BYTES 34
#define GPU_Q4_0_BYTES 18

/* ---- bits -------------------------------------------------------------- */

static inline COLI_HD uint32_t gpu_f32_bits(float f) {
    union { float f; uint32_t u; } v;
    v.f = f;
    return v.u;
}

static inline COLI_HD float gpu_bits_f32(uint32_t u) {
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
}

static inline COLI_HD uint16_t gpu_load_u16(const unsigned char *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* ---- fp16 / bf16 (bit-exact with core/quant.c) ---------------------------- */

static inline COLI_HD float gpu_fp16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet (as vcvtph2ps and core/quant.c) */
        return gpu_bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in F32 */
        const float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return gpu_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even; overflow to inf, NaN stays NaN (quiet). */
static inline COLI_HD uint16_t gpu_f32_to_fp16(float f) {
    const uint32_t x = gpu_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {
        /* below 2^-14: fp16 subnormal, units of 2^-24; the scaling is exact
         * and rintf rounds half to even */
        const float v = gpu_bits_f32(ax) * 16777216.0f;
        return (uint16_t)(sign | (uint16_t)rintf(v));
    }
    uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent */
    return (uint16_t)(sign | h);
}

static inline COLI_HD float gpu_bf16_to_f32(uint16_t h) {
    return gpu_bits_f32((uint32_t)h << 16);
}

static inline COLI_HD uint16_t gpu_f32_to_bf16(float f) {
    const uint32_t x = gpu_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- dtypes --------------------------------------------------------------- */

static inline COLI_HD int gpu_dtype_supported(int t) {
    return t == COLI_F32 || t == COLI_F16 || t == COLI_BF16 || t == COLI_Q8_0 || t == COLI_Q4_0;
}

static inline COLI_HD int gpu_dtype_is_quant(int t) {
    return t == COLI_Q8_0 || t == COLI_Q4_0;
}

/* Bytes of a row of n values of type t (n a multiple of 32). */
static inline COLI_HD size_t gpu_row_bytes(int t, int64_t n) {
    if (t == COLI_F32) return (size_t)n * 4;
    if (t == COLI_F16 || t == COLI_BF16) return (size_t)n * 2;
    if (t == COLI_Q8_0) return (size_t)(n / GPU_QK) * GPU_Q8_0_BYTES;
    if (t == COLI_Q4_0) return (size_t)(n / GPU_QK) * GPU_Q4_0_BYTES;
    return 0;
}

/* Bytes of a prepared activation row of n values for weights of type t:
 * F32 values (rounded to the weight's precision) or Q8_0 blocks. */
static inline COLI_HD size_t gpu_prep_row_bytes(int t, int64_t n) {
    return gpu_dtype_is_quant(t) ? (size_t)(n / GPU_QK) * GPU_Q8_0_BYTES : (size_t)n * 4;
}

/* ---- quantized blocks ------------------------------------------------------ */

static inline COLI_HD size_t gpu_quant_block_bytes(int t) {
    return t == COLI_Q8_0 ? GPU_Q8_0_BYTES : GPU_Q4_0_BYTES;
}

/* The integer q of element j (0..31) of a Q8_0 or Q4_0 block (Q4_0: nibble - 8). */
static inline COLI_HD int gpu_quant_q(int t, const unsigned char *blk, int j) {
    if (t == COLI_Q8_0) return (int)(int8_t)blk[2 + j];
    const int byte = blk[2 + (j & 15)];
    return (j < 16 ? (byte & 0x0f) : (byte >> 4)) - 8;
}

static inline COLI_HD float gpu_quant_d(const unsigned char *blk) {
    return gpu_fp16_to_f32(gpu_load_u16(blk));
}

/* Element k of a weight row of type t, dequantized (d * q for blocks). */
static inline COLI_HD float gpu_weight_value(int t, const unsigned char *row, int64_t k) {
    if (t == COLI_F32) return ((const float *)row)[k];
    if (t == COLI_F16) return gpu_fp16_to_f32(gpu_load_u16(row + 2 * k));
    if (t == COLI_BF16) return gpu_bf16_to_f32(gpu_load_u16(row + 2 * k));
    const unsigned char *blk = row + (size_t)(k / GPU_QK) * gpu_quant_block_bytes(t);
    return gpu_quant_d(blk) * (float)gpu_quant_q(t, blk, (int)(k % GPU_QK));
}

/* ---- activations (the matmul input, prepared per weight type) ------------- */

/* F16 weights see x rounded to fp16, BF16 weights x rounded to bf16, F32
 * weights x itself (llama.cpp's rules, see core/matmul.h). */
static inline COLI_HD float gpu_round_act(int t, float x) {
    if (t == COLI_F16) return gpu_fp16_to_f32(gpu_f32_to_fp16(x));
    if (t == COLI_BF16) return gpu_bf16_to_f32(gpu_f32_to_bf16(x));
    return x;
}

/* What AVX2 round-to-nearest + cvtps_epi32 + saturating packs give: round
 * half to even, clamp to int8; NaN and |v| >= 2^31 become -128. */
static inline COLI_HD int gpu_act_round_i8(float v) {
    const float r = rintf(v);
    if (!(r > -2147483648.0f && r < 2147483648.0f)) return -128;
    if (r > 127.0f) return 127;
    if (r < -128.0f) return -128;
    return (int)r;
}

/* 32 activations -> one Q8_0 block: d = amax/127 (fp16), q = round(x * 127/amax). */
static inline COLI_HD void gpu_quantize_act_block(const float *x, unsigned char *blk) {
    float amax = 0.0f;
    for (int j = 0; j < GPU_QK; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const uint16_t d = gpu_f32_to_fp16(amax / 127.0f);
    blk[0] = (unsigned char)(d & 0xff);
    blk[1] = (unsigned char)(d >> 8);
    for (int j = 0; j < GPU_QK; j++)
        blk[2 + j] = (unsigned char)(int8_t)gpu_act_round_i8(x[j] * id);
}

/* Prepare one activation row of n values for weights of type t (out:
 * gpu_prep_row_bytes(t, n) bytes). The kernels do the same per block. */
static inline COLI_HD void gpu_prep_row(int t, const float *x, int64_t n, unsigned char *out) {
    if (gpu_dtype_is_quant(t)) {
        for (int64_t b = 0; b < n / GPU_QK; b++)
            gpu_quantize_act_block(x + b * GPU_QK, out + b * GPU_Q8_0_BYTES);
        return;
    }
    float *o = (float *)out;
    for (int64_t k = 0; k < n; k++) o[k] = gpu_round_act(t, x[k]);
}

/* ---- dot products ------------------------------------------------------------ */

/* One weight block (Q8_0/Q4_0) times one Q8_0 activation block:
 * fp16(d_w) * fp16(d_x) * sum(q_w * q_x), exactly as the CPU kernels. */
static inline COLI_HD float gpu_block_dot_q(int t, const unsigned char *wblk, const unsigned char *xblk) {
    int isum = 0;
    for (int j = 0; j < GPU_QK; j++) isum += gpu_quant_q(t, wblk, j) * (int)(int8_t)xblk[2 + j];
    return (float)isum * (gpu_quant_d(wblk) * gpu_quant_d(xblk));
}

/* Reference dot of a weight row with a prepared activation row, summed in
 * order. The kernels split the sum over threads (other float rounding);
 * tests use this to model them on the host. */
static inline COLI_HD float gpu_row_dot(int t, const unsigned char *wrow, const unsigned char *xprep, int64_t n) {
    float sum = 0.0f;
    if (gpu_dtype_is_quant(t)) {
        const size_t bb = gpu_quant_block_bytes(t);
        for (int64_t b = 0; b < n / GPU_QK; b++)
            sum += gpu_block_dot_q(t, wrow + (size_t)b * bb, xprep + (size_t)b * GPU_Q8_0_BYTES);
        return sum;
    }
    const float *x = (const float *)xprep;
    for (int64_t k = 0; k < n; k++) sum += gpu_weight_value(t, wrow, k) * x[k];
    return sum;
}

/* ---- the gated activation ----------------------------------------------------- */

/* silu(g) * u with silu(g) = g / (1 + e^-g), in F32 (core/expert_ffn.c). */
static inline COLI_HD float gpu_swiglu(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

#endif /* COLI_GPU_MATH_H */
