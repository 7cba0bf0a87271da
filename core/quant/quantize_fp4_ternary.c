/*
 * quantize_fp4_ternary.c - MXFP4, TQ1_0 and TQ2_0 weight quantization,
 * round to nearest as ggml's quantize_row_*_ref (what llama-quantize runs
 * for these types, imatrix or not):
 *
 *  MXFP4: per 32 values, the shared exponent e = floor(log2(amax)) - 2 +
 *    127 (so amax lands in the top E2M1 binade, 4..6), then each value the
 *    nearest of the 16 levels times 2^(e - 128), ties to the lower code.
 *    An all-zero block gets e = 0. (ggml casts a negative or too large
 *    exponent to uint8_t, which C leaves undefined; here it is clamped to
 *    0..255, which only blocks with amax below 2^-125 ever reach.)
 *  TQ1_0 / TQ2_0: per 256 values, d = amax (stored fp16), each value
 *    round(x / amax) in {-1, 0, 1}, halves away from zero, packed as
 *    quant_blocks.h describes.
 */
#include <math.h>

#include "core/quant/quant.h"
#include "core/quant/quantize_rows.h"

// ----------------------------------------------------------------------------
// MXFP4

static uint8_t s_mxfp4_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = floorf(log2f(amax)) - 2.0f + 127.0f;
    return e <= 0.0f ? 0 : (e >= 255.0f ? 255 : (uint8_t)e);
}

/* The code whose level times d is nearest to v; the first (lowest code)
 * among equals, so +0 (code 0) wins over -0 (code 8). */
static uint8_t s_mxfp4_code(float v, float d) {
    uint8_t best = 0;
    float best_err = fabsf((float)coli_kvalues_mxfp4[0] * d - v);
    for (uint8_t c = 1; c < 16; c++) {
        const float err = fabsf((float)coli_kvalues_mxfp4[c] * d - v);
        if (err < best_err) {
            best = c;
            best_err = err;
        }
    }
    return best;
}

void coli_quantize_row_mxfp4(const float *x, block_mxfp4 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK; b++, x += COLI_QK) {
        float amax = 0.0f;
        for (int j = 0; j < COLI_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        y[b].e = s_mxfp4_exponent(amax);
        const float d = coli_e8m0_half(y[b].e);
        for (int j = 0; j < COLI_QK / 2; j++)
            y[b].qs[j] = (uint8_t)(s_mxfp4_code(x[j], d) | s_mxfp4_code(x[j + COLI_QK / 2], d) << 4);
    }
}

// ----------------------------------------------------------------------------
// ternary

/* amax of 256 values and its inverse (0 for an all-zero block). */
static float s_ternary_scale(const float *x, float *id) {
    float amax = 0.0f;
    for (int j = 0; j < COLI_QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    *id = amax != 0.0f ? 1.0f / amax : 0.0f;
    return amax;
}

/* round(v) for |v| <= 1 (x / amax), halves away from zero, as a code 0..2
 * (the trit plus one); NaN gives the code of 0. */
static int s_trit_code(float v) { return v >= 0.5f ? 2 : (v <= -0.5f ? 0 : 1); }

/* One byte of TQ1_0: the codes of values v[0], v[stride], ... (n of them,
 * most significant digit first) as a base-3 number, scaled to a byte by
 * ceil(N * 256 / 243); a 4-digit group gets a trailing 0 digit. */
static uint8_t s_tq1_byte(const float *v, int stride, int n, float id) {
    unsigned num = 0;
    for (int k = 0; k < n; k++) num = num * 3 + (unsigned)s_trit_code(v[k * stride] * id);
    for (int k = n; k < 5; k++) num *= 3;
    return (uint8_t)((num * 256 + 242) / 243);
}

void coli_quantize_row_tq1_0(const float *x, block_tq1_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK_K; b++, x += COLI_QK_K) {
        float id;
        y[b].d = coli_fp32_to_fp16(s_ternary_scale(x, &id));
        for (int m = 0; m < 32; m++) y[b].qs[m] = s_tq1_byte(x + m, 32, 5, id);
        for (int m = 0; m < 16; m++) y[b].qs[32 + m] = s_tq1_byte(x + 160 + m, 16, 5, id);
        for (int m = 0; m < 4; m++) y[b].qh[m] = s_tq1_byte(x + 240 + m, 4, 4, id);
    }
}

void coli_quantize_row_tq2_0(const float *x, block_tq2_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / COLI_QK_K; b++, x += COLI_QK_K) {
        float id;
        y[b].d = coli_fp32_to_fp16(s_ternary_scale(x, &id));
        for (int c = 0; c < 2; c++)
            for (int m = 0; m < 32; m++) {
                unsigned q = 0;
                for (int k = 0; k < 4; k++) q |= (unsigned)s_trit_code(x[128 * c + 32 * k + m] * id) << (2 * k);
                y[b].qs[32 * c + m] = (uint8_t)q;
            }
    }
}
