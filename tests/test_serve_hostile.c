/*
 * test_serve_hostile.c - `coli serve` against bad clients: malformed and
 * mistyped JSON, huge bodies, absurd numbers, unknown fields, raw garbage
 * on the socket, 200 connections at once. Every answer must be a 4xx in the
 * OpenAI error shape (or the request is queued and served), the server must
 * never die, and the next good request must work.
 */
#include <cjson/cJSON.h>
#include <iconv.h>
#include <pthread.h>

#include "tests/serve_util.h"

/* The reply is an OpenAI error: {"error":{"message":..., "type":..., "param":..., "code":...}}. */
static void s_expect_error(const http_resp *r, int status, const char *what) {
    cr_expect_eq(r->status, status, "%s: status %d, reply %s", what, r->status, r->raw ? r->raw : "(none)");
    cJSON *j = cJSON_Parse(r->body);
    cJSON *e = cJSON_GetObjectItem(j, "error");
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(e, "message")) && cJSON_IsString(cJSON_GetObjectItem(e, "type")) &&
                  cJSON_HasObjectItem(e, "param") && cJSON_HasObjectItem(e, "code"),
              "%s: not an OpenAI error: %s", what, r->body ? r->body : "");
    cJSON_Delete(j);
}

static void s_expect_alive(int port) {
    http_resp r = su_post(port, "/v1/completions", "{\"prompt\":\"Hello\",\"max_tokens\":2}");
    cr_expect_eq(r.status, 200, "the server no longer serves a good request: %s", r.raw ? r.raw : "(none)");
    su_free(&r);
}

