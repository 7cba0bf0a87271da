/*
 * vecdot_lowbit_avx2.c - AVX2 dot products of TQ1_0, TQ2_0 and the IQ types' rows
 * with Q8_K activation rows (vecdot.h), compiled per function
 * (COLI_TARGET_AVX2) and called only when coli_cpu_avx2().
 *
 * Each super-block's integer sum is computed in registers and is exact;
 * the float steps per super-block are the portable ones, so the results
 * are the portable functions' bits (test_vecdot_k checks it).
 *  TQ1_0/TQ2_0: the trits unpacked as codes 0..2 (trit + 1), multiplied
 *    with the activation bytes by maddubs (pairs into int16: at most
 *    9 * 2*2*127 per lane); the activations' sum (the bsums) is subtracted
 *    once.
 *  IQ2/IQ3 types: per 32 values, the grid points' magnitudes (8..62)
 *    against the activations with the signs applied (sign_epi8), maddubs
 *    (at most 2*62*127 per pair), madd with the scales 2s + 1.
 *  IQ1_S/IQ1_M: the grid values -1/0/1 applied by sign_epi8, summed by
 *    maddubs with ones; the shift sums from the bsums (IQ1_S) or the
 *    activations with the shift signs (IQ1_M); the float step adds 1/8
 *    of them as the portable one.
 */
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

#if COLI_X86
#include <immintrin.h>

#include "core/kernels/vecdot_lowbit_x86.h"

#define AVX2 COLI_TARGET_AVX2
#define ALWAYS static inline __attribute__((always_inline))

/* Sum of the 16 bsums: the activations' sum over the super-block. */
AVX2 ALWAYS int act_sum(const block_q8_K *x) {
    return hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), _mm256_set1_epi16(1)));
}

/* Bytes of v times the constants of c (one per 16-bit lane, both bytes),
 * modulo 256: the even bytes from one 16-bit multiply, the odd ones from a
 * second with the even bytes cleared. */
AVX2 ALWAYS __m256i mul_bytes(__m256i v, __m256i c) {
    const __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(v, c), _mm256_set1_epi16(0x00ff));
    const __m256i hi = _mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi16((short)0xff00)), c);
    return _mm256_or_si256(lo, hi);
}

/* A TQ1_0 byte q (the top digit brought up by the multiply) read as the
 * code (q * 3) >> 8: 0 below 86, 1 below 171, else 2. */
AVX2 ALWAYS __m256i trit_code(__m256i q) {
    const __m256i ge86 = _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8(86)), q);
    const __m256i ge171 = _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8((char)171)), q);
    return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), ge86), ge171);
}

/* int16 pair sums of code(q * c) * x for 32 bytes q, 32 activations x */
AVX2 ALWAYS __m256i tq1_part(__m256i q, __m256i c, const int8_t *x) {
    return _mm256_maddubs_epi16(trit_code(mul_bytes(q, c)), _mm256_loadu_si256((const __m256i *)x));
}

/* sum of code * x over one TQ1_0 super-block (values in the block's order,
 * quant_blocks.h): qs[0..31] digit k against x[32k..]; qs[32..47] in both
 * halves, digits k and k+1 against x[160 + 16k..] (32 in a row); qh's 4
 * bytes repeated 4 times, digit k against x[240 + 4k..] (16 bytes). */
