/*
 * server_openai.c - an OpenAI request body -> gen_request. Every field is
 * checked for its type and range; a bad one gives HTTP 400 with a message
 * that names the field (and `param` set to it), as OpenAI does. A field
 * this server does not know is refused (400 naming it), never ignored:
 * "user" is the one extra accepted (it changes no output), "cache_salt"
 * (vLLM's) picks the request's prefix cache domain; known options
 * it cannot honour (tools, echo, best_of > 1, ...) are refused when set to
 * anything but their neutral value.
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/coli/server/server.h"

#define MAX_MESSAGES 4096

void gen_request_free(gen_request *r) {
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->prompt);
    free(r->plain);
    free(r->ids);
    json_grammar_free(r->grammar);
    free(r->bias_id);
    free(r->bias);
    free(r->cache_salt);
    memset(r, 0, sizeof *r);
}

typedef struct parse_ctx {
    char *err;
    size_t cap;
    const char **param;
} parse_ctx;

static int s_bad(parse_ctx *p, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int s_bad(parse_ctx *p, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->cap, fmt, ap);
    va_end(ap);
    *p->param = param;
    return 400;
}

static const cJSON *s_get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL; /* null means "not given" for every field */
}

static int s_is_int(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble &&
           v->valuedouble >= lo && v->valuedouble <= hi;
}

/* Every field a request may carry; anything else is refused (400 naming it) rather than ignored. */
static const char *const s_known_chat[] = {
    "messages", "model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "seed", "max_tokens",
    "max_completion_tokens", "stop", "presence_penalty", "frequency_penalty", "repeat_penalty", "repeat_last_n",
    "logprobs", "top_logprobs", "response_format", "chat_template_kwargs", "reasoning_format", "reasoning_effort",
    "user", "cache_salt",
    /* accepted only at their neutral value (s_unsupported) */
    "n", "logit_bias", "tools", "functions", "tool_choice", "function_call", "parallel_tool_calls", NULL};
static const char *const s_known_completions[] = {"prompt",
                                                  "model",
                                                  "stream",
                                                  "stream_options",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "seed",
                                                  "max_tokens",
                                                  "stop",
                                                  "presence_penalty",
                                                  "frequency_penalty",
                                                  "repeat_penalty",
                                                  "repeat_last_n",
                                                  "logprobs",
                                                  "response_format",
                                                  "user",
                                                  "n",
                                                  "best_of",
                                                  "echo",
                                                  "suffix",
                                                  "logit_bias",
                                                  "cache_salt",
                                                  NULL};

static int s_unknown_fields(parse_ctx *p, const cJSON *root, int chat) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *const *k = chat ? s_known_chat : s_known_completions;
        while (*k && strcmp(*k, f->string) != 0) k++;
        if (*k) continue;
        static __thread char name[64]; /* param outlives the parsed body; one request per thread at a time */
        snprintf(name, sizeof name, "%s", f->string);
        return s_bad(p, name, "%s: not supported by this server (refused rather than ignored)", name);
    }
    return 0;
}

/* Options that must keep their neutral value: absent, null, false, 0, 1 (best_of), {} or []. */
static int s_unsupported(parse_ctx *p, const cJSON *root) {
    static const char *names[] = {
        "echo", "suffix", "tools", "functions", "tool_choice", "function_call", "parallel_tool_calls", "best_of"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const cJSON *v = s_get(root, names[i]);
        if (!v) continue;
        int neutral = cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0) ||
                      ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child) ||
                      (cJSON_IsString(v) && (!strcmp(v->valuestring, "none") || !*v->valuestring));
        if (!strcmp(names[i], "best_of")) {
            if (s_is_int(v, 1, 1)) continue;
            if (!s_is_int(v, 1, 1e9)) return s_bad(p, names[i], "%s: must be a positive integer", names[i]);
            return s_bad(p, names[i], "%s: only 1 is supported", names[i]);
        }
        if (!neutral) return s_bad(p, names[i], "%s: not supported by this server", names[i]);
    }
    return 0;
}

