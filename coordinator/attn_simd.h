/*
 * attn_simd.h - the two inner loops of attention over an F32 KV cache,
 * with AVX2 versions chosen at run time. Both paths give the same bits:
 * the vector code does the same multiplies and adds in the same order as
 * the scalar code (8 partial sums, no FMA), so results never depend on
 * the CPU's features.
 */
#ifndef COLI_COORD_ATTN_SIMD_H
#define COLI_COORD_ATTN_SIMD_H

/* sum q[d] * k[d] over n values: 8 partial sums (lane d % 8) combined as
 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the tail. */
float attn_dot_f32(const float *q, const float *k, int n);
/* out[i * out_stride] = attn_dot_f32(q + i * q_stride, k, n) for i < n_q,
 * the same bits; up to 4 independent sums at a time, each k load shared
 * (GQA: the query heads of one KV head against one cached key). */
void attn_dots_f32(const float *q, long q_stride, int n_q, const float *k, int n, float *out, long out_stride);
/* out[d] += p * v[d] for d < n (the product rounded, then the sum). */
void attn_axpy_f32(float *out, float p, const float *v, int n);

#endif
