/*
 * cmd_imatrix.c - `coli imatrix -m MODEL -f TEXT [-o OUT] [--chunks N]
 * [-c CTX] [--output-format gguf|dat]`: llama-imatrix's importance matrix
 * (coordinator/imatrix.h) from the engine's own forward pass.
 *
 * As llama-imatrix does: the whole text is tokenized once (BOS added when
 * the vocabulary adds one); it is cut into chunks of CTX tokens (default
 * 512), at most --chunks of them, at least two needed; each chunk is
 * evaluated from an empty cache with its first token replaced by BOS. Every
 * matmul input of a "blk.*" weight is collected, routed experts per expert.
 * Experts run in this process (--devices inproc): activations computed by
 * worker processes would not be seen.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "coordinator/imatrix.h"
#include "tools/coli/args.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"
#include "tools/coli/progress.h"

/* llama-imatrix's default context (chunk length). */
#define IMATRIX_DEFAULT_CTX 512

typedef struct imatrix_run {
    coli_context *ctx;
    const int32_t *tokens;
    int n_ctx, n_chunks, bos; /* bos: the id put first in each chunk, -1: none */
    int quiet;
} imatrix_run;

/* Evaluate every chunk with the collector installed. */
static int s_run_chunks(const imatrix_run *r, imatrix_collector *col, int32_t *chunk, float *logits) {
    cli_progress bar;
    cli_progress_start(&bar, "coli imatrix", "chunk", r->quiet);
    imatrix_collect_start(col);
    int rc = 0;
    for (int i = 0; i < r->n_chunks && rc == 0; i++) {
        memcpy(chunk, r->tokens + (size_t)i * (size_t)r->n_ctx, (size_t)r->n_ctx * sizeof *chunk);
        if (r->bos >= 0) chunk[0] = r->bos;
        coli_context_reset(r->ctx);
        if (coli_eval(r->ctx, chunk, r->n_ctx, logits, 0) != 0)
            rc = cli_fail();
        else if (imatrix_collect_status(col) < 0)
            rc = cli_fail();
        cli_progress_show(&bar, i + 1, r->n_chunks, 0, 0, NULL);
    }
    imatrix_collect_stop();
    cli_progress_end(&bar);
    return rc;
}

/* Collect over the chunks and write out; m and r->ctx are open. */
static int s_collect(coli_model *m, imatrix_run *r, const char *text_path, const char *out, int legacy) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    imatrix_collector *col = NULL;
    if (imatrix_collect_new(coli_model_gguf(m), &col) < 0) return cli_fail();
    int32_t *chunk = malloc((size_t)r->n_ctx * sizeof *chunk);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    int rc =
        chunk && logits ? s_run_chunks(r, col, chunk, logits) : (fprintf(stderr, "coli: out of memory\n"), CLI_FAIL);
    if (rc == 0) {
        imatrix *im = imatrix_collect_data(col);
        im->chunk_count = (uint32_t)r->n_chunks;
        im->chunk_size = (uint32_t)r->n_ctx;
        im->dataset = strdup(text_path);
        if (!im->dataset || imatrix_save(im, out, legacy) < 0) rc = cli_fail();
        if (rc == 0 && !r->quiet)
            printf("coli imatrix: wrote %s (%s): %d entries from %d chunks of %d tokens\n", out,
                   legacy ? "dat" : "gguf", im->n, r->n_chunks, r->n_ctx);
    }
    free(chunk);
    free(logits);
    imatrix_collect_free(&col);
    return rc;
}

static int s_imatrix(model_opts *o, const char *text_path, const char *out, int max_chunks, int legacy, int quiet) {
    char *text = NULL;
    size_t len = 0;
    int rc = cli_read_file("-f", text_path, &text, &len);
    if (rc) return rc;
    coli_model *m = NULL;
    imatrix_run r = {.n_ctx = o->n_ctx, .quiet = quiet};
    int32_t *tokens = NULL;
    int n_tokens = 0;
    rc = model_opts_open(o, "inproc", &m, &r.ctx);
    if (rc == 0 && text_tokenize(m, text, len, 1, 0, &tokens, &n_tokens) != 0) rc = cli_fail();
    if (rc == 0 && n_tokens < 2 * r.n_ctx) {
        fprintf(stderr, "coli: imatrix: -f: %d tokens; a context of %d needs at least %d (lower -c)\n", n_tokens,
                r.n_ctx, 2 * r.n_ctx);
        rc = CLI_FAIL;
    }
    if (rc == 0) {
        coli_model_info info;
        coli_model_get_info(m, &info);
        r.tokens = tokens;
        r.bos = info.add_bos ? info.bos_id : -1;
        r.n_chunks = n_tokens / r.n_ctx;
        if (max_chunks > 0 && max_chunks < r.n_chunks) r.n_chunks = max_chunks;
        rc = s_collect(m, &r, text_path, out, legacy);
    }
    free(tokens);
    free(text);
    coli_context_free(&r.ctx);
    if (m && model_opts_free(&m) != 0 && rc == 0) rc = CLI_FAIL;
    return rc;
}

int cmd_imatrix(int argc, char **argv) {
    model_opts o;
    memset(&o, 0, sizeof o);
    const char *file = NULL, *out = "imatrix.gguf", *format = NULL;
    int chunks = 0, quiet = 0;
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(o),
        {"--file", "-f", ARG_STR, &file, 0, 0, 0, "FILE", "the text to run (required)"},
        {"--output", "-o", ARG_STR, &out, 0, 0, 0, "FILE", "where to write it (default imatrix.gguf)"},
        {"--chunks", NULL, ARG_INT, &chunks, 1, 1 << 24, 0, "N", "at most N chunks (default: all the text gives)"},
        {"--output-format", NULL, ARG_STR, &format, 0, 0, 0, "F", "gguf (default) or dat (llama.cpp's legacy)"},
        {"--quiet", "-q", ARG_FLAG, &quiet, 0, 0, 0, NULL, "no progress and no summary"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("imatrix", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "imatrix", "-m FILE -f TEXT [-o OUT] [--chunks N] [-c CTX]",
                   "The importance matrix of llama-imatrix (llama.cpp de3ff815's file, GGUF by default) over a\n"
                   "text: per weight the sum of the squared inputs of each column, per expert for routed\n"
                   "experts. Chunks of -c tokens (default 512), each from an empty cache with BOS first.\n"
                   "Experts run in this process. `coli quantize --imatrix FILE` takes the result.",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if ((rc = model_opts_check("imatrix", &o))) return rc;
    if (!file) return args_error("imatrix", "-f", "required (the text file to run)");
    if (format && strcmp(format, "gguf") != 0 && strcmp(format, "dat") != 0)
        return args_error("imatrix", "--output-format", "'%s' is neither gguf nor dat", format);
    if (o.devices && strcmp(o.devices, "inproc") != 0)
        return args_error("imatrix", "--devices", "'%s': imatrix runs the experts in this process (inproc)", o.devices);
    if ((rc = cli_check_output_file("imatrix", "-o", out, o.model)) != 0) return rc;
    if (!o.n_ctx) o.n_ctx = IMATRIX_DEFAULT_CTX;
    o.inproc = 1;
    return s_imatrix(&o, file, out, chunks, format && strcmp(format, "dat") == 0, quiet);
}
