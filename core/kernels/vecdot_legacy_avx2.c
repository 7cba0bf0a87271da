/*
 * vecdot_legacy_avx2.c - AVX2 + FMA + F16C dot products of Q4_1, Q5_0,
 * Q5_1, IQ4_NL and MXFP4 rows with their activation rows (vecdot.h),
 * compiled per function (COLI_TARGET_AVX2) and called only when
 * coli_cpu_avx2().
 *
 * As llama.cpp's AVX2 ggml_vec_dot_*: a block's 32 weights become 32 bytes
 * (nibbles unpacked, Q5's 5th bits merged in, IQ4_NL's levels looked up by
 * pshufb, MXFP4's doubled E2M1 levels the same way), multiplied with the
 * activation bytes by maddubs (pairs into
 * int16, no overflow: 2*31*127 and 2*127*127 < 32768), madd with ones into
 * 8 int32 lanes, converted and accumulated with one FMA per block. The
 * integer sums equal the portable code's; only the float order differs.
 * One kernel serves 1..4 tokens (a batch unpacks each weight block once).
 */
#include <stddef.h>
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

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
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)bits), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i with_others = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(with_others, _mm256_set1_epi64x(-1));
}

/* 8 float lanes of sum(u * s) over pairs of 4: u unsigned, s signed bytes. */
AVX2 ALWAYS __m256 dot_us8(__m256i u, __m256i s) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

/* The same for two signed operands: |a| * (b with a's sign). */
AVX2 ALWAYS __m256 dot_ss8(__m256i a, __m256i b) { return dot_us8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)); }

/* Block b of a row of type T as 32 bytes: Q4_1 and Q5_1 unsigned (0..15,
 * 0..31), Q5_0 the signed q - 16 (the nibble with 0xf0 or'ed in where the
 * 5th bit is clear), IQ4_NL and MXFP4 the signed levels (one pshufb per
 * half). */
AVX2 ALWAYS __m256i unpack_block(const uint8_t *blk, const coli_dtype T) {
    if (T == COLI_IQ4_NL || T == COLI_MXFP4) {
        const int mx = T == COLI_MXFP4;
        const __m128i levels = _mm_loadu_si128((const __m128i *)(mx ? coli_kvalues_mxfp4 : coli_kvalues_iq4nl));
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m128i bits =
            _mm_loadu_si128((const __m128i *)(blk + (mx ? offsetof(block_mxfp4, qs) : offsetof(block_iq4_nl, qs))));
        return _mm256_set_m128i(_mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                                _mm_shuffle_epi8(levels, _mm_and_si128(bits, m4)));
    }
    if (T == COLI_Q4_1) return unpack_nibbles(blk + offsetof(block_q4_1, qs));
    if (T == COLI_Q5_0)
        return _mm256_or_si256(
            unpack_nibbles(blk + offsetof(block_q5_0, qs)),
            _mm256_andnot_si256(bits_to_bytes(blk + offsetof(block_q5_0, qh)), _mm256_set1_epi8((char)0xf0)));
    return _mm256_or_si256(unpack_nibbles(blk + offsetof(block_q5_1, qs)),
                           _mm256_and_si256(bits_to_bytes(blk + offsetof(block_q5_1, qh)), _mm256_set1_epi8(0x10)));
}

AVX2 ALWAYS float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return HALF(h);
}

/* One weight row of type T against RN (1..4) activation rows x + t*x_stride
 * (Q8_1 blocks for Q4_1/Q5_1, Q8_0 for Q5_0/IQ4_NL): each weight block is
 * unpacked once for all tokens. Per (row, token) the operations are those
 * of RN = 1, the single-token function, so a group gives the same bits.
 * Per block: d_w * d_x times the 8 int32 lanes, one FMA; Q4_1/Q5_1 add
 * m_w * s_x in a scalar sum; IQ4_NL and MXFP4 keep even and odd blocks in
 * two accumulators as llama.cpp and add an odd last block exactly (for
 * MXFP4 these are the steps of llama.cpp's AVX2 ggml_vec_dot_mxfp4_q8_0;
 * d_w is the E8M0 scale's half, the levels being doubled). */
