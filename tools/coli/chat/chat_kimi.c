/*
 * chat_kimi.c - Kimi K3's chat format (its "XTML" tags): the prompt as
 * llama.cpp's models/templates/Kimi-K3.jinja renders it (add_generation_prompt,
 * no tools, no names, no images), and the generated text cut into its think
 * and response sections (common/parsers/kimi-k3.cpp's reading).
 *
 * With open(T) = <|open|>T<|sep|> and close(T) = <|close|>T<|sep|>:
 *   [open(message role="system" type="thinking-effort") EFFORT-NOTE close(message)<|end_of_msg|>]   (thinking)
 *   open(message role="user") TEXT close(message)<|end_of_msg|>          (system: role="system")
 *   open(message role="assistant") [open(think) close(think)] open(response) TEXT close(response)
 *       close(message)<|end_of_msg|>                                     (the think section when thinking)
 *   open(message role="assistant") open(think)                          (not thinking: open(response))
 * Thinking is on unless enable_thinking (or "thinking", the name the
 * template reads) is false; the effort note is the template's for its
 * default thinking_effort, max.
 *
 * The answer (after that prompt): R close(think) open(response) A close(response) close(message),
 * or, not thinking, A close(response) close(message).
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "tools/coli/chat/chat_out.h"

#define K_SEP "<|sep|>"
#define K_OPEN(tag) "<|open|>" tag K_SEP
#define K_CLOSE(tag) "<|close|>" tag K_SEP
#define K_EOM "<|end_of_msg|>"

int chat_render_kimi_k3(chat_out *b, const chat_message *m, int n, const chat_options *o) {
    const int thinking = o->thinking != 0;
    if (thinking)
        chat_put(
            b,
            K_OPEN(
                "message role=\"system\" type=\"thinking-effort\"") "`thinking_effort` guides on how much "
                                                                    "to think in your thinking channel (not including "
                                                                    "the response channel), supported values "
                                                                    "include `low`, `medium`, `high`, and `max`.\nNow "
                                                                    "the system is invoked with "
                                                                    "`thinking_effort=max`." K_CLOSE("message") K_EOM);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_ASSISTANT) {
            chat_put(b, K_OPEN("message role=\"assistant\""));
            if (thinking) chat_put(b, K_OPEN("think") K_CLOSE("think"));
            chat_put(b, K_OPEN("response"));
            chat_text(b, m[i].content);
            chat_put(b, K_CLOSE("response"));
        } else {
            chat_put(b, r == CHAT_ROLE_USER ? K_OPEN("message role=\"user\"") : K_OPEN("message role=\"system\""));
            chat_text(b, m[i].content);
        }
        chat_put(b, K_CLOSE("message") K_EOM);
    }
    chat_put(b, thinking ? K_OPEN("message role=\"assistant\"") K_OPEN("think")
                         : K_OPEN("message role=\"assistant\"") K_OPEN("response"));
    return 0;
}

// ---------------------------------------------------------------------------
// the generated text

/* The first of the tags in t[from..len) (*which: its index), or len. */
static size_t s_first(const char *t, size_t from, size_t len, const char *const *tags, int n, int *which) {
    size_t best = len;
    for (int k = 0; k < n; k++) {
        const char *at = from < len ? memmem(t + from, len - from, tags[k], strlen(tags[k])) : NULL;
        if (at && (size_t)(at - t) < best) {
            best = (size_t)(at - t);
            *which = k;
        }
    }
    return best;
}

/* Where t[from..len) ends once a tail that might still become one of tags is held back. */
static size_t s_hold_back(const char *t, size_t from, size_t len, const char *const *tags, int n) {
    size_t end = len;
    for (int k = 0; k < n; k++)
        for (size_t j = strlen(tags[k]) - 1; j > 0; j--)
            if (len - from >= j && memcmp(t + len - j, tags[k], j) == 0 && len - j < end) end = len - j;
    return end;
}

static int s_starts(const char *t, size_t at, size_t len, const char *tag) {
    size_t n = strlen(tag);
    return len - at >= n && !memcmp(t + at, tag, n);
}

int chat_kimi_spans(const char *t, size_t len, int final, int in_think, chat_span *spans, int cap, size_t *consumed) {
    static const char *const think_ends[] = {K_CLOSE("think"), K_OPEN("response")};
    static const char *const response_ends[] = {K_CLOSE("response"), K_OPEN("tools"), K_CLOSE("message")};
    int n = 0, which = 0;
    size_t pos = 0;
    if (in_think) { /* the reasoning runs to its closer, or to the response's opener */
        size_t found = s_first(t, 0, len, think_ends, 2, &which);
        size_t end = found < len ? found : final ? len : s_hold_back(t, 0, len, think_ends, 2);
        if (end && n < cap) spans[n] = (chat_span){0, end, 1};
        n += end > 0;
        if (found == len) {
            *consumed = end;
            return n;
        }
        pos = found + strlen(think_ends[which]);
    }
    if (s_starts(t, pos, len, K_OPEN("response"))) {
        pos += strlen(K_OPEN("response"));
    } else if (!final && len - pos < strlen(K_OPEN("response")) && !memcmp(t + pos, K_OPEN("response"), len - pos)) {
        *consumed = pos; /* may still become the response's opener */
        return n;
    }
    size_t end = s_first(t, pos, len, response_ends, 3, &which);
    if (end == len && !final) end = s_hold_back(t, pos, len, response_ends, 3);
    if (end > pos && n < cap) spans[n] = (chat_span){pos, end - pos, 0};
    n += end > pos;
    *consumed = end;
    return n;
}
