/*
 * matmul_impl.h - what matmul.c shares with its two kernel files
 * (matmul_portable.c, matmul_avx2.c). Not a public interface; tests include
 * it to compare the two paths piece by piece.
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
    void (*rows)(const struct mm_job *job, int64_t r0, int64_t r1);
} mm_job;

typedef void (*mm_rows_fn)(const mm_job *job, int64_t r0, int64_t r1);

/* Round-half-even int8 of llama.cpp's AVX2 activation quantizer (quant.c). */
int8_t coli_act_round_i8(float v);

/* ---- block types with a per-(row, token) dot product (matmul_vecdot.c) ---- */
typedef struct mm_vecdot_type mm_vecdot_type;
/* The table row of wtype, or NULL if wtype has a tiled kernel instead. */
const mm_vecdot_type *mm_vecdot_find(coli_dtype wtype);
/* Its activation format (COLI_Q8_0, COLI_Q8_1 or COLI_Q8_K): inputs of two
 * weight types with the same one are shared by coli_matmul_many. */
coli_dtype mm_vecdot_act_type(const mm_vecdot_type *v);
/* Bytes between token rows of the prepared input (a multiple of 64). */
size_t mm_vecdot_row_stride(const mm_vecdot_type *v, int64_t n_in);
/* The AVX2 dot product if avx2 (the caller checked coli_cpu_avx2), else the
 * portable one; on AVX2, the 512-bit one where the type has one, the CPU
 * has coli_cpu_avx512() and mm_avx2_skip_vnni does not skip MM_SKIP_AVX512
 * (the same bits: vecdot.h). */
coli_vec_dot_fn mm_vecdot_fn(const mm_vecdot_type *v, int avx2);
/* Its several-token kernel on that path (same bits as mm_vecdot_fn's), or NULL. */
coli_vec_dot_tokens_fn mm_vecdot_tokens_fn(const mm_vecdot_type *v, int avx2);
/* Quantize the n_tok rows of x into xa, rows stride bytes apart. */
void mm_vecdot_prepare(const mm_vecdot_type *v, const float *x, int64_t n_tok, int64_t n_in, uint8_t *xa,
                       size_t stride);
/* Output rows r0..r1 of a job whose xa, xa_stride and dot are set. */
void mm_vecdot_rows(const mm_job *job, int64_t r0, int64_t r1);

/* ---- portable C (matmul_portable.c) ---- */
mm_rows_fn mm_portable_rows(coli_dtype wtype);
void mm_portable_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf,
                            int64_t xf_stride);
void mm_portable_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd);

/* ---- AVX2 + FMA + F16C (matmul_avx2.c); call only if coli_cpu_avx2() ---- */
mm_rows_fn mm_avx2_rows(coli_dtype wtype);
/* Q8_0 / Q4_0 skip the tiles in mask even where the CPU has them (tests
 * compare them, which must give the same bits); 0: the best one, in the
 * order 512-bit, AVX-VNNI, AVX512-VNNI on 256 bits. With all bits set they
 * use AVX2's maddubs. */
#define MM_SKIP_AVXVNNI 1
#define MM_SKIP_AVX512VNNI 2
#define MM_SKIP_AVX512 4
#define MM_SKIP_ALL_VNNI (MM_SKIP_AVXVNNI | MM_SKIP_AVX512VNNI | MM_SKIP_AVX512)
void mm_avx2_skip_vnni(int mask);
/* The mask last given to mm_avx2_skip_vnni (x86 only): MM_SKIP_AVX512 also
 * gives Q4_K, Q5_K, Q6_K and IQ4_XS their AVX2 dot products instead of the
 * 512-bit ones (matmul_vecdot.c; the same bits). */
int mm_avx2_skipped(void);
/* "avx2", "avx2+avxvnni", "avx2+avx512vnni" or "avx2+avx512": what mm_avx2_rows gives
 * Q8_0 / Q4_0 now (coli_matmul_impl); a static string. */
const char *mm_avx2_impl_name(void);
void mm_avx2_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf, int64_t xf_stride);
void mm_avx2_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd);

#endif
