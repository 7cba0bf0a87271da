/*
 * test_serve.c - `coli serve` over real HTTP on loopback: completions and
 * chat (plain and streamed), the OpenAI error shapes, auth, the queue bound,
 * cancellation by a client that leaves, and the same tokens for concurrent
 * and lone clients. Hostile input is in test_serve_hostile.c, metrics in
 * test_serve_metrics.c, the npm client in test_serve_node.c.
 */
#include <cjson/cJSON.h>
#include <pthread.h>

#include "colibri.h"
#include "core/gguf/gguf.h"
#include "tests/serve_util.h"

static const char *s_text_of(cJSON *resp, int chat) {
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "choices"), 0);
    cJSON *t =
        chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content") : cJSON_GetObjectItem(c0, "text");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static double s_num(cJSON *o, const char *a, const char *b) {
    cJSON *v = cJSON_GetObjectItem(o, a);
    if (b) v = cJSON_GetObjectItem(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* POST and parse; asserts the status. */
static cJSON *s_post_json(int port, const char *path, const char *body, int want_status) {
    http_resp r = su_post(port, path, body);
    cr_assert_eq(r.status, want_status, "POST %s %s: status %d, body: %s", path, body, r.status, r.raw ? r.raw : "");
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_not_null(j, "POST %s: reply is not JSON: %s", path, r.body);
    su_free(&r);
    return j;
}

/* Concatenate the text pieces of an SSE reply; *done: saw [DONE]; *usage_tokens: from the usage chunk. */
static char *s_sse_text(const char *body, int chat, int *done, int *usage_tokens, const char **finish) {
    static char finish_buf[32];
    size_t cap = strlen(body) + 1, len = 0;
    char *out = calloc(1, cap);
    *done = 0;
    *usage_tokens = -1;
    *finish = NULL;
    for (const char *p = strstr(body, "data: "); p; p = strstr(p + 1, "data: ")) {
        p += 6;
        if (strncmp(p, "[DONE]", 6) == 0) {
            *done = 1;
            break;
        }
        const char *end = strstr(p, "\n\n");
        cr_assert_not_null(end, "SSE event without a blank line: %s", p);
        cJSON *ev = cJSON_ParseWithLength(p, (size_t)(end - p));
        cr_assert_not_null(ev, "SSE event is not JSON: %.200s", p);
        cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0);
        cJSON *t =
            chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "delta"), "content") : cJSON_GetObjectItem(c0, "text");
        if (cJSON_IsString(t)) {
            memcpy(out + len, t->valuestring, strlen(t->valuestring));
            len += strlen(t->valuestring);
        }
        cJSON *fr = cJSON_GetObjectItem(c0, "finish_reason");
        if (cJSON_IsString(fr)) {
            snprintf(finish_buf, sizeof finish_buf, "%s", fr->valuestring);
            *finish = finish_buf;
        }
        cJSON *u = cJSON_GetObjectItem(ev, "usage");
        if (cJSON_IsObject(u)) *usage_tokens = (int)s_num(u, "completion_tokens", NULL);
        cJSON_Delete(ev);
    }
    return out;
}

Test(serve, completion_plain_and_streamed_agree) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    cJSON *a = s_post_json(
        p.port, "/v1/completions",
        "{\"model\":\"x\",\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"seed\":7,\"temperature\":0.8}", 200);
    const char *text = s_text_of(a, 0);
    cr_assert_not_null(text);
    cr_expect_eq(s_num(a, "usage", "completion_tokens"), 12, "usage: %s", cJSON_PrintUnformatted(a));
    cr_expect_eq(s_num(a, "usage", "prompt_tokens") + 12, s_num(a, "usage", "total_tokens"));
    cr_expect_str_eq(cJSON_GetObjectItem(a, "object")->valuestring, "text_completion");
    cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0)->child->next->string, "text");
    http_resp r = su_post(p.port, "/v1/completions",
                          "{\"prompt\":\"Once upon a "
                          "time\",\"max_tokens\":12,\"seed\":7,\"temperature\":0.8,\"stream\":true,\"stream_options\":{"
                          "\"include_usage\":true}}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    cr_expect(strstr(r.raw, "text/event-stream") != NULL, "content type: %s", r.raw);
    int done, usage;
    const char *finish;
    char *streamed = s_sse_text(r.body, 0, &done, &usage, &finish);
    cr_expect(done, "no data: [DONE] in %s", r.body);
    cr_expect_eq(usage, 12, "usage chunk: %s", r.body);
    cr_expect_str_eq(finish ? finish : "", "length");
    cr_expect_str_eq(streamed, text, "streamed and plain replies differ with the same seed");
    free(streamed);
    su_free(&r);
    cJSON_Delete(a);
    cr_expect_eq(su_stop(&p), 0, "server exit status");
}

