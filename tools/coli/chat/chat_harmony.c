/*
 * chat_harmony.c - gpt-oss's "harmony" chat format: the prompt as its
 * template renders it (llama.cpp's models/templates/openai-gpt-oss-120b.jinja,
 * add_generation_prompt, no tools), and the generated text cut into the
 * bodies of its messages (the analysis channel is the reasoning).
 *
 * The prompt, with E the reasoning effort (default medium) and D the date:
 *   <|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n
 *   Knowledge cutoff: 2024-06\nCurrent date: D\n\nReasoning: E\n\n
 *   # Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>
 *   [<|start|>developer<|message|># Instructions\n\nSYSTEM\n\n<|end|>]   (a first system/developer message, if not empty)
 *   <|start|>user<|message|>TEXT<|end|>
 *   <|start|>assistant<|channel|>final<|message|>TEXT<|end|>          (earlier answers: no analysis)
 *   <|start|>assistant
 * A system message after the first is not rendered (the template skips it),
 * and an assistant text holding "<|channel|>analysis<|message|>" or
 * "<|channel|>final<|message|>" is refused (the template raises).
 *
 * The answer the model writes after "<|start|>assistant":
 *   <|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>A
 * (then <|return|>, an end of generation that renders nothing).
 */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/coli/chat/chat_out.h"

#define H_START "<|start|>"
#define H_CHANNEL "<|channel|>"
#define H_MESSAGE "<|message|>"
#define H_END "<|end|>"

static const char *const k_effort_names[] = {
    [CHAT_EFFORT_LOW] = "low", [CHAT_EFFORT_MEDIUM] = "medium", [CHAT_EFFORT_HIGH] = "high"};

int chat_effort_parse(const char *name) {
    for (int e = CHAT_EFFORT_LOW; name && e <= CHAT_EFFORT_HIGH; e++)
        if (!strcmp(name, k_effort_names[e])) return e;
    return -1;
}

int chat_effort_check(chat_family f, int effort, char *err, size_t err_cap) {
    if (effort == CHAT_EFFORT_DEFAULT || f == CHAT_GPT_OSS) return 0;
    return chat_fail(err, err_cap, "reasoning_effort: the %s chat template has no reasoning effort (gpt-oss has)",
                     chat_family_name(f));
}

static void s_system(chat_out *b, const chat_options *o) {
    char today[16];
    const char *date = o->date;
    if (!date) {
        time_t now = time(NULL);
        struct tm tm;
        strftime(today, sizeof today, "%Y-%m-%d", localtime_r(&now, &tm));
        date = today;
    }
    chat_put(b, H_START "system" H_MESSAGE "You are ChatGPT, a large language model trained by OpenAI.\n"
                        "Knowledge cutoff: 2024-06\nCurrent date: ");
    chat_put(b, date);
    chat_put(b, "\n\nReasoning: ");
    chat_put(b, k_effort_names[o->effort == CHAT_EFFORT_DEFAULT ? CHAT_EFFORT_MEDIUM : o->effort]);
    chat_put(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message." H_END);
}

int chat_render_harmony(chat_out *b, const chat_message *m, int n, const chat_options *o, char *err, size_t cap) {
    s_system(b, o);
    int first = 0;
    if (chat_role(m[0].role) == CHAT_ROLE_SYSTEM) {
        first = 1;
        if (*m[0].content) {
            chat_put(b, H_START "developer" H_MESSAGE "# Instructions\n\n");
            chat_text(b, m[0].content);
            chat_put(b, "\n\n" H_END);
        }
    }
    for (int i = first; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_USER) {
            chat_put(b, H_START "user" H_MESSAGE);
        } else if (r == CHAT_ROLE_ASSISTANT) {
            if (strstr(m[i].content, H_CHANNEL "analysis" H_MESSAGE) ||
                strstr(m[i].content, H_CHANNEL "final" H_MESSAGE))
                return chat_fail(err, cap,
                                 "messages[%d].content: holds <|channel|> tags; the gpt-oss template takes the "
                                 "final answer's text only",
                                 i);
            chat_put(b, H_START "assistant" H_CHANNEL "final" H_MESSAGE);
        } else {
            continue; /* a later system message: the template does not render it */
        }
        chat_text(b, m[i].content);
        chat_put(b, H_END);
    }
    chat_put(b, H_START "assistant");
    return 0;
}

