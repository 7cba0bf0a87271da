/*
 * test_quantize_types.c - the weight quantizers of Q4_1, Q5_0, Q5_1, IQ4_NL,
 * Q2_K..Q6_K, IQ4_XS and llama.cpp's presets, against llama-quantize's own
 * files (../shared/reference/models/tiny-kquant-*.gguf, made from
 * tiny-kquant-f32.gguf; their per-tensor types are in the reference README):
 *  - per tensor, the RMSE against the F32 source of our quantization is at
 *    most 1.02x that of llama.cpp's (and, on x86-64 without FMA contraction,
 *    the bytes are the same);
 *  - quantizing the F32 source with the same preset and flags gives the same
 *    per-tensor types and data;
 *  - rows the block does not divide fall back (the bundled model's
 *    ffn_down rows are 384 long), or fail with a clear error under --pure;
 *  - the bundled model quantized to each common preset keeps its held-out
 *    perplexity (`coli perplexity`) close to the F16 file's;
 *  - MXFP4_MOE, TQ1_0, TQ2_0 (llama.cpp de3ff815's presets): per-tensor
 *    types, and the files run identically in-process and on a CPU worker.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_run.h"
#include "colibri.h"
#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "tests/ref_models.h"
#include "tests/quant_util.h"
#include "tests/sched_util.h"
#include "core/tensor.h"

/* The shipped files and the llama-quantize command that made each. */
static const struct shipped {
    const char *file, *preset, *output_type;
} s_shipped[] = {
    {"tiny-kquant-q3_k_m.gguf", "Q3_K_M", "Q2_K"},
    {"tiny-kquant-iq4_xs.gguf", "IQ4_XS", "IQ4_NL"},
    {"tiny-kquant-q4_1.gguf", "Q4_1", "Q5_0"},
    {"tiny-kquant-q5_1.gguf", "Q5_1", NULL},
};
#define N_SHIPPED (sizeof s_shipped / sizeof s_shipped[0])

static gguf_file *s_open(const char *path) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    return f;
}

static void s_shipped_path(const char *file, char *out, size_t cap) {
    snprintf(out, cap, "%s/reference/models/%s", s_shared(), file);
}

/* Per type: tensors seen, byte-identical ones, worst RMSE ratio. */
typedef struct type_stats {
    int n, identical;
    double worst;
    char worst_name[96];
} type_stats;

/* Compare our quantization of src with llama.cpp's tensor ref (same shape).
 * Returns ours/theirs RMSE; *identical = every row has the same bytes. */
static double s_compare_tensor(const coli_tensor *src, const coli_tensor *ref, int *identical) {
    const int64_t n_in = ref->ne[0], rows = coli_tensor_nelems(ref) / n_in;
    const size_t src_row = coli_row_bytes(src->type, n_in), q_row = coli_row_bytes(ref->type, n_in);
    float *x = malloc((size_t)n_in * sizeof *x), *ours = malloc((size_t)n_in * sizeof *ours);
    float *theirs = malloc((size_t)n_in * sizeof *theirs);
    uint8_t *q = malloc(q_row);
    cr_assert(x && ours && theirs && q);
    double se_ours = 0, se_theirs = 0;
    *identical = 1;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *ref_row = (const uint8_t *)ref->data + (size_t)r * q_row;
        coli_dequantize_row(src->type, (const uint8_t *)src->data + (size_t)r * src_row, x, n_in);
        coli_quantize_row(ref->type, x, q, n_in);
        if (memcmp(q, ref_row, q_row) != 0) *identical = 0;
        coli_dequantize_row(ref->type, q, ours, n_in);
        coli_dequantize_row(ref->type, ref_row, theirs, n_in);
        for (int64_t i = 0; i < n_in; i++) {
            se_ours += ((double)ours[i] - x[i]) * ((double)ours[i] - x[i]);
            se_theirs += ((double)theirs[i] - x[i]) * ((double)theirs[i] - x[i]);
        }
    }
    free(x);
    free(ours);
    free(theirs);
    free(q);
    cr_assert_gt(se_theirs, 0.0, "%s: llama.cpp's %s is exact?", ref->name, coli_dtype_name(ref->type));
    return sqrt(se_ours / se_theirs);
}

