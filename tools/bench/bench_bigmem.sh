#!/bin/bash
# tools/bench/bench_bigmem.sh - a MoE file larger than the memory it may use
# (issue 26): decode tok/s of the same greedy run inside a memory cgroup that
# counts the page cache, for
#   - colibri in-process on the mapped file (--devices inproc, COLI_DISK_AUTO=0),
#   - colibri's disk tier (--devices inproc@ram=RAM, what plain inproc chooses
#     there by itself: experts read from disk
#     into a RAM expert cache, docs/scheduler.md "Tiers"),
#   - two namespace hosts, each in a memory cgroup of its own, the coordinator
#     in one too (tools/hosts/bigmem_hosts.sh, or BIGMEM_HOSTS_CMD: run with
#     MODEL, LIMIT, N, COLI and THREADS in its environment, its lines printed
#     after "two hosts:"), with llama.cpp's rpc-server over the same two hosts
#     when LLAMA_RPC_SERVER (and LLAMA_BENCH) is given,
#   - llama.cpp's llama-bench on the mapped file when LLAMA_BENCH is given, and
#     llama.cpp without its repack copy when LLAMA_NOREPACK names a program
#     like /work/llama-tools/decode_norepack (MODEL N THREADS -> "decode X tok/s"),
# after the disk's large direct reads are measured (what the disk tier's
# reads can reach) and the unconfined in-process rate (the ceiling).
#
#   tools/bench/bench_bigmem.sh MODEL.gguf
#
# BIGMEM_LIMIT (default 1536M) the cgroup's limit, BIGMEM_RAM (default 1G)
# the disk tier's RAM, BIGMEM_N (default 16) tokens generated, THREADS
# (default 2), COLI (default build/bin/coli), BIGMEM_TIMEOUT (default 600 s
# per confined run). Needs root and a memory cgroup
# (v1 or v2): without one it says so and exits 0.
set -uo pipefail
MODEL=${1:?usage: $0 MODEL.gguf}
COLI=${COLI:-build/bin/coli}
LIMIT=${BIGMEM_LIMIT:-1536M}
RAM=${BIGMEM_RAM:-1G}
N=${BIGMEM_N:-16}
THREADS=${THREADS:-2}
PROMPT="Once upon a time"

if [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ] && [ -w /sys/fs/cgroup/memory ]; then
  CGV=1 CGROOT=/sys/fs/cgroup/memory
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && [ -w /sys/fs/cgroup ]; then
  CGV=2 CGROOT=/sys/fs/cgroup
  echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
else
  echo "bench-bigmem: no writable memory cgroup (v1 or v2) on this machine: skipped"
  exit 0
fi
bytes() { numfmt --from=iec "$1"; }
echo "bench-bigmem: $(basename "$MODEL") ($(du -h "$MODEL" | cut -f1)), memory cgroup v$CGV limited to $LIMIT" \
  "(page cache counted), $N tokens, $THREADS threads"

