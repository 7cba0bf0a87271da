/*
 * vecdot_k_avx512.c - AVX-512 BW/DQ/VNNI dot products of the K-quants
 * (Q2_K..Q6_K) and IQ4_XS weight rows with Q8_K activation rows (vecdot.h), compiled per
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
 * minimums or the offset (Q6_K's -32, Q3_K's -4) through bsums, one sum
 * at the end); here rows 0, 1 and 2, 3 of a _tokens call take them two
 * rows per register, lane for lane the same operations ("the float
 * steps" below).
 * IQ4_XS's weights are signed: as in the AVX2 kernel, maddubs gets the
 * activation's magnitude and the weight with the activation's sign.
 */
#include <string.h>

#include "core/cpu_features.h"
#include "core/kernels/vecdot.h"
#define COLI_VECDOT_K_SIMD /* the float steps shared with the AVX2 kernels */
#include "core/kernels/vecdot_k_impl.h"

#if COLI_X86
#include <immintrin.h>

#define AVX512 COLI_TARGET_AVX512
#define ALWAYS static inline __attribute__((always_inline))

ALWAYS AVX512 __m512i load512(const void *p) { return _mm512_loadu_si512(p); }

/* the 32 bytes at p in both halves */
ALWAYS AVX512 __m512i load256_twice(const void *p) { return _mm512_broadcast_i64x4(load256(p)); }

/* a 256-bit value per half: lo in lanes 0..255, hi in 256..511 */
ALWAYS AVX512 __m512i halves(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* Bit 2j in every byte of the low half, bit 2j + 1 in the high half: which
 * bytes of Q5_K's qh / Q3_K's hmask add the high bit to chunk pair j. */
ALWAYS AVX512 __m512i pair_bits(int j) {
    return halves(_mm256_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(2 << (2 * j))));
}

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

/* ---- the float steps, two rows per register -------------------------------
 *
 * Rows 0, 1 and 2, 3 of a call go in pairs: the low half of a register
 * holds row t's 8 lanes, the high half row t+1's, and each lane goes
 * through the operations of the shared 256-bit steps (vecdot_k_impl.h),
 * the same integers folded, converted, FMA'd with the same scale, so the
 * lanes are the same floats; a lone row (nt 1 or 3) takes those steps
 * themselves. The pairs are split into token_acc for the final sums. */
typedef struct rows_acc {
    token_acc a[MAX_TOKENS];
    struct {
        __m512 acc, acc_min;
    } pair[MAX_TOKENS / 2]; /* rows 2k (low half) and 2k+1 */
    __m512 lone;            /* Q4_K / Q5_K lone row: acc (low half) and acc_min */
} rows_acc;

ALWAYS AVX512 void rows_zero(int nt, rows_acc *r) {
    acc_zero(r->a, nt);
    UNROLL
    for (int k = 0; k < nt / 2; k++) r->pair[k].acc = r->pair[k].acc_min = _mm512_setzero_ps();
    r->lone = _mm512_setzero_ps();
}

/* Q4_K / Q5_K: the lone row's accumulators into its token_acc */
ALWAYS AVX512 void lone_store(int nt, rows_acc *r) {
    if (nt % 2 == 0) return;
    r->a[nt - 1].acc = _mm512_castps512_ps256(r->lone);
    r->a[nt - 1].acc_min = _mm512_extractf32x8_ps(r->lone, 1);
}

ALWAYS AVX512 void rows_store(int nt, rows_acc *r, float *out) {
    UNROLL
    for (int k = 0; k < nt / 2; k++) {
        r->a[2 * k].acc = _mm512_castps512_ps256(r->pair[k].acc);
        r->a[2 * k + 1].acc = _mm512_extractf32x8_ps(r->pair[k].acc, 1);
        r->a[2 * k].acc_min = _mm512_castps512_ps256(r->pair[k].acc_min);
        r->a[2 * k + 1].acc_min = _mm512_extractf32x8_ps(r->pair[k].acc_min, 1);
    }
    acc_store(r->a, nt, out);
}

