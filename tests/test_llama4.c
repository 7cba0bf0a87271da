/*
 * test_llama4.c - the llama4 family (Llama-4 Scout / Maverick) on a tiny
 * model written by tests/gen_llama4.py (layers 0-2 chunked attention with
 * rope and the L2 q/k norm, layer 3 NoPE with full attention and the
 * attention temperature; layers 1 and 3 MoE with the sigmoid top-1 router
 * weighting the expert input plus a shared expert, 0 and 2 dense),
 * generated on first use into $COLI_BUILD/ref and checked against the
 * sha256 its llama.cpp logits were recorded for (tests/fixtures/llama4/README).
 *
 * - the F32 rule of ../shared/reference on a 32-token prompt: F32 KV cache,
 *   every recorded logit (top 20 of 32 positions) within 1e-3 of llama.cpp
 *   de3ff815, the same argmax; F16 KV against llama.cpp's F16-KV run;
 *   greedy steps while llama.cpp's margin >= 0.05;
 * - past llama.cpp's fixed chunk of 8192 positions (where the chunked
 *   layers forget the first chunk and the NoPE layer's temperature rises):
 *   the F32 rule on positions around the boundary of an 8232-token prompt;
 *   the same prompt batched with another sequence, and continued from a
 *   reused prefix, gives the bytes of running it alone;
 * - two workers and a worker SIGKILLed mid-run give --inproc's bytes;
 * - missing or inconsistent metadata is refused with one line naming it.
 */
#include <pthread.h>

#include "tests/family_ref.h"

static const family k_l4 = {"tiny-llama4-f32.gguf", "tests/gen_llama4.py", "tests/fixtures/llama4/tiny-llama4-f32.txt",
                            "llama4."};

TestSuite(llama4, .timeout = 240);

Test(llama4, f32_kv_matches_llamacpp) { s_check_f32(&k_l4); }
Test(llama4, f16_kv_matches_llamacpp_f16_kv) { s_check_rule(&k_l4, 1); }
Test(llama4, greedy_matches_llamacpp) { s_check_greedy(&k_l4, 8); }
/* the two MoE layers' 4 experts each, not the dense layers' FFNs */
Test(llama4, workers_give_inproc_bytes, .init = s_fam_env) { s_check_workers(&k_l4, 2 * 4); }
Test(llama4, worker_sigkill_gives_inproc_bytes, .init = s_fam_env) { s_check_sigkill(&k_l4); }

Test(llama4, layer_kinds) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_l4, &r, model, sizeof model);
    struct model *m = NULL;
    cr_assert_eq(model_open(model, &m), 0, "%s", coli_last_error());
    cr_assert_eq(m->hp.n_layer, 4);
    for (int il = 0; il < 4; il++) {
        const layer_weights *l = &m->layers[il];
        cr_expect_eq(l->n_chunk, il < 3 ? 8192 : 0, "layer %d", il);
        cr_expect_eq(l->no_rope, il == 3, "layer %d", il);
        cr_expect_eq(l->l2_qk_norm, il < 3, "layer %d", il);
        cr_expect_eq(l->router != NULL, il % 2 == 1, "layer %d", il);
        cr_expect_eq(l->has_shexp, il % 2 == 1, "layer %d", il);
    }
    cr_expect(m->hp.rope.freq_factors != NULL);
    model_close(&m);
}

