/*
 * test_imatrix.c - `coli imatrix` and the IQ quantizers it feeds, against
 * llama.cpp de3ff815 (tests/fixtures/imatrix/README says how each file was
 * made):
 *  - our imatrix of the bundled tiny MoE over tiny-moe-4e2r-valid.txt
 *    (-c 128: 6 chunks) has llama-imatrix's entries and counts, and its sums
 *    within 0.2% (measured: 9e-4 worst, the activations differ in the last
 *    bits);
 *  - llama-imatrix's own GGUF file reads back with those numbers; the legacy
 *    .dat we write reads back with the same weights;
 *  - IQ2_XXS, IQ3_XXS, IQ2_S, IQ3_S (the IQ2_XXS and IQ3_XXS presets' grid
 *    tensors), IQ2_XS, IQ1_S, IQ1_M from llama-imatrix's file: per tensor RMSE against
 *    the F16 source at most 1.02x llama-quantize's (recorded figures; on
 *    x86-64 without FMA contraction the bytes are the same), and from our
 *    own imatrix too;
 *  - the K-quant and legacy presets (Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K,
 *    Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS) weighed by the same file: every
 *    tensor within 1.02x of llama-quantize's RMSE, the same bytes on x86-64;
 *  - the IQ presets (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_S, IQ3_M)
 *    give every tensor llama-quantize's type;
 *  - the IQ2_XXS preset written with an imatrix loads and runs alike
 *    in-process and on a worker;
 *  - refusals: no imatrix, an imatrix of another model, a missing entry,
 *    a file that is no imatrix: one line naming the tensor or file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "coordinator/imatrix.h"
#include "core/gguf/gguf.h"
#include "core/hash.h"
#include "core/quant/quant.h"
#include "core/tensor.h"
#include "tests/cli_run.h"
#include "tests/ref_models.h"
#include "tests/sched_util.h"

#define BUNDLED "models/tiny-moe-4e2r-f16.gguf"
#define TEXT "tests/fixtures/tiny-moe-4e2r-valid.txt"
#define LLAMA_IMATRIX "tests/fixtures/imatrix/llama-tiny-moe-4e2r.imatrix.gguf"
#define LLAMA_NUMBERS "tests/fixtures/imatrix/llama-imatrix-tiny-moe-4e2r.txt"
#define LLAMA_RMSE "tests/fixtures/imatrix/llama-quantize-iq-rmse.txt"
#define LLAMA_TYPES "tests/fixtures/imatrix/llama-quantize-types.txt"
#define LLAMA_KQ "tests/fixtures/imatrix/llama-quantize-kq-rmse.txt"

static double s_rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }

/* Check im against the recorded llama-imatrix numbers: the same entries,
 * equal counts, sums within tol (relative). */
static void s_check_numbers(const imatrix *im, double tol) {
    FILE *fp = fopen(LLAMA_NUMBERS, "r");
    cr_assert(fp, "%s", LLAMA_NUMBERS);
    char line[4096];
    int n = 0;
    double worst = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        char name[256];
        long long n_in, n_mat;
        int off = 0;
        cr_assert_eq(sscanf(line, "%255s %lld %lld | %n", name, &n_in, &n_mat, &off), 3, "%s", line);
        const imatrix_entry *e = imatrix_find(im, name);
        cr_assert(e, "no entry %s", name);
        cr_expect_eq(e->n_in, n_in, "%s", name);
        cr_expect_eq(e->n_mat, n_mat, "%s", name);
        char *p = line + off;
        for (long long j = 0; j < n_mat; j++) cr_expect_eq(e->counts[j], strtoll(p, &p, 10), "%s count %lld", name, j);
        p = strchr(p, '|') + 1;
        for (long long j = 0; j < n_mat; j++) {
            double sum = 0;
            for (int64_t i = 0; i < e->n_in; i++) sum += e->sums[j * e->n_in + i];
            const double r = s_rel(sum, strtod(p, &p));
            worst = r > worst ? r : worst;
            cr_expect_leq(r, tol, "%s matrix %lld: sum off by %g", name, j, r);
        }
        p = strchr(p, '|') + 1;
        for (int i = 0; i < 4; i++) {
            const double r = s_rel(e->sums[i], strtod(p, &p));
            worst = r > worst ? r : worst;
            cr_expect_leq(r, tol, "%s in_sum2[%d] off by %g", name, i, r);
        }
        n++;
    }
    fclose(fp);
    cr_expect_eq(n, im->n, "entries: %d recorded, %d here", n, im->n);
    cr_log_info("imatrix: %d entries, worst relative difference %.3g", n, worst);
}

