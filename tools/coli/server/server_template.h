/*
 * server_template.h - chat templates for the model families colibri runs,
 * rendered in C (no Jinja engine): the family is recognised from
 * tokenizer.chat_template when the GGUF has one, else from the architecture.
 *
 *   template contains "[INST]"        -> Mistral/Mixtral   (arch llama without a template)
 *   template contains "<|im_start|>"  -> ChatML            (arch qwen2moe without a template)
 *   template contains "<|user|>"      -> OLMo / Tulu       (arch olmoe without a template)
 *   any other template                -> unknown: chat requests get a clear error
 *
 * Used by `coli serve` and `coli chat`; pure string work, no model needed.
 */
#ifndef COLI_CLI_SERVER_TEMPLATE_H
#define COLI_CLI_SERVER_TEMPLATE_H

#include <stddef.h>

typedef enum chat_family { CHAT_UNKNOWN, CHAT_MISTRAL, CHAT_CHATML, CHAT_OLMO } chat_family;

typedef struct chat_message {
    const char *role;     /* "system" (or "developer"), "user", "assistant" */
    const char *content;
} chat_message;

/* The family for a model; *source says what decided it ("tokenizer.chat_template",
 * "architecture", or "none"). chat_template may be NULL, arch may be NULL. */
chat_family chat_family_detect(const char *chat_template, const char *arch, const char **source);
const char *chat_family_name(chat_family f);

/* The prompt for msgs followed by the start of the assistant's answer.
 * bos/eos: the vocabulary's BOS/EOS text ("<s>", "</s>"; "" if none); the
 * result is meant to be tokenized with special-token parsing and without an
 * automatic BOS. chatml_default_system: a system line to add when the
 * conversation has none (Qwen's templates do this), or NULL.
 * Returns 0 and a malloc'd *out, or -1 with a one-line reason in err
 * (unknown family, unknown role, roles out of order, empty conversation). */
int chat_render(chat_family f, const chat_message *msgs, int n, const char *bos, const char *eos,
                const char *chatml_default_system, char **out, char *err, size_t err_cap);

/* The default system line a ChatML template carries, if any (Qwen: "You are a
 * helpful assistant."), else NULL. */
const char *chat_template_default_system(const char *chat_template);

#endif