/* One test per key the family needs (llama.cpp refuses these files too). */
#define MISSING_KEY(tname, k) \
    Test(llama4, refuses_missing_##tname) { s_refused(&k_l4, &(edit){.drop_key = k}, "llama4." k); }
MISSING_KEY(block_count, "block_count")
MISSING_KEY(embedding_length, "embedding_length")
MISSING_KEY(feed_forward_length, "feed_forward_length")
MISSING_KEY(head_count, "attention.head_count")
MISSING_KEY(expert_count, "expert_count")
MISSING_KEY(expert_used_count, "expert_used_count")
MISSING_KEY(expert_feed_forward_length, "expert_feed_forward_length")
MISSING_KEY(interleave_moe_layer_step, "interleave_moe_layer_step")

static void s_step0(gguf_writer *w) { gguf_writer_set_u32(w, "llama4.interleave_moe_layer_step", 0); }
static void s_top2(gguf_writer *w) { gguf_writer_set_u32(w, "llama4.expert_used_count", 2); }
static void s_no_chunk(gguf_writer *w) { gguf_writer_set_u32(w, "llama4.attention.sliding_window", 0); }
static void s_swa_base(gguf_writer *w) { gguf_writer_set_f32(w, "llama4.rope.freq_base_swa", 10000.0f); }
static void s_rot(gguf_writer *w) { gguf_writer_set_u32(w, "llama4.rope.dimension_count", 8); }
static void s_ffe_arr(gguf_writer *w) {
    const int32_t v[4] = {64, 64, 64, 64};
    gguf_writer_set_arr(w, "llama4.expert_feed_forward_length", GGUF_INT32, v, 4);
}
static void s_pattern_arr(gguf_writer *w) {
    const int32_t v[3] = {1, 1, 0};
    gguf_writer_set_arr(w, "llama4.attention.sliding_window_pattern", GGUF_INT32, v, 3);
}

Test(llama4, refuses_moe_step_0) { s_refused(&k_l4, &(edit){.kvs = s_step0}, "llama4.interleave_moe_layer_step"); }
Test(llama4, refuses_top2_routing) { s_refused(&k_l4, &(edit){.kvs = s_top2}, "llama4.expert_used_count"); }
Test(llama4, refuses_no_chunking) { s_refused(&k_l4, &(edit){.kvs = s_no_chunk}, "llama4.attention.sliding_window"); }
Test(llama4, refuses_own_rope_base_for_chunked_layers) {
    s_refused(&k_l4, &(edit){.kvs = s_swa_base}, "llama4.rope.freq_base_swa");
}
Test(llama4, refuses_partial_rope) { s_refused(&k_l4, &(edit){.kvs = s_rot}, "llama4.rope.dimension_count"); }
Test(llama4, refuses_per_layer_expert_width) {
    s_refused(&k_l4, &(edit){.kvs = s_ffe_arr}, "llama4.expert_feed_forward_length");
}
Test(llama4, refuses_short_pattern_array) {
    s_refused(&k_l4, &(edit){.kvs = s_pattern_arr}, "llama4.attention.sliding_window_pattern");
}
Test(llama4, refuses_missing_shared_expert) {
    s_refused(&k_l4, &(edit){.drop_tensor = "blk.1.ffn_up_shexp."}, "blk.1.ffn_up_shexp.weight");
}
Test(llama4, refuses_missing_dense_ffn) {
    s_refused(&k_l4, &(edit){.drop_tensor = "blk.2.ffn_gate."}, "blk.2.ffn_gate.weight");
}

/* ---- past the chunk ------------------------------------------------------- */

#define LONG_N 8232     /* prompt past llama.cpp's chunk of 8192 */
#define LONG_FIRST 8176 /* first recorded position */
#define LONG_CTX 8448

/* The long prompt of the fixture (its line 2): ids[i] = 1 + (i * 1237 + 17) % 2999. */
static int32_t *s_long_ids(int n, int salt) {
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = 1 + (int32_t)(((long)i * 1237 + 17 + salt) % 2999);
    return ids;
}

static coli_model *s_load_long(const char *model) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(model, &mp, &m), 0, "%s", coli_last_error());
    return m;
}

static coli_context *s_long_ctx(coli_model *m) {
    coli_context *ctx = NULL;
    const coli_context_params cp = {.n_ctx = LONG_CTX};
    cr_assert_eq(coli_context_new(m, &cp, &ctx), 0, "%s", coli_last_error());
    return ctx;
}

/* Positions LONG_FIRST.. of the long prompt (evaluated after the first
 * LONG_FIRST ids: the chunk boundary 8192 and the NoPE layer's temperature
 * step at position 8191 inside) against llama.cpp's one-batch run. */
