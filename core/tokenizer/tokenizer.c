/*
 * tokenizer.c - the vocabulary from GGUF metadata, and the public
 * tokenizer API (see tokenizer.h). The models live in tokenizer_spm.c and
 * tokenizer_bpe.c, special tokens in tokenizer_special.c. Every rule here
 * follows llama.cpp's llama_vocab (commit c392e509) so ids match exactly.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

// ---------------------------------------------------------------------------
// hashing: FNV-1a over bytes (hash.h), open addressing with linear probing

static int s_hash_init(tok_hash *h, size_t n_keys) {
    size_t cap = 16;
    while (cap < 2 * n_keys) cap *= 2;
    h->slots = calloc(cap, sizeof(uint32_t));
    h->mask = cap - 1;
    if (!h->slots) return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (hash of %zu keys)", n_keys);
    return 0;
}

int32_t tok_find(const coli_tokenizer *tok, const char *s, size_t n) {
    const tok_hash *h = &tok->text_to_id;
    for (size_t i = coli_fnv1a(s, n, COLI_FNV1A_SEED) & h->mask;; i = (i + 1) & h->mask) {
        uint32_t v = h->slots[i];
        if (v == 0) return -1;
        int32_t id = (int32_t)(v - 1);
        if (tok->text_len[id] == n && memcmp(tok->text_blob + tok->text_off[id], s, n) == 0) return id;
    }
}

static uint64_t s_merge_hash(const char *l, size_t ln, const char *r, size_t rn) {
    // the separator keeps ("ab","c") and ("a","bc") apart
    return coli_fnv1a(r, rn, coli_fnv1a("\xFF", 1, coli_fnv1a(l, ln, COLI_FNV1A_SEED)));
}

int32_t tok_merge_rank(const coli_tokenizer *tok, const char *l, size_t ln, const char *r, size_t rn) {
    const tok_hash *h = &tok->merge_rank;
    for (size_t i = s_merge_hash(l, ln, r, rn) & h->mask;; i = (i + 1) & h->mask) {
        uint32_t v = h->slots[i];
        if (v == 0) return -1;
        const tok_merge *m = &tok->merges[v - 1];
        if (m->left_len == ln && m->right_len == rn && memcmp(tok->merge_blob + m->left_off, l, ln) == 0 &&
            memcmp(tok->merge_blob + m->right_off, r, rn) == 0)
            return (int32_t)(v - 1);
    }
}

void *tok_grow(void *v, size_t *cap, size_t need, size_t elem, size_t min_cap, const char *what) {
    if (need <= *cap) return v;
    size_t n = *cap * 2 > need ? *cap * 2 : need;
    if (n < min_cap) n = min_cap;
    void *grown = n <= SIZE_MAX / elem ? realloc(v, n * elem) : NULL;
    if (!grown) {
        coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%zu %s)", n, what);
        return NULL;
    }
    *cap = n;
    return grown;
}

int tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        int32_t *v = tok_grow(ids->v, &ids->cap, ids->n + 1, sizeof(*v), 256, "tokens");
        if (!v) return COLI_ENOMEM;
        ids->v = v;
    }
    ids->v[ids->n++] = id;
    return 0;
}

// ---------------------------------------------------------------------------
// loading: model kind and pre-tokenizer

static int s_str_eq(gguf_str s, const char *c) { return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0; }

/* tokenizer.ggml.pre: llama.cpp warns and uses "default" when it is absent. */
static int s_load_pre(coli_tokenizer *tok, const gguf_file *f) {
    gguf_str pre = {"default", 7};
    if (gguf_find_key(f, KEY_PRE) >= 0) {
        int rc = gguf_get_str(f, KEY_PRE, &pre);
        if (rc < 0) return rc;
    }
    return tok_pre_setup(tok, pre.ptr, (size_t)pre.len);
}

