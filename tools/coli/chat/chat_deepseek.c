/*
 * chat_deepseek.c - DeepSeek-V3.2's and DeepSeek-V4's chat templates, as
 * llama.cpp's models/templates/deepseek-ai-DeepSeek-V3.2.jinja and
 * deepseek-ai-DeepSeek-V4.jinja render them (add_generation_prompt, no
 * tools, no reasoning_content field: an answer's text is used as it is).
 * Both think only when asked (enable_thinking or "thinking" true).
 *
 *   V3.2:  <bos>S<｜User｜>U<｜Assistant｜></think>A<｜end▁of▁sentence｜><｜User｜>U<｜Assistant｜><think></think>
 *          An answer after the last user message, when thinking, starts
 *          "<think></think>"; the generation prompt is "<think>" when
 *          thinking. An answer right after another gets no marker, and a
 *          conversation that ends with an answer gets no generation prompt.
 *   V4:    the same markers; user texts in a row share one <｜User｜>
 *          (joined by a blank line); every answer gets its marker; the
 *          generation prompt is "</think>" unless thinking ("<think>").
 * System texts come first, joined by a blank line (chat_deepseek_system).
 */
#include "tools/coli/chat/chat_out.h"

static int s_last_user(const chat_message *m, int n) {
    int last = -1;
    for (int i = 0; i < n; i++)
        if (chat_role(m[i].role) == CHAT_ROLE_USER) last = i;
    return last;
}

int chat_render_deepseek32(chat_out *b, const chat_message *m, int n, const chat_options *o) {
    const int thinking = o->thinking == 1, last_user = s_last_user(m, n);
    int pending = 0; /* a user text waits for the assistant marker */
    chat_deepseek_system(b, m, n, o->bos);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_USER) {
            chat_put(b, DS_USER);
            chat_text(b, m[i].content);
            pending = 1;
        } else if (r == CHAT_ROLE_ASSISTANT) {
            if (pending)
                chat_put(b, i > last_user && thinking ? DS_ASSISTANT "<think></think>" : DS_ASSISTANT "</think>");
            pending = 0;
            chat_text(b, m[i].content);
            chat_put(b, DS_EOS);
        }
    }
    if (pending) chat_put(b, thinking ? DS_ASSISTANT "<think>" : DS_ASSISTANT "<think></think>");
    return 0;
}

int chat_render_deepseek4(chat_out *b, const chat_message *m, int n, const chat_options *o) {
    const int thinking = o->thinking == 1, last_user = s_last_user(m, n);
    int in_user = 0;
    chat_deepseek_system(b, m, n, o->bos);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_USER) {
            chat_put(b, in_user ? "\n\n" : DS_USER);
            chat_text(b, m[i].content);
            in_user = 1;
        } else if (r == CHAT_ROLE_ASSISTANT) {
            /* drop_thinking (default true): only an answer after the last user text keeps a thought */
            chat_put(b, i > last_user && thinking ? DS_ASSISTANT "<think></think>" : DS_ASSISTANT "</think>");
            chat_text(b, m[i].content);
            chat_put(b, DS_EOS);
            in_user = 0;
        }
    }
    chat_put(b, thinking ? DS_ASSISTANT "<think>" : DS_ASSISTANT "</think>");
    return 0;
}