/* the 8 lanes of fold(i0) in the low half, of fold(i1) in the high one */
ALWAYS AVX512 __m512i fold_pair(__m512i i0, __m512i i1) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(i0, i1, 0x44), _mm512_shuffle_i64x2(i0, i1, 0xee));
}

/* the activation scale of each row of the pair, in its half; times f
 * (vmulps) the same floats as AVX2's scalar f * x->d */
ALWAYS AVX512 __m512 pair_act_scale(const block_q8_K *x0, const block_q8_K *x1) {
    return _mm512_insertf32x8(_mm512_set1_ps(x0->d), _mm256_set1_ps(x1->d), 1);
}

ALWAYS AVX512 __m512i load_pair(const void *p0, const void *p1) { return halves(load256(p0), load256(p1)); }

/* Q4_K / Q5_K: q4k_block_end for rows x0, x1 of block b. The minimums'
 * lanes 0..3 (4..7 zero) as mins_dot_bsums makes them: lane i = mins 2i,
 * 2i+1 times their pairs of bsums; here madd with each min twice gives
 * min k * pair k, and adjacent lanes are added and gathered. mins2: the 8
 * mins as int16, each twice, in both halves. */
ALWAYS AVX512 void q4k_pair_end(uint16_t d16, uint16_t dmin16, __m512i mins2, const block_q8_K *x0,
                                const block_q8_K *x1, __m512i i0, __m512i i1, __m512 *acc, __m512 *acc_min) {
    const __m512i gather = _mm512_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0, 8, 10, 12, 14, 0, 0, 0, 0);
    const float d = _cvtsh_ss(d16), dmin = _cvtsh_ss(dmin16);
    const __m512i per_min = _mm512_madd_epi16(load_pair(x0->bsums, x1->bsums), mins2);
    const __m512i adjacent = _mm512_add_epi32(per_min, _mm512_srli_epi64(per_min, 32));
    const __m512i msum = _mm512_maskz_permutexvar_epi32(0x0f0f, gather, adjacent);
    const __m512 act = pair_act_scale(x0, x1);
    *acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(d), act), _mm512_cvtepi32_ps(fold_pair(i0, i1)), *acc);
    *acc_min = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dmin), act), _mm512_cvtepi32_ps(msum), *acc_min);
}

/* Q4_K / Q5_K: q4k_block_end for a lone row x, its acc and acc_min in one
 * register (low, high half): the integer sums beside the minimums (lanes
 * 0..3 as q4k_pair_end makes them, 4..7 zero), d * x->d beside
 * dmin * x->d (vmulps: the same products as the scalar ones) */
ALWAYS AVX512 void q4k_lone_end(uint16_t d16, uint16_t dmin16, __m256i mins2, const block_q8_K *x, __m512i isum,
                                __m512 *acc) {
    const __m256i gather = _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m128i both = _mm_cvtsi32_si128((int)((uint32_t)d16 | (uint32_t)dmin16 << 16));
    const __m128 scales = _mm_mul_ps(_mm_cvtph_ps(both), _mm_set1_ps(x->d));
    const __m256i per_min = _mm256_madd_epi16(load256(x->bsums), mins2);
    const __m256i adjacent = _mm256_add_epi32(per_min, _mm256_srli_epi64(per_min, 32));
    const __m256i msum = _mm256_maskz_permutexvar_epi32(0x0f, gather, adjacent);
    const __m512 scale = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales));
    *acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(halves(fold(isum), msum)), *acc);
}

/* Q4_K / Q5_K: the float step of block b for every row */
ALWAYS AVX512 void q4k_rows_end(int nt, uint16_t d16, uint16_t dmin16, __m128i smv, const block_q8_K *const *xs,
                                int64_t b, const __m512i *isum, rows_acc *r) {
    const __m512i mins2 = _mm512_broadcast_i64x4(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(smv, smv)));
    UNROLL
    for (int k = 0; k < nt / 2; k++)
        q4k_pair_end(d16, dmin16, mins2, &xs[2 * k][b], &xs[2 * k + 1][b], isum[2 * k], isum[2 * k + 1],
                     &r->pair[k].acc, &r->pair[k].acc_min);
    if (nt % 2) q4k_lone_end(d16, dmin16, _mm512_castsi512_si256(mins2), &xs[nt - 1][b], isum[nt - 1], &r->lone);
}

