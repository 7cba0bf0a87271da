/*
 * tokenizer_bpe.c - GPT-2 byte-level BPE, as llama.cpp's
 * llm_tokenizer_bpe_session:
 *
 *  1. decode the text to code points (a bad byte becomes U+FFFD);
 *  2. pre-tokenize into words by the regexes tokenizer.ggml.pre names
 *     (tokenizer_pre.c);
 *  3. map each word's UTF-8 bytes to printable code points (GPT-2 mapping);
 *  4. a word that is itself a token stays whole when the pre-tokenizer says
 *     so (ignore_merges: Llama 3); otherwise merge adjacent symbols by merge
 *     rank (lowest first, ties: leftmost);
 *  5. emit the tokens; a symbol that is no token falls back to its bytes
 *     looked up one by one (bytes with no token are dropped, as llama.cpp).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

// ---------------------------------------------------------------------------
// byte-pair merges within one word

typedef struct bpe_session {
    const coli_tokenizer *tok;
    char *word; /* the current word, GPT-2 encoded */
    size_t word_len, word_cap;
    tok_merger merger;
} bpe_session;

/* The pair merges if a merge rule names it; the lowest rank merges first. */
static int s_pair_rank(const coli_tokenizer *tok, const char *text, size_t left_n, size_t right_n, double *priority) {
    int32_t rank = tok_merge_rank(tok, text, left_n, text + left_n, right_n);
    if (rank < 0) return 0;
    *priority = -(double)rank;
    return 1;
}

/* Emit the word's symbols; one that is no token goes byte by byte. */
static int s_emit_word(const bpe_session *s, int32_t n_sym, tok_ids *out) {
    for (int32_t i = 0; i < n_sym; i++) {
        const tok_symbol *sym = &s->merger.sym[i];
        if (sym->n == 0) continue;
        int32_t id = tok_find(s->tok, s->word + sym->off, sym->n);
        if (id >= 0) {
            int rc = tok_ids_push(out, id);
            if (rc < 0) return rc;
            continue;
        }
        for (size_t j = 0; j < sym->n; j++) {
            id = tok_find(s->tok, s->word + sym->off + j, 1);
            int rc = id >= 0 ? tok_ids_push(out, id) : 0;
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* Encode n code points as UTF-8, each byte GPT-2 mapped, into s->word. */
static int s_encode_word(bpe_session *s, const uint32_t *cpts, size_t n) {
    // a code point is at most 4 UTF-8 bytes, each mapped to at most 2
    if (n * 8 > s->word_cap) {
        char *w = tok_grow(s->word, &s->word_cap, n * 8, 1, 0, "bytes of a word");
        if (!w) return COLI_ENOMEM;
        s->word = w;
    }
    s->word_len = 0;
    for (size_t i = 0; i < n; i++) {
        char utf8[4];
        size_t len = coli_utf8_encode(cpts[i], utf8);
        if (len == 0) return coli_fail(COLI_EINVAL, "tokenizer: text holds an invalid code point U+%X", cpts[i]);
        for (size_t j = 0; j < len; j++) {
            unsigned char b = (unsigned char)utf8[j];
            memcpy(s->word + s->word_len, s->tok->byte_enc[b], s->tok->byte_enc_len[b]);
            s->word_len += s->tok->byte_enc_len[b];
        }
    }
    return 0;
}

static int s_bpe_word(bpe_session *s, const uint32_t *cpts, size_t n, tok_ids *out) {
    int rc = s_encode_word(s, cpts, n);
    if (rc < 0) return rc;
    int32_t whole = s->tok->ignore_merges ? tok_find(s->tok, s->word, s->word_len) : -1;
    if (whole >= 0) return tok_ids_push(out, whole);
    int32_t n_sym = tok_merger_split(&s->merger, s->word, s->word_len);
    if ((rc = n_sym < 0 ? n_sym : tok_merger_run(&s->merger, s->tok, s->word, n_sym, s_pair_rank)) < 0) return rc;
    return s_emit_word(s, n_sym, out);
}

// ---------------------------------------------------------------------------

int tok_bpe_encode(const coli_tokenizer *tok, const char *text, size_t len, tok_ids *out) {
    if (len > (size_t)INT32_MAX / 16) return coli_fail(COLI_EINVAL, "tokenizer: text of %zu bytes is too long", len);
    uint32_t *cpts = malloc((len ? len : 1) * sizeof(uint32_t));
    tok_pieces words = {0};
    bpe_session s = {.tok = tok};
    int rc = 0;
    if (!cpts) {
        rc = coli_fail(COLI_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    for (size_t off = 0; off < len;) cpts[n++] = coli_utf8_decode(text, len, &off);
    if (n == 0 || (rc = tok_pretokenize(tok, cpts, n, &words)) < 0) goto done;
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

/* Decode into buf (NULL: only count); returns the bytes written. */
static size_t s_decode_text(const char *text, size_t len, char *buf) {
    size_t n_out = 0;
    for (size_t off = 0; off < len;) {
        uint32_t cpt = coli_utf8_decode(text, len, &off);
        int byte = coli_gpt2_cpt_to_byte(cpt);
        if (byte >= 0) {
            if (buf) buf[n_out] = (char)byte;
            n_out++;
            continue;
        }
        // as llama.cpp's llama_decode_text: a code point that stands for no
        // byte becomes "[UNK_BYTE_0x<its UTF-8 in hex><the whole text>]"
        char utf8[4], tmp[32];
        size_t n = coli_utf8_encode(cpt, utf8);
        size_t k = (size_t)snprintf(tmp, sizeof(tmp), "[UNK_BYTE_0x");
        for (size_t j = 0; j < n; j++) k += (size_t)snprintf(tmp + k, sizeof(tmp) - k, "%02x", (unsigned char)utf8[j]);
        if (buf) {
            memcpy(buf + n_out, tmp, k);
            memcpy(buf + n_out + k, text, len);
            buf[n_out + k + len] = ']';
        }
        n_out += k + len + 1;
    }
    return n_out;
}

int tok_bpe_decode_text(const char *text, size_t len, char **out, size_t *out_len) {
    size_t n = s_decode_text(text, len, NULL);
    char *buf = malloc(n ? n : 1);
    if (!buf) return coli_fail(COLI_ENOMEM, "tokenizer: out of memory decoding a token");
    *out_len = s_decode_text(text, len, buf);
    *out = buf;
    return 0;
}
