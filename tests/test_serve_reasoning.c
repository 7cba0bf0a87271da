/*
 * test_serve_reasoning.c - reasoning_format deepseek of coli serve
 * (tools/coli/server/server_reasoning.c, from libcoli-server.a): the split of
 * "<think>R</think>A" answers, the property streaming rests on (the split
 * of any prefix is a prefix of the final split, so the chunks add up to the
 * whole answer), and the request field and flag on a real server.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/serve_util.h"
#include "tools/coli/server/server.h"

static char *s_part(const char *t, size_t start, size_t len) { return strndup(t + start, len); }

static void s_expect_split(const char *text, const char *reasoning, const char *content) {
    reasoning_split p = reasoning_split_text(text, strlen(text), 1);
    char *r = s_part(text, p.reasoning_start, p.reasoning_len), *c = s_part(text, p.content_start, p.content_len);
    cr_expect_str_eq(r, reasoning, "reasoning of [%s]", text);
    cr_expect_str_eq(c, content, "content of [%s]", text);
    free(r);
    free(c);
}

Test(serve_reasoning, final_split) {
    s_expect_split("<think>\nThe user greets.\n</think>\n\nHello!", "The user greets.", "Hello!");
    s_expect_split("  <think>a</think>b", "a", "b");
    s_expect_split("<think>\n\n</think>\n\nJust the answer", "", "Just the answer"); /* enable_thinking false */
    s_expect_split("Hello, no thought", "", "Hello, no thought");
    s_expect_split("<thin", "", "<thin");                                        /* final: not a tag after all */
    s_expect_split("<think>cut off by max_tokens", "cut off by max_tokens", ""); /* never closed */
    s_expect_split("<think>x</think>y</think>z", "x", "y</think>z");             /* the first close ends it */
    s_expect_split("a<think>b</think>c", "", "a<think>b</think>c");              /* a thought only at the start */
    s_expect_split("", "", "");
}

/* Every prefix, not final: each part is a prefix of the final part, at the
 * same offset (what the stream sends only grows, and adds up to the end). */
static void s_expect_monotone(const char *text) {
    const size_t n = strlen(text);
    const reasoning_split end = reasoning_split_text(text, n, 1);
    size_t last_r = 0, last_c = 0;
    for (size_t len = 0; len <= n; len++) {
        reasoning_split p = reasoning_split_text(text, len, len == n);
        if (p.reasoning_len) cr_assert_eq(p.reasoning_start, end.reasoning_start, "[%.*s]", (int)len, text);
        if (p.content_len) cr_assert_eq(p.content_start, end.content_start, "[%.*s]", (int)len, text);
        cr_assert_leq(p.reasoning_len, end.reasoning_len, "[%.*s]", (int)len, text);
        cr_assert_leq(p.content_len, end.content_len, "[%.*s]", (int)len, text);
        cr_assert_geq(p.reasoning_len, last_r, "reasoning shrank at %zu of [%s]", len, text);
        cr_assert_geq(p.content_len, last_c, "content shrank at %zu of [%s]", len, text);
        cr_assert(p.content_len == 0 || p.reasoning_len == end.reasoning_len,
                  "content before the reasoning is complete at %zu of [%s]", len, text);
        last_r = p.reasoning_len;
        last_c = p.content_len;
    }
}

