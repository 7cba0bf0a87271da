#!/bin/bash
# tools/hosts/hosts_vs_inproc.sh - issue 26's ratio, measured side by side:
# rounds of the unconfined in-process decode (one warm-up, then the median of
# three) and bigmem_hosts.sh's two namespace hosts (its median of three), one
# after the other, so that both meet the same machine load; prints each
# round and the per-round ratio, then the median ratio.
#
#   MODEL=big.gguf [N=64] [ROUNDS=7] [THREADS=2] tools/hosts/hosts_vs_inproc.sh
#
# bigmem_hosts.sh's variables (BIGMEM_HOST_THREADS, ...) pass through. Needs
# what bigmem_hosts.sh needs (root, ip netns, a memory cgroup); without them
# it prints its one line per round and no ratio.
set -uo pipefail
MODEL=${MODEL:?MODEL=FILE.gguf}
N=${N:-64}
ROUNDS=${ROUNDS:-7}
THREADS=${THREADS:-2}
COLI=${COLI:-build/bin/coli}
HERE=$(dirname "$0")
rate() { sed -n 's/.*generated [0-9]* tokens (\([0-9.]*\) tok\/s).*/\1/p' | tail -1; }
inproc() { "$COLI" run -m "$MODEL" -p "Once upon a time" --devices inproc -t "$THREADS" -n "$N" --temp 0 --ignore-eos 2>&1 >/dev/null | rate; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
cat "$MODEL" >/dev/null # in the page cache: the in-process ceiling reads no disk
ratios=
for r in $(seq "$ROUNDS"); do
  inproc >/dev/null
  runs="$(inproc) $(inproc) $(inproc)"
  in=$(echo "$runs" | median)
  line=$(MODEL="$MODEL" N="$N" THREADS="$THREADS" COLI="$COLI" "$HERE/bigmem_hosts.sh" 2>&1 | head -1)
  hosts=$(sed -n 's/.*: \([0-9.]*\) tok\/s (median of.*/\1/p' <<<"$line")
  ratio=
  [ -n "$in" ] && [ -n "$hosts" ] && ratio=$(awk -v a="$hosts" -v b="$in" 'BEGIN { printf "%.2f", a / b }')
  ratios+=" $ratio"
  echo "round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): in-process ${in:-none} ($runs), two hosts ${hosts:-none}, ratio ${ratio:-none}"
  [ -n "$hosts" ] || echo "  $line"
done
m=$(echo "$ratios" | median)
echo "median ratio two hosts / in-process over $ROUNDS rounds: ${m:-none}"
