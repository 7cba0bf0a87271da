#!/usr/bin/env python3
"""Tiny Kimi models: kimi-k3 (hybrid Kimi Delta Attention + MLA, latent MoE, situ, cross-layer residual
attention) and kimi-linear (KDA + MLA, a plain MoE).

    gen_kimi.py ARCH MODEL.gguf          ARCH: kimi-k3 | kimi-linear

Deterministic (numpy default_rng, fixed seed); tensors and metadata as llama.cpp de3ff815 reads them
(src/models/kimi-k3.cpp, conversion/kimi_k3.py). 4 layers: 0 and 2 KDA (attn_q/k/v, 4-D ssm_conv1d_q/k/v,
ssm_f_a/f_b, ssm_beta, ssm_a = -exp(A_log) per head, ssm_dt.bias per channel, the full-rank gate ssm_g,
ssm_norm, attn_output), 1 and 3 MLA without rope (q_lora, attn_k_b / attn_v_b, the sigmoid output gate
attn_gate); layer 0 a dense situ FFN (leading_dense_block_count 1), layers 1-3 a latent MoE (8 experts of
width 64 over a 64-wide latent, top 2, sigmoid routing with exp_probs_b, renormalised and scaled weights,
ffn_routed_down / ffn_routed_norm / ffn_routed_up) plus one shared expert at full width; attention
residuals every 2 layers (attn_res.block_size 2: checkpoints banked at layers 0 and 2). KDA: 4 heads of 32,
conv kernel 4, gate_lower_bound -5. The vocabulary is ../shared/reference/vocab's tiny-spm-3000.

kimi-linear (src/models/kimi-linear.cpp, conversion/kimi_linear.py): the same layer kinds without what K3
adds: the KDA output gate is low-rank (ssm_g_a, ssm_g_b), ssm_a is [1, n_head, 1, 1], the decay is
softplus(f) * ssm_a (no lower bound), the MLA layers take q from attn_q (no q_lora) and have no output
gate, no value_length key; the experts run at full width with SwiGLU (silu), as do the dense layer and the
shared expert; no residual attention.
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T, read_gguf  # noqa: E402

CFG = dict(n_embd=128, n_layer=4, n_head=4, kda_dim=32, conv=4, q_lora=64, kv_lora=64, nope=32, rope=16, v_head=32,
           n_ff=256, n_ff_exp=64, latent=64, n_expert=8, n_expert_used=2, n_shared=1, n_dense_lead=1, res_bs=2,
           situ_beta=1.5, situ_linear_beta=2.0, gate_lb=-5.0, scale=2.5, eps=1e-6, ctx=512)
SEEDS = {"kimi-k3": 2501, "kimi-linear": 2502}
KDA = [True, False, True, False]


def gen_kda(d, p, c, arch):
    E, H, D = c["n_embd"], c["n_head"], c["kda_dim"]
    DI = H * D
    yield p + "attn_q.weight", d.mat(DI, E, 1.5)
    yield p + "attn_k.weight", d.mat(DI, E, 1.5)
    yield p + "attn_v.weight", d.mat(DI, E)
    for x in "qkv":  # ne [conv, 1, d_inner, 1] as the converter writes it
        yield p + f"ssm_conv1d_{x}.weight", d.mat(1, c["conv"], 1.0, 1, DI)
    yield p + "ssm_f_a.weight", d.mat(D, E)
    yield p + "ssm_f_b.weight", d.mat(DI, D, 1.5)
    yield p + "ssm_beta.weight", d.mat(H, E)
    a = (-np.exp(d.vec(H, 0.5) - 1.0)).astype(np.float32)   # -exp(A_log)
    yield p + "ssm_a", a if arch == "kimi-k3" else a.reshape(1, 1, H, 1)
    yield p + "ssm_dt.bias", d.vec(DI, 0.5)
    if arch == "kimi-k3":
        yield p + "ssm_g.weight", d.mat(DI, E)
    else:
        yield p + "ssm_g_a.weight", d.mat(D, E)
        yield p + "ssm_g_b.weight", d.mat(DI, D, 1.5)
    yield p + "ssm_norm.weight", d.norm(D)
    yield p + "attn_output.weight", d.mat(E, DI)


def gen_mla(d, p, c, arch):
    E, H, C, R = c["n_embd"], c["n_head"], c["kv_lora"], c["rope"]
    if arch == "kimi-k3":
        yield p + "attn_q_a.weight", d.mat(c["q_lora"], E)
        yield p + "attn_q_a_norm.weight", d.norm(c["q_lora"])
        yield p + "attn_q_b.weight", d.mat(H * (c["nope"] + R), c["q_lora"], 1.5)
    else:
        yield p + "attn_q.weight", d.mat(H * (c["nope"] + R), E, 1.5)
    yield p + "attn_kv_a_mqa.weight", d.mat(C + R, E, 1.5)
    yield p + "attn_kv_a_norm.weight", d.norm(C)
    yield p + "attn_k_b.weight", d.mat(C, c["nope"], 1.5, H)          # ne [nope, kv_lora, n_head]
    yield p + "attn_v_b.weight", d.mat(c["v_head"], C, 1.5, H)        # ne [kv_lora, v_head, n_head]
    if arch == "kimi-k3":
        yield p + "attn_gate.weight", d.mat(H * c["v_head"], E)
    yield p + "attn_output.weight", d.mat(E, H * c["v_head"])


def gen_weights(arch, c):
    """(name, float32 array), numpy shape = reversed ggml ne. The draw order defines the model."""
    d = mm.Draw(SEEDS[arch])
    k3 = arch == "kimi-k3"
    E, K, X, F = c["n_embd"], c["n_vocab"], c["n_expert"], c["n_ff_exp"]
    LAT = c["latent"] if k3 else E
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    if k3:
        yield "output_res_score.weight", d.vec(E, 0.1)
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "ffn_norm.weight", d.norm(E)
        if k3:
            yield p + "attn_res_score.weight", d.vec(E, 0.1)
            yield p + "ffn_res_score.weight", d.vec(E, 0.1)
        yield from (gen_kda if KDA[i] else gen_mla)(d, p, c, arch)
        if i < c["n_dense_lead"]:
            yield p + "ffn_gate.weight", d.mat(c["n_ff"], E, 2.0)
            yield p + "ffn_up.weight", d.mat(c["n_ff"], E, 2.0)
            yield p + "ffn_down.weight", d.mat(E, c["n_ff"])
            continue
        yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
        yield p + "exp_probs_b.bias", d.vec(X, 0.3)
        yield p + "ffn_gate_exps.weight", d.mat(F, LAT, 2.0, X)
        yield p + "ffn_up_exps.weight", d.mat(F, LAT, 2.0, X)
        yield p + "ffn_down_exps.weight", d.mat(LAT, F, 1.0, X)
        if k3:
            yield p + "ffn_routed_down.weight", d.mat(LAT, E, 1.5)
            yield p + "ffn_routed_norm.weight", d.norm(LAT)
            yield p + "ffn_routed_up.weight", d.mat(E, LAT)
        S = F * c["n_shared"]
        yield p + "ffn_gate_shexp.weight", d.mat(S, E, 2.0)
        yield p + "ffn_up_shexp.weight", d.mat(S, E, 2.0)
        yield p + "ffn_down_shexp.weight", d.mat(E, S)


def write_kvs(w, arch, c):
    A, U, F32, k3 = arch + ".", T.UINT32, T.FLOAT32, arch == "kimi-k3"
    for k, v in [("context_length", c["ctx"]), ("embedding_length", c["n_embd"]), ("block_count", c["n_layer"]),
                 ("feed_forward_length", c["n_ff"]), ("attention.head_count", c["n_head"])]:
        w.add(A + k, v, U)
    w.add(A + "attention.head_count_kv", [0 if k else 1 for k in KDA], T.ARRAY, T.UINT32)
    w.add(A + "attention.layer_norm_rms_epsilon", float(c["eps"]), F32)
    w.add(A + "rope.freq_base", 50000.0, F32)
    kvs = [("expert_count", c["n_expert"]), ("expert_used_count", c["n_expert_used"]),
           ("ssm.conv_kernel", c["conv"]), ("kda.head_dim", c["kda_dim"])]
    kvs += [("attention.q_lora_rank", c["q_lora"])] if k3 else []
    kvs += [("attention.kv_lora_rank", c["kv_lora"]), ("rope.dimension_count", c["rope"]),
            ("attention.key_length", c["kv_lora"] + c["rope"])]
    kvs += [("attention.value_length", c["kv_lora"])] if k3 else []   # kimi_linear.py writes none
    kvs += [("attention.key_length_mla", c["nope"] + c["rope"]), ("attention.value_length_mla", c["v_head"]),
            ("expert_feed_forward_length", c["n_ff_exp"]), ("expert_shared_count", c["n_shared"]),
            ("leading_dense_block_count", c["n_dense_lead"]), ("expert_gating_func", 2)]
    kvs += [("expert_latent_length", c["latent"]), ("attn_res.block_size", c["res_bs"])] if k3 else []
    for k, v in kvs:
        w.add(A + k, v, U)
    if k3:
        w.add(A + "kda.gate_lower_bound", float(c["gate_lb"]), F32)
    w.add(A + "expert_weights_scale", float(c["scale"]), F32)
    if not k3:
        return
    w.add(A + "expert_weights_norm", True, T.BOOL)
    w.add(A + "activation.situ_beta", float(c["situ_beta"]), F32)
    w.add(A + "activation.situ_linear_beta", float(c["situ_linear_beta"]), F32)


def main():
    arch, path = sys.argv[1], sys.argv[2]
    vocab = read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS["tiny-spm-3000"]))
    c = dict(CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]))
    w = GGUFWriter(path)
    w.add("general.architecture", arch)
    w.add("general.name", "tiny-" + arch)
    w.add("general.file_type", mm.FILE_TYPE["F32"], T.UINT32)
    write_kvs(w, arch, c)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(arch, c):
        w.add_tensor(name, arr, "F32")
    w.write()


if __name__ == "__main__":
    main()