/* Our imatrix of the bundled model (once per process). */
static const char *s_our_imatrix(void) {
    static char out[4200];
    if (out[0]) return out;
    char coli[512];
    cli_build_path(coli, sizeof coli, "bin/coli");
    snprintf(out, sizeof out, "%s/imatrix-tiny-moe.gguf", s_build());
    char *argv[] = {coli, "imatrix", "-m", BUNDLED, "-f", TEXT, "-c", "128", "-t", "2", "-q", "-o", out, NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cli_result_free(&r);
    return out;
}

Test(imatrix, matches_llama_imatrix) {
    imatrix im;
    cr_assert_eq(imatrix_load(s_our_imatrix(), &im), 0, "%s", coli_last_error());
    cr_expect_eq(im.chunk_count, 6);
    cr_expect_eq(im.chunk_size, 128);
    cr_expect_str_eq(im.dataset, TEXT);
    s_check_numbers(&im, 2e-3);
    imatrix_free(&im);
}

Test(imatrix, reads_llama_imatrix_gguf) {
    imatrix im;
    cr_assert_eq(imatrix_load(LLAMA_IMATRIX, &im), 0, "%s", coli_last_error());
    cr_expect_eq(im.legacy, 0);
    cr_expect_eq(im.chunk_count, 6);
    s_check_numbers(&im, 1e-6);
    imatrix_free(&im);
}

/* The legacy .dat (llama-imatrix --output-format dat) we write reads back
 * with the weights of the GGUF it came from. */
Test(imatrix, legacy_dat_round_trip) {
    imatrix im, dat;
    char path[4200];
    snprintf(path, sizeof path, "%s/imatrix-legacy.dat", s_build());
    cr_assert_eq(imatrix_load(LLAMA_IMATRIX, &im), 0, "%s", coli_last_error());
    cr_assert_eq(imatrix_save(&im, path, 1), 0, "%s", coli_last_error());
    cr_assert_eq(imatrix_load(path, &dat), 0, "%s", coli_last_error());
    cr_expect_eq(dat.legacy, 1);
    cr_expect_eq(dat.n, im.n);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(BUNDLED, &f), 0);
    for (int i = 0; i < im.n; i++) {
        const coli_tensor *t = gguf_find_tensor(f, im.e[i].name);
        cr_assert(t, "%s", im.e[i].name);
        float *a, *b;
        cr_assert_eq(imatrix_weights(&im, t, &a), 0, "%s", coli_last_error());
        cr_assert_eq(imatrix_weights(&dat, t, &b), 0, "%s", coli_last_error());
        cr_assert(a && b);
        for (int64_t j = 0; j < im.e[i].n_in * im.e[i].n_mat; j++)
            cr_assert_leq(s_rel(b[j], a[j]), 1e-5, "%s[%lld]: %g vs %g", t->name, (long long)j, b[j], a[j]);
        free(a);
        free(b);
    }
    gguf_close(&f);
    imatrix_free(&im);
    imatrix_free(&dat);
    remove(path);
}

/* ---- the IQ quantizers against llama-quantize ------------------------------ */

/* RMSE (vs the source) of our quantization of src into type with im's
 * weights; *hash: FNV-1a of the bytes. */
