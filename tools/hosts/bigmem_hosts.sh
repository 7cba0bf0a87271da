#!/bin/bash
# tools/hosts/bigmem_hosts.sh - the two-host row of tools/bench/bench_bigmem.sh
# (its BIGMEM_HOSTS_CMD; issue 26): the big model's experts sharded by budget
# over two "hosts", each a network namespace reached over a veth pair and
# confined to a memory cgroup of its own (which counts the page cache it
# reads), the coordinator confined too; a greedy run of N tokens through them.
# With LLAMA_RPC_SERVER and LLAMA_BENCH, llama.cpp's rpc-server on the same two
# hosts (same cgroups) and llama-bench --rpc from the coordinator's cgroup.
#
#   MODEL=big.gguf N=16 tools/hosts/bigmem_hosts.sh
#
# BIGMEM_HOST_LIMIT (default 2.7G) each host's cgroup, BIGMEM_HOST_BUDGET
# (default 2400M) each host's --devices budget, BIGMEM_COORD_LIMIT (default 1G)
# the coordinator's cgroup, LLAMA_RPC_HOST_LIMIT (default BIGMEM_HOST_LIMIT) each
# host's cgroup for llama.cpp's rpc-server, BIGMEM_HOST_THREADS (default 0: the cores a host may run on) compute threads per
# host, THREADS (default 2) the coordinator's, COLI (default build/bin/coli),
# BIGMEM_TIMEOUT (default 600 s) per run. Needs root, `ip netns` and a
# writable memory cgroup (v1 or v2); without them it prints one line and exits 0.
# Prints its figures, one per line; everything it made is removed on exit.
set -uo pipefail
MODEL=${MODEL:?MODEL=FILE.gguf}
N=${N:-16}
COLI=${COLI:-build/bin/coli}
WORKER=$(dirname "$COLI")/coli-worker
HOST_LIMIT=${BIGMEM_HOST_LIMIT:-2.7G}
BUDGET=${BIGMEM_HOST_BUDGET:-2400M}
COORD_LIMIT=${BIGMEM_COORD_LIMIT:-1G}
HOST_THREADS=${BIGMEM_HOST_THREADS:-0}
THREADS=${THREADS:-2}
TIMEOUT=${BIGMEM_TIMEOUT:-600}
PROMPT="Once upon a time"

if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "not run (needs root and ip netns)"
  exit 0