Test(serve_hostile, bad_bodies_get_400_naming_the_field) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    static const struct {
        const char *path, *body, *param;
    } cases[] = {
        {"/v1/completions", "{\"prompt\": \"a\"", NULL},
        {"/v1/completions", "", NULL},
        {"/v1/completions", "[1,2,3]", NULL},
        {"/v1/completions", "\"just a string\"", NULL},
        {"/v1/completions", "{\"prompt\": 5}", "prompt"},
        {"/v1/completions", "{}", "prompt"},
        {"/v1/completions", "{\"prompt\": [\"a\", \"b\"]}", "prompt"},
        {"/v1/completions", "{\"prompt\": [1, -4]}", "prompt"},
        {"/v1/completions", "{\"prompt\": [1, 99999999]}", "prompt"},
        {"/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": \"ten\"}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": -1}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 2.5}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 1e300}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 1000000000000}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 100000}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"a\", \"temperature\": -1}", "temperature"},
        {"/v1/completions", "{\"prompt\": \"a\", \"temperature\": \"hot\"}", "temperature"},
        {"/v1/completions", "{\"prompt\": \"a\", \"top_p\": 0}", "top_p"},
        {"/v1/completions", "{\"prompt\": \"a\", \"top_p\": 1.5}", "top_p"},
        {"/v1/completions", "{\"prompt\": \"a\", \"seed\": \"x\"}", "seed"},
        {"/v1/completions", "{\"prompt\": \"a\", \"n\": 17}", "n"},
        {"/v1/completions", "{\"prompt\": \"a\", \"n\": 0}", "n"},
        {"/v1/completions", "{\"prompt\": \"a\", \"n\": 2, \"stream\": true}", "n"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stop\": 7}", "stop"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stream\": \"yes\"}", "stream"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}", "stream_options"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logprobs\": 21}", "logprobs"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logprobs\": true}", "logprobs"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}",
         "top_logprobs"},
        {"/v1/completions", "{\"prompt\": \"a\", \"presence_penalty\": 2.5}", "presence_penalty"},
        {"/v1/completions", "{\"prompt\": \"a\", \"min_p\": -0.1}", "min_p"},
        {"/v1/completions", "{\"prompt\": \"a\", \"repeat_last_n\": -2}", "repeat_last_n"},
        {"/v1/completions", "{\"prompt\": \"a\", \"grammar\": \"root ::= x\"}", "grammar"},
        {"/v1/completions", "{\"prompt\": \"a\", \"n_probs\": 3}", "n_probs"},
        {"/v1/completions", "{\"prompt\": \"a\", \"frobnicate\": {\"x\": [1, 2]}}", "frobnicate"},
        {"/v1/completions", "{\"prompt\": \"a\", \"response_format\": {\"type\": \"xml\"}}", "response_format"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": false}", "echo"},
        {"/v1/completions", "{\"prompt\": \"a\", \"model\": 12}", "model"},
        {"/v1/chat/completions", "{\"messages\": \"hi\"}", "messages"},
        {"/v1/chat/completions", "{\"messages\": []}", "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\"}]}", "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": 3, \"content\": \"x\"}]}", "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}", "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
         "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}",
         "tools"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_resp r = su_post(p.port, cases[i].path, cases[i].body);
        s_expect_error(&r, 400, cases[i].body);
        cJSON *j = cJSON_Parse(r.body);
        cJSON *param = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param");
        if (cases[i].param)
            cr_expect(cJSON_IsString(param) && !strcmp(param->valuestring, cases[i].param), "%s: param %s, want %s",
                      cases[i].body, r.body, cases[i].param);
        cJSON_Delete(j);
        su_free(&r);
    }
    /* deeply nested JSON is refused by the parser's depth limit, not the stack */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = '\0';
    http_resp r = su_post(p.port, "/v1/completions", deep);
    s_expect_error(&r, 400, "deeply nested arrays");
    su_free(&r);
    free(deep);
    s_expect_alive(p.port);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_hostile, neutral_fields_are_accepted_and_routes_checked) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    /* unknown fields are refused (bad_bodies_get_400_naming_the_field); "user" and neutral values pass */
    http_resp r = su_post(p.port, "/v1/completions",
                          "{\"prompt\":\"a\",\"max_tokens\":2,\"user\":\"u1\",\"logit_bias\":{},\"presence_penalty\":0,"
                          "\"n\":1,\"logprobs\":null}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/v1/nothing");
    s_expect_error(&r, 404, "unknown path");
    su_free(&r);
    r = su_request(p.port, "DELETE", "/v1/chat/completions", NULL, NULL);
    s_expect_error(&r, 405, "wrong method");
    su_free(&r);
    r = su_request(p.port, "POST", "/health", NULL, "{}");
    s_expect_error(&r, 405, "POST /health");
    su_free(&r);
    s_expect_alive(p.port);
    su_stop(&p);
}

Test(serve_hostile, huge_bodies_get_413) {
    char model[4096];
    const char *extra[] = {"--max-body", "64", NULL}; /* KiB */
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    size_t n = 200 * 1024;
    char *big = malloc(n + 64);
    int k = snprintf(big, n + 64, "{\"prompt\":\"");
    memset(big + k, 'a', n);
    strcpy(big + k + n, "\"}");
    http_resp r = su_post(p.port, "/v1/completions", big);
    s_expect_error(&r, 413, "200 KiB body with Content-Length");
    su_free(&r);
    /* no Content-Length: chunked upload, counted as it arrives */
    int fd = su_connect(p.port);
    const char *head =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    su_send_all(fd, head, strlen(head));
    char chunk[64];
    for (int i = 0; i < 10; i++) {
        snprintf(chunk, sizeof chunk, "%zx\r\n", (size_t)(20 * 1024));
        su_send_all(fd, chunk, strlen(chunk));
        su_send_all(fd, big + k, 20 * 1024);
        su_send_all(fd, "\r\n", 2);
    }
    su_send_all(fd, "0\r\n\r\n", 5);
    r = su_read_resp(fd, 20);
    close(fd);
    cr_expect_eq(r.status, 413, "chunked 200 KiB: %s", r.raw ? r.raw : "");
    su_free(&r);
    free(big);
    s_expect_alive(p.port);
    su_stop(&p);
}

