/*
 * test_api.c - include/colibri.h end to end on the gen_model fixtures:
 * load + info, batch vs token-by-token (bit-identical), chunked batches,
 * context limits, bad ids, reset, generation (greedy, seeds, callback stop),
 * stats, quantize (byte-identical to llama-quantize), model validation
 * errors, NULL handling, and a client built against the public header only.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "coordinator/forward.h"
#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "tests/ref_models.h"

static coli_model *s_load(const char *fixture, int kv_f16) {
    char path[4096];
    s_fixture(fixture, path, sizeof path);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    mp.kv_f16 = kv_f16;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s: %s", path, coli_last_error());
    return m;
}

static int s_vocab(const coli_model *m) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    return info.n_vocab;
}

static void s_ids(int32_t *ids, int n, int n_vocab) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 13) % n_vocab);
}

// ---------------------------------------------------------------------------
// loading and the forward pass

Test(api, load_and_info) {
    coli_model *m = s_load("tiny-llama-moe-f32.gguf", 0);
    coli_model_info info;
    coli_model_get_info(m, &info);
    cr_assert_str_eq(info.arch, "llama");
    cr_assert_str_eq(info.name, "tiny-llama-moe-f32");
    cr_assert_gt(info.n_expert, 0);
    cr_assert_gt(info.n_expert_used, 0);
    cr_assert_gt(info.n_params, 0);
    cr_assert_gt(info.n_ctx, 0);
    cr_assert_eq(info.n_embd % info.n_head, 0);
    coli_model_free(&m);
    cr_assert_null(m);
    m = s_load("tiny-llama-dense-f32.gguf", 0);
    coli_model_get_info(m, &info);
    cr_assert_eq(info.n_expert, 0);
    coli_model_free(&m);
}

/* The prompt as one batch and token by token must give the same bits. */
static void s_batch_vs_sequential(const char *fixture, int kv_f16) {
    enum {
        N = 40
    };
    coli_model *m = s_load(fixture, kv_f16);
    const int V = s_vocab(m);
    int32_t ids[N];
    s_ids(ids, N, V);
    float *all = malloc((size_t)N * V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    coli_context *a = NULL, *b = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    cr_assert_eq(coli_context_new(m, NULL, &b), 0);
    cr_assert_eq(coli_eval(a, ids, N, all, 1), 0, "%s", coli_last_error());
    for (int i = 0; i < N; i++) {
        cr_assert_eq(coli_eval(b, &ids[i], 1, one, 0), 0, "%s", coli_last_error());
        cr_assert(memcmp(one, all + (size_t)i * V, (size_t)V * sizeof(float)) == 0,
                  "%s: position %d differs between batch and single-token eval", fixture, i);
    }
    cr_assert_eq(coli_context_pos(a), N);
    cr_assert_eq(coli_context_pos(b), N);
    coli_context_free(&a);
    coli_context_free(&b);
    free(all);
    free(one);
    coli_model_free(&m);
}

Test(api, batch_equals_sequential_moe) { s_batch_vs_sequential("tiny-llama-moe-f32.gguf", 0); }
Test(api, batch_equals_sequential_dense_f16kv) { s_batch_vs_sequential("tiny-llama-dense-f32.gguf", 1); }
Test(api, batch_equals_sequential_olmoe) { s_batch_vs_sequential("tiny-olmoe-f32.gguf", 0); }
Test(api, batch_equals_sequential_qwen2moe_q8) { s_batch_vs_sequential("tiny-qwen2moe-f32.gguf", 1); }
Test(api, batch_equals_sequential_q4_0) { s_batch_vs_sequential("tiny-llama-moe-q4_0.gguf", 0); }

/* forward_eval in chunks of 7 gives what one batch gives (white box). */
Test(api, chunked_batches_match_one_batch) {
    enum {
        N = 30
    };
    char path[4096];
    s_fixture("tiny-qwen2moe-f32.gguf", path, sizeof path);
    model *m = NULL;
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    moe_exec_config cfg = {.model_path = path,
                           .gguf = m->gguf,
                           .n_layer = m->hp.n_layer,
                           .n_expert = m->hp.n_expert,
                           .n_expert_used = m->hp.n_expert_used,
                           .n_embd = m->hp.n_embd,
                           .n_ff = m->hp.n_ff_exp,
                           .n_threads = 1};
    moe_exec *ex = NULL;
    cr_assert_eq(moe_exec_inproc_new(&cfg, &ex), 0, "%s", coli_last_error());
    const int V = m->hp.n_vocab;
    int32_t ids[N];
    s_ids(ids, N, V);
    float *x = malloc((size_t)N * V * sizeof(float)), *y = malloc((size_t)N * V * sizeof(float));
    forward_state big, small;
    kv_cache kb, ks;
    cr_assert_eq(forward_state_init(&big, m, ex, NULL, 64, 64), 0);
    cr_assert_eq(forward_state_init(&small, m, ex, NULL, 7, 64), 0);
    cr_assert_eq(kv_cache_init(&kb, m->hp.n_layer, 64, model_k_dim(&m->hp), model_v_dim(&m->hp), 0, 0), 0);
    cr_assert_eq(kv_cache_init(&ks, m->hp.n_layer, 64, model_k_dim(&m->hp), model_v_dim(&m->hp), 0, 0), 0);
    cr_assert_eq(forward_eval(&big, &kb, ids, N, 0, x, 1), 0, "%s", coli_last_error());
    cr_assert_eq(forward_eval(&small, &ks, ids, N, 0, y, 1), 0, "%s", coli_last_error());
    cr_assert(memcmp(x, y, (size_t)N * V * sizeof(float)) == 0, "chunked eval differs");
    /* last-position-only logits of a chunked eval = the last row */
    cr_assert_eq(forward_eval(&small, &ks, ids, N, 0, y, 0), 0);
    cr_assert(memcmp(x + (size_t)(N - 1) * V, y, (size_t)V * sizeof(float)) == 0);
    kv_cache_free(&kb);
    kv_cache_free(&ks);
    forward_state_free(&big);
    forward_state_free(&small);
    free(x);
    free(y);
    ex->destroy(ex);
    model_close(&m);
}

Test(api, context_full_and_bad_ids) {
    coli_model *m = s_load("tiny-llama-moe-f32.gguf", 0);
    const int V = s_vocab(m);
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = 16;
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, &cp, &ctx), 0);
    int32_t ids[16];
    s_ids(ids, 16, V);
    cr_assert_eq(coli_eval(ctx, ids, 10, NULL, 0), 0);
    cr_assert_eq(coli_eval(ctx, ids, 7, NULL, 0), COLI_ERANGE);
    cr_assert(strstr(coli_last_error(), "context full"), "message: %s", coli_last_error());
    cr_assert_eq(coli_context_pos(ctx), 10);
    cr_assert_eq(coli_eval(ctx, ids, 6, NULL, 0), 0);
    cr_assert_eq(coli_context_pos(ctx), 16);
    coli_context_reset(ctx);
    int32_t bad[2] = {1, V};
    cr_assert_eq(coli_eval(ctx, bad, 2, NULL, 0), COLI_ERANGE);
    cr_assert(strstr(coli_last_error(), "out of range"), "message: %s", coli_last_error());
    bad[1] = -1;
    cr_assert_eq(coli_eval(ctx, bad, 2, NULL, 0), COLI_ERANGE);
    cr_assert_eq(coli_eval(ctx, ids, 0, NULL, 0), COLI_EINVAL);
    cr_assert_eq(coli_context_pos(ctx), 0);
    cp.n_ctx = 1 << 30;
    coli_context *big = NULL;
    cr_assert_eq(coli_context_new(m, &cp, &big), COLI_EINVAL);
    cr_assert_null(big);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