static void s_compare_file(const gguf_file *src, const char *file, type_stats *stats) {
    char path[4200];
    s_shipped_path(file, path, sizeof path);
    gguf_file *ref = s_open(path);
    for (int64_t i = 0; i < gguf_n_tensors(ref); i++) {
        const coli_tensor *t = gguf_tensor(ref, i);
        if (coli_dtype_block_elems(t->type) == 1) continue; /* F32 norms and routers */
        const coli_tensor *s = gguf_find_tensor(src, t->name);
        cr_assert(s, "%s: no source tensor %s", file, t->name);
        cr_assert_eq(coli_tensor_nelems(s), coli_tensor_nelems(t), "%s: %s shape", file, t->name);
        int identical;
        const double ratio = s_compare_tensor(s, t, &identical);
        type_stats *st = &stats[t->type];
        st->n++;
        st->identical += identical;
        if (ratio > st->worst) {
            st->worst = ratio;
            snprintf(st->worst_name, sizeof st->worst_name, "%s", t->name);
        }
        cr_expect_leq(ratio, 1.02, "%s %s (%s): RMSE %.4fx llama.cpp's", file, t->name, coli_dtype_name(t->type),
                      ratio);
#if defined(__x86_64__) && !defined(__FMA__)
        /* same float operations in the same order, no contraction: same bytes */
        cr_expect(identical, "%s %s (%s): bytes differ from llama-quantize's", file, t->name, coli_dtype_name(t->type));
#endif
    }
    gguf_close(&ref);
}

Test(quantize_types, rmse_within_2pct_of_llama_quantize) {
    s_require_shared();
    char f32[4096];
    s_ref_model("tiny-kquant-f32.gguf", f32, sizeof f32);
    gguf_file *src = s_open(f32);
    static type_stats stats[64];
    memset(stats, 0, sizeof stats);
    for (size_t i = 0; i < N_SHIPPED; i++) s_compare_file(src, s_shipped[i].file, stats);
    int types = 0;
    for (int t = 0; t < 64; t++) {
        if (!stats[t].n) continue;
        types++;
        cr_log_info("%-6s %2d tensors, %2d byte-identical to llama-quantize, worst RMSE ratio %.6f (%s)",
                    coli_dtype_name((uint32_t)t), stats[t].n, stats[t].identical, stats[t].worst, stats[t].worst_name);
    }
    cr_expect_eq(types, 10, "the shipped files cover Q2_K..Q6_K, IQ4_XS, IQ4_NL, Q4_1, Q5_0, Q5_1");
    gguf_close(&src);
}

/* Our file for a shipped one: same preset, same --output-type. */
static void s_quantize_like(const char *f32, const struct shipped *sh, char *out, size_t cap) {
    snprintf(out, cap, "%s/ref/quantize-types-%s", s_build(), sh->file);
    const coli_quantize_params p = {.output_type = sh->output_type};
    cr_assert_eq(coli_quantize_file_params(f32, out, sh->preset, &p), 0, "%s", coli_last_error());
}

Test(quantize_types, presets_give_llama_quantize_types_and_data) {
    s_require_shared();
    char f32[4096], out[4200], ref_path[4200];
    s_ref_model("tiny-kquant-f32.gguf", f32, sizeof f32);
    for (size_t i = 0; i < N_SHIPPED; i++) {
        s_quantize_like(f32, &s_shipped[i], out, sizeof out);
        s_shipped_path(s_shipped[i].file, ref_path, sizeof ref_path);
        gguf_file *ours = s_open(out), *ref = s_open(ref_path);
        cr_assert_eq(gguf_n_tensors(ours), gguf_n_tensors(ref), "%s", s_shipped[i].file);
        for (int64_t k = 0; k < gguf_n_tensors(ref); k++) {
            const coli_tensor *r = gguf_tensor(ref, k), *o = gguf_tensor(ours, k);
            cr_expect_str_eq(o->name, r->name, "%s: tensor %lld", s_shipped[i].file, (long long)k);
            cr_expect_eq(o->type, r->type, "%s %s: %s, llama-quantize wrote %s", s_shipped[i].file, r->name,
                         coli_dtype_name(o->type), coli_dtype_name(r->type));
        }
        uint32_t ft_ours = 0, ft_ref = 1;
        cr_assert_eq(gguf_get_u32(ours, "general.file_type", &ft_ours), 0);
        cr_assert_eq(gguf_get_u32(ref, "general.file_type", &ft_ref), 0);
        cr_expect_eq(ft_ours, ft_ref, "%s: general.file_type %u, llama.cpp %u", s_shipped[i].file, ft_ours, ft_ref);
        gguf_close(&ours);
        gguf_close(&ref);
#if defined(__x86_64__) && !defined(__FMA__)
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", out, ref_path);
        cr_expect_eq(system(cmd), 0, "%s is not byte-identical to %s", out, ref_path);
#endif
        remove(out);
    }
}

