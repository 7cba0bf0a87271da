#!/usr/bin/env python3
"""A tiny DeepSeek-V4 model (deepseek4).

    gen_ds4.py [--yarn] OUT.gguf      --yarn: the same weights with YaRN rope scaling (factor 4, original
                                      context 64), which the compressed layers' rope takes

Deterministic (numpy default_rng, fixed seed; the draw order defines the model), names, shapes and
keys as llama.cpp de3ff815 reads them (src/models/deepseek4.cpp). Three layers, one of each kind of
attention: compress_ratios [0, 4, 128] = a sliding-window layer (window 8), a CSA layer (blocks of 4
positions compressed with overlap, a lightning indexer choosing the top 2 blocks: a 24-token prompt
takes the sparse path) and an HCA layer (blocks of 128, no indexer: a prompt past 128 positions
reaches it). Four hyper-connection streams (3 Sinkhorn iterations), the grouped low-rank output
(2 groups of 2 heads), sqrt(softplus) routing with a selection bias, the clamped SwiGLU (limit 1
on the routed experts, 1.5 on the shared expert: small enough that the clamps act), one shared
expert; layer 0 routed by token id (hash_layer_count 1: ffn_gate_tid2eid, an I32 table of 2 distinct
experts per token, drawn from its own generator, seed + 1). A trailing MTP block (nextn_predict_layers 1,
compress ratio 0: a full block plus nextn.eh_proj / enorm / hnorm / shared_head_norm), loaded and not run.
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T  # noqa: E402

CFG = dict(vocab="tiny-spm-3000", seed=2604, n_embd=64, n_head=4, head_dim=32, n_rot=16, q_lora=32,
           o_groups=2, o_lora=16, n_expert=8, n_expert_used=2, n_ff_exp=32, n_expert_shared=1,
           ratios=[0, 4, 128], n_swa=8, idx_heads=2, idx_dim=64, idx_top_k=2, hc=4, sinkhorn=3,
           hc_eps=1e-6, n_hash=1, n_mtp=1, clamp_exp=1.0, clamp_shexp=1.5, weights_scale=1.5, rope_theta=1e4,
           compress_theta=16e4, eps=1e-6, ctx=512)


def tid2eid(c):
    """(n_vocab, n_expert_used) int32: distinct experts for each token id."""
    rng = np.random.default_rng(c["seed"] + 1)
    return np.stack([rng.permutation(c["n_expert"])[:c["n_expert_used"]] for _ in range(c["n_vocab"])]).astype("<i4")


def gen_weights(c):
    d = mm.Draw(c["seed"])
    E, H, D, K, X = c["n_embd"], c["n_head"], c["head_dim"], c["n_vocab"], c["n_expert"]
    HC, MIX, G, OL, QR = c["hc"], (2 + c["hc"]) * c["hc"], c["o_groups"], c["o_lora"], c["q_lora"]
    FFE, S, IH, ID = c["n_ff_exp"], c["n_ff_exp"] * c["n_expert_shared"], c["idx_heads"], c["idx_dim"]
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    yield "output_hc_fn.weight", d.mat(HC, HC * E, 2.0)                          # ne [hc E, hc]
    yield "output_hc_base.weight", d.vec(HC, 0.5)
    yield "output_hc_scale.weight", d.vec(1, 0.5) + np.float32(1.0)
    for i, r in enumerate(c["ratios"] + [0] * c["n_mtp"]):           # the MTP blocks: ratio 0
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "attn_sinks.weight", d.vec(H, 1.0)
        yield p + "attn_q_a.weight", d.mat(QR, E)
        yield p + "attn_q_a_norm.weight", d.norm(QR)
        yield p + "attn_q_b.weight", d.mat(H * D, QR, 1.5)
        yield p + "attn_kv.weight", d.mat(D, E, 1.5)
        yield p + "attn_kv_a_norm.weight", d.norm(D)
        yield p + "attn_output_a.weight", d.mat(G * OL, H * D // G)              # ne [H D / G, G o_lora]
        yield p + "attn_output_b.weight", d.mat(E, G * OL)
        for part in ("attn", "ffn"):
            yield p + f"hc_{part}_fn.weight", d.mat(MIX, HC * E, 2.0)            # ne [hc E, (2 + hc) hc]
            yield p + f"hc_{part}_base.weight", d.vec(MIX, 0.5)
            yield p + f"hc_{part}_scale.weight", d.vec(3, 0.5) + np.float32(1.0)
        if r:
            coff = 2 if r == 4 else 1
            yield p + "attn_compressor_kv.weight", d.mat(coff * D, E, 1.5)
            yield p + "attn_compressor_gate.weight", d.mat(coff * D, E, 2.0)
            yield p + "attn_compressor_ape.weight", d.mat(r, coff * D, 1.0 * np.sqrt(coff * D))  # ne [coff D, r]
            yield p + "attn_compressor_norm.weight", d.norm(D)
        if r == 4:
            yield p + "indexer.proj.weight", d.mat(IH, E, 4.0)
            yield p + "indexer.attn_q_b.weight", d.mat(IH * ID, QR, 2.0)
            yield p + "indexer_compressor_kv.weight", d.mat(2 * ID, E, 1.5)
            yield p + "indexer_compressor_gate.weight", d.mat(2 * ID, E, 2.0)
            yield p + "indexer_compressor_ape.weight", d.mat(r, 2 * ID, np.sqrt(2 * ID))
            yield p + "indexer_compressor_norm.weight", d.norm(ID)
        yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
        if i < c["n_hash"]:
            yield p + "ffn_gate_tid2eid.weight", tid2eid(c)
        else:
            yield p + "exp_probs_b.bias", d.vec(X, 0.3)
        yield p + "ffn_norm.weight", d.norm(E)
        yield p + "ffn_gate_exps.weight", d.mat(FFE, E, 2.0, X)
        yield p + "ffn_up_exps.weight", d.mat(FFE, E, 2.0, X)
        yield p + "ffn_down_exps.weight", d.mat(E, FFE, 1.0, X)
        yield p + "ffn_gate_shexp.weight", d.mat(S, E, 2.0)
        yield p + "ffn_up_shexp.weight", d.mat(S, E, 2.0)
        yield p + "ffn_down_shexp.weight", d.mat(E, S)
        if i >= len(c["ratios"]):
            yield p + "nextn.eh_proj.weight", d.mat(E, 2 * E)                 # ne [2 E, E]
            yield p + "nextn.enorm.weight", d.norm(E)
            yield p + "nextn.hnorm.weight", d.norm(E)
            yield p + "nextn.shared_head_norm.weight", d.norm(E)


def write_kvs(w, c):
    A, U, F = "deepseek4.", T.UINT32, T.FLOAT32
    L = len(c["ratios"]) + c["n_mtp"]
    w.add(A + "context_length", c["ctx"], U)
    w.add(A + "embedding_length", c["n_embd"], U)
    w.add(A + "block_count", L, U)
    w.add(A + "nextn_predict_layers", c["n_mtp"], U)
    w.add(A + "feed_forward_length", c["n_ff_exp"], U)
    w.add(A + "attention.head_count", c["n_head"], U)
    w.add(A + "attention.head_count_kv", 1, U)
    w.add(A + "attention.key_length", c["head_dim"], U)
    w.add(A + "attention.value_length", c["head_dim"], U)
    w.add(A + "rope.dimension_count", c["n_rot"], U)
    w.add(A + "rope.freq_base", float(c["rope_theta"]), F)
    w.add(A + "attention.layer_norm_rms_epsilon", float(c["eps"]), F)
    w.add(A + "attention.q_lora_rank", c["q_lora"], U)
    w.add(A + "attention.sliding_window", c["n_swa"], U)
    w.add(A + "attention.output_group_count", c["o_groups"], U)
    w.add(A + "attention.output_lora_rank", c["o_lora"], U)
    w.add(A + "attention.compress_rope_freq_base", float(c["compress_theta"]), F)
    w.add(A + "attention.compress_ratios", list(c["ratios"]) + [0] * c["n_mtp"], T.ARRAY, T.UINT32)
    w.add(A + "attention.indexer.head_count", c["idx_heads"], U)
    w.add(A + "attention.indexer.key_length", c["idx_dim"], U)
    w.add(A + "attention.indexer.top_k", c["idx_top_k"], U)
    w.add(A + "expert_count", c["n_expert"], U)
    w.add(A + "expert_used_count", c["n_expert_used"], U)
    w.add(A + "expert_feed_forward_length", c["n_ff_exp"], U)
    w.add(A + "expert_shared_count", c["n_expert_shared"], U)
    w.add(A + "expert_weights_scale", float(c["weights_scale"]), F)
    w.add(A + "expert_weights_norm", True, T.BOOL)
    w.add(A + "expert_gating_func", 4, U)                                       # sqrt(softplus)
    w.add(A + "swiglu_clamp_exp", [float(c["clamp_exp"])] * L, T.ARRAY, T.FLOAT32)
    w.add(A + "swiglu_clamp_shexp", [float(c["clamp_shexp"])] * L, T.ARRAY, T.FLOAT32)
    w.add(A + "hyper_connection.count", c["hc"], U)
    w.add(A + "hyper_connection.sinkhorn_iterations", c["sinkhorn"], U)
    w.add(A + "hyper_connection.epsilon", float(c["hc_eps"]), F)
    w.add(A + "hash_layer_count", c["n_hash"], U)
    if c.get("yarn"):
        w.add(A + "rope.scaling.type", "yarn")
        w.add(A + "rope.scaling.factor", float(c["yarn"][0]), F)
        w.add(A + "rope.scaling.original_context_length", c["yarn"][1], U)
    w.add(A + "vocab_size", c["n_vocab"], U)


def write_model(path, yarn=False):
    vocab = mm.read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS[CFG["vocab"]]))
    c = dict(CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]), yarn=(4.0, 64) if yarn else None)
    w = GGUFWriter(path)
    w.add("general.architecture", "deepseek4")
    w.add("general.name", "tiny-deepseek4")
    w.add("general.file_type", 0, T.UINT32)
    write_kvs(w, c)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(c):
        if arr.dtype == np.int32:                   # the writer has no I32: GGML type 26, 4 bytes a value
            w.tensors.append((name, list(reversed(arr.shape)), 26, np.ascontiguousarray(arr).tobytes()))
        else:
            w.add_tensor(name, arr, "F32")
    w.write()


if __name__ == "__main__":
    args = sys.argv[1:]
    yarn = args[:1] == ["--yarn"]
    if len(args) != 1 + yarn:
        sys.exit("usage: gen_ds4.py [--yarn] OUT.gguf")
    write_model(args[-1], yarn)
