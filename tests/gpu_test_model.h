/*
 * gpu_test_model.h - what the GPU kernels should compute for an expert, on
 * the host: the plugin's sequence (prepare the input per weight type, gate
 * and up matmuls, the activation with the gate / up biases, prepare the
 * hidden row, down matmul, the down bias) with the
 * reference row dot of gpu_math.h, and the reference the GPU tests compare
 * with: the cpu plugin where the CPU path computes all three weight types,
 * else this host model. Include after gpu_math.h and gpu_test_util.h (C or
 * C++).
 */
#ifndef COLI_TESTS_GPU_TEST_MODEL_H
#define COLI_TESTS_GPU_TEST_MODEL_H

#include <stdlib.h>

/* out (n_rows, n_embd) = the expert of e on x, row by row with gpu_row_dot.
 * 0, or -1 on OOM. */
static inline int test_host_expert(const moe_expert_desc *e, const float *x, int64_t n_rows, float *out) {
    const int64_t n_embd = e->n_embd, n_ff = e->n_ff;
    unsigned char *prep = (unsigned char *)malloc(gpu_prep_row_bytes(COLI_F32, n_embd > n_ff ? n_embd : n_ff));
    float *g = (float *)malloc((size_t)n_ff * sizeof *g), *u = (float *)malloc((size_t)n_ff * sizeof *u);
    const size_t rg = gpu_row_bytes(e->gate_type, n_embd), ru = gpu_row_bytes(e->up_type, n_embd);
    const size_t rd = gpu_row_bytes(e->down_type, n_ff);
    const unsigned char *wg = (const unsigned char *)e->gate, *wu = (const unsigned char *)e->up;
    const unsigned char *wd = (const unsigned char *)e->down;
    const gpu_act_params act = gpu_act_params_make(e->act, e->act_alpha, e->act_limit, e->gate_bias, e->up_bias, n_ff);
    for (int64_t r = 0; r < n_rows && prep && g && u; r++) {
        gpu_prep_row(e->gate_type, x + r * n_embd, n_embd, prep);
        for (int64_t f = 0; f < n_ff; f++) g[f] = gpu_row_dot(e->gate_type, wg + f * rg, prep, n_embd);
        gpu_prep_row(e->up_type, x + r * n_embd, n_embd, prep);
        for (int64_t f = 0; f < n_ff; f++) u[f] = gpu_row_dot(e->up_type, wu + f * ru, prep, n_embd);
        for (int64_t f = 0; f < n_ff; f++) g[f] = gpu_act_at(&act, g[f], u[f], f);
        gpu_prep_row(e->down_type, g, n_ff, prep);
        for (int64_t o = 0; o < n_embd; o++) {
            out[r * n_embd + o] = gpu_row_dot(e->down_type, wd + o * rd, prep, n_ff);
            if (e->down_bias) out[r * n_embd + o] += e->down_bias[o];
        }
    }
    const int rc = prep && g && u ? 0 : -1;
    free(prep), free(g), free(u);
    return rc;
}

/* 1 if the cpu plugin computes every weight type and the activation of e. */
static inline int test_cpu_computes(const moe_expert_desc *e) {
    const int act = e->act == MOE_ACT_SILU || e->act == MOE_ACT_SWIGLU_OAI || e->act == MOE_ACT_SITU ||
                    e->act == MOE_ACT_SWIGLU_CLAMP;
    return act && coli_dtype_valid((uint32_t)e->gate_type) && coli_dtype_valid((uint32_t)e->up_type) &&
           coli_dtype_valid((uint32_t)e->down_type);
}

/* The reference output for te on x: the cpu plugin's when it computes the
 * expert's types, else the host model's. *which names it. 0 or a status. */
static inline int test_reference_expert(const test_expert *te, const float *x, int64_t n_rows, float *out,
                                        const char **which, char *err, size_t err_len) {
    if (test_cpu_computes(&te->desc)) {
        *which = "cpu plugin";
        return test_cpu_expert(te, x, n_rows, out, err, err_len);
    }
    *which = "host model (the cpu path lacks a type)";
    return test_host_expert(&te->desc, x, n_rows, out);
}

#endif
