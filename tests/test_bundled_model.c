/*
 * test_bundled_model.c - the shipped model (models/tiny-moe-4e2r-f16.gguf)
 * against what its training framework computed (tools/train/export.py).
 *
 * tests/fixtures/tiny-moe-4e2r-ref-logits.txt holds, for held-out KJV text
 * (tests/fixtures/tiny-moe-4e2r-valid.txt): the first 64 token ids, the
 * top-10 logits of PyTorch (float64, the F16 file's weights) at every
 * position, the perplexity of the whole text in `coli perplexity`'s windows,
 * and spm_encode's ids of every text line.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_run.h"
#include "colibri.h"

#define MODEL_F16 "models/tiny-moe-4e2r-f16.gguf"
#define MODEL_Q8 "models/tiny-moe-4e2r-q8_0.gguf"
#define REF_FILE "tests/fixtures/tiny-moe-4e2r-ref-logits.txt"
#define TEXT_FILE "tests/fixtures/tiny-moe-4e2r-valid.txt"
#define MAX_POS 256
#define MAX_TOP 32
#define MAX_LINES 64

typedef struct ref_data {
    int ctx;
    double ppl_f16, ppl_f32;
    int n_ids, top;
    int32_t ids[MAX_POS];
    int32_t top_ids[MAX_POS][MAX_TOP];
    double top_f16[MAX_POS][MAX_TOP], top_f32[MAX_POS][MAX_TOP];
    int n_lines;
    int32_t *line_ids[MAX_LINES];
    int line_len[MAX_LINES];
} ref_data;

/* Whitespace-separated integers of s into out (at most cap); the count. */
static int parse_ints(const char *s, int32_t *out, int cap) {
    int n = 0;
    char *end;
    for (long v = strtol(s, &end, 10); end != s && n < cap; v = strtol(s, &end, 10)) {
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static void parse_pos_line(ref_data *r, const char *s) {
    char *end;
    long p = strtol(s, &end, 10);
    cr_assert(p >= 0 && p < MAX_POS && r->top > 0, "bad 'pos' line in " REF_FILE);
    for (int k = 0; k < r->top; k++) {
        r->top_ids[p][k] = (int32_t)strtol(end, &end, 10);
        r->top_f16[p][k] = strtod(end, &end);
        r->top_f32[p][k] = strtod(end, &end);
    }
}

static void parse_line(ref_data *r, char *line) {
    if (!strncmp(line, "ctx ", 4))
        r->ctx = atoi(line + 4);
    else if (!strncmp(line, "ppl ", 4))
        cr_assert_eq(sscanf(line + 4, "%lf %lf", &r->ppl_f16, &r->ppl_f32), 2);
    else if (!strncmp(line, "ids ", 4))
        r->n_ids = parse_ints(line + 4, r->ids, MAX_POS);
    else if (!strncmp(line, "top ", 4))
        r->top = atoi(line + 4);
    else if (!strncmp(line, "pos ", 4))
        parse_pos_line(r, line + 4);
    else if (!strncmp(line, "line ", 5)) {
        cr_assert(r->n_lines < MAX_LINES, "too many 'line' entries in " REF_FILE);
        size_t cap = strlen(line) / 2 + 1;
        int32_t *ids = malloc(cap * sizeof *ids);
        cr_assert_not_null(ids);
        r->line_len[r->n_lines] = parse_ints(line + 5, ids, (int)cap);
        r->line_ids[r->n_lines++] = ids;
    }
}

static ref_data *load_ref(void) {
    ref_data *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    FILE *f = fopen(REF_FILE, "r");
    cr_assert_not_null(f, "cannot open %s (tests run from the repository root)", REF_FILE);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) parse_line(r, line);
    free(line);
    fclose(f);
    cr_assert(r->ctx > 0 && r->n_ids > 0 && r->top > 0 && r->top <= MAX_TOP && r->n_lines > 0,
              "%s: incomplete (ctx %d, %d ids, top %d, %d lines)", REF_FILE, r->ctx, r->n_ids, r->top, r->n_lines);
    return r;
}

static void free_ref(ref_data *r) {
    for (int i = 0; i < r->n_lines; i++) free(r->line_ids[i]);
    free(r);
}

static coli_model *load_model(const char *path) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), COLI_OK, "load %s: %s", path, coli_last_error());
    return m;
}

Test(bundled_model, header_is_mixtral_style) {
    coli_model *m = load_model(MODEL_F16);
    coli_model_info info;
    coli_model_get_info(m, &info);
    cr_expect_str_eq(info.arch, "llama");
    cr_expect_eq(info.n_expert, 4);
    cr_expect_eq(info.n_expert_used, 2);
    cr_expect_eq(info.n_vocab, 3000);
    cr_expect_eq(info.bos_id, 1);
    cr_expect_eq(info.add_bos, 1);
    coli_model_free(&m);
}

