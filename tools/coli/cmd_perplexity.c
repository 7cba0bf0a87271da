/*
 * cmd_perplexity.c - `coli perplexity -m FILE -f TEXT [--ctx N] [--stride N]`.
 *
 * The whole file is tokenized once (BOS added if the vocabulary adds one,
 * special-token text kept as plain text). Windows of --ctx tokens start
 * every --stride tokens (default: --ctx, i.e. non-overlapping windows; --ctx
 * defaults to the model's context length, at most 512); each
 * window is evaluated from an empty cache as one batch, and scores only the
 * tokens no earlier window scored: the first window all tokens after its
 * first, each later window its last `stride` tokens (with --stride ctx/2
 * that is the second half of every window, as llama.cpp's perplexity does).
 * A token is never scored without at least one token before it in its window.
 *
 *   perplexity = exp(mean over scored tokens of -log p(token | window before it))
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"
#include "tools/coli/progress.h"

typedef struct ppl_run {
    coli_context *ctx;
    const int32_t *tokens;
    int n_tokens, window, stride, n_vocab;
    float *logits; /* window * n_vocab */
    double nll;    /* sum of -log p over scored tokens */
    long long n_scored;
    int quiet; /* -q: no progress */
} ppl_run;

/* -log softmax(row)[target], in double. */
static double s_neg_log_prob(const float *row, int n, int32_t target) {
    float mx = row[0];
    for (int i = 1; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)row[i] - mx);
    return -((double)row[target] - mx - log(sum));
}

/* Evaluate the window [start, end) and score tokens [from, end). */
static int s_score_window(ppl_run *r, int start, int end, int from) {
    coli_context_reset(r->ctx);
    if (coli_eval(r->ctx, r->tokens + start, end - start, r->logits, 1) != 0) return cli_fail();
    for (int j = from; j < end; j++) {
        /* row j-start-1 is the prediction made after token j-1 */
        const float *row = r->logits + (size_t)(j - start - 1) * (size_t)r->n_vocab;
        r->nll += s_neg_log_prob(row, r->n_vocab, r->tokens[j]);
        r->n_scored++;
    }
    return 0;
}

/* Windows run_windows evaluates: the first, then one per stride until the end is scored. */
static int s_n_windows(const ppl_run *r) {
    int n = 1;
    for (int start = 0; start + r->window < r->n_tokens; start += r->stride) n++;
    return n;
}

/* Progress: on a terminal one line redrawn (progress.h); elsewhere a line
 * per window, as a log wants it; -q: neither. */
static int s_run_windows(ppl_run *r) {
    int scored_until = 1, n_windows = 0, total = s_n_windows(r); /* token 0 has nothing before it */
    cli_progress bar;
    cli_progress_start(&bar, "coli perplexity", "window", r->quiet);
    for (int start = 0; scored_until < r->n_tokens; start += r->stride) {
        int end = start + r->window < r->n_tokens ? start + r->window : r->n_tokens;
        int from = scored_until > start + 1 ? scored_until : start + 1;
        int rc = s_score_window(r, start, end, from);
        if (rc) {
            cli_progress_end(&bar);
            return rc;
        }
        scored_until = end;
        n_windows++;
        char now[64];
        snprintf(now, sizeof now, "running perplexity %.4f", exp(r->nll / (double)r->n_scored));
        if (bar.on)
            cli_progress_show(&bar, n_windows, total, 0, 0, now);
        else if (!r->quiet)
            fprintf(stderr, "perplexity: window %d of %d, tokens %d..%d, %lld scored, %s\n", n_windows, total, start,
                    end - 1, r->n_scored, now);
    }
    cli_progress_end(&bar);
    return 0;
}

static int s_tokenize_all(const coli_model *m, const char *text, size_t len, int32_t **ids, int *n) {
    int rc = text_tokenize(m, text, len, 1, 0, ids, n);
    if (rc == COLI_ENOMEM) {
        fprintf(stderr, "coli: -f: out of memory for the text's tokens\n");
        return CLI_FAIL;
    }
    return rc ? cli_fail() : 0;
}

