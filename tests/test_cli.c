/*
 * test_cli.c - the real bin/coli on the generated fixtures: output, exit
 * statuses and messages, and agreement with the library it wraps.
 *
 * Needs "$COLI_BUILD/bin/coli" and "$COLI_BUILD/fixtures" (make fixtures).
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_run.h"
#include "colibri.h"
#include "core/gguf/gguf.h"
#include "tests/ref_models.h"

static char s_coli[512], s_model[512], s_dir[64];

static void setup(void) {
    cli_build_path(s_coli, sizeof s_coli, "bin/coli");
    cli_build_path(s_model, sizeof s_model, "fixtures/tiny-llama-moe-f32.gguf");
    if (!cli_file_exists(s_coli)) cr_skip_test("%s not built", s_coli);
    if (!cli_file_exists(s_model)) cr_skip_test("%s missing (make fixtures)", s_model);
    s_dir[0] = 0; /* made by the first tmp_path: a test skipped in its body runs no teardown */
}

static void teardown(void) {
    if (!s_dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 120);

static const char *tmp_path(char *buf, size_t cap, const char *name) {
    if (!s_dir[0]) {
        strcpy(s_dir, "/tmp/coli-cli-XXXXXX");
        cr_assert_not_null(mkdtemp(s_dir));
    }
    snprintf(buf, cap, "%s/%s", s_dir, name);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- run ----------------------------------------------------------------- */

static cli_result run_gen(const char *temp, const char *seed) {
    char *argv[] = {s_coli,     "run", "-m",     s_model,      "-p",     "Once upon a time",
                    "-n",       "8",   "--temp", (char *)temp, "--seed", (char *)seed,
                    "--inproc", "-t",  "1",      NULL};
    return cli_run(argv);
}

Test(cli, run_prints_text_and_summary) {
    cli_result r = run_gen("0.8", "1");
    cr_assert_eq(r.status, 0, "status %d, stderr: %s", r.status, r.err);
    cr_expect_gt(r.out_len, 1, "no text on stdout");
    const char *sum = strstr(r.err, "coli run: prompt 5 tokens (");
    cr_assert_not_null(sum, "summary line missing: %s", r.err);
    cr_expect_not_null(strstr(sum, "generated "), "%s", sum);
    cr_expect_not_null(strstr(sum, "tok/s"), "%s", sum);
    cr_expect_not_null(strstr(sum, "load "), "%s", sum);
    cr_expect_eq(cli_count_lines(r.err), 1, "in-process runs print one stderr line: %s", r.err);
    cli_result_free(&r);
}

Test(cli, same_seed_same_output) {
    cli_result a = run_gen("0.9", "5"), b = run_gen("0.9", "5"), c = run_gen("0.9", "6");
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(c.status, 0, "%s", c.err);
    cr_expect_str_eq(a.out, b.out);
    cr_expect_str_neq(a.out, c.out, "seeds 5 and 6 gave the same 8 tokens");
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
}

/* llama.cpp's spellings and knobs: -s, --ctx-size, --min-p, the penalties; -n -1 with --ignore-eos fills the context. */
Test(cli, llama_cpp_sampling_flags) {
    char *argv[] = {s_coli,
                    "run",
                    "-m",
                    s_model,
                    "-p",
                    "Once upon a time",
                    "-n",
                    "12",
                    "--temp",
                    "0.9",
                    "-s",
                    "7",
                    "--ctx-size",
                    "64",
                    "--min-p",
                    "0.05",
                    "--repeat-penalty",
                    "1.3",
                    "--repeat-last-n",
                    "16",
                    "--presence-penalty",
                    "0.4",
                    "--frequency-penalty",
                    "0.2",
                    "--inproc",
                    "-t",
                    "1",
                    NULL};
    cli_result a = cli_run(argv), b = cli_run(argv);
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_expect_str_eq(a.out, b.out, "same seed and settings, different text");
    cli_result_free(&a);
    cli_result_free(&b);
    /* -n -1 fills the 40-token context, as does a larger -n; the summary says which ended it */
    static const struct {
        const char *n, *generated;
        int ctx_full;
    } runs[] = {{"-1", "generated 35 tokens", 1}, {"1000", "generated 35 tokens", 1}, {"6", "generated 6 tokens", 0}};
    for (int i = 0; i < 3; i++) {
        char *fill[] = {
            s_coli, "run",      "-m", s_model, "-p", "Once upon a time", "-n", (char *)runs[i].n, "--ignore-eos", "-c",
            "40",   "--inproc", "-t", "1",     NULL};
        cli_result f = cli_run(fill);
        cr_assert_eq(f.status, 0, "%s", f.err);
        cr_expect_not_null(strstr(f.err, "prompt 5 tokens"), "%s", f.err);
        cr_expect_not_null(strstr(f.err, runs[i].generated), "-n %s: %s", runs[i].n, f.err);
        const char *why = strstr(f.err, "stopped: the context of 40 tokens is full (--ctx)");
        cr_expect(runs[i].ctx_full ? why != NULL : why == NULL, "-n %s, the reason: %s", runs[i].n, f.err);
        cli_result_free(&f);
    }
}

Test(cli, greedy_ignores_seed) {
    cli_result a = run_gen("0", "1"), b = run_gen("0", "99");
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_expect_str_eq(a.out, b.out);
    cli_result_free(&a);
    cli_result_free(&b);
}

Test(cli, run_prompt_file_and_stats_json) {
    char prompt[256], stats[256];
    tmp_path(prompt, sizeof prompt, "prompt.txt");
    tmp_path(stats, sizeof stats, "stats.json");
    write_text(prompt, "Once upon a time\n");
    char *argv_f[] = {s_coli, "run",    "-m", s_model,    "-f",           prompt, "-n",
                      "4",    "--temp", "0",  "--inproc", "--stats-json", stats,  NULL};
    char *argv_p[] = {s_coli, "run", "-m",     s_model, "-p",       "Once upon a time",
                      "-n",   "4",   "--temp", "0",     "--inproc", NULL};
    cli_result a = cli_run(argv_f), b = cli_run(argv_p);
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_expect_str_eq(a.out, b.out, "-f drops one trailing newline, so both prompts are the same");
    char *json = cli_slurp(stats, NULL);
    cr_assert_not_null(json, "--stats-json wrote nothing");
    cr_expect_eq(json[0], '{');
    free(json);
    cli_result_free(&a);
    cli_result_free(&b);
}

/* ---- tokenize --------------------------------------------------------------- */

/* Parse {"ids":[...],"pieces":[...]}: ids into out (count returned), -1 if malformed. */
static int parse_ids_json(const char *s, int32_t *out, int cap) {
    const char *p = strstr(s, "{\"ids\":[");
    if (!p) return -1;
    p += 8;
    int n = 0;
    while (*p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || n >= cap) return -1;
        out[n++] = (int32_t)v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p != ']')
            return -1;
    }
    return strncmp(p, "],\"pieces\":[", 12) == 0 ? n : -1;
}

