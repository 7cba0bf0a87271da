"""model.py - tiny-moe-4e2r: a Mixtral-style MoE transformer in PyTorch.

The forward pass is written to match what llama.cpp (and colibri) compute for a GGUF file with
arch "llama" and experts, so that the exported file needs no conversion beyond a dtype cast:

  - RMSNorm x / sqrt(mean(x^2) + eps) * w
  - RoPE in the NORM layout: adjacent pairs (2i, 2i+1) of each head are rotated by
    pos * theta^(-2i/d). Training directly in this layout means the exported attn_q/attn_k
    rows need NO permutation (HF checkpoints use rotate_half and need the converter's permute).
  - GQA: query head h reads KV head h // (n_head / n_head_kv).
  - Router: p = softmax(W_r x) over all experts, top-k by p, the k weights renormalised to sum
    to 1 (Mixtral). Expert e: down_e(silu(gate_e x) * up_e x).
  - Separate output.weight (not tied to token_embd).

Training adds the Switch-Transformer load-balancing loss  n_expert * sum_e f_e * P_e  where f_e
is the fraction of routed (token, slot) assignments that went to expert e and P_e the mean router
probability of e; it is minimal (= 1) when routing is uniform.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 3000
    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_head_kv: int = 4
    n_ff: int = 384
    n_expert: int = 4
    n_expert_used: int = 2
    n_ctx: int = 256
    rope_theta: float = 10000.0
    eps: float = 1e-5

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n_pos, dtype=torch.float32):
    """cos/sin of pos * theta^(-2i/d), shape (n_pos, d/2)."""
    d = cfg.n_embd // cfg.n_head
    inv = cfg.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope_norm(x, cos, sin):
    """x: (B, H, T, d); rotate adjacent pairs (x[2i], x[2i+1]) - llama.cpp's NORM rope."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.n_embd // cfg.n_head
        self.q = nn.Linear(cfg.n_embd, cfg.n_head * hd, bias=False)
        self.k = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.v = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.o = nn.Linear(cfg.n_head * hd, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        c = self.cfg
        hd = c.n_embd // c.n_head
        q = self.q(x).view(B, T, c.n_head, hd).transpose(1, 2)
        k = self.k(x).view(B, T, c.n_head_kv, hd).transpose(1, 2)
        v = self.v(x).view(B, T, c.n_head_kv, hd).transpose(1, 2)
        q = apply_rope_norm(q, cos[:T], sin[:T])
        k = apply_rope_norm(k, cos[:T], sin[:T])
        rep = c.n_head // c.n_head_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, c.n_head * hd)
        return self.o(y)


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        X, E, FF = cfg.n_expert, cfg.n_embd, cfg.n_ff
        self.router = nn.Linear(E, X, bias=False)
        self.gate = nn.Parameter(torch.randn(X, FF, E) / math.sqrt(E))
        self.up = nn.Parameter(torch.randn(X, FF, E) / math.sqrt(E))
        self.down = nn.Parameter(torch.randn(X, E, FF) / math.sqrt(FF))

    def forward(self, x):
        """x: (N, E) -> (y (N, E), aux loss, top-k expert ids (N, k), router probs (N, X))."""
        c = self.cfg
        probs = self.router(x).softmax(-1)
        w, idx = probs.topk(c.n_expert_used, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        y = torch.zeros_like(x)
        for e in range(c.n_expert):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            h = F.silu(xe @ self.gate[e].t()) * (xe @ self.up[e].t())
            y.index_add_(0, rows, (h @ self.down[e].t()) * w[rows, slot, None])
        frac = F.one_hot(idx, c.n_expert).float().sum(1).mean(0) / c.n_expert_used
        aux = c.n_expert * (frac * probs.mean(0)).sum()
        return y, aux, idx, probs


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.eps)
        self.moe = MoE(cfg)

    def forward(self, h, cos, sin):
        h = h + self.attn(self.attn_norm(h), cos, sin)
        B, T, E = h.shape
        y, aux, idx, probs = self.moe(self.ffn_norm(h).reshape(B * T, E))
        return h + y.view(B, T, E), aux, idx


class TinyMoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        nn.init.normal_(self.tok.weight, std=0.02 * math.sqrt(cfg.n_embd) / 4)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.n_embd, cfg.eps)
        self.out = nn.Linear(cfg.n_embd, cfg.n_vocab, bias=False)
        for b in self.blocks:   # scale residual writers down (GPT-2 style) for a stable start
            nn.init.normal_(b.attn.o.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            with torch.no_grad():
                b.moe.down.mul_(0.5 / math.sqrt(2 * cfg.n_layer))
        cos, sin = rope_tables(cfg, cfg.n_ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids, want_routes=False):
        """ids (B, T) -> logits (B, T, V), mean aux loss, [per-layer top-k ids] if want_routes."""
        h = self.tok(ids)
        aux_sum = 0.0
        routes = []
        for b in self.blocks:
            h, aux, idx = b(h, self.cos, self.sin)
            aux_sum = aux_sum + aux
            if want_routes:
                routes.append(idx)
        logits = self.out(self.norm(h))
        return logits, aux_sum / len(self.blocks), routes
