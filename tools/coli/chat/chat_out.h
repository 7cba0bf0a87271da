/*
 * chat_out.h - what the chat template renderers share (chat_template.c,
 * chat_harmony.c, chat_thinking.c): the prompt being built with the ranges
 * of the messages' text in it, and the Jinja string helpers the templates
 * use. Not a public header.
 */
#ifndef COLI_CLI_CHAT_OUT_H
#define COLI_CLI_CHAT_OUT_H

#include <stddef.h>

#include "core/strbuf.h"
#include "tools/coli/chat/chat_template.h"

/* The rendered prompt and where the messages' text lies in it (the plain
 * ranges: tokenized without special tokens, coli_tokenize_plain). It grows
 * in many small pieces; a failure sticks (checked once at the end). */
typedef struct chat_out {
    coli_strbuf b;
    coli_text_span *plain;
    int n_plain, cap_plain, failed;
} chat_out;

/* Template text: its markers are special tokens. */
void chat_put(chat_out *o, const char *text);
/* A message's text (n bytes at p, or a string): a plain range. */
void chat_text_n(chat_out *o, const char *p, size_t n);
void chat_text(chat_out *o, const char *text);
/* A one-line reason into err; returns -1. */
int chat_fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A piece of a message's text (not NUL-terminated). */
typedef struct text_span {
    const char *p;
    size_t n;
} text_span;

void chat_put_span(chat_out *o, text_span t);
/* Jinja's lstrip('\n') / rstrip('\n') / strip('\n'). */
text_span chat_strip_nl(text_span t, int left, int right);
/* Jinja's strip() / trim: Python's white space at both ends. */
text_span chat_strip(text_span t);
/* An assistant message with "</think>" split as Qwen3's and GLM's templates do:
 * reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'),
 * answer = content.split('</think>')[-1].lstrip('\n'); without one, all of it is the answer. */
void chat_think_split(const char *content, text_span *reasoning, text_span *answer);

/* DeepSeek's role and end markers: U+FF5C FULLWIDTH VERTICAL LINE and
 * U+2581 LOWER ONE EIGHTH BLOCK, written as bytes; V3.2's and V4's tool
 * marker, what tells their templates from V3's. */
#define DS_BAR "\xEF\xBD\x9C"
#define DS_USER "<" DS_BAR "User" DS_BAR ">"
#define DS_ASSISTANT "<" DS_BAR "Assistant" DS_BAR ">"
#define DS_EOS "<" DS_BAR "end\xE2\x96\x81of\xE2\x96\x81sentence" DS_BAR ">"
#define DS_DSML DS_BAR "DSML" DS_BAR

/* DeepSeek V3 to V4: bos, then every system text joined by a blank line. */
void chat_deepseek_system(chat_out *b, const chat_message *m, int n, const char *bos);

enum {
    CHAT_ROLE_SYSTEM,
    CHAT_ROLE_USER,
    CHAT_ROLE_ASSISTANT,
    CHAT_ROLE_BAD
};
/* "system" and "developer" are CHAT_ROLE_SYSTEM. */
int chat_role(const char *role);

/* The renderers of chat_harmony.c and chat_thinking.c (messages checked:
 * known roles, content present, at least one). */
int chat_render_harmony(chat_out *b, const chat_message *m, int n, const chat_options *o, char *err, size_t cap);
int chat_render_glm45(chat_out *b, const chat_message *m, int n, const chat_options *o);
int chat_render_qwen35(chat_out *b, const chat_message *m, int n, const chat_options *o, char *err, size_t cap);
int chat_render_glm47(chat_out *b, const chat_message *m, int n, const chat_options *o);
int chat_render_deepseek32(chat_out *b, const chat_message *m, int n, const chat_options *o);
int chat_render_deepseek4(chat_out *b, const chat_message *m, int n, const chat_options *o);
int chat_render_kimi_k3(chat_out *b, const chat_message *m, int n, const chat_options *o);

#endif
