/*
 * server_tools.c - the llama.cpp-style helper endpoints:
 *   POST /tokenize    {"content", "add_special"?, "parse_special"?, "with_pieces"?} -> {"tokens"}
 *   POST /detokenize  {"tokens": [ids]} -> {"content"}
 *   GET  /props       model, context, template, devices, build
 * Tokenizing is read-only and runs in the HTTP thread without the baton (server.h).
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

/* An optional boolean field: 0 (and *out set) or -1 when it is not a boolean. */
static int s_bool(const cJSON *o, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return -1;
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Refuse fields other than those in known (NULL-terminated): the name, or NULL. */
static const char *s_unknown(const cJSON *o, const char *const *known) {
    const cJSON *f;
    cJSON_ArrayForEach(f, o) {
        const char *const *k = known;
        while (*k && strcmp(*k, f->string)) k++;
        if (!*k) return f->string;
    }
    return NULL;
}

static cJSON *s_tokens_json(server *s, const int32_t *ids, int n, int with_pieces) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        const char *bytes = NULL;
        size_t len = 0;
        if (coli_token_to_bytes(s->model, ids[i], &bytes, &len) != 0) len = 0;
        char *piece = utf8_lossy(bytes, len);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", ids[i]);
        cJSON_AddStringToObject(e, "piece", piece ? piece : "");
        free(piece);
        cJSON_AddItemToArray(arr, e);
    }
    return o;
}

/* The body as a JSON object, checked as the /v1 endpoints check theirs (openai_parse_json:
 * a \u0000 would cut the text, a lone surrogate is no text); NULL when refused (replied). */
static cJSON *s_body_object(server *s, struct MHD_Connection *c, int ep, const char *body, size_t len, int *ret) {
    char err[512];
    const char *param = NULL;
    int status = 0;
    cJSON *root = openai_parse_json(body, len, err, sizeof err, &param, &status);
    if (root && !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = NULL;
        status = 400;
        snprintf(err, sizeof err, "request body: must be a JSON object");
    }
    if (!root)
        *ret = http_reply_error(s, c, ep, status, status == 400 ? "invalid_request_error" : "server_error", NULL, param,
                                "%s", err);
    return root;
}

int handle_tokenize(server *s, struct MHD_Connection *c, const char *body, size_t len) {
    static const char *const known[] = {"content", "add_special", "parse_special", "with_pieces", "model", NULL};
    int ret = MHD_NO;
    cJSON *root = s_body_object(s, c, EP_TOKENIZE, body, len, &ret);
    if (!root) return ret;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    int add_special = 0, parse_special = 1, with_pieces = 0, rc;
    char err[160] = "";
    const char *bad = s_unknown(root, known);
    if (bad)
        snprintf(err, sizeof err, "%.60s: not supported by this server (refused rather than ignored)", bad);
    else if (!cJSON_IsString(content))
        snprintf(err, sizeof err, "content: required (a string)");
    else if (s_bool(root, "add_special", &add_special) || s_bool(root, "parse_special", &parse_special) ||
             s_bool(root, "with_pieces", &with_pieces))
        snprintf(err, sizeof err, "add_special, parse_special, with_pieces: must be true or false");
    if (*err) {
        cJSON_Delete(root);
        return http_reply_error(s, c, EP_TOKENIZE, 400, "invalid_request_error", NULL, NULL, "%s", err);
    }
    int32_t *ids = NULL;
    int n = 0;
    rc = text_tokenize(s->model, content->valuestring, strlen(content->valuestring), add_special, parse_special, &ids,
                       &n);
    cJSON_Delete(root);
    if (rc)
        return http_reply_error(s, c, EP_TOKENIZE, rc == COLI_ENOMEM ? 500 : 400,
                                rc == COLI_ENOMEM ? "server_error" : "invalid_request_error", NULL, "content", "%s",
                                rc == COLI_ENOMEM ? "out of memory" : coli_last_error());
    cJSON *o = s_tokens_json(s, ids, n, with_pieces);
    free(ids);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return http_reply_json(c, 200, text);
}