/* The bundled model's ffn_down rows are 384 long: Q4_K_M's Q4_K/Q6_K do not
 * fit, llama.cpp falls back to Q5_0/Q8_0; --pure Q4_K is an error naming
 * the tensor. */
Test(quantize_types, rows_the_block_does_not_divide) {
    char out[4200];
    const char *in = "models/tiny-moe-4e2r-f16.gguf";
    snprintf(out, sizeof out, "%s/quantize-types-fallback.gguf", s_build());
    cr_assert_eq(coli_quantize_file(in, out, "Q4_K_M"), 0, "%s", coli_last_error());
    gguf_file *f = s_open(out);
    int n_down = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (!strstr(t->name, "ffn_down")) continue;
        n_down++;
        cr_expect(t->type == COLI_Q5_0 || t->type == COLI_Q8_0, "%s: %s", t->name, coli_dtype_name(t->type));
    }
    cr_expect_eq(n_down, 4);
    cr_expect_eq(gguf_find_tensor(f, "blk.0.ffn_up_exps.weight")->type, COLI_Q4_K);
    cr_expect_eq(gguf_find_tensor(f, "output.weight")->type, COLI_Q6_K);
    gguf_close(&f);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    coli_model *m = NULL;
    cr_expect_eq(coli_model_load(out, &mp, &m), 0, "%s", coli_last_error());
    coli_model_free(&m);
    remove(out);

    const coli_quantize_params pure = {.pure = 1};
    cr_assert_eq(coli_quantize_file_params(in, out, "Q4_K", &pure), COLI_EUNSUPPORTED);
    cr_expect(strstr(coli_last_error(), "ffn_down_exps") && strstr(coli_last_error(), "384"), "%s", coli_last_error());
}

static coli_dtype s_type_of(const gguf_file *f, const char *name) {
    const coli_tensor *t = gguf_find_tensor(f, name);
    cr_assert(t, "no tensor %s", name);
    return t->type;
}

/* An 8-expert model (tiny-mixtral: 4 layers, GQA 2). The reference README
 * states llama.cpp's stock Q4_0: output.weight Q6_K, attn_k/attn_v Q8_0 with
 * 8 experts; Q4_K_M adds (llama-quant.cpp) attn_output Q5_K with 8 experts
 * and ffn_down Q6_K where use_more_bits holds (layers 2 and 3 of 4). */
Test(quantize_types, eight_expert_mixes) {
    s_require_shared();
    char f32[4096], out[4200];
    s_ref_model("tiny-mixtral-f32.gguf", f32, sizeof f32);
    snprintf(out, sizeof out, "%s/ref/quantize-types-mixtral.gguf", s_build());
    cr_assert_eq(coli_quantize_file(f32, out, "Q4_0"), 0, "%s", coli_last_error());
    gguf_file *f = s_open(out);
    cr_expect_eq(s_type_of(f, "output.weight"), COLI_Q6_K);
    cr_expect_eq(s_type_of(f, "token_embd.weight"), COLI_Q4_0);
    cr_expect_eq(s_type_of(f, "blk.1.attn_k.weight"), COLI_Q8_0);
    cr_expect_eq(s_type_of(f, "blk.3.attn_v.weight"), COLI_Q8_0);
    cr_expect_eq(s_type_of(f, "blk.0.attn_q.weight"), COLI_Q4_0);
    cr_expect_eq(s_type_of(f, "blk.2.ffn_down_exps.weight"), COLI_Q4_0);
    gguf_close(&f);
    cr_assert_eq(coli_quantize_file(f32, out, "Q4_K_M"), 0, "%s", coli_last_error());
    f = s_open(out);
    static const coli_dtype down[4] = {COLI_Q4_K, COLI_Q4_K, COLI_Q6_K, COLI_Q6_K};
    for (int l = 0; l < 4; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
        cr_expect_eq(s_type_of(f, name), down[l], "%s", name);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", l);
        cr_expect_eq(s_type_of(f, name), COLI_Q5_K, "%s", name);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        cr_expect_eq(s_type_of(f, name), COLI_Q8_0, "%s", name);
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
        cr_expect_eq(s_type_of(f, name), COLI_Q4_K, "%s", name);
    }
    uint32_t ft = 0;
    cr_expect_eq(gguf_get_u32(f, "general.file_type", &ft), 0);
    cr_expect_eq(ft, 15, "LLAMA_FTYPE_MOSTLY_Q4_K_M");
    gguf_close(&f);
    remove(out);
}

