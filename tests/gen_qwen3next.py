#!/usr/bin/env python3
"""Tiny hybrid (Gated DeltaNet + gated attention) MoE models: qwen3next and qwen35moe.

    gen_qwen3next.py ARCH MODEL.gguf [--bench | --mtp]          ARCH: qwen3next | qwen35moe

Deterministic (numpy default_rng, fixed seed per architecture); tensors and metadata as llama.cpp
de3ff815 reads them (src/models/qwen3next.cpp, qwen35moe.cpp). 4 layers: 0 and 2 linear attention
(Gated DeltaNet: attn_qkv, attn_gate, the beta/alpha gates - one fused ssm_ba in qwen3next, ssm_beta +
ssm_alpha in qwen35moe -, ssm_conv1d, ssm_dt.bias, ssm_a, ssm_norm, ssm_out), 1 and 3 gated full
attention (attn_q gives query and gate per head, per-head q/k norms, partial rope: 16 of 32 dims);
every layer an MoE of 8 experts (top 2) with a sigmoid-gated shared expert. 2 key heads, 4 value heads
of 16: qwen3next pairs value head h with key head h // 2, qwen35moe with h % 2. qwen3next marks its
layers with full_attention_interval, qwen35moe with attention.recurrent_layers (and carries
rope.dimension_sections). The vocabulary is ../shared/reference/vocab's tiny-spm-3000.

--mtp: the same model plus one multi-token-prediction block after the trunk (blk.4; block_count 5,
nextn_predict_layers 1): a gated-attention MoE block like layer 3 plus nextn.eh_proj, enorm, hnorm and
shared_head_norm (llama.cpp's load_block_mtp). Its weights are drawn after the trunk's, so the trunk is
the default model's bit for bit; the default files are unchanged.

--bench: a speed model at Qwen3.6-35B-A3B's widths (2048 wide, Gated DeltaNet of 16 key / 32 value heads
of 128, attention 16 heads / 2 KV heads of 256 with 64 rope dims, experts 512 wide, top 8, shared expert
512) with 4 layers (3 linear, 1 attention) and 32 experts instead of 256 (a token computes the same),
F16 matrices (docs/benchmarks.md).
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T, read_gguf  # noqa: E402

CFG = dict(n_embd=128, n_layer=4, n_head=4, n_head_kv=2, head_dim=32, n_rot=16, n_ff=256, n_ff_exp=64,
           n_ff_shexp=96, n_expert=8, n_expert_used=2, conv=4, state=16, k_heads=2, v_heads=4,
           rope_theta=1e6, eps=1e-6, ctx=512)
SEEDS = {"qwen3next": 2401, "qwen35moe": 2402}
RECURRENT = [True, False, True, False]
BENCH = dict(CFG, n_embd=2048, n_head=16, n_head_kv=2, head_dim=256, n_rot=64, n_ff=512, n_ff_exp=512,
             n_ff_shexp=512, n_expert=32, n_expert_used=8, state=128, k_heads=16, v_heads=32, ctx=4096)
BENCH_RECURRENT = [True, True, True, False]


def gen_weights(arch, c, recurrent):
    """(name, float32 array), numpy shape = reversed ggml ne. The draw order defines the model."""
    d = mm.Draw(SEEDS[arch])
    E, K = c["n_embd"], c["n_vocab"]
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    for i in range(c["n_layer"]):
        yield from gen_block(d, arch, c, f"blk.{i}.", recurrent[i])
    if c.get("mtp"):
        p = f"blk.{c['n_layer']}."
        yield from gen_block(d, arch, c, p, False)
        yield p + "nextn.eh_proj.weight", d.mat(E, 2 * E)
        yield p + "nextn.enorm.weight", d.norm(E)
        yield p + "nextn.hnorm.weight", d.norm(E)
        yield p + "nextn.shared_head_norm.weight", d.norm(E)


def gen_block(d, arch, c, p, recurrent):
    """One block's tensors (prefix p), in draw order."""
    E, X, H, HKV, hd = c["n_embd"], c["n_expert"], c["n_head"], c["n_head_kv"], c["head_dim"]
    D, HV = c["state"], c["v_heads"]
    key, value = c["k_heads"] * D, HV * D
    yield p + "attn_norm.weight", d.norm(E)
    yield p + "post_attention_norm.weight", d.norm(E)
    if recurrent:
        yield p + "attn_qkv.weight", d.mat(2 * key + value, E, 1.5)
        yield p + "attn_gate.weight", d.mat(value, E)
        if arch == "qwen3next":
            yield p + "ssm_ba.weight", d.mat(2 * HV, E)
        else:
            yield p + "ssm_beta.weight", d.mat(HV, E)
            yield p + "ssm_alpha.weight", d.mat(HV, E)
        yield p + "ssm_conv1d.weight", d.mat(2 * key + value, c["conv"], 1.0)
        yield p + "ssm_dt.bias", d.vec(HV, 0.5)
        yield p + "ssm_a", (-np.exp(d.vec(HV, 0.5) - 2.0)).astype(np.float32)   # -exp(A_log), slow decay
        yield p + "ssm_norm.weight", d.norm(D)
        yield p + "ssm_out.weight", d.mat(E, value)
    else:
        yield p + "attn_q.weight", d.mat(2 * H * hd, E, 1.5)
        yield p + "attn_k.weight", d.mat(HKV * hd, E, 1.5)
        yield p + "attn_v.weight", d.mat(HKV * hd, E)
        yield p + "attn_output.weight", d.mat(E, H * hd)
        yield p + "attn_q_norm.weight", d.norm(hd)
        yield p + "attn_k_norm.weight", d.norm(hd)
    yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
    yield p + "ffn_gate_exps.weight", d.mat(c["n_ff_exp"], E, 1.0, X)
    yield p + "ffn_up_exps.weight", d.mat(c["n_ff_exp"], E, 1.0, X)
    yield p + "ffn_down_exps.weight", d.mat(E, c["n_ff_exp"], 1.0, X)
    yield p + "ffn_gate_inp_shexp.weight", d.vec(E, 2.0 / np.sqrt(E))
    yield p + "ffn_gate_shexp.weight", d.mat(c["n_ff_shexp"], E)
    yield p + "ffn_up_shexp.weight", d.mat(c["n_ff_shexp"], E)
    yield p + "ffn_down_shexp.weight", d.mat(E, c["n_ff_shexp"])


