#!/usr/bin/python3
"""soak.py - hold `coli serve` under load while its workers are killed and stopped.

Starts `coli serve` on a model with local CPU workers and, for --minutes, runs four
client threads at once (plain completion, streamed completion, chat, streamed chat),
each sending greedy requests (temperature 0, a fixed seed per prompt) so that every
prompt has exactly one expected reply. The expected replies come from a reference
run first: by default a separate `coli serve --inproc` (no workers at all), or with
--reference quiet a first pass over the worker server before any chaos. Every later
reply is compared with its expected one byte for byte (text and finish_reason).

Meanwhile a chaos thread picks a random worker process (a `coli-worker` child of the
server, found through /proc) every few seconds and either SIGKILLs it or SIGSTOPs
it and SIGCONTs it a while after the scheduler's deadline has passed, so both the
crash path (restart) and the hang path (timeout, fallback, late reply) are taken.

At the end it reports the requests, failures by kind, differing outputs, the chaos
actions, worker restarts and fallbacks by reason (from /metrics), and the server's
RSS and open fds at start and end (from /proc), then stops the server with SIGTERM.
Exit status: 0 when every reply matched and no failure is unexplained; 1 otherwise
(2 for a setup error). Failures the server explains with its documented overload
answers (429 queue_full, 503) are counted but allowed; anything else (connection
errors, 5xx, invalid JSON, a stream without [DONE] or with an error event, a server
that died) is unexplained. Standard library only (run it with /usr/bin/python3).

  soak.py [--coli build/bin/coli] [--model FILE] [--minutes 10] [--devices cpu:2]
          [--reference inproc|quiet] [--json FILE] [--markdown]
Environment: SOAK_MODEL and SOAK_MINUTES set the defaults of --model and --minutes.
"""
import argparse
import collections
import glob
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import serve_load  # noqa: E402  (launch_server: shared with the serving benchmark)

PROMPTS = [
    "The old lighthouse keeper",
    "In the beginning",
    "Once upon a time there was a",
    "The king said to his son",
    "Rain fell on the quiet town and",
    "Write a short note about rivers:",
]
KINDS = ("completion", "completion_stream", "chat", "chat_stream")
# the scheduler's default deadline is 2 s (COLI_LAYER_DEADLINE_MS) plus 1 ms per row
DEADLINE_S = 2.2


class Failure(Exception):
    """A request that did not give a usable reply; kind is a short category."""

    def __init__(self, kind, detail):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def request_body(kind, i, max_tokens):
    """The JSON body of request kind for prompt i: greedy, seeded, fixed length."""
    body = {"max_tokens": max_tokens, "temperature": 0, "seed": 1000 + i, "stream": kind.endswith("_stream")}
    if kind.startswith("chat"):
        body["messages"] = [{"role": "user", "content": PROMPTS[i]}]
    else:
        body["prompt"] = PROMPTS[i]
    return body


