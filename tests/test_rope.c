/*
 * test_rope.c - rope scaling (coordinator/rope.c) against angles computed
 * by hand from the definitions (none, linear, YaRN as llama.cpp's ggml
 * rope), and the loader: rope.scaling.* keys read (linear files load,
 * unknown types are refused by name), deepseek2's YaRN attention scale.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/model.h"
#include "coordinator/rope.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/ref_models.h"

#define TOL 1e-6

static void s_expect_pair(const float *cs, int i, double angle, double mag) {
    cr_expect(fabs(cs[2 * i] - mag * cos(angle)) < TOL, "pair %d: cos %.9g, expected %.9g", i, cs[2 * i],
              mag * cos(angle));
    cr_expect(fabs(cs[2 * i + 1] - mag * sin(angle)) < TOL, "pair %d: sin %.9g, expected %.9g", i, cs[2 * i + 1],
              mag * sin(angle));
}

TestSuite(rope);

/* n_rot 4, base 1e4, pos 3: angles 3 * 1e4^0 = 3 and 3 * 1e4^(-1/2) = 0.03. */
Test(rope, none_by_hand) {
    rope_params rp;
    float cs[4];
    rope_params_init(&rp, 4, 0, 10000.0f, ROPE_SCALING_NONE, 4.0f, 512, 1.0f, 32.0f, 1.0f);
    cr_expect_eq(rp.freq_scale, 1.0f, "none ignores the factor");
    rope_angles(&rp, 3, cs);
    s_expect_pair(cs, 0, 3.0, 1.0);
    s_expect_pair(cs, 1, 0.03, 1.0);
}

/* linear factor 4: positions divided by 4 -> 0.75 and 0.0075. */
Test(rope, linear_by_hand) {
    rope_params rp;
    float cs[4];
    rope_params_init(&rp, 4, 0, 10000.0f, ROPE_SCALING_LINEAR, 4.0f, 512, 1.0f, 32.0f, 1.0f);
    rope_angles(&rp, 3, cs);
    s_expect_pair(cs, 0, 0.75, 1.0);
    s_expect_pair(cs, 1, 0.0075, 1.0);
}

/* YaRN, n_rot 16, base 1e4, factor 8, original context 256:
 * corr(b) = 16 ln(256 / (2 pi b)) / (2 ln 1e4): corr(32) = 0.2098 -> low 0,
 * corr(1) = 3.2200 -> high 4. Ramp r_i = 1 - i/4 for i <= 4, 0 above;
 * angle_i = pos 1e4^(-i/8) (r_i + (1 - r_i) / 8); magnitude 1 + 0.1 ln 8. */
Test(rope, yarn_by_hand) {
    rope_params rp;
    float cs[16];
    rope_params_init(&rp, 16, 0, 10000.0f, ROPE_SCALING_YARN, 8.0f, 256, 1.0f, 32.0f, 1.0f);
    cr_expect_eq(rp.corr_low, 0.0f);
    cr_expect_eq(rp.corr_high, 4.0f);
    const int pos = 10;
    rope_angles(&rp, pos, cs);
    const double mag = 1.0 + 0.1 * log(8.0);
    /* pair 2 by hand: extrapolated 10 * 1e4^(-1/4) = 1, interpolated 1/8, ramp 1/2 */
    s_expect_pair(cs, 2, 0.5 * 1.0 + 0.5 * 0.125, mag);
    for (int i = 0; i < 8; i++) {
        const double ext = pos * pow(1e4, -2.0 * i / 16.0);
        const double r = i <= 4 ? 1.0 - i / 4.0 : 0.0;
        cr_expect(fabs(cs[2 * i] - mag * cos(ext * (r + (1 - r) / 8.0))) < 1e-5, "pair %d cos", i);
        cr_expect(fabs(cs[2 * i + 1] - mag * sin(ext * (r + (1 - r) / 8.0))) < 1e-5, "pair %d sin", i);
    }
}

/* rope_freqs.weight divides each pair's angle: factors 1, 4 at pos 3 ->
 * 3 and 0.03 / 4 = 0.0075. */
Test(rope, freq_factors_by_hand) {
    rope_params rp;
    float cs[4];
    const float ff[2] = {1.0f, 4.0f};
    rope_params_init(&rp, 4, 0, 10000.0f, ROPE_SCALING_NONE, 1.0f, 512, 1.0f, 32.0f, 1.0f);
    rp.freq_factors = ff;
    rope_angles(&rp, 3, cs);
    s_expect_pair(cs, 0, 3.0, 1.0);
    s_expect_pair(cs, 1, 0.0075, 1.0);
}