static double s_rmse(const coli_tensor *src, coli_dtype type, const imatrix *im, uint64_t *hash) {
    const int64_t n_in = src->ne[0], rows = coli_tensor_nelems(src) / n_in;
    const size_t q_row = coli_row_bytes(type, n_in), s_row = coli_row_bytes(src->type, n_in);
    float *x = malloc((size_t)n_in * sizeof *x), *y = malloc((size_t)n_in * sizeof *y), *qw;
    uint8_t *q = malloc(q_row);
    cr_assert(x && y && q);
    cr_assert_eq(imatrix_weights(im, src, &qw), 0, "%s", coli_last_error());
    cr_assert(qw || strcmp(src->name, "token_embd.weight") == 0 || strcmp(src->name, "output.weight") == 0,
              "%s: no imatrix entry", src->name);
    double se = 0;
    *hash = COLI_FNV1A_SEED;
    for (int64_t r = 0; r < rows; r++) {
        coli_dequantize_row(src->type, (const uint8_t *)src->data + (size_t)r * s_row, x, n_in);
        coli_quantize_row_imatrix(type, x, q, n_in, qw ? qw + (r / src->ne[1]) * n_in : NULL);
        *hash = coli_fnv1a(q, q_row, *hash);
        coli_dequantize_row(type, q, y, n_in);
        for (int64_t i = 0; i < n_in; i++) se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
    }
    free(x);
    free(y);
    free(q);
    free(qw);
    return sqrt(se / (double)(rows * n_in));
}

/* Every recorded tensor: ratio <= bound; identical bytes where expected. */
static void s_check_rmse(const char *imatrix_path, double bound, int want_identical) {
    imatrix im;
    cr_assert_eq(imatrix_load(imatrix_path, &im), 0, "%s", coli_last_error());
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(BUNDLED, &f), 0);
    FILE *fp = fopen(LLAMA_RMSE, "r");
    cr_assert(fp);
    char line[512], tname[32], name[256], hex[32];
    int n = 0, identical = 0;
    double worst = 0, want;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        cr_assert_eq(sscanf(line, "%31s %255s %lf %31s", tname, name, &want, hex), 4, "%s", line);
        coli_dtype type;
        cr_assert_eq(coli_dtype_from_name(tname, &type), 0);
        const coli_tensor *src = gguf_find_tensor(f, name);
        cr_assert(src, "%s", name);
        uint64_t hash;
        const double ratio = s_rmse(src, type, &im, &hash) / want;
        const int same = hash == strtoull(hex, NULL, 16);
        identical += same;
        worst = ratio > worst ? ratio : worst;
        cr_expect_leq(ratio, bound, "%s %s: RMSE %.4fx llama-quantize's", tname, name, ratio);
        if (want_identical) cr_expect(same, "%s %s: bytes differ from llama-quantize's", tname, name);
        n++;
    }
    fclose(fp);
    cr_expect_eq(n, 97,
                 "IQ2_XXS and IQ3_XXS presets: 20 IQ2_XXS, 12 IQ3_XXS, 8 IQ2_S, 5 IQ3_S; 20 IQ2_XS, 16 IQ1_S, "
                 "16 IQ1_M");
    cr_log_info("%s: %d tensors, %d byte-identical to llama-quantize, worst RMSE ratio %.6f", imatrix_path, n,
                identical, worst);
    gguf_close(&f);
    imatrix_free(&im);
}

Test(imatrix, iq_rmse_within_2pct_of_llama_quantize) {
#if defined(__x86_64__) && !defined(__FMA__)
    s_check_rmse(LLAMA_IMATRIX, 1.02, 1);
#else
    s_check_rmse(LLAMA_IMATRIX, 1.02, 0);
#endif
}

/* Our own imatrix (sums within 0.2% of llama's) quantizes as well. */
Test(imatrix, our_imatrix_quantizes_as_well) { s_check_rmse(s_our_imatrix(), 1.02, 0); }

/* The K-quant and legacy presets with llama-imatrix's file: every quantized
 * tensor (Q2_K..Q6_K, Q4_0..Q5_1, IQ4_NL, IQ4_XS weighed by the imatrix as
 * llama.cpp's quantize_row_*_impl; Q8_0 takes none) at most 1.02x
 * llama-quantize's RMSE, and byte-identical on x86-64 without FMA
 * contraction. Logs each tensor's ratio. */