/* reasoning_format (chat): none, deepseek or auto (server_reasoning.c). */
static int s_reasoning_format(server *s, parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "reasoning_format");
    r->reasoning = s->cfg.reasoning;
    if (!v) return 0;
    if (!cJSON_IsString(v) || reasoning_format_parse(v->valuestring, &r->reasoning))
        return s_bad(p, "reasoning_format", "reasoning_format: must be one of %s", REASONING_FORMAT_NAMES);
    return 0;
}

/* response_format: text, json_object or json_schema (server_grammar.c). */
static int s_response_format(server *s, parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *rf = s_get(root, "response_format");
    if (!rf) return 0;
    const cJSON *type = cJSON_IsObject(rf) ? s_get(rf, "type") : NULL;
    if (!cJSON_IsString(type))
        return s_bad(p, "response_format", "response_format: must be an object with a string \"type\"");
    if (!strcmp(type->valuestring, "text")) return 0;
    int rc = json_grammar_new(s, rf, &r->grammar, p->err, p->cap);
    if (rc) *p->param = "response_format";
    return rc;
}

/* What a request does to each step's logits: its logit_bias, then the JSON
 * grammar's mask (which the bias cannot get around). user: the gen_request. */
static void s_logit_filter(void *user, float *logits, int n_vocab) {
    const gen_request *r = user;
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_id[i] < n_vocab) logits[r->bias_id[i]] += r->bias[i];
    if (r->grammar) json_grammar_filter(r->grammar, logits, n_vocab);
}

/* logit_bias: {"token id": bias in -100..100}, OpenAI's shape; -100 bans the token. */
static int s_logit_bias(server *s, parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "logit_bias"), *e;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return s_bad(p, "logit_bias", "logit_bias: must be an object of token id: bias");
    const int n = cJSON_GetArraySize(v);
    if (n > SERVE_MAX_LOGIT_BIAS)
        return s_bad(p, "logit_bias", "logit_bias: %d entries, at most %d", n, SERVE_MAX_LOGIT_BIAS);
    if (n == 0) return 0;
    if (!(r->bias_id = malloc((size_t)n * sizeof *r->bias_id)) || !(r->bias = malloc((size_t)n * sizeof *r->bias)))
        return 500;
    cJSON_ArrayForEach(e, v) {
        char *end = NULL;
        const long id = e->string[0] >= '0' && e->string[0] <= '9' ? strtol(e->string, &end, 10) : -1;
        if (id < 0 || *end || id >= s->info.n_vocab)
            return s_bad(p, "logit_bias", "logit_bias: key '%.32s' is not a token id of this model (0..%d)", e->string,
                         s->info.n_vocab - 1);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
            return s_bad(p, "logit_bias", "logit_bias[\"%.32s\"]: must be a number from -100 to 100", e->string);
        r->bias_id[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = e->valuedouble == -100 ? -INFINITY : (float)e->valuedouble;
    }
    return 0;
}

