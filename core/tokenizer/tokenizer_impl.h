/*
 * tokenizer_impl.h - what tokenizer.c (vocabulary, special tokens, public
 * API), tokenizer_spm.c and tokenizer_bpe.c share. Not a public header.
 */
#ifndef COLI_CORE_TOKENIZER_IMPL_H
#define COLI_CORE_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer/tokenizer.h"

/* Token attributes, as llama.cpp's llama_token_attr (from token_type). */
enum {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 6, /* eat white space before it when matched */
    TOK_ATTR_RSTRIP = 1 << 7, /* eat white space after it when matched */
};

typedef enum tok_kind {
    TOK_SPM = 1,
    TOK_BPE = 2
} tok_kind;

/* A BPE pre-tokenizer: llama.cpp's regex list for a tokenizer.ggml.pre name
 * (tokenizer_pre.c). */
typedef struct tok_pre_preset tok_pre_preset;
#define TOK_MAX_SHOWN 8
#define TOK_PRE_MAX_REGEX 6

/* A compiled pre-tokenizer regex (tokenizer_regex.c). */
typedef struct tok_regex tok_regex;

/* Open-addressing hash table of 32-bit values (stored +1; 0 = empty). The
 * caller owns key storage and equality; the table only keeps slots. */
typedef struct tok_hash {
    uint32_t *slots;
    size_t mask; /* capacity - 1, capacity a power of two */
} tok_hash;

/* One BPE merge rule "left right" with its rank (its index in the list). */
typedef struct tok_merge {
    uint32_t left_off, left_len; /* into merge_blob */
    uint32_t right_off, right_len;
} tok_merge;

/* A growable list of token ids (encoder output). */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

struct coli_tokenizer {
    tok_kind kind;
    const tok_pre_preset *pre;               /* BPE only */
    tok_regex *pre_regex[TOK_PRE_MAX_REGEX]; /* compiled regexes; NULL for hand-written splitters */
    int ignore_merges;                       /* BPE: a word that is a token is not merged */
    int merges_optional;                     /* BPE: no tokenizer.ggml.merges is no error (Kimi K2) */
    int32_t n_vocab;

    /* vocabulary strings, NUL-terminated, in one blob */
    char *text_blob;
    size_t *text_off;   /* (n_vocab) */
    uint32_t *text_len; /* (n_vocab) */
    float *scores;      /* (n_vocab) SPM merge priorities */
    uint8_t *attr;      /* (n_vocab) TOK_ATTR_* */
    tok_hash text_to_id;

    /* what each token stands for, for coli_tokenizer_bytes */
    char *piece_blob;
    size_t *piece_off;   /* (n_vocab) */
    uint32_t *piece_len; /* (n_vocab) */

    /* BPE merges */
    char *merge_blob;
    tok_merge *merges; /* (n_merges) rank = index */
    uint32_t n_merges;
    tok_hash merge_rank;
    char byte_enc[256][4]; /* GPT-2 mapping of each byte, UTF-8 */
    uint8_t byte_enc_len[256];

    /* special tokens, longest first: matched in the text before the model runs */
    int32_t *special;
    int32_t n_special;
    uint8_t *is_eog; /* (n_vocab) */

    int32_t bos, eos, unk; /* -1 if none */
    /* control tokens whose piece is their text (gpt-oss's harmony markers,
     * which llama.cpp renders): still not matched in plain text */
    int32_t shown[TOK_MAX_SHOWN];
    int n_shown;
    int add_bos, add_eos, add_space_prefix;
};

// ----------------------------------------------------------------------------
// tokenizer.c
/* id of the vocabulary string s (n bytes), -1 if none */
int32_t tok_find(const coli_tokenizer *tok, const char *s, size_t n);
/* rank of the merge (left, right), -1 if none */
int32_t tok_merge_rank(const coli_tokenizer *tok, const char *l, size_t ln, const char *r, size_t rn);
int tok_ids_push(tok_ids *ids, int32_t id);
/* Room for need elements of elem bytes: returns v itself if *cap holds them,
 * else v reallocated to max(need, 2 * *cap, min_cap) elements with *cap
 * updated; NULL (v untouched, still owned by the caller) with
 * COLI_ENOMEM's message naming what ("tokens", "merge candidates"). */
void *tok_grow(void *v, size_t *cap, size_t need, size_t elem, size_t min_cap, const char *what);

// ----------------------------------------------------------------------------
// tokenizer_special.c
/* Roles found by metadata or by text (EOT, FIM, ...), end-of-generation
 * ids, and the list of special tokens matched in the text. */
int tok_setup_special(coli_tokenizer *tok, const gguf_file *f);