Test(llama4, past_chunk_matches_llamacpp) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_l4, &r, model, sizeof model);
    FILE *f = fopen("tests/fixtures/llama4/tiny-llama4-f32-long.txt", "r");
    cr_assert(f);
    coli_model *m = s_load_long(model);
    coli_context *ctx = s_long_ctx(m);
    int32_t *ids = s_long_ids(LONG_N, 0);
    const int n = LONG_N - LONG_FIRST, V = 3000;
    float *lg = malloc((size_t)n * V * sizeof(float));
    cr_assert_eq(coli_eval(ctx, ids, LONG_FIRST, NULL, 0), 0, "%s", coli_last_error());
    cr_assert_eq(coli_eval(ctx, ids + LONG_FIRST, n, lg, 1), 0, "%s", coli_last_error());
    char line[16384];
    int seen = 0;
    double worst = 0.0;
    while (fgets(line, sizeof line, f)) {
        int pos, off, id[FAM_MAX_TOP], k = 0;
        double v[FAM_MAX_TOP];
        if (sscanf(line, "pos %d:%n", &pos, &off) != 1) continue;
        cr_assert(pos >= LONG_FIRST && pos < LONG_N);
        const float *a = lg + (size_t)(pos - LONG_FIRST) * V;
        for (int c; k < FAM_MAX_TOP && sscanf(line + off, "%d %lf%n", &id[k], &v[k], &c) == 2; k++) off += c;
        for (int j = 0; j < k; j++) {
            const double d = fabs((double)a[id[j]] - v[j]);
            worst = d > worst ? d : worst;
            cr_expect_leq(d, 1e-3, "position %d id %d: %.7g, llama.cpp %.7g", pos, id[j], a[id[j]], v[j]);
        }
        cr_expect_eq(sched_argmax(a, V), id[0], "position %d", pos);
        seen++;
    }
    cr_expect_eq(seen, n);
    cr_log_info("past the chunk: max |logit - llama.cpp| %.2e over %d positions", worst, seen);
    fclose(f);
    free(lg);
    free(ids);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

/* A fresh prefill of the long prompt's last logits against contexts that
 * restore a reused prefix (one ending before the chunk boundary, one past
 * it) and evaluate the rest: the same bits. */
Test(llama4, past_chunk_reused_prefix_equals_fresh) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_l4, &r, model, sizeof model);
    coli_model *m = s_load_long(model);
    int32_t *ids = s_long_ids(LONG_N, 0);
    const int V = 3000;
    float *fresh = malloc(V * sizeof(float)), *got = malloc(V * sizeof(float));
    coli_context *ctx = s_long_ctx(m);
    cr_assert_eq(coli_eval(ctx, ids, LONG_N, fresh, 0), 0, "%s", coli_last_error());
    const int saved[2] = {8000, LONG_N};
    for (int c = 0; c < 2; c++) {
        coli_prefix_cache *pc = NULL;
        cr_assert_eq(coli_prefix_cache_new(m, (size_t)1 << 30, 32, &pc), 0, "%s", coli_last_error());
        cr_assert_gt(coli_context_save_prefix(ctx, pc, ids, saved[c]), 0, "%s", coli_last_error());
        coli_context *c2 = s_long_ctx(m);
        const int have = coli_context_restore_prefix(c2, pc, ids, LONG_N);
        cr_expect_eq(have, saved[c] / 32 * 32, "restored %d", have); /* whole blocks */
        cr_assert_eq(coli_eval(c2, ids + have, LONG_N - have, got, 0), 0, "%s", coli_last_error());
        cr_expect(memcmp(fresh, got, V * sizeof(float)) == 0, "prefix of %d restored: logits bits differ", have);
        coli_context_free(&c2);
        coli_prefix_cache_free(&pc);
    }
    free(fresh);
    free(got);
    free(ids);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

typedef struct long_seq {
    coli_context *ctx;
    int32_t *prompt;
    int n_prompt;
    fam_collect out;
    int rc;
} long_seq;

