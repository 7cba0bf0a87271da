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

#include "error.h"
#include "tokenizer_impl.h"
#include "unicode.h"

// A symbol is a span of the escaped text; merged-away symbols have n == 0.
typedef struct spm_symbol {
    int32_t prev, next;   /* neighbours in the chain, -1 at the ends */
    size_t  off, n;       /* span in the escaped text */
} spm_symbol;

// A candidate merge of two adjacent symbols.
typedef struct spm_bigram {
    float   score;        /* score of the merged token */
    int32_t left, right;  /* symbol indices */
    size_t  size;         /* bytes of the merged text when queued */
} spm_bigram;

typedef struct spm_heap {
    spm_bigram *v;
    size_t n, cap;
} spm_heap;

typedef struct spm_session {
    const coli_tokenizer *tok;
    const char *text;     /* escaped text */
    spm_symbol *sym;
    spm_heap    heap;
} spm_session;

// ---------------------------------------------------------------------------
// priority queue: highest score first, then the leftmost pair

static int s_better(const spm_bigram *a, const spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int s_heap_push(spm_heap *h, spm_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_bigram *v = realloc(h->v, cap * sizeof(*v));
        if (!v)
            return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%zu merge candidates)", cap);
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && s_better(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return 0;
}

static spm_bigram s_heap_pop(spm_heap *h)
{
    spm_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && s_better(&h->v[c + 1], &h->v[c]))
            c++;
        if (!s_better(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

// ---------------------------------------------------------------------------
// the merge loop

// Queue the merge of symbols left and right if their concatenation is a token.
static int s_try_add_bigram(spm_session *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const spm_symbol *l = &s->sym[left], *r = &s->sym[right];
    size_t size = l->n + r->n;
    int32_t id = tok_find(s->tok, s->text + l->off, size);
    if (id < 0)
        return 0;
    spm_bigram b = { s->tok->scores[id], left, right, size };
    return s_heap_push(&s->heap, b);
}

static int s_merge_all(spm_session *s, int32_t n_sym)
{
    int rc;
    for (int32_t i = 1; i < n_sym; i++)
        if ((rc = s_try_add_bigram(s, i - 1, i)) < 0)
            return rc;
    while (s->heap.n > 0) {
        spm_bigram b = s_heap_pop(&s->heap);
        spm_symbol *l = &s->sym[b.left], *r = &s->sym[b.right];
        // one side was merged elsewhere since this pair was queued: stale
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = b.left;
        if ((rc = s_try_add_bigram(s, l->prev, b.left)) < 0 ||
            (rc = s_try_add_bigram(s, b.left, l->next)) < 0)
            return rc;
    }
    return 0;
}

// The token of one byte: "<0xNN>", else the byte itself as a string.
static int s_byte_token(const coli_tokenizer *tok, unsigned char byte, int32_t *id)
{
    static const char hex[] = "0123456789ABCDEF";
    char buf[6] = { '<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>' };
    *id = tok_find(tok, buf, sizeof(buf));
    if (*id < 0)
        *id = tok_find(tok, (const char *)&byte, 1);
    if (*id < 0)
        return coli_fail(COLI_EFORMAT, "tokenizer: vocabulary has no byte token <0x%c%c>",
                         hex[byte >> 4], hex[byte & 15]);
    return 0;
}

// Emit a final symbol: its token, or one byte token per byte.
static int s_emit(const spm_session *s, const spm_symbol *sym, tok_ids *out)
{
    int32_t id = tok_find(s->tok, s->text + sym->off, sym->n);
    if (id >= 0)
        return tok_ids_push(out, id);
    for (size_t j = 0; j < sym->n; j++) {
        int rc = s_byte_token(s->tok, (unsigned char)s->text[sym->off + j], &id);
        if (rc < 0 || (rc = tok_ids_push(out, id)) < 0)
            return rc;
    }
    return 0;
}

// ---------------------------------------------------------------------------

// " " -> U+2581 (3 bytes), with an optional leading one.
static char *s_escape(const char *text, size_t len, int space_prefix, size_t *out_len)
{
    size_t n_space = space_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++)
        n_space += text[i] == ' ';
    size_t n = len + (space_prefix ? 1 : 0) + 2 * n_space;
    char *buf = malloc(n ? n : 1), *p = buf;
    if (!buf)
        return NULL;
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

// Cut the text into UTF-8 characters (by lead byte, clipped at the end).
static int32_t s_split_chars(spm_session *s, size_t n)
{
    int32_t n_sym = 0;
    for (size_t off = 0; off < n; n_sym++) {
        size_t len = coli_utf8_len((unsigned char)s->text[off]);
        if (len > n - off)
            len = n - off;
        s->sym[n_sym] = (spm_symbol){ n_sym - 1, off + len == n ? -1 : n_sym + 1, off, len };
        off += len;
    }
    return n_sym;
}

int tok_spm_encode(const coli_tokenizer *tok, const char *text, size_t len,
                   int space_prefix, tok_ids *out)
{
    if (len > (size_t)INT32_MAX / 4)
        return coli_fail(COLI_EINVAL, "tokenizer: text of %zu bytes is too long", len);
    size_t n = 0;
    char *esc = s_escape(text, len, space_prefix, &n);
    spm_session s = { tok, esc, malloc((n ? n : 1) * sizeof(spm_symbol)), { 0 } };
    int rc = 0;
    if (!esc || !s.sym) {
        rc = coli_fail(COLI_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    int32_t n_sym = s_split_chars(&s, n);
    if ((rc = s_merge_all(&s, n_sym)) < 0)
        goto done;
    for (int32_t i = n_sym ? 0 : -1; i != -1; i = s.sym[i].next)
        if ((rc = s_emit(&s, &s.sym[i], out)) < 0)
            goto done;
done:
    free(s.heap.v);
    free(s.sym);
    free(esc);
    return rc;
}
