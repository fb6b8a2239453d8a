#!/usr/bin/env bash
# Fuzz the capture readers and the analysis (fuzz/fuzz_targets/capture.rs) with cargo-fuzz.
#
#   scripts/fuzz-analyze.sh [SECONDS=600]
#
# Seeds are made on the spot (no binaries in the repository): a loopback capture of a short TCP
# exchange as pcap, pcapng (editcap) and gzip. Needs root (tcpdump), a nightly toolchain,
# `cargo install cargo-fuzz`, editcap (wireshark-common). Prints libFuzzer's executed-input count.
set -euo pipefail
SECS=${1:-600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/fuzz"
mkdir -p seeds corpus/capture
if [ -z "$(ls -A seeds)" ]; then
  tcpdump -i lo -U -Z root -w seeds/lo.pcap -c 40 'tcp port 25099' 2>/dev/null &
  dump=$!
  sleep 1
  python3 - <<'PY'
import socket, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 25099)); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.recv(16); c.sendall(b"x" * 50000); c.close()
threading.Thread(target=serve).start()
s = socket.create_connection(("127.0.0.1", 25099)); s.sendall(b"hello")
try:
    while s.recv(65536): pass
except OSError:
    pass
PY
  sleep 1
  kill -INT "$dump" 2>/dev/null || true
  wait "$dump" 2>/dev/null || true
  editcap -F pcapng seeds/lo.pcap seeds/lo.pcapng
  gzip -c seeds/lo.pcap > seeds/lo.pcap.gz
fi
cargo +nightly fuzz run capture corpus/capture seeds -- \
  -max_total_time="$SECS" -rss_limit_mb=1024 -print_final_stats=1 2>&1 |
  grep -E "stat::number_of_executed_units|DONE|ERROR|panicked" || true
