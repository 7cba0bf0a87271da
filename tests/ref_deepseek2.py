#!/usr/bin/env python3
"""A DeepSeek-V2-Lite-style deepseek2 variant and its logits from an independent float64 numpy forward pass.

    ref_deepseek2.py MODEL.gguf LOGITS.bin

Writes MODEL.gguf with ../shared/reference/gen/make_models.py (the generator of the reference models)
on a variant of the tiny-deepseek2 config that takes the paths tiny-deepseek2 does not: q without
q_lora (attn_q), softmax routing without selection bias, weights not renormalised but scaled, YaRN
with another factor and log multiplier, and DeepSeek-V3's group-limited routing (4 groups of 2, 2 kept).
LOGITS.bin: int32 n_tok, int32 n_vocab, the n_tok int32 ids below, then n_tok * n_vocab float64 logits, every
position (semantics of ../shared/reference/README.md, "Semantics", deepseek2; groups as llama.cpp).
"""
import os
import struct
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import T  # noqa: E402

IDS = [1, 17, 42, 99, 7, 300, 2500, 12, 5, 900, 33, 1234, 8, 77, 2999, 4]
GROUPS, GROUPS_USED = 4, 2
CFG = dict(mm.MODELS["tiny-deepseek2"], seed=2106, q_lora_rank=0, gating=None, weights_norm=None,
           weights_scale=1.5, exp_probs_b=False, yarn_factor=4.0, yarn_orig_ctx=128, yarn_log_mul=0.0707)


def write_model(path):
    base = mm.write_arch_kvs

    def with_groups(w, cfg):
        base(w, cfg)
        w.add("deepseek2.expert_group_count", GROUPS, T.UINT32)
        w.add("deepseek2.expert_group_used_count", GROUPS_USED, T.UINT32)
    mm.write_arch_kvs = with_groups
    try:
        mm.write_model("tiny-deepseek2-lite", CFG, "F32", path)
    finally:
        mm.write_arch_kvs = base


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn_angles(pos, d, base, s, orig):
    i = np.arange(d // 2, dtype=np.float64)
    ext = pos[:, None] * base ** (-2.0 * i / d)
    corr = lambda b: d * np.log(orig / (2 * np.pi * b)) / (2 * np.log(base))  # noqa: E731
    low, high = max(0.0, np.floor(corr(32.0))), min(d - 1.0, np.ceil(corr(1.0)))
    ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
    return ext / s * (1.0 - ramp) + ext * ramp            # cos/sin magnitude: 1 for deepseek2


def rope_norm(x, ang):                                    # x [T, ..., d], pairs (2i, 2i + 1)
    c, s = np.cos(ang), np.sin(ang)
    if x.ndim == 3:
        c, s = c[:, None, :], s[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
    return out


def ffn(x, g, u, d):
    a, b = x @ g.T, x @ u.T
    return (a / (1.0 + np.exp(-a)) * b) @ d.T


def moe(x, W, p, c):
    logits = x @ W[p + "ffn_gate_inp.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    X, K, per = c["n_expert"], c["n_expert_used"], c["n_expert"] // GROUPS
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        grp = probs[t].reshape(GROUPS, per)
        gscore = np.sort(grp, axis=1)[:, -2:].sum(1)
        keep = np.argsort(-gscore, kind="stable")[:GROUPS_USED]
        choice = np.full(X, -np.inf)
        for g in keep:
            choice[g * per:(g + 1) * per] = grp[g]
        sel = np.argsort(-choice, kind="stable")[:K]
        for e in sel:
            w = probs[t, e] * c["weights_scale"]
            out[t] += w * ffn(x[t:t + 1], W[p + "ffn_gate_exps.weight"][e], W[p + "ffn_up_exps.weight"][e],
                              W[p + "ffn_down_exps.weight"][e])[0]
    return out + ffn(x, W[p + "ffn_gate_shexp.weight"], W[p + "ffn_up_shexp.weight"], W[p + "ffn_down_shexp.weight"])


def attention(x, W, p, c, ang):
    n, H = x.shape[0], c["n_head"]
    nope, rope, vh, C = c["qk_nope"], c["qk_rope"], c["v_head"], c["kv_lora_rank"]
    q = (x @ W[p + "attn_q.weight"].T).reshape(n, H, nope + rope)
    kv_a = x @ W[p + "attn_kv_a_mqa.weight"].T
    ckv = rmsnorm(kv_a[:, :C], W[p + "attn_kv_a_norm.weight"], c["eps"])
    kv = (ckv @ W[p + "attn_kv_b.weight"].T).reshape(n, H, nope + vh)
    q = np.concatenate([q[..., :nope], rope_norm(q[..., nope:], ang)], -1)
    k_pe = rope_norm(kv_a[:, C:], ang)
    k = np.concatenate([kv[..., :nope], np.broadcast_to(k_pe[:, None, :], (n, H, rope))], -1)
    mscale = 1.0 + c["yarn_log_mul"] * np.log(c["yarn_factor"])
    sc = np.einsum("thd,shd->hts", q, k) * mscale * mscale / np.sqrt(nope + rope)
    sc = np.where(np.tril(np.ones((n, n), bool))[None], sc, -np.inf)
    pr = np.exp(sc - sc.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", pr, kv[..., nope:]).reshape(n, H * vh)
    return o @ W[p + "attn_output.weight"].T


def forward(c):
    W = {k: v.astype(np.float64) for k, v in mm.gen_weights_deepseek2(c)}
    h = W["token_embd.weight"][IDS]
    ang = yarn_angles(np.arange(len(IDS), dtype=np.float64), c["qk_rope"], c["rope_theta"], c["yarn_factor"],
                      c["yarn_orig_ctx"])
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        h = h + attention(rmsnorm(h, W[p + "attn_norm.weight"], c["eps"]), W, p, c, ang)
        x = rmsnorm(h, W[p + "ffn_norm.weight"], c["eps"])
        if i < c["n_dense_lead"]:
            h = h + ffn(x, W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"], W[p + "ffn_down.weight"])
        else:
            h = h + moe(x, W, p, c)
    return rmsnorm(h, W["output_norm.weight"], c["eps"]) @ W["output.weight"].T


def main():
    model, out = sys.argv[1], sys.argv[2]
    write_model(model)
    vocab = mm.read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS[CFG["vocab"]]))
    logits = forward(dict(CFG, n_vocab=len(vocab.kv["tokenizer.ggml.tokens"])))
    with open(out, "wb") as f:
        f.write(struct.pack("<ii", *logits.shape))
        f.write(struct.pack("<%di" % len(IDS), *IDS))
        f.write(logits.astype("<f8").tobytes())


if __name__ == "__main__":
    main()