Test(serve_hostile, garbage_on_the_socket) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    const char *junk[] = {
        "GARBAGE\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 tls hello",
        "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        "POST /v1/completions HTTP/1.0\r\nContent-Length: 100\r\n\r\n{\"prompt\":", /* then hang up */
        "GET /health HTTP/1.1\r\nHost: x\r\nX: " /* header never finished */,
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        http_resp r = su_raw(p.port, junk[i], strlen(junk[i]), 0.5);
        cr_expect(r.status == 0 || (r.status >= 400 && r.status < 500), "junk %zu: status %d", i, r.status);
        su_free(&r);
    }
    s_expect_alive(p.port);
    cr_expect_eq(su_stop(&p), 0);
}

typedef struct flood_arg {
    int port;
    int status;
} flood_arg;

static void *s_flood_client(void *arg) {
    flood_arg *a = arg;
    http_resp r = su_post(a->port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":4,\"seed\":1}");
    a->status = r.status;
    su_free(&r);
    return NULL;
}

Test(serve_hostile, two_hundred_connections_at_once, .timeout = 240) {
    char model[4096];
    const char *extra[] = {"--parallel", "2", "--queue", "16", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    enum {
        N = 200
    };
    flood_arg args[N];
    pthread_t th[N];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < N; i++) {
        args[i] = (flood_arg){.port = p.port};
        cr_assert_eq(pthread_create(&th[i], &attr, s_flood_client, &args[i]), 0);
    }
    int ok = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].status == 200;
        busy += args[i].status == 429;
        cr_expect(args[i].status == 200 || args[i].status == 429, "client %d: status %d", i, args[i].status);
    }
    cr_expect_geq(ok, 2, "%d served, %d refused", ok, busy);
    s_expect_alive(p.port);
    http_resp r = su_get(p.port, "/metrics");
    char want[64];
    snprintf(want, sizeof want, "code=\"200\"} %d\n", ok + 1);
    cr_expect(strstr(r.body, want) != NULL, "metrics count %d ok: %s", ok + 1, r.body);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_hostile, ambiguous_framing_and_trailing_bytes_get_400) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    const char *body = "{\"prompt\":\"a\",\"max_tokens\":1}";
    char req[1024];
    /* two different Content-Length headers: which one a proxy used is anyone's guess */
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body), strlen(body) + 5, body);
    http_resp r = su_raw(p.port, req, strlen(req), 5);
    s_expect_error(&r, 400, "two Content-Length");
    su_free(&r);
    /* Content-Length and Transfer-Encoding: chunked */
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n"
             "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
             strlen(body), strlen(body), body);
    r = su_raw(p.port, req, strlen(req), 5);
    s_expect_error(&r, 400, "Content-Length with chunked");
    su_free(&r);
    /* bytes after the JSON value */
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1} {\"prompt\":\"b\"}");
    s_expect_error(&r, 400, "a second JSON value after the body");
    su_free(&r);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}GET /health HTTP/1.0\r\n\r\n");
    s_expect_error(&r, 400, "a request after the JSON body");
    su_free(&r);
    s_expect_alive(p.port);
    su_stop(&p);
}