Test(imatrix, kquant_rmse_within_2pct_of_llama_quantize, .timeout = 600) {
    imatrix im;
    cr_assert_eq(imatrix_load(LLAMA_IMATRIX, &im), 0, "%s", coli_last_error());
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(BUNDLED, &f), 0);
    FILE *fp = fopen(LLAMA_KQ, "r");
    cr_assert(fp);
    char line[512], preset[32], tname[32], name[256], hex[32];
    double want;
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        cr_assert_eq(sscanf(line, "%31s %31s %255s %lf %31s", preset, tname, name, &want, hex), 5, "%s", line);
        coli_dtype type;
        cr_assert_eq(coli_dtype_from_name(tname, &type), 0);
        const coli_tensor *src = gguf_find_tensor(f, name);
        cr_assert(src, "%s", name);
        uint64_t hash;
        const double ratio = s_rmse(src, type, &im, &hash) / want;
        const int same = hash == strtoull(hex, NULL, 16);
        cr_expect_leq(ratio, 1.02, "%s %s %s: RMSE %.4fx llama-quantize's", preset, tname, name, ratio);
#if defined(__x86_64__) && !defined(__FMA__)
        cr_expect(same, "%s %s %s: bytes differ from llama-quantize's", preset, tname, name);
#endif
        cr_log_info("kq %s %s %s ratio %.6f %s", preset, tname, name, ratio, same ? "identical" : "differs");
        n++;
    }
    fclose(fp);
    cr_expect_eq(n, 330, "11 presets x 30 quantized tensors");
    gguf_close(&f);
    imatrix_free(&im);
}

/* ---- the preset, end to end ------------------------------------------------ */

static coli_dtype s_type_of(const gguf_file *f, const char *name) {
    const coli_tensor *t = gguf_find_tensor(f, name);
    cr_assert(t, "%s", name);
    return t->type;
}

static uint32_t s_u32(const gguf_file *f, const char *key) {
    uint32_t v = 0;
    cr_assert_eq(gguf_get_u32(f, key, &v), 0, "%s", key);
    return v;
}

/* de3ff815's IQ2_XXS preset with llama-imatrix's file (output.weight made
 * IQ3_XXS, which llama-quantize quantizes without an entry): llama's types,
 * its quantize.imatrix.* keys; the file runs alike in-process and on a
 * worker, with finite logits. */
Test(imatrix, iq2_xxs_preset_runs_alike_on_a_worker, .timeout = 300) {
    char out[4200];
    snprintf(out, sizeof out, "%s/imatrix-iq2_xxs.gguf", s_build());
    const coli_quantize_params p = {.imatrix = LLAMA_IMATRIX, .output_type = "IQ3_XXS"};
    cr_assert_eq(coli_quantize_file_params(BUNDLED, out, "IQ2_XXS", &p), 0, "%s", coli_last_error());
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(out, &f), 0);
    cr_expect_eq(s_type_of(f, "blk.0.attn_q.weight"), COLI_IQ2_XXS);
    cr_expect_eq(s_type_of(f, "blk.1.ffn_gate_exps.weight"), COLI_IQ2_XXS);
    cr_expect_eq(s_type_of(f, "blk.0.attn_v.weight"), COLI_Q4_K);          /* 4 experts */
    cr_expect_eq(s_type_of(f, "blk.0.ffn_down_exps.weight"), COLI_IQ4_NL); /* rows of 384 */
    cr_expect_eq(s_type_of(f, "token_embd.weight"), COLI_Q2_K);
    cr_expect_eq(s_type_of(f, "output.weight"), COLI_IQ3_XXS);
    cr_expect_eq(s_u32(f, "general.file_type"), 19);
    cr_expect_eq(s_u32(f, "quantize.imatrix.entries_count"), 32);
    cr_expect_eq(s_u32(f, "quantize.imatrix.chunks_count"), 6);
    gguf_str s;
    cr_assert_eq(gguf_get_str(f, "quantize.imatrix.file", &s), 0);
    cr_expect_eq(strncmp(s.ptr, LLAMA_IMATRIX, s.len), 0);
    gguf_close(&f);
    sched_env_defaults();
    gen_result ref, got;
    sched_generate(out, "inproc", NULL, NULL, &ref);
    sched_generate(out, "cpu:1", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "IQ2_XXS preset");
    for (int i = 0; i < (GEN_STEPS + 1) * ref.n_vocab; i++) cr_assert(isfinite(ref.logits[i]), "logit %d", i);
    gen_free(&ref);
    gen_free(&got);
    remove(out);
    sched_assert_no_orphans();
}

/* Each IQ preset with llama-imatrix's file: every tensor of llama-quantize's
 * type (its per-tensor choices recorded in LLAMA_TYPES). */
