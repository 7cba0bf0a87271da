#!/usr/bin/env python3
"""tools/check_statics.py - every file-local function is named s_<name> (czmq's rule, see
/work/shared/style.md and docs/architecture.md "Style"), so a reader tells at the call site
that a function is private to the file.

Lists each `static` function *definition* whose name lacks the `s_` prefix, in the tracked
C/CUDA sources outside tests/.  Exempt: `static inline` functions in headers (shared helpers
that carry a module prefix instead), the generated core/tokenizer/unicode_tables.c, and the
test files (tests/ keep their Criterion helper names: they are read as test tables, not code).
A name made by a macro from an s_ argument (QT_NAME(s_rows_q8_0)) counts as prefixed.

  tools/check_statics.py          findings, exit 1 on any outside the note folders
  tools/check_statics.py --list   "path name" per finding (for scripted renames)
"""
import re
import subprocess
import sys

EXTS = (".c", ".h", ".cu", ".cuh", ".cpp")
# unicode_tables.c is generated; gpu_emu.h emulates CUDA's own names (__syncthreads) for the
# host tests and prefixes the rest with gpu_emu_.
SKIP_FILES = {"core/tokenizer/unicode_tables.c", "plugins/gpu/gpu_emu.h"}
SKIP_DIRS = ("tests/", "build/")
NOTE_DIRS = ()
# A definition: column-0 `static`, no `;`, `=` or brace before the parameter list, and the
# parameter list followed by `{` (a prototype ends in `;`).
DEF = re.compile(
    r"^static\b((?:[^;{}=()]|__attribute__\s*\(\([^;{}]*?\)\))*?)\b([A-Za-z_]\w*)\s*\(([^;{}]*?)\)\s*\{",
    re.M | re.S,
)


def s_definitions(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    for m in DEF.finditer(text):
        quals, name = m.group(1), m.group(2)
        if path.endswith((".h", ".cuh")) and re.search(r"\binline\b", quals):
            continue
        # a name made by a macro (matmul_qtile.h's QT_NAME(s_rows_q8_0)): its argument is the name
        if name.isupper() and re.match(r"\s*\(\s*s_", text[m.end(2):]):
            continue
        yield text.count("\n", 0, m.start()) + 1, name


def s_files():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout
    for f in out.split():
        if f.endswith(EXTS) and f not in SKIP_FILES and not f.startswith(SKIP_DIRS):
            yield f


def main():
    listing = "--list" in sys.argv
    fail = 0
    for f in s_files():
        for line, name in s_definitions(f):
            if name.startswith("s_"):
                continue
            if listing:
                print(f, name)
                continue
            note = f.startswith(NOTE_DIRS)
            print(f"style{' (note)' if note else ''}: {f}:{line}: file-local function "
                  f"'{name}' lacks the s_ prefix")
            fail |= not note
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
