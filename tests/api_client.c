/*
 * api_client.c - a program that knows nothing but include/colibri.h.
 *
 * test_api builds it with only -Iinclude against libcolibri.a and runs it:
 * proof that the public header is self-contained and enough to load a model,
 * tokenize, evaluate, generate and read the stats.
 *
 *   api_client MODEL.gguf [DEVICES]
 * Prints "tokens: N", "generated: N", "eval-check: ok" and the stats JSON;
 * exit 0 on success, 1 on any failure (with coli_last_error()).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"

static int fail(const char *what, int rc) {
    fprintf(stderr, "api_client: %s: %s (%s)\n", what, coli_last_error(), coli_status_str(rc));
    return 1;
}

static int on_token(void *user, int32_t id, const char *text, size_t len) {
    int *count = user;
    (void)id;
    fwrite(text, 1, len, stdout);
    return ++*count >= 1000; /* never reached with n_predict 8 */
}

/* Greedy by hand with coli_eval must give the same first token as coli_generate. */
static int eval_check(coli_model *m, const int32_t *ids, int n, int32_t first_generated) {
    coli_model_info info;
    coli_context *ctx = NULL;
    coli_model_get_info(m, &info);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    int rc = logits ? coli_context_new(m, NULL, &ctx) : COLI_ENOMEM;
    if (rc == 0) rc = coli_eval(ctx, ids, n, logits, 0);
    int best = 0;
    for (int i = 1; rc == 0 && i < info.n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    coli_context_free(&ctx);
    free(logits);
    if (rc != 0) return fail("eval", rc);
    if (best != first_generated) {
        fprintf(stderr, "api_client: argmax %d but generate gave %d\n", best, (int)first_generated);
        return 1;
    }
    printf("eval-check: ok\n");
    return 0;
}

static int32_t s_first = -1;
static int on_token_first(void *user, int32_t id, const char *text, size_t len) {
    if (s_first < 0) s_first = id;
    return on_token(user, id, text, len);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: api_client MODEL.gguf [DEVICES]\n");
        return 2;
    }
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = argc > 2 ? argv[2] : "inproc";
    mp.n_threads = 1;
    coli_model *m = NULL;
    int rc = coli_model_load(argv[1], &mp, &m);
    if (rc != 0) return fail("load", rc);
    coli_model_info info;
    coli_model_get_info(m, &info);
    printf("model: %s (%s), %d layers, %d experts, vocab %d\n", info.name, info.arch, info.n_layer, info.n_expert,
           info.n_vocab);
    int32_t ids[64];
    int n = 0;
    const char *text = "Hello world";
    if ((rc = coli_tokenize(m, text, strlen(text), 1, 0, ids, 64, &n)) != 0) return fail("tokenize", rc);
    printf("tokens: %d\n", n);
    coli_context *ctx = NULL;
    if ((rc = coli_context_new(m, NULL, &ctx)) != 0) return fail("context", rc);
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0.0f;
    sp.n_predict = 8;
    coli_gen_stats st;
    int count = 0;
    if ((rc = coli_generate(ctx, ids, n, &sp, on_token_first, &count, &st)) != 0) return fail("generate", rc);
    printf("\ngenerated: %d (context holds %d)\n", st.n_gen, coli_context_pos(ctx));
    coli_context_free(&ctx);
    if (st.n_gen > 0 && eval_check(m, ids, n, s_first) != 0) return 1;
    char *json = NULL;
    if ((rc = coli_model_stats_json(m, &json)) != 0) return fail("stats", rc);
    printf("stats: %s\n", json);
    free(json);
    coli_model_free(&m);
    return m == NULL ? 0 : 1;
}
