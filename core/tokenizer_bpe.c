/*
 * tokenizer_bpe.c - GPT-2 byte-level BPE, as llama.cpp's
 * llm_tokenizer_bpe_session with unicode_regex_split:
 *
 *  1. decode the text to code points (a bad byte becomes U+FFFD);
 *  2. pre-tokenize into words. "gpt2": the GPT-2 regex
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     implemented by hand (as llama.cpp's unicode_regex_split_custom_gpt2).
 *     "default": runs of punctuation, then the GPT-2 regex, then runs of
 *     \p{N}, then groups of three ASCII digits, each splitting the pieces of
 *     the one before (matches and the text between them both stay pieces);
 *  3. map each word's UTF-8 bytes to printable code points (GPT-2 mapping);
 *  4. merge adjacent symbols by merge rank (lowest first, ties: leftmost);
 *  5. emit the tokens; a symbol that is no token falls back to its bytes
 *     looked up one by one (bytes with no token are dropped, as llama.cpp).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer_impl.h"
#include "unicode.h"

#define IN_RANGE 0x100u   /* flag bit: the position lies inside the piece */

// A list of piece lengths in code points (llama.cpp's bpe_offsets).
typedef struct piece_list {
    size_t *len;
    size_t  n, cap;
} piece_list;

static int s_piece_push(piece_list *p, size_t len)
{
    if (len == 0)
        return 0;
    if (p->n == p->cap) {
        size_t *v = tok_grow(p->len, &p->cap, p->n + 1, sizeof(*v), 64, "words");
        if (!v)
            return COLI_ENOMEM;
        p->len = v;
    }
    p->len[p->n++] = len;
    return 0;
}

// ---------------------------------------------------------------------------
// pre-tokenizers

typedef struct gpt2_piece {
    const uint32_t *cpts;
    size_t ini, end;      /* the piece being split: [ini, end) */
    size_t prev_end;      /* end of the last word emitted */
    piece_list *out;
} gpt2_piece;

static unsigned s_flags_at(const gpt2_piece *g, size_t pos)
{
    return pos >= g->ini && pos < g->end ? coli_cpt_flags(g->cpts[pos]) | IN_RANGE : 0;
}

static int s_is_other(unsigned f)   /* [^\s\p{L}\p{N}] inside the piece */
{
    return (f & IN_RANGE) && !(f & (COLI_CPT_SPACE | COLI_CPT_LETTER | COLI_CPT_NUMBER));
}

static int s_word_to(gpt2_piece *g, size_t end)
{
    int rc = s_piece_push(g->out, end - g->prev_end);
    g->prev_end = end;
    return rc;
}

