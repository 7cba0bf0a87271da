/*
 * vecdot_k_avx2.c - AVX2 + FMA + F16C dot products of K-quant and IQ4_XS
 * weight rows with Q8_K activation rows (vecdot.h), compiled per function
 * (COLI_TARGET_AVX2) and called only when coli_cpu_avx2().
 *
 * Each super-block gives the same exact integer sums as the portable code
 * (vecdot_k.c), kept as 8 int32 lanes: weight quants are unpacked to
 * unsigned bytes, multiplied with the signed activation bytes by maddubs
 * (pairs into int16: at most 2*63*128 < 32768), then madd with the int16
 * sub-block scales into int32 lanes. Constant offsets (Q3_K's -4, Q6_K's
 * -32) and minimums (Q2_K, Q4_K, Q5_K) go through Q8_K's bsums, as in the
 * portable code. Only the float steps differ: the lanes are converted and
 * accumulated with FMA, and summed once at the end, so results equal the
 * portable ones within float rounding. The _tokens entry points run one
 * weight row against up to 4 activation rows, unpacking each weight block
 * once (see "dot products" below).
 *
 * IQ4_XS has signed weights; maddubs needs one unsigned operand, so the
 * activation's magnitude is that operand and the weight takes its sign.
 * (The other way round, a -128 activation would not negate: Q8_K's values
 * stay in -127..127, NaN inputs included, which quantize to 0.)
 */
#include <string.h>

#include "core/cpu_features.h"
#include "core/kernels/vecdot.h"
#define COLI_VECDOT_K_SIMD /* the shared float steps (vecdot_k_impl.h) */
#include "core/kernels/vecdot_k_impl.h"

#if COLI_X86
#include <immintrin.h>

#define AVX2 COLI_TARGET_AVX2
#define ALWAYS static inline __attribute__((always_inline))

/* int16 lanes 0..7 = scale s, 8..15 = scale s+1 of 16 int8 scales: the
 * scales of a 32-value chunk made of two 16-value sub-blocks, in the order
 * maddubs leaves its pair sums */
ALWAYS AVX2 __m256i pair_scales(__m128i scales_i8, int s) {
    const long long spread = 0x0101010101010101LL;
    __m128i pick = _mm_set_epi64x(spread * (s + 1), spread * s);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales_i8, pick));
}

/* int32 lanes of sum(q * q8) * scale per sub-block; q unsigned bytes */
ALWAYS AVX2 __m256i scaled_dot(__m256i q, __m256i q8, __m256i scales_i16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, q8), scales_i16);
}

/* acc + a, in program order: the empty asm makes the sum opaque to the
 * compiler, which would otherwise reassociate the integer adds of a whole
 * unrolled block (times the rows of a _tokens call) into one tree and keep
 * every product alive at once, spilling most of them */
ALWAYS AVX2 __m256i accumulate(__m256i acc, __m256i a) {
    acc = _mm256_add_epi32(acc, a);
    __asm__("" : "+x"(acc));
    return acc;
}

/* the same for signed weights w: maddubs needs one unsigned operand; the
 * activation's magnitude is that one and the weight takes its sign (the
 * other way round, a -128 activation would not negate) */
ALWAYS AVX2 __m256i signed_scaled_dot(__m256i w, __m256i q8, __m256i scales_i16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q8), _mm256_sign_epi8(w, q8)), scales_i16);
}

/* the int16 lane l of a broadcast 8 x int16 vector, in every lane: the
 * scale of a 32-value sub-block (Q4_K, Q5_K) */
ALWAYS AVX2 __m256i lane_scale(__m256i scales_i16, int l) {
    return _mm256_shuffle_epi8(scales_i16, _mm256_set1_epi16((short)(((2 * l + 1) << 8) | (2 * l))));
}

// ----------------------------------------------------------------------------
// dot products (the shared steps: vecdot_k_impl.h)

/* Q4_K / Q5_K: the 64 values of chunk j, unpacked (lo: sub-block 2j, hi:
 * 2j+1), against every activation row */
