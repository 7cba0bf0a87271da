/*
 * chat_template.c - chat templates rendered in C; see chat_template.h.
 *
 * The layouts, as their reference Jinja templates produce them (with
 * add_generation_prompt):
 *   Mistral/Mixtral:  <s>[INST] user [/INST]answer</s>[INST] user [/INST]
 *                     (a system message is put before the first user text,
 *                     separated by a blank line, as Mistral's later templates do)
 *   ChatML (Qwen2):   <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
 *   OLMo / Tulu:      <bos><|system|>\n..\n<|user|>\n..\n<|assistant|>\n..<eos>\n ... <|assistant|>\n
 *   Qwen3:            ChatML; an assistant turn before the last user message
 *                     loses its <think>...</think> part, one after it keeps it
 *                     as "<think>\nR\n</think>\n\n" (Qwen3's tokenizer_config.json).
 *                     enable_thinking false (chat_template_kwargs) adds an
 *                     empty "<think>\n\n</think>\n\n" after the generation
 *                     prompt, as the template does; left unset, thinking is
 *                     on, and Qwen3's "/no_think" in a message works as text.
 *   DeepSeek V2:      <bos>system\n\nUser: ..\n\nAssistant: ..<eos>User: ..\n\nAssistant:
 *                     (DeepSeek-V2-Chat's tokenizer_config.json)
 *   DeepSeek V3:      <bos>system<｜User｜>..<｜Assistant｜>..<｜end▁of▁sentence｜>..<｜Assistant｜>
 *                     (DeepSeek-V3's tokenizer_config.json: every system text
 *                     first, joined by a blank line)
 *   Llama 3:          <bos><|start_header_id|>role<|end_header_id|>\n\ntrimmed content<|eot_id|>
 *                     ... <|start_header_id|>assistant<|end_header_id|>\n\n
 *                     (Meta-Llama-3-8B-Instruct's tokenizer_config.json)
 */
#include "tools/coli/chat/chat_template.h"
#include "tools/coli/chat/chat_out.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void chat_put(chat_out *o, const char *text) { coli_strbuf_appendf(&o->b, "%s", text); }

void chat_text_n(chat_out *o, const char *p, size_t n) {
    size_t at = o->b.len;
    coli_strbuf_appendf(&o->b, "%.*s", (int)n, p);
    if (!n || o->b.failed) return;
    if (o->n_plain == o->cap_plain) {
        int cap = o->cap_plain ? 2 * o->cap_plain : 16;
        coli_text_span *t = realloc(o->plain, (size_t)cap * sizeof *t);
        if (!t) {
            o->failed = 1;
            return;
        }
        o->plain = t;
        o->cap_plain = cap;
    }
    o->plain[o->n_plain++] = (coli_text_span){at, n};
}

void chat_text(chat_out *o, const char *text) { chat_text_n(o, text, strlen(text)); }

