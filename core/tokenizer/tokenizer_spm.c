/*
 * tokenizer_spm.c - SentencePiece BPE over token scores, as llama.cpp's
 * llm_tokenizer_spm_session: spaces become U+2581, the text is cut into
 * UTF-8 characters, and the adjacent pair whose concatenation is the
 * highest-scoring vocabulary string is merged first (ties: leftmost), until
 * no pair forms a token. Symbols that are no token fall back to <0xNN> byte
 * tokens.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

/* The pair merges if its concatenation is a token; the token's score ranks it. */
static int s_pair_score(const coli_tokenizer *tok, const char *text, size_t left_n, size_t right_n, double *priority) {
    int32_t id = tok_find(tok, text, left_n + right_n);
    if (id < 0) return 0;
    *priority = tok->scores[id];
    return 1;
}

/* The token of one byte: "<0xNN>", else the byte itself as a string. */
static int s_byte_token(const coli_tokenizer *tok, unsigned char byte, int32_t *id) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[6] = {'<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>'};
    *id = tok_find(tok, buf, sizeof(buf));
    if (*id < 0) *id = tok_find(tok, (const char *)&byte, 1);
    if (*id < 0)
        return coli_fail(COLI_EFORMAT, "tokenizer: vocabulary has no byte token <0x%c%c>", hex[byte >> 4],
                         hex[byte & 15]);
    return 0;
}

/* Emit a final symbol: its token, or one byte token per byte. */
static int s_emit(const coli_tokenizer *tok, const char *text, const tok_symbol *sym, tok_ids *out) {
    int32_t id = tok_find(tok, text + sym->off, sym->n);
    if (id >= 0) return tok_ids_push(out, id);
    for (size_t j = 0; j < sym->n; j++) {
        int rc = s_byte_token(tok, (unsigned char)text[sym->off + j], &id);
        if (rc < 0 || (rc = tok_ids_push(out, id)) < 0) return rc;
    }
    return 0;
}

// ---------------------------------------------------------------------------

/* " " -> U+2581 (3 bytes), with an optional leading one. */
static char *s_escape(const char *text, size_t len, int space_prefix, size_t *out_len) {
    size_t n_space = space_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) n_space += text[i] == ' ';
    size_t n = len + (space_prefix ? 1 : 0) + 2 * n_space;
    char *buf = malloc(n ? n : 1), *p = buf;
    if (!buf) return NULL;
    if (space_prefix) {
        memcpy(p, "\xE2\x96\x81", 3);
        p += 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(p, "\xE2\x96\x81", 3);
            p += 3;
        } else {
            *p++ = text[i];
        }
    }
    *out_len = n;
    return buf;
}

int tok_spm_encode(const coli_tokenizer *tok, const char *text, size_t len, int space_prefix, tok_ids *out) {
    if (len > (size_t)INT32_MAX / 4) return coli_fail(COLI_EINVAL, "tokenizer: text of %zu bytes is too long", len);
    size_t n = 0;
    char *esc = s_escape(text, len, space_prefix, &n);
    tok_merger m = {0};
    int rc = 0;
    if (!esc) {
        rc = coli_fail(COLI_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    int32_t n_sym = tok_merger_split(&m, esc, n);
    if ((rc = n_sym < 0 ? n_sym : tok_merger_run(&m, tok, esc, n_sym, s_pair_score)) < 0) goto done;
    for (int32_t i = n_sym ? 0 : -1; i != -1; i = m.sym[i].next)
        if ((rc = s_emit(tok, esc, &m.sym[i], out)) < 0) goto done;
done:
    tok_merger_free(&m);
    free(esc);
    return rc;
}
