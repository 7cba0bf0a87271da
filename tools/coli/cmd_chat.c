/*
 * cmd_chat.c - `coli chat`: talk to the model in the terminal. Answers are
 * streamed as they are generated; the conversation is kept (rendered with
 * the model's chat template, tools/coli/chat/chat_template.h) and the KV
 * cache is reused when the new prompt extends what it already holds. /reset, /stats, /quit;
 * Ctrl-C stops the answer being written, not the program.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "tools/coli/line_edit.h"
#include "tools/coli/model_opts.h"
#include "tools/coli/chat/chat_template.h"

static volatile sig_atomic_t s_interrupted;

static void s_on_sigint(int sig) {
    (void)sig;
    s_interrupted = 1;
}

typedef struct chat_state {
    coli_model *m;
    coli_context *ctx;
    coli_sampling_params sp; /* n_predict: the most tokens per answer */
    chat_family family;
    const char *default_system; /* ChatML templates that carry one */
    int thinking;               /* --chat-template-kwargs enable_thinking (CHAT_THINKING_DEFAULT: not given) */
    int effort;                 /* --reasoning-effort or the JSON's (CHAT_EFFORT_DEFAULT: not given) */
    char *bos, *eos;
    chat_message *msgs; /* owned role/content strings */
    int n_msgs, cap_msgs;
    int32_t *cache; /* the ids the context holds, in order */
    int n_cache, cap_cache;
    int n_ctx;
    coli_gen_stats last;
    char *answer; /* the answer being streamed, NUL-terminated */
    size_t answer_len, answer_cap;
} chat_state;

static int s_push_id(chat_state *c, int32_t id) {
    if (c->n_cache == c->cap_cache) {
        int cap = c->cap_cache ? c->cap_cache * 2 : 256;
        int32_t *t = realloc(c->cache, (size_t)cap * sizeof *t);
        if (!t) return -1;
        c->cache = t;
        c->cap_cache = cap;
    }
    c->cache[c->n_cache++] = id;
    return 0;
}

static int s_add_message(chat_state *c, const char *role, const char *content) {
    if (c->n_msgs == c->cap_msgs) {
        int cap = c->cap_msgs ? c->cap_msgs * 2 : 16;
        chat_message *t = realloc(c->msgs, (size_t)cap * sizeof *t);
        if (!t) return -1;
        c->msgs = t;
        c->cap_msgs = cap;
    }
    c->msgs[c->n_msgs].role = strdup(role);
    c->msgs[c->n_msgs].content = strdup(content);
    if (!c->msgs[c->n_msgs].role || !c->msgs[c->n_msgs].content) return -1;
    c->n_msgs++;
    return 0;
}

static void s_clear(chat_state *c, int keep_system) {
    int keep = keep_system && c->n_msgs > 0 && strcmp(c->msgs[0].role, "system") == 0;
    for (int i = keep; i < c->n_msgs; i++) {
        free((char *)c->msgs[i].role);
        free((char *)c->msgs[i].content);
    }
    c->n_msgs = keep;
    c->n_cache = 0;
    coli_context_reset(c->ctx);
}

static int s_on_token(void *user, int32_t id, const char *text, size_t len) {
    chat_state *c = user;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        if (c->answer_len + len + 1 > c->answer_cap) { /* doubling: no realloc per token */
            size_t cap = 2 * (c->answer_len + len + 1);
            char *t = realloc(c->answer, cap);
            if (!t) return 1;
            c->answer = t;
            c->answer_cap = cap;
        }
        memcpy(c->answer + c->answer_len, text, len);
        c->answer_len += len;
        c->answer[c->answer_len] = '\0';
    }
    if (s_push_id(c, id)) return 1;
    return s_interrupted ? 1 : 0;
}

/* The conversation's ids: rendered, tokenized (the template's special tokens parsed, the
 * messages' text plain as coli serve does, BOS from the template). */
static int s_prompt_ids(chat_state *c, int32_t **ids, int *n) {
    char *text = NULL, err[512];
    coli_text_span *plain = NULL;
    int n_plain = 0;
    if (chat_render_plain(c->family, c->msgs, c->n_msgs,
                          &(chat_options){c->bos, c->eos, c->default_system, c->thinking, c->effort, NULL}, &text,
                          &plain, &n_plain, err, sizeof err)) {
        fprintf(stderr, "coli chat: %s\n", err);
        return -1;
    }
    int rc = chat_tokenize(c->m, text, strlen(text), plain, n_plain, ids, n);
    free(text);
    free(plain);
    if (rc) {
        fprintf(stderr, "coli chat: %s\n", rc == COLI_ENOMEM ? "out of memory" : coli_last_error());
        return -1;
    }
    return 0;
}

