/*
 * gen_vocab.c - gen_model's synthetic vocabulary; see gen_vocab.h.
 */
#include "tools/gen_model/gen_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"

enum {
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_BYTE = 6
};

/* Common words of children's stories: the text the tests and `make run` use. */
static const char *const s_words[] = {
    "the",    "a",     "and",    "to",    "was",    "he",       "she",     "it",      "in",      "that",   "his",
    "her",    "they",  "with",   "for",   "on",     "you",      "had",     "said",    "but",     "at",     "one",
    "little", "time",  "upon",   "once",  "there",  "day",      "big",     "very",    "were",    "is",     "be",
    "as",     "so",    "not",    "all",   "we",     "my",       "what",    "up",      "out",     "go",     "went",
    "saw",    "like",  "play",   "happy", "friend", "mom",      "dad",     "wanted",  "named",   "girl",   "boy",
    "cat",    "dog",   "tree",   "sun",   "park",   "ball",     "home",    "good",    "new",     "fun",    "can",
    "are",    "from",  "this",   "have",  "did",    "would",    "could",   "then",    "when",    "them",   "him",
    "me",     "no",    "do",     "get",   "make",   "look",     "see",     "come",    "about",   "just",   "know",
    "how",    "after", "back",   "over",  "into",   "down",     "away",    "old",     "long",    "man",    "house",
    "water",  "world", "people", "way",   "thing",  "because",  "some",    "more",    "other",   "story",  "loved",
    "found",  "asked", "help",   "sad",   "smiled", "together", "every",   "bird",    "flower",  "sky",    "red",
    "blue",   "toy",   "car",    "run",   "jump",   "felt",     "thought", "decided", "learned", "lesson", "end",
    "of",     "i",     "hello",
};
#define N_WORDS ((int)(sizeof s_words / sizeof s_words[0]))

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#define BPE_SPACE "\xc4\xa0"     /* U+0120 'Ġ', GPT-2's mapped space */

/* Slot of s in the hash: where it is, or the empty slot where it would go. */
static int64_t s_vocab_slot(const gen_vocab *v, const char *s) {
    int64_t i = (int64_t)(coli_fnv1a(s, strlen(s), COLI_FNV1A_SEED) & (uint64_t)(v->hash_cap - 1));
    while (v->hash[i] && strcmp(v->hash[i], s) != 0) i = (i + 1) & (v->hash_cap - 1);
    return i;
}

static int s_vocab_has(const gen_vocab *v, const char *s) { return v->hash[s_vocab_slot(v, s)] != NULL; }

static int s_vocab_init(gen_vocab *v, int64_t cap) {
    memset(v, 0, sizeof *v);
    v->cap = cap;
    v->hash_cap = 1;
    while (v->hash_cap < 2 * cap) v->hash_cap <<= 1;
    v->tokens = calloc((size_t)cap, sizeof *v->tokens);
    v->scores = calloc((size_t)cap, sizeof *v->scores);
    v->types = calloc((size_t)cap, sizeof *v->types);
    v->merges = calloc((size_t)cap, sizeof *v->merges);
    v->hash = calloc((size_t)v->hash_cap, sizeof *v->hash);
    if (!v->tokens || !v->scores || !v->types || !v->merges || !v->hash)
        return coli_fail(COLI_ENOMEM, "vocabulary: out of memory for %lld tokens", (long long)cap);
    return 0;
}

void gen_vocab_free(gen_vocab *v) {
    for (int64_t i = 0; i < v->n; i++) free(v->tokens[i]);
    for (int64_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->merges);
    free(v->hash);
    memset(v, 0, sizeof *v);
}

