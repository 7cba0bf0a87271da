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
