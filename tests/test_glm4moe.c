/*
 * test_glm4moe.c - the glm4moe family (GLM-4.5 / 4.6 / 4.7) on a tiny model
 * written by tests/gen_glm4moe.py (layer 0 dense, two MoE layers with the
 * sigmoid + exp_probs_b router and a shared expert, q/k/v biases, per-head
 * q/k norm, rope on half of each head, a NextN block appended; and its
 * GLM-4.5-Air flavour: no q/k norm, no gating key, scale 1), generated
 * on first use into $COLI_BUILD/ref and checked against the sha256 its
 * llama.cpp logits were recorded for (tests/fixtures/glm4moe/README).
 *
 * - the F32 rule of ../shared/reference: F32 KV cache, every recorded
 *   logit (top 20 of 32 positions) within 1e-3 of llama.cpp de3ff815, the
 *   same argmax everywhere; F16 KV against llama.cpp's F16-KV run within
 *   1e-2; greedy steps while llama.cpp's margin >= 0.05;
 * - two workers and a worker SIGKILLed mid-run give --inproc's bytes;
 * - the NextN block is loaded and validated, never run;
 * - each required key missing, and inconsistent metadata or tensors, is
 *   refused with one line naming the key or tensor.
 */
#include "tests/family_ref.h"

static const family k_glm = {"tiny-glm4moe-f32.gguf", "tests/gen_glm4moe.py",
                             "tests/fixtures/glm4moe/tiny-glm4moe-f32.txt", "glm4moe."};

/* GLM-4.5-Air's flavour: no q/k norm, the gating key absent (sigmoid by default), scale 1 */
static const family k_air = {"tiny-glm4moe-air-f32.gguf", "tests/gen_glm4moe.py --air",
                             "tests/fixtures/glm4moe/tiny-glm4moe-air-f32.txt", "glm4moe."};

TestSuite(glm4moe, .timeout = 120);

Test(glm4moe, f32_kv_matches_llamacpp) { s_check_f32(&k_glm); }
Test(glm4moe, f16_kv_matches_llamacpp_f16_kv) { s_check_rule(&k_glm, 1); }
/* llama.cpp's greedy margins: 0.30, 0.26, then 0.009 */
Test(glm4moe, greedy_matches_llamacpp) { s_check_greedy(&k_glm, 2); }
/* the two MoE layers' experts, not the dense layer's or the NextN block's */
Test(glm4moe, workers_give_inproc_bytes, .init = s_fam_env) { s_check_workers(&k_glm, 2 * 8); }
Test(glm4moe, worker_sigkill_gives_inproc_bytes, .init = s_fam_env) { s_check_sigkill(&k_glm); }
Test(glm4moe, air_f32_kv_matches_llamacpp) { s_check_f32(&k_air); }
Test(glm4moe, air_f16_kv_matches_llamacpp_f16_kv) { s_check_rule(&k_air, 1); }
/* llama.cpp's greedy margins: 0.12, 0.17, 0.75, 0.18, 0.072, 0.47, 0.97, 0.82 */
Test(glm4moe, air_greedy_matches_llamacpp) { s_check_greedy(&k_air, 8); }
Test(glm4moe, air_workers_give_inproc_bytes, .init = s_fam_env) { s_check_workers(&k_air, 2 * 8); }

Test(glm4moe, nextn_block_loaded_not_run) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_glm, &r, model, sizeof model);
    struct model *m = NULL;
    cr_assert_eq(model_open(model, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->hp.n_layer, 3);
    cr_expect_eq(m->hp.n_layer_nextn, 1);
    cr_assert_eq(m->n_nextn, 1);
    const nextn_weights *nx = &m->nextn[0];
    cr_expect(nx->eh_proj && nx->enorm && nx->hnorm && nx->embed_tokens && nx->head && nx->head_norm);
    cr_expect(nx->layer.router && nx->layer.exp_probs_b && nx->layer.has_shexp && nx->layer.q_norm);
    cr_expect_str_eq(nx->eh_proj->name, "blk.3.nextn.eh_proj.weight");
    model_close(&m);
    /* the same file without the block (a trunk-only conversion): the same logit bytes */
    const edit trunk = {.drop_tensor = "blk.3."};
    const char *path = s_rewrite(&k_glm, model, &trunk);
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->n_nextn, 0);
    model_close(&m);
    int nv = 0, nv2 = 0;
    float *a = s_eval_kv(model, "inproc", 0, r.ids, 8, &nv), *b = s_eval_kv(path, "cpu:1", 0, r.ids, 8, &nv2);
    cr_assert_eq(nv, nv2);
    cr_expect(memcmp(a, b, (size_t)8 * (size_t)nv * sizeof(float)) == 0, "logits change with the NextN block");
    char *plan = NULL;
    cr_assert_eq(coli_plan_text(model, "cpu:2", &plan), 0, "%s", coli_last_error());
    cr_expect(strstr(plan, "3 layers") && !strstr(plan, "layer   3:"), "plan places the NextN block: %s", plan);
    free(plan);
    free(a);
    free(b);
    unlink(path);
}

