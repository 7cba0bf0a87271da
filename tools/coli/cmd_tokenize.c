/*
 * cmd_tokenize.c - `coli tokenize`: the ids and vocabulary pieces of a text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"

/* s as a JSON string: quotes, backslashes and control bytes escaped; other
 * bytes (UTF-8) as they are. */
static void s_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void s_print_tokens(const coli_model *m, const int32_t *ids, int n, int json) {
    if (!json) {
        for (int i = 0; i < n; i++) {
            const char *piece = coli_token_text(m, ids[i]);
            printf("%6d -> '%s'\n", ids[i], piece ? piece : "");
        }
        return;
    }
    printf("{\"ids\":[");
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("],\"pieces\":[");
    for (int i = 0; i < n; i++) {
        const char *piece = coli_token_text(m, ids[i]);
        if (i) putchar(',');
        s_json_string(stdout, piece ? piece : "");
    }
    printf("]}\n");
}

static int s_tokenize_text(const char *model, const char *text, size_t len, int add_bos, int parse_special, int json) {
    /* Tokenizing needs only the vocabulary (as llama-tokenize): any GGUF
     * that carries one works, vocabulary-only files and unsupported
     * architectures included, and no workers start. */
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.vocab_only = 1;
    coli_model *m = NULL;
    if (coli_model_load(model, &mp, &m) != 0) return cli_fail();
    int rc;
    int32_t *ids = NULL;
    int n = 0;
    rc = text_tokenize(m, text, len, add_bos, parse_special, &ids, &n);
    if (rc == COLI_ENOMEM) {
        fprintf(stderr, "coli: tokenize: out of memory\n");
        rc = CLI_FAIL;
    } else if (rc) {
        rc = cli_fail();
    } else {
        s_print_tokens(m, ids, n, json);
    }
    free(ids);
    coli_model_free(&m);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    int json = 0, no_bos = 0, no_parse_special = 0;
    const arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model, 0, 0, 0, "FILE", "the GGUF model file (required)"},
        {"--prompt", "-p", ARG_TEXT, &text, 0, 0, 0, "TEXT", "the text to tokenize (\"\": no tokens, BOS aside)"},
        {"--file", "-f", ARG_STR, &file, 0, 0, 0, "FILE", "tokenize the contents of FILE"},
        {"--json", NULL, ARG_FLAG, &json, 0, 0, 0, NULL, "print {\"ids\":[...],\"pieces\":[...]}"},
        {"--no-bos", NULL, ARG_FLAG, &no_bos, 0, 0, 0, NULL, "do not add BOS"},
        {"--no-parse-special", NULL, ARG_FLAG, &no_parse_special, 0, 0, 0, NULL, "treat text like <s> as plain text"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("tokenize", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "tokenize", "-m FILE (-p TEXT | -f FILE) [--json] [--no-bos] [--no-parse-special]",
                   "Print the token ids of a text and their vocabulary strings (one per line: id -> 'piece').", specs,
                   n_specs);
        return 0;
    }
    if (rc) return rc;
    if (!model) return args_error("tokenize", "-m", "required (the GGUF model file)");
    if (cli_check_input_file("-m", model)) return CLI_FAIL;
    if (text && file) return args_error("tokenize", "-f", "give either -p or -f, not both");
    if (!text && !file) return args_error("tokenize", "-p", "required (the text, or -f FILE)");
    if (text) return s_tokenize_text(model, text, strlen(text), !no_bos, !no_parse_special, json);
    char *buf = NULL;
    size_t len = 0;
    if ((rc = cli_read_file("-f", file, &buf, &len))) return rc;
    rc = s_tokenize_text(model, buf, len, !no_bos, !no_parse_special, json);
    free(buf);
    return rc;
}