/* The fixture model in this process: the library answer a command is checked against. */
static coli_model *s_load_inproc(void) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(s_model, &mp, &m), 0, "%s", coli_last_error());
    return m;
}

Test(cli, tokenize_json_matches_library) {
    const char *text = "Once upon a time, there was a little girl.";
    char *argv[] = {s_coli, "tokenize", "-m", s_model, "-p", (char *)text, "--json", NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    int32_t cli_ids[128], lib_ids[128];
    int n_cli = parse_ids_json(r.out, cli_ids, 128), n_lib = 0;
    cr_assert_gt(n_cli, 0, "not the expected JSON: %s", r.out);
    coli_model *m = s_load_inproc();
    cr_assert_eq(coli_tokenize(m, text, strlen(text), 1, 1, lib_ids, 128, &n_lib), 0);
    cr_assert_eq(n_cli, n_lib);
    cr_expect_eq(cli_ids[0], 1, "BOS first");
    for (int i = 0; i < n_lib; i++) cr_expect_eq(cli_ids[i], lib_ids[i], "id %d", i);
    /* pieces are the vocabulary strings, quoted */
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", coli_token_text(m, lib_ids[1]));
    cr_expect_not_null(strstr(r.out, quoted), "piece %s missing in %s", quoted, r.out);
    coli_model_free(&m);
    cli_result_free(&r);

    char *argv_raw[] = {s_coli,     "tokenize",           "-m", s_model, "-p", "<s>hi", "--json",
                        "--no-bos", "--no-parse-special", NULL};
    r = cli_run(argv_raw);
    cr_assert_eq(r.status, 0, "%s", r.err);
    n_cli = parse_ids_json(r.out, cli_ids, 128);
    cr_assert_gt(n_cli, 1, "%s", r.out);
    for (int i = 0; i < n_cli; i++) cr_expect_neq(cli_ids[i], 1, "no BOS with --no-bos/--no-parse-special");
    cli_result_free(&r);
}

/* An empty text is a text (llama.cpp's llama-tokenize and tokenizer give no
 * tokens for it): -p "" tokenizes, as coli_tokenize does; only a flag naming
 * a thing (-m "") still says "empty value". */
Test(cli, tokenize_empty_text_gives_no_tokens) {
    int32_t ids[4];
    int n = -1;
    coli_model *m = s_load_inproc();
    cr_expect_eq(coli_tokenize(m, "", 0, 0, 1, ids, 4, &n), 0, "%s", coli_last_error());
    cr_expect_eq(n, 0, "no tokens without BOS");
    cr_expect_eq(coli_tokenize(m, NULL, 0, 0, 1, NULL, 0, &n), 0, "NULL text of length 0: %s", coli_last_error());
    cr_expect_eq(n, 0);
    cr_assert_eq(coli_tokenize(m, "", 0, 1, 1, ids, 4, &n), 0, "%s", coli_last_error());
    coli_model_free(&m);
    cli_result r = cli_run((char *[]){s_coli, "tokenize", "-m", s_model, "-p", "", "--json", "--no-bos", NULL});
    cr_expect_eq(r.status, 0, "-p \"\": %s", r.err);
    cr_expect_str_eq(r.out, "{\"ids\":[],\"pieces\":[]}\n");
    cli_result_free(&r);
    r = cli_run((char *[]){s_coli, "tokenize", "-m", s_model, "--prompt=", "--json", NULL});
    cr_expect_eq(r.status, 0, "--prompt=: %s", r.err);
    int32_t cli_ids[4];
    cr_expect_eq(parse_ids_json(r.out, cli_ids, 4), n, "BOS alone, as the library: %s", r.out);
    cr_expect_eq(cli_ids[0], ids[0]);
    cli_result_free(&r);
    r = cli_run((char *[]){s_coli, "tokenize", "-m", "", "-p", "x", NULL});
    cr_expect_eq(r.status, 2, "-m \"\": %s", r.err);
    cr_expect_not_null(strstr(r.err, "-m: empty value"), "%s", r.err);
    cli_result_free(&r);
}

/* ---- logits ------------------------------------------------------------------- */

Test(cli, logits_json_matches_eval) {
    static const int32_t ids[] = {1, 300, 301, 302, 400};
    const int n = 5, k = 3;
    char *argv[] = {s_coli,  "logits", "-m",     s_model,    "--ids", "1,300,301,302,400",
                    "--top", "3",      "--json", "--inproc", NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    coli_model *m = s_load_inproc();
    coli_context *ctx = NULL;
    coli_context_params cp;
    coli_context_default_params(&cp);
    cr_assert_eq(coli_context_new(m, &cp, &ctx), 0, "%s", coli_last_error());
    coli_model_info info;
    coli_model_get_info(m, &info);
    float *logits = malloc((size_t)n * (size_t)info.n_vocab * sizeof *logits);
    cr_assert_eq(coli_eval(ctx, ids, n, logits, 1), 0, "%s", coli_last_error());
    const char *p = strstr(r.out, "{\"positions\":[");
    cr_assert_not_null(p, "%s", r.out);
    p += 14;
    for (int pos = 0; pos < n; pos++) {
        if (pos) cr_assert_eq(*p++, ',', "position %d: %.20s", pos, p - 1);
        cr_assert_eq(*p++, '[', "position %d: %.20s", pos, p - 1);
        float best_prev = INFINITY;
        for (int i = 0; i < k; i++) {
            int id, used = 0;
            float v;
            if (i) cr_assert_eq(*p++, ',', "position %d pair %d: %.20s", pos, i, p - 1);
            cr_assert_eq(sscanf(p, "[%d,%g]%n", &id, &v, &used), 2, "position %d pair %d: %.40s", pos, i, p);
            cr_assert_gt(used, 0);
            p += used;
            cr_assert(id >= 0 && id < info.n_vocab);
            cr_expect_eq(v, logits[(size_t)pos * info.n_vocab + id], "pos %d id %d", pos, id);
            cr_expect_leq(v, best_prev, "descending order");
            best_prev = v;
            if (i == 0) { /* the first pair is the argmax over the whole vocabulary */
                for (int j = 0; j < info.n_vocab; j++)
                    cr_assert_leq(logits[(size_t)pos * info.n_vocab + j], v, "pos %d: id %d beats the top", pos, j);
            }
        }
        cr_assert_eq(*p++, ']', "position %d: %.20s", pos, p - 1);
    }
    cr_expect_eq(strncmp(p, "]}", 2), 0, "%s", p);
    free(logits);
    coli_context_free(&ctx);
    coli_model_free(&m);
    cli_result_free(&r);
}

/* ---- quantize ------------------------------------------------------------------ */

Test(cli, quantize_gives_loadable_file) {
    char out[256];
    tmp_path(out, sizeof out, "q8.gguf");
    char *argv[] = {s_coli, "quantize", s_model, out, "Q8_0", NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(out, &f), 0, "%s", coli_last_error());
    cr_expect_eq(gguf_find_tensor(f, "blk.0.ffn_up_exps.weight")->type, COLI_Q8_0);
    gguf_close(&f);
    char *argv_run[] = {s_coli, "run", "-m", out, "-p", "Once upon a time", "-n", "4", "--inproc", NULL};
    cli_result_free(&r);
    r = cli_run(argv_run);
    cr_expect_eq(r.status, 0, "run on the quantized file: %s", r.err);
    cr_expect_gt(r.out_len, 0);
    cli_result_free(&r);
}

//  The summary line names the tensors, the bytes in and out and the time;
//  off a terminal there is no progress line; -q silences both.
Test(cli, quantize_summary_and_quiet) {
    char out[256];
    tmp_path(out, sizeof out, "q.gguf");
    cli_result r = cli_run((char *[]){s_coli, "quantize", s_model, out, "Q8_0", NULL});
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "coli quantize: wrote ") && strstr(r.out, " tensors (") && strstr(r.out, " MiB -> ") &&
                  strstr(r.out, " s\n"),
              "summary: %s", r.out);
    cr_expect_eq(cli_count_lines(r.out), 1, "%s", r.out);
    cr_expect_eq(r.err_len, 0, "no progress off a terminal: %s", r.err);
    cli_result_free(&r);
    remove(out);
    r = cli_run((char *[]){s_coli, "quantize", "-q", s_model, out, "Q8_0", NULL});
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect_eq(r.out_len + r.err_len, 0, "-q printed: %s%s", r.out, r.err);
    cr_expect(cli_file_exists(out));
    cli_result_free(&r);
}

