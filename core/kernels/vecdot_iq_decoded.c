/*
 * vecdot_iq_decoded.c - the IQ grid types' dot products over rows decoded
 * once (vecdot.h's coli_iq_decoded), for the tokens of a prefill block.
 *
 * Why: the _tokens kernels of vecdot_lowbit_avx2.c decode each group of 32
 * weights (grid lookups, sign spreading, scales) once per 4 tokens, and at
 * 16-64 tokens that decode is half the work. Here matmul_vecdot.c decodes
 * a stretch of the row once and every token of the block reads it back.
 *
 * The bits: per super-block and token the same exact integer (the groups'
 * magnitudes times the sign-applied activations, pair sums times the odd
 * scales, all summed in int32: adds in another order are the same
 * integer), then the same float step, add_mul(sum, d_w * d_x, isum), in
 * super-block order. The 512-bit variant takes two groups per register,
 * applying the signs by a masked negate instead of sign_epi8 (the same
 * bytes: the signs are never 0, and -(-128) wraps to -128 in both).
 */
#include "core/cpu_features.h"
#include "core/quant/quant_blocks.h"
#include "core/kernels/vecdot.h"

#if COLI_X86
#include <immintrin.h>

#include "core/kernels/vecdot_lowbit_x86.h"

#define AVX2 COLI_TARGET_AVX2
#define AVX512 COLI_TARGET_AVX512
#define ALWAYS static inline __attribute__((always_inline))

AVX2 ALWAYS const block_q8_K *s_tok(const void *x, size_t xs, int t, int b) {
    return (const block_q8_K *)((const char *)x + (size_t)t * xs) + b;
}

AVX2 void coli_iq_decoded_dots_avx2(int nb, const coli_iq_decoded *dec, const void *x, size_t xs, float *sum, int nt) {
    for (int b = 0; b < nb; b++) {
        const coli_iq_decoded *o = &dec[b];
        __m256i acc[COLI_IQ_DECODED_MAX_TOKENS];
        for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_si256();
        for (int ib = 0; ib < COLI_QK_K / 32; ib++) {
            const __m256i g = _mm256_load_si256((const __m256i *)(o->g + 32 * ib));
            const __m256i s = _mm256_load_si256((const __m256i *)(o->s + 32 * ib));
            const __m256i ls = _mm256_load_si256((const __m256i *)o->ls[ib]);
            for (int t = 0; t < nt; t++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(s_tok(x, xs, t, b)->qs + 32 * ib));
                const __m256i p = _mm256_maddubs_epi16(g, _mm256_sign_epi8(xv, s));
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, ls));
            }
        }
        for (int t = 0; t < nt; t++) sum[t] = add_mul(sum[t], o->d * s_tok(x, xs, t, b)->d, (float)hsum_i32(acc[t]));
    }
}

AVX512 void coli_iq_decoded_dots_avx512(int nb, const coli_iq_decoded *dec, const void *x, size_t xs, float *sum,
                                        int nt) {
    for (int b = 0; b < nb; b++) {
        const coli_iq_decoded *o = &dec[b];
        __m512i acc[COLI_IQ_DECODED_MAX_TOKENS];
        for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_si512();
        for (int ip = 0; ip < COLI_QK_K / 64; ip++) { /* groups 2 ip and 2 ip + 1 */
            const __m512i g = _mm512_load_si512((const void *)(o->g + 64 * ip));
            const __m512i ls = _mm512_load_si512((const void *)o->ls[2 * ip]);
            /* the sign bytes' top bits, once per group pair for all tokens */
            const __mmask64 neg = _mm512_movepi8_mask(_mm512_load_si512((const void *)(o->s + 64 * ip)));
            for (int t = 0; t < nt; t++) {
                const __m512i xv = _mm512_loadu_si512((const void *)(s_tok(x, xs, t, b)->qs + 64 * ip));
                const __m512i xneg = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
                acc[t] = _mm512_add_epi32(acc[t], _mm512_madd_epi16(_mm512_maddubs_epi16(g, xneg), ls));
            }
        }
        for (int t = 0; t < nt; t++)
            sum[t] = add_mul(sum[t], o->d * s_tok(x, xs, t, b)->d, (float)_mm512_reduce_add_epi32(acc[t]));
    }
}

#else /* not x86: never called (coli_cpu_avx2() is 0), present for the linker */

void coli_iq_decoded_dots_avx2(int nb, const coli_iq_decoded *dec, const void *x, size_t xs, float *sum, int nt) {
    (void)nb, (void)dec, (void)x, (void)xs, (void)sum, (void)nt;
}
void coli_iq_decoded_dots_avx512(int nb, const coli_iq_decoded *dec, const void *x, size_t xs, float *sum, int nt) {
    (void)nb, (void)dec, (void)x, (void)xs, (void)sum, (void)nt;
}

#endif
