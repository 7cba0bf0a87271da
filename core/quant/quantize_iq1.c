/*
 * quantize_iq1.c - the IQ1_S and IQ1_M weight quantizers, guided by an
 * importance matrix as llama-quantize runs them (ggml-quants.c
 * quantize_row_iq1_s_impl / quantize_row_iq1_m_impl, llama.cpp de3ff815),
 * with the same float operations in the same order.
 *
 * Per 32 values, weights w = imatrix * sqrt(sigma2 + x^2) (sigma2 twice the
 * block's mean square). The values take one of -1, 0, 1 plus a shift of
 * +1/8 or -1/8 for the whole sub-block: sorted, the two boundaries that
 * split them into the three groups are searched exhaustively with running
 * sums, for either shift; each group of 8 levels then goes to its grid
 * point (or the nearest of its neighbours by weighted error) and the scale
 * is refitted when any was off the grid. The 8 scales go to 3 bits under
 * d = max / 15, stored x 1.125; the shift's sign is bit 15 of qh.
 *
 * IQ1_M works on 16 values with a shift sign per half (8 values): the split
 * search keeps its running sums per half and tries the four sign pairs at
 * once. The 16 scales go to 3 bits under d = max / 15, then d itself is
 * refitted by weighted least squares over the whole super-block and stored
 * x 1.1125 in the top nibbles of the four scale words.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/quantize_impl.h"
#include "core/quant/quantize_iq_grid.h"
#include "core/quant/quantize_rows.h"

#define IQ1_DELTA 0.125f
#define IQ1_S_GROUP_EPS 1e-12f
#define IQ1_M_GROUP_EPS 1e-7f

static const float s_xp[3] = {-1 + IQ1_DELTA, IQ1_DELTA, 1 + IQ1_DELTA};
static const float s_xm[3] = {-1 - IQ1_DELTA, -IQ1_DELTA, 1 - IQ1_DELTA};

/* order[0..n) = 0..n-1 sorted by x, equal values in index order (glibc's
 * qsort of these pairs is a merge sort: stable). */
static void s_sort(const float *x, int n, int *order) {
    for (int j = 0; j < n; j++) {
        int k = j;
        while (k > 0 && x[order[k - 1]] > x[j]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = j;
    }
}

/* The weights of n values: the importance times sqrt(sigma2 + x^2), or x^2
 * without an importance matrix. */
static void s_weights(const float *xb, const float *qw, float sigma2, int n, float *weight) {
    for (int i = 0; i < n; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
}

/* The grid point for levels L among u's neighbours by weighted error of
 * scale * xx[level] against x (IQ1's values); L set to its levels. */
static int s_iq1_point(const iq_grid *g, int8_t *L, const float *x, const float *w, float scale, const float *xx) {
    int u = 0;
    for (int i = 0; i < 8; i++) u |= L[i] << (2 * i);
    const int32_t k = g->map[u];
    if (k >= 0) return k;
    const uint16_t *nb = g->nb + (-k - 1);
    float best = FLT_MAX;
    int point = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *p = g->pts + nb[j] * 8;
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            const float q = xx[(p[i] - 1) / 2], diff = scale * q - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) best = d2, point = nb[j];
    }
    const int8_t *p = g->pts + point * 8;
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((p[i] - 1) / 2);
    return point;
}

/* The boundaries and shift of the best split (running sums sx, sw over the
 * sorted values); returns the scale, *shift 0 when none fits. */
static float s_split(const float *sx, const float *sw, float max, int *b1, int *b2, int *shift) {
    float best = -FLT_MAX, scale = max;
    *b1 = *b2 = -1;
    *shift = 0;
    for (int i1 = 0; i1 <= 32; i1++)
        for (int i2 = i1; i2 <= 32; i2++)
            for (int s = 0; s < 2; s++) {
                const float *v = s == 0 ? s_xp : s_xm;
                const float sumqx = (sx[i1] - sx[0]) * v[0] + (sx[i2] - sx[i1]) * v[1] + (sx[32] - sx[i2]) * v[2];
                const float sumq2 =
                    (sw[i1] - sw[0]) * v[0] * v[0] + (sw[i2] - sw[i1]) * v[1] * v[1] + (sw[32] - sw[i2]) * v[2] * v[2];
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    *b1 = i1, *b2 = i2, *shift = s == 0 ? 1 : -1;
                }
            }
    return scale;
}

/* One sub-block: 4 grid indices; returns its scale and *shift, or -1 when
 * it is (near) zero or nothing fits (nothing written). */
