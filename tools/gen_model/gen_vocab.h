/*
 * gen_vocab.h - the synthetic tokenizer vocabulary of gen_model: SentencePiece
 * style (scores, byte fallback) or GPT-2 byte-level BPE (merges), built from
 * the common words of children's stories so that test prompts tokenize into
 * whole words.
 */
#ifndef COLI_TOOLS_GEN_VOCAB_H
#define COLI_TOOLS_GEN_VOCAB_H

#include <stdint.h>

#include "core/gguf/gguf.h"

typedef struct gen_vocab {
    char **tokens;
    float *scores;
    int32_t *types;
    int64_t n, cap;
    char **merges; /* BPE only: "left right", rank = index */
    int64_t n_merges;
    char **hash; /* open addressing set of token strings */
    int64_t hash_cap;
    int bpe; /* GPT-2 byte-level BPE (olmoe), else SentencePiece */
} gen_vocab;

/* n_vocab distinct tokens (bpe: GPT-2 byte-level BPE, else SentencePiece);
 * an error naming --vocab when the builder cannot make that many. */
int gen_vocab_build(gen_vocab *v, int64_t n_vocab, int bpe);
void gen_vocab_free(gen_vocab *v);

/* The tokenizer.ggml.* keys of v. */
int gen_vocab_write(gguf_writer *w, const gen_vocab *v);

#endif
