/*
 * matmul.h - y = W x for every weight type, the hot spot of the engine.
 *
 * Determinism contract (the scheduler relies on it): the value of y[t][o]
 * depends only on W row o and x row t. Not on n_tok, not on which other
 * rows share the batch, not on the thread count, not on AVX2 vs portable
 * row blocking. So an expert computed for one token alone, in a batch, on a
 * worker or in-process gives the same bits. Work is split over output rows
 * only, never along the dot product.
 *
 * Input rounding follows llama.cpp (so conformance against it holds):
 *   F32 weights: x used as is;  F16: x rounded to fp16;  BF16: x rounded to
 *   bf16;  Q8_0 / Q4_0: x quantized to Q8_0 blocks (coli_quantize_act_q8_0)
 *   and integer block dot products, fp16(d_w)*fp16(d_x)*sum(q_w*q_x) in F32;
 *   Q5_0 / IQ4_NL: Q8_0 blocks too;  Q4_1 / Q5_1: Q8_1 blocks;  Q2_K..Q6_K,
 *   IQ4_XS: Q8_K blocks of 256 (llama.cpp's vec_dot_type, see vecdot.h).
 * AVX2+FMA+F16C kernels are chosen at run time when the CPU has them; the
 * portable C path gives the same results within the conformance tolerances.
 */
#ifndef COLI_CORE_MATMUL_H
#define COLI_CORE_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "core/threadpool.h"

/* Scratch memory for prepared inputs, grown on demand and reused, so the
 * steady state allocates nothing. One per thread of control (not shared
 * between concurrent callers). */
typedef struct coli_scratch {
    void *buf;
    size_t cap;
} coli_scratch;

void coli_scratch_free(coli_scratch *s);
/* A buffer of at least bytes (64-byte aligned) in s, grown if needed (the
 * old contents are not kept). NULL on allocation failure. */
void *coli_scratch_reserve(coli_scratch *s, size_t bytes);
/* Bytes of scratch coli_matmul uses for n_tok inputs of n_in values against
 * wtype weights (0 for F32, whose input is used in place). A caller that
 * shares one scratch between several steps can size it up front. */
size_t coli_matmul_scratch_bytes(coli_dtype wtype, int64_t n_in, int64_t n_tok);

/* y (n_tok, n_out) = x (n_tok, n_in) @ W^T, W: n_out rows of n_in values of
 * type wtype, rows contiguous (row o at o * coli_row_bytes(wtype, n_in)).
 * n_in must be a multiple of the type's block size (32, or 256 for the
 * K-quants and IQ4_XS). Returns 0, COLI_EINVAL / COLI_EUNSUPPORTED (bad
 * shape or type, message set) or COLI_ENOMEM. */
int coli_matmul(coli_pool *pool, coli_scratch *scratch, const void *W, coli_dtype wtype, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y);

/* One y = W x of a coli_matmul_many call (arguments as coli_matmul's). */
typedef struct coli_matmul_op {
    const void *W;
    coli_dtype wtype;
    int64_t n_in, n_out;
    const float *x; /* (n_tok, n_in) */
    int64_t n_tok;
    float *y; /* (n_tok, n_out) */
} coli_matmul_op;

/* At most this many ops share one pool job; more are run in groups. */
#define COLI_MATMUL_MANY_MAX 32

/* Several independent matmuls as one pool job: one wake-up, the output
 * rows of all the matrices split over the threads together. Ops that read
 * the same x (pointer, n_in, n_tok) with the same input rounding share one
 * prepared input. Each op gives the same bits as coli_matmul on it alone
 * (the determinism contract holds per op). The y of an op must not be the
 * x of another. Returns 0, COLI_EINVAL or COLI_ENOMEM. */
int coli_matmul_many(coli_pool *pool, coli_scratch *scratch, const coli_matmul_op *ops, int n_ops);
/* Scratch bytes coli_matmul_many uses for these ops (prepared inputs, the
 * shared ones counted once), for callers that carve one scratch up. */
size_t coli_matmul_many_scratch_bytes(const coli_matmul_op *ops, int n_ops);

/* An observer sees every op's weight and input before it runs (x still the
 * caller's F32 rows): `coli imatrix` collects the squared activations per
 * weight column with it. One per process, NULL to remove; it may be called
 * from any thread that runs matmuls, so it locks what it touches. Set it
 * only while no matmul runs. */
typedef void (*coli_matmul_observer)(void *user, const coli_matmul_op *op);
void coli_matmul_set_observer(coli_matmul_observer fn, void *user);

/* Force the portable path (tests compare the two). 1 = portable only. */
void coli_matmul_force_portable(int on);
/* What coli_matmul uses now (a static string): "portable", "avx2", or
 * "avx2+avxvnni" / "avx2+avx512vnni" where the Q8_0/Q4_0 kernels use that
 * vpdpbusd (the same bits as plain "avx2"). */
const char *coli_matmul_impl(void);

#endif