static int s_load_kind(coli_tokenizer *tok, const gguf_file *f) {
    gguf_str model;
    if (gguf_find_key(f, KEY_MODEL) < 0)
        return coli_fail(COLI_EFORMAT, "no tokenizer: %s is missing (the file carries no vocabulary)", KEY_MODEL);
    int rc = gguf_get_str(f, KEY_MODEL, &model);
    if (rc < 0) return rc;
    if (s_str_eq(model, "llama")) {
        // SPM defaults (llama.cpp): BOS 1, EOS 2, UNK 0, add BOS, space prefix
        tok->kind = TOK_SPM;
        tok->bos = 1, tok->eos = 2, tok->unk = 0;
        tok->add_bos = 1, tok->add_space_prefix = 1;
        return 0;
    }
    if (s_str_eq(model, "gpt2")) {
        tok->kind = TOK_BPE;
        tok->bos = 11, tok->eos = 11, tok->unk = -1;
        return s_load_pre(tok, f);
    }
    return coli_fail(COLI_EUNSUPPORTED, "%s: unknown tokenizer model '%.*s' (supported: llama, gpt2)", KEY_MODEL,
                     (int)(model.len > 64 ? 64 : model.len), model.ptr);
}

// ---------------------------------------------------------------------------
// loading: vocabulary

/* An optional per-token array of elem_type (or alt) with at least n entries. */
static int s_token_array(const gguf_file *f, const char *key, gguf_type elem_type, gguf_type alt, uint64_t n,
                         gguf_type *type, const void **data) {
    uint64_t count;
    *data = NULL;
    if (gguf_find_key(f, key) < 0) return 0;
    int rc = gguf_get_arr(f, key, type, &count, data);
    if (rc < 0) return rc;
    if (*type != elem_type && *type != alt)
        return coli_fail(COLI_EFORMAT, "%s: array of type %d, expected type %d", key, (int)*type, (int)elem_type);
    if (count < n)
        return coli_fail(COLI_EFORMAT, "%s: %llu entries for %llu tokens", key, (unsigned long long)count,
                         (unsigned long long)n);
    return 0;
}

static uint8_t s_attr_of_type(int32_t type) {
    switch (type) {
    case 1: return TOK_ATTR_NORMAL;
    case 2: return TOK_ATTR_UNKNOWN;
    case 3: return TOK_ATTR_CONTROL;
    case 4: return TOK_ATTR_USER_DEFINED;
    case 5: return TOK_ATTR_UNUSED;
    case 6: return TOK_ATTR_BYTE;
    default: return 0; // undefined
    }
}

/* Scores and token types (both optional; default score 0, type normal). */
static int s_load_scores_types(coli_tokenizer *tok, const gguf_file *f) {
    gguf_type st, tt;
    const void *sdata, *tdata;
    uint64_t n = (uint64_t)tok->n_vocab;
    int rc = s_token_array(f, KEY_SCORES, GGUF_FLOAT32, GGUF_INT32, n, &st, &sdata);
    if (rc < 0 || (rc = s_token_array(f, KEY_TYPES, GGUF_INT32, GGUF_INT32, n, &tt, &tdata)) < 0) return rc;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        // elements may be unaligned inside the mapping: copy them out
        float score = 0.0f;
        int32_t v;
        if (sdata && st == GGUF_FLOAT32) {
            memcpy(&score, (const char *)sdata + 4 * (size_t)i, 4);
        } else if (sdata) {
            memcpy(&v, (const char *)sdata + 4 * (size_t)i, 4);
            score = (float)v;
        }
        tok->scores[i] = score;
        tok->attr[i] = TOK_ATTR_NORMAL;
        if (tdata) {
            memcpy(&v, (const char *)tdata + 4 * (size_t)i, 4);
            tok->attr[i] = s_attr_of_type(v);
        }
    }
    return 0;
}