/* Rows are split over threads; the bytes must not depend on how many. */
Test(quantize_types, same_bytes_for_any_thread_count) {
    char one[4200], three[4200], cmd[9000];
    const char *in = "models/tiny-moe-4e2r-f16.gguf";
    snprintf(one, sizeof one, "%s/quantize-types-t1.gguf", s_build());
    snprintf(three, sizeof three, "%s/quantize-types-t3.gguf", s_build());
    coli_quantize_params p = {.n_threads = 1};
    cr_assert_eq(coli_quantize_file_params(in, one, "Q3_K_M", &p), 0, "%s", coli_last_error());
    p.n_threads = 3;
    cr_assert_eq(coli_quantize_file_params(in, three, "Q3_K_M", &p), 0, "%s", coli_last_error());
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", one, three);
    cr_expect_eq(system(cmd), 0, "1 and 3 threads wrote different files");
    remove(one);
    remove(three);
}

Test(quantize_types, unknown_type_names_the_accepted_ones) {
    cr_assert_eq(coli_quantize_file("models/tiny-moe-4e2r-f16.gguf", "/tmp/never.gguf", "Q4_K_X"), COLI_EINVAL);
    cr_expect(strstr(coli_last_error(), "Q4_K_X") && strstr(coli_last_error(), "Q4_K_M") &&
                  strstr(coli_last_error(), "IQ4_XS"),
              "%s", coli_last_error());
    const coli_quantize_params bad = {.output_type = "Q8_K"};
    cr_assert_eq(coli_quantize_file_params("models/tiny-moe-4e2r-f16.gguf", "/tmp/never.gguf", "Q4_K_M", &bad),
                 COLI_EINVAL);
    cr_expect(strstr(coli_last_error(), "Q8_K"), "%s", coli_last_error());
    cr_expect(coli_quantize_type_known("Q5_K_M") && !coli_quantize_type_known("Q8_K"));
}

/* A zero row is exactly zero after any type; a row of one repeated value
 * comes back within the type's scale rounding. */
Test(quantize_types, zero_and_constant_rows) {
    static const coli_dtype types[] = {COLI_Q4_1, COLI_Q5_0, COLI_Q5_1, COLI_IQ4_NL, COLI_Q2_K,
                                       COLI_Q3_K, COLI_Q4_K, COLI_Q5_K, COLI_Q6_K,   COLI_IQ4_XS};
    float x[512], y[512];
    uint8_t q[512 * 2];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        memset(x, 0, sizeof x);
        memset(q, 0xa5, sizeof q);
        coli_quantize_row(types[k], x, q, 512);
        coli_dequantize_row(types[k], q, y, 512);
        for (int i = 0; i < 512; i++)
            cr_assert_eq(y[i], 0.0f, "%s: zero row gives %g at %d", coli_dtype_name(types[k]), y[i], i);
        for (int i = 0; i < 512; i++) x[i] = 0.75f;
        coli_quantize_row(types[k], x, q, 512);
        coli_dequantize_row(types[k], q, y, 512);
        for (int i = 0; i < 512; i++)
            cr_assert(fabsf(y[i] - 0.75f) < 0.02f, "%s: constant 0.75 gives %g at %d", coli_dtype_name(types[k]), y[i],
                      i);
    }
}

/* `coli perplexity` of a model on the bundled held-out text (docs/models.md). */
static double s_perplexity(const char *model) {
    char coli[512];
    cli_build_path(coli, sizeof coli, "bin/coli");
    cr_assert(cli_file_exists(coli), "%s missing (make all first)", coli);
    char *argv[] = {coli,       "perplexity", "-m", (char *)model, "-f", "tests/fixtures/tiny-moe-4e2r-valid.txt",
                    "--inproc", "-t",         "1",  NULL};
    cli_result res = cli_run(argv);
    cr_assert_eq(res.status, 0, "coli perplexity %s failed: %s", model, res.err);
    const char *p = strstr(res.out, "perplexity: ");
    cr_assert_not_null(p, "no 'perplexity: ' in coli's output: %s", res.out);
    const double v = strtod(p + 12, NULL);
    cli_result_free(&res);
    return v;
}

