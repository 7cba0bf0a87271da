#!/bin/bash
# tier_bench.sh MODEL BUDGET [TOKENS] - remote hosts as a memory tier, measured
# (docs/scheduler.md, "Remote hosts as a memory tier"; docs/benchmarks.md).
#
# Two coli-worker "hosts" on loopback, each in a memory cgroup of its own (v1,
# root; without one they run in ours and say so), each given BUDGET of the
# experts. Prints: coli bench over the two hosts and in-process; then a greedy
# run of TOKENS tokens during which host A is SIGKILLed (after 1.5 s) and
# restarted (2.5 s later), with the coordinator's and host B's mapped model
# pages before, during and after, the output compared with --inproc's, and the
# run's summary (expert moves). Keys: a fresh pair in a temporary directory.
set -u
MODEL=${1:?usage: tier_bench.sh MODEL BUDGET [TOKENS]}
BUDGET=${2:?usage: tier_bench.sh MODEL BUDGET [TOKENS]}
TOKENS=${3:-300}
BIN=$(cd "$(dirname "$0")/../../build/bin" && pwd)
TMP=$(mktemp -d /tmp/tier-bench-XXXXXX)
PA=7611 PB=7612
DEVICES="remote:tcp://127.0.0.1:$PA=$BUDGET,remote:tcp://127.0.0.1:$PB=$BUDGET"
export COLI_KEYS=$TMP/keys
"$BIN/coli" keygen "$COLI_KEYS" >/dev/null

host_pid() { pgrep -f "coli-worker --listen tcp://127.0.0.1:$1" | head -1; }
model_rss() { # mapped pages of MODEL in process $1, MiB
    awk -v m="$(basename "$MODEL")" '/^[0-9a-f]+-[0-9a-f]+ /{on=index($0,m)>0} on&&/^Rss:/{s+=$2} END{printf "%.1f", s/1024}' "/proc/$1/smaps"
}
cg_mib() { [ -r "$1/memory.usage_in_bytes" ] && awk '{printf "%.1f", $1/1048576}' "$1/memory.usage_in_bytes" || echo "-"; }
evict() { python3 -c "import os,sys;fd=os.open(sys.argv[1],os.O_RDONLY);os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$MODEL"; }
start_host() { # $1 = port: a worker in cgroup colibench-PORT when memory cgroup v1 is writable
    local cg=/sys/fs/cgroup/memory/colibench-$1
    if mkdir -p "$cg" 2>/dev/null && echo 4G >"$cg/memory.limit_in_bytes" 2>/dev/null; then :; else cg=""; echo "host $1: no memory cgroup (runs in ours)"; fi
    (
        [ -n "$cg" ] && echo $BASHPID >"$cg/cgroup.procs"
        exec setsid "$BIN/coli-worker" --listen "tcp://127.0.0.1:$1" --keys "$COLI_KEYS" --plugin cpu --threads 1 -m "$MODEL" >"$TMP/w$1.log" 2>&1
    ) &
    disown # its SIGKILL is the point, not news
    sleep 0.5
}
cleanup() {
    for p in $PA $PB; do local pid; pid=$(host_pid $p); [ -n "$pid" ] && kill -9 "$pid"; done
    sleep 0.3
    rmdir /sys/fs/cgroup/memory/colibench-$PA /sys/fs/cgroup/memory/colibench-$PB 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

echo "== $(date -u '+%F %T UTC'), $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/coli" plan -m "$MODEL" --devices "$DEVICES" | sed -n 1,6p
evict
start_host $PA
start_host $PB
echo "== coli bench over the two hosts (page cache of the model dropped first)"
"$BIN/coli" bench -m "$MODEL" -t 1 -p 32 -n 64 -r 2 --devices "$DEVICES"
echo "== coli bench in-process"
"$BIN/coli" bench -m "$MODEL" -t 1 -p 32 -n 64 -r 2 --devices inproc | grep -E "prefill|decode|latency p50"
echo "== a host SIGKILLed mid-answer and restarted ($TOKENS tokens, greedy)"
"$BIN/coli" run -m "$MODEL" -t 1 --devices inproc -p "the quick brown fox" -n "$TOKENS" --temp 0 >"$TMP/ref.txt" 2>/dev/null
evict
"$BIN/coli" run -m "$MODEL" -t 1 --devices "$DEVICES" -p "the quick brown fox" -n "$TOKENS" --temp 0 >"$TMP/cut.txt" 2>"$TMP/cut.err" &
sleep 1.5
C=$(pgrep -f "coli run -m $MODEL -t 1 --devices remote" | head -1)
B=$(host_pid $PB)
echo "both up:        coordinator maps $(model_rss "$C") MiB of the model, host B $(model_rss "$B") MiB (cgroup $(cg_mib /sys/fs/cgroup/memory/colibench-$PB) MiB)"
kill -9 "$(host_pid $PA)"
sleep 2.5
echo "host A lost:    coordinator maps $(model_rss "$C") MiB, host B $(model_rss "$B") MiB (cgroup $(cg_mib /sys/fs/cgroup/memory/colibench-$PB) MiB)"
start_host $PA
wait %?"coli run" 2>/dev/null || while kill -0 "$C" 2>/dev/null; do sleep 0.3; done
echo "host A back:    host B maps $(model_rss "$B") MiB (cgroup $(cg_mib /sys/fs/cgroup/memory/colibench-$PB) MiB)"
cmp -s "$TMP/ref.txt" "$TMP/cut.txt" && echo "output: the bytes of --inproc" || echo "output: DIFFERS from --inproc"
grep -E "^coli run|expert moves|worker [01] " "$TMP/cut.err"
