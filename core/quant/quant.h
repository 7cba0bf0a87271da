/*
 * quant.h - number formats: fp16/bf16 conversion and the GGML Q8_0 / Q4_0
 * block layouts, with the exact rounding rules of llama.cpp so that files we
 * quantize are byte-identical to llama-quantize's (see
 * ../shared/reference/README.md, "Q8_0/Q4_0 weight quantization").
 */
#ifndef COLI_CORE_QUANT_H
#define COLI_CORE_QUANT_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct block_q8_0 {
    uint16_t d;         /* scale, fp16 */
    int8_t qs[COLI_QK]; /* value = d * q */
} block_q8_0;

typedef struct block_q4_0 {
    uint16_t d;              /* scale, fp16 */
    uint8_t qs[COLI_QK / 2]; /* byte j: element j (low nibble), j+16 (high); value = d*(nib-8) */
} block_q4_0;

_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 block is 18 bytes");

float coli_fp16_to_fp32(uint16_t h);
uint16_t coli_fp32_to_fp16(float f); /* round to nearest even */
float coli_bf16_to_fp32(uint16_t h);
uint16_t coli_fp32_to_bf16(float f); /* round to nearest even, NaN kept */

/* Weight quantization, n a multiple of 32 (llama.cpp reference rules:
 * Q8_0 rounds half away from zero, Q4_0 truncates x*id + 8.5). */
void coli_quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n);
void coli_quantize_row_q4_0(const float *x, block_q4_0 *y, int64_t n);
/* Activation quantization as llama.cpp's AVX2 path does it: q = round half
 * to even of x * 127/amax. Used for the matmul input of Q8_0/Q4_0 weights. */
void coli_quantize_act_q8_0(const float *x, block_q8_0 *y, int64_t n);
/* The round half to even int8 of that quantizer (the other activation
 * formats use it too, core/kernels/vecdot_legacy.c). */
int8_t coli_act_round_i8(float v);

/* dst[0..n) = the values of a row of type t (n a multiple of the block size). */
void coli_dequantize_row(coli_dtype t, const void *src, float *dst, int64_t n);
/* Quantize a row of n floats into weight type t (n a multiple of its block):
 * F32 copies, F16/BF16 round, the block types follow llama.cpp's reference
 * quantizers (core/quant/quantize_rows.h); Q8_1/Q8_K (activations) write nothing. */
void coli_quantize_row(coli_dtype t, const float *src, void *dst, int64_t n);
/* The same guided by an importance matrix: qw holds one weight per column
 * of the row (n values; NULL: none). The IQ grid types use it as
 * llama-quantize does; IQ2_XXS and IQ3_XXS fall back to x^2 without it
 * (llama-quantize refuses them without one: coordinator/quantize.c does). */
void coli_quantize_row_imatrix(coli_dtype t, const float *src, void *dst, int64_t n, const float *qw);

#endif
