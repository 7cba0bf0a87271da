#!/usr/bin/env bash
# bench_heat.sh - static (byte-balanced) vs heat placement vs heat + live
# expert cache + prefetch, on a fast worker whose budget holds a fraction of
# the experts, and a slow CPU tier.
#
#   tools/bench_heat.sh [MODEL] [N_PREDICT]
#
# The "fast" worker is cpu:0 with 2 compute threads and a byte budget of 25 %
# or 50 % of all experts; the slow tier is cpu:1 with 1 thread and no budget
# (--devices cpu:1@2=B,cpu:1@1). The heat file is learned from the first half
# of tests/fixtures/tiny-moe-4e2r-valid.txt and the runs are measured on the
# second half (placement learned on one text, measured on another). For each
# configuration: the rows each worker computed (from --stats-json), the fast
# worker's share of the routed rows (its hit rate: without a live cache every
# other row is a miss served by the slow tier) and generation tok/s.
# Mode "cache": the fast worker is a live expert cache of the same budget
# (cpu:1@2@cache=P%: seeded from the same heat, LFU with decay, next-layer
# prefetch), in front of the slow worker that holds every expert; its rows
# are its hits, and the cache's own hit rate / prefetch counters are shown.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/tiny-moe-4e2r-f16.gguf}
N=${2:-32}
COLI=${COLI:-build/bin/coli}
TMP=$(mktemp -d /tmp/coli-bench-heat-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
TEXT=tests/fixtures/tiny-moe-4e2r-valid.txt
HALF=$(( $(wc -c < "$TEXT") / 2 ))
tail -c +"$((HALF + 1))" "$TEXT" | head -c 500 > "$TMP/measure.txt"

# the heat: in-process passes over the learning half, in chunks that fit the 256-token context
for off in 0 700; do
  head -c "$HALF" "$TEXT" | tail -c +"$((off + 1))" | head -c 700 > "$TMP/learn.txt"
  "$COLI" run -m "$MODEL" --inproc -f "$TMP/learn.txt" -n 1 --temp 0 --heat "$TMP/h.heat" > /dev/null 2> "$TMP/learn.err"
done
"$COLI" heat "$TMP/h.heat" --pairs 0 | tail -1

# one expert's bytes and their number, from the plan
total_mib=$("$COLI" plan -m "$MODEL" --devices cpu:1 | sed -n 's/.*experts \([0-9]*\)  \([0-9.]*\) MiB.*/\2/p' | head -1)
n_exp=$("$COLI" plan -m "$MODEL" --devices cpu:1 | sed -n 's/.*experts \([0-9]*\)  .*/\1/p' | head -1)
printf '%-8s %-7s %-30s %10s %10s %9s %8s  %s\n' budget placing devices fast_rows slow_rows fast_hit tok/s cache
for frac in 25 50; do
  budget_k=$(python3 -c "print(int($total_mib * 1024 * $frac / 100) + 1)")
  for mode in static heat cache; do
    dev="cpu:1@2=${budget_k}K,cpu:1@1"
    [ "$mode" = cache ] && dev="cpu:1@2@cache=${frac}%,cpu:1@1"
    flag=(--no-heat)
    # a copy of the heat file, so that the measured runs do not feed it
    [ "$mode" != static ] && cp "$TMP/h.heat" "$TMP/run.heat" && flag=(--heat "$TMP/run.heat")
    "$COLI" run -m "$MODEL" --devices "$dev" -f "$TMP/measure.txt" -n "$N" --temp 0 "${flag[@]}" \
      --stats-json "$TMP/s.json" > /dev/null 2> "$TMP/run.err"
    tps=$(sed -n 's/.*generated [0-9]* tokens (\([0-9.]*\) tok\/s).*/\1/p' "$TMP/run.err")
    python3 - "$TMP/s.json" "$frac%" "$mode" "$dev" "$tps" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows = [w["rows"] for w in s["workers"]]
tot = sum(rows) + s.get("inproc_rows", 0)
c = s["workers"][0].get("cache")
extra = ("hit %.1f%% prom %d evict %d prefetch %d/%d" % (100 * c["hit_rate"], c["promotions"], c["evictions"],
         c["prefetch_used"], c["prefetch_issued"])) if c else ""
print("%-8s %-7s %-30s %10d %10d %8.1f%% %8s  %s" % (sys.argv[2], sys.argv[3], sys.argv[4], rows[0], rows[1],
      100.0 * rows[0] / tot if tot else 0, sys.argv[5], extra))
PY
  done
done
echo "($n_exp experts; figures from whatever machine ran this: on a loaded one tok/s is noise)"