# confined NAME CMD...: run CMD in a fresh cgroup of LIMIT with the model out of
# the page cache; its stdout+stderr in $OUT_DIR/NAME.log, the peak in NAME.peak
OUT_DIR=$(mktemp -d)
trap 'rm -rf "$OUT_DIR"' EXIT
confined() {
  local name=$1 cg="$CGROOT/coli-bigmem-$$-$1"
  shift
  mkdir "$cg" || return 1
  if [ $CGV = 1 ]; then bytes "$LIMIT" >"$cg/memory.limit_in_bytes"; else bytes "$LIMIT" >"$cg/memory.max"; fi
  dd if="$MODEL" iflag=nocache count=0 status=none
  # a run stalled at the limit (anonymous memory, no swap) is stopped after BIGMEM_TIMEOUT seconds
  (echo $BASHPID >"$cg/cgroup.procs" && exec timeout "${BIGMEM_TIMEOUT:-600}" "$@") >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  if [ $CGV = 1 ]; then cat "$cg/memory.max_usage_in_bytes"; else cat "$cg/memory.peak" 2>/dev/null || echo 0; fi >"$OUT_DIR/$name.peak"
  rmdir "$cg"
  return $rc
}
decode_rate() { sed -n 's/.*generated [0-9]* tokens (\([0-9.]*\) tok\/s).*/\1/p' "$1" | tail -1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

# 1. the disk: 2 GiB of large direct reads, one stream and four (the tier's readers)
one=$(dd if="$MODEL" of=/dev/null bs=4M count=512 iflag=direct 2>&1 | awk '/copied/ {print $(NF-1), $NF}')
t0=$(date +%s.%N)
for k in 0 1 2 3; do dd if="$MODEL" of=/dev/null bs=4M count=128 skip=$((600 + k * 128)) iflag=direct status=none & done
wait
four=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.0f", 2048 / (t1 - t0) }')
echo "  disk, direct reads of 4 MiB: one stream $one, four streams $four MiB/s"

# 2. unconfined, the file in the page cache: the ceiling
cat "$MODEL" >/dev/null
"$COLI" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "$THREADS" --devices inproc >/dev/null \
  2>"$OUT_DIR/free.log"
echo "  unconfined, in-process (mapped):      $(decode_rate "$OUT_DIR/free.log") tok/s"

# 3. confined: the mapped file, then the disk tier
confined mapped env COLI_DISK_AUTO=0 "$COLI" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "$THREADS" --devices inproc
echo "  $LIMIT cgroup, in-process (mapped):   $(decode_rate "$OUT_DIR/mapped.log") tok/s" \
  " peak $(mib "$(cat "$OUT_DIR/mapped.peak")")"
confined disk "$COLI" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "$THREADS" \
  --devices "inproc@ram=$RAM" --stats-json "$OUT_DIR/disk.json"
rate=$(decode_rate "$OUT_DIR/disk.log")
echo "  $LIMIT cgroup, disk tier (RAM $RAM): $rate tok/s  peak $(mib "$(cat "$OUT_DIR/disk.peak")")"
grep "disk tier:" "$OUT_DIR/disk.log" | sed 's/^ */    /'
# what the reads allow: the four-stream disk rate (measured before the runs
# and again now: other work on the disk moves it) over the bytes a decoded
# token needed (its misses and the guesses it then took; the prompt's reads and
# guesses nobody took not counted), and where the decode's layer time went
after=$(t0=$(date +%s.%N)
  for k in 0 1 2 3; do dd if="$MODEL" of=/dev/null bs=4M count=64 skip=$((300 + k * 64)) iflag=direct status=none & done
  wait
  awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.0f", 1024 / (t1 - t0) }')
python3 - "$OUT_DIR/disk.json" "$four" "$after" "$rate" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t, n_moe = s.get("disk_tier", {}), sum(1 for r in s.get("expert_rows", []) if any(r))
d = t.get("decode", {})
toks = d.get("layer_calls", 0) / max(n_moe, 1)
if toks and d.get("needed_bytes"):
    need = d["needed_bytes"] / toks / 1048576
    rate = float(sys.argv[4])
    allow = [float(sys.argv[2]) / need, float(sys.argv[3]) / need]
    print(f"    decode: {need:.0f} MiB of needed reads per token; the disk before/after ({sys.argv[2]}/{sys.argv[3]} MiB/s)"
          f" allows {allow[0]:.2f}/{allow[1]:.2f} tok/s: reached {rate / allow[0]:.0%}/{rate / allow[1]:.0%}")
    print(f"    decode per token: layers {d['layer_ms'] / toks:.0f} ms, of it waiting for reads {d['read_wait_ms'] / toks:.0f} ms,"
          f" experts' compute {d['compute_ms'] / toks:.0f} ms; {t['disk_bytes'] / 1048576:.0f} MiB read in all,"
          f" {t['cancelled_reads']} wrong guesses dropped unread, disk busy {t['disk_busy_ms'] / 1000:.1f} s")
PY

# 4. two hosts: by default tools/hosts/bigmem_hosts.sh (two network namespaces,
# each in a memory cgroup of its own, the coordinator confined too; llama.cpp's
# rpc-server over the same two when LLAMA_RPC_SERVER is given); it says in one
# line why not when root, ip netns or the cgroup is missing. BIGMEM_HOSTS_CMD=none skips it.
HOSTS_CMD=${BIGMEM_HOSTS_CMD:-$(dirname "$0")/../hosts/bigmem_hosts.sh}
if [ "$HOSTS_CMD" != none ]; then
  MODEL=$MODEL LIMIT=$LIMIT N=$N COLI=$COLI THREADS=$THREADS $HOSTS_CMD | sed 's/^/  two hosts: /'
else
  echo "  two hosts: not run (BIGMEM_HOSTS_CMD=none)"
fi

# 5. llama.cpp, mapped (its default would copy the Q4_0 weights out of the mapping)
if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then
  confined llama "$LLAMA_BENCH" -m "$MODEL" -p 0 -n "$N" -r 1 -t "$THREADS" -lm mmap
  rate=$(awk -F'|' '/ tg[0-9]+ / {split($(NF-1), a, " "); print a[1]}' "$OUT_DIR/llama.log")
  echo "  $LIMIT cgroup, llama.cpp (mmap):      ${rate:-no figure (killed for memory, or stopped at the limit)} tok/s" \
    " peak $(mib "$(cat "$OUT_DIR/llama.peak")")"
else
  echo "  llama.cpp: not run (LLAMA_BENCH unset)"
fi
# 6. llama.cpp mapped without the repack copy (use_extra_bufts = false; llama-bench has no switch for it)
if [ -n "${LLAMA_NOREPACK:-}" ] && [ -x "$LLAMA_NOREPACK" ]; then
  confined norepack "$LLAMA_NOREPACK" "$MODEL" "$N" "$THREADS"
  rate=$(sed -n 's/^decode \([0-9.]*\) tok\/s.*/\1/p' "$OUT_DIR/norepack.log")
  echo "  $LIMIT cgroup, llama.cpp (mmap, no repack): ${rate:-no figure (killed for memory, or stopped at the limit)} tok/s" \
    " peak $(mib "$(cat "$OUT_DIR/norepack.peak")")"
else
  echo "  llama.cpp without repack: not run (LLAMA_NOREPACK unset)"
fi
