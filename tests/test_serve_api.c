/*
 * test_serve_api.c - the API people script against, on a real `coli serve`:
 * logprobs (chat and completions, plain and streamed, consistent with each
 * other and with greedy decoding), penalties and min_p (same seed, same
 * tokens; a heavy repeat penalty repeats no token), response_format
 * json_object / json_schema (the finished output parses and fits),
 * /tokenize, /detokenize, /props, --alias and CORS.
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "tests/serve_util.h"

static cJSON *s_post_json(int port, const char *path, const char *body) {
    http_resp r = su_post(port, path, body);
    cr_assert_eq(r.status, 200, "%s %s: %s", path, body, r.raw ? r.raw : "(none)");
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_not_null(j, "not JSON: %s", r.body);
    su_free(&r);
    return j;
}

static cJSON *s_choice(cJSON *o) { return cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0); }

static const char *s_content(cJSON *o) {
    cJSON *m = cJSON_GetObjectItem(s_choice(o), "message");
    cJSON *t = m ? cJSON_GetObjectItem(m, "content") : cJSON_GetObjectItem(s_choice(o), "text");
    cr_assert(cJSON_IsString(t));
    return t->valuestring;
}

/* The bytes of chat logprobs entries joined (what the answer text is made of). */
static char *s_join_bytes(const cJSON *content) {
    char *out = calloc(1, 65536);
    size_t n = 0;
    const cJSON *e, *b;
    cJSON_ArrayForEach(e, content) {
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(e, "bytes")) if (n < 65535) out[n++] = (char)b->valueint;
    }
    return out;
}

#define CHAT(extra) "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}]," extra "}"

