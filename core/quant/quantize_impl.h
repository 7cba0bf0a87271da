/*
 * quantize_impl.h - private helpers shared by the weight quantizers
 * (quantize_legacy.c, quantize_k.c, quantize_iq4.c). Not part of any API.
 */
#ifndef COLI_CORE_QUANTIZE_IMPL_H
#define COLI_CORE_QUANTIZE_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Below this largest |x| a group counts as all zero (ggml's GROUP_MAX_EPS). */
#define COLI_GROUP_EPS 1e-15f

/* v rounded to the nearest integer, ties to even: the sum with 1.5 * 2^23
 * leaves the integer in the low mantissa bits (llama.cpp's nearest_int; the
 * same as nearbyintf in the default rounding mode). Defined for |v| below
 * 2^22; anything else (NaN, huge) saturates instead of being undefined. */
static inline int coli_nearest_int(float v) {
    if (!(fabsf(v) <= 4194303.0f)) return v > 0 ? 4194303 : (v < 0 ? -4194303 : 0);
    float t = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* (int)v for v in [0, hi], hi above, 0 below or NaN: the legacy quantizers
 * truncate x*id + 0.5 (which the algorithm keeps in range) with a cast. */
static inline int coli_trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* ggml's make_qx_quants (rmse_type 1) with weights w: symmetric codes
 * -nmax..nmax-1 to L offset by +nmax; returns the scale (quantize_k.c). */
float coli_fit_weighted_signed(int n, int nmax, const float *x, const float *w, int8_t *L);

/* ggml's make_qkx3_quants(-0.9, 0.05, 36 steps) with weights w: codes
 * 0..nmax to L, -minimum to *neg_min; returns the scale (quantize_k.c). */
float coli_fit_weighted_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min);

#endif
