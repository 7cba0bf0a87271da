/*
 * matmul_impl.h - the kernel layer of coli_matmul: the job the kernels
 * read and what each kernel file (matmul_portable.c, matmul_avx2.c,
 * matmul_vecdot.c) offers. The kernel files include only this header and
 * call nothing above them; matmul_dispatch.c picks their functions for a
 * (weight type, instruction set) pair and matmul.c runs them. Not a public
 * interface; tests include it to compare the paths piece by piece.
 *
 * A matmul runs in two steps:
 *   1. prepare the input once (on the calling thread) into the scratch:
 *        F32         x used in place
 *        F16 / BF16  x rounded to fp16 / bf16, stored back as floats
 *        Q8_0 / Q4_0 x quantized to Q8_0: int8 values (n_tok, n_in) and the
 *                    fp16-rounded block scales as floats (n_tok, n_in/32)
 *        the others  x quantized to their activation blocks (Q8_0, Q8_1 or
 *                    Q8_K, matmul_vecdot.c), one row of blocks per token
 *   2. every pool thread takes chunks of output rows from a shared counter
 *      and computes them for all tokens.
 * Each y[t][o] is one dot product whose operation sequence depends only on
 * the path and n_in, never on the tile, chunk or thread that computes it.
 */
#ifndef COLI_CORE_MATMUL_IMPL_H
#define COLI_CORE_MATMUL_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "core/kernels/vecdot.h"

/* Weight rows a job reads only once (decode, a batched decode step: this
 * many tokens at most) are prefetched non-temporal, so that they do not
 * push the activations and the KV cache out of L2; a prefill keeps them
 * cached for its later token tiles (matmul_avx2.c, matmul_vecdot.c). */
#define MM_READ_ONCE_TOKENS 8

/* How far ahead the Q8_0 / Q4_0 tiles fetch the weight rows they will read
 * (matmul_avx2.c's prefetch_ahead). Rows of up to MM_PREFETCH_LINEAR_MAX
 * bytes: the bytes of the tile two tiles on, in address order (one stream,
 * 4.6-20 KiB ahead). Longer rows would put that tile too far ahead
 * (Mixtral's 14336-wide rows: 64 KiB; non-temporal lines, fetched into L1
 * only, are gone before they are read): each row is fetched
 * MM_PREFETCH_ROW_BYTES ahead along itself instead (tools/bench_matmul.c,
 * docs/benchmarks.md). */
#ifndef MM_PREFETCH_LINEAR_MAX
#define MM_PREFETCH_LINEAR_MAX 2560
#endif
#ifndef MM_PREFETCH_ROW_BYTES
#define MM_PREFETCH_ROW_BYTES 2048
#endif
_Static_assert(MM_PREFETCH_LINEAR_MAX >= MM_PREFETCH_ROW_BYTES, "along-row offsets must stay below two rows");

/* The cache line at p, fetched non-temporal when read_once (prefetchnta),
 * else into every level (prefetcht0): the weight streams of both kernel
 * files (MM_READ_ONCE_TOKENS). */
static inline void mm_prefetch_line(const void *p, int read_once) {
    if (read_once)
        __builtin_prefetch(p, 0, 0);
    else
        __builtin_prefetch(p, 0, 3);
}

typedef struct mm_job {
    const uint8_t *W; /* n_out rows of w_stride bytes */
    size_t w_stride;
    coli_dtype wtype;
    int64_t n_in, n_out, n_tok;
    const float *xf; /* F32/F16/BF16: prepared rows, xf_stride floats apart */
    int64_t xf_stride;
    const int8_t *xq;  /* Q8_0/Q4_0: quantized rows, n_in bytes apart (32-byte aligned) */
    const float *xd;   /* Q8_0/Q4_0: block scales, n_in/32 floats per token */
    const uint8_t *xa; /* vecdot types: activation block rows, xa_stride bytes apart */
    size_t xa_stride;
    coli_vec_dot_fn dot;               /* vecdot types: one (row, token) dot product */
    coli_vec_dot_tokens_fn dot_tokens; /* vecdot types: several tokens at once, or NULL */
    float *y;                          /* (n_tok, n_out) */
    int64_t chunk_rows;                /* rows taken per counter increment */
    int64_t token_block;               /* tokens per pass over a chunk (keeps x in L2) */
    coli_iq_decode_fn iq_decode;       /* vecdot IQ grid types: rows decoded once per token block, or NULL */
    coli_iq_decoded_dots_fn iq_dots;   /* ... the dot products over the decoded row */
    float iq_k;
    void (*rows)(const struct mm_job *job, int64_t r0, int64_t r1);
} mm_job;