Test(serve_api, chat_logprobs_plain_and_streamed) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    cJSON *a = s_post_json(p.port, "/v1/chat/completions",
                           CHAT("\"max_tokens\":10,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3"));
    const cJSON *lp = cJSON_GetObjectItem(s_choice(a), "logprobs"), *content = cJSON_GetObjectItem(lp, "content"), *e;
    cr_assert(cJSON_IsArray(content), "%s", cJSON_PrintUnformatted(a));
    cr_expect_eq(cJSON_GetArraySize(content), 10);
    cJSON_ArrayForEach(e, content) {
        double chosen = cJSON_GetObjectItem(e, "logprob")->valuedouble;
        const cJSON *top = cJSON_GetObjectItem(e, "top_logprobs");
        cr_assert_eq(cJSON_GetArraySize(top), 3);
        cr_expect_leq(chosen, 0.0);
        double t0 = cJSON_GetArrayItem(top, 0)->child->next->valuedouble;
        for (int k = 1; k < 3; k++)
            cr_expect_geq(t0, cJSON_GetObjectItem(cJSON_GetArrayItem(top, k), "logprob")->valuedouble,
                          "top_logprobs sorted");
        /* greedy: the chosen token is the most likely one */
        cr_expect_float_eq(chosen, t0, 1e-6, "greedy picked logprob %g, the best is %g", chosen, t0);
        cr_expect_str_eq(cJSON_GetObjectItem(e, "token")->valuestring,
                         cJSON_GetObjectItem(cJSON_GetArrayItem(top, 0), "token")->valuestring);
    }
    char *joined = s_join_bytes(content);
    cr_expect_str_eq(joined, s_content(a), "the tokens' bytes make the answer");
    /* streamed: the same entries, spread over the chunks */
    http_resp r =
        su_post(p.port, "/v1/chat/completions",
                CHAT("\"max_tokens\":10,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3,\"stream\":true"));
    cr_assert_eq(r.status, 200, "%s", r.raw);
    cJSON *all = cJSON_CreateArray();
    for (const char *d = strstr(r.body, "data: {"); d; d = strstr(d + 1, "data: {")) {
        cJSON *chunk = cJSON_Parse(d + 6);
        const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(s_choice(chunk), "logprobs"), "content");
        cJSON_ArrayForEach(e, c) cJSON_AddItemToArray(all, cJSON_Duplicate(e, 1));
        cJSON_Delete(chunk);
    }
    char *plain = cJSON_PrintUnformatted(content), *streamed = cJSON_PrintUnformatted(all);
    cr_expect_str_eq(streamed, plain, "streamed logprobs differ from the plain reply");
    free(plain);
    free(streamed);
    free(joined);
    cJSON_Delete(all);
    su_free(&r);
    cJSON_Delete(a);
    /* logprobs off: null, as OpenAI */
    a = s_post_json(p.port, "/v1/chat/completions", CHAT("\"max_tokens\":2"));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(s_choice(a), "logprobs")));
    cJSON_Delete(a);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_api, completion_logprobs_shape) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    cJSON *a = s_post_json(p.port, "/v1/completions",
                           "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"seed\":3,\"logprobs\":2}");
    const cJSON *lp = cJSON_GetObjectItem(s_choice(a), "logprobs");
    const cJSON *tokens = cJSON_GetObjectItem(lp, "tokens"), *lps = cJSON_GetObjectItem(lp, "token_logprobs");
    const cJSON *tops = cJSON_GetObjectItem(lp, "top_logprobs"), *offs = cJSON_GetObjectItem(lp, "text_offset");
    cr_assert_eq(cJSON_GetArraySize(tokens), 8, "%s", cJSON_PrintUnformatted(a));
    cr_expect_eq(cJSON_GetArraySize(lps), 8);
    cr_expect_eq(cJSON_GetArraySize(tops), 8);
    cr_expect_eq(cJSON_GetArraySize(offs), 8);
    double prev = -1;
    for (int i = 0; i < 8; i++) {
        cr_expect_leq(cJSON_GetArrayItem(lps, i)->valuedouble, 0.0);
        cr_expect_leq(cJSON_GetArraySize(cJSON_GetArrayItem(tops, i)), 2);
        double off = cJSON_GetArrayItem(offs, i)->valuedouble;
        cr_expect_geq(off, prev, "text_offset grows");
        prev = off;
    }
    cJSON_Delete(a);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_api, penalties_and_min_p_are_seeded_and_work) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    const char *body =
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"seed\":11,\"temperature\":0.9,\"min_p\":0.05,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":0.3,\"repeat_penalty\":1.2,\"repeat_last_n\":32}";
    cJSON *a = s_post_json(p.port, "/v1/completions", body), *b = s_post_json(p.port, "/v1/completions", body);
    cr_expect_str_eq(s_content(a), s_content(b), "same seed and settings, different text");
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* greedy with a crushing repeat penalty over everything: no generated token comes twice */
    a = s_post_json(p.port, "/v1/chat/completions",
                    CHAT("\"max_tokens\":24,\"temperature\":0,\"repeat_penalty\":100,"
                         "\"presence_penalty\":2,\"repeat_last_n\":-1,\"logprobs\":true"));
    const cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(s_choice(a), "logprobs"), "content"), *e, *f;
    int i = 0;
    cJSON_ArrayForEach(e, content) {
        int j = 0;
        char *be = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "bytes"));
        cJSON_ArrayForEach(f, content) {
            if (j++ >= i) break;
            char *bf = cJSON_PrintUnformatted(cJSON_GetObjectItem(f, "bytes"));
            cr_expect(strcmp(be, bf) != 0, "token %d repeats token %d (%s) despite the penalty", i, j - 1, be);
            free(bf);
        }
        free(be);
        i++;
    }
    cr_expect_eq(i, 24);
    cJSON_Delete(a);
    cr_expect_eq(su_stop(&p), 0);
}

/* Generate with rf until the answer ends on its own; the text must parse and check(). */
static void s_json_answers(int port, const char *rf, int stream, void (*check)(const cJSON *, const char *)) {
    int finished = 0;
    for (int seed = 1; seed <= 4; seed++) {
        char body[2048];
        snprintf(body, sizeof body, CHAT("\"max_tokens\":200,\"seed\":%d,\"stream\":%s,\"response_format\":%s"), seed,
                 stream ? "true" : "false", rf);
        http_resp r = su_post(port, "/v1/chat/completions", body);
        cr_assert_eq(r.status, 200, "%s", r.raw);
        char text[8192] = "";
        const char *finish = NULL;
        char fin[16] = "";
        if (!stream) {
            cJSON *o = cJSON_Parse(r.body);
            snprintf(text, sizeof text, "%s", s_content(o));
            snprintf(fin, sizeof fin, "%s", cJSON_GetObjectItem(s_choice(o), "finish_reason")->valuestring);
            cJSON_Delete(o);
        } else {
            for (const char *d = strstr(r.body, "data: {"); d; d = strstr(d + 1, "data: {")) {
                cJSON *chunk = cJSON_Parse(d + 6);
                const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(s_choice(chunk), "delta"), "content");
                const cJSON *fr = cJSON_GetObjectItem(s_choice(chunk), "finish_reason");
                if (cJSON_IsString(c)) strncat(text, c->valuestring, sizeof text - strlen(text) - 1);
                if (cJSON_IsString(fr)) snprintf(fin, sizeof fin, "%s", fr->valuestring);
                cJSON_Delete(chunk);
            }
        }
        finish = fin;
        if (!strcmp(finish, "stop")) {
            cJSON *v = cJSON_Parse(text);
            cr_assert_not_null(v, "seed %d: the answer does not parse: %s", seed, text);
            check(v, text);
            cJSON_Delete(v);
            finished++;
        }
        su_free(&r);
    }
    cr_expect_geq(finished, 2, "only %d of 4 constrained answers finished in 200 tokens", finished);
}