/* A number field in [lo, hi] into *out; 0 if absent. */
static int s_number(parse_ctx *p, const cJSON *root, const char *name, double lo, double hi, float *out) {
    const cJSON *v = s_get(root, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return s_bad(p, name, "%s: must be a number from %g to %g", name, lo, hi);
    *out = (float)v->valuedouble;
    return 0;
}

/* Penalties and min_p (llama.cpp's definitions, coordinator/sampler.h). */
static int s_penalties(parse_ctx *p, const cJSON *root, gen_request *r) {
    int rc = s_number(p, root, "presence_penalty", -2, 2, &r->sp.presence_penalty);
    if (!rc) rc = s_number(p, root, "frequency_penalty", -2, 2, &r->sp.frequency_penalty);
    if (!rc) rc = s_number(p, root, "repeat_penalty", 0, 100, &r->sp.repeat_penalty);
    if (!rc) rc = s_number(p, root, "min_p", 0, 1, &r->sp.min_p);
    const cJSON *v = s_get(root, "repeat_last_n");
    if (!rc && v) {
        if (!s_is_int(v, -1, 1 << 24))
            return s_bad(p, "repeat_last_n", "repeat_last_n: must be an integer >= -1 (-1: all)");
        r->sp.repeat_last_n = (int)v->valuedouble;
    }
    return rc;
}

/* chat: logprobs (bool) + top_logprobs (0..20); completions: logprobs (0..20 alternatives). */
static int s_logprobs(parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *lp = s_get(root, "logprobs"), *top = s_get(root, "top_logprobs");
    if (!r->chat) {
        if (!lp) return 0;
        if (!s_is_int(lp, 0, COLI_MAX_TOP_LOGPROBS))
            return s_bad(p, "logprobs", "logprobs: must be an integer from 0 to %d", COLI_MAX_TOP_LOGPROBS);
        r->sp.logprobs = 1;
        r->sp.top_logprobs = (int)lp->valuedouble;
        return 0;
    }
    if (lp && !cJSON_IsBool(lp)) return s_bad(p, "logprobs", "logprobs: must be true or false");
    r->sp.logprobs = lp && cJSON_IsTrue(lp);
    if (!top) return 0;
    if (!s_is_int(top, 0, COLI_MAX_TOP_LOGPROBS))
        return s_bad(p, "top_logprobs", "top_logprobs: must be an integer from 0 to %d", COLI_MAX_TOP_LOGPROBS);
    if (!r->sp.logprobs && top->valuedouble > 0)
        return s_bad(p, "top_logprobs", "top_logprobs: requires logprobs: true");
    r->sp.top_logprobs = (int)top->valuedouble;
    return 0;
}

static int s_sampling(server *s, parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v;
    r->sp = s->cfg.sampling; /* OpenAI's defaults (the full distribution), or serve's flags */
    r->sp.n_predict = 0;
    if (r->sp.seed == UINT64_MAX)
        r->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20) ^ (uint64_t)(uintptr_t)r;
    if ((v = s_get(root, "temperature"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 2))
            return s_bad(p, "temperature", "temperature: must be a number from 0 to 2");
        r->sp.temperature = (float)v->valuedouble;
    }
    if ((v = s_get(root, "top_p"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1))
            return s_bad(p, "top_p", "top_p: must be a number in (0, 1]");
        /* below the smallest float (1e-300 rounds to 0): the nucleus is the top token, as for FLT_MIN */
        r->sp.top_p = v->valuedouble < FLT_MIN ? FLT_MIN : (float)v->valuedouble;
    }
    if ((v = s_get(root, "top_k"))) {
        if (!s_is_int(v, 0, 1e9)) return s_bad(p, "top_k", "top_k: must be an integer >= 0");
        r->sp.top_k = (int)v->valuedouble;
    }
    if ((v = s_get(root, "seed"))) {
        if (!s_is_int(v, -9007199254740992.0, 9007199254740992.0)) return s_bad(p, "seed", "seed: must be an integer");
        r->sp.seed = (uint64_t)(int64_t)v->valuedouble;
    }
    const char *mt = r->chat && s_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((v = s_get(root, mt))) {
        if (!s_is_int(v, 1, 1e15)) return s_bad(p, mt, "%s: must be an integer from 1 to 10^15", mt);
        r->sp.n_predict = v->valuedouble > (1 << 30) ? (1 << 30) : (int)v->valuedouble;
        r->max_tokens_given = 1;
    }
    return 0;
}

/* cache_salt: requests share prefix cache blocks only with requests of the same salt (and API key). */
static int s_cache_salt(parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "cache_salt");
    if (!v) return 0;
    if (!cJSON_IsString(v) || !*v->valuestring) return s_bad(p, "cache_salt", "cache_salt: must be a non-empty string");
    if (strlen(v->valuestring) > SERVE_MAX_CACHE_SALT)
        return s_bad(p, "cache_salt", "cache_salt: longer than %d bytes", SERVE_MAX_CACHE_SALT);
    return (r->cache_salt = strdup(v->valuestring)) ? 0 : 500;
}

