/*
 * cmd_logits.c - `coli logits`: run a list of token ids teacher-forced as
 * one batch and print the top-k (id, logit) pairs at every position, the
 * way the reference files (../shared/reference/expected) record llama.cpp's.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"

/* "1,2,3" -> ids (malloc'd). 0 or ARGS_ERROR naming --ids. */
static int s_parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) return args_error("logits", "--ids", "out of memory for %d ids", cap);
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0') || *p == '+' || *p == ' ') {
            free(*ids);
            *ids = NULL;
            return args_error("logits", "--ids", "'%s' is not a comma-separated list of token ids (0, 1, ...)", s);
        }
        (*ids)[(*n)++] = (int32_t)v;
        if (*end == '\0') return ARGS_OK;
        p = end + 1;
    }
}

/* The k largest of row[0..n) into top (ids), descending; ties: lower id first. */
static void s_top_k(const float *row, int n, int k, int32_t *top) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && !(row[i] > row[top[k - 1]])) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && row[i] > row[top[j - 1]]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
}

static void s_print_positions(const float *logits, int n_pos, int n_vocab, int k, int json) {
    int32_t *top = malloc((size_t)k * sizeof *top);
    if (!top) return;
    if (json) printf("{\"positions\":[");
    for (int p = 0; p < n_pos; p++) {
        const float *row = logits + (size_t)p * (size_t)n_vocab;
        s_top_k(row, n_vocab, k, top);
        if (json) {
            printf("%s[", p ? "," : "");
            for (int i = 0; i < k; i++) printf("%s[%d,%.9g]", i ? "," : "", top[i], row[top[i]]);
            printf("]");
        } else {
            printf("%d:", p);
            for (int i = 0; i < k; i++) printf(" %d=%.6f", top[i], row[top[i]]);
            printf("\n");
        }
    }
    if (json) printf("]}\n");
    free(top);
}

static int s_eval_ids(const model_opts *o, const int32_t *ids, int n, int k, int json) {
    coli_model *m = NULL;
    coli_context *ctx = NULL;
    int rc = model_opts_open(o, NULL, &m, &ctx);
    if (rc) return rc;
    coli_model_info info;
    coli_model_get_info(m, &info);
    int n_ctx = model_opts_n_ctx(o, m);
    float *logits = NULL;
    if (n > n_ctx) {
        fprintf(stderr, "coli: --ids: %d ids do not fit the context of %d (--ctx)\n", n, n_ctx);
        rc = CLI_FAIL;
    } else if (!(logits = malloc((size_t)n * (size_t)info.n_vocab * sizeof *logits))) {
        fprintf(stderr, "coli: logits: out of memory for %d x %d logits\n", n, info.n_vocab);
        rc = CLI_FAIL;
    } else if (coli_eval(ctx, ids, n, logits, 1) != 0) {
        rc = cli_fail();
    } else {
        s_print_positions(logits, n, info.n_vocab, k < info.n_vocab ? k : info.n_vocab, json);
    }
    free(logits);
    coli_context_free(&ctx);
    coli_model_free(&m);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    model_opts o;
    memset(&o, 0, sizeof o);
    const char *ids_text = NULL;
    int k = 10, json = 0;
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(o),
        {"--ids", NULL, ARG_STR, &ids_text, 0, 0, 0, "LIST", "token ids, comma-separated (required)"},
        {"--top", NULL, ARG_INT, &k, 1, 1 << 20, 0, "K", "pairs per position (default 10)"},
        {"--json", NULL, ARG_FLAG, &json, 0, 0, 0, NULL, "print {\"positions\":[[[id,logit],...],...]}"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("logits", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "logits", "-m FILE --ids 1,2,3 [--top K] [--json] [flags]",
                   "Evaluate the ids as one batch (teacher-forced) and print the top-K (id, logit) pairs\n"
                   "at every position; position i predicts the token after ids[i].",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if ((rc = model_opts_check("logits", &o))) return rc;
    if (!ids_text) return args_error("logits", "--ids", "required (comma-separated token ids)");
    int32_t *ids = NULL;
    int n = 0;
    if ((rc = s_parse_ids(ids_text, &ids, &n))) return rc;
    rc = s_eval_ids(&o, ids, n, k, json);
    free(ids);
    return rc;
}
