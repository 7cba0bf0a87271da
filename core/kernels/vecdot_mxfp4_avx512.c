/*
 * vecdot_mxfp4_avx512.c - the MXFP4 x Q8_0 dot product in 512-bit
 * registers (vecdot.h), compiled per function (COLI_TARGET_AVX512) and
 * called only when coli_cpu_avx512().
 *
 * It returns exactly the floats of the AVX2 kernel (vecdot_legacy_avx2.c,
 * llama.cpp's AVX2 steps), which keeps even blocks in one 8-lane float
 * accumulator and odd blocks in another, lane i of a block being the exact
 * integer sum of its elements 4i..4i+3 times the activations, converted
 * and FMA'd with d_w * d_x. Here a register holds a pair of blocks (even
 * block low, odd block high), so the two accumulators are the register's
 * halves and one FMA does both. The lanes' integers come from vpdpbusd on
 * the levels plus 12 (unsigned 0..24) minus vpdpbusd of 12 and the
 * activations: the same integers as AVX2's maddubs/madd (no saturation
 * either way). An odd last block is added by the portable code, as there.
 */
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

#if COLI_X86
#include <immintrin.h>

#define AVX512 COLI_TARGET_AVX512
#define ALWAYS static inline __attribute__((always_inline))

/* the doubled E2M1 levels plus 12, per 4-bit code */
static const int8_t k_levels_u[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* Blocks b and b + 1 of the row as 64 unsigned bytes (levels + 12):
 * 128-bit lanes hold block b's elements 0..15 and 16..31, then block
 * b + 1's. */
ALWAYS AVX512 __m512i unpack_pair(const block_mxfp4 *w) {
    const __m256i qs =
        _mm256_set_m128i(_mm_loadu_si128((const __m128i *)w[1].qs), _mm_loadu_si128((const __m128i *)w[0].qs));
    const __m512i dup = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), _mm512_castsi256_si512(qs));
    const __m512i nib =
        _mm512_and_si512(_mm512_srlv_epi64(dup, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0f));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_levels_u)), nib);
}

ALWAYS AVX512 float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One weight row against RN (1..4) activation rows x + t * x_stride. */
ALWAYS AVX512 void mxfp4_tokens(int64_t n, const block_mxfp4 *w, const uint8_t *x, size_t x_stride, float *out,
                                const int RN) {
    const int64_t nb = n / COLI_QK, nb_vec = nb & ~(int64_t)1;
    const __m512i twelve = _mm512_set1_epi8(12), zero = _mm512_setzero_si512();
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb_vec; b += 2) {
        const __m512i u = unpack_pair(w + b);
        const float w0 = coli_e8m0_half(w[b].e), w1 = coli_e8m0_half(w[b + 1].e);
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) {
            const block_q8_0 *xb = (const block_q8_0 *)(x + (size_t)t * x_stride) + b;
            const __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].qs)),
                                                  _mm256_loadu_si256((const __m256i *)xb[1].qs), 1);
            const __m512i lanes =
                _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u, xv), _mm512_dpbusd_epi32(zero, twelve, xv));
            const __m512 d =
                _mm512_insertf32x8(_mm512_set1_ps(w0 * _cvtsh_ss(xb[0].d)), _mm256_set1_ps(w1 * _cvtsh_ss(xb[1].d)), 1);
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) {
        const __m256 pair = _mm256_add_ps(_mm512_castps512_ps256(acc[t]), _mm512_extractf32x8_ps(acc[t], 1));
        float sum = hsum8(pair) + 0.0f; /* the AVX2 kernel adds its (zero) minimum term */
        if (nb_vec < nb)
            sum += coli_vec_dot_mxfp4_q8_0(COLI_QK, w + nb_vec,
                                           x + (size_t)t * x_stride + (size_t)nb_vec * sizeof(block_q8_0));
        out[t] = sum;
    }
}

AVX512 float coli_vec_dot_mxfp4_q8_0_avx512(int64_t n, const void *w, const void *x) {
    float out;
    mxfp4_tokens(n, w, x, 0, &out, 1);
    return out;
}

AVX512 void coli_vec_dot_mxfp4_q8_0_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                                  int n_tok) {
    switch (n_tok) {
    case 1: mxfp4_tokens(n, w, x, x_stride, out, 1); break;
    case 2: mxfp4_tokens(n, w, x, x_stride, out, 2); break;
    case 3: mxfp4_tokens(n, w, x, x_stride, out, 3); break;
    default: mxfp4_tokens(n, w, x, x_stride, out, 4); break;
    }
}

#else /* not x86: never called (coli_cpu_avx512() is 0), present for the linker */

float coli_vec_dot_mxfp4_q8_0_avx512(int64_t n, const void *w, const void *x) {
    return coli_vec_dot_mxfp4_q8_0(n, w, x);
}
void coli_vec_dot_mxfp4_q8_0_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                           int n_tok) {
    for (int t = 0; t < n_tok; t++) out[t] = coli_vec_dot_mxfp4_q8_0(n, w, (const char *)x + (size_t)t * x_stride);
}

#endif
