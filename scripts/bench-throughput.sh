#!/usr/bin/env bash
# Throughput benchmark: pathdoc speed vs iperf3 on loopback, run alternately so both see the
# same machine state. Prints each pair and the ratio pathdoc/iperf3 (goodput, receiver side).
#
#   scripts/bench-throughput.sh [ROUNDS=3] [SECONDS=5]
#   IPERF3_EXTRA=-Z scripts/bench-throughput.sh    # compare with iperf3's zero-copy mode too
#
# Needs iperf3 and python3. Builds pathdoc in release mode. Loopback only.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -q -p pathdoc-cli --manifest-path "$ROOT/Cargo.toml"
PATHDOC=$CARGO_TARGET_DIR/release/pathdoc
PD_PORT=17301
IP_PORT=17302
"$PATHDOC" server --listen 127.0.0.1:$PD_PORT --max-test-secs 60 2>/dev/null &
PD_PID=$!
iperf3 -s -p $IP_PORT >/dev/null 2>&1 &
IP_PID=$!
trap 'kill $PD_PID $IP_PID 2>/dev/null || true' EXIT
sleep 1

iperf_rate() { # streams
  # shellcheck disable=SC2086 # IPERF3_EXTRA is a list of flags
  iperf3 -c 127.0.0.1 -p $IP_PORT -t "$SECS" -P "$1" ${IPERF3_EXTRA:-} -J |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])'
}
pathdoc_rate() { # streams
  "$PATHDOC" speed 127.0.0.1:$PD_PORT --time "${SECS}s" --streams "$1" --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]["throughput"]["runs"][0]["directions"][0]; print(d["goodput_bps"])' || true
}

echo "kernel $(uname -r), $(nproc) CPUs, default cc $(cat /proc/sys/net/ipv4/tcp_congestion_control), $(iperf3 --version | head -1)"
printf '%-8s %-6s %14s %14s %8s\n' streams round "iperf3 Gbit/s" "pathdoc Gbit/s" ratio
for streams in 1 2; do
  for round in $(seq "$ROUNDS"); do
    i=$(iperf_rate "$streams")
    p=$(pathdoc_rate "$streams")
    python3 -c "i,p=float('$i'),float('$p'); print(f'{$streams:<8} {$round:<6} {i/1e9:14.2f} {p/1e9:14.2f} {p/i:8.2f}')"
  done
done
