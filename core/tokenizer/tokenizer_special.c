/*
 * tokenizer_special.c - special tokens, as llama.cpp's llama_vocab::load
 * and tokenizer_st_partition:
 *  - roles (EOT, EOM, FIM ...) come from metadata, or else from well-known
 *    token texts; a token found by its text is marked control;
 *  - end-of-generation ids: EOS, EOT, EOM, FIM pad/repo/sep and the tokens
 *    with well-known end texts;
 *  - the special tokens (control, user-defined, unknown) are matched in the
 *    text, longest first; each one splits every raw fragment at all its
 *    occurrences. User-defined tokens are matched even without
 *    parse_special (like HF tokenizers' added tokens), control and unknown
 *    ones only with it, and not inside the plain ranges of
 *    coli_tokenize_plain (message text in a chat prompt). A token marked
 *    rstrip/lstrip also eats the white space after/before it (llama.cpp
 *    sets that only for Phi-3 models).
 */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tokenizer/tokenizer_impl.h"

// ---------------------------------------------------------------------------
// roles

static const char *const k_eot_texts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "[EOT]",
                                          "<EOT>",
                                          "_<EOT>",
                                          "<\xEF\xBD\x9C"
                                          "end\xE2\x96\x81"
                                          "of\xE2\x96\x81"
                                          "sentence\xEF\xBD\x9C>",
                                          NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>",
                                              "<\xEF\xBD\x9C"
                                              "fim\xE2\x96\x81"
                                              "begin\xEF\xBD\x9C>",
                                              "<PRE>", NULL};
static const char *const k_fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>",
                                              "<\xEF\xBD\x9C"
                                              "fim\xE2\x96\x81"
                                              "hole\xEF\xBD\x9C>",
                                              "<SUF>", NULL};
static const char *const k_fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>",
                                              "<\xEF\xBD\x9C"
                                              "fim\xE2\x96\x81"
                                              "end\xEF\xBD\x9C>",
                                              "<MID>", NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};

/* Token texts that end generation (llama.cpp de3ff815's list, less the
 * tokens of families colibri does not run): gpt-oss's <|return|> and
 * <|call|>, Kimi's [EOT] and [EOS], MiniMax's [e~[. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>",    "<|end|>",         "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>",  "<end_of_turn>", "<|endoftext|>",   "<|eom_id|>", "<EOT>",    "_<EOT>",
    "[EOT]",      "[EOS]",         "<|end_of_text|>", "[e~[",       NULL};

typedef struct tok_role {
    const char *key;          /* metadata key of the id */
    const char *key_old;      /* deprecated key, NULL if none */
    const char *const *texts; /* texts that identify it when the key is absent */
    int eog;                  /* ends generation */
} tok_role;

static const tok_role k_roles[] = {
    {"tokenizer.ggml.eot_token_id", NULL, k_eot_texts, 1},
    {"tokenizer.ggml.eom_token_id", NULL, k_eom_texts, 1},
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", k_fim_pre_texts, 0},
    {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", k_fim_suf_texts, 0},
    {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", k_fim_mid_texts, 0},
    {"tokenizer.ggml.fim_pad_token_id", NULL, k_fim_pad_texts, 1},
    {"tokenizer.ggml.fim_rep_token_id", NULL, k_fim_rep_texts, 1},
    {"tokenizer.ggml.fim_sep_token_id", NULL, k_fim_sep_texts, 1},
};

static int s_text_in(const coli_tokenizer *tok, int32_t id, const char *const *texts) {
    const char *t = tok->text_blob + tok->text_off[id];
    for (; *texts; texts++)
        if (strlen(*texts) == tok->text_len[id] && memcmp(*texts, t, tok->text_len[id]) == 0) return 1;
    return 0;
}

/* An id from metadata: -1 if absent or out of range (llama.cpp ignores those). */
static int32_t s_meta_id(const coli_tokenizer *tok, const gguf_file *f, const char *key) {
    int64_t v;
    if (!key || gguf_find_key(f, key) < 0 || gguf_get_i64(f, key, &v) < 0) return -1;
    return v >= 0 && v < tok->n_vocab ? (int32_t)v : -1;
}

/* The role's id from metadata, else the first token with one of its texts
 * (which then becomes a control token). */
static int32_t s_find_role(coli_tokenizer *tok, const gguf_file *f, const tok_role *role) {
    int32_t id = s_meta_id(tok, f, role->key);
    int32_t id_old = s_meta_id(tok, f, role->key_old);
    if (id >= 0 || id_old >= 0) return id >= 0 ? id : id_old;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        if (s_text_in(tok, i, role->texts)) {
            tok->attr[i] |= TOK_ATTR_CONTROL;
            return i;
        }
    }
    return -1;
}

static void s_setup_eog(coli_tokenizer *tok, const gguf_file *f) {
    for (size_t r = 0; r < sizeof(k_roles) / sizeof(k_roles[0]); r++) {
        int32_t id = s_find_role(tok, f, &k_roles[r]);
        if (id >= 0 && k_roles[r].eog) tok->is_eog[id] = 1;
    }
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        if (s_text_in(tok, i, k_eog_texts)) {
            tok->is_eog[i] = 1;
            tok->attr[i] |= TOK_ATTR_CONTROL;
        }
    }
    if (tok->eos >= 0) tok->is_eog[tok->eos] = 1;
}

