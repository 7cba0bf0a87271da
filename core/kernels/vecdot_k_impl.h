/*
 * vecdot_k_impl.h - internals shared by the portable, AVX2 and AVX-512
 * K-quant code (vecdot_k.c, vecdot_k_avx2.c, vecdot_k_avx512.c): the packed
 * sub-block scales of the K-quants and IQ4_XS unpacked into plain
 * integers, so all read the formats the same way (layouts as
 * ggml-common.h defines them, see quant_blocks.h), the AVX2 Q8_K
 * quantizer, and (where a file defines COLI_VECDOT_K_SIMD first) the float
 * steps the AVX2 and AVX-512 kernels share, so that both give the same
 * bits by construction rather than by two copies kept alike.
 */
#ifndef COLI_CORE_VECDOT_K_IMPL_H
#define COLI_CORE_VECDOT_K_IMPL_H

#include <stdint.h>
#include <string.h>

#include "core/cpu_features.h"
#include "core/quant/quant_blocks.h"

/* Q4_K / Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes. Scale j < 4 is
 * the low 6 bits of byte j, min j < 4 those of byte j+4; for j >= 4 the
 * low 4 bits sit in byte j+4 (scale: low nibble, min: high nibble) and the
 * top 2 bits in the spare top bits of bytes j-4 (scale) and j (min).
 * Unpacked four at a time into words whose little-endian bytes are scales
 * 0..7 (u[0], u[1]) and mins 0..7 (u[2], u[3]), each 0..63. (Words, not
 * bytes, so that SIMD code can build a register from them directly.) */
static inline void coli_q4k_scale_words(const uint8_t packed[COLI_K_SCALE_SIZE], uint32_t u[4]) {
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t p[3];
    memcpy(p, packed, sizeof p);
    u[0] = p[0] & low6;                                        /* scales 0..3 */
    u[1] = (p[2] & low4) | (((p[0] >> 6) & low2) << 4);        /* scales 4..7 */
    u[2] = p[1] & low6;                                        /* mins 0..3 */
    u[3] = ((p[2] >> 4) & low4) | (((p[1] >> 6) & low2) << 4); /* mins 4..7 */
}

/* out[0..8) = scales, out[8..16) = mins */
static inline void coli_q4k_scales_mins(const uint8_t packed[COLI_K_SCALE_SIZE], uint8_t out[16]) {
    uint32_t u[4];
    coli_q4k_scale_words(packed, u);
    memcpy(out, u, sizeof u);
}

/* Q3_K: 16 scales of 6 bits in 12 bytes, stored with a bias of 32. Scale j
 * has its low 4 bits in byte j (j < 8, low nibble) or j-8 (high nibble),
 * and its top 2 bits at bit 2*(j/4) of byte 8 + j%4. Unpacked into words
 * whose little-endian bytes are the biased scales 0..15 (0..63). */
static inline void coli_q3k_scale_words(const uint8_t packed[12], uint32_t u[4]) {
    const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t p[3];
    memcpy(p, packed, sizeof p);
    u[0] = (p[0] & low4) | (((p[2] >> 0) & low2) << 4);
    u[1] = (p[1] & low4) | (((p[2] >> 2) & low2) << 4);
    u[2] = ((p[0] >> 4) & low4) | (((p[2] >> 4) & low2) << 4);
    u[3] = ((p[1] >> 4) & low4) | (((p[2] >> 6) & low2) << 4);
}

/* out[j] = scale j - 32, in -32..31 */
static inline void coli_q3k_scales(const uint8_t packed[12], int8_t out[16]) {
    uint32_t u[4];
    coli_q3k_scale_words(packed, u);
    memcpy(out, u, sizeof u);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(out[j] - 32);
}

/* IQ4_XS: scale of sub-block ib (0..7, 32 values each), 6 bits split into
 * a nibble of scales_l and 2 bits of scales_h, biased by 32: -32..31. */
static inline int coli_iq4xs_scale(const block_iq4_xs *b, int ib) {
    int low = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
    int high = (b->scales_h >> (2 * ib)) & 3;
    return (low | (high << 4)) - 32;
}

/* The two implementations of coli_quantize_act_q8_K (vecdot.h), which
 * calls the AVX2 one when coli_cpu_avx2(): the same bytes for every input
 * (vecdot_k.c states the rules), the AVX2 one several times faster. */
void coli_quantize_act_q8_K_portable(const float *x, block_q8_K *y, int64_t n);
void coli_quantize_act_q8_K_avx2(const float *x, block_q8_K *y, int64_t n);

#if defined(COLI_VECDOT_K_SIMD) && COLI_X86
/* ---- what the AVX2 and AVX-512 kernels share ------------------------------
 *
 * Both keep a super-block's exact integer sums in 8 int32 lanes (the
 * AVX-512 kernels fold their 16 lanes to these 8 first: integer adds in
 * any order give the same integers), then take the very same float steps
 * below, so their results are equal bit for bit. The functions are AVX2
 * code; GCC inlines them into AVX-512 functions too (a subset target). */
#include <immintrin.h>

#define VK_INLINE static inline __attribute__((always_inline)) COLI_TARGET_AVX2
#define QK_K COLI_QK_K
#define MAX_TOKENS COLI_VEC_DOT_MAX_TOKENS
/* fully unrolled sub-block loops: shift counts and shuffle masks become
 * immediates/constants instead of being computed at run time */
#define UNROLL _Pragma("GCC unroll 8")