/* n: how many answers (1..SERVE_MAX_CHOICES); more than one only without stream. */
static int s_choices(parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "n");
    r->n_choices = 1;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!s_is_int(v, 1, SERVE_MAX_CHOICES))
        return s_bad(p, "n", "n: must be an integer from 1 to %d", SERVE_MAX_CHOICES);
    r->n_choices = (int)v->valuedouble;
    if (r->n_choices > 1 && r->stream)
        return s_bad(p, "n", "n: more than one answer is not supported with stream (ask for them unstreamed)");
    return 0;
}

static int s_stop(parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "stop"), *e;
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        if (*v->valuestring && !(r->stop[r->n_stop++] = strdup(v->valuestring))) return 500;
        return 0;
    }
    if (!cJSON_IsArray(v)) return s_bad(p, "stop", "stop: must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > SERVE_MAX_STOP) return s_bad(p, "stop", "stop: at most %d strings", SERVE_MAX_STOP);
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) return s_bad(p, "stop", "stop: every element must be a string");
        if (*e->valuestring && !(r->stop[r->n_stop++] = strdup(e->valuestring))) return 500;
    }
    return 0;
}

/* A JSON response_format: stop strings apply only after the value is complete, so
 * none can cut it (stop ["{"] had left an empty answer). The grammar then allows
 * nothing but the end of the answer: no text follows for a stop string to match,
 * so they are checked as above and then dropped (docs/api.md says so). */
static void s_stop_after_json(gen_request *r) {
    if (!r->grammar) return;
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    r->n_stop = 0;
}

static int s_stream(parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "stream"), *o;
    if (v && !cJSON_IsBool(v)) return s_bad(p, "stream", "stream: must be true or false");
    r->stream = v && cJSON_IsTrue(v);
    if ((o = s_get(root, "stream_options"))) {
        if (!cJSON_IsObject(o)) return s_bad(p, "stream_options", "stream_options: must be an object");
        if (!r->stream) return s_bad(p, "stream_options", "stream_options: only allowed when stream is true");
        const cJSON *u = s_get(o, "include_usage");
        if (u && !cJSON_IsBool(u))
            return s_bad(p, "stream_options.include_usage", "stream_options.include_usage: must be true or false");
        r->include_usage = u && cJSON_IsTrue(u);
    }
    const cJSON *model = s_get(root, "model");
    if (model && !cJSON_IsString(model)) return s_bad(p, "model", "model: must be a string");
    return 0;
}

/* content: a string, or an array of {"type":"text","text":...} parts (joined). */
static int s_content(parse_ctx *p, const cJSON *c, int i, char **out) {
    char name[64];
    snprintf(name, sizeof name, "messages[%d].content", i);
    if (cJSON_IsString(c)) return (*out = strdup(c->valuestring)) ? 0 : 500;
    if (!cJSON_IsArray(c)) return s_bad(p, "messages", "%s: must be a string or an array of text parts", name);
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = s_get(part, "type"), *text = s_get(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return s_bad(p, "messages", "%s: only parts of type \"text\" with a string \"text\" are supported", name);
        len += strlen(text->valuestring);
    }
    if (!(*out = malloc(len + 1))) return 500;
    size_t at = 0; /* appended at a known end: strcat would rescan it per part */
    cJSON_ArrayForEach(part, c) {
        const char *text = s_get(part, "text")->valuestring;
        size_t n = strlen(text);
        memcpy(*out + at, text, n);
        at += n;
    }
    (*out)[at] = '\0';
    return 0;
}

