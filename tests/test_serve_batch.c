/*
 * test_serve_batch.c - continuous batching in `coli serve`: 1, 3 and 8
 * concurrent clients (different prompts, seeds, lengths) get exactly the
 * text each gets from a server that runs one request at a time without
 * batching or prefix cache, and /metrics shows steps of several rows; the
 * same with a worker process that crashes mid-batch (COLI_FAULT), whose
 * experts fall back.
 */
#include <cjson/cJSON.h>
#include <pthread.h>

#include "tests/serve_util.h"

enum {
    MAX_CLIENTS = 8
};

typedef struct client {
    int port, index;
    char text[4096];
    int status;
} client;

static void *s_client(void *arg) {
    client *c = arg;
    char body[1024], prompt[512] = "";
    /* prompts of different lengths, so the clients join at different steps */
    for (int k = 0; k <= c->index; k++) strcat(prompt, k % 2 ? "the river runs " : "Once upon a time ");
    snprintf(body, sizeof body, "{\"prompt\":\"%s%d\",\"max_tokens\":%d,\"seed\":%d,\"temperature\":0.8}", prompt,
             c->index, 12 + 3 * c->index, 100 + c->index);
    http_resp r = su_post(c->port, "/v1/completions", body);
    c->status = r.status;
    cJSON *j = r.status == 200 ? cJSON_Parse(r.body) : NULL;
    cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    snprintf(c->text, sizeof c->text, "%s", cJSON_IsString(t) ? t->valuestring : "(failed)");
    cJSON_Delete(j);
    su_free(&r);
    return NULL;
}

static double s_metric(int port, const char *name) {
    http_resp r = su_get(port, "/metrics");
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = r.body ? strstr(r.body, key) : NULL;
    double v = at ? atof(at + strlen(key)) : -1;
    su_free(&r);
    return v;
}

/* Each client's text from the reference server, one at a time. */
static void s_reference(const char *model, client *ref, int n) {
    static const char *const extra[] = {"--no-batching", "--prefix-cache-mb", "0", "--parallel", "1", NULL};
    serve_proc p = su_start(model, extra);
    for (int i = 0; i < n; i++) {
        ref[i] = (client){.port = p.port, .index = i};
        s_client(&ref[i]);
        cr_assert_eq(ref[i].status, 200, "reference client %d", i);
    }
    cr_expect_eq(s_metric(p.port, "colibri_batch_steps_total"), 0, "--no-batching runs no batch step");
    su_stop(&p);
}

/* n clients at once on a batching server started with extra; with
 * want_crash, /metrics must show worker 0's crash. */
static void s_together(const char *const *extra, const client *ref, int n, int want_crash) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    client c[MAX_CLIENTS];
    pthread_t th[MAX_CLIENTS];
    for (int i = 0; i < n; i++) {
        c[i] = (client){.port = p.port, .index = i};
        pthread_create(&th[i], NULL, s_client, &c[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) {
        cr_expect_eq(c[i].status, 200, "client %d", i);
        cr_expect_str_eq(c[i].text, ref[i].text, "client %d of %d: batched '%s' vs alone '%s'", i, n, c[i].text,
                         ref[i].text);
    }
    const double steps = s_metric(p.port, "colibri_batch_steps_total"),
                 rows = s_metric(p.port, "colibri_batch_rows_total");
    const double most = s_metric(p.port, "colibri_batch_max_rows");
    cr_expect_gt(steps, 0);
    cr_expect_leq(most, n);
    if (n > 1) {
        cr_expect_geq(most, 2, "%d clients never decoded together (largest step %g)", n, most);
        cr_expect_lt(steps, rows, "steps %g, rows %g: no step had several rows", steps, rows);
    }
    if (want_crash) {
        http_resp r = su_get(p.port, "/metrics");
        cr_expect(r.body && strstr(r.body, "colibri_fallbacks_total{device=\"cpu:0\",reason=\"crash\"} 1"),
                  "no crash of worker 0 in %s", r.body ? r.body : "");
        su_free(&r);
    }
    cr_expect_eq(su_stop(&p), 0);
}

static void s_clients(int n) {
    char model[4096];
    su_model(model, sizeof model);
    client ref[MAX_CLIENTS];
    s_reference(model, ref, n);
    /* a pause after each token (outside the baton) so that the requests overlap for sure */
    setenv("COLI_SERVE_DELAY_MS", "5", 1);
    static const char *const extra[] = {"--parallel", "8", NULL};
    s_together(extra, ref, n, 0);
    unsetenv("COLI_SERVE_DELAY_MS");
}

Test(serve_batch, one_client, .timeout = 180) { s_clients(1); }
Test(serve_batch, three_clients, .timeout = 180) { s_clients(3); }
Test(serve_batch, eight_clients, .timeout = 180) { s_clients(8); }

Test(serve_batch, worker_crash_mid_batch, .timeout = 180) {
    char model[4096];
    su_model(model, sizeof model);
    client ref[MAX_CLIENTS];
    s_reference(model, ref, MAX_CLIENTS);
    setenv("COLI_SERVE_DELAY_MS", "5", 1);
    setenv("COLI_FAULT", "crash@layer=1@worker=0:after=20", 1);
    static const char *const extra[] = {"--parallel", "8", "--devices", "cpu:2", NULL};
    s_together(extra, ref, MAX_CLIENTS, 1);
    unsetenv("COLI_FAULT");
    unsetenv("COLI_SERVE_DELAY_MS");
}