ALWAYS AVX2 void q4k_chunk(int nt, __m256i lo, __m256i hi, __m256i sc16, int j, const block_q8_K *const *xs, int64_t b,
                           __m256i *isum) {
    __m256i s_lo = lane_scale(sc16, 2 * j), s_hi = lane_scale(sc16, 2 * j + 1);
    UNROLL
    for (int t = 0; t < nt; t++) {
        const int8_t *q8 = xs[t][b].qs + 64 * j;
        isum[t] = accumulate(isum[t], scaled_dot(lo, load256(q8), s_lo));
        isum[t] = accumulate(isum[t], scaled_dot(hi, load256(q8 + 32), s_hi));
    }
}

/* Q4_K: per 64 values, 32 qs bytes: low nibbles sub-block 2j, high 2j+1 */
ALWAYS AVX2 void q4_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q4_K *wb = w;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i smv = q4k_scales_mins(wb[b].scales);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));
        __m256i isum[MAX_TOKENS];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int j = 0; j < 4; j++) {
            __m256i q = load256(wb[b].qs + 32 * j);
            __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            q4k_chunk(nt, lo, hi, sc16, j, xs, b, isum);
        }
        q4k_block_end(nt, wb[b].d, wb[b].dmin, smv, xs, b, isum, a);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q4_K, q4_K_tokens, avx2, AVX2)

/* Q5_K: Q4_K plus the 5th bits, bits 2j and 2j+1 of qh for chunk j:
 * shifted down by 2 per chunk, always read at bits 0 and 1 */
ALWAYS AVX2 void q5_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q5_K *wb = w;
    const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i smv = q4k_scales_mins(wb[b].scales);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));
        __m256i qh = load256(wb[b].qh);
        __m256i isum[MAX_TOKENS];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int j = 0; j < 4; j++) {
            __m256i q = load256(wb[b].qs + 32 * j);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
            qh = _mm256_srli_epi16(qh, 2);
            q4k_chunk(nt, lo, hi, sc16, j, xs, b, isum);
        }
        q4k_block_end(nt, wb[b].d, wb[b].dmin, smv, xs, b, isum, a);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q5_K, q5_K_tokens, avx2, AVX2)

/* Q6_K: per 128 values, two 32-byte rows of ql (low nibbles: chunks 0, 1;
 * high: chunks 2, 3) and 32 bytes of qh (bits 2k..2k+1: chunk k), each put
 * at bits 4..5 of the quant. The -32 of every quant: 32 * sum over
 * sub-blocks of scale * bsum. */
ALWAYS AVX2 void q6_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q6_K *wb = w;
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)wb[b].scales);
        __m256i isum[MAX_TOKENS];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int half = 0; half < 2; half++) {
            __m256i ql0 = load256(wb[b].ql + 64 * half), ql1 = load256(wb[b].ql + 64 * half + 32);
            __m256i qh = load256(wb[b].qh + 32 * half);
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
                _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
            };
            UNROLL
            for (int k = 0; k < 4; k++) {
                __m256i scales = pair_scales(sc, 8 * half + 2 * k);
                const int at = 128 * half + 32 * k; /* the chunk's first value */
                UNROLL
                for (int t = 0; t < nt; t++)
                    isum[t] = accumulate(isum[t], scaled_dot(q[k], load256(xs[t][b].qs + at), scales));
            }
        }
        q6k_block_end(nt, wb[b].d, sc, xs, b, isum, a);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q6_K, q6_K_tokens, avx2, AVX2)

/* bit `bit` (0..7) of each byte moved to bit 2, the rest cleared */
ALWAYS AVX2 __m256i bit_to_2(__m256i v, int bit) {
    __m256i moved = bit >= 2 ? _mm256_srli_epi16(v, bit - 2) : _mm256_slli_epi16(v, 2 - bit);
    return _mm256_and_si256(moved, _mm256_set1_epi8(0x04));
}

/* Q3_K: quant q + 4h (0..7, h the hmask bit) times the activations; the
 * -4 of every quant through bsums. */
