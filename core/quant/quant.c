/*
 * quant.c - fp16/bf16 conversion and Q8_0/Q4_0 (de)quantization; see quant.h.
 *
 * The scalar conversions are bit-exact twins of the F16C instructions
 * (round to nearest even, NaN quieted with its payload kept), so a row
 * converted with F16C or without gives the same bytes. Weight quantization
 * follows llama.cpp's reference C code (quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref) so files we write match llama-quantize's.
 */
#include "core/quant/quant.h"

#include <math.h>
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant/quant_blocks.h"
#include "core/quant/quantize_rows.h"

#if COLI_X86
#include <immintrin.h>
#endif

static inline uint32_t s_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float s_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ----------------------------------------------------------------------------
// fp16

float coli_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* Inf, or NaN made quiet as vcvtph2ps does */
        return s_bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp != 0) return s_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return s_bits_f32(sign);
    /* subnormal half: normalise; 2^-14 * mant/1024 is exact in f32 */
    exp = 113;
    while (!(mant & 0x400)) {
        mant <<= 1;
        exp--;
    }
    return s_bits_f32(sign | (exp << 23) | ((mant & 0x3ff) << 13));
}

uint16_t coli_fp32_to_fp16(float f) {
    uint32_t u = s_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keep the top of the payload (as vcvtps2ph) */
        return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff);
    if (a >= 0x477ff000u) /* >= 65520 rounds to Inf (65504 is the largest half) */
        return sign | 0x7c00;
    if (a < 0x38800000u) {
        /* below the smallest normal half: adding 0.5f lines the half's
         * subnormal ulp (2^-24) up with the f32 ulp of 0.5, so the FPU's own
         * round-to-nearest-even does the rounding. */
        float t = s_bits_f32(a) + 0.5f;
        return sign | (uint16_t)(s_f32_bits(t) - 0x3f000000u);
    }
    /* normal: rebias the exponent (-112 << 23) and round to nearest even */
    uint32_t odd = (a >> 13) & 1;
    a += 0xc8000fffu + odd;
    return sign | (uint16_t)(a >> 13);
}

// ----------------------------------------------------------------------------
// bf16

float coli_bf16_to_fp32(uint16_t h) { return s_bits_f32((uint32_t)h << 16); }

uint16_t coli_fp32_to_bf16(float f) {
    uint32_t u = s_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it, forced quiet (as ggml) */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

// ----------------------------------------------------------------------------
// bulk fp16 rows: F16C when present, same bits either way

#if COLI_X86
COLI_TARGET_AVX2 static void fp16_to_fp32_row_f16c(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = coli_fp16_to_fp32(src[i]);
}

COLI_TARGET_AVX2 static void fp32_to_fp16_row_f16c(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = coli_fp32_to_fp16(src[i]);
}
#endif

static void s_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n) {
#if COLI_X86
    if (coli_cpu_avx2()) {
        fp16_to_fp32_row_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = coli_fp16_to_fp32(src[i]);
}

static void s_fp32_to_fp16_row(const float *src, uint16_t *dst, int64_t n) {
#if COLI_X86
    if (coli_cpu_avx2()) {
        fp32_to_fp16_row_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = coli_fp32_to_fp16(src[i]);
}

// ----------------------------------------------------------------------------
// weight quantization (llama.cpp reference rules)

/* roundf into int8 without undefined behaviour for NaN (-> 0) */
static inline int8_t s_round_away_i8(float v) {
    if (!(fabsf(v) <= 127.0f)) return v > 0 ? 127 : (v < 0 ? -127 : 0);
    return (int8_t)roundf(v);
}

/* largest |x| of one block, compared as llama.cpp does (the scales must match bit for bit) */
static inline float s_block_amax(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < COLI_QK; j++) {
        float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    return amax;
}

void coli_quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        const float amax = s_block_amax(x);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = coli_fp32_to_fp16(d);
        for (int j = 0; j < COLI_QK; j++) y[b].qs[j] = s_round_away_i8(x[j] * id);
    }
}

/* (int8_t)(v + 8.5f) then min 15, with NaN and out-of-range kept defined */
static inline uint8_t s_q4_nibble(float v) {
    float t = v + 8.5f;
    if (!(t >= 0.0f)) return 0;
    if (t >= 15.0f) return 15;
    return (uint8_t)(int8_t)t;
}

void coli_quantize_row_q4_0(const float *x, block_q4_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < COLI_QK; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = coli_fp32_to_fp16(d);
        for (int j = 0; j < COLI_QK / 2; j++)
            y[b].qs[j] = (uint8_t)(s_q4_nibble(x[j] * id) | (s_q4_nibble(x[COLI_QK / 2 + j] * id) << 4));
    }
}

// ----------------------------------------------------------------------------
// activation quantization (llama.cpp AVX2 rules)