Test(serve_hostile, nul_in_text_and_tiny_top_p) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    static const struct {
        const char *path, *body, *param, *names;
    } cases[] = {
        {"/v1/completions", "{\"prompt\":\"a\\u0000b\",\"max_tokens\":1}", "prompt", "prompt:"},
        {"/v1/completions", "{\"prompt\":[\"x\\u0000\"],\"max_tokens\":1}", "prompt", "prompt[0]"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"a\\u0000\"}]}",
         "messages", "messages[1].content"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"x\",\"\\u0000\"],\"max_tokens\":1}", "stop", "stop[1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_resp r = su_post(p.port, cases[i].path, cases[i].body);
        s_expect_error(&r, 400, cases[i].body);
        cr_expect(r.body && strstr(r.body, cases[i].names) && strstr(r.body, "NUL"), "%s: %s", cases[i].body, r.body);
        char want[64];
        snprintf(want, sizeof want, "\"param\":\"%s\"", cases[i].param);
        cr_expect(r.body && strstr(r.body, want), "%s: want %s in %s", cases[i].body, want, r.body);
        su_free(&r);
    }
    /* an escaped backslash before u0000 is text, not a NUL */
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\\\\u0000\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    /* a raw NUL byte or invalid UTF-8 in the body */
    char raw[] = "{\"prompt\":\"a?b\",\"max_tokens\":1}";
    raw[12] = (char)0xC3;
    r = su_post(p.port, "/v1/completions", raw);
    s_expect_error(&r, 400, "invalid UTF-8 in the body");
    su_free(&r);
    /* top_p below the smallest float: the nucleus is the best token, never a 500 */
    for (int i = 0; i < 2; i++) {
        r = su_post(p.port, "/v1/completions",
                    i ? "{\"prompt\":\"a\",\"max_tokens\":3,\"top_p\":1e-300}"
                      : "{\"prompt\":\"a\",\"max_tokens\":3,\"top_p\":5e-324}");
        cr_expect_eq(r.status, 200, "tiny top_p: %s", r.raw);
        su_free(&r);
    }
    s_expect_alive(p.port);
    su_stop(&p);
}

/* A completions body with a json_schema: an object of n_props properties p0, p1, ...
 * (p0 an enum of n_enum strings when n_enum > 0, the rest enums of "x" and "y"),
 * depth objects down (each with one property "in"); malloc'd. */
