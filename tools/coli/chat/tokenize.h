/*
 * tokenize.h - text to token ids with the array sized for the caller: what
 * `coli run`, `coli chat`, `coli tokenize`, `coli perplexity` and the
 * server's /tokenize and requests share (tools/coli/chat/, below both).
 */
#ifndef COLI_CLI_CHAT_TOKENIZE_H
#define COLI_CLI_CHAT_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "colibri.h"

/* Tokenize len bytes of text into *ids (malloc'd, *n of them): the array is
 * sized from the text and grown once if the library needs more. Returns 0,
 * COLI_ENOMEM (nothing in coli_last_error), or coli_tokenize's status (its
 * reason in coli_last_error). On failure *ids is NULL. Prints nothing. */
int text_tokenize(const coli_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t **ids,
                  int *n);
/* text_tokenize of a rendered chat prompt (chat_render_plain): special tokens parsed
 * except in the n_plain ranges of plain (the messages' text: coli_tokenize_plain);
 * plain NULL or none: parsed everywhere (--allow-special-in-content). No BOS is added. */
int chat_tokenize(const coli_model *m, const char *text, size_t len, const coli_text_span *plain, int n_plain,
                  int32_t **ids, int *n);

#endif
