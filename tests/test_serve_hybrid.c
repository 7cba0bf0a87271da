/*
 * test_serve_hybrid.c - `coli serve` with a hybrid model (tiny qwen35moe of
 * tests/gen_qwen3next.py: recurrent Gated DeltaNet states next to the KV
 * rows): three clients at once, each asking for n = 2 seeded answers to a
 * prompt of more than 64 tokens (the prefix cache keeps the recurrent state
 * at 64), twice, on a server with batching and the prefix cache, get
 * exactly the texts of a server that runs one request at a time without
 * either; the second round restores cached prompts (cached_tokens > 0).
 * /metrics reports the state memory of a sequence. The same for the tiny
 * kimi-k3 of tests/gen_kimi.py (KDA states, latent attention rows).
 */
#include <cjson/cJSON.h>
#include <pthread.h>

#include "tests/ref_models.h"
#include "tests/serve_util.h"

enum {
    CLIENTS = 3,
    STREAMS = 8, /* the copies test: the 8 concurrent streams */
    CHOICES = 2
};

typedef struct client {
    int port, index;
    char text[CHOICES][2048];
    int status, cached;
} client;

static void *s_client(void *arg) {
    client *c = arg;
    char body[4096], prompt[2048] = "";
    for (int k = 0; k < 12; k++) strcat(prompt, k % 2 ? "the river runs past the mill " : "once upon a time ");
    snprintf(body, sizeof body, "{\"prompt\":\"%s%d\",\"max_tokens\":%d,\"seed\":%d,\"temperature\":0.8,\"n\":%d}",
             prompt, c->index, 8 + 3 * c->index, 100 + c->index, CHOICES);
    http_resp r = su_post(c->port, "/v1/completions", body);
    c->status = r.status;
    cJSON *j = r.status == 200 ? cJSON_Parse(r.body) : NULL;
    for (int i = 0; i < CHOICES; i++) {
        cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i), "text");
        snprintf(c->text[i], sizeof c->text[i], "%s", cJSON_IsString(t) ? t->valuestring : "(failed)");
    }
    cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details"),
                                   "cached_tokens");
    c->cached = cJSON_IsNumber(d) ? (int)d->valuedouble : -1;
    cJSON_Delete(j);
    su_free(&r);
    return NULL;
}

static void s_round_of(int port, client *c, int n) {
    pthread_t th[STREAMS];
    for (int i = 0; i < n; i++) {
        c[i] = (client){.port = port, .index = i};
        pthread_create(&th[i], NULL, s_client, &c[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static void s_round(int port, client *c) { s_round_of(port, c, CLIENTS); }

/* The value of the series line "name value" in a /metrics body, or -1. */
static long long s_series(const char *body, const char *name) {
    char key[256];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = body ? strstr(body, key) : NULL;
    return at ? atoll(at + strlen(key)) : -1;
}

/* per_seq, per_token: the state memory /metrics must report. */
static void s_batched_cached_forked(const char *arch, const char *per_seq, const char *per_token) {
    char model[4096], want_seq[96], want_tok[96];
    s_hybrid_model(arch, model, sizeof model);
    snprintf(want_seq, sizeof want_seq, "\ncolibri_state_bytes_per_sequence %s\n", per_seq);
    snprintf(want_tok, sizeof want_tok, "\ncolibri_state_bytes_per_token %s\n", per_token);
    static const char *const alone_args[] = {"--no-batching", "--prefix-cache-mb", "0", "--parallel", "1", NULL};
    serve_proc p = su_start(model, alone_args);
    client ref[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        ref[i] = (client){.port = p.port, .index = i};
        s_client(&ref[i]);
        cr_assert_eq(ref[i].status, 200, "reference client %d", i);
    }
    cr_expect_eq(su_stop(&p), 0);
    setenv("COLI_SERVE_DELAY_MS", "5", 1); /* the requests overlap for sure */
    static const char *const args[] = {"--parallel", "4", NULL};
    p = su_start(model, args);
    int cached = 0;
    for (int round = 0; round < 2; round++) {
        client c[CLIENTS];
        s_round(p.port, c);
        for (int i = 0; i < CLIENTS; i++) {
            cr_expect_eq(c[i].status, 200, "client %d", i);
            for (int k = 0; k < CHOICES; k++)
                cr_expect_str_eq(c[i].text[k], ref[i].text[k], "round %d client %d answer %d: '%s' vs alone '%s'",
                                 round, i, k, c[i].text[k], ref[i].text[k]);
            if (round == 1) cached += c[i].cached > 0;
        }
    }
    cr_expect_eq(cached, CLIENTS, "the second round restored no cached prompt state");
    http_resp m = su_get(p.port, "/metrics");
    cr_expect(m.body && strstr(m.body, want_seq) && strstr(m.body, want_tok), "state memory not in /metrics: %s",
              m.body ? m.body : "");
    su_free(&m);
    unsetenv("COLI_SERVE_DELAY_MS");
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_hybrid, batched_cached_forked_equals_alone, .timeout = 240) {
    s_batched_cached_forked("qwen35moe", "11264", "1024");
}

/* kimi-k3 (tests/gen_kimi.py): KDA states, the MLA latent rows */
Test(serve_hybrid, kimi_k3_batched_cached_forked_equals_alone, .timeout = 240) {
    s_batched_cached_forked("kimi-k3", "41984", "640");
}

/* Eight streams at once, batched (or with --no-batching, taking turns) with
 * the prefix cache, twice (the second round restores the prompts' cached
 * states; every request forks n = 2 answers from its prompt): the server
 * makes its state copies (snapshots of the recurrent states taken in
 * prefills, restored from and saved to the prefix cache) without holding
 * the baton, so none holds the other streams' steps up. Counted by the
 * server on the copying thread (colibri_state_copies_total), not timed. */
static void s_copies_outside_the_baton(const char *const *args) {
    char model[4096];
    s_hybrid_model("qwen35moe", model, sizeof model);
    setenv("COLI_SERVE_DELAY_MS", "5", 1); /* the requests overlap for sure */
    serve_proc p = su_start(model, args);
    int cached = 0;
    for (int round = 0; round < 2; round++) {
        client c[STREAMS];
        s_round_of(p.port, c, STREAMS);
        for (int i = 0; i < STREAMS; i++) {
            cr_expect_eq(c[i].status, 200, "round %d client %d", round, i);
            if (round == 1) cached += c[i].cached > 0;
        }
    }
    cr_expect_eq(cached, STREAMS, "the second round restored no cached prompt state");
    http_resp m = su_get(p.port, "/metrics");
    const long long held = s_series(m.body, "colibri_state_copies_total{under_baton=\"yes\"}");
    const long long free_ = s_series(m.body, "colibri_state_copies_total{under_baton=\"no\"}");
    cr_log_info("state copies: %lld under the baton, %lld without (%lld bytes)", held, free_,
                s_series(m.body, "colibri_state_copy_bytes_total{under_baton=\"no\"}"));
    cr_expect_gt(free_, 0, "no state copy counted: %s", m.body ? m.body : "");
    cr_expect_eq(held, 0, "%lld state copies made under the baton (%lld without)", held, free_);
    su_free(&m);
    unsetenv("COLI_SERVE_DELAY_MS");
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_hybrid, state_copies_outside_the_baton, .timeout = 240) {
    s_copies_outside_the_baton((const char *const[]){"--parallel", "8", NULL});
}

Test(serve_hybrid, unbatched_state_copies_outside_the_baton, .timeout = 240) {
    s_copies_outside_the_baton((const char *const[]){"--no-batching", "--parallel", "8", NULL});
}
