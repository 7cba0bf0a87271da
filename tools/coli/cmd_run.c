/*
 * cmd_run.c - `coli run`: generate text from a prompt, streamed to stdout
 * one token at a time, with a one-line speed summary on stderr. With
 * --chat-template the prompt is one user message in that chat template.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"
#include "core/file_io.h"

typedef struct run_flags {
    model_opts m;
    coli_sampling_params sp;
    const char *prompt, *prompt_file;
    const char *chat_template; /* --chat-template NAME, NULL: the prompt as it is */
    const char *chat_kwargs;   /* --chat-template-kwargs JSON (with --chat-template only) */
    int thinking;              /* its enable_thinking, CHAT_THINKING_DEFAULT: not given */
    const char *effort_flag;   /* --reasoning-effort (with --chat-template only) */
    int effort;                /* it or the JSON's reasoning_effort, CHAT_EFFORT_DEFAULT: not given */
} run_flags;

/* Called per generated token: print its complete UTF-8 bytes right away. */
static int s_print_token(void *user, int32_t id, const char *text, size_t len) {
    size_t *printed = user;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        *printed += len;
    }
    return ferror(stdout) ? 1 : 0; /* a closed pipe stops generation, not an error */
}

/* The prompt as one user message in the chat template name (the template
 * text carries BOS): malloc'd into *out, the message's place in it in
 * *plain (chat_render_plain: tokenized as text, as coli serve does), or
 * CLI_FAIL (printed). */
static int s_render_chat(const coli_model *m, const char *name, int thinking, int effort, const char *prompt,
                         size_t len, char **out, coli_text_span **plain, int *n_plain) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    const char *source, *bos = info.bos_id >= 0 ? coli_token_text(m, info.bos_id) : "",
                        *eos = info.eos_id >= 0 ? coli_token_text(m, info.eos_id) : "";
    chat_family f = chat_template_pick(name, &info, &source);
    char *text = strndup(prompt, len), err[512];
    chat_message msg = {"user", text};
    int rc = text ? chat_render_plain(f, &msg, 1,
                                      &(chat_options){bos, eos, chat_template_default_system(info.chat_template),
                                                      thinking, effort, NULL},
                                      out, plain, n_plain, err, sizeof err)
                  : -1;
    if (rc) fprintf(stderr, "coli run: --chat-template %s: %s\n", name, text ? err : "out of memory");
    free(text);
    return rc ? CLI_FAIL : 0;
}

/* Tokenize with special tokens, and BOS unless a chat template put it in the
 * text (chat: the message's text, plain[0..n_plain), without special tokens);
 * *ids is malloc'd. 0 or CLI_FAIL. */
static int s_tokenize_prompt(const coli_model *m, const char *text, size_t len, int chat, const coli_text_span *plain,
                             int n_plain, int32_t **ids, int *n) {
    int rc = chat ? chat_tokenize(m, text, len, plain, n_plain, ids, n) : text_tokenize(m, text, len, 1, 1, ids, n);
    if (rc == COLI_ENOMEM) {
        fprintf(stderr, "coli: prompt: out of memory for its tokens\n");
        return CLI_FAIL;
    }
    return rc ? cli_fail() : 0;
}

static double s_per_second(int n, double seconds) { return seconds > 0 ? n / seconds : 0.0; }

/* The summary line; ctx_full: the context, not -n, ended generation (the
 * user asked for more tokens than fit, or for -n -1): say so, or a user
 * who asked for 1000 tokens and got 60 cannot tell why. */
static void s_print_summary(const coli_model *m, const model_opts *o, const coli_gen_stats *st, int ctx_full,
                            int n_ctx) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    char why[96] = "";
    if (st->stopped_by_eog)
        snprintf(why, sizeof why, ", ended by the model");
    else if (ctx_full)
        snprintf(why, sizeof why, ", stopped: the context of %d tokens is full (--ctx)", n_ctx);
    fprintf(stderr, "coli run: prompt %d tokens (%.1f tok/s), generated %d tokens (%.1f tok/s)%s, load %.2f s\n",
            st->n_prompt, s_per_second(st->n_prompt, st->prompt_seconds), st->n_gen,
            s_per_second(st->n_gen, st->gen_seconds), why, info.load_seconds);
    char *text = NULL;
    /* The executor's lines: always when verbose, otherwise only when they
     * are about workers (an in-process run has nothing the user must see). */
    if (coli_model_stats_text(m, &text) == 0 && text && text[0] &&
        (o->verbose || strstr(text, "worker") || strstr(text, "disk tier")))
        fputs(text, stderr);
    free(text);
}

/* --stats-json: written here, not by the library on free, so that a path
 * that cannot be written fails the run (exit 1 with the reason). */
static int s_write_stats_json(const coli_model *m, const char *path) {
    char *json = NULL;
    if (coli_model_stats_json(m, &json) != 0) return cli_fail();
    int rc = coli_outfile_write_line("--stats-json", path, json, 0);
    free(json);
    return rc ? cli_fail() : 0;
}