/* IQ4_XS: d * isum for every row (the AVX2 kernel's acc_add) */
ALWAYS AVX512 void plain_rows_end(int nt, uint16_t d16, const block_q8_K *const *xs, int64_t b, const __m512i *isum,
                                  rows_acc *r) {
    const float d = _cvtsh_ss(d16);
    UNROLL
    for (int k = 0; k < nt / 2; k++) {
        const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(d), pair_act_scale(&xs[2 * k][b], &xs[2 * k + 1][b]));
        r->pair[k].acc =
            _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(fold_pair(isum[2 * k], isum[2 * k + 1])), r->pair[k].acc);
    }
    if (nt % 2) acc_add(&r->a[nt - 1], d * xs[nt - 1][b].d, fold(isum[nt - 1]));
}

/* Q6_K and Q3_K: d * (isum - 2^shift * the sum over sub-blocks of scale *
 * bsum) for every row, the constant offset of every quant (Q6_K's -32:
 * shift 5, Q3_K's -4: shift 2), as q6k_block_end and the AVX2 Q3_K kernel
 * take it; sc: the 16 signed scales */
ALWAYS AVX512 void offset_rows_end(int nt, uint16_t d16, __m128i sc, const block_q8_K *const *xs, int64_t b,
                                   const __m512i *isum, rows_acc *r, int shift) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    const __m512i sc16x2 = _mm512_broadcast_i64x4(sc16);
    const float d = _cvtsh_ss(d16);
    UNROLL
    for (int k = 0; k < nt / 2; k++) {
        const block_q8_K *x0 = &xs[2 * k][b], *x1 = &xs[2 * k + 1][b];
        const __m512i offset = _mm512_madd_epi16(sc16x2, load_pair(x0->bsums, x1->bsums));
        const __m512i isum8 =
            _mm512_sub_epi32(fold_pair(isum[2 * k], isum[2 * k + 1]), _mm512_slli_epi32(offset, shift));
        const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(d), pair_act_scale(x0, x1));
        r->pair[k].acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum8), r->pair[k].acc);
    }
    if (nt % 2) {
        const block_q8_K *x = &xs[nt - 1][b];
        const __m256i offset = _mm256_madd_epi16(sc16, load256(x->bsums));
        acc_add(&r->a[nt - 1], d * x->d, _mm256_sub_epi32(fold(isum[nt - 1]), _mm256_slli_epi32(offset, shift)));
    }
}

/* Q4_K / Q5_K: bytes 0..7 = scales, 8..15 = mins: the words of
 * coli_q4k_scale_words (vecdot_k_impl.h states the layout), built from
 * the packed words p0, p1, p2 in 7 instructions instead of some 30 scalar
 * ones: words 0, 2 are p0, p1 & 0x3f; words 1, 3 are the low, high
 * nibbles of p2 with the top 2 bits of p0, p1 (>> 6 << 4) above them.
 * Reads 16 bytes from `packed`: the block's quants follow its 12. */