/* The id of text if it ends generation, else -1. */
static int32_t s_eog_id(const coli_tokenizer *tok, const char *text) {
    int32_t id = tok_find(tok, text, strlen(text));
    return id >= 0 && tok->is_eog[id] ? id : -1;
}

static void s_show(coli_tokenizer *tok, int32_t id) {
    if (id >= 0 && tok->n_shown < TOK_MAX_SHOWN) tok->shown[tok->n_shown++] = id;
}

/* gpt-oss's harmony format (o200k_harmony), as llama.cpp: the markers of a
 * message's header are rendered, so the reasoning split sees them in the
 * generated text; and where <|return|> and <|call|> end generation, <|end|>
 * only ends one message (the analysis before the final answer): it is no
 * end of generation and is rendered too. Solar Open's <|calls|> and
 * <|flush|> do the same to its <|end|>. llama.cpp makes these tokens
 * user-defined, which also matches them in a message's text; here they stay
 * control tokens there (a message cannot forge a turn) and are only shown. */
static void s_harmony_markers(coli_tokenizer *tok) {
    static const char *const rendered[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t k = 0; k < sizeof(rendered) / sizeof(rendered[0]); k++)
        s_show(tok, tok_find(tok, rendered[k], strlen(rendered[k])));
    int32_t end = s_eog_id(tok, "<|end|>");
    int has_call = s_eog_id(tok, "<|call|>") >= 0 || s_eog_id(tok, "<|calls|>") >= 0;
    int has_return_or_flush = s_eog_id(tok, "<|return|>") >= 0 || s_eog_id(tok, "<|flush|>") >= 0;
    if (end >= 0 && has_call && has_return_or_flush) {
        tok->is_eog[end] = 0;
        s_show(tok, end);
    }
}

/* Kimi K3's section markers (<|open|>think<|sep|> ... <|close|>think<|sep|>), which
 * llama.cpp's Kimi K3 parser keeps in the text (preserved tokens): shown, in a
 * vocabulary that has all of them and <|end_of_msg|>. */
static void s_kimi_markers(coli_tokenizer *tok) {
    static const char *const markers[] = {"<|open|>", "<|close|>", "<|sep|>"};
    int32_t id[3];
    if (tok_find(tok, "<|end_of_msg|>", 14) < 0) return;
    for (int k = 0; k < 3; k++)
        if ((id[k] = tok_find(tok, markers[k], strlen(markers[k]))) < 0) return;
    for (int k = 0; k < 3; k++) s_show(tok, id[k]);
}

/* Phi-3 (by general.name, as llama.cpp): special tokens eat the white space
 * after them, except <unk>, <s> and <|endoftext|>; </s> does too. */
static void s_phi3_rstrip(coli_tokenizer *tok, const gguf_file *f) {
    gguf_str name;
    char lower[256];
    if (gguf_find_key(f, "general.name") < 0 || gguf_get_str(f, "general.name", &name) < 0) return;
    size_t n = name.len < sizeof(lower) - 1 ? name.len : sizeof(lower) - 1;
    for (size_t i = 0; i < n; i++) lower[i] = (char)tolower((unsigned char)name.ptr[i]);
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3")) return;
    for (int32_t i = 0; i < tok->n_special; i++) tok->attr[tok->special[i]] |= TOK_ATTR_RSTRIP;
    int32_t id = tok_find(tok, "</s>", 4);
    if (id >= 0) tok->attr[id] |= TOK_ATTR_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++)
        if ((id = tok_find(tok, keep[k], strlen(keep[k]))) >= 0) tok->attr[id] &= (uint8_t)~TOK_ATTR_RSTRIP;
}

