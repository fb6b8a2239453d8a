#!/usr/bin/env bash
# Capture-analysis benchmark: `pathdoc analyze` against tshark's full TCP analysis
# (`tshark -r FILE -q -z conv,tcp -o tcp.analyze_sequence_numbers:TRUE`: every packet dissected,
# the TCP sequence analysis on, per-conversation table at the end) on a capture made in the lab,
# side by side in one run, with `cat FILE > /dev/null` as the read-rate anchor.
#
#   scripts/bench-analyze.sh [SIZE_MIB=1024] [SNAPLEN=0]
#   SKIP_TSHARK=1 scripts/bench-analyze.sh 4096     # pathdoc and cat only (tshark on 4 GiB takes long)
#
# The capture: a NAT path with 0.5 % loss and 1 ms ± 0.5 ms delay (reordering), iperf3 runs of
# 32 parallel CUBIC streams for 2 s each, alternating directions, recorded on the NAT's WAN side
# until the file reaches SIZE_MIB. Kept in $BENCH_DIR (default /tmp/pathdoc-bench-analyze) and
# reused by later runs. Needs root (the lab), tcpdump, iperf3, tshark, python3, GNU time.
# Run it under the shared lock: flock /tmp/pathdoc-timing.lock scripts/bench-analyze.sh
set -euo pipefail
SIZE_MIB=${1:-1024}
SNAPLEN=${2:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export PATHDOC_LAB_PREFIX=${PATHDOC_LAB_PREFIX:-bench-}
BENCH_DIR=${BENCH_DIR:-/tmp/pathdoc-bench-analyze}
mkdir -p "$BENCH_DIR"
cargo build --release -q -p pathdoc-cli --manifest-path "$ROOT/Cargo.toml"
PATHDOC=$CARGO_TARGET_DIR/release/pathdoc
FILE=$BENCH_DIR/lab-${SIZE_MIB}MiB-s${SNAPLEN}.pcap
LAB=bana

make_capture() {
  cat > "$BENCH_DIR/topology.toml" <<'TOML'
description = "benchmark: NAT, 0.5 % loss, 1 ms ± 0.5 ms delay (reordering)"
[[hop]]
kind = "nat"
[[link]]
[[link]]
delay_ms = 1.0
jitter_ms = 0.5
loss_percent = 0.5
TOML
  "$PATHDOC" lab down "$LAB" >/dev/null 2>&1 || true
  "$PATHDOC" lab up --topology "$BENCH_DIR/topology.toml" --name "$LAB" >/dev/null
  trap '"$PATHDOC" lab down "$LAB" >/dev/null 2>&1 || true' EXIT
  local client="${PATHDOC_LAB_PREFIX}${LAB}-client" server="${PATHDOC_LAB_PREFIX}${LAB}-server"
  ip netns exec "$server" iperf3 -s -p 25020 -D
  "$PATHDOC" lab capture "$LAB" hop1:wan0 -w "$FILE.part" --snaplen "$SNAPLEN" --filter tcp 2>/dev/null &
  local cap=$!
  sleep 2
  local want=$((SIZE_MIB * 1024 * 1024)) runs=0 reverse=""
  while [ "$(stat -c %s "$FILE.part" 2>/dev/null || echo 0)" -lt "$want" ]; do
    ip netns exec "$client" iperf3 -c 203.0.113.10 -p 25020 -t 2 -P 32 -C cubic $reverse >/dev/null 2>&1 || sleep 1
    runs=$((runs + 1))
    if [ -z "$reverse" ]; then reverse="-R"; else reverse=""; fi
  done
  kill -INT "$cap"
  wait "$cap" || true
  "$PATHDOC" lab down "$LAB" >/dev/null
  trap - EXIT
  mv "$FILE.part" "$FILE"
  echo "made $FILE with $runs iperf3 runs"
}

[ -f "$FILE" ] || make_capture

# Elapsed seconds and peak RSS (KiB) of a command, its output discarded (GNU time: package `time`).
measure() {
  local out
  out=$(mktemp)
  /usr/bin/time -f "%e %M" -o "$out" "$@" >/dev/null 2>&1 || true
  tail -1 "$out"
  rm -f "$out"
}

bytes=$(stat -c %s "$FILE")
cat "$FILE" > /dev/null   # warm the page cache: every tool reads from memory
# (exit 1 when the capture has findings: not an error here)
packets=$({ "$PATHDOC" analyze --json "$FILE" || true; } | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["data"]["analyze"]["captures"][0]["totals"]["packets"], d["data"]["analyze"]["captures"][0]["totals"]["connections"])')
read -r npk nconn <<<"$packets"
echo "capture: $FILE, $((bytes / 1048576)) MiB, $npk packets, $nconn TCP connections; $(nproc) CPUs, $(tshark --version | head -1)"
printf '%-34s %9s %12s %10s %13s\n' tool seconds "packets/s" "MiB/s" "peak RSS MiB"
row() { # name secs rss_kib
  python3 -c "
import sys; n, s, r = sys.argv[1], max(float(sys.argv[2]), 0.01), int(sys.argv[3]); p, b = $npk, $bytes
print(f'{n:<34} {s:9.2f} {p/s:12.0f} {b/s/1048576:10.0f} {r/1024:13.1f}')" "$1" "$2" "$3"
}
read -r cs cr <<<"$(measure cat "$FILE")"
row "cat FILE > /dev/null" "$cs" "$cr"
read -r ps pr <<<"$(measure "$PATHDOC" analyze "$FILE")"
row "pathdoc analyze FILE" "$ps" "$pr"
read -r js jr <<<"$(measure "$PATHDOC" analyze --json "$FILE")"
row "pathdoc analyze --json FILE" "$js" "$jr"
read -r as ar <<<"$(measure "$PATHDOC" analyze --all "$FILE")"
row "pathdoc analyze --all FILE" "$as" "$ar"
read -r fs fr <<<"$(measure "$PATHDOC" analyze --flags "$FILE")"
row "pathdoc analyze --flags FILE" "$fs" "$fr"
if [ -z "${SKIP_TSHARK:-}" ]; then
  read -r ts tr <<<"$(measure tshark -r "$FILE" -q -z conv,tcp -o tcp.analyze_sequence_numbers:TRUE)"
  row "tshark -q -z conv,tcp (seq analysis)" "$ts" "$tr"
  # What --flags prints, from tshark: one row per packet with its stream and analysis flags.
  read -r tfs tfr <<<"$(measure tshark -r "$FILE" -Y tcp -T fields -e frame.number -e tcp.stream -e tcp.analysis.flags)"
  row "tshark -T fields (per-packet flags)" "$tfs" "$tfr"
  python3 -c "print(f'pathdoc/tshark packets/s: {$ts/$ps:.1f}x (--all {$ts/$as:.1f}x); --flags/tshark -T fields: {$tfs/$fs:.1f}x; pathdoc time / cat time: {$ps/max($cs, 0.01):.1f}x')"
else
  python3 -c "print(f'pathdoc time / cat time: {$ps/max($cs, 0.01):.1f}x')"
fi
