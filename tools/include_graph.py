#!/usr/bin/env python3
"""tools/include_graph.py - the include graph of the tracked sources: its loops.

A loop is a set of files (or folders) that reach each other through
#include "..." (a strongly connected component of more than one node, as
Tarjan's algorithm finds them). Quoted includes resolve as the compiler does
here: the including file's own folder first, then the Makefile's -I list
(include, core, the root). Headers generated at build time (proto/*.pb-c.h)
are outside the graph.

  tools/include_graph.py            file loops, then folder loops
  tools/include_graph.py --edges    also every folder -> folder edge with a count
  tools/include_graph.py --check    check the includes against the table of
                                    docs/architecture.md ("may include"): one
                                    line per include across a boundary the
                                    table does not allow, and per loop between
                                    folders the document does not list
                                    (`a/` <-> `b/`); exit 1 on any
  tools/include_graph.py --check --doc FILE [--root DIR]
                                    the same against another document / tree
  tools/include_graph.py --self-test
                                    --check on a copy of the tree with a
                                    forbidden include added: it must fail
  tools/include_graph.py --calls BUILD
                                    also the loops of the call graph between
                                    source files: a.c -> b.c when a.o uses a
                                    symbol b.o defines (nm on BUILD/obj)

Exit status 0 unless --check finds a violation (or --self-test fails).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

SEARCH = ["include", "core", "."]  # the Makefile's -I order
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def tracked_sources(root):
    if not os.path.exists(os.path.join(root, ".git")):  # a copy (--self-test): every source file
        return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root)
                      for n in names if n.endswith((".c", ".h", ".cu", ".cuh")))
    out = subprocess.run(["git", "ls-files", "*.c", "*.h", "*.cu", "*.cuh"], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if os.path.isfile(os.path.join(root, p))]


def resolve(root, src, name, files):
    for d in [os.path.dirname(src)] + SEARCH:
        cand = os.path.normpath(os.path.join(d, name))
        if cand in files:
            return cand
    return None


def graph(root):
    files = set(tracked_sources(root))
    g = defaultdict(set)
    for f in sorted(files):
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name in INCLUDE.findall(text):
            t = resolve(root, f, name, files)
            if t and t != f:
                g[f].add(t)
        g[f]  # every file is a node
    return g


def tarjan(g):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # iterative DFS (deep include chains must not hit Python's recursion limit)
        work = [(v, iter(sorted(g[v])))]
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
                continue
            if nxt not in index:
                index[nxt] = low[nxt] = counter[0]; counter[0] += 1
                stack.append(nxt); on.add(nxt)
                work.append((nxt, iter(sorted(g[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def call_graph(root, build):
    """a.c -> b.c when a.o has an undefined symbol that b.o defines."""
    objdir = os.path.join(root, build, "obj")
    objs = []
    for d, _, names in os.walk(objdir):
        objs += [os.path.join(d, n) for n in names if n.endswith(".o")]
    defs, uses = {}, defaultdict(set)
    for o in sorted(objs):
        src = os.path.relpath(o, objdir)[:-2] + ".c"
        if not os.path.isfile(os.path.join(root, src)):
            continue  # a stale object of a moved or removed file
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defs[parts[2]] = src
            elif len(parts) == 2 and parts[0] == "U":
                uses[src].add(parts[1])
    g = defaultdict(set)
    for src, syms in uses.items():
        g[src]
        for sym in syms:
            if sym in defs and defs[sym] != src:
                g[src].add(defs[sym])
    return g


def folder(p):
    return os.path.dirname(p) or "."


# ---- --check: the document's table against the includes -------------------

CELL_ITEM = re.compile(r"`([^`\s]+)`")
LOOP = re.compile(r"`([^`\s]+/)`((?:\s*<->\s*`[^`\s]+/`)+)")


def s_strip_parens(text):
    """The cell without its parenthesised remarks (nested ones too): what
    is named inside "(...)" explains, it does not allow."""
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def parse_table(doc):
    """{folder/: allowed} from the markdown table whose header has a column
    "may include": allowed is None for "anything", else a list of folders
    ("core/") and files ("coordinator/moe_exec.h"). Rows whose first cell is
    not one backticked folder ending in "/" are skipped."""
    rows, col = {}, None
    for line in doc.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            col = None  # the table ended: a later table needs its own "may include" header
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        low = [c.lower() for c in cells]
        if "may include" in low:
            col = low.index("may include")
            continue
        if col is None or col >= len(cells) or set(cells[0]) <= set("-: "):
            continue
        m = re.fullmatch(r"`([^`\s]+/)`", cells[0])
        if not m:
            continue
        cell = cells[col]
        if re.search(r"\banything\b", s_strip_parens(cell), re.I):
            rows[m.group(1)] = None
        else:
            rows[m.group(1)] = [i for i in CELL_ITEM.findall(s_strip_parens(cell)) if "/" in i]
    return rows


def parse_loops(doc):
    """The folder loops the document lists, written `a/` <-> `b/` [<-> `c/`]:
    a list of sets of folders (without the trailing "/")."""
    loops = []
    for m in LOOP.finditer(doc):
        names = [m.group(1)] + re.findall(r"`([^`\s]+/)`", m.group(2))
        loops.append({n.rstrip("/") for n in names})
    return loops


def row_of(path, rows):
    """The table's row of a file: the longest folder that holds it."""
    best = None
    for r in rows:
        if path.startswith(r) and (best is None or len(r) > len(best)):
            best = r
    return best


