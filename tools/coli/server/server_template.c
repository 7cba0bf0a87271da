/*
 * server_template.c - chat templates rendered in C; see server_template.h.
 *
 * The three layouts, as their reference Jinja templates produce them:
 *   Mistral/Mixtral:  <s>[INST] user [/INST]answer</s>[INST] user [/INST]
 *                     (a system message is put before the first user text,
 *                     separated by a blank line, as Mistral's later templates do)
 *   ChatML (Qwen):    <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
 *   OLMo / Tulu:      <bos><|system|>\n..\n<|user|>\n..\n<|assistant|>\n..<eos>\n ... <|assistant|>\n
 */
#include "server_template.h"
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rendered prompt grows in many small pieces; a failure sticks (checked once at the end). */
static void s_put(coli_strbuf *b, const char *text) { coli_strbuf_appendf(b, "%s", text); }

static int s_err(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int s_err(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

chat_family chat_family_detect(const char *tmpl, const char *arch, const char **source) {
    const char *unused;
    if (!source) source = &unused;
    if (tmpl && *tmpl) {
        *source = "tokenizer.chat_template";
        if (strstr(tmpl, "[INST]")) return CHAT_MISTRAL;
        if (strstr(tmpl, "<|im_start|>")) return CHAT_CHATML;
        if (strstr(tmpl, "<|user|>")) return CHAT_OLMO;
        return CHAT_UNKNOWN;
    }
    *source = "architecture";
    if (arch && strcmp(arch, "llama") == 0) return CHAT_MISTRAL;
    if (arch && strcmp(arch, "olmoe") == 0) return CHAT_OLMO;
    if (arch && strcmp(arch, "qwen2moe") == 0) return CHAT_CHATML;
    *source = "none";
    return CHAT_UNKNOWN;
}

const char *chat_family_name(chat_family f) {
    switch (f) {
    case CHAT_MISTRAL: return "mistral";
    case CHAT_CHATML: return "chatml";
    case CHAT_OLMO: return "olmo";
    default: return "unknown";
    }
}

const char *chat_template_default_system(const char *tmpl) {
    static const char qwen[] = "You are a helpful assistant.";
    return tmpl && strstr(tmpl, "<|im_start|>") && strstr(tmpl, qwen) ? qwen : NULL;
}

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_BAD };

static int s_role(const char *role) {
    if (!role) return ROLE_BAD;
    if (!strcmp(role, "system") || !strcmp(role, "developer")) return ROLE_SYSTEM;
    if (!strcmp(role, "user")) return ROLE_USER;
    if (!strcmp(role, "assistant")) return ROLE_ASSISTANT;
    return ROLE_BAD;
}

/* Mistral: system text joins the first user turn; user/assistant must alternate. */
static int s_mistral(coli_strbuf *b, const chat_message *m, int n, const char *bos, const char *eos,
                     char *err, size_t cap) {
    const char *system = NULL;
    int expect = ROLE_USER, first_user = 1;
    s_put(b, bos);
    for (int i = 0; i < n; i++) {
        int r = s_role(m[i].role);
        if (r == ROLE_SYSTEM) {
            if (i != 0) return s_err(err, cap, "messages[%d]: a system message must come first for this model's template (mistral)", i);
            system = m[i].content;
            continue;
        }
        if (r != expect)
            return s_err(err, cap, "messages[%d]: role '%s' out of order: this model's template (mistral) needs user and assistant turns alternating, starting with user", i, m[i].role);
        if (r == ROLE_USER) {
            s_put(b, "[INST] ");
            if (first_user && system && *system) {
                s_put(b, system);
                s_put(b, "\n\n");
            }
            first_user = 0;
            s_put(b, m[i].content);
            s_put(b, " [/INST]");
            expect = ROLE_ASSISTANT;
        } else {
            s_put(b, m[i].content);
            if (i + 1 < n) s_put(b, eos); /* a final assistant message is a prefix to continue */
            expect = ROLE_USER;
        }
    }
    if (first_user) return s_err(err, cap, "messages: no user message");
    return 0;
}

static int s_chatml(coli_strbuf *b, const chat_message *m, int n, const char *default_system) {
    static const char *names[] = {"system", "user", "assistant"};
    if (default_system && s_role(m[0].role) != ROLE_SYSTEM) {
        s_put(b, "<|im_start|>system\n");
        s_put(b, default_system);
        s_put(b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        s_put(b, "<|im_start|>");
        s_put(b, names[s_role(m[i].role)]);
        s_put(b, "\n");
        s_put(b, m[i].content);
        s_put(b, "<|im_end|>\n");
    }
    s_put(b, "<|im_start|>assistant\n");
    return 0;
}

static int s_olmo(coli_strbuf *b, const chat_message *m, int n, const char *bos, const char *eos) {
    static const char *tags[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
    s_put(b, bos);
    for (int i = 0; i < n; i++) {
        int r = s_role(m[i].role);
        s_put(b, tags[r]);
        s_put(b, m[i].content);
        if (r == ROLE_ASSISTANT) s_put(b, eos);
        s_put(b, "\n");
    }
    s_put(b, tags[ROLE_ASSISTANT]);
    return 0;
}

int chat_render(chat_family f, const chat_message *msgs, int n, const char *bos, const char *eos,
                const char *chatml_default_system, char **out, char *err, size_t err_cap) {
    *out = NULL;
    if (f == CHAT_UNKNOWN)
        return s_err(err, err_cap, "this model's chat template is not one colibri knows (mistral [INST], chatml, olmo); use /v1/completions with your own prompt format");
    if (n <= 0) return s_err(err, err_cap, "messages: empty (at least one message is needed)");
    for (int i = 0; i < n; i++) {
        if (s_role(msgs[i].role) == ROLE_BAD)
            return s_err(err, err_cap, "messages[%d].role: '%s' is not supported (system, developer, user, assistant)", i, msgs[i].role ? msgs[i].role : "(null)");
        if (!msgs[i].content) return s_err(err, err_cap, "messages[%d].content: missing", i);
    }
    coli_strbuf b = {0};
    int rc = 0;
    if (f == CHAT_MISTRAL) rc = s_mistral(&b, msgs, n, bos ? bos : "", eos ? eos : "", err, err_cap);
    else if (f == CHAT_CHATML) rc = s_chatml(&b, msgs, n, chatml_default_system);
    else rc = s_olmo(&b, msgs, n, bos ? bos : "", eos ? eos : "");
    if (rc == 0 && (b.failed || !b.s)) rc = s_err(err, err_cap, "chat template: out of memory");
    if (rc) {
        free(b.s);
        return -1;
    }
    *out = b.s;
    return 0;
}
