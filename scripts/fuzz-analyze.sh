#!/usr/bin/env bash
# Fuzz the capture readers and the analysis with cargo-fuzz: two targets, one after the other.
#
#   scripts/fuzz-analyze.sh [SECONDS_PER_TARGET=600]
#
#   capture  (fuzz/fuzz_targets/capture.rs): any bytes as a plain or gzip capture through the
#            reader, every packet through the analyzer and the diagnosis, and the same bytes as one
#            frame of each link type through the decoder.
#   analyze  (fuzz/fuzz_targets/analyze.rs): every 12 bytes become one valid TCP segment or ICMP
#            too-big of a few IPv4/IPv6 connections, so the analyzer's state machine (retransmission,
#            reordering, dup ACKs, zero windows, keep-alives, idle gaps, RSTs, sequence wrap) and the
#            diagnosis are reached on every input.
#
# Built with debug assertions (arithmetic overflow panics) and without a sanitizer: the crates have
# no unsafe code, and ASan cost ~3× the executions. Runs under `nice -n 19`. Seeds are made on the
# spot (no binaries in the repository): loopback captures of a short TCP exchange as pcap (µs and
# ns), pcapng (editcap), gzip, Linux cooked SLL and SLL2. Needs root (tcpdump), a nightly toolchain,
# `cargo install cargo-fuzz`, editcap (wireshark-common). Prints libFuzzer's executed-input count
# and the corpus size of each target.
set -euo pipefail
SECS=${1:-600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/fuzz"
mkdir -p seeds corpus/capture corpus/analyze

# One short loopback exchange on PORT, recorded by tcpdump with the given extra arguments.
record() {
  local out=$1 port=$2
  shift 2
  tcpdump "$@" -U -Z root -w "$out" -c 40 "tcp port $port" 2>/dev/null &
  local dump=$!
  sleep 1
  python3 - "$port" <<'PY'
import socket, sys, threading
port = int(sys.argv[1])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.recv(16); c.sendall(b"x" * 50000); c.close()
threading.Thread(target=serve).start()
s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"hello")
try:
    while s.recv(65536): pass
except OSError:
    pass
PY
  sleep 1
  kill -INT "$dump" 2>/dev/null || true
  wait "$dump" 2>/dev/null || true
}

if [ -z "$(ls -A seeds)" ]; then
  record seeds/lo.pcap 25099 -i lo
  record seeds/nano.pcap 25098 -i lo --time-stamp-precision nano
  record seeds/sll.pcap 25097 -i any -y LINUX_SLL
  record seeds/sll2.pcap 25096 -i any -y LINUX_SLL2
  editcap -F pcapng seeds/lo.pcap seeds/lo.pcapng
  gzip -c seeds/lo.pcap > seeds/lo.pcap.gz
fi

run() {
  local target=$1
  shift
  nice -n 19 cargo +nightly fuzz run -s none -a "$target" "corpus/$target" "$@" -- \
    -max_total_time="$SECS" -rss_limit_mb=1024 -print_final_stats=1 2>&1 |
    grep -E "stat::number_of_executed_units|DONE|ERROR|panicked|Test unit written" |
    sed "s/^/$target: /" || true
  echo "$target: corpus $(ls "corpus/$target" | wc -l) inputs, $(du -sh "corpus/$target" | cut -f1)"
}
run capture seeds
run analyze