//  On a terminal (a pty from script(1)) the progress line is drawn with \r
//  and cleared; -q draws nothing.
Test(cli, quantize_progress_on_a_terminal) {
    if (!cli_file_exists("/usr/bin/script")) cr_skip_test("script(1) missing (bsdutils)");
    char out[256], cmd[2048], text[8192];
    tmp_path(out, sizeof out, "p.gguf");
    snprintf(cmd, sizeof cmd, "/usr/bin/script -qec \"%s quantize %s %s Q8_0\" /dev/null", s_coli, s_model, out);
    cr_assert_eq(cli_shell(cmd, text, sizeof text), 0, "%s", text);
    cr_expect(strstr(text, "\rcoli quantize: tensor ") && strstr(text, "/s"), "no progress line: %s", text);
    cr_expect(strstr(text, "coli quantize: wrote "), "no summary: %s", text);
    snprintf(cmd, sizeof cmd, "/usr/bin/script -qec \"%s quantize -q %s %s Q8_0\" /dev/null", s_coli, s_model, out);
    cr_assert_eq(cli_shell(cmd, text, sizeof text), 0, "%s", text);
    cr_expect(!strstr(text, "coli quantize"), "-q printed: %s", text);
}

/* ---- perplexity ------------------------------------------------------------------ */

