/*
 * vecdot.h - one dot product of a quantized weight row with a quantized
 * activation row, for the block types that matmul.c runs one (row, token)
 * pair at a time: everything except F32/F16/BF16/Q8_0/Q4_0, which have
 * tiled kernels of their own (matmul_avx2.c, matmul_portable.c).
 *
 * The activation type of each weight type is llama.cpp's vec_dot_type:
 *   Q4_1, Q5_1           -> Q8_1 (block_q8_1)
 *   Q5_0, IQ4_NL         -> Q8_0 (block_q8_0)
 *   Q2_K..Q6_K, IQ4_XS   -> Q8_K (block_q8_K)
 *   MXFP4                -> Q8_0;  TQ1_0, TQ2_0, IQ2_XXS, IQ3_XXS, IQ2_XS, IQ3_S, IQ2_S, IQ1_S, IQ1_M -> Q8_K
 * so results match llama.cpp's CPU backend within float rounding.
 *
 * Every function: n values (a multiple of the type's block size), w the
 * weight row's blocks, x the activation row's blocks; returns the dot
 * product in F32. The sequence of operations depends only on n and the
 * path (portable or AVX2), never on the caller's batch or thread: the
 * determinism contract of matmul.h holds per (row, token).
 */
#ifndef COLI_CORE_VECDOT_H
#define COLI_CORE_VECDOT_H

#include <stddef.h>
#include <stdint.h>

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"

typedef float (*coli_vec_dot_fn)(int64_t n, const void *w, const void *x);

/* Activation quantization (llama.cpp's quantize_row_q8_1 / _q8_K rules). */
void coli_quantize_act_q8_1(const float *x, block_q8_1 *y, int64_t n);
void coli_quantize_act_q8_K(const float *x, block_q8_K *y, int64_t n);

/* Portable C (vecdot_legacy.c, vecdot_k.c). */
float coli_vec_dot_q4_1_q8_1(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_0_q8_0(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_1_q8_1(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq4_nl_q8_0(int64_t n, const void *w, const void *x);
float coli_vec_dot_q2_K_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_q3_K_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_q4_K_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_K_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_q6_K_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq4_xs_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_mxfp4_q8_0(int64_t n, const void *w, const void *x); /* vecdot_fp4_ternary.c */
float coli_vec_dot_tq1_0_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_tq2_0_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq2_xxs_q8_K(int64_t n, const void *w, const void *x); /* vecdot_iq.c */
float coli_vec_dot_iq3_xxs_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq1_m_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq1_s_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq2_s_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq3_s_q8_K(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq2_xs_q8_K(int64_t n, const void *w, const void *x);

/* AVX2 + FMA (vecdot_legacy_avx2.c, vecdot_k_avx2.c); call only if
 * coli_cpu_avx2(). On other targets they are the portable functions. */
float coli_vec_dot_q4_1_q8_1_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_0_q8_0_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_1_q8_1_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq4_nl_q8_0_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_mxfp4_q8_0_avx2(int64_t n, const void *w, const void *x);   /* llama.cpp's AVX2 steps */
float coli_vec_dot_tq1_0_q8_K_avx2(int64_t n, const void *w, const void *x);   /* the portable bits */
float coli_vec_dot_tq2_0_q8_K_avx2(int64_t n, const void *w, const void *x);   /* the portable bits */
float coli_vec_dot_iq2_xxs_q8_K_avx2(int64_t n, const void *w, const void *x); /* the portable bits */
float coli_vec_dot_iq3_xxs_q8_K_avx2(int64_t n, const void *w, const void *x); /* the portable bits */
float coli_vec_dot_iq2_xs_q8_K_avx2(int64_t n, const void *w, const void *x);  /* the portable bits */
float coli_vec_dot_iq3_s_q8_K_avx2(int64_t n, const void *w, const void *x);   /* the portable bits */
float coli_vec_dot_iq2_s_q8_K_avx2(int64_t n, const void *w, const void *x);   /* the portable bits */
float coli_vec_dot_iq1_s_q8_K_avx2(int64_t n, const void *w, const void *x);   /* the portable bits */
float coli_vec_dot_iq1_m_q8_K_avx2(int64_t n, const void *w, const void *x);   /* the portable bits */
float coli_vec_dot_q2_K_q8_K_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_q3_K_q8_K_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_q4_K_q8_K_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_K_q8_K_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_q6_K_q8_K_avx2(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq4_xs_q8_K_avx2(int64_t n, const void *w, const void *x);

/* AVX2, several tokens at once (matmul_vecdot.c uses them for batches):
 * out[t] = the AVX2 dot product of the weight row w with the activation
 * row at x + t * x_stride bytes, t < n_tok (1..4), bit for bit what the
 * single-token function gives; the row is unpacked once for all tokens.
 * On other targets (never called there) they are portable calls. */
typedef void (*coli_vec_dot_tokens_fn)(int64_t n, const void *w, const void *x, size_t x_stride, float *out, int n_tok);
#define COLI_VEC_DOT_MAX_TOKENS 4
void coli_vec_dot_q2_K_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_q3_K_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_q4_K_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_q5_K_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_q6_K_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_iq4_xs_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_iq2_xxs_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                           int n_tok);
void coli_vec_dot_iq3_xxs_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                           int n_tok);
void coli_vec_dot_iq2_xs_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_iq2_s_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                         int n_tok);
void coli_vec_dot_iq3_s_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                         int n_tok);
void coli_vec_dot_iq1_s_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                         int n_tok);
void coli_vec_dot_iq1_m_q8_K_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                         int n_tok);
void coli_vec_dot_q4_1_q8_1_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_q5_0_q8_0_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_q5_1_q8_1_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                        int n_tok);
void coli_vec_dot_iq4_nl_q8_0_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_mxfp4_q8_0_avx2_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                         int n_tok);

