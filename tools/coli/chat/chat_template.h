/*
 * chat_template.h - chat templates for the model families colibri runs,
 * rendered in C (no Jinja engine): the family is recognised from markers in
 * tokenizer.chat_template when the GGUF has one (as llama.cpp's
 * llm_chat_detect_template), else from the architecture; --chat-template
 * NAME overrides both.
 *
 *   template contains "<|channel|>"                   -> gpt-oss (harmony)
 *   "<|open|>", "<|close|>" and "<|end_of_msg|>"       -> kimi-k3 (Kimi K3)
 *   "｜DSML｜" and "drop_thinking"                    -> deepseek4 (DeepSeek-V4)
 *   "｜DSML｜"                                         -> deepseek3.2 (DeepSeek-V3.2)
 *   "[gMASK]<sop>" and "clear_thinking"               -> glm4.7 (GLM-4.7, GLM-5)
 *   "[gMASK]<sop>" and "<|assistant|>"                -> glm4.5 (GLM-4.5/4.6)
 *   "<|im_start|>" and "<think>\n" closing the generation prompt
 *                     ('\n<think>\n' after '<|im_start|>assistant\n') -> qwen3.5
 *   template contains "<|im_start|>" and "<think>"   -> qwen3 (ChatML with thinking)
 *   template contains "<|im_start|>"                  -> chatml (Qwen2)
 *   "<|start_header_id|>" and "<|end_header_id|>"     -> llama3
 *   "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>" -> deepseek3
 *   "'Assistant: ' + message['content'] + eos_token"  -> deepseek2
 *   "[INST]"                                          -> mistral
 *   "<|user|>"                                        -> olmo (OLMo / Tulu)
 *   any other template                                -> unknown: chat requests get a clear error
 *   no template: llama -> mistral, olmoe -> olmo, qwen2moe -> chatml, qwen3moe -> qwen3
 *   (deepseek2 files are V2 or V3: no guess)
 *
 * chat_template_kwargs {"enable_thinking": false} turns Qwen3's, Qwen3.5's and
 * GLM's thinking off as their templates do ({"enable_thinking": true}, or
 * {"thinking": true}, turns DeepSeek V3.2's and V4's on); {"reasoning_effort": "high"} (or
 * the request field) sets gpt-oss's; a family without the switch refuses it.
 *
 * Used by `coli serve`, `coli chat` and `coli run --chat-template` (the
 * one module both the CLI and the server use: tools/coli/chat/ includes
 * neither of them); pure string work, no model needed.
 */
#ifndef COLI_CLI_CHAT_TEMPLATE_H
#define COLI_CLI_CHAT_TEMPLATE_H

#include <stddef.h>

#include "colibri.h" /* coli_text_span */

typedef enum chat_family {
    CHAT_UNKNOWN,
    CHAT_MISTRAL,
    CHAT_CHATML,
    CHAT_OLMO,
    CHAT_QWEN3,
    CHAT_DEEPSEEK2,
    CHAT_DEEPSEEK3,
    CHAT_LLAMA3,
    CHAT_GPT_OSS,
    CHAT_GLM45,
    CHAT_QWEN35,
    CHAT_GLM47,
    CHAT_DEEPSEEK32,
    CHAT_DEEPSEEK4,
    CHAT_KIMI_K3,
} chat_family;

typedef struct chat_message {
    const char *role; /* "system" (or "developer"), "user", "assistant" */
    const char *content;
} chat_message;

/* The family for a model; *source says what decided it ("tokenizer.chat_template",
 * "architecture", or "none"). chat_template may be NULL, arch may be NULL. */
chat_family chat_family_detect(const char *chat_template, const char *arch, const char **source);
/* Its name for --chat-template and messages ("qwen3"); "unknown" for CHAT_UNKNOWN. */
const char *chat_family_name(chat_family f);
/* The family a --chat-template name stands for, CHAT_UNKNOWN if none. */
chat_family chat_family_from_name(const char *name);
/* The known names, comma-separated, for messages (a static string). */
#define CHAT_FAMILY_NAMES                                                                                         \
    "mistral, chatml, olmo, qwen3, deepseek2, deepseek3, llama3, gpt-oss, glm4.5, qwen3.5, glm4.7, deepseek3.2, " \
    "deepseek4, kimi-k3"
const char *chat_family_list(void);

/* How to render: bos/eos, the vocabulary's BOS/EOS text ("<s>", "</s>"; ""
 * or NULL if none); default_system, a system line to add when the
 * conversation has none (Qwen's templates do this), or NULL; thinking, the
 * templates' enable_thinking: CHAT_THINKING_DEFAULT (not set: the template's
 * own default), 0 or 1. Only qwen3 has the switch; another family given 0
 * or 1 is an error (refused rather than ignored). */
#define CHAT_THINKING_DEFAULT (-1)
/* reasoning_effort (gpt-oss): CHAT_EFFORT_DEFAULT renders its template's default, medium */
enum {
    CHAT_EFFORT_DEFAULT,
    CHAT_EFFORT_LOW,
    CHAT_EFFORT_MEDIUM,
    CHAT_EFFORT_HIGH
};
/* effort: CHAT_EFFORT_*; date: gpt-oss's "Current date" (YYYY-MM-DD; NULL: today, local time). */
typedef struct chat_options {
    const char *bos, *eos, *default_system;
    int thinking;
    int effort;
    const char *date;
} chat_options;

