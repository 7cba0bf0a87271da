/*
 * tokenizer_merge.c - the pair-merge loop that SPM and BPE share (llama.cpp's
 * llm_tokenizer_spm_session and llm_tokenizer_bpe_session run the same one):
 * the text is cut into UTF-8 characters, every adjacent pair that may merge
 * is queued by priority, and the best pair (ties: the leftmost) is merged
 * until none is left. Only the priority differs: SPM asks the score of the
 * merged token, BPE the rank of the merge rule.
 */
#include <stdlib.h>

#include "core/error.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

// ---------------------------------------------------------------------------
// priority queue: highest priority first, then the leftmost pair

static int s_better(const tok_bigram *a, const tok_bigram *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

static int s_heap_push(tok_merger *m, tok_bigram b) {
    if (m->heap_n == m->heap_cap) {
        tok_bigram *v = tok_grow(m->heap, &m->heap_cap, m->heap_n + 1, sizeof(*v), 64, "merge candidates");
        if (!v) return COLI_ENOMEM;
        m->heap = v;
    }
    size_t i = m->heap_n++;
    while (i > 0 && s_better(&b, &m->heap[(i - 1) / 2])) {
        m->heap[i] = m->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->heap[i] = b;
    return 0;
}

static tok_bigram s_heap_pop(tok_merger *m) {
    tok_bigram top = m->heap[0], last = m->heap[--m->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m->heap_n) break;
        if (c + 1 < m->heap_n && s_better(&m->heap[c + 1], &m->heap[c])) c++;
        if (!s_better(&m->heap[c], &last)) break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (m->heap_n > 0) m->heap[i] = last;
    return top;
}

// ---------------------------------------------------------------------------

int32_t tok_merger_split(tok_merger *m, const char *text, size_t n) {
    if (n > (size_t)INT32_MAX) return coli_fail(COLI_EINVAL, "tokenizer: text of %zu bytes is too long", n);
    if (n > m->sym_cap) {
        tok_symbol *v = tok_grow(m->sym, &m->sym_cap, n, sizeof(*v), 0, "symbols");
        if (!v) return COLI_ENOMEM;
        m->sym = v;
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < n; n_sym++) {
        size_t len = coli_utf8_len((unsigned char)text[off]);
        if (len > n - off) len = n - off;
        m->sym[n_sym] = (tok_symbol){n_sym - 1, off + len == n ? -1 : n_sym + 1, off, len};
        off += len;
    }
    return n_sym;
}

/* Queue the merge of symbols left and right if the pair may merge. */
static int s_try_add_bigram(tok_merger *m, const coli_tokenizer *tok, const char *text, tok_pair_fn pair, int32_t left,
                            int32_t right) {
    if (left < 0 || right < 0) return 0;
    const tok_symbol *l = &m->sym[left], *r = &m->sym[right];
    double priority;
    // adjacent symbols are adjacent spans: the pair is text[l->off, r->off + r->n)
    if (!pair(tok, text + l->off, l->n, r->n, &priority)) return 0;
    tok_bigram b = {priority, left, right, l->n + r->n};
    return s_heap_push(m, b);
}

int tok_merger_run(tok_merger *m, const coli_tokenizer *tok, const char *text, int32_t n_sym, tok_pair_fn pair) {
    int rc;
    m->heap_n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if ((rc = s_try_add_bigram(m, tok, text, pair, i - 1, i)) < 0) return rc;
    while (m->heap_n > 0) {
        tok_bigram b = s_heap_pop(m);
        tok_symbol *l = &m->sym[b.left], *r = &m->sym[b.right];
        // one side was merged elsewhere since this pair was queued: stale
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) m->sym[r->next].prev = b.left;
        if ((rc = s_try_add_bigram(m, tok, text, pair, l->prev, b.left)) < 0 ||
            (rc = s_try_add_bigram(m, tok, text, pair, b.left, l->next)) < 0)
            return rc;
    }
    return 0;
}

void tok_merger_free(tok_merger *m) {
    free(m->sym);
    free(m->heap);
    *m = (tok_merger){0};
}