static int s_generate(const run_flags *f, const char *prompt, size_t len) {
    coli_model *m = NULL;
    coli_context *ctx = NULL;
    int32_t *ids = NULL;
    int n_prompt = 0;
    char *chat = NULL;
    model_opts mo = f->m;
    mo.stats_json = NULL; /* write_stats_json below */
    int rc = model_opts_open(&mo, NULL, &m, &ctx);
    if (rc) return rc;
    coli_text_span *plain = NULL;
    int n_plain = 0;
    if (f->chat_template &&
        (rc = s_render_chat(m, f->chat_template, f->thinking, f->effort, prompt, len, &chat, &plain, &n_plain)) == 0) {
        prompt = chat;
        len = strlen(chat);
    }
    if (!rc) rc = s_tokenize_prompt(m, prompt, len, chat != NULL, plain, n_plain, &ids, &n_prompt);
    free(plain);
    int n_ctx = model_opts_n_ctx(&f->m, m);
    if (!rc && n_prompt == 0) {
        fprintf(stderr, "coli: prompt: empty (it gives no tokens)\n");
        rc = CLI_FAIL;
    } else if (!rc && n_prompt >= n_ctx) {
        fprintf(stderr, "coli: prompt: %d tokens do not fit the context of %d (--ctx)\n", n_prompt, n_ctx);
        rc = CLI_FAIL;
    }
    if (!rc) {
        coli_sampling_params sp = f->sp;
        /* stop when the context is full (-n -1: only then) */
        const int by_ctx = sp.n_predict < 0 || sp.n_predict > n_ctx - n_prompt;
        if (by_ctx) sp.n_predict = n_ctx - n_prompt;
        coli_gen_stats st;
        memset(&st, 0, sizeof st);
        size_t printed = 0;
        if (coli_generate(ctx, ids, n_prompt, &sp, s_print_token, &printed, &st) != 0) rc = cli_fail();
        if (printed) fputc('\n', stdout);
        fflush(stdout);
        if (!rc) s_print_summary(m, &f->m, &st, by_ctx && st.n_gen >= sp.n_predict, n_ctx);
    }
    free(ids);
    free(chat);
    coli_context_free(&ctx);
    if (f->m.stats_json && s_write_stats_json(m, f->m.stats_json) && !rc) rc = CLI_FAIL;
    if (model_opts_free(&m) && !rc) rc = CLI_FAIL;
    return rc;
}

int cmd_run(int argc, char **argv) {
    run_flags f;
    memset(&f, 0, sizeof f);
    coli_sampling_default_params(&f.sp);
    f.sp.n_predict = 64;
    sampling_help help;
    sampling_help_init(&help, &f.sp);
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(f.m),
        ROUTE_OPTS_SPECS(f.m),
        {"--prompt", "-p", ARG_STR, &f.prompt, 0, 0, 0, "TEXT", "the prompt"},
        {"--file", "-f", ARG_STR, &f.prompt_file, 0, 0, 0, "FILE",
         "read the prompt from FILE (one trailing newline dropped)"},
        {"--n-predict", "-n", ARG_INT, &f.sp.n_predict, -1, 1 << 24, 0, "N",
         "tokens to generate (default 64, -1 = until the context is full)"},
        SAMPLING_SPECS(f.sp, help),
        {"--stats-json", NULL, ARG_STR, &f.m.stats_json, 0, 0, 0, "FILE", "write the run's stats as JSON to FILE"},
        CHAT_TEMPLATE_SPEC(f.chat_template),
        CHAT_KWARGS_SPEC(f.chat_kwargs),
        REASONING_EFFORT_SPEC(f.effort_flag),
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("run", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "run", "-m FILE (-p TEXT | -f FILE) [flags]",
                   "Generate text: the continuation is streamed to stdout, a speed summary goes to stderr.", specs,
                   n_specs);
        return 0;
    }
    if (rc) return rc;
    if ((rc = model_opts_check("run", &f.m)) || (rc = chat_template_check("run", f.chat_template)) ||
        (rc = chat_kwargs_check("run", f.chat_kwargs, f.effort_flag, &f.thinking, &f.effort)))
        return rc;
    if (f.chat_kwargs && !f.chat_template)
        return args_error("run", "--chat-template-kwargs",
                          "only with --chat-template (without it the prompt is used as it is)");
    if (f.effort_flag && !f.chat_template)
        return args_error("run", "--reasoning-effort",
                          "only with --chat-template (without it the prompt is used as it is)");
    if (f.prompt && f.prompt_file) return args_error("run", "-f", "give either -p or -f, not both");
    if (!f.prompt && !f.prompt_file) return args_error("run", "-p", "required (the prompt text, or -f FILE)");
    if (f.prompt) return s_generate(&f, f.prompt, strlen(f.prompt));
    char *text = NULL;
    size_t len = 0;
    if ((rc = cli_read_file("-f", f.prompt_file, &text, &len))) return rc;
    if (len && text[len - 1] == '\n') text[--len] = '\0';
    rc = s_generate(&f, text, len);
    free(text);
    return rc;
}