/* The same number the command computes (non-overlapping windows), via the API. */
static double library_perplexity(const char *text, int window) {
    coli_model *m = s_load_inproc();
    coli_context *ctx = NULL;
    coli_context_params cp = {.n_ctx = window};
    cr_assert_eq(coli_context_new(m, &cp, &ctx), 0, "%s", coli_last_error());
    coli_model_info info;
    coli_model_get_info(m, &info);
    int32_t ids[1024];
    int n = 0;
    cr_assert_eq(coli_tokenize(m, text, strlen(text), 1, 0, ids, 1024, &n), 0);
    float *logits = malloc((size_t)window * info.n_vocab * sizeof *logits);
    double nll = 0;
    int scored = 0;
    for (int start = 0; start + 1 < n; start += window) {
        int len = n - start < window ? n - start : window;
        coli_context_reset(ctx);
        cr_assert_eq(coli_eval(ctx, ids + start, len, logits, 1), 0);
        for (int j = 1; j < len; j++, scored++) {
            const float *row = logits + (size_t)(j - 1) * info.n_vocab;
            double mx = row[0], sum = 0;
            for (int v = 1; v < info.n_vocab; v++) mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < info.n_vocab; v++) sum += exp(row[v] - mx);
            nll -= row[ids[start + j]] - mx - log(sum);
        }
    }
    free(logits);
    coli_context_free(&ctx);
    coli_model_free(&m);
    return exp(nll / scored);
}