AVX2 ALWAYS int tq1_codes_dot(const block_tq1_0 *w, const int8_t *x) {
    static const short pow3[5] = {1, 3, 9, 27, 81};
    const __m256i q0 = _mm256_loadu_si256((const __m256i *)w->qs);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 5
    for (int k = 0; k < 5; k++) acc = _mm256_add_epi16(acc, tq1_part(q0, _mm256_set1_epi16(pow3[k]), x + 32 * k));
    const __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(w->qs + 32)));
    acc = _mm256_add_epi16(acc, tq1_part(q1, _mm256_setr_m128i(_mm_set1_epi16(1), _mm_set1_epi16(3)), x + 160));
    acc = _mm256_add_epi16(acc, tq1_part(q1, _mm256_setr_m128i(_mm_set1_epi16(9), _mm_set1_epi16(27)), x + 192));
    /* digit 4 of qs[32..47] and qh's 4 digits share one register: the low
     * half against x[224..239], the high half against x[240..255] */
    uint32_t qh;
    memcpy(&qh, w->qh, 4);
    const __m256i q2 = _mm256_setr_m128i(_mm_loadu_si128((const __m128i *)(w->qs + 32)), _mm_set1_epi32((int)qh));
    const __m256i c2 = _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27);
    acc = _mm256_add_epi16(acc, tq1_part(q2, c2, x + 224));
    return hsum_i32(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
}

AVX2 float coli_vec_dot_tq1_0_q8_K_avx2(int64_t n, const void *vw, const void *vx) {
    const block_tq1_0 *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++) {
        const int s = tq1_codes_dot(&w[b], x[b].qs) - act_sum(&x[b]);
        sum = add_mul(sum, (float)s, _cvtsh_ss(w[b].d) * x[b].d);
    }
    return sum;
}

/* sum of code * x over one TQ2_0 super-block: byte 32c + m holds values
 * 128c + 32k + m at bits 2k. */
AVX2 ALWAYS int tq2_codes_dot(const block_tq2_0 *w, const int8_t *x) {
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int c = 0; c < 2; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * c));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m3);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x + 128 * c + 32 * k));
            acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(codes, xv));
        }
    }
    return hsum_i32(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
}

AVX2 float coli_vec_dot_tq2_0_q8_K_avx2(int64_t n, const void *vw, const void *vx) {
    const block_tq2_0 *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++) {
        const int s = tq2_codes_dot(&w[b], x[b].qs) - act_sum(&x[b]);
        sum = add_mul(sum, (float)s, x[b].d * _cvtsh_ss(w[b].d));
    }
    return sum;
}

/* One group of 32 values of an IQ grid type as applied to each token's
 * activations: g the magnitudes (unsigned bytes, value j in byte j), s the
 * signs as -1 / +1 bytes, ls the odd scales 2s + 1 in 16-bit lanes (those
 * of the values each lane's pair holds). */
typedef struct iq_grp {
    __m256i g, s, ls;
} iq_grp;

/* the 32 sign bits s4 (byte l: the 8 signs of values 8 l ..) as -1 / +1
 * bytes: each bit spread over its byte (byte j tests bit j) */
AVX2 ALWAYS __m256i sign_bytes(uint32_t s4) {
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i sb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s4), spread);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sb, bit), bit), _mm256_set1_epi8(1));
}

/* the group against 32 activations: 8 int32 lanes (maddubs pairs stay
 * below 2 * 62 * 127) */
AVX2 ALWAYS __m256i iq_apply(const iq_grp *p, const int8_t *x) {
    const __m256i xv = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x), p->s);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(p->g, xv), p->ls);
}

/* One group of an IQ1 type: g the int8 grid values -1, 0, 1 (times x by
 * sign_epi8), the pair sums times ls. */
AVX2 ALWAYS __m256i iq1_group(__m256i g, const int8_t *x, __m256i ls) {
    const __m256i p = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x), g);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p), ls);
}

AVX2 ALWAYS __m256i words4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return _mm256_set_epi64x((long long)d, (long long)c, (long long)b, (long long)a);
}

/* the scale lanes of a group with one scale, and with one per 16 values */
AVX2 ALWAYS __m256i ls1(unsigned s) { return _mm256_set1_epi16((short)(2 * s + 1)); }
AVX2 ALWAYS __m256i ls2(unsigned s0, unsigned s1) {
    return _mm256_set_m128i(_mm_set1_epi16((short)(2 * s1 + 1)), _mm_set1_epi16((short)(2 * s0 + 1)));
}

/* Per 7-bit sign index (coli_iq2_signs), its 8 signs as -1 / +1 bytes:
 * one load per 8 values instead of the parity and the bit spreading
 * (which cost more than the grid lookups). Built by the compiler. */