/* What _mm256_round_ps(nearest) + _mm256_cvtps_epi32 + the saturating packs
 * give: round half to even, clamp to int8; NaN and |v| >= 2^31 come out of
 * cvtps_epi32 as INT_MIN, hence -128. */
int8_t coli_act_round_i8(float v) {
    float r = nearbyintf(v);
    if (!(r > -2147483648.0f && r < 2147483648.0f)) return -128;
    if (r > 127.0f) return 127;
    if (r < -128.0f) return -128;
    return (int8_t)r;
}

void coli_quantize_act_q8_0(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        const float amax = s_block_amax(x);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = coli_fp32_to_fp16(amax / 127.0f);
        for (int j = 0; j < COLI_QK; j++) y[b].qs[j] = coli_act_round_i8(x[j] * id);
    }
}

// ----------------------------------------------------------------------------
// whole rows of any type

static void s_dequantize_q8_0(const block_q8_0 *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        const float d = coli_fp16_to_fp32(x[b].d);
        for (int j = 0; j < COLI_QK; j++) y[b * COLI_QK + j] = d * (float)x[b].qs[j];
    }
}

static void s_dequantize_q4_0(const block_q4_0 *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        const float d = coli_fp16_to_fp32(x[b].d);
        float *o = y + b * COLI_QK;
        for (int j = 0; j < COLI_QK / 2; j++) {
            o[j] = d * (float)((x[b].qs[j] & 0x0f) - 8);
            o[j + COLI_QK / 2] = d * (float)((x[b].qs[j] >> 4) - 8);
        }
    }
}

void coli_dequantize_row(coli_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case COLI_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case COLI_F16: s_fp16_to_fp32_row(src, dst, n); break;
    case COLI_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = coli_bf16_to_fp32(s[i]);
        break;
    }
    case COLI_Q8_0: s_dequantize_q8_0(src, dst, n); break;
    case COLI_Q4_0: s_dequantize_q4_0(src, dst, n); break;
    default: coli_dequantize_row_blocks(t, src, dst, n); break;
    }
}

void coli_quantize_row(coli_dtype t, const float *src, void *dst, int64_t n) {
    coli_quantize_row_imatrix(t, src, dst, n, NULL);
}

void coli_quantize_row_imatrix(coli_dtype t, const float *src, void *dst, int64_t n, const float *qw) {
    switch (t) {
    case COLI_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case COLI_F16: s_fp32_to_fp16_row(src, dst, n); break;
    case COLI_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = coli_fp32_to_bf16(src[i]);
        break;
    }
    case COLI_Q8_0: coli_quantize_row_q8_0(src, dst, n); break;
    case COLI_Q4_0:
        if (qw)
            coli_quantize_row_q4_0_imatrix(src, dst, n, qw);
        else
            coli_quantize_row_q4_0(src, dst, n);
        break;
    case COLI_Q4_1: coli_quantize_row_q4_1(src, dst, n, qw); break;
    case COLI_Q5_0: coli_quantize_row_q5_0(src, dst, n, qw); break;
    case COLI_Q5_1: coli_quantize_row_q5_1(src, dst, n, qw); break;
    case COLI_IQ4_NL: coli_quantize_row_iq4_nl(src, dst, n, qw); break;
    case COLI_Q2_K: coli_quantize_row_q2_K(src, dst, n, qw); break;
    case COLI_Q3_K: coli_quantize_row_q3_K(src, dst, n, qw); break;
    case COLI_Q4_K: coli_quantize_row_q4_K(src, dst, n, qw); break;
    case COLI_Q5_K: coli_quantize_row_q5_K(src, dst, n, qw); break;
    case COLI_Q6_K: coli_quantize_row_q6_K(src, dst, n, qw); break;
    case COLI_IQ4_XS: coli_quantize_row_iq4_xs(src, dst, n, qw); break;
    case COLI_MXFP4: coli_quantize_row_mxfp4(src, dst, n); break;
    case COLI_TQ1_0: coli_quantize_row_tq1_0(src, dst, n); break;
    case COLI_TQ2_0: coli_quantize_row_tq2_0(src, dst, n); break;
    case COLI_IQ2_XXS: coli_quantize_row_iq2_xxs(src, dst, n, qw); break;
    case COLI_IQ3_XXS: coli_quantize_row_iq3_xxs(src, dst, n, qw); break;
    case COLI_IQ3_S: coli_quantize_row_iq3_s(src, dst, n, qw); break;
    case COLI_IQ2_S: coli_quantize_row_iq2_s(src, dst, n, qw); break;
    case COLI_IQ2_XS: coli_quantize_row_iq2_xs(src, dst, n, qw); break;
    case COLI_IQ1_S: coli_quantize_row_iq1_s(src, dst, n, qw); break;
    case COLI_IQ1_M: coli_quantize_row_iq1_m(src, dst, n, qw); break;
    default: break; /* Q8_1/Q8_K are activation formats, quantized by the kernels */
    }
}
