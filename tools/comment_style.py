#!/usr/bin/env python3
"""tools/comment_style.py - one comment marker (docs/architecture.md "Style").

Prose comments are /* ... */ blocks; a section banner is the llama2.c pair
    // ---------------------------------------------------------------------------
    // title
Converts, at column 0 of the tracked C/CUDA sources: runs of // prose lines (czmq's
"//  text") into /* */ blocks, and one-line /* ---- title ---- */ banners into the pair.
Comments inside functions (indented) are left alone, and so are tests/ (their tables).
Mechanical: rerun it after a merge.

  tools/comment_style.py          rewrite the files, print the ones changed
  tools/comment_style.py --check  list the lines to convert, exit 1 if any
"""
import re
import subprocess
import sys

BANNER = "// " + "-" * 76
SKIP = re.compile(r"^(tests/|build/|plugins/xdna/xrt_synth/include/|core/tokenizer/unicode_tables\.c$)")
NOTE_DIRS = ()
IS_BANNER = re.compile(r"^//\s*-{3,}\s*$")
KEEP = re.compile(r"clang-format|NOLINT|/\*|\*/")
OLD_BANNER = re.compile(r"^/\*\s*-{3,}\s+(.*?)\s*-*\s*\*/\s*$")


def s_convert(lines):
    out, i, n_changed = [], 0, 0
    while i < len(lines):
        line = lines[i]
        m = OLD_BANNER.match(line)
        if m and m.group(1):
            out += [BANNER, "// " + m.group(1)]
            n_changed += 1
            i += 1
            continue
        if not line.startswith("//"):
            out.append(line)
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("//"):
            j += 1
        run = lines[i:j]
        if any(IS_BANNER.match(r) or r.rstrip().endswith("\\") or KEEP.search(r) for r in run):
            out += run  # a banner and its title, a tool's directive, a comment marker in the text
        else:
            text = [re.sub(r"^//\s?\s?", "", r).rstrip() for r in run]
            if len(text) == 1:
                out.append("/* " + text[0] + " */")
            else:
                out.append("/* " + text[0])
                out += [(" * " + t).rstrip() for t in text[1:-1]]
                out.append((" * " + text[-1]).rstrip() + " */")
            n_changed += 1
        i = j
    return out, n_changed


def main():
    check = "--check" in sys.argv
    files = subprocess.run(["git", "ls-files", "*.c", "*.h", "*.cu", "*.cuh", "*.cpp"], capture_output=True,
                           text=True, check=True).stdout.split()
    fail = 0
    for f in files:
        if SKIP.match(f):
            continue
        note = f.startswith(NOTE_DIRS)
        lines = open(f, encoding="utf-8").read().split("\n")
        new, n = s_convert(lines)
        if not n:
            continue
        if check:
            print(f"style{' (note)' if note else ''}: {f}: {n} comments in another marker (tools/comment_style.py)")
            fail |= not note
        elif not note:
            open(f, "w", encoding="utf-8").write("\n".join(new))
            print(f, n)
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