Test(api, reset_gives_a_fresh_context) {
    coli_model *m = s_load("tiny-olmoe-f32.gguf", 0);
    const int V = s_vocab(m);
    int32_t ids[12];
    s_ids(ids, 12, V);
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    cr_assert_eq(coli_eval(ctx, ids, 12, a, 0), 0);
    cr_assert_eq(coli_eval(ctx, ids, 5, NULL, 0), 0);
    coli_context_reset(ctx);
    cr_assert_eq(coli_context_pos(ctx), 0);
    cr_assert_eq(coli_eval(ctx, ids, 12, b, 0), 0);
    cr_assert(memcmp(a, b, (size_t)V * sizeof(float)) == 0);
    coli_context_free(&ctx);
    free(a);
    free(b);
    coli_model_free(&m);
}

// ---------------------------------------------------------------------------
// generation

typedef struct gen_log {
    int32_t ids[256];
    int n, stop_after;
    size_t bytes;
} gen_log;

static int s_on_token(void *user, int32_t id, const char *text, size_t len) {
    gen_log *g = user;
    if (g->n < 256) g->ids[g->n++] = id;
    g->bytes += len;
    cr_assert(len == 0 || text != NULL);
    return g->stop_after && g->n >= g->stop_after;
}

static int s_generate(coli_model *m, float temp, uint64_t seed, int n_predict, gen_log *g, coli_gen_stats *st) {
    int32_t prompt[5];
    s_ids(prompt, 5, s_vocab(m));
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = temp;
    sp.seed = seed;
    sp.n_predict = n_predict;
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    int rc = coli_generate(ctx, prompt, 5, &sp, s_on_token, g, st);
    if (rc == 0) cr_assert_eq(coli_context_pos(ctx), 5 + st->n_gen, "context must hold prompt + tokens shown");
    coli_context_free(&ctx);
    return rc;
}