static int s_messages(server *s, parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *msgs = s_get(root, "messages"), *m;
    if (!msgs) return s_bad(p, "messages", "messages: required");
    if (!cJSON_IsArray(msgs)) return s_bad(p, "messages", "messages: must be an array");
    int n = cJSON_GetArraySize(msgs);
    if (n < 1 || n > MAX_MESSAGES) return s_bad(p, "messages", "messages: must hold 1 to %d messages", MAX_MESSAGES);
    const cJSON *kwargs = s_get(root, "chat_template_kwargs");
    chat_options opts = {s->bos_text,          s->eos_text,        chat_template_default_system(s->info.chat_template),
                         s->cfg.chat_thinking, s->cfg.chat_effort, NULL};
    if ((kwargs && chat_kwargs_parse(kwargs, &opts.thinking, &opts.effort, p->err, p->cap)) ||
        chat_thinking_check(s->family, opts.thinking, p->err, p->cap) ||
        chat_effort_check(s->family, opts.effort, p->err, p->cap)) {
        *p->param = "chat_template_kwargs";
        return 400;
    }
    const cJSON *effort = s_get(root, "reasoning_effort");
    if (effort && !cJSON_IsNull(effort)) {
        int e = cJSON_IsString(effort) ? chat_effort_parse(effort->valuestring) : -1;
        if (e < 0) return s_bad(p, "reasoning_effort", "reasoning_effort: must be low, medium or high");
        if (chat_effort_check(s->family, e, p->err, p->cap)) {
            *p->param = "reasoning_effort";
            return 400;
        }
        opts.effort = e;
    }
    r->syntax = chat_syntax_of(s->family, &opts);
    chat_message *cm = calloc((size_t)n, sizeof *cm);
    if (!cm) return 500;
    int rc = 0, i = 0;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = s_get(m, "role"), *content = s_get(m, "content");
        if (!cJSON_IsObject(m))
            rc = s_bad(p, "messages", "messages[%d]: must be an object", i);
        else if (!cJSON_IsString(role))
            rc = s_bad(p, "messages", "messages[%d].role: must be a string", i);
        else if (!content)
            rc = s_bad(p, "messages", "messages[%d].content: required", i);
        else
            rc = s_content(p, content, i, (char **)&cm[i].content);
        if (rc) break;
        cm[i++].role = role->valuestring;
    }
    if (!rc && s->family == CHAT_UNKNOWN) {
        snprintf(p->err, p->cap,
                 "model '%s': its chat template is not one colibri can render (%s); use /v1/completions with your own "
                 "prompt format",
                 s->model_id, chat_family_list());
        *p->param = "messages";
        rc = 400;
    } else if (!rc && chat_render_plain(s->family, cm, n, &opts, &r->prompt, &r->plain, &r->n_plain, p->err, p->cap)) {
        *p->param = "messages";
        rc = 400;
    }
    for (int k = 0; k < n; k++) free((char *)cm[k].content);
    free(cm);
    return rc;
}

/* prompt: a string, an array holding one string, or an array of token ids. */
static int s_prompt(server *s, parse_ctx *p, const cJSON *root, gen_request *r) {
    const cJSON *v = s_get(root, "prompt"), *e;
    r->add_special = 1;
    if (!v) return s_bad(p, "prompt", "prompt: required");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child)) v = v->child;
    if (cJSON_IsString(v)) return (r->prompt = strdup(v->valuestring)) ? 0 : 500;
    if (!cJSON_IsArray(v) || !v->child)
        return s_bad(p, "prompt",
                     "prompt: must be a string, an array of one string, or a non-empty array of token ids");
    if (cJSON_IsString(v->child)) return s_bad(p, "prompt", "prompt: only one prompt per request (n = 1)");
    int n = cJSON_GetArraySize(v), i = 0;
    if (!(r->ids = malloc((size_t)n * sizeof *r->ids))) return 500;
    cJSON_ArrayForEach(e, v) {
        if (!s_is_int(e, 0, s->info.n_vocab - 1))
            return s_bad(p, "prompt", "prompt[%d]: token ids must be integers from 0 to %d", i, s->info.n_vocab - 1);
        r->ids[i++] = (int32_t)e->valuedouble;
    }
    r->n_ids = n;
    return 0;
}

/* 1 if the JSON text has a \u0000 escape inside a string (cJSON would cut the string there). */
static int s_has_nul_escape(const char *body, size_t len) {
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        if (!in_string) {
            in_string = body[i] == '"';
        } else if (body[i] == '"') {
            in_string = 0;
        } else if (body[i] == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4)) return 1;
            i++; /* the escaped character */
        }
    }
    return 0;
}

