/*
 * test_expert_ffn.c - expert_ffn against a float64 reference and its row
 * independence; expert_weights_from_gguf slicing and its errors, on small
 * GGUF files written with our writer.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "colibri.h"
#include "core/kernels/expert_ffn.h"
#include "core/quant/quant.h"

enum {
    EMBD = 64,
    FF = 96,
    NEXP = 3
};

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 8388608.0f - 1.0f) * 0.3f;
}

/* Row f of the gate and up projections of one input row x, in double. */
static void s_gate_up(const float *gate, const float *up, const float *x, int f, double *g, double *u) {
    *g = *u = 0;
    for (int k = 0; k < EMBD; k++) {
        *g += (double)gate[f * EMBD + k] * x[k];
        *u += (double)up[f * EMBD + k] * x[k];
    }
}

Test(expert_ffn, matches_float64_reference_and_rows_are_independent) {
    static float gate[FF * EMBD], up[FF * EMBD], down[EMBD * FF], x[5 * EMBD], out[5 * EMBD], one[EMBD];
    unsigned s = 3;
    for (int i = 0; i < FF * EMBD; i++) {
        gate[i] = frand(&s);
        up[i] = frand(&s);
        down[i] = frand(&s);
    }
    for (int i = 0; i < 5 * EMBD; i++) x[i] = frand(&s) * 4;
    expert_weights w = {.gate = gate,
                        .up = up,
                        .down = down,
                        .gate_type = COLI_F32,
                        .up_type = COLI_F32,
                        .down_type = COLI_F32,
                        .n_embd = EMBD,
                        .n_ff = FF};
    cr_assert_eq(expert_weights_bytes(&w), (size_t)3 * FF * EMBD * 4);
    coli_pool *pool = coli_pool_new(2);
    coli_scratch sc = {0};
    cr_assert_eq(expert_ffn(pool, &sc, &w, x, 5, out), 0, "%s", coli_last_error());
    for (int r = 0; r < 5; r++) {
        double h[FF];
        for (int f = 0; f < FF; f++) {
            double g, u;
            s_gate_up(gate, up, x + r * EMBD, f, &g, &u);
            h[f] = g / (1 + exp(-g)) * u;
        }
        for (int o = 0; o < EMBD; o++) {
            double y = 0, m = 0;
            for (int f = 0; f < FF; f++) {
                y += (double)down[o * FF + f] * h[f];
                m += fabs(down[o * FF + f] * h[f]);
            }
            cr_assert_leq(fabs(out[r * EMBD + o] - y), 1e-5 * m + 1e-6, "row %d out %d: %g vs %g", r, o,
                          out[r * EMBD + o], y);
        }
        /* the row alone, one thread, no scratch: same bits */
        cr_assert_eq(expert_ffn(NULL, NULL, &w, x + r * EMBD, 1, one), 0);
        cr_assert_eq(memcmp(one, out + r * EMBD, sizeof one), 0, "row %d alone differs", r);
    }
    cr_assert_eq(expert_ffn(pool, &sc, &w, x, 0, out), 0);
    cr_assert_eq(expert_ffn(pool, &sc, NULL, x, 1, out), COLI_EINVAL);
    coli_scratch_free(&sc);
    coli_pool_destroy(&pool);
}

/* gpt-oss's SWIGLU_OAI with biases against float64: g = Wg x + bg, u = Wu x
 * + bu, x' = min(g, 7), h = x' sigmoid(1.702 x') (clamp(u, +-7) + 1), out =
 * Wd h + bd; weights large enough that both clamps are reached. Rows alone
 * give the same bits (workers vs in-process). */