/* Copy the vocabulary strings into one blob ("" becomes "[EMPTY_<id>]"). */
static int s_copy_texts(coli_tokenizer *tok, const gguf_file *f) {
    size_t total = 0;
    gguf_str s;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        int rc = gguf_arr_str(f, KEY_TOKENS, (uint64_t)i, &s);
        if (rc < 0) return rc;
        if (s.len > UINT32_MAX / 2)
            return coli_fail(COLI_EFORMAT, "%s: token %d is %llu bytes long", KEY_TOKENS, i, (unsigned long long)s.len);
        total += (s.len ? s.len : 32) + 1;
    }
    if (!(tok->text_blob = malloc(total)))
        return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%zu bytes of vocabulary)", total);
    size_t off = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        gguf_arr_str(f, KEY_TOKENS, (uint64_t)i, &s);
        char *dst = tok->text_blob + off;
        size_t len = s.len;
        if (len == 0)
            len = (size_t)snprintf(dst, 32, "[EMPTY_%d]", i);
        else
            memcpy(dst, s.ptr, len);
        dst[len] = '\0';
        tok->text_off[i] = off;
        tok->text_len[i] = (uint32_t)len;
        off += len + 1;
    }
    return 0;
}

static int s_index_texts(coli_tokenizer *tok) {
    int rc = s_hash_init(&tok->text_to_id, (size_t)tok->n_vocab);
    if (rc < 0) return rc;
    const tok_hash *h = &tok->text_to_id;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const char *t = tok->text_blob + tok->text_off[id];
        int32_t other = tok_find(tok, t, tok->text_len[id]);
        if (other >= 0)
            return coli_fail(COLI_EFORMAT, "%s: duplicate token '%.64s' (ids %d and %d)", KEY_TOKENS, t, other, id);
        size_t i = coli_fnv1a(t, tok->text_len[id], COLI_FNV1A_SEED) & h->mask;
        while (h->slots[i]) i = (i + 1) & h->mask;
        h->slots[i] = (uint32_t)id + 1;
    }
    return 0;
}

static int s_load_vocab(coli_tokenizer *tok, const gguf_file *f) {
    gguf_type type;
    uint64_t n;
    const void *data;
    if (gguf_find_key(f, KEY_TOKENS) < 0)
        return coli_fail(COLI_EFORMAT, "%s: missing (the file has no vocabulary)", KEY_TOKENS);
    int rc = gguf_get_arr(f, KEY_TOKENS, &type, &n, &data);
    if (rc < 0) return rc;
    if (type != GGUF_STRING)
        return coli_fail(COLI_EFORMAT, "%s: array of type %d, expected strings", KEY_TOKENS, (int)type);
    if (n == 0 || n > (uint64_t)INT32_MAX - 1)
        return coli_fail(COLI_EFORMAT, "%s: %llu tokens", KEY_TOKENS, (unsigned long long)n);
    tok->n_vocab = (int32_t)n;
    tok->text_off = malloc(n * sizeof(size_t));
    tok->text_len = malloc(n * sizeof(uint32_t));
    tok->scores = malloc(n * sizeof(float));
    tok->attr = malloc(n);
    if (!tok->text_off || !tok->text_len || !tok->scores || !tok->attr)
        return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%llu tokens)", (unsigned long long)n);
    if ((rc = s_copy_texts(tok, f)) < 0 || (rc = s_index_texts(tok)) < 0) return rc;
    return s_load_scores_types(tok, f);
}

// ---------------------------------------------------------------------------
// loading: BPE merges "left right", rank = position in the list

static int s_insert_merge(coli_tokenizer *tok, uint32_t rank) {
    const tok_merge *m = &tok->merges[rank];
    const char *l = tok->merge_blob + m->left_off, *r = tok->merge_blob + m->right_off;
    if (tok_merge_rank(tok, l, m->left_len, r, m->right_len) >= 0) return 0; // a repeated rule keeps its first rank
    const tok_hash *h = &tok->merge_rank;
    size_t i = s_merge_hash(l, m->left_len, r, m->right_len) & h->mask;
    while (h->slots[i]) i = (i + 1) & h->mask;
    h->slots[i] = rank + 1;
    return 0;
}

