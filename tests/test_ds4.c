/*
 * test_ds4.c - DeepSeek-V4 (deepseek4) on the tiny model of tests/gen_ds4.py
 * (a sliding-window layer, a CSA layer whose indexer keeps 2 of the
 * compressed blocks of 4, an HCA layer with blocks of 128; four
 * hyper-connection streams, sqrt(softplus) routing with a bias, clamped
 * SwiGLU, a shared expert; layer 0 routed by token id), generated on first use into $COLI_BUILD/ref
 * and checked against the sha256 its llama.cpp logits were recorded for
 * (tests/fixtures/deepseek4/README):
 *
 * - the F32 rule of ../shared/reference (every recorded logit, top 20 of
 *   every position, within 1e-3 of llama.cpp de3ff815, the same argmax) on
 *   a 32-token prompt (past the window and the indexer's top-k) and on a
 *   140-token one (past the first HCA block of 128); greedy steps while
 *   llama.cpp's margin is >= 0.05; the long prompt again on a copy with
 *   YaRN rope scaling (the compressed layers' rope, the others unscaled);
 * - coli quantize Q8_0 writes llama-quantize's file, which takes the Q8_0
 *   rule against llama.cpp's run on it;
 * - two workers and a worker SIGKILLed mid-run give --inproc's bytes;
 * - token-by-token decoding gives the bytes of one batch; three sequences
 *   batched give the tokens each gets alone;
 * - coli run, coli perplexity and coli serve run it: run and perplexity
 *   print the same with two workers as in-process, serve's greedy text is
 *   run's;
 * - the MTP block loaded (validated), not run;
 * - missing or inconsistent metadata / tensors refused in one line naming them.
 */
#include <cjson/cJSON.h>

#include "tests/family_ref.h"
#include "tests/greedy_run.h"
#include "tests/serve_util.h"

static const family k_ds4 = {"tiny-ds4-f32.gguf", "tests/gen_ds4.py", "tests/fixtures/deepseek4/tiny-ds4-f32.txt",
                             "deepseek4."};
static const family k_ds4_long = {"tiny-ds4-f32.gguf", "tests/gen_ds4.py",
                                  "tests/fixtures/deepseek4/tiny-ds4-f32-long.txt", "deepseek4."};

/* the same weights with YaRN (factor 4, original context 64), which the compressed layers' rope takes */
static const family k_ds4_yarn = {"tiny-ds4-yarn-f32.gguf", "tests/gen_ds4.py --yarn",
                                  "tests/fixtures/deepseek4/tiny-ds4-yarn-f32-long.txt", "deepseek4."};

TestSuite(ds4, .timeout = 240);

Test(ds4, f32_kv_matches_llamacpp) { s_check_f32(&k_ds4); }
Test(ds4, long_prompt_matches_llamacpp) { s_check_f32(&k_ds4_long); }
Test(ds4, yarn_matches_llamacpp) { s_check_f32(&k_ds4_yarn); }
Test(ds4, greedy_matches_llamacpp) { s_check_greedy(&k_ds4, 8); }
Test(ds4, long_greedy_matches_llamacpp) { s_check_greedy(&k_ds4_long, 3); }

Test(ds4, workers_give_inproc_bytes, .init = s_fam_env) { s_check_workers(&k_ds4, 3 * 8); }
Test(ds4, worker_sigkill_gives_inproc_bytes, .init = s_fam_env) { s_check_sigkill(&k_ds4); }

/* A worker whose plugin lacks the clamped SwiGLU (caps.act_mask 0, as the
 * GPU plugin; COLI_FAULT=no-act) gets no deepseek4 expert: the other
 * worker holds them all from the start, nothing falls back, the bytes are
 * --inproc's. */