VK_INLINE float hsum128_ps(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

VK_INLINE float hsum_ps(__m256 v) {
    return hsum128_ps(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

VK_INLINE __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Q4_K / Q5_K: bytes 0..7 = scales, 8..15 = mins (built in registers: a
 * byte array stored then loaded whole would stall store forwarding) */
VK_INLINE __m128i q4k_scales_mins(const uint8_t *packed) {
    uint32_t u[4];
    coli_q4k_scale_words(packed, u);
    return _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
}

/* Q4_K / Q5_K minimums: 8 mins (bytes 8..15 of the unpacked scales) times
 * the activation sums of their 32-value sub-blocks (pairs of bsums) */
VK_INLINE __m128i mins_dot_bsums(__m128i scales_mins, const int16_t *bsums) {
    __m256i bs = load256(bsums);
    __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scales_mins, 8)), pairs);
}

/* ---- dot products ----------------------------------------------------------
 *
 * Each type's kernel takes nt activation rows (1..4, a constant once
 * inlined): the weight block is unpacked once and serves every row, and
 * each row gets the very same operations whatever nt is, so the _tokens
 * entry points return the bits of single calls. */

/* the entry points of one type on one path (suffix avx2 or avx512, target
 * its function attribute): the single dot product and the one for n_tok
 * (1..4) activation rows x_stride bytes apart (vecdot.h) */
#define ENTRY_POINTS(type, kernel, suffix, target)                                                                     \
    target float coli_vec_dot_##type##_q8_K_##suffix(int64_t n, const void *w, const void *x) {                        \
        const block_q8_K *xs[1] = {x};                                                                                 \
        float out;                                                                                                     \
        kernel(1, n, w, xs, &out);                                                                                     \
        return out;                                                                                                    \
    }                                                                                                                  \
    target void coli_vec_dot_##type##_q8_K_##suffix##_tokens(int64_t n, const void *w, const void *x, size_t x_stride, \
                                                             float *out, int n_tok) {                                  \
        const block_q8_K *xs[MAX_TOKENS];                                                                              \
        for (int t = 0; t < n_tok && t < MAX_TOKENS; t++)                                                              \
            xs[t] = (const block_q8_K *)((const uint8_t *)x + t * x_stride);                                           \
        switch (n_tok) {                                                                                               \
        case 1: kernel(1, n, w, xs, out); break;                                                                       \
        case 2: kernel(2, n, w, xs, out); break;                                                                       \
        case 3: kernel(3, n, w, xs, out); break;                                                                       \
        case 4: kernel(4, n, w, xs, out); break;                                                                       \
        default: break;                                                                                                \
        }                                                                                                              \
    }

typedef struct token_acc {
    __m256 acc;     /* d-scaled integer sums, 8 lanes */
    __m256 acc_min; /* dmin-scaled minimum sums (types with minimums) */
} token_acc;

VK_INLINE void acc_zero(token_acc *a, int nt) {
    UNROLL
    for (int t = 0; t < nt; t++) a[t].acc = a[t].acc_min = _mm256_setzero_ps();
}

VK_INLINE void acc_add(token_acc *a, float d, __m256i isum) {
    a->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), a->acc);
}

VK_INLINE void acc_add_min(token_acc *a, float dmin, __m256i msum) {
    a->acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), a->acc_min);
}

VK_INLINE void acc_store(const token_acc *a, int nt, float *out) {
    UNROLL
    for (int t = 0; t < nt; t++) out[t] = hsum_ps(a[t].acc) - hsum_ps(a[t].acc_min);
}

/* Q4_K / Q5_K: the float step of block b per row: d * isum, and dmin
 * times the minimums against the row's bsums */
VK_INLINE void q4k_block_end(int nt, uint16_t d16, uint16_t dmin16, __m128i scales_mins, const block_q8_K *const *xs,
                             int64_t b, const __m256i *isum, token_acc *a) {
    const float d = _cvtsh_ss(d16), dmin = _cvtsh_ss(dmin16);
    UNROLL
    for (int t = 0; t < nt; t++) {
        __m128i msum = mins_dot_bsums(scales_mins, xs[t][b].bsums);
        acc_add(&a[t], d * xs[t][b].d, isum[t]);
        acc_add_min(&a[t], dmin * xs[t][b].d, _mm256_zextsi128_si256(msum));
    }
}

/* Q6_K: the float step of block b per row: d * (isum - 32 * the sum over
 * sub-blocks of scale * bsum), the -32 of every quant; sc: the 16 scales */
VK_INLINE void q6k_block_end(int nt, uint16_t d16, __m128i sc, const block_q8_K *const *xs, int64_t b,
                             const __m256i *isum, token_acc *a) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    const float d = _cvtsh_ss(d16);
    UNROLL
    for (int t = 0; t < nt; t++) {
        __m256i offset = _mm256_madd_epi16(sc16, load256(xs[t][b].bsums));
        acc_add(&a[t], d * xs[t][b].d, _mm256_sub_epi32(isum[t], _mm256_slli_epi32(offset, 5)));
    }
}

#elif defined(COLI_VECDOT_K_SIMD) /* not x86: the SIMD entry points are never called
                                   * (coli_cpu_avx2() is 0), present for the linker */
#define PORTABLE_ENTRY_POINTS(type, suffix)                                                                           \
    float coli_vec_dot_##type##_q8_K_##suffix(int64_t n, const void *w, const void *x) {                              \
        return coli_vec_dot_##type##_q8_K(n, w, x);                                                                   \
    }                                                                                                                 \
    void coli_vec_dot_##type##_q8_K_##suffix##_tokens(int64_t n, const void *w, const void *x, size_t x_stride,       \
                                                      float *out, int n_tok) {                                        \
        for (int t = 0; t < n_tok; t++) out[t] = coli_vec_dot_##type##_q8_K(n, w, (const uint8_t *)x + t * x_stride); \
    }
#endif /* COLI_VECDOT_K_SIMD */

#endif
