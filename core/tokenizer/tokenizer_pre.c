/*
 * tokenizer_pre.c - BPE pre-tokenizers: the names llama.cpp accepts in
 * tokenizer.ggml.pre, each mapped to llama.cpp's list of regular
 * expressions (src/llama-vocab.cpp, llm_tokenizer_bpe; commit c392e509),
 * and the split that runs them as unicode_regex_split does: every regex
 * splits each piece the one before it left, and both its matches and the
 * text between them stay pieces.
 *
 * Two regexes have hand-written splitters, as in llama.cpp (whose results
 * differ from a plain regex match in a few corners, kept here): the GPT-2
 * one and the Llama 3 one. A third, GPT-4o's (o200k; llama.cpp de3ff815
 * runs it on std::regex), needs quantified groups, which tokenizer_regex.c
 * lacks: its splitter gives std::regex's result. The others run on
 * tokenizer_regex.c.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

#define IN_RANGE 0x100u /* flag bit: the position lies inside the piece */

int tok_pieces_push(tok_pieces *p, size_t len) {
    if (len == 0) return 0;
    if (p->n == p->cap) {
        size_t *v = tok_grow(p->len, &p->cap, p->n + 1, sizeof(*v), 64, "words");
        if (!v) return COLI_ENOMEM;
        p->len = v;
    }
    p->len[p->n++] = len;
    return 0;
}

// ---------------------------------------------------------------------------
// the names and their regexes

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
// (clang-format 14 does not settle on these string macros)
// clang-format off
#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* Llama 3's (?i:'s|'t|...) spelt without (?i:), as llama.cpp does */
#define RX_CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3 RX_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2  RX_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* CJK ideographs U+4E00..U+9FA5, U+0800..U+4E00 (sic, from DeepSeek's tokenizer.json), Hangul U+AC00..U+D7FF */
#define RX_DEEPSEEK_CJK "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"
/* DeepSeek LLM's cased letters (written as code points: several are singletons
 * that Unicode normalization would turn into other letters) */
#define RX_DEEPSEEK_LETTERS "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293" \
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1"   \
    "\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD"        \
    "\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D"        \
    "\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC"  \
    "\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"  \
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"     \
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"   \
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"        \
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"                  \
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"               \
    "\U0001E900-\U0001E943]+"
/* ASCII and full-width punctuation, quotation marks U+2018..U+201F, U+3000..U+3002 */
#define RX_DEEPSEEK_PUNCT "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"
/* CJK ideographs, hiragana, katakana */
#define RX_DEEPSEEK3_CJK "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+"
#define RX_DEEPSEEK3 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"  \
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN35 RX_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-4o (o200k): tokenizer.json's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]* and [\p{Ll}\p{Lm}\p{Lo}\p{M}]+ spelt
 * as llama.cpp spells them, ((?=[\p{L}])([^a-z]))* and ((?=[\p{L}])([^A-Z]))+; run by a hand-written
 * splitter (s_gpt4o_word_end), the regex engine has no quantified groups */
#define RX_CASED_UP "((?=[\\p{L}])([^a-z]))"
#define RX_CASED_LO "((?=[\\p{L}])([^A-Z]))"
#define RX_GPT4O "[^\\r\\n\\p{L}\\p{N}]?" RX_CASED_UP "*" RX_CASED_LO "+" RX_CONTRACTIONS_CI "?|"    \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_CASED_UP "+" RX_CASED_LO "*" RX_CONTRACTIONS_CI "?|"                \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* everything but white space and . , ! ? and the ellipsis, ideographic/full-width/Devanagari/Arabic stops and commas */
/* Kimi K2: llama.cpp's name for its hand-written splitter (s_kimi_word_end), not a regex that runs */
#define RX_KIMI_K2 "\\p{Han}+"
#define RX_PORO " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"
// clang-format on

enum {
    PRE_IGNORE_MERGES = 1, /* a word that is a token stays whole (llama.cpp's ignore_merges) */
    PRE_ADD_BOS = 2,       /* prompts get BOS unless tokenizer.ggml.add_bos_token says no */
    PRE_NO_BOS = 4,        /* no BOS id unless tokenizer.ggml.bos_token_id gives one */
    PRE_NO_MERGES = 8,     /* tokenizer.ggml.merges may be absent (llama.cpp: Kimi K2 ships none) */
};