// ---------------------------------------------------------------------------
// the generated text

/* The first tag in t[from..len), or len. */
static size_t s_find(const char *t, size_t from, size_t len, const char *tag) {
    const char *at = from < len ? memmem(t + from, len - from, tag, strlen(tag)) : NULL;
    return at ? (size_t)(at - t) : len;
}

/* Whether t[from..len) is a proper prefix of tag (or empty). */
static int s_prefix_of(const char *t, size_t from, size_t len, const char *tag) {
    return len - from < strlen(tag) && memcmp(t + from, tag, len - from) == 0;
}

/* Where t[from..len) ends once a tail that might still become tag is held back. */
static size_t s_hold_back(const char *t, size_t from, size_t len, const char *tag) {
    for (size_t k = strlen(tag) - 1; k > 0; k--)
        if (len - from >= k && memcmp(t + len - k, tag, k) == 0) return len - k;
    return len;
}

/* Whether the header t[from..msg) names the analysis channel (its last
 * channel: gpt-oss-20b at times writes a stray "<|channel|>commentary" first). */
static int s_is_analysis(const char *t, size_t from, size_t msg) {
    size_t ch = msg;
    for (size_t at = s_find(t, from, msg, H_CHANNEL); at < msg; at = s_find(t, at + 1, msg, H_CHANNEL)) ch = at;
    if (ch == msg) return 0;
    ch += strlen(H_CHANNEL);
    return msg - ch >= 8 && memcmp(t + ch, "analysis", 8) == 0 &&
           (msg - ch == 8 || t[ch + 8] == ' ' || t[ch + 8] == '<');
}

typedef struct span_list {
    chat_span *v;
    int n, cap;
} span_list;

static void s_push(span_list *l, size_t start, size_t end, int reasoning) {
    if (end <= start) return;
    if (l->n < l->cap) l->v[l->n] = (chat_span){start, end - start, reasoning};
    l->n++;
}

int chat_harmony_spans(const char *t, size_t len, int final, chat_span *spans, int cap, size_t *consumed) {
    span_list l = {spans, 0, cap};
    size_t pos = 0;
    while (pos < len) {
        /* a message starts with its header; anything else (a model that left the format) is content */
        int header = !strncmp(t + pos, H_START, strlen(H_START)) || !strncmp(t + pos, H_CHANNEL, strlen(H_CHANNEL));
        if (!header && !final && (s_prefix_of(t, pos, len, H_START) || s_prefix_of(t, pos, len, H_CHANNEL))) break;
        size_t msg = header ? s_find(t, pos, len, H_MESSAGE) : pos;
        if (header && msg == len) { /* the header is not complete yet */
            if (final) {
                s_push(&l, pos, len, 0);
                pos = len;
            }
            break;
        }
        int reasoning = header && s_is_analysis(t, pos, msg);
        size_t body = header ? msg + strlen(H_MESSAGE) : pos, end = s_find(t, body, len, H_END);
        if (end == len) {
            pos = final ? len : s_hold_back(t, body, len, H_END);
            s_push(&l, body, pos, reasoning);
            break;
        }
        s_push(&l, body, end, reasoning);
        pos = end + strlen(H_END);
    }
    *consumed = pos;
    return l.n;
}

size_t chat_harmony_keep_content(char *t, size_t len) {
    size_t consumed, at = 0;
    int n = chat_harmony_spans(t, len, 1, NULL, 0, &consumed);
    chat_span *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL;
    if (n > 0 && !v) return len; /* out of memory: the text stays as it was */
    n = chat_harmony_spans(t, len, 1, v, n, &consumed);
    for (int k = 0; k < n; k++) { /* spans ascend and at never passes them: moving down is safe */
        if (v[k].reasoning) continue;
        memmove(t + at, t + v[k].start, v[k].len);
        at += v[k].len;
    }
    free(v);
    t[at] = '\0';
    return at;
}