static int s_load_merges(coli_tokenizer *tok, const gguf_file *f) {
    gguf_type type = GGUF_STRING;
    uint64_t n = 0;
    const void *data;
    gguf_str s;
    int rc = 0;
    // Kimi K2 files may carry none (llama.cpp then merges nothing: every
    // word goes character by character, or byte by byte)
    if (gguf_find_key(f, KEY_MERGES) < 0 && !tok->merges_optional)
        return coli_fail(COLI_EFORMAT, "%s: missing (a gpt2 tokenizer needs its merges)", KEY_MERGES);
    if (gguf_find_key(f, KEY_MERGES) >= 0 && (rc = gguf_get_arr(f, KEY_MERGES, &type, &n, &data)) < 0) return rc;
    if (type != GGUF_STRING)
        return coli_fail(COLI_EFORMAT, "%s: array of type %d, expected strings", KEY_MERGES, (int)type);
    if (n > (uint64_t)INT32_MAX - 1)
        return coli_fail(COLI_EFORMAT, "%s: %llu merges", KEY_MERGES, (unsigned long long)n);
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if ((rc = gguf_arr_str(f, KEY_MERGES, i, &s)) < 0) return rc;
        total += s.len;
        if (total > UINT32_MAX / 2)
            return coli_fail(COLI_EFORMAT, "%s: merges too large (%zu bytes)", KEY_MERGES, total);
    }
    tok->merge_blob = malloc(total ? total : 1);
    tok->merges = calloc(n ? n : 1, sizeof(tok_merge));
    tok->n_merges = (uint32_t)n;
    if (!tok->merge_blob || !tok->merges || (rc = s_hash_init(&tok->merge_rank, n)) < 0)
        return rc < 0 ? rc : coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%zu bytes of merges)", total);
    uint32_t off = 0;
    for (uint32_t i = 0; i < tok->n_merges; i++) {
        gguf_arr_str(f, KEY_MERGES, i, &s);
        memcpy(tok->merge_blob + off, s.ptr, s.len);
        // split at the first space after the first byte (llama.cpp: find(' ', 1))
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (sp) {
            uint32_t pos = (uint32_t)(sp - s.ptr);
            tok->merges[i] = (tok_merge){off, pos, off + pos + 1, (uint32_t)s.len - pos - 1};
            s_insert_merge(tok, i);
        }
        off += (uint32_t)s.len;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// loading: special ids and flags

/* An id key: kept only when in range (llama.cpp warns and keeps the default). */
static void s_load_id(coli_tokenizer *tok, const gguf_file *f, const char *key, int32_t *id) {
    int64_t v;
    if (*id >= tok->n_vocab) *id = -1;
    if (gguf_find_key(f, key) >= 0 && gguf_get_i64(f, key, &v) == 0 && v >= 0 && v < tok->n_vocab) *id = (int32_t)v;
}

static int s_load_flag(const gguf_file *f, const char *key, int *flag) {
    return gguf_find_key(f, key) < 0 ? 0 : gguf_get_bool(f, key, flag);
}

static int s_load_special_ids(coli_tokenizer *tok, const gguf_file *f) {
    s_load_id(tok, f, "tokenizer.ggml.bos_token_id", &tok->bos);
    s_load_id(tok, f, "tokenizer.ggml.eos_token_id", &tok->eos);
    s_load_id(tok, f, "tokenizer.ggml.unknown_token_id", &tok->unk);
    int rc = s_load_flag(f, "tokenizer.ggml.add_space_prefix", &tok->add_space_prefix);
    if (rc < 0 || (rc = s_load_flag(f, "tokenizer.ggml.add_bos_token", &tok->add_bos)) < 0 ||
        (rc = s_load_flag(f, "tokenizer.ggml.add_eos_token", &tok->add_eos)) < 0)
        return rc;
    if (tok->add_bos && tok->bos < 0)
        return coli_fail(COLI_EFORMAT, "tokenizer.ggml.add_bos_token is true, but there is no BOS token");
    if (tok->add_eos && tok->eos < 0)
        return coli_fail(COLI_EFORMAT, "tokenizer.ggml.add_eos_token is true, but there is no EOS token");
    return 0;
}

// ---------------------------------------------------------------------------
// pieces: the bytes each token stands for (llama.cpp's token_to_piece
// without special: control and unknown tokens give nothing)

static int s_hex(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* "<0xNN>" -> the byte (the hex digits that parse, as strtol). */
static char s_byte_of(const char *t, uint32_t len) {
    int v = 0;
    for (uint32_t i = 3; i < 5 && i < len && s_hex(t[i]) >= 0; i++) v = v * 16 + s_hex(t[i]);
    return (char)v;
}

/* The piece of one token into a malloc'ed buffer. */
static int s_piece_of(const coli_tokenizer *tok, int32_t id, char **out, size_t *n) {
    const char *t = tok->text_blob + tok->text_off[id];
    uint32_t len = tok->text_len[id];
    uint8_t a = tok->attr[id];
    *n = 0;
    for (int k = 0; k < tok->n_shown; k++)
        if (tok->shown[k] == id) a = TOK_ATTR_USER_DEFINED; /* rendered as its text */
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL) || !(a & (TOK_ATTR_USER_DEFINED | TOK_ATTR_NORMAL | TOK_ATTR_BYTE)))
        return (*out = malloc(1)) ? 0 : coli_fail(COLI_ENOMEM, "tokenizer: out of memory");
    if (tok->kind == TOK_BPE && !(a & TOK_ATTR_USER_DEFINED) && (a & TOK_ATTR_NORMAL))
        return tok_bpe_decode_text(t, len, out, n);
    if (!(*out = malloc(len + 1))) return coli_fail(COLI_ENOMEM, "tokenizer: out of memory");
    if (a & TOK_ATTR_USER_DEFINED) {
        memcpy(*out, t, len);
        *n = len;
    } else if (a & TOK_ATTR_NORMAL) { // SPM: U+2581 -> ' '
        for (uint32_t i = 0; i < len; i++) {
            int esc = i + 3 <= len && memcmp(t + i, "\xE2\x96\x81", 3) == 0;
            (*out)[(*n)++] = esc ? ' ' : t[i];
            i += esc ? 2 : 0;
        }
    } else {
        (*out)[(*n)++] = s_byte_of(t, len);
    }
    return 0;
}

