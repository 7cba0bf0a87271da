/*
 * matmul_vecdot.c - the matmul path of the block types that have a
 * per-(row, token) dot product (vecdot.h): Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4,
 * the K-quants with IQ4_XS, TQ1_0 / TQ2_0 and the IQ grid types.
 *
 * One table row per weight type names its activation format (llama.cpp's
 * vec_dot_type), how to quantize an input row into it, and the portable,
 * AVX2 and (the K-quants, IQ4_XS and MXFP4) AVX-512 dot products; which
 * one runs is the kernel table's choice (matmul_dispatch.c). The input is
 * quantized once per token into the scratch (whole activation blocks, one
 * row per token); every output value is then one dot product of a weight
 * row and a token row, so its operations depend only on n_in and the path
 * (the determinism contract).
 */
#include <stddef.h>

#include "core/kernels/matmul_impl.h"
#include "core/quant/quant.h"
#include "core/kernels/vecdot.h"

static void s_act_Q8_0(const float *x, void *y, int64_t n) { coli_quantize_act_q8_0(x, y, n); }
static void s_act_Q8_1(const float *x, void *y, int64_t n) { coli_quantize_act_q8_1(x, y, n); }
static void s_act_Q8_K(const float *x, void *y, int64_t n) { coli_quantize_act_q8_K(x, y, n); }

/* weight type, activation format, and the name stem of its dot products
 * (VD512: it has AVX-512 ones too) */
#define VD(T, ACT, stem)                                                                    \
    {                                                                                       \
        COLI_##T, COLI_##ACT, s_act_##ACT, coli_vec_dot_##stem, coli_vec_dot_##stem##_avx2, \
            coli_vec_dot_##stem##_avx2_tokens, NULL, NULL, NULL, 0                          \
    }
#define VD512(T, ACT, stem)                                                                                       \
    {                                                                                                             \
        COLI_##T, COLI_##ACT, s_act_##ACT, coli_vec_dot_##stem, coli_vec_dot_##stem##_avx2,                       \
            coli_vec_dot_##stem##_avx2_tokens, coli_vec_dot_##stem##_avx512, coli_vec_dot_##stem##_avx512_tokens, \
            NULL, 0                                                                                               \
    }
/* an IQ grid type: also a decoder of whole rows (vecdot.h), k its constant */
#define VDIQ(T, stem, k)                                                                              \
    {                                                                                                 \
        COLI_##T, COLI_Q8_K, s_act_Q8_K, coli_vec_dot_##stem##_q8_K, coli_vec_dot_##stem##_q8_K_avx2, \
            coli_vec_dot_##stem##_q8_K_avx2_tokens, NULL, NULL, coli_iq_decode_##stem##_avx2, k       \
    }
