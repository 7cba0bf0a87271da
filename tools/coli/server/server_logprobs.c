/*
 * server_logprobs.c - per-token log-probabilities (coli_generate_logprobs)
 * recorded while generating and written in OpenAI's shapes:
 *   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
 *   completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
 * A token's "token" is its bytes as text; bytes that are not valid UTF-8
 * (a character split across tokens) become U+FFFD there, and "bytes" keeps
 * them exactly, as OpenAI does.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

int logprobs_record(coli_context *ctx, job *j, size_t start, size_t end) {
    if (j->n_lp == j->lp_cap) {
        int cap = j->lp_cap ? j->lp_cap * 2 : 64;
        tok_logprob *t = realloc(j->lp, (size_t)cap * sizeof *t);
        if (!t) return -1;
        j->lp = t;
        j->lp_cap = cap;
    }
    tok_logprob *e = &j->lp[j->n_lp];
    int n = coli_generate_logprobs(ctx, &e->chosen, e->top, j->req.sp.top_logprobs);
    if (n < 0) return -1;
    e->n_top = n;
    e->start = start;
    e->end = end;
    j->n_lp++;
    return 0;
}

void logprobs_truncate(job *j, size_t len) {
    while (j->n_lp > 0 && j->lp[j->n_lp - 1].start >= len) j->n_lp--;
}

/* {"token", "logprob", "bytes"} of one token, into o. */
static void s_token_fields(server *s, cJSON *o, const coli_logprob *t) {
    const char *bytes = NULL;
    size_t n = 0;
    if (coli_token_to_bytes(s->model, t->id, &bytes, &n) != 0) n = 0;
    char *text = utf8_lossy(bytes, n);
    cJSON_AddStringToObject(o, "token", text ? text : "");
    free(text);
    cJSON_AddNumberToObject(o, "logprob", t->logprob);
    cJSON *arr = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber((unsigned char)bytes[i]));
}

static cJSON *s_chat(server *s, const tok_logprob *lp, int n) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        s_token_fields(s, e, &lp[i].chosen);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < lp[i].n_top; k++) {
            cJSON *t = cJSON_CreateObject();
            s_token_fields(s, t, &lp[i].top[k]);
            cJSON_AddItemToArray(top, t);
        }
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

/* The token's text as the completions shape shows it (no "bytes" there). */
static char *s_piece(server *s, int32_t id) {
    const char *bytes = NULL;
    size_t n = 0;
    if (coli_token_to_bytes(s->model, id, &bytes, &n) != 0) n = 0;
    return utf8_lossy(bytes, n);
}

static cJSON *s_completions(server *s, const tok_logprob *lp, int n) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = 0; i < n; i++) {
        char *piece = s_piece(s, lp[i].chosen.id);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(piece ? piece : ""));
        free(piece);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp[i].chosen.logprob));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < lp[i].n_top; k++) {
            char *alt = s_piece(s, lp[i].top[k].id);
            if (alt && !cJSON_GetObjectItemCaseSensitive(top, alt)) /* two ids may share a text */
                cJSON_AddNumberToObject(top, alt, lp[i].top[k].logprob);
            free(alt);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)lp[i].start));
    }
    return o;
}

cJSON *logprobs_json(server *s, const job *j, const tok_logprob *lp, int n) {
    return j->req.chat ? s_chat(s, lp, n) : s_completions(s, lp, n);
}