/* One answer to the conversation so far; the reply is appended to it. */
static int s_answer(chat_state *c) {
    int32_t *ids = NULL;
    int n = 0;
    if (s_prompt_ids(c, &ids, &n)) return -1;
    if (n + 1 >= c->n_ctx) {
        fprintf(stderr, "coli chat: the conversation (%d tokens) fills the context of %d; /reset to start over\n", n,
                c->n_ctx);
        free(ids);
        c->n_msgs--; /* forget the turn that did not fit */
        free((char *)c->msgs[c->n_msgs].role);
        free((char *)c->msgs[c->n_msgs].content);
        return 0;
    }
    int reuse = c->n_cache > 0 && c->n_cache < n && memcmp(c->cache, ids, (size_t)c->n_cache * sizeof *ids) == 0;
    if (!reuse) {
        coli_context_reset(c->ctx);
        c->n_cache = 0;
    }
    int from = c->n_cache;
    for (int i = from; i < n; i++)
        if (s_push_id(c, ids[i])) {
            free(ids);
            return -1;
        }
    coli_sampling_params sp = c->sp;
    const int by_ctx = sp.n_predict < 0 || sp.n_predict > c->n_ctx - n;
    if (by_ctx) sp.n_predict = c->n_ctx - n; /* -n -1: all the room */
    c->answer_len = 0;
    if (c->answer) c->answer[0] = '\0'; /* an answer with no text must not repeat the last one */
    s_interrupted = 0;
    int rc = coli_generate(c->ctx, ids + from, n - from, &sp, s_on_token, c, &c->last);
    free(ids);
    fputc('\n', stdout);
    if (s_interrupted)
        fprintf(stderr, "(stopped)\n");
    else if (!rc && by_ctx && !c->last.stopped_by_eog && c->last.n_gen >= sp.n_predict)
        /* cut by the context, not by -n or the model: without a word it looks like the model's end */
        fprintf(stderr,
                "coli chat: the answer stopped: the context of %d tokens is full; /reset to start over (or a "
                "larger --ctx)\n",
                c->n_ctx);
    s_interrupted = 0;
    if (rc) {
        fprintf(stderr, "coli chat: %s\n", coli_last_error());
        s_clear(c, 1); /* the cache no longer matches what we think it holds */
        return 0;
    }
    /* gpt-oss: the conversation keeps the final answer only (its template refuses channel tags) */
    if (c->family == CHAT_GPT_OSS && c->answer) c->answer_len = chat_harmony_keep_content(c->answer, c->answer_len);
    return s_add_message(c, "assistant", c->answer ? c->answer : "");
}

static void s_stats(chat_state *c) {
    const coli_gen_stats *st = &c->last;
    printf("last answer: prompt %d tokens (%.1f tok/s), generated %d tokens (%.1f tok/s)%s\n", st->n_prompt,
           st->prompt_seconds > 0 ? st->n_prompt / st->prompt_seconds : 0.0, st->n_gen,
           st->gen_seconds > 0 ? st->n_gen / st->gen_seconds : 0.0, st->stopped_by_eog ? ", ended by the model" : "");
    printf("conversation: %d messages, %d of %d context tokens, template %s\n", c->n_msgs, coli_context_pos(c->ctx),
           c->n_ctx, chat_family_name(c->family));
    char *text = NULL;
    if (coli_model_stats_text(c->m, &text) == 0 && text) fputs(text, stdout);
    free(text);
    fflush(stdout);
}

/* Read a line; 1 = got one, 0 = end of input. Ctrl-C at the prompt does not quit. */
static int s_read_line(line_reader *in, const char **line) {
    for (;;) {
        int rc = line_reader_read(in, line);
        if (rc >= 0 && !(rc == 0 && s_interrupted)) return rc;
        s_interrupted = 0;
        fputs("\n(/quit or Ctrl-D leaves)\n", stdout);
        fflush(stdout);
    }
}

