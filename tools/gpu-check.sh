#!/usr/bin/env bash
# tools/gpu-check.sh - what only a machine with an NVIDIA GPU can confirm, in one run.
#
#   tools/gpu-check.sh            (from the repository root; < 8 minutes on one H200)
#
# 1. build with CUDA=1 (BUILD=build-cuda, CUDA_ARCH default "80 90")
# 2. the GPU plugin's test program (kernels vs the cpu plugin for every weight type,
#    decode and prefill shapes; budget, oversized allocation, injected faults, stats) and the
#    host math tests
# 3. logits with the experts on cuda:0 vs on a cpu worker (tiny F32 and F16 models and the
#    bench-sized F16 model): max |difference| must stay under 1e-2 for F32/F16 weights
# 4. a bench-sized model (the bench-mixtral shape: dim 1024, 8 layers, 8 experts top-2,
#    ffn 2816), F16 and Q4_0, written by gen_model: prefill and decode tok/s with the experts
#    on cuda:0 vs on cpu workers, and the GPU worker's resident set
# then one summary. Exit status 0 only if every check passed.
#
# Environment: BUILD (build-cuda), JOBS (nproc), CUDA_ARCH, GPU_CHECK_DIR (scratch files,
# default $BUILD/gpu-check), PROMPT_TOKENS (prefill length, 256), GEN_TOKENS (decode, 48),
# BENCH_DTYPES (weight types of the bench model, "F16 Q4_0"; "" skips the bench).
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-cuda}
JOBS=${JOBS:-$(nproc)}
DIR=${GPU_CHECK_DIR:-$BUILD/gpu-check}
PROMPT_TOKENS=${PROMPT_TOKENS:-256}
GEN_TOKENS=${GEN_TOKENS:-48}
COLI=$BUILD/bin/coli
GEN=$BUILD/bin/gen_model
mkdir -p "$DIR"
T0=$(date +%s)
status=0
declare -A S  # summary fields

say() { printf '[gpu-check %4ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }
fail() { say "FAILED: $*"; status=1; }

# ---- 1. build -------------------------------------------------------------------------------
say "build: make CUDA=1 BUILD=$BUILD -j$JOBS"
if ! make -j"$JOBS" CUDA=1 BUILD="$BUILD" ${CUDA_ARCH:+CUDA_ARCH="$CUDA_ARCH"} GPU_COMPILE=0 all \
     >"$DIR/build.log" 2>&1; then
  tail -n 30 "$DIR/build.log"; fail "build (log: $DIR/build.log)"
  echo "== gpu-check summary ==  build failed"; exit 1
fi
S[build]="ok ($(( $(date +%s) - T0 )) s)"

# ---- 2. plugin tests ------------------------------------------------------------------------
run_tests() {  # BIN -> "passed failed skipped"
  local log="$DIR/$(basename "$1").log"
  COLI_BUILD=$BUILD COLI_GPU_PLUGIN=$BUILD/lib/libcoli-cuda.so timeout 300 "$1" --jobs=1 --verbose=1 >"$log" 2>&1
  local line; line=$(grep -a 'Synthesis:' "$log" | tail -n 1)
  local p f c s
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line"); f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line")
  c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$line"); s=$(grep -ac '\[SKIP\]' "$log")
  echo "${p:-0} $(( ${f:-1} + ${c:-0} )) ${s:-0}"
}
make -s BUILD="$BUILD" fixtures >/dev/null 2>&1 || fail "fixtures"
say "tests: test_gpu_plugin, test_gpu_math, test_gpu_host, test_gpu_emu, test_gpu_fallback"
read -r p1 f1 s1 < <(run_tests "$BUILD/tests/test_gpu_plugin")
read -r p2 f2 s2 < <(run_tests "$BUILD/tests/test_gpu_math")
read -r p3 f3 s3 < <(run_tests "$BUILD/tests/test_gpu_host")
read -r p4 f4 s4 < <(run_tests "$BUILD/tests/test_gpu_emu")
read -r p5 f5 s5 < <(run_tests "$BUILD/tests/test_gpu_fallback")
S[tests]="$((p1 + p2 + p3 + p4 + p5)) passed, $((f1 + f2 + f3 + f4 + f5)) failed, $((s1 + s2 + s3 + s4 + s5)) skipped"
[ $((f1 + f2 + f3 + f4 + f5)) -eq 0 ] || { grep -a -B2 -A8 'FAIL\|CRASH' "$DIR"/test_gpu_*.log | head -n 60; fail "tests"; }
[ "$s1" -eq 0 ] || { grep -a SKIP "$DIR/test_gpu_plugin.log" | head -n 3; fail "plugin tests skipped: no usable device"; }
S[diffs]=$(grep -a '^GPU-DIFF' "$DIR/test_gpu_plugin.log" | sed 's/^GPU-DIFF cuda dtype=//' |
           awk '{printf "%s%s", (NR > 1 ? "\n                 " : ""), $0}')