/* The presets people download, on the bundled model: perplexity within a
 * bound that widens with fewer bits (measured on the whole held-out split,
 * docs/quantize.md: Q6_K +0.04 %, Q4_K_M +0.12 %, Q2_K +2.5 %). */
Test(quantize_types, presets_perplexity_close_to_f16) {
    static const struct {
        const char *preset;
        double max_rel;
    } cases[] = {
        {"Q6_K", 0.005},  {"Q5_K_M", 0.02}, {"Q4_K_M", 0.02},    {"IQ4_XS", 0.02},
        {"Q3_K_M", 0.03}, {"Q2_K", 0.08},   {"MXFP4_MOE", 0.02}, /* measured +0.28 % on the fixture text */
        {"TQ2_0", 0.5}, /* +28 %: ternary weights of a model not trained for them; garbage is far worse */
    };
    const char *f16 = "models/tiny-moe-4e2r-f16.gguf";
    const double base = s_perplexity(f16);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[4200];
        snprintf(out, sizeof out, "%s/quantize-types-ppl-%s.gguf", s_build(), cases[i].preset);
        cr_assert_eq(coli_quantize_file(f16, out, cases[i].preset), 0, "%s", coli_last_error());
        const double ppl = s_perplexity(out), rel = ppl / base - 1;
        cr_log_info("%-6s perplexity %.4f (F16 %.4f, %+.2f %%)", cases[i].preset, ppl, base, 100 * rel);
        cr_expect(rel >= -cases[i].max_rel && rel <= cases[i].max_rel, "%s: perplexity %.4f vs F16 %.4f",
                  cases[i].preset, ppl, base);
        remove(out);
    }
}

/* The command: a preset with --output-type, its type summary on stdout; an
 * unknown TYPE is a usage error (exit 2) that lists the accepted names. */
Test(quantize_types, cli_flags_and_summary) {
    char coli[512], out[4200];
    cli_build_path(coli, sizeof coli, "bin/coli");
    snprintf(out, sizeof out, "%s/quantize-types-cli.gguf", s_build());
    char *argv[] = {coli,     "quantize", "--output-type", "Q8_0", "-t", "2", "models/tiny-moe-4e2r-f16.gguf", out,
                    "IQ4_XS", NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "IQ4_XS 25") && strstr(r.out, "IQ4_NL 4") && strstr(r.out, "Q8_0 1"), "%s", r.out);
    cli_result_free(&r);
    gguf_file *f = s_open(out);
    cr_expect_eq(s_type_of(f, "output.weight"), COLI_Q8_0);
    gguf_close(&f);
    remove(out);
    char *bad[] = {coli, "quantize", "models/tiny-moe-4e2r-f16.gguf", out, "Q4_K_XL", NULL};
    r = cli_run(bad);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "Q4_K_XL") && strstr(r.err, "Q4_K_M"), "%s", r.err);
    cli_result_free(&r);
}

/* ---- MXFP4_MOE, TQ1_0, TQ2_0 ----------------------------------------------- */

static void s_quantize_bundled(const char *preset, const coli_quantize_params *p, char *out, size_t cap) {
    snprintf(out, cap, "%s/quantize-types-%s.gguf", s_build(), preset);
    cr_assert_eq(coli_quantize_file_params("models/tiny-moe-4e2r-f16.gguf", out, preset, p), 0, "%s: %s", preset,
                 coli_last_error());
}

static uint32_t s_file_type(const gguf_file *f) {
    uint32_t ft = 0;
    cr_assert_eq(gguf_get_u32(f, "general.file_type", &ft), 0);
    return ft;
}

/* llama.cpp de3ff815's llama_tensor_get_type: MXFP4_MOE gives the experts
 * (ne[2] > 1) MXFP4 and every other weight, output included, Q8_0; --pure
 * every weight MXFP4; MXFP4 is our name for the same preset. */
