/*
 * vecdot_legacy_avx2.c - AVX2 + FMA + F16C dot products of Q4_1, Q5_0,
 * Q5_1 and IQ4_NL rows with their activation rows (vecdot.h), compiled per
 * function (COLI_TARGET_AVX2) and called only when coli_cpu_avx2().
 *
 * As llama.cpp's AVX2 ggml_vec_dot_*: a block's 32 weights become 32 bytes
 * (nibbles unpacked, Q5's 5th bits merged in, IQ4_NL's levels looked up by
 * pshufb), multiplied with the activation bytes by maddubs (pairs into
 * int16, no overflow: 2*31*127 and 2*127*127 < 32768), madd with ones into
 * 8 int32 lanes, converted and accumulated with one FMA per block. The
 * integer sums equal the portable code's; only the float order differs.
 */
#include <string.h>

#include "cpu_features.h"
#include "quant_blocks.h"
#include "vecdot.h"

#if COLI_X86
#include <immintrin.h>

#define AVX2 COLI_TARGET_AVX2
#define ALWAYS static inline __attribute__((always_inline))
/* F16C's scalar conversion: the bits of coli_fp16_to_fp32, without a call */
#define HALF(h) _cvtsh_ss(h)

AVX2 ALWAYS float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles to 32 bytes: element j (low nibble of byte j) at
 * byte j, element j+16 (high nibble) at byte j+16. */
AVX2 ALWAYS __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i tmp = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* The 32 bits of qh as 32 bytes: 0xff where bit j is set, else 0. */
AVX2 ALWAYS __m256i bits_to_bytes(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i with_others = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(with_others, _mm256_set1_epi64x(-1));
}

/* 8 float lanes of sum(u * s) over pairs of 4: u unsigned, s signed bytes. */
AVX2 ALWAYS __m256 dot_us8(__m256i u, __m256i s) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

/* The same for two signed operands: |a| * (b with a's sign). */
AVX2 ALWAYS __m256 dot_ss8(__m256i a, __m256i b) {
    return dot_us8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

AVX2 float coli_vec_dot_q4_1_q8_1_avx2(int64_t n, const void *vw, const void *vx) {
    const block_q4_1 *w = vw;
    const block_q8_1 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        mins += HALF(w[b].m) * HALF(x[b].s);
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(HALF(w[b].d)), _mm256_set1_ps(HALF(x[b].d)));
        const __m256i q = unpack_nibbles(w[b].qs);
        acc = _mm256_fmadd_ps(d, dot_us8(q, _mm256_loadu_si256((const __m256i *)x[b].qs)), acc);
    }
    return hsum8(acc) + mins;
}

AVX2 float coli_vec_dot_q5_0_q8_0_avx2(int64_t n, const void *vw, const void *vx) {
    const block_q5_0 *w = vw;
    const block_q8_0 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        const __m256 d = _mm256_set1_ps(HALF(w[b].d) * HALF(x[b].d));
        /* q - 16 as a signed byte: the nibble with 0xf0 or'ed in where the
         * 5th bit is clear, the nibble alone where it is set */
        const __m256i high = _mm256_andnot_si256(bits_to_bytes(w[b].qh), _mm256_set1_epi8((char)0xf0));
        const __m256i q = _mm256_or_si256(unpack_nibbles(w[b].qs), high);
        acc = _mm256_fmadd_ps(d, dot_ss8(q, _mm256_loadu_si256((const __m256i *)x[b].qs)), acc);
    }
    return hsum8(acc);
}

AVX2 float coli_vec_dot_q5_1_q8_1_avx2(int64_t n, const void *vw, const void *vx) {
    const block_q5_1 *w = vw;
    const block_q8_1 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK; b++) {
        mins += HALF(w[b].m) * HALF(x[b].s);
        const __m256 dw = _mm256_set1_ps(HALF(w[b].d)), dx = _mm256_set1_ps(HALF(x[b].d));
        const __m256i high = _mm256_and_si256(bits_to_bytes(w[b].qh), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_or_si256(unpack_nibbles(w[b].qs), high);
        acc = _mm256_fmadd_ps(dot_us8(q, _mm256_loadu_si256((const __m256i *)x[b].qs)),
                              _mm256_mul_ps(dw, dx), acc);
    }
    return hsum8(acc) + mins;
}

/* IQ4_NL: the nibbles index the 16 levels with one pshufb per half. Two
 * accumulators over even and odd blocks as llama.cpp; an odd last block
 * is added in integer form after the vector sum. */
AVX2 float coli_vec_dot_iq4_nl_q8_0_avx2(int64_t n, const void *vw, const void *vx) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *x = vx;
    const int64_t nb = n / COLI_QK;
    const __m128i levels = _mm_loadu_si128((const __m128i *)coli_kvalues_iq4nl);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            const __m128i bits = _mm_loadu_si128((const __m128i *)w[b + k].qs);
            const __m256i q = _mm256_set_m128i(
                _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                _mm_shuffle_epi8(levels, _mm_and_si128(bits, m4)));
            const __m256 d = _mm256_set1_ps(HALF(x[b + k].d) * HALF(w[b + k].d));
            acc[k] = _mm256_fmadd_ps(d, dot_ss8(q, _mm256_loadu_si256((const __m256i *)x[b + k].qs)), acc[k]);
        }
    }
    float sum = hsum8(_mm256_add_ps(acc[0], acc[1]));
    if (b < nb) sum += coli_vec_dot_iq4_nl_q8_0(COLI_QK, &w[b], &x[b]);
    return sum;
}

#else /* not x86: never called (coli_cpu_avx2() is 0), present for the linker */

float coli_vec_dot_q4_1_q8_1_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_q4_1_q8_1(n, w, x); }
float coli_vec_dot_q5_0_q8_0_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_q5_0_q8_0(n, w, x); }
float coli_vec_dot_q5_1_q8_1_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_q5_1_q8_1(n, w, x); }
float coli_vec_dot_iq4_nl_q8_0_avx2(int64_t n, const void *w, const void *x) {
    return coli_vec_dot_iq4_nl_q8_0(n, w, x);
}
#endif
