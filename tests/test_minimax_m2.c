/*
 * test_minimax_m2.c - the minimax-m2 family (MiniMax-M2) on a tiny model
 * written by tests/gen_minimax_m2.py (three MoE layers, sigmoid +
 * exp_probs_b router renormalised, no shared expert, RMS q/k norm over the
 * whole q and k, rope on half of each head, GQA), generated on first use
 * into $COLI_BUILD/ref and checked against the sha256 its llama.cpp logits
 * were recorded for (tests/fixtures/minimax-m2/README).
 *
 * - the F32 rule of ../shared/reference: F32 KV cache, every recorded
 *   logit (top 20 of 32 positions) within 1e-3 of llama.cpp de3ff815, the
 *   same argmax everywhere; F16 KV against llama.cpp's F16-KV run within
 *   1e-2; greedy steps while llama.cpp's margin >= 0.05;
 * - two workers and a worker SIGKILLed mid-run give --inproc's bytes;
 * - each required key missing, and inconsistent metadata or tensors, is
 *   refused with one line naming the key or tensor.
 */
#include "tests/family_ref.h"

static const family k_mm = {"tiny-minimax-m2-f32.gguf", "tests/gen_minimax_m2.py",
                            "tests/fixtures/minimax-m2/tiny-minimax-m2-f32.txt", "minimax-m2."};

TestSuite(minimax_m2, .timeout = 120);

Test(minimax_m2, f32_kv_matches_llamacpp) { s_check_f32(&k_mm); }
Test(minimax_m2, f16_kv_matches_llamacpp_f16_kv) { s_check_rule(&k_mm, 1); }
/* llama.cpp's greedy margins: 0.60, 0.21, 0.95, 0.41, 1.9, 0.078, 0.45, 0.13 */
Test(minimax_m2, greedy_matches_llamacpp) { s_check_greedy(&k_mm, 8); }
/* every layer's 8 experts */
Test(minimax_m2, workers_give_inproc_bytes, .init = s_fam_env) { s_check_workers(&k_mm, 3 * 8); }
Test(minimax_m2, worker_sigkill_gives_inproc_bytes, .init = s_fam_env) { s_check_sigkill(&k_mm); }

/* the whole-vector norms are loaded as such (not per head) */
Test(minimax_m2, qk_norm_over_whole_vectors) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(&k_mm, &r, model, sizeof model);
    struct model *m = NULL;
    cr_assert_eq(model_open(model, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->hp.n_rot, 24);
    cr_expect_eq(m->hp.head_dim, 48);
    cr_expect_eq(m->hp.gating, GATING_SIGMOID);
    cr_expect(m->hp.renorm_topk);
    for (int il = 0; il < m->hp.n_layer; il++) {
        cr_expect_eq(m->layers[il].qk_norm_per_head, 0);
        cr_expect_eq(m->layers[il].q_norm->ne[0], 4 * 48);
        cr_expect_eq(m->layers[il].k_norm->ne[0], 2 * 48);
        cr_expect(m->layers[il].exp_probs_b && !m->layers[il].has_shexp);
    }
    model_close(&m);
}

/* One test per key the family needs (llama.cpp refuses these files too). */
#define MISSING_KEY(tname, k) \
    Test(minimax_m2, refuses_missing_##tname) { s_refused(&k_mm, &(edit){.drop_key = k}, "minimax-m2." k); }
MISSING_KEY(block_count, "block_count")
MISSING_KEY(context_length, "context_length")
MISSING_KEY(embedding_length, "embedding_length")
MISSING_KEY(feed_forward_length, "feed_forward_length")
MISSING_KEY(head_count, "attention.head_count")
MISSING_KEY(rms_epsilon, "attention.layer_norm_rms_epsilon")
MISSING_KEY(expert_count, "expert_count")
MISSING_KEY(expert_used_count, "expert_used_count")
MISSING_KEY(expert_feed_forward_length, "expert_feed_forward_length")
MISSING_KEY(expert_gating_func, "expert_gating_func")

static void s_gating_3(gguf_writer *w) { gguf_writer_set_u32(w, "minimax-m2.expert_gating_func", 3); }
static void s_ff_exp(gguf_writer *w) { gguf_writer_set_u32(w, "minimax-m2.expert_feed_forward_length", 32); }
static void s_value_length(gguf_writer *w) { gguf_writer_set_u32(w, "minimax-m2.attention.value_length", 32); }
static void s_rope_dims(gguf_writer *w) { gguf_writer_set_u32(w, "minimax-m2.rope.dimension_count", 50); }

Test(minimax_m2, refuses_unknown_gating) {
    s_refused(&k_mm, &(edit){.kvs = s_gating_3}, "minimax-m2.expert_gating_func");
}
Test(minimax_m2, refuses_expert_width_not_ffn_width) {
    s_refused(&k_mm, &(edit){.kvs = s_ff_exp}, "minimax-m2.expert_feed_forward_length");
}
Test(minimax_m2, refuses_value_length_not_key_length) {
    s_refused(&k_mm, &(edit){.kvs = s_value_length}, "minimax-m2.attention.value_length");
}
Test(minimax_m2, refuses_rope_dims_past_head) {
    s_refused(&k_mm, &(edit){.kvs = s_rope_dims}, "minimax-m2.rope.dimension_count");
}
Test(minimax_m2, refuses_missing_selection_bias) {
    s_refused(&k_mm, &(edit){.drop_tensor = "blk.1.exp_probs_b."}, "blk.1.exp_probs_b.bias");
}
Test(minimax_m2, refuses_missing_k_norm) {
    s_refused(&k_mm, &(edit){.drop_tensor = "blk.2.attn_k_norm."}, "blk.2.attn_k_norm.weight");
}