static char *s_schema_body(int n_enum, int n_props, int depth) {
    cJSON *o = cJSON_CreateObject(), *rf = cJSON_AddObjectToObject(o, "response_format");
    cJSON_AddStringToObject(o, "prompt", "a");
    cJSON_AddNumberToObject(o, "max_tokens", 8);
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *sc = cJSON_AddObjectToObject(cJSON_AddObjectToObject(rf, "json_schema"), "schema");
    for (int d = 0; d < depth; d++) {
        cJSON_AddStringToObject(sc, "type", "object");
        sc = cJSON_AddObjectToObject(cJSON_AddObjectToObject(sc, "properties"), "in");
    }
    cJSON_AddStringToObject(sc, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(sc, "properties");
    for (int k = 0; k < n_props; k++) {
        char name[32], v[32];
        snprintf(name, sizeof name, "p%d", k);
        cJSON *e = cJSON_AddArrayToObject(cJSON_AddObjectToObject(props, name), "enum");
        for (int i = 0; i < (k == 0 && n_enum ? n_enum : 2); i++) {
            snprintf(v, sizeof v, "v%d", i);
            cJSON_AddItemToArray(e, cJSON_CreateString(k == 0 && n_enum ? v : i ? "y" : "x"));
        }
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* Issue 28: an enum of 32,767 values before another property killed the server
 * (SIGSEGV in the grammar), 40,000 gave 200 with empty content. Each schema here
 * either works or gets a 400 naming the limit, and the server stays up. */
Test(serve_hostile, huge_schemas_work_or_get_400_naming_the_limit, .timeout = 120) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    static const struct {
        int n_enum, n_props, depth, status;
        const char *says;
    } cases[] = {
        {32767, 2, 0, 400, "at most 1024"},
        {40000, 2, 0, 400, "at most 1024"},
        {1024, 2, 0, 200, NULL},
        {0, 2000, 0, 400, "1024 nodes"},
        {0, 300, 0, 200, NULL},
        {0, 1, 40, 400, "30 levels"},
        {0, 1, 20, 200, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *body = s_schema_body(cases[i].n_enum, cases[i].n_props, cases[i].depth);
        http_resp r = su_post(p.port, "/v1/completions", body);
        free(body);
        if (cases[i].status == 400) {
            s_expect_error(&r, 400, cases[i].says);
            cr_expect(r.body && strstr(r.body, cases[i].says) && strstr(r.body, "\"param\":\"response_format\""),
                      "case %zu: %s", i, r.raw ? r.raw : "(none)");
        } else {
            cr_expect_eq(r.status, 200, "case %zu: %s", i, r.raw ? r.raw : "(none)");
            cr_expect(r.body && strstr(r.body, "\"text\":\"{"), "case %zu: no JSON begun: %s", i, r.body);
        }
        su_free(&r);
        s_expect_alive(p.port);
    }
    /* enum [1e400]: cJSON reads an infinity, which had become "null" */
    http_resp r = su_post(p.port, "/v1/completions",
                          "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                          "{\"enum\":[1e400]}}}}");
    s_expect_error(&r, 400, "enum [1e400]");
    cr_expect(r.body && strstr(r.body, "enum[0]: a number out of range"), "%s", r.body);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

/* Issue 28: /tokenize cut its text at \u0000 and called a lone surrogate "must be a JSON
 * object"; it now refuses both as /v1 does (the same check), naming the reason. */
Test(serve_hostile, tokenize_checks_text_as_v1_does) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    static const struct {
        const char *path, *body, *says;
    } cases[] = {
        {"/tokenize", "{\"content\":\"a\\u0000b\"}", "content: contains a NUL"},
        {"/tokenize", "{\"content\":\"\\ud800\"}", "\\\\ud800 at byte 12 is half a UTF-16 surrogate pair"},
        {"/tokenize", "{\"content\":\"x\\udc00y\"}", "\\\\udc00 at byte 13 is half a UTF-16 surrogate pair"},
        {"/detokenize", "{\"tokens\":[1],\"model\":\"\\ud800\"}", "surrogate pair"},
        {"/v1/completions", "{\"prompt\":\"\\ud83d\",\"max_tokens\":1}", "surrogate pair"},
        {"/tokenize", "[1]", "must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_resp r = su_post(p.port, cases[i].path, cases[i].body);
        s_expect_error(&r, 400, cases[i].body);
        cr_expect(r.body && strstr(r.body, cases[i].says), "%s: want '%s' in %s", cases[i].body, cases[i].says,
                  r.body ? r.body : "(none)");
        su_free(&r);
    }
    /* a whole pair is text */
    http_resp r = su_post(p.port, "/tokenize", "{\"content\":\"\\ud83d\\ude00\"}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    s_expect_alive(p.port);
    su_stop(&p);
}

/* 1 if text[0..n) is valid UTF-8, by glibc's decoder (independent of the server's). */
static int s_strict_utf8(const char *text, size_t n) {
    iconv_t cd = iconv_open("UTF-32LE", "UTF-8");
    cr_assert(cd != (iconv_t)-1);
    size_t cap = 4 * n + 4, left_out = cap;
    char *out = malloc(cap), *o = out, *in = (char *)text;
    size_t left_in = n, rc = iconv(cd, &in, &left_in, &o, &left_out);
    iconv_close(cd);
    free(out);
    return rc != (size_t)-1 && left_in == 0;
}

Test(serve_hostile, replies_are_valid_utf8_at_temperature_2, .timeout = 240) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    int bad = 0;
    for (int i = 0; i < 14; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"%s\":%s,\"max_tokens\":48,\"temperature\":2,\"seed\":%d%s}",
                 i % 4 < 2 ? "prompt" : "messages", i % 4 < 2 ? "\"Once\"" : "[{\"role\":\"user\",\"content\":\"Hi\"}]",
                 i + 1, i % 2 ? ",\"stream\":true" : "");
        http_resp r = su_post(p.port, i % 4 < 2 ? "/v1/completions" : "/v1/chat/completions", body);
        cr_expect_eq(r.status, 200, "%s: %s", body, r.raw);
        if (!s_strict_utf8(r.body, r.len)) {
            bad++;
            cr_expect_fail("%s: the reply is not valid UTF-8", body);
        } else if (i % 2 == 0) {
            cJSON *j = cJSON_Parse(r.body);
            cr_expect_not_null(j, "%s: not JSON", body);
            cJSON_Delete(j);
        }
        su_free(&r);
    }
    cr_expect_eq(bad, 0, "%d of 14 replies were not valid UTF-8", bad);
    su_stop(&p);
}