#define S_SGN(i, j) ((uint64_t)(((i) | (__builtin_popcount(i) & 1) << 7) >> (j)&1 ? 0xff : 0x01) << 8 * (j))
#define S_SGN8(i) \
    (S_SGN(i, 0) | S_SGN(i, 1) | S_SGN(i, 2) | S_SGN(i, 3) | S_SGN(i, 4) | S_SGN(i, 5) | S_SGN(i, 6) | S_SGN(i, 7))
#define S_SGN_4(i) S_SGN8(i), S_SGN8(i + 1), S_SGN8(i + 2), S_SGN8(i + 3)
#define S_SGN_16(i) S_SGN_4(i), S_SGN_4(i + 4), S_SGN_4(i + 8), S_SGN_4(i + 12)
#define S_SGN_64(i) S_SGN_16(i), S_SGN_16(i + 16), S_SGN_16(i + 32), S_SGN_16(i + 48)
static const uint64_t k_sign_bytes[128] = {S_SGN_64(0), S_SGN_64(64)};

/* the -1 / +1 bytes of 4 7-bit sign indexes (bits 7l.. of aux) */
AVX2 ALWAYS __m256i signs4(uint32_t aux) {
    return words4(k_sign_bytes[aux & 127], k_sign_bytes[(aux >> 7) & 127], k_sign_bytes[(aux >> 14) & 127],
                  k_sign_bytes[(aux >> 21) & 127]);
}

AVX2 ALWAYS uint32_t load4(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Group ib of a super-block of each type, decoded (quant_blocks.h has
 * the layouts). */
AVX2 ALWAYS iq_grp grp_iq2_xxs(const block_iq2_xxs *w, int ib) {
    const uint8_t *q = (const uint8_t *)w->qs + 8 * ib;
    const uint32_t aux = load4(q + 4);
    return (iq_grp){
        words4(coli_iq2xxs_grid[q[0]], coli_iq2xxs_grid[q[1]], coli_iq2xxs_grid[q[2]], coli_iq2xxs_grid[q[3]]),
        signs4(aux), ls1(aux >> 28)};
}

/* two IQ3_XXS grid points (4 bytes each) as one 8-byte word */
AVX2 ALWAYS uint64_t iq3_pair(const uint8_t *q) {
    return coli_iq3xxs_grid[q[0]] | (uint64_t)coli_iq3xxs_grid[q[1]] << 32;
}

/* the 8 grid points paired in general registers: 4 vector inserts, not 8 */
AVX2 ALWAYS iq_grp grp_iq3_xxs(const block_iq3_xxs *w, int ib) {
    const uint8_t *q = w->qs + 8 * ib;
    const uint32_t aux = load4(w->qs + COLI_QK_K / 4 + 4 * ib);
    return (iq_grp){words4(iq3_pair(q), iq3_pair(q + 2), iq3_pair(q + 4), iq3_pair(q + 6)), signs4(aux),
                    ls1(aux >> 28)};
}

AVX2 ALWAYS iq_grp grp_iq2_xs(const block_iq2_xs *w, int ib) {
    const uint16_t *q = w->qs + 4 * ib;
    return (iq_grp){
        words4(coli_iq2xs_grid[q[0] & 511], coli_iq2xs_grid[q[1] & 511], coli_iq2xs_grid[q[2] & 511],
               coli_iq2xs_grid[q[3] & 511]),
        words4(k_sign_bytes[q[0] >> 9], k_sign_bytes[q[1] >> 9], k_sign_bytes[q[2] >> 9], k_sign_bytes[q[3] >> 9]),
        ls2(w->scales[ib] & 0xf, w->scales[ib] >> 4)};
}

AVX2 ALWAYS iq_grp grp_iq2_s(const block_iq2_s *w, int ib) {
    return (iq_grp){words4(coli_iq2_s_point(w, ib, 0), coli_iq2_s_point(w, ib, 1), coli_iq2_s_point(w, ib, 2),
                           coli_iq2_s_point(w, ib, 3)),
                    sign_bytes(load4(w->qs + COLI_QK_K / 8 + 4 * ib)), ls2(w->scales[ib] & 0xf, w->scales[ib] >> 4)};
}

AVX2 ALWAYS iq_grp grp_iq3_s(const block_iq3_s *w, int ib) {
    return (iq_grp){words4(coli_iq3_s_pair(w, ib, 0), coli_iq3_s_pair(w, ib, 1), coli_iq3_s_pair(w, ib, 2),
                           coli_iq3_s_pair(w, ib, 3)),
                    sign_bytes(load4(w->signs + 4 * ib)), ls1(w->scales[ib / 2] >> 4 * (ib % 2) & 0xf)};
}

/* the exported pair of a type with a stem##_dots body: the several-token
 * function, and the single-token one as the same body inlined with one
 * token (the compiler drops the token loops) */
#define IQ_PAIR(stem)                                                                                                  \
    AVX2 void coli_vec_dot_##stem##_q8_K_avx2_tokens(int64_t n, const void *vw, const void *vx, size_t xs, float *out, \
                                                     int nt) {                                                         \
        stem##_dots(n, vw, vx, xs, out, nt);                                                                           \
    }                                                                                                                  \
    AVX2 float coli_vec_dot_##stem##_q8_K_avx2(int64_t n, const void *vw, const void *vx) {                            \
        float r;                                                                                                       \
        stem##_dots(n, vw, vx, 0, &r, 1);                                                                              \
        return r;                                                                                                      \
    }