Test(quantize_types, mxfp4_moe_mix) {
    char out[4200];
    const coli_quantize_params none = {0}, pure = {.pure = 1};
    s_quantize_bundled("MXFP4_MOE", &none, out, sizeof out);
    gguf_file *f = s_open(out);
    int n_exps = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        const coli_dtype want = t->n_dims < 2 ? COLI_F32 : t->ne[2] > 1 ? COLI_MXFP4 : COLI_Q8_0;
        if (strstr(t->name, "gate_inp")) continue; /* routers stay F32 */
        n_exps += want == COLI_MXFP4;
        cr_expect_eq(t->type, want, "%s: %s, want %s", t->name, coli_dtype_name(t->type), coli_dtype_name(want));
    }
    cr_expect_eq(n_exps, 12);
    cr_expect_eq(s_file_type(f), 38, "LLAMA_FTYPE_MOSTLY_MXFP4_MOE");
    gguf_close(&f);
    s_quantize_bundled("MXFP4", &pure, out, sizeof out);
    f = s_open(out);
    cr_expect_eq(s_type_of(f, "output.weight"), COLI_MXFP4);
    cr_expect_eq(s_type_of(f, "blk.1.attn_q.weight"), COLI_MXFP4);
    cr_expect_eq(s_type_of(f, "blk.1.ffn_down_exps.weight"), COLI_MXFP4);
    gguf_close(&f);
    remove(out);
}

/* TQ1_0/TQ2_0: token_embd Q4_K, output Q6_K, ffn_down_exps (rows of 384)
 * falls back to Q4_0, the rest ternary. The two layouts hold the same
 * values: every ternary tensor of the two files dequantizes identically. */
Test(quantize_types, ternary_mixes_hold_the_same_values) {
    char o1[4200], o2[4200];
    const coli_quantize_params none = {0};
    s_quantize_bundled("TQ1_0", &none, o1, sizeof o1);
    s_quantize_bundled("TQ2_0", &none, o2, sizeof o2);
    gguf_file *f1 = s_open(o1), *f2 = s_open(o2);
    cr_expect_eq(s_file_type(f1), 36);
    cr_expect_eq(s_file_type(f2), 37);
    cr_expect_eq(s_type_of(f1, "token_embd.weight"), COLI_Q4_K);
    cr_expect_eq(s_type_of(f1, "output.weight"), COLI_Q6_K);
    cr_expect_eq(s_type_of(f2, "blk.0.ffn_down_exps.weight"), COLI_Q4_0);
    int n_ternary = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f1); i++) {
        const coli_tensor *a = gguf_tensor(f1, i), *b = gguf_find_tensor(f2, a->name);
        if (a->type != COLI_TQ1_0) continue;
        cr_assert(b && b->type == COLI_TQ2_0, "%s", a->name);
        const int64_t n = coli_tensor_nelems(a);
        float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
        cr_assert(va && vb);
        coli_dequantize_row(COLI_TQ1_0, a->data, va, n);
        coli_dequantize_row(COLI_TQ2_0, b->data, vb, n);
        cr_expect_eq(memcmp(va, vb, sizeof(float) * (size_t)n), 0, "%s", a->name);
        free(va);
        free(vb);
        n_ternary++;
    }
    cr_expect_eq(n_ternary, 24);
    gguf_close(&f1);
    gguf_close(&f2);
    remove(o1);
    remove(o2);
}

/* Each file gives a CPU worker process's run the in-process engine's bytes
 * (tokens and logits of sched_util's greedy run). */
Test(quantize_types, fp4_ternary_files_run_alike_on_a_worker, .timeout = 300) {
    static const char *const presets[] = {"MXFP4_MOE", "TQ1_0", "TQ2_0"};
    sched_env_defaults();
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        char out[4200];
        const coli_quantize_params none = {0};
        s_quantize_bundled(presets[i], &none, out, sizeof out);
        gen_result ref, got;
        sched_generate(out, "inproc", NULL, NULL, &ref);
        sched_generate(out, "cpu:1", NULL, NULL, &got);
        sched_assert_same(&ref, &got, presets[i]);
        gen_free(&ref);
        gen_free(&got);
        remove(out);
    }
    sched_assert_no_orphans();
}

/* ---- IQ grid types (computed; not written without an importance matrix) -- */