Test(cli, perplexity_prints_finite_number) {
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play in the park "
                       "with her friend, a big dog. One day the sun was very happy and the bird smiled.\n";
    char path[256];
    tmp_path(path, sizeof path, "text.txt");
    write_text(path, text);
    char *argv[] = {s_coli, "perplexity", "-m", s_model, "-f", path, "--ctx", "16", "--inproc", NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    double ppl = 0;
    long long n = 0;
    cr_assert_eq(sscanf(r.out, "perplexity: %lf (%lld tokens)", &ppl, &n), 2, "%s", r.out);
    cr_expect(isfinite(ppl) && ppl > 1.0, "perplexity %g", ppl);
    cr_expect_not_null(strstr(r.err, "window 2"), "per-window progress on stderr: %s", r.err);
    double want = library_perplexity(text, 16);
    cr_expect(fabs(ppl - want) <= 1e-3 * want, "coli says %.4f, the API gives %.4f", ppl, want);
    cli_result_free(&r);

    char *argv_s[] = {s_coli,  "perplexity", "-m",       s_model, "-f",       path,
                      "--ctx", "16",         "--stride", "8",     "--inproc", NULL};
    r = cli_run(argv_s);
    cr_assert_eq(r.status, 0, "%s", r.err);
    long long n2 = 0;
    cr_assert_eq(sscanf(r.out, "perplexity: %lf (%lld tokens)", &ppl, &n2), 2, "%s", r.out);
    cr_expect(isfinite(ppl) && ppl > 1.0);
    cr_expect_gt(n2, n, "overlapping windows score every token but the first (%lld vs %lld)", n2, n);
    cli_result_free(&r);

    /* -q: the number alone */
    char *argv_q[] = {s_coli, "perplexity", "-q", "-m", s_model, "-f", path, "--ctx", "16", "--inproc", NULL};
    r = cli_run(argv_q);
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect_eq(r.err_len, 0, "-q printed progress: %s", r.err);
    cr_expect_eq(cli_count_lines(r.out), 1, "%s", r.out);
    cli_result_free(&r);
}

/* ---- usage and runtime errors --------------------------------------------------- */

static void expect_exit(char **argv, int status, const char *needle) {
    cli_result r = cli_run(argv);
    cr_expect_eq(r.status, status, "%s %s: status %d, want %d (stderr: %s)", argv[1], needle, r.status, status, r.err);
    cr_expect_not_null(strstr(r.err, needle), "%s: stderr does not name '%s': %s", argv[1], needle, r.err);
    cr_expect_eq(cli_count_lines(r.err), 1, "one line expected: %s", r.err);
    cr_expect_eq(r.out_len, 0, "nothing on stdout: %s", r.out);
    cli_result_free(&r);
}

#define RUN(...) ((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", __VA_ARGS__, NULL})

Test(cli, bad_flags_exit_2) {
    expect_exit(RUN("--temp", "-1"), 2, "--temp");
    expect_exit(RUN("--temp", "warm"), 2, "--temp");
    expect_exit(RUN("--top-p", "0"), 2, "--top-p");
    expect_exit(RUN("--top-p", "1.5"), 2, "--top-p");
    expect_exit(RUN("--top-k", "-2"), 2, "--top-k");
    expect_exit(RUN("--top-k", "99999999999"), 2, "--top-k"); /* no maximum, but an int */
    expect_exit(RUN("--temp", "1e300"), 2, "--temp");         /* finite double, not a float */
    expect_exit(RUN("-n", "-2"), 2, "-n");                    /* -1 is llama.cpp's "until the context is full" */
    expect_exit(RUN("--min-p", "1.5"), 2, "--min-p");
    expect_exit(RUN("--repeat-last-n", "-2"), 2, "--repeat-last-n");
    expect_exit(RUN("--presence-penalty", "3"), 2, "--presence-penalty");
    expect_exit(RUN("-n", "12abc"), 2, "-n");
    expect_exit(RUN("--seed", "-3"), 2, "--seed");
    expect_exit(RUN("-t", "0"), 2, "-t");
    expect_exit(RUN("--ctx", "0"), 2, "--ctx");
    expect_exit(RUN("--bogus"), 2, "--bogus");
    expect_exit(RUN("--inproc", "--devices", "cpu:2"), 2, "--inproc");
    expect_exit(RUN("-f", "x.txt"), 2, "-f");
    expect_exit(RUN("-n"), 2, "-n");
    expect_exit(RUN("stray"), 2, "stray");
    expect_exit((char *[]){s_coli, "run", "-p", "hi", NULL}, 2, "-m");
    expect_exit((char *[]){s_coli, "run", "-m", s_model, NULL}, 2, "-p");
    expect_exit((char *[]){s_coli, "frobnicate", NULL}, 2, "frobnicate");
    expect_exit((char *[]){s_coli, "tokenize", "-m", s_model, NULL}, 2, "-p");
    expect_exit((char *[]){s_coli, "tokenize", "-m", s_model, "-p", "x", "--jsn", NULL}, 2, "--jsn");
    expect_exit((char *[]){s_coli, "logits", "-m", s_model, "--ids", "1,x,3", NULL}, 2, "--ids");
    expect_exit((char *[]){s_coli, "logits", "-m", s_model, "--ids", "1,-2", NULL}, 2, "--ids");
    expect_exit((char *[]){s_coli, "logits", "-m", s_model, "--ids", "1", "--top", "0", NULL}, 2, "--top");
    expect_exit((char *[]){s_coli, "logits", "-m", s_model, NULL}, 2, "--ids");
    expect_exit((char *[]){s_coli, "quantize", s_model, "/tmp/x.gguf", "Q7_K", NULL}, 2, "Q7_K");
    expect_exit((char *[]){s_coli, "quantize", s_model, NULL}, 2, "OUT.gguf");
    expect_exit((char *[]){s_coli, "perplexity", "-m", s_model, NULL}, 2, "-f");
    expect_exit((char *[]){s_coli, "plan", "--devices", "cpu:2", NULL}, 2, "-m");
    expect_exit((char *[]){s_coli, "perplexity", "-m", s_model, "-f", "t", "--stride", "x", NULL}, 2, "--stride");
}

Test(cli, missing_or_truncated_model_exit_1) {
    char missing[256], truncated[256];
    tmp_path(missing, sizeof missing, "no-such-model.gguf");
    tmp_path(truncated, sizeof truncated, "truncated.gguf");
    size_t len = 0;
    char *data = cli_slurp(s_model, &len);
    cr_assert_not_null(data);
    FILE *f = fopen(truncated, "wb");
    cr_assert_not_null(f);
    fwrite(data, 1, len / 3, f); /* header intact, tensor data cut */
    fclose(f);
    free(data);
    const char *models[] = {missing, truncated};
    for (int i = 0; i < 2; i++) {
        char *m = (char *)models[i];
        expect_exit((char *[]){s_coli, "run", "-m", m, "-p", "hi", "--inproc", NULL}, 1, m);
        expect_exit((char *[]){s_coli, "tokenize", "-m", m, "-p", "hi", NULL}, 1, m);
        expect_exit((char *[]){s_coli, "logits", "-m", m, "--ids", "1", "--inproc", NULL}, 1, m);
    }
    char out[256];
    tmp_path(out, sizeof out, "out.gguf");
    expect_exit((char *[]){s_coli, "quantize", missing, out, "Q4_0", NULL}, 1, missing);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-f", missing, NULL}, 1, missing);
    expect_exit((char *[]){s_coli, "plan", "-m", missing, NULL}, 1,
                missing); /* auto: in-process, opened for the disk tier */
    /* each message names the model once (quantize said "quantize M -> OUT: cannot open 'M'") */
    for (int i = 0; i < 2; i++) {
        cli_result r = cli_run((char *[]){s_coli, "quantize", (char *)models[i], out, "Q4_0", NULL});
        const char *first = strstr(r.err, models[i]);
        cr_expect(first && !strstr(first + 1, models[i]), "the path twice: %s", r.err);
        cli_result_free(&r);
    }
}

Test(cli, help_everywhere) {
    static const char *const cmds[] = {"run",  "tokenize", "logits", "quantize", "perplexity",
                                       "plan", "bench",    "worker", "serve",    "chat"};
    const size_t n_cmds = sizeof cmds / sizeof cmds[0];
    cli_result r = cli_run((char *[]){s_coli, "--help", NULL});
    cr_assert_eq(r.status, 0);
    for (size_t i = 0; i < n_cmds; i++) cr_expect_not_null(strstr(r.out, cmds[i]), "coli --help lacks %s", cmds[i]);
    cli_result_free(&r);
    for (size_t i = 0; i < n_cmds; i++) {
        r = cli_run((char *[]){s_coli, (char *)cmds[i], "--help", NULL});
        char want[64];
        snprintf(want, sizeof want, "usage: coli %s", cmds[i]);
        cr_expect_eq(r.status, 0, "%s --help", cmds[i]);
        cr_expect_not_null(strstr(r.out, want), "%s --help: %s", cmds[i], r.out);
        cli_result_free(&r);
    }
}

/* Every fixture (each architecture and weight type) generates through the CLI. */
Test(cli, run_every_fixture) {
    static const char *const files[] = {
        "tiny-llama-dense-f32.gguf", "tiny-llama-moe-f16.gguf", "tiny-llama-moe-q8_0.gguf",
        "tiny-llama-moe-q4_0.gguf",  "tiny-olmoe-f32.gguf",     "tiny-qwen2moe-f32.gguf",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[128], path[512];
        snprintf(rel, sizeof rel, "fixtures/%s", files[i]);
        cli_build_path(path, sizeof path, rel);
        char *argv[] = {s_coli,   "run", "-m",       path,       "-p", "Once upon a time", "-n", "4",
                        "--temp", "0",   "--inproc", "--kv-f16", NULL};
        cli_result r = cli_run(argv);
        cr_expect_eq(r.status, 0, "%s: status %d: %s", files[i], r.status, r.err);
        cr_expect_gt(r.out_len, 1, "%s: no text", files[i]);
        cr_expect_not_null(strstr(r.err, "coli run: prompt "), "%s: no summary: %s", files[i], r.err);
        cli_result_free(&r);
    }
}

/* The newer families (../shared reference models): coli run gives the same
 * text in-process and through two workers, both KV cache types. */
Test(cli, run_new_families_inproc_equals_workers) {
    s_require_shared();
    static const char *const files[] = {"tiny-qwen3moe-f32.gguf", "tiny-deepseek2-f32.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        s_ref_model(files[i], path, sizeof path);
        for (int kv16 = 0; kv16 < 2; kv16++) {
            char *in[] = {
                s_coli,   "run", "-m", path, "-p",       "The capital of France is", "-n", "12", "--temp", "0.7",
                "--seed", "3",   "-t", "1",  "--inproc", kv16 ? "--kv-f16" : "-v",   NULL};
            char *wk[] = {s_coli,
                          "run",
                          "-m",
                          path,
                          "-p",
                          "The capital of France is",
                          "-n",
                          "12",
                          "--temp",
                          "0.7",
                          "--seed",
                          "3",
                          "-t",
                          "1",
                          "--devices",
                          "cpu:2",
                          kv16 ? "--kv-f16" : "-v",
                          NULL};
            cli_result a = cli_run(in), b = cli_run(wk);
            cr_expect_eq(a.status, 0, "%s --inproc: %s", files[i], a.err);
            cr_expect_eq(b.status, 0, "%s cpu:2: %s", files[i], b.err);
            cr_expect_gt(a.out_len, 1, "%s: no text", files[i]);
            cr_expect_str_eq(a.out, b.out, "%s (kv_f16 %d): workers' text differs from --inproc", files[i], kv16);
            cr_expect_not_null(strstr(b.err, "worker 1"), "%s: no worker line: %s", files[i], b.err);
            cli_result_free(&a);
            cli_result_free(&b);
        }
    }
}

/* ---- what a user is told ------------------------------------------------------ */

//  --heat auto picks MODEL.heat itself: one line says which file.
Test(cli, heat_auto_names_its_file) {
    char model[256], heat[300], cmd[1024];
    tmp_path(model, sizeof model, "m.gguf");
    snprintf(heat, sizeof heat, "%s.heat", model);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", s_model, model);
    cr_assert_eq(system(cmd), 0);
    cli_result r =
        cli_run((char *[]){s_coli, "run", "-m", model, "-p", "hi", "-n", "2", "--inproc", "--heat", "auto", NULL});
    cr_assert_eq(r.status, 0, "%s", r.err);
    char want[400];
    snprintf(want, sizeof want, "--heat auto: heat file %s", heat);
    cr_expect(strstr(r.err, want), "stderr lacks '%s': %s", want, r.err);
    cr_expect(cli_file_exists(heat));
    cli_result_free(&r);
}

//  An answer cut by the context (not by -n, not by the model) says so and
//  how to go on; one that fits says nothing of the kind.
Test(cli, chat_says_when_the_context_cut_an_answer) {
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "printf 'hi\\n/quit\\n' | %s chat -m %s --inproc --ctx 48 -n -1 --ignore-eos -t 1 2>&1",
             s_coli, s_model);
    cr_assert_eq(cli_shell(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "the context of 48 tokens is full; /reset"), "no notice: %s", out);
    snprintf(cmd, sizeof cmd, "printf 'hi\\n/quit\\n' | %s chat -m %s --inproc --ctx 48 -n 4 --ignore-eos -t 1 2>&1",
             s_coli, s_model);
    cr_assert_eq(cli_shell(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(!strstr(out, "is full"), "-n stopped it, not the context: %s", out);
}

/* ---- bench ------------------------------------------------------------------ */

//  --json is JSON whatever the model's path holds (a quote, a backslash).
Test(cli, bench_json_survives_any_model_path) {
    char odd[256], json_path[256];
    tmp_path(odd, sizeof odd, "a\"b\\c.gguf");
    tmp_path(json_path, sizeof json_path, "bench.json");
    char target[4096];
    cr_assert_not_null(realpath(s_model, target));
    cr_assert_eq(symlink(target, odd), 0);
    char *argv[] = {s_coli, "bench",    "-m", odd,        "-p",     "4",       "-n",
                    "2",    "--repeat", "1",  "--inproc", "--json", json_path, NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *text = cli_slurp(json_path, NULL);
    cr_assert_not_null(text, "--json wrote nothing");
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "not JSON: %s", text);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    cr_expect(cJSON_IsString(model) && !strcmp(model->valuestring, odd), "model: %s", text);
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(j, "configs");
    cr_expect_eq(cJSON_GetArraySize(configs), 1);
    cJSON_Delete(j);
    free(text);
    cli_result_free(&r);
}

//  --floor times the machine's own decode-shaped tokens after each repeat:
//  n_decode x repeat of them, quantiles in order, in the text and the JSON.
Test(cli, bench_floor_is_reported) {
    char json_path[256];
    tmp_path(json_path, sizeof json_path, "floor.json");
    char *argv[] = {s_coli, "bench",    "-m", s_model, "-p",      "4",      "-n",      "5", "--repeat",
                    "2",    "--inproc", "-t", "2",     "--floor", "--json", json_path, NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect_not_null(strstr(r.out, "machine floor (no model: "), "%s", r.out);
    char *text = cli_slurp(json_path, NULL);
    cr_assert_not_null(text, "--json wrote nothing");
    cJSON *j = cJSON_Parse(text);
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "floor");
    cr_assert(cJSON_IsObject(fl), "no floor: %s", text);
    const double p50 = cJSON_GetObjectItemCaseSensitive(fl, "p50_ms")->valuedouble,
                 p99 = cJSON_GetObjectItemCaseSensitive(fl, "p99_ms")->valuedouble,
                 max = cJSON_GetObjectItemCaseSensitive(fl, "max_ms")->valuedouble;
    cr_expect(p50 > 0 && p50 <= p99 && p99 <= max, "floor quantiles out of order: %s", text);
    cr_expect_gt(cJSON_GetObjectItemCaseSensitive(fl, "jobs_per_token")->valueint, 2, "%s", text);
    cJSON_Delete(j);
    free(text);
    cli_result_free(&r);
}

//  --keys DIR reaches the library: a remote device then looks for its key files
//  there instead of saying that keys are needed.
Test(cli, bench_keys_are_used) {
    char keys[256];
    tmp_path(keys, sizeof keys, "no-such-keys");
    char *argv[] = {s_coli,   "bench", "-m",       s_model, "-p",        "4",
                    "-n",     "2",     "--repeat", "1",     "--devices", "remote:tcp://127.0.0.1:9",
                    "--keys", keys,    NULL};
    cli_result r = cli_run(argv);
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, keys) || strstr(r.err, "CURVE support"), "--keys not used: %s", r.err);
    cli_result_free(&r);
}

