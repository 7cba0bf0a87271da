/* tokenize.c - text to token ids, sized for the caller; see tokenize.h. */
#include "tools/coli/chat/tokenize.h"

#include <stdlib.h>

/* What text_tokenize and chat_tokenize ask the library for. */
typedef struct tokenize_call {
    int add_special, parse_special;
    const coli_text_span *plain; /* non-NULL: coli_tokenize_plain */
    int n_plain;
} tokenize_call;

static int s_tokenize_into(const coli_model *m, const char *text, size_t len, const tokenize_call *t, int32_t *ids,
                           int cap, int *n) {
    if (t->plain) return coli_tokenize_plain(m, text, len, t->add_special, t->plain, t->n_plain, ids, cap, n);
    return coli_tokenize(m, text, len, t->add_special, t->parse_special, ids, cap, n);
}

static int s_tokenize(const coli_model *m, const char *text, size_t len, const tokenize_call *t, int32_t **ids,
                      int *n) {
    /* tokens rarely outnumber bytes (BOS/EOS and odd vocabularies aside): one try mostly does */
    int cap = (int)(len < (1u << 26) ? len : (1u << 26)) + 16, rc = COLI_ERANGE;
    *ids = NULL;
    *n = 0;
    for (int attempt = 0; attempt < 2 && rc == COLI_ERANGE; attempt++) {
        if (attempt) {
            if (*n <= cap) break; /* not a short buffer: more tokens than an int counts */
            cap = *n;             /* the library said how many it needs */
        }
        if (!(*ids = malloc((size_t)cap * sizeof **ids))) return COLI_ENOMEM;
        rc = s_tokenize_into(m, text, len, t, *ids, cap, n);
        if (rc) {
            free(*ids);
            *ids = NULL;
        }
    }
    return rc;
}

int text_tokenize(const coli_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t **ids,
                  int *n) {
    return s_tokenize(m, text, len, &(tokenize_call){add_special, parse_special, NULL, 0}, ids, n);
}

int chat_tokenize(const coli_model *m, const char *text, size_t len, const coli_text_span *plain, int n_plain,
                  int32_t **ids, int *n) {
    /* no range (no message had text) parses as coli_tokenize does */
    return s_tokenize(m, text, len, &(tokenize_call){0, 1, n_plain > 0 ? plain : NULL, n_plain}, ids, n);
}