typedef void (*mm_rows_fn)(const mm_job *job, int64_t r0, int64_t r1);

// ----------------------------------------------------------------------------
// block types with a per-(row, token) dot product (matmul_vecdot.c)
typedef void (*mm_act_quantize_fn)(const float *x, void *y, int64_t n);
/* One weight type's activation format (llama.cpp's vec_dot_type), its
 * quantizer and its dot products on each instruction set; which of them a
 * matmul uses is chosen by the kernel table (matmul_dispatch.c). */
typedef struct mm_vecdot_type {
    coli_dtype wtype;
    coli_dtype act;              /* activation block format: Q8_0, Q8_1 or Q8_K */
    mm_act_quantize_fn quantize; /* one row of floats into act blocks */
    coli_vec_dot_fn portable, avx2;
    coli_vec_dot_tokens_fn avx2_tokens; /* NULL: the AVX2 path calls avx2 per token */
    coli_vec_dot_fn avx512;             /* NULL: none, AVX2 everywhere (same bits where set) */
    coli_vec_dot_tokens_fn avx512_tokens;
    coli_iq_decode_fn iq_decode; /* IQ grid types: decode a row once for a token block (vecdot.h), or NULL */
    float iq_k;                  /* ... and the constant the row's sum is scaled by last */
} mm_vecdot_type;
/* The table row of wtype, or NULL if wtype has a tiled kernel instead. */
const mm_vecdot_type *mm_vecdot_find(coli_dtype wtype);
/* Bytes between token rows of the prepared input (a multiple of 64). */
size_t mm_vecdot_row_stride(const mm_vecdot_type *v, int64_t n_in);
/* Quantize the n_tok rows of x into xa, rows stride bytes apart. */
void mm_vecdot_prepare(const mm_vecdot_type *v, const float *x, int64_t n_tok, int64_t n_in, uint8_t *xa,
                       size_t stride);
/* Output rows r0..r1 of a job whose xa, xa_stride and dot are set. */
void mm_vecdot_rows(const mm_job *job, int64_t r0, int64_t r1);

// ----------------------------------------------------------------------------
// portable C (matmul_portable.c)
mm_rows_fn mm_portable_rows(coli_dtype wtype);
void mm_portable_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf,
                            int64_t xf_stride);
void mm_portable_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd);

// ----------------------------------------------------------------------------
// AVX2 + FMA + F16C (matmul_avx2.c); call only if coli_cpu_avx2()
/* The integer dot of the Q8_0 / Q4_0 tiles: AVX2's maddubs, vpdpbusd of
 * AVX-VNNI or of AVX512-VNNI on 256 bits, or the 512-bit tiles; all give the
 * same bits (matmul_qtile.h). The caller checks the CPU has the one it asks for. */
typedef enum mm_qtile_isa {
    MM_QTILE_AVX2,
    MM_QTILE_AVXVNNI,
    MM_QTILE_AVX512VNNI,
    MM_QTILE_AVX512,
} mm_qtile_isa;
/* The rows kernel of wtype (F32, F16, BF16; Q8_0 / Q4_0 with the tiles of
 * isa); other types get F32's. NULL where the build is not x86. */
mm_rows_fn mm_avx2_rows(coli_dtype wtype, mm_qtile_isa isa);
void mm_avx2_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf, int64_t xf_stride);
void mm_avx2_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd);

#endif