Test(ds4, experts_placed_only_where_the_clamped_swiglu_is_computed, .init = s_fam_env) {
    fam_ref r;
    char model[4096], v[64];
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    setenv("COLI_FAULT", "no-act@worker=0", 1);
    sched_generate(model, "cpu:2", NULL, NULL, &got);
    unsetenv("COLI_FAULT");
    sched_assert_same(&ref, &got, "cpu:2, worker 0 without SWIGLU_CLAMP");
    sched_worker_field(got.stats, 0, "resident_experts", v, sizeof v);
    cr_expect_eq(atol(v), 0, "worker 0 holds deepseek4 experts: %s", got.stats);
    sched_worker_field(got.stats, 1, "resident_experts", v, sizeof v);
    cr_expect_eq(atol(v), 3 * 8, "worker 1 does not hold every expert: %s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

/* coli plan assumes the GPU plugins compute the clamped SwiGLU (they say
 * so in their hellos): a cuda worker takes its share; an xdna one none. */
Test(ds4, plan_places_experts_on_gpu_not_xdna) {
    fam_ref r;
    char model[4096], *plan = NULL;
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    cr_assert_eq(coli_plan_text(model, "cuda:0,cpu:1", &plan), 0, "%s", coli_last_error());
    cr_expect(strstr(plan, "worker 0  cuda:0  budget unlimited  experts 12 "), "%s", plan);
    cr_expect(!strstr(plan, "activation beyond SwiGLU"), "%s", plan);
    free(plan);
    cr_assert_eq(coli_plan_text(model, "xdna:0,cpu:1", &plan), 0, "%s", coli_last_error());
    cr_expect(strstr(plan, "worker 0  xdna:0  budget unlimited  experts 0 "), "%s", plan);
    cr_expect(strstr(plan, "3 layers (first 0) have experts with an activation beyond SwiGLU:"), "%s", plan);
    free(plan);
}

/* One token at a time (each block compressed when its last row arrives)
 * gives the logits of the whole prompt in one batch, bit for bit. */
Test(ds4, decode_equals_one_batch) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_ds4_long, &r, model, sizeof model);
    int nv = 0;
    float *all = s_eval_kv(model, "inproc", 0, r.ids, r.n_ids, &nv);
    coli_model *m = sched_load(model, "inproc");
    coli_context *ctx = NULL;
    float *one = malloc((size_t)nv * sizeof(float));
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0, "%s", coli_last_error());
    int diff = -1;
    for (int t = 0; t < r.n_ids; t++) {
        cr_assert_eq(coli_eval(ctx, r.ids + t, 1, one, 0), 0, "%s", coli_last_error());
        if (diff < 0 && memcmp(one, all + (size_t)t * (size_t)nv, (size_t)nv * sizeof(float)) != 0) diff = t;
    }
    cr_expect_eq(diff, -1, "position %d differs from the one-batch run", diff);
    coli_context_free(&ctx);
    coli_model_free(&m);
    free(one);
    free(all);
}

/* `coli quantize` to Q8_0 writes llama-quantize's bytes (the compressors'
 * ape tables quantized too, the I32 table copied), and the file takes the
 * Q8_0 rule of ../shared/reference against llama.cpp's run on it (every
 * recorded logit within 0.15, the same argmax where llama.cpp's gap > 0.1;
 * activations are quantized as llama.cpp does, so it is far closer). */
Test(ds4, q8_0_matches_llamacpp) {
    static const family q8 = {"tiny-ds4-q8_0.gguf", NULL, "tests/fixtures/deepseek4/tiny-ds4-q8_0.txt", "deepseek4."};
    fam_ref r, rq;
    char model[4096], out[4200], cmd[16384], sum[65] = "";
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    s_read_ref_file(&q8, q8.fixture, &rq);
    snprintf(out, sizeof out, "%s/ds4-q8_0-%d.gguf", s_build(), (int)getpid());
    snprintf(cmd, sizeof cmd, "%s/bin/coli quantize '%s' '%s' Q8_0 >/dev/null 2>&1 && sha256sum '%s'", s_build(), model,
             out, out);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fscanf(p, "%64s", sum) == 1, "%s", cmd);
    pclose(p);
    cr_expect_str_eq(sum, rq.sha, "coli quantize Q8_0 is not llama-quantize's file");
    int nv = 0;
    float *lg = s_eval_kv(out, "inproc", 0, rq.ids, rq.n_ids, &nv);
    double worst = 0.0;
    for (int t = 0; t < rq.n_pos; t++) {
        const float *a = lg + (size_t)t * (size_t)nv;
        for (int k = 0; k < rq.top; k++) {
            const double d = fabs((double)a[rq.id[t][k]] - rq.logit[t][k]);
            if (d > worst) worst = d;
        }
        if (rq.logit[t][0] - rq.logit[t][1] > 0.1)
            cr_expect_eq(sched_argmax(a, nv), rq.id[t][0], "position %d: argmax %d, llama.cpp %d", t,
                         sched_argmax(a, nv), rq.id[t][0]);
    }
    cr_log_info("tiny-ds4-q8_0: max |logit - llama.cpp| %.2e over %d positions x top %d", worst, rq.n_pos, rq.top);
    cr_expect_leq(worst, 0.15, "max delta %.3g", worst);
    free(lg);
    unlink(out);
}

