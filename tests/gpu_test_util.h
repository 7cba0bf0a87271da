/*
 * gpu_test_util.h - random experts of any weight type and the cpu plugin's
 * answer for them, shared by the GPU tests (test_gpu_math.c on the host,
 * test_gpu_emu.cpp, test_gpu_plugin.c against a device).
 *
 * Weights of F32/F16/BF16/Q8_0/Q4_0 are quantized from random floats by
 * core/quant/quant.c; those of the other block types are random blocks: random
 * bytes for every quant and sub-scale field (so every bit pattern of the
 * format is exercised: negative Q6_K scales, every Q3_K high-bit mask) and
 * fp16 block scales chosen to give values of about 2/sqrt(cols).
 */
#ifndef COLI_TESTS_GPU_TEST_UTIL_H
#define COLI_TESTS_GPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stddef.h>

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"
#include "core/tensor.h"
#include "plugins/cpu/cpu_plugin.h"
#include "plugins/plugin_abi.h"

static const coli_dtype gpu_test_dtypes[] = {
    COLI_F32,   COLI_F16,     COLI_BF16,    COLI_Q8_0,   COLI_Q4_0,               /* quantized by core */
    COLI_Q4_1,  COLI_Q5_0,    COLI_Q5_1,    COLI_IQ4_NL,                          /* random 32-value blocks */
    COLI_Q2_K,  COLI_Q3_K,    COLI_Q4_K,    COLI_Q5_K,   COLI_Q6_K,  COLI_IQ4_XS, /* random super-blocks */
    COLI_MXFP4, COLI_IQ2_XXS, COLI_IQ3_XXS, COLI_IQ2_XS, COLI_IQ2_S,              /* random low-bit blocks */
    COLI_IQ3_S, COLI_IQ1_S,   COLI_IQ1_M,   COLI_TQ1_0,  COLI_TQ2_0,
};
#define GPU_TEST_N_DTYPES 25

/* 1 if the test matrices of type t come from core's quantizer, 0 if they are random blocks. */
static inline int test_dtype_quantized_by_core(coli_dtype t) {
    return t == COLI_F32 || t == COLI_F16 || t == COLI_BF16 || t == COLI_Q8_0 || t == COLI_Q4_0;
}

typedef struct test_expert {
    moe_expert_desc desc;
    void *gate, *up, *down; /* owned, in desc's types */
    float *bias[3];         /* owned: gate, up, down biases (test_expert_set_act), or NULL */
} test_expert;

/* xorshift64*: reproducible values in [-1, 1) */
static inline float test_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((*s * 0x2545f4914f6cdd1dull) >> 40) / 8388608.0f - 1.0f;
}

static inline void test_rand_rows(float *x, int64_t n, float scale, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) x[i] = scale * test_rand(&s);
}

/* Where a block of type t keeps its fp16 scale d and its fp16 minimum
 * (dmin, or Q4_1/Q5_1's m; -1 if none), from core/quant/quant_blocks.h; unit: the
 * typical |q| times sub-scale, min_ratio: the minimum in units of d that
 * centres the values. */
