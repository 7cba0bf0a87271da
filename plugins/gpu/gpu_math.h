/*
 * gpu_math.h - the per-element math of the GPU kernels, as small functions
 * that the host C compiler builds too.
 *
 * Every number a kernel produces goes through these functions: fp16/bf16
 * decoding, block decoding of every quantized weight type (gpu_blocks.h),
 * activation preparation (fp16/bf16 round trip, or Q8_0 / Q8_1 / Q8_K
 * quantization of the input, the activation type llama.cpp's CPU kernels
 * use for that weight type), the integer group dot product and the gated
 * activation. The host tests (tests/test_gpu_math.c) check them against
 * core/quant/quant.h, the format definitions and the cpu plugin, so most kernel
 * bugs are caught on a machine without a GPU.
 *
 * Compiled three ways: as C by the host compiler (COLI_HD empty), as CUDA by
 * nvcc and as HIP by hipcc (COLI_HD from gpu_compat.h, which must be
 * included first). Hence only C that is also valid C++: explicit casts, no
 * designated initializers, no vendor intrinsics.
 *
 * Layouts (GGML, core/quant/quant_blocks.h): Q8_0 block = fp16 d, 32 x int8 q
 * (34 bytes); Q4_0 block = fp16 d, 16 bytes, byte j = element j (low
 * nibble) and j+16 (high nibble), value d * (nibble - 8) (18 bytes); the
 * others in gpu_blocks.h. Blocks are read bytewise: they are only 2-byte
 * aligned inside a row.
 */
#ifndef COLI_GPU_MATH_H
#define COLI_GPU_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "plugins/plugin_abi.h" /* the MOE_ACT_* values */

#ifndef COLI_HD
#define COLI_HD /* host compiler: plain static inline functions */
#endif

#define GPU_QK 32 /* values per group: a 32-value block, or 1/8 of a super-block */
#define GPU_Q8_0_BYTES 34

// ----------------------------------------------------------------------------
// bits

static inline COLI_HD uint32_t gpu_f32_bits(float f) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
}

static inline COLI_HD float gpu_bits_f32(uint32_t u) {
    union {
        float f;
        uint32_t u;
    } v;
    v.u = u;
    return v.f;
}

static inline COLI_HD uint16_t gpu_load_u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

// ----------------------------------------------------------------------------
// fp16 / bf16 (bit-exact with core/quant/quant.c)

static inline COLI_HD float gpu_fp16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet (as vcvtph2ps and core/quant/quant.c) */
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

static inline COLI_HD float gpu_bf16_to_f32(uint16_t h) { return gpu_bits_f32((uint32_t)h << 16); }