ALWAYS AVX512 __m128i q4k_scales_mins16(const uint8_t *packed) {
    const __m128i p = _mm_loadu_si128((const __m128i *)packed);
    const __m128i low = _mm_srlv_epi32(_mm_shuffle_epi32(p, 0x98), _mm_setr_epi32(0, 0, 0, 4)); /* p0 p2 p1 p2 */
    const __m128i top = _mm_srli_epi32(_mm_shuffle_epi32(p, 0x50), 2);                          /* p0 p0 p1 p1 */
    const __m128i low_mask = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
    const __m128i top_mask = _mm_setr_epi32(0, 0x30303030, 0, 0x30303030);
    return _mm_or_si128(_mm_and_si128(low, low_mask), _mm_and_si128(top, top_mask));
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
    rows_acc r;
    rows_zero(nt, &r);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i smv = q4k_scales_mins16(wb[b].scales);
        const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(smv));
        __m512i isum[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int j = 0; j < 4; j++) q4k_pair(nt, q4k_nibbles(wb[b].qs + 32 * j), sc16, j, xs, b, isum);
        q4k_rows_end(nt, wb[b].d, wb[b].dmin, smv, xs, b, isum, &r);
    }
    lone_store(nt, &r);
    rows_store(nt, &r, out);
}
ENTRY_POINTS(q4_K, q4_K_tokens, avx512, AVX512)

/* Q5_K: Q4_K plus the 5th bits, bits 2j (low half) and 2j+1 (high half)
 * of qh for chunk pair j: a byte test picks the bytes that get 16 */
ALWAYS AVX512 void q5_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q5_K *wb = w;
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    rows_acc r;
    rows_zero(nt, &r);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i smv = q4k_scales_mins16(wb[b].scales);
        const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(smv));
        const __m512i qh = load256_twice(wb[b].qh);
        __m512i isum[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int j = 0; j < 4; j++) {
            const __mmask64 high = _mm512_test_epi8_mask(qh, pair_bits(j));
            const __m512i nib = q4k_nibbles(wb[b].qs + 32 * j);
            q4k_pair(nt, _mm512_mask_add_epi8(nib, high, nib, bit4), sc16, j, xs, b, isum);
        }
        q4k_rows_end(nt, wb[b].d, wb[b].dmin, smv, xs, b, isum, &r);
    }
    lone_store(nt, &r);
    rows_store(nt, &r, out);
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
    rows_acc r;
    rows_zero(nt, &r);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)wb[b].scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc));
        __m512i isum[MAX_TOKENS];
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
        offset_rows_end(nt, wb[b].d, sc, xs, b, isum, &r, 5);
    }
    rows_store(nt, &r, out);
}
ENTRY_POINTS(q6_K, q6_K_tokens, avx512, AVX512)

/* Q3_K / Q2_K: the 2-bit quants of chunk pair p (values 64p..64p+63) from
 * the 32 qs bytes of their half in both halves of qs2: bits 4(p%2) of each
 * byte in the low half (chunk 2p), 4(p%2)+2 in the high one (2p+1) */
ALWAYS AVX512 __m512i two_bit_pair(__m512i qs2, int p) {
    const long long lo = 4 * (p % 2), hi = lo + 2;
    const __m512i by_half = _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
    return _mm512_and_si512(_mm512_srlv_epi64(qs2, by_half), _mm512_set1_epi8(0x03));
}

/* Q3_K / Q2_K: chunk pair p (quants q, scales 4p..4p+3) against every row */
ALWAYS AVX512 void k16_pair(int nt, __m512i q, __m512i sc16, int p, const block_q8_K *const *xs, int64_t b,
                            __m512i *isum) {
    const __m512i s = q6k_pair_scales(sc16, p);
    UNROLL
    for (int t = 0; t < nt; t++) isum[t] = scaled_dot_acc(isum[t], q, load512(xs[t][b].qs + 64 * p), s);
}

/* Q3_K: the 16 scales - 32, bytes of coli_q3k_scale_words (vecdot_k_impl.h
 * states the layout) built from the packed words p0, p1, p2 in vector ops
 * instead of some 20 scalar ones: words 0..3 are the low nibbles of p0, p1,
 * then their high nibbles, each with 2 bits of p2 (>> 0, 2, 4, 6) above.
 * A masked load of the 12 bytes: only d follows them in the block. */