Test(serve, chat_plain_and_streamed_and_models) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    const char *msgs = "\"messages\":[{\"role\":\"system\",\"content\":\"Be "
                       "brief.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}]}]";
    char body[1024];
    snprintf(body, sizeof body, "{%s,\"max_tokens\":6,\"seed\":3}", msgs);
    cJSON *a = s_post_json(p.port, "/v1/chat/completions", body, 200);
    cr_expect_str_eq(cJSON_GetObjectItem(a, "object")->valuestring, "chat.completion");
    const char *text = s_text_of(a, 1);
    cr_assert_not_null(text, "%s", cJSON_PrintUnformatted(a));
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0);
    const char *fr = cJSON_GetObjectItem(c0, "finish_reason")->valuestring;
    cr_expect(!strcmp(fr, "length") || !strcmp(fr, "stop"), "finish_reason %s", fr);
    snprintf(body, sizeof body, "{%s,\"max_tokens\":6,\"seed\":3,\"stream\":true}", msgs);
    http_resp r = su_post(p.port, "/v1/chat/completions", body);
    int done, usage;
    const char *finish;
    char *streamed = s_sse_text(r.body, 1, &done, &usage, &finish);
    cr_expect(done && usage == -1, "done %d usage %d: %s", done, usage, r.body);
    cr_expect(strstr(r.body, "\"role\":\"assistant\"") != NULL, "first chunk carries the role: %s", r.body);
    cr_expect_str_eq(streamed, text);
    free(streamed);
    su_free(&r);
    /* content parts are joined: "Hel" + "lo" is the same prompt as "Hello" */
    static const char *const same[] = {
        "[{\"type\":\"text\",\"text\":\"Hel\"},{\"type\":\"text\",\"text\":\"\"},{\"type\":\"text\",\"text\":\"lo\"}]",
        "\"Hello\"",
    };
    for (size_t i = 0; i < 2; i++) {
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                 "{\"role\":\"user\",\"content\":%s}],\"max_tokens\":6,\"seed\":3}",
                 same[i]);
        cJSON *b = s_post_json(p.port, "/v1/chat/completions", body, 200);
        const char *t = s_text_of(b, 1);
        cr_expect(t && strcmp(t, text) == 0, "content %s: '%s', expected '%s'", same[i], t ? t : "(none)", text);
        cJSON_Delete(b);
    }
    cJSON_Delete(a);
    r = su_get(p.port, "/v1/models");
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "\"id\":\"tiny-llama-moe-f32\"") && strstr(r.body, "\"object\":\"list\""), "%s", r.body);
    su_free(&r);
    su_stop(&p);
}

Test(serve, stop_strings_cut_the_answer) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    cJSON *a = s_post_json(p.port, "/v1/completions",
                           "{\"prompt\":\"Once\",\"max_tokens\":40,\"seed\":11,\"temperature\":0}", 200);
    char full[4096];
    snprintf(full, sizeof full, "%s", s_text_of(a, 0));
    cJSON_Delete(a);
    cr_assert_gt(strlen(full), 6, "greedy answer too short to test stop: '%s'", full);
    /* stop at a piece from the middle of the greedy answer */
    char stop[4] = {full[4], full[5], full[6], 0};
    cJSON *req = cJSON_Parse("{\"prompt\":\"Once\",\"max_tokens\":40,\"seed\":11,\"temperature\":0}");
    cJSON_AddItemToObject(req, "stop", cJSON_CreateString(stop));
    char *body = cJSON_PrintUnformatted(req);
    a = s_post_json(p.port, "/v1/completions", body, 200);
    const char *cut = s_text_of(a, 0);
    size_t at = (size_t)(strstr(full, stop) - full);
    cr_expect_eq(strlen(cut), at, "'%s' cut at '%s' gave '%s'", full, stop, cut);
    cr_expect_eq(strncmp(cut, full, at), 0);
    cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0)->child->next->next->next->valuestring,
                     "stop");
    cJSON_Delete(a);
    /* and streamed: the held-back text never leaks a stop string */
    cJSON_AddTrueToObject(req, "stream");
    free(body);
    body = cJSON_PrintUnformatted(req);
    http_resp r = su_post(p.port, "/v1/completions", body);
    int done, usage;
    const char *finish;
    char *streamed = s_sse_text(r.body, 0, &done, &usage, &finish);
    cr_expect_eq(strlen(streamed), at, "streamed '%s'", streamed);
    cr_expect_str_eq(finish ? finish : "", "stop");
    free(streamed);
    su_free(&r);
    free(body);
    cJSON_Delete(req);
    su_stop(&p);
}