/* Default window: the model's context, at most 512 tokens (the logits of a
 * whole window are held at once: window x n_vocab floats). */
#define PPL_DEFAULT_WINDOW 512

static int s_perplexity(model_opts *o, int stride, int quiet, const char *text, size_t len) {
    coli_model *m = NULL;
    ppl_run r;
    memset(&r, 0, sizeof r);
    r.quiet = quiet;
    int32_t *tokens = NULL;
    int rc = model_opts_open(o, NULL, &m, NULL);
    if (rc) return rc;
    coli_model_info info;
    coli_model_get_info(m, &info);
    if (!o->n_ctx) o->n_ctx = info.n_ctx < PPL_DEFAULT_WINDOW ? info.n_ctx : PPL_DEFAULT_WINDOW;
    rc = model_opts_new_context(o, m, &r.ctx);
    if (!rc) rc = s_tokenize_all(m, text, len, &tokens, &r.n_tokens);
    if (!rc && r.n_tokens < 2) {
        fprintf(stderr, "coli: -f: the text gives %d token(s), perplexity needs at least 2\n", r.n_tokens);
        rc = CLI_FAIL;
    }
    if (!rc) {
        r.tokens = tokens;
        r.n_vocab = info.n_vocab;
        r.window = o->n_ctx;
        r.stride = stride > 0 && stride < r.window ? stride : r.window;
        r.logits = malloc((size_t)r.window * (size_t)r.n_vocab * sizeof *r.logits);
        if (!r.logits) {
            fprintf(stderr, "coli: perplexity: out of memory for %d x %d logits (lower --ctx)\n", r.window, r.n_vocab);
            rc = CLI_FAIL;
        }
    }
    if (!rc) rc = s_run_windows(&r);
    if (!rc) printf("perplexity: %.4f (%lld tokens)\n", exp(r.nll / (double)r.n_scored), r.n_scored);
    free(r.logits);
    free(tokens);
    coli_context_free(&r.ctx);
    coli_model_free(&m);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    model_opts o;
    memset(&o, 0, sizeof o);
    const char *file = NULL;
    int stride = 0, quiet = 0;
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(o),
        {"--file", "-f", ARG_STR, &file, 0, 0, 0, "FILE", "the text to score (required)"},
        {"--stride", NULL, ARG_INT, &stride, 1, 1 << 24, 0, "N", "start a window every N tokens (default: --ctx)"},
        {"--quiet", "-q", ARG_FLAG, &quiet, 0, 0, 0, NULL, "no progress on stderr"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("perplexity", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "perplexity", "-m FILE -f FILE [--ctx N] [--stride N] [flags]",
                   "Token-level perplexity of the model over a text file. Windows of --ctx tokens start\n"
                   "every --stride tokens (default: non-overlapping; --ctx: the model's, at most 512).\n"
                   "Each window scores the tokens no earlier window scored (--stride ctx/2: the second\n"
                   "half of each window, like llama.cpp).\n"
                   "Progress on stderr (a line redrawn on a terminal, a line per window elsewhere; -q: none),\n"
                   "\"perplexity: X (N tokens)\" on stdout.",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if ((rc = model_opts_check("perplexity", &o))) return rc;
    if (!file) return args_error("perplexity", "-f", "required (the text file to score)");
    if (o.n_ctx && stride > o.n_ctx)
        return args_error("perplexity", "--stride", "%d is larger than --ctx %d", stride, o.n_ctx);
    if (o.n_ctx == 1) return args_error("perplexity", "--ctx", "must be at least 2 to score anything");
    char *text = NULL;
    size_t len = 0;
    if ((rc = cli_read_file("-f", file, &text, &len))) return rc;
    rc = s_perplexity(&o, stride, quiet, text, len);
    free(text);
    return rc;
}