Test(quantize_types, iq_types_need_an_imatrix) {
    /* not IQ3_S: llama.cpp quantizes it without one (x^2 weights) */
    static const char *const types[] = {"IQ2_XXS", "IQ3_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M"};
    char out[4200];
    snprintf(out, sizeof out, "%s/quantize-types-iq2.gguf", s_build());
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const coli_quantize_params p = {.output_type = types[i]};
        char want[128];
        snprintf(want, sizeof want, "output type '%s' needs an importance matrix", types[i]);
        cr_assert_eq(coli_quantize_file_params("models/tiny-moe-4e2r-f16.gguf", out, "Q4_K_M", &p), COLI_EUNSUPPORTED);
        cr_expect(strstr(coli_last_error(), want), "%s", coli_last_error());
        cr_expect_null(strchr(coli_last_error(), '\n'), "one line: %s", coli_last_error());
    }
}

/* The bundled model with every F16 matrix whose rows are whole blocks
 * (token_embd, output, attention, ffn_gate_exps/ffn_up_exps; not
 * ffn_down_exps: rows of 384) replaced by random blocks of type t (random
 * bytes, d = 1/2048: IQ2_XXS values up to 0.33), everything else copied:
 * the coordinator's dense matmuls and embedding rows read the type too. */
static void s_write_iq_model(const char *out, coli_dtype t) {
    gguf_file *in = s_open("models/tiny-moe-4e2r-f16.gguf");
    gguf_writer *w = gguf_writer_new();
    cr_assert(w);
    for (int64_t i = 0; i < gguf_n_kv(in); i++) cr_assert_eq(gguf_writer_copy_kv(w, in, i), 0);
    void *bufs[64] = {0};
    unsigned seed = 2024;
    const size_t bb = coli_dtype_block_bytes(t);
    const uint16_t d = coli_fp32_to_fp16(1.0f / 2048);
    cr_assert_leq(gguf_n_tensors(in), 64);
    for (int64_t i = 0; i < gguf_n_tensors(in); i++) {
        const coli_tensor *ti = gguf_tensor(in, i);
        if (ti->type == COLI_F16 && ti->ne[0] % COLI_QK_K == 0) {
            const size_t n = coli_row_bytes(t, coli_tensor_nelems(ti));
            uint8_t *b = malloc(n);
            cr_assert(b);
            for (size_t k = 0; k < n; k++) b[k] = (uint8_t)qu_next(&seed);
            for (size_t k = 0; k < n; k += bb) qu_put_d(t, b + k, 0, d);
            bufs[i] = b;
            cr_assert_eq(gguf_writer_add_tensor(w, ti->name, t, ti->n_dims, ti->ne, b, n), 0);
        } else {
            cr_assert_eq(gguf_writer_add_tensor(w, ti->name, ti->type, ti->n_dims, ti->ne, ti->data, ti->nbytes), 0);
        }
    }
    cr_assert_eq(gguf_writer_write(w, out), 0, "%s", coli_last_error());
    for (int i = 0; i < 64; i++) free(bufs[i]);
    gguf_writer_free(&w);
    gguf_close(&in);
}

/* in-process and a cpu:1 worker give the same tokens and logits, finite */
static void s_iq_experts_run_alike(coli_dtype t) {
    char out[4200];
    snprintf(out, sizeof out, "%s/quantize-types-%s-experts.gguf", s_build(), coli_dtype_name(t));
    s_write_iq_model(out, t);
    sched_env_defaults();
    gen_result ref, got;
    sched_generate(out, "inproc", NULL, NULL, &ref);
    sched_generate(out, "cpu:1", NULL, NULL, &got);
    sched_assert_same(&ref, &got, coli_dtype_name(t));
    for (int i = 0; i < (GEN_STEPS + 1) * ref.n_vocab; i++) cr_assert(isfinite(ref.logits[i]), "logit %d", i);
    gen_free(&ref);
    gen_free(&got);
    remove(out);
    sched_assert_no_orphans();
}

Test(quantize_types, iq2_xxs_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ2_XXS); }
Test(quantize_types, iq3_xxs_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ3_XXS); }
Test(quantize_types, iq2_xs_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ2_XS); }
Test(quantize_types, iq3_s_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ3_S); }
Test(quantize_types, iq2_s_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ2_S); }
Test(quantize_types, iq1_s_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ1_S); }
Test(quantize_types, iq1_m_experts_run_alike_on_a_worker, .timeout = 300) { s_iq_experts_run_alike(COLI_IQ1_M); }