def read_json(raw, what):
    try:
        return json.loads(raw.decode("utf-8", "strict"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Failure("invalid_json", f"{what}: {e}") from None


def http_error(status, raw):
    """A Failure for a non-200 answer; 429 and 503 are the server's documented overload replies."""
    kind = "overload" if status in (429, 503) else f"http_{status}"
    return Failure(kind, raw[:200].decode("utf-8", "replace"))


def text_of_choice(kind, choice, streamed):
    if kind.startswith("chat"):
        part = choice.get("delta" if streamed else "message") or {}
        return part.get("content") or ""
    return choice.get("text") or ""


def read_stream(kind, resp):
    """Concatenate a stream's text deltas; returns (text, finish_reason)."""
    text, finish, done = [], None, False
    for payload in serve_load.sse_data(resp):
        if payload == b"[DONE]":
            done = True
            continue
        ev = read_json(payload, "stream event")
        if "error" in ev:
            raise Failure("stream_error", json.dumps(ev["error"])[:200])
        for choice in ev.get("choices") or []:
            text.append(text_of_choice(kind, choice, True))
            finish = choice.get("finish_reason") or finish
    if not done:
        raise Failure("stream_cut", "the stream ended without data: [DONE]")
    return "".join(text), finish


def run_request(port, kind, i, max_tokens, timeout):
    """Send one request; returns (text, finish_reason) or raises Failure."""
    path = "/v1/chat/completions" if kind.startswith("chat") else "/v1/completions"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(request_body(kind, i, max_tokens)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise http_error(resp.status, resp.read())
        if kind.endswith("_stream"):
            return read_stream(kind, resp)
        reply = read_json(resp.read(), "reply")
        choice = (reply.get("choices") or [{}])[0]
        return text_of_choice(kind, choice, False), choice.get("finish_reason")
    except TimeoutError as e:
        raise Failure("timeout", str(e)) from None
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        raise Failure("connection", f"{type(e).__name__}: {e}") from None
    finally:
        conn.close()


def start_server(coli, model, extra):
    """Start coli serve on a free port; returns (process, port)."""
    return serve_load.launch_server([coli, "serve", "-m", model, "--port", "0", "--parallel", "4"] + extra)


def stop_server(proc, grace=60):
    """SIGTERM, then wait; returns the exit status (or 'killed' after grace seconds)."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "killed"


def record_reference(port, max_tokens, timeout):
    """Every (kind, prompt) once, one after another: the expected replies."""
    ref = {}
    for kind in KINDS:
        for i in range(len(PROMPTS)):
            ref[(kind, i)] = run_request(port, kind, i, max_tokens, timeout)
    return ref


def proc_stat_fields(pid):
    """(comm, ppid) of a process from /proc/PID/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    comm = s[s.index("(") + 1:s.rindex(")")]
    return comm, int(s[s.rindex(")") + 2:].split()[1])


def worker_pids(server_pid):
    """The coli-worker processes whose parent is the server."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat_fields(int(name))
            if st and st[1] == server_pid and st[0].startswith("coli-worker"):
                pids.append(int(name))
    return pids


def proc_usage(pid):
    """{'rss_kib', 'fds'} of a process from /proc."""
    rss = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return {"rss_kib": rss, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def scrape_metrics(port):
    """Worker restarts, worker count and fallbacks by reason from /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {"worker_restarts": 0, "workers_up": 0, "fallbacks": collections.Counter()}
    for line in text.splitlines():
        if line.startswith("colibri_worker_restarts_total{"):
            out["worker_restarts"] += int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("colibri_worker_up{"):
            out["workers_up"] += int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("colibri_fallbacks_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out["fallbacks"][reason] += int(float(line.rsplit(" ", 1)[1]))
    out["fallbacks"] = dict(out["fallbacks"])
    return out


class Soak:
    """The shared state of the client and chaos threads."""

    def __init__(self, args, port, server, reference):
        self.args, self.port, self.server, self.ref = args, port, server, reference
        self.lock = threading.Lock()
        self.requests = collections.Counter()
        self.failures = collections.Counter()
        self.failure_examples = {}
        self.diffs = []
        self.chaos = collections.Counter()
        self.stopped = {}  # pid -> monotonic time to SIGCONT it
        self.rss_samples = []  # server RSS KiB, once a minute
        self.deadline = time.monotonic() + args.minutes * 60

    def client(self, kind, seed):
        rng = random.Random(seed)
        while time.monotonic() < self.deadline and self.server.poll() is None:
            i = rng.randrange(len(PROMPTS))
            try:
                got = run_request(self.port, kind, i, self.args.max_tokens, self.args.request_timeout)
            except Failure as f:
                with self.lock:
                    self.requests[kind] += 1
                    self.failures[f.kind] += 1
                    self.failure_examples.setdefault(f.kind, f"{kind} #{i}: {f.detail}")
                time.sleep(0.2)
                continue
            with self.lock:
                self.requests[kind] += 1
                if got != self.ref[(kind, i)]:
                    self.diffs.append({"kind": kind, "prompt": i, "expected": self.ref[(kind, i)], "got": got})

    def chaos_step(self, rng):
        now = time.monotonic()
        for pid, when in list(self.stopped.items()):
            if now >= when:
                self.signal(pid, signal.SIGCONT, "cont")
                del self.stopped[pid]
        pids = [p for p in worker_pids(self.server.pid) if p not in self.stopped]
        if not pids:
            return
        pid = rng.choice(pids)
        if rng.random() < self.args.kill_share:
            self.signal(pid, signal.SIGKILL, "kill")
        else:
            self.signal(pid, signal.SIGSTOP, "stop")
            self.stopped[pid] = now + DEADLINE_S + rng.uniform(0.5, self.args.max_stop)

    def signal(self, pid, sig, what):
        try:
            os.kill(pid, sig)
            self.chaos[what] += 1
        except ProcessLookupError:
            self.chaos[what + "_gone"] += 1

    def chaos_loop(self, seed):
        rng = random.Random(seed)
        time.sleep(min(rng.uniform(1, self.args.chaos_every), max(0.0, self.deadline - time.monotonic())))
        while time.monotonic() < self.deadline and self.server.poll() is None:
            self.chaos_step(rng)
            end = time.monotonic() + rng.uniform(1, self.args.chaos_every)
            while time.monotonic() < end and time.monotonic() < self.deadline:
                time.sleep(0.1)
                now = time.monotonic()
                for pid, when in list(self.stopped.items()):
                    if now >= when:
                        self.signal(pid, signal.SIGCONT, "cont")
                        del self.stopped[pid]
        for pid in list(self.stopped):
            self.signal(pid, signal.SIGCONT, "cont")
        self.stopped.clear()


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "models", "*.gguf")))
    ap.add_argument("--coli", default="build/bin/coli")
    ap.add_argument("--model", default=os.environ.get("SOAK_MODEL") or (models[0] if models else None))
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "10")))
    ap.add_argument("--devices", default="cpu:2", help="local workers of coli serve (default cpu:2)")
    ap.add_argument("--threads", default="1", help="coli serve -t (default 1)")
    ap.add_argument("--reference", choices=("inproc", "quiet"), default="inproc",
                    help="expected replies from a coli serve --inproc run (default) or a first quiet pass")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--chaos-every", type=float, default=6.0, help="seconds between chaos actions: 1 to this")
    ap.add_argument("--kill-share", type=float, default=0.5, help="share of chaos actions that SIGKILL")
    ap.add_argument("--max-stop", type=float, default=5.0, help="a stop lasts the deadline + 0.5 to this many s")
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the report as JSON to this file")
    ap.add_argument("--markdown", action="store_true", help="also print the report as a markdown table")
    args = ap.parse_args()
    if not args.model or not os.path.exists(args.model):
        ap.error(f"no model: {args.model!r} (set --model or SOAK_MODEL)")
    return args