Test(api, greedy_generation_follows_argmax) {
    coli_model *m = s_load("tiny-llama-moe-f32.gguf", 0);
    const int V = s_vocab(m);
    gen_log g = {0};
    coli_gen_stats st;
    cr_assert_eq(s_generate(m, 0.0f, 1, 12, &g, &st), 0, "%s", coli_last_error());
    cr_assert_eq(st.n_prompt, 5);
    cr_assert_eq(st.n_gen + st.stopped_by_eog, g.n + st.stopped_by_eog);
    /* replay by hand */
    int32_t ids[5];
    s_ids(ids, 5, V);
    float *logits = malloc((size_t)V * sizeof(float));
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    cr_assert_eq(coli_eval(ctx, ids, 5, logits, 0), 0);
    for (int i = 0; i < g.n; i++) {
        int best = 0;
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[best]) best = j;
        cr_assert_eq(g.ids[i], best, "step %d", i);
        cr_assert_eq(coli_eval(ctx, &g.ids[i], 1, logits, 0), 0);
    }
    coli_context_free(&ctx);
    free(logits);
    coli_model_free(&m);
}

Test(api, sampling_is_seeded_and_callback_can_stop) {
    coli_model *m = s_load("tiny-qwen2moe-f32.gguf", 0);
    gen_log a = {0}, b = {0}, c = {0}, d = {.stop_after = 3};
    coli_gen_stats st;
    cr_assert_eq(s_generate(m, 1.5f, 99, 20, &a, &st), 0);
    cr_assert_eq(s_generate(m, 1.5f, 99, 20, &b, &st), 0);
    cr_assert_eq(s_generate(m, 1.5f, 100, 20, &c, &st), 0);
    cr_assert_eq(a.n, b.n);
    cr_assert(memcmp(a.ids, b.ids, (size_t)a.n * sizeof(int32_t)) == 0, "same seed, different tokens");
    cr_assert(a.n != c.n || memcmp(a.ids, c.ids, (size_t)a.n * sizeof(int32_t)) != 0, "seed ignored");
    cr_assert_eq(s_generate(m, 1.5f, 99, 20, &d, &st), 0);
    cr_assert_eq(st.n_gen, 3);
    cr_assert_eq(d.n, 3);
    cr_assert_eq(s_generate(m, 0.0f, 1, 0, &d, &st), 0);
    cr_assert_eq(st.n_gen, 0);
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.top_p = 2.0f;
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    int32_t prompt[1] = {3};
    cr_assert_eq(coli_generate(ctx, prompt, 1, &sp, NULL, NULL, NULL), COLI_EINVAL);
    cr_assert_eq(coli_generate(ctx, prompt, 0, &sp, NULL, NULL, NULL), COLI_EINVAL);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

Test(api, stats_report_the_inproc_executor) {
    coli_model *m = s_load("tiny-llama-moe-f32.gguf", 0);
    coli_model_info info;
    coli_model_get_info(m, &info);
    int32_t ids[8];
    s_ids(ids, 8, info.n_vocab);
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    cr_assert_eq(coli_eval(ctx, ids, 8, NULL, 0), 0);
    char *json = NULL, *text = NULL;
    cr_assert_eq(coli_model_stats_json(m, &json), 0);
    cJSON *j = cJSON_Parse(json);
    cr_assert(j, "stats are not JSON: %s", json);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "executor")->valuestring, "inproc");
    /* every token routes to n_expert_used experts in every layer */
    cr_assert_eq((int)cJSON_GetObjectItem(j, "rows")->valuedouble, 8 * info.n_expert_used * info.n_layer);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "expert_rows")), info.n_layer);
    cJSON_Delete(j);
    cr_assert_eq(coli_model_stats_text(m, &text), 0);
    cr_assert(strstr(text, "in-process"), "%s", text);
    free(json);
    free(text);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