// ---------------------------------------------------------------------------
// the special-token list, longest first

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int s_cmp_len_desc(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int tok_setup_special(coli_tokenizer *tok, const gguf_file *f) {
    tok->is_eog = calloc((size_t)tok->n_vocab, 1);
    if (!tok->is_eog) return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%d tokens)", tok->n_vocab);
    s_setup_eog(tok, f);
    s_harmony_markers(tok);
    s_kimi_markers(tok);

    const uint8_t special = TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN;
    int32_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) n += (tok->attr[i] & special) != 0;
    len_id *list = malloc((n ? (size_t)n : 1) * sizeof(*list));
    tok->special = malloc((n ? (size_t)n : 1) * sizeof(int32_t));
    if (!list || !tok->special) {
        free(list);
        return coli_fail(COLI_ENOMEM, "tokenizer: out of memory (%d special tokens)", n);
    }
    n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if (tok->attr[i] & special) list[n++] = (len_id){tok->text_len[i], i};
    // llama.cpp sorts by length only (std::sort, not stable); equal lengths
    // keep id order here. Only overlapping equal-length tokens could tell.
    qsort(list, (size_t)n, sizeof(*list), s_cmp_len_desc);
    for (int32_t i = 0; i < n; i++) tok->special[i] = list[i].id;
    tok->n_special = n;
    free(list);
    s_phi3_rstrip(tok, f);
    return 0;
}

// ---------------------------------------------------------------------------
// partition

typedef struct frag_list {
    tok_fragment *v;
    size_t n, cap;
} frag_list;

static int s_frag_push(frag_list *l, int32_t token, size_t off, size_t len) {
    if (l->n == l->cap) {
        tok_fragment *v = tok_grow(l->v, &l->cap, l->n + 1, sizeof(*v), 16, "text fragments");
        if (!v) return COLI_ENOMEM;
        l->v = v;
    }
    l->v[l->n++] = (tok_fragment){token, off, len};
    return 0;
}

/* 1 if text[at .. at + n) overlaps a range of plain (binary search: they ascend). */
static int s_in_plain(const tok_plain *plain, size_t at, size_t n) {
    size_t lo = 0, hi = plain ? plain->n : 0;
    while (lo < hi) { // the first range that ends after at
        size_t mid = lo + (hi - lo) / 2;
        if (plain->v[mid].off + plain->v[mid].len <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; plain && lo < plain->n && plain->v[lo].off < at + n; lo++) /* empty ranges overlap nothing */
        if (plain->v[lo].len) return 1;
    return 0;
}

/* Split every raw fragment of in at each occurrence of special token id
 * (not where it overlaps a range of guard: a control token in message text). */
static int s_split_at(const coli_tokenizer *tok, const char *text, int32_t id, const tok_plain *guard,
                      const frag_list *in, frag_list *out) {
    const char *t = tok->text_blob + tok->text_off[id];
    size_t tlen = tok->text_len[id];
    int rc = 0;
    out->n = 0;
    for (size_t k = 0; k < in->n && rc == 0; k++) {
        const tok_fragment *fr = &in->v[k];
        if (fr->token >= 0) {
            rc = s_frag_push(out, fr->token, 0, 0);
            continue;
        }
        size_t cur = fr->off, end = fr->off + fr->len, from = cur;
        const char *m;
        while (rc == 0 && (m = memmem(text + from, end - from, t, tlen)) != NULL) {
            size_t at = (size_t)(m - text), left_end = at;
            if (s_in_plain(guard, at, tlen)) { // text, not the token: look further on
                from = at + 1;
                continue;
            }
            while ((tok->attr[id] & TOK_ATTR_LSTRIP) && left_end > cur && isspace((unsigned char)text[left_end - 1]))
                left_end--;
            if (left_end > cur) rc = s_frag_push(out, -1, cur, left_end - cur);
            if (rc == 0) rc = s_frag_push(out, id, 0, 0);
            cur = at + tlen;
            while ((tok->attr[id] & TOK_ATTR_RSTRIP) && cur < end && isspace((unsigned char)text[cur])) cur++;
            from = cur;
        }
        if (rc == 0 && cur < end) rc = s_frag_push(out, -1, cur, end - cur);
    }
    return rc;
}

int tok_partition(const coli_tokenizer *tok, const char *text, size_t len, int parse_special, const tok_plain *plain,
                  tok_fragment **frags, size_t *n_frags) {
    frag_list a = {0}, b = {0};
    int rc = len ? s_frag_push(&a, -1, 0, len) : 0;
    for (int32_t i = 0; i < tok->n_special && rc == 0; i++) {
        int32_t id = tok->special[i];
        int guarded = (tok->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)) != 0; /* as parse_special 0 skips */
        if (!parse_special && guarded) continue;
        if ((rc = s_split_at(tok, text, id, guarded ? plain : NULL, &a, &b)) == 0) {
            frag_list t = a;
            a = b;
            b = t;
        }
    }
    free(b.v);
    if (rc < 0) {
        free(a.v);
        return rc;
    }
    *frags = a.v;
    *n_frags = a.n;
    return 0;
}
