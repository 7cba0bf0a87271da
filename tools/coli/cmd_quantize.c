/*
 * cmd_quantize.c - `coli quantize [--pure] [--output-type T]
 * [--token-embedding-type T] IN.gguf OUT.gguf TYPE`: llama-quantize's
 * presets and flags (coli_quantize_file_params).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "core/gguf/gguf.h"
#include "tools/coli/model_opts.h"
#include "tools/coli/progress.h"

static const char s_about[] =
    "Write a copy of IN with its 2-D/3-D weights quantized as llama-quantize does for the preset\n"
    "TYPE (no imatrix): each weight gets the type llama.cpp's preset picks for it (output.weight\n"
    "Q6_K, some attn_v/ffn_down layers one step up, Q8_0 attn_k/attn_v with 8 experts, fallbacks for\n"
    "rows the block does not divide); --pure gives every weight the preset's base type. With\n"
    "--imatrix the IQ grid types are written (llama.cpp needs the matrix for them). Norms,\n"
    "biases and routers stay F32. TYPE: ";

/* An override flag's value must be a block type the library knows; it
 * checks that itself, but a usage error (exit 2) names the flag. */
static int s_check_type_flag(const char *flag, const char *value) {
    static const char *const types[] = {"F32",    "F16",   "BF16",    "Q8_0",   "Q4_0",  "Q4_1",    "Q5_0",   "Q5_1",
                                        "IQ4_NL", "Q2_K",  "Q3_K",    "Q4_K",   "Q5_K",  "Q6_K",    "IQ4_XS", "TQ1_0",
                                        "TQ2_0",  "MXFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S"};
    if (!value) return 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(value, types[i]) == 0) return 0;
    return args_error(
        "quantize", flag,
        "unknown type '%s' (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
        "IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0, MXFP4, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S)",
        value);
}

/* "F32 13, Q4_K 23, Q6_K 3": how many tensors of each type the file has
 * (what the preset decided, fallbacks included); returns the tensors in all.
 * Empty (0) if it cannot be read. */
static int64_t s_type_summary(const char *path, char *out, size_t cap) {
    gguf_file *f = NULL;
    out[0] = 0;
    if (gguf_open(path, &f) != 0) return 0;
    int count[64] = {0};
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        if (gguf_tensor(f, i)->type < 64) count[gguf_tensor(f, i)->type]++;
    size_t len = 0;
    for (int t = 0; t < 64 && len < cap; t++)
        if (count[t])
            len += (size_t)snprintf(out + len, cap - len, "%s%s %d", len ? ", " : "", coli_dtype_name((uint32_t)t),
                                    count[t]);
    int64_t n = gguf_n_tensors(f);
    gguf_close(&f);
    return n;
}

/* The library's progress callback: the terminal line (progress.h). */
static void s_progress(void *user, int64_t n_done, int64_t n_total, uint64_t bytes_done, uint64_t bytes_total) {
    cli_progress_show(user, n_done, n_total, bytes_done, bytes_total, n_done == n_total ? "writing" : NULL);
}

static uint64_t s_file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The summary line: what was written, from what, how big, how long. */
static void s_summary(const char *in, const char *out, const char *type, int pure, double seconds) {
    char types[512], a[32], b[32];
    int64_t n = s_type_summary(out, types, sizeof types);
    printf("coli quantize: wrote %s (%s%s): %lld tensors (%s), %s -> %s in %.1f s\n", out, type, pure ? ", pure" : "",
           (long long)n, types, cli_bytes(a, sizeof a, s_file_size(in)), cli_bytes(b, sizeof b, s_file_size(out)),
           seconds);
}

int cmd_quantize(int argc, char **argv) {
    coli_quantize_params qp = {0};
    int quiet = 0;
    const arg_spec specs[] = {
        {"--pure", NULL, ARG_FLAG, &qp.pure, 0, 0, 0, NULL, "every weight in TYPE's base type (no per-tensor mix)"},
        {"--imatrix", NULL, ARG_STR, &qp.imatrix, 0, 0, 0, "FILE",
         "importance matrix (coli imatrix / llama-imatrix, GGUF or .dat): needed by IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS"},
        {"--output-type", NULL, ARG_STR, &qp.output_type, 0, 0, 0, "T", "type of output.weight"},
        {"--token-embedding-type", NULL, ARG_STR, &qp.token_embd_type, 0, 0, 0, "T", "type of token_embd.weight"},
        {"--threads", "-t", ARG_INT, &qp.n_threads, 1, 512, 0, "N", "threads converting rows (default: one per core)"},
        {"--quiet", "-q", ARG_FLAG, &quiet, 0, 0, 0, NULL, "no progress line and no summary (errors still print)"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    const char *pos[3];
    int n_pos = 0;
    int rc = args_parse("quantize", argc, argv, specs, n_specs, pos, 3, &n_pos);
    if (rc == ARGS_HELP) {
        char about[2048];
        snprintf(about, sizeof about, "%s%s.", s_about, coli_quantize_type_names());
        args_usage(stdout, "quantize", "[--pure] [--imatrix FILE] [--output-type T] IN.gguf OUT.gguf TYPE", about,
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if (n_pos < 3) {
        static const char *const missing[] = {"IN.gguf", "OUT.gguf", "TYPE"};
        return args_error("quantize", missing[n_pos], "missing (usage: coli quantize IN.gguf OUT.gguf TYPE)");
    }
    if (!coli_quantize_type_known(pos[2]))
        return args_error("quantize", "TYPE", "unknown type '%s' (accepted: %s)", pos[2], coli_quantize_type_names());
    if ((rc = s_check_type_flag("--output-type", qp.output_type)) != 0) return rc;
    if ((rc = s_check_type_flag("--token-embedding-type", qp.token_embd_type)) != 0) return rc;
    if (cli_check_input_file("IN.gguf", pos[0])) return CLI_FAIL;
    if (qp.imatrix && cli_check_input_file("--imatrix", qp.imatrix)) return CLI_FAIL;
    if ((rc = cli_check_output_file("quantize", "OUT.gguf", pos[1], pos[0])) != 0) return rc;
    cli_progress bar;
    cli_progress_start(&bar, "coli quantize", "tensor", quiet);
    qp.progress = s_progress;
    qp.progress_user = &bar;
    rc = coli_quantize_file_params(pos[0], pos[1], pos[2], &qp);
    double seconds = cli_progress_end(&bar);
    if (rc != 0) return cli_fail();
    if (!quiet) s_summary(pos[0], pos[1], pos[2], qp.pure, seconds);
    return 0;
}
