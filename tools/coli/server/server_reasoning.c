/*
 * server_reasoning.c - reasoning_format "deepseek": a thinking model's
 * answer "<think>REASONING</think>ANSWER" (Qwen3, DeepSeek-R1) is returned
 * as message.reasoning_content = REASONING and message.content = ANSWER,
 * as llama.cpp's --reasoning-format deepseek and DeepSeek's API do.
 *
 * One pure function of the text generated so far: the stream sends what
 * each part grew by, so the split of a prefix must never take back what it
 * already gave. Hence, before the text is final, it holds back whatever
 * could still change its part: a start that may yet become "<think>", a
 * tail that may yet become "</think>", and white space at the edges of the
 * reasoning (trimmed once the part ends) or at the start of the answer.
 *
 * How the reasoning is marked depends on the template (chat_syntax_of):
 * "<think>R</think>A"; "R</think>A" after a prompt that opened the thought
 * (Qwen3.5); gpt-oss's harmony messages (chat_harmony_spans), where the
 * reasoning may come in several pieces. Each becomes a list of spans of the
 * text, and a stream sends the bytes each part's spans grew by.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

static const char k_open[] = "<think>", k_close[] = "</think>";

static int s_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t s_skip_space(const char *t, size_t at, size_t len) {
    while (at < len && s_space(t[at])) at++;
    return at;
}

/* Where the bytes t[from..len) end once a tail that might still become
 * tag (a proper prefix of it) is held back. */
static size_t s_without_partial_tag(const char *t, size_t from, size_t len, const char *tag) {
    const size_t n = strlen(tag);
    for (size_t k = n - 1; k > 0; k--)
        if (len - from >= k && memcmp(t + len - k, tag, k) == 0) return len - k;
    return len;
}

/* The first tag (which starts with '<') in t[from..len), or len. A stream
 * splits its whole answer again per chunk, so this jumps from '<' to '<'
 * (memchr) rather than comparing at every byte. */
static size_t s_find(const char *t, size_t from, size_t len, const char *tag) {
    const size_t n = strlen(tag);
    for (const char *at = t + from; (size_t)(at - t) + n <= len; at++) {
        if (!(at = memchr(at, '<', len - (size_t)(at - t))) || (size_t)(at - t) + n > len) break;
        if (memcmp(at, tag, n) == 0) return (size_t)(at - t);
    }
    return len;
}

static size_t s_trim_end(const char *t, size_t from, size_t end) {
    while (end > from && s_space(t[end - 1])) end--;
    return end;
}

/* open: the prompt ended in "<think>", the text starts inside the thought. */
static reasoning_split s_split_think(const char *t, size_t len, int final, int open) {
    reasoning_split r = {0, 0, 0, 0};
    const size_t lead = s_skip_space(t, 0, len), n_open = open ? 0 : strlen(k_open);
    if (!open && len - lead < n_open && memcmp(t + lead, k_open, len - lead) == 0 && !final) return r; /* undecided */
    if (!open && (len - lead < n_open || memcmp(t + lead, k_open, n_open) != 0)) {
        r.content_len = len; /* no thought: all of it is the answer */
        return r;
    }
    const size_t body = s_skip_space(t, lead + n_open, len);
    const size_t close_at = s_find(t, body, len, k_close);
    if (close_at == len) {
        size_t end = final ? len : s_without_partial_tag(t, body, len, k_close);
        r.reasoning_start = body;
        r.reasoning_len = s_trim_end(t, body, end) - body;
        return r;
    }
    const size_t answer = s_skip_space(t, close_at + strlen(k_close), len);
    r.reasoning_start = body;
    r.reasoning_len = s_trim_end(t, body, close_at) - body;
    r.content_start = answer;
    r.content_len = len - answer;
    return r;
}

reasoning_split reasoning_split_text(const char *t, size_t len, int final) { return s_split_think(t, len, final, 0); }

/* The spans of t under syntax into *v (malloc'd when more than the k_local
 * the caller's array holds); returns how many, or -1 (out of memory).
 * *raw_end: how far into t they and the markers before them reach. */
enum {
    k_local = 16
};
static int s_spans(int syntax, const char *t, size_t len, int final, chat_span **v, size_t *raw_end) {
    if (syntax == CHAT_SYNTAX_HARMONY) {
        int n = chat_harmony_spans(t, len, final, *v, k_local, raw_end);
        if (n <= k_local) return n;
        if (!(*v = malloc((size_t)n * sizeof **v))) return -1;
        return chat_harmony_spans(t, len, final, *v, n, raw_end);
    }
    if (syntax == CHAT_SYNTAX_KIMI_THINK || syntax == CHAT_SYNTAX_KIMI) /* at most 2 spans */
        return chat_kimi_spans(t, len, final, syntax == CHAT_SYNTAX_KIMI_THINK, *v, k_local, raw_end);
    const reasoning_split p = s_split_think(t, len, final, syntax == CHAT_SYNTAX_THINK_OPEN);
    (*v)[0] = (chat_span){p.reasoning_start, p.reasoning_len, 1};
    (*v)[1] = (chat_span){p.content_start, p.content_len, 0};
    *raw_end = p.content_len ? p.content_start + p.content_len : p.reasoning_start + p.reasoning_len;
    return 2;
}

/* The bytes of the spans of one part past the first skip of them (malloc'd, NUL-terminated). */
static char *s_gather(const char *t, const chat_span *v, int n, int reasoning, size_t skip, size_t *len) {
    size_t total = 0, at = 0;
    for (int k = 0; k < n; k++) total += v[k].reasoning == reasoning ? v[k].len : 0;
    *len = total > skip ? total - skip : 0;
    char *out = malloc(*len + 1);
    if (!out) return NULL;
    for (int k = 0; k < n; k++) {
        if (v[k].reasoning != reasoning) continue;
        size_t from = skip > v[k].len ? v[k].len : skip;
        memcpy(out + at, t + v[k].start + from, v[k].len - from);
        at += v[k].len - from;
        skip -= from;
    }
    out[at] = '\0';
    return out;
}

reasoning_delta reasoning_next(int syntax, const char *t, size_t len, int final, size_t *sent_reasoning,
                               size_t *sent_content) {
    reasoning_delta d = {NULL, 0, NULL, 0, 0};
    chat_span local[k_local], *v = local;
    int n = s_spans(syntax, t, len, final, &v, &d.raw_end);
    if (n >= 0) {
        d.reasoning = s_gather(t, v, n, 1, *sent_reasoning, &d.reasoning_len);
        d.content = s_gather(t, v, n, 0, *sent_content, &d.content_len);
    }
    if (v != local) free(v);
    if (!d.reasoning || !d.content) { /* out of memory: nothing sent, nothing counted */
        reasoning_delta_free(&d);
        return d;
    }
    *sent_reasoning += d.reasoning_len;
    *sent_content += d.content_len;
    return d;
}

void reasoning_delta_free(reasoning_delta *d) {
    free(d->reasoning);
    free(d->content);
    *d = (reasoning_delta){NULL, 0, NULL, 0, d->raw_end};
}

int reasoning_format_parse(const char *name, int *out) {
    if (!strcmp(name, "none")) {
        *out = REASONING_NONE;
        return 0;
    }
    if (!strcmp(name, "deepseek") || !strcmp(name, "auto")) {
        *out = REASONING_DEEPSEEK;
        return 0;
    }
    return -1;
}