ALWAYS AVX2 void q3_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q3_K *wb = w;
    const __m256i low2 = _mm256_set1_epi8(0x03);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        uint32_t u[4];
        coli_q3k_scale_words(wb[b].scales, u);
        const __m128i sc = _mm_sub_epi8(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]), _mm_set1_epi8(32));
        const __m256i hm = load256(wb[b].hmask);
        __m256i isum[MAX_TOKENS];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int half = 0; half < 2; half++) {
            const __m256i qs = load256(wb[b].qs + 32 * half);
            UNROLL
            for (int k = 0; k < 4; k++) {
                __m256i q =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), low2), bit_to_2(hm, 4 * half + k));
                __m256i scales = pair_scales(sc, 8 * half + 2 * k);
                const int at = 128 * half + 32 * k; /* the chunk's first value */
                UNROLL
                for (int t = 0; t < nt; t++)
                    isum[t] = accumulate(isum[t], scaled_dot(q, load256(xs[t][b].qs + at), scales));
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
        const float d = _cvtsh_ss(wb[b].d);
        UNROLL
        for (int t = 0; t < nt; t++) {
            __m256i offset = _mm256_madd_epi16(sc16, load256(xs[t][b].bsums));
            acc_add(&a[t], d * xs[t][b].d, _mm256_sub_epi32(isum[t], _mm256_slli_epi32(offset, 2)));
        }
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q3_K, q3_K_tokens, avx2, AVX2)

/* Q2_K: 2-bit quants laid out as Q3_K's low bits; a scale (low nibble) and
 * a min (high nibble) per 16 values. */
ALWAYS AVX2 void q2_K_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_q2_K *wb = w;
    const __m256i low2 = _mm256_set1_epi8(0x03);
    const __m128i low4 = _mm_set1_epi8(0x0f);
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const __m128i packed = _mm_loadu_si128((const __m128i *)wb[b].scales);
        const __m128i sc = _mm_and_si128(packed, low4);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4));
        __m256i isum[MAX_TOKENS];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int half = 0; half < 2; half++) {
            const __m256i qs = load256(wb[b].qs + 32 * half);
            UNROLL
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), low2);
                __m256i scales = pair_scales(sc, 8 * half + 2 * k);
                const int at = 128 * half + 32 * k; /* the chunk's first value */
                UNROLL
                for (int t = 0; t < nt; t++)
                    isum[t] = accumulate(isum[t], scaled_dot(q, load256(xs[t][b].qs + at), scales));
            }
        }
        const float d = _cvtsh_ss(wb[b].d), dmin = _cvtsh_ss(wb[b].dmin);
        UNROLL
        for (int t = 0; t < nt; t++) {
            acc_add(&a[t], d * xs[t][b].d, isum[t]);
            acc_add_min(&a[t], dmin * xs[t][b].d, _mm256_madd_epi16(mins, load256(xs[t][b].bsums)));
        }
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(q2_K, q2_K_tokens, avx2, AVX2)

/* IQ4_XS: per two 32-value sub-blocks, 32 qs bytes; a sub-block's values
 * are the low nibbles of its 16 bytes, then the high ones, looked up in
 * the 16 levels by a byte shuffle. */
ALWAYS AVX2 void iq4_xs_tokens(int nt, int64_t n, const void *w, const block_q8_K *const *xs, float *out) {
    const block_iq4_xs *wb = w;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)coli_kvalues_iq4nl));
    token_acc a[MAX_TOKENS];
    acc_zero(a, nt);
    for (int64_t b = 0; b < n / QK_K; b++) {
        __m256i isum[MAX_TOKENS];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            __m256i raw = load256(wb[b].qs + 16 * ib);
            __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            __m256i w0 = _mm256_shuffle_epi8(levels, _mm256_permute2x128_si256(lo, hi, 0x20));
            __m256i w1 = _mm256_shuffle_epi8(levels, _mm256_permute2x128_si256(lo, hi, 0x31));
            __m256i s0 = _mm256_set1_epi16((short)coli_iq4xs_scale(&wb[b], ib));
            __m256i s1 = _mm256_set1_epi16((short)coli_iq4xs_scale(&wb[b], ib + 1));
            UNROLL
            for (int t = 0; t < nt; t++) {
                __m256i x0 = load256(xs[t][b].qs + 32 * ib), x1 = load256(xs[t][b].qs + 32 * ib + 32);
                isum[t] = accumulate(isum[t], signed_scaled_dot(w0, x0, s0));
                isum[t] = accumulate(isum[t], signed_scaled_dot(w1, x1, s1));
            }
        }
        const float d = _cvtsh_ss(wb[b].d);
        UNROLL
        for (int t = 0; t < nt; t++) acc_add(&a[t], d * xs[t][b].d, isum[t]);
    }
    acc_store(a, nt, out);
}
ENTRY_POINTS(iq4_xs, iq4_xs_tokens, avx2, AVX2)

