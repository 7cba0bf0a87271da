/*
 * test_batch.c - coli_batch on the gen_model fixtures: contexts decoding
 * together on their own threads (different prompt lengths, sampling, and
 * lengths of answer, so members join and leave at different steps) get the
 * tokens, and the final logits bits, that each gets alone, and the same
 * routing events (callback: positions, experts, weights, devices) and heat
 * counts; bad arguments.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "colibri.h"
#include "tests/gptoss_util.h"
#include "tests/ref_models.h"

enum {
    SEQS = 4,
    GEN = 20,
    MAXP = 40,
    R_POS = 64, /* positions a sequence reaches: prompt + answer + 1 */
    R_LAYER = 8,
    R_K = 8,
    R_DEV = 24
};

/* What the route callback saw for one (position, layer). */
typedef struct route_rec {
    int hits;
    int k;
    int32_t experts[R_K];
    float weights[R_K];
    char devices[R_K][R_DEV];
} route_rec;

static coli_model *s_load_path(const char *path, const char *devices) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 2;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s: %s", path, coli_last_error());
    return m;
}

static coli_model *s_load(const char *devices) {
    char path[4096];
    s_fixture("tiny-llama-moe-f32.gguf", path, sizeof path);
    return s_load_path(path, devices);
}

typedef struct seq {
    coli_context *ctx;
    int32_t prompt[MAXP];
    int n_prompt;
    coli_sampling_params sp;
    int32_t out[GEN];
    int n_out, rc;
    float *logits;    /* the logits after the last token (one more coli_eval) */
    route_rec *route; /* (R_POS, R_LAYER) */
} seq;

static void s_on_route(void *user, const coli_route_event *ev) {
    seq *q = user;
    cr_assert(ev->pos >= 0 && ev->pos < R_POS && ev->layer >= 0 && ev->layer < R_LAYER && ev->k <= R_K,
              "event at pos %d layer %d k %d", ev->pos, ev->layer, ev->k);
    route_rec *r = &q->route[ev->pos * R_LAYER + ev->layer];
    r->hits++;
    r->k = ev->k;
    memcpy(r->experts, ev->experts, (size_t)ev->k * sizeof *ev->experts);
    memcpy(r->weights, ev->weights, (size_t)ev->k * sizeof *ev->weights);
    for (int j = 0; j < ev->k; j++) snprintf(r->devices[j], R_DEV, "%s", ev->devices[j]);
}

/* The model's heat counts now (n entries, caller frees). */
static uint64_t *s_heat(coli_model *m, size_t *n) {
    int nl = 0, ne = 0;
    cr_assert_eq(coli_model_heat_counts(m, NULL, 0, &nl, &ne), 0);
    *n = (size_t)nl * (size_t)ne;
    cr_assert_gt(*n, 0, "heat is counted");
    uint64_t *c = malloc(*n * sizeof *c);
    cr_assert_eq(coli_model_heat_counts(m, c, *n, &nl, &ne), 0);
    return c;
}

static int s_collect(void *user, int32_t id, const char *text, size_t len) {
    (void)text;
    (void)len;
    seq *q = user;
    q->out[q->n_out++] = id;
    return 0;
}

static void *s_run(void *arg) {
    seq *q = arg;
    q->n_out = 0;
    q->rc = coli_generate(q->ctx, q->prompt, q->n_prompt, &q->sp, s_collect, q, NULL);
    return NULL;
}

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static void s_lock(void *u) {
    (void)u;
    pthread_mutex_lock(&s_mu);
}
static void s_unlock(void *u) {
    (void)u;
    pthread_mutex_unlock(&s_mu);
}

