/*
 * greedy_run.h - greedy answers of several sequences, alone or together in a
 * coli_batch (each on its own thread), for the tests that check batching
 * changes no token (test_dsa, test_hybrid). Static functions: include from
 * one test file each.
 */
#ifndef COLI_TESTS_GREEDY_RUN_H
#define COLI_TESTS_GREEDY_RUN_H

#include <criterion/criterion.h>
#include <pthread.h>

#include "colibri.h"

/* Tokens each answer generates. */
#define GREEDY_STEPS 12

typedef struct gen_run {
    coli_context *ctx;
    const int32_t *prompt;
    int n_prompt;
    int32_t out[GREEDY_STEPS];
    int n_out, rc;
} gen_run;

static int s_greedy_collect(void *user, int32_t id, const char *text, size_t len) {
    (void)text;
    (void)len;
    gen_run *g = user;
    if (g->n_out < GREEDY_STEPS) g->out[g->n_out++] = id;
    return 0;
}

/* g's greedy answer (a pthread start routine too). */
static void *s_generate(void *arg) {
    gen_run *g = arg;
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0;
    sp.n_predict = GREEDY_STEPS;
    sp.ignore_eos = 1;
    g->n_out = 0;
    g->rc = coli_generate(g->ctx, g->prompt, g->n_prompt, &sp, s_greedy_collect, g, NULL);
    return NULL;
}

/* The model's compute is one at a time (the batch's lock, as coli serve's baton). */
static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static void s_lock(void *u) {
    (void)u;
    pthread_mutex_lock(&s_mu);
}
static void s_unlock(void *u) {
    (void)u;
    pthread_mutex_unlock(&s_mu);
}

/* together[0..n) = alone[0..n)'s prompts answered on their own threads in
 * one fresh batch (*b, prefill chunks of `chunk`; contexts and batch left for
 * the caller to free). On a loaded machine one thread may finish before the
 * others start, so the run is repeated (up to 5 fresh batches) until the
 * sequences shared a step; returns the most rows a step had. */
static int s_run_batched(coli_model *m, int n, int chunk, const gen_run *alone, gen_run *together, coli_batch **b) {
    coli_batch_stats st = {0};
    pthread_t th[16];
    cr_assert_leq(n, 16);
    *b = NULL;
    for (int attempt = 0; attempt < 5 && st.max_rows <= 1; attempt++) {
        if (*b) {
            for (int i = 0; i < n; i++) coli_context_free(&together[i].ctx);
            coli_batch_free(b);
        }
        cr_assert_eq(coli_batch_new(m, n, 512, chunk, s_lock, s_unlock, NULL, b), 0, "%s", coli_last_error());
        for (int i = 0; i < n; i++) {
            together[i] = alone[i];
            together[i].ctx = NULL;
            cr_assert_eq(coli_context_new(m, NULL, &together[i].ctx), 0);
            cr_assert_eq(coli_context_set_batch(together[i].ctx, *b), 0);
        }
        for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, s_generate, &together[i]);
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        coli_batch_get_stats(*b, &st);
    }
    return st.max_rows;
}

#endif
