/* rope.c - rotary position embedding and its scalings; see rope.h. */
#include "coordinator/rope.h"

#include <math.h>
#include <stddef.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Pair index at which a dimension completes n_rotations over n_ctx_orig
 * positions (YaRN's correction dim, fractional). */
static float s_corr_dim(int n_rot, int n_ctx_orig, float n_rotations, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (n_rotations * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void rope_params_init(rope_params *rp, int n_rot, int neox, float base, rope_scaling scaling, float factor,
                      int n_ctx_orig, float attn_factor, float beta_fast, float beta_slow) {
    rp->n_rot = n_rot;
    rp->neox = neox;
    rp->base = base;
    rp->scaling = scaling;
    rp->freq_scale = scaling == ROPE_SCALING_NONE || !(factor > 0.0f) ? 1.0f : 1.0f / factor;
    rp->ext_factor = scaling == ROPE_SCALING_YARN ? 1.0f : 0.0f;
    rp->attn_factor = attn_factor;
    const float lo = floorf(s_corr_dim(n_rot, n_ctx_orig, beta_fast, base));
    const float hi = ceilf(s_corr_dim(n_rot, n_ctx_orig, beta_slow, base));
    rp->corr_low = lo > 0.0f ? lo : 0.0f;
    rp->corr_high = hi < (float)(n_rot - 1) ? hi : (float)(n_rot - 1);
    rp->freq_factors = NULL;
}

/* 1 for pairs below the ramp (extrapolate: keep the trained angle), 0 above. */
static float s_ramp(float low, float high, int pair) {
    const float span = high - low > 0.001f ? high - low : 0.001f;
    float y = ((float)pair - low) / span;
    y = y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y);
    return 1.0f - y;
}

void rope_angles(const rope_params *rp, int pos, float *cs) {
    const float theta_scale = powf(rp->base, -2.0f / (float)rp->n_rot);
    float mscale = rp->attn_factor;
    if (rp->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / rp->freq_scale);
    float theta_extrap = (float)pos;
    for (int i = 0; i < rp->n_rot / 2; i++) {
        const float ext = rp->freq_factors ? theta_extrap / rp->freq_factors[i] : theta_extrap;
        const float theta_interp = rp->freq_scale * ext;
        float theta = theta_interp;
        if (rp->ext_factor != 0.0f) {
            const float mix = s_ramp(rp->corr_low, rp->corr_high, i) * rp->ext_factor;
            theta = theta_interp * (1.0f - mix) + ext * mix;
        }
        cs[2 * i] = cosf(theta) * mscale;
        cs[2 * i + 1] = sinf(theta) * mscale;
        theta_extrap *= theta_scale;
    }
}

void rope_apply(float *x, const float *cs, int n_heads, int head_stride, int n_rot, int neox) {
    for (int hh = 0; hh < n_heads; hh++) {
        float *xh = x + (size_t)hh * (size_t)head_stride;
        for (int i = 0; i < n_rot / 2; i++) {
            const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
            const float c = cs[2 * i], sn = cs[2 * i + 1], x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * sn;
            xh[b] = x0 * sn + x1 * c;
        }
    }
}

const char *rope_scaling_name(rope_scaling s) {
    return s == ROPE_SCALING_LINEAR ? "linear" : s == ROPE_SCALING_YARN ? "yarn" : "none";
}