// ---------------------------------------------------------------------------
// quantize

/* The shipped tiny-mixtral files are llama-quantize --pure: so is ours. */
static void s_quantize_matches_shipped(const char *type, const char *shipped_file) {
    s_require_shared();
    char f32[4096], ref[4096], out[4096], cmd[9000];
    s_ref_model("tiny-mixtral-f32.gguf", f32, sizeof f32);
    snprintf(ref, sizeof ref, "%s/reference/models/%s", s_shared(), shipped_file);
    snprintf(out, sizeof out, "%s/ref/quantize-test-%s.gguf", s_build(), type);
    const coli_quantize_params pure = {.pure = 1};
    cr_assert_eq(coli_quantize_file_params(f32, out, type, &pure), 0, "%s", coli_last_error());
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", out, ref);
    cr_assert_eq(system(cmd), 0, "%s is not byte-identical to %s", out, ref);
    remove(out);
}

Test(quantize, q8_0_byte_identical_to_llama_quantize) { s_quantize_matches_shipped("Q8_0", "tiny-mixtral-q8_0.gguf"); }
Test(quantize, q4_0_byte_identical_to_llama_quantize) { s_quantize_matches_shipped("Q4_0", "tiny-mixtral-q4_0.gguf"); }

Test(quantize, output_loads_and_keeps_norms_and_routers_f32) {
    char in[4096], out[4096];
    s_fixture("tiny-qwen2moe-f32.gguf", in, sizeof in);
    snprintf(out, sizeof out, "%s/fixtures/quantize-test-bf16.gguf", s_build());
    cr_assert_eq(coli_quantize_file(in, out, "BF16"), 0, "%s", coli_last_error());
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(out, &f), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_find_tensor(f, "blk.0.attn_q.weight")->type, COLI_BF16);
    cr_assert_eq(gguf_find_tensor(f, "blk.0.ffn_gate_exps.weight")->type, COLI_BF16);
    cr_assert_eq(gguf_find_tensor(f, "blk.0.ffn_gate_inp.weight")->type, COLI_F32);
    cr_assert_eq(gguf_find_tensor(f, "blk.0.ffn_gate_inp_shexp.weight")->type, COLI_F32);
    cr_assert_eq(gguf_find_tensor(f, "blk.0.attn_norm.weight")->type, COLI_F32);
    cr_assert_eq(gguf_find_tensor(f, "blk.0.attn_q.bias")->type, COLI_F32);
    uint32_t ft = 0, qv = 0;
    cr_assert_eq(gguf_get_u32(f, "general.file_type", &ft), 0);
    cr_assert_eq(gguf_get_u32(f, "general.quantization_version", &qv), 0);
    cr_assert_eq(ft, 32);
    cr_assert_eq(qv, 2);
    gguf_close(&f);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(out, &mp, &m), 0, "%s", coli_last_error());
    coli_model_free(&m);
    remove(out);
    cr_assert_eq(coli_quantize_file(in, out, "Q7_K"), COLI_EINVAL);
    cr_assert(strstr(coli_last_error(), "Q7_K"), "%s", coli_last_error());
    cr_assert_eq(coli_quantize_file(in, in, "Q8_0"), COLI_EINVAL);
    cr_assert_lt(coli_quantize_file("/nonexistent/x.gguf", out, "Q8_0"), 0);
}