ALWAYS AVX512 __m128i q3k_scales16(const uint8_t *packed) {
    const __m128i p = _mm_maskz_loadu_epi8(0x0fff, packed);
    const __m128i low = _mm_srlv_epi32(_mm_shuffle_epi32(p, 0x44), _mm_setr_epi32(0, 0, 4, 4)); /* p0 p1 p0 p1 */
    const __m128i top = _mm_srlv_epi32(_mm_shuffle_epi32(p, 0xaa), _mm_setr_epi32(0, 2, 4, 6)); /* p2 x 4 */
    const __m128i sc = _mm_or_si128(_mm_and_si128(low, _mm_set1_epi8(0x0f)),
                                    _mm_slli_epi32(_mm_and_si128(top, _mm_set1_epi8(0x03)), 4));
    return _mm_sub_epi8(sc, _mm_set1_epi8(32));
}

/* Q3_K: quant q + 4h (0..7, h bit 2p of hmask for chunk 2p, 2p+1 for
 * chunk 2p+1: a byte test picks the bytes that get 4); the -4 of every
 * quant through bsums. */
ALWAYS AVX512 void q3_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q3_K *wb = w;
    const __m512i four = _mm512_set1_epi8(4);
    rows_acc r;
    rows_zero(nt, &r);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i sc = q3k_scales16(wb[b].scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc));
        const __m512i hm = load256_twice(wb[b].hmask);
        __m512i isum[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i q = two_bit_pair(load256_twice(wb[b].qs + 32 * (p / 2)), p);
            k16_pair(nt, _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hm, pair_bits(p)), q, four), sc16, p, xs, b,
                     isum);
        }
        offset_rows_end(nt, wb[b].d, sc, xs, b, isum, &r, 2);
    }
    rows_store(nt, &r, out);
}
ENTRY_POINTS(q3_K, q3_K_tokens, avx512, AVX512)

/* Q2_K: the float step of block b for every row, as the AVX2 kernel's:
 * d * isum, and dmin * the minimums against the row's bsums; mins: the 16
 * mins as int16 */
ALWAYS AVX512 void q2k_rows_end(int nt, uint16_t d16, uint16_t dmin16, __m256i mins, const block_q8_K *const *xs,
                                int64_t b, const __m512i *isum, rows_acc *r) {
    const __m512i mins2 = _mm512_broadcast_i64x4(mins);
    const float d = _cvtsh_ss(d16), dmin = _cvtsh_ss(dmin16);
    UNROLL
    for (int k = 0; k < nt / 2; k++) {
        const block_q8_K *x0 = &xs[2 * k][b], *x1 = &xs[2 * k + 1][b];
        const __m512 act = pair_act_scale(x0, x1);
        const __m512i msum = _mm512_madd_epi16(mins2, load_pair(x0->bsums, x1->bsums));
        r->pair[k].acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(d), act),
                                         _mm512_cvtepi32_ps(fold_pair(isum[2 * k], isum[2 * k + 1])), r->pair[k].acc);
        r->pair[k].acc_min =
            _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dmin), act), _mm512_cvtepi32_ps(msum), r->pair[k].acc_min);
    }
    if (nt % 2) {
        const block_q8_K *x = &xs[nt - 1][b];
        acc_add(&r->a[nt - 1], d * x->d, fold(isum[nt - 1]));
        acc_add_min(&r->a[nt - 1], dmin * x->d, _mm256_madd_epi16(mins, load256(x->bsums)));
    }
}

/* Q2_K: 2-bit quants laid out as Q3_K's low bits; a scale (low nibble) and
 * a min (high nibble) per 16 values. */
ALWAYS AVX512 void q2_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q2_K *wb = w;
    const __m128i low4 = _mm_set1_epi8(0x0f);
    rows_acc r;
    rows_zero(nt, &r);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i packed = _mm_loadu_si128((const __m128i *)wb[b].scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, low4)));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4));
        __m512i isum[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int p = 0; p < 4; p++)
            k16_pair(nt, two_bit_pair(load256_twice(wb[b].qs + 32 * (p / 2)), p), sc16, p, xs, b, isum);
        q2k_rows_end(nt, wb[b].d, wb[b].dmin, mins, xs, b, isum, &r);
    }
    rows_store(nt, &r, out);
}
ENTRY_POINTS(q2_K, q2_K_tokens, avx512, AVX512)