Test(expert_ffn, swiglu_oai_with_biases_matches_float64) {
    static float gate[FF * EMBD], up[FF * EMBD], down[EMBD * FF], x[3 * EMBD], out[3 * EMBD], one[EMBD];
    static float bg[FF], bu[FF], bd[EMBD];
    unsigned s = 11;
    for (int i = 0; i < FF * EMBD; i++) {
        gate[i] = frand(&s) * 8;
        up[i] = frand(&s) * 8;
        down[i] = frand(&s);
    }
    for (int i = 0; i < FF; i++) bg[i] = frand(&s), bu[i] = frand(&s);
    for (int i = 0; i < EMBD; i++) bd[i] = frand(&s);
    for (int i = 0; i < 3 * EMBD; i++) x[i] = frand(&s) * 4;
    expert_weights w = {.gate = gate,
                        .up = up,
                        .down = down,
                        .n_embd = EMBD,
                        .n_ff = FF,
                        .gate_bias = bg,
                        .up_bias = bu,
                        .down_bias = bd};
    expert_weights_set_act(&w, EXPERT_ACT_SWIGLU_OAI);
    cr_assert_eq(expert_ffn(NULL, NULL, &w, x, 3, out), 0, "%s", coli_last_error());
    int clamped_g = 0, clamped_u = 0;
    for (int r = 0; r < 3; r++) {
        double h[FF];
        for (int f = 0; f < FF; f++) {
            double g = bg[f], u = bu[f];
            for (int k = 0; k < EMBD; k++) {
                g += (double)gate[f * EMBD + k] * x[r * EMBD + k];
                u += (double)up[f * EMBD + k] * x[r * EMBD + k];
            }
            clamped_g += g > 7.0;
            clamped_u += fabs(u) > 7.0;
            const double xg = g < 7.0 ? g : 7.0, yu = u < -7.0 ? -7.0 : (u > 7.0 ? 7.0 : u);
            h[f] = xg / (1.0 + exp(-1.702 * xg)) * (yu + 1.0);
        }
        for (int o = 0; o < EMBD; o++) {
            double y = bd[o], m = fabs(bd[o]);
            for (int f = 0; f < FF; f++) {
                y += (double)down[o * FF + f] * h[f];
                m += fabs(down[o * FF + f] * h[f]);
            }
            cr_assert_leq(fabs(out[r * EMBD + o] - y), 1e-5 * m + 1e-6, "row %d out %d: %g vs %g", r, o,
                          out[r * EMBD + o], y);
        }
        cr_assert_eq(expert_ffn(NULL, NULL, &w, x + r * EMBD, 1, one), 0);
        cr_assert_eq(memcmp(one, out + r * EMBD, sizeof one), 0, "row %d alone differs", r);
    }
    cr_expect_gt(clamped_g, 0, "no gate value reached the limit");
    cr_expect_gt(clamped_u, 0, "no up value reached the limit");
}

/* kimi-k3's situ against float64: h = b tanh(g / b) sigmoid(g) * l tanh(u /
 * l) (b = 1.5, l = 2), and with l = 0 the up branch unchanged; the inputs
 * large enough that both tanh saturate. */
Test(expert_ffn, situ_matches_float64) {
    static float gate[FF * EMBD], up[FF * EMBD], down[EMBD * FF], x[2 * EMBD], out[2 * EMBD];
    unsigned s = 17;
    for (int i = 0; i < FF * EMBD; i++) {
        gate[i] = frand(&s) * 4;
        up[i] = frand(&s) * 4;
        down[i] = frand(&s);
    }
    for (int i = 0; i < 2 * EMBD; i++) x[i] = frand(&s) * 8;
    for (int lin = 0; lin < 2; lin++) {
        expert_weights w = {.gate = gate, .up = up, .down = down, .n_embd = EMBD, .n_ff = FF};
        expert_weights_set_act(&w, EXPERT_ACT_SITU);
        w.alpha = 1.5f;
        w.limit = lin ? 2.0f : 0.0f;
        cr_assert_eq(expert_ffn(NULL, NULL, &w, x, 2, out), 0, "%s", coli_last_error());
        int saturated = 0;
        for (int r = 0; r < 2; r++) {
            double h[FF];
            for (int f = 0; f < FF; f++) {
                double g, u;
                s_gate_up(gate, up, x + r * EMBD, f, &g, &u);
                saturated += fabs(g) > 2.0 && fabs(u) > 3.0;
                h[f] = 1.5 * tanh(g / 1.5) / (1.0 + exp(-g)) * (lin ? 2.0 * tanh(u / 2.0) : u);
            }
            for (int o = 0; o < EMBD; o++) {
                double y = 0, m = 0;
                for (int f = 0; f < FF; f++) {
                    y += (double)down[o * FF + f] * h[f];
                    m += fabs(down[o * FF + f] * h[f]);
                }
                cr_assert_leq(fabs(out[r * EMBD + o] - y), 1e-5 * m + 1e-6, "lin %d row %d out %d: %g vs %g", lin, r, o,
                              out[r * EMBD + o], y);
            }
        }
        cr_expect_gt(saturated, 0, "no value where tanh saturates");
    }
}

/* ---- expert_weights_from_gguf ------------------------------------------- */

static char s_path[64];

