/*
 * matmul_portable.c - the plain C kernels: any CPU, any compiler.
 *
 * Same input rounding as the AVX2 path (bit-identical prepared inputs);
 * only the float summation order differs. Float dot products keep 8
 * partial sums so the compiler can use whatever vector unit there is
 * without reassociating anything.
 */
#include <math.h>
#include <string.h>

#include "core/kernels/matmul_impl.h"
#include "core/quant/quant.h"

// ----------------------------------------------------------------------------
// input preparation

void mm_portable_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf,
                            int64_t xf_stride) {
    for (int64_t t = 0; t < n_tok; t++) {
        const float *src = x + t * n_in;
        float *dst = xf + t * xf_stride;
        if (wtype == COLI_F16)
            for (int64_t i = 0; i < n_in; i++) dst[i] = coli_fp16_to_fp32(coli_fp32_to_fp16(src[i]));
        else
            for (int64_t i = 0; i < n_in; i++) dst[i] = coli_bf16_to_fp32(coli_fp32_to_bf16(src[i]));
    }
}

void mm_portable_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd) {
    const int64_t nb = n_in / COLI_QK;
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t b = 0; b < nb; b++) {
            block_q8_0 blk;
            coli_quantize_act_q8_0(x + t * n_in + b * COLI_QK, &blk, COLI_QK);
            memcpy(xq + t * n_in + b * COLI_QK, blk.qs, COLI_QK);
            xd[t * nb + b] = coli_fp16_to_fp32(blk.d);
        }
    }
}

// ----------------------------------------------------------------------------
// dot products

static float s_sum8(const float s[8]) { return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])); }

static float s_dot_f32(const uint8_t *wrow, const float *x, int64_t n) {
    const float *w = (const float *)wrow;
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += w[i + k] * x[i + k];
    float r = s_sum8(s);
    for (; i < n; i++) r += w[i] * x[i];
    return r;
}

/* F16 and BF16 rows: 16-bit weights widened by `widen`, same summation. */
static float s_dot_16bit(const uint8_t *wrow, const float *x, int64_t n, float (*widen)(uint16_t)) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            uint16_t h;
            memcpy(&h, wrow + 2 * (i + k), 2);
            s[k] += widen(h) * x[i + k];
        }
    float r = s_sum8(s);
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, wrow + 2 * i, 2);
        r += widen(h) * x[i];
    }
    return r;
}

static float s_dot_f16(const uint8_t *wrow, const float *x, int64_t n) {
    return s_dot_16bit(wrow, x, n, coli_fp16_to_fp32);
}

static float s_dot_bf16(const uint8_t *wrow, const float *x, int64_t n) {
    return s_dot_16bit(wrow, x, n, coli_bf16_to_fp32);
}

/* llama.cpp's generic ggml_vec_dot_q8_0_q8_0: sumf += sumi * (d_w * d_x) */
static float s_dot_q8_0(const uint8_t *wrow, const int8_t *xq, const float *xd, int64_t nb) {
    const block_q8_0 *w = (const block_q8_0 *)wrow;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < COLI_QK; j++) isum += (int32_t)w[b].qs[j] * xq[b * COLI_QK + j];
        sum += (float)isum * (coli_fp16_to_fp32(w[b].d) * xd[b]);
    }
    return sum;
}

static float s_dot_q4_0(const uint8_t *wrow, const int8_t *xq, const float *xd, int64_t nb) {
    const block_q4_0 *w = (const block_q4_0 *)wrow;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *x = xq + b * COLI_QK;
        int32_t isum = 0;
        for (int j = 0; j < COLI_QK / 2; j++) {
            isum += ((w[b].qs[j] & 0x0f) - 8) * x[j];
            isum += ((w[b].qs[j] >> 4) - 8) * x[j + COLI_QK / 2];
        }
        sum += (float)isum * (coli_fp16_to_fp32(w[b].d) * xd[b]);
    }
    return sum;
}

/* ---- row loops: a block of tokens at a time, so a weight row is read
 * from memory once and from L1 for the other tokens of the block. ------- */

static void s_rows_float(const mm_job *j, int64_t r0, int64_t r1) {
    float (*dot)(const uint8_t *, const float *, int64_t) = j->wtype == COLI_F32   ? s_dot_f32
                                                            : j->wtype == COLI_F16 ? s_dot_f16
                                                                                   : s_dot_bf16;
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->token_block) {
        int64_t t1 = t0 + j->token_block < j->n_tok ? t0 + j->token_block : j->n_tok;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = j->W + (size_t)r * j->w_stride;
            for (int64_t t = t0; t < t1; t++) j->y[t * j->n_out + r] = dot(w, j->xf + t * j->xf_stride, j->n_in);
        }
    }
}

static void s_rows_quant(const mm_job *j, int64_t r0, int64_t r1) {
    float (*dot)(const uint8_t *, const int8_t *, const float *, int64_t) =
        j->wtype == COLI_Q8_0 ? s_dot_q8_0 : s_dot_q4_0;
    const int64_t nb = j->n_in / COLI_QK;
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->token_block) {
        int64_t t1 = t0 + j->token_block < j->n_tok ? t0 + j->token_block : j->n_tok;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = j->W + (size_t)r * j->w_stride;
            for (int64_t t = t0; t < t1; t++) j->y[t * j->n_out + r] = dot(w, j->xq + t * j->n_in, j->xd + t * nb, nb);
        }
    }
}

mm_rows_fn mm_portable_rows(coli_dtype wtype) {
    return (wtype == COLI_Q8_0 || wtype == COLI_Q4_0) ? s_rows_quant : s_rows_float;
}