static float s_iq1_s_sub(const iq_grid *g, const float *xb, const float *qw, float sigma2, uint16_t *index,
                         int *shift) {
    float weight[32], sx[33], sw[33], max = fabsf(xb[0]);
    int order[32], b1, b2;
    int8_t L[32];
    s_weights(xb, qw, sigma2, 32, weight);
    for (int i = 1; i < 32; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
    if (max < IQ1_S_GROUP_EPS) return -1;
    s_sort(xb, 32, order);
    sx[0] = sw[0] = 0;
    for (int j = 0; j < 32; j++) {
        sx[j + 1] = sx[j] + weight[order[j]] * xb[order[j]];
        sw[j + 1] = sw[j] + weight[order[j]];
    }
    float scale = s_split(sx, sw, max, &b1, &b2, shift);
    if (b1 < 0 || b2 < 0 || *shift == 0) return -1;
    for (int j = 0; j < 32; j++) L[order[j]] = (int8_t)(j < b1 ? 0 : j < b2 ? 1 : 2);
    if (scale < 0) {
        for (int j = 0; j < 32; j++) L[j] = (int8_t)(2 - L[j]);
        scale = -scale;
        *shift = -*shift;
    }
    const float *xx = *shift == 1 ? s_xp : s_xm;
    int all_on = 1;
    for (int k = 0; k < 4; k++) {
        all_on &= iq_grid_lookup(g, L + 8 * k) >= 0;
        index[k] = (uint16_t)s_iq1_point(g, L + 8 * k, xb + 8 * k, weight + 8 * k, scale, xx);
    }
    if (!all_on) {
        float sumqx = 0, sumq2 = 0;
        for (int k = 0; k < 4; k++) {
            const int8_t *p = g->pts + index[k] * 8;
            for (int j = 0; j < 8; j++) {
                const float w = weight[8 * k + j], q = xx[(p[j] - 1) / 2];
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
        if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

void coli_quantize_row_iq1_s(const float *x, block_iq1_s *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_1S);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl;
        block_iq1_s *b = &y[ibl];
        float scales[8], max_scale = 0, sumx2 = 0;
        int shifts[8];
        memset(b, 0, sizeof *b);
        for (int i = 0; i < COLI_QK_K; i++) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / COLI_QK_K;
        for (int ib = 0; ib < 8; ib++) {
            uint16_t index[4];
            scales[ib] =
                s_iq1_s_sub(g, xbl + 32 * ib, qw ? qw + COLI_QK_K * ibl + 32 * ib : NULL, sigma2, index, &shifts[ib]);
            if (scales[ib] < 0) {
                scales[ib] = 0;
                shifts[ib] = 1;
                continue;
            }
            uint16_t h = 0;
            for (int k = 0; k < 4; k++) {
                b->qs[4 * ib + k] = (uint8_t)(index[k] & 255);
                h |= (uint16_t)((index[k] >> 8) << (3 * k));
            }
            b->qh[ib] = h;
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale == 0) continue;
        const float d = max_scale / 15, id = 1 / d;
        b->d = coli_fp32_to_fp16(d * 1.125f); /* llama.cpp's fudge factor */
        for (int ib = 0; ib < 8; ib++) {
            int l = coli_nearest_int(0.5f * (id * scales[ib] - 1));
            l = l < 0 ? 0 : (l > 7 ? 7 : l);
            if (shifts[ib] == -1) l |= 8;
            b->qh[ib] |= (uint16_t)(l << 12);
        }
    }
}

/* IQ1_M's shifted values for half h of a sub-block of sign pair `kind`
 * (0: +,+  1: +,-  2: -,+  3: -,-). */
static const float *s_half_values(int kind, int h) {
    const int neg = h == 0 ? kind >> 1 : kind & 1;
    return neg ? s_xm : s_xp;
}

/* IQ1_M's split search over 16 sorted values: running sums per half, and
 * since v[0] - v[1] = v[1] - v[2] = -1 for either shift a split's sum is
 * T v[2] - S[i1] - S[i2]. Returns the scale; *kind -1 when none fits. */
static float s_split_m(const float *xb, const float *weight, const int *order, float max, int *b1, int *b2, int *kind) {
    float px[2][17], pw[2][17];
    px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
    for (int j = 0; j < 16; j++) {
        const int i = order[j], h = i < 8 ? 0 : 1;
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    const float *v[2] = {s_xp, s_xm};
    float c1[2], c2[2];
    for (int s = 0; s < 2; s++) {
        c1[s] = v[s][0] * v[s][0] - v[s][1] * v[s][1];
        c2[s] = v[s][1] * v[s][1] - v[s][2] * v[s][2];
    }
    float best = -FLT_MAX, scale = max;
    *b1 = *b2 = *kind = -1;
    for (int i1 = 0; i1 <= 16; i1++)
        for (int i2 = i1; i2 <= 16; i2++) {
            float qx[2][2], q2[2][2]; /* [shift sign][half] */
            for (int h = 0; h < 2; h++) {
                const float sx = px[h][i1] + px[h][i2];
                for (int s = 0; s < 2; s++) {
                    qx[s][h] = px[h][16] * v[s][2] - sx;
                    q2[s][h] = pw[h][16] * v[s][2] * v[s][2] + pw[h][i1] * c1[s] + pw[h][i2] * c2[s];
                }
            }
            for (int k = 0; k < 4; k++) {
                const float sumqx = qx[k >> 1][0] + qx[k & 1][1], sumq2 = q2[k >> 1][0] + q2[k & 1][1];
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    *b1 = i1, *b2 = i2, *kind = k;
                }
            }
        }
    return scale;
}

/* One IQ1_M sub-block of 16: 2 grid indices; returns its scale and *kind,
 * or -1 when it is (near) zero or nothing fits. */
static float s_iq1_m_sub(const iq_grid *g, const float *xb, const float *weight, uint16_t *index, int *kind) {
    float max = fabsf(xb[0]);
    int order[16], b1, b2;
    int8_t L[16];
    for (int i = 1; i < 16; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
    if (max < IQ1_M_GROUP_EPS) return -1;
    s_sort(xb, 16, order);
    float scale = s_split_m(xb, weight, order, max, &b1, &b2, kind);
    if (b1 < 0 || b2 < 0 || *kind < 0) return -1;
    for (int j = 0; j < 16; j++) L[order[j]] = (int8_t)(j < b1 ? 0 : j < b2 ? 1 : 2);
    if (scale < 0) {
        for (int j = 0; j < 16; j++) L[j] = (int8_t)(2 - L[j]);
        scale = -scale;
        *kind = 3 - *kind; /* both signs flip */
    }
    int all_on = 1;
    for (int k = 0; k < 2; k++) {
        all_on &= iq_grid_lookup(g, L + 8 * k) >= 0;
        index[k] = (uint16_t)s_iq1_point(g, L + 8 * k, xb + 8 * k, weight + 8 * k, scale, s_half_values(*kind, k));
    }
    if (all_on) return scale;
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < 2; k++) {
        const int8_t *p = g->pts + index[k] * 8;
        const float *xx = s_half_values(*kind, k);
        for (int j = 0; j < 8; j++) {
            const float w = weight[8 * k + j], q = xx[(p[j] - 1) / 2];
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
        }
    }
    return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

/* The 3-bit scales and shift signs of a super-block whose sub-blocks are
 * written, then d refitted over all 256 values with those scales. */
static void s_iq1_m_scales(const iq_grid *g, block_iq1_m *b, const float *xbl, const float *qwbl, float sigma2,
                           const float *scales, const int *kinds, float max_scale) {
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    uint16_t sc[4] = {0};
    float d = max_scale / 15, sumqx = 0, sumq2 = 0;
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib++) {
        int l = coli_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : (l > 7 ? 7 : l);
        sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
        b->qh[ib] |= masks[kinds[ib]];
        const float *xb = xbl + 16 * ib;
        float weight[16];
        s_weights(xb, qwbl ? qwbl + 16 * ib : NULL, sigma2, 16, weight);
        for (int k = 0; k < 2; k++) {
            const float *xx = s_half_values(kinds[ib], k);
            const int8_t *p = g->pts + (b->qs[2 * ib + k] | (b->qh[ib] >> 4 * k & 7) << 8) * 8;
            for (int j = 0; j < 8; j++) {
                const float w = weight[8 * k + j], q = xx[(p[j] - 1) / 2] * (2 * l + 1);
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t h = coli_fp32_to_fp16(d * 1.1125f); /* llama.cpp's fudge factor */
    sc[0] |= (uint16_t)((h & 0x000f) << 12);
    sc[1] |= (uint16_t)((h & 0x00f0) << 8);
    sc[2] |= (uint16_t)((h & 0x0f00) << 4);
    sc[3] |= (uint16_t)(h & 0xf000);
    memcpy(b->scales, sc, sizeof sc);
}

void coli_quantize_row_iq1_m(const float *x, block_iq1_m *y, int64_t n, const float *qw) {
    const iq_grid *g = iq_grid_get(IQ_GRID_1S);
    for (int64_t ibl = 0; ibl < n / COLI_QK_K; ibl++) {
        const float *xbl = x + COLI_QK_K * ibl, *qwbl = qw ? qw + COLI_QK_K * ibl : NULL;
        block_iq1_m *b = &y[ibl];
        float scales[16], max_scale = 0, sumx2 = 0;
        int kinds[16];
        memset(b, 0, sizeof *b);
        for (int i = 0; i < COLI_QK_K; i++) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / COLI_QK_K;
        for (int ib = 0; ib < 16; ib++) {
            float weight[16];
            uint16_t index[2];
            s_weights(xbl + 16 * ib, qwbl ? qwbl + 16 * ib : NULL, sigma2, 16, weight);
            scales[ib] = s_iq1_m_sub(g, xbl + 16 * ib, weight, index, &kinds[ib]);
            if (scales[ib] < 0) {
                scales[ib] = 0;
                kinds[ib] = 0;
                continue;
            }
            b->qs[2 * ib] = (uint8_t)(index[0] & 255);
            b->qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
            b->qh[ib] = (uint8_t)(index[0] >> 8 | (index[1] >> 8) << 4);
            max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
        }
        if (max_scale > 0) s_iq1_m_scales(g, b, xbl, qwbl, sigma2, scales, kinds, max_scale);
    }
}