int handle_detokenize(server *s, struct MHD_Connection *c, const char *body, size_t len) {
    static const char *const known[] = {"tokens", "model", NULL};
    int ret = MHD_NO;
    cJSON *root = s_body_object(s, c, EP_DETOKENIZE, body, len, &ret);
    if (!root) return ret;
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *t;
    const char *bad = s_unknown(root, known);
    char err[160] = "";
    if (bad)
        snprintf(err, sizeof err, "%.60s: not supported by this server (refused rather than ignored)", bad);
    else if (!cJSON_IsArray(tokens))
        snprintf(err, sizeof err, "tokens: required (an array of token ids)");
    size_t cap = 1, at = 0;
    char *out = *err ? NULL : malloc(cap);
    int i = 0;
    const cJSON *list = *err ? NULL : tokens;
    cJSON_ArrayForEach(t, list) {
        const char *bytes = NULL;
        size_t n = 0;
        double v = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (v != (int32_t)v || coli_token_to_bytes(s->model, (int32_t)v, &bytes, &n) != 0) {
            snprintf(err, sizeof err, "tokens[%d]: must be a token id from 0 to %d", i, s->info.n_vocab - 1);
            break;
        }
        char *grown = out ? realloc(out, cap + n) : NULL;
        if (!grown) break;
        out = grown;
        cap += n;
        memcpy(out + at, bytes, n);
        at += n;
        i++;
    }
    cJSON_Delete(root);
    if (*err) {
        free(out);
        return http_reply_error(s, c, EP_DETOKENIZE, 400, "invalid_request_error", NULL, "tokens", "%s", err);
    }
    char *content = out ? utf8_lossy(out, at) : NULL;
    free(out);
    if (!content) return http_reply_error(s, c, EP_DETOKENIZE, 500, "server_error", NULL, NULL, "out of memory");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", content);
    free(content);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return http_reply_json(c, 200, text);
}

/* The devices of the stats JSON: one entry per worker. */
static void s_devices(cJSON *out, const char *stats_json) {
    cJSON *stats = stats_json ? cJSON_Parse(stats_json) : NULL, *w;
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(stats, "executor");
    cJSON_AddStringToObject(out, "executor", cJSON_IsString(ex) ? ex->valuestring : "unknown");
    cJSON *list = cJSON_AddArrayToObject(out, "devices");
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(stats, "workers")) {
        cJSON *e = cJSON_CreateObject();
        const char *keys[] = {"id", "device", "plugin", "status"};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(w, keys[k]);
            if (v) cJSON_AddItemToObject(e, keys[k], cJSON_Duplicate(v, 1));
        }
        cJSON_AddItemToArray(list, e);
    }
    cJSON_Delete(stats);
}

int handle_props(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "model_name", s->info.name ? s->info.name : "");
    cJSON_AddStringToObject(o, "model_path", s->model_path ? s->model_path : "");
    cJSON_AddStringToObject(o, "architecture", s->info.arch);
    cJSON_AddNumberToObject(o, "n_ctx", s->cfg.n_ctx > 0 ? s->cfg.n_ctx : s->info.n_ctx);
    cJSON_AddNumberToObject(o, "n_ctx_train", s->info.n_ctx);
    cJSON_AddNumberToObject(o, "n_vocab", s->info.n_vocab);
    cJSON_AddNumberToObject(o, "total_slots", s->cfg.n_slots);
    cJSON_AddStringToObject(o, "chat_template", chat_family_name(s->family));
    cJSON_AddStringToObject(o, "chat_template_source", s->family_source ? s->family_source : "none");
    /* the request defaults the flags set: chat_template_kwargs ({} when not given), reasoning_format */
    cJSON *kw = cJSON_AddObjectToObject(o, "chat_template_kwargs");
    if (s->cfg.chat_thinking != CHAT_THINKING_DEFAULT)
        cJSON_AddBoolToObject(kw, "enable_thinking", s->cfg.chat_thinking);
    static const char *const effort[] = {"", "low", "medium", "high"};
    if (s->cfg.chat_effort != CHAT_EFFORT_DEFAULT)
        cJSON_AddStringToObject(kw, "reasoning_effort", effort[s->cfg.chat_effort]);
    cJSON_AddStringToObject(o, "reasoning_format", s->cfg.reasoning == REASONING_DEEPSEEK ? "deepseek" : "none");
    cJSON_AddBoolToObject(o, "allow_special_in_content", s->cfg.allow_special_in_content);
    char *stats = server_stats_fresh(s);
    s_devices(o, stats);
    free(stats);
    cJSON *b = cJSON_AddObjectToObject(o, "build");
    cJSON_AddStringToObject(b, "name", "colibri");
    cJSON_AddNumberToObject(b, "api_version", COLI_API_VERSION);
    cJSON_AddStringToObject(b, "compiler", __VERSION__);
    cJSON_AddStringToObject(b, "date", __DATE__);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return http_reply_json(c, 200, text);
}