static void s_setup(coli_model *m, seq *q, int i, int V) {
    memset(q, 0, sizeof *q);
    cr_assert_eq(coli_context_new(m, NULL, &q->ctx), 0);
    q->n_prompt = 5 + 9 * i;
    for (int k = 0; k < q->n_prompt; k++) q->prompt[k] = (int32_t)((k * 7919 + 31 * i + 3) % V);
    coli_sampling_default_params(&q->sp);
    q->sp.temperature = i % 2 ? 0.9f : 0.0f;
    q->sp.seed = 40 + (uint64_t)i;
    q->sp.n_predict = GEN - 3 * i;
    q->logits = malloc((size_t)V * sizeof(float));
    q->route = calloc(R_POS * R_LAYER, sizeof *q->route);
    cr_assert_eq(coli_set_route_callback(q->ctx, s_on_route, q), 0);
}

/* Every (position, layer) seen once alone was seen once batched, with the
 * same experts, weights and devices (devices: the row's own pairs). */
static void s_expect_same_routes(const seq *a, const seq *t, int i) {
    int seen = 0;
    for (int r = 0; r < R_POS * R_LAYER; r++) {
        const route_rec *x = &a->route[r], *y = &t->route[r];
        cr_expect_eq(y->hits, x->hits, "sequence %d pos %d layer %d: %d events batched, %d alone", i, r / R_LAYER,
                     r % R_LAYER, y->hits, x->hits);
        if (!x->hits || x->hits != y->hits) continue;
        seen++;
        cr_expect_eq(y->k, x->k);
        cr_expect(memcmp(y->experts, x->experts, (size_t)x->k * sizeof *x->experts) == 0, "seq %d pos %d layer %d", i,
                  r / R_LAYER, r % R_LAYER);
        cr_expect(memcmp(y->weights, x->weights, (size_t)x->k * sizeof *x->weights) == 0);
        for (int j = 0; j < x->k; j++)
            cr_expect_str_eq(y->devices[j], x->devices[j], "seq %d pos %d layer %d slot %d", i, r / R_LAYER,
                             r % R_LAYER, j);
    }
    cr_expect_gt(seen, a->n_prompt, "sequence %d: events for the answer too", i);
}

static void s_batched_equals_alone_on(coli_model *m) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    const int V = info.n_vocab;
    char heat_path[64];
    snprintf(heat_path, sizeof heat_path, "/tmp/coli-test-batch-%ld.heat", (long)getpid());
    cr_assert_eq(coli_model_heat_save(m, heat_path), 0, "%s", coli_last_error()); /* count from now on */
    unlink(heat_path);
    size_t nh = 0;
    uint64_t *heat0 = s_heat(m, &nh);
    seq alone[SEQS], together[SEQS];
    for (int i = 0; i < SEQS; i++) {
        s_setup(m, &alone[i], i, V);
        s_run(&alone[i]);
        cr_assert_eq(alone[i].rc, 0, "%s", coli_last_error());
        cr_assert_eq(coli_eval(alone[i].ctx, &alone[i].out[alone[i].n_out - 1], 1, alone[i].logits, 0), 0);
    }
    uint64_t *heat1 = s_heat(m, &nh);
    coli_batch *b = NULL;
    cr_assert_eq(coli_batch_new(m, SEQS, info.n_ctx, 7, s_lock, s_unlock, NULL, &b), 0, "%s", coli_last_error());
    pthread_t th[SEQS];
    for (int i = 0; i < SEQS; i++) {
        s_setup(m, &together[i], i, V);
        cr_assert_eq(coli_context_set_batch(together[i].ctx, b), 0);
    }
    for (int i = 0; i < SEQS; i++) pthread_create(&th[i], NULL, s_run, &together[i]);
    for (int i = 0; i < SEQS; i++) pthread_join(th[i], NULL);
    coli_batch_stats st;
    coli_batch_get_stats(b, &st);
    cr_expect_gt(st.steps, 0);
    cr_expect_eq(st.members, 0, "every member left");
    cr_expect_leq(st.max_rows, SEQS);
    for (int i = 0; i < SEQS; i++) {
        seq *a = &alone[i], *t = &together[i];
        cr_assert_eq(t->rc, 0, "sequence %d: %s", i, coli_last_error());
        cr_assert_eq(t->n_out, a->n_out, "sequence %d", i);
        cr_expect(memcmp(t->out, a->out, (size_t)a->n_out * sizeof(int32_t)) == 0, "sequence %d: tokens differ", i);
        cr_expect_eq(coli_context_pos(t->ctx), coli_context_pos(a->ctx) - 1);
        cr_assert_eq(coli_context_set_batch(t->ctx, NULL), 0);
        cr_assert_eq(coli_eval(t->ctx, &t->out[t->n_out - 1], 1, t->logits, 0), 0);
        cr_expect(memcmp(t->logits, a->logits, (size_t)V * sizeof(float)) == 0, "sequence %d: logits bits differ", i);
        s_expect_same_routes(a, t, i);
    }
    uint64_t *heat2 = s_heat(m, &nh);
    for (size_t e = 0; e < nh; e++)
        cr_expect_eq(heat2[e] - heat1[e], heat1[e] - heat0[e], "heat entry %zu: %llu batched, %llu alone", e,
                     (unsigned long long)(heat2[e] - heat1[e]), (unsigned long long)(heat1[e] - heat0[e]));
    free(heat0);
    free(heat1);
    free(heat2);
    for (int i = 0; i < SEQS; i++) {
        coli_context_free(&alone[i].ctx);
        coli_context_free(&together[i].ctx);
        free(alone[i].logits);
        free(together[i].logits);
        free(alone[i].route);
        free(together[i].route);
    }
    coli_batch_free(&b);
}