typedef struct client_arg {
    int port;
    int seed;
    char text[4096];
} client_arg;

static void *s_client(void *arg) {
    client_arg *c = arg;
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"In the beginning\",\"max_tokens\":24,\"seed\":%d,\"temperature\":1.0}",
             c->seed);
    http_resp r = su_post(c->port, "/v1/completions", body);
    cJSON *j = r.status == 200 ? cJSON_Parse(r.body) : NULL;
    const char *t = j ? s_text_of(j, 0) : NULL;
    snprintf(c->text, sizeof c->text, "%s", t ? t : "(failed)");
    cJSON_Delete(j);
    su_free(&r);
    return NULL;
}

Test(serve, concurrent_clients_get_the_tokens_they_get_alone) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    client_arg alone[3], together[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        alone[i] = (client_arg){.port = p.port, .seed = 100 + i};
        s_client(&alone[i]);
        together[i] = (client_arg){.port = p.port, .seed = 100 + i};
    }
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, s_client, &together[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        cr_expect_neq(strcmp(alone[i].text, "(failed)"), 0);
        cr_expect_str_eq(together[i].text, alone[i].text, "seed %d: concurrent '%s' vs alone '%s'", 100 + i,
                         together[i].text, alone[i].text);
    }
    cr_expect_str_neq(alone[0].text, alone[1].text, "different seeds should differ");
    su_stop(&p);
}

Test(serve, api_key_required_on_v1_only) {
    char model[4096];
    const char *extra[] = {"--api-key", "s3cret", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 401, "%s", r.raw);
    cr_expect(strstr(r.body, "\"code\":\"invalid_api_key\"") != NULL, "%s", r.body);
    su_free(&r);
    r = su_request(p.port, "POST", "/v1/completions", "Authorization: Bearer wrong\r\n",
                   "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 401);
    su_free(&r);
    r = su_request(p.port, "POST", "/v1/completions", "Authorization: Bearer s3cret\r\n",
                   "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/health");
    cr_expect_eq(r.status, 200, "/health stays open: %s", r.raw);
    su_free(&r);
    su_stop(&p);
}

/* COLI_API_KEY, read with the other variables in core/settings.c, is the key when no
 * flag gives one. */
Test(serve, api_key_from_the_environment) {
    char model[4096];
    setenv("COLI_API_KEY", "env-s3cret", 1);
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    unsetenv("COLI_API_KEY");
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 401, "%s", r.raw);
    su_free(&r);
    r = su_request(p.port, "POST", "/v1/completions", "Authorization: Bearer env-s3cret\r\n",
                   "{\"prompt\":\"a\",\"max_tokens\":1}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    su_stop(&p);
}

typedef struct slow_arg {
    int port;
    http_resp r;
} slow_arg;

static void *s_slow_client(void *arg) {
    slow_arg *a = arg;
    a->r = su_post(a->port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":30,\"seed\":1}");
    return NULL;
}

Test(serve, full_queue_gives_429) {
    char model[4096];
    const char *extra[] = {"--parallel", "1", "--queue", "0", NULL};
    setenv("COLI_SERVE_DELAY_MS", "40", 1); /* 30 tokens take >1 s */
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    slow_arg busy = {.port = p.port};
    pthread_t th;
    pthread_create(&th, NULL, s_slow_client, &busy);
    usleep(300000);
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"b\",\"max_tokens\":2}");
    cr_expect_eq(r.status, 429, "%s", r.raw);
    cr_expect(strstr(r.body, "\"code\":\"queue_full\"") != NULL, "%s", r.body);
    su_free(&r);
    pthread_join(th, NULL);
    cr_expect_eq(busy.r.status, 200, "%s", busy.r.raw);
    su_free(&busy.r);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"b\",\"max_tokens\":2}");
    cr_expect_eq(r.status, 200, "a free slot serves again: %s", r.raw);
    su_free(&r);
    su_stop(&p);
}