/* ---- the commands -------------------------------------------------------- */

/* its greedy continuation is ASCII: serve and run print the same bytes */
#define DS4_PROMPT "Once upon a time there was a little bird"

/* stdout of `coli ARGS...` -m model (exit 0 asserted); caller frees. */
static char *s_coli(const char *model, const char *const *args) {
    char coli[4096];
    cli_build_path(coli, sizeof coli, "bin/coli");
    const char *argv[24] = {coli};
    int n = 1;
    for (; args[n - 1]; n++) argv[n] = args[n - 1];
    argv[n++] = "-m";
    argv[n++] = model;
    argv[n] = NULL;
    cli_result r = cli_run((char *const *)argv);
    cr_assert_eq(r.status, 0, "coli %s: exit %d: %s", args[0], r.status, r.err);
    char *out = r.out;
    r.out = NULL;
    cli_result_free(&r);
    return out;
}

Test(ds4, run_and_perplexity_workers_equal_inproc, .init = s_fam_env) {
    fam_ref r;
    char model[4096], text[4200];
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    snprintf(text, sizeof text, "%s/ds4-ppl-%d.txt", s_build(), (int)getpid());
    FILE *f = fopen(text, "w");
    cr_assert(f);
    for (int i = 0; i < 12; i++) fprintf(f, "%s. ", DS4_PROMPT);
    fclose(f);
    const char *run_a[] = {"run", "--inproc", "-p", DS4_PROMPT, "-n", "12", "--temp", "0", NULL};
    const char *run_b[] = {"run", "--devices", "cpu:2", "-p", DS4_PROMPT, "-n", "12", "--temp", "0", NULL};
    const char *ppl_a[] = {"perplexity", "--inproc", "-f", text, "-c", "64", NULL};
    const char *ppl_b[] = {"perplexity", "--devices", "cpu:2", "-f", text, "-c", "64", NULL};
    char *a = s_coli(model, run_a), *b = s_coli(model, run_b);
    cr_expect(strlen(a) > 0 && strcmp(a, b) == 0, "coli run: inproc '%s', cpu:2 '%s'", a, b);
    char *pa = s_coli(model, ppl_a), *pb = s_coli(model, ppl_b);
    cr_expect(strstr(pa, "perplexity") && strcmp(pa, pb) == 0, "coli perplexity: inproc '%s', cpu:2 '%s'", pa, pb);
    free(a);
    free(b);
    free(pa);
    free(pb);
    unlink(text);
    sched_assert_no_orphans();
}

Test(ds4, serve_greedy_equals_run) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    const char *run[] = {"run", "--inproc", "-p", DS4_PROMPT, "-n", "12", "--temp", "0", NULL};
    char *want = s_coli(model, run);
    const size_t n = strlen(want);
    if (n && want[n - 1] == '\n') want[n - 1] = '\0'; /* run ends its output with a newline */
    const char *extra[] = {"--inproc", NULL};
    serve_proc p = su_start(model, extra);
    http_resp h =
        su_post(p.port, "/v1/completions", "{\"prompt\":\"" DS4_PROMPT "\",\"max_tokens\":12,\"temperature\":0}");
    cr_assert_eq(h.status, 200, "%s", h.body);
    cJSON *j = cJSON_Parse(h.body);
    cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    cr_assert(cJSON_IsString(t), "%s", h.body);
    cr_expect_str_eq(t->valuestring, want, "serve's greedy text differs from coli run's");
    cJSON_Delete(j);
    su_free(&h);
    cr_expect_eq(su_stop(&p), 0);
    free(want);
}

/* Three sequences answered together in one batch give the tokens each
 * gets alone: rows of different sequences in one pass, their compressed
 * blocks completing at different steps (prompts of 125, 127 and 130
 * tokens: the 128-position block completes at the first or third decode
 * step, or already has, and the 4-position ones at different steps).
 * Prompts are prefilled alone, in chunks under the batch's lock, and join
 * for the decode: prompts of nearly one length join at nearly one time,
 * so their decode steps overlap (a 37-token prompt's whole answer used to
 * be done before a 130-token one had joined, on a quiet machine). */