static inline COLI_HD uint16_t gpu_f32_to_bf16(float f) {
    const uint32_t x = gpu_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#include "plugins/gpu/gpu_blocks.h"

// ----------------------------------------------------------------------------
// dtypes

static inline COLI_HD int gpu_dtype_is_quant(int t) {
    switch (t) {
    case COLI_Q8_0:
    case COLI_Q4_0:
    case COLI_Q4_1:
    case COLI_Q5_0:
    case COLI_Q5_1:
    case COLI_IQ4_NL:
    case COLI_Q2_K:
    case COLI_Q3_K:
    case COLI_Q4_K:
    case COLI_Q5_K:
    case COLI_Q6_K:
    case COLI_IQ4_XS: return 1;
    default: return gpu_is_low_bit(t);
    }
}

/* The weight types the kernels take. */
static inline COLI_HD int gpu_dtype_supported(int t) {
    return t == COLI_F32 || t == COLI_F16 || t == COLI_BF16 || gpu_dtype_is_quant(t);
}

/* Bytes of a row of n values of type t (n a multiple of its block size). */
static inline COLI_HD size_t gpu_row_bytes(int t, int64_t n) {
    const int e = gpu_block_elems(t);
    return e ? (size_t)(n / e) * gpu_block_bytes(t) : 0;
}

/* The matmul input each weight type sees (llama.cpp's vec_dot_type, as the
 * CPU kernels, core/kernels/vecdot.h): F32/F16/BF16 weights the F32 input rounded to
 * their precision; Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 Q8_0 blocks; Q4_1, Q5_1
 * Q8_1 blocks; the K-quants, IQ4_XS, TQ1_0, TQ2_0 and the IQ grid types Q8_K
 * super-blocks. */
static inline COLI_HD int gpu_act_type(int t) {
    switch (t) {
    case COLI_Q8_0:
    case COLI_Q4_0:
    case COLI_Q5_0:
    case COLI_IQ4_NL:
    case COLI_MXFP4: return COLI_Q8_0;
    case COLI_Q4_1:
    case COLI_Q5_1: return COLI_Q8_1;
    case COLI_Q2_K:
    case COLI_Q3_K:
    case COLI_Q4_K:
    case COLI_Q5_K:
    case COLI_Q6_K:
    case COLI_IQ4_XS: return COLI_Q8_K;
    default: return gpu_is_low_bit(t) ? COLI_Q8_K : t;
    }
}

/* Values one k_prep thread prepares: one activation block (32 or 256), or
 * 32 rounded floats. */
static inline COLI_HD int gpu_prep_elems(int a) { return a == COLI_Q8_K ? 256 : GPU_QK; }

/* Bytes of a prepared activation row of n values for weights of type t:
 * F32 values (rounded to the weight's precision) or activation blocks. */
static inline COLI_HD size_t gpu_prep_row_bytes(int t, int64_t n) {
    const int a = gpu_act_type(t);
    return gpu_dtype_is_quant(t) ? gpu_row_bytes(a, n) : (size_t)n * 4;
}

/* Element k of a weight row of type t: the exact value ggml's
 * dequantization gives (blocks: see gpu_blocks.h). */
static inline COLI_HD float gpu_weight_value(int t, const unsigned char *row, int64_t k) {
    if (t == COLI_F32) return ((const float *)row)[k];
    if (t == COLI_F16) return gpu_fp16_to_f32(gpu_load_u16(row + 2 * k));
    if (t == COLI_BF16) return gpu_bf16_to_f32(gpu_load_u16(row + 2 * k));
    int sub;
    const unsigned char *blk = gpu_group_block(t, row, k / GPU_QK, &sub);
    return gpu_dequant(t, blk, sub, (int)(k % GPU_QK));
}

// ----------------------------------------------------------------------------
// activations (the matmul input, prepared per weight type)

/* F16 weights see x rounded to fp16, BF16 weights x rounded to bf16, F32
 * weights x itself (llama.cpp's rules, see core/kernels/matmul.h). */
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

static inline COLI_HD void gpu_store_u16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

/* 32 activations -> Q8_0 (34 bytes: fp16 d, 32 q) or, with_sum, Q8_1 (36
 * bytes: fp16 d, fp16 s = d * sum(q), 32 q), as llama.cpp's AVX2
 * quantize_row_q8_0/_q8_1: d = amax/127, q = round(x * 127/amax), s from the
 * unrounded d. */
static inline COLI_HD void gpu_quantize_act_q8(const float *x, unsigned char *blk, int with_sum) {
    float amax = 0.0f;
    for (int j = 0; j < GPU_QK; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    gpu_store_u16(blk, gpu_f32_to_fp16(d));
    unsigned char *qs = blk + (with_sum ? 4 : 2);
    int sum = 0;
    for (int j = 0; j < GPU_QK; j++) {
        const int q = gpu_act_round_i8(x[j] * id);
        qs[j] = (unsigned char)(int8_t)q;
        sum += q;
    }
    if (with_sum) gpu_store_u16(blk + 2, gpu_f32_to_fp16(d * (float)sum));
}

/* The Q8_0 activation block of 32 values (kept for its callers). */
static inline COLI_HD void gpu_quantize_act_block(const float *x, unsigned char *blk) {
    gpu_quantize_act_q8(x, blk, 0);
}

/* 256 activations -> one Q8_K block (292 bytes: float d, 256 q, 16 int16
 * sums of 16 q), as llama.cpp's quantize_row_q8_K_ref: the value of largest
 * magnitude max, iscale = -127/max, q = min(127, round half even(iscale*x)),
 * d = 1/iscale; all zero when max is 0 (llama.cpp since January 2024; -128
 * before). */
static inline COLI_HD void gpu_quantize_act_q8_K(const float *x, unsigned char *blk) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 256; j++) {
        const float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
    const float d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    const uint32_t db = gpu_f32_bits(d);
    for (int i = 0; i < 4; i++) blk[i] = (unsigned char)(db >> (8 * i));
    for (int s = 0; s < 16; s++) {
        int sum = 0;
        for (int j = 16 * s; j < 16 * s + 16; j++) {
            const float r = rintf(iscale * x[j]); /* |r| <= 127; NaN (x inf or NaN) gives 0, as there */
            const int q = r != r ? 0 : (r < 127.0f ? (int)r : 127);
            blk[4 + j] = (unsigned char)(int8_t)q;
            sum += q;
        }
        gpu_store_u16(blk + 260 + 2 * s, (uint16_t)(int16_t)sum);
    }
}

/* One activation block of type a (Q8_0, Q8_1 or Q8_K) from its values. */
static inline COLI_HD void gpu_quantize_act(int a, const float *x, unsigned char *blk) {
    if (a == COLI_Q8_K)
        gpu_quantize_act_q8_K(x, blk);
    else
        gpu_quantize_act_q8(x, blk, a == COLI_Q8_1);
}

/* Prepare one activation row of n values for weights of type t (out:
 * gpu_prep_row_bytes(t, n) bytes). The kernels do the same per block. */
static inline COLI_HD void gpu_prep_row(int t, const float *x, int64_t n, unsigned char *out) {
    if (gpu_dtype_is_quant(t)) {
        const int a = gpu_act_type(t), e = gpu_block_elems(a);
        for (int64_t b = 0; b < n / e; b++) gpu_quantize_act(a, x + b * e, out + (size_t)b * gpu_block_bytes(a));
        return;
    }
    float *o = (float *)out;
    for (int64_t k = 0; k < n; k++) o[k] = gpu_round_act(t, x[k]);
}

/* Element j of group sub of an activation block of type a (int8). */
static inline COLI_HD int gpu_act_q(int a, const unsigned char *blk, int sub, int j) {
    const int off = a == COLI_Q8_K ? 4 + 32 * sub : (a == COLI_Q8_1 ? 4 : 2);
    return (int)(int8_t)blk[off + j];
}

/* The activation block's scale: fp16 (Q8_0, Q8_1) or float (Q8_K). */
static inline COLI_HD float gpu_act_d(int a, const unsigned char *blk) {
    if (a != COLI_Q8_K) return gpu_fp16_to_f32(gpu_load_u16(blk));
    return gpu_bits_f32((uint32_t)blk[0] | ((uint32_t)blk[1] << 8) | ((uint32_t)blk[2] << 16) |
                        ((uint32_t)blk[3] << 24));
}

/* What multiplies the weight minimum m(half) of group sub: Q8_1 its fp16 s
 * (all 32 values, half 0; 0 for half 1), Q8_K d times the half's q sum;
 * Q8_0 has none (0). */
static inline COLI_HD float gpu_act_s(int a, const unsigned char *blk, int sub, int half) {
    if (a == COLI_Q8_1) return half ? 0.0f : gpu_fp16_to_f32(gpu_load_u16(blk + 2));
    if (a != COLI_Q8_K) return 0.0f;
    return gpu_act_d(a, blk) * (float)(int16_t)gpu_load_u16(blk + 260 + 4 * sub + 2 * half);
}

// ----------------------------------------------------------------------------
// dot products

/* The order of every row dot, kernels and host alike (the determinism
 * contract: a row's result never depends on the batch, the group size or
 * the kernel that serves it). The row is cut into 32-value groups g; lane c
 * (0..GPU_ROW_LANES-1) accumulates the groups g = c, c + 32, ... in
 * increasing order into its own sum, from 0; the row's result is 0 plus the
 * lanes' sums in lane order. Inside a group: quantized types an exact
 * integer sum, float types the 32 products fused in element order. Every
 * multiply-add is an explicit fmaf, so no compiler contracts the two
 * kernels differently. */
#define GPU_ROW_LANES 32

/* acc plus one group of a quantized type, from its integer sum (exact:
 * |sum| < 2^24 for every type, see gpu_blocks.h), the scales and, for types
 * with a minimum, the minimum terms: sum * (d_w * d_x) + m0 * s0 + m1 * s1,
 * llama.cpp's vec_dot arithmetic per group. */
static inline COLI_HD float gpu_group_acc(int t, float acc, float sum, float dw, float dx, float m0, float m1, float s0,
                                          float s1) {
    if (!gpu_dtype_has_min(t)) return fmaf(sum, dw * dx, acc);
    return acc + fmaf(sum, dw * dx, fmaf(m0, s0, m1 * s1));
}

/* acc plus group g (32 values) of a weight row of type t times the same
 * group of a prepared activation row. */
static inline COLI_HD float gpu_group_accumulate(int t, float acc, const unsigned char *wrow, const unsigned char *xrow,
                                                 int64_t g) {
    if (!gpu_dtype_is_quant(t)) {
        const float *x = (const float *)xrow + g * GPU_QK;
        float part = 0.0f;
        for (int j = 0; j < GPU_QK; j++) part = fmaf(gpu_weight_value(t, wrow, g * GPU_QK + j), x[j], part);
        return acc + part;
    }
    const int a = gpu_act_type(t);
    int ws, xs;
    const unsigned char *wb = gpu_group_block(t, wrow, g, &ws), *xb = gpu_group_block(a, xrow, g, &xs);
    int isum = 0;
    for (int j = 0; j < GPU_QK; j++) isum += gpu_quant_q(t, wb, ws, j) * gpu_act_q(a, xb, xs, j);
    return gpu_group_acc(t, acc, (float)isum, gpu_quant_d(t, wb), gpu_act_d(a, xb), gpu_quant_m(t, wb, ws, 0),
                         gpu_quant_m(t, wb, ws, 1), gpu_act_s(a, xb, xs, 0), gpu_act_s(a, xb, xs, 1));
}

/* The dot of a weight row with a prepared activation row (n values), in
 * the order above: bit for bit what either kernel computes for it. */
static inline COLI_HD float gpu_row_dot(int t, const unsigned char *wrow, const unsigned char *xprep, int64_t n) {
    float total = 0.0f;
    for (int c = 0; c < GPU_ROW_LANES; c++) {
        float acc = 0.0f;
        for (int64_t g = c; g < n / GPU_QK; g += GPU_ROW_LANES) acc = gpu_group_accumulate(t, acc, wrow, xprep, g);
        total += acc;
    }
    return total;
}

// ----------------------------------------------------------------------------
// the gated activation

/* silu(g) * u with silu(g) = g / (1 + e^-g), in F32 (core/kernels/expert_ffn.c). */
static inline COLI_HD float gpu_swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* gpt-oss (MOE_ACT_SWIGLU_OAI): ggml_swiglu_oai's float operations in
 * expert_ffn.c's order: x = min(g, limit), x sigmoid(alpha x) (clamp(u) + 1). */
static inline COLI_HD float gpu_swiglu_oai(float g, float u, float alpha, float limit) {
    const float x = g < limit ? g : limit;
    const float y = u < -limit ? -limit : (u > limit ? limit : u);
    return x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
}

/* kimi-k3 (MOE_ACT_SITU, alpha = situ_beta > 0, limit = situ_linear_beta):
 * beta tanh(g / beta) sigmoid(g) times lin tanh(u / lin) (lin <= 0: u), as
 * expert_ffn.c's s_situ: the reciprocals first, then ggml's scale, tanh,
 * scale, times the sigmoid, in that order. */
static inline COLI_HD float gpu_situ(float g, float u, float beta, float lin) {
    const float ib = 1.0f / beta, il = lin > 0.0f ? 1.0f / lin : 0.0f;
    const float a = tanhf(g * ib) * beta * (1.0f / (1.0f + expf(-g)));
    return a * (lin > 0.0f ? tanhf(u * il) * lin : u);
}

/* deepseek4 (MOE_ACT_SWIGLU_CLAMP): x = min(g, limit), silu(x) clamp(u,
 * -limit, limit), no biases; expert_ffn.c's s_swiglu_clamp's operations. */
static inline COLI_HD float gpu_swiglu_clamp(float g, float u, float limit) {
    const float x = g < limit ? g : limit;
    const float y = u < -limit ? -limit : (u > limit ? limit : u);
    return x / (1.0f + expf(-x)) * y;
}

/* 1 if the kernels compute moe_expert_desc.act value act (load_expert's
 * check; get_caps reports the same set). */
static inline int gpu_act_supported(int act) {
    return act == MOE_ACT_SILU || act == MOE_ACT_SWIGLU_OAI || act == MOE_ACT_SITU || act == MOE_ACT_SWIGLU_CLAMP;
}

/* The moe_caps.act_mask bits of the activations gpu_act_supported takes,
 * and the biases. */
static inline uint32_t gpu_act_mask(void) {
    uint32_t m = MOE_ACT_BIASES;
    for (int a = 1; a < 31; a++)
        if (gpu_act_supported(a)) m |= 1u << a;
    return m;
}

/* One hidden value h(g, u) of activation act (a MOE_ACT_* value; anything
 * else is SiLU, which load_expert's check keeps from happening). */
static inline COLI_HD float gpu_act(int act, float g, float u, float alpha, float limit) {
    switch (act) {
    case MOE_ACT_SWIGLU_OAI: return gpu_swiglu_oai(g, u, alpha, limit);
    case MOE_ACT_SITU: return gpu_situ(g, u, alpha, limit);
    case MOE_ACT_SWIGLU_CLAMP: return gpu_swiglu_clamp(g, u, limit);
    default: return gpu_swiglu(g, u);
    }
}

/* What the activation step of one expert needs: its kind and parameters,
 * and the gate / up biases (n_ff F32 each, NULL: none) where the kernel
 * reads them (device memory in the plugin, host memory in the tests). */
typedef struct gpu_act_params {
    int act;
    float alpha, limit;
    const float *gate_bias, *up_bias;
    int64_t n_ff;
} gpu_act_params;

static inline gpu_act_params gpu_act_params_make(int act, float alpha, float limit, const float *gate_bias,
                                                 const float *up_bias, int64_t n_ff) {
    gpu_act_params p;
    p.act = act;
    p.alpha = alpha;
    p.limit = limit;
    p.gate_bias = gate_bias;
    p.up_bias = up_bias;
    p.n_ff = n_ff;
    return p;
}

/* Hidden value i (row i / n_ff, column i % n_ff) from the gate and up
 * matmul outputs: the biases added to them first, as expert_ffn.c does. */
static inline COLI_HD float gpu_act_at(const gpu_act_params *p, float g, float u, int64_t i) {
    if (p->gate_bias) g += p->gate_bias[i % p->n_ff];
    if (p->up_bias) u += p->up_bias[i % p->n_ff];
    return gpu_act(p->act, g, u, p->alpha, p->limit);
}

#endif /* COLI_GPU_MATH_H */
