/*
 * test_attn_simd.c - the attention inner loops give the scalar code's bits
 * (attn_simd.h): the AVX2 path, when the CPU has it, against the same sums
 * written out here, for lengths with and without a tail.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "coordinator/attn_simd.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 4096.0f - 8.0f;
}

static float dot_ref(const float *q, const float *k, int n) {
    float acc[8] = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8)
        for (int i = 0; i < 8; i++) {
            volatile float p = q[d + i] * k[d + i]; /* rounded product, as the contract says */
            acc[i] += p;
        }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; d < n; d++) {
        volatile float p = q[d] * k[d];
        sum += p;
    }
    return sum;
}

Test(attn_simd, dot_and_axpy_match_scalar_bits) {
    static const int lens[] = {1, 7, 8, 64, 100, 128, 131};
    unsigned seed = 12345;
    float q[131], k[131], out[131], ref[131];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int n = lens[li];
        for (int i = 0; i < n; i++) {
            q[i] = frand(&seed);
            k[i] = frand(&seed);
            ref[i] = out[i] = frand(&seed);
        }
        float got = attn_dot_f32(q, k, n), want = dot_ref(q, k, n);
        cr_assert(memcmp(&got, &want, sizeof got) == 0, "dot n=%d: %.9g vs %.9g", n, got, want);
        const float p = frand(&seed);
        attn_axpy_f32(out, p, k, n);
        for (int i = 0; i < n; i++) {
            volatile float t = p * k[i];
            ref[i] += t;
        }
        cr_assert(memcmp(out, ref, (size_t)n * sizeof(float)) == 0, "axpy n=%d differs", n);
    }
}

Test(attn_simd, grouped_dots_match_single_dots) {
    unsigned seed = 777;
    float q[6 * 136], k[136], out[6 * 3];
    for (int i = 0; i < 6 * 136; i++) q[i] = frand(&seed);
    for (int i = 0; i < 136; i++) k[i] = frand(&seed);
    for (int n_q = 1; n_q <= 6; n_q++)
        for (int n = 121; n <= 136; n += 5) {
            attn_dots_f32(q, 136, n_q, k, n, out, 3);
            for (int i = 0; i < n_q; i++) {
                float want = attn_dot_f32(q + i * 136, k, n);
                cr_assert(memcmp(&out[i * 3], &want, sizeof want) == 0, "n_q %d n %d head %d", n_q, n, i);
            }
        }
}