int chat_fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* What tokenizer.chat_template holds for each family, checked in this order
 * (Qwen3's template is also ChatML, so it comes first). */
static chat_family s_family_of_template(const char *t) {
    if (strstr(t, "<|channel|>")) return CHAT_GPT_OSS;
    if (strstr(t, "<|open|>") && strstr(t, "<|close|>") && strstr(t, "<|end_of_msg|>")) return CHAT_KIMI_K3;
    if (strstr(t, DS_DSML)) return strstr(t, "drop_thinking") ? CHAT_DEEPSEEK4 : CHAT_DEEPSEEK32;
    if (strstr(t, "[gMASK]<sop>") && strstr(t, "clear_thinking")) return CHAT_GLM47;
    if (strstr(t, "[gMASK]<sop>") && strstr(t, "<|assistant|>")) return CHAT_GLM45;
    if (strstr(t, "<|im_start|>") && strstr(t, "'<think>\\n'")) return CHAT_QWEN35; /* opens the thought */
    if (strstr(t, "<|im_start|>")) return strstr(t, "<think>") ? CHAT_QWEN3 : CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (strstr(t, DS_USER) && strstr(t, DS_ASSISTANT) && strstr(t, DS_EOS)) return CHAT_DEEPSEEK3;
    if (strstr(t, "'Assistant: ' + message['content'] + eos_token")) return CHAT_DEEPSEEK2;
    if (strstr(t, "[INST]")) return CHAT_MISTRAL;
    if (strstr(t, "<|user|>")) return CHAT_OLMO;
    return CHAT_UNKNOWN;
}

chat_family chat_family_detect(const char *tmpl, const char *arch, const char **source) {
    const char *unused;
    if (!source) source = &unused;
    if (tmpl && *tmpl) {
        *source = "tokenizer.chat_template";
        return s_family_of_template(tmpl);
    }
    *source = "architecture";
    if (arch && strcmp(arch, "llama") == 0) return CHAT_MISTRAL;
    if (arch && strcmp(arch, "olmoe") == 0) return CHAT_OLMO;
    if (arch && strcmp(arch, "qwen2moe") == 0) return CHAT_CHATML;
    if (arch && strcmp(arch, "qwen3moe") == 0) return CHAT_QWEN3;
    *source = "none";
    return CHAT_UNKNOWN;
}

static const char *const k_family_names[] = {
    [CHAT_UNKNOWN] = "unknown",
    [CHAT_MISTRAL] = "mistral",
    [CHAT_CHATML] = "chatml",
    [CHAT_OLMO] = "olmo",
    [CHAT_QWEN3] = "qwen3",
    [CHAT_DEEPSEEK2] = "deepseek2",
    [CHAT_DEEPSEEK3] = "deepseek3",
    [CHAT_LLAMA3] = "llama3",
    [CHAT_GPT_OSS] = "gpt-oss",
    [CHAT_GLM45] = "glm4.5",
    [CHAT_QWEN35] = "qwen3.5",
    [CHAT_GLM47] = "glm4.7",
    [CHAT_DEEPSEEK32] = "deepseek3.2",
    [CHAT_DEEPSEEK4] = "deepseek4",
    [CHAT_KIMI_K3] = "kimi-k3",
};
#define N_FAMILIES ((int)(sizeof k_family_names / sizeof k_family_names[0]))

const char *chat_family_name(chat_family f) {
    return (int)f > 0 && (int)f < N_FAMILIES ? k_family_names[f] : "unknown";
}

chat_family chat_family_from_name(const char *name) {
    for (int f = 1; name && f < N_FAMILIES; f++)
        if (strcmp(name, k_family_names[f]) == 0) return (chat_family)f;
    return CHAT_UNKNOWN;
}

const char *chat_family_list(void) { return CHAT_FAMILY_NAMES; }

const char *chat_template_default_system(const char *tmpl) {
    static const char qwen[] = "You are a helpful assistant.";
    return tmpl && strstr(tmpl, "<|im_start|>") && strstr(tmpl, qwen) ? qwen : NULL;
}

int chat_role(const char *role) {
    if (!role) return CHAT_ROLE_BAD;
    if (!strcmp(role, "system") || !strcmp(role, "developer")) return CHAT_ROLE_SYSTEM;
    if (!strcmp(role, "user")) return CHAT_ROLE_USER;
    if (!strcmp(role, "assistant")) return CHAT_ROLE_ASSISTANT;
    return CHAT_ROLE_BAD;
}

/* Mistral: system text joins the first user turn; user/assistant must alternate. */
static int s_mistral(chat_out *b, const chat_message *m, int n, const char *bos, const char *eos, char *err,
                     size_t cap) {
    const char *system = NULL;
    int expect = CHAT_ROLE_USER, first_user = 1;
    chat_put(b, bos);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_SYSTEM) {
            if (i != 0)
                return chat_fail(
                    err, cap, "messages[%d]: a system message must come first for this model's template (mistral)", i);
            system = m[i].content;
            continue;
        }
        if (r != expect)
            return chat_fail(err, cap,
                             "messages[%d]: role '%s' out of order: this model's template (mistral) needs user and "
                             "assistant turns alternating, starting with user",
                             i, m[i].role);
        if (r == CHAT_ROLE_USER) {
            chat_put(b, "[INST] ");
            if (first_user && system && *system) {
                chat_text(b, system);
                chat_put(b, "\n\n");
            }
            first_user = 0;
            chat_text(b, m[i].content);
            chat_put(b, " [/INST]");
            expect = CHAT_ROLE_ASSISTANT;
        } else {
            chat_text(b, m[i].content);
            if (i + 1 < n) chat_put(b, eos); /* a final assistant message is a prefix to continue */
            expect = CHAT_ROLE_USER;
        }
    }
    if (first_user) return chat_fail(err, cap, "messages: no user message");
    return 0;
}