AVX2 ALWAYS void legacy_tokens(int64_t n, const uint8_t *w, const uint8_t *x, size_t x_stride, float *out, const int RN,
                               const coli_dtype T) {
    const int has_min = T == COLI_Q4_1 || T == COLI_Q5_1, pairs = T == COLI_IQ4_NL || T == COLI_MXFP4;
    const size_t wbb = coli_dtype_block_bytes(T), xbb = has_min ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const int64_t nb = n / COLI_QK, nb_vec = pairs ? nb & ~(int64_t)1 : nb;
    __m256 acc[2][4];
    float mins[4];
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) {
        acc[0][t] = acc[1][t] = _mm256_setzero_ps();
        mins[t] = 0.0f;
    }
    /* IQ4_NL, MXFP4: blocks b (even) and b+1 into accumulators 0 and 1 */
    const int step = pairs ? 2 : 1;
    for (int64_t b = 0; b < nb_vec; b += step) {
#pragma GCC unroll 2
        for (int k = 0; k < step; k++) {
            const uint8_t *wb = w + (size_t)(b + k) * wbb;
            const __m256i q = unpack_block(wb, T);
            const float wd = T == COLI_MXFP4 ? coli_e8m0_half(wb[0]) : half_at(wb);
            const float wm = has_min ? half_at(wb + 2) : 0.0f;
#pragma GCC unroll 4
            for (int t = 0; t < RN; t++) {
                const uint8_t *xb = x + (size_t)t * x_stride + (size_t)(b + k) * xbb;
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + (has_min ? 4 : 2)));
                const __m256 p = has_min ? dot_us8(q, xv) : dot_ss8(q, xv);
                acc[k][t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * half_at(xb)), p, acc[k][t]);
                if (has_min) mins[t] += wm * half_at(xb + 2);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) {
        float sum = hsum8(pairs ? _mm256_add_ps(acc[0][t], acc[1][t]) : acc[0][t]) + mins[t];
        if (nb_vec < nb)
            sum += (T == COLI_MXFP4 ? coli_vec_dot_mxfp4_q8_0 : coli_vec_dot_iq4_nl_q8_0)(
                COLI_QK, w + (size_t)nb_vec * wbb, x + (size_t)t * x_stride + (size_t)nb_vec * xbb);
        out[t] = sum;
    }
}

/* Per type: the single-token dot product (vecdot.h) and the 1..4-token one. */
#define LEGACY_FNS(name, T)                                                                                           \
    AVX2 float coli_vec_dot_##name##_avx2(int64_t n, const void *w, const void *x) {                                  \
        float out;                                                                                                    \
        legacy_tokens(n, w, x, 0, &out, 1, T);                                                                        \
        return out;                                                                                                   \
    }                                                                                                                 \
    AVX2 void coli_vec_dot_##name##_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out, \
                                                int n_tok) {                                                          \
        switch (n_tok) {                                                                                              \
        case 1: legacy_tokens(n, w, x, x_stride, out, 1, T); break;                                                   \
        case 2: legacy_tokens(n, w, x, x_stride, out, 2, T); break;                                                   \
        case 3: legacy_tokens(n, w, x, x_stride, out, 3, T); break;                                                   \
        default: legacy_tokens(n, w, x, x_stride, out, 4, T); break;                                                  \
        }                                                                                                             \
    }
LEGACY_FNS(q4_1_q8_1, COLI_Q4_1)
LEGACY_FNS(q5_0_q8_0, COLI_Q5_0)
LEGACY_FNS(q5_1_q8_1, COLI_Q5_1)
LEGACY_FNS(iq4_nl_q8_0, COLI_IQ4_NL)
LEGACY_FNS(mxfp4_q8_0, COLI_MXFP4)

#else /* not x86: never called (coli_cpu_avx2() is 0), present for the linker */

float coli_vec_dot_q4_1_q8_1_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_q4_1_q8_1(n, w, x); }
float coli_vec_dot_q5_0_q8_0_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_q5_0_q8_0(n, w, x); }
float coli_vec_dot_q5_1_q8_1_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_q5_1_q8_1(n, w, x); }
float coli_vec_dot_iq4_nl_q8_0_avx2(int64_t n, const void *w, const void *x) {
    return coli_vec_dot_iq4_nl_q8_0(n, w, x);
}
float coli_vec_dot_mxfp4_q8_0_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_mxfp4_q8_0(n, w, x); }
#define LEGACY_TOKENS(name)                                                                                         \
    void coli_vec_dot_##name##_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,    \
                                           int n_tok) {                                                             \
        for (int t = 0; t < n_tok; t++) out[t] = coli_vec_dot_##name(n, w, (const char *)x + (size_t)t * x_stride); \
    }
LEGACY_TOKENS(q4_1_q8_1)
LEGACY_TOKENS(q5_0_q8_0)
LEGACY_TOKENS(q5_1_q8_1)
LEGACY_TOKENS(iq4_nl_q8_0)
LEGACY_TOKENS(mxfp4_q8_0)
#endif