/* The engine's teacher-forced logits vs PyTorch's at every recorded (position, id). */
Test(bundled_model, logits_match_training_framework_f16) {
    ref_data *r = load_ref();
    coli_model *m = load_model(MODEL_F16);
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), COLI_OK, "%s", coli_last_error());
    int n_vocab = 3000;
    float *logits = malloc((size_t)r->n_ids * (size_t)n_vocab * sizeof *logits);
    cr_assert_not_null(logits);
    cr_assert_eq(coli_eval(ctx, r->ids, r->n_ids, logits, 1), COLI_OK, "%s", coli_last_error());
    double worst = 0;
    for (int p = 0; p < r->n_ids; p++) {
        const float *row = logits + (size_t)p * (size_t)n_vocab;
        int arg = 0;
        for (int i = 1; i < n_vocab; i++) arg = row[i] > row[arg] ? i : arg;
        for (int k = 0; k < r->top; k++) {
            double d = fabs(row[r->top_ids[p][k]] - r->top_f16[p][k]);
            worst = d > worst ? d : worst;
            cr_expect_leq(d, 2e-2, "position %d, id %d: engine %.5f, PyTorch %.5f", p, r->top_ids[p][k],
                          row[r->top_ids[p][k]], r->top_f16[p][k]);
        }
        if (r->top_f16[p][0] - r->top_f16[p][1] > 2e-2)
            cr_expect_eq(arg, r->top_ids[p][0], "position %d: engine argmax %d, PyTorch %d", p, arg, r->top_ids[p][0]);
    }
    cr_log_info("bundled model F16: max |engine - PyTorch| = %.3g over %d positions\n", worst, r->n_ids);
    free(logits);
    coli_context_free(&ctx);
    coli_model_free(&m);
    free_ref(r);
}

/* Every line of the held-out text tokenizes to spm_encode's ids. */
Test(bundled_model, tokenizer_matches_spm_encode) {
    ref_data *r = load_ref();
    coli_model *m = load_model(MODEL_F16);
    size_t len = 0;
    char *text = cli_slurp(TEXT_FILE, &len);
    cr_assert_not_null(text, "cannot read %s", TEXT_FILE);
    int line_no = 0;
    for (char *s = text, *nl; *s && (nl = strchr(s, '\n')); s = nl + 1) {
        if (nl == s) continue;
        cr_assert_lt(line_no, r->n_lines, "%s has more lines than %s", TEXT_FILE, REF_FILE);
        int cap = (int)(nl - s) + 8, n = 0;
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        cr_assert_eq(coli_tokenize(m, s, (size_t)(nl - s), 0, 0, ids, cap, &n), COLI_OK, "%s", coli_last_error());
        cr_expect_eq(n, r->line_len[line_no], "line %d: %d ids, spm_encode %d", line_no, n, r->line_len[line_no]);
        for (int i = 0; i < n && i < r->line_len[line_no]; i++)
            if (ids[i] != r->line_ids[line_no][i]) {
                cr_expect_eq(ids[i], r->line_ids[line_no][i], "line %d, token %d", line_no, i);
                break;
            }
        free(ids);
        line_no++;
    }
    cr_expect_eq(line_no, r->n_lines);
    /* The whole file with BOS (what perplexity and the logits fixture use) starts with the fixture ids. */
    int32_t *all = malloc((len + 8) * sizeof *all);
    int n_all = 0;
    cr_assert_eq(coli_tokenize(m, text, len, 1, 0, all, (int)len + 8, &n_all), COLI_OK, "%s", coli_last_error());
    cr_assert_geq(n_all, r->n_ids);
    cr_expect_arr_eq(all, r->ids, (size_t)r->n_ids * sizeof *all, "whole-text ids differ from the fixture's");
    free(all);
    free(text);
    coli_model_free(&m);
    free_ref(r);
}

static double cli_perplexity(const char *model) {
    char coli[512];
    cli_build_path(coli, sizeof coli, "bin/coli");
    cr_assert(cli_file_exists(coli), "%s missing (make BUILD=... all first)", coli);
    char *argv[] = {coli, "perplexity", "-m", (char *)model, "-f", TEXT_FILE, "--inproc", "-t", "1", NULL};
    cli_result res = cli_run(argv);
    cr_assert_eq(res.status, 0, "coli perplexity failed: %s", res.err);
    const char *p = strstr(res.out, "perplexity: ");
    cr_assert_not_null(p, "no 'perplexity: ' in coli's output: %s", res.out);
    double v = strtod(p + 12, NULL);
    cli_result_free(&res);
    return v;
}

/* `coli perplexity` on held-out text equals the training script's figure within 1 %. */
Test(bundled_model, perplexity_matches_training_script) {
    ref_data *r = load_ref();
    double ppl = cli_perplexity(MODEL_F16);
    cr_log_info("bundled model F16: coli perplexity %.4f, PyTorch %.4f\n", ppl, r->ppl_f16);
    cr_expect_leq(fabs(ppl / r->ppl_f16 - 1), 0.01, "coli %.4f vs PyTorch %.4f", ppl, r->ppl_f16);
    free_ref(r);
}

/* The shipped Q8_0 file (coli quantize of the F16 one) stays close: within 3 %. */
Test(bundled_model, q8_0_perplexity_close) {
    ref_data *r = load_ref();
    double ppl = cli_perplexity(MODEL_Q8);
    cr_expect_leq(fabs(ppl / r->ppl_f16 - 1), 0.03, "Q8_0 %.4f vs F16 PyTorch %.4f", ppl, r->ppl_f16);
    free_ref(r);
}