struct tok_pre_preset {
    const char *names[8];
    const char *regex[TOK_PRE_MAX_REGEX];
    unsigned flags;
};

static const tok_pre_preset k_presets[] = {
    {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {RX_LLAMA3}, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {{"dbrx", "smaug-bpe"}, {RX_LLAMA3}, 0},
    {{"chatglm-bpe", "glm4"}, {RX_LLAMA3}, PRE_NO_BOS},
    {{"deepseek-llm"}, {"[\r\n]", RX_DEEPSEEK_LETTERS, RX_DEEPSEEK_PUNCT, "\\s+$", RX_DEEPSEEK_CJK, "\\p{N}+"}, 0},
    {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_DEEPSEEK_CJK, "\\p{N}"}, 0},
    {{"deepseek-v3"}, {"\\p{N}{1,3}", RX_DEEPSEEK3_CJK, RX_DEEPSEEK3}, 0},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"}, 0},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {"\\p{N}", RX_GPT2}, 0},
    {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "gigachat"}, {RX_GPT2}, 0},
    {{"jina-es", "jina-de", "jina-v2-es", "jina-v2-de"}, {RX_GPT2}, 0},
    {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {RX_QWEN2}, 0},
    {{"qwen35"}, {RX_QWEN35}, 0},
    {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {RX_GPT4O}, 0},
    {{"kimi-k2"}, {RX_KIMI_K2}, PRE_NO_MERGES},
    {{"poro-chat", "bloom", "gpt3-finnish"}, {RX_PORO}, 0},
    {{"viking"}, {RX_PORO, "\\p{N}"}, 0},
};

static const tok_pre_preset *s_find_preset(const char *name, size_t len) {
    for (size_t k = 0; k < sizeof(k_presets) / sizeof(k_presets[0]); k++) {
        for (const char *const *n = k_presets[k].names; n < k_presets[k].names + 8 && *n; n++) {
            if (strlen(*n) == len && memcmp(*n, name, len) == 0) return &k_presets[k];
        }
    }
    return NULL;
}

typedef struct split_piece split_piece;
typedef size_t (*word_end_fn)(const split_piece *, size_t);
static word_end_fn s_custom_splitter(const char *regex);

int tok_pre_setup(coli_tokenizer *tok, const char *name, size_t len) {
    const tok_pre_preset *p = s_find_preset(name, len);
    if (!p)
        return coli_fail(COLI_EUNSUPPORTED, "tokenizer.ggml.pre: unknown pre-tokenizer '%.*s'",
                         (int)(len > 64 ? 64 : len), name);
    tok->pre = p;
    tok->ignore_merges = (p->flags & PRE_IGNORE_MERGES) != 0;
    tok->merges_optional = (p->flags & PRE_NO_MERGES) != 0;
    if (p->flags & PRE_ADD_BOS) tok->add_bos = 1;
    if (p->flags & PRE_NO_BOS) tok->bos = -1;
    for (int k = 0; k < TOK_PRE_MAX_REGEX && p->regex[k]; k++) {
        if (s_custom_splitter(p->regex[k])) continue;
        int rc = tok_regex_compile(p->regex[k], &tok->pre_regex[k]);
        if (rc < 0) return rc;
    }
    return 0;
}

void tok_pre_free(coli_tokenizer *tok) {
    for (int k = 0; k < TOK_PRE_MAX_REGEX; k++) tok_regex_free(&tok->pre_regex[k]);
}

// ---------------------------------------------------------------------------
// the hand-written splitters (llama.cpp's unicode_regex_split_custom_gpt2
// and _llama3): one word at a time from pos, within one piece

struct split_piece {
    const uint32_t *cpts;
    size_t ini, end; /* the piece being split: [ini, end) */
};

static unsigned s_flags_at(const split_piece *g, size_t pos) {
    return pos >= g->ini && pos < g->end ? coli_cpt_flags(g->cpts[pos]) | IN_RANGE : 0;
}

