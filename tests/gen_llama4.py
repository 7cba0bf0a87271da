#!/usr/bin/env python3
"""A tiny llama4 (Llama-4 Scout layout) model, deterministic (python3 + numpy only).

    gen_llama4.py MODEL.gguf

Writes MODEL.gguf with ../shared/reference/gen (gguf_tiny's writer, make_models.py's weight scales and
its tiny 3000-token SPM vocabulary) in the layout llama.cpp's converter (conversion/llama.py,
Llama4Model) writes: 4 layers; interleave_moe_layer_step 2, so layers 1 and 3 are MoE (4 experts, top-1,
sigmoid router, a shared expert of expert_feed_forward_length) and layers 0 and 2 dense; no
sliding_window key, so llama.cpp's defaults hold: layers 0-2 chunked attention (chunk 8192) with rope
and the L2 q/k norm, layer 3 NoPE with full attention and the attention temperature; GQA 4/2, head 16,
NORM rope with Llama-3.1-style rope_freqs.weight, context_length 16384 (for the prompts past the
chunk). Everything F32. Seed 2401; the draw order below defines the model.
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T, read_gguf  # noqa: E402
from gen_family import write_common_kvs  # noqa: E402

CFG = dict(seed=2401, n_embd=64, n_layer=4, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, n_ff_exp=64,
           n_expert=4, n_expert_used=1, moe_step=2, rope_theta=5e5, eps=1e-5, ctx=16384)


def write_kvs(w, c):
    A, U = "llama4.", T.UINT32
    write_common_kvs(w, "llama4", "tiny-llama4", c)
    w.add(A + "rope.dimension_count", c["head_dim"], U)
    w.add(A + "interleave_moe_layer_step", c["moe_step"], U)
    w.add(A + "expert_feed_forward_length", c["n_ff_exp"], U)


def gen_weights(c):
    """(name, float32 array) in draw order; numpy shape = reversed ggml ne."""
    d = mm.Draw(c["seed"])
    E, H, HKV, hd, K, X = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_vocab"], c["n_expert"]
    FF, FFE = c["n_ff"], c["n_ff_exp"]
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    yield "rope_freqs.weight", np.array([1, 1, 1, 1.5, 2, 4, 8, 8], dtype=np.float32)  # n_rot / 2 divisors
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "attn_q.weight", d.mat(H * hd, E, 1.5)
        yield p + "attn_k.weight", d.mat(HKV * hd, E, 1.5)
        yield p + "attn_v.weight", d.mat(HKV * hd, E)
        yield p + "attn_output.weight", d.mat(E, H * hd)
        yield p + "ffn_norm.weight", d.norm(E)
        if (i + 1) % c["moe_step"] != 0:
            yield p + "ffn_gate.weight", d.mat(FF, E)
            yield p + "ffn_up.weight", d.mat(FF, E)
            yield p + "ffn_down.weight", d.mat(E, FF)
            continue
        yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
        yield p + "ffn_gate_exps.weight", d.mat(FFE, E, 1.0, X)
        yield p + "ffn_up_exps.weight", d.mat(FFE, E, 1.0, X)
        yield p + "ffn_down_exps.weight", d.mat(E, FFE, 1.0, X)
        yield p + "ffn_gate_shexp.weight", d.mat(FFE, E)
        yield p + "ffn_up_shexp.weight", d.mat(FFE, E)
        yield p + "ffn_down_shexp.weight", d.mat(E, FFE)


def main():
    vocab = read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS["tiny-spm-3000"]))
    cfg = dict(CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]))
    w = GGUFWriter(sys.argv[1])
    write_kvs(w, cfg)
    w.add("llama4.vocab_size", cfg["n_vocab"], T.UINT32)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(cfg):
        w.add_tensor(name, arr, "F32")
    w.write()


if __name__ == "__main__":
    main()
