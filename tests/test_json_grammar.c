/*
 * test_json_grammar.c - response_format's JSON automaton
 * (tools/coli/server/server_grammar.c, its insides by server_grammar.h): byte by byte on
 * valid and broken JSON, the schema subset and its refusals, and the logit
 * filter driven like a model over the fixture's real vocabulary: whatever
 * it picks, the finished output parses and fits the schema (checked with cJSON);
 * also over GPT-2's 50k byte-level BPE vocabulary from ../shared.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/cli_run.h"
#include "tests/ref_models.h"
#include "tools/coli/server/server_grammar.h"

static server g_srv;

static void s_setup(void) {
    char path[4096];
    cli_build_path(path, sizeof path, "fixtures/tiny-llama-moe-f32.gguf");
    if (!cli_file_exists(path)) cr_skip_test("%s missing: run make fixtures (make test does)", path);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.vocab_only = 1;
    cr_assert_eq(coli_model_load(path, &mp, &g_srv.model), 0, "%s", coli_last_error());
    coli_model_get_info(g_srv.model, &g_srv.info);
}

static void s_teardown(void) { coli_model_free(&g_srv.model); }

/* Compile a response_format given as JSON text; 0 or the HTTP status, err filled. */
static int s_new(const char *rf_json, json_grammar **g, char *err, size_t cap) {
    cJSON *rf = cJSON_Parse(rf_json);
    cr_assert_not_null(rf, "test bug: %s", rf_json);
    int rc = json_grammar_new(&g_srv, rf, g, err, cap);
    cJSON_Delete(rf);
    return rc;
}

/* Feed text to a fresh copy of g's state: 1 if every byte and then the end are allowed. */
static int s_accepts(const json_grammar *g, const char *text, int need_end) {
    gstate st = g->st;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (!json_grammar_feed(g, &st, *p)) return 0;
    return need_end ? json_grammar_feed(g, &st, -1) : 1;
}

#define OBJECT "{\"type\":\"json_object\"}"

