#!/usr/bin/env bash
# netns_bench.sh - a distributed `coli bench` over two worker "hosts", each a
# Linux network namespace of its own reached over a veth pair (10.210.K.1 here,
# 10.210.K.2 there), with a slow link in front of each worker: slowlink.py runs
# inside the host's namespace, listens on 10.210.K.2:7412 and forwards to the
# worker on 10.210.K.2:7411 with DELAY_MS added each way. Prints coli bench's
# report (per worker: address, dispatch p50/p99, rows, bytes per token each
# way, fallbacks) and leaves its JSON in OUT.
#
#   tools/slowlink/netns_bench.sh MODEL [DELAY_MS=5] [OUT=build/netns-bench.json] [-- bench flags]
#
# Needs root and iproute2 (`ip netns`); everything it makes (namespaces, veth
# pairs, key directory, processes) is removed on exit. COLI_BUILD: the build
# directory (default build).
set -euo pipefail
model=${1:?usage: netns_bench.sh MODEL [DELAY_MS] [OUT] [-- bench flags]}
delay=${2:-5}
out=${3:-build/netns-bench.json}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
build=${COLI_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
tag=cnb$$
keys=$(mktemp -d /tmp/coli-netns-bench-XXXXXX)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in 0 1; do
    ip link del "${tag}o$i" 2>/dev/null || true
    ip netns del "${tag}-$i" 2>/dev/null || true
  done
  rm -rf "$keys"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "netns_bench.sh: needs root (ip netns add)" >&2; exit 2; }
"$build/bin/coli" keygen "$keys" >/dev/null
devices=
for i in 0 1; do
  k=$((200 + i))
  ns="${tag}-$i"
  ip netns add "$ns"
  ip link add "${tag}o$i" type veth peer name "${tag}w$i"
  ip link set "${tag}w$i" netns "$ns"
  ip addr add "10.210.$k.1/24" dev "${tag}o$i"
  ip link set "${tag}o$i" up
  ip -n "$ns" addr add "10.210.$k.2/24" dev "${tag}w$i"
  ip -n "$ns" link set "${tag}w$i" up
  ip -n "$ns" link set lo up
  ip netns exec "$ns" "$build/bin/coli-worker" --listen "tcp://10.210.$k.2:7411" --keys "$keys" \
    --plugin cpu --threads 1 -m "$model" >"$keys/worker$i.log" 2>&1 &
  pids+=($!)
  ip netns exec "$ns" /usr/bin/python3 "$here/slowlink.py" --listen "10.210.$k.2:7412" \
    --to "10.210.$k.2:7411" --delay-ms "$delay" >"$keys/proxy$i.log" 2>&1 &
  pids+=($!)
  devices+="${devices:+,}remote:tcp://10.210.$k.2:7412"
done
for i in 0 1; do # both listening before the coordinator connects
  for _ in $(seq 100); do
    grep -q "listening on" "$keys/worker$i.log" && grep -q "listening on" "$keys/proxy$i.log" && break
    sleep 0.1
  done
done
echo "+ coli bench --devices $devices (slow link: +$delay ms each way)"
COLI_KEYS=$keys "$build/bin/coli" bench -m "$model" --devices "$devices" --json "$out" "$@"
