#!/usr/bin/env python3
"""A tiny minimax-m2 (MiniMax-M2 layout) model, deterministic (python3 + numpy only).

    gen_minimax_m2.py MODEL.gguf

Writes MODEL.gguf with ../shared/reference/gen (gguf_tiny's writer, make_models.py's weight scales and
its tiny 3000-token SPM vocabulary) in the layout llama.cpp's converter (conversion/minimax.py,
MiniMaxM2Model) writes: three MoE layers (8 experts top-3, sigmoid router with the exp_probs_b selection
bias, weights renormalised, no shared expert, expert ffn = feed_forward_length), RMS q/k norm over the
whole projected q and k, head width key_length 48 (not n_embd / n_head) with only its first 24 dims
rotated (rotary_dim, NEOX pairs), GQA 4/2, no biases. Everything F32. Seed 2302; the draw order below
defines the model.
"""
import os
import sys

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T, read_gguf  # noqa: E402
from gen_family import write_common_kvs  # noqa: E402

CFG = dict(seed=2302, n_embd=128, n_layer=3, n_head=4, n_head_kv=2, head_dim=48, n_rot=24, n_ff=64,
           n_expert=8, n_expert_used=3, rope_theta=5e6, eps=1e-6, ctx=512)


def write_kvs(w, c):
    A, U = "minimax-m2.", T.UINT32
    write_common_kvs(w, "minimax-m2", "tiny-minimax-m2", c)
    w.add(A + "expert_gating_func", 2, U)                                        # sigmoid
    w.add(A + "attention.key_length", c["head_dim"], U)
    w.add(A + "attention.value_length", c["head_dim"], U)
    w.add(A + "expert_feed_forward_length", c["n_ff"], U)
    w.add(A + "rope.dimension_count", c["n_rot"], U)


def gen_weights(c):
    """(name, float32 array) in draw order; numpy shape = reversed ggml ne."""
    d = mm.Draw(c["seed"])
    E, H, HKV, hd, K, X, FF = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_vocab"], c["n_expert"], \
        c["n_ff"]
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "attn_q.weight", d.mat(H * hd, E, 1.5)
        yield p + "attn_k.weight", d.mat(HKV * hd, E, 1.5)
        yield p + "attn_v.weight", d.mat(HKV * hd, E)
        yield p + "attn_output.weight", d.mat(E, H * hd)
        yield p + "attn_q_norm.weight", d.norm(H * hd)                            # the whole q
        yield p + "attn_k_norm.weight", d.norm(HKV * hd)                          # the whole k
        yield p + "ffn_norm.weight", d.norm(E)
        yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
        yield p + "exp_probs_b.bias", d.vec(X, 0.3)
        yield p + "ffn_gate_exps.weight", d.mat(FF, E, 1.0, X)
        yield p + "ffn_up_exps.weight", d.mat(FF, E, 1.0, X)
        yield p + "ffn_down_exps.weight", d.mat(E, FF, 1.0, X)


def main():
    vocab = read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS["tiny-spm-3000"]))
    cfg = dict(CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]))
    w = GGUFWriter(sys.argv[1])
    write_kvs(w, cfg)
    w.add("minimax-m2.vocab_size", cfg["n_vocab"], T.UINT32)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(cfg):
        w.add_tensor(name, arr, "F32")
    w.write()


if __name__ == "__main__":
    main()