Test(serve, client_that_leaves_cancels_and_frees_its_slot) {
    char model[4096];
    const char *extra[] = {"--parallel", "1", NULL};
    setenv("COLI_SERVE_DELAY_MS", "30", 1); /* 200 tokens would take 6 s */
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_SERVE_DELAY_MS");
    for (int stream = 0; stream < 2; stream++) {
        char *req = su_format_request("POST", "/v1/completions", NULL,
                                      stream ? "{\"prompt\":\"a\",\"max_tokens\":200,\"stream\":true}"
                                             : "{\"prompt\":\"a\",\"max_tokens\":200}");
        int fd = su_connect(p.port);
        cr_assert_geq(fd, 0);
        su_send_all(fd, req, strlen(req));
        free(req);
        usleep(300000);
        close(fd); /* gone */
        double t0 = su_now();
        http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"b\",\"max_tokens\":2}");
        cr_expect_eq(r.status, 200, "%s", r.raw);
        cr_expect_lt(su_now() - t0, 3.0, "the slot was not freed promptly (stream %d)", stream);
        su_free(&r);
    }
    http_resp m = su_get(p.port, "/metrics");
    cr_expect(strstr(m.body, "colibri_requests_cancelled_total 2\n") != NULL,
              "colibri_requests_cancelled_total is not 2 in /metrics:\n%s", m.body);
    su_free(&m);
    su_stop(&p);
}

/* A copy of src with tokenizer.chat_template set to tmpl (the core GGUF writer). */
static void s_copy_with_template(const char *src, const char *dst, const char *tmpl) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_key_name(f, i);
        if (k.len == strlen("tokenizer.chat_template") && !memcmp(k.ptr, "tokenizer.chat_template", k.len)) continue;
        cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0, "%s", coli_last_error());
    }
    cr_assert_eq(gguf_writer_set_str(w, "tokenizer.chat_template", tmpl), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0, "%s",
                     coli_last_error());
    }
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
}

Test(serve, chat_with_unknown_template_is_refused_but_completions_work) {
    char src[4096], dst[4200];
    su_model(src, sizeof src);
    snprintf(dst, sizeof dst, "%s/serve-unknown-template-%d.gguf", cli_build_dir(), (int)getpid());
    s_copy_with_template(src, dst, "{% for m in messages %}<<{{ m.content }}>>{% endfor %}");
    serve_proc p = su_start(dst, NULL);
    cr_expect(strstr(p.log, "chat template unknown") != NULL, "%s", p.log);
    http_resp r = su_post(p.port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    cr_expect_eq(r.status, 400, "%s", r.raw);
    cr_expect(strstr(r.body, "chat template") != NULL && strstr(r.body, "/v1/completions") != NULL, "%s", r.body);
    su_free(&r);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":3}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    su_stop(&p);
    unlink(dst);
}

Test(serve, coli_chat_keeps_resets_and_reports) {
    char model[4096], coli[4096];
    su_model(model, sizeof model);
    cli_build_path(coli, sizeof coli, "bin/coli");
    char cmd[9000];
    snprintf(cmd, sizeof cmd,
             "printf 'Hello\\nAnd more\\n/stats\\n/reset\\n/stats\\n/quit\\n' | %s chat -m %s --temp 0 -n 6 2>&1", coli,
             model);
    char out[16384];
    int rc = cli_shell(cmd, out, sizeof out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "template mistral from architecture") != NULL, "%s", out);
    cr_expect(strstr(out, "conversation: 4 messages") != NULL, "two answered turns: %s", out);
    cr_expect(strstr(out, "(conversation cleared)") != NULL, "%s", out);
    cr_expect(strstr(out, "conversation: 0 messages, 0 of") != NULL, "%s", out);
}
