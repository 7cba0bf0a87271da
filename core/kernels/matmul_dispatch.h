/*
 * matmul_dispatch.h - the kernel table of coli_matmul: for each weight type
 * on the instruction set in use, how the input is prepared and which row
 * kernel and dot products run. Chosen once per (weight type, instruction
 * set) pair from core/cpu_features.h, in one place (matmul_dispatch.c);
 * matmul.c reads the entry and calls down, the kernels never call back.
 * Not a public interface; tests and tools/bench_matmul.c use the switches.
 */
#ifndef COLI_CORE_MATMUL_DISPATCH_H
#define COLI_CORE_MATMUL_DISPATCH_H

#include "core/kernels/matmul_impl.h"

/* The form of a type's prepared input (matmul_impl.h's step 1). */
typedef enum mm_input_form {
    MM_IN_F32,     /* x used in place */
    MM_IN_ROUNDED, /* x rounded to fp16 / bf16 by round, as floats (xf) */
    MM_IN_Q8_0,    /* x quantized to Q8_0 by quantize: values xq, scales xd */
    MM_IN_BLOCKS,  /* x quantized to blocks' activation format (xa) */
} mm_input_form;

typedef void (*mm_round_fn)(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf,
                            int64_t xf_stride);
typedef void (*mm_quantize_fn)(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd);

typedef struct mm_kernel {
    mm_input_form input;
    int input_kind;                    /* ops of one x with equal kinds share its prepared input */
    mm_round_fn round;                 /* MM_IN_ROUNDED */
    mm_quantize_fn quantize;           /* MM_IN_Q8_0 */
    const mm_vecdot_type *blocks;      /* MM_IN_BLOCKS: the activation format and its quantizer */
    mm_rows_fn rows;                   /* output rows r0..r1 of a prepared job */
    coli_vec_dot_fn dot;               /* MM_IN_BLOCKS: one (row, token) dot product */
    coli_vec_dot_tokens_fn dot_tokens; /* MM_IN_BLOCKS: several tokens at once, or NULL */
    coli_iq_decode_fn iq_decode;       /* MM_IN_BLOCKS, IQ grid types: decode rows once per token block */
    coli_iq_decoded_dots_fn iq_dots;   /* ... and the dots over them (NULL: no decoded path) */
} mm_kernel;

/* The entry of wtype (a coli_dtype_valid type) on the path in use now:
 * portable if coli_matmul_force_portable or the CPU lacks AVX2, else AVX2
 * with the best tiles and dot products mm_skip_vnni leaves. */
const mm_kernel *mm_kernel_for(coli_dtype wtype);

/* Q8_0 / Q4_0 skip the tiles in mask even where the CPU has them (tests
 * compare them, which must give the same bits); 0: the best one, in the
 * order 512-bit, AVX-VNNI, AVX512-VNNI on 256 bits. With all bits set they
 * use AVX2's maddubs. MM_SKIP_AVX512 also gives Q4_K, Q5_K, Q6_K, IQ4_XS
 * and MXFP4 their AVX2 dot products instead of the 512-bit ones (the same
 * bits, vecdot.h). */
#define MM_SKIP_AVXVNNI 1
#define MM_SKIP_AVX512VNNI 2
#define MM_SKIP_AVX512 4
#define MM_SKIP_ALL_VNNI (MM_SKIP_AVXVNNI | MM_SKIP_AVX512VNNI | MM_SKIP_AVX512)
void mm_skip_vnni(int mask);

#endif