// ---------------------------------------------------------------------------
// model validation: each broken file gets its own one-line error

typedef struct variant {
    const char *fixture;     /* source file (default tiny-llama-moe-f32.gguf) */
    const char *skip_tensor; /* leave this tensor out */
    const char *key;         /* then set this key: u32 value or string */
    uint32_t u32;
    const char *str;
    const char *f16_tensor;  /* store this (F32, 1-D) tensor as F16 */
    const char *zero_tensor; /* store this F32 tensor as zeros */
} variant;

/* Copy a fixture with one change into dst. */
static void s_write_variant(const variant *v, const char *dst) {
    char src[4096];
    s_fixture(v->fixture ? v->fixture : "tiny-llama-moe-f32.gguf", src, sizeof src);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    if (v->key && v->str)
        cr_assert_eq(gguf_writer_set_str(w, v->key, v->str), 0);
    else if (v->key)
        cr_assert_eq(gguf_writer_set_u32(w, v->key, v->u32), 0);
    void *buf = NULL;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        const int64_t n = coli_tensor_nelems(t);
        if (v->skip_tensor && strcmp(t->name, v->skip_tensor) == 0) continue;
        if (v->f16_tensor && strcmp(t->name, v->f16_tensor) == 0) {
            uint16_t *half = buf = malloc((size_t)n * 2);
            for (int64_t j = 0; j < n; j++) half[j] = coli_fp32_to_fp16(((const float *)t->data)[j]);
            cr_assert_eq(gguf_writer_add_tensor(w, t->name, COLI_F16, t->n_dims, t->ne, half, (size_t)n * 2), 0);
        } else if (v->zero_tensor && strcmp(t->name, v->zero_tensor) == 0) {
            buf = calloc((size_t)n, sizeof(float));
            cr_assert_eq(gguf_writer_add_tensor(w, t->name, COLI_F32, t->n_dims, t->ne, buf, (size_t)n * 4), 0);
        } else {
            cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
        }
    }
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
    free(buf);
}

/* Copy the llama MoE fixture with one defect; returns the load status. */
static int s_load_variant(const variant *v, const char *tag) {
    char dst[4096];
    snprintf(dst, sizeof dst, "%s/fixtures/bad-%s.gguf", s_build(), tag);
    s_write_variant(v, dst);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    coli_model *m = NULL;
    int rc = coli_model_load(dst, &mp, &m);
    cr_assert(rc != 0 || m != NULL);
    cr_assert(rc == 0 || m == NULL, "a failed load must leave *out NULL");
    coli_model_free(&m);
    remove(dst);
    return rc;
}

#define EXPECT_ERR(rc, code, ...)                                                                                 \
    do {                                                                                                          \
        cr_assert_eq(rc, code, "status %s, message: %s", coli_status_str(rc), coli_last_error());                 \
        const char *needles[] = {__VA_ARGS__};                                                                    \
        for (size_t k_ = 0; k_ < sizeof needles / sizeof needles[0]; k_++)                                        \
            cr_assert(strstr(coli_last_error(), needles[k_]), "'%s' not in: %s", needles[k_], coli_last_error()); \
        cr_assert(!strchr(coli_last_error(), '\n'), "one line: %s", coli_last_error());                           \
    } while (0)

