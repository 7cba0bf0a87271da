#!/usr/bin/env python3
"""Tiny DeepSeek Sparse Attention models: deepseek32 (DeepSeek-V3.2) and glm-dsa (GLM-5).

    gen_dsa.py FAMILY OUT.gguf        FAMILY: deepseek32 | glm-dsa | deepseek32-bench (speed only)

Deterministic (numpy default_rng, fixed seeds; the draw order defines the model): the
deepseek2 weights of ../shared/reference/gen/make_models.py in llama.cpp's newer MLA layout
(attn_k_b / attn_v_b, key_length_mla: the latent cache) plus the lightning indexer of each
layer (indexer.attn_q_b from the q_lora latent, indexer.attn_k + LayerNorm indexer.k_norm,
indexer.proj the per-head weights), top-k 8 so that a 24-token prompt takes the sparse path.
Layer 0 is dense (leading_dense_block_count 1); the MoE layers have two shared experts;
a trailing multi-token-prediction block (nextn_predict_layers 1) is written and not run.
deepseek32: every layer has its indexer, NEOX rope in the indexer, YaRN (factor 4).
glm-dsa: attention.indexer.types = [full, full, shared]: layer 2 reuses layer 1's choice
and has no indexer tensors; NORM rope in the indexer; no rope scaling; gating defaulted.
Names, shapes and keys as llama.cpp de3ff815 reads them (src/models/deepseek32.cpp, glm-dsa.cpp).
"""
import os
import sys

import numpy as np