static inline void test_block_scales(coli_dtype t, int *d_off, int *m_off, float *unit, float *min_ratio) {
    *m_off = -1;
    *min_ratio = 0.0f;
    switch (t) {
    case COLI_Q4_1:
        *d_off = offsetof(block_q4_1, d), *m_off = offsetof(block_q4_1, m), *unit = 8, *min_ratio = -7.5f;
        break;
    case COLI_Q5_0: *d_off = offsetof(block_q5_0, d), *unit = 8; break;
    case COLI_Q5_1:
        *d_off = offsetof(block_q5_1, d), *m_off = offsetof(block_q5_1, m), *unit = 16, *min_ratio = -15.5f;
        break;
    case COLI_IQ4_NL: *d_off = offsetof(block_iq4_nl, d), *unit = 60; break;
    case COLI_Q2_K:
        *d_off = offsetof(block_q2_K, d), *m_off = offsetof(block_q2_K, dmin), *unit = 12, *min_ratio = 1.5f;
        break;
    case COLI_Q3_K: *d_off = offsetof(block_q3_K, d), *unit = 32; break;
    case COLI_Q4_K:
        *d_off = offsetof(block_q4_K, d), *m_off = offsetof(block_q4_K, dmin), *unit = 240, *min_ratio = 7.5f;
        break;
    case COLI_Q5_K:
        *d_off = offsetof(block_q5_K, d), *m_off = offsetof(block_q5_K, dmin), *unit = 480, *min_ratio = 15.5f;
        break;
    case COLI_Q6_K: *d_off = offsetof(block_q6_K, d), *unit = 1024; break;
    /* the grid types: typical (sub-scale formula) x grid magnitude */
    case COLI_IQ2_XXS:
    case COLI_IQ2_XS:
    case COLI_IQ2_S: *d_off = 0, *unit = 50; break;
    case COLI_IQ3_XXS: *d_off = 0, *unit = 120; break;
    case COLI_IQ3_S: *d_off = 0, *unit = 128; break;
    case COLI_IQ1_S: *d_off = 0, *unit = 6; break;
    case COLI_IQ1_M: *d_off = -1, *unit = 6; break; /* d in the scales' top nibbles */
    case COLI_TQ1_0: *d_off = offsetof(block_tq1_0, d), *unit = 1; break;
    case COLI_TQ2_0: *d_off = offsetof(block_tq2_0, d), *unit = 1; break;
    case COLI_MXFP4: *d_off = -1, *unit = 5; break;                  /* an E8M0 exponent, no fp16 */
    default: *d_off = offsetof(block_iq4_xs, d), *unit = 960; break; /* COLI_IQ4_XS */
    }
}

/* One row of random blocks of type t, values of about `scale`. */
static inline void test_random_blocks(coli_dtype t, unsigned char *row, int64_t cols, float scale, uint64_t *s) {
    const size_t bb = coli_dtype_block_bytes(t), nb = (size_t)(cols / coli_dtype_block_elems(t));
    int d_off, m_off;
    float unit, min_ratio;
    test_block_scales(t, &d_off, &m_off, &unit, &min_ratio);
    for (size_t i = 0; i < bb * nb; i++) row[i] = (unsigned char)(test_rand(s) * 128.0f + 128.0f);
    for (size_t b = 0; b < nb; b++) {
        unsigned char *blk = row + b * bb;
        const float d = scale / unit * (0.75f + 0.25f * test_rand(s));
        const uint16_t dh = coli_fp32_to_fp16(d);
        if (t == COLI_MXFP4) /* the power of two nearest d: 2^(e - 128) */
            blk[0] = (unsigned char)(128 + (int)lrintf(log2f(d)));
        else if (t == COLI_IQ1_M) /* nibble i of d on top of scale word i */
            for (int i = 0; i < 4; i++)
                blk[48 + 2 * i + 1] = (unsigned char)((blk[49 + 2 * i] & 15) | ((dh >> (4 * i)) & 15) << 4);
        else
            memcpy(blk + d_off, &dh, 2);
        if (m_off >= 0) {
            const uint16_t mh = coli_fp32_to_fp16(d * min_ratio * (1.0f + 0.2f * test_rand(s)));
            memcpy(blk + m_off, &mh, 2);
        }
    }
}

/* rows x cols random values (scale/sqrt(cols)) stored as type t; NULL on OOM. */
static inline void *test_matrix(coli_dtype t, int64_t rows, int64_t cols, uint64_t seed, size_t *bytes) {
    const size_t rb = coli_row_bytes(t, cols);
    unsigned char *m = (unsigned char *)malloc(rb * (size_t)rows);
    float *row = (float *)malloc((size_t)cols * sizeof(float));
    if (!m || !row) {
        free(m);
        free(row);
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float scale = 2.0f / sqrtf((float)cols);
        uint64_t s = (seed * 1000003u + (uint64_t)r) * 0x9e3779b97f4a7c15ull + 1;
        if (!test_dtype_quantized_by_core(t)) {
            test_random_blocks(t, m + (size_t)r * rb, cols, scale, &s);
            continue;
        }
        test_rand_rows(row, cols, scale, seed * 1000003u + (uint64_t)r);
        coli_quantize_row(t, row, m + (size_t)r * rb, cols);
    }
    free(row);
    *bytes = rb * (size_t)rows;
    return m;
}