static int s_build_pieces(coli_tokenizer *tok) {
    size_t cap = 1024, used = 0;
    tok->piece_off = malloc((size_t)tok->n_vocab * sizeof(size_t));
    tok->piece_len = malloc((size_t)tok->n_vocab * sizeof(uint32_t));
    tok->piece_blob = malloc(cap);
    if (!tok->piece_off || !tok->piece_len || !tok->piece_blob)
        return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%d token pieces)", tok->n_vocab);
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        char *p;
        size_t n;
        int rc = s_piece_of(tok, id, &p, &n);
        if (rc < 0) return rc;
        char *b = tok_grow(tok->piece_blob, &cap, used + n, 1, 0, "bytes of pieces");
        if (!b) {
            free(p);
            return COLI_ENOMEM;
        }
        tok->piece_blob = b;
        memcpy(tok->piece_blob + used, p, n);
        free(p);
        tok->piece_off[id] = used;
        tok->piece_len[id] = (uint32_t)n;
        used += n;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// lifecycle

static void s_build_byte_map(coli_tokenizer *tok) {
    for (int b = 0; b < 256; b++)
        tok->byte_enc_len[b] = (uint8_t)coli_utf8_encode(coli_gpt2_byte_to_cpt((uint8_t)b), tok->byte_enc[b]);
}

int coli_tokenizer_new(const gguf_file *f, coli_tokenizer **out) {
    if (!f || !out) return coli_fail(COLI_EINVAL, "coli_tokenizer_new: NULL argument");
    *out = NULL;
    coli_tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok) return coli_fail(COLI_ENOMEM, "tokenizer: out of memory");
    int rc = s_load_kind(tok, f);
    if (rc < 0 || (rc = s_load_vocab(tok, f)) < 0) goto fail;
    if (tok->kind == TOK_BPE && (rc = s_load_merges(tok, f)) < 0) goto fail;
    if ((rc = s_load_special_ids(tok, f)) < 0 || (rc = tok_setup_special(tok, f)) < 0 || (rc = s_build_pieces(tok)) < 0)
        goto fail;
    s_build_byte_map(tok);
    *out = tok;
    return 0;