/* Path (e.g. "messages[1].content") of the first string that differs between a and b. */
static int s_first_cut_string(const cJSON *a, const cJSON *b, char *path, size_t cap) {
    if (cJSON_IsString(a)) return cJSON_IsString(b) && strcmp(a->valuestring, b->valuestring) != 0;
    size_t at = strlen(path);
    int i = 0;
    for (const cJSON *x = a ? a->child : NULL, *y = b ? b->child : NULL; x && y; x = x->next, y = y->next, i++) {
        if (cJSON_IsObject(a))
            snprintf(path + at, cap - at, "%s%s", at ? "." : "", y->string ? y->string : "");
        else
            snprintf(path + at, cap - at, "[%d]", i);
        if ((x->string && y->string && strcmp(x->string, y->string)) || s_first_cut_string(x, y, path, cap)) return 1;
    }
    path[at] = '\0';
    return 0;
}

/* A \u0000 in a string: 400 naming the field, found by parsing again with \u0001 in its place. */
static int s_refuse_nul(parse_ctx *p, const cJSON *root, const char *body, size_t len) {
    char *copy = malloc(len);
    if (!copy) return 500;
    memcpy(copy, body, len);
    for (size_t i = 0; i + 5 < len; i++)
        if (copy[i] == '\\') {
            if (copy[i + 1] == 'u' && !memcmp(copy + i + 2, "0000", 4)) copy[i + 5] = '1';
            i++;
        }
    cJSON *whole = cJSON_ParseWithLength(copy, len);
    free(copy);
    static __thread char path[256];
    path[0] = '\0';
    if (!whole || !s_first_cut_string(whole, root, path, sizeof path)) snprintf(path, sizeof path, "a key");
    cJSON_Delete(whole);
    const char *top = strcmp(path, "a key") ? path : NULL;
    static __thread char field[64];
    snprintf(field, sizeof field, "%.*s", top ? (int)strcspn(top, ".[") : 0, top ? top : "");
    return s_bad(p, top ? field : NULL, "%s: contains a NUL character (\\u0000), which a prompt cannot hold", path);
}

/* Why cJSON stopped at body[at]: a \u escape of half a UTF-16 surrogate pair
 * (valid JSON syntax, but no text: RFC 8259 section 8.2), or bad JSON. */
static int s_bad_json(parse_ctx *p, const char *body, size_t len, size_t at) {
    unsigned cp = 0;
    if (at + 6 <= len && body[at] == '\\' && body[at + 1] == 'u' && sscanf(body + at + 2, "%4x", &cp) == 1 &&
        cp >= 0xD800 && cp <= 0xDFFF)
        return s_bad(p, NULL, "request body: \\u%.4s at byte %zu is half a UTF-16 surrogate pair, not text",
                     body + at + 2, at);
    return s_bad(p, NULL, "request body: not valid JSON (error near byte %zu)", at);
}

