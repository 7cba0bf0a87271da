/*
 * chat_thinking.c - the chat templates of thinking models whose layouts are
 * their own (not ChatML as it was): GLM-4.5/4.6/4.7 and Qwen3.5/3.6, as
 * their Jinja templates render them (llama.cpp's models/templates/GLM-4.6.jinja
 * and Qwen3.5-4B.jinja; add_generation_prompt, no tools; Jinja run as
 * transformers runs it, trim_blocks and lstrip_blocks on).
 *
 *   GLM-4.5:  [gMASK]<sop><|system|>\nS<|user|>\nU<|assistant|>\n<think></think>\nA<|user|>\nU<|assistant|>
 *             An answer after the last user message keeps its thought
 *             ("\n<think>R</think>"), earlier ones get an empty one; the
 *             answer is stripped of white space and left out when empty.
 *             enable_thinking false: "/nothink" after each user text (unless
 *             it ends so) and "\n<think></think>" after the generation prompt.
 *   Qwen3.5:  <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n
 *             <|im_start|>assistant\nA<|im_end|>\n ... <|im_start|>assistant\n<think>\n
 *             Every text is stripped of white space; an answer after the last
 *             user message keeps its thought ("<think>\nR\n</think>\n\n"
 *             before it); a system message must come first; the generation
 *             prompt opens the thought (enable_thinking false: an empty
 *             "<think>\n\n</think>\n\n" instead).
 *   GLM-4.7 (and GLM-5; llama.cpp's GLM-4.7-Flash.jinja):
 *             [gMASK]<sop><|system|>S<|user|>U<|assistant|></think>A<|user|>U<|assistant|><think>
 *             No newlines; an answer after the last user message keeps its
 *             thought ("<think>" + R.strip() + "</think>"), earlier ones get
 *             "</think>"; the generation prompt opens the thought
 *             (enable_thinking false: "</think>" instead).
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "tools/coli/chat/chat_out.h"

static text_span s_span(const char *s) { return (text_span){s, strlen(s)}; }

static int s_last_user(const chat_message *m, int n) {
    int last = -1;
    for (int i = 0; i < n; i++)
        if (chat_role(m[i].role) == CHAT_ROLE_USER) last = i;
    return last;
}

static int s_ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !memcmp(s + n - k, tail, k);
}

static void s_glm_assistant(chat_out *b, const chat_message *msg, int keep_thought) {
    text_span reasoning, answer;
    chat_think_split(msg->content, &reasoning, &answer);
    chat_put(b, "<|assistant|>\n<think>");
    if (keep_thought && reasoning.n) chat_put_span(b, chat_strip(reasoning));
    chat_put(b, "</think>");
    answer = chat_strip(answer);
    if (answer.n) {
        chat_put(b, "\n");
        chat_put_span(b, answer);
    }
}

int chat_render_glm45(chat_out *b, const chat_message *m, int n, const chat_options *o) {
    int last_user = s_last_user(m, n);
    chat_put(b, "[gMASK]<sop>");
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_ASSISTANT) {
            s_glm_assistant(b, &m[i], i > last_user);
            continue;
        }
        chat_put(b, r == CHAT_ROLE_USER ? "<|user|>\n" : "<|system|>\n");
        chat_text(b, m[i].content);
        if (r == CHAT_ROLE_USER && o->thinking == 0 && !s_ends_with(m[i].content, "/nothink")) chat_put(b, "/nothink");
    }
    chat_put(b, "<|assistant|>");
    if (o->thinking == 0) chat_put(b, "\n<think></think>");
    return 0;
}

int chat_render_glm47(chat_out *b, const chat_message *m, int n, const chat_options *o) {
    int last_user = s_last_user(m, n);
    chat_put(b, "[gMASK]<sop>");
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r != CHAT_ROLE_ASSISTANT) {
            chat_put(b, r == CHAT_ROLE_USER ? "<|user|>" : "<|system|>");
            chat_text(b, m[i].content);
            continue;
        }
        text_span reasoning, answer;
        chat_think_split(m[i].content, &reasoning, &answer);
        chat_put(b, "<|assistant|>");
        if (i > last_user && reasoning.n) {
            chat_put(b, "<think>");
            chat_put_span(b, chat_strip(reasoning));
        }
        chat_put(b, "</think>");
        chat_put_span(b, chat_strip(answer));
    }
    chat_put(b, o->thinking == 0 ? "<|assistant|></think>" : "<|assistant|><think>");
    return 0;
}

/* Qwen3.5: the last user message that is not a tool response, or -1. */
static int s_qwen35_last_query(const chat_message *m, int n) {
    for (int i = n - 1; i >= 0; i--) {
        text_span c = chat_strip(s_span(m[i].content));
        int tool = c.n >= 31 && !strncmp(c.p, "<tool_response>", 15) && !memcmp(c.p + c.n - 16, "</tool_response>", 16);
        if (chat_role(m[i].role) == CHAT_ROLE_USER && !tool) return i;
    }
    return -1;
}

static void s_qwen35_assistant(chat_out *b, const chat_message *msg, int keep_thought) {
    text_span reasoning = {"", 0}, answer = chat_strip(s_span(msg->content));
    if (memmem(answer.p, answer.n, "</think>", 8)) { /* split as the template splits the stripped text */
        chat_think_split(msg->content, &reasoning, &answer);
        while (answer.n && strchr(" \t\n\r\v\f", answer.p[answer.n - 1])) answer.n--;
    }
    chat_put(b, "<|im_start|>assistant\n");
    if (keep_thought) {
        chat_put(b, "<think>\n");
        chat_put_span(b, chat_strip(reasoning));
        chat_put(b, "\n</think>\n\n");
    }
    chat_put_span(b, answer);
}

int chat_render_qwen35(chat_out *b, const chat_message *m, int n, const chat_options *o, char *err, size_t cap) {
    int last_query = s_qwen35_last_query(m, n);
    if (last_query < 0) return chat_fail(err, cap, "messages: no user message (the qwen3.5 template needs one)");
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_SYSTEM && i > 0)
            return chat_fail(err, cap,
                             "messages[%d]: a system message must come first for this model's template (qwen3.5)", i);
        if (r == CHAT_ROLE_ASSISTANT) {
            s_qwen35_assistant(b, &m[i], i > last_query);
        } else {
            chat_put(b, r == CHAT_ROLE_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
            chat_put_span(b, chat_strip(s_span(m[i].content)));
        }
        chat_put(b, "<|im_end|>\n");
    }
    chat_put(b,
             o->thinking == 0 ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n<think>\n");
    return 0;
}