S[device]=$(grep -a 'device(s)' "$DIR/test_gpu_plugin.log" | head -n 1 | sed 's/.*\] //')

# ---- 3. logits: experts on the GPU vs on a CPU worker ----------------------------------------
# coli logits prints "pos: id=logit ..." (top 20); compare the logits of ids both runs list.
logit_diff() {  # MODEL IDS -> max abs diff (or "error")
  local a="$DIR/logits-gpu.txt" b="$DIR/logits-cpu.txt"
  "$COLI" logits -m "$1" --ids "$2" --top 20 --devices cuda:0 >"$a" 2>"$DIR/logits-gpu.err" || { echo error; return; }
  "$COLI" logits -m "$1" --ids "$2" --top 20 --devices cpu:1 >"$b" 2>"$DIR/logits-cpu.err" || { echo error; return; }
  # a GPU worker that fell back to the CPU path makes the comparison void
  if grep -q 'CPU path' "$DIR/logits-gpu.err"; then echo "void(gpu-worker-failed)"; return; fi
  awk 'FNR == NR { for (i = 2; i <= NF; i++) { split($i, kv, "="); ref[$1, kv[1]] = kv[2] } next }
       { for (i = 2; i <= NF; i++) { split($i, kv, "=");
           if (($1, kv[1]) in ref) { d = kv[2] - ref[$1, kv[1]]; d = d < 0 ? -d : d; if (d > m) m = d; n++ } } }
       END { if (n == 0) print "error"; else printf "%.3g\n", m }' "$b" "$a"
}
say "logits: experts on cuda:0 vs cpu:1"
IDS=$(seq 1 40 | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37) % 300 + 5}')
for m in tiny-llama-moe-f32 tiny-llama-moe-f16; do
  f="$BUILD/fixtures/$m.gguf"
  [ -f "$f" ] || { S[logits_$m]="n/a ($f missing)"; continue; }
  d=$(logit_diff "$f" "$IDS"); S[logits_$m]=$d
  if [[ "$d" = error || "$d" = void* ]] || awk -v d="$d" 'BEGIN { exit !(d >= 1e-2) }'; then
    fail "logits $m: $d (see $DIR/logits-*.err)"; fi
done

