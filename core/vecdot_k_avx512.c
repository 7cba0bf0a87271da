/*
 * vecdot_k_avx512.c - AVX-512 BW/DQ/VNNI dot products of Q4_K, Q5_K and
 * Q6_K weight rows with Q8_K activation rows (vecdot.h), compiled per
 * function (COLI_TARGET_AVX512) and called only when coli_cpu_avx512().
 *
 * Each returns exactly the floats of its AVX2 namesake (vecdot_k_avx2.c)
 * for every input. There a super-block's integer sums are 8 int32 lanes,
 * lane k the sum over the block's 32-value chunks of int32 lane k of
 * madd(maddubs(quants, activations), scales). Here one 512-bit register
 * holds two of those chunks (low half: one chunk, high half: the next),
 * against 64 contiguous activation bytes, so one maddubs and one vpdpwssd
 * (madd and add in one, the same int32 results) do the work of two of
 * each, plus two adds; the 16 lanes are folded to 8 once per super-block.
 * Integer adds give the same integers in any order, so the 8 lanes are
 * those of the AVX2 kernel, and from there both take the same float steps
 * (vecdot_k_impl.h: convert, FMA with d * the activation scale, the
 * minimums or the -32 offset through bsums, one sum at the end).
 */
#include "core/cpu_features.h"
#include "core/vecdot.h"
#define COLI_VECDOT_K_SIMD /* the float steps shared with the AVX2 kernels */
#include "core/vecdot_k_impl.h"

#if COLI_X86
#include <immintrin.h>

#define AVX512 COLI_TARGET_AVX512
#define ALWAYS static inline __attribute__((always_inline))

ALWAYS AVX512 __m512i load512(const void *p) { return _mm512_loadu_si512(p); }

/* the 32 bytes at p in both halves */
ALWAYS AVX512 __m512i load256_twice(const void *p) { return _mm512_broadcast_i64x4(load256(p)); }

/* a 256-bit value per half: lo in lanes 0..255, hi in 256..511 */
ALWAYS AVX512 __m512i halves(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* acc + sum(q * q8) * scale per int16 pair, into int32 lanes: AVX2's
 * scaled_dot plus its add (vpdpwssd does not saturate: the same int32s
 * as madd then add); q unsigned bytes */
ALWAYS AVX512 __m512i scaled_dot_acc(__m512i acc, __m512i q, __m512i q8, __m512i scales_i16) {
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, q8), scales_i16);
}

/* the 8 int32 lanes of the AVX2 kernel: low half + high half */
ALWAYS AVX512 __m256i fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

ALWAYS AVX512 void isum_zero(int nt, __m512i *isum) {
    UNROLL
    for (int t = 0; t < nt; t++) isum[t] = _mm512_setzero_si512();
}

ALWAYS AVX512 void isum_fold(int nt, const __m512i *isum, __m256i *isum8) {
    UNROLL
    for (int t = 0; t < nt; t++) isum8[t] = fold(isum[t]);
}

/* Q4_K / Q5_K: the scales of chunk pair j (sub-blocks 2j and 2j+1) from
 * the 8 int16 scales in every 128-bit lane: 2j in the low half, 2j+1 in
 * the high one */
ALWAYS AVX512 __m512i q4k_pair_scales(__m512i sc16, int j) {
    const __m256i lo = _mm256_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j)));
    const __m256i hi = _mm256_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2)));
    return _mm512_shuffle_epi8(sc16, halves(lo, hi));
}

/* Q4_K / Q5_K: the nibbles of 32 qs bytes: low ones in the low half
 * (sub-block 2j), high ones in the high half (2j+1). The 64-bit shift
 * moves the high nibble of each byte to its low nibble; the mask drops
 * what came in from the next byte. */
ALWAYS AVX512 __m512i q4k_nibbles(const uint8_t *qs) {
    const __m512i by_half = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi64(load256_twice(qs), by_half), _mm512_set1_epi8(0x0f));
}

/* Q4_K / Q5_K: chunk pair j (unpacked quants q) against every row */
ALWAYS AVX512 void q4k_pair(int nt, __m512i q, __m512i sc16, int j, const block_q8_K *const *xs, int64_t b,
                            __m512i *isum) {
    const __m512i s = q4k_pair_scales(sc16, j);
    UNROLL
    for (int t = 0; t < nt; t++) isum[t] = scaled_dot_acc(isum[t], q, load512(xs[t][b].qs + 64 * j), s);
}

