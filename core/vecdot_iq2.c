/*
 * vecdot_iq2.c - portable dot product of IQ2_XXS rows with Q8_K activations
 * (vecdot.h), the arithmetic of ggml's generic ggml_vec_dot_iq2_xxs_q8_K:
 * per 32 values the exact sum of grid magnitude * sign * activation, times
 * 2s + 1 (s the 4-bit scale), summed per super-block; then d_w d_x times
 * that sum per super-block in block order, and the row's sum times 1/8.
 */
#include <string.h>

#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/vecdot.h"

/* The integer sum of one IQ2_XXS super-block with its 256 activations. */
static int32_t s_iq2_xxs_isum(const block_iq2_xxs *w, const int8_t *x) {
    const uint8_t *q = (const uint8_t *)w->qs;
    int32_t sum = 0;
    for (int ib = 0; ib < COLI_QK_K / 32; ib++, q += 8) {
        uint32_t aux;
        memcpy(&aux, q + 4, 4);
        int32_t s = 0;
        for (int l = 0; l < 4; l++, x += 8) {
            const uint64_t g = coli_iq2xxs_grid[q[l]];
            const uint8_t signs = coli_iq2_signs((aux >> 7 * l) & 127);
            for (int j = 0; j < 8; j++) {
                const int v = (uint8_t)(g >> 8 * j) * x[j];
                s += signs >> j & 1 ? -v : v;
            }
        }
        sum += s * (int32_t)(2 * (aux >> 28) + 1);
    }
    return sum;
}

float coli_vec_dot_iq2_xxs_q8_K(int64_t n, const void *vw, const void *vx) {
    const block_iq2_xxs *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / COLI_QK_K; b++)
        sum += coli_fp16_to_fp32(w[b].d) * x[b].d * (float)s_iq2_xxs_isum(&w[b], x[b].qs);
    return 0.125f * sum;
}