static void *s_long_run(void *arg) {
    long_seq *q = arg;
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0.0f;
    sp.n_predict = 16;
    q->out.n = 0;
    q->rc = coli_generate(q->ctx, q->prompt, q->n_prompt, &sp, s_collect, &q->out, NULL);
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

/* Sequence i: the long prompt's first LONG_SHARED ids (restored from pc)
 * then a tail of its own, 28 + 2i ids, so answers cross position 8192. */
#define LONG_SHARED 8160

static void s_long_seq(coli_model *m, coli_prefix_cache *pc, const int32_t *base, int i, long_seq *q) {
    *q = (long_seq){.ctx = s_long_ctx(m), .n_prompt = LONG_SHARED + 28 + 2 * i};
    q->prompt = malloc((size_t)q->n_prompt * sizeof(int32_t));
    memcpy(q->prompt, base, LONG_SHARED * sizeof(int32_t));
    for (int k = LONG_SHARED; k < q->n_prompt; k++) q->prompt[k] = 1 + (k * 31 + 7 * i + 3) % 2999;
    cr_assert_eq(coli_context_restore_prefix(q->ctx, pc, q->prompt, q->n_prompt), LONG_SHARED, "%s", coli_last_error());
    q->prompt += LONG_SHARED; /* coli_generate appends the tail at the restored position */
    q->n_prompt -= LONG_SHARED;
}

static void s_long_free(long_seq *q) {
    coli_context_free(&q->ctx);
    free(q->prompt - LONG_SHARED);
}

/* Two sequences past the chunk (prompts of 8188 and 8190 ids, 16 greedy
 * steps each, across position 8192) decoding in one batch get the tokens
 * of each alone. Whether their steps shared a pass depends on thread
 * timing (prefills are short, so they almost always do): logged. */
Test(llama4, past_chunk_batched_equals_alone) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_l4, &r, model, sizeof model);
    coli_model *m = s_load_long(model);
    int32_t *base = s_long_ids(LONG_SHARED, 0);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)1 << 30, 32, &pc), 0, "%s", coli_last_error());
    coli_context *c0 = s_long_ctx(m);
    cr_assert_eq(coli_eval(c0, base, LONG_SHARED, NULL, 0), 0, "%s", coli_last_error());
    cr_assert_gt(coli_context_save_prefix(c0, pc, base, LONG_SHARED), 0, "%s", coli_last_error());
    coli_context_free(&c0);
    long_seq alone[2], together[2];
    for (int i = 0; i < 2; i++) {
        s_long_seq(m, pc, base, i, &alone[i]);
        s_long_run(&alone[i]);
        cr_assert_eq(alone[i].rc, 0, "%s", coli_last_error());
    }
    coli_batch *b = NULL;
    cr_assert_eq(coli_batch_new(m, 2, LONG_CTX, 512, s_lock, s_unlock, NULL, &b), 0, "%s", coli_last_error());
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        s_long_seq(m, pc, base, i, &together[i]);
        cr_assert_eq(coli_context_set_batch(together[i].ctx, b), 0);
    }
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, s_long_run, &together[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    coli_batch_stats st;
    coli_batch_get_stats(b, &st);
    cr_expect_gt(st.steps, 0);
    cr_log_info("past the chunk, batched: %llu steps, at most %d rows", (unsigned long long)st.steps, st.max_rows);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(together[i].rc, 0, "%s", coli_last_error());
        cr_assert_eq(together[i].out.n, 16);
        cr_expect(memcmp(together[i].out.ids, alone[i].out.ids, 16 * sizeof(int32_t)) == 0,
                  "sequence %d: batched tokens differ", i);
        cr_assert_eq(coli_context_set_batch(together[i].ctx, NULL), 0);
        s_long_free(&together[i]);
        s_long_free(&alone[i]);
    }
    coli_batch_free(&b);
    coli_prefix_cache_free(&pc);
    free(base);
    coli_model_free(&m);
}