def write_kvs(w, arch, c, recurrent):
    A, U = arch + ".", T.UINT32
    n_blocks = c["n_layer"] + (1 if c.get("mtp") else 0)
    for k, v in [("context_length", c["ctx"]), ("embedding_length", c["n_embd"]), ("block_count", n_blocks),
                 ("feed_forward_length", c["n_ff"]), ("attention.head_count", c["n_head"]),
                 ("attention.head_count_kv", c["n_head_kv"]), ("attention.key_length", c["head_dim"]),
                 ("attention.value_length", c["head_dim"]), ("rope.dimension_count", c["n_rot"]),
                 ("expert_count", c["n_expert"]), ("expert_used_count", c["n_expert_used"]),
                 ("expert_feed_forward_length", c["n_ff_exp"]),
                 ("expert_shared_feed_forward_length", c["n_ff_shexp"]), ("ssm.conv_kernel", c["conv"]),
                 ("ssm.state_size", c["state"]), ("ssm.group_count", c["k_heads"]),
                 ("ssm.time_step_rank", c["v_heads"]), ("ssm.inner_size", c["v_heads"] * c["state"])]:
        w.add(A + k, v, U)
    w.add(A + "rope.freq_base", float(c["rope_theta"]), T.FLOAT32)
    w.add(A + "attention.layer_norm_rms_epsilon", float(c["eps"]), T.FLOAT32)
    if c.get("mtp"):
        w.add(A + "nextn_predict_layers", 1, U)
    if arch == "qwen3next":
        w.add(A + "full_attention_interval", recurrent.index(False) + 1, U)
    else:   # one entry per block, the MTP block's too (attention)
        w.add(A + "attention.recurrent_layers", list(recurrent) + [False] * (n_blocks - len(recurrent)), T.ARRAY,
              T.BOOL)
        w.add(A + "rope.dimension_sections", [4, 2, 2, 0], T.ARRAY, T.INT32)


def main():
    arch, path, bench, mtp = sys.argv[1], sys.argv[2], "--bench" in sys.argv[3:], "--mtp" in sys.argv[3:]
    vocab = read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS["tiny-spm-3000"]))
    c = dict(BENCH if bench else CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]), mtp=mtp)
    recurrent, dtype = (BENCH_RECURRENT, "F16") if bench else (RECURRENT, "F32")
    w = GGUFWriter(path)
    w.add("general.architecture", arch)
    w.add("general.name", "tiny-" + arch)
    w.add("general.file_type", mm.FILE_TYPE[dtype], T.UINT32)
    write_kvs(w, arch, c, recurrent)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(arch, c, recurrent):
        w.add_tensor(name, arr, "F32" if "ssm_conv1d" in name else mm.stored_type(name, arr.ndim, dtype))
    w.write()


if __name__ == "__main__":
    main()
