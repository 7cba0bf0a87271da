/*
 * vecdot_lowbit_x86.h - the two steps every low-bit kernel over Q8_K
 * activations ends a super-block with, shared by vecdot_lowbit_avx2.c and
 * vecdot_iq_decoded.c so that their floats come from one definition: the
 * exact int32 lanes summed, then the portable functions' float step.
 * x86 only (include inside COLI_X86); AVX2 code, which GCC also inlines
 * into AVX-512 functions (a subset target).
 */
#ifndef COLI_CORE_VECDOT_LOWBIT_X86_H
#define COLI_CORE_VECDOT_LOWBIT_X86_H

#include <immintrin.h>

#include "core/cpu_features.h"

/* the 8 int32 lanes of v summed (exact) */
static inline __attribute__((always_inline)) COLI_TARGET_AVX2 int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* sum + a * b, the float step of the portable functions, without
 * contraction into an FMA (scalar SSE operations the compiler keeps as
 * written) */
static inline __attribute__((always_inline)) COLI_TARGET_AVX2 float add_mul(float sum, float a, float b) {
    return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(sum), _mm_mul_ss(_mm_set_ss(a), _mm_set_ss(b))));
}

#endif