// 's|'t|'re|'ve|'m|'ll|'d: the end of the contraction at pos, or 0.
static size_t s_contraction(const gpt2_piece *g, size_t pos)
{
    if (g->cpts[pos] != '\'' || pos + 1 >= g->end)
        return 0;
    uint32_t c1 = g->cpts[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return pos + 2;
    if (pos + 2 >= g->end)
        return 0;
    uint32_t c2 = g->cpts[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return pos + 3;
    return 0;
}

// The end of the word starting at pos (one alternative of the regex).
static size_t s_gpt2_word_end(const gpt2_piece *g, size_t pos)
{
    size_t end = s_contraction(g, pos);
    if (end)
        return end;
    uint32_t cpt = g->cpts[pos];
    unsigned f = s_flags_at(g, cpt == ' ' ? pos + 1 : pos);
    size_t p = pos + (cpt == ' ');
    if (f & COLI_CPT_LETTER) {                       //  ?\p{L}+
        while (s_flags_at(g, p) & COLI_CPT_LETTER)
            p++;
        return p;
    }
    if (f & COLI_CPT_NUMBER) {                       //  ?\p{N}+
        while (s_flags_at(g, p) & COLI_CPT_NUMBER)
            p++;
        return p;
    }
    if (s_is_other(f)) {                             //  ?[^\s\p{L}\p{N}]+
        while (s_is_other(s_flags_at(g, p)))
            p++;
        return p;
    }
    size_t n_ws = 0;
    while (s_flags_at(g, pos + n_ws) & COLI_CPT_SPACE)
        n_ws++;
    if (n_ws > 1 && pos + n_ws < g->end)             // \s+(?!\S): leave the last one
        return pos + n_ws - 1;
    if (n_ws > 0)                                    // \s+
        return pos + n_ws;
    return pos + 1;                                  // no match: one code point
}

static int s_split_gpt2(const uint32_t *cpts, const piece_list *in, piece_list *out)
{
    size_t start = 0;
    for (size_t k = 0; k < in->n; k++) {
        gpt2_piece g = { cpts, start, start + in->len[k], start, out };
        for (size_t pos = g.ini; pos < g.end;) {
            pos = s_gpt2_word_end(&g, pos);
            int rc = s_word_to(&g, pos);
            if (rc < 0)
                return rc;
        }
        start = g.end;
    }
    return 0;
}

// [\p{P}\$\+<=>\^~\|]+ on llama.cpp's "collapsed" text: ASCII punctuation and
// symbols except '`', and non-ASCII punctuation.
static int s_is_punct_class(uint32_t c)
{
    if (c < 128)
        return c > 0x20 && c < 0x7F && strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_{|}~", (int)c) != NULL;
    unsigned f = coli_cpt_flags(c);
    return (f & COLI_CPT_PUNCT) && !(f & COLI_CPT_SPACE);
}

static int s_is_number_class(uint32_t c)   /* \p{N}+ */
{
    return (coli_cpt_flags(c) & COLI_CPT_NUMBER) != 0;
}

// Split each piece into maximal runs inside and outside a class.
static int s_split_runs(const uint32_t *cpts, int (*in_class)(uint32_t),
                        const piece_list *in, piece_list *out)
{
    size_t start = 0;
    for (size_t k = 0; k < in->n; k++) {
        size_t end = start + in->len[k], run = start;
        for (size_t i = start + 1; i <= end; i++) {
            if (i == end || in_class(cpts[i]) != in_class(cpts[run])) {
                int rc = s_piece_push(out, i - run);
                if (rc < 0)
                    return rc;
                run = i;
            }
        }
        start = end;
    }
    return 0;
}

static int s_is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

// [0-9][0-9][0-9]: leftmost non-overlapping groups of three ASCII digits.
static int s_split_digits3(const uint32_t *cpts, const piece_list *in, piece_list *out)
{
    size_t start = 0;
    for (size_t k = 0; k < in->n; k++) {
        size_t end = start + in->len[k], from = start, i = start;
        int rc = 0;
        while (rc == 0 && i + 3 <= end) {
            if (s_is_digit(cpts[i]) && s_is_digit(cpts[i + 1]) && s_is_digit(cpts[i + 2])) {
                if ((rc = s_piece_push(out, i - from)) == 0)
                    rc = s_piece_push(out, 3);
                i += 3;
                from = i;
            } else {
                i++;
            }
        }
        if (rc < 0 || (rc = s_piece_push(out, end - from)) < 0)
            return rc;
        start = end;
    }
    return 0;
}

// Run the pre-tokenizer over n code points; *words receives the word lengths.
static int s_pretokenize(const coli_tokenizer *tok, const uint32_t *cpts, size_t n,
                         piece_list *words)
{
    piece_list a = { 0 }, b = { 0 };
    int rc = s_piece_push(&a, n);
    if (rc == 0 && tok->pre == TOK_PRE_DEFAULT) {
        if ((rc = s_split_runs(cpts, s_is_punct_class, &a, &b)) == 0) {
            a.n = 0;
            if ((rc = s_split_gpt2(cpts, &b, &a)) == 0) {
                b.n = 0;
                if ((rc = s_split_runs(cpts, s_is_number_class, &a, &b)) == 0)
                    rc = s_split_digits3(cpts, &b, words);
            }
        }
    } else if (rc == 0) {
        rc = s_split_gpt2(cpts, &a, words);
    }
    free(a.len);
    free(b.len);
    return rc;
}

// ---------------------------------------------------------------------------
// byte-pair merges within one word

typedef struct bpe_session {
    const coli_tokenizer *tok;
    char       *word;     /* the current word, GPT-2 encoded */
    size_t      word_len, word_cap;
    tok_merger  merger;
} bpe_session;

// The pair merges if a merge rule names it; the lowest rank merges first.
static int s_pair_rank(const coli_tokenizer *tok, const char *text, size_t left_n,
                       size_t right_n, double *priority)
{
    int32_t rank = tok_merge_rank(tok, text, left_n, text + left_n, right_n);
    if (rank < 0)
        return 0;
    *priority = -(double)rank;
    return 1;
}

// Emit the word's symbols; one that is no token goes byte by byte.
static int s_emit_word(const bpe_session *s, int32_t n_sym, tok_ids *out)
{
    for (int32_t i = 0; i < n_sym; i++) {
        const tok_symbol *sym = &s->merger.sym[i];
        if (sym->n == 0)
            continue;
        int32_t id = tok_find(s->tok, s->word + sym->off, sym->n);
        if (id >= 0) {
            int rc = tok_ids_push(out, id);
            if (rc < 0)
                return rc;
            continue;
        }
        for (size_t j = 0; j < sym->n; j++) {
            id = tok_find(s->tok, s->word + sym->off + j, 1);
            int rc = id >= 0 ? tok_ids_push(out, id) : 0;
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

// Encode n code points as UTF-8, each byte GPT-2 mapped, into s->word.
static int s_encode_word(bpe_session *s, const uint32_t *cpts, size_t n)
{
    // a code point is at most 4 UTF-8 bytes, each mapped to at most 2
    if (n * 8 > s->word_cap) {
        char *w = tok_grow(s->word, &s->word_cap, n * 8, 1, 0, "bytes of a word");
        if (!w)
            return COLI_ENOMEM;
        s->word = w;
    }
    s->word_len = 0;
    for (size_t i = 0; i < n; i++) {
        char utf8[4];
        size_t len = coli_utf8_encode(cpts[i], utf8);
        if (len == 0)
            return coli_fail(COLI_EINVAL, "tokenizer: text holds an invalid code point U+%X", cpts[i]);
        for (size_t j = 0; j < len; j++) {
            unsigned char b = (unsigned char)utf8[j];
            memcpy(s->word + s->word_len, s->tok->byte_enc[b], s->tok->byte_enc_len[b]);
            s->word_len += s->tok->byte_enc_len[b];
        }
    }
    return 0;
}

static int s_bpe_word(bpe_session *s, const uint32_t *cpts, size_t n, tok_ids *out)
{
    int rc = s_encode_word(s, cpts, n);
    if (rc < 0)
        return rc;
    int32_t n_sym = tok_merger_split(&s->merger, s->word, s->word_len);
    if ((rc = n_sym < 0 ? n_sym : tok_merger_run(&s->merger, s->tok, s->word, n_sym, s_pair_rank)) < 0)
        return rc;
    return s_emit_word(s, n_sym, out);
}

// ---------------------------------------------------------------------------

int tok_bpe_encode(const coli_tokenizer *tok, const char *text, size_t len, tok_ids *out)
{
    if (len > (size_t)INT32_MAX / 16)
        return coli_fail(COLI_EINVAL, "tokenizer: text of %zu bytes is too long", len);
    uint32_t *cpts = malloc((len ? len : 1) * sizeof(uint32_t));
    piece_list words = { 0 };
    bpe_session s = { .tok = tok };
    int rc = 0;
    if (!cpts) {
        rc = coli_fail(COLI_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    for (size_t off = 0; off < len;)
        cpts[n++] = coli_utf8_decode(text, len, &off);
    if (n == 0 || (rc = s_pretokenize(tok, cpts, n, &words)) < 0)
        goto done;
    size_t start = 0;
    for (size_t k = 0; k < words.n && rc == 0; k++) {
        rc = s_bpe_word(&s, cpts + start, words.len[k], out);
        start += words.len[k];
    }
done:
    free(s.word);
    tok_merger_free(&s.merger);
    free(words.len);
    free(cpts);
    return rc;
}

// ---------------------------------------------------------------------------

// Decode into buf (NULL: only count); returns the bytes written.
static size_t s_decode_text(const char *text, size_t len, char *buf)
{
    size_t n_out = 0;
    for (size_t off = 0; off < len;) {
        uint32_t cpt = coli_utf8_decode(text, len, &off);
        int byte = coli_gpt2_cpt_to_byte(cpt);
        if (byte >= 0) {
            if (buf)
                buf[n_out] = (char)byte;
            n_out++;
            continue;
        }
        // as llama.cpp's llama_decode_text: a code point that stands for no
        // byte becomes "[UNK_BYTE_0x<its UTF-8 in hex><the whole text>]"
        char utf8[4], tmp[32];
        size_t n = coli_utf8_encode(cpt, utf8);
        size_t k = (size_t)snprintf(tmp, sizeof(tmp), "[UNK_BYTE_0x");
        for (size_t j = 0; j < n; j++)
            k += (size_t)snprintf(tmp + k, sizeof(tmp) - k, "%02x", (unsigned char)utf8[j]);
        if (buf) {
            memcpy(buf + n_out, tmp, k);
            memcpy(buf + n_out + k, text, len);
            buf[n_out + k + len] = ']';
        }
        n_out += k + len + 1;
    }
    return n_out;
}

int tok_bpe_decode_text(const char *text, size_t len, char **out, size_t *out_len)
{
    size_t n = s_decode_text(text, len, NULL);
    char *buf = malloc(n ? n : 1);
    if (!buf)
        return coli_fail(COLI_ENOMEM, "tokenizer: out of memory decoding a token");
    *out_len = s_decode_text(text, len, buf);
    *out = buf;
    return 0;
}
