#!/usr/bin/python3
"""export.py - tiny-moe-4e2r from a training checkpoint to GGUF, test fixtures and the model card's figures.

  /usr/bin/python3 tools/train/export.py [--out tools/train/out] [--coli build/bin/coli]

Writes
  models/tiny-moe-4e2r-f16.gguf            the shipped file (2-D/3-D weights F16; norms, routers F32)
  OUT/tiny-moe-4e2r-f32.gguf               every tensor F32 (not committed; for the F32 check)
  models/tiny-moe-4e2r-q8_0.gguf           with --coli: `coli quantize` of the F16 file
  tests/fixtures/tiny-moe-4e2r-valid.txt   a held-out text (~3 KB) for the perplexity/tokenizer test
  tests/fixtures/tiny-moe-4e2r-ref-logits.txt   reference ids, logits, perplexity, tokenizer ids
  docs/img/tiny-moe-4e2r-loss.png, docs/img/tiny-moe-4e2r-experts.png
  OUT/report.json                          every figure the model card quotes
With --coli it also runs the engine (`coli logits`, `coli perplexity`) and records the agreement.

Reference logits are computed in float64 by the same PyTorch model: with the weights as trained
(the F32 file) and with the weights rounded to fp16 exactly as the F16 file stores them.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
import gguf_write as gw  # noqa: E402
from model import Config, TinyMoE  # noqa: E402

NAME = "tiny-moe-4e2r"
FIX_IDS, FIX_TOP = 64, 10
FIXTURE_TEXT_CHARS = 3000


def load_model(out):
    ck = torch.load(os.path.join(out, "ckpt.pt"))
    model = TinyMoE(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck


def gguf_tensors(model):
    """(name, float32 numpy array) with llama.cpp's Mixtral names and layouts. The attention uses the
    NORM rope layout already, so attn_q/attn_k are stored as trained (no permutation)."""
    g = lambda t: t.detach().float().numpy()  # noqa: E731
    yield "token_embd.weight", g(model.tok.weight)
    yield "output_norm.weight", g(model.norm.weight)
    yield "output.weight", g(model.out.weight)
    for i, b in enumerate(model.blocks):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", g(b.attn_norm.weight)
        yield p + "attn_q.weight", g(b.attn.q.weight)
        yield p + "attn_k.weight", g(b.attn.k.weight)
        yield p + "attn_v.weight", g(b.attn.v.weight)
        yield p + "attn_output.weight", g(b.attn.o.weight)
        yield p + "ffn_norm.weight", g(b.ffn_norm.weight)
        yield p + "ffn_gate_inp.weight", g(b.moe.router.weight)    # [n_expert, n_embd]
        yield p + "ffn_gate_exps.weight", g(b.moe.gate)             # [n_expert, n_ff, n_embd]
        yield p + "ffn_up_exps.weight", g(b.moe.up)
        yield p + "ffn_down_exps.weight", g(b.moe.down)             # [n_expert, n_embd, n_ff]


def stays_f32(name, ndim):
    return ndim < 2 or "_norm.weight" in name or "ffn_gate_inp" in name


def tokenizer_kvs(w, sp):
    """The SentencePiece vocabulary the way llama.cpp's converter writes it for Llama/Mixtral."""
    n = sp.get_piece_size()
    types = []
    for i in range(n):
        t = 1                                   # NORMAL
        if sp.is_unknown(i):
            t = 2
        elif sp.is_control(i):
            t = 3
        elif sp.is_unused(i):
            t = 5
        elif sp.is_byte(i):
            t = 6
        types.append(t)
    w.kv("tokenizer.ggml.model", gw.STR, "llama")
    w.kv("tokenizer.ggml.pre", gw.STR, "default")
    w.kv_array("tokenizer.ggml.tokens", gw.STR, [sp.id_to_piece(i) for i in range(n)])
    w.kv_array("tokenizer.ggml.scores", gw.F32, [sp.get_score(i) for i in range(n)])
    w.kv_array("tokenizer.ggml.token_type", gw.I32, types)
    w.kv("tokenizer.ggml.bos_token_id", gw.U32, sp.bos_id())
    w.kv("tokenizer.ggml.eos_token_id", gw.U32, sp.eos_id())
    w.kv("tokenizer.ggml.unknown_token_id", gw.U32, sp.unk_id())
    w.kv("tokenizer.ggml.add_bos_token", gw.BOOL, True)
    w.kv("tokenizer.ggml.add_eos_token", gw.BOOL, False)