def reference_replies(args):
    """The expected reply of every (kind, prompt), from a --inproc server; None for --reference quiet."""
    if args.reference != "inproc":
        return None
    proc, port = start_server(args.coli, args.model, ["-t", args.threads, "--inproc"])
    try:
        return record_reference(port, args.max_tokens, args.request_timeout)
    finally:
        stop_server(proc)


def wait_workers_up(port, n, seconds):
    """Scrape /metrics until n workers are up (restarts after the last kill) or seconds pass."""
    until = time.monotonic() + seconds
    m = scrape_metrics(port)
    while m["workers_up"] < n and time.monotonic() < until:
        time.sleep(0.5)
        m = scrape_metrics(port)
    return m


def soak_run(args, proc, port, ref):
    """The timed phase: 4 clients and the chaos thread; returns the Soak state."""
    soak = Soak(args, port, proc, ref)
    threads = [threading.Thread(target=soak.client, args=(k, args.seed * 10 + n)) for n, k in enumerate(KINDS)]
    threads.append(threading.Thread(target=soak.chaos_loop, args=(args.seed,)))
    for t in threads:
        t.start()
    next_line = time.monotonic() + 60
    while any(t.is_alive() for t in threads):
        threads[-1].join(timeout=1)
        if time.monotonic() >= next_line:
            next_line += 60
            rss = proc_usage(proc.pid)["rss_kib"] if proc.poll() is None else None
            with soak.lock:
                soak.rss_samples.append(rss)
                print(f"soak: {time.strftime('%H:%M:%S')} requests {sum(soak.requests.values())}, failures "
                      f"{dict(soak.failures)}, differing {len(soak.diffs)}, chaos {dict(soak.chaos)}, "
                      f"server RSS {rss} KiB", flush=True)
    for t in threads:
        t.join()
    return soak