/* Several tokens (vecdot.h): each group decoded once and applied to every
 * token's activations, each super-block's exact sum per token; the float
 * steps of the portable function per token (no contraction), the row's
 * sum times k. The single-token function is the same with one token. */
#define IQ_TOKENS(stem, T, k)                                                                                \
    AVX2 ALWAYS void stem##_dots(int64_t n, const void *vw, const void *vx, size_t xs, float *out, int nt) { \
        const T *w = vw;                                                                                     \
        float sum[COLI_VEC_DOT_MAX_TOKENS] = {0};                                                            \
        for (int64_t b = 0; b < n / COLI_QK_K; b++) {                                                        \
            __m256i acc[COLI_VEC_DOT_MAX_TOKENS];                                                            \
            for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_si256();                                    \
            for (int ib = 0; ib < COLI_QK_K / 32; ib++) {                                                    \
                const iq_grp p = grp_##stem(&w[b], ib);                                                      \
                for (int t = 0; t < nt; t++) {                                                               \
                    const block_q8_K *x = (const block_q8_K *)((const char *)vx + (size_t)t * xs) + b;       \
                    acc[t] = _mm256_add_epi32(acc[t], iq_apply(&p, x->qs + 32 * ib));                        \
                }                                                                                            \
            }                                                                                                \
            const float dw = _cvtsh_ss(w[b].d);                                                              \
            for (int t = 0; t < nt; t++) {                                                                   \
                const block_q8_K *x = (const block_q8_K *)((const char *)vx + (size_t)t * xs) + b;           \
                sum[t] = add_mul(sum[t], dw * x->d, (float)hsum_i32(acc[t]));                                \
            }                                                                                                \
        }                                                                                                    \
        for (int t = 0; t < nt; t++) out[t] = k * sum[t];                                                    \
    }                                                                                                        \
    IQ_PAIR(stem)
IQ_TOKENS(iq2_xxs, block_iq2_xxs, 0.125f)
IQ_TOKENS(iq3_xxs, block_iq3_xxs, 0.25f)
IQ_TOKENS(iq2_xs, block_iq2_xs, 0.125f)
IQ_TOKENS(iq2_s, block_iq2_s, 0.125f)
IQ_TOKENS(iq3_s, block_iq3_s, 1.0f)

/* A row's super-blocks decoded once for many tokens (vecdot.h's
 * coli_iq_decoded): the groups exactly as grp_<type> gives them to the
 * kernels above, stored. */