def write_gguf(model, sp, path, dtype):
    c = model.cfg
    w = gw.Writer()
    w.kv("general.architecture", gw.STR, "llama")
    w.kv("general.name", gw.STR, NAME)
    if dtype == "F32":
        w.kv("general.file_type", gw.U32, 0)
    for key, t, v in (("context_length", gw.U32, c.n_ctx), ("embedding_length", gw.U32, c.n_embd),
                      ("block_count", gw.U32, c.n_layer), ("feed_forward_length", gw.U32, c.n_ff),
                      ("attention.head_count", gw.U32, c.n_head),
                      ("attention.head_count_kv", gw.U32, c.n_head_kv),
                      ("rope.freq_base", gw.F32, c.rope_theta),
                      ("rope.dimension_count", gw.U32, c.n_embd // c.n_head),
                      ("attention.layer_norm_rms_epsilon", gw.F32, c.eps),
                      ("expert_count", gw.U32, c.n_expert), ("expert_used_count", gw.U32, c.n_expert_used),
                      ("vocab_size", gw.U32, c.n_vocab)):
        w.kv("llama." + key, t, v)
    tokenizer_kvs(w, sp)
    if dtype != "F32":
        w.kv("general.quantization_version", gw.U32, 2)
        w.kv("general.file_type", gw.U32, 1)
    tensors = list(gguf_tensors(model))
    if dtype != "F32":  # llama-quantize's order: non-layer tensors first, then by layer, then by name
        def key(t):
            m = re.match(r"blk\.(\d+)\.", t[0])
            return (int(m.group(1)) if m else -1, t[0])
        tensors.sort(key=key)
    for name, arr in tensors:
        w.tensor(name, arr, "F32" if dtype == "F32" or stays_f32(name, arr.ndim) else dtype)
    w.write(path)


def f16_rounded(model):
    """A float64 copy whose weights are exactly what the F16 file stores."""
    m = TinyMoE(model.cfg)
    m.load_state_dict(model.state_dict())
    names = {id(p): n for n, p in m.named_parameters()}
    with torch.no_grad():
        for p in m.parameters():
            n = names[id(p)]
            if p.dim() >= 2 and "router" not in n:
                p.copy_(p.half().float())
    return m.double().eval()


def exact64(model):
    m = TinyMoE(model.cfg)
    m.load_state_dict(model.state_dict())
    return m.double().eval()


@torch.no_grad()
def logits64(m, ids):
    return m(torch.tensor([ids]))[0][0]


@torch.no_grad()
def perplexity(m, ids, window):
    """Exactly `coli perplexity`'s convention (tools/coli/cmd_perplexity.c) with stride = window:
    non-overlapping windows from an empty cache; the first window scores tokens 1.., every later
    window all its tokens but the first."""
    nll, n = 0.0, 0
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start:start + window]
        if len(chunk) < 2:
            break
        lg = logits64(m, chunk)
        lp = F.log_softmax(lg[:-1], -1)
        tgt = torch.tensor(chunk[1:])
        nll -= lp.gather(1, tgt[:, None]).sum().item()
        n += len(chunk) - 1
    return math.exp(nll / n), n


@torch.no_grad()
def expert_usage(m, ids, window):
    """Share of routed (token, slot) assignments per layer and expert over the windows of ids."""
    c = m.cfg
    counts = np.zeros((c.n_layer, c.n_expert))
    for start in range(0, len(ids), window):
        chunk = ids[start:start + window]
        _, _, routes = m(torch.tensor([chunk]), want_routes=True)
        for layer, idx in enumerate(routes):
            counts[layer] += np.bincount(idx.reshape(-1).numpy(), minlength=c.n_expert)
    return counts / counts.sum(1, keepdims=True)