static void s_fits_schema(const cJSON *v, const char *text) {
    const cJSON *color = cJSON_GetObjectItem(v, "color"), *ok = cJSON_GetObjectItem(v, "ok"),
                *n = cJSON_GetObjectItem(v, "n");
    cr_expect(cJSON_IsString(color) && (!strcmp(color->valuestring, "red") || !strcmp(color->valuestring, "blue")),
              "color: %s", text);
    cr_expect(cJSON_IsBool(ok), "ok: %s", text);
    cr_expect(!n || (cJSON_IsNumber(n) && n->valuedouble == floor(n->valuedouble)), "n: %s", text);
    cr_expect_leq(cJSON_GetArraySize(v), 3, "extra keys: %s", text);
}

#define SCHEMA                                                                                                   \
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"strict\":true,\"schema\":{\"type\":\"object\"," \
    "\"properties\":{\"color\":{\"enum\":[\"red\",\"blue\"]},\"n\":{\"type\":\"integer\"},\"ok\":{\"type\":"     \
    "\"boolean\"}},"                                                                                             \
    "\"required\":[\"color\",\"ok\"],\"additionalProperties\":false}}}"

Test(serve_api, response_format_output_parses, .timeout = 120) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    s_json_answers(p.port, SCHEMA, 0, s_fits_schema);
    s_json_answers(p.port, SCHEMA, 1, s_fits_schema);
    /* json_object: the random model rarely closes free text; a valid prefix at "length" is all it can promise */
    char body[512];
    snprintf(body, sizeof body, CHAT("\"max_tokens\":30,\"seed\":5,\"response_format\":{\"type\":\"json_object\"}"));
    cJSON *a = s_post_json(p.port, "/v1/chat/completions", body);
    cr_expect_eq(s_content(a)[0], '{', "json_object output starts an object: %s", s_content(a));
    cJSON_Delete(a);
    /* issue 28: stop strings apply only after the JSON value (stop "{" had left an empty answer) */
    snprintf(body, sizeof body,
             CHAT("\"max_tokens\":30,\"seed\":5,\"stop\":[\"{\",\"\\\"\"],\"response_format\":{\"type\":"
                  "\"json_object\"}"));
    a = s_post_json(p.port, "/v1/chat/completions", body);
    cr_expect(s_content(a)[0] == '{' && strlen(s_content(a)) > 1, "stop cut the JSON: '%s'", s_content(a));
    cJSON_Delete(a);
    http_resp r = su_post(p.port, "/v1/chat/completions",
                          CHAT("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
                               "\"string\",\"format\":\"date\"}}}"));
    cr_expect_eq(r.status, 400);
    cr_expect(strstr(r.body, "'format'") != NULL, "%s", r.body);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_api, tokenize_detokenize_props_alias_cors) {
    char model[4096];
    const char *extra[] = {"--alias", "my-model", "--cors-origin", "http://localhost:3000", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    cJSON *t = s_post_json(p.port, "/tokenize", "{\"content\":\"Hello world, again\"}");
    cJSON *tokens = cJSON_GetObjectItem(t, "tokens");
    cr_assert_gt(cJSON_GetArraySize(tokens), 1);
    char *ids = cJSON_PrintUnformatted(tokens), body[4096];
    snprintf(body, sizeof body, "{\"tokens\":%s}", ids);
    cJSON *d = s_post_json(p.port, "/detokenize", body);
    const char *text = cJSON_GetObjectItem(d, "content")->valuestring;
    cr_expect(strstr(text, "Hello world, again") != NULL, "round trip gave '%s'", text);
    free(ids);
    cJSON_Delete(d);
    cJSON_Delete(t);
    /* the ids agree with what a completion counts as its prompt */
    t = s_post_json(p.port, "/tokenize", "{\"content\":\"Once upon\",\"add_special\":true,\"with_pieces\":true}");
    cJSON *c = s_post_json(p.port, "/v1/completions", "{\"prompt\":\"Once upon\",\"max_tokens\":1}");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "tokens")),
                 cJSON_GetObjectItem(cJSON_GetObjectItem(c, "usage"), "prompt_tokens")->valueint);
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(t, "tokens"), 0), "piece")));
    cr_expect_str_eq(cJSON_GetObjectItem(c, "model")->valuestring, "my-model");
    cJSON_Delete(t);
    cJSON_Delete(c);
    /* an empty text is a text: no tokens (BOS alone with add_special), as llama.cpp's server */
    t = s_post_json(p.port, "/tokenize", "{\"content\":\"\"}");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "tokens")), 0);
    cJSON_Delete(t);
    t = s_post_json(p.port, "/tokenize", "{\"content\":\"\",\"add_special\":true}");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "tokens")), 1);
    cJSON_Delete(t);
    http_resp r = su_post(p.port, "/tokenize", "{\"content\":\"x\",\"bogus\":1}");
    cr_expect_eq(r.status, 400, "%s", r.raw);
    su_free(&r);
    r = su_post(p.port, "/detokenize", "{\"tokens\":[999999]}");
    cr_expect_eq(r.status, 400, "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/props");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    cJSON *props = cJSON_Parse(r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(props, "model")->valuestring, "my-model");
    cr_expect_gt(cJSON_GetObjectItem(props, "n_ctx")->valueint, 0);
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(props, "chat_template")));
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(props, "devices")), "%s", r.body);
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(props, "build")));
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(props, "chat_template_kwargs")), "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(props, "reasoning_format")->valuestring, "none");
    cr_expect(strstr(r.raw, "Access-Control-Allow-Origin: http://localhost:3000") != NULL, "%s", r.raw);
    cJSON_Delete(props);
    su_free(&r);
    r = su_get(p.port, "/v1/models");
    cr_expect(strstr(r.body, "\"id\":\"my-model\"") != NULL, "%s", r.body);
    su_free(&r);
    r = su_request(p.port, "OPTIONS", "/v1/chat/completions",
                   "Origin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n", NULL);
    cr_expect_eq(r.status, 204, "%s", r.raw);
    cr_expect(strstr(r.raw, "Access-Control-Allow-Methods:") && strstr(r.raw, "Authorization"), "%s", r.raw);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