/* A random expert with all three matrices of type t. 0, or -1 on OOM. */
static inline int test_expert_make(test_expert *te, int layer, int expert, coli_dtype t, int64_t n_embd, int64_t n_ff,
                                   uint64_t seed) {
    memset(te, 0, sizeof *te);
    moe_expert_desc *d = &te->desc;
    d->layer = layer;
    d->expert = expert;
    d->n_embd = n_embd;
    d->n_ff = n_ff;
    d->gate_type = d->up_type = d->down_type = (int32_t)t;
    te->gate = test_matrix(t, n_ff, n_embd, seed * 3 + 0, &d->gate_bytes);
    te->up = test_matrix(t, n_ff, n_embd, seed * 3 + 1, &d->up_bytes);
    te->down = test_matrix(t, n_embd, n_ff, seed * 3 + 2, &d->down_bytes);
    d->gate = te->gate;
    d->up = te->up;
    d->down = te->down;
    return te->gate && te->up && te->down ? 0 : -1;
}

/* Gives te activation act (MOE_ACT_*) with alpha and limit, and with
 * biases != 0 random F32 biases of about 0.5 on gate, up and down (what
 * gpt-oss's experts have). 0, or -1 on OOM. */
static inline int test_expert_set_act(test_expert *te, int act, float alpha, float limit, int biases, uint64_t seed) {
    moe_expert_desc *d = &te->desc;
    d->act = act;
    d->act_alpha = alpha;
    d->act_limit = limit;
    if (!biases) return 0;
    const int64_t len[3] = {d->n_ff, d->n_ff, d->n_embd};
    for (int i = 0; i < 3; i++) {
        te->bias[i] = (float *)malloc((size_t)len[i] * sizeof(float));
        if (!te->bias[i]) return -1;
        test_rand_rows(te->bias[i], len[i], 0.5f, seed * 7 + (uint64_t)i);
    }
    d->gate_bias = te->bias[0];
    d->up_bias = te->bias[1];
    d->down_bias = te->bias[2];
    return 0;
}

static inline void test_expert_free(test_expert *te) {
    free(te->gate);
    free(te->up);
    free(te->down);
    for (int i = 0; i < 3; i++) free(te->bias[i]);
    memset(te, 0, sizeof *te);
}

/* out (n_rows, n_embd) = the cpu plugin's answer for te on x. 0 or its status. */
static inline int test_cpu_expert(const test_expert *te, const float *x, int64_t n_rows, float *out, char *err,
                                  size_t err_len) {
    const struct moe_plugin *p = coli_cpu_plugin();
    moe_open_opts o;
    memset(&o, 0, sizeof o);
    o.n_threads = 1;
    moe_device *dev = NULL;
    int rc = p->open(&o, &dev, err, err_len);
    if (rc) return rc;
    rc = p->load_expert(dev, &te->desc, err, err_len);
    moe_batch_group g = {te->desc.layer, te->desc.expert, 0, n_rows};
    if (!rc) rc = p->run(dev, &g, 1, x, n_rows, te->desc.n_embd, out, err, err_len);
    p->close(&dev);
    return rc;
}

static inline float test_max_abs(const float *a, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

/* Allowed max |gpu - cpu| relative to max |cpu output| for experts of type t.
 * F32: the same products summed in another order. The others: the hidden
 * row is rounded again for the down matmul (to fp16, bf16 or Q8_0 / Q8_1 /
 * Q8_K steps), and a hidden value a float rounding apart can land on the
 * other side of a step: one step of 2^-11 (fp16), 2^-8 (bf16) or amax/127
 * (Q8_x) times one down weight. Indexing or decoding bugs give errors of
 * order 1. */
static inline float test_tolerance(coli_dtype t) {
    switch (t) {
    case COLI_F32: return 2e-5f;
    case COLI_F16: return 1e-3f;
    default: return 4e-3f;
    }
}

/* Largest |a - b|; NaN anywhere counts as infinitely different. */
static inline float test_max_diff(const float *a, const float *b, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float d = fabsf(a[i] - b[i]);
        if (d != d) return INFINITY;
        m = d > m ? d : m;
    }
    return m;
}

#endif
