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
 */
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

reasoning_split reasoning_split_text(const char *t, size_t len, int final) {
    reasoning_split r = {0, 0, 0, 0};
    const size_t lead = s_skip_space(t, 0, len), n_open = strlen(k_open);
    if (len - lead < n_open && memcmp(t + lead, k_open, len - lead) == 0 && !final) return r; /* undecided */
    if (len - lead < n_open || memcmp(t + lead, k_open, n_open) != 0) {
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

reasoning_delta reasoning_next(const char *t, size_t len, int final, size_t *sent_reasoning, size_t *sent_content) {
    const reasoning_split p = reasoning_split_text(t, len, final);
    reasoning_delta d = {t + p.reasoning_start + *sent_reasoning, p.reasoning_len - *sent_reasoning,
                         t + p.content_start + *sent_content, p.content_len - *sent_content, 0};
    d.raw_end = d.content_len ? p.content_start + p.content_len : p.reasoning_start + p.reasoning_len;
    *sent_reasoning = p.reasoning_len;
    *sent_content = p.content_len;
    return d;
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