Test(validation, missing_tensor_is_named) {
    variant v = {.skip_tensor = "blk.1.ffn_up_exps.weight"};
    EXPECT_ERR(s_load_variant(&v, "missing"), COLI_EFORMAT, "missing required tensor", "blk.1.ffn_up_exps.weight");
    variant o = {.skip_tensor = "output_norm.weight"};
    EXPECT_ERR(s_load_variant(&o, "missing-norm"), COLI_EFORMAT, "output_norm.weight");
}

Test(validation, expert_count_disagreeing_with_shapes) {
    variant v = {.key = "llama.expert_count", .u32 = 7};
    EXPECT_ERR(s_load_variant(&v, "experts"), COLI_EFORMAT, "blk.0.ffn_gate_inp.weight", "shape", "expected");
}

Test(validation, unknown_architecture) {
    variant v = {.key = "general.architecture", .str = "gptj"};
    EXPECT_ERR(s_load_variant(&v, "arch"), COLI_EUNSUPPORTED, "gptj", "unknown architecture");
}

Test(validation, heads_must_divide) {
    variant v = {.key = "llama.attention.head_count", .u32 = 7};
    EXPECT_ERR(s_load_variant(&v, "heads"), COLI_EFORMAT, "head_count 7", "does not divide");
    variant k = {.key = "llama.attention.head_count_kv", .u32 = 3};
    EXPECT_ERR(s_load_variant(&k, "kvheads"), COLI_EFORMAT, "head_count_kv 3");
}

Test(validation, norm_must_be_f32) {
    variant v = {.f16_tensor = "blk.0.attn_norm.weight"};
    EXPECT_ERR(s_load_variant(&v, "dtype"), COLI_EUNSUPPORTED, "blk.0.attn_norm.weight", "F16");
}

Test(validation, missing_hyperparameter_and_top_k) {
    variant v = {.key = "llama.expert_used_count", .u32 = 99};
    EXPECT_ERR(s_load_variant(&v, "topk"), COLI_EFORMAT, "expert_used_count 99");
}

/* With output.weight all zero every logit is 0, greedy picks id 0, which
 * is the olmoe fixture's end-of-text token: generation stops at once and
 * the callback never sees it. */
Test(api, generation_stops_at_eog_without_passing_it_on) {
    char path[4096];
    variant v = {.fixture = "tiny-olmoe-f32.gguf", .zero_tensor = "output.weight"};
    snprintf(path, sizeof path, "%s/fixtures/eog-olmoe.gguf", s_build());
    s_write_variant(&v, path);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s", coli_last_error());
    cr_assert(coli_token_is_eog(m, 0));
    gen_log g = {0};
    coli_gen_stats st;
    cr_assert_eq(s_generate(m, 0.0f, 1, 10, &g, &st), 0, "%s", coli_last_error());
    cr_assert_eq(st.stopped_by_eog, 1);
    cr_assert_eq(st.n_gen, 0);
    cr_assert_eq(g.n, 0, "the EOG token was passed to the callback");
    coli_model_free(&m);
    remove(path);
}

// ---------------------------------------------------------------------------
// argument checking

Test(api, null_and_missing_files) {
    coli_model *m = (coli_model *)0x1;
    cr_assert_eq(coli_model_load(NULL, NULL, &m), COLI_EINVAL);
    cr_assert_null(m);
    cr_assert_eq(coli_model_load("x.gguf", NULL, NULL), COLI_EINVAL);
    int rc = coli_model_load("/nonexistent/dir/model.gguf", NULL, &m);
    cr_assert_lt(rc, 0);
    cr_assert(strstr(coli_last_error(), "/nonexistent/dir/model.gguf"), "%s", coli_last_error());
    coli_model_free(NULL);
    coli_model_free(&m);
    coli_context_free(NULL);
    coli_context *ctx = NULL;
    coli_context_free(&ctx);
    cr_assert_eq(coli_context_new(NULL, NULL, &ctx), COLI_EINVAL);
    cr_assert_eq(coli_eval(NULL, NULL, 1, NULL, 0), COLI_EINVAL);
    cr_assert_eq(coli_context_pos(NULL), 0);
    coli_context_reset(NULL);
    char *s = NULL;
    cr_assert_eq(coli_model_stats_json(NULL, &s), COLI_EINVAL);
    coli_model_info info;
    coli_model_get_info(NULL, &info);
    cr_assert_null(info.arch);
}