Test(ds4, batched_equals_alone) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_ds4_long, &r, model, sizeof model);
    coli_model *m = sched_load(model, "inproc");
    const int lens[3] = {125, 127, 130};
    gen_run alone[3], together[3];
    coli_batch *b = NULL;
    for (int i = 0; i < 3; i++) {
        alone[i] = (gen_run){.prompt = r.ids + i, .n_prompt = lens[i]};
        cr_assert_eq(coli_context_new(m, NULL, &alone[i].ctx), 0);
        s_generate(&alone[i]);
        cr_assert_eq(alone[i].rc, 0, "%s", coli_last_error());
    }
    cr_expect_gt(s_run_batched(m, 3, 3, alone, together, &b), 1, "the sequences never shared a step (5 tries)");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(together[i].rc, 0, "%s", coli_last_error());
        cr_expect_eq(together[i].n_out, alone[i].n_out);
        cr_expect(memcmp(together[i].out, alone[i].out, (size_t)alone[i].n_out * sizeof(int32_t)) == 0,
                  "sequence %d batched differs from alone", i);
        coli_context_free(&alone[i].ctx);
        coli_context_free(&together[i].ctx);
    }
    coli_batch_free(&b);
    coli_model_free(&m);
}

/* A context of 8 positions, as long as the window: a query attends to every
 * raw position plus its compressed blocks (more keys than positions), and
 * gets the logits of a roomy context, bit for bit. */
Test(ds4, context_shorter_than_window_plus_blocks) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    int nv = 0;
    float *all = s_eval_kv(model, "inproc", 0, r.ids, 8, &nv);
    coli_model *m = sched_load(model, "inproc");
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = 8;
    coli_context *ctx = NULL;
    float *lg = malloc((size_t)8 * (size_t)nv * sizeof(float));
    cr_assert_eq(coli_context_new(m, &cp, &ctx), 0, "%s", coli_last_error());
    cr_assert_eq(coli_eval(ctx, r.ids, 8, lg, 1), 0, "%s", coli_last_error());
    cr_expect(memcmp(lg, all, (size_t)8 * (size_t)nv * sizeof(float)) == 0, "a context of 8 changes the logits");
    coli_context_free(&ctx);
    coli_model_free(&m);
    free(lg);
    free(all);
}

/* ---- refusals ------------------------------------------------------------ */

#define MISSING_KEY(tname, k) \
    Test(ds4, refuses_missing_##tname) { s_refused(&k_ds4, &(edit){.drop_key = k}, "deepseek4." k); }
MISSING_KEY(q_lora_rank, "attention.q_lora_rank")
MISSING_KEY(sliding_window, "attention.sliding_window")
MISSING_KEY(output_group_count, "attention.output_group_count")
MISSING_KEY(output_lora_rank, "attention.output_lora_rank")
MISSING_KEY(compress_ratios, "attention.compress_ratios")
MISSING_KEY(compress_rope_freq_base, "attention.compress_rope_freq_base")
MISSING_KEY(indexer_top_k, "attention.indexer.top_k")
MISSING_KEY(hc_count, "hyper_connection.count")
MISSING_KEY(hc_sinkhorn, "hyper_connection.sinkhorn_iterations")
MISSING_KEY(hc_epsilon, "hyper_connection.epsilon")
MISSING_KEY(expert_weights_scale, "expert_weights_scale")
MISSING_KEY(expert_weights_norm, "expert_weights_norm")

#define MISSING_TENSOR(tname, t) \
    Test(ds4, refuses_missing_##tname) { s_refused(&k_ds4, &(edit){.drop_tensor = t}, t); }
MISSING_TENSOR(hc_head, "output_hc_fn.weight")
MISSING_TENSOR(hc_ffn_fn, "blk.0.hc_ffn_fn.weight")
MISSING_TENSOR(compressor, "blk.2.attn_compressor_kv.weight")
MISSING_TENSOR(indexer_compressor, "blk.1.indexer_compressor_ape.weight")
MISSING_TENSOR(output_a, "blk.1.attn_output_a.weight")
MISSING_TENSOR(sinks, "blk.0.attn_sinks.weight")
MISSING_TENSOR(mtp_enorm, "blk.3.nextn.enorm.weight")
MISSING_TENSOR(mtp_block, "blk.3.hc_attn_fn.weight")

/* The MTP block (blk.3) is loaded and validated, not run: 3 layers. */
Test(ds4, mtp_block_loaded_not_run) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_ds4, &r, model, sizeof model);
    struct model *m = NULL;
    cr_assert_eq(model_open(model, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->hp.n_layer, 3);
    cr_expect_eq(m->n_nextn, 1);
    cr_expect(m->nextn && m->nextn[0].eh_proj && m->nextn[0].layer.router, "the MTP block's tensors");
    model_close(&m);
}

static void s_ratio_8(gguf_writer *w) {
    const uint32_t v[4] = {0, 8, 128, 0};
    gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_UINT32, v, 4);
}
static void s_ratios_short(gguf_writer *w) { /* the MTP block's entry missing */
    const uint32_t v[3] = {0, 4, 128};
    gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_UINT32, v, 3);
}
static void s_hash2(gguf_writer *w) { gguf_writer_set_u32(w, "deepseek4.hash_layer_count", 2); }
static void s_softmax(gguf_writer *w) { gguf_writer_set_u32(w, "deepseek4.expert_gating_func", 1); }
static void s_hc3(gguf_writer *w) { gguf_writer_set_u32(w, "deepseek4.hyper_connection.count", 3); }
static void s_groups3(gguf_writer *w) { gguf_writer_set_u32(w, "deepseek4.attention.output_group_count", 3); }
static void s_idx48(gguf_writer *w) { gguf_writer_set_u32(w, "deepseek4.attention.indexer.key_length", 48); }
static void s_kv2(gguf_writer *w) { gguf_writer_set_u32(w, "deepseek4.attention.head_count_kv", 2); }
static void s_clamp_neg(gguf_writer *w) {
    const float v[4] = {1.0f, -1.0f, 1.0f, 1.0f};
    gguf_writer_set_arr(w, "deepseek4.swiglu_clamp_shexp", GGUF_FLOAT32, v, 4);
}