/* rope_apply: NORM rotates adjacent pairs, NEOX pairs (i, i + n_rot/2). */
Test(rope, apply_layouts) {
    const float cs[4] = {0.0f, 1.0f, 1.0f, 0.0f}; /* pair 0 by 90 degrees, pair 1 not at all */
    float norm[4] = {1, 2, 3, 4}, neox[4] = {1, 2, 3, 4};
    rope_apply(norm, cs, 1, 4, 4, 0);
    rope_apply(neox, cs, 1, 4, 4, 1);
    const float want_norm[4] = {-2, 1, 3, 4}, want_neox[4] = {-3, 2, 1, 4};
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(norm[i], want_norm[i], "NORM dim %d: %g", i, norm[i]);
        cr_expect_eq(neox[i], want_neox[i], "NEOX dim %d: %g", i, neox[i]);
    }
}

/* A copy of src with one rope.scaling.type (and factor 4) at dst; with
 * freqs, also a rope_freqs.weight tensor of n_freqs entries. */
static void s_copy_with(const char *src, const char *dst, const char *type, const float *freqs, int64_t n_freqs) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    cr_assert_eq(gguf_writer_set_str(w, "llama.rope.scaling.type", type), 0);
    cr_assert_eq(gguf_writer_set_f32(w, "llama.rope.scaling.factor", 4.0f), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    if (freqs)
        cr_assert_eq(gguf_writer_add_tensor(w, "rope_freqs.weight", COLI_F32, 1, &n_freqs, freqs,
                                            (size_t)n_freqs * sizeof(float)),
                     0);
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
}

Test(rope, linear_file_loads_unknown_refused) {
    char fixture[4096], path[4200];
    s_fixture("tiny-llama-moe-f32.gguf", fixture, sizeof fixture);
    snprintf(path, sizeof path, "%s/rope-test-%d.gguf", s_build(), (int)getpid());
    model *m = NULL;
    s_copy_with(fixture, path, "linear", NULL, 0);
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->hp.rope.scaling, ROPE_SCALING_LINEAR);
    cr_expect_eq(m->hp.rope.freq_scale, 0.25f);
    cr_expect_eq(m->hp.rope.ext_factor, 0.0f);
    model_close(&m);
    s_copy_with(fixture, path, "longrope", NULL, 0);
    cr_expect_eq(model_open(path, &m), COLI_EUNSUPPORTED);
    cr_expect(strstr(coli_last_error(), "rope.scaling.type") && strstr(coli_last_error(), "longrope"),
              "error names the key and the type: %s", coli_last_error());
    unlink(path);
}

/* rope_freqs.weight: read as the divisors (n_rot/2 F32), a zero refused. */
Test(rope, freq_factors_tensor_loads_bad_refused) {
    char fixture[4096], path[4200];
    s_fixture("tiny-llama-moe-f32.gguf", fixture, sizeof fixture);
    snprintf(path, sizeof path, "%s/rope-freqs-test-%d.gguf", s_build(), (int)getpid());
    model *m = NULL;
    cr_assert_eq(model_open(fixture, &m), 0, "%s", coli_last_error());
    const int64_t n = m->hp.n_rot / 2;
    model_close(&m);
    float freqs[512];
    cr_assert_leq(n, 512);
    for (int64_t i = 0; i < n; i++) freqs[i] = 1.0f + (float)i;
    s_copy_with(fixture, path, "none", freqs, n);
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    cr_assert_not_null(m->hp.rope.freq_factors);
    cr_expect_eq(m->hp.rope.freq_factors[n - 1], (float)n);
    model_close(&m);
    freqs[1] = 0.0f;
    s_copy_with(fixture, path, "none", freqs, n);
    cr_expect_eq(model_open(path, &m), COLI_EFORMAT);
    cr_expect(strstr(coli_last_error(), "rope_freqs.weight"), "%s", coli_last_error());
    unlink(path);
}

/* tiny-deepseek2: YaRN factor 8, log multiplier 0.1, key_length 48: q.k
 * scale (1 + 0.1 ln 8)^2 / sqrt(48); rope's magnitude cancels to 1. */
Test(rope, deepseek2_yarn_scales) {
    s_require_shared();
    char path[4096];
    s_ref_model("tiny-deepseek2-f32.gguf", path, sizeof path);
    model *m = NULL;
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    const double mscale = 1.0 + 0.1 * log(8.0);
    cr_expect(fabs(m->hp.attn_scale - mscale * mscale / sqrt(48.0)) < 1e-6, "attn_scale %g", m->hp.attn_scale);
    cr_expect_eq(m->hp.rope.scaling, ROPE_SCALING_YARN);
    float cs[16];
    rope_angles(&m->hp.rope, 7, cs);
    for (int i = 0; i < 8; i++)
        cr_expect(fabs(cs[2 * i] * cs[2 * i] + cs[2 * i + 1] * cs[2 * i + 1] - 1.0) < 1e-5, "pair %d magnitude", i);
    model_close(&m);
}