Test(api, tokens_round_trip) {
    coli_model *m = s_load("tiny-llama-moe-f32.gguf", 0);
    int32_t ids[64];
    int n = 0;
    cr_assert_eq(coli_tokenize(m, "hello world", 11, 1, 0, ids, 64, &n), 0, "%s", coli_last_error());
    cr_assert_gt(n, 1);
    char buf[256];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *b;
        size_t bl;
        cr_assert_eq(coli_token_to_bytes(m, ids[i], &b, &bl), 0);
        memcpy(buf + len, b, bl);
        len += bl;
        cr_assert_not_null(coli_token_text(m, ids[i]));
    }
    buf[len] = '\0';
    cr_assert(strstr(buf, "hello world"), "detokenized: '%s'", buf);
    cr_assert_eq(coli_tokenize(m, "hello world", 11, 1, 0, ids, 1, &n), COLI_ERANGE);
    coli_model_free(&m);
}

// ---------------------------------------------------------------------------
// a client that sees only include/colibri.h

/* The library of a sanitizer build needs the sanitizer runtimes at link time. */
#if defined(__SANITIZE_ADDRESS__)
#define CLIENT_SANFLAGS "-fsanitize=address,undefined"
#else
#define CLIENT_SANFLAGS ""
#endif

Test(api, client_built_against_the_public_header_only, .timeout = 120) {
    char model[4096], cmd[16384], bin[4096];
    s_fixture("tiny-llama-moe-q8_0.gguf", model, sizeof model);
    snprintf(bin, sizeof bin, "%s/tests/api_client", s_build());
    snprintf(cmd, sizeof cmd,
             "${CC:-cc} -std=c11 -Wall -Wextra -Werror " CLIENT_SANFLAGS " -Iinclude tests/api_client.c "
             "%s/lib/libcolibri.a -lzmq -lprotobuf-c -lmicrohttpd -lcjson -ldl -lm -pthread -o %s",
             s_build(), bin);
    cr_assert_eq(system(cmd), 0, "building the public-header client failed: %s", cmd);
    snprintf(cmd, sizeof cmd, "%s %s > %s.out 2>&1", bin, model, bin);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "%s.out", bin);
    FILE *fp = fopen(cmd, "r");
    char out[8192] = "";
    size_t n = fp ? fread(out, 1, sizeof out - 1, fp) : 0;
    out[n] = '\0';
    if (fp) fclose(fp);
    cr_assert_eq(rc, 0, "api_client failed:\n%s", out);
    cr_assert(strstr(out, "eval-check: ok") && strstr(out, "\"executor\":\"inproc\""), "output:\n%s", out);
}

/* The public library exports one surface: every global symbol it defines
 * carries the coli_ prefix, so a program linking it cannot collide with
 * internal names such as model_open or stats_json (issue 10). */
Test(api, public_library_exports_only_prefixed_symbols) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "nm -g --defined-only %s/lib/libcolibri.a", s_build());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    char line[1024];
    int n_syms = 0, n_api = 0;
    while (fgets(line, sizeof line, p)) {
        char addr[64], kind[8], name[512];
        if (sscanf(line, "%63s %7s %511s", addr, kind, name) != 3) continue;
        n_syms++;
        cr_expect(strncmp(name, "coli_", 5) == 0, "libcolibri.a exports an unprefixed symbol: %s", name);
        if (!strcmp(name, "coli_model_load") || !strcmp(name, "coli_eval") || !strcmp(name, "coli_model_free")) n_api++;
    }
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);
    cr_assert_gt(n_syms, 0, "no symbols in libcolibri.a");
    cr_assert_eq(n_api, 3, "the three-call API is not exported");
}
