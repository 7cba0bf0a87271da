/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer with the bundled
 * vocabulary (models/tiny-moe-4e2r-f16.gguf, loaded vocab-only once; run
 * from the repository root, or COLI_FUZZ_VOCAB names another GGUF). Each
 * input is encoded (with and without special-token parsing and BOS; the
 * first byte chooses) and every id decoded back; then its bytes, read as
 * 16-bit ids, are decoded, in range or not. Ids must lie in the vocabulary,
 * the count must agree between the sizing call and the real one, and a
 * bad id must be refused with COLI_ERANGE, never read. coli_tokenize_plain
 * gets ranges cut at the input's 0x01 bytes (every other piece plain): each
 * id in range, and with the whole text one range it must give what
 * parse_special 0 gives, with none what parse_special 1 gives.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/settings.h"

static coli_model *s_model;
static int s_n_vocab;
static volatile unsigned s_sink;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static coli_settings set; /* PATH_MAX strings: not on the stack */
    coli_settings_from_env(&set);
    const char *path = set.fuzz_vocab[0] ? set.fuzz_vocab : "models/tiny-moe-4e2r-f16.gguf";
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.vocab_only = 1;
    if (coli_model_load(path, &mp, &s_model) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, coli_last_error());
        abort();
    }
    coli_model_info info;
    coli_model_get_info(s_model, &info);
    s_n_vocab = info.n_vocab;
    return 0;
}

static void s_decode(int32_t id) {
    const char *b = NULL;
    size_t n = 0;
    int rc = coli_token_to_bytes(s_model, id, &b, &n);
    if (id < 0 || id >= s_n_vocab) {
        if (rc != COLI_ERANGE) __builtin_trap();
        return;
    }
    if (rc != 0) __builtin_trap();
    for (size_t i = 0; i < n; i++) s_sink += (unsigned char)b[i];
    const char *t = coli_token_text(s_model, id);
    if (!t) __builtin_trap();
    s_sink += (unsigned)strlen(t);
    s_sink += (unsigned)coli_token_is_eog(s_model, id);
}

/* ids of text[0..len) (malloc'd into *ids, their count), by coli_tokenize_plain when
 * plain is not NULL, else by coli_tokenize; -1 when refused. */
static int s_ids(const char *text, size_t len, int parse_special, const coli_text_span *plain, int n_plain,
                 int32_t **ids) {
    int n = -1, rc = plain ? coli_tokenize_plain(s_model, text, len, 0, plain, n_plain, NULL, 0, &n)
                           : coli_tokenize(s_model, text, len, 0, parse_special, NULL, 0, &n);
    if ((rc != 0 && rc != COLI_ERANGE) || !(*ids = malloc((size_t)(n > 0 ? n : 1) * sizeof **ids))) return -1;
    int n2 = -1;
    rc = plain ? coli_tokenize_plain(s_model, text, len, 0, plain, n_plain, *ids, n, &n2)
               : coli_tokenize(s_model, text, len, 0, parse_special, *ids, n, &n2);
    if (rc != 0 || n2 != n) __builtin_trap();
    for (int i = 0; i < n; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= s_n_vocab) __builtin_trap();
    return n;
}

static int s_same(const char *text, size_t len, int parse_special, const coli_text_span *plain, int n_plain) {
    int32_t *a = NULL, *b = NULL;
    int na = s_ids(text, len, parse_special, NULL, 0, &a), nb = s_ids(text, len, 0, plain, n_plain, &b);
    int same = na < 0 || nb < 0 || (na == nb && !memcmp(a, b, (size_t)na * sizeof *a));
    free(a);
    free(b);
    return same;
}

/* Plain ranges: the pieces between 0x01 bytes, every other one. */
static void s_plain(const char *text, size_t len) {
    coli_text_span spans[64];
    int n = 0, piece = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len && n < 64; i++)
        if (i == len || text[i] == 1) {
            if (piece++ % 2) spans[n++] = (coli_text_span){start, i - start};
            start = i + 1;
        }
    int32_t *ids = NULL;
    s_ids(text, len, 0, spans, n, &ids);
    free(ids);
    if (!s_same(text, len, 0, &(coli_text_span){0, len}, 1) || !s_same(text, len, 1, spans, 0)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int add_special = data[0] & 1, parse_special = (data[0] >> 1) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int n = -1;
    int rc = coli_tokenize(s_model, text, len, add_special, parse_special, NULL, 0, &n);
    if (rc != 0 && rc != COLI_ERANGE) return 0; /* refused (with a reason) */
    if (n < 0) __builtin_trap();
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) return 0;
    int n2 = -1;
    rc = coli_tokenize(s_model, text, len, add_special, parse_special, ids, n, &n2);
    if (rc != 0 || n2 != n) __builtin_trap(); /* sizing and the real call agree */
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s_n_vocab) __builtin_trap();
        s_decode(ids[i]);
    }
    free(ids);
    if (data[0] & 8) s_plain(text, len);
    for (size_t i = 1; i + 1 < size; i += 2) /* arbitrary ids, in range or not */
        s_decode((int32_t)(int16_t)(data[i] | data[i + 1] << 8) * (data[0] & 4 ? 1 : 3));
    return 0;
}
