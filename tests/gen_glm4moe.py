#!/usr/bin/env python3
"""A tiny glm4moe (GLM-4.5 / 4.6 layout) model, deterministic (python3 + numpy only).

    gen_glm4moe.py MODEL.gguf [--air]

Writes MODEL.gguf with ../shared/reference/gen (gguf_tiny's writer, make_models.py's weight scales and
its tiny 3000-token SPM vocabulary) in the layout llama.cpp's converter (conversion/glm.py, Glm4MoeModel)
writes: layer 0 dense, layers 1-2 MoE (8 experts top-3, sigmoid router with the exp_probs_b selection bias,
weights renormalised and scaled by 2.5, one shared expert), q/k/v biases, per-head q/k RMS norm, head width
key_length 48 (not n_embd / n_head) with only its first 24 dims rotated (NEOX pairs), GQA 4/2, the FFN
norm named post_attention_norm, and one NextN (multi-token prediction) block appended as blk.3
(nextn_predict_layers 1): a full MoE block plus eh_proj, enorm, hnorm, embed_tokens, shared_head_head and
shared_head_norm. Everything F32. Seed 2301; the draw order below defines the model.

--air: the GLM-4.5-Air flavour (seed 2303): no q/k norm, no expert_gating_func key (sigmoid by default
for this family), expert_weights_scale 1, otherwise the same.
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T, read_gguf  # noqa: E402

CFG = dict(seed=2301, n_embd=128, n_layer=3, n_nextn=1, n_head=4, n_head_kv=2, head_dim=48, n_rot=24,
           n_ff=256, n_ff_exp=64, n_expert=8, n_expert_used=3, n_expert_shared=1, n_dense_lead=1,
           weights_scale=2.5, rope_theta=1e6, eps=1e-5, ctx=512, qk_norm=True, gating_key=True)
AIR = dict(CFG, seed=2303, weights_scale=1.0, qk_norm=False, gating_key=False)


def write_kvs(w, c):
    A, U = "glm4moe.", T.UINT32
    w.add("general.architecture", "glm4moe")
    w.add("general.name", "tiny-glm4moe" if c["qk_norm"] else "tiny-glm4moe-air")
    w.add("general.file_type", 0, U)
    w.add(A + "block_count", c["n_layer"] + c["n_nextn"], U)
    w.add(A + "context_length", c["ctx"], U)
    w.add(A + "embedding_length", c["n_embd"], U)
    w.add(A + "feed_forward_length", c["n_ff"], U)
    w.add(A + "attention.head_count", c["n_head"], U)
    w.add(A + "attention.head_count_kv", c["n_head_kv"], U)
    w.add(A + "attention.key_length", c["head_dim"], U)
    w.add(A + "attention.value_length", c["head_dim"], U)
    w.add(A + "rope.freq_base", float(c["rope_theta"]), T.FLOAT32)
    w.add(A + "attention.layer_norm_rms_epsilon", float(c["eps"]), T.FLOAT32)
    w.add(A + "expert_count", c["n_expert"], U)
    w.add(A + "expert_used_count", c["n_expert_used"], U)
    w.add(A + "rope.dimension_count", c["n_rot"], U)
    w.add(A + "expert_feed_forward_length", c["n_ff_exp"], U)
    w.add(A + "expert_shared_count", c["n_expert_shared"], U)
    w.add(A + "leading_dense_block_count", c["n_dense_lead"], U)
    if c["gating_key"]:
        w.add(A + "expert_gating_func", 2, U)                                    # sigmoid
    w.add(A + "expert_weights_scale", float(c["weights_scale"]), T.FLOAT32)
    w.add(A + "expert_weights_norm", True, T.BOOL)
    w.add(A + "nextn_predict_layers", c["n_nextn"], U)


def gen_weights(c):
    """(name, float32 array) in draw order; numpy shape = reversed ggml ne."""
    d = mm.Draw(c["seed"])
    E, H, HKV, hd, K, X = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_vocab"], c["n_expert"]
    FF, FFE, S = c["n_ff"], c["n_ff_exp"], c["n_ff_exp"] * c["n_expert_shared"]
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    for i in range(c["n_layer"] + c["n_nextn"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "attn_q.weight", d.mat(H * hd, E, 1.5)
        yield p + "attn_k.weight", d.mat(HKV * hd, E, 1.5)
        yield p + "attn_v.weight", d.mat(HKV * hd, E)
        yield p + "attn_q.bias", d.vec(H * hd, 0.1)
        yield p + "attn_k.bias", d.vec(HKV * hd, 0.1)
        yield p + "attn_v.bias", d.vec(HKV * hd, 0.1)
        yield p + "attn_output.weight", d.mat(E, H * hd)
        if c["qk_norm"]:
            yield p + "attn_q_norm.weight", d.norm(hd)                            # per head
            yield p + "attn_k_norm.weight", d.norm(hd)
        yield p + "post_attention_norm.weight", d.norm(E)                         # the FFN's norm
        if i < c["n_dense_lead"]:
            yield p + "ffn_gate.weight", d.mat(FF, E)
            yield p + "ffn_up.weight", d.mat(FF, E)
            yield p + "ffn_down.weight", d.mat(E, FF)
            continue
        yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
        yield p + "exp_probs_b.bias", d.vec(X, 0.3)
        yield p + "ffn_gate_exps.weight", d.mat(FFE, E, 1.0, X)
        yield p + "ffn_up_exps.weight", d.mat(FFE, E, 1.0, X)
        yield p + "ffn_down_exps.weight", d.mat(E, FFE, 1.0, X)
        yield p + "ffn_gate_shexp.weight", d.mat(S, E)
        yield p + "ffn_up_shexp.weight", d.mat(S, E)
        yield p + "ffn_down_shexp.weight", d.mat(E, S)
        if i < c["n_layer"]:
            continue
        yield p + "nextn.eh_proj.weight", d.mat(E, 2 * E)                         # [n_embd, 2 n_embd]
        yield p + "nextn.enorm.weight", d.norm(E)
        yield p + "nextn.hnorm.weight", d.norm(E)
        yield p + "nextn.embed_tokens.weight", d.embd(K, E)
        yield p + "nextn.shared_head_head.weight", d.mat(K, E, 2.0)
        yield p + "nextn.shared_head_norm.weight", d.norm(E)


def main():
    vocab = read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS["tiny-spm-3000"]))
    cfg = dict(AIR if "--air" in sys.argv[1:] else CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]))
    w = GGUFWriter([a for a in sys.argv[1:] if not a.startswith("--")][0])
    write_kvs(w, cfg)
    w.add("glm4moe.vocab_size", cfg["n_vocab"], T.UINT32)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(cfg):
        w.add_tensor(name, arr, "F32")
    w.write()


if __name__ == "__main__":
    main()
