#!/usr/bin/env python3
"""serve_load.py - a small load generator for `coli serve`.

Starts `coli serve` (or uses a running one with --url), then for each
concurrency level S runs S client threads at once, each sending --requests
streamed /v1/completions one after another (distinct prompts, greedy,
max_tokens -n, ignoring nothing: a request may stop early at an EOG token).
Every content chunk's arrival time is recorded. Per level it prints:

  streams, requests, generated tokens, wall seconds,
  aggregate tok/s (generated tokens / wall time of the level),
  p50 / p99 inter-token latency (gaps between consecutive chunks of one
  request, over all requests of the level), p50 time to first token, and
  decode tok/s: streams x the median per-request decode rate (tokens after
  the first over the time they took), the rate at which S streams decode
  together once their prompts are in; the aggregate tok/s above also pays
  for every prompt's prefill and queueing (short requests: mostly that).

and, with --markdown, a table row per level. With --docs FILE --section KEY
the table also replaces FILE's section between the coli-serve KEY markers
(run_bench.py's rewrite_docs; the rest of the file is left alone), with the
date, commit, load average and command. Standard library only.

  serve_load.py --coli build/bin/coli --model FILE [--streams 1,4,8]
                [--requests 2] [-n 64] [--serve-args "-t 2"] [--markdown]
                [--docs docs/benchmarks.md --section KEY]
  serve_load.py --url http://127.0.0.1:8080 ...
"""
import argparse
import datetime
import os
import http.client
import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

WORDS = ("the river runs past old stone walls where children play and merchants call "
         "while rain falls on the quiet hills beyond the town").split()


def prompt_of(i):
    """A distinct prompt per request (no shared prefix beyond a few words)."""
    n = 8 + (i * 7) % 24
    return " ".join(WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(n)) + f" ({i})"


def sse_data(resp):
    """Yield the payload (bytes after "data: ") of each server-sent event of
    resp as it arrives, "[DONE]" included. Shared with tools/soak/soak.py."""
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event.startswith(b"data: "):
                yield event[6:]


def one_request(host, port, body):
    """POST a streamed completion; return the arrival times of its content chunks and the start."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    times = []
    for payload in sse_data(resp):
        if payload == b"[DONE]":
            continue
        # invalid UTF-8 can come at a cut-off last token (the server passes its bytes on)
        ev = json.loads(payload.decode("utf-8", "replace"))
        if ev.get("choices") and ev["choices"][0].get("text"):
            times.append(time.monotonic())
    conn.close()
    return t0, times


def run_level(host, port, streams, requests, n_predict, base):
    """streams threads x requests each; returns (tokens, wall, gaps, ttfts, rates)."""
    gaps, ttfts, rates, tokens, errors = [], [], [], [0], []
    lock = threading.Lock()

    def client(c):
        for r in range(requests):
            i = base + c * requests + r
            body = {"prompt": prompt_of(i), "max_tokens": n_predict, "temperature": 0, "stream": True}
            try:
                t0, times = one_request(host, port, body)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))
                return
            with lock:
                tokens[0] += len(times)
                if times:
                    ttfts.append(times[0] - t0)
                gaps.extend(b - a for a, b in zip(times, times[1:]))
                if len(times) > 1 and times[-1] > times[0]:
                    rates.append((len(times) - 1) / (times[-1] - times[0]))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(streams)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, first: {errors[0]}")
    return tokens[0], wall, gaps, ttfts, rates


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def markdown_table(rows):
    """The levels as a markdown table; x 1 stream is relative to the first level."""
    one, one_dec = rows[0][4], rows[0][8]
    lines = ["| streams | requests | tokens | aggregate tok/s | x 1 stream | inter-token p50 ms | p99 ms "
             "| first token p50 ms | decode tok/s | x 1 stream |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s, nr, tok, wall, tps, p50, p99, ttft, dec in rows:
        lines.append(f"| {s} | {nr} | {tok} | {tps:.1f} | {tps / one:.2f} | {p50:.1f} | {p99:.1f} | {ttft:.1f} "
                     f"| {dec:.1f} | {dec / one_dec:.2f} |")
    return "\n".join(lines)


def write_docs(path, key, table, load_before):
    """Rewrite path's coli-serve KEY section with table, stamped with date, commit, load, command."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
    import run_bench
    m = run_bench.machine()
    begin = f"<!-- coli-serve:{key}:begin (tools/bench/serve_load.py rewrites this section) -->"
    end = f"<!-- coli-serve:{key}:end -->"
    load_after = open("/proc/loadavg").read().split()[0]
    stamp = (f"Generated by `tools/bench/serve_load.py` on {m['date']} (commit {m['commit'] or '?'}), "
             f"{m['cores']} cores, load average {load_before}-{load_after}:")
    command = "python3 tools/bench/serve_load.py " + shlex.join(sys.argv[1:])
    text = "\n".join([begin, "", stamp, "", "```sh", command, "```", "", table, "", end])
    run_bench.rewrite_docs(path, text, begin, end)


def launch_server(cmd):
    """Start `coli serve ... --port 0` (cmd, a list); wait for its ready line.
    Returns (process, port); its stdout keeps being drained so the server never
    blocks on a full pipe. Shared with tools/soak/soak.py."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    port = None
    for line in proc.stdout:
        if "listening on http://" in line:
            port = int(line.rsplit(":", 1)[1].split("/")[0])
        if "coli serve: ready" in line:
            break
    if port is None:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"coli serve did not start ({' '.join(cmd)})")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, port


def start_server(args):
    cmd = [args.coli, "serve", "-m", args.model, "--port", "0", "--parallel", str(max(args.streams))]
    return launch_server(cmd + shlex.split(args.serve_args))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coli", default="build/bin/coli")
    ap.add_argument("--model")
    ap.add_argument("--url", help="a running server instead of starting one")
    ap.add_argument("--serve-args", default="", help="more flags for coli serve")
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--requests", type=int, default=2, help="requests per stream, one after another")
    ap.add_argument("-n", type=int, default=64, help="max_tokens per request")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--docs", help="also write the table into this file's coli-serve section")
    ap.add_argument("--section", help="which coli-serve section of --docs (e.g. batching)")
    args = ap.parse_args()
    if bool(args.docs) != bool(args.section):
        ap.error("--docs and --section go together")
    load_before = open("/proc/loadavg").read().split()[0]
    args.streams = [int(s) for s in args.streams.split(",")]
    proc = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port
    else:
        if not args.model:
            ap.error("--model or --url is needed")
        proc, port = start_server(args)
        host = "127.0.0.1"
    try:
        one_request(host, port, {"prompt": "warm up", "max_tokens": 4, "stream": True})
        rows, base = [], 0
        for s in args.streams:
            tokens, wall, gaps, ttfts, rates = run_level(host, port, s, args.requests, args.n, base)
            base += s * args.requests
            rows.append((s, s * args.requests, tokens, wall, tokens / wall, pct(gaps, 50) * 1e3,
                         pct(gaps, 99) * 1e3, pct(ttfts, 50) * 1e3, s * pct(rates, 50)))
            print(f"streams {s}: {s * args.requests} requests, {tokens} tokens in {wall:.2f} s: "
                  f"{tokens / wall:.1f} tok/s; inter-token p50 {rows[-1][5]:.1f} ms p99 {rows[-1][6]:.1f} ms; "
                  f"first token p50 {rows[-1][7]:.1f} ms; decode {rows[-1][8]:.1f} tok/s", flush=True)
        if args.markdown:
            print("\n" + markdown_table(rows))
        if args.docs:
            write_docs(args.docs, args.section, markdown_table(rows), load_before)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