static void write_model(coli_dtype t, const int64_t *ne_gate, const int64_t *ne_up, const int64_t *ne_down,
                        int down_dims) {
    gguf_writer *w = gguf_writer_new();
    cr_assert_not_null(w);
    const int64_t *nes[3] = {ne_gate, ne_up, ne_down};
    const char *names[3] = {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"};
    void *bufs[3];
    for (int i = 0; i < 3; i++) {
        int dims = i == 2 ? down_dims : 3;
        int64_t rows = 1;
        for (int d = 1; d < dims; d++) rows *= nes[i][d];
        size_t bytes = coli_row_bytes(t, nes[i][0]) * (size_t)rows;
        bufs[i] = calloc(1, bytes);
        /* mark each expert's first byte so slices can be told apart */
        size_t per = bytes / (size_t)(dims == 3 ? nes[i][2] : 1);
        for (int64_t e = 0; e < (dims == 3 ? nes[i][2] : 1); e++)
            ((uint8_t *)bufs[i])[(size_t)e * per] = (uint8_t)(e + 1);
        cr_assert_eq(gguf_writer_add_tensor(w, names[i], t, dims, nes[i], bufs[i], bytes), 0, "%s", coli_last_error());
    }
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    strcpy(s_path, "/tmp/coli-expert-XXXXXX");
    int fd = mkstemp(s_path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(gguf_writer_write(w, s_path), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    for (int i = 0; i < 3; i++) free(bufs[i]);
}

static gguf_file *open_model(void) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(s_path, &f), 0, "%s", coli_last_error());
    unlink(s_path);
    return f;
}

Test(expert_gguf, slices_each_expert) {
    const int64_t g[3] = {EMBD, FF, NEXP}, d[3] = {FF, EMBD, NEXP};
    write_model(COLI_Q8_0, g, g, d, 3);
    gguf_file *f = open_model();
    const coli_tensor *tg = gguf_find_tensor(f, "blk.0.ffn_gate_exps.weight");
    const coli_tensor *td = gguf_find_tensor(f, "blk.0.ffn_down_exps.weight");
    for (int e = 0; e < NEXP; e++) {
        expert_weights w;
        cr_assert_eq(expert_weights_from_gguf(f, 0, e, &w), 0, "%s", coli_last_error());
        cr_assert_eq(w.n_embd, EMBD);
        cr_assert_eq(w.n_ff, FF);
        cr_assert_eq(w.gate_type, COLI_Q8_0);
        cr_assert_eq((const uint8_t *)w.gate,
                     (const uint8_t *)tg->data + (size_t)e * FF * coli_row_bytes(COLI_Q8_0, EMBD));
        cr_assert_eq((const uint8_t *)w.down,
                     (const uint8_t *)td->data + (size_t)e * EMBD * coli_row_bytes(COLI_Q8_0, FF));
        cr_assert_eq(*(const uint8_t *)w.up, e + 1);
        cr_assert_eq(expert_weights_bytes(&w), 3 * (size_t)FF * EMBD / 32 * 34);
    }
    expert_weights w;
    cr_assert_eq(expert_weights_from_gguf(f, 0, NEXP, &w), COLI_ERANGE);
    cr_assert(strstr(coli_last_error(), "expert 3 out of range"), "%s", coli_last_error());
    cr_assert_eq(expert_weights_from_gguf(f, 0, -1, &w), COLI_ERANGE);
    cr_assert_eq(expert_weights_from_gguf(f, 1, 0, &w), COLI_EFORMAT);
    cr_assert(strstr(coli_last_error(), "blk.1.ffn_gate_exps.weight"), "%s", coli_last_error());
    cr_assert(strstr(coli_last_error(), "missing"), "%s", coli_last_error());
    gguf_close(&f);
}

Test(expert_gguf, inconsistent_shapes_name_the_tensor) {
    const int64_t g[3] = {EMBD, FF, NEXP}, u[3] = {EMBD, FF + 32, NEXP}, d[3] = {FF, EMBD, NEXP};
    write_model(COLI_F16, g, u, d, 3);
    gguf_file *f = open_model();
    expert_weights w;
    cr_assert_eq(expert_weights_from_gguf(f, 0, 0, &w), COLI_EFORMAT);
    cr_assert(strstr(coli_last_error(), "blk.0.ffn_up_exps.weight"), "%s", coli_last_error());
    gguf_close(&f);

    const int64_t d2[3] = {FF, EMBD, NEXP + 1};
    write_model(COLI_F16, g, g, d2, 3);
    f = open_model();
    cr_assert_eq(expert_weights_from_gguf(f, 0, 0, &w), COLI_EFORMAT);
    cr_assert(strstr(coli_last_error(), "blk.0.ffn_down_exps.weight"), "%s", coli_last_error());
    gguf_close(&f);

    const int64_t d3[2] = {FF, EMBD};
    write_model(COLI_F16, g, g, d3, 2);
    f = open_model();
    cr_assert_eq(expert_weights_from_gguf(f, 0, 0, &w), COLI_EFORMAT);
    cr_assert(strstr(coli_last_error(), "2 dims"), "%s", coli_last_error());
    gguf_close(&f);
}