//  --batch runs each level's sequences as one batch: N rows per step (the
//  level's mean rows per step is N once every member has joined, a bit less
//  while they join), each sequence's tokens counted once; a bad list is a
//  usage error naming the flag.
Test(cli, bench_batch_levels) {
    char *argv[] = {s_coli, "bench",    "-m", s_model,    "--batch", "1,3", "-n",
                    "6",    "--repeat", "1",  "--inproc", "-t",      "1",   NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *l1 = strstr(r.out, "\n| 1 | "), *l3 = strstr(r.out, "\n| 3 | ");
    cr_assert(l1 && l3, "no level rows: %s", r.out);
    unsigned long long steps1 = 0, steps3 = 0;
    double mean1 = 0, mean3 = 0;
    cr_assert_eq(sscanf(l1, "\n| 1 | %llu | %lf |", &steps1, &mean1), 2, "%s", l1);
    cr_assert_eq(sscanf(l3, "\n| 3 | %llu | %lf |", &steps3, &mean3), 2, "%s", l3);
    /* 6 rows per sequence; the bench holds the batch until all 3 joined, so
     * only the first step can miss some (and the last then has 2 rows) */
    cr_expect_eq(steps1, 6, "%s", r.out);
    cr_expect_eq(mean1, 1.0, "%s", r.out);
    cr_expect(steps3 >= 6 && steps3 <= 7, "3 sequences of 6 tokens in %llu steps: %s", steps3, r.out);
    cr_expect(mean3 * (double)steps3 > 17.9 && mean3 * (double)steps3 < 18.1, "rows %f x %llu != 18: %s", mean3, steps3,
              r.out);
    cr_expect_gt(mean3, 2.2, "the 3 sequences did not share steps: %s", r.out);
    cli_result_free(&r);
    char *bad[] = {s_coli, "bench", "-m", s_model, "--batch", "1,x", NULL};
    r = cli_run(bad);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "--batch"), "%s", r.err);
    cli_result_free(&r);
}