static void s_batched_equals_alone(const char *devices) {
    coli_model *m = s_load(devices);
    s_batched_equals_alone_on(m);
    coli_model_free(&m);
}

Test(batch, batched_equals_alone_inproc, .timeout = 120) { s_batched_equals_alone("inproc"); }
Test(batch, batched_equals_alone_workers, .timeout = 120) { s_batched_equals_alone("cpu:2"); }

/* gpt-oss (tests/gen_gptoss.py): sinks and the 6-position window of its SWA
 * layers stay exact when rows of different sequences share a pass (prompts
 * of 5..32 tokens, answers up to 20: most rows see past the window). */
static void s_gptoss_batched(const char *devices) {
    char path[4096];
    gptoss_model_f32(path, sizeof path);
    coli_model *m = s_load_path(path, devices);
    s_batched_equals_alone_on(m);
    coli_model_free(&m);
}

Test(batch, batched_equals_alone_gptoss, .timeout = 120) { s_gptoss_batched("inproc"); }
Test(batch, batched_equals_alone_gptoss_workers, .timeout = 120) { s_gptoss_batched("cpu:2"); }

Test(batch, bad_arguments) {
    coli_model *m = s_load("inproc");
    coli_batch *b = NULL;
    cr_assert_eq(coli_batch_new(NULL, 2, 16, 8, NULL, NULL, NULL, &b), COLI_EINVAL);
    cr_assert_eq(coli_batch_new(m, 0, 16, 8, NULL, NULL, NULL, &b), COLI_EINVAL);
    cr_assert_eq(coli_batch_new(m, 2, 16, 0, NULL, NULL, NULL, &b), COLI_EINVAL);
    cr_assert_eq(coli_batch_new(m, 2, 16, 8, s_lock, NULL, NULL, &b), COLI_EINVAL);
    cr_assert_null(b);
    cr_assert_eq(coli_batch_new(m, 2, 16, 8, NULL, NULL, NULL, &b), 0);
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0); /* the model's context: longer than 16 */
    cr_assert_eq(coli_context_set_batch(ctx, b), COLI_EINVAL);
    cr_assert_eq(coli_context_set_batch(NULL, b), COLI_EINVAL);
    coli_batch_stats st;
    coli_batch_get_stats(NULL, &st);
    cr_assert_eq(st.steps, 0);
    coli_context_free(&ctx);
    coli_batch_free(&b);
    coli_batch_free(&b);
    coli_model_free(&m);
}
