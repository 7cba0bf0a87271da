/*
 * tokenizer.h - text <-> token ids, from the GGUF tokenizer metadata.
 *
 * Two models, chosen by tokenizer.ggml.model:
 *  - "llama": SentencePiece BPE over scores, spaces as U+2581, byte
 *    fallback tokens <0xNN>, BOS/EOS/UNK ids from metadata.
 *  - "gpt2": byte-level BPE with merges; the pre-tokenizer regexes are the
 *    ones llama.cpp uses for tokenizer.ggml.pre (llama-bpe, qwen2,
 *    deepseek-llm/-coder/-v3, falcon, starcoder, gpt-2, dbrx, command-r,
 *    smollm, chatglm-bpe, ...: core/tokenizer/tokenizer_pre.c); an unknown name is
 *    refused.
 * Special (control/user-defined) tokens are matched in the text before the
 * model runs when parse_special is set. Results match llama.cpp exactly.
 */
#ifndef COLI_CORE_TOKENIZER_H
#define COLI_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "colibri.h" /* coli_text_span */
#include "core/gguf/gguf.h"

typedef struct coli_tokenizer coli_tokenizer;

/* Build from f's metadata (copies what it needs; f may be closed after). */
int coli_tokenizer_new(const gguf_file *f, coli_tokenizer **out);
void coli_tokenizer_free(coli_tokenizer **tok);

int32_t coli_tokenizer_n_vocab(const coli_tokenizer *tok);
int32_t coli_tokenizer_bos(const coli_tokenizer *tok); /* -1 if none */
int32_t coli_tokenizer_eos(const coli_tokenizer *tok); /* -1 if none */
int coli_tokenizer_add_bos(const coli_tokenizer *tok);
int coli_tokenizer_is_eog(const coli_tokenizer *tok, int32_t id);
const char *coli_tokenizer_model(const coli_tokenizer *tok); /* "llama" or "gpt2" */

/* Same contract as coli_tokenize in colibri.h. */
int coli_tokenizer_encode(const coli_tokenizer *tok, const char *text, size_t len, int add_special, int parse_special,
                          int32_t *ids, int cap, int *n_out);
/* Same contract as coli_tokenize_plain in colibri.h. */
int coli_tokenizer_encode_plain(const coli_tokenizer *tok, const char *text, size_t len, int add_special,
                                const coli_text_span *plain, int n_plain, int32_t *ids, int cap, int *n_out);

/* Vocabulary string of id (NUL-terminated), NULL if out of range. */
const char *coli_tokenizer_text(const coli_tokenizer *tok, int32_t id);
/* Bytes the token stands for (see coli_token_to_bytes). */
int coli_tokenizer_bytes(const coli_tokenizer *tok, int32_t id, const char **bytes, size_t *len);

/* Streaming UTF-8 assembly for detokenization: feed token bytes, get back
 * the prefix that forms complete characters; an incomplete tail is kept for
 * the next token. Invalid sequences are passed through byte by byte. */
typedef struct coli_utf8_stream {
    char pending[8];
    int n_pending;
} coli_utf8_stream;

/* Appends complete bytes to out (cap bytes room), returns the count written
 * (out needs room for len + 8). */
size_t coli_utf8_stream_push(coli_utf8_stream *s, const char *bytes, size_t len, char *out);
/* Whatever is left at the end (an incomplete sequence) as raw bytes. */
size_t coli_utf8_stream_flush(coli_utf8_stream *s, char *out);

#endif