def main():
    args = parse_args()
    # SIGTERM (or SIGINT) ends the run like an error would: the finally clauses stop the servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    load_before = open("/proc/loadavg").read().split()[0]
    started = time.time()
    try:
        ref = reference_replies(args)
        proc, port = start_server(args.coli, args.model, ["-t", args.threads, "--devices", args.devices])
    except (RuntimeError, Failure) as e:
        print(f"soak: setup failed: {e}", file=sys.stderr)
        return 2
    try:
        # the worker server's quiet pass: the reference itself, or checked against it
        quiet = record_reference(port, args.max_tokens, args.request_timeout)
        quiet_diffs = [k for k in quiet if ref is not None and quiet[k] != ref[k]]
        ref = ref or quiet
        usage_start, metrics_start = proc_usage(proc.pid), scrape_metrics(port)
        soak = soak_run(args, proc, port, ref)
        alive = proc.poll() is None
        # the last kill's restart may be under way: give it (and its back-off) a moment
        metrics_end = wait_workers_up(port, metrics_start["workers_up"], 20) if alive else None
        usage_end = proc_usage(proc.pid) if alive else None
    except Failure as e:
        print(f"soak: failed before the timed phase: {e}", file=sys.stderr)
        return 1
    finally:
        exit_status = stop_server(proc)
    report = build_report(args, soak, quiet_diffs, usage_start, usage_end, metrics_start, metrics_end,
                          exit_status, load_before, started)
    print_report(report, args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if report["ok"] else 1


def build_report(args, soak, quiet_diffs, usage_start, usage_end, m_start, m_end, exit_status, load_before, started):
    unexplained = {k: v for k, v in soak.failures.items() if k != "overload"}
    problems = []
    if soak.diffs or quiet_diffs:
        problems.append(f"{len(soak.diffs) + len(quiet_diffs)} differing outputs")
    if unexplained:
        problems.append(f"unexplained failures {dict(unexplained)}")
    if usage_end is None:
        problems.append("the server died during the run")
    return {
        "model": args.model, "minutes": args.minutes, "devices": args.devices, "reference": args.reference,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "wall_s": round(time.time() - started, 1),
        "load_before": load_before, "load_after": open("/proc/loadavg").read().split()[0],
        "requests": dict(soak.requests), "requests_total": sum(soak.requests.values()),
        "failures": dict(soak.failures), "failure_examples": soak.failure_examples,
        "differing_outputs": len(soak.diffs) + len(quiet_diffs), "diff_examples": soak.diffs[:5],
        "quiet_pass_differs_from_inproc": [f"{k[0]}#{k[1]}" for k in quiet_diffs],
        "chaos": dict(soak.chaos), "metrics_start": m_start, "metrics_end": m_end,
        "server_start": usage_start, "server_end": usage_end, "server_exit": exit_status,
        "server_rss_kib_per_minute": soak.rss_samples,
        "ok": not problems, "problems": problems,
    }


def print_report(r, markdown):
    m0, m1 = r["metrics_start"], r["metrics_end"] or {}
    s0, s1 = r["server_start"], r["server_end"] or {}
    rows = [
        ("model", os.path.basename(r["model"])), ("devices", r["devices"]), ("minutes", r["minutes"]),
        ("reference", r["reference"]), ("requests", f"{r['requests_total']} {r['requests']}"),
        ("failures", r["failures"] or 0), ("differing outputs", r["differing_outputs"]),
        ("chaos actions", r["chaos"]),
        ("worker restarts", f"{m0['worker_restarts']} -> {m1.get('worker_restarts')}"),
        ("workers up at end", f"{m1.get('workers_up')} of {m0['workers_up']} (after up to 20 s)"),
        ("fallbacks by reason", f"{m0['fallbacks'] or 0} -> {m1.get('fallbacks') or 0}"),
        ("server RSS KiB", f"{s0['rss_kib']} -> {s1.get('rss_kib')}"),
        ("server open fds", f"{s0['fds']} -> {s1.get('fds')}"),
        ("server exit on SIGTERM", r["server_exit"]), ("load average", f"{r['load_before']} -> {r['load_after']}"),
        ("wall s", r["wall_s"]), ("verdict", "ok" if r["ok"] else "FAILED: " + "; ".join(r["problems"])),
    ]
    for k, v in rows:
        print(f"soak: {k}: {v}")
    for kind, ex in r["failure_examples"].items():
        print(f"soak: first {kind} failure: {ex}")
    for d in r["diff_examples"]:
        print(f"soak: differs: {d}")
    if markdown:
        print("\n| | |\n|---|---|")
        for k, v in rows:
            print(f"| {k} | {v} |")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
