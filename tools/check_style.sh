#!/usr/bin/env bash
# tools/check_style.sh - the house limits that a reviewer should not have to count by hand.
#  - no source file past 1500 lines (800 is the smell line: listed, not fatal)
#  - no exit()/abort() outside a main file (_exit after fork in a child is allowed)
#  - vendor #ifdefs (__HIP / __CUDA) only in plugins/gpu/gpu_compat.h
#  - every file in the .clang-format layout; headers included by their path from the root
#  - every file-local (static) function named s_* (tools/check_statics.py)
#  - one comment marker: /* */ prose, // ---- section banners (tools/comment_style.py --check)
#  - no function body past 80 lines (a body runs from a column-0 line ending in
#    "{" to the next column-0 "}", the layout every file here uses)
# Prints one line per finding; exit 1 on a hard failure.
set -u
cd "$(dirname "$0")/.."
fail=0
srcs=$(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
for f in $srcs; do
  n=$(wc -l <"$f")
  if [ "$n" -gt 1500 ]; then echo "style: $f: $n lines > 1500"; fail=1
  elif [ "$n" -gt 800 ]; then echo "style (note): $f: $n lines > 800"; fi
done
# exit()/abort() belong to main(): libraries report errors upward.
hits=$(grep -nE '\b(exit|abort)\s*\(' $(git ls-files 'core/*.c' 'coordinator/*.c' 'plugins/*.c' 'plugins/*.cu') 2>/dev/null \
       | grep -v '^\s*//' | grep -vE ':\s*(/\*|\*)' )
if [ -n "$hits" ]; then echo "style: exit/abort outside main:"; echo "$hits"; fail=1; fi
vendor=$(grep -lE '__HIP|__HIPCC__|__CUDACC__|__CUDA_ARCH__' $srcs 2>/dev/null | grep -v '^plugins/gpu/gpu_compat.h$')
if [ -n "$vendor" ]; then echo "style: vendor macros outside plugins/gpu/gpu_compat.h: $vendor"; fail=1; fi
long=$(awk -v LIMIT=80 '
  FNR == 1 { start = 0 }
  /^[A-Za-z_][^;=]*\)[ \t]*\{[ \t]*$/ { start = FNR; name = $0; next }
  /^\{[ \t]*$/ { start = FNR; name = prev; next }
  /^\}/ { if (start) { len = FNR - start - 1
           if (len > LIMIT) printf "style: %s:%d: function body of %d lines > %d: %s\n", FILENAME, start, len, LIMIT, substr(name, 1, 60)
           start = 0 } }
  { prev = $0 }' $(git ls-files '*.c' '*.cu' '*.cuh'))
if [ -n "$long" ]; then echo "$long"; fail=1; fi
# One layout: clang-format (.clang-format) leaves every file as it is. Exempt:
# the generated Unicode tables and the synthetic XRT headers (they mirror XRT's).
fmt_files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' | grep -v -E '^plugins/xdna/xrt_synth/include/|^core/tokenizer/unicode_tables.c$')
if command -v clang-format >/dev/null 2>&1; then
  bad=$(clang-format --dry-run --Werror $fmt_files 2>&1 | grep -oE '^[^:]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u)
  if [ -n "$bad" ]; then echo "style: not in the .clang-format layout (clang-format -i FILE):" $bad; fail=1; fi
else
  echo "style: clang-format is missing (make deps installs it)"; fail=1
fi
# Every header by its path from the root; only the public colibri.h (-Iinclude,
# as a program using the library includes it) is named bare.
bare=$(git grep -nE '^\s*#\s*include\s+"[^"/]+"' -- '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' | grep -v '"colibri.h"')
if [ -n "$bare" ]; then echo "style: include headers by their path from the root:"; echo "$bare"; fail=1; fi
# File-local functions carry the s_ prefix (czmq's rule): the call site tells a private helper.
python3 tools/check_statics.py || fail=1
# One comment marker (docs/architecture.md): tools/comment_style.py converts the others.
python3 tools/comment_style.py --check || fail=1
[ $fail -eq 0 ] && echo "style: ok"
exit $fail