/* AVX-512 BW/DQ/VNNI (vecdot_k_avx512.c); call only if coli_cpu_avx512().
 * Each returns exactly the bits of its AVX2 namesake above (same integer
 * sums per super-block, same float steps), in 512-bit registers; the
 * _tokens ones as the AVX2 _tokens. On other targets: portable calls. */
float coli_vec_dot_q2_K_q8_K_avx512(int64_t n, const void *w, const void *x);
float coli_vec_dot_q3_K_q8_K_avx512(int64_t n, const void *w, const void *x);
float coli_vec_dot_q4_K_q8_K_avx512(int64_t n, const void *w, const void *x);
float coli_vec_dot_q5_K_q8_K_avx512(int64_t n, const void *w, const void *x);
float coli_vec_dot_q6_K_q8_K_avx512(int64_t n, const void *w, const void *x);
float coli_vec_dot_iq4_xs_q8_K_avx512(int64_t n, const void *w, const void *x);
void coli_vec_dot_q2_K_q8_K_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_q3_K_q8_K_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_q4_K_q8_K_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_q5_K_q8_K_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_q6_K_q8_K_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                          int n_tok);
void coli_vec_dot_iq4_xs_q8_K_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                            int n_tok);
/* vecdot_mxfp4_avx512.c: the bits of coli_vec_dot_mxfp4_q8_0_avx2 (and its _tokens) */
float coli_vec_dot_mxfp4_q8_0_avx512(int64_t n, const void *w, const void *x);
void coli_vec_dot_mxfp4_q8_0_avx512_tokens(int64_t n, const void *w, const void *x, size_t x_stride, float *out,
                                           int n_tok);

/* The IQ grid types (IQ2_XXS, IQ3_XXS, IQ2_XS, IQ2_S, IQ3_S) decoded once
 * per weight row for a whole block of tokens (matmul_vecdot.c): each group
 * of 32 values as the AVX2 kernels apply it (vecdot_lowbit_avx2.c), so a
 * prefill stops paying the grid lookups and sign spreading once per 4
 * tokens. g: the magnitudes; s: the signs as -1 / +1 bytes; ls: the odd
 * scales in the 16-bit lanes madd pairs them with; d: the super-block's
 * fp16 scale, widened. */
typedef struct coli_iq_decoded {
    uint8_t g[COLI_QK_K];
    int8_t s[COLI_QK_K];
    int16_t ls[COLI_QK_K / 32][16];
    float d;
} __attribute__((aligned(64))) coli_iq_decoded;

/* Super-blocks b0 .. b0 + nb - 1 of the weight row w into dst (AVX2; call
 * only if coli_cpu_avx2()). */
typedef void (*coli_iq_decode_fn)(const void *w, int64_t b0, int nb, coli_iq_decoded *dst);
void coli_iq_decode_iq2_xxs_avx2(const void *w, int64_t b0, int nb, coli_iq_decoded *dst);
void coli_iq_decode_iq3_xxs_avx2(const void *w, int64_t b0, int nb, coli_iq_decoded *dst);
void coli_iq_decode_iq2_xs_avx2(const void *w, int64_t b0, int nb, coli_iq_decoded *dst);
void coli_iq_decode_iq2_s_avx2(const void *w, int64_t b0, int nb, coli_iq_decoded *dst);
void coli_iq_decode_iq3_s_avx2(const void *w, int64_t b0, int nb, coli_iq_decoded *dst);

/* The decoded super-blocks against n_tok (1..COLI_IQ_DECODED_MAX_TOKENS)
 * activation rows, x + t * x_stride bytes pointing at each row's block of
 * the first one: sum[t] += its float steps, super-block after super-block,
 * exactly as the _tokens kernel makes them (the row's result is then the
 * type's constant times sum[t], those kernels' last step). The same bits in
 * 256-bit (vecdot_iq_decoded.c) and 512-bit registers. */
#define COLI_IQ_DECODED_MAX_TOKENS 8
typedef void (*coli_iq_decoded_dots_fn)(int nb, const coli_iq_decoded *dec, const void *x, size_t x_stride, float *sum,
                                        int n_tok);
void coli_iq_decoded_dots_avx2(int nb, const coli_iq_decoded *dec, const void *x, size_t x_stride, float *sum,
                               int n_tok);
void coli_iq_decoded_dots_avx512(int nb, const coli_iq_decoded *dec, const void *x, size_t x_stride, float *sum,
                                 int n_tok);

#endif