def allowed(src_row, target, rows):
    if src_row is None:
        return False
    if rows[src_row] is None or row_of(target, rows) == src_row:
        return True
    for item in rows[src_row]:
        if not item.endswith("/"):
            if target == item:
                return True
        elif item in rows:  # a row of the table: only what that row holds, not its sub-rows
            if row_of(target, rows) == item:
                return True
        elif target.startswith(item):
            return True
    return False


def check(root, doc_path):
    with open(doc_path, encoding="utf-8") as fh:
        doc = fh.read()
    rows, listed = parse_table(doc), parse_loops(doc)
    if not rows:
        return [f"{doc_path}: no table with a \"may include\" column"]
    g = graph(root)
    bad = []
    for f in sorted(g):
        r = row_of(f, rows)
        for t in sorted(g[f]):
            if not allowed(r, t, rows):
                rule = f"{r} may include {'anything' if r and rows[r] is None else ', '.join(rows[r]) if r else '?'}"
                if r is None:
                    rule = "its folder has no row in the table"
                bad.append(f"{f}: includes {t}: not allowed ({rule}; {os.path.basename(doc_path)})")
    fg = defaultdict(set)
    for a, targets in g.items():
        for b in targets:
            if folder(a) != folder(b):
                fg[folder(a)].add(folder(b))
    for loop in tarjan(fg):
        if not any(set(loop) <= known for known in listed):
            bad.append("include loop between folders not listed in " + os.path.basename(doc_path) + ": "
                       + " <-> ".join(loop))
    return bad


def s_arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def self_test(root, doc_path):
    """--check passes on the tree; it fails on a copy of the tree with one
    file that includes across a boundary (core/ including workers/), and on
    a copy with a loop between two new folders that the document does not list."""
    if check(root, doc_path):
        print("self-test: --check fails on the tree itself")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for f in tracked_sources(root):
            os.makedirs(os.path.join(tmp, os.path.dirname(f)), exist_ok=True)
            shutil.copy(os.path.join(root, f), os.path.join(tmp, f))
        with open(os.path.join(tmp, "core", "zz_layer_fault.c"), "w") as fh:
            fh.write('#include "workers/worker.h"\n')
        bad = check(tmp, doc_path)
        want = "core/zz_layer_fault.c: includes workers/worker.h: not allowed (core/ may include include/"
        if not any(line.startswith(want) for line in bad):
            print("self-test: a forbidden include was not reported: " + repr(bad))
            return 1
        os.remove(os.path.join(tmp, "core", "zz_layer_fault.c"))
        for here, there in (("zz_a", "zz_b"), ("zz_b", "zz_a")):  # tools/ may include anything: only the loop is wrong
            os.makedirs(os.path.join(tmp, "tools", here))
            with open(os.path.join(tmp, "tools", here, "x.h"), "w") as fh:
                fh.write(f'#include "tools/{there}/x.h"\n')
        bad = check(tmp, doc_path)
        if bad != [f"include loop between folders not listed in {os.path.basename(doc_path)}: tools/zz_a <-> tools/zz_b"]:
            print("self-test: a folder loop the document does not list was not reported alone: " + repr(bad))
            return 1
    print("self-test: ok (the tree passes; a forbidden include and an unlisted loop are reported)")
    return 0


def main():
    root = os.path.normpath(s_arg("--root", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
    doc_path = s_arg("--doc", os.path.join(root, "docs", "architecture.md"))
    if "--self-test" in sys.argv:
        return self_test(root, doc_path)
    if "--check" in sys.argv:
        bad = check(root, doc_path)
        for line in bad:
            print(line)
        return 1 if bad else 0
    g = graph(root)
    file_loops = tarjan(g)
    fg = defaultdict(set)
    counts = defaultdict(int)
    for a, targets in g.items():
        fg[folder(a)]
        for b in targets:
            if folder(a) != folder(b):
                fg[folder(a)].add(folder(b))
                counts[(folder(a), folder(b))] += 1
    folder_loops = tarjan(fg)
    print(f"include loops between files: {len(file_loops)}")
    for c in file_loops:
        print(f"  ({len(c)} files) " + " ".join(c))
    print(f"include loops between folders: {len(folder_loops)}")
    for c in folder_loops:
        print("  " + " ".join(c))
    if "--calls" in sys.argv:
        build = sys.argv[sys.argv.index("--calls") + 1]
        call_loops = tarjan(call_graph(root, build))
        print(f"call loops between source files: {len(call_loops)}")
        for c in call_loops:
            print(f"  ({len(c)} files) " + " ".join(c))
    if "--edges" in sys.argv:
        print("folder -> folder (includes):")
        for (a, b), n in sorted(counts.items()):
            print(f"  {a} -> {b} ({n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
