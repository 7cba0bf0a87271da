#!/usr/bin/env bash
# tests/run.sh BIN... - run each Criterion test binary, then print one
# closing line "N passed, N failed, N skipped" over all of them.
# Exit status: 0 only if every binary passed.
set -u
passed=0; failed=0; skipped=0; bad_bins=()
# A failing program's assertion lines are repeated after the closing line: a
# log cut to its tail (CI's) still says which test failed and why.
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT
for bin in "$@"; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  log=$(mktemp)
  # Criterion forks one process per test; --jobs keeps integration tests
  # (which start real worker processes) from fighting over 2 cores.
  "$bin" --jobs="${COLI_TEST_JOBS:-2}" --short-filename >"$log" 2>&1
  rc=$?
  cat "$log"
  line=$(grep -a 'Synthesis:' "$log" | tail -n 1)
  t=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$line"); t=${t:-0}
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line"); p=${p:-0}
  f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line"); f=${f:-0}
  c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$line"); c=${c:-0}
  s=$(grep -ac 'SKIP' "$log"); s=${s:-0}
  passed=$((passed + p)); failed=$((failed + f + c)); skipped=$((skipped + s))
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    bad_bins+=("$name(rc=$rc)")
    [ -z "$line" ] && failed=$((failed + 1))
    # each failed assertion's place and the first line of its message (a message
    # may be a whole /metrics page), then the failed tests
    { echo "--- $name (rc=$rc):"
      awk '/Assertion Failed/ { print; want = 1; next } want { print substr($0, 1, 300); want = 0 }' "$log" | tail -n 40
      grep -a -E '\[(FAIL|ERR)\]' "$log" | tail -n 20; } >>"$failures"
  fi
  rm -f "$log"
done
[ ${#bad_bins[@]} -gt 0 ] && echo "failing test programs: ${bad_bins[*]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ -s "$failures" ] && { echo "what failed (repeated from above):"; cat "$failures"; }
[ $failed -eq 0 ] && [ ${#bad_bins[@]} -eq 0 ]