Test(ds4, refuses_ratio_8) {
    s_refused(&k_ds4, &(edit){.kvs = s_ratio_8}, "deepseek4.attention.compress_ratios': block 1: ratio 8");
}
Test(ds4, refuses_short_ratios) {
    s_refused(&k_ds4, &(edit){.kvs = s_ratios_short}, "deepseek4.attention.compress_ratios");
}
Test(ds4, refuses_hash_layer_without_table) {
    s_refused(&k_ds4, &(edit){.kvs = s_hash2}, "blk.1.ffn_gate_tid2eid.weight");
}
MISSING_TENSOR(tid2eid, "blk.0.ffn_gate_tid2eid.weight")

/* A table entry naming expert 8 of 8 (it would index past the router). */
Test(ds4, refuses_hash_table_out_of_range) {
    fam_ref r;
    char src[4096], dst[4200];
    s_ref_and_model(&k_ds4, &r, src, sizeof src);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    int32_t *bad = NULL;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        const void *data = t->data;
        if (!strcmp(t->name, "blk.0.ffn_gate_tid2eid.weight")) {
            bad = malloc(t->nbytes);
            memcpy(bad, t->data, t->nbytes);
            bad[2 * 77 + 1] = 8; /* token 77's second expert */
            data = bad;
        }
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data, t->nbytes), 0);
    }
    cr_assert(bad, "no table in the model");
    snprintf(dst, sizeof dst, "%s/edit-%d-tid2eid.gguf", s_build(), (int)getpid());
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
    free(bad);
    struct model *m = NULL;
    cr_expect_lt(model_open(dst, &m), 0, "loaded");
    const char *err = coli_last_error();
    cr_expect(strstr(err, "blk.0.ffn_gate_tid2eid.weight': token 77: expert 8 out of range [0, 8)") != NULL, "%s", err);
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    model_close(&m);
    unlink(dst);
}
Test(ds4, refuses_softmax_gating) { s_refused(&k_ds4, &(edit){.kvs = s_softmax}, "deepseek4.expert_gating_func"); }
Test(ds4, refuses_three_streams) { s_refused(&k_ds4, &(edit){.kvs = s_hc3}, "deepseek4.hyper_connection.count"); }
Test(ds4, refuses_groups_not_dividing_heads) {
    s_refused(&k_ds4, &(edit){.kvs = s_groups3}, "deepseek4.attention.output_group_count");
}
Test(ds4, refuses_indexer_width_without_rotation) {
    s_refused(&k_ds4, &(edit){.kvs = s_idx48}, "deepseek4.attention.indexer.key_length");
}
Test(ds4, refuses_two_kv_heads) { s_refused(&k_ds4, &(edit){.kvs = s_kv2}, "head_count_kv 2"); }
Test(ds4, refuses_negative_clamp) { s_refused(&k_ds4, &(edit){.kvs = s_clamp_neg}, "deepseek4.swiglu_clamp_shexp"); }