fail:
    coli_tokenizer_free(&tok);
    return rc;
}

void coli_tokenizer_free(coli_tokenizer **tok_p) {
    if (!tok_p || !*tok_p) return;
    coli_tokenizer *tok = *tok_p;
    free(tok->text_blob);
    free(tok->text_off);
    free(tok->text_len);
    free(tok->scores);
    free(tok->attr);
    free(tok->text_to_id.slots);
    free(tok->piece_blob);
    free(tok->piece_off);
    free(tok->piece_len);
    free(tok->merge_blob);
    free(tok->merges);
    free(tok->merge_rank.slots);
    free(tok->special);
    free(tok->is_eog);
    tok_pre_free(tok);
    free(tok);
    *tok_p = NULL;
}

// ---------------------------------------------------------------------------
// queries

int32_t coli_tokenizer_n_vocab(const coli_tokenizer *tok) { return tok->n_vocab; }
int32_t coli_tokenizer_bos(const coli_tokenizer *tok) { return tok->bos; }
int32_t coli_tokenizer_eos(const coli_tokenizer *tok) { return tok->eos; }
int coli_tokenizer_add_bos(const coli_tokenizer *tok) { return tok->add_bos; }

int coli_tokenizer_is_eog(const coli_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && tok->is_eog[id];
}

const char *coli_tokenizer_model(const coli_tokenizer *tok) { return tok->kind == TOK_SPM ? "llama" : "gpt2"; }

const char *coli_tokenizer_text(const coli_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab ? tok->text_blob + tok->text_off[id] : NULL;
}

int coli_tokenizer_bytes(const coli_tokenizer *tok, int32_t id, const char **bytes, size_t *len) {
    if (id < 0 || id >= tok->n_vocab)
        return coli_fail(COLI_ERANGE, "token id %d out of range (vocabulary of %d)", id, tok->n_vocab);
    *bytes = tok->piece_blob + tok->piece_off[id];
    *len = tok->piece_len[id];
    return 0;
}

// ---------------------------------------------------------------------------
// encoding (llama.cpp's llama_vocab::impl::tokenize)

static int s_encode_fragments(const coli_tokenizer *tok, const char *text, const tok_fragment *fr, size_t n_fr,
                              tok_ids *out) {
    // SPM: a raw fragment at the start or right after a special token gets
    // the space prefix (so "<s>Hello" -> <s> "▁Hello")
    int prev_special = 1;
    for (size_t k = 0; k < n_fr; k++) {
        int rc;
        if (fr[k].token >= 0)
            rc = tok_ids_push(out, fr[k].token);
        else if (tok->kind == TOK_SPM)
            rc = tok_spm_encode(tok, text + fr[k].off, fr[k].len, tok->add_space_prefix && prev_special, out);
        else
            rc = tok_bpe_encode(tok, text + fr[k].off, fr[k].len, out);
        if (rc < 0) return rc;
        prev_special = fr[k].token >= 0;
    }
    return 0;
}

static int s_encode(const coli_tokenizer *tok, const char *text, size_t len, int add_special, int parse_special,
                    const tok_plain *plain, tok_ids *out) {
    tok_fragment *fr = NULL;
    size_t n_fr = 0;
    int rc = tok_partition(tok, text, len, parse_special, plain, &fr, &n_fr);
    if (rc < 0) return rc;
    if (add_special && tok->add_bos) rc = tok_ids_push(out, tok->bos);
    if (rc == 0) rc = s_encode_fragments(tok, text, fr, n_fr, out);
    if (rc == 0 && add_special && tok->add_eos) rc = tok_ids_push(out, tok->eos);
    free(fr);
    return rc;
}