/* Add a token unless present or the vocabulary is full: 1 added, 0 not, <0 error. */
static int s_vocab_add(gen_vocab *v, const char *text, float score, int32_t type) {
    if (v->n >= v->cap) return 0;
    int64_t slot = s_vocab_slot(v, text);
    if (v->hash[slot]) return 0;
    char *copy = strdup(text);
    if (!copy) return coli_fail(COLI_ENOMEM, "vocabulary: out of memory");
    v->hash[slot] = copy;
    v->tokens[v->n] = copy;
    v->scores[v->n] = score;
    v->types[v->n] = type;
    v->n++;
    return 1;
}

/* SentencePiece piece: score -rank, so earlier (more common) pieces merge first. */
static int s_spm_piece(gen_vocab *v, const char *text) { return s_vocab_add(v, text, (float)(259 - v->n), TOK_NORMAL); }

/* Every prefix (of >= 2 characters) of `SPM_SPACE word`, so that the SPM merge
 * search can reach the whole word one character at a time. */
static int s_spm_word(gen_vocab *v, const char *word, int capitalize) {
    char buf[64];
    size_t n = strlen(word);
    for (size_t k = 1; k <= n && n < 40; k++) {
        snprintf(buf, sizeof buf, SPM_SPACE "%.*s", (int)k, word);
        if (capitalize) buf[3] = (char)(buf[3] - 'a' + 'A');
        int rc = s_spm_piece(v, buf);
        if (rc < 0) return rc;
    }
    return 0;
}

static int s_build_spm(gen_vocab *v) {
    static const char *const specials[] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_types[] = {TOK_UNKNOWN, TOK_CONTROL, TOK_CONTROL};
    char buf[16];
    int rc = 0;
    for (int i = 0; i < 3 && rc >= 0; i++) rc = s_vocab_add(v, specials[i], 0.0f, special_types[i]);
    for (int b = 0; b < 256 && rc >= 0; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        rc = s_vocab_add(v, buf, 0.0f, TOK_BYTE);
    }
    rc = rc < 0 ? rc : s_spm_piece(v, SPM_SPACE);
    const char *chars = "etaoinshrdlcumwfgypbvkjxqzTAOISHWMBCDEFGLNPRY.,!?'\"-:;()0123456789";
    for (const char *c = chars; *c && rc >= 0; c++) {
        buf[0] = *c;
        buf[1] = '\0';
        rc = s_spm_piece(v, buf);
    }
    static const char *const pieces[] = {"th",  "he", "in", "er", "an", "re", "on", "ed", "nd",
                                         "ing", "es", "ly", "en", "at", "ou", "it", "or"};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0] && rc >= 0; i++) rc = s_spm_piece(v, pieces[i]);
    for (int cap = 0; cap < 2 && rc >= 0; cap++)
        for (int w = 0; w < N_WORDS && rc >= 0; w++) rc = s_spm_word(v, s_words[w], cap);
    /* Fill the rest with letter bigrams and trigrams, with and without the space. */
    for (int len = 2; len <= 3 && rc >= 0 && v->n < v->cap; len++) {
        int64_t count = len == 2 ? 26 * 26 : 26 * 26 * 26;
        for (int64_t i = 0; i < 2 * count && rc >= 0 && v->n < v->cap; i++) {
            int64_t x = i % count;
            char s[8] = {0};
            for (int k = len - 1; k >= 0; k--, x /= 26) s[k] = (char)('a' + x % 26);
            snprintf(buf, sizeof buf, "%s%s", i < count ? "" : SPM_SPACE, s);
            rc = s_spm_piece(v, buf);
        }
    }
    return rc < 0 ? rc : 0;
}

/* GPT-2's byte -> printable character map (bytes_to_unicode), as UTF-8. */
static void s_gpt2_byte_symbol(int b, char out[4]) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        int n = 0; /* the non-printable bytes map to 256, 257, ... in byte order */
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* Add the merge "left right" and its result, if the result is new. */
static int s_bpe_merge(gen_vocab *v, const char *left, const char *right) {
    char merged[128], rule[130];
    snprintf(merged, sizeof merged, "%s%s", left, right);
    if (v->n >= v->cap || s_vocab_has(v, merged)) return 0;
    snprintf(rule, sizeof rule, "%s %s", left, right);
    char *copy = strdup(rule);
    if (!copy) return coli_fail(COLI_ENOMEM, "vocabulary: out of memory");
    v->merges[v->n_merges++] = copy;
    return s_vocab_add(v, merged, 0.0f, TOK_NORMAL);
}