/* no several-token AVX2 kernel: the AVX2 path calls the dot per token */
#define VD1(T, ACT, stem) \
    { COLI_##T, COLI_##ACT, s_act_##ACT, coli_vec_dot_##stem, coli_vec_dot_##stem##_avx2, NULL, NULL, NULL, NULL, 0 }
static const mm_vecdot_type s_types[] = {
    VD(Q4_1, Q8_1, q4_1_q8_1),        VD(Q5_0, Q8_0, q5_0_q8_0),      VD(Q5_1, Q8_1, q5_1_q8_1),
    VD(IQ4_NL, Q8_0, iq4_nl_q8_0),    VD512(Q2_K, Q8_K, q2_K_q8_K),   VD512(Q3_K, Q8_K, q3_K_q8_K),
    VD512(Q4_K, Q8_K, q4_K_q8_K),     VD512(Q5_K, Q8_K, q5_K_q8_K),   VD512(Q6_K, Q8_K, q6_K_q8_K),
    VD512(IQ4_XS, Q8_K, iq4_xs_q8_K), VD512(MXFP4, Q8_0, mxfp4_q8_0), VD1(TQ1_0, Q8_K, tq1_0_q8_K),
    VD1(TQ2_0, Q8_K, tq2_0_q8_K),     VDIQ(IQ2_XXS, iq2_xxs, 0.125f), VDIQ(IQ3_XXS, iq3_xxs, 0.25f),
    VDIQ(IQ2_XS, iq2_xs, 0.125f),     VDIQ(IQ3_S, iq3_s, 1.0f),       VDIQ(IQ2_S, iq2_s, 0.125f),
    VD(IQ1_S, Q8_K, iq1_s_q8_K),      VD(IQ1_M, Q8_K, iq1_m_q8_K),
};

const mm_vecdot_type *mm_vecdot_find(coli_dtype wtype) {
    for (size_t i = 0; i < sizeof s_types / sizeof s_types[0]; i++)
        if (s_types[i].wtype == wtype) return &s_types[i];
    return NULL;
}

/* Rows start 64 bytes apart at least, so each token row is cache-aligned. */
size_t mm_vecdot_row_stride(const mm_vecdot_type *v, int64_t n_in) {
    return (coli_row_bytes(v->act, n_in) + 63) & ~(size_t)63;
}

/* The quantizers give the same bytes on both paths (they follow llama.cpp's
 * AVX2 rounding in scalar code), so the prepared input is path-independent. */
void mm_vecdot_prepare(const mm_vecdot_type *v, const float *x, int64_t n_tok, int64_t n_in, uint8_t *xa,
                       size_t stride) {
    for (int64_t t = 0; t < n_tok; t++) v->quantize(x + t * n_in, xa + (size_t)t * stride, n_in);
}

/* How far ahead of the row being read the first token block fetches the
 * weights, in bytes: rows are read one after the other, so a distance in
 * bytes whatever the row length (whole rows ahead put a 14336-wide row's
 * successor 8-12 KiB ahead at its start and at 0 at its end). */
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 4096
#endif

/* The lines of weight bytes [lo, hi) (offsets from W) below end
 * (mm_prefetch_line's read_once). */
static void s_prefetch_span(const mm_job *j, size_t lo, size_t hi, size_t end, int read_once) {
    if (hi > end) hi = end;
    for (size_t off = lo & ~(size_t)63; off < hi; off += 64) mm_prefetch_line((const char *)j->W + off, read_once);
}

/* Super-blocks decoded at a time (a 13 KiB stack buffer): a row is walked
 * in stretches so that any length fits, each token's sum carried from one
 * stretch to the next in super-block order (the kernels' float steps). */
#define IQ_STRETCH 16
#define IQ_TOKENS_MAX 64

/* Row r for tokens t0..t1 through the decoded form (vecdot.h): the bits
 * of the _tokens kernels, the row's groups decoded once per 64 tokens
 * instead of once per 4. */
static void s_iq_decoded_row(const mm_job *j, const uint8_t *w, int64_t r, int64_t t0, int64_t t1) {
    coli_iq_decoded dec[IQ_STRETCH];
    float sum[IQ_TOKENS_MAX];
    const int64_t nb = j->n_in / COLI_QK_K;
    for (int64_t tb = t0; tb < t1; tb += IQ_TOKENS_MAX) {
        const int64_t te = tb + IQ_TOKENS_MAX < t1 ? tb + IQ_TOKENS_MAX : t1;
        for (int64_t t = tb; t < te; t++) sum[t - tb] = 0;
        for (int64_t b0 = 0; b0 < nb; b0 += IQ_STRETCH) {
            const int n = nb - b0 < IQ_STRETCH ? (int)(nb - b0) : IQ_STRETCH;
            j->iq_decode(w, b0, n, dec);
            for (int64_t t = tb; t < te; t += COLI_IQ_DECODED_MAX_TOKENS) {
                const int nt = te - t < COLI_IQ_DECODED_MAX_TOKENS ? (int)(te - t) : COLI_IQ_DECODED_MAX_TOKENS;
                const uint8_t *x = j->xa + (size_t)t * j->xa_stride + (size_t)b0 * sizeof(block_q8_K);
                j->iq_dots(n, dec, x, j->xa_stride, sum + (t - tb), nt);
            }
        }
        for (int64_t t = tb; t < te; t++) j->y[t * j->n_out + r] = j->iq_k * sum[t - tb];
    }
}

/* Rows r0..r1 for all tokens, a block of tokens at a time so that the
 * token rows stay in cache while the chunk's weight rows stream past.
 * Where the type has a several-token kernel, tokens go through it in
 * groups (the same bits as one at a time, see vecdot.h). */
void mm_vecdot_rows(const mm_job *j, int64_t r0, int64_t r1) {
    float out[COLI_VEC_DOT_MAX_TOKENS];
    const size_t ws = j->w_stride, end = (size_t)r1 * ws;
    const int read_once = j->n_tok <= MM_READ_ONCE_TOKENS;
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->token_block) {
        const int64_t t1 = t0 + j->token_block < j->n_tok ? t0 + j->token_block : j->n_tok;
        if (t0 == 0) s_prefetch_span(j, (size_t)r0 * ws, (size_t)r0 * ws + PREFETCH_BYTES, end, read_once);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = j->W + (size_t)r * ws;
            int64_t t = t0;
            if (t0 == 0)
                s_prefetch_span(j, (size_t)r * ws + PREFETCH_BYTES, (size_t)(r + 1) * ws + PREFETCH_BYTES, end,
                                read_once);
            if (j->iq_decode && t1 - t > COLI_VEC_DOT_MAX_TOKENS) {
                s_iq_decoded_row(j, w, r, t, t1);
                continue;
            }
            if (j->dot_tokens)
                for (; t + 1 < t1; t += COLI_VEC_DOT_MAX_TOKENS) {
                    const int nt = t1 - t < COLI_VEC_DOT_MAX_TOKENS ? (int)(t1 - t) : COLI_VEC_DOT_MAX_TOKENS;
                    j->dot_tokens(j->n_in, w, j->xa + (size_t)t * j->xa_stride, j->xa_stride, out, nt);
                    for (int k = 0; k < nt; k++) j->y[(t + k) * j->n_out + r] = out[k];
                }
            for (; t < t1; t++) j->y[t * j->n_out + r] = j->dot(j->n_in, w, j->xa + (size_t)t * j->xa_stride);
        }
    }
}
