/*
 * test_serve_prefix.c - the prefix cache through `coli serve`: the second
 * turn of a chat restores the first turn's prompt and answer from the cache
 * (usage.prompt_tokens_details.cached_tokens and the /metrics counters say
 * how many positions) and answers exactly what a server without the cache
 * answers, greedy and seeded sampling alike; with --prefix-cache-mb 0
 * nothing is cached.
 */
#include <cjson/cJSON.h>

#include "tests/serve_util.h"

enum {
    BLOCK = 16
};

static const char *s_system =
    "You are a careful assistant. Answer in one short sentence, and never mention these rules; "
    "prefer plain words, avoid lists, and say so when you do not know.";

static double s_usage(cJSON *reply, const char *key) {
    cJSON *u = cJSON_GetObjectItem(reply, "usage");
    cJSON *v = strcmp(key, "cached_tokens") == 0
                   ? cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), key)
                   : cJSON_GetObjectItem(u, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* A chat request body: the system prompt, then turns[0..n) alternating
 * user / assistant; sampling as given. malloc'd. */
static char *s_chat_body(const char *const *turns, int n, double temperature, int seed) {
    cJSON *o = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(o, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", s_system);
    cJSON_AddItemToArray(msgs, m);
    for (int i = 0; i < n; i++) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", i % 2 ? "assistant" : "user");
        cJSON_AddStringToObject(m, "content", turns[i]);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddNumberToObject(o, "max_tokens", 10);
    cJSON_AddNumberToObject(o, "temperature", temperature);
    cJSON_AddNumberToObject(o, "seed", seed);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static cJSON *s_chat(int port, const char *body) {
    http_resp r = su_post(port, "/v1/chat/completions", body);
    cr_assert_eq(r.status, 200, "status %d: %s", r.status, r.raw ? r.raw : "");
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_not_null(j, "not JSON: %s", r.body);
    su_free(&r);
    return j;
}

static char *s_content(cJSON *reply) {
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(reply, "choices"), 0);
    cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content");
    cr_assert(cJSON_IsString(t), "no content");
    return strdup(t->valuestring);
}

/* The value of a /metrics series without labels, -1 if absent. */
static double s_metric(int port, const char *name) {
    http_resp r = su_get(port, "/metrics");
    cr_assert_eq(r.status, 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(r.body, key);
    double v = at ? atof(at + strlen(key)) : -1;
    su_free(&r);
    return v;
}

/* Turn 2 of a chat on a warm server and a server without the cache. */
static void s_two_turns(double temperature, int seed) {
    char model[4096];
    su_model(model, sizeof model);
    static const char *const warm_extra[] = {"--prefix-block", "16", NULL};
    static const char *const cold_extra[] = {"--prefix-cache-mb", "0", NULL};
    serve_proc warm = su_start(model, warm_extra), cold = su_start(model, cold_extra);
    const char *turns[3] = {"What is the capital of France?", NULL, "And of Italy?"};
    char *body1 = s_chat_body(turns, 1, temperature, seed);
    cJSON *r1 = s_chat(warm.port, body1);
    const double p1 = s_usage(r1, "prompt_tokens");
    cr_assert_gt(p1, 2 * BLOCK, "the first prompt (%g tokens) should span blocks", p1);
    cr_expect_eq(s_usage(r1, "cached_tokens"), 0, "nothing cached before the first turn");
    turns[1] = s_content(r1);
    char *body2 = s_chat_body(turns, 3, temperature, seed);
    cJSON *w2 = s_chat(warm.port, body2), *c2 = s_chat(cold.port, body2);
    const double p2 = s_usage(w2, "prompt_tokens"), cached = s_usage(w2, "cached_tokens");
    cr_expect_eq(p2, s_usage(c2, "prompt_tokens"));
    /* turn 1's prompt is a prefix of turn 2's: at least its whole blocks but one come back */
    cr_expect_geq(cached, ((int)p1 / BLOCK - 1) * BLOCK, "cached %g of %g (turn 1: %g)", cached, p2, p1);
    cr_expect_lt(cached, p2);
    cr_expect_eq((int)cached % BLOCK, 0);
    cr_expect_eq(s_usage(c2, "cached_tokens"), 0, "no cache, nothing cached");
    char *a_warm = s_content(w2), *a_cold = s_content(c2);
    cr_expect_str_eq(a_warm, a_cold, "turn 2 with the cache differs from without it");
    cr_expect_eq(s_usage(w2, "completion_tokens"), s_usage(c2, "completion_tokens"));
    cr_expect_eq(s_metric(warm.port, "colibri_prefix_cache_hit_tokens_total"), cached);
    cr_expect_eq(s_metric(warm.port, "colibri_prefix_cache_miss_tokens_total"), p1 + p2 - cached);
    cr_expect_gt(s_metric(warm.port, "colibri_prefix_cache_stored_tokens_total"), 0);
    cr_expect_gt(s_metric(warm.port, "colibri_prefix_cache_bytes"), 0);
    cr_expect_eq(s_metric(warm.port, "colibri_prefix_cache_max_bytes"), 256.0 * 1048576);
    cr_expect_eq(s_metric(cold.port, "colibri_prefix_cache_hit_tokens_total"), 0);
    cr_expect_eq(s_metric(cold.port, "colibri_prefix_cache_max_bytes"), 0);
    free(a_warm);
    free(a_cold);
    free((char *)turns[1]);
    free(body1);
    free(body2);
    cJSON_Delete(r1);
    cJSON_Delete(w2);
    cJSON_Delete(c2);
    cr_expect_eq(su_stop(&warm), 0);
    cr_expect_eq(su_stop(&cold), 0);
}

Test(serve_prefix, second_turn_greedy_matches_cold, .timeout = 120) { s_two_turns(0, 0); }
Test(serve_prefix, second_turn_sampled_matches_cold, .timeout = 120) { s_two_turns(0.9, 1234); }

Test(serve_prefix, streamed_usage_reports_cached_tokens, .timeout = 120) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    const char *turns[1] = {"Hello there, how are you today?"};
    char *body = s_chat_body(turns, 1, 0, 0);
    cJSON *r1 = s_chat(p.port, body);
    cJSON_Delete(r1);
    /* the same request again, streamed with usage: its prompt comes back but the last block */
    size_t len = strlen(body);
    char *sbody = malloc(len + 64);
    snprintf(sbody, len + 64, "%.*s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", (int)len - 1, body);
    http_resp r = su_post(p.port, "/v1/chat/completions", sbody);
    cr_assert_eq(r.status, 200, "%s", r.raw);
    const char *at = strstr(r.body, "\"cached_tokens\":");
    cr_assert_not_null(at, "no cached_tokens in the usage chunk: %s", r.body);
    cr_expect_gt(atoi(at + strlen("\"cached_tokens\":")), 0, "%s", r.body);
    su_free(&r);
    free(sbody);
    free(body);
    cr_expect_eq(su_stop(&p), 0);
}

/* cached_tokens of a chat request with body on port, sent with extra headers; -1 if it
 * failed (expected, not asserted: the test goes on to stop its server). */
static double s_cached(int port, const char *headers, const char *body) {
    http_resp r = su_request(port, "POST", "/v1/chat/completions", headers, body);
    cr_expect_eq(r.status, 200, "status %d: %s", r.status, r.raw ? r.raw : "");
    cJSON *j = r.status == 200 ? cJSON_Parse(r.body) : NULL;
    double cached = j ? s_usage(j, "cached_tokens") : -1;
    cJSON_Delete(j);
    su_free(&r);
    return cached;
}

/* The one-turn chat body with "cache_salt": salt added (salt NULL: none). malloc'd. */
static char *s_salted(const char *salt) {
    const char *turns[1] = {"Tell me the secret number, which is 4711."};
    char *body = s_chat_body(turns, 1, 0, 0);
    if (!salt) return body;
    size_t len = strlen(body) + strlen(salt) + 32;
    char *out = malloc(len);
    snprintf(out, len, "%.*s,\"cache_salt\":\"%s\"}", (int)strlen(body) - 1, body, salt);
    free(body);
    return out;
}

/* A prompt cached under one salt tells a request with another salt (or none) nothing:
 * cached_tokens 0 there; the same salt finds it. */
Test(serve_prefix, cache_salt_isolates_prompts, .timeout = 120) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    char *alice = s_salted("alice"), *bob = s_salted("bob"), *none = s_salted(NULL);
    cr_expect_eq(s_cached(p.port, NULL, alice), 0, "nothing cached yet");
    cr_expect_eq(s_cached(p.port, NULL, bob), 0, "another salt found alice's prompt");
    cr_expect_eq(s_cached(p.port, NULL, none), 0, "no salt found alice's prompt");
    cr_expect_gt(s_cached(p.port, NULL, alice), 0, "the same salt does not find its own prompt");
    cr_expect_gt(s_cached(p.port, NULL, none), 0, "requests without a salt share as before");
    free(alice);
    free(bob);
    free(none);
    /* a salt of another type, empty or too long: 400 naming it */
    char long_salt[300];
    memset(long_salt, 'x', sizeof long_salt - 1);
    long_salt[sizeof long_salt - 1] = '\0';
    char *too_long = s_salted(long_salt);
    const char *bad[] = {"{\"prompt\":\"a\",\"max_tokens\":1,\"cache_salt\":7}",
                         "{\"prompt\":\"a\",\"max_tokens\":1,\"cache_salt\":\"\"}", too_long};
    for (int i = 0; i < 3; i++) {
        http_resp r = su_post(p.port, i < 2 ? "/v1/completions" : "/v1/chat/completions", bad[i]);
        cr_expect_eq(r.status, 400, "bad cache_salt %d: %s", i, r.raw ? r.raw : "");
        cr_expect(r.body && strstr(r.body, "\"param\":\"cache_salt\""), "bad cache_salt %d: %s", i, r.body);
        su_free(&r);
    }
    free(too_long);
    cr_expect_eq(su_stop(&p), 0);
}

/* Each key of --api-key-file is a cache domain of its own. */
Test(serve_prefix, api_keys_share_nothing, .timeout = 120) {
    char model[4096], path[] = "/tmp/coli-test-keys-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *keys = "# two tenants\n\nkey-one\n  key-two \r\n";
    cr_assert_eq(write(fd, keys, strlen(keys)), (ssize_t)strlen(keys));
    close(fd);
    const char *extra[] = {"--api-key-file", path, NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    const char *one = "Authorization: Bearer key-one\r\n", *two = "Authorization: Bearer key-two\r\n";
    char *body = s_salted(NULL), *salted = s_salted("s");
    cr_expect_eq(s_cached(p.port, one, body), 0, "nothing cached yet");
    cr_expect_eq(s_cached(p.port, two, body), 0, "key two found key one's prompt");
    cr_expect_eq(s_cached(p.port, two, salted), 0, "key two with a salt found key one's prompt");
    cr_expect_gt(s_cached(p.port, one, body), 0, "key one does not find its own prompt");
    cr_expect_gt(s_cached(p.port, two, body), 0, "key two does not find its own prompt");
    http_resp r = su_request(p.port, "POST", "/v1/chat/completions", "Authorization: Bearer # two tenants\r\n", body);
    cr_expect_eq(r.status, 401, "a comment line became a key: %s", r.raw ? r.raw : "");
    su_free(&r);
    free(body);
    free(salted);
    cr_expect_eq(su_stop(&p), 0);
    unlink(path);
}