Test(json_grammar, json_object_accepts_objects_and_refuses_the_rest, .init = s_setup, .fini = s_teardown) {
    json_grammar *g = NULL;
    char err[256];
    cr_assert_eq(s_new(OBJECT, &g, err, sizeof err), 0, "%s", err);
    const char *good[] = {"{}",
                          "{\"a\":1}",
                          "{\"a\": [1, -2.5e+3, 0.25, true, false, null, \"x\\n\\u00e9\"], \"b\": {}}",
                          "{ \"k\" : { \"n\" : [ ] } }",
                          "{\"\xc3\xa9\":\"\xe2\x82\xac\"}",
                          "{\"a\":0}",
                          "{\"a\":-0.0E5}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        cr_assert(s_accepts(g, good[i], 1), "refused valid %s", good[i]);
    const char *bad[] = {"[]",
                         "\"s\"",
                         " {}",
                         "{\"a\" 1}",
                         "{\"a\":tru}",
                         "{\"a\":01}",
                         "{\"a\":1,}",
                         "{\"a\":[1,]}",
                         "{a:1}",
                         "{\"a\":\"\x01\"}",
                         "{\"a\":\"\\x\"}",
                         "{\"a\":1.}",
                         "{\"a\":\"\xc3\"}",
                         "{}}",
                         "{\"a\":1}x",
                         "{\"a\":\"\xff\"}",
                         "{           }"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert(!s_accepts(g, bad[i], 1), "accepted invalid %s", bad[i]);
    cr_assert(!s_accepts(g, "{\"a\":1", 1), "an unfinished object cannot end");
    cr_assert(s_accepts(g, "{\"a\":1", 0), "but it is a valid prefix");
    json_grammar_free(g);
}

#define SCHEMA(s) "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"schema\":" s "}}"
#define PERSON                                                                                                       \
    SCHEMA("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"     \
           "\"ok\":{\"type\":\"boolean\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bc\",1,null]}}," \
           "\"score\":{\"type\":\"number\"}},\"required\":[\"name\",\"ok\"]}")

Test(json_grammar, schema_subset, .init = s_setup, .fini = s_teardown) {
    json_grammar *g = NULL;
    char err[256];
    cr_assert_eq(s_new(PERSON, &g, err, sizeof err), 0, "%s", err);
    const char *good[] = {"{\"name\":\"x\",\"ok\":true}",
                          "{\"name\":\"\",\"age\":-3,\"ok\":false,\"tags\":[\"bc\",1,null],\"score\":1.5e2}",
                          "{\"name\": \"x\", \"ok\": false, \"score\": 0}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        cr_assert(s_accepts(g, good[i], 1), "refused valid %s", good[i]);
    const char *bad[] = {"{}",
                         "{\"ok\":true}",
                         "{\"name\":\"x\"}",
                         "{\"name\":1,\"ok\":true}",
                         "{\"name\":\"x\",\"age\":1.5,\"ok\":true}",
                         "{\"name\":\"x\",\"ok\":1}",
                         "{\"name\":\"x\",\"ok\":true,\"tags\":[\"b\"]}",
                         "{\"name\":\"x\",\"ok\":true,\"other\":1}",
                         "{\"ok\":true,\"name\":\"x\"}",
                         "{\"name\":\"x\",\"ok\":true,\"tags\":[12]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert(!s_accepts(g, bad[i], 1), "accepted invalid %s", bad[i]);
    json_grammar_free(g);
    /* refused with the keyword named */
    const struct {
        const char *rf, *says;
    } refuse[] = {
        {SCHEMA("{\"type\":\"string\",\"pattern\":\"a+\"}"), "'pattern'"},
        {SCHEMA("{\"anyOf\":[]}"), "'anyOf'"},
        {SCHEMA("{\"type\":[\"string\",\"null\"]}"), "single type"},
        {SCHEMA("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}"), "'b'"},
        {SCHEMA("{\"type\":\"object\",\"additionalProperties\":true}"), "additionalProperties"},
        {"{\"type\":\"json_schema\"}", "json_schema.schema"},
        {"{\"type\":\"xml\"}", "type"},
    };
    for (size_t i = 0; i < sizeof refuse / sizeof *refuse; i++) {
        g = NULL;
        cr_assert_eq(s_new(refuse[i].rf, &g, err, sizeof err), 400, "not refused: %s", refuse[i].rf);
        cr_assert(strstr(err, refuse[i].says), "'%s' does not name %s", err, refuse[i].says);
        cr_assert_null(g);
    }
}

/* A json_schema response_format around an object schema (depth objects down, each with
 * one property "in") of n_props properties p0, p1, ...: the first n_big each an enum of
 * n_enum strings "v0", "v1", ... (with pad 'z's after the number), the others enums of
 * two strings "x", "y". */
static cJSON *s_big_schema(int n_enum, int n_big, int pad, int n_props, int depth) {
    cJSON *rf = cJSON_CreateObject(), *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *sc = cJSON_AddObjectToObject(js, "schema");
    for (int d = 0; d < depth; d++) { /* {"type":"object","properties":{"in":{...}}} */
        cJSON_AddStringToObject(sc, "type", "object");
        sc = cJSON_AddObjectToObject(cJSON_AddObjectToObject(sc, "properties"), "in");
    }
    cJSON_AddStringToObject(sc, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(sc, "properties");
    for (int k = 0; k < n_props; k++) {
        char name[32], v[160];
        snprintf(name, sizeof name, "p%d", k);
        cJSON *e = cJSON_AddArrayToObject(cJSON_AddObjectToObject(props, name), "enum");
        int big = k < n_big;
        for (int i = 0; i < (big ? n_enum : 2); i++) {
            snprintf(
                v, sizeof v, big ? "v%d%.*s" : "%c", big ? i : 'x' + i, pad,
                "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz");
            cJSON_AddItemToArray(e, cJSON_CreateString(v));
        }
    }
    return rf;
}

/* Compile s_big_schema(...): 0 or the HTTP status, err filled. */
static int s_new_big(int n_enum, int n_big, int pad, int n_props, int depth, json_grammar **g, char *err, size_t cap) {
    cJSON *rf = s_big_schema(n_enum, n_big, pad, n_props, depth);
    int rc = json_grammar_new(&g_srv, rf, g, err, cap);
    cJSON_Delete(rf);
    return rc;
}

/* Issue 28: an enum of 32,767 values pushed the next property's literal indices past an
 * int16 (SIGSEGV while matching); 32,768 and more gave an automaton that accepted nothing.
 * Every count is bounded now: a schema over a limit is a 400 naming it, one under works. */
Test(json_grammar, large_enums_and_many_properties_work_or_name_the_limit, .init = s_setup, .fini = s_teardown) {
    json_grammar *g = NULL;
    char err[256];
    const struct {
        int n_enum, n_big, pad, n_props, depth;
        const char *says;
    } over[] = {
        {32767, 1, 0, 2, 0, "at most 1024"}, /* the crash of the issue */
        {40000, 1, 0, 2, 0, "at most 1024"}, /* the empty answer of the issue */
        {1024, 4, 0, 4, 0, "4096 enum values and property names"},
        {1000, 1, 90, 1, 0, "65536 bytes"},
        {0, 0, 0, 2000, 0, "more than 1024 nodes"},
        {0, 0, 0, 1, 40, "deeper than 30 levels"},
    };
    for (size_t i = 0; i < sizeof over / sizeof *over; i++) {
        g = NULL;
        cr_assert_eq(
            s_new_big(over[i].n_enum, over[i].n_big, over[i].pad, over[i].n_props, over[i].depth, &g, err, sizeof err),
            400, "case %zu compiled", i);
        cr_assert(strstr(err, over[i].says), "case %zu: '%s' does not name '%s'", i, err, over[i].says);
        cr_assert_null(g);
    }
    /* at the limits: the last value of a 1024-value enum, then the next property */
    cr_assert_eq(s_new_big(1024, 1, 0, 3, 0, &g, err, sizeof err), 0, "%s", err);
    cr_assert(s_accepts(g, "{\"p0\":\"v1023\",\"p1\":\"y\",\"p2\":\"x\"}", 1));
    cr_assert(s_accepts(g, "{\"p2\":\"y\"}", 1));
    cr_assert(!s_accepts(g, "{\"p0\":\"v1024\"}", 1));
    cr_assert(!s_accepts(g, "{\"p0\":\"v1\",\"p1\":\"z\"}", 1));
    json_grammar_free(g);
    cr_assert_eq(s_new_big(0, 0, 0, 1000, 0, &g, err, sizeof err), 0, "%s", err);
    cr_assert(s_accepts(g, "{\"p0\":\"x\",\"p998\":\"y\",\"p999\":\"x\"}", 1));
    cr_assert(!s_accepts(g, "{\"p999\":\"x\",\"p0\":\"x\"}", 1));
    json_grammar_free(g);
    cr_assert_eq(s_new_big(0, 0, 0, 1, 28, &g, err, sizeof err), 0, "%s", err);
    char deep[512] = "", *at = deep;
    for (int d = 0; d < 28; d++) at += sprintf(at, "{\"in\":");
    at += sprintf(at, "{\"p0\":\"y\"}");
    for (int d = 0; d < 28; d++) *at++ = '}';
    *at = '\0';
    cr_assert(s_accepts(g, deep, 1), "%s", deep);
    json_grammar_free(g);
}

/* Issue 28: enum [1e400] (cJSON reads an infinity) generated "null"; refused, naming the value. */
Test(json_grammar, out_of_range_numbers_are_refused, .init = s_setup, .fini = s_teardown) {
    const char *rf[] = {SCHEMA("{\"enum\":[1,1e400]}"), SCHEMA("{\"const\":-1e400}")};
    const char *says[] = {"enum[1]: a number out of range", "const[0]: a number out of range"};
    for (int i = 0; i < 2; i++) {
        json_grammar *g = NULL;
        char err[256];
        cr_assert_eq(s_new(rf[i], &g, err, sizeof err), 400, "%s compiled", rf[i]);
        cr_assert(strstr(err, says[i]), "'%s'", err);
    }
    json_grammar *g = NULL;
    char err[256];
    cr_assert_eq(s_new(SCHEMA("{\"enum\":[1e300,-2.5]}"), &g, err, sizeof err), 0, "%s", err);
    cr_assert(s_accepts(g, "1e+300", 1) && s_accepts(g, "-2.5", 1) && !s_accepts(g, "null", 1));
    json_grammar_free(g);
}

/* Drive the filter like a model: pseudo-random logits, the best allowed token, until an
 * end-of-generation token wins. The text must parse; returns it (malloc'd) or NULL if 400 steps did not end it. */

static char *s_generate(json_grammar *g, unsigned seed, float eog_bonus, int *calls) {
    int n = g->n_vocab;
    float *logits = malloc((size_t)n * sizeof *logits);
    char *out = calloc(1, 8192);
    size_t len = 0;
    for (int step = 0; step < 400; step++) {
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            logits[i] = (float)((seed >> 8) & 0xffff) / 65536.0f + (g->eog[i] ? eog_bonus : 0.0f);
            /* a model that likes to close what it opened, so the walk ends in a big vocabulary too */
            if (calls && g->piece_len[i] && memchr(g->piece[i], '"', g->piece_len[i])) logits[i] += 0.3f;
        }
        json_grammar_filter(g, logits, n);
        if (calls) ++*calls;
        int best = -1;
        for (int i = 0; i < n; i++)
            if (isfinite(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
        cr_assert_geq(best, 0, "the filter left nothing after '%s'", out);
        if (g->eog[best]) {
            free(logits);
            return out;
        }
        cr_assert_eq(json_grammar_accept(g, best), 0);
        cr_assert_lt(len + g->piece_len[best], 8191);
        memcpy(out + len, g->piece[best], g->piece_len[best]);
        len += g->piece_len[best];
    }
    free(logits);
    free(out);
    return NULL;
}

Test(json_grammar, filtered_generation_always_parses, .init = s_setup, .fini = s_teardown) {
    int finished = 0;
    for (unsigned seed = 1; seed <= 12; seed++) {
        json_grammar *g = NULL;
        char err[256];
        cr_assert_eq(s_new(seed % 2
                               ? PERSON
                               : SCHEMA("{\"type\":\"object\",\"properties\":{\"c\":{\"enum\":[\"red\",\"green\"]},"
                                        "\"b\":{\"type\":\"boolean\"}},\"required\":[\"c\",\"b\"]}"),
                           &g, err, sizeof err),
                     0, "%s", err);
        char *text = s_generate(g, seed, 0.5f, NULL);
        if (text) {
            cJSON *v = cJSON_Parse(text);
            cr_assert_not_null(v, "seed %u: the output does not parse: %s", seed, text);
            cr_assert(cJSON_IsObject(v));
            cr_assert(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(v, seed % 2 ? "ok" : "b")), "seed %u: %s", seed,
                      text);
            cJSON_Delete(v);
            finished++;
        }
        free(text);
        json_grammar_free(g);
    }
    cr_assert_geq(finished, 6, "only %d of 12 generations finished in 400 tokens", finished);
}

/* A byte-level BPE vocabulary (GPT-2's 50257 tokens, "Ġ" pieces) from ../shared: the same property,
 * and what one filter call costs there (printed). */
Test(json_grammar, gpt2_vocabulary_output_parses) {
    s_require_shared();
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/vocab/ggml-vocab-gpt-2.gguf", s_shared());
    if (!s_exists(path)) cr_skip_test("%s missing", path);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.vocab_only = 1;
    cr_assert_eq(coli_model_load(path, &mp, &g_srv.model), 0, "%s", coli_last_error());
    coli_model_get_info(g_srv.model, &g_srv.info);
    int finished = 0;
    int calls = 0;
    for (unsigned seed = 1; seed <= 4; seed++) {
        json_grammar *g = NULL;
        char err[256];
        cr_assert_eq(s_new(PERSON, &g, err, sizeof err), 0, "%s", err);
        char *text = s_generate(g, seed, 0.5f, &calls);
        if (text) {
            cJSON *v = cJSON_Parse(text);
            cr_assert_not_null(v, "seed %u: the output does not parse: %s", seed, text);
            cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v, "name")), "%s", text);
            cJSON_Delete(v);
            finished++;
        }
        free(text);
        json_grammar_free(g);
    }
    coli_model_free(&g_srv.model);
    cr_assert_geq(finished, 2, "only %d of 4 generations finished", finished);
}