@torch.no_grad()
def router_gaps(m, ids):
    """Per position, the smallest gap over layers between the k-th and (k+1)-th router probability:
    where it is tiny, a rounding difference can pick another expert."""
    k = m.cfg.n_expert_used
    probs = []
    hooks = [b.moe.router.register_forward_hook(lambda mod, i, o: probs.append(o.softmax(-1)))
             for b in m.blocks]
    m(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    srt = torch.stack(probs).sort(-1, descending=True).values     # (L, T, X)
    return (srt[..., k - 1] - srt[..., k]).min(0).values.tolist()


def fixture_text(valid_chapters):
    """The first held-out chapters, cut at a verse end after FIXTURE_TEXT_CHARS characters."""
    text = "".join(corpus.chapter_text(c) for c in valid_chapters[:3])
    cut = text.find(". ", FIXTURE_TEXT_CHARS)
    return text[:cut + 1] + "\n"


def top_pairs(row, k):
    v, i = row.topk(k)
    return list(zip(i.tolist(), v.tolist()))


def write_fixture(path, m32, m16, sp, sp_model, text, window):
    """The reference file tests/test_bundled_model.c reads (format in its header comment)."""
    ids = [sp.bos_id()] + sp.encode(text)
    fix = ids[:FIX_IDS]
    l32, l16 = logits64(m32, fix), logits64(m16, fix)
    ppl16, n16 = perplexity(m16, ids, window)
    ppl32, _ = perplexity(m32, ids, window)
    lines = [l for l in text.split("\n") if l]
    cli = corpus.spm_encode_cli(sp_model, lines)
    lib = [sp.encode(l) for l in lines]
    if cli != lib:
        raise SystemExit("spm_encode and the sentencepiece library disagree on the fixture text")
    gaps = router_gaps(m16, fix)
    with open(path, "w") as f:
        f.write(f"# {NAME} reference, written by tools/train/export.py - do not edit.\n"
                "# ids: BOS + the first ids of tests/fixtures/tiny-moe-4e2r-valid.txt (held-out KJV text).\n"
                "# pos P: then K triples id logit_f16 logit_f32: the top-K ids of the F16-weight logits at\n"
                "# position P (predicting the token after ids[P]), with the float64 PyTorch logits of the\n"
                "# model with the F16 file's weights and with the trained (F32) weights.\n"
                "# ppl: perplexity of the whole text (BOS + ids), coli perplexity's windows (ctx) for the F16\n"
                "# and F32 weights and the number of scored tokens. line: spm_encode ids of each text line.\n")
        f.write(f"ctx {window}\n")
        f.write(f"ppl {ppl16:.6f} {ppl32:.6f} {n16}\n")
        f.write("ids " + " ".join(map(str, fix)) + "\n")
        f.write(f"top {FIX_TOP}\n")
        for p in range(len(fix)):
            trip = [f"{i} {v:.6f} {l32[p, i].item():.6f}" for i, v in top_pairs(l16[p], FIX_TOP)]
            f.write(f"pos {p} " + " ".join(trip) + "\n")
        f.write(f"lines {len(lines)}\n")
        for ids_line in cli:
            f.write("line " + " ".join(map(str, ids_line)) + "\n")
    d = (l16 - l32).abs().max().item()
    return dict(fixture_ids=len(fix), fixture_ppl_f16=ppl16, fixture_ppl_f32=ppl32, fixture_scored=n16,
                fixture_min_router_gap=min(gaps), fixture_f16_vs_f32_max_delta=d,
                fixture_text_tokens=len(ids), fixture_lines=len(lines))


def plot_loss(log, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot([r["step"] for r in log], [r["ce"] for r in log], lw=1, label="train (batch cross-entropy)")
    ev = [r for r in log if "valid_ce" in r]
    ax.plot([r["step"] for r in ev], [r["valid_ce"] for r in ev], "o-", label="validation (16 windows)")
    ax.set_xlabel("step (8 x 256 tokens)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"{NAME}: training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_experts(share, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    L, X = share.shape
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    im = ax.imshow(share * 100, cmap="viridis", vmin=0, vmax=100 * 2 / X)
    for i in range(L):
        for j in range(X):
            ax.text(j, i, f"{share[i, j] * 100:.1f}%", ha="center", va="center", color="w", fontsize=9)
    ax.set_xticks(range(X), [f"expert {j}" for j in range(X)])
    ax.set_yticks(range(L), [f"layer {i}" for i in range(L)])
    ax.set_title("share of routed tokens, held-out text")
    fig.colorbar(im, ax=ax, label="%")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def engine_logits(coli, model_path, ids, k):
    r = subprocess.run([coli, "logits", "-m", model_path, "--ids", ",".join(map(str, ids)),
                        "--top", str(k), "--json", "--inproc", "-t", "1"], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)["positions"]


def engine_check(coli, model_path, ref, ids):
    """max |engine - reference| over the engine's top-20 ids at every position, argmax agreement."""
    pos = engine_logits(coli, model_path, ids, 20)
    d, agree = 0.0, 0
    for p, pairs in enumerate(pos):
        for i, v in pairs:
            d = max(d, abs(v - ref[p, i].item()))
        agree += pairs[0][0] == int(ref[p].argmax())
    return dict(max_delta=d, argmax_agree=agree, positions=len(pos))


def engine_ppl(coli, model_path, text_path):
    r = subprocess.run([coli, "perplexity", "-m", model_path, "-f", text_path, "--inproc", "-t", "1"],
                       capture_output=True, text=True, check=True)
    return float(re.search(r"perplexity: ([0-9.]+)", r.stdout).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--coli", default="", help="the coli binary: check the engine and write the Q8_0 file")
    a = ap.parse_args()
    torch.set_num_threads(1)
    import sentencepiece as spm
    sp_model = os.path.join(a.out, "spm.model")
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    model, ck = load_model(a.out)
    c = model.cfg
    paths = dict(f16=os.path.join(ROOT, "models", NAME + "-f16.gguf"),
                 f32=os.path.join(a.out, NAME + "-f32.gguf"),
                 q8=os.path.join(ROOT, "models", NAME + "-q8_0.gguf"),
                 fix_text=os.path.join(ROOT, "tests", "fixtures", NAME + "-valid.txt"),
                 fix_ref=os.path.join(ROOT, "tests", "fixtures", NAME + "-ref-logits.txt"),
                 img=os.path.join(ROOT, "docs", "img"))
    for d in ("models", "tests/fixtures", "docs/img"):
        os.makedirs(os.path.join(ROOT, d), exist_ok=True)
    write_gguf(model, sp, paths["f16"], "F16")
    write_gguf(model, sp, paths["f32"], "F32")
    m32, m16 = exact64(model), f16_rounded(model)
    train_chs, valid_chs = corpus.split_chapters(corpus.read_kjv_chapters())
    text = fixture_text(valid_chs)
    with open(paths["fix_text"], "w", encoding="utf-8") as f:
        f.write(text)
    rep = dict(config=c.to_dict(), n_params=sum(p.numel() for p in model.parameters()),
               steps=ck["step"], train_seconds=ck["elapsed"], args=ck["args"])
    rep.update(write_fixture(paths["fix_ref"], m32, m16, sp, sp_model, text, c.n_ctx))
    valid_text = "".join(corpus.chapter_text(ch) for ch in valid_chs)
    valid_ids = [sp.bos_id()] + sp.encode(valid_text)
    rep["valid_ppl_f32"], rep["valid_scored"] = perplexity(m32, valid_ids, c.n_ctx)
    rep["valid_ppl_f16"], _ = perplexity(m16, valid_ids, c.n_ctx)
    share = expert_usage(m32, valid_ids, c.n_ctx)
    rep["expert_share"] = share.round(4).tolist()
    with open(os.path.join(a.out, "log.jsonl")) as f:
        log = [json.loads(l) for l in f]
    rep["final_train_ce_last50"] = float(np.mean([r["ce"] for r in log if r["step"] > ck["step"] - 50]))
    rep["final_valid_ce_16win"] = [r for r in log if "valid_ce" in r][-1]["valid_ce"]
    plot_loss(log, os.path.join(paths["img"], NAME + "-loss.png"))
    plot_experts(share, os.path.join(paths["img"], NAME + "-experts.png"))
    rep["bytes_f16"] = os.path.getsize(paths["f16"])
    rep["bytes_f32"] = os.path.getsize(paths["f32"])
    if a.coli:
        rep.update(run_engine(a.coli, paths, m32, m16, valid_text, a.out))
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    print(json.dumps({k: v for k, v in rep.items() if k not in ("args",)}, indent=1))


def run_engine(coli, paths, m32, m16, valid_text, out):
    ids = [int(t) for t in open(paths["fix_ref"]).read().split("\nids ")[1].split("\n")[0].split()]
    r = {}
    r["engine_f32_vs_ref"] = engine_check(coli, paths["f32"], logits64(m32, ids), ids)
    r["engine_f16_vs_ref"] = engine_check(coli, paths["f16"], logits64(m16, ids), ids)
    vpath = os.path.join(out, "data", "valid.txt")
    with open(vpath, "w", encoding="utf-8") as f:
        f.write(valid_text)
    r["engine_valid_ppl_f16"] = engine_ppl(coli, paths["f16"], vpath)
    r["engine_valid_ppl_f32"] = engine_ppl(coli, paths["f32"], vpath)
    r["engine_fixture_ppl_f16"] = engine_ppl(coli, paths["f16"], paths["fix_text"])
    subprocess.run([coli, "quantize", paths["f16"], paths["q8"], "Q8_0"], check=True, capture_output=True)
    r["bytes_q8_0"] = os.path.getsize(paths["q8"])
    r["engine_valid_ppl_q8_0"] = engine_ppl(coli, paths["q8"], vpath)
    return r


if __name__ == "__main__":
    main()