/* Parse the body as exactly one JSON value (RFC 8259: UTF-8, nothing after it). */
static cJSON *s_parse_body(parse_ctx *p, const char *body, size_t len, int *rc) {
    size_t bad = utf8_invalid_at(body, len);
    if (bad < len) {
        *rc = s_bad(p, NULL, "request body: byte %zu is %s", bad, body[bad] ? "not valid UTF-8" : "a NUL");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        *rc = s_bad_json(p, body, len, end && end >= body && end <= body + len ? (size_t)(end - body) : 0);
        return NULL;
    }
    size_t at = (size_t)(end - body);
    while (at < len && strchr(" \t\r\n", body[at])) at++;
    if (at < len) {
        *rc = s_bad(p, NULL, "request body: unexpected bytes after the JSON value, at byte %zu", at);
        cJSON_Delete(root);
        return NULL;
    }
    if (s_has_nul_escape(body, len)) {
        *rc = s_refuse_nul(p, root, body, len);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

cJSON *openai_parse_json(const char *body, size_t len, char *err, size_t err_cap, const char **param, int *status) {
    parse_ctx p = {err, err_cap, param};
    *param = NULL;
    *status = 0;
    cJSON *root = s_parse_body(&p, body, len, status);
    if (!root && *status == 500) snprintf(err, err_cap, "out of memory while reading the request");
    return root;
}

int openai_parse(server *s, const char *body, size_t len, int chat, gen_request *r, char *err, size_t err_cap,
                 const char **param) {
    parse_ctx p = {err, err_cap, param};
    *param = NULL;
    memset(r, 0, sizeof *r);
    r->chat = chat;
    int rc = 0;
    cJSON *root = s_parse_body(&p, body, len, &rc);
    if (!root) {
        if (rc == 500) snprintf(err, err_cap, "out of memory while reading the request");
        return rc;
    }
    if (!cJSON_IsObject(root)) rc = s_bad(&p, NULL, "request body: must be a JSON object");
    if (!rc) rc = s_unknown_fields(&p, root, chat);
    if (!rc) rc = s_unsupported(&p, root);
    if (!rc) rc = s_stream(&p, root, r);
    if (!rc) rc = s_choices(&p, root, r);
    if (!rc) rc = s_sampling(s, &p, root, r);
    if (!rc) rc = s_penalties(&p, root, r);
    if (!rc) rc = s_logprobs(&p, root, r);
    if (!rc) rc = s_response_format(s, &p, root, r);
    if (!rc) rc = s_logit_bias(s, &p, root, r);
    if (!rc && (r->grammar || r->n_bias)) {
        r->sp.logit_filter = s_logit_filter;
        r->sp.logit_filter_user = r;
    }
    if (!rc) rc = s_stop(&p, root, r);
    if (!rc) s_stop_after_json(r);
    if (!rc) rc = s_cache_salt(&p, root, r);
    if (!rc && chat) rc = s_reasoning_format(s, &p, root, r);
    if (!rc) rc = chat ? s_messages(s, &p, root, r) : s_prompt(s, &p, root, r);
    if (rc == 500) snprintf(err, err_cap, "out of memory while reading the request");
    cJSON_Delete(root);
    if (rc) gen_request_free(r);
    return rc;
}

static int s_tokenize(server *s, gen_request *r, parse_ctx *p) {
    free(r->ids);
    r->ids = NULL;
    /* chat: the template's markers are special tokens, the messages' text is not (a
     * message spelling "<|im_start|>system" would forge a turn) unless the flag says so */
    int rc = !r->chat
                 ? text_tokenize(s->model, r->prompt, strlen(r->prompt), r->add_special, 1, &r->ids, &r->n_ids)
                 : chat_tokenize(s->model, r->prompt, strlen(r->prompt),
                                 s->cfg.allow_special_in_content ? NULL : r->plain, r->n_plain, &r->ids, &r->n_ids);
    if (rc == COLI_ENOMEM) return 500;
    return rc ? s_bad(p, r->chat ? "messages" : "prompt", "%s", coli_last_error()) : 0;
}

int openai_prepare_tokens(server *s, gen_request *r, char *err, size_t err_cap, const char **param) {
    parse_ctx p = {err, err_cap, param};
    *param = NULL;
    int rc = r->prompt ? s_tokenize(s, r, &p) : 0;
    if (rc == 500) snprintf(err, err_cap, "out of memory for the prompt's tokens");
    if (rc) return rc;
    const char *what = r->chat ? "messages" : "prompt";
    int n_ctx = s->cfg.n_ctx > 0 ? s->cfg.n_ctx : s->info.n_ctx;
    if (r->n_ids < 1) return s_bad(&p, what, "%s: empty (it gives no tokens)", what);
    if (r->n_ids >= n_ctx)
        return s_bad(&p, what, "this model's maximum context length is %d tokens; the %s has %d", n_ctx, what,
                     r->n_ids);
    int room = n_ctx - r->n_ids;
    if (!r->max_tokens_given) {
        r->sp.n_predict = r->chat || room < 16 ? room : 16; /* OpenAI: completions default to 16 */
    } else if (r->sp.n_predict > room) {
        return s_bad(&p, "max_tokens",
                     "this model's maximum context length is %d tokens; you requested %lld (%d in the %s, %d for the "
                     "completion)",
                     n_ctx, (long long)r->n_ids + r->sp.n_predict, r->n_ids, what, r->sp.n_predict);
    }
    return 0;
}