Test(glm4moe, refuses_nextn_block_missing_a_tensor) {
    s_refused(&k_glm, &(edit){.drop_tensor = "blk.3.nextn.enorm."}, "blk.3.nextn.enorm.weight");
}

Test(glm4moe, refuses_mtp_only_file) { s_refused(&k_glm, &(edit){.drop_tensor = "blk.0."}, "NextN"); }

/* One test per key the family needs (llama.cpp refuses these files too). */
#define MISSING_KEY(tname, k) \
    Test(glm4moe, refuses_missing_##tname) { s_refused(&k_glm, &(edit){.drop_key = k}, "glm4moe." k); }
MISSING_KEY(block_count, "block_count")
MISSING_KEY(context_length, "context_length")
MISSING_KEY(embedding_length, "embedding_length")
MISSING_KEY(feed_forward_length, "feed_forward_length")
MISSING_KEY(head_count, "attention.head_count")
MISSING_KEY(rms_epsilon, "attention.layer_norm_rms_epsilon")
MISSING_KEY(expert_count, "expert_count")
MISSING_KEY(expert_used_count, "expert_used_count")
MISSING_KEY(expert_feed_forward_length, "expert_feed_forward_length")
MISSING_KEY(expert_shared_count, "expert_shared_count")

static void s_value_length(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.attention.value_length", 32); }
static void s_no_shared(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.expert_shared_count", 0); }
static void s_dense_lead(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.leading_dense_block_count", 4); }
static void s_nextn_all(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.nextn_predict_layers", 4); }
static void s_rope_dims(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.rope.dimension_count", 50); }
static void s_mrope(gguf_writer *w) {
    const int32_t sec[4] = {8, 8, 8, 0};
    gguf_writer_set_arr(w, "glm4moe.rope.dimension_sections", GGUF_INT32, sec, 4);
}

Test(glm4moe, refuses_value_length_not_key_length) {
    s_refused(&k_glm, &(edit){.kvs = s_value_length}, "glm4moe.attention.value_length");
}
Test(glm4moe, refuses_no_shared_expert) {
    s_refused(&k_glm, &(edit){.kvs = s_no_shared}, "glm4moe.expert_shared_count");
}
Test(glm4moe, refuses_dense_lead_past_layers) {
    s_refused(&k_glm, &(edit){.kvs = s_dense_lead}, "glm4moe.leading_dense_block_count");
}
Test(glm4moe, refuses_nextn_without_trunk) {
    s_refused(&k_glm, &(edit){.kvs = s_nextn_all}, "glm4moe.nextn_predict_layers");
}
Test(glm4moe, refuses_rope_dims_past_head) {
    s_refused(&k_glm, &(edit){.kvs = s_rope_dims}, "glm4moe.rope.dimension_count");
}
Test(glm4moe, refuses_mrope_sections) { s_refused(&k_glm, &(edit){.kvs = s_mrope}, "glm4moe.rope.dimension_sections"); }
Test(glm4moe, refuses_missing_selection_bias) {
    s_refused(&k_glm, &(edit){.drop_tensor = "blk.2.exp_probs_b."}, "blk.2.exp_probs_b.bias");
}
Test(glm4moe, refuses_k_norm_without_q_norm) {
    s_refused(&k_glm, &(edit){.drop_tensor = "blk.1.attn_q_norm."}, "blk.1.attn_q_norm.weight");
}