// ----------------------------------------------------------------------------
// Q8_K activation quantizer

/* |x| of largest magnitude in a block, NaN ignored: maxps returns its
 * second operand when either is NaN, and the running max is second */
ALWAYS AVX2 float block_amax(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* the first value whose |x| is amax (what the portable loop keeps) */
ALWAYS AVX2 float first_with_magnitude(const float *x, float amax) {
    const __m256 sign = _mm256_set1_ps(-0.0f), target = _mm256_set1_ps(amax);
    for (int j = 0; j < QK_K; j += 8) {
        __m256 hit = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), target, _CMP_EQ_OQ);
        int mask = _mm256_movemask_ps(hit);
        if (mask) return x[j + __builtin_ctz((unsigned)mask)];
    }
    return 0.0f; /* not reached: amax is one of the |x| */
}

/* 32 values to int8: product rounded to float, then round half to even
 * (cvtps_epi32, as the portable add of 1.5 * 2^23); packs saturate, so
 * anything above 127 becomes 127; NaN lanes are zeroed first, so NaN gives
 * 0 as in the portable code (ggml's reference for the default NaN). The
 * packs interleave 128-bit lanes; the permute restores the order. */
ALWAYS AVX2 __m256i quantize32(const float *x, __m256 iscale) {
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_mul_ps(iscale, _mm256_loadu_ps(x + 8 * k));
        q[k] = _mm256_cvtps_epi32(_mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q))); /* NaN -> 0 */
    }
    __m256i q16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(q16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* int32 lanes whose sum over 128-bit lane 0 is the sum of bytes 0..15 of
 * q, over lane 1 that of bytes 16..31 */
ALWAYS AVX2 __m256i byte_sums(__m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
}

/* bsums of a block from the byte_sums of its 8 chunks of 32: two rounds of
 * hadd leave sums 0,2,4,6 in lane 0 and 1,3,5,7 in lane 1 (per 4 chunks) */
ALWAYS AVX2 void store_bsums(const __m256i s[8], int16_t *bsums) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    __m256i p = _mm256_packs_epi32(a, b); /* lane 0: even bsums, lane 1: odd */
    __m128i even = _mm256_castsi256_si128(p), odd = _mm256_extracti128_si256(p, 1);
    _mm_storeu_si128((__m128i *)bsums, _mm_unpacklo_epi16(even, odd));
    _mm_storeu_si128((__m128i *)(bsums + 8), _mm_unpackhi_epi16(even, odd));
}

AVX2 void coli_quantize_act_q8_K_avx2(const float *x, block_q8_K *y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        block_q8_K *out = &y[b];
        const float amax = block_amax(x);
        if (amax == 0.0f) {
            memset(out, 0, sizeof *out);
            continue;
        }
        const float iscale = -127.0f / first_with_magnitude(x, amax);
        const __m256 vscale = _mm256_set1_ps(iscale);
        __m256i sums[8];
        for (int c = 0; c < 8; c++) {
            __m256i q = quantize32(x + 32 * c, vscale);
            _mm256_storeu_si256((__m256i *)(out->qs + 32 * c), q);
            sums[c] = byte_sums(q);
        }
        store_bsums(sums, out->bsums);
        out->d = 1.0f / iscale;
    }
}

#else /* not x86: never called (coli_cpu_avx2() is 0), present for the linker */

PORTABLE_ENTRY_POINTS(q2_K, avx2)
PORTABLE_ENTRY_POINTS(q3_K, avx2)
PORTABLE_ENTRY_POINTS(q4_K, avx2)
PORTABLE_ENTRY_POINTS(q5_K, avx2)
PORTABLE_ENTRY_POINTS(q6_K, avx2)
PORTABLE_ENTRY_POINTS(iq4_xs, avx2)

void coli_quantize_act_q8_K_avx2(const float *x, block_q8_K *y, int64_t n) { coli_quantize_act_q8_K_portable(x, y, n); }
#endif