/* A piece of the input: raw text, or a special token found in it. */
typedef struct tok_fragment {
    int32_t token;   /* -1: raw text */
    size_t off, len; /* raw text span */
} tok_fragment;

/* Byte ranges of the text where control and unknown tokens are not matched
 * (coli_tokenize_plain): ascending, not overlapping. */
typedef struct tok_plain {
    const coli_text_span *v;
    size_t n;
} tok_plain;

/* Split text into raw and special-token fragments (llama.cpp's
 * tokenizer_st_partition); plain (NULL: none) keeps control and unknown
 * tokens from matching where they would overlap one of its ranges.
 * *frags is malloc'ed. */
int tok_partition(const coli_tokenizer *tok, const char *text, size_t len, int parse_special, const tok_plain *plain,
                  tok_fragment **frags, size_t *n_frags);

// ----------------------------------------------------------------------------
// tokenizer_merge.c
/* A symbol is a span of the text being merged; merged-away symbols have n == 0. */
typedef struct tok_symbol {
    int32_t prev, next; /* neighbours in the chain, -1 at the ends */
    size_t off, n;      /* span in the text */
} tok_symbol;

/* A candidate merge of two adjacent symbols. */
typedef struct tok_bigram {
    double priority;     /* higher merges first (SPM: token score, BPE: -rank) */
    int32_t left, right; /* symbol indices */
    size_t size;         /* bytes of the merged text when queued; stale if it changed */
} tok_bigram;

/* Whether text[0, left_n) and text[left_n, left_n + right_n) merge: 1 with
 * *priority set, or 0. */
typedef int (*tok_pair_fn)(const coli_tokenizer *tok, const char *text, size_t left_n, size_t right_n,
                           double *priority);

/* Symbols and the queue of one encoder; reused from word to word. */
typedef struct tok_merger {
    tok_symbol *sym;
    size_t sym_cap;
    tok_bigram *heap;
    size_t heap_n, heap_cap;
} tok_merger;

/* Cut text (n bytes) into UTF-8 characters (by lead byte, clipped at the
 * end) as m->sym[0..count); returns the count, or a negative status. */
int32_t tok_merger_split(tok_merger *m, const char *text, size_t n);
/* Merge adjacent symbols of text, best pair first (ties: leftmost), until no
 * pair merges. The surviving symbols are chained from m->sym[0]. */
int tok_merger_run(tok_merger *m, const coli_tokenizer *tok, const char *text, int32_t n_sym, tok_pair_fn pair);
void tok_merger_free(tok_merger *m);

// ----------------------------------------------------------------------------
// tokenizer_spm.c
/* Tokenize one text fragment (spaces not yet escaped) with the SPM model. */
int tok_spm_encode(const coli_tokenizer *tok, const char *text, size_t len, int space_prefix, tok_ids *out);

// ----------------------------------------------------------------------------
// tokenizer_pre.c, tokenizer_regex.c
/* Word lengths in code points (llama.cpp's bpe_offsets). */
typedef struct tok_pieces {
    size_t *len;
    size_t n, cap;
} tok_pieces;

/* Append a piece of len code points (nothing when len is 0). */
int tok_pieces_push(tok_pieces *p, size_t len);

/* Set tok's pre-tokenizer from its tokenizer.ggml.pre name (len bytes, not
 * NUL-terminated) with its flags (BOS, ignore_merges); COLI_EUNSUPPORTED,
 * naming it, for a name llama.cpp does not know either. */
int tok_pre_setup(coli_tokenizer *tok, const char *name, size_t len);
void tok_pre_free(coli_tokenizer *tok);

/* Split n code points into words with tok's pre-tokenizer; *words is
 * malloc'ed (words->len). */
int tok_pretokenize(const coli_tokenizer *tok, const uint32_t *cpts, size_t n, tok_pieces *words);

/* Compile one regex of the supported subset (see tokenizer_regex.c);
 * COLI_EINVAL naming the regex and the place for anything else. */
int tok_regex_compile(const char *pattern, tok_regex **out);
void tok_regex_free(tok_regex **re);
/* Split each piece of in (over cpts[0..n)) at the regex's leftmost matches
 * into out: the matches and the text between them, in order. */
int tok_regex_split(const tok_regex *re, const uint32_t *cpts, size_t n, const tok_pieces *in, tok_pieces *out);

// ----------------------------------------------------------------------------
// tokenizer_bpe.c
/* Pre-tokenize and BPE-encode one text fragment. */
int tok_bpe_encode(const coli_tokenizer *tok, const char *text, size_t len, tok_ids *out);
/* The bytes a byte-level vocabulary string stands for (llama.cpp's
 * llama_decode_text); *out is malloc'ed. */
int tok_bpe_decode_text(const char *text, size_t len, char **out, size_t *out_len);

#endif
