#!/usr/bin/env python3
"""A tiny gpt-oss model (general.architecture "gpt-oss", llama.cpp's LLM_ARCH_OPENAI_MOE), F32.

    gen_gptoss.py OUT.gguf [--pattern N]

Keys and tensor names as llama.cpp's converter writes them for openai/gpt-oss-20b (conversion/gpt_oss.py:
sliding_window, expert_feed_forward_length, YaRN keys, attn_sinks.weight, biases everywhere). Every layer
kind of the family: 4 layers, so with llama.cpp's default pattern 2 layers 0 and 2 attend through the sliding
window (6 positions, shorter than the test prompts) and 1 and 3 see everything; 8 experts, top-4; head width
48 (q is 192 wide on a 128 residual, as gpt-oss's 64 heads x 64 on 2880). Expert gate/up weights are scaled
so that SWIGLU_OAI's clamp at 7 is reached. The tokenizer is the tiny SPM vocabulary of ../shared (the
engine does not tie the vocabulary to the architecture; gpt-oss's o200k is tested elsewhere).
Weights: numpy default_rng(2301), the conventions of ../shared/reference/gen/make_models.py.
--pattern N also writes gpt-oss.attention.sliding_window_pattern = N (same weights): N = 3 makes layers 0, 1
and 3 SWA and layer 2 full, as llama.cpp's set_swa_pattern decides.
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import T  # noqa: E402

CFG = dict(arch="gpt-oss", vocab="tiny-spm-3000", seed=2301, n_embd=128, n_layer=4, n_head=4, n_head_kv=2,
           head_dim=48, n_expert=8, n_expert_used=4, n_ff_exp=96, n_swa=6, rope_theta=150000.0, yarn_factor=4.0,
           yarn_orig_ctx=128, eps=1e-5, ctx=512)


def write_kvs(w, c):
    A, U, F = "gpt-oss.", T.UINT32, T.FLOAT32
    w.add(A + "block_count", c["n_layer"], U)
    w.add(A + "context_length", c["ctx"], U)
    w.add(A + "embedding_length", c["n_embd"], U)
    w.add(A + "feed_forward_length", c["n_ff_exp"], U)
    w.add(A + "attention.head_count", c["n_head"], U)
    w.add(A + "attention.head_count_kv", c["n_head_kv"], U)
    w.add(A + "rope.freq_base", c["rope_theta"], F)
    w.add(A + "attention.layer_norm_rms_epsilon", c["eps"], F)
    w.add(A + "expert_count", c["n_expert"], U)
    w.add(A + "expert_used_count", c["n_expert_used"], U)
    w.add(A + "attention.key_length", c["head_dim"], U)
    w.add(A + "attention.value_length", c["head_dim"], U)
    w.add(A + "rope.dimension_count", c["head_dim"], U)
    w.add(A + "rope.scaling.type", "yarn")
    w.add(A + "rope.scaling.factor", c["yarn_factor"], F)
    w.add(A + "rope.scaling.original_context_length", c["yarn_orig_ctx"], U)
    w.add(A + "rope.scaling.yarn_beta_fast", 32.0, F)
    w.add(A + "rope.scaling.yarn_beta_slow", 1.0, F)
    w.add(A + "attention.sliding_window", c["n_swa"], U)
    w.add(A + "expert_feed_forward_length", c["n_ff_exp"], U)


def weights(c, n_vocab):
    d = mm.Draw(c["seed"])
    E, H, KV, D, X, F = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_expert"], c["n_ff_exp"]
    yield "token_embd.weight", d.embd(n_vocab, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(n_vocab, E, 2.0)
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "attn_q.weight", d.mat(H * D, E, 1.5)
        yield p + "attn_q.bias", d.vec(H * D, 0.1)
        yield p + "attn_k.weight", d.mat(KV * D, E, 1.5)
        yield p + "attn_k.bias", d.vec(KV * D, 0.1)
        yield p + "attn_v.weight", d.mat(KV * D, E)
        yield p + "attn_v.bias", d.vec(KV * D, 0.1)
        yield p + "attn_output.weight", d.mat(E, H * D)
        yield p + "attn_output.bias", d.vec(E, 0.1)
        yield p + "attn_sinks.weight", d.vec(H, 1.0)
        yield p + "post_attention_norm.weight", d.norm(E)
        yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
        yield p + "ffn_gate_inp.bias", d.vec(X, 0.1)
        yield p + "ffn_gate_exps.weight", d.mat(F, E, 3.0, X)
        yield p + "ffn_gate_exps.bias", d.vec(X * F, 0.1).reshape(X, F)
        yield p + "ffn_up_exps.weight", d.mat(F, E, 3.0, X)
        yield p + "ffn_up_exps.bias", d.vec(X * F, 0.1).reshape(X, F)
        yield p + "ffn_down_exps.weight", d.mat(E, F, 0.5, X)
        yield p + "ffn_down_exps.bias", d.vec(X * E, 0.1).reshape(X, E)


def main():
    path = sys.argv[1]
    pattern = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--pattern" else None
    vocab = mm.read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS[CFG["vocab"]]))
    n_vocab = len(vocab.kv["tokenizer.ggml.tokens"])
    w = mm.GGUFWriter(path)
    w.add("general.architecture", CFG["arch"])
    w.add("general.name", "tiny-gptoss")
    w.add("general.file_type", 0, T.UINT32)
    write_kvs(w, CFG)
    if pattern is not None:
        w.add("gpt-oss.attention.sliding_window_pattern", pattern, T.UINT32)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in weights(CFG, n_vocab):
        w.add_tensor(name, arr, "F32")
    w.write()


if __name__ == "__main__":
    main()