SHARED = os.environ.get("COLI_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "reference", "gen"))
import make_models as mm  # noqa: E402
from gguf_tiny import GGUFWriter, T  # noqa: E402

BASE = dict(vocab="tiny-spm-3000", n_embd=128, n_layer=3, n_head=4, n_ff=384, n_ff_exp=64,
            n_expert=8, n_expert_used=3, n_expert_shared=2, n_dense_lead=1,
            q_lora_rank=96, kv_lora_rank=64, qk_nope=32, qk_rope=16, v_head=32,
            idx_heads=4, idx_dim=64, idx_top_k=8, weights_scale=2.5, rope_theta=1e4, eps=1e-6, ctx=512)
CFGS = {
    "deepseek32": dict(BASE, seed=2506, yarn_factor=4.0, yarn_orig_ctx=128, yarn_log_mul=0.1, types=None),
    "glm-dsa": dict(BASE, seed=2507, yarn_factor=None, types=[True, True, False]),
    # speed only (docs/benchmarks.md): DeepSeek-V3.2's attention and indexer widths, two layers,
    # small experts (the FFN is not what is measured), F16 weights, no MTP block
    "deepseek32-bench": dict(BASE, seed=2508, n_embd=7168, n_layer=2, n_head=128, n_ff=2048, n_ff_exp=512,
                             n_expert=4, n_expert_used=2, n_expert_shared=1, q_lora_rank=1536, kv_lora_rank=512,
                             qk_nope=128, qk_rope=64, v_head=128, idx_heads=64, idx_dim=128, idx_top_k=2048,
                             yarn_factor=40.0, yarn_orig_ctx=4096, yarn_log_mul=0.1, types=None, ctx=8192,
                             mtp=False, dtype="F16"),
}


def has_indexer(cfg, i):
    return cfg["types"] is None or i >= len(cfg["types"]) or cfg["types"][i]


def gen_weights(cfg):
    d = mm.Draw(cfg["seed"])
    E, H, K, X = cfg["n_embd"], cfg["n_head"], cfg["n_vocab"], cfg["n_expert"]
    nope, rope, vh, kvr, qr = cfg["qk_nope"], cfg["qk_rope"], cfg["v_head"], cfg["kv_lora_rank"], cfg["q_lora_rank"]
    FF, FFE, S = cfg["n_ff"], cfg["n_ff_exp"], cfg["n_ff_exp"] * cfg["n_expert_shared"]
    IH, ID = cfg["idx_heads"], cfg["idx_dim"]
    yield "token_embd.weight", d.embd(K, E)
    yield "output_norm.weight", d.norm(E)
    yield "output.weight", d.mat(K, E, 2.0)
    for i in range(cfg["n_layer"] + cfg.get("mtp", True)):                     # + the MTP block
        p = f"blk.{i}."
        yield p + "attn_norm.weight", d.norm(E)
        yield p + "attn_q_a.weight", d.mat(qr, E)
        yield p + "attn_q_a_norm.weight", d.norm(qr)
        yield p + "attn_q_b.weight", d.mat(H * (nope + rope), qr, 1.5)
        yield p + "attn_kv_a_mqa.weight", d.mat(kvr + rope, E, 1.5)
        yield p + "attn_kv_a_norm.weight", d.norm(kvr)
        yield p + "attn_k_b.weight", d.mat(kvr, nope, 1.5, H)                  # ne [nope, kvr, H]
        yield p + "attn_v_b.weight", d.mat(vh, kvr, 1.5, H)                    # ne [kvr, vh, H]
        yield p + "attn_output.weight", d.mat(E, H * vh)
        if has_indexer(cfg, i):
            yield p + "indexer.attn_q_b.weight", d.mat(IH * ID, qr, 2.0)      # per head [rope | nope]
            yield p + "indexer.attn_k.weight", d.mat(ID, E, 2.0)
            yield p + "indexer.k_norm.weight", d.norm(ID)
            yield p + "indexer.k_norm.bias", d.vec(ID, 0.1)
            yield p + "indexer.proj.weight", d.mat(IH, E, 4.0)
        yield p + "ffn_norm.weight", d.norm(E)
        if i < cfg["n_dense_lead"]:
            yield p + "ffn_gate.weight", d.mat(FF, E)
            yield p + "ffn_up.weight", d.mat(FF, E)
            yield p + "ffn_down.weight", d.mat(E, FF)
        else:
            yield p + "ffn_gate_inp.weight", d.mat(X, E, 2.0)
            yield p + "exp_probs_b.bias", d.vec(X, 0.3)
            yield p + "ffn_gate_exps.weight", d.mat(FFE, E, 1.0, X)
            yield p + "ffn_up_exps.weight", d.mat(FFE, E, 1.0, X)
            yield p + "ffn_down_exps.weight", d.mat(E, FFE, 1.0, X)
            yield p + "ffn_gate_shexp.weight", d.mat(S, E)
            yield p + "ffn_up_shexp.weight", d.mat(S, E)
            yield p + "ffn_down_shexp.weight", d.mat(E, S)
        if i == cfg["n_layer"]:
            yield p + "nextn.eh_proj.weight", d.mat(E, 2 * E)
            yield p + "nextn.enorm.weight", d.norm(E)
            yield p + "nextn.hnorm.weight", d.norm(E)
            yield p + "nextn.shared_head_norm.weight", d.norm(E)


def write_kvs(w, arch, cfg):
    A, U, F = arch + ".", T.UINT32, T.FLOAT32
    w.add(A + "context_length", cfg["ctx"], U)
    w.add(A + "embedding_length", cfg["n_embd"], U)
    w.add(A + "block_count", cfg["n_layer"] + cfg.get("mtp", True), U)
    if cfg.get("mtp", True):
        w.add(A + "nextn_predict_layers", 1, U)
    w.add(A + "feed_forward_length", cfg["n_ff"], U)
    w.add(A + "attention.head_count", cfg["n_head"], U)
    w.add(A + "attention.head_count_kv", 1, U)
    w.add(A + "rope.freq_base", float(cfg["rope_theta"]), F)
    w.add(A + "attention.layer_norm_rms_epsilon", float(cfg["eps"]), F)
    w.add(A + "expert_used_count", cfg["n_expert_used"], U)
    w.add(A + "leading_dense_block_count", cfg["n_dense_lead"], U)
    w.add(A + "vocab_size", cfg["n_vocab"], U)
    w.add(A + "attention.q_lora_rank", cfg["q_lora_rank"], U)
    w.add(A + "attention.kv_lora_rank", cfg["kv_lora_rank"], U)
    w.add(A + "attention.key_length", cfg["kv_lora_rank"] + cfg["qk_rope"], U)
    w.add(A + "attention.value_length", cfg["kv_lora_rank"], U)
    w.add(A + "attention.key_length_mla", cfg["qk_nope"] + cfg["qk_rope"], U)
    w.add(A + "attention.value_length_mla", cfg["v_head"], U)
    w.add(A + "expert_feed_forward_length", cfg["n_ff_exp"], U)
    w.add(A + "expert_count", cfg["n_expert"], U)
    w.add(A + "expert_shared_count", cfg["n_expert_shared"], U)
    w.add(A + "expert_weights_scale", float(cfg["weights_scale"]), F)
    w.add(A + "expert_weights_norm", True, T.BOOL)
    if arch == "deepseek32":
        w.add(A + "expert_gating_func", 2, U)                                  # glm-dsa: sigmoid by default
    w.add(A + "rope.dimension_count", cfg["qk_rope"], U)
    if cfg["yarn_factor"]:
        w.add(A + "rope.scaling.type", "yarn")
        w.add(A + "rope.scaling.factor", float(cfg["yarn_factor"]), F)
        w.add(A + "rope.scaling.original_context_length", cfg["yarn_orig_ctx"], U)
        w.add(A + "rope.scaling.yarn_log_multiplier", float(cfg["yarn_log_mul"]), F)
    w.add(A + "attention.indexer.head_count", cfg["idx_heads"], U)
    w.add(A + "attention.indexer.key_length", cfg["idx_dim"], U)
    w.add(A + "attention.indexer.top_k", cfg["idx_top_k"], U)
    if cfg["types"] is not None:
        w.add(A + "attention.indexer.types", list(cfg["types"]), T.ARRAY, T.BOOL)


def write_model(name, path):
    arch = name.replace("-bench", "")
    vocab = mm.read_gguf(os.path.join(mm.VOCAB_DIR, mm.VOCABS[CFGS[name]["vocab"]]))
    cfg = dict(CFGS[name], n_vocab=len(vocab.kv["tokenizer.ggml.tokens"]))
    dtype = cfg.get("dtype", "F32")
    w = GGUFWriter(path)
    w.add("general.architecture", arch)
    w.add("general.name", "tiny-" + arch)
    w.add("general.file_type", mm.FILE_TYPE[dtype], T.UINT32)
    write_kvs(w, arch, cfg)
    w.copy_kvs(vocab, "tokenizer.")
    for name, arr in gen_weights(cfg):
        w.add_tensor(name, arr, mm.stored_type(name, arr.ndim, dtype))
    w.write()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in CFGS:
        sys.exit("usage: gen_dsa.py deepseek32|glm-dsa|deepseek32-bench OUT.gguf")
    write_model(sys.argv[1], sys.argv[2])