static int s_encode_into(const coli_tokenizer *tok, const char *text, size_t len, int add_special, int parse_special,
                         const tok_plain *plain, int32_t *ids, int cap, int *n_out) {
    if (!tok || !n_out || (!text && len) || cap < 0 || (!ids && cap > 0))
        return coli_fail(COLI_EINVAL, "coli_tokenizer_encode: bad argument (NULL pointer or cap %d)", cap);
    tok_ids out = {0};
    int rc = s_encode(tok, text, len, add_special, parse_special, plain, &out);
    if (rc == 0 && out.n > INT_MAX)
        rc = coli_fail(COLI_ERANGE, "tokenizer: %zu tokens, more than an int can count", out.n);
    if (rc == 0) {
        *n_out = (int)out.n;
        if (out.n && cap > 0) memcpy(ids, out.v, (out.n < (size_t)cap ? out.n : (size_t)cap) * sizeof(int32_t));
        if (out.n > (size_t)cap) rc = coli_fail(COLI_ERANGE, "tokenizer: %zu tokens do not fit in %d", out.n, cap);
    }
    free(out.v);
    return rc;
}

int coli_tokenizer_encode(const coli_tokenizer *tok, const char *text, size_t len, int add_special, int parse_special,
                          int32_t *ids, int cap, int *n_out) {
    return s_encode_into(tok, text, len, add_special, parse_special, NULL, ids, cap, n_out);
}

int coli_tokenizer_encode_plain(const coli_tokenizer *tok, const char *text, size_t len, int add_special,
                                const coli_text_span *plain, int n_plain, int32_t *ids, int cap, int *n_out) {
    if (n_plain < 0 || (!plain && n_plain > 0))
        return coli_fail(COLI_EINVAL, "coli_tokenize_plain: %d plain ranges at %p", n_plain, (const void *)plain);
    for (int i = 0; i < n_plain; i++) { /* in order, inside the text: s_in_plain searches them */
        size_t start = i ? plain[i - 1].off + plain[i - 1].len : 0;
        if (plain[i].off < start || plain[i].off > len || plain[i].len > len - plain[i].off)
            return coli_fail(COLI_EINVAL,
                             "coli_tokenize_plain: range %d (%zu + %zu) overlaps the one before or ends past the %zu "
                             "bytes of the text",
                             i, plain[i].off, plain[i].len, len);
    }
    tok_plain guard = {plain, (size_t)n_plain};
    return s_encode_into(tok, text, len, add_special, 1, &guard, ids, cap, n_out);
}

// ---------------------------------------------------------------------------
// streaming UTF-8 assembly

/* Bytes a lead byte announces: 1 for ASCII, 2..4 for a valid lead, 0 for a
 * byte that cannot start a character (continuation, 0xC0/0xC1, 0xF5..0xFF). */
static int s_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

static int s_is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

size_t coli_utf8_stream_push(coli_utf8_stream *s, const char *bytes, size_t len, char *out) {
    size_t n_out = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)bytes[i];
        if (s->n_pending > 0 && s_is_cont(b)) {
            s->pending[s->n_pending++] = (char)b;
            if (s->n_pending == s_seq_len((unsigned char)s->pending[0])) {
                memcpy(out + n_out, s->pending, (size_t)s->n_pending);
                n_out += (size_t)s->n_pending;
                s->n_pending = 0;
            }
            continue;
        }
        // an unfinished sequence broken by this byte passes through as is
        n_out += coli_utf8_stream_flush(s, out + n_out);
        int need = s_seq_len(b);
        if (need <= 1)
            out[n_out++] = (char)b; // ASCII, or an invalid byte passed through
        else
            s->pending[s->n_pending++] = (char)b;
    }
    return n_out;
}

size_t coli_utf8_stream_flush(coli_utf8_stream *s, char *out) {
    size_t n = (size_t)s->n_pending;
    memcpy(out, s->pending, n);
    s->n_pending = 0;
    return n;
}