/* IQ4_XS: the 8 sub-block scales (-32..31) as int16 in every 128-bit
 * lane, as coli_iq4xs_scale reads them: a nibble of scales_l (low one for
 * even sub-blocks) and 2 bits of scales_h */
ALWAYS AVX512 __m512i iq4xs_scales(const block_iq4_xs *blk) {
    uint32_t packed_l;
    memcpy(&packed_l, blk->scales_l, sizeof packed_l);
    const __m128i l = _mm_cvtsi32_si128((int)packed_l);
    const __m128i each_twice = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(l, l));
    const __m128i low =
        _mm_and_si128(_mm_srlv_epi16(each_twice, _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)), _mm_set1_epi16(15));
    const __m128i high =
        _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16((short)blk->scales_h), _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)),
                      _mm_set1_epi16(3));
    const __m128i scales = _mm_sub_epi16(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi16(32));
    return _mm512_broadcast_i32x4(scales);
}

/* IQ4_XS: sub-blocks ib and ib+1 (64 values, 32 qs bytes) as signed
 * weights: 128-bit lanes hold the low nibbles of bytes 0..15 (values 0..15
 * of ib), their high nibbles (16..31), then the same of bytes 16..31
 * (ib+1), each looked up in the 16 levels */
ALWAYS AVX512 __m512i iq4xs_weights(const uint8_t *qs, __m512i levels) {
    const __m512i spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                  by_lane = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i raw = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(load256(qs)));
    return _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srlv_epi64(raw, by_lane), _mm512_set1_epi8(0x0f)));
}

/* acc + sum(w * q8) * scale per int16 pair for signed weights w, as AVX2's
 * signed_scaled_dot: maddubs of |q8| and w with q8's sign (AVX-512 has no
 * sign_epi8: w is negated where q8 < 0; where q8 is 0, sign_epi8's 0 and
 * w give the same 0 product) */
ALWAYS AVX512 __m512i signed_scaled_dot_acc(__m512i acc, __m512i w, __m512i q8, __m512i scales_i16) {
    const __m512i signed_w = _mm512_mask_sub_epi8(w, _mm512_movepi8_mask(q8), _mm512_setzero_si512(), w);
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_abs_epi8(q8), signed_w), scales_i16);
}

/* IQ4_XS: per two 32-value sub-blocks, 32 qs bytes (see iq4xs_weights)
 * against 64 contiguous activation bytes */
ALWAYS AVX512 void iq4_xs_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_iq4_xs *wb = w;
    const __m512i levels = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)coli_kvalues_iq4nl));
    rows_acc r;
    rows_zero(nt, &r);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m512i sc16 = iq4xs_scales(&wb[b]);
        __m512i isum[MAX_TOKENS];
        isum_zero(nt, isum);
        UNROLL
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            const __m512i wq = iq4xs_weights(wb[b].qs + 16 * ib, levels), s = q4k_pair_scales(sc16, ib / 2);
            UNROLL
            for (int t = 0; t < nt; t++)
                isum[t] = signed_scaled_dot_acc(isum[t], wq, load512(xs[t][b].qs + 32 * ib), s);
        }
        plain_rows_end(nt, wb[b].d, xs, b, isum, &r);
    }
    rows_store(nt, &r, out);
}
ENTRY_POINTS(iq4_xs, iq4_xs_tokens, avx512, AVX512)

#else /* not x86: never called (coli_cpu_avx512() is 0), present for the linker */

PORTABLE_ENTRY_POINTS(q2_K, avx512)
PORTABLE_ENTRY_POINTS(q3_K, avx512)
PORTABLE_ENTRY_POINTS(q4_K, avx512)
PORTABLE_ENTRY_POINTS(q5_K, avx512)
PORTABLE_ENTRY_POINTS(q6_K, avx512)
PORTABLE_ENTRY_POINTS(iq4_xs, avx512)
#endif