/* Merges that build `prefix word` left to right, one symbol at a time. */
static int s_bpe_word(gen_vocab *v, const char *prefix, const char *word, int capitalize) {
    char cur[128], sym[4];
    int rc = 0;
    size_t i = 0;
    if (*prefix)
        snprintf(cur, sizeof cur, "%s", prefix);
    else {
        cur[0] = capitalize ? (char)(word[0] - 'a' + 'A') : word[0];
        cur[1] = 0;
        i = 1;
    }
    for (; word[i] && rc >= 0 && strlen(cur) < 100; i++) {
        sym[0] = (i == 0 && capitalize) ? (char)(word[i] - 'a' + 'A') : word[i];
        sym[1] = 0;
        rc = s_bpe_merge(v, cur, sym);
        strcat(cur, sym);
    }
    return rc;
}

static int s_build_bpe(gen_vocab *v) {
    char sym[4];
    int rc = s_vocab_add(v, "<|endoftext|>", 0.0f, TOK_CONTROL);
    for (int b = 0; b < 256 && rc >= 0; b++) {
        /* GPT-2 order: printable bytes first, then the remapped ones */
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (!printable) continue;
        s_gpt2_byte_symbol(b, sym);
        rc = s_vocab_add(v, sym, 0.0f, TOK_NORMAL);
    }
    for (int b = 0; b < 256 && rc >= 0; b++) {
        s_gpt2_byte_symbol(b, sym);
        rc = s_vocab_add(v, sym, 0.0f, TOK_NORMAL); /* only the remapped ones are new */
    }
    for (int cap = 0; cap < 2 && rc >= 0; cap++)
        for (int w = 0; w < N_WORDS && rc >= 0; w++) {
            rc = s_bpe_word(v, BPE_SPACE, s_words[w], cap);
            if (rc >= 0) rc = s_bpe_word(v, "", s_words[w], cap);
        }
    /* Fill with letter bigrams, then space + letter bigrams. */
    for (int i = 0; i < 2 * 26 * 26 && rc >= 0 && v->n < v->cap; i++) {
        int x = i % (26 * 26);
        char l[8], r[2] = {(char)('a' + x % 26), 0};
        snprintf(l, sizeof l, "%s%c", i < 26 * 26 ? "" : BPE_SPACE, 'a' + x / 26);
        rc = s_bpe_merge(v, l, r);
    }
    return rc < 0 ? rc : 0;
}

int gen_vocab_build(gen_vocab *v, int64_t n_vocab, int bpe) {
    int rc = s_vocab_init(v, n_vocab);
    v->bpe = bpe;
    if (rc == 0) rc = bpe ? s_build_bpe(v) : s_build_spm(v);
    if (rc == 0 && v->n < n_vocab)
        rc = coli_fail(COLI_EINVAL, "--vocab: only %lld distinct tokens can be generated, %lld asked", (long long)v->n,
                       (long long)n_vocab);
    return rc;
}

int gen_vocab_write(gguf_writer *w, const gen_vocab *v) {
    const char *const *toks = (const char *const *)v->tokens;
    int rc;
    if (v->bpe) {
        rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)v->n);
        if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, v->types, (uint64_t)v->n);
        if (!rc)
            rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                         (uint64_t)v->n_merges);
        if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
        if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0);
        if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        if (!rc) rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", "olmo");
        return rc;
    }
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc) rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)v->n);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, v->scores, (uint64_t)v->n);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, v->types, (uint64_t)v->n);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!rc) rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    if (!rc) rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    return rc;
}
