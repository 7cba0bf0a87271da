#!/usr/bin/python3
"""train.py - train tiny-moe-4e2r on the KJV Bible, CPU only, one thread, fixed seed.

  /usr/bin/python3 tools/train/train.py [--out tools/train/out] [--steps N] [--probe K]

Stages (each skipped when its output exists, so a killed run resumes where it stopped):
  1. corpus (out/data/train.txt, valid.txt) and SentencePiece tokenizer (out/spm.model)
  2. token streams (out/data/{train,valid}.ids.pt): per chapter [BOS] + ids(chapter text)
  3. training: AdamW, linear warm-up then cosine decay, cross-entropy + aux_coef * Switch
     load-balancing loss; a checkpoint every --ckpt-every steps (out/ckpt.pt, with the optimizer and
     the sampler state), one JSON line per logged step in out/log.jsonl.
Then run export.py to write the GGUF files, fixtures, figures and out/report.json.

--probe K runs K steps without saving anything and prints the step time (to size --steps).
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core: the machine is shared
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
from model import Config, TinyMoE  # noqa: E402

DEFAULTS = dict(seed=1234, vocab=3000, steps=250, batch=8, seq=256, lr=3e-3, min_lr=3e-4,
                warmup=25, wd=0.1, aux_coef=0.02, clip=1.0, ckpt_every=50, log_every=5,
                eval_every=50, eval_windows=16)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    ap.add_argument("--probe", type=int, default=0, help="time K steps, save nothing")
    return ap.parse_args()


def model_config(n_vocab):
    return Config(n_vocab=n_vocab)


def prepare(out, vocab):
    """Stages 1-2; returns (sentencepiece processor, train ids, valid ids)."""
    import sentencepiece as spm
    data = os.path.join(out, "data")
    train_chs, valid_chs, paths = corpus.write_corpus(data)
    sp_model = os.path.join(out, "spm.model")
    if not os.path.exists(sp_model):
        corpus.train_tokenizer(paths["spm_lines"], os.path.join(out, "spm"), vocab)
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    streams = []
    for name, chs in (("train", train_chs), ("valid", valid_chs)):
        p = os.path.join(data, name + ".ids.pt")
        if not os.path.exists(p):
            ids = []
            for ch in chs:
                ids.append(sp.bos_id())
                ids.extend(sp.encode(corpus.chapter_text(ch)))
            torch.save(torch.tensor(ids, dtype=torch.int32), p)
        streams.append(torch.load(p).long())
    return sp, streams[0], streams[1]


def lr_at(a, step):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * min(1.0, t)))


def make_optimizer(model, a):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    keep = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                              {"params": keep, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))


def batch(stream, gen, n, seq):
    starts = torch.randint(0, stream.numel() - seq - 1, (n,), generator=gen)
    x = torch.stack([stream[s:s + seq + 1] for s in starts.tolist()])
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def eval_loss(model, stream, seq, n_windows):
    """Mean next-token loss over n_windows fixed, evenly spaced windows."""
    model.eval()
    step = (stream.numel() - seq - 1) // n_windows
    tot, n = 0.0, 0
    for i in range(n_windows):
        x = stream[i * step:i * step + seq + 1][None]
        logits, _, _ = model(x[:, :-1])
        tot += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
        n += seq
    model.train()
    return tot / n


def train(a, sp, tr, va):
    cfg = model_config(sp.get_piece_size())
    torch.manual_seed(a.seed)
    model = TinyMoE(cfg)
    opt = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(a.seed + 1)
    ckpt_path = os.path.join(a.out, "ckpt.pt")
    log_path = os.path.join(a.out, "log.jsonl")
    step, elapsed = 0, 0.0
    if not a.probe and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        step, elapsed = ck["step"], ck["elapsed"]
        print(f"resumed at step {step}", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"config {cfg.to_dict()}, {n_params / 1e6:.2f}M params, train {tr.numel()} tokens, "
          f"valid {va.numel()} tokens", flush=True)
    last_steps = a.probe if a.probe else a.steps
    t0 = time.time() - elapsed
    while step < last_steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(a, step)
        x, y = batch(tr, gen, a.batch, a.seq)
        logits, aux, _ = model(x)
        ce = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), y.reshape(-1))
        loss = ce + a.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        step += 1
        if a.probe:
            print(f"probe step {step}: {time.time() - t0:.2f}s total, ce {ce.item():.3f}", flush=True)
            continue
        rec = None
        if step % a.log_every == 0 or step == a.steps:
            rec = dict(step=step, ce=round(ce.item(), 5), aux=round(aux.item(), 5),
                       lr=lr_at(a, step - 1), elapsed=round(time.time() - t0, 1))
        if step % a.eval_every == 0 or step == a.steps:
            rec["valid_ce"] = round(eval_loss(model, va, a.seq, a.eval_windows), 5)
        if rec:
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
        if step % a.ckpt_every == 0 or step == a.steps:
            save(ckpt_path, model, opt, gen, step, time.time() - t0, cfg, a)
    return model


def save(path, model, opt, gen, step, elapsed, cfg, a):
    tmp = path + ".tmp"
    torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), gen=gen.get_state(), step=step,
                    elapsed=elapsed, config=cfg.to_dict(), args=vars(a)), tmp)
    os.replace(tmp, path)


def main():
    a = parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(a.out, exist_ok=True)
    t = time.time()
    sp, tr, va = prepare(a.out, a.vocab)
    print(f"data ready in {time.time() - t:.1f}s", flush=True)
    train(a, sp, tr, va)


if __name__ == "__main__":
    main()
