#!/bin/bash
# tools/bench/vs_llama_decode.sh - 64-token prefill and 32-token decode side
# by side with llama.cpp's llama-bench (issue 23's speed target), interleaved
# round by round, medians of the rounds and the ratio coli / llama.cpp.
#
#   LLAMA_BENCH=/path/to/llama-bench tools/bench/vs_llama_decode.sh [ROUNDS] MODEL.gguf...
#
# Each round runs, for every model in turn, `llama-bench -t T -p 64 -n 32
# -r R` and `coli bench -t T --devices inproc -p 64 -n 32 -r R` (R = REPS,
# default 3). THREADS
# (default 2), COLI (default build/bin/coli). vs_llama.sh does 64 and 512
# prefill alone.
set -euo pipefail
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}
COLI=${COLI:-build/bin/coli}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
ROUNDS=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then ROUNDS=$1; shift; fi
[ $# -ge 1 ] || { echo "usage: LLAMA_BENCH=... $0 [ROUNDS] MODEL.gguf..." >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  for m in "$@"; do
    q=$(basename "$m" .gguf)
    "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p 64 -n 32 -r "$REPS" 2>/dev/null |
      awk -F'|' -v q="$q" '/ (pp64|tg32) / {gsub(/ /, "", $7); split($8, a, " "); print "llama.cpp", q, $7, a[1]}' >>"$out"
    "$COLI" bench -m "$m" -t "$THREADS" --devices inproc -p 64 -n 32 -r "$REPS" 2>&1 |
      awk -v q="$q" '/prefill/ {print "colibri", q, "pp" $2, $4} /^ *decode/ {print "colibri", q, "tg32", $4}' >>"$out"
  done
  echo "round $r:"; tail -n $((4 * $#)) "$out" | sed 's/^/  /'
done
echo "medians over $ROUNDS rounds (tok/s):"
sort "$out" | awk '{k = $2 " " $3; v[$1 " " k] = v[$1 " " k] " " $4; keys[k] = 1}
  function median(s,   a, n, i, j, t) { n = split(s, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  END { for (k in keys) { c = median(v["colibri " k]); l = median(v["llama.cpp " k]);
        printf "  %-32s colibri %8.1f  llama.cpp %8.1f  ratio %.2f\n", k, c, l, (l > 0 ? c / l : 0) } }' | sort
