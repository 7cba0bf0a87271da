/*
 * rope.h - rotary position embedding with the scalings GGUF metadata names
 * (<arch>.rope.scaling.type = none / linear / yarn), computed as ggml's CPU
 * rope does (llama.cpp c392e50) so that logits match its float rounding.
 *
 * Per pair i = 0 .. n_rot/2 - 1 of a head, at position pos:
 *   theta_extrap = pos * base^(-2i/n_rot)     (built by repeated float products)
 *   theta_interp = theta_extrap * freq_scale  (freq_scale = 1 / rope.scaling.factor)
 *   none:   angle = theta_extrap              (freq_scale forced to 1)
 *   linear: angle = theta_interp              (positions divided by the factor)
 *   yarn:   angle = theta_interp (1 - r_i) + theta_extrap r_i, r_i the ramp
 *           1 - clamp((i - low) / max(0.001, high - low), 0, 1) over the
 *           correction dims [low, high] of beta_fast, beta_slow; cos and sin
 *           are multiplied by attn_factor (1 + 0.1 ln(1 / freq_scale)).
 * Other types and linear multiplied by attn_factor only. With freq_factors
 * (rope_freqs.weight) theta_extrap of pair i is divided by freq_factors[i]
 * first, as ggml does.
 */
#ifndef COLI_COORD_ROPE_H
#define COLI_COORD_ROPE_H

typedef enum rope_scaling {
    ROPE_SCALING_NONE,
    ROPE_SCALING_LINEAR,
    ROPE_SCALING_YARN,
} rope_scaling;

typedef struct rope_params {
    int n_rot;  /* rotated dims of a head (even) */
    int neox;   /* 1: pairs (i, i + n_rot/2); 0: adjacent pairs (2i, 2i+1) */
    float base; /* theta, rope.freq_base */
    rope_scaling scaling;
    float freq_scale;          /* 1 / rope.scaling.factor; 1 without scaling */
    float ext_factor;          /* YaRN mix weight: 1 for yarn, 0 otherwise (llama.cpp's default) */
    float attn_factor;         /* cos/sin magnitude before YaRN's own correction */
    float corr_low, corr_high; /* YaRN ramp: pair indices where interpolation starts / ends */
    const float *freq_factors; /* NULL, or n_rot/2 divisors of each pair's angle (the
                                  rope_freqs.weight tensor of Llama-3.1-style files) */
} rope_params;

/* Fill rp for the given scaling (freq_factors NULL: set them after).
 * factor: rope.scaling.factor (> 0; ignored for NONE); n_ctx_orig: the
 * training context YaRN corrects for; beta_fast, beta_slow: YaRN's ramp
 * bounds in rotations (llama.cpp: 32, 1). */
void rope_params_init(rope_params *rp, int n_rot, int neox, float base, rope_scaling scaling, float factor,
                      int n_ctx_orig, float attn_factor, float beta_fast, float beta_slow);

/* cs[2i], cs[2i+1] = cos, sin of pair i's angle at pos (n_rot floats). */
void rope_angles(const rope_params *rp, int pos, float *cs);

/* Rotate the first n_rot dims of each of n_heads heads of x, heads
 * head_stride floats apart, by the angles cs of rope_angles. */
void rope_apply(float *x, const float *cs, int n_heads, int head_stride, int n_rot, int neox);

/* "none" / "linear" / "yarn". */
const char *rope_scaling_name(rope_scaling s);

#endif