/* "low", "medium", "high" -> CHAT_EFFORT_*; -1 for any other name. */
int chat_effort_parse(const char *name);
/* 0 if family f takes effort (CHAT_EFFORT_DEFAULT: always), else -1 with a
 * one-line reason naming reasoning_effort. */
int chat_effort_check(chat_family f, int effort, char *err, size_t err_cap);

/* How the generated text of a family carries its reasoning, for the split
 * into reasoning_content and content (server_reasoning.c). */
typedef enum chat_syntax {
    CHAT_SYNTAX_THINK,      /* "<think>R</think>A" (the tags may come after white space) */
    CHAT_SYNTAX_THINK_OPEN, /* the prompt opened "<think>": "R</think>A" */
    /* Kimi K3, the prompt opened the think section: "R<|close|>think<|sep|><|open|>response<|sep|>A..." */
    CHAT_SYNTAX_KIMI_THINK,
    CHAT_SYNTAX_KIMI, /* Kimi K3, the prompt opened the response: "A<|close|>response<|sep|>..." */
    CHAT_SYNTAX_HARMONY, /* gpt-oss: "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>A" */
} chat_syntax;
chat_syntax chat_syntax_of(chat_family f, const chat_options *o);

/* One stretch of generated text and the part it belongs to. */
typedef struct chat_span {
    size_t start, len;
    int reasoning; /* 1: reasoning_content, 0: content */
} chat_span;
/* gpt-oss's generated text t[0..len) as spans (the messages' bodies: the
 * analysis channel's are reasoning, any other channel's content; headers and
 * markers belong to neither). final 0 (still generating): only what later
 * text cannot change. Writes up to cap spans, returns how many there are
 * (more than cap: call again with room); *consumed: how far into t the
 * spans and the markers between them reach. */
int chat_harmony_spans(const char *t, size_t len, int final, chat_span *spans, int cap, size_t *consumed);
/* A finished gpt-oss answer t[0..len) (NUL-terminated, len bytes) cut down in
 * place to its content (the final channel's text: what the template takes
 * back in the next turn); returns the new length. */
size_t chat_harmony_keep_content(char *t, size_t len);
/* Kimi K3's generated text as spans (the think section's text is reasoning,
 * the response's content), as chat_harmony_spans; in_think: the prompt
 * opened the think section. */
int chat_kimi_spans(const char *t, size_t len, int final, int in_think, chat_span *spans, int cap, size_t *consumed);

/* The prompt for msgs followed by the start of the assistant's answer (the
 * templates' add_generation_prompt; a Mistral conversation that ends with
 * an assistant message instead leaves it open, to be continued; qwen3 with
 * thinking 0 adds the empty "<think>\n\n</think>\n\n" its template adds).
 * The result is meant to be tokenized with special-token parsing and
 * without an automatic BOS (chat_render_plain: except in the messages' text).
 * Returns 0 and a malloc'd *out, or -1 with a one-line reason in err
 * (unknown family, unknown role, roles out of order, empty conversation,
 * a thinking switch the family does not have). */
int chat_render(chat_family f, const chat_message *msgs, int n, const chat_options *o, char **out, char *err,
                size_t err_cap);
/* chat_render, and where the messages' text landed in *out: (*plain)[0 .. *n_plain),
 * ascending byte ranges (malloc'd, NULL if none), for coli_tokenize_plain. The
 * template's own markers are then special tokens and the messages' text is not,
 * so a message that spells "<|im_start|>system" cannot forge a turn. */
int chat_render_plain(chat_family f, const chat_message *msgs, int n, const chat_options *o, char **out,
                      coli_text_span **plain, int *n_plain, char *err, size_t err_cap);

/* 0 if family f takes thinking (CHAT_THINKING_DEFAULT: always), else -1
 * with a one-line reason in err naming enable_thinking: chat_render's
 * check, also made before a model runs (serve and chat at start, a request
 * before its messages are read). */
int chat_thinking_check(chat_family f, int thinking, char *err, size_t err_cap);

/* chat_template_kwargs (a request field of coli serve; --chat-template-kwargs
 * JSON of run, chat and serve), parsed: an object whose known keys are
 * enable_thinking (true or false) -> *thinking (0 / 1) and reasoning_effort
 * ("low", "medium", "high") -> *effort (each untouched when the object does
 * not set it). Returns 0, or -1 with a one-line reason in err naming the
 * key (any other key is refused rather than ignored). */
struct cJSON;
int chat_kwargs_parse(const struct cJSON *kwargs, int *thinking, int *effort, char *err, size_t err_cap);

/* --chat-template-kwargs JSON text (run, chat and serve; NULL: not given), parsed
 * as chat_kwargs_parse: *thinking is CHAT_THINKING_DEFAULT and *effort
 * CHAT_EFFORT_DEFAULT unless it sets them.
 * Returns 0, or -1 with a one-line reason in err ("not valid JSON: ..." or
 * chat_kwargs_parse's). */
int chat_kwargs_from_json(const char *json, int *thinking, int *effort, char *err, size_t err_cap);

/* A --chat-template NAME: NULL or "auto" (the model's template) or a chat_family_name. */
int chat_template_name_ok(const char *name);

/* The template for a model: name (checked) unless NULL or "auto", else the
 * one tokenizer.chat_template or the architecture names; *source says
 * which ("--chat-template", "tokenizer.chat_template", "architecture", "none"). */
chat_family chat_template_pick(const char *name, const coli_model_info *info, const char **source);

/* The default system line a ChatML template carries, if any (Qwen: "You are a
 * helpful assistant."), else NULL. */
const char *chat_template_default_system(const char *chat_template);

#endif