#define IQ_DECODE(stem, T)                                                                             \
    AVX2 void coli_iq_decode_##stem##_avx2(const void *vw, int64_t b0, int nb, coli_iq_decoded *dst) { \
        const T *w = (const T *)vw + b0;                                                               \
        for (int b = 0; b < nb; b++) {                                                                 \
            coli_iq_decoded *o = &dst[b];                                                              \
            for (int ib = 0; ib < COLI_QK_K / 32; ib++) {                                              \
                const iq_grp p = grp_##stem(&w[b], ib);                                                \
                _mm256_store_si256((__m256i *)(o->g + 32 * ib), p.g);                                  \
                _mm256_store_si256((__m256i *)(o->s + 32 * ib), p.s);                                  \
                _mm256_store_si256((__m256i *)o->ls[ib], p.ls);                                        \
            }                                                                                          \
            o->d = _cvtsh_ss(w[b].d);                                                                  \
        }                                                                                              \
    }
IQ_DECODE(iq2_xxs, block_iq2_xxs)
IQ_DECODE(iq3_xxs, block_iq3_xxs)
IQ_DECODE(iq2_xs, block_iq2_xs)
IQ_DECODE(iq2_s, block_iq2_s)
IQ_DECODE(iq3_s, block_iq3_s)

/* The IQ1 types for 1..4 tokens: per group the grid values (applied by
 * sign_epi8, summed by maddubs with ones) and the shift signs, decoded
 * once; per token the exact sums, then the grid sum plus 1/8 of the shift
 * sum in float and the portable float steps, as the portable functions.
 * IQ1_S's shift sums come from the bsums, IQ1_M's from the activations
 * under -1 / +1 bytes of the shift signs. */
AVX2 ALWAYS const block_q8_K *tok_block(const void *vx, size_t xs, int t, int64_t b) {
    return (const block_q8_K *)((const char *)vx + (size_t)t * xs) + b;
}