Test(serve_reasoning, every_prefix_is_a_prefix_of_the_end) {
    static const char *texts[] = {"<think>\nStep one.\nStep two. </think>\n\nThe answer is <b>4</b>.",
                                  "<think>a < b and </thin k> ok</think>done",
                                  "<think>\n\n</think>\n\nplain",
                                  "   <think>   spaced   </think>   out   ",
                                  "no thought at all",
                                  "<thinking>not the tag</thinking>",
                                  "<think>unfinished and \n",
                                  "<",
                                  "\n\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) s_expect_monotone(texts[i]);
}

/* The answer t streamed step bytes at a time under syntax: the deltas
 * reasoning_next hands out, concatenated into r and c (cap bytes each). */
static void s_stream(int syntax, const char *t, size_t step, char *r, char *c, size_t cap) {
    const size_t n = strlen(t);
    size_t sent_r = 0, sent_c = 0, raw_end = 0;
    r[0] = c[0] = '\0';
    for (size_t len = 0;; len = len + step < n ? len + step : n) {
        reasoning_delta d = reasoning_next(syntax, t, len, len == n, &sent_r, &sent_c);
        cr_assert(d.reasoning && d.content);
        cr_assert_lt(strlen(r) + d.reasoning_len, cap);
        cr_assert_lt(strlen(c) + d.content_len, cap);
        strncat(r, d.reasoning, d.reasoning_len);
        strncat(c, d.content, d.content_len);
        cr_assert_leq(d.raw_end, len);
        cr_assert_geq(d.raw_end, raw_end, "raw_end went back at %zu of [%s]", len, t);
        raw_end = d.raw_end;
        reasoning_delta_free(&d);
        if (len == n) break;
    }
}

/* The final split of t under syntax, and the same streamed by every step
 * from 1 (a boundary inside every marker) to 9 bytes. */
static void s_expect_parts(int syntax, const char *t, const char *reasoning, const char *content) {
    size_t sent_r = 0, sent_c = 0;
    reasoning_delta d = reasoning_next(syntax, t, strlen(t), 1, &sent_r, &sent_c);
    cr_expect_str_eq(d.reasoning, reasoning, "reasoning of [%s]", t);
    cr_expect_str_eq(d.content, content, "content of [%s]", t);
    reasoning_delta_free(&d);
    for (size_t step = 1; step <= 9; step++) {
        char r[512], c[512];
        s_stream(syntax, t, step, r, c, sizeof r);
        cr_expect_str_eq(r, reasoning, "[%s] streamed by %zu: reasoning", t, step);
        cr_expect_str_eq(c, content, "[%s] streamed by %zu: content", t, step);
    }
}

#define HA_ANALYSIS "<|channel|>analysis<|message|>"
#define HA_NEXT "<|end|><|start|>assistant"

/* gpt-oss: the analysis channel is the reasoning, the final (and a commentary
 * preamble) the content; markers belong to neither, even cut by a chunk. */
Test(serve_reasoning, harmony_split_and_stream) {
    const int h = CHAT_SYNTAX_HARMONY;
    s_expect_parts(h, HA_ANALYSIS "Need 2 + 2.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
                   "Need 2 + 2.", "It is 4.");
    s_expect_parts(h,
                   HA_ANALYSIS "A1" HA_NEXT "<|channel|>commentary<|message|>Pre" HA_NEXT HA_ANALYSIS "A2" HA_NEXT
                               "<|channel|>final<|message|>F",
                   "A1A2", "PreF");
    /* gpt-oss-20b's stray commentary channel before the analysis one */
    s_expect_parts(h, "<|channel|>commentary to=assistant" HA_ANALYSIS "think" HA_NEXT "<|channel|>final<|message|>ok",
                   "think", "ok");
    /* cut off by max_tokens inside the analysis: what looked like a marker is text after all */
    s_expect_parts(h, HA_ANALYSIS "thinking <|en", "thinking <|en", "");
    s_expect_parts(h, "<|channel|>final<|message|>only the answer", "", "only the answer");
    s_expect_parts(h, "a model that left the format", "", "a model that left the format");
    s_expect_parts(h, "<|channel|>analys", "", "<|channel|>analys"); /* a header never finished */
    s_expect_parts(h, "", "", "");
    /* a partial marker is held back, not sent */
    char r[64], c[64];
    size_t sr = 0, sc = 0;
    const char *t = HA_ANALYSIS "abc<|e";
    reasoning_delta d = reasoning_next(h, t, strlen(t), 0, &sr, &sc);
    cr_expect_str_eq(d.reasoning, "abc");
    reasoning_delta_free(&d);
    s_stream(h, "<|chan", 1, r, c, sizeof r);
    cr_expect_str_eq(c, "<|chan", "final: not a header after all");
}

#define K_THINK_END "<|close|>think<|sep|>"
#define K_RESPONSE "<|open|>response<|sep|>"
#define K_END "<|close|>response<|sep|><|close|>message<|sep|>"

/* Kimi K3: the think section is the reasoning, the response the content. */
Test(serve_reasoning, kimi_split_and_stream) {
    const int k = CHAT_SYNTAX_KIMI_THINK;
    s_expect_parts(k, "Let me see." K_THINK_END K_RESPONSE "It is 4." K_END, "Let me see.", "It is 4.");
    s_expect_parts(k, "R" K_RESPONSE "A", "R", "A"); /* the think closer skipped: the response opener ends it */
    s_expect_parts(k, "thinking <|clo", "thinking <|clo", ""); /* cut off: not a marker after all */
    s_expect_parts(k, "", "", "");
    /* the prompt opened the response (thinking off) */
    s_expect_parts(CHAT_SYNTAX_KIMI, "Answer." K_END, "", "Answer.");
    s_expect_parts(CHAT_SYNTAX_KIMI, "Answer cut", "", "Answer cut");
}

/* Qwen3.5's prompt opens the thought: the answer starts inside it. */
Test(serve_reasoning, think_open_split_and_stream) {
    const int o = CHAT_SYNTAX_THINK_OPEN;
    s_expect_parts(o, "Let me think.\n</think>\n\nAnswer.", "Let me think.", "Answer.");
    s_expect_parts(o, "still thinking when cut", "still thinking when cut", "");
    s_expect_parts(o, "\n\n</think>\n\nplain", "", "plain");
    s_expect_parts(o, "", "", "");
    /* the same text without the open prompt is all answer */
    s_expect_parts(CHAT_SYNTAX_THINK, "Let me think.\n</think>\n\nAnswer.", "", "Let me think.\n</think>\n\nAnswer.");
}

/* The stream's arithmetic: the text arriving a few bytes at a time (as
 * tokens make it), the deltas reasoning_next hands out add up to the final
 * parts exactly. */
Test(serve_reasoning, deltas_add_up) {
    static const char *texts[] = {"<think>\nLet me see: 2 + 2.\n</think>\n\nIt is 4.", "plain answer",
                                  "<think>never closed ", "  <think>x</think>   y  "};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (size_t step = 1; step <= 5; step++) {
            const char *t = texts[i];
            const size_t n = strlen(t);
            char r[128] = "", c[128] = "";
            size_t sent_r = 0, sent_c = 0;
            for (size_t len = 0;; len = len + step < n ? len + step : n) {
                reasoning_delta d = reasoning_next(CHAT_SYNTAX_THINK, t, len, len == n, &sent_r, &sent_c);
                strncat(r, d.reasoning, d.reasoning_len);
                strncat(c, d.content, d.content_len);
                cr_assert_leq(d.raw_end, len);
                reasoning_delta_free(&d);
                if (len == n) break;
            }
            reasoning_split end = reasoning_split_text(t, n, 1);
            cr_expect_eq(strlen(r), end.reasoning_len, "[%s] by %zu: reasoning [%s]", t, step, r);
            cr_expect_eq(strncmp(r, t + end.reasoning_start, end.reasoning_len), 0, "[%s] by %zu", t, step);
            cr_expect_eq(strlen(c), end.content_len, "[%s] by %zu: content [%s]", t, step, c);
            cr_expect_eq(strncmp(c, t + end.content_start, end.content_len), 0, "[%s] by %zu", t, step);
        }
}

Test(serve_reasoning, format_names) {
    int f = -7;
    cr_expect_eq(reasoning_format_parse("none", &f), 0);
    cr_expect_eq(f, REASONING_NONE);
    cr_expect_eq(reasoning_format_parse("deepseek", &f), 0);
    cr_expect_eq(f, REASONING_DEEPSEEK);
    cr_expect_eq(reasoning_format_parse("auto", &f), 0);
    cr_expect_eq(f, REASONING_DEEPSEEK);
    cr_expect_eq(reasoning_format_parse("deepseek-legacy", &f), -1);
    cr_expect_eq(reasoning_format_parse("", &f), -1);
}

/* The text of every "content" (or "reasoning_content") value in a reply,
 * concatenated, still JSON-escaped (escaping is per character, so chunks
 * escaped one by one add up to the whole escaped once). */
static char *s_stream_text(const char *raw, const char *key) {
    char *out = calloc(1, strlen(raw) + 1), pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    for (const char *at = strstr(raw, pat); at; at = strstr(at, pat)) {
        at += strlen(pat);
        const char *end = at;
        while (*end && *end != '"') end += end[0] == '\\' && end[1] ? 2 : 1;
        strncat(out, at, (size_t)(end - at));
        at = end;
    }
    return out;
}

/* On a real server: a plain answer (this model does not think) is the same
 * text in content with the split on or off, streamed or not, with no
 * reasoning_content; bad names are refused naming the field or the flag;
 * /v1/completions does not take the field. */
Test(serve_reasoning, request_field_and_flag) {
    char model[4096], coli[4096];
    su_model(model, sizeof model);
    cli_build_path(coli, sizeof coli, "bin/coli");
    const char *extra[] = {"--reasoning-format", "deepseek", NULL};
    serve_proc p = su_start(model, extra);
    http_resp props = su_get(p.port, "/props");
    cr_expect(props.body && strstr(props.body, "\"reasoning_format\":\"deepseek\""), "%s", props.raw);
    su_free(&props);
    const char *base = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":12,\"temperature\":0";
    char body[512];
    snprintf(body, sizeof body, "%s,\"reasoning_format\":\"none\"}", base);
    http_resp off = su_post(p.port, "/v1/chat/completions", body);
    snprintf(body, sizeof body, "%s}", base);
    http_resp on = su_post(p.port, "/v1/chat/completions", body);
    cr_assert_eq(off.status, 200, "%s", off.raw);
    cr_assert_eq(on.status, 200, "%s", on.raw);
    char *want = s_stream_text(off.body, "content"), *got = s_stream_text(on.body, "content");
    cr_expect_str_eq(got, want, "a plain answer is all content");
    cr_expect_null(strstr(on.body, "reasoning_content"), "%s", on.body);
    free(got);
    snprintf(body, sizeof body, "%s,\"stream\":true}", base);
    http_resp st = su_post(p.port, "/v1/chat/completions", body);
    cr_expect_eq(st.status, 200, "%s", st.raw);
    got = s_stream_text(st.body ? st.body : "", "content");
    cr_expect_str_eq(got, want, "streamed chunks add up to the answer");
    cr_expect_null(strstr(st.raw, "reasoning_content"), "%s", st.raw);
    free(got);
    free(want);
    su_free(&off);
    su_free(&on);
    su_free(&st);
    snprintf(body, sizeof body, "%s,\"reasoning_format\":\"r1\"}", base);
    http_resp bad = su_post(p.port, "/v1/chat/completions", body);
    cr_expect_eq(bad.status, 400, "%s", bad.raw);
    cr_expect(bad.body && strstr(bad.body, "\"param\":\"reasoning_format\""), "%s", bad.raw);
    su_free(&bad);
    bad = su_post(p.port, "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":1,\"reasoning_format\":\"deepseek\"}");
    cr_expect_eq(bad.status, 400, "%s", bad.raw);
    su_free(&bad);
    cr_expect_eq(su_stop(&p), 0);
    char *argv[] = {coli, "serve", "-m", model, "--reasoning-format", "r1", NULL};
    cli_result c = cli_run(argv);
    cr_expect_eq(c.status, 2, "%s", c.err);
    cr_expect(strstr(c.err, "--reasoning-format") && strstr(c.err, REASONING_FORMAT_NAMES), "%s", c.err);
    cli_result_free(&c);
}