# ---- 4. bench -------------------------------------------------------------------------------
bench_model() {  # DTYPE -> path
  local f="$DIR/bench-mixtral-shape-$1.gguf"
  [ -f "$f" ] || "$GEN" --arch llama --dim 1024 --layers 8 --heads 8 --kv-heads 2 --experts 8 --top-k 2 \
    --ffn 2816 --vocab 32000 --ctx 2048 --seed 2004 --dtype "$1" "$f" >"$DIR/gen-$1.log" 2>&1 || return 1
  echo "$f"
}
PROMPT=$(for i in $(seq 1 $((PROMPT_TOKENS / 4))); do printf 'the quick brown fox '; done)
bench_run() {  # MODEL DEVICES TAG -> "prefill_tok_s decode_tok_s"
  local log="$DIR/run-$3.log"
  timeout 150 "$COLI" run -m "$1" --devices "$2" -p "$PROMPT" -n "$GEN_TOKENS" --temp 0 \
    --stats-json "$DIR/stats-$3.json" >"$DIR/run-$3.out" 2>"$log" || { echo "error error"; return; }
  sed -n 's/.*prompt [0-9]* tokens (\([0-9.]*\) tok\/s), generated [0-9]* tokens (\([0-9.]*\) tok\/s).*/\1 \2/p' "$log" | tail -n 1
}
resident() {  # STATS_JSON -> "N experts, B" of the cuda worker
  /usr/bin/env python3 - "$1" <<'EOF' 2>/dev/null || echo "n/a"
import json, sys
s = json.load(open(sys.argv[1]))
for w in s.get("workers", []):
    if str(w.get("device", "")).startswith("cuda"):
        print("%s: %d experts, %.1f MiB, status %s" % (w["device"], w.get("resident_experts", 0),
              w.get("resident_bytes", 0) / 2**20, w.get("status", "?")))
        break
else:
    print("no cuda worker in the stats")
EOF
}
for dt in ${BENCH_DTYPES-F16 Q4_0}; do
  say "bench: bench-mixtral shape $dt"
  model=$(bench_model $dt) || { fail "gen_model $dt (log: $DIR/gen-$dt.log)"; continue; }
  if [ $dt = F16 ]; then
    d=$(logit_diff "$model" "$IDS"); S[logits_bench_f16]=$d
    if [[ "$d" = error || "$d" = void* ]] || awk -v d="$d" 'BEGIN { exit !(d >= 1e-2) }'; then fail "logits bench F16: $d"; fi
  fi
  read -r gp gd < <(bench_run "$model" cuda:0 "gpu-$dt")
  read -r cp cd < <(bench_run "$model" cpu:1 "cpu-$dt")
  S[bench_$dt]="experts on cuda:0: prefill ${gp:-?} tok/s, decode ${gd:-?} tok/s | on cpu:1: prefill ${cp:-?} tok/s, decode ${cd:-?} tok/s"
  S[resident_$dt]=$(resident "$DIR/stats-gpu-$dt.json")
  if cmp -s "$DIR/run-gpu-$dt.out" "$DIR/run-cpu-$dt.out"; then S[same_$dt]="identical text"
  else S[same_$dt]="text differs (greedy; expected only after a near-tie)"; fi
  [ "${gp:-error}" != error ] && [ "${cp:-error}" != error ] || fail "bench $dt (logs: $DIR/run-*-$dt.log)"
done

# ---- summary -------------------------------------------------------------------------------------
cat <<EOF

== gpu-check summary ($(( $(date +%s) - T0 )) s) ==
device:          ${S[device]:-unknown}
build:           ${S[build]}
tests:           ${S[tests]:-n/a}
max |gpu - cpu plugin| per dtype (expert outputs):
                 ${S[diffs]:-n/a}
max |logit diff| experts on GPU vs CPU (limit 1e-2):
                 tiny F32 ${S[logits_tiny-llama-moe-f32]:-n/a}, tiny F16 ${S[logits_tiny-llama-moe-f16]:-n/a}, bench F16 ${S[logits_bench_f16]:-n/a}
bench F16  (${PROMPT_TOKENS}-ish token prompt, $GEN_TOKENS generated):
                 ${S[bench_F16]:-n/a}
                 resident: ${S[resident_F16]:-n/a}; ${S[same_F16]:-}
bench Q4_0:      ${S[bench_Q4_0]:-n/a}
                 resident: ${S[resident_Q4_0]:-n/a}; ${S[same_Q4_0]:-}
result:          $([ $status -eq 0 ] && echo PASS || echo FAIL)
EOF
exit $status