static int s_chatml(chat_out *b, const chat_message *m, int n, const char *default_system) {
    static const char *names[] = {"system", "user", "assistant"};
    if (default_system && chat_role(m[0].role) != CHAT_ROLE_SYSTEM) {
        chat_put(b, "<|im_start|>system\n");
        chat_put(b, default_system);
        chat_put(b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        chat_put(b, "<|im_start|>");
        chat_put(b, names[chat_role(m[i].role)]);
        chat_put(b, "\n");
        chat_text(b, m[i].content);
        chat_put(b, "<|im_end|>\n");
    }
    chat_put(b, "<|im_start|>assistant\n");
    return 0;
}

static int s_olmo(chat_out *b, const chat_message *m, int n, const char *bos, const char *eos) {
    static const char *tags[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
    chat_put(b, bos);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        chat_put(b, tags[r]);
        chat_text(b, m[i].content);
        if (r == CHAT_ROLE_ASSISTANT) chat_put(b, eos);
        chat_put(b, "\n");
    }
    chat_put(b, tags[CHAT_ROLE_ASSISTANT]);
    return 0;
}

void chat_put_span(chat_out *b, text_span t) { chat_text_n(b, t.p, t.n); }

text_span chat_strip_nl(text_span t, int left, int right) {
    while (left && t.n && *t.p == '\n') t.p++, t.n--;
    while (right && t.n && t.p[t.n - 1] == '\n') t.n--;
    return t;
}

text_span chat_strip(text_span t) {
    while (t.n && strchr(" \t\n\r\v\f", *t.p)) t.p++, t.n--;
    while (t.n && strchr(" \t\n\r\v\f", t.p[t.n - 1])) t.n--;
    return t;
}

static const char *s_last_of(const char *s, const char *end, const char *what) {
    const char *last = NULL;
    for (const char *p = s; (p = strstr(p, what)) && p + strlen(what) <= end; p++) last = p;
    return last;
}

void chat_think_split(const char *content, text_span *reasoning, text_span *answer) {
    const char *first = strstr(content, "</think>"), *end = content + strlen(content);
    *reasoning = (text_span){"", 0};
    *answer = (text_span){content, (size_t)(end - content)};
    if (!first) return;
    const char *last = s_last_of(content, end, "</think>") + strlen("</think>");
    *answer = chat_strip_nl((text_span){last, (size_t)(end - last)}, 1, 0);
    text_span before = chat_strip_nl((text_span){content, (size_t)(first - content)}, 0, 1);
    const char *open = s_last_of(before.p, before.p + before.n, "<think>");
    if (open) before = (text_span){open + 7, before.n - (size_t)(open + 7 - before.p)};
    *reasoning = chat_strip_nl(before, 1, 0);
}

/* Qwen3's template: the last user message that is not a tool response. */
static int s_qwen3_last_query(const chat_message *m, int n) {
    for (int i = n - 1; i >= 0; i--) {
        size_t len = strlen(m[i].content);
        int tool = len >= 31 && !strncmp(m[i].content, "<tool_response>", 15) &&
                   !strcmp(m[i].content + len - 16, "</tool_response>");
        if (chat_role(m[i].role) == CHAT_ROLE_USER && !tool) return i;
    }
    return n - 1;
}

static int s_qwen3(chat_out *b, const chat_message *m, int n, int thinking) {
    static const char *names[] = {"system", "user", "assistant"};
    int last_query = s_qwen3_last_query(m, n);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        chat_put(b, "<|im_start|>");
        chat_put(b, names[r]);
        chat_put(b, "\n");
        if (r != CHAT_ROLE_ASSISTANT) {
            chat_text(b, m[i].content);
        } else {
            text_span reasoning, answer;
            chat_think_split(m[i].content, &reasoning, &answer);
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                chat_put(b, "<think>\n");
                chat_put_span(b, chat_strip_nl(reasoning, 1, 1));
                chat_put(b, "\n</think>\n\n");
                answer = chat_strip_nl(answer, 1, 0);
            }
            chat_put_span(b, answer);
        }
        chat_put(b, "<|im_end|>\n");
    }
    chat_put(b, "<|im_start|>assistant\n");
    if (thinking == 0) chat_put(b, "<think>\n\n</think>\n\n"); /* enable_thinking false: an empty thought */
    return 0;
}

/* DeepSeek V2: system text in place, "User: " and "Assistant: " turns. */
static int s_deepseek2(chat_out *b, const chat_message *m, int n, const char *bos, const char *eos) {
    chat_put(b, bos);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        chat_put(b, r == CHAT_ROLE_USER ? "User: " : r == CHAT_ROLE_ASSISTANT ? "Assistant: " : "");
        chat_text(b, m[i].content);
        chat_put(b, r == CHAT_ROLE_ASSISTANT ? eos : "\n\n");
    }
    chat_put(b, "Assistant:");
    return 0;
}

