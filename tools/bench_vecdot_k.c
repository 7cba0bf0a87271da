/*
 * bench_vecdot_k - single-thread speed of the K-quant and IQ4_XS dot
 * products (vecdot_k.c, vecdot_k_avx2.c): one Q8_K activation row against
 * many weight rows, as a decode step does.
 *
 *   bench_vecdot_k [--hot] [--seconds S] [--cols C]
 *
 * Default: the weight rows together take 256 MiB, more than the caches, so
 * GB/s (weight bytes per second) is bounded by memory bandwidth. --hot
 * uses 256 KiB of rows, which stay in cache: the kernel's own speed.
 * Each figure is the best of 5 windows (see measure). "x4" runs each row
 * against 4 activation rows in one _tokens call (as prefill does) and
 * counts the row's bytes 4 times: comparable to the single call's GB/s.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu_features.h"
#include "core/quant/quant.h"
#include "core/kernels/vecdot.h"

typedef struct kernel {
    const char *name;
    coli_dtype t;
    coli_vec_dot_fn portable, avx2;
    coli_vec_dot_tokens_fn avx2_tokens;
} kernel;

static const kernel k_kernels[] = {
    {"Q4_K", COLI_Q4_K, coli_vec_dot_q4_K_q8_K, coli_vec_dot_q4_K_q8_K_avx2, coli_vec_dot_q4_K_q8_K_avx2_tokens},
    {"Q5_K", COLI_Q5_K, coli_vec_dot_q5_K_q8_K, coli_vec_dot_q5_K_q8_K_avx2, coli_vec_dot_q5_K_q8_K_avx2_tokens},
    {"Q6_K", COLI_Q6_K, coli_vec_dot_q6_K_q8_K, coli_vec_dot_q6_K_q8_K_avx2, coli_vec_dot_q6_K_q8_K_avx2_tokens},
    {"Q3_K", COLI_Q3_K, coli_vec_dot_q3_K_q8_K, coli_vec_dot_q3_K_q8_K_avx2, coli_vec_dot_q3_K_q8_K_avx2_tokens},
    {"Q2_K", COLI_Q2_K, coli_vec_dot_q2_K_q8_K, coli_vec_dot_q2_K_q8_K_avx2, coli_vec_dot_q2_K_q8_K_avx2_tokens},
    {"IQ4_XS", COLI_IQ4_XS, coli_vec_dot_iq4_xs_q8_K, coli_vec_dot_iq4_xs_q8_K_avx2,
     coli_vec_dot_iq4_xs_q8_K_avx2_tokens},
};

/* this thread's CPU time: on a shared machine, time spent descheduled is
 * not the kernel's */
static double s_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned s_next_rand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Random bytes make valid blocks of every type except for their fp16
 * scales, which may be Inf/NaN: speed does not depend on the values. */
static uint8_t *s_random_bytes(size_t n) {
    uint8_t *p = malloc(n);
    unsigned seed = 12345;
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)s_next_rand(&seed);
    return p;
}

typedef struct bench_case {
    coli_vec_dot_fn single;    /* or NULL: x4 */
    coli_vec_dot_tokens_fn x4; /* called with 4 rows */
    const uint8_t *w;
    size_t row_bytes;
    int64_t rows, cols;
    const block_q8_K *x; /* 4 activation rows */
} bench_case;

/* one pass over all rows; returns the weight bytes it counts */
static double s_one_pass(const bench_case *c, float *acc) {
    const size_t x_stride = sizeof(block_q8_K) * (size_t)(c->cols / COLI_QK_K);
    for (int64_t r = 0; r < c->rows; r++) {
        const uint8_t *wr = c->w + (size_t)r * c->row_bytes;
        if (c->single) {
            *acc += c->single(c->cols, wr, c->x);
            continue;
        }
        float out[4];
        c->x4(c->cols, wr, c->x, x_stride, out, 4);
        *acc += out[0] + out[3];
    }
    return (double)c->rows * (double)c->row_bytes * (c->single ? 1.0 : 4.0);
}

/* weight GB/s over all rows: the best of 5 windows of seconds/5 each (the
 * machine may be shared; the best window is the kernel's) */
static double s_measure(const bench_case *c, double seconds, float *sink) {
    double best = 0.0;
    float acc = 0.0f;
    for (int window = 0; window < 5; window++) {
        double t0 = s_now_s(), t, bytes = 0.0;
        do {
            bytes += s_one_pass(c, &acc);
            t = s_now_s() - t0;
        } while (t < seconds / 5);
        if (bytes / t / 1e9 > best) best = bytes / t / 1e9;
    }
    *sink += acc;
    return best;
}

int main(int argc, char **argv) {
    int hot = 0;
    double seconds = 1.0;
    int64_t cols = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hot"))
            hot = 1;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
            cols = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--hot] [--seconds S] [--cols C]\n", argv[0]);
            return 2;
        }
    }
    if (cols <= 0 || cols % COLI_QK_K) {
        fprintf(stderr, "bench_vecdot_k: --cols must be a positive multiple of 256\n");
        return 2;
    }
    const size_t total = hot ? (256u << 10) : (256u << 20);
    float *xf = malloc(sizeof(float) * (size_t)cols);
    block_q8_K *x = malloc(sizeof(block_q8_K) * (size_t)(4 * cols / COLI_QK_K));
    uint8_t *w = s_random_bytes(total + (1u << 20));
    if (!xf || !x || !w) {
        fprintf(stderr, "bench_vecdot_k: out of memory\n");
        return 1;
    }
    unsigned seed = 99;
    for (int t = 0; t < 4; t++) {
        for (int64_t i = 0; i < cols; i++) xf[i] = (float)(s_next_rand(&seed) & 0xffff) / 32768.0f - 1.0f;
        coli_quantize_act_q8_K(xf, x + t * (cols / COLI_QK_K), cols);
    }
    printf("bench_vecdot_k: 1 thread, %lld values per row, %s weights (%zu KiB)\n", (long long)cols,
           hot ? "cache-resident" : "streamed", total >> 10);
    printf("%-7s %14s %10s %8s %10s %8s\n", "type", "portable GB/s", "avx2 GB/s", "speedup", "x4 GB/s", "x4/avx2");
    float sink = 0.0f;
    for (size_t k = 0; k < sizeof k_kernels / sizeof k_kernels[0]; k++) {
        const kernel *kn = &k_kernels[k];
        size_t row_bytes = coli_row_bytes(kn->t, cols);
        int64_t rows = (int64_t)(total / row_bytes);
        bench_case c = {kn->portable, NULL, w, row_bytes, rows, cols, x};
        double p = s_measure(&c, seconds, &sink), a = 0.0, a4 = 0.0;
        if (coli_cpu_avx2()) {
            c.single = kn->avx2;
            a = s_measure(&c, seconds, &sink);
            c.single = NULL;
            c.x4 = kn->avx2_tokens;
            a4 = s_measure(&c, seconds, &sink);
        }
        printf("%-7s %14.2f %10.2f %7.1fx %10.2f %7.2fx\n", kn->name, p, a, a > 0 ? a / p : 0.0, a4,
               a > 0 ? a4 / a : 0.0);
    }
    fprintf(stderr, "(checksum %g)\n", (double)sink);
    free(xf);
    free(x);
    free(w);
    return 0;
}