/* serve's sampling flags are the defaults of requests that do not set the fields. */
Test(serve_api, sampling_flags_are_request_defaults) {
    char model[4096];
    const char *extra[] = {"-s", "9", "--min-p", "0.05", "--repeat-penalty", "1.2", "--ctx-size", "128", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":12}";
    cJSON *a = s_post_json(p.port, "/v1/completions", body), *b = s_post_json(p.port, "/v1/completions", body);
    cr_expect_str_eq(s_content(a), s_content(b), "--seed 9 for every request: same text");
    cJSON_Delete(a);
    cJSON_Delete(b);
    http_resp r = su_get(p.port, "/props");
    cr_expect(strstr(r.body, "\"n_ctx\":128") != NULL, "--ctx-size: %s", r.body);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

/* The id of the token whose text is piece (the last /tokenize entry with
 * that piece: SentencePiece puts a space token first). */
static int s_token_id(int port, const char *piece) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "content", piece);
    cJSON_AddTrueToObject(req, "with_pieces");
    char *body = cJSON_PrintUnformatted(req);
    cJSON *t = s_post_json(port, "/tokenize", body);
    int id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(t, "tokens")) {
        const cJSON *pc = cJSON_GetObjectItem(e, "piece");
        if (cJSON_IsString(pc) && !strcmp(pc->valuestring, piece)) id = cJSON_GetObjectItem(e, "id")->valueint;
    }
    cJSON_Delete(t);
    cJSON_Delete(req);
    free(body);
    return id;
}

/* logit_bias, OpenAI's shape: -100 bans the greedy choice, +100 makes a
 * token the only choice, the JSON grammar still wins over a bias, and bad
 * keys, values and shapes are refused naming the field. */
