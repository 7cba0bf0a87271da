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
  tools/include_graph.py --check    exit 1 if a folder loop crosses folders
                                    (a folder that includes one above it)
  tools/include_graph.py --calls BUILD
                                    also the loops of the call graph between
                                    source files: a.c -> b.c when a.o uses a
                                    symbol b.o defines (nm on BUILD/obj)

Exit status 0 unless --check finds a violation.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

SEARCH = ["include", "core", "."]  # the Makefile's -I order
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def tracked_sources(root):
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


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
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
    if "--check" in sys.argv and folder_loops:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