/* Q4_K: per 64 values, 32 qs bytes: low nibbles sub-block 2j, high 2j+1 */
ALWAYS AVX512 void q4_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q4_K *wb = w;
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i smv = q4k_scales_mins(wb[b].scales);
        const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(smv));
        __m512i isum[MAX_TOKENS];
        __m256i isum8[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int j = 0; j < 4; j++) q4k_pair(nt, q4k_nibbles(wb[b].qs + 32 * j), sc16, j, xs, b, isum);
        isum_fold(nt, isum, isum8);
        q4k_block_end(nt, wb[b].d, wb[b].dmin, smv, xs, b, isum8, a);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q4_K, q4_K_tokens, avx512, AVX512)

/* Q5_K: Q4_K plus the 5th bits, bits 2j (low half) and 2j+1 (high half)
 * of qh for chunk pair j: a byte test picks the bytes that get 16 */
ALWAYS AVX512 void q5_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q5_K *wb = w;
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i smv = q4k_scales_mins(wb[b].scales);
        const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(smv));
        const __m512i qh = load256_twice(wb[b].qh);
        __m512i isum[MAX_TOKENS];
        __m256i isum8[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int j = 0; j < 4; j++) {
            const __m512i which =
                halves(_mm256_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(2 << (2 * j))));
            const __mmask64 high = _mm512_test_epi8_mask(qh, which);
            const __m512i nib = q4k_nibbles(wb[b].qs + 32 * j);
            q4k_pair(nt, _mm512_mask_add_epi8(nib, high, nib, bit4), sc16, j, xs, b, isum);
        }
        isum_fold(nt, isum, isum8);
        q4k_block_end(nt, wb[b].d, wb[b].dmin, smv, xs, b, isum8, a);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q5_K, q5_K_tokens, avx512, AVX512)

/* Q6_K: (low nibble of lo) | (bits 4..5 of hi & 0x30): the bit select
 * "0x0f ? lo : hi" of vpternlog, hi masked first */
ALWAYS AVX512 __m512i q6k_merge(__m512i lo, __m512i hi) {
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    return _mm512_ternarylogic_epi32(lo, _mm512_and_si512(hi, bits45), _mm512_set1_epi8(0x0f), 0xe4);
}

/* Q6_K: the scales of 64 values from value 64 * p of the block (p 0..3):
 * int16 lanes of 128-bit lane L get scale 4p + L (16 values each) */
ALWAYS AVX512 __m512i q6k_pair_scales(__m512i sc16, int p) {
    const long long lane = 0x0001000100010001LL, first = 4LL * p * lane; /* int16 x 4 */
    const __m512i idx = _mm512_set_epi64(first + 3 * lane, first + 3 * lane, first + 2 * lane, first + 2 * lane,
                                         first + lane, first + lane, first, first);
    return _mm512_permutexvar_epi16(idx, sc16);
}

/* Q6_K: per 128 values, 64 bytes of ql (low nibbles: values 0..63, high:
 * 64..127) and 32 bytes of qh (bits 2k..2k+1: chunk k of 32 values), each
 * put at bits 4..5 of the quant: chunks 0, 1 (qh << 4, << 2) in one
 * register, 2, 3 (qh, qh >> 2) in the other. */
ALWAYS AVX512 void q6_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q6_K *wb = w;
    const __m512i shl01 = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4), shr23 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)wb[b].scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc));
        __m512i isum[MAX_TOKENS];
        __m256i isum8[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int half = 0; half < 2; half++) {
            const __m512i ql = load512(wb[b].ql + 64 * half), qh = load256_twice(wb[b].qh + 32 * half);
            const __m512i q[2] = {
                q6k_merge(ql, _mm512_sllv_epi64(qh, shl01)),
                q6k_merge(_mm512_srli_epi16(ql, 4), _mm512_srlv_epi64(qh, shr23)),
            };
            UNROLL
            for (int p = 0; p < 2; p++) {
                const __m512i s = q6k_pair_scales(sc16, 2 * half + p);
                const int at = 128 * half + 64 * p; /* the pair's first value */
                UNROLL
                for (int t = 0; t < nt; t++) isum[t] = scaled_dot_acc(isum[t], q[p], load512(xs[t][b].qs + at), s);
            }
        }
        isum_fold(nt, isum, isum8);
        q6k_block_end(nt, wb[b].d, sc, xs, b, isum8, a);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q6_K, q6_K_tokens, avx512, AVX512)

#else /* not x86: never called (coli_cpu_avx512() is 0), present for the linker */

PORTABLE_ENTRY_POINTS(q4_K, avx512)
PORTABLE_ENTRY_POINTS(q5_K, avx512)
PORTABLE_ENTRY_POINTS(q6_K, avx512)
#endif