static int s_loop(chat_state *c) {
    const char *line = NULL;
    int rc = 0;
    line_reader *in = line_reader_new(isatty(0) && isatty(1));
    if (!in) {
        fprintf(stderr, "coli chat: out of memory\n");
        return CLI_FAIL;
    }
    while (!rc && s_read_line(in, &line)) {
        if (!line[0]) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            s_clear(c, 1);
            printf("(conversation cleared)\n");
        } else if (!strcmp(line, "/stats")) {
            s_stats(c);
        } else if (!strcmp(line, "/help")) {
            printf("/reset forget the conversation   /stats speed and workers   /quit leave   Ctrl-C stop an answer\n");
        } else if (s_add_message(c, "user", line) || s_answer(c)) {
            rc = CLI_FAIL;
        }
        fflush(stdout);
    }
    line_reader_free(in);
    return rc;
}

static int s_chat(const model_opts *o, const coli_sampling_params *sp, const char *system, const char *tmpl,
                  int thinking, int effort) {
    chat_state c;
    memset(&c, 0, sizeof c);
    c.sp = *sp;
    c.thinking = thinking;
    c.effort = effort;
    int rc = model_opts_open(o, NULL, &c.m, &c.ctx);
    if (rc) return rc;
    coli_model_info info;
    coli_model_get_info(c.m, &info);
    const char *source;
    char err[160];
    c.family = chat_template_pick(tmpl, &info, &source);
    c.default_system = chat_template_default_system(info.chat_template);
    const char *bos = info.bos_id >= 0 ? coli_token_text(c.m, info.bos_id) : "";
    const char *eos = info.eos_id >= 0 ? coli_token_text(c.m, info.eos_id) : "";
    c.bos = strdup(bos ? bos : "");
    c.eos = strdup(eos ? eos : "");
    c.n_ctx = model_opts_n_ctx(o, c.m);
    if (c.family == CHAT_UNKNOWN) {
        fprintf(stderr,
                "coli chat: %s: the model's chat template is not one colibri can render (%s); choose one with "
                "--chat-template NAME\n",
                o->model, chat_family_list());
        rc = CLI_FAIL;
    } else if (chat_thinking_check(c.family, thinking, err, sizeof err) ||
               chat_effort_check(c.family, effort, err, sizeof err)) {
        fprintf(stderr, "coli chat: --chat-template-kwargs: %s\n", err);
        rc = CLI_FAIL;
    } else if (!c.bos || !c.eos || (system && s_add_message(&c, "system", system))) {
        fprintf(stderr, "coli chat: out of memory\n");
        rc = CLI_FAIL;
    } else {
        fprintf(stderr, "coli chat: %s (%s), template %s from %s; /help for commands\n", info.name, info.arch,
                chat_family_name(c.family), source);
        rc = s_loop(&c);
    }
    s_clear(&c, 0);
    free(c.msgs);
    free(c.cache);
    free(c.answer);
    free(c.bos);
    free(c.eos);
    coli_context_free(&c.ctx);
    coli_model_free(&c.m);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    model_opts mo;
    memset(&mo, 0, sizeof mo);
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.n_predict = 512;
    const char *system = NULL, *tmpl = NULL, *chat_kwargs = NULL, *effort_flag = NULL;
    int thinking = CHAT_THINKING_DEFAULT, effort = CHAT_EFFORT_DEFAULT;
    sampling_help help;
    sampling_help_init(&help, &sp);
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(mo),
        {"--system", "-sys", ARG_STR, &system, 0, 0, 0, "TEXT", "a system message to start the conversation with"},
        CHAT_TEMPLATE_SPEC(tmpl),
        CHAT_KWARGS_SPEC(chat_kwargs),
        REASONING_EFFORT_SPEC(effort_flag),
        {"--n-predict", "-n", ARG_INT, &sp.n_predict, -1, 1 << 24, 0, "N",
         "most tokens per answer (default 512, -1 = the context's room)"},
        SAMPLING_SPECS(sp, help),
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("chat", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "chat", "-m FILE [flags]",
                   "Chat with the model: type a message, the answer streams back. /reset forgets the\n"
                   "conversation, /stats shows speed and workers, /quit or Ctrl-D leaves; Ctrl-C stops an answer.",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if ((rc = model_opts_check("chat", &mo)) || (rc = chat_template_check("chat", tmpl)) ||
        (rc = chat_kwargs_check("chat", chat_kwargs, effort_flag, &thinking, &effort)))
        return rc;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_sigint; /* no SA_RESTART: Ctrl-C at the prompt interrupts getline */
    sigaction(SIGINT, &sa, NULL);
    return s_chat(&mo, &sp, system, tmpl, thinking, effort);
}
