/*
 * test_pretokenizer.c - the BPE pre-tokenizers by name (core/tokenizer/tokenizer_pre.c)
 * and the regex matcher under them (core/tokenizer/tokenizer_regex.c).
 *
 * The reference vocabularies in ../shared cover gpt-2, falcon, starcoder and
 * deepseek-coder (test_vocab_only.c). Here each preset's word split is
 * checked on hand-made text; every expected split is worked out by hand from
 * llama.cpp's regex list for that name (src/llama-vocab.cpp, c392e509),
 * matched the way llama.cpp matches it (ECMAScript: leftmost match, first
 * alternative that succeeds, greedy), and the reasoning is in the comment.
 * Words are shown joined by '|'.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

// ---------------------------------------------------------------------------
// helpers

static uint32_t *decode(const char *text, size_t *n) {
    size_t len = strlen(text);
    uint32_t *cpts = malloc((len + 1) * sizeof(uint32_t));
    *n = 0;
    for (size_t off = 0; off < len;) cpts[(*n)++] = coli_utf8_decode(text, len, &off);
    return cpts;
}

// The words as "w1|w2|..." (malloc'ed).
static char *join(const uint32_t *cpts, const tok_pieces *w) {
    size_t total = 0;
    for (size_t k = 0; k < w->n; k++) total += w->len[k];
    char *out = malloc(total * 4 + w->n + 1), *o = out;
    size_t start = 0;
    for (size_t k = 0; k < w->n; k++) {
        if (k) *o++ = '|';
        for (size_t i = start; i < start + w->len[k]; i++) o += coli_utf8_encode(cpts[i], o);
        start += w->len[k];
    }
    *o = '\0';
    return out;
}

// Pre-tokenize text with the preset llama.cpp calls name.
static char *split(const char *name, const char *text) {
    coli_tokenizer t;
    memset(&t, 0, sizeof t);
    cr_assert_eq(tok_pre_setup(&t, name, strlen(name)), 0, "%s", coli_last_error());
    size_t n;
    uint32_t *cpts = decode(text, &n);
    tok_pieces w = {0};
    cr_assert_eq(tok_pretokenize(&t, cpts, n, &w), 0, "%s", coli_last_error());
    char *s = join(cpts, &w);
    free(w.len);
    free(cpts);
    tok_pre_free(&t);
    return s;
}

static void expect_split(const char *name, const char *text, const char *want) {
    char *got = split(name, text);
    cr_expect_str_eq(got, want, "%s: '%s' -> '%s', expected '%s'", name, text, got, want);
    free(got);
}

// One regex on the whole text.
static char *regex_split(const char *pattern, const char *text) {
    tok_regex *re = NULL;
    cr_assert_eq(tok_regex_compile(pattern, &re), 0, "%s", coli_last_error());
    size_t n;
    uint32_t *cpts = decode(text, &n);
    tok_pieces in = {0}, out = {0};
    cr_assert_eq(tok_pieces_push(&in, n), 0);
    cr_assert_eq(tok_regex_split(re, cpts, n, &in, &out), 0, "%s", coli_last_error());
    char *s = join(cpts, &out);
    free(in.len);
    free(out.len);
    free(cpts);
    tok_regex_free(&re);
    return s;
}

static void expect_regex(const char *pattern, const char *text, const char *want) {
    char *got = regex_split(pattern, text);
    cr_expect_str_eq(got, want, "/%s/ on '%s' -> '%s', expected '%s'", pattern, text, got, want);
    free(got);
}

// ---------------------------------------------------------------------------
// the matcher

Test(pretok_regex, ecmascript_semantics) {
    // the first alternative that matches wins, not the longest
    expect_regex("a|ab", "ab", "a|b");
    // \s+(?!\S): "   " is followed by 'b', so it gives back one space;
    // the last space then cannot match (followed by 'b') and stays between
    expect_regex("\\s+(?!\\S)", "a   b", "a|  | b");
    // {2,3} greedy, then what is left
    expect_regex("x{2,3}", "xxxxxxx", "xxx|xxx|x");
    // $ is the end of the piece: only the trailing run matches
    expect_regex("\\s+$", "a  b  ", "a  b|  ");
    // (?:...)? and (?=...)
    expect_regex("(?:ab)?c", "abcc", "abc|c");
    expect_regex("a(?=b)", "aab", "a|a|b");
    // escapes inside and outside classes
    expect_regex("[\\-\\]]+|\\x41", "a-]A", "a|-]|A");
}

Test(pretok_regex, collapsed_categories) {
    // \p{L} covers ASCII letters and any non-ASCII letter
    expect_regex("\\p{L}+", "héllo wörld", "héllo| |wörld");
    // \p{N}: U+0663 ARABIC-INDIC DIGIT THREE and U+00BD VULGAR FRACTION ONE HALF are numbers
    expect_regex("\\p{N}+", "x\u0663\u00BDy", "x|\u0663\u00BD|y");
    // \p{S} of the collapsed text lists $+<=>^`|~ for ASCII (llama.cpp de3ff815's
    // table), and U+00A9 (c) is one
    expect_regex("\\p{S}+", "a~b\u00A9", "a|~|b|\u00A9");
    // \p{M}: U+0301 COMBINING ACUTE ACCENT
    expect_regex("[\\p{L}\\p{M}]+", "e\u0301!", "e\u0301|!");
    // non-ASCII white space (U+3000) counts for \s
    expect_regex("\\s+", "a\u3000b", "a|\u3000|b");
}

Test(pretok_regex, wide_text_quirk) {
    // without a \p{..} the regex sees code points, but non-ASCII white space
    // becomes U+000B first (llama.cpp, for std::wregex's \s): U+3000 then
    // falls outside the literal range U+3000..U+3002
    expect_regex("[\u3000-\u3002]+", "\u3000\u3001\u3002", "\u3000|\u3001\u3002");
}

Test(pretok_regex, refused) {
    static const char *const bad[] = {
        "(ab)+", "a*?", "^a", "\\p{Lu}", "\\p{L}\u00E9", "[b-a]", "(a", "a)", "a{2", ".", "(?<=a)b", "\\k",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tok_regex *re = NULL;
        cr_expect_eq(tok_regex_compile(bad[k], &re), COLI_EINVAL, "'%s' compiled", bad[k]);
        cr_expect_null(re);
        cr_expect(strstr(coli_last_error(), "pre-tokenizer regex") != NULL, "%s", coli_last_error());
    }
}

// ---------------------------------------------------------------------------
// presets without a reference vocabulary in ../shared

// llama-bpe (Llama 3; also dbrx, smaug-bpe, chatglm-bpe):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
Test(pretok_preset, llama_bpe) {
    // contractions in any case ("'M", "'RE"); " " before digits is a word of its
    // own (\s+ - no letter follows it); digits in groups of at most 3
    expect_split("llama-bpe", "I'M here, you'RE 12345 items", "I|'M| here|,| you|'RE| |123|45| items");
    // \s*[\r\n]+ takes the newlines; of "  b" one space goes with the letter
    expect_split("llama-bpe", "a\n\n  b", "a|\n\n| | b");
    // punctuation keeps the newlines that follow it
    expect_split("llama-bpe", "hi!!\n\nok", "hi|!!\n\n|ok");
    // any letters, CJK included, form one word; "3.14": number, punct, number
    expect_split("llama-bpe", "\u00F1and\u00FA 3.14 \u4F60\u597D", "\u00F1and\u00FA| |3|.|14| \u4F60\u597D");
    expect_split("dbrx", "I'M 12345", "I|'M| |123|45");
    expect_split("chatglm-bpe", "x'LL", "x|'LL");
}

// qwen2: the Llama 3 regex with \p{N} instead of \p{N}{1,3}, on the regex matcher
Test(pretok_preset, qwen2) {
    // digits one by one; 年 is a letter (Lo)
    expect_split("qwen2", "2024\u5E74", "2|0|2|4|\u5E74");
    // "," cannot start a letter word ([^...]? then \p{L}+ fails at ' '), so
    // " ?[^\s\p{L}\p{N}]+" takes it; "!" takes the "\r\n" after it
    expect_split("qwen2", "Hello, World!\r\n", "Hello|,| World|!\r\n");
    expect_split("qwen2", "don'T", "don|'T");
    // a combining mark is no letter: it starts the next word as its [^...]? prefix
    expect_split("qwen2", "e\u0301te", "e|\u0301te");
    expect_split("deepseek-r1-qwen", "v2", "v|2");
}

// deepseek-v3: \p{N}{1,3}, then [一-龥぀-ゟ゠-ヿ]+, then
// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// qwen35 (Qwen3.5/3.6): Qwen2's regex with combining marks (\p{M}) counted
// with letters, and left out of the punctuation run.
Test(pretok_preset, qwen35) {
    // [\p{L}\p{M}]+ keeps e + U+0301 + te one word (qwen2 splits before the mark)
    expect_split("qwen35", "e\u0301te", "e\u0301te");
    expect_split("qwen2", "e\u0301te", "e|\u0301te");
    // a mark after a letter stays with it; '!' is then a punctuation run of its own
    // (qwen2: "x" then " ?[^\s\p{L}\p{N}]+" takes the mark with the '!')
    expect_split("qwen35", "x\u0301!", "x\u0301|!");
    expect_split("qwen2", "x\u0301!", "x|\u0301!");
    // \p{N}: one digit per word; contractions any case; punctuation takes trailing CR LF
    expect_split("qwen35", "2024\u5E74", "2|0|2|4|\u5E74");
    expect_split("qwen35", "don'T stop", "don|'T| stop");
    expect_split("qwen35", "Hello, World!\r\n", "Hello|,| World|!\r\n");
    // \s*[\r\n]+ then \s+(?!\S) leaves one space for the word after it
    expect_split("qwen35", "a \n   b", "a| \n|  | b");
}

// glm4 (GLM-4.5/4.6/4.7 and GLM-5): llama.cpp's CHATGLM4 regex, the Llama 3 one
// (\p{N}{1,3}, case-blind contractions), and no BOS id unless the file gives one.
Test(pretok_preset, glm4) {
    expect_split("glm4", "x'LL 12345", "x|'LL| |123|45");
    expect_split("glm4", "\u4F60\u597D, GLM!\n\nok", "\u4F60\u597D|,| GLM|!\n\n|ok");
    coli_tokenizer t;
    memset(&t, 0, sizeof t);
    t.bos = 11;
    cr_assert_eq(tok_pre_setup(&t, "glm4", 4), 0, "%s", coli_last_error());
    cr_expect(!t.ignore_merges && t.bos == -1, "glm4: no BOS id by default");
    tok_pre_free(&t);
}

// gpt-4o (o200k: gpt-oss; also llama4, kanana2, talkie, minimax-m2): as llama.cpp
// runs it, on the collapsed text where every non-ASCII letter is one marker that
// is both "not a-z" and "not A-Z". Its alternatives in order:
//   P?U*L+C? | P?U+L*C? | \p{N}{1,3} | " ?[^\s\p{L}\p{N}]+[\r\n/]*" | \s*[\r\n]+ | \s+(?!\S) | \s+
// with P = [^\r\n\p{L}\p{N}], U = a letter not a-z, L = a letter not A-Z,
// C = a contraction ('s 't 're 've 'm 'll 'd, any case).
Test(pretok_preset, gpt4o) {
    // P?U*L+C? takes " World's"; 12345 -> 123|45; all capitals: U+ (second alternative)
    expect_split("gpt-4o", "Hello World's 12345 HELLO", "Hello| World's| |123|45| HELLO");
    // a contraction only follows letters: I + 'M by U+C?, "don" + 'T by U*L+C?
    expect_split("gpt-4o", "I'M don'T", "I'M| don'T");
    // case changes split words: U* L+ (XMLP + arser)
    expect_split("gpt-4o", "camelCaseXMLParser", "camel|Case|XMLParser");
    // U* takes ÉCOLE, L+ then needs a lower-case letter: backtracking gives back
    // letters down to É (a non-ASCII letter is L too): "É", then COLE by U+
    expect_split("gpt-4o", "\u00C9COLE", "\u00C9|COLE");
    expect_split("llama4", "\u00C9cole", "\u00C9cole");
    // CJK: one run of letters; a punctuation run of its own
    expect_split("gpt-4o", "\u4F60\u597D\u4E16\u754C!!", "\u4F60\u597D\u4E16\u754C|!!");
    // the punctuation run takes the newlines after it; P before letters joins them
    expect_split("gpt-4o", "Hi!!!\n\nok", "Hi|!!!\n\n|ok");
    expect_split("gpt-4o", "path/to/x", "path|/to|/x");
    // \s*[\r\n]+ ends at the last newline; \s+(?!\S) leaves a space for " b"
    expect_split("gpt-4o", "a  \n  b", "a|  \n| | b");
    // emoji are neither letters nor numbers: " ?[^\s\p{L}\p{N}]+" with its space
    expect_split("gpt-4o", "ok \U0001F600\U0001F600!", "ok| \U0001F600\U0001F600!");
    // digit groups of three, any script (Arabic-Indic digits are \p{N})
    expect_split("gpt-4o", "1234567", "123|456|7");
    expect_split("minimax-m2", "x\u0661\u0662\u0663\u0664", "x|\u0661\u0662\u0663|\u0664");
    // a combining mark is neither: it is the P before the letters after it
    expect_split("gpt-4o", "e\u0301te", "e|\u0301te");
    // a tab is P; a newline is not; trailing white space is one word
    expect_split("gpt-4o", "\nHello\tworld  ", "\n|Hello|\tworld|  ");
}

Test(pretok_preset, deepseek_v3) {
    expect_split("deepseek-v3", "1234567", "123|456|7");
    // kanji, hiragana and katakana stay one word, the Latin letters another
    expect_split("deepseek-v3", "\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8abc",
                 "\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8|abc");
    // an ASCII punctuation character takes the ASCII letters after it; ")" is
    // left to " ?[\p{P}\p{S}]+"
    expect_split("deepseek-v3", "(x+y)", "(x|+y|)");
    // marks join letters: [\p{L}\p{M}]+
    expect_split("deepseek-v3", "e\u0301te", "e\u0301te");
    // '~' is \p{S} in llama.cpp de3ff815's collapsed text (it was not before):
    // " ?[\p{P}\p{S}]+[\r\n]*" takes it with the space before it
    expect_split("deepseek-v3", "a ~ b", "a| ~| b");
    // and it is no [^\r\n\p{L}\p{P}\p{S}] before a non-ASCII letter any more: "~" then "é"
    expect_split("deepseek-v3", "~\u00E9", "~|\u00E9");
}

// deepseek-llm: [\r\n], \s?[cased letters]+, \s?[ASCII and full-width punct]+, \s+$,
// [一-龥ࠀ-一가-퟿]+, \p{N}+
Test(pretok_preset, deepseek_llm) {
    // the letters split first; CJK and digits come out of what is left
    expect_split("deepseek-llm", "Hello \u4E16\u754C 123", "Hello| |\u4E16\u754C| |123");
    expect_split("deepseek-llm", "a, b", "a|,| b");
    // U+FF01 FULLWIDTH EXCLAMATION MARK is in the punctuation class
    expect_split("deepseek-llm", "\u4F60\u597D\uFF01", "\u4F60\u597D|\uFF01");
    // U+2126 OHM SIGN is in the letter class as itself (not as U+03A9)
    expect_split("deepseek-llm", "1\u2126", "1|\u2126");
}

// deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [一-龥ࠀ-一가-퟿]+, \p{N}
Test(pretok_preset, deepseek_coder) {
    // '=' is a symbol, not punctuation: it stays between ";" and the digit
    expect_split("deepseek-coder", "x=12;\n", "x|=|1|2|;|\n");
}

// falcon: [\p{P}\$\+<=>\^~\|`]+, the GPT-2 regex, [0-9][0-9][0-9]
Test(pretok_preset, falcon_starcoder_default_gpt2) {
    // '`' is in falcon's first class; " 12345" then splits at 3 digits
    expect_split("falcon", "a`b 12345", "a|`|b| |123|45");
    // starcoder (also refact, command-r, smollm): \p{N} first, then GPT-2
    expect_split("starcoder", "abc 2024", "abc| |2|0|2|4");
    expect_split("smollm", "x1", "x|1");
    // gpt-2 (also mpt, olmo): \s+(?!\S) leaves one space for the next word
    expect_split("gpt-2", "Hello   world", "Hello|  | world");
    expect_split("mpt", "it's", "it|'s");
    // "default" (no tokenizer.ggml.pre): punctuation runs, GPT-2, \p{N}+, 3 digits
    expect_split("default", "3.14159!!", "3|.|141|59|!!");
}

// kimi-k2 (llama.cpp's hand-written splitter only): Han runs, then the GPT-4o
// letter words with Han left out, \p{N}{1,3}, punctuation, white space. The
// splits in tests/fixtures/kimi-k2/splits.txt come from llama.cpp itself
// (its unicode_regex_split, see the README there): Chinese, mixed scripts,
// numbers, contractions, white-space and newline runs, emoji, and 120 random
// strings of a tricky alphabet.
Test(pretok_preset, kimi_k2_matches_llama_cpp) {
    FILE *f = fopen("tests/fixtures/kimi-k2/splits.txt", "r");
    cr_assert_not_null(f, "tests/fixtures/kimi-k2/splits.txt");
    coli_tokenizer t;
    memset(&t, 0, sizeof t);
    cr_assert_eq(tok_pre_setup(&t, "kimi-k2", 7), 0, "%s", coli_last_error());
    cr_expect(t.merges_optional && !t.ignore_merges && !t.add_bos, "kimi-k2: merges optional, merged, no BOS");
    char line[1024];
    int checked = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char text[512] = {0}, *tab = strchr(line, '\t');
        cr_assert_not_null(tab, "splits.txt: no tab in '%s'", line);
        size_t len = (size_t)(tab - line) / 2;
        for (size_t i = 0; i < len; i++) sscanf(line + 2 * i, "%2hhx", (unsigned char *)&text[i]);
        size_t n;
        uint32_t *cpts = decode(text, &n);
        tok_pieces w = {0};
        cr_assert_eq(tok_pretokenize(&t, cpts, n, &w), 0, "%s", coli_last_error());
        char got[256] = "", *o = got;
        for (size_t k = 0; k < w.n; k++) o += sprintf(o, "%s%zu", k ? " " : "", w.len[k]);
        tab[strcspn(tab, "\n")] = '\0';
        char *shown = join(cpts, &w);
        cr_expect_str_eq(got, tab + 1, "'%s': words %s (%s), llama.cpp %s", text, got, shown, tab + 1);
        free(shown);
        free(w.len);
        free(cpts);
        checked++;
    }
    fclose(f);
    tok_pre_free(&t);
    cr_expect_geq(checked, 140, "splits.txt: %d strings", checked);
    // the Han run keeps no space before it; letters right after Han start a word
    expect_split("kimi-k2", "\u4F60\u597D, world\uFF01\u6211\u662FKimi\u3002",
                 "\u4F60\u597D|,| world|\uFF01|\u6211\u662F|Kimi|\u3002");
    // a contraction joins the letters before it; upper and lower case alike
    expect_split("kimi-k2", "I'M don'T", "I'M| don'T");
}

Test(pretok_preset, flags_and_unknown_names) {
    coli_tokenizer t;
    memset(&t, 0, sizeof t);
    t.bos = 11;
    cr_assert_eq(tok_pre_setup(&t, "llama-bpe", 9), 0, "%s", coli_last_error());
    cr_expect(t.ignore_merges && t.add_bos, "llama-bpe: ignore_merges and BOS");
    tok_pre_free(&t);
    memset(&t, 0, sizeof t);
    t.bos = 11;
    cr_assert_eq(tok_pre_setup(&t, "chatglm-bpe", 11), 0, "%s", coli_last_error());
    cr_expect(!t.ignore_merges && t.bos == -1, "chatglm-bpe: no BOS id by default");
    tok_pre_free(&t);
    static const char *const names[] = {
        "llama-bpe", "qwen2",  "deepseek-llm", "deepseek-v3", "deepseek-coder", "falcon",      "starcoder",  "refact",
        "mpt",       "gpt-2",  "dbrx",         "command-r",   "smollm",         "chatglm-bpe", "default",    "olmo",
        "glm4",      "qwen35", "gpt-4o",       "llama4",      "kanana2",        "talkie",      "minimax-m2", "kimi-k2",
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        memset(&t, 0, sizeof t);
        cr_expect_eq(tok_pre_setup(&t, names[k], strlen(names[k])), 0, "%s: %s", names[k], coli_last_error());
        tok_pre_free(&t);
    }
    memset(&t, 0, sizeof t);
    cr_expect_eq(tok_pre_setup(&t, "qwen9-bpe", 9), COLI_EUNSUPPORTED);
    cr_expect_str_eq(coli_last_error(), "tokenizer.ggml.pre: unknown pre-tokenizer 'qwen9-bpe'");
    tok_pre_free(&t);
}

// ---------------------------------------------------------------------------
// through the tokenizer: ignore_merges and BOS follow the name

// Tokens: 0 <|begin|> (control), 1 a, 2 b, 3 c, 4 ab, 5 abc; one merge "a b"
// (so merging alone never makes "abc"), or none when n_merges is 0; BOS id 0.
// NULL, with the error set, when the tokenizer refuses the file.
static coli_tokenizer *tiny_bpe_merges(const char *pre, int n_merges) {
    static const char *const tokens[] = {"<|begin|>", "a", "b", "c", "ab", "abc"};
    static const int32_t types[] = {3, 1, 1, 1, 1, 1};
    static const char *const merges[] = {"a b"};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 6);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, 6);
    if (n_merges) gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
    char path[] = "/tmp/coli-test-pretok-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(gguf_writer_write(w, path), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    unlink(path);
    coli_tokenizer *tok = NULL;
    coli_tokenizer_new(f, &tok);
    gguf_close(&f);
    return tok;
}

static coli_tokenizer *tiny_bpe(const char *pre) {
    coli_tokenizer *tok = tiny_bpe_merges(pre, 1);
    cr_assert_not_null(tok, "%s", coli_last_error());
    return tok;
}

static void expect_tokens(const coli_tokenizer *tok, const char *text, int add_special, const int32_t *want,
                          int n_want) {
    int32_t got[16];
    int n = 0;
    cr_assert_eq(coli_tokenizer_encode(tok, text, strlen(text), add_special, 0, got, 16, &n), 0, "%s",
                 coli_last_error());
    cr_expect_eq(n, n_want, "'%s': %d tokens, expected %d", text, n, n_want);
    for (int i = 0; i < n && i < n_want; i++)
        cr_expect_eq(got[i], want[i], "'%s': token %d is %d, expected %d", text, i, got[i], want[i]);
}

Test(pretok_tokenizer, ignore_merges_and_bos) {
    // llama-bpe: the word "abc" is a token, so it is taken whole; BOS added
    coli_tokenizer *tok = tiny_bpe("llama-bpe");
    expect_tokens(tok, "abc", 1, (const int32_t[]){0, 5}, 2);
    // "abcab" is no token: merges give ab c ab
    expect_tokens(tok, "abcab", 0, (const int32_t[]){4, 3, 4}, 3);
    coli_tokenizer_free(&tok);
    // dbrx: the same regex, but merges always run and no BOS by default
    tok = tiny_bpe("dbrx");
    expect_tokens(tok, "abc", 1, (const int32_t[]){4, 3}, 2);
    coli_tokenizer_free(&tok);
}

Test(pretok_tokenizer, kimi_k2_without_merges) {
    // llama.cpp loads a kimi-k2 vocabulary with no merges: nothing merges,
    // each character is its own token (abc is a token, but not taken whole)
    coli_tokenizer *tok = tiny_bpe_merges("kimi-k2", 0);
    cr_assert_not_null(tok, "%s", coli_last_error());
    expect_tokens(tok, "abc", 1, (const int32_t[]){1, 2, 3}, 3);
    coli_tokenizer_free(&tok);
    // with merges it merges as any BPE vocabulary
    tok = tiny_bpe("kimi-k2");
    expect_tokens(tok, "abc", 0, (const int32_t[]){4, 3}, 2);
    coli_tokenizer_free(&tok);
    // any other name still needs them
    cr_expect_null(tiny_bpe_merges("qwen2", 0));
    cr_expect_str_eq(coli_last_error(), "tokenizer.ggml.merges: missing (a gpt2 tokenizer needs its merges)");
}

Test(pretok_tokenizer, unknown_name_is_one_line_naming_it) {
    gguf_writer *w = gguf_writer_new();
    static const char *const tokens[] = {"a"};
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "tekken");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 1);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", tokens, 0);
    char path[] = "/tmp/coli-test-pretok-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    cr_assert_eq(gguf_writer_write(w, path), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    unlink(path);
    coli_tokenizer *tok = NULL;
    cr_expect_eq(coli_tokenizer_new(f, &tok), COLI_EUNSUPPORTED);
    cr_expect_null(tok);
    cr_expect_str_eq(coli_last_error(), "tokenizer.ggml.pre: unknown pre-tokenizer 'tekken'");
    gguf_close(&f);
}

// ---------------------------------------------------------------------------
// arbitrary input: every preset splits any bytes into non-empty words that
// add up to the text, without an error

static uint32_t s_lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

Test(pretok_fuzz, every_preset_covers_the_text) {
    static const char *const names[] = {
        "default",     "llama-bpe", "dbrx",      "chatglm-bpe", "deepseek-llm", "deepseek-coder",
        "deepseek-v3", "falcon",    "starcoder", "gpt-2",       "jina-es",      "qwen2",
        "poro-chat",   "viking",    "glm4",      "qwen35",      "gpt-4o",       "kimi-k2",
    };
    // bytes weighted toward what the regexes care about: spaces, newlines,
    // digits, apostrophes, punctuation, and UTF-8 lead/continuation bytes
    static const char alphabet[] =
        " \n\r\t'sSeE0123.,!~`$\xE4\xB8\x80\xC3\xA9\xCC\x81\xE3\x80\x80\xF0\x9F\x98\x80\x80\xFF";
    uint32_t seed = 12345;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        coli_tokenizer t;
        memset(&t, 0, sizeof t);
        cr_assert_eq(tok_pre_setup(&t, names[k], strlen(names[k])), 0, "%s", coli_last_error());
        for (int iter = 0; iter < 200; iter++) {
            char text[96];
            size_t len = s_lcg(&seed) % sizeof text;
            for (size_t i = 0; i < len; i++) text[i] = alphabet[s_lcg(&seed) % (sizeof alphabet - 1)];
            uint32_t cpts[96];
            size_t n = 0;
            for (size_t off = 0; off < len;) cpts[n++] = coli_utf8_decode(text, len, &off);
            tok_pieces w = {0};
            cr_assert_eq(tok_pretokenize(&t, cpts, n, &w), 0, "%s: %s", names[k], coli_last_error());
            size_t total = 0;
            for (size_t i = 0; i < w.n; i++) {
                cr_assert_gt(w.len[i], 0, "%s: empty word", names[k]);
                total += w.len[i];
            }
            cr_assert_eq(total, n, "%s: words cover %zu of %zu code points", names[k], total, n);
            free(w.len);
        }
        tok_pre_free(&t);
    }
}
