/* attn_simd.c - see attn_simd.h. */
#include "coordinator/attn_simd.h"

#include "core/cpu_features.h"

#if COLI_X86
#include <immintrin.h>
#endif

static float s_dot_portable(const float *q, const float *k, int n) {
    float acc[8] = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8)
        for (int i = 0; i < 8; i++) acc[i] += q[d + i] * k[d + i];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; d < n; d++) sum += q[d] * k[d];
    return sum;
}

static void s_axpy_portable(float *out, float p, const float *v, int n) {
    for (int d = 0; d < n; d++) out[d] += p * v[d];
}

#if COLI_X86
/* mul and add kept apart (no contraction into FMA): the scalar bits */
#define SAME_BITS __attribute__((optimize("fp-contract=off")))

COLI_TARGET_AVX2 SAME_BITS static float dot_avx2(const float *q, const float *k, int n) {
    __m256 acc = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= n; d += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d)));
    float a[8];
    _mm256_storeu_ps(a, acc);
    float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; d < n; d++) sum += q[d] * k[d];
    return sum;
}

/* 4 of dot_avx2 side by side: 4 independent chains hide the add latency */
COLI_TARGET_AVX2 SAME_BITS static void dot4_avx2(const float *q, long qs, const float *k, int n, float *out, long os) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        const __m256 kv = _mm256_loadu_ps(k + d);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(q + d), kv));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(q + qs + d), kv));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(_mm256_loadu_ps(q + 2 * qs + d), kv));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(_mm256_loadu_ps(q + 3 * qs + d), kv));
    }
    const __m256 acc[4] = {a0, a1, a2, a3};
    for (int i = 0; i < 4; i++) {
        float a[8];
        _mm256_storeu_ps(a, acc[i]);
        float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        for (int t = d; t < n; t++) sum += q[i * qs + t] * k[t];
        out[i * os] = sum;
    }
}

COLI_TARGET_AVX2 SAME_BITS static void axpy_avx2(float *out, float p, const float *v, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_loadu_ps(out + d), _mm256_mul_ps(pv, _mm256_loadu_ps(v + d))));
    for (; d < n; d++) out[d] += p * v[d];
}
#endif

float attn_dot_f32(const float *q, const float *k, int n) {
#if COLI_X86
    if (coli_cpu_avx2()) return dot_avx2(q, k, n);
#endif
    return s_dot_portable(q, k, n);
}

void attn_dots_f32(const float *q, long q_stride, int n_q, const float *k, int n, float *out, long out_stride) {
    int i = 0;
#if COLI_X86
    if (coli_cpu_avx2())
        for (; i + 4 <= n_q; i += 4) dot4_avx2(q + i * q_stride, q_stride, k, n, out + i * out_stride, out_stride);
#endif
    for (; i < n_q; i++) out[i * out_stride] = attn_dot_f32(q + i * q_stride, k, n);
}

void attn_axpy_f32(float *out, float p, const float *v, int n) {
#if COLI_X86
    if (coli_cpu_avx2()) {
        axpy_avx2(out, p, v, n);
        return;
    }
#endif
    s_axpy_portable(out, p, v, n);
}