AVX2 ALWAYS void iq1_s_dots(int64_t n, const void *vw, const void *vx, size_t xs, float *out, int nt) {
    const block_iq1_s *w = vw;
    float sum[COLI_VEC_DOT_MAX_TOKENS] = {0};
    for (int64_t b = 0; b < n / COLI_QK_K; b++) {
        __m256i acc[COLI_VEC_DOT_MAX_TOKENS];
        int shift[COLI_VEC_DOT_MAX_TOKENS];
        for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_si256(), shift[t] = 0;
        for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
            const unsigned s = w[b].qh[ib] >> 12 & 7;
            const int ls = (int)(2 * s + 1), neg = w[b].qh[ib] >> 15;
            const __m256i g = words4(coli_iq1_s_point(&w[b], ib, 0), coli_iq1_s_point(&w[b], ib, 1),
                                     coli_iq1_s_point(&w[b], ib, 2), coli_iq1_s_point(&w[b], ib, 3));
            for (int t = 0; t < nt; t++) {
                const block_q8_K *x = tok_block(vx, xs, t, b);
                acc[t] = _mm256_add_epi32(acc[t], iq1_group(g, x->qs + 32 * ib, ls1(s)));
                const int bs = x->bsums[2 * ib] + x->bsums[2 * ib + 1];
                shift[t] += ls * (neg ? -bs : bs);
            }
        }
        const float dw = _cvtsh_ss(w[b].d);
        for (int t = 0; t < nt; t++) {
            const float v = (float)hsum_i32(acc[t]) + COLI_IQ1_DELTA * (float)shift[t];
            sum[t] = add_mul(sum[t], dw * tok_block(vx, xs, t, b)->d, v);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = sum[t];
}

AVX2 ALWAYS void iq1_m_dots(int64_t n, const void *vw, const void *vx, size_t xs, float *out, int nt) {
    const block_iq1_m *w = vw;
    const uint64_t minus = 0xffffffffffffffffull, plus = 0x0101010101010101ull;
    float sum[COLI_VEC_DOT_MAX_TOKENS] = {0};
    for (int64_t b = 0; b < n / COLI_QK_K; b++) {
        __m256i acc[COLI_VEC_DOT_MAX_TOKENS], acc2[COLI_VEC_DOT_MAX_TOKENS];
        for (int t = 0; t < nt; t++) acc[t] = acc2[t] = _mm256_setzero_si256();
        for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
            const block_iq1_m *wb = &w[b];
            const __m256i ls = ls2((unsigned)coli_iq1_m_scale(wb, ib, 0), (unsigned)coli_iq1_m_scale(wb, ib, 1));
            const __m256i g = words4(coli_iq1_m_point(wb, ib, 0), coli_iq1_m_point(wb, ib, 1),
                                     coli_iq1_m_point(wb, ib, 2), coli_iq1_m_point(wb, ib, 3));
            const __m256i dv =
                words4(coli_iq1_m_neg(wb, ib, 0) ? minus : plus, coli_iq1_m_neg(wb, ib, 1) ? minus : plus,
                       coli_iq1_m_neg(wb, ib, 2) ? minus : plus, coli_iq1_m_neg(wb, ib, 3) ? minus : plus);
            for (int t = 0; t < nt; t++) {
                const int8_t *q = tok_block(vx, xs, t, b)->qs + 32 * ib;
                acc[t] = _mm256_add_epi32(acc[t], iq1_group(g, q, ls));
                acc2[t] = _mm256_add_epi32(acc2[t], iq1_group(dv, q, ls));
            }
        }
        const float dw = _cvtsh_ss(coli_iq1_m_half(&w[b]));
        for (int t = 0; t < nt; t++) {
            const float v = (float)hsum_i32(acc[t]) + COLI_IQ1_DELTA * (float)hsum_i32(acc2[t]);
            sum[t] = add_mul(sum[t], dw * tok_block(vx, xs, t, b)->d, v);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = sum[t];
}
IQ_PAIR(iq1_s)
IQ_PAIR(iq1_m)

#else /* not x86: never called (coli_cpu_avx2() is 0), present for the linker */

float coli_vec_dot_tq1_0_q8_K_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_tq1_0_q8_K(n, w, x); }
float coli_vec_dot_tq2_0_q8_K_avx2(int64_t n, const void *w, const void *x) { return coli_vec_dot_tq2_0_q8_K(n, w, x); }
#define IQ_DOT(stem)                                                                 \
    float coli_vec_dot_##stem##_q8_K_avx2(int64_t n, const void *w, const void *x) { \
        return coli_vec_dot_##stem##_q8_K(n, w, x);                                  \
    }
IQ_DOT(iq2_xxs)
IQ_DOT(iq3_xxs)
IQ_DOT(iq2_xs)
IQ_DOT(iq2_s)
IQ_DOT(iq3_s)
IQ_DOT(iq1_s)
IQ_DOT(iq1_m)
#define IQ_TOKENS(stem)                                                                                           \
    void coli_vec_dot_##stem##_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t xs, float *out,   \
                                                int nt) {                                                         \
        for (int t = 0; t < nt; t++) out[t] = coli_vec_dot_##stem##_q8_K(n, w, (const char *)x + (size_t)t * xs); \
    }
IQ_TOKENS(iq2_xxs)
IQ_TOKENS(iq3_xxs)
IQ_TOKENS(iq2_xs)
IQ_TOKENS(iq2_s)
IQ_TOKENS(iq3_s)
IQ_TOKENS(iq1_s)
IQ_TOKENS(iq1_m)
#define IQ_DECODE(stem)                                                                          \
    void coli_iq_decode_##stem##_avx2(const void *w, int64_t b0, int nb, coli_iq_decoded *dst) { \
        (void)w, (void)b0, (void)nb, (void)dst;                                                  \
    }
IQ_DECODE(iq2_xxs)
IQ_DECODE(iq3_xxs)
IQ_DECODE(iq2_xs)
IQ_DECODE(iq2_s)
IQ_DECODE(iq3_s)

#endif