Test(serve_api, logit_bias_bans_and_forces) {
    char model[4096], body[256];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    const char *base = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0,\"logprobs\":1";
    snprintf(body, sizeof body, "%s}", base);
    cJSON *plain = s_post_json(p.port, "/v1/completions", body);
    const cJSON *tokens = cJSON_GetObjectItem(cJSON_GetObjectItem(s_choice(plain), "logprobs"), "tokens");
    char *first = strdup(cJSON_GetArrayItem(tokens, 0)->valuestring);
    cJSON_Delete(plain);
    const int id = s_token_id(p.port, first);
    cr_assert_geq(id, 0, "no token with the piece [%s]", first);
    snprintf(body, sizeof body, "%s,\"logit_bias\":{\"%d\":-100}}", base, id);
    cJSON *banned = s_post_json(p.port, "/v1/completions", body);
    tokens = cJSON_GetObjectItem(cJSON_GetObjectItem(s_choice(banned), "logprobs"), "tokens");
    for (int i = 0; i < cJSON_GetArraySize(tokens); i++)
        cr_expect_str_neq(cJSON_GetArrayItem(tokens, i)->valuestring, first, "token %d is the banned one", i);
    cJSON_Delete(banned);
    const int other = s_token_id(p.port, " hello");
    cr_assert_geq(other, 0);
    snprintf(body, sizeof body, "%s,\"logit_bias\":{\"%d\":100}}", base, other);
    cJSON *forced = s_post_json(p.port, "/v1/completions", body);
    cr_expect_str_eq(s_content(forced), " hello hello hello");
    cJSON_Delete(forced);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,\"temperature\":0,"
             "\"logit_bias\":{\"%d\":100},\"response_format\":{\"type\":\"json_object\"}}",
             other);
    cJSON *json = s_post_json(p.port, "/v1/chat/completions", body);
    cr_expect_eq(s_content(json)[0], '{', "the grammar wins: %s", s_content(json));
    cJSON_Delete(json);
    static const char *bad[] = {"{\"x\":1}",   "{\" 5\":1}",    "{\"+5\":1}", "{\"-1\":1}", "{\"99999999\":1}",
                                "{\"5\":101}", "{\"5\":\"1\"}", "[1]",        "3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"max_tokens\":1,\"logit_bias\":%s}", bad[i]);
        http_resp r = su_post(p.port, "/v1/completions", body);
        cr_expect_eq(r.status, 400, "%s: %s", bad[i], r.raw);
        cr_expect(r.body && strstr(r.body, "\"param\":\"logit_bias\""), "%s: %s", bad[i], r.raw);
        su_free(&r);
    }
    free(first);
    cr_expect_eq(su_stop(&p), 0);
}

/* n answers: one choice each, indexed 0..n-1, the prompt counted once and
 * every answer's tokens; greedy answers are the same, sampled ones follow
 * seed + index (so answer i equals a lone request with seed + i); each
 * keeps its own JSON grammar state. */
Test(serve_api, n_answers) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    cJSON *three =
        s_post_json(p.port, "/v1/completions",
                    "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"seed\":40,\"temperature\":1,\"n\":3}");
    const cJSON *choices = cJSON_GetObjectItem(three, "choices");
    cr_assert_eq(cJSON_GetArraySize(choices), 3, "%s", cJSON_PrintUnformatted(three));
    int gen = 0;
    for (int i = 0; i < 3; i++) {
        const cJSON *c = cJSON_GetArrayItem(choices, i);
        cr_expect_eq(cJSON_GetObjectItem(c, "index")->valueint, i);
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"seed\":%d,\"temperature\":1}",
                 40 + i);
        cJSON *alone = s_post_json(p.port, "/v1/completions", body);
        cr_expect_str_eq(cJSON_GetObjectItem(c, "text")->valuestring, s_content(alone), "answer %d vs seed %d", i,
                         40 + i);
        gen += cJSON_GetObjectItem(cJSON_GetObjectItem(alone, "usage"), "completion_tokens")->valueint;
        cJSON_Delete(alone);
    }
    const cJSON *usage = cJSON_GetObjectItem(three, "usage");
    cr_expect_eq(cJSON_GetObjectItem(usage, "completion_tokens")->valueint, gen);
    cr_expect_eq(cJSON_GetObjectItem(usage, "total_tokens")->valueint,
                 gen + cJSON_GetObjectItem(usage, "prompt_tokens")->valueint);
    cJSON_Delete(three);
    cJSON *greedy = s_post_json(p.port, "/v1/chat/completions",
                                CHAT("\"max_tokens\":6,\"temperature\":0,\"n\":2,"
                                     "\"response_format\":{\"type\":\"json_object\"}"));
    choices = cJSON_GetObjectItem(greedy, "choices");
    cr_assert_eq(cJSON_GetArraySize(choices), 2);
    const char *
        a = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(choices, 0), "message"), "content")->valuestring,
       *b = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(choices, 1), "message"), "content")->valuestring;
    cr_expect_str_eq(a, b, "greedy answers agree");
    cr_expect_eq(a[0], '{', "each answer has its own grammar: %s", a);
    cJSON_Delete(greedy);
    cr_expect_eq(su_stop(&p), 0);
}