static int s_is_other(unsigned f) /* [^\s\p{L}\p{N}] inside the piece */
{
    return (f & IN_RANGE) && !(f & (COLI_CPT_SPACE | COLI_CPT_LETTER | COLI_CPT_NUMBER));
}

/* ASCII case folding suffices: no other code point lowercases to s t r e v m l d. */
static uint32_t s_fold(uint32_t c, int fold) { return fold && c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (any case when fold): the end of the contraction at pos, or 0. */
static size_t s_contraction(const split_piece *g, size_t pos, int fold) {
    if (pos + 1 >= g->end || g->cpts[pos] != '\'') return 0; /* pos may be the piece's end */
    uint32_t c1 = s_fold(g->cpts[pos + 1], fold);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
    if (pos + 2 >= g->end) return 0;
    uint32_t c2 = s_fold(g->cpts[pos + 2], fold);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
    return 0;
}

/* \s+(?!\S) then \s+ (Llama 3: \s*[\r\n]+ first): the end of the run at pos. */
static size_t s_space_end(const split_piece *g, size_t pos, int newline_first) {
    size_t n_ws = 0, after_newline = 0;
    for (; s_flags_at(g, pos + n_ws) & COLI_CPT_SPACE; n_ws++) {
        uint32_t c = g->cpts[pos + n_ws];
        if (c == '\r' || c == '\n') after_newline = pos + n_ws + 1;
    }
    if (newline_first && after_newline) return after_newline;
    if (n_ws > 1 && pos + n_ws < g->end) // leave the last one for the next word
        return pos + n_ws - 1;
    return pos + (n_ws ? n_ws : 1); // \s+, or no match: one code point
}

/* The end of the GPT-2 regex's word at pos. */
static size_t s_gpt2_word_end(const split_piece *g, size_t pos) {
    size_t end = s_contraction(g, pos, 0);
    if (end) return end;
    uint32_t cpt = g->cpts[pos];
    unsigned f = s_flags_at(g, cpt == ' ' ? pos + 1 : pos);
    size_t p = pos + (cpt == ' ');
    if (f & COLI_CPT_LETTER) { //  ?\p{L}+
        while (s_flags_at(g, p) & COLI_CPT_LETTER) p++;
        return p;
    }
    if (f & COLI_CPT_NUMBER) { //  ?\p{N}+
        while (s_flags_at(g, p) & COLI_CPT_NUMBER) p++;
        return p;
    }
    if (s_is_other(f)) { //  ?[^\s\p{L}\p{N}]+
        while (s_is_other(s_flags_at(g, p))) p++;
        return p;
    }
    return s_space_end(g, pos, 0);
}

/* What Llama 3's regex and Kimi K2's have in common after their letter
 * alternatives: \p{N}{1,3}, " ?[^\s\p{L}\p{N}]+[\r\n]*", \s*[\r\n]+,
 * \s+(?!\S), \s+. The end of the word at pos. */
static size_t s_llama3_rest_end(const split_piece *g, size_t pos) {
    uint32_t cpt = g->cpts[pos];
    unsigned f = s_flags_at(g, pos);
    size_t end;
    if (f & COLI_CPT_NUMBER) { // \p{N}{1,3}
        for (end = pos + 1; end < pos + 3 && (s_flags_at(g, end) & COLI_CPT_NUMBER);) end++;
        return end;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*": llama.cpp tests the flags of pos itself
    // for "in the piece", so a lone trailing ' ' is a word of its own here
    unsigned f2 = cpt == ' ' ? s_flags_at(g, pos + 1) : f;
    if (!(f2 & (COLI_CPT_SPACE | COLI_CPT_LETTER | COLI_CPT_NUMBER))) {
        for (end = pos + (cpt == ' '); s_is_other(s_flags_at(g, end));) end++;
        while (end < g->end && (g->cpts[end] == '\r' || g->cpts[end] == '\n')) end++;
        return end;
    }
    return s_space_end(g, pos, 1);
}

/* [^\r\n\p{L}\p{N}] at pos: the one code point that may lead a letter word. */
static int s_leads_letters(const split_piece *g, size_t pos) {
    uint32_t cpt = g->cpts[pos];
    return cpt != '\r' && cpt != '\n' && !(s_flags_at(g, pos) & (COLI_CPT_LETTER | COLI_CPT_NUMBER));
}

/* The end of the Llama 3 regex's word at pos. */
static size_t s_llama3_word_end(const split_piece *g, size_t pos) {
    size_t end = s_contraction(g, pos, 1);
    if (end) return end;
    unsigned f = s_flags_at(g, pos);
    if ((f & COLI_CPT_LETTER) || (s_leads_letters(g, pos) && (s_flags_at(g, pos + 1) & COLI_CPT_LETTER))) {
        for (end = pos + 1; s_flags_at(g, end) & COLI_CPT_LETTER;) end++; // [^\r\n\p{L}\p{N}]?\p{L}+
        return end;
    }
    return s_llama3_rest_end(g, pos);
}

/* \p{Han} as llama.cpp's unicode_cpt_is_han: the CJK unified ideographs,
 * extensions A to F and the compatibility ideographs. */
static int s_is_han(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* A letter that is no Han ideograph, inside the piece. */
static int s_kimi_letter(const split_piece *g, size_t pos) {
    return (s_flags_at(g, pos) & COLI_CPT_LETTER) && !s_is_han(g->cpts[pos]);
}

/* The end of Kimi K2's word at pos (llama.cpp's
 * unicode_regex_split_custom_kimi_k2): a run of Han ideographs; else
 * [^\r\n\p{L}\p{N}]? then letters that are not Han (upper and lower case
 * alike: llama.cpp does not tell them apart) and an optional contraction of
 * any case; else as Llama 3. */
static size_t s_kimi_word_end(const split_piece *g, size_t pos) {
    size_t end = pos;
    if (s_is_han(g->cpts[pos])) {
        while (end < g->end && s_is_han(g->cpts[end])) end++;
        return end;
    }
    if (s_kimi_letter(g, pos) || (s_leads_letters(g, pos) && s_kimi_letter(g, pos + 1))) {
        for (end = pos + 1; s_kimi_letter(g, end);) end++;
        size_t c = s_contraction(g, end, 1);
        return c ? c : end;
    }
    return s_llama3_rest_end(g, pos);
}

/* The GPT-4o regex as llama.cpp's std::regex sees it: on the collapsed text,
 * where every non-ASCII letter is one marker that is both "not a-z" and "not
 * A-Z" (so it counts as upper and as lower case), \s is ASCII white space
 * plus what non-ASCII white space becomes, and \p{N} any number. */
enum {
    G4_UP = 1,    /* (?=[\p{L}])[^a-z] */
    G4_LO = 2,    /* (?=[\p{L}])[^A-Z] */
    G4_NUM = 4,   /* \p{N} */
    G4_SPACE = 8, /* \s */
    G4_NL = 16,   /* \r \n */
    G4_OTHER = 32 /* [^\s\p{L}\p{N}] */
};

static unsigned s_g4_class(const split_piece *g, size_t pos) {
    if (pos < g->ini || pos >= g->end) return 0;
    uint32_t c = g->cpts[pos];
    if (c < 128) {
        if (c >= 'A' && c <= 'Z') return G4_UP;
        if (c >= 'a' && c <= 'z') return G4_LO;
        if (c >= '0' && c <= '9') return G4_NUM;
        if (c == '\r' || c == '\n') return G4_SPACE | G4_NL;
        return (c >= '\t' && c <= '\f') || c == ' ' ? G4_SPACE : G4_OTHER;
    }
    unsigned f = coli_cpt_flags(c);
    return f & COLI_CPT_SPACE    ? G4_SPACE
           : f & COLI_CPT_NUMBER ? G4_NUM
           : f & COLI_CPT_LETTER ? G4_UP | G4_LO
                                 : G4_OTHER;
}

static size_t s_g4_run(const split_piece *g, size_t pos, unsigned cls) {
    while (s_g4_class(g, pos) & cls) pos++;
    return pos;
}

/* The letter alternatives from q (a letter): [A-Z]*[a-z]+ (letting the upper
 * run give back its last non-ASCII letter, as backtracking does), else
 * [A-Z]+[a-z]*; then an optional contraction. */
static size_t s_g4_letters(const split_piece *g, size_t q) {
    size_t up_end = s_g4_run(g, q, G4_UP), lo_at = up_end;
    while (!(s_g4_class(g, lo_at) & G4_LO) && lo_at > q) lo_at--; // only a non-ASCII letter is both
    size_t end = s_g4_run(g, (s_g4_class(g, lo_at) & G4_LO) ? lo_at : up_end, G4_LO);
    size_t c = s_contraction(g, end, 1);
    return c ? c : end;
}

/* The end of the GPT-4o regex's word at pos; every code point matches one
 * of its alternatives, so there is no unmatched stretch. */
static size_t s_gpt4o_word_end(const split_piece *g, size_t pos) {
    const unsigned LETTER = G4_UP | G4_LO, c0 = s_g4_class(g, pos);
    if (c0 & LETTER) return s_g4_letters(g, pos);
    int prefix_ok = (c0 & G4_OTHER) || ((c0 & G4_SPACE) && !(c0 & G4_NL)); // [^\r\n\p{L}\p{N}]
    if (prefix_ok && (s_g4_class(g, pos + 1) & LETTER)) return s_g4_letters(g, pos + 1);
    if (c0 & G4_NUM) { // \p{N}{1,3}
        size_t end = pos + 1;
        while (end < pos + 3 && (s_g4_class(g, end) & G4_NUM)) end++;
        return end;
    }
    size_t p = g->cpts[pos] == ' ' && (s_g4_class(g, pos + 1) & G4_OTHER) ? pos + 1 : pos;
    if (s_g4_class(g, p) & G4_OTHER) { //  ?[^\s\p{L}\p{N}]+[\r\n/]*
        size_t end = s_g4_run(g, p, G4_OTHER);
        while (end < g->end && (g->cpts[end] == '\r' || g->cpts[end] == '\n' || g->cpts[end] == '/')) end++;
        return end;
    }
    size_t ws_end = s_g4_run(g, pos, G4_SPACE), last_nl = 0;
    for (size_t i = pos; i < ws_end; i++)
        if (s_g4_class(g, i) & G4_NL) last_nl = i + 1;
    if (last_nl) return last_nl;                                // \s*[\r\n]+
    if (ws_end - pos > 1 && ws_end < g->end) return ws_end - 1; // \s+(?!\S)
    return ws_end;                                              // \s+
}

/* The hand-written splitter of a regex, NULL if it runs on tokenizer_regex.c. */
static word_end_fn s_custom_splitter(const char *regex) {
    if (strcmp(regex, RX_GPT2) == 0) return s_gpt2_word_end;
    if (strcmp(regex, RX_LLAMA3) == 0) return s_llama3_word_end;
    if (strcmp(regex, RX_GPT4O) == 0) return s_gpt4o_word_end;
    if (strcmp(regex, RX_KIMI_K2) == 0) return s_kimi_word_end;
    return NULL;
}

static int s_split_custom(const uint32_t *cpts, const tok_pieces *in, tok_pieces *out, word_end_fn word_end) {
    size_t start = 0;
    for (size_t k = 0; k < in->n; k++) {
        split_piece g = {cpts, start, start + in->len[k]};
        for (size_t pos = g.ini; pos < g.end;) {
            size_t end = word_end(&g, pos);
            int rc = tok_pieces_push(out, end - pos);
            if (rc < 0) return rc;
            pos = end;
        }
        start = g.end;
    }
    return 0;
}

// ---------------------------------------------------------------------------

int tok_pretokenize(const coli_tokenizer *tok, const uint32_t *cpts, size_t n, tok_pieces *words) {
    tok_pieces a = {0}, b = {0};
    int rc = tok_pieces_push(&a, n);
    for (int k = 0; rc == 0 && k < TOK_PRE_MAX_REGEX && tok->pre->regex[k]; k++) {
        const char *rx = tok->pre->regex[k];
        b.n = 0;
        if (tok->pre_regex[k])
            rc = tok_regex_split(tok->pre_regex[k], cpts, n, &a, &b);
        else
            rc = s_split_custom(cpts, &a, &b, s_custom_splitter(rx));
        tok_pieces t = a;
        a = b;
        b = t;
    }
    free(b.len);
    if (rc < 0) {
        free(a.len);
        return rc;
    }
    *words = a;
    return 0;
}