/* DeepSeek V3: every system text first (joined by a blank line), then the turns. */
void chat_deepseek_system(chat_out *b, const chat_message *m, int n, const char *bos) {
    int n_system = 0;
    chat_put(b, bos);
    for (int i = 0; i < n; i++) {
        if (chat_role(m[i].role) != CHAT_ROLE_SYSTEM) continue;
        if (n_system++) chat_put(b, "\n\n");
        chat_text(b, m[i].content);
    }
}

static int s_deepseek3(chat_out *b, const chat_message *m, int n, const char *bos) {
    chat_deepseek_system(b, m, n, bos);
    for (int i = 0; i < n; i++) {
        int r = chat_role(m[i].role);
        if (r == CHAT_ROLE_SYSTEM) continue;
        chat_put(b, r == CHAT_ROLE_USER ? DS_USER : DS_ASSISTANT);
        chat_text(b, m[i].content);
        if (r == CHAT_ROLE_ASSISTANT) chat_put(b, DS_EOS);
    }
    chat_put(b, DS_ASSISTANT);
    return 0;
}

/* Llama 3: a header per turn, content trimmed (Jinja's trim: Python's strip()). */
static int s_llama3(chat_out *b, const chat_message *m, int n, const char *bos) {
    static const char *names[] = {"system", "user", "assistant"};
    chat_put(b, bos);
    for (int i = 0; i < n; i++) {
        const char *c = m[i].content, *e = c + strlen(c);
        while (c < e && strchr(" \t\n\r\v\f", *c)) c++;
        while (e > c && strchr(" \t\n\r\v\f", e[-1])) e--;
        chat_put(b, "<|start_header_id|>");
        chat_put(b, names[chat_role(m[i].role)]);
        chat_put(b, "<|end_header_id|>\n\n");
        chat_text_n(b, c, (size_t)(e - c));
        chat_put(b, "<|eot_id|>");
    }
    chat_put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

int chat_kwargs_parse(const cJSON *kwargs, int *thinking, int *effort, char *err, size_t err_cap) {
    if (!cJSON_IsObject(kwargs)) return chat_fail(err, err_cap, "chat_template_kwargs: must be a JSON object");
    const cJSON *kv;
    cJSON_ArrayForEach(kv, kwargs) {
        if (!strcmp(kv->string, "reasoning_effort")) {
            int e = cJSON_IsString(kv) ? chat_effort_parse(kv->valuestring) : -1;
            if (e < 0)
                return chat_fail(err, err_cap, "chat_template_kwargs.reasoning_effort: must be low, medium or high");
            *effort = e;
            continue;
        }
        /* DeepSeek V3.2/V4's templates read "thinking" before enable_thinking: the same switch */
        if (strcmp(kv->string, "enable_thinking") != 0 && strcmp(kv->string, "thinking") != 0)
            return chat_fail(
                err, err_cap,
                "chat_template_kwargs.%.64s: not supported (known: enable_thinking, thinking, reasoning_effort)",
                kv->string);
        if (!cJSON_IsBool(kv))
            return chat_fail(err, err_cap, "chat_template_kwargs.%s: must be true or false", kv->string);
        *thinking = cJSON_IsTrue(kv);
    }
    return 0;
}

int chat_thinking_check(chat_family f, int thinking, char *err, size_t err_cap) {
    if (thinking == CHAT_THINKING_DEFAULT || f == CHAT_QWEN3 || f == CHAT_QWEN35 || f == CHAT_GLM45 ||
        f == CHAT_GLM47 || f == CHAT_DEEPSEEK32 || f == CHAT_DEEPSEEK4 || f == CHAT_KIMI_K3)
        return 0;
    return chat_fail(err, err_cap,
                     "chat_template_kwargs.enable_thinking: the %s chat template has no thinking switch (qwen3, "
                     "qwen3.5, glm4.5, glm4.7, deepseek3.2, deepseek4 and kimi-k3 have)",
                     chat_family_name(f));
}

chat_syntax chat_syntax_of(chat_family f, const chat_options *o) {
    if (f == CHAT_GPT_OSS) return CHAT_SYNTAX_HARMONY;
    if (f == CHAT_KIMI_K3) return o->thinking != 0 ? CHAT_SYNTAX_KIMI_THINK : CHAT_SYNTAX_KIMI;
    /* the generation prompt opens the thought: Qwen3.5 and GLM-4.7 unless thinking is off,
     * DeepSeek V3.2/V4 only when it is on (their default is off) */
    if ((f == CHAT_QWEN35 || f == CHAT_GLM47) && o->thinking != 0) return CHAT_SYNTAX_THINK_OPEN;
    if ((f == CHAT_DEEPSEEK32 || f == CHAT_DEEPSEEK4) && o->thinking == 1) return CHAT_SYNTAX_THINK_OPEN;
    return CHAT_SYNTAX_THINK;
}

int chat_render(chat_family f, const chat_message *msgs, int n, const chat_options *o, char **out, char *err,
                size_t err_cap) {
    return chat_render_plain(f, msgs, n, o, out, NULL, NULL, err, err_cap);
}

int chat_render_plain(chat_family f, const chat_message *msgs, int n, const chat_options *o, char **out,
                      coli_text_span **plain, int *n_plain, char *err, size_t err_cap) {
    *out = NULL;
    if (plain) *plain = NULL;
    if (n_plain) *n_plain = 0;
    if (f == CHAT_UNKNOWN)
        return chat_fail(
            err, err_cap,
            "this model's chat template is not one colibri knows (%s); use /v1/completions with your own prompt format",
            chat_family_list());
    if (n <= 0) return chat_fail(err, err_cap, "messages: empty (at least one message is needed)");
    if (chat_thinking_check(f, o->thinking, err, err_cap) || chat_effort_check(f, o->effort, err, err_cap)) return -1;
    for (int i = 0; i < n; i++) {
        if (chat_role(msgs[i].role) == CHAT_ROLE_BAD)
            return chat_fail(err, err_cap,
                             "messages[%d].role: '%s' is not supported (system, developer, user, assistant)", i,
                             msgs[i].role ? msgs[i].role : "(null)");
        if (!msgs[i].content) return chat_fail(err, err_cap, "messages[%d].content: missing", i);
    }
    chat_out b = {0};
    int rc = 0;
    const char *bos = o->bos ? o->bos : "", *eos = o->eos ? o->eos : "";
    switch (f) {
    case CHAT_MISTRAL: rc = s_mistral(&b, msgs, n, bos, eos, err, err_cap); break;
    case CHAT_CHATML: rc = s_chatml(&b, msgs, n, o->default_system); break;
    case CHAT_QWEN3: rc = s_qwen3(&b, msgs, n, o->thinking); break;
    case CHAT_DEEPSEEK2: rc = s_deepseek2(&b, msgs, n, bos, eos); break;
    case CHAT_DEEPSEEK3: rc = s_deepseek3(&b, msgs, n, bos); break;
    case CHAT_LLAMA3: rc = s_llama3(&b, msgs, n, bos); break;
    case CHAT_GPT_OSS: rc = chat_render_harmony(&b, msgs, n, o, err, err_cap); break;
    case CHAT_GLM45: rc = chat_render_glm45(&b, msgs, n, o); break;
    case CHAT_QWEN35: rc = chat_render_qwen35(&b, msgs, n, o, err, err_cap); break;
    case CHAT_GLM47: rc = chat_render_glm47(&b, msgs, n, o); break;
    case CHAT_DEEPSEEK32: rc = chat_render_deepseek32(&b, msgs, n, o); break;
    case CHAT_DEEPSEEK4: rc = chat_render_deepseek4(&b, msgs, n, o); break;
    case CHAT_KIMI_K3: rc = chat_render_kimi_k3(&b, msgs, n, o); break;
    default: rc = s_olmo(&b, msgs, n, bos, eos); break;
    }
    if (rc == 0 && (b.failed || b.b.failed || !b.b.s)) rc = chat_fail(err, err_cap, "chat template: out of memory");
    if (rc || !plain) free(b.plain);
    if (rc) {
        free(b.b.s);
        return -1;
    }
    *out = b.b.s;
    if (plain) {
        *plain = b.plain;
        *n_plain = b.n_plain;
    }
    return 0;
}

int chat_kwargs_from_json(const char *json, int *thinking, int *effort, char *err, size_t err_cap) {
    *thinking = CHAT_THINKING_DEFAULT;
    *effort = CHAT_EFFORT_DEFAULT;
    if (!json) return 0;
    cJSON *kw = cJSON_Parse(json);
    if (!kw) return chat_fail(err, err_cap, "not valid JSON: %.60s", json);
    int rc = chat_kwargs_parse(kw, thinking, effort, err, err_cap);
    cJSON_Delete(kw);
    return rc;
}

int chat_template_name_ok(const char *name) {
    return !name || !strcmp(name, "auto") || chat_family_from_name(name) != CHAT_UNKNOWN;
}

chat_family chat_template_pick(const char *name, const coli_model_info *info, const char **source) {
    if (name && strcmp(name, "auto") != 0) {
        *source = "--chat-template";
        return chat_family_from_name(name);
    }
    return chat_family_detect(info->chat_template, info->arch, source);
}