Test(imatrix, iq_presets_give_llama_quantize_types, .timeout = 600) {
    static const char *const presets[] = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS",
                                          "IQ3_S",   "IQ3_M",  "IQ1_S", "IQ1_M"};
    char out[4200], line[512], preset[32], name[256], type[32];
    snprintf(out, sizeof out, "%s/imatrix-preset.gguf", s_build());
    int checked = 0;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const coli_quantize_params p = {.imatrix = LLAMA_IMATRIX, .n_threads = 2};
        cr_assert_eq(coli_quantize_file_params(BUNDLED, out, presets[i], &p), 0, "%s: %s", presets[i],
                     coli_last_error());
        gguf_file *f = NULL;
        cr_assert_eq(gguf_open(out, &f), 0);
        FILE *fp = fopen(LLAMA_TYPES, "r");
        cr_assert(fp);
        while (fgets(line, sizeof line, fp)) {
            if (line[0] == '#' || sscanf(line, "%31s %255s %31s", preset, name, type) != 3) continue;
            if (strcmp(preset, presets[i]) != 0) continue;
            cr_expect_str_eq(coli_dtype_name(s_type_of(f, name)), type, "%s %s", preset, name);
            checked++;
        }
        fclose(fp);
        gguf_close(&f);
    }
    cr_expect_eq(checked, 9 * 43, "9 presets x 43 tensors recorded");
    remove(out);
}

/* ---- refusals ----------------------------------------------------------------- */

static void s_expect_refused(const coli_quantize_params *p, const char *type, int code, const char *want) {
    char out[4200];
    snprintf(out, sizeof out, "%s/imatrix-refused.gguf", s_build());
    remove(out);
    cr_assert_eq(coli_quantize_file_params(BUNDLED, out, type, p), code, "%s: %s", type, coli_last_error());
    cr_expect(strstr(coli_last_error(), want), "want '%s' in: %s", want, coli_last_error());
    cr_expect_null(strchr(coli_last_error(), '\n'), "one line: %s", coli_last_error());
    cr_expect_not(cli_file_exists(out), "nothing written");
}

/* An imatrix of one entry: blk.0.attn_k.weight (the first IQ tensor in
 * file order) with n_in values. */
static void s_one_entry_imatrix(const char *path, int64_t n_in) {
    imatrix im = {0};
    imatrix_entry *e = imatrix_add(&im, "blk.0.attn_k.weight", n_in, 1);
    cr_assert(e);
    for (int64_t i = 0; i < n_in; i++) e->sums[i] = 1.0f + (float)i;
    e->counts[0] = 10;
    im.chunk_count = 1;
    im.chunk_size = 10;
    cr_assert_eq(imatrix_save(&im, path, 0), 0, "%s", coli_last_error());
    imatrix_free(&im);
}

Test(imatrix, refusals_are_one_line) {
    const coli_quantize_params none = {0};
    s_expect_refused(&none, "IQ2_XXS", COLI_EUNSUPPORTED, "IQ2_XXS needs an importance matrix");
    s_expect_refused(&none, "IQ3_XXS", COLI_EUNSUPPORTED, "IQ3_XXS needs an importance matrix");
    char path[4200];
    snprintf(path, sizeof path, "%s/imatrix-other-model.gguf", s_build());
    s_one_entry_imatrix(path, 128); /* the model's attn_k rows are 256 long */
    const coli_quantize_params other = {.imatrix = path};
    s_expect_refused(&other, "IQ2_XXS", COLI_EINVAL, "tensor 'blk.0.attn_k.weight': the imatrix has 128 values");
    s_one_entry_imatrix(path, 256); /* right size, but nothing for the other tensors */
    s_expect_refused(&other, "IQ2_XXS", COLI_EINVAL,
                     "tensor 'blk.0.attn_output.weight': the imatrix has no entry for it");
    remove(path);
    const coli_quantize_params text = {.imatrix = TEXT};
    s_expect_refused(&text, "IQ2_XXS", COLI_EFORMAT, "imatrix " TEXT);
    const coli_quantize_params missing = {.imatrix = "/nonexistent/im.gguf"};
    s_expect_refused(&missing, "IQ2_XXS", COLI_EIO, "/nonexistent/im.gguf");
    /* an IQ output type without an importance matrix */
    const coli_quantize_params no_im = {.output_type = "IQ1_M"};
    s_expect_refused(&no_im, "Q4_K_M", COLI_EUNSUPPORTED, "output type 'IQ1_M' needs an importance matrix");
}

