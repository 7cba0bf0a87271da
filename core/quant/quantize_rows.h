/*
 * quantize_rows.h - weight quantizers of the block types beyond Q8_0/Q4_0:
 * the legacy 32-value types (Q4_1, Q5_0, Q5_1), the K-quants (Q2_K..Q6_K),
 * the non-linear IQ4_NL / IQ4_XS, and MXFP4, TQ1_0, TQ2_0
 * (quantize_fp4_ternary.c).
 *
 * Each follows the reference algorithm llama.cpp's llama-quantize runs when
 * no importance matrix is given (quantize_row_*_ref for the legacy types and
 * the K-quants, quantize_iq4_nl / quantize_iq4_xs with their 15-point scale
 * search), with the same float operations in the same order, so a row
 * quantized here has the bytes llama-quantize writes for it. Those taking
 * qw (the importance of each of the n columns, from an imatrix) follow
 * llama.cpp's quantize_row_*_impl with it instead, as llama-quantize
 * --imatrix does; qw NULL keeps the reference algorithm.
 *
 * All take n values at x (n a multiple of the block size: 32 for the legacy
 * types, IQ4_NL and MXFP4, 256 for the K-quants, IQ4_XS, TQ1_0 and TQ2_0)
 * and write n / block
 * blocks at y. Pure functions of the row: no state, thread-safe.
 */
#ifndef COLI_CORE_QUANTIZE_ROWS_H
#define COLI_CORE_QUANTIZE_ROWS_H

#include <stdint.h>

#include "core/quant/quant_blocks.h"

/* The legacy types take qw as the IQ types below (NULL: the reference
 * algorithm); Q4_0's reference quantizer is quant.h's. */
void coli_quantize_row_q4_0_imatrix(const float *x, block_q4_0 *y, int64_t n, const float *qw);
void coli_quantize_row_q4_1(const float *x, block_q4_1 *y, int64_t n, const float *qw);
void coli_quantize_row_q5_0(const float *x, block_q5_0 *y, int64_t n, const float *qw);
void coli_quantize_row_q5_1(const float *x, block_q5_1 *y, int64_t n, const float *qw);
void coli_quantize_row_iq4_nl(const float *x, block_iq4_nl *y, int64_t n, const float *qw);

void coli_quantize_row_q2_K(const float *x, block_q2_K *y, int64_t n, const float *qw);
void coli_quantize_row_q3_K(const float *x, block_q3_K *y, int64_t n, const float *qw);
void coli_quantize_row_q4_K(const float *x, block_q4_K *y, int64_t n, const float *qw);
void coli_quantize_row_q5_K(const float *x, block_q5_K *y, int64_t n, const float *qw);
void coli_quantize_row_q6_K(const float *x, block_q6_K *y, int64_t n, const float *qw);
void coli_quantize_row_iq4_xs(const float *x, block_iq4_xs *y, int64_t n, const float *qw);

void coli_quantize_row_mxfp4(const float *x, block_mxfp4 *y, int64_t n);
void coli_quantize_row_tq1_0(const float *x, block_tq1_0 *y, int64_t n);
void coli_quantize_row_tq2_0(const float *x, block_tq2_0 *y, int64_t n);

/* The IQ grid types (quantize_iq.c), guided by the importance qw of each of
 * the n columns (llama-quantize's quantize_iq2_xxs etc. with an imatrix);
 * qw NULL weighs each value by x^2. */
void coli_quantize_row_iq2_xxs(const float *x, block_iq2_xxs *y, int64_t n, const float *qw);
void coli_quantize_row_iq3_xxs(const float *x, block_iq3_xxs *y, int64_t n, const float *qw);
void coli_quantize_row_iq3_s(const float *x, block_iq3_s *y, int64_t n, const float *qw);
void coli_quantize_row_iq2_s(const float *x, block_iq2_s *y, int64_t n, const float *qw);
void coli_quantize_row_iq2_xs(const float *x, block_iq2_xs *y, int64_t n, const float *qw);
void coli_quantize_row_iq1_s(const float *x, block_iq1_s *y, int64_t n, const float *qw); /* quantize_iq1.c */
void coli_quantize_row_iq1_m(const float *x, block_iq1_m *y, int64_t n, const float *qw); /* quantize_iq1.c */

#endif