fi
if [ -w /sys/fs/cgroup/memory ] && [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  CGV=1 CGROOT=/sys/fs/cgroup/memory
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && [ -w /sys/fs/cgroup ]; then
  CGV=2 CGROOT=/sys/fs/cgroup
else
  echo "not run (no writable memory cgroup)"
  exit 0
fi
TAG=cbh$$
TMP=$(mktemp -d /tmp/coli-bigmem-hosts-XXXXXX)
PIDS=()
# stop PIDS (ours, by pid) and wait until they are gone (their cgroups empty)
stop_all() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done
  PIDS=()
}
cleanup() {
  stop_all
  for i in 0 1; do
    ip link del "${TAG}o$i" 2>/dev/null
    ip netns del "$TAG-$i" 2>/dev/null
  done
  for c in host0 host1 coord; do rmdir "$CGROOT/$TAG-$c" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# cg NAME LIMIT: a fresh cgroup; peak NAME: its peak usage in MiB
cg() {
  local d="$CGROOT/$TAG-$1" b
  b=$(numfmt --from=iec "$2") || return 1
  mkdir -p "$d" || return 1
  if [ $CGV = 1 ]; then echo "$b" >"$d/memory.limit_in_bytes"; else echo "$b" >"$d/memory.max"; fi
}
peak() {
  local d="$CGROOT/$TAG-$1" v
  if [ $CGV = 1 ]; then v=$(cat "$d/memory.max_usage_in_bytes"); else v=$(cat "$d/memory.peak" 2>/dev/null || echo 0); fi
  awk -v b="$v" 'BEGIN { printf "%.0f MiB", b / 1048576 }'
}
cg_reset() { # a new peak for the next contender
  local d="$CGROOT/$TAG-$1"
  [ $CGV = 1 ] && echo 0 >"$d/memory.max_usage_in_bytes" 2>/dev/null
  [ $CGV = 2 ] && echo 0 >"$d/memory.peak" 2>/dev/null
  true
}
# in_cg NAME CMD...: this (sub)shell joins cgroup NAME and becomes CMD; always
# called in a subshell of its own: `in_cg ... &` (then $! is CMD's pid) or `(in_cg ...)`
in_cg() {
  local c=$1
  shift
  echo $BASHPID >"$CGROOT/$TAG-$c/cgroup.procs" && exec "$@"
  exit 1
}

# the two hosts: 10.212.(200+i).2 in namespace TAG-i, our end .1
for i in 0 1; do
  k=$((200 + i))
  if ip -o -4 addr show | grep -q " 10\.212\.$k\."; then
    echo "not run (10.212.$k.0/24 is in use here)"
    exit 0
  fi
  ip netns add "$TAG-$i" && ip link add "${TAG}o$i" type veth peer name "${TAG}w$i" &&
    ip link set "${TAG}w$i" netns "$TAG-$i" && ip addr add "10.212.$k.1/24" dev "${TAG}o$i" &&
    ip link set "${TAG}o$i" up && ip -n "$TAG-$i" addr add "10.212.$k.2/24" dev "${TAG}w$i" &&
    ip -n "$TAG-$i" link set "${TAG}w$i" up && ip -n "$TAG-$i" link set lo up || {
    echo "not run (could not make network namespace $TAG-$i)"
    exit 0
  }
  cg "host$i" "$HOST_LIMIT" || exit 1
done
cg coord "$COORD_LIMIT" || exit 1
NET() { echo "--net=/var/run/netns/$TAG-$1"; } # nsenter, not ip netns exec: that mounts a /sys without the cgroup files

# --- colibri: coli-worker --listen on each host, coli run in the coordinator's cgroup
export COLI_KEYS=$TMP/keys
"$COLI" keygen "$COLI_KEYS" >/dev/null
dd if="$MODEL" iflag=nocache count=0 status=none # out of the page cache: each host reads its own experts
DEVICES=
for i in 0 1; do
  in_cg "host$i" nsenter "$(NET $i)" "$WORKER" --listen "tcp://10.212.$((200 + i)).2:7411" --keys "$COLI_KEYS" \
    --plugin cpu --threads "$HOST_THREADS" -m "$MODEL" >"$TMP/w$i.log" 2>&1 &
  PIDS+=($!)
  disown # killed by stop_all: no job notice
  DEVICES+="${DEVICES:+,}remote:tcp://10.212.$((200 + i)).2:7411=$BUDGET"
done
for t in $(seq 50); do # both listening (each prints its endpoint) before the coordinator connects
  [ -s "$TMP/w0.log" ] && [ -s "$TMP/w1.log" ] && break
  sleep 0.2
done
# the first run's decode overlaps the hosts' reading their experts from disk (a Place's prefault
# runs after its ack); the next three coordinators find them resident, as a service would: their
# median is the figure
coli_run() {
  (in_cg coord timeout "$TIMEOUT" "$COLI" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "$THREADS" \
    --devices "$DEVICES") >/dev/null 2>"$TMP/coli.log"
  sed -n 's/.*generated [0-9]* tokens (\([0-9.]*\) tok\/s).*/\1/p' "$TMP/coli.log" | tail -1
}
first=$(coli_run)
runs="$(coli_run) $(coli_run) $(coli_run)"
rate=$(echo "$runs" | tr ' ' '\n' | grep . | sort -g | sed -n 2p)
echo "colibri, 2 namespace hosts (cgroups $HOST_LIMIT each, budget $BUDGET; coordinator cgroup $COORD_LIMIT):" \
  "${rate:-no figure} tok/s (median of $runs; the first run, hosts still reading their experts: ${first:-no figure})" \
  " peaks host0 $(peak host0), host1 $(peak host1), coordinator $(peak coord)"
grep -E "expert moves|worker [01] |fallback" "$TMP/coli.log" | sed 's/^ */  /'
[ -n "$rate" ] || tail -3 "$TMP/coli.log" | sed 's/^/  /'
stop_all

# --- llama.cpp: rpc-server on each host, llama-bench --rpc in the coordinator's cgroup
if [ -z "${LLAMA_RPC_SERVER:-}" ] || [ ! -x "${LLAMA_RPC_SERVER:-}" ] || [ ! -x "${LLAMA_BENCH:-}" ]; then
  echo "llama.cpp rpc-server: not run (LLAMA_RPC_SERVER and LLAMA_BENCH unset)"
  exit 0
fi
RPC_LIMIT=${LLAMA_RPC_HOST_LIMIT:-$HOST_LIMIT} # llama.cpp's hosts hold their weights as anonymous memory
RPC_THREADS=$HOST_THREADS # rpc-server has no "all cores" value: 0 is ours
[ "$RPC_THREADS" = 0 ] && RPC_THREADS=$(nproc)
for i in 0 1; do cg "host$i" "$RPC_LIMIT" || exit 1; done
for c in host0 host1 coord; do cg_reset $c; done
dd if="$MODEL" iflag=nocache count=0 status=none
RPC=
for i in 0 1; do
  in_cg "host$i" nsenter "$(NET $i)" "$LLAMA_RPC_SERVER" -H "10.212.$((200 + i)).2" -p 50052 \
    -t "$RPC_THREADS" >"$TMP/rpc$i.log" 2>&1 &
  PIDS+=($!)
  disown
  RPC+="${RPC:+,}10.212.$((200 + i)).2:50052"
done
sleep 2
(in_cg coord timeout "$TIMEOUT" "$LLAMA_BENCH" -m "$MODEL" -p 0 -n "$N" -r 1 -t "$THREADS" -ngl 99 --rpc "$RPC" \
  ) >"$TMP/llama.log" 2>&1
rate=$(awk -F'|' '/ tg[0-9]+ / {split($(NF-1), a, " "); print a[1]}' "$TMP/llama.log")
echo "llama.cpp rpc-server, same 2 hosts (cgroups $RPC_LIMIT each; llama-bench -ngl 99 --rpc from the coordinator's):" \
  "${rate:-no figure} tok/s  peaks host0 $(peak host0), host1 $(peak host1), coordinator $(peak coord)"
if [ -z "$rate" ]; then
  for i in 0 1; do # a host killed for memory: the cgroup's OOM count (v1) or its events (v2)
    if [ $CGV = 1 ]; then o=$(sed -n 's/^oom_kill //p' "$CGROOT/$TAG-host$i/memory.oom_control"); else
      o=$(sed -n 's/^oom_kill //p' "$CGROOT/$TAG-host$i/memory.events"); fi
    [ "${o:-0}" -gt 0 ] && echo "  host$i: rpc-server killed for memory at its $RPC_LIMIT limit"
  done
  grep -iE "error|failed" "$TMP/llama.log" | tail -2 | sed 's/^/  /'
fi
exit 0