Test(imatrix, cli_refusals) {
    char coli[512], out[4200];
    cli_build_path(coli, sizeof coli, "bin/coli");
    snprintf(out, sizeof out, "%s/imatrix-cli.gguf", s_build());
    char *no_im[] = {coli, "quantize", BUNDLED, out, "IQ2_XXS", NULL};
    cli_result r = cli_run(no_im);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "IQ2_XXS needs an importance matrix (--imatrix FILE"), "%s", r.err);
    cr_expect_eq(cli_count_lines(r.err), 1, "%s", r.err);
    cli_result_free(&r);
    char *workers[] = {coli, "imatrix", "-m", BUNDLED, "-f", TEXT, "--devices", "cpu:1", "-o", out, NULL};
    r = cli_run(workers);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "--devices") && strstr(r.err, "inproc"), "%s", r.err);
    cli_result_free(&r);
    char text[4200];
    snprintf(text, sizeof text, "%s/imatrix-short.txt", s_build());
    FILE *fp = fopen(text, "w");
    cr_assert(fp);
    fputs("Too short a text for two chunks of 128 tokens.\n", fp);
    fclose(fp);
    char *short_text[] = {coli, "imatrix", "-m", BUNDLED, "-f", text, "-c", "128", "-o", out, NULL};
    r = cli_run(short_text);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "needs at least 256"), "%s", r.err);
    remove(text);
    cr_expect_not(cli_file_exists(out));
    cli_result_free(&r);
}

/* ---- the collector's rules -------------------------------------------------- */

/* A dense weight counts from 16 rows on (llama-imatrix skips smaller
 * batches); an expert slice counts for every row, in its own matrix. */
Test(imatrix, collector_rules) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(BUNDLED, &f), 0);
    imatrix_collector *c = NULL;
    cr_assert_eq(imatrix_collect_new(f, &c), 0);
    const coli_tensor *q = gguf_find_tensor(f, "blk.0.attn_q.weight"),
                      *up = gguf_find_tensor(f, "blk.1.ffn_up_exps.weight");
    const coli_tensor *out = gguf_find_tensor(f, "output.weight");
    cr_assert(q && up && out);
    float x[16 * 256], want0 = 0;
    for (int i = 0; i < 16 * 256; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int r = 0; r < 16; r++) want0 += x[r * 256] * x[r * 256];
    const size_t expert_bytes = coli_row_bytes(up->type, up->ne[0]) * (size_t)up->ne[1];
    const coli_matmul_op ops[] = {
        {q->data, q->type, 256, q->ne[1], x, 15, NULL},                                    /* skipped */
        {q->data, q->type, 256, q->ne[1], x, 16, NULL},                                    /* counted */
        {(const char *)up->data + 2 * expert_bytes, up->type, 256, up->ne[1], x, 1, NULL}, /* expert 2 */
        {out->data, out->type, 256, out->ne[1], x, 16, NULL},                              /* not blk.* */
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) imatrix_collect_op(c, &ops[i]);
    const imatrix *im = imatrix_collect_data(c);
    cr_assert_eq(im->n, 2);
    const imatrix_entry *eq = imatrix_find(im, "blk.0.attn_q.weight"),
                        *eu = imatrix_find(im, "blk.1.ffn_up_exps.weight");
    cr_assert(eq && eu);
    cr_expect_eq(eq->counts[0], 16);
    cr_expect_float_eq(eq->sums[0], want0, 1e-6);
    cr_expect_eq(eu->n_mat, 4);
    cr_expect(eu->counts[0] == 0 && eu->counts[1] == 0 && eu->counts[2] == 1 && eu->counts[3] == 0);
    cr_expect_float_eq(eu->sums[2 * 256 + 1], 4.0f, 1e-6); /* x[1] = -2 */
    cr_expect_eq(imatrix_collect_status(c), 0);
    imatrix_collect_free(&c);
    gguf_close(&f);
}
