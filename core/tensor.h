/*
 * tensor.h - element types and tensor views.
 *
 * A coli_tensor is a view: it never owns its data. Weights point into the
 * mapped model file. Shapes follow GGML: ne[0] is the innermost (contiguous)
 * dimension, so a matrix W of n_out rows of n_in values has ne = {n_in, n_out}
 * and row o starts at o * coli_row_bytes(type, n_in). A 3-D expert tensor
 * has ne = {n_in, n_out, n_expert}; expert e starts at e * n_out rows.
 */
#ifndef COLI_CORE_TENSOR_H
#define COLI_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Values are the GGML type ids, so a GGUF tensor type maps 1:1. The block
 * layouts are ggml's (core/quant/quant_blocks.h). Q8_1 and Q8_K are activation
 * formats only: they never hold weights. */
typedef enum coli_dtype {
    COLI_F32 = 0,
    COLI_F16 = 1,
    COLI_Q4_0 = 2,
    COLI_Q4_1 = 3,
    COLI_Q5_0 = 6,
    COLI_Q5_1 = 7,
    COLI_Q8_0 = 8,
    COLI_Q8_1 = 9,
    COLI_Q2_K = 10,
    COLI_Q3_K = 11,
    COLI_Q4_K = 12,
    COLI_Q5_K = 13,
    COLI_Q6_K = 14,
    COLI_Q8_K = 15,
    COLI_IQ2_XXS = 16,
    COLI_IQ2_XS = 17,
    COLI_IQ3_XXS = 18,
    COLI_IQ1_S = 19,
    COLI_IQ4_NL = 20,
    COLI_IQ3_S = 21,
    COLI_IQ2_S = 22,
    COLI_IQ4_XS = 23,
    COLI_I32 = 26, /* integer tables (deepseek4's ffn_gate_tid2eid), never weights */
    COLI_IQ1_M = 29,
    COLI_BF16 = 30,
    COLI_TQ1_0 = 34,
    COLI_TQ2_0 = 35,
    COLI_MXFP4 = 39,
} coli_dtype;

#define COLI_QK 32    /* values per block of the 32-value types (Q8_0, Q4_0, Q4_1, Q5_x, IQ4_NL, MXFP4) */
#define COLI_QK_K 256 /* values per super-block of the K-quants, IQ4_XS, TQ1_0 and TQ2_0 */
#define COLI_MAX_DIMS 4

/* 1 if t is a type that weights may have and that every path computes. */
int coli_dtype_valid(uint32_t t);
/* Bit (1 << t) set for every valid t (all type ids of the table are < 64:
 * MXFP4 is 39, so the mask is 64 bits wide). */
uint64_t coli_dtype_weight_mask(void);
/* 1 if t is any type of the table (its block size is known), valid or not. */
int coli_dtype_known(uint32_t t);
const char *coli_dtype_name(uint32_t t);                  /* "F32", ..., "type 16" for unknown */
int coli_dtype_from_name(const char *s, coli_dtype *out); /* "Q8_0" -> COLI_Q8_0; 0 or -1 */
int64_t coli_dtype_block_elems(coli_dtype t);             /* 1, 32 or 256; 0 if unknown */
size_t coli_dtype_block_bytes(coli_dtype t);              /* e.g. 4, 2, 34, 18, 144; 0 if unknown */
/* Bytes of a row of n values; n must be a multiple of the block size. */
size_t coli_row_bytes(coli_dtype t, int64_t n);

typedef struct coli_tensor {
    const char *name; /* NUL-terminated, owned by whoever made the view */
    coli_dtype type;
    int n_dims;                /* 1..4 */
    int64_t ne[COLI_MAX_DIMS]; /* unused dims are 1 */
    const void *data;
    size_t nbytes;
} coli_tensor;

int64_t coli_tensor_nelems(const coli_tensor *t);

#endif
